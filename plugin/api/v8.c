/* ncclNet v8 (NCCL 2.20.3+; every NCCL from 2.20 to 2.30 loads it): v7 with regIsGlobal and a size_t regMr. */
#include "api.h"

static ncclResult_t v8_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 8, NULL); }
static ncclResult_t v8_listen(int dev, void *handle, void **listen_comm) {
  return gdr_core_listen(NULL, dev, handle, listen_comm);
}
static ncclResult_t v8_connect(int dev, void *handle, void **send_comm, ncclNetDeviceHandle_v8_t **send_dev_comm) {
  gdr_api_no_devcomm(send_dev_comm);
  return gdr_core_connect(NULL, dev, -1, handle, send_comm);
}
static ncclResult_t v8_accept(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v8_t **recv_dev_comm) {
  gdr_api_no_devcomm(recv_dev_comm);
  return gdr_core_accept(listen_comm, recv_comm);
}

GDR_API_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "GDR",
    .init = v8_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v8,
    .listen = v8_listen,
    .connect = v8_connect,
    .accept = v8_accept,
    .regMr = gdr_core_reg_mr,
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
