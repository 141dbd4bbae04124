/* fake_cuda.c - a stand-in libcuda.so.1 for the doctor's tests. One device (FAKECUDA_COUNT);
 * CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (124) = FAKECUDA_DMABUF (default 1); GPU_DIRECT_RDMA_SUPPORTED = 1. */
#include <stdlib.h>

int cuInit(unsigned flags) {
  (void)flags;
  return 0;
}
int cuDriverGetVersion(int *v) {
  *v = 13000;
  return 0;
}
int cuDeviceGetCount(int *n) {
  const char *e = getenv("FAKECUDA_COUNT");
  *n = e ? atoi(e) : 1;
  return 0;
}
int cuDeviceGet(int *d, int ordinal) {
  *d = ordinal;
  return 0;
}
int cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  const char *e = getenv("FAKECUDA_DMABUF");
  if (attr == 124) {
    *v = e ? atoi(e) : 1;
    return 0;
  }
  if (attr == 116) {
    *v = 1;
    return 0;
  }
  return 1; /* CUDA_ERROR_INVALID_VALUE */
}
