define amdgpu_kernel void @E_f64(ptr addrspace(1) noalias align 16 %d0, ptr addrspace(1) noalias align 16 %d1, ptr addrspace(1) noalias align 16 %d2) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = shl i32 %g, 5
  %i = add i32 %g2, %l
  %pa = getelementptr double, ptr addrspace(1) %d1, i32 %i
  %pb = getelementptr double, ptr addrspace(1) %d2, i32 %i
  %a = load double, ptr addrspace(1) %pa
  %b = load double, ptr addrspace(1) %pb
  %c = fadd double %a, %b
  %m = fmul double %c, 3.14159
  %dv = fdiv double %m, %b
  %sq = call double @llvm.sqrt.f64(double %dv)
  %x = call double @llvm.maxnum.f64(double %sq, double 1.0)
  %y = call double @llvm.fma.f64(double %x, double %b, double -1.0)
  %t = call double @llvm.trunc.f64(double %y)
  %z = fcmp olt double %t, %a
  %w = select i1 %z, double %t, double %c
  %ii = fptosi double %w to i64
  %i2 = mul i64 %ii, 7
  %f = sitofp i64 %i2 to double
  %ff = fptrunc double %f to float
  %fd = fpext float %ff to double
  %po = getelementptr double, ptr addrspace(1) %d0, i32 %i
  store double %fd, ptr addrspace(1) %po
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,32" }
