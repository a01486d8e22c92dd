define amdgpu_kernel void @E_int(ptr addrspace(1) noalias align 16 %d0, ptr addrspace(1) noalias align 16 %d1, ptr addrspace(1) noalias align 16 %d2, ptr addrspace(1) noalias align 16 %d3, ptr addrspace(1) noalias align 16 %d4, i32 %n) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 32
  %i = add i32 %g2, %l
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %exit
body:
  %pa = getelementptr i32, ptr addrspace(1) %d1, i32 %i
  %pb = getelementptr i32, ptr addrspace(1) %d2, i32 %i
  %a = load i32, ptr addrspace(1) %pa
  %b = load i32, ptr addrspace(1) %pb
  %q = sdiv i32 %a, %b
  %r = srem i32 %a, %b
  %uq = udiv i32 %a, 7
  %ur = urem i32 %b, 10
  %s1 = add i32 %q, %r
  %s2 = xor i32 %s1, %uq
  %s3 = shl i32 %s2, 3
  %s4 = ashr i32 %s3, 1
  %s5 = lshr i32 %s4, %ur
  %s6 = and i32 %s5, 65535
  %s7 = or i32 %s6, %ur
  %c = icmp ugt i32 %s7, 100
  %s8 = select i1 %c, i32 %s7, i32 -5
  %mx = call i32 @llvm.smax.i32(i32 %s8, i32 %a)
  %mn = call i32 @llvm.umin.i32(i32 %mx, i32 %b)
  %po = getelementptr i32, ptr addrspace(1) %d0, i32 %i
  store i32 %mn, ptr addrspace(1) %po
  %p8 = getelementptr i8, ptr addrspace(1) %d3, i32 %i
  %v8 = load i8, ptr addrspace(1) %p8
  %e8 = sext i8 %v8 to i32
  %a8 = mul i32 %e8, %a
  %t8 = trunc i32 %a8 to i8
  store i8 %t8, ptr addrspace(1) %p8
  %p64 = getelementptr i64, ptr addrspace(1) %d4, i32 %i
  %v64 = load i64, ptr addrspace(1) %p64
  %x64 = sext i32 %a to i64
  %m64 = mul i64 %v64, %x64
  %d64 = sdiv i64 %m64, 1000003
  %sh = lshr i64 %d64, 5
  store i64 %sh, ptr addrspace(1) %p64
  br label %exit
exit:
  ret void
}
declare i32 @llvm.smax.i32(i32, i32)
declare i32 @llvm.umin.i32(i32, i32)
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,32" }
