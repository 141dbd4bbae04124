/* NCCL's RMA tables v15 and v16 as libnccl-net-gdr exports them from the net plugin library (the older GIN/RMA
 * tables are in gdrnet/gin.h). Typed from NVIDIA/nccl src/include/plugin/rma/rma_v15.h (NCCL 2.31.2) and
 * rma_v16.h (2.31.2, 2.32.x); NCCL's RMA loader tries ncclRmaPlugin_v16, then v15, v14, v13.
 *
 *   v15  the v14 table with one more argument, optFlags (a uint32_t before the request), on iput, iputSignal and
 *        iget. Its bits are NCCL_RMA_OPT_FLAG_*; the config is v14's.
 *   v16  the v15 table with getRmaProperties(collComm, props) inserted after devices (every later entry moves one
 *        slot down); props.flushesAllPutsOnAnySignal says whether any signal arriving makes every put already
 *        received on the collComm visible, from every peer.
 *
 * rma_v17 (and gin_v15) exist in NCCL's tree but no NCCL release reads them, and they changed between commits: not
 * typed here. Field order is the ABI: never reorder. The _Static_asserts pin the x86_64/aarch64 sizes and offsets. */
#ifndef GDRNET_RMA_H
#define GDRNET_RMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gdrnet/gin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* optFlags of iput/iputSignal/iget (NCCL's enum ncclRmaOptFlags) */
#define NCCL_RMA_OPT_FLAGS_DEFAULT 0u
/* the caller permits the backend to batch this request with the ones that follow (defer the doorbell); a hint that
 * never changes the operation's data or ordering */
#define NCCL_RMA_OPT_FLAG_AGGREGATE_REQUESTS (1u << 0)

typedef ncclRmaConfig_v14_t ncclRmaConfig_v15_t;
typedef ncclRmaConfig_v15_t ncclRmaConfig_v16_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, void *listenComm, void **collComm);
  ncclResult_t (*createContext)(void *collComm, ncclRmaConfig_v15_t *config, void **rmaCtx);
  ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type, uint64_t mrFlags, void **mhandle);
  ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset, int fd,
                                 uint64_t mrFlags, void **mhandle);
  ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
  ncclResult_t (*destroyContext)(void *rmaCtx);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*iput)(void *rmaCtx, int context, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                       void *dstMhandle, uint32_t rank, uint32_t optFlags, void **request);
  ncclResult_t (*iputSignal)(void *rmaCtx, int context, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                             void *dstMhandle, uint32_t rank, uint64_t signalOff, void *signalMhandle,
                             uint64_t signalValue, uint32_t signalOp, bool isStrongSignal, uint32_t optFlags,
                             void **request);
  ncclResult_t (*iget)(void *rmaCtx, int context, uint64_t remoteOff, void *remoteMhandle, size_t size,
                       uint64_t localOff, void *localMhandle, uint32_t rank, uint32_t optFlags, void **request);
  ncclResult_t (*iflush)(void *rmaCtx, int context, void *mhandle, uint32_t rank, void **request);
  ncclResult_t (*test)(void *collComm, void *request, int *done);
  ncclResult_t (*rmaProgress)(void *rmaCtx);
  ncclResult_t (*queryLastError)(void *rmaCtx, bool *hasError);
  ncclResult_t (*finalize)(void *ctx);
} ncclRma_v15_t;

typedef struct {
  bool flushesAllPutsOnAnySignal;
} ncclRmaProperties_v16_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getRmaProperties)(void *collComm, ncclRmaProperties_v16_t *rmaProps);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, void *listenComm, void **collComm);
  ncclResult_t (*createContext)(void *collComm, ncclRmaConfig_v16_t *config, void **rmaCtx);
  ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type, uint64_t mrFlags, void **mhandle);
  ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset, int fd,
                                 uint64_t mrFlags, void **mhandle);
  ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
  ncclResult_t (*destroyContext)(void *rmaCtx);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*iput)(void *rmaCtx, int context, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                       void *dstMhandle, uint32_t rank, uint32_t optFlags, void **request);
  ncclResult_t (*iputSignal)(void *rmaCtx, int context, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                             void *dstMhandle, uint32_t rank, uint64_t signalOff, void *signalMhandle,
                             uint64_t signalValue, uint32_t signalOp, bool isStrongSignal, uint32_t optFlags,
                             void **request);
  ncclResult_t (*iget)(void *rmaCtx, int context, uint64_t remoteOff, void *remoteMhandle, size_t size,
                       uint64_t localOff, void *localMhandle, uint32_t rank, uint32_t optFlags, void **request);
  ncclResult_t (*iflush)(void *rmaCtx, int context, void *mhandle, uint32_t rank, void **request);
  ncclResult_t (*test)(void *collComm, void *request, int *done);
  ncclResult_t (*rmaProgress)(void *rmaCtx);
  ncclResult_t (*queryLastError)(void *rmaCtx, bool *hasError);
  ncclResult_t (*finalize)(void *ctx);
} ncclRma_v16_t;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclRmaConfig_v15_t) == 12, "ncclRmaConfig_v15_t: v14's 3 ints");
_Static_assert(sizeof(ncclRma_v15_t) == 21 * 8, "ncclRma_v15_t: 21 pointers");
_Static_assert(offsetof(ncclRma_v15_t, getProperties) == 3 * 8, "ncclRma_v15_t.getProperties");
_Static_assert(offsetof(ncclRma_v15_t, createContext) == 6 * 8, "ncclRma_v15_t.createContext");
_Static_assert(offsetof(ncclRma_v15_t, iput) == 13 * 8, "ncclRma_v15_t.iput");
_Static_assert(offsetof(ncclRma_v15_t, iputSignal) == 14 * 8, "ncclRma_v15_t.iputSignal");
_Static_assert(offsetof(ncclRma_v15_t, iget) == 15 * 8, "ncclRma_v15_t.iget");
_Static_assert(offsetof(ncclRma_v15_t, iflush) == 16 * 8, "ncclRma_v15_t.iflush");
_Static_assert(offsetof(ncclRma_v15_t, test) == 17 * 8, "ncclRma_v15_t.test");
_Static_assert(offsetof(ncclRma_v15_t, rmaProgress) == 18 * 8, "ncclRma_v15_t.rmaProgress");
_Static_assert(offsetof(ncclRma_v15_t, finalize) == 20 * 8, "ncclRma_v15_t.finalize");
_Static_assert(sizeof(ncclRmaProperties_v16_t) == 1, "ncclRmaProperties_v16_t: one bool");
_Static_assert(sizeof(ncclRma_v16_t) == 22 * 8, "ncclRma_v16_t: 22 pointers");
_Static_assert(offsetof(ncclRma_v16_t, devices) == 2 * 8, "ncclRma_v16_t.devices");
_Static_assert(offsetof(ncclRma_v16_t, getRmaProperties) == 3 * 8, "ncclRma_v16_t.getRmaProperties");
_Static_assert(offsetof(ncclRma_v16_t, getProperties) == 4 * 8, "ncclRma_v16_t.getProperties");
_Static_assert(offsetof(ncclRma_v16_t, createContext) == 7 * 8, "ncclRma_v16_t.createContext");
_Static_assert(offsetof(ncclRma_v16_t, iput) == 14 * 8, "ncclRma_v16_t.iput");
_Static_assert(offsetof(ncclRma_v16_t, iputSignal) == 15 * 8, "ncclRma_v16_t.iputSignal");
_Static_assert(offsetof(ncclRma_v16_t, iget) == 16 * 8, "ncclRma_v16_t.iget");
_Static_assert(offsetof(ncclRma_v16_t, iflush) == 17 * 8, "ncclRma_v16_t.iflush");
_Static_assert(offsetof(ncclRma_v16_t, test) == 18 * 8, "ncclRma_v16_t.test");
_Static_assert(offsetof(ncclRma_v16_t, rmaProgress) == 19 * 8, "ncclRma_v16_t.rmaProgress");
_Static_assert(offsetof(ncclRma_v16_t, finalize) == 21 * 8, "ncclRma_v16_t.finalize");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_RMA_H */
