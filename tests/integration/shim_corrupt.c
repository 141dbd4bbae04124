/* A test-only plugin that wraps the real one and damages what it receives, so that the checks of the
 * integration tests and of gdrnet-perf --check are seen to fail (every assertion must be able to fail).
 * GNIT_REAL_PLUGIN: the plugin to wrap (dlopen RTLD_NOW|RTLD_LOCAL, as NCCL). GNIT_CORRUPT:
 *   byte  flip one byte in the middle of every non-empty received message
 *   size  report one byte more than was received
 * Everything else is forwarded untouched. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdrnet/net_v8.h"

static ncclNet_v8_t *real;
static void *real_handle; /* unloaded with the shim, so that its last stats file is written before the caller reads it */
static int mode;          /* 1 byte, 2 size */

typedef struct {
  void *req;
  unsigned char *data;
} track_t;
#define NTRACK 4096
static track_t tracks[NTRACK];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static ncclResult_t s_init(ncclDebugLogger_t logger) {
  const char *path = getenv("GNIT_REAL_PLUGIN");
  const char *m = getenv("GNIT_CORRUPT");
  if (path == NULL || m == NULL) {
    logger(NCCL_LOG_WARN, NCCL_INIT, __FILE__, __LINE__, "corrupting shim: set GNIT_REAL_PLUGIN and GNIT_CORRUPT");
    return ncclInvalidUsage;
  }
  mode = strcmp(m, "size") == 0 ? 2 : 1;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    logger(NCCL_LOG_WARN, NCCL_INIT, __FILE__, __LINE__, "corrupting shim: %s", dlerror());
    return ncclSystemError;
  }
  real_handle = h;
  real = (ncclNet_v8_t *)dlsym(h, "ncclNetPlugin_v8");
  if (real == NULL) return ncclSystemError;
  return real->init(logger);
}
__attribute__((destructor)) static void shim_unload(void) {
  if (real_handle != NULL) (void)dlclose(real_handle);
}

static ncclResult_t s_devices(int *n) { return real->devices(n); }
static ncclResult_t s_props(int d, ncclNetProperties_v8_t *p) { return real->getProperties(d, p); }
static ncclResult_t s_listen(int d, void *h, void **l) { return real->listen(d, h, l); }
static ncclResult_t s_connect(int d, void *h, void **s, ncclNetDeviceHandle_v8_t **dh) {
  return real->connect(d, h, s, dh);
}
static ncclResult_t s_accept(void *l, void **r, ncclNetDeviceHandle_v8_t **dh) { return real->accept(l, r, dh); }
static ncclResult_t s_reg(void *c, void *d, size_t s, int t, void **m) { return real->regMr(c, d, s, t, m); }
static ncclResult_t s_regdb(void *c, void *d, size_t s, int t, uint64_t o, int fd, void **m) {
  return real->regMrDmaBuf(c, d, s, t, o, fd, m);
}
static ncclResult_t s_dereg(void *c, void *m) { return real->deregMr(c, m); }
static ncclResult_t s_isend(void *c, void *d, int s, int t, void *m, void **r) { return real->isend(c, d, s, t, m, r); }
static ncclResult_t s_irecv(void *c, int n, void **d, int *s, int *t, void **m, void **r) {
  ncclResult_t res = real->irecv(c, n, d, s, t, m, r);
  if (res == ncclSuccess && *r != NULL) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < NTRACK; i++)
      if (tracks[i].req == NULL) {
        tracks[i].req = *r;
        tracks[i].data = d[0];
        break;
      }
    pthread_mutex_unlock(&mu);
  }
  return res;
}
static ncclResult_t s_iflush(void *c, int n, void **d, int *s, void **m, void **r) {
  return real->iflush(c, n, d, s, m, r);
}
static ncclResult_t s_test(void *r, int *done, int *sizes) {
  ncclResult_t res = real->test(r, done, sizes);
  if (res != ncclSuccess || !*done) return res;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < NTRACK; i++)
    if (tracks[i].req == r) {
      tracks[i].req = NULL;
      if (sizes != NULL && mode == 2) sizes[0] += 1;
      if (sizes != NULL && mode == 1 && sizes[0] > 0) tracks[i].data[sizes[0] / 2] ^= 0x20;
      break;
    }
  pthread_mutex_unlock(&mu);
  return res;
}
static ncclResult_t s_closeSend(void *c) { return real->closeSend(c); }
static ncclResult_t s_closeRecv(void *c) { return real->closeRecv(c); }
static ncclResult_t s_closeListen(void *c) { return real->closeListen(c); }

__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "GDR", .init = s_init, .devices = s_devices, .getProperties = s_props, .listen = s_listen,
    .connect = s_connect, .accept = s_accept, .regMr = s_reg, .regMrDmaBuf = s_regdb, .deregMr = s_dereg,
    .isend = s_isend, .irecv = s_irecv, .iflush = s_iflush, .test = s_test, .closeSend = s_closeSend,
    .closeRecv = s_closeRecv, .closeListen = s_closeListen, .getDeviceMr = NULL, .irecvConsumed = NULL};
