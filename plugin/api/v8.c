/* ncclNet v8 (NCCL 2.20.3+; every NCCL from 2.20 to 2.30 loads it): v7 with regIsGlobal and a size_t regMr. */
#include "api.h"

static ncclResult_t v8_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 8, NULL); }

GDR_API_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "GDR",
    .init = v8_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v8,
    .listen = gdr_api_listen,
    .connect = gdr_api_connect,
    .accept = gdr_api_accept,
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
