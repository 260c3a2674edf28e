// The test plugin's kernel: y = x + alpha over n floats (compiled to a cubin by run_consumer.cmake when nvcc exists).
extern "C" __global__ void add_f32(const float* x, float* y, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + alpha;
}
