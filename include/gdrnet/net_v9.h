/* The NCCL network-plugin ABI, version 9 (NCCL 2.24.3+), as libnccl-net-gdr sees it.
 * v8 plus forceFlush (after regIsGlobal), vProps {ndevs; devs[4]}, maxP2pBytes, maxCollBytes; isend/irecv sizes
 * are size_t (iflush/test keep int); makeVDevice.
 *
 * Typed from NCCL's net plugin headers (NVIDIA/nccl v2.19..v2.30). Field order is the ABI: never reorder. The
 * _Static_asserts pin the x86_64 sizes and every field offset. */
#ifndef GDRNET_NET_V9_H
#define GDRNET_NET_V9_H

#include "gdrnet/net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} ncclNetVDeviceProps_v9_t;

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
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm, ncclNetDeviceHandle_v9_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v9_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclNetProperties_v9_t) == 104, "ncclNetProperties_v9_t is 104 bytes");
_Static_assert(offsetof(ncclNetProperties_v9_t, name) == 0, "ncclNetProperties_v9_t.name");
_Static_assert(offsetof(ncclNetProperties_v9_t, pciPath) == 8, "ncclNetProperties_v9_t.pciPath");
_Static_assert(offsetof(ncclNetProperties_v9_t, guid) == 16, "ncclNetProperties_v9_t.guid");
_Static_assert(offsetof(ncclNetProperties_v9_t, ptrSupport) == 24, "ncclNetProperties_v9_t.ptrSupport");
_Static_assert(offsetof(ncclNetProperties_v9_t, regIsGlobal) == 28, "ncclNetProperties_v9_t.regIsGlobal");
_Static_assert(offsetof(ncclNetProperties_v9_t, forceFlush) == 32, "ncclNetProperties_v9_t.forceFlush");
_Static_assert(offsetof(ncclNetProperties_v9_t, speed) == 36, "ncclNetProperties_v9_t.speed");
_Static_assert(offsetof(ncclNetProperties_v9_t, port) == 40, "ncclNetProperties_v9_t.port");
_Static_assert(offsetof(ncclNetProperties_v9_t, latency) == 44, "ncclNetProperties_v9_t.latency");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxComms) == 48, "ncclNetProperties_v9_t.maxComms");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxRecvs) == 52, "ncclNetProperties_v9_t.maxRecvs");
_Static_assert(offsetof(ncclNetProperties_v9_t, netDeviceType) == 56, "ncclNetProperties_v9_t.netDeviceType");
_Static_assert(offsetof(ncclNetProperties_v9_t, netDeviceVersion) == 60, "ncclNetProperties_v9_t.netDeviceVersion");
_Static_assert(offsetof(ncclNetProperties_v9_t, vProps) == 64, "ncclNetProperties_v9_t.vProps");
_Static_assert(offsetof(ncclNetProperties_v9_t, vProps.ndevs) == 64, "ncclNetProperties_v9_t.vProps.ndevs");
_Static_assert(offsetof(ncclNetProperties_v9_t, vProps.devs) == 68, "ncclNetProperties_v9_t.vProps.devs");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "ncclNetProperties_v9_t.maxP2pBytes");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxCollBytes) == 96, "ncclNetProperties_v9_t.maxCollBytes");
_Static_assert(sizeof(ncclNetVDeviceProps_v9_t) == 20, "v9 vProps is 5 ints");

_Static_assert(sizeof(ncclNet_v9_t) == 160, "ncclNet_v9_t: 20 pointers");
_Static_assert(offsetof(ncclNet_v9_t, name) == 0 * 8, "ncclNet_v9_t.name");
_Static_assert(offsetof(ncclNet_v9_t, init) == 1 * 8, "ncclNet_v9_t.init");
_Static_assert(offsetof(ncclNet_v9_t, devices) == 2 * 8, "ncclNet_v9_t.devices");
_Static_assert(offsetof(ncclNet_v9_t, getProperties) == 3 * 8, "ncclNet_v9_t.getProperties");
_Static_assert(offsetof(ncclNet_v9_t, listen) == 4 * 8, "ncclNet_v9_t.listen");
_Static_assert(offsetof(ncclNet_v9_t, connect) == 5 * 8, "ncclNet_v9_t.connect");
_Static_assert(offsetof(ncclNet_v9_t, accept) == 6 * 8, "ncclNet_v9_t.accept");
_Static_assert(offsetof(ncclNet_v9_t, regMr) == 7 * 8, "ncclNet_v9_t.regMr");
_Static_assert(offsetof(ncclNet_v9_t, regMrDmaBuf) == 8 * 8, "ncclNet_v9_t.regMrDmaBuf");
_Static_assert(offsetof(ncclNet_v9_t, deregMr) == 9 * 8, "ncclNet_v9_t.deregMr");
_Static_assert(offsetof(ncclNet_v9_t, isend) == 10 * 8, "ncclNet_v9_t.isend");
_Static_assert(offsetof(ncclNet_v9_t, irecv) == 11 * 8, "ncclNet_v9_t.irecv");
_Static_assert(offsetof(ncclNet_v9_t, iflush) == 12 * 8, "ncclNet_v9_t.iflush");
_Static_assert(offsetof(ncclNet_v9_t, test) == 13 * 8, "ncclNet_v9_t.test");
_Static_assert(offsetof(ncclNet_v9_t, closeSend) == 14 * 8, "ncclNet_v9_t.closeSend");
_Static_assert(offsetof(ncclNet_v9_t, closeRecv) == 15 * 8, "ncclNet_v9_t.closeRecv");
_Static_assert(offsetof(ncclNet_v9_t, closeListen) == 16 * 8, "ncclNet_v9_t.closeListen");
_Static_assert(offsetof(ncclNet_v9_t, getDeviceMr) == 17 * 8, "ncclNet_v9_t.getDeviceMr");
_Static_assert(offsetof(ncclNet_v9_t, irecvConsumed) == 18 * 8, "ncclNet_v9_t.irecvConsumed");
_Static_assert(offsetof(ncclNet_v9_t, makeVDevice) == 19 * 8, "ncclNet_v9_t.makeVDevice");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_NET_V9_H */
