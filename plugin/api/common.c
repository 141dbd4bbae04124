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
#define GDR_API_PROPS_V6(o, p)                                                                                         \
  do {                                                                                                                 \
    (o)->name = (char *)(p)->name;                                                                                     \
    (o)->pciPath = (char *)(p)->pci_path;                                                                              \
    (o)->guid = (p)->guid;                                                                                             \
    (o)->ptrSupport = (p)->ptr_support;                                                                                \
    (o)->speed = (p)->speed;                                                                                           \
    (o)->port = (p)->port;                                                                                             \
    (o)->latency = (p)->latency;                                                                                       \
    (o)->maxComms = (p)->max_comms;                                                                                    \
    (o)->maxRecvs = (p)->max_recvs;                                                                                    \
  } while (0)

/* v8's: v6's, the device type/version (v7) and regIsGlobal. */
#define GDR_API_PROPS_V8(o, p)                                                                                         \
  do {                                                                                                                 \
    GDR_API_PROPS_V6(o, p);                                                                                            \
    (o)->netDeviceType = (p)->net_device_type;                                                                         \
    (o)->netDeviceVersion = (p)->net_device_version;                                                                   \
    (o)->regIsGlobal = (p)->reg_is_global;                                                                             \
  } while (0)

/* v9's (and v10's, v11's, v12's): forceFlush, vProps with at most `max` devices, the size limits. */
#define GDR_API_PROPS_V9(o, p, max)                                                                                    \
  do {                                                                                                                 \
    GDR_API_PROPS_V8(o, p);                                                                                            \
    (o)->forceFlush = (p)->force_flush;                                                                                \
    (o)->vProps.ndevs = (p)->vdev_ndevs < (max) ? (p)->vdev_ndevs : (max);                                             \
    for (int i_ = 0; i_ < (o)->vProps.ndevs; i_++) (o)->vProps.devs[i_] = (p)->vdev_devs[i_];                          \
    (o)->maxP2pBytes = (p)->max_p2p_bytes;                                                                             \
    (o)->maxCollBytes = (p)->max_coll_bytes;                                                                           \
  } while (0)

/* One conversion function per layout: the core's properties, then `fill` (o, p: the layout, the core's). */
#define GDR_API_PROPS_FN(v, fill)                                                                                      \
  ncclResult_t gdr_api_props_##v(int dev, ncclNetProperties_##v##_t *o) {                                              \
    struct gdr_props core;                                                                                             \
    const struct gdr_props *p = &core;                                                                                 \
    ncclResult_t res = gdr_core_get_properties(dev, &core);                                                            \
    if (res != ncclSuccess) return res;                                                                                \
    memset(o, 0, sizeof(*o));                                                                                          \
    fill;                                                                                                              \
    return ncclSuccess;                                                                                                \
  }

GDR_API_PROPS_FN(v6, GDR_API_PROPS_V6(o, p))
GDR_API_PROPS_FN(v7, GDR_API_PROPS_V6(o, p); o->netDeviceType = p->net_device_type;
                 o->netDeviceVersion = p->net_device_version)
GDR_API_PROPS_FN(v8, GDR_API_PROPS_V8(o, p))
GDR_API_PROPS_FN(v9, GDR_API_PROPS_V9(o, p, NCCL_NET_MAX_DEVS_PER_NIC_V9))
GDR_API_PROPS_FN(v10, GDR_API_PROPS_V9(o, p, NCCL_NET_MAX_DEVS_PER_NIC_V9))
GDR_API_PROPS_FN(v11, GDR_API_PROPS_V9(o, p, NCCL_NET_MAX_DEVS_PER_NIC_V9);
                 o->maxMultiRequestSize = p->max_multi_request_size)
GDR_API_PROPS_FN(v12, GDR_API_PROPS_V9(o, p, NCCL_NET_MAX_DEVS_PER_NIC_V12);
                 o->maxMultiRequestSize = p->max_multi_request_size; o->railId = (int16_t)p->rail_id;
                 o->planeId = (int16_t)p->plane_id)

/* ------------------------------------------------------------------------------------ listen/connect/accept -- */

static void no_devcomm(ncclNetDeviceHandle_v8_t **dev_comm) {
  if (dev_comm != NULL) *dev_comm = NULL;
}

ncclResult_t gdr_api_listen(int dev, void *handle, void **listen_comm) {
  return gdr_core_listen(NULL, dev, handle, listen_comm);
}

ncclResult_t gdr_api_connect_v6(int dev, void *handle, void **send_comm) {
  return gdr_core_connect(NULL, dev, -1, handle, send_comm);
}

ncclResult_t gdr_api_accept_v6(void *listen_comm, void **recv_comm) { return gdr_core_accept(listen_comm, recv_comm); }

ncclResult_t gdr_api_connect(int dev, void *handle, void **send_comm, ncclNetDeviceHandle_v8_t **send_dev_comm) {
  no_devcomm(send_dev_comm);
  return gdr_core_connect(NULL, dev, -1, handle, send_comm);
}

ncclResult_t gdr_api_accept(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v8_t **recv_dev_comm) {
  no_devcomm(recv_dev_comm);
  return gdr_core_accept(listen_comm, recv_comm);
}

ncclResult_t gdr_api_connect_config(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **send_comm,
                                    ncclNetDeviceHandle_v8_t **send_dev_comm) {
  no_devcomm(send_dev_comm);
  return gdr_core_connect(NULL, dev, config != NULL ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, handle,
                          send_comm);
}

ncclResult_t gdr_api_connect_ctx(void *ctx, int dev, void *handle, void **send_comm,
                                 ncclNetDeviceHandle_v8_t **send_dev_comm) {
  no_devcomm(send_dev_comm);
  return gdr_core_connect(ctx, dev, -1, handle, send_comm);
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

ncclResult_t gdr_api_isend_v9(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  return gdr_core_isend(send_comm, data, size, tag, mhandle, NULL, request);
}

ncclResult_t gdr_api_irecv_v9(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                              void **request) {
  return gdr_core_irecv(recv_comm, n, data, sizes, tags, mhandles, NULL, request);
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
  return gdr_core_ctx_init(ctx, comm_id, config != NULL ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, logger,
                           profiler, abi);
}

ncclResult_t gdr_api_set_net_attr(void *ctx, ncclNetAttr_v11_t *a) {
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
