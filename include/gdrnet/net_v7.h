/* The NCCL network-plugin ABI, version 7, as libnccl-net-gdr sees it (NCCL 2.12-2.19 look for v6 or v7).
 * v6 plus netDeviceType/netDeviceVersion (after maxRecvs), device handles on connect/accept, getDeviceMr and
 * irecvConsumed. regMr size is still int.
 *
 * Typed from NCCL's net plugin headers (NVIDIA/nccl v2.19..v2.30). Field order is the ABI: never reorder. The
 * _Static_asserts pin the x86_64 sizes and every field offset. */
#ifndef GDRNET_NET_V7_H
#define GDRNET_NET_V7_H

#include "gdrnet/net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v7_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v7_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm, ncclNetDeviceHandle_v7_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v7_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, int size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v7_t;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclNetProperties_v7_t) == 56, "ncclNetProperties_v7_t is 56 bytes");
_Static_assert(offsetof(ncclNetProperties_v7_t, name) == 0, "ncclNetProperties_v7_t.name");
_Static_assert(offsetof(ncclNetProperties_v7_t, pciPath) == 8, "ncclNetProperties_v7_t.pciPath");
_Static_assert(offsetof(ncclNetProperties_v7_t, guid) == 16, "ncclNetProperties_v7_t.guid");
_Static_assert(offsetof(ncclNetProperties_v7_t, ptrSupport) == 24, "ncclNetProperties_v7_t.ptrSupport");
_Static_assert(offsetof(ncclNetProperties_v7_t, speed) == 28, "ncclNetProperties_v7_t.speed");
_Static_assert(offsetof(ncclNetProperties_v7_t, port) == 32, "ncclNetProperties_v7_t.port");
_Static_assert(offsetof(ncclNetProperties_v7_t, latency) == 36, "ncclNetProperties_v7_t.latency");
_Static_assert(offsetof(ncclNetProperties_v7_t, maxComms) == 40, "ncclNetProperties_v7_t.maxComms");
_Static_assert(offsetof(ncclNetProperties_v7_t, maxRecvs) == 44, "ncclNetProperties_v7_t.maxRecvs");
_Static_assert(offsetof(ncclNetProperties_v7_t, netDeviceType) == 48, "ncclNetProperties_v7_t.netDeviceType");
_Static_assert(offsetof(ncclNetProperties_v7_t, netDeviceVersion) == 52, "ncclNetProperties_v7_t.netDeviceVersion");

_Static_assert(sizeof(ncclNet_v7_t) == 152, "ncclNet_v7_t: 19 pointers");
_Static_assert(offsetof(ncclNet_v7_t, name) == 0 * 8, "ncclNet_v7_t.name");
_Static_assert(offsetof(ncclNet_v7_t, init) == 1 * 8, "ncclNet_v7_t.init");
_Static_assert(offsetof(ncclNet_v7_t, devices) == 2 * 8, "ncclNet_v7_t.devices");
_Static_assert(offsetof(ncclNet_v7_t, getProperties) == 3 * 8, "ncclNet_v7_t.getProperties");
_Static_assert(offsetof(ncclNet_v7_t, listen) == 4 * 8, "ncclNet_v7_t.listen");
_Static_assert(offsetof(ncclNet_v7_t, connect) == 5 * 8, "ncclNet_v7_t.connect");
_Static_assert(offsetof(ncclNet_v7_t, accept) == 6 * 8, "ncclNet_v7_t.accept");
_Static_assert(offsetof(ncclNet_v7_t, regMr) == 7 * 8, "ncclNet_v7_t.regMr");
_Static_assert(offsetof(ncclNet_v7_t, regMrDmaBuf) == 8 * 8, "ncclNet_v7_t.regMrDmaBuf");
_Static_assert(offsetof(ncclNet_v7_t, deregMr) == 9 * 8, "ncclNet_v7_t.deregMr");
_Static_assert(offsetof(ncclNet_v7_t, isend) == 10 * 8, "ncclNet_v7_t.isend");
_Static_assert(offsetof(ncclNet_v7_t, irecv) == 11 * 8, "ncclNet_v7_t.irecv");
_Static_assert(offsetof(ncclNet_v7_t, iflush) == 12 * 8, "ncclNet_v7_t.iflush");
_Static_assert(offsetof(ncclNet_v7_t, test) == 13 * 8, "ncclNet_v7_t.test");
_Static_assert(offsetof(ncclNet_v7_t, closeSend) == 14 * 8, "ncclNet_v7_t.closeSend");
_Static_assert(offsetof(ncclNet_v7_t, closeRecv) == 15 * 8, "ncclNet_v7_t.closeRecv");
_Static_assert(offsetof(ncclNet_v7_t, closeListen) == 16 * 8, "ncclNet_v7_t.closeListen");
_Static_assert(offsetof(ncclNet_v7_t, getDeviceMr) == 17 * 8, "ncclNet_v7_t.getDeviceMr");
_Static_assert(offsetof(ncclNet_v7_t, irecvConsumed) == 18 * 8, "ncclNet_v7_t.irecvConsumed");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_NET_V7_H */
