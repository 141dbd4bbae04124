/* ncclGin v12 (NCCL 2.29 tries it before v11): connect takes nConnections and queueDepth, the operations a
 * connectionId (one of the collComm's implicit contexts here). Proxy mode as in v11: createContext NULL. */
#include "api/api.h"
#include "gin/gin.h"

static ncclResult_t v12_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger) {
  return gdr_gin_init(ctx, comm_id, logger, 12);
}
static ncclResult_t v12_props(int dev, ncclNetProperties_v11_t *props) {
  ncclResult_t res = gdr_api_props_v11(dev, props);
  if (res == ncclSuccess) {
    props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY;
    props->netDeviceVersion = 0;
  }
  return res;
}
static ncclResult_t v12_connect(void *ctx, void *handles[], int nranks, int rank, int nconn, int depth,
                                void *listen_comm, void **coll_comm) {
  return gdr_gin_connect(ctx, handles, nranks, rank, nconn, depth, listen_comm, coll_comm);
}
static ncclResult_t v12_reg(void *coll_comm, void *data, size_t size, int type, uint64_t flags, void **mhandle,
                            void **gin_handle) {
  ncclResult_t res = gdr_gin_reg_mr_sym(coll_comm, data, size, type, 0, -1, flags, mhandle);
  if (gin_handle != NULL) *gin_handle = res == ncclSuccess ? *mhandle : NULL;
  return res;
}
static ncclResult_t v12_reg_dmabuf(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                   uint64_t flags, void **mhandle, void **gin_handle) {
  ncclResult_t res = gdr_gin_reg_mr_sym(coll_comm, data, size, type, offset, fd, flags, mhandle);
  if (gin_handle != NULL) *gin_handle = res == ncclSuccess ? *mhandle : NULL;
  return res;
}
static ncclResult_t v12_iput(void *coll_comm, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                             void *dst_mh, uint32_t rank, int conn, void **request) {
  return gdr_gin_iput(coll_comm, conn, src_off, src_mh, size, dst_off, dst_mh, rank, request);
}
static ncclResult_t v12_iput_signal(void *coll_comm, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                                    void *dst_mh, uint32_t rank, uint64_t sig_off, void *sig_mh, uint64_t sig_val,
                                    uint32_t sig_op, int conn, void **request) {
  return gdr_gin_iput_signal(coll_comm, conn, src_off, src_mh, size, dst_off, dst_mh, rank, sig_off, sig_mh, sig_val,
                             sig_op, request);
}

GDR_API_EXPORT const ncclGin_v12_t ncclGinPlugin_v12 = {
    .name = "GDR",
    .init = v12_init,
    .devices = gdr_gin_devices,
    .getProperties = v12_props,
    .listen = gdr_gin_listen,
    .connect = v12_connect,
    .createContext = NULL,
    .regMrSym = v12_reg,
    .regMrSymDmaBuf = v12_reg_dmabuf,
    .deregMrSym = gdr_gin_dereg_mr_sym,
    .destroyContext = gdr_gin_destroy_context,
    .closeColl = gdr_gin_close_coll,
    .closeListen = gdr_gin_close_listen,
    .iput = v12_iput,
    .iputSignal = v12_iput_signal,
    .test = gdr_gin_test,
    .ginProgress = gdr_gin_progress,
    .queryLastError = gdr_gin_query_last_error,
    .finalize = gdr_gin_finalize,
};
