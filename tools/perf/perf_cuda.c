/* libcuda.so.1 through dlopen: our own declarations of the few driver entry points we need. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "perf_cuda.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

#define PC_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define PC_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

static struct {
  void *dl;
  CUdevice dev;
  CUcontext ctx;
  int dmabuf;
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemGetHandleForAddressRange)(void *, CUdeviceptr, size_t, int, unsigned long long);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuCtxSynchronize)(void);
} g;

static const char *cu_err(CUresult r) {
  const char *s = NULL;
  if (g.cuGetErrorString != NULL && g.cuGetErrorString(r, &s) == 0 && s != NULL) return s;
  return "unknown CUDA error";
}

#define LOAD(field, sym)                                                                                               \
  do {                                                                                                                 \
    *(void **)(&g.field) = dlsym(g.dl, sym);                                                                           \
    if (g.field == NULL) {                                                                                             \
      snprintf(err, errlen, "libcuda.so.1 lacks %s", sym);                                                             \
      return -1;                                                                                                       \
    }                                                                                                                  \
  } while (0)

int pc_open(int dev, char *err, size_t errlen) {
  if (g.dl != NULL) return 0;
  g.dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (g.dl == NULL) {
    const char *e = dlerror();
    snprintf(err, errlen, "--cuda needs the CUDA driver: dlopen(libcuda.so.1) failed: %s", e ? e : "?");
    return -1;
  }
  LOAD(cuInit, "cuInit");
  LOAD(cuDeviceGet, "cuDeviceGet");
  LOAD(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  LOAD(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  LOAD(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  LOAD(cuCtxSetCurrent, "cuCtxSetCurrent");
  LOAD(cuMemAlloc, "cuMemAlloc_v2");
  LOAD(cuMemFree, "cuMemFree_v2");
  LOAD(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  LOAD(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  LOAD(cuGetErrorString, "cuGetErrorString");
  LOAD(cuCtxSynchronize, "cuCtxSynchronize");
  *(void **)(&g.cuMemGetHandleForAddressRange) = dlsym(g.dl, "cuMemGetHandleForAddressRange"); /* optional */
  CUresult r = g.cuInit(0);
  if (r != 0) {
    snprintf(err, errlen, "cuInit failed: %s (%d)", cu_err(r), r);
    return -1;
  }
  if ((r = g.cuDeviceGet(&g.dev, dev)) != 0) {
    snprintf(err, errlen, "cuDeviceGet(%d) failed: %s (%d)", dev, cu_err(r), r);
    return -1;
  }
  if ((r = g.cuDevicePrimaryCtxRetain(&g.ctx, g.dev)) != 0) {
    snprintf(err, errlen, "cuDevicePrimaryCtxRetain failed: %s (%d)", cu_err(r), r);
    return -1;
  }
  if ((r = g.cuCtxSetCurrent(g.ctx)) != 0) {
    snprintf(err, errlen, "cuCtxSetCurrent failed: %s (%d)", cu_err(r), r);
    return -1;
  }
  int v = 0;
  if (g.cuMemGetHandleForAddressRange != NULL &&
      g.cuDeviceGetAttribute(&v, PC_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, g.dev) == 0)
    g.dmabuf = v;
  return 0;
}

int pc_dmabuf_supported(void) { return g.dmabuf; }

void *pc_alloc(size_t size, char *err, size_t errlen) {
  CUdeviceptr p = 0;
  CUresult r = g.cuMemAlloc(&p, size);
  if (r != 0) {
    snprintf(err, errlen, "cuMemAlloc(%zu) failed: %s (%d)", size, cu_err(r), r);
    return NULL;
  }
  return (void *)(uintptr_t)p;
}

void pc_free(void *dptr) {
  if (dptr != NULL) (void)g.cuMemFree((CUdeviceptr)(uintptr_t)dptr);
}

int pc_htod(void *dst, const void *src, size_t len) {
  if (len == 0) return 0;
  if (g.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, len) != 0) return -1;
  /* From pageable memory the copy may return before the data has landed in device memory; the NIC (or
   * the emulator, on its own non-blocking stream) must read what we wrote: wait for it. */
  return g.cuCtxSynchronize() == 0 ? 0 : -1;
}

int pc_dtoh(void *dst, const void *src, size_t len) {
  if (len == 0) return 0;
  return g.cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, len) == 0 ? 0 : -1;
}

int pc_dmabuf_fd(void *dptr, size_t size, int *fd, char *err, size_t errlen) {
  if (g.cuMemGetHandleForAddressRange == NULL) {
    snprintf(err, errlen, "libcuda.so.1 lacks cuMemGetHandleForAddressRange");
    return -1;
  }
  int f = -1;
  CUresult r = g.cuMemGetHandleForAddressRange((void *)&f, (CUdeviceptr)(uintptr_t)dptr, size,
                                               PC_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != 0) {
    snprintf(err, errlen, "cuMemGetHandleForAddressRange failed: %s (%d)", cu_err(r), r);
    return -1;
  }
  *fd = f;
  return 0;
}

void pc_close(void) {
  if (g.dl == NULL) return;
  if (g.ctx != NULL) (void)g.cuDevicePrimaryCtxRelease(g.dev);
  /* libcuda is never dlclosed (the driver does not support being unloaded). */
  memset(&g, 0, sizeof g);
}
