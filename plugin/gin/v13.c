/* ncclGin v13 (NCCL 2.30.0..2.30.6 try it first) and the v13 RMA table, the same type (rma_v13.h: typedef
 * ncclGin_v13_t ncclRma_v13_t), which 2.30.7's RMA loader reads as ncclRmaPlugin_v13 (or ncclGinPlugin_v13).
 * createContext(config) makes a context of config->nContexts queues, config->queueDepth deep; the operations take
 * it and a context index; iget and iflush are new. */
#include "api/api.h"
#include "gin/gin.h"

static ncclResult_t v13_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger) {
  return gdr_gin_init(ctx, comm_id, logger, 13);
}
static ncclResult_t v13_props(int dev, ncclNetProperties_v12_t *props) {
  ncclResult_t res = gdr_api_props_v12(dev, props);
  if (res == ncclSuccess) {
    props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY;
    props->netDeviceVersion = 0;
  }
  return res;
}
static ncclResult_t v13_connect(void *ctx, void *handles[], int nranks, int rank, void *listen_comm, void **coll_comm) {
  return gdr_gin_connect(ctx, handles, nranks, rank, 1, 0, listen_comm, coll_comm);
}
static ncclResult_t v13_create_context(void *coll_comm, ncclGinConfig_v13_t *config, void **gin_ctx,
                                       ncclNetDeviceHandle_v11_t **dev_handle) {
  if (dev_handle != NULL) *dev_handle = NULL; /* a proxy backend: nothing for the device */
  return gdr_gin_create_context(coll_comm, config != NULL ? config->nContexts : 1,
                                config != NULL ? config->queueDepth : 0, gin_ctx);
}
static ncclResult_t v13_reg(void *coll_comm, void *data, size_t size, int type, uint64_t flags, void **mhandle,
                            void **gin_handle) {
  ncclResult_t res = gdr_gin_reg_mr_sym(coll_comm, data, size, type, 0, -1, flags, mhandle);
  if (gin_handle != NULL) *gin_handle = res == ncclSuccess ? *mhandle : NULL;
  return res;
}
static ncclResult_t v13_reg_dmabuf(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                   uint64_t flags, void **mhandle, void **gin_handle) {
  ncclResult_t res = gdr_gin_reg_mr_sym(coll_comm, data, size, type, offset, fd, flags, mhandle);
  if (gin_handle != NULL) *gin_handle = res == ncclSuccess ? *mhandle : NULL;
  return res;
}

#define GDR_GIN_V13_TABLE                                                                                              \
  {                                                                                                                    \
    .name = "GDR", .init = v13_init, .devices = gdr_gin_devices, .getProperties = v13_props, .listen = gdr_gin_listen, \
    .connect = v13_connect, .createContext = v13_create_context, .regMrSym = v13_reg,                                  \
    .regMrSymDmaBuf = v13_reg_dmabuf, .deregMrSym = gdr_gin_dereg_mr_sym, .destroyContext = gdr_gin_destroy_context,   \
    .closeColl = gdr_gin_close_coll, .closeListen = gdr_gin_close_listen, .iput = gdr_gin_iput,                        \
    .iputSignal = gdr_gin_iput_signal, .iget = gdr_gin_iget, .iflush = gdr_gin_iflush, .test = gdr_gin_test,           \
    .ginProgress = gdr_gin_progress, .queryLastError = gdr_gin_query_last_error, .finalize = gdr_gin_finalize,         \
  }

GDR_API_EXPORT const ncclGin_v13_t ncclGinPlugin_v13 = GDR_GIN_V13_TABLE;
GDR_API_EXPORT const ncclRma_v13_t ncclRmaPlugin_v13 = GDR_GIN_V13_TABLE;
