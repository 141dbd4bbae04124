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
#define GDR_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define GDR_CU_POINTER_ATTRIBUTE_CONTEXT 1
#define GDR_CU_STREAM_NON_BLOCKING 1
#define GDR_CU_MEMHOSTALLOC_PORTABLE 1

struct gdr_cuda_api {
  gdr_CUresult (*cuInit)(unsigned int);
  gdr_CUresult (*cuDeviceGet)(gdr_CUdevice *, int);
  gdr_CUresult (*cuDeviceGetAttribute)(int *, int, gdr_CUdevice);
  gdr_CUresult (*cuPointerGetAttribute)(void *, int, gdr_CUdeviceptr);
  /* staging copies (optional: needed only when a connection carries CUDA memory over TCP) */
  gdr_CUresult (*cuDevicePrimaryCtxRetain)(void **, gdr_CUdevice);
  gdr_CUresult (*cuCtxCreate_v2)(void **, unsigned int, gdr_CUdevice);
  gdr_CUresult (*cuCtxPushCurrent_v2)(void *);
  gdr_CUresult (*cuCtxPopCurrent_v2)(void **);
  gdr_CUresult (*cuStreamCreate)(void **, unsigned int);
  gdr_CUresult (*cuStreamSynchronize)(void *);
  gdr_CUresult (*cuMemcpyHtoDAsync_v2)(gdr_CUdeviceptr, const void *, size_t, void *);
  gdr_CUresult (*cuMemcpyDtoHAsync_v2)(void *, gdr_CUdeviceptr, size_t, void *);
  gdr_CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
  gdr_CUresult (*cuMemFreeHost)(void *);
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
#define LOAD(sym, required)                                                                                            \
  do {                                                                                                                 \
    *(void **)&g_cu.sym = dlsym(h, #sym);                                                                              \
    if (g_cu.sym == NULL && (required)) {                                                                              \
      snprintf(g_why, sizeof(g_why), "libcuda.so.1 lacks %s", #sym);                                                   \
      return;                                                                                                          \
    }                                                                                                                  \
  } while (0)
  LOAD(cuInit, 1);
  LOAD(cuDeviceGet, 1);
  LOAD(cuDeviceGetAttribute, 1);
  LOAD(cuPointerGetAttribute, 1);
  LOAD(cuDevicePrimaryCtxRetain, 0);
  LOAD(cuCtxCreate_v2, 0);
  LOAD(cuCtxPushCurrent_v2, 0);
  LOAD(cuCtxPopCurrent_v2, 0);
  LOAD(cuStreamCreate, 0);
  LOAD(cuStreamSynchronize, 0);
  LOAD(cuMemcpyHtoDAsync_v2, 0);
  LOAD(cuMemcpyDtoHAsync_v2, 0);
  LOAD(cuMemHostAlloc, 0);
  LOAD(cuMemFreeHost, 0);
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
  if (cuda_dev && g_cu.cuPointerGetAttribute(&ordinal, GDR_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                             (gdr_CUdeviceptr)(uintptr_t)ptr) == 0)
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

/* ------------------------------------------------------------------------------------------- staging -- */

/* One non-blocking stream per context, made on first use and kept (the driver keeps the context anyway): a copy
 * on it never waits behind the application's kernels, and a sync of it waits for our copies only. */
#define GDR_CUDA_MAX_CTX 16
static pthread_mutex_t g_smu = PTHREAD_MUTEX_INITIALIZER;
static struct { void *ctx, *stream; } g_streams[GDR_CUDA_MAX_CTX];

static int have_staging(void) {
  return g_cu.cuDevicePrimaryCtxRetain && g_cu.cuCtxPushCurrent_v2 && g_cu.cuCtxPopCurrent_v2 && g_cu.cuStreamCreate &&
         g_cu.cuStreamSynchronize && g_cu.cuMemcpyHtoDAsync_v2 && g_cu.cuMemcpyDtoHAsync_v2 && g_cu.cuMemHostAlloc &&
         g_cu.cuMemFreeHost;
}

/* The plugin's own context on device ordinal (gdr_cuda_mem_ctx), made once; NULL when it cannot be (said once). */
#define GDR_CUDA_MAX_DEV 64
static void *g_priv[GDR_CUDA_MAX_DEV];
static int g_priv_failed[GDR_CUDA_MAX_DEV];
static void *private_ctx(int ordinal, gdr_CUdevice d) {
  void *c = NULL, *old = NULL;
  int r = -1;
  if (ordinal < 0 || ordinal >= GDR_CUDA_MAX_DEV) return NULL;
  pthread_mutex_lock(&g_smu);
  c = g_priv[ordinal];
  if (c == NULL && !g_priv_failed[ordinal]) {
    if (g_cu.cuCtxCreate_v2 != NULL) r = g_cu.cuCtxCreate_v2(&c, 0, d);
    if (r == 0 && c != NULL) {
      (void)g_cu.cuCtxPopCurrent_v2(&old); /* cuCtxCreate made it current here: the thread gets its own back */
      g_priv[ordinal] = c;
      GDR_INFO(NCCL_NET,
               "CUDA device %d: TCP staging copies of cuMem* memory run in a CUDA context of the plugin's "
               "own (an application thread in a synchronous copy cannot hold them up)",
               ordinal);
    } else {
      c = NULL;
      g_priv_failed[ordinal] = 1;
      GDR_WARN("CUDA device %d: no CUDA context of the plugin's own (%s): TCP staging copies use the primary "
               "context, where an application thread in a synchronous copy (e.g. PyTorch's .item() right after a "
               "collective) can hold them up until that collective's timeout",
               ordinal, g_cu.cuCtxCreate_v2 == NULL ? "libcuda.so.1 lacks cuCtxCreate_v2" : "cuCtxCreate_v2 failed");
    }
  }
  pthread_mutex_unlock(&g_smu);
  return c;
}

ncclResult_t gdr_cuda_mem_ctx(const void *dptr, void **ctx) {
  void *c = NULL;
  int ordinal = 0;
  *ctx = NULL;
  if (gdr_cuda_load(NULL, 0) != ncclSuccess || !have_staging()) {
    GDR_WARN("CUDA memory at %p needs the CUDA driver's copy functions to travel over TCP: %s", dptr,
             g_why[0] ? g_why : "a staging entry point is missing from libcuda.so.1");
    return ncclSystemError;
  }
  if (g_cu.cuPointerGetAttribute(&c, GDR_CU_POINTER_ATTRIBUTE_CONTEXT, (gdr_CUdeviceptr)(uintptr_t)dptr) != 0) c = NULL;
  if (c == NULL) { /* cuMem* (VMM) memory belongs to the device, not to a context: the plugin's own context there */
    gdr_CUdevice d;
    if (g_cu.cuPointerGetAttribute(&ordinal, GDR_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   (gdr_CUdeviceptr)(uintptr_t)dptr) != 0 ||
        g_cu.cuDeviceGet(&d, ordinal) != 0) {
      GDR_WARN("CUDA memory at %p: no device for it", dptr);
      return ncclSystemError;
    }
    c = private_ctx(ordinal, d);
    if (c == NULL && g_cu.cuDevicePrimaryCtxRetain(&c, d) != 0) {
      GDR_WARN("CUDA memory at %p: neither a context of the plugin's own nor device %d's primary context", dptr,
               ordinal);
      return ncclSystemError;
    }
  }
  *ctx = c;
  return ncclSuccess;
}

/* ctx's stream (ctx pushed by the caller). */
static void *stream_of(void *ctx) {
  void *s = NULL;
  pthread_mutex_lock(&g_smu);
  for (int i = 0; i < GDR_CUDA_MAX_CTX && s == NULL; i++) {
    if (g_streams[i].ctx == ctx) {
      s = g_streams[i].stream;
    } else if (g_streams[i].ctx == NULL) {
      if (g_cu.cuStreamCreate(&s, GDR_CU_STREAM_NON_BLOCKING) != 0) s = NULL;
      if (s != NULL) {
        g_streams[i].ctx = ctx;
        g_streams[i].stream = s;
      }
      break;
    }
  }
  pthread_mutex_unlock(&g_smu);
  return s;
}

ncclResult_t gdr_cuda_copy(void *ctx, void *dst, const void *src, size_t len, int to_device) {
  ncclResult_t res = ncclSuccess;
  void *popped = NULL, *s;
  gdr_CUresult r;
  if (len == 0) return ncclSuccess;
  if (g_cu.cuCtxPushCurrent_v2 == NULL || g_cu.cuCtxPushCurrent_v2(ctx) != 0) {
    GDR_WARN("staging copy of %zu bytes: cannot make its CUDA context current", len);
    return ncclSystemError;
  }
  s = stream_of(ctx);
  if (s == NULL) {
    GDR_WARN("staging copy of %zu bytes: no stream of the plugin's own in that CUDA context", len);
    res = ncclSystemError;
    goto out;
  }
  r = to_device ? g_cu.cuMemcpyHtoDAsync_v2((gdr_CUdeviceptr)(uintptr_t)dst, src, len, s)
                : g_cu.cuMemcpyDtoHAsync_v2(dst, (gdr_CUdeviceptr)(uintptr_t)src, len, s);
  if (r == 0) r = g_cu.cuStreamSynchronize(s);
  if (r != 0) {
    GDR_WARN("staging copy of %zu bytes %s the GPU failed with CUresult %d", len, to_device ? "to" : "from", r);
    res = ncclSystemError;
  }
out:
  (void)g_cu.cuCtxPopCurrent_v2(&popped);
  return res;
}

ncclResult_t gdr_cuda_host_alloc(void *ctx, size_t len, void **p) {
  void *popped = NULL;
  int pushed = 0, r = -1;
  *p = NULL;
  if (gdr_cuda_load(NULL, 0) == ncclSuccess && g_cu.cuMemHostAlloc != NULL && g_cu.cuCtxPushCurrent_v2 != NULL &&
      g_cu.cuCtxPushCurrent_v2(ctx) == 0) {
    pushed = 1;
    r = g_cu.cuMemHostAlloc(p, len ? len : 1, GDR_CU_MEMHOSTALLOC_PORTABLE);
  }
  if (pushed) (void)g_cu.cuCtxPopCurrent_v2(&popped);
  if (r != 0) {
    GDR_WARN("cuMemHostAlloc of %zu bytes for a TCP staging buffer failed%s", len,
             pushed ? "" : " (its CUDA context could not be made current)");
    *p = NULL;
    return ncclSystemError;
  }
  return ncclSuccess;
}

void gdr_cuda_host_free(void *p) {
  if (p != NULL && g_cu.cuMemFreeHost != NULL) (void)g_cu.cuMemFreeHost(p);
}
