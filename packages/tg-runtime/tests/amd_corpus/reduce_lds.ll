@temp = internal addrspace(3) global [64 x float] undef, align 16
define amdgpu_kernel void @r_lds(ptr addrspace(1) noalias align 16 %d0, ptr addrspace(1) noalias align 16 %d1) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %g, 1024
  br label %loop
loop:
  %j = phi i32 [0, %entry], [%jn, %loop]
  %acc = phi float [0.0, %entry], [%accn, %loop]
  %jj = mul i32 %j, 64
  %o = add i32 %base, %jj
  %o2 = add i32 %o, %l
  %p = getelementptr float, ptr addrspace(1) %d1, i32 %o2
  %v = load float, ptr addrspace(1) %p
  %accn = fadd float %acc, %v
  %jn = add i32 %j, 1
  %c = icmp ult i32 %jn, 16
  br i1 %c, label %loop, label %done
done:
  %lp = getelementptr float, ptr addrspace(3) @temp, i32 %l
  store float %accn, ptr addrspace(3) %lp
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %first = icmp eq i32 %l, 0
  br i1 %first, label %red, label %exit
red:
  %k = phi i32 [0, %done], [%kn, %red]
  %s = phi float [0.0, %done], [%sn, %red]
  %q = getelementptr float, ptr addrspace(3) @temp, i32 %k
  %w = load float, ptr addrspace(3) %q
  %sn = fadd float %s, %w
  %kn = add i32 %k, 1
  %c2 = icmp ult i32 %kn, 64
  br i1 %c2, label %red, label %st
st:
  %po = getelementptr float, ptr addrspace(1) %d0, i32 %g
  store float %sn, ptr addrspace(1) %po
  br label %exit
exit:
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,64" }
