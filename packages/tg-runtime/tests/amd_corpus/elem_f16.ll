define amdgpu_kernel void @E_f16(ptr addrspace(1) noalias align 16 %d0, ptr addrspace(1) noalias align 16 %d1, ptr addrspace(1) noalias align 16 %d2) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = shl i32 %g, 5
  %i = add i32 %g2, %l
  %pa = getelementptr half, ptr addrspace(1) %d1, i32 %i
  %pb = getelementptr half, ptr addrspace(1) %d2, i32 %i
  %a = load half, ptr addrspace(1) %pa
  %b = load half, ptr addrspace(1) %pb
  %c = fadd half %a, %b
  %m = fmul half %c, 0xH4100
  %s = fsub half %m, %a
  %x = call half @llvm.maxnum.f16(half %s, half 0xH0000)
  %y = call half @llvm.fma.f16(half %x, half %b, half 0xHBC00)
  %e = call half @llvm.exp2.f16(half %y)
  %lg = call half @llvm.log2.f16(half %e)
  %sq = call half @llvm.sqrt.f16(half %lg)
  %dv = fdiv half %sq, %b
  %z = fcmp olt half %dv, %a
  %w = select i1 %z, half %dv, half %c
  %f = fpext half %w to float
  %f2 = fmul float %f, 1.0e+01
  %h = fptrunc float %f2 to half
  %ii = fptosi half %h to i32
  %h3 = sitofp i32 %ii to half
  %po = getelementptr half, ptr addrspace(1) %d0, i32 %i
  store half %h3, ptr addrspace(1) %po
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,32" }
