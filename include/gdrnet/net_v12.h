/* The NCCL network-plugin ABI, version 12 (NCCL 2.30.3+), as libnccl-net-gdr sees it.
 * v11 with vProps {ndevs; devs[8]} and railId/planeId (int16_t, -1 unknown) at the end of the properties; the
 * function table is v11's.
 *
 * Typed from NCCL's net plugin headers (NVIDIA/nccl v2.19..v2.30). Field order is the ABI: never reorder. The
 * _Static_asserts pin the x86_64 sizes and every field offset. */
#ifndef GDRNET_NET_V12_H
#define GDRNET_NET_V12_H

#include "gdrnet/net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v12_t *config, ncclDebugLogger_t logFunction,
                       ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm, ncclNetDeviceHandle_v12_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v12_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle, void *phandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles, void **phandles,
                        void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v12_t *props);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v12_t *netAttr);
} ncclNet_v12_t;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclNetProperties_v12_t) == 128, "ncclNetProperties_v12_t is 128 bytes");
_Static_assert(offsetof(ncclNetProperties_v12_t, name) == 0, "ncclNetProperties_v12_t.name");
_Static_assert(offsetof(ncclNetProperties_v12_t, pciPath) == 8, "ncclNetProperties_v12_t.pciPath");
_Static_assert(offsetof(ncclNetProperties_v12_t, guid) == 16, "ncclNetProperties_v12_t.guid");
_Static_assert(offsetof(ncclNetProperties_v12_t, ptrSupport) == 24, "ncclNetProperties_v12_t.ptrSupport");
_Static_assert(offsetof(ncclNetProperties_v12_t, regIsGlobal) == 28, "ncclNetProperties_v12_t.regIsGlobal");
_Static_assert(offsetof(ncclNetProperties_v12_t, forceFlush) == 32, "ncclNetProperties_v12_t.forceFlush");
_Static_assert(offsetof(ncclNetProperties_v12_t, speed) == 36, "ncclNetProperties_v12_t.speed");
_Static_assert(offsetof(ncclNetProperties_v12_t, port) == 40, "ncclNetProperties_v12_t.port");
_Static_assert(offsetof(ncclNetProperties_v12_t, latency) == 44, "ncclNetProperties_v12_t.latency");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxComms) == 48, "ncclNetProperties_v12_t.maxComms");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxRecvs) == 52, "ncclNetProperties_v12_t.maxRecvs");
_Static_assert(offsetof(ncclNetProperties_v12_t, netDeviceType) == 56, "ncclNetProperties_v12_t.netDeviceType");
_Static_assert(offsetof(ncclNetProperties_v12_t, netDeviceVersion) == 60, "ncclNetProperties_v12_t.netDeviceVersion");
_Static_assert(offsetof(ncclNetProperties_v12_t, vProps) == 64, "ncclNetProperties_v12_t.vProps");
_Static_assert(offsetof(ncclNetProperties_v12_t, vProps.ndevs) == 64, "ncclNetProperties_v12_t.vProps.ndevs");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "ncclNetProperties_v12_t.maxP2pBytes");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxCollBytes) == 112, "ncclNetProperties_v12_t.maxCollBytes");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120, "maxMultiRequestSize");
_Static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124, "ncclNetProperties_v12_t.railId");
_Static_assert(offsetof(ncclNetProperties_v12_t, planeId) == 126, "ncclNetProperties_v12_t.planeId");
_Static_assert(offsetof(ncclNetProperties_v12_t, vProps.devs) == 68, "ncclNetProperties_v12_t.vProps.devs");
_Static_assert(sizeof(ncclNetVDeviceProps_v12_t) == 36, "v12 vProps is 9 ints");

_Static_assert(sizeof(ncclNet_v12_t) == 176, "ncclNet_v12_t: 22 pointers");
_Static_assert(offsetof(ncclNet_v12_t, name) == 0 * 8, "ncclNet_v12_t.name");
_Static_assert(offsetof(ncclNet_v12_t, init) == 1 * 8, "ncclNet_v12_t.init");
_Static_assert(offsetof(ncclNet_v12_t, devices) == 2 * 8, "ncclNet_v12_t.devices");
_Static_assert(offsetof(ncclNet_v12_t, getProperties) == 3 * 8, "ncclNet_v12_t.getProperties");
_Static_assert(offsetof(ncclNet_v12_t, listen) == 4 * 8, "ncclNet_v12_t.listen");
_Static_assert(offsetof(ncclNet_v12_t, connect) == 5 * 8, "ncclNet_v12_t.connect");
_Static_assert(offsetof(ncclNet_v12_t, accept) == 6 * 8, "ncclNet_v12_t.accept");
_Static_assert(offsetof(ncclNet_v12_t, regMr) == 7 * 8, "ncclNet_v12_t.regMr");
_Static_assert(offsetof(ncclNet_v12_t, regMrDmaBuf) == 8 * 8, "ncclNet_v12_t.regMrDmaBuf");
_Static_assert(offsetof(ncclNet_v12_t, deregMr) == 9 * 8, "ncclNet_v12_t.deregMr");
_Static_assert(offsetof(ncclNet_v12_t, isend) == 10 * 8, "ncclNet_v12_t.isend");
_Static_assert(offsetof(ncclNet_v12_t, irecv) == 11 * 8, "ncclNet_v12_t.irecv");
_Static_assert(offsetof(ncclNet_v12_t, iflush) == 12 * 8, "ncclNet_v12_t.iflush");
_Static_assert(offsetof(ncclNet_v12_t, test) == 13 * 8, "ncclNet_v12_t.test");
_Static_assert(offsetof(ncclNet_v12_t, closeSend) == 14 * 8, "ncclNet_v12_t.closeSend");
_Static_assert(offsetof(ncclNet_v12_t, closeRecv) == 15 * 8, "ncclNet_v12_t.closeRecv");
_Static_assert(offsetof(ncclNet_v12_t, closeListen) == 16 * 8, "ncclNet_v12_t.closeListen");
_Static_assert(offsetof(ncclNet_v12_t, getDeviceMr) == 17 * 8, "ncclNet_v12_t.getDeviceMr");
_Static_assert(offsetof(ncclNet_v12_t, irecvConsumed) == 18 * 8, "ncclNet_v12_t.irecvConsumed");
_Static_assert(offsetof(ncclNet_v12_t, makeVDevice) == 19 * 8, "ncclNet_v12_t.makeVDevice");
_Static_assert(offsetof(ncclNet_v12_t, finalize) == 20 * 8, "ncclNet_v12_t.finalize");
_Static_assert(offsetof(ncclNet_v12_t, setNetAttr) == 21 * 8, "ncclNet_v12_t.setNetAttr");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_NET_V12_H */
