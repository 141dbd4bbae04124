/* The ABI adapters: one file per exported table (v6.c .. v12.c), each converting its version's argument and
 * property types and calling the core (core.h). What two versions share is here, implemented in common.c:
 * property conversion per layout, the int-size entry points of v6..v8, test's int sizes, fused devices,
 * per-communicator init and setNetAttr. See docs/abi.md for which NCCL loads which table. */
#ifndef GDRNET_API_H
#define GDRNET_API_H

#include "core.h"
#include "gdrnet/net.h"

/* Exported tables are the only visible symbols (the version script has the last word). */
#define GDR_API_EXPORT __attribute__((visibility("default")))

/* ---- properties: the core's, in each layout (v9 and v10 share one, v11 adds a field, v12 two more) ---- */
ncclResult_t gdr_api_props_v6(int dev, ncclNetProperties_v6_t *props);
ncclResult_t gdr_api_props_v7(int dev, ncclNetProperties_v7_t *props);
ncclResult_t gdr_api_props_v8(int dev, ncclNetProperties_v8_t *props);
ncclResult_t gdr_api_props_v9(int dev, ncclNetProperties_v9_t *props);
ncclResult_t gdr_api_props_v10(int dev, ncclNetProperties_v10_t *props);
ncclResult_t gdr_api_props_v11(int dev, ncclNetProperties_v11_t *props);
ncclResult_t gdr_api_props_v12(int dev, ncclNetProperties_v12_t *props);

/* ---- v6..v8: int sizes (negative ones refused with a WARN) ---- */
ncclResult_t gdr_api_reg_mr_int(void *comm, void *data, int size, int type, void **mhandle); /* v6, v7 */
ncclResult_t gdr_api_isend_int(void *send_comm, void *data, int size, int tag, void *mhandle, void **request);
ncclResult_t gdr_api_irecv_int(void *recv_comm, int n, void **data, int *sizes, int *tags, void **mhandles,
                               void **request);

/* ---- every version: test's sizes are int (a size above INT_MAX reads INT_MAX: only v9+ can receive one) ---- */
ncclResult_t gdr_api_test(void *request, int *done, int *sizes);

/* ---- device handles (v7+): a host plugin offloads nothing ---- */
static inline void gdr_api_no_devcomm(ncclNetDeviceHandle_v8_t **dev_comm) {
  if (dev_comm != NULL) *dev_comm = NULL;
}

/* ---- v9+: fused devices: makeVDevice(d, {ndevs; devs[max]}) ---- */
#define GDR_API_MAKE_VDEVICE(d, vprops, max)                                                                         \
  ((vprops) == NULL ? gdr_core_make_vdevice((d), 0, NULL, (max))                                                     \
                    : gdr_core_make_vdevice((d), (vprops)->ndevs, (vprops)->devs, (max)))

/* ---- v10+: the connect config's traffic class (config may be NULL) ---- */
static inline int gdr_api_traffic_class(const ncclNetCommConfig_v10_t *config) {
  return config != NULL ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
}

/* ---- v11+: per-communicator init and setNetAttr ---- */
ncclResult_t gdr_api_init_ctx(void **ctx, uint64_t comm_id, const ncclNetCommConfig_v11_t *config,
                              ncclDebugLogger_t logger, ncclProfilerCallback_t profiler, int abi);
ncclResult_t gdr_api_set_net_attr(void *ctx, const ncclNetAttr_v11_t *attr);

#endif /* GDRNET_API_H */
