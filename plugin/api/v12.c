/* ncclNet v12 (NCCL 2.30.3+, which looks for it first): the v11 table with fused devices of up to 8 NICs and
 * railId/planeId in the properties (-1: unknown). */
#include "api.h"

static ncclResult_t v12_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config, ncclDebugLogger_t logger,
                             ncclProfilerCallback_t profiler) {
  return gdr_api_init_ctx(ctx, comm_id, config, logger, profiler, 12);
}
static ncclResult_t v12_make_vdevice(int *d, ncclNetVDeviceProps_v12_t *props) {
  return GDR_API_MAKE_VDEVICE(d, props, NCCL_NET_MAX_DEVS_PER_NIC_V12);
}

GDR_API_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "GDR",
    .init = v12_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v12,
    .listen = gdr_core_listen,
    .connect = gdr_api_connect_ctx,
    .accept = gdr_api_accept,
    .regMr = gdr_core_reg_mr,
    .regMrDmaBuf = gdr_core_reg_mr_dmabuf,
    .deregMr = gdr_core_dereg_mr,
    .isend = gdr_core_isend,
    .irecv = gdr_core_irecv,
    .iflush = gdr_core_iflush,
    .test = gdr_api_test,
    .closeSend = gdr_core_close_send,
    .closeRecv = gdr_core_close_recv,
    .closeListen = gdr_core_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = v12_make_vdevice,
    .finalize = gdr_core_ctx_finalize,
    .setNetAttr = gdr_api_set_net_attr,
};
