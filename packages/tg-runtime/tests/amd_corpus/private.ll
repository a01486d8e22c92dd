define amdgpu_kernel void @priv(ptr addrspace(1) noalias align 16 %d0, ptr addrspace(1) noalias align 16 %d1, i32 %k) #0 {
entry:
  %arr = alloca [37 x float], align 4, addrspace(5)
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  br label %fill
fill:
  %j = phi i32 [0, %entry], [%jn, %fill]
  %x = add i32 %j, %l
  %p = getelementptr float, ptr addrspace(1) %d1, i32 %x
  %v = load float, ptr addrspace(1) %p
  %q = getelementptr [37 x float], ptr addrspace(5) %arr, i32 0, i32 %j
  store float %v, ptr addrspace(5) %q
  %jn = add i32 %j, 1
  %c = icmp ult i32 %jn, 37
  br i1 %c, label %fill, label %use
use:
  %idx = urem i32 %k, 37
  %r = getelementptr [37 x float], ptr addrspace(5) %arr, i32 0, i32 %idx
  %rv = load float, ptr addrspace(5) %r
  %po = getelementptr float, ptr addrspace(1) %d0, i32 %l
  store float %rv, ptr addrspace(1) %po
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,32" }
