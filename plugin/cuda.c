#include "cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

/* Our own declarations of the few driver API entry points used (stable ABI since CUDA 4/11.7); cuda.h is not
 * needed to build. */
typedef int gdr_CUresult;
typedef int gdr_CUdevice;
typedef unsigned long long gdr_CUdeviceptr;
#define GDR_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define GDR_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define GDR_CU_MEMORYTYPE_DEVICE 2
#define GDR_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED 116
#define GDR_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define GDR_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

struct gdr_cuda_api {
  gdr_CUresult (*cuInit)(unsigned int);
  gdr_CUresult (*cuDeviceGet)(gdr_CUdevice *, int);
  gdr_CUresult (*cuDeviceGetAttribute)(int *, int, gdr_CUdevice);
  gdr_CUresult (*cuPointerGetAttribute)(void *, int, gdr_CUdeviceptr);
  gdr_CUresult (*cuMemGetHandleForAddressRange)(void *, gdr_CUdeviceptr, size_t, int, unsigned long long);
};

/* Loaded once per process lifetime of this library (pthread_once); the dlopen handle is kept on purpose: NCCL holds
 * libcuda open anyway and unloading a driver library is never safe. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct gdr_cuda_api g_cu;
static ncclResult_t g_res = ncclSystemError;
static char g_why[256] = "not loaded";

static void cuda_load_once(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  gdr_CUresult r;
  if (h == NULL) {
    snprintf(g_why, sizeof(g_why), "libcuda.so.1 not loadable: %s", dlerror());
    return;
  }
#define LOAD(sym, required)                                                                                          \
  do {                                                                                                               \
    *(void **)&g_cu.sym = dlsym(h, #sym);                                                                            \
    if (g_cu.sym == NULL && (required)) {                                                                            \
      snprintf(g_why, sizeof(g_why), "libcuda.so.1 lacks %s", #sym);                                                 \
      return;                                                                                                        \
    }                                                                                                                \
  } while (0)
  LOAD(cuInit, 1);
  LOAD(cuDeviceGet, 1);
  LOAD(cuDeviceGetAttribute, 1);
  LOAD(cuPointerGetAttribute, 1);
  LOAD(cuMemGetHandleForAddressRange, 0);
#undef LOAD
  r = g_cu.cuInit(0);
  if (r != 0) {
    snprintf(g_why, sizeof(g_why), "cuInit failed with CUresult %d (no GPU or driver mismatch)", r);
    return;
  }
  g_why[0] = '\0';
  g_res = ncclSuccess;
}

ncclResult_t gdr_cuda_load(char *why, size_t whylen) {
  pthread_once(&g_once, cuda_load_once);
  if (g_res != ncclSuccess && why != NULL) snprintf(why, whylen, "%s", g_why);
  return g_res;
}

ncclResult_t gdr_cuda_ptr_kind(const void *ptr, enum gdr_mem_kind *kind, int *cuda_dev) {
  unsigned int mtype = 0;
  int ordinal = -1;
  *kind = GDR_MEM_HOST;
  if (cuda_dev) *cuda_dev = -1;
  if (gdr_cuda_load(NULL, 0) != ncclSuccess) return ncclSuccess;
  if (g_cu.cuPointerGetAttribute(&mtype, GDR_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (gdr_CUdeviceptr)(uintptr_t)ptr) != 0)
    return ncclSuccess; /* unknown to CUDA: plain host memory */
  if (mtype != GDR_CU_MEMORYTYPE_DEVICE) return ncclSuccess;
  *kind = GDR_MEM_CUDA;
  if (cuda_dev &&
      g_cu.cuPointerGetAttribute(&ordinal, GDR_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (gdr_CUdeviceptr)(uintptr_t)ptr) ==
          0)
    *cuda_dev = ordinal;
  return ncclSuccess;
}

static ncclResult_t dev_attr(int dev, int attr, int *value) {
  gdr_CUdevice d;
  char why[256];
  *value = 0;
  if (gdr_cuda_load(why, sizeof(why)) != ncclSuccess) return ncclSystemError;
  if (g_cu.cuDeviceGet(&d, dev) != 0) return ncclInvalidArgument;
  if (g_cu.cuDeviceGetAttribute(value, attr, d) != 0) return ncclSystemError;
  return ncclSuccess;
}

ncclResult_t gdr_cuda_dmabuf_supported(int dev, int *supported) {
  return dev_attr(dev, GDR_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, supported);
}

ncclResult_t gdr_cuda_gdr_supported(int dev, int *supported) {
  return dev_attr(dev, GDR_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, supported);
}

ncclResult_t gdr_cuda_dmabuf_fd(void *ptr, size_t size, int *fd) {
  gdr_CUresult r;
  *fd = -1;
  if (gdr_cuda_load(NULL, 0) != ncclSuccess) return ncclSystemError;
  if (g_cu.cuMemGetHandleForAddressRange == NULL) {
    GDR_WARN("cuMemGetHandleForAddressRange not in this driver (needs CUDA 11.7+)");
    return ncclSystemError;
  }
  r = g_cu.cuMemGetHandleForAddressRange(fd, (gdr_CUdeviceptr)(uintptr_t)ptr, size,
                                         GDR_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != 0) {
    GDR_WARN("cuMemGetHandleForAddressRange(%p, %zu) failed with CUresult %d", ptr, size, r);
    return ncclSystemError;
  }
  return ncclSuccess;
}
