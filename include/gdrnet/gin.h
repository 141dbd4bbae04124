/* NCCL's GPU-initiated networking tables as libnccl-net-gdr exports them from the net plugin library: the proxy-type
 * GIN tables ncclGin_v11 (NCCL 2.28.7+, src/include/plugin/net/net_v11.h at v2.28.9-1), ncclGin_v12 (2.29,
 * plugin/gin/gin_v12.h at v2.29.7-1), ncclGin_v13 (2.30.0..2.30.6, plugin/gin/gin_v13.h at v2.30.7-1; also the v13
 * RMA table, plugin/rma/rma_v13.h: typedef ncclGin_v13_t ncclRma_v13_t) and the RMA table ncclRma_v14 (2.30.7+,
 * plugin/rma/rma_v14.h). gin_v14 exists in the headers but NCCL 2.30.7 skips an external GIN that reports
 * GIN_PROXY, so a proxy backend is the RMA table there. RMA v15 and v16 (NCCL 2.31.2+) are in gdrnet/rma.h; RMA
 * v17 and GIN v15 are read by no NCCL release: not typed, not exported.
 *
 * Field order is the ABI: never reorder. The _Static_asserts pin the x86_64 sizes and every field offset. */
#ifndef GDRNET_GIN_H
#define GDRNET_GIN_H

#include <stdbool.h>

#include "gdrnet/net_common.h"
#include "gdrnet/net_v11.h"
#include "gdrnet/net_v12.h"

#ifdef __cplusplus
extern "C" {
#endif

/* props.netDeviceType of a GIN backend (include/nccl_device/net_device.h) */
#define NCCL_NET_DEVICE_GIN_PROXY 2
#define NCCL_NET_DEVICE_GIN_GDAKI 3
/* iputSignal's signalOp */
#define NCCL_NET_SIGNAL_OP_INC 1
#define NCCL_NET_SIGNAL_OP_ADD 2
/* regMrSym's mrFlags: strong ordering (NCCL asks it of the signal window) */
#define NCCL_NET_MR_FLAG_FORCE_SO (1 << 0)

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, void *listenComm, void **collComm);
  ncclResult_t (*createContext)(void *collComm, int nSignals, int nCounters, void **ginCtx,
                                ncclNetDeviceHandle_v11_t **devHandle);
  ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type, uint64_t mrFlags, void **mhandle,
                           void **ginHandle);
  ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset, int fd,
                                 uint64_t mrFlags, void **mhandle, void **ginHandle);
  ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
  ncclResult_t (*destroyContext)(void *ginCtx);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*iput)(void *collComm, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                       void *dstMhandle, uint32_t rank, void **request);
  ncclResult_t (*iputSignal)(void *collComm, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                             void *dstMhandle, uint32_t rank, uint64_t signalOff, void *signalMhandle,
                             uint64_t signalValue, uint32_t signalOp, void **request);
  ncclResult_t (*test)(void *collComm, void *request, int *done);
  ncclResult_t (*ginProgress)(void *collComm);
  ncclResult_t (*queryLastError)(void *ginCtx, bool *hasError);
  ncclResult_t (*finalize)(void *ctx);
} ncclGin_v11_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, int nConnections, int queueDepth,
                          void *listenComm, void **collComm);
  ncclResult_t (*createContext)(void *collComm, int nSignals, int nCounters, int nContexts, void **ginCtx,
                                ncclNetDeviceHandle_v11_t **devHandle);
  ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type, uint64_t mrFlags, void **mhandle,
                           void **ginHandle);
  ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset, int fd,
                                 uint64_t mrFlags, void **mhandle, void **ginHandle);
  ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
  ncclResult_t (*destroyContext)(void *ginCtx);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*iput)(void *collComm, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                       void *dstMhandle, uint32_t rank, int connectionId, void **request);
  ncclResult_t (*iputSignal)(void *collComm, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                             void *dstMhandle, uint32_t rank, uint64_t signalOff, void *signalMhandle,
                             uint64_t signalValue, uint32_t signalOp, int connectionId, void **request);
  ncclResult_t (*test)(void *collComm, void *request, int *done);
  ncclResult_t (*ginProgress)(void *collComm);
  ncclResult_t (*queryLastError)(void *ginCtx, bool *hasError);
  ncclResult_t (*finalize)(void *ctx);
} ncclGin_v12_t;

typedef struct {
  int nSignals;
  int nCounters;
  int nContexts;
  int queueDepth;
  int trafficClass;
} ncclGinConfig_v13_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, void *listenComm, void **collComm);
  ncclResult_t (*createContext)(void *collComm, ncclGinConfig_v13_t *config, void **ginCtx,
                                ncclNetDeviceHandle_v11_t **devHandle);
  ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type, uint64_t mrFlags, void **mhandle,
                           void **ginHandle);
  ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset, int fd,
                                 uint64_t mrFlags, void **mhandle, void **ginHandle);
  ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
  ncclResult_t (*destroyContext)(void *ginCtx);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*iput)(void *ginCtx, int context, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                       void *dstMhandle, uint32_t rank, void **request);
  ncclResult_t (*iputSignal)(void *ginCtx, int context, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                             void *dstMhandle, uint32_t rank, uint64_t signalOff, void *signalMhandle,
                             uint64_t signalValue, uint32_t signalOp, void **request);
  ncclResult_t (*iget)(void *ginCtx, int context, uint64_t remoteOff, void *remoteMhandle, size_t size,
                       uint64_t localOff, void *localMhandle, uint32_t rank, void **request);
  ncclResult_t (*iflush)(void *ginCtx, int context, void *mhandle, uint32_t rank, void **request);
  ncclResult_t (*test)(void *collComm, void *request, int *done);
  ncclResult_t (*ginProgress)(void *ginCtx);
  ncclResult_t (*queryLastError)(void *ginCtx, bool *hasError);
  ncclResult_t (*finalize)(void *ctx);
} ncclGin_v13_t;
typedef ncclGin_v13_t ncclRma_v13_t;

typedef struct {
  int nContexts;
  int trafficClass;
  int rankStride;
} ncclRmaConfig_v14_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, void *listenComm, void **collComm);
  ncclResult_t (*createContext)(void *collComm, ncclRmaConfig_v14_t *config, void **rmaCtx);
  ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type, uint64_t mrFlags, void **mhandle);
  ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset, int fd,
                                 uint64_t mrFlags, void **mhandle);
  ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
  ncclResult_t (*destroyContext)(void *rmaCtx);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*iput)(void *rmaCtx, int context, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                       void *dstMhandle, uint32_t rank, void **request);
  ncclResult_t (*iputSignal)(void *rmaCtx, int context, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
                             void *dstMhandle, uint32_t rank, uint64_t signalOff, void *signalMhandle,
                             uint64_t signalValue, uint32_t signalOp, bool isStrongSignal, void **request);
  ncclResult_t (*iget)(void *rmaCtx, int context, uint64_t remoteOff, void *remoteMhandle, size_t size,
                       uint64_t localOff, void *localMhandle, uint32_t rank, void **request);
  ncclResult_t (*iflush)(void *rmaCtx, int context, void *mhandle, uint32_t rank, void **request);
  ncclResult_t (*test)(void *collComm, void *request, int *done);
  ncclResult_t (*rmaProgress)(void *rmaCtx);
  ncclResult_t (*queryLastError)(void *rmaCtx, bool *hasError);
  ncclResult_t (*finalize)(void *ctx);
} ncclRma_v14_t;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclGin_v11_t) == 19 * 8, "ncclGin_v11_t: 19 pointers");
_Static_assert(offsetof(ncclGin_v11_t, createContext) == 6 * 8, "ncclGin_v11_t.createContext");
_Static_assert(offsetof(ncclGin_v11_t, closeListen) == 12 * 8, "ncclGin_v11_t.closeListen");
_Static_assert(offsetof(ncclGin_v11_t, iput) == 13 * 8, "ncclGin_v11_t.iput");
_Static_assert(offsetof(ncclGin_v11_t, test) == 15 * 8, "ncclGin_v11_t.test");
_Static_assert(offsetof(ncclGin_v11_t, ginProgress) == 16 * 8, "ncclGin_v11_t.ginProgress");
_Static_assert(offsetof(ncclGin_v11_t, finalize) == 18 * 8, "ncclGin_v11_t.finalize");
_Static_assert(sizeof(ncclGin_v12_t) == 19 * 8, "ncclGin_v12_t: 19 pointers");
_Static_assert(offsetof(ncclGin_v12_t, iput) == 13 * 8, "ncclGin_v12_t.iput");
_Static_assert(offsetof(ncclGin_v12_t, finalize) == 18 * 8, "ncclGin_v12_t.finalize");
_Static_assert(sizeof(ncclGinConfig_v13_t) == 20, "ncclGinConfig_v13_t: 5 ints");
_Static_assert(sizeof(ncclGin_v13_t) == 21 * 8, "ncclGin_v13_t: 21 pointers");
_Static_assert(offsetof(ncclGin_v13_t, iput) == 13 * 8, "ncclGin_v13_t.iput");
_Static_assert(offsetof(ncclGin_v13_t, iget) == 15 * 8, "ncclGin_v13_t.iget");
_Static_assert(offsetof(ncclGin_v13_t, iflush) == 16 * 8, "ncclGin_v13_t.iflush");
_Static_assert(offsetof(ncclGin_v13_t, test) == 17 * 8, "ncclGin_v13_t.test");
_Static_assert(offsetof(ncclGin_v13_t, finalize) == 20 * 8, "ncclGin_v13_t.finalize");
_Static_assert(sizeof(ncclRmaConfig_v14_t) == 12, "ncclRmaConfig_v14_t: 3 ints");
_Static_assert(sizeof(ncclRma_v14_t) == 21 * 8, "ncclRma_v14_t: 21 pointers");
_Static_assert(offsetof(ncclRma_v14_t, createContext) == 6 * 8, "ncclRma_v14_t.createContext");
_Static_assert(offsetof(ncclRma_v14_t, iput) == 13 * 8, "ncclRma_v14_t.iput");
_Static_assert(offsetof(ncclRma_v14_t, iget) == 15 * 8, "ncclRma_v14_t.iget");
_Static_assert(offsetof(ncclRma_v14_t, rmaProgress) == 18 * 8, "ncclRma_v14_t.rmaProgress");
_Static_assert(offsetof(ncclRma_v14_t, finalize) == 20 * 8, "ncclRma_v14_t.finalize");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_GIN_H */
