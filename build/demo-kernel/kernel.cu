// sparkimg demo kernel: a saxpy compiled for the spec's CUDA architectures (12.1a on GB10).
extern "C" __global__ void sparkimg_saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" int sparkimg_demo_abi_version() { return 1; }
