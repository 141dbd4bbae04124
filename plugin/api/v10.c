/* ncclNet v10 (NCCL 2.26.2+): v9 plus the profiler callback (process-wide, from init), the profiler handles of
 * isend/irecv, and connect's config: its trafficClass is that connection's. */
#include "api.h"

static ncclResult_t v10_init(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  return gdr_core_init_table(logger, 10, profiler);
}
static ncclResult_t v10_make_vdevice(int *d, ncclNetVDeviceProps_v10_t *props) {
  return GDR_API_MAKE_VDEVICE(d, props, NCCL_NET_MAX_DEVS_PER_NIC_V9);
}

GDR_API_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "GDR",
    .init = v10_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v10,
    .listen = gdr_api_listen,
    .connect = gdr_api_connect_config,
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
    .makeVDevice = v10_make_vdevice,
};
