/* ncclRma v15 (NCCL 2.31.2 and 2.32.x read ncclRmaPlugin_v16, then this one, then v14 and v13, from the net plugin
 * library): v14 with optFlags on iput, iputSignal and iget.
 *
 * optFlags contract (the same in rma_v16.c): every bit is accepted and none changes what an operation does, as in
 * NCCL's own IB and socket RMA proxies.
 *   NCCL_RMA_OPT_FLAG_AGGREGATE_REQUESTS  permission to defer the request's posting and batch it with the ones that
 *       follow; a hint that must not change data or ordering. The core posts every operation when it is called
 *       (the message path's send is queued in order per target, the one-sided RDMA path's WR is posted at once), which
 *       is what the default asks and is always allowed under this flag: accepted, ignored.
 *   any other bit  no NCCL release defines one; a future hint may come with an older table: accepted, ignored (a
 *       flag that changed semantics would come with a new table version, not a new bit in this one).
 * isStrongSignal is accepted and ignored as in v14: every signal here is applied at the target after the data of
 * its own put (message path: the target's progress writes the data, then applies the signal; one-sided RDMA path:
 * the target applies the signal record it reads from the WRITE_WITH_IMM after the WRITE's data, or the
 * FETCH_AND_ADD follows the WRITE on the same QP), so strong and weak are the same. */
#include "api/api.h"
#include "gdrnet/rma.h"
#include "gin/gin.h"
#include "gin/rma15.h"

static ncclResult_t v15_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger) {
  return gdr_gin_init(ctx, comm_id, logger, 15);
}
ncclResult_t gdr_rma15_props(int dev, ncclNetProperties_v12_t *props) {
  ncclResult_t res = gdr_api_props_v12(dev, props);
  if (res == ncclSuccess) {
    props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY;
    props->netDeviceVersion = 0;
  }
  return res;
}
ncclResult_t gdr_rma15_connect(void *ctx, void *handles[], int nranks, int rank, void *listen_comm, void **coll_comm) {
  return gdr_gin_connect(ctx, handles, nranks, rank, 1, 0, listen_comm, coll_comm);
}
ncclResult_t gdr_rma15_create_context(void *coll_comm, ncclRmaConfig_v15_t *config, void **rma_ctx) {
  return gdr_gin_create_context(coll_comm, config != NULL ? config->nContexts : 1, 0, rma_ctx);
}
ncclResult_t gdr_rma15_reg(void *coll_comm, void *data, size_t size, int type, uint64_t flags, void **mhandle) {
  return gdr_gin_reg_mr_sym(coll_comm, data, size, type, 0, -1, flags, mhandle);
}
ncclResult_t gdr_rma15_reg_dmabuf(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                  uint64_t flags, void **mhandle) {
  return gdr_gin_reg_mr_sym(coll_comm, data, size, type, offset, fd, flags, mhandle);
}
ncclResult_t gdr_rma15_iput(void *rma_ctx, int context, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                            void *dst_mh, uint32_t rank, uint32_t opt_flags, void **request) {
  (void)opt_flags;
  return gdr_gin_iput(rma_ctx, context, src_off, src_mh, size, dst_off, dst_mh, rank, request);
}
ncclResult_t gdr_rma15_iput_signal(void *rma_ctx, int context, uint64_t src_off, void *src_mh, size_t size,
                                   uint64_t dst_off, void *dst_mh, uint32_t rank, uint64_t sig_off, void *sig_mh,
                                   uint64_t sig_val, uint32_t sig_op, bool strong, uint32_t opt_flags, void **request) {
  (void)strong;
  (void)opt_flags;
  return gdr_gin_iput_signal(rma_ctx, context, src_off, src_mh, size, dst_off, dst_mh, rank, sig_off, sig_mh, sig_val,
                             sig_op, request);
}
ncclResult_t gdr_rma15_iget(void *rma_ctx, int context, uint64_t remote_off, void *remote_mh, size_t size,
                            uint64_t local_off, void *local_mh, uint32_t rank, uint32_t opt_flags, void **request) {
  (void)opt_flags;
  return gdr_gin_iget(rma_ctx, context, remote_off, remote_mh, size, local_off, local_mh, rank, request);
}

GDR_API_EXPORT const ncclRma_v15_t ncclRmaPlugin_v15 = {
    .name = "GDR",
    .init = v15_init,
    .devices = gdr_gin_devices,
    .getProperties = gdr_rma15_props,
    .listen = gdr_gin_listen,
    .connect = gdr_rma15_connect,
    .createContext = gdr_rma15_create_context,
    .regMrSym = gdr_rma15_reg,
    .regMrSymDmaBuf = gdr_rma15_reg_dmabuf,
    .deregMrSym = gdr_gin_dereg_mr_sym,
    .destroyContext = gdr_gin_destroy_context,
    .closeColl = gdr_gin_close_coll,
    .closeListen = gdr_gin_close_listen,
    .iput = gdr_rma15_iput,
    .iputSignal = gdr_rma15_iput_signal,
    .iget = gdr_rma15_iget,
    .iflush = gdr_gin_iflush,
    .test = gdr_gin_test,
    .rmaProgress = gdr_gin_progress,
    .queryLastError = gdr_gin_query_last_error,
    .finalize = gdr_gin_finalize,
};
