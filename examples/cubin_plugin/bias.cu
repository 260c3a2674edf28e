// The example cubin plugin's bias kernel (f32, extern "C"), compiled into the bundle by the producer (kernels.json).
// y = x + b[i % c]: a bias along the last dimension (c elements) of a tensor of n elements.
extern "C" __global__ void bias_f32(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                    long long n, int c) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    y[i] = x[i] + b[i % c];
  }
}
