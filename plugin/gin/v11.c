/* ncclGin v11 (NCCL 2.28.7..2.28.x reads ncclGinPlugin_v11 from the net plugin library; 2.29 and 2.30.3..2.30.6
 * still accept it): a GIN_PROXY backend. NCCL's proxy thread calls iput/iputSignal/test/ginProgress on the collComm
 * (createContext is not used in proxy mode: NULL, as NCCL IB's proxy table has it). */
#include "api/api.h"
#include "gin/gin.h"

static ncclResult_t v11_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger) {
  return gdr_gin_init(ctx, comm_id, logger, 11);
}
static ncclResult_t v11_props(int dev, ncclNetProperties_v11_t *props) {
  ncclResult_t res = gdr_api_props_v11(dev, props);
  if (res == ncclSuccess) {
    props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY;
    props->netDeviceVersion = 0;
  }
  return res;
}
static ncclResult_t v11_connect(void *ctx, void *handles[], int nranks, int rank, void *listen_comm, void **coll_comm) {
  return gdr_gin_connect(ctx, handles, nranks, rank, 1, 0, listen_comm, coll_comm);
}
static ncclResult_t v11_reg(void *coll_comm, void *data, size_t size, int type, uint64_t flags, void **mhandle,
                            void **gin_handle) {
  ncclResult_t res = gdr_gin_reg_mr_sym(coll_comm, data, size, type, 0, -1, flags, mhandle);
  if (gin_handle != NULL) *gin_handle = res == ncclSuccess ? *mhandle : NULL;
  return res;
}
static ncclResult_t v11_reg_dmabuf(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                   uint64_t flags, void **mhandle, void **gin_handle) {
  ncclResult_t res = gdr_gin_reg_mr_sym(coll_comm, data, size, type, offset, fd, flags, mhandle);
  if (gin_handle != NULL) *gin_handle = res == ncclSuccess ? *mhandle : NULL;
  return res;
}
static ncclResult_t v11_iput(void *coll_comm, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                             void *dst_mh, uint32_t rank, void **request) {
  return gdr_gin_iput(coll_comm, 0, src_off, src_mh, size, dst_off, dst_mh, rank, request);
}
static ncclResult_t v11_iput_signal(void *coll_comm, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                                    void *dst_mh, uint32_t rank, uint64_t sig_off, void *sig_mh, uint64_t sig_val,
                                    uint32_t sig_op, void **request) {
  return gdr_gin_iput_signal(coll_comm, 0, src_off, src_mh, size, dst_off, dst_mh, rank, sig_off, sig_mh, sig_val,
                             sig_op, request);
}

GDR_API_EXPORT const ncclGin_v11_t ncclGinPlugin_v11 = {
    .name = "GDR",
    .init = v11_init,
    .devices = gdr_gin_devices,
    .getProperties = v11_props,
    .listen = gdr_gin_listen,
    .connect = v11_connect,
    .createContext = NULL,
    .regMrSym = v11_reg,
    .regMrSymDmaBuf = v11_reg_dmabuf,
    .deregMrSym = gdr_gin_dereg_mr_sym,
    .destroyContext = gdr_gin_destroy_context,
    .closeColl = gdr_gin_close_coll,
    .closeListen = gdr_gin_close_listen,
    .iput = v11_iput,
    .iputSignal = v11_iput_signal,
    .test = gdr_gin_test,
    .ginProgress = gdr_gin_progress,
    .queryLastError = gdr_gin_query_last_error,
    .finalize = gdr_gin_finalize,
};
