/* ncclNet v11 (NCCL 2.28.3+; 2.28 and 2.29 look for it first): init(ctx, commId, config, logger, profiler) once
 * per communicator (reference-counted process state, core_ctx.c), listen/connect take the ctx (its trafficClass is
 * its connections'), finalize(ctx) releases what the communicator holds (the last one stops every thread),
 * setNetAttr, maxMultiRequestSize. */
#include "api.h"

static ncclResult_t v11_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config, ncclDebugLogger_t logger,
                             ncclProfilerCallback_t profiler) {
  return gdr_api_init_ctx(ctx, comm_id, config, logger, profiler, 11);
}
static ncclResult_t v11_make_vdevice(int *d, ncclNetVDeviceProps_v11_t *props) {
  return GDR_API_MAKE_VDEVICE(d, props, NCCL_NET_MAX_DEVS_PER_NIC_V9);
}

GDR_API_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "GDR",
    .init = v11_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v11,
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
    .makeVDevice = v11_make_vdevice,
    .finalize = gdr_core_ctx_finalize,
    .setNetAttr = gdr_api_set_net_attr,
};
