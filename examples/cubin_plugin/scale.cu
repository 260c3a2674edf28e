// The example cubin plugin's scale kernel (f32, extern "C"), compiled into the bundle by the producer (kernels.json).
// y = alpha * x over n elements.
extern "C" __global__ void scale_f32(const float* __restrict__ x, float* __restrict__ y, long long n, float alpha) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    y[i] = alpha * x[i];
  }
}
