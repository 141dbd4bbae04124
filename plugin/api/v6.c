/* ncclNet v6 (NCCL 2.12-2.19): int sizes, no device handles, 17 entries. */
#include "api.h"

static ncclResult_t v6_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 6, NULL); }
static ncclResult_t v6_listen(int dev, void *handle, void **listen_comm) {
  return gdr_core_listen(NULL, dev, handle, listen_comm);
}
static ncclResult_t v6_connect(int dev, void *handle, void **send_comm) {
  return gdr_core_connect(NULL, dev, -1, handle, send_comm);
}

GDR_API_EXPORT const ncclNet_v6_t ncclNetPlugin_v6 = {
    .name = "GDR",
    .init = v6_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v6,
    .listen = v6_listen,
    .connect = v6_connect,
    .accept = gdr_core_accept,
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
};
