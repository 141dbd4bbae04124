/* Drives any table version v6..v12 through the v8 shape the tools and tests are written against, the way NCCL's
 * own compatibility shims drive an older plugin: every v8 call becomes the table's call (int sizes to size_t, the
 * v10 connect config, the v11+ context from init, phandles), and back.
 *
 * One table at a time per process (the tables are process-wide; the tests load one plugin at a time): the
 * shim's state is this file's, set by gn_compat_open and cleared by gn_compat_close.
 *
 * Profiler (v10+): init passes a callback that checks what the plugin does with it -- start with a phandle the
 * shim gave (never NULL) and an eHandle the plugin initialised to NULL; stop with the eHandle start returned --
 * and counts; isend/irecv pass phandles pointing into the shim's own array. gn_compat_prof_stats tells. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdrnet/net.h"
#include "gn.h"

static const void *g_table; /* the real table, of version g_version */
static int g_version;
static void *g_ctx; /* v11+: the context init returned */
static int g_tc = NCCL_NET_TRAFFIC_CLASS_UNDEF;
static ncclDebugLogger_t g_logger;

/* profiler: the phandles the shim passes, the eHandle it returns from start, the counts */
#define GN_NPH 64
static char g_phandles[GN_NPH];
static char g_event; /* every started event's handle is &g_event */
static atomic_long g_starts, g_stops, g_bad;
static atomic_uint g_next_ph;

static ncclResult_t prof_cb(void **eHandle, int type, void *pHandle, int64_t pluginId, void *extData) {
  (void)pluginId;
  if (eHandle == NULL) {
    atomic_fetch_add(&g_bad, 1);
    return ncclSuccess;
  }
  if (type == ncclProfilerNetEventStart) {
    char *ph = pHandle;
    if (ph == NULL || ph < g_phandles || ph >= g_phandles + GN_NPH || *eHandle != NULL || extData == NULL) {
      atomic_fetch_add(&g_bad, 1);
      return ncclSuccess;
    }
    *eHandle = &g_event;
    atomic_fetch_add(&g_starts, 1);
  } else if (type == ncclProfilerNetEventStop || type == ncclProfilerNetEventUpdateAndStop) {
    if (*eHandle != &g_event) {
      atomic_fetch_add(&g_bad, 1);
      return ncclSuccess;
    }
    atomic_fetch_add(&g_stops, 1);
  } else if (type != ncclProfilerNetEventUpdate) {
    atomic_fetch_add(&g_bad, 1);
  }
  return ncclSuccess;
}

void gn_compat_prof_stats(gn_prof_stats_t *s) {
  s->starts = atomic_load(&g_starts);
  s->stops = atomic_load(&g_stops);
  s->bad = atomic_load(&g_bad);
}

static void *next_phandle(void) { return &g_phandles[atomic_fetch_add(&g_next_ph, 1) % GN_NPH]; }

#define T(v) ((const ncclNet_v##v##_t *)g_table)

static ncclResult_t c_init(ncclDebugLogger_t logger) {
  g_logger = logger;
  switch (g_version) {
  case 6: return T(6)->init(logger);
  case 7: return T(7)->init(logger);
  case 9: return T(9)->init(logger);
  case 10: return T(10)->init(logger, prof_cb);
  case 11: {
    ncclNetCommConfig_v11_t cfg = {g_tc};
    return T(11)->init(&g_ctx, 0x6e6574676472ull, &cfg, logger, prof_cb);
  }
  default: {
    ncclNetCommConfig_v12_t cfg = {g_tc};
    return T(12)->init(&g_ctx, 0x6e6574676472ull, &cfg, logger, prof_cb);
  }
  }
}

static ncclResult_t c_devices(int *ndev) { return T(6)->devices(ndev); } /* same place, same type in every one */

/* v9's layout is v10's and, up to maxCollBytes, v11's; v12 moves vProps' end */
#define V8_FROM(o, p)                                                                                                  \
  do {                                                                                                                 \
    (o)->name = (p).name;                                                                                              \
    (o)->pciPath = (p).pciPath;                                                                                        \
    (o)->guid = (p).guid;                                                                                              \
    (o)->ptrSupport = (p).ptrSupport;                                                                                  \
    (o)->speed = (p).speed;                                                                                            \
    (o)->port = (p).port;                                                                                              \
    (o)->latency = (p).latency;                                                                                        \
    (o)->maxComms = (p).maxComms;                                                                                      \
    (o)->maxRecvs = (p).maxRecvs;                                                                                      \
  } while (0)

static ncclResult_t c_props(int dev, ncclNetProperties_v8_t *o) {
  ncclResult_t r;
  memset(o, 0, sizeof(*o));
  switch (g_version) {
  case 6: {
    ncclNetProperties_v6_t p;
    if ((r = T(6)->getProperties(dev, &p)) != ncclSuccess) return r;
    V8_FROM(o, p);
    return ncclSuccess;
  }
  case 7: {
    ncclNetProperties_v7_t p;
    if ((r = T(7)->getProperties(dev, &p)) != ncclSuccess) return r;
    V8_FROM(o, p);
    o->netDeviceType = p.netDeviceType;
    o->netDeviceVersion = p.netDeviceVersion;
    return ncclSuccess;
  }
  case 9:
  case 10: {
    ncclNetProperties_v9_t p;
    if ((r = T(9)->getProperties(dev, &p)) != ncclSuccess) return r;
    V8_FROM(o, p);
    o->regIsGlobal = p.regIsGlobal;
    o->netDeviceType = p.netDeviceType;
    o->netDeviceVersion = p.netDeviceVersion;
    return ncclSuccess;
  }
  case 11: {
    ncclNetProperties_v11_t p;
    if ((r = T(11)->getProperties(dev, &p)) != ncclSuccess) return r;
    V8_FROM(o, p);
    o->regIsGlobal = p.regIsGlobal;
    o->netDeviceType = p.netDeviceType;
    o->netDeviceVersion = p.netDeviceVersion;
    return ncclSuccess;
  }
  default: {
    ncclNetProperties_v12_t p;
    if ((r = T(12)->getProperties(dev, &p)) != ncclSuccess) return r;
    V8_FROM(o, p);
    o->regIsGlobal = p.regIsGlobal;
    o->netDeviceType = p.netDeviceType;
    o->netDeviceVersion = p.netDeviceVersion;
    return ncclSuccess;
  }
  }
}

static ncclResult_t c_listen(int dev, void *handle, void **lc) {
  if (g_version >= 11) return T(11)->listen(g_ctx, dev, handle, lc);
  return T(6)->listen(dev, handle, lc);
}

static ncclResult_t c_connect(int dev, void *handle, void **sc, ncclNetDeviceHandle_v8_t **dh) {
  switch (g_version) {
  case 6: return T(6)->connect(dev, handle, sc);
  case 7: return T(7)->connect(dev, handle, sc, dh);
  case 9: return T(9)->connect(dev, handle, sc, dh);
  case 10: {
    ncclNetCommConfig_v10_t cfg = {g_tc};
    return T(10)->connect(dev, &cfg, handle, sc, dh);
  }
  default: return T(11)->connect(g_ctx, dev, handle, sc, dh);
  }
}

static ncclResult_t c_accept(void *lc, void **rc, ncclNetDeviceHandle_v8_t **dh) {
  if (g_version == 6) return T(6)->accept(lc, rc);
  return T(7)->accept(lc, rc, dh); /* same place, same type in v7..v12 */
}

static ncclResult_t c_reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
  if (g_version <= 7) {
    if (size > INT_MAX) return ncclInvalidArgument;
    return T(6)->regMr(comm, data, (int)size, type, mh);
  }
  return T(9)->regMr(comm, data, size, type, mh);
}

static ncclResult_t c_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t off, int fd, void **mh) {
  return T(6)->regMrDmaBuf(comm, data, size, type, off, fd, mh);
}

static ncclResult_t c_dereg_mr(void *comm, void *mh) { return T(6)->deregMr(comm, mh); }

static ncclResult_t c_isend(void *sc, void *data, int size, int tag, void *mh, void **req) {
  if (g_version <= 7) return T(6)->isend(sc, data, size, tag, mh, req);
  if (size < 0) return ncclInvalidArgument;
  if (g_version == 9) return T(9)->isend(sc, data, (size_t)size, tag, mh, req);
  return T(10)->isend(sc, data, (size_t)size, tag, mh, next_phandle(), req); /* v10 = v11 = v12 here */
}

static ncclResult_t c_irecv(void *rc, int n, void **data, int *sizes, int *tags, void **mhs, void **req) {
  size_t s[8];
  void *ph[8];
  if (g_version <= 7) return T(6)->irecv(rc, n, data, sizes, tags, mhs, req);
  if (n < 1 || n > 8) return ncclInternalError;
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    s[i] = (size_t)sizes[i];
    ph[i] = next_phandle();
  }
  if (g_version == 9) return T(9)->irecv(rc, n, data, s, tags, mhs, req);
  return T(10)->irecv(rc, n, data, s, tags, mhs, ph, req);
}

static ncclResult_t c_iflush(void *rc, int n, void **data, int *sizes, void **mhs, void **req) {
  return T(6)->iflush(rc, n, data, sizes, mhs, req);
}
static ncclResult_t c_test(void *req, int *done, int *sizes) { return T(6)->test(req, done, sizes); }
static ncclResult_t c_close_send(void *sc) { return T(6)->closeSend(sc); }
static ncclResult_t c_close_recv(void *rc) { return T(6)->closeRecv(rc); }
static ncclResult_t c_close_listen(void *lc) { return T(6)->closeListen(lc); }

static ncclNet_v8_t g_shim = {
    .name = NULL, /* the real table's, at open */
    .init = c_init,
    .devices = c_devices,
    .getProperties = c_props,
    .listen = c_listen,
    .connect = c_connect,
    .accept = c_accept,
    .regMr = c_reg_mr,
    .regMrDmaBuf = c_reg_mr_dmabuf,
    .deregMr = c_dereg_mr,
    .isend = c_isend,
    .irecv = c_irecv,
    .iflush = c_iflush,
    .test = c_test,
    .closeSend = c_close_send,
    .closeRecv = c_close_recv,
    .closeListen = c_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};

ncclNet_v8_t *gn_compat_open(const void *table, int version, int traffic_class, char *err, size_t errlen) {
  const ncclNet_v6_t *t6 = table;
  if (g_table != NULL) {
    snprintf(err, errlen, "gn_compat: a v%d table is open already (one at a time)", g_version);
    return NULL;
  }
  if (version < 6 || version > 12 || version == 8) {
    snprintf(err, errlen, "gn_compat: no shim for version %d", version);
    return NULL;
  }
  /* the first 17 members sit at the same places in every version (v6's view) */
  if (!t6->name || !t6->init || !t6->devices || !t6->getProperties || !t6->listen || !t6->connect || !t6->accept ||
      !t6->regMr || !t6->deregMr || !t6->isend || !t6->irecv || !t6->iflush || !t6->test || !t6->closeSend ||
      !t6->closeRecv || !t6->closeListen || (version >= 9 && ((const ncclNet_v9_t *)table)->makeVDevice == NULL) ||
      (version >= 11 &&
       (((const ncclNet_v11_t *)table)->finalize == NULL || ((const ncclNet_v11_t *)table)->setNetAttr == NULL))) {
    snprintf(err, errlen, "gn_compat: ncclNetPlugin_v%d lacks a member its version requires", version);
    return NULL;
  }
  g_table = table;
  g_version = version;
  g_ctx = NULL;
  g_tc = traffic_class;
  atomic_store(&g_starts, 0);
  atomic_store(&g_stops, 0);
  atomic_store(&g_bad, 0);
  g_shim.name = t6->name;
  /* the v7+ members past v6's 17 exist from v7 on; a host plugin leaves them NULL, and so does the shim */
  return &g_shim;
}

int gn_compat_close(void) {
  int rc = 0;
  if (g_table == NULL) return 0;
  /* NCCL >= 2.28 finalizes a v11+ communicator before it dlcloses the plugin */
  if (g_version >= 11 && g_ctx != NULL) rc = T(11)->finalize(g_ctx) == ncclSuccess ? 0 : -1;
  g_ctx = NULL;
  g_table = NULL;
  g_version = 0;
  (void)g_logger;
  return rc;
}

int gn_compat_version(void) { return g_table != NULL ? g_version : 8; }
