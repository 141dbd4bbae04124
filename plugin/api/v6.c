/* ncclNet v6 (NCCL 2.12-2.19): int sizes, no device handles, 17 entries. */
#include "api.h"

static ncclResult_t v6_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 6, NULL); }

GDR_API_EXPORT const ncclNet_v6_t ncclNetPlugin_v6 = {
    .name = "GDR",
    .init = v6_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v6,
    .listen = gdr_api_listen,
    .connect = gdr_api_connect_v6,
    .accept = gdr_api_accept_v6,
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
