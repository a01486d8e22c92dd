define amdgpu_kernel void @r_mm(ptr addrspace(1) noalias align 16 %d0, ptr addrspace(1) noalias align 16 %d1, ptr addrspace(1) noalias align 16 %d2) #0 {
entry:
  %lx = call i32 @llvm.amdgcn.workitem.id.x()
  %ly = call i32 @llvm.amdgcn.workitem.id.y()
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %col0 = shl i32 %gx, 4
  %col = add i32 %col0, %lx
  %row0 = shl i32 %gy, 4
  %row = add i32 %row0, %ly
  %rb = shl i32 %row, 6
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%kn, %loop]
  %acc = phi <4 x float> [zeroinitializer, %entry], [%accn, %loop]
  %ai = add i32 %rb, %k
  %pa = getelementptr float, ptr addrspace(1) %d1, i32 %ai
  %av = load <4 x float>, ptr addrspace(1) %pa, align 16
  %bi0 = shl i32 %k, 6
  %bi = add i32 %bi0, %col
  %pb = getelementptr float, ptr addrspace(1) %d2, i32 %bi
  %b0 = load float, ptr addrspace(1) %pb
  %bv0 = insertelement <4 x float> undef, float %b0, i32 0
  %bv = shufflevector <4 x float> %bv0, <4 x float> undef, <4 x i32> zeroinitializer
  %accn = call <4 x float> @llvm.fma.v4f32(<4 x float> %av, <4 x float> %bv, <4 x float> %acc)
  %kn = add i32 %k, 4
  %c = icmp ult i32 %kn, 64
  br i1 %c, label %loop, label %done
done:
  %e0 = extractelement <4 x float> %accn, i32 0
  %e1 = extractelement <4 x float> %accn, i32 1
  %e2 = extractelement <4 x float> %accn, i32 2
  %e3 = extractelement <4 x float> %accn, i32 3
  %s01 = fadd float %e0, %e1
  %s23 = fadd float %e2, %e3
  %s = fadd float %s01, %s23
  %oi = add i32 %rb, %col
  %po = getelementptr float, ptr addrspace(1) %d0, i32 %oi
  store float %s, ptr addrspace(1) %po
  ret void
}
declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,256" }
