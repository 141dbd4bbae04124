/* ncclNet v7 (NCCL 2.12-2.19): v6 plus device handles on connect/accept (none offered), getDeviceMr and
 * irecvConsumed (NULL: a host plugin); regMr size still int. */
#include "api.h"

static ncclResult_t v7_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 7, NULL); }

GDR_API_EXPORT const ncclNet_v7_t ncclNetPlugin_v7 = {
    .name = "GDR",
    .init = v7_init,
    .devices = gdr_core_devices,
    .getProperties = gdr_api_props_v7,
    .listen = gdr_api_listen,
    .connect = gdr_api_connect,
    .accept = gdr_api_accept,
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
