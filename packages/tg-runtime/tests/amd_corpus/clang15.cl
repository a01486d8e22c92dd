// Kernels for the second producer (clang-15, OpenCL C 2.0, gfx1100): ids come from the amdgcn builtins so the
// objects call no library functions.
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define BARRIER() (__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"), __builtin_amdgcn_s_barrier(), \
                   __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup"))
#define GID(n) ((int)(__builtin_amdgcn_workgroup_id_x() * (n) + __builtin_amdgcn_workitem_id_x()))

__kernel void cl_axpy(__global float* out, __global const float* a, __global const float* b, float alpha) {
  int i = GID(64);
  out[i] = alpha * a[i] + b[i];
}

__kernel void cl_idiv(__global int* out, __global const int* a, __global const int* b) {
  int i = GID(32);
  int d = b[i] == 0 ? 1 : b[i];
  out[i] = a[i] / d + a[i] % 7 - (int)((uint)a[i] >> 3);
}

__kernel void cl_reduce(__global float* out, __global const float* a) {
  __local float acc[64];
  int l = __builtin_amdgcn_workitem_id_x();
  int g = __builtin_amdgcn_workgroup_id_x();
  float s = 0.0f;
  for (int j = 0; j < 4; j++) s += a[g * 256 + j * 64 + l];
  acc[l] = s;
  BARRIER();
  for (int k = 32; k > 0; k >>= 1) {
    if (l < k) acc[l] += acc[l + k];
    BARRIER();
  }
  if (l == 0) out[g] = acc[0];
}

__kernel void cl_half(__global half* out, __global const half* a, __global const double* b) {
  int i = GID(32);
  out[i] = a[i] * a[i] + (half)(b[i] * 3.0);
}
