/* ncclRma v14 (NCCL 2.30.7+ reads ncclRmaPlugin_v14 from the net plugin library after NCCL_RMA_PLUGIN and the GIN
 * library, before its internal IB proxy RMA; NCCL's GIN proxy then runs on it). regMrSym has no ginHandle: the
 * mhandle is what the device code carries; iputSignal says whether the signal is strong (every signal here is
 * applied after its data, so strong and weak are the same). */
#include "api/api.h"
#include "gin/gin.h"

static ncclResult_t v14_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger) {
  return gdr_gin_init(ctx, comm_id, logger, 14);
}
static ncclResult_t v14_props(int dev, ncclNetProperties_v12_t *props) {
  ncclResult_t res = gdr_api_props_v12(dev, props);
  if (res == ncclSuccess) {
    props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY;
    props->netDeviceVersion = 0;
  }
  return res;
}
static ncclResult_t v14_connect(void *ctx, void *handles[], int nranks, int rank, void *listen_comm, void **coll_comm) {
  return gdr_gin_connect(ctx, handles, nranks, rank, 1, 0, listen_comm, coll_comm);
}
static ncclResult_t v14_create_context(void *coll_comm, ncclRmaConfig_v14_t *config, void **rma_ctx) {
  return gdr_gin_create_context(coll_comm, config != NULL ? config->nContexts : 1, 0, rma_ctx);
}
static ncclResult_t v14_reg(void *coll_comm, void *data, size_t size, int type, uint64_t flags, void **mhandle) {
  return gdr_gin_reg_mr_sym(coll_comm, data, size, type, 0, -1, flags, mhandle);
}
static ncclResult_t v14_reg_dmabuf(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                   uint64_t flags, void **mhandle) {
  return gdr_gin_reg_mr_sym(coll_comm, data, size, type, offset, fd, flags, mhandle);
}
static ncclResult_t v14_iput_signal(void *rma_ctx, int context, uint64_t src_off, void *src_mh, size_t size,
                                    uint64_t dst_off, void *dst_mh, uint32_t rank, uint64_t sig_off, void *sig_mh,
                                    uint64_t sig_val, uint32_t sig_op, bool strong, void **request) {
  (void)strong;
  return gdr_gin_iput_signal(rma_ctx, context, src_off, src_mh, size, dst_off, dst_mh, rank, sig_off, sig_mh, sig_val,
                             sig_op, request);
}

GDR_API_EXPORT const ncclRma_v14_t ncclRmaPlugin_v14 = {
    .name = "GDR",
    .init = v14_init,
    .devices = gdr_gin_devices,
    .getProperties = v14_props,
    .listen = gdr_gin_listen,
    .connect = v14_connect,
    .createContext = v14_create_context,
    .regMrSym = v14_reg,
    .regMrSymDmaBuf = v14_reg_dmabuf,
    .deregMrSym = gdr_gin_dereg_mr_sym,
    .destroyContext = gdr_gin_destroy_context,
    .closeColl = gdr_gin_close_coll,
    .closeListen = gdr_gin_close_listen,
    .iput = gdr_gin_iput,
    .iputSignal = v14_iput_signal,
    .iget = gdr_gin_iget,
    .iflush = gdr_gin_iflush,
    .test = gdr_gin_test,
    .rmaProgress = gdr_gin_progress,
    .queryLastError = gdr_gin_query_last_error,
    .finalize = gdr_gin_finalize,
};
