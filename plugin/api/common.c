/* What the ABI adapters share (api.h): property layouts, int sizes, test, fused devices, v11+ contexts, and the
 * unload destructor of the tables that get no finalize. */
#include <limits.h>
#include <string.h>

#include "api.h"
#include "log.h"

/* NCCL >= 2.28 dlcloses the plugin after its last communicator. v11+ gets finalize(ctx) first (core_ctx.c then
 * stops every thread and releases the devices); a v6..v10 table gets nothing: give back what init took (verbs
 * contexts and PDs, the parameter cache) when the library is unloaded. Only when no comm is open: a process that
 * exits with comms still open may have other threads inside the plugin. After the last finalize this finds
 * nothing left to do. */
__attribute__((destructor)) static void gdr_api_unload(void) { gdr_core_unload(); }

/* ------------------------------------------------------------------------------------------------ properties -- */

/* The fields every layout has, v6's nine. */
#define GDR_API_PROPS_V6(o, p)                                                                                      \
  do {                                                                                                               \
    (o)->name = (char *)(p)->name;                                                                                   \
    (o)->pciPath = (char *)(p)->pci_path;                                                                            \
    (o)->guid = (p)->guid;                                                                                           \
    (o)->ptrSupport = (p)->ptr_support;                                                                              \
    (o)->speed = (p)->speed;                                                                                         \
    (o)->port = (p)->port;                                                                                           \
    (o)->latency = (p)->latency;                                                                                     \
    (o)->maxComms = (p)->max_comms;                                                                                  \
    (o)->maxRecvs = (p)->max_recvs;                                                                                  \
  } while (0)

/* v8's: v6's, the device type/version (v7) and regIsGlobal. */
#define GDR_API_PROPS_V8(o, p)                                                                                      \
  do {                                                                                                               \
    GDR_API_PROPS_V6(o, p);                                                                                          \
    (o)->netDeviceType = (p)->net_device_type;                                                                       \
    (o)->netDeviceVersion = (p)->net_device_version;                                                                 \
    (o)->regIsGlobal = (p)->reg_is_global;                                                                           \
  } while (0)

/* v9's (and v10's, v11's, v12's): forceFlush, vProps with at most `max` devices, the size limits. */
#define GDR_API_PROPS_V9(o, p, max)                                                                                 \
  do {                                                                                                               \
    GDR_API_PROPS_V8(o, p);                                                                                          \
    (o)->forceFlush = (p)->force_flush;                                                                              \
    (o)->vProps.ndevs = (p)->vdev_ndevs < (max) ? (p)->vdev_ndevs : (max);                                           \
    for (int i_ = 0; i_ < (o)->vProps.ndevs; i_++) (o)->vProps.devs[i_] = (p)->vdev_devs[i_];                        \
    (o)->maxP2pBytes = (p)->max_p2p_bytes;                                                                           \
    (o)->maxCollBytes = (p)->max_coll_bytes;                                                                         \
  } while (0)

/* The core's properties of dev, or the error. */
static ncclResult_t core_props(int dev, struct gdr_props *p) { return gdr_core_get_properties(dev, p); }

ncclResult_t gdr_api_props_v6(int dev, ncclNetProperties_v6_t *o) {
  struct gdr_props p;
  ncclResult_t res = core_props(dev, &p);
  if (res != ncclSuccess) return res;
  memset(o, 0, sizeof(*o));
  GDR_API_PROPS_V6(o, &p);
  return ncclSuccess;
}

ncclResult_t gdr_api_props_v7(int dev, ncclNetProperties_v7_t *o) {
  struct gdr_props p;
  ncclResult_t res = core_props(dev, &p);
  if (res != ncclSuccess) return res;
  memset(o, 0, sizeof(*o));
  GDR_API_PROPS_V6(o, &p);
  o->netDeviceType = p.net_device_type;
  o->netDeviceVersion = p.net_device_version;
  return ncclSuccess;
}

ncclResult_t gdr_api_props_v8(int dev, ncclNetProperties_v8_t *o) {
  struct gdr_props p;
  ncclResult_t res = core_props(dev, &p);
  if (res != ncclSuccess) return res;
  memset(o, 0, sizeof(*o));
  GDR_API_PROPS_V8(o, &p);
  return ncclSuccess;
}

ncclResult_t gdr_api_props_v9(int dev, ncclNetProperties_v9_t *o) {
  struct gdr_props p;
  ncclResult_t res = core_props(dev, &p);
  if (res != ncclSuccess) return res;
  memset(o, 0, sizeof(*o));
  GDR_API_PROPS_V9(o, &p, NCCL_NET_MAX_DEVS_PER_NIC_V9);
  return ncclSuccess;
}

ncclResult_t gdr_api_props_v10(int dev, ncclNetProperties_v10_t *o) {
  struct gdr_props p;
  ncclResult_t res = core_props(dev, &p);
  if (res != ncclSuccess) return res;
  memset(o, 0, sizeof(*o));
  GDR_API_PROPS_V9(o, &p, NCCL_NET_MAX_DEVS_PER_NIC_V9);
  return ncclSuccess;
}

ncclResult_t gdr_api_props_v11(int dev, ncclNetProperties_v11_t *o) {
  struct gdr_props p;
  ncclResult_t res = core_props(dev, &p);
  if (res != ncclSuccess) return res;
  memset(o, 0, sizeof(*o));
  GDR_API_PROPS_V9(o, &p, NCCL_NET_MAX_DEVS_PER_NIC_V9);
  o->maxMultiRequestSize = p.max_multi_request_size;
  return ncclSuccess;
}

ncclResult_t gdr_api_props_v12(int dev, ncclNetProperties_v12_t *o) {
  struct gdr_props p;
  ncclResult_t res = core_props(dev, &p);
  if (res != ncclSuccess) return res;
  memset(o, 0, sizeof(*o));
  GDR_API_PROPS_V9(o, &p, NCCL_NET_MAX_DEVS_PER_NIC_V12);
  o->maxMultiRequestSize = p.max_multi_request_size;
  o->railId = (int16_t)p.rail_id;
  o->planeId = (int16_t)p.plane_id;
  return ncclSuccess;
}

/* ------------------------------------------------------------------------------------------------- int sizes -- */

ncclResult_t gdr_api_reg_mr_int(void *comm, void *data, int size, int type, void **mhandle) {
  if (size < 0) {
    if (mhandle != NULL) *mhandle = NULL;
    GDR_WARN("regMr: negative size %d", size);
    return ncclInvalidArgument;
  }
  return gdr_core_reg_mr(comm, data, (size_t)size, type, mhandle);
}

ncclResult_t gdr_api_isend_int(void *send_comm, void *data, int size, int tag, void *mhandle, void **request) {
  if (size < 0) {
    *request = NULL;
    GDR_WARN("isend: negative size %d", size);
    return ncclInvalidArgument;
  }
  return gdr_core_isend(send_comm, data, (size_t)size, tag, mhandle, NULL, request);
}

ncclResult_t gdr_api_irecv_int(void *recv_comm, int n, void **data, int *sizes, int *tags, void **mhandles,
                               void **request) {
  size_t s[GDR_MAX_RECVS];
  *request = NULL;
  if (n < 1 || n > GDR_MAX_RECVS) {
    GDR_WARN("irecv: %d receives in one group (1..%d)", n, GDR_MAX_RECVS);
    return ncclInternalError;
  }
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0) {
      GDR_WARN("irecv: negative size %d", sizes[i]);
      return ncclInvalidArgument;
    }
    s[i] = (size_t)sizes[i];
  }
  return gdr_core_irecv(recv_comm, n, data, s, tags, mhandles, NULL, request);
}

ncclResult_t gdr_api_test(void *request, int *done, int *sizes) {
  size_t s[GDR_MAX_RECVS];
  int n = 0;
  ncclResult_t res = gdr_core_test(request, done, sizes ? s : NULL, &n);
  if (res == ncclSuccess && *done && sizes) {
    for (int i = 0; i < n; i++) sizes[i] = s[i] > INT_MAX ? INT_MAX : (int)s[i];
  }
  return res;
}

/* ---------------------------------------------------------------------------------------------------- v11+ -- */

ncclResult_t gdr_api_init_ctx(void **ctx, uint64_t comm_id, const ncclNetCommConfig_v11_t *config,
                              ncclDebugLogger_t logger, ncclProfilerCallback_t profiler, int abi) {
  return gdr_core_ctx_init(ctx, comm_id, gdr_api_traffic_class(config), logger, profiler, abi);
}

ncclResult_t gdr_api_set_net_attr(void *ctx, const ncclNetAttr_v11_t *a) {
  struct gdr_net_attr x;
  if (a == NULL) return gdr_core_set_net_attr(ctx, NULL);
  x.send_max_peers = a->sendCommAttr.maxConcurrentPeers;
  x.send_min_peers = a->sendCommAttr.minConcurrentPeers;
  x.send_max_flows = a->sendCommAttr.maxFlowsPerPeer;
  x.send_min_flows = a->sendCommAttr.minFlowsPerPeer;
  x.recv_max_peers = a->recvCommAttr.maxConcurrentPeers;
  x.recv_min_peers = a->recvCommAttr.minConcurrentPeers;
  x.recv_max_flows = a->recvCommAttr.maxFlowsPerPeer;
  x.recv_min_flows = a->recvCommAttr.minFlowsPerPeer;
  x.op = a->op;
  x.algo = a->algo;
  x.proto = a->proto;
  return gdr_core_set_net_attr(ctx, &x);
}
