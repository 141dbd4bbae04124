/* ncclNet v7 (NCCL 2.12-2.19): v6 plus device handles on connect/accept (none offered), getDeviceMr and
 * irecvConsumed (NULL: a host plugin); regMr size still int. */
#include "api.h"

static ncclResult_t v7_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 7, NULL); }
static ncclResult_t v7_listen(int dev, void *handle, void **listen_comm) {
  return gdr_core_listen(NULL, dev, handle, listen_comm);
}
static ncclResult_t v7_connect(int dev, void *handle, void **send_comm, ncclNetDeviceHandle_v7_t **send_dev_comm) {
  gdr_api_no_devcomm(send_dev_comm);
  return gdr_core_connect(NULL, dev, -1, handle, send_comm);
}
static ncclResult_t v7_accept(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v7_t **recv_dev_comm) {
  gdr_api_no_devcomm(recv_dev_comm);
  return gdr_core_accept(listen_comm, recv_comm);
}

GDR_API_EXPORT const ncclNet_v7_t ncclNetPlugin_v7 = {
    .name = "GDR",
    .init = v7_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v7,
    .listen = v7_listen,
    .connect = v7_connect,
    .accept = v7_accept,
    .regMr = gdr_api_reg_mr_int,
    .regMrDmaBuf = gdr_core_reg_mr_dmabuf,
    .deregMr = gdr_core_dereg_mr,
    .isend = gdr_api_isend_int,
    .irecv = gdr_api_irecv_int,
    .iflush = gdr_core_iflush,
    .test = gdr_api_test,
    .closeSend = gdr_core_close_send,
    .closeRecv = gdr_core_close_recv,
    .closeListen = gdr_core_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};
