/* ncclNet v10 (NCCL 2.26.2+): v9 plus the profiler callback (process-wide, from init), the profiler handles of
 * isend/irecv, and connect's config: its trafficClass is that connection's. */
#include "api.h"

static ncclResult_t v10_init(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  return gdr_core_init_table(logger, 10, profiler);
}
static ncclResult_t v10_listen(int dev, void *handle, void **listen_comm) {
  return gdr_core_listen(NULL, dev, handle, listen_comm);
}
static ncclResult_t v10_connect(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **send_comm,
                                ncclNetDeviceHandle_v10_t **send_dev_comm) {
  gdr_api_no_devcomm(send_dev_comm);
  return gdr_core_connect(NULL, dev, gdr_api_traffic_class(config), handle, send_comm);
}
static ncclResult_t v10_accept(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v10_t **recv_dev_comm) {
  gdr_api_no_devcomm(recv_dev_comm);
  return gdr_core_accept(listen_comm, recv_comm);
}
static ncclResult_t v10_make_vdevice(int *d, ncclNetVDeviceProps_v10_t *props) {
  return GDR_API_MAKE_VDEVICE(d, props, NCCL_NET_MAX_DEVS_PER_NIC_V9);
}

GDR_API_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "GDR",
    .init = v10_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v10,
    .listen = v10_listen,
    .connect = v10_connect,
    .accept = v10_accept,
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
