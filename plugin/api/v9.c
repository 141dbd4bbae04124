/* ncclNet v9 (NCCL 2.24.3+): size_t isend/irecv sizes (test keeps int), forceFlush, vProps and the size limits in
 * the properties, makeVDevice (NIC fusion, up to 4 devices). */
#include "api.h"

static ncclResult_t v9_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 9, NULL); }
static ncclResult_t v9_listen(int dev, void *handle, void **listen_comm) {
  return gdr_core_listen(NULL, dev, handle, listen_comm);
}
static ncclResult_t v9_connect(int dev, void *handle, void **send_comm, ncclNetDeviceHandle_v9_t **send_dev_comm) {
  gdr_api_no_devcomm(send_dev_comm);
  return gdr_core_connect(NULL, dev, -1, handle, send_comm);
}
static ncclResult_t v9_accept(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v9_t **recv_dev_comm) {
  gdr_api_no_devcomm(recv_dev_comm);
  return gdr_core_accept(listen_comm, recv_comm);
}
static ncclResult_t v9_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  return gdr_core_isend(send_comm, data, size, tag, mhandle, NULL, request);
}
static ncclResult_t v9_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                             void **request) {
  return gdr_core_irecv(recv_comm, n, data, sizes, tags, mhandles, NULL, request);
}
static ncclResult_t v9_make_vdevice(int *d, ncclNetVDeviceProps_v9_t *props) {
  return GDR_API_MAKE_VDEVICE(d, props, NCCL_NET_MAX_DEVS_PER_NIC_V9);
}

GDR_API_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = "GDR",
    .init = v9_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v9,
    .listen = v9_listen,
    .connect = v9_connect,
    .accept = v9_accept,
    .regMr = gdr_core_reg_mr,
    .regMrDmaBuf = gdr_core_reg_mr_dmabuf,
    .deregMr = gdr_core_dereg_mr,
    .isend = v9_isend,
    .irecv = v9_irecv,
    .iflush = gdr_core_iflush,
    .test = gdr_api_test,
    .closeSend = gdr_core_close_send,
    .closeRecv = gdr_core_close_recv,
    .closeListen = gdr_core_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = v9_make_vdevice,
};
