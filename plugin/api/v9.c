/* ncclNet v9 (NCCL 2.24.3+): size_t isend/irecv sizes (test keeps int), forceFlush, vProps and the size limits in
 * the properties, makeVDevice (NIC fusion, up to 4 devices). */
#include "api.h"

static ncclResult_t v9_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 9, NULL); }
static ncclResult_t v9_make_vdevice(int *d, ncclNetVDeviceProps_v9_t *props) {
  return GDR_API_MAKE_VDEVICE(d, props, NCCL_NET_MAX_DEVS_PER_NIC_V9);
}

GDR_API_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = "GDR",
    .init = v9_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v9,
    .listen = gdr_api_listen,
    .connect = gdr_api_connect,
    .accept = gdr_api_accept,
    .regMr = gdr_core_reg_mr,
    .regMrDmaBuf = gdr_core_reg_mr_dmabuf,
    .deregMr = gdr_core_dereg_mr,
    .isend = gdr_api_isend_v9,
    .irecv = gdr_api_irecv_v9,
    .iflush = gdr_core_iflush,
    .test = gdr_api_test,
    .closeSend = gdr_core_close_send,
    .closeRecv = gdr_core_close_recv,
    .closeListen = gdr_core_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = v9_make_vdevice,
};
