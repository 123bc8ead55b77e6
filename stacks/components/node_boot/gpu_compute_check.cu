// A small computation on one GPU, checked on the host: y = 2x + y over 16M floats.
// health_check.sh builds it with nvcc and runs it once per GPU, selecting the GPU with
// CUDA_VISIBLE_DEVICES=<uuid> so that the program always uses device 0.
#include <cmath>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

static bool ok(cudaError_t err, const char *step, const char *label) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s failed: %s\n", label, step, cudaGetErrorString(err));
  return false;
}

int main(int argc, char **argv) {
  const char *label = argc > 1 ? argv[1] : "gpu";
  const int n = 1 << 24;
  const size_t bytes = n * sizeof(float);
  std::vector<float> x(n, 1.0f), y(n, 2.0f);
  float *dx = nullptr, *dy = nullptr;
  bool good = ok(cudaSetDevice(0), "select device", label) &&
              ok(cudaMalloc(&dx, bytes), "allocate", label) &&
              ok(cudaMalloc(&dy, bytes), "allocate", label) &&
              ok(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice), "copy in", label) &&
              ok(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice), "copy in", label);
  if (good) {
    saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx, dy);
    good = ok(cudaGetLastError(), "launch", label) &&
           ok(cudaDeviceSynchronize(), "run", label) &&
           ok(cudaMemcpy(y.data(), dy, bytes, cudaMemcpyDeviceToHost), "copy out", label);
  }
  cudaFree(dx);
  cudaFree(dy);
  if (!good) return 2;
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += std::fabs(y[i] - 4.0f) > 1e-6f;
  if (wrong) {
    std::fprintf(stderr, "%s: %d of %d results wrong\n", label, wrong, n);
    return 1;
  }
  std::printf("%s: computation correct (%d elements)\n", label, n);
  return 0;
}
