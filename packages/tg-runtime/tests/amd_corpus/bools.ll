define amdgpu_kernel void @E_bool(ptr addrspace(1) noalias align 16 %d0, ptr addrspace(1) noalias align 16 %d1, ptr addrspace(1) noalias align 16 %d2) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %pa = getelementptr i8, ptr addrspace(1) %d1, i32 %l
  %a = load i8, ptr addrspace(1) %pa
  %ab = trunc i8 %a to i1
  %pb = getelementptr half, ptr addrspace(1) %d2, i32 %l
  %b = load half, ptr addrspace(1) %pb
  %bn = fcmp une half %b, 0xH0000
  %x = xor i1 %ab, %bn
  %o = or i1 %x, %ab
  %bs = sext i16 0 to i32
  %sel = select i1 %o, half %b, half 0xH3C00
  %u = fptoui half %sel to i16
  %u2 = add i16 %u, 3
  %u3 = mul i16 %u2, %u
  %z = zext i1 %o to i8
  %po = getelementptr i8, ptr addrspace(1) %d0, i32 %l
  store i8 %z, ptr addrspace(1) %po
  %po2 = getelementptr i16, ptr addrspace(1) %d2, i32 %l
  store i16 %u3, ptr addrspace(1) %po2
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,32" }
