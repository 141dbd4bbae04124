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
#include "gin/rma15.h"
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
GDR_API_EXPORT const ncclRma_v16_t ncclRmaPlugin_v16 = {
    .name = "GDR",
    .init = v16_init,
    .devices = gdr_gin_devices,
    .getRmaProperties = v16_rma_props,
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
