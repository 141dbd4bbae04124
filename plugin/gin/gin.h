/* GPU-initiated networking: the version-neutral one-sided core behind NCCL's proxy-type GIN and RMA tables
 * (plugin/gin/v11.c, v12.c, v13.c, rma_v14.c are the thin adapters, as plugin/api/ is for ncclNet).
 *
 * Objects NCCL sees:
 *   instance  init(ctx) .. finalize(ctx): one v11+ net-core context (core_ctx.c) per call.
 *   listen    the net core's listen comm (gdr_core_listen): the handle NCCL all-gathers is the ncclNet one.
 *   collComm  connect(handles[], nranks, rank): a full mesh of the net core's send and receive comms, one pair per
 *             rank (this rank included, as NCCL IB's GIN connects to itself), so the chosen transport (RDMA or TCP)
 *             and its RDMA -> TCP fallback (GDRNET_FALLBACK) carry the one-sided traffic.
 *             closeColl with nothing in flight tells the peers (GIN_OP_BYE, to peers that announced GIN_CAP_BYE):
 *             for them that rank is gone (operations towards it: ncclRemoteError), their comm stays healthy. A peer
 *             lost without it (a crash, a protocol error) fails the comm, and GIN_OP_ABORT fails the others'.
 *   context   createContext (v13/v14) or the collComm's implicit one (v11/v12: ops on the collComm): a set of
 *             nContexts queues, each at most `depth` operations in flight per target rank (one more is refused:
 *             *request = NULL, "try again").
 *   mhandle   regMrSym: the window registered on every one of the collComm's comms; it is also the ginHandle the
 *             device code carries, as NCCL IB's proxy has it. Windows get the same id on every rank (registration
 *             is collective, in the same order everywhere) and every rank's size is exchanged.
 *   request   iput/iputSignal/iget/iflush; test(collComm, request) frees it when done.
 *
 * The one-sided path (tcp_os.c) is host-staged messages over those comms, in order per target: a header (with
 * up to GDR_GIN_INLINE bytes inline), then the data straight into the target's window. The target's progress
 * (ginProgress/rmaProgress/test, which never block) applies a put, then its signal (INC/ADD on an 8-byte word of a
 * window), so a signal is never seen before its data; a get is a request and a reply; a flush is acknowledged by
 * the target once everything sent before it has been applied. */
#ifndef GDRNET_GIN_GIN_H
#define GDRNET_GIN_GIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gdrnet/gin.h"

/* instance */
ncclResult_t gdr_gin_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger, int abi);
ncclResult_t gdr_gin_finalize(void *ctx);
ncclResult_t gdr_gin_devices(int *ndev);
/* props: the net core's, netDeviceType GIN_PROXY */
ncclResult_t gdr_gin_listen(void *ctx, int dev, void *handle, void **listen_comm);
ncclResult_t gdr_gin_close_listen(void *listen_comm);
/* nconn: v12's nConnections (contexts of the implicit context; <= 0: 1); depth: per target rank per context
 * (<= 0: NCCL_NET_MAX_REQUESTS x the device's maxRecvs, NCCL's own GIN proxy queue size). */
ncclResult_t gdr_gin_connect(void *ctx, void *handles[], int nranks, int rank, int nconn, int depth, void *listen_comm,
                             void **coll_comm);
ncclResult_t gdr_gin_close_coll(void *coll_comm);
ncclResult_t gdr_gin_create_context(void *coll_comm, int ncontexts, int depth, void **gin_ctx);
ncclResult_t gdr_gin_destroy_context(void *gin_ctx);
ncclResult_t gdr_gin_reg_mr_sym(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                uint64_t mr_flags, void **mhandle);
ncclResult_t gdr_gin_dereg_mr_sym(void *coll_comm, void *mhandle);

/* operations: target is a collComm (v11/v12, context = connectionId) or a context (v13/v14) */
ncclResult_t gdr_gin_iput(void *target, int context, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                          void *dst_mh, uint32_t rank, void **request);
ncclResult_t gdr_gin_iput_signal(void *target, int context, uint64_t src_off, void *src_mh, size_t size,
                                 uint64_t dst_off, void *dst_mh, uint32_t rank, uint64_t sig_off, void *sig_mh,
                                 uint64_t sig_val, uint32_t sig_op, void **request);
ncclResult_t gdr_gin_iget(void *target, int context, uint64_t remote_off, void *remote_mh, size_t size,
                          uint64_t local_off, void *local_mh, uint32_t rank, void **request);
ncclResult_t gdr_gin_iflush(void *target, int context, void *mh, uint32_t rank, void **request);
ncclResult_t gdr_gin_test(void *coll_comm, void *request, int *done);
ncclResult_t gdr_gin_progress(void *target);
ncclResult_t gdr_gin_query_last_error(void *target, bool *has_error);

#endif /* GDRNET_GIN_GIN_H */
