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

/* ---- listen/connect/accept, as the versions that share a signature call them ----
 * A host plugin offloads nothing: a device handle NCCL asks for (v7+) is set to NULL. The device handle type is
 * the same in v7..v12, and so is v10..v12's config and v11/v12's attributes. */
ncclResult_t gdr_api_listen(int dev, void *handle, void **listen_comm);   /* v6..v10 */
ncclResult_t gdr_api_connect_v6(int dev, void *handle, void **send_comm); /* v6 */
ncclResult_t gdr_api_accept_v6(void *listen_comm, void **recv_comm);      /* v6 */
ncclResult_t gdr_api_connect(int dev, void *handle, void **send_comm,     /* v7, v8, v9 */
                             ncclNetDeviceHandle_v8_t **send_dev_comm);
ncclResult_t gdr_api_accept(void *listen_comm, void **recv_comm, /* v7..v12 */
                            ncclNetDeviceHandle_v8_t **recv_dev_comm);
ncclResult_t gdr_api_connect_config(int dev, ncclNetCommConfig_v10_t *config, void *handle, /* v10 */
                                    void **send_comm, ncclNetDeviceHandle_v8_t **send_dev_comm);
ncclResult_t gdr_api_connect_ctx(void *ctx, int dev, void *handle, void **send_comm, /* v11, v12 */
                                 ncclNetDeviceHandle_v8_t **send_dev_comm);

/* ---- v9: size_t sizes, no profiler handles ---- */
ncclResult_t gdr_api_isend_v9(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request);
ncclResult_t gdr_api_irecv_v9(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                              void **request);

/* ---- v9+: fused devices: makeVDevice(d, {ndevs; devs[max]}) ---- */
#define GDR_API_MAKE_VDEVICE(d, vprops, max)                                                                           \
  ((vprops) == NULL ? gdr_core_make_vdevice((d), 0, NULL, (max))                                                       \
                    : gdr_core_make_vdevice((d), (vprops)->ndevs, (vprops)->devs, (max)))

/* ---- v11+: per-communicator init (abi: the table, for the log) and setNetAttr ---- */
ncclResult_t gdr_api_init_ctx(void **ctx, uint64_t comm_id, const ncclNetCommConfig_v11_t *config,
                              ncclDebugLogger_t logger, ncclProfilerCallback_t profiler, int abi);
ncclResult_t gdr_api_set_net_attr(void *ctx, ncclNetAttr_v11_t *attr);

#endif /* GDRNET_API_H */
