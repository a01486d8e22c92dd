define amdgpu_kernel void @E_f32(ptr addrspace(1) noalias align 16 %d0, ptr addrspace(1) noalias align 16 %d1, ptr addrspace(1) noalias align 16 %d2) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = shl i32 %g, 6
  %i = add i32 %g2, %l
  %pa = getelementptr float, ptr addrspace(1) %d1, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %d2, i32 %i
  %a = load float, ptr addrspace(1) %pa
  %b = load float, ptr addrspace(1) %pb
  %c = fadd float %a, %b
  %m = fmul float %c, 3.5
  %s = fsub float %m, %a
  %x = call float @llvm.maxnum.f32(float %s, float 0.0)
  %y = call float @llvm.fma.f32(float %x, float %b, float -1.25)
  %t = call float @llvm.trunc.f32(float %y)
  %f = call float @llvm.floor.f32(float %t)
  %z = fcmp olt float %f, %a
  %w = select i1 %z, float %f, float %c
  %ne = fcmp une float %w, %w
  %w2 = select i1 %ne, float 0x7FF8000000000000, float %w
  %q = fneg float %w2
  %po = getelementptr float, ptr addrspace(1) %d0, i32 %i
  store float %q, ptr addrspace(1) %po
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,64" }
