/* ncclRma v16 (NCCL 2.31.2 and 2.32.x read ncclRmaPlugin_v16 first, from the net plugin library): v15 (rma_v15.c:
 * the optFlags and isStrongSignal contracts are the same here) with getRmaProperties(collComm) after devices.
 *
 * flushesAllPutsOnAnySignal is false on every collComm, whatever its transport and path. What a signal here does
 * guarantee is per initiator: it is applied at the target after the data of the put it goes with, and after every
 * earlier put of the same initiator on the same context (message path: the target's progress applies a put's data,
 * then its signal, in the order the initiator sent them; one-sided RDMA path: the target applies a WRITE_WITH_IMM
 * signal record once its receive completion is polled, which RC orders after the placement of that QP's earlier
 * WRITEs, or the FETCH_AND_ADD follows the WRITEs on the same QP). A signal from one rank says nothing about puts
 * from another: on the one-sided RDMA path a plain put is placed by the NIC with no event at the target, another
 * QP's WRITEs are not ordered with this QP's completion, and the target never fences GPU memory on a signal; on
 * the message path another rank's put may still be in its receive. So NCCL keeps its per-peer flush, as with its
 * own IB and socket proxies (both report false). */
#include "api/api.h"
#include "gdrnet/rma.h"
#include "gin/gin.h"
#include "log.h"

static ncclResult_t v16_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger) {
  return gdr_gin_init(ctx, comm_id, logger, 16);
}
static ncclResult_t v16_rma_props(void *coll_comm, ncclRmaProperties_v16_t *props) {
  if (coll_comm == NULL || props == NULL) {
    GDR_WARN("RMA getRmaProperties: %s is NULL", coll_comm == NULL ? "collComm" : "the properties");
    return ncclInvalidArgument;
  }
  props->flushesAllPutsOnAnySignal = false;
  return ncclSuccess;
}
static ncclResult_t v16_props(int dev, ncclNetProperties_v12_t *props) {
  ncclResult_t res = gdr_api_props_v12(dev, props);
  if (res == ncclSuccess) {
    props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY;
    props->netDeviceVersion = 0;
  }
  return res;
}
static ncclResult_t v16_connect(void *ctx, void *handles[], int nranks, int rank, void *listen_comm, void **coll_comm) {
  return gdr_gin_connect(ctx, handles, nranks, rank, 1, 0, listen_comm, coll_comm);
}
static ncclResult_t v16_create_context(void *coll_comm, ncclRmaConfig_v16_t *config, void **rma_ctx) {
  return gdr_gin_create_context(coll_comm, config != NULL ? config->nContexts : 1, 0, rma_ctx);
}
static ncclResult_t v16_reg(void *coll_comm, void *data, size_t size, int type, uint64_t flags, void **mhandle) {
  return gdr_gin_reg_mr_sym(coll_comm, data, size, type, 0, -1, flags, mhandle);
}
static ncclResult_t v16_reg_dmabuf(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                   uint64_t flags, void **mhandle) {
  return gdr_gin_reg_mr_sym(coll_comm, data, size, type, offset, fd, flags, mhandle);
}
static ncclResult_t v16_iput(void *rma_ctx, int context, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                             void *dst_mh, uint32_t rank, uint32_t opt_flags, void **request) {
  (void)opt_flags;
  return gdr_gin_iput(rma_ctx, context, src_off, src_mh, size, dst_off, dst_mh, rank, request);
}
static ncclResult_t v16_iput_signal(void *rma_ctx, int context, uint64_t src_off, void *src_mh, size_t size,
                                    uint64_t dst_off, void *dst_mh, uint32_t rank, uint64_t sig_off, void *sig_mh,
                                    uint64_t sig_val, uint32_t sig_op, bool strong, uint32_t opt_flags,
                                    void **request) {
  (void)strong;
  (void)opt_flags;
  return gdr_gin_iput_signal(rma_ctx, context, src_off, src_mh, size, dst_off, dst_mh, rank, sig_off, sig_mh, sig_val,
                             sig_op, request);
}
static ncclResult_t v16_iget(void *rma_ctx, int context, uint64_t remote_off, void *remote_mh, size_t size,
                             uint64_t local_off, void *local_mh, uint32_t rank, uint32_t opt_flags, void **request) {
  (void)opt_flags;
  return gdr_gin_iget(rma_ctx, context, remote_off, remote_mh, size, local_off, local_mh, rank, request);
}

GDR_API_EXPORT const ncclRma_v16_t ncclRmaPlugin_v16 = {
    .name = "GDR",
    .init = v16_init,
    .devices = gdr_gin_devices,
    .getRmaProperties = v16_rma_props,
    .getProperties = v16_props,
    .listen = gdr_gin_listen,
    .connect = v16_connect,
    .createContext = v16_create_context,
    .regMrSym = v16_reg,
    .regMrSymDmaBuf = v16_reg_dmabuf,
    .deregMrSym = gdr_gin_dereg_mr_sym,
    .destroyContext = gdr_gin_destroy_context,
    .closeColl = gdr_gin_close_coll,
    .closeListen = gdr_gin_close_listen,
    .iput = v16_iput,
    .iputSignal = v16_iput_signal,
    .iget = v16_iget,
    .iflush = gdr_gin_iflush,
    .test = gdr_gin_test,
    .rmaProgress = gdr_gin_progress,
    .queryLastError = gdr_gin_query_last_error,
    .finalize = gdr_gin_finalize,
};
