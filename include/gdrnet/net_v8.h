/* The NCCL network-plugin ABI, version 8 (NCCL 2.20.3+), as libnccl-net-gdr sees it. The types every version
 * shares are in net_common.h.
 *
 * Typed from NCCL's net plugin headers (NVIDIA/nccl v2.19..v2.30). Field order is the ABI: never reorder.
 * The _Static_asserts below pin the x86_64 sizes and every field offset, so a mistake is a build
 * error rather than a corrupted NCCL. */
#ifndef GDRNET_NET_V8_H
#define GDRNET_NET_V8_H

#include "gdrnet/net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm, ncclNetDeviceHandle_v8_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v8_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
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
} ncclNet_v8_t;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "v8 properties are 64 bytes");
_Static_assert(offsetof(ncclNetProperties_v8_t, name) == 0, "props.name");
_Static_assert(offsetof(ncclNetProperties_v8_t, pciPath) == 8, "props.pciPath");
_Static_assert(offsetof(ncclNetProperties_v8_t, guid) == 16, "props.guid");
_Static_assert(offsetof(ncclNetProperties_v8_t, ptrSupport) == 24, "props.ptrSupport");
_Static_assert(offsetof(ncclNetProperties_v8_t, regIsGlobal) == 28, "props.regIsGlobal");
_Static_assert(offsetof(ncclNetProperties_v8_t, speed) == 32, "props.speed");
_Static_assert(offsetof(ncclNetProperties_v8_t, port) == 36, "props.port");
_Static_assert(offsetof(ncclNetProperties_v8_t, latency) == 40, "props.latency");
_Static_assert(offsetof(ncclNetProperties_v8_t, maxComms) == 44, "props.maxComms");
_Static_assert(offsetof(ncclNetProperties_v8_t, maxRecvs) == 48, "props.maxRecvs");
_Static_assert(offsetof(ncclNetProperties_v8_t, netDeviceType) == 52, "props.netDeviceType");
_Static_assert(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56, "props.netDeviceVersion");

_Static_assert(sizeof(ncclNet_v8_t) == 152, "v8 function table is 19 pointers");
_Static_assert(offsetof(ncclNet_v8_t, name) == 0 * 8, "table.name");
_Static_assert(offsetof(ncclNet_v8_t, init) == 1 * 8, "table.init");
_Static_assert(offsetof(ncclNet_v8_t, devices) == 2 * 8, "table.devices");
_Static_assert(offsetof(ncclNet_v8_t, getProperties) == 3 * 8, "table.getProperties");
_Static_assert(offsetof(ncclNet_v8_t, listen) == 4 * 8, "table.listen");
_Static_assert(offsetof(ncclNet_v8_t, connect) == 5 * 8, "table.connect");
_Static_assert(offsetof(ncclNet_v8_t, accept) == 6 * 8, "table.accept");
_Static_assert(offsetof(ncclNet_v8_t, regMr) == 7 * 8, "table.regMr");
_Static_assert(offsetof(ncclNet_v8_t, regMrDmaBuf) == 8 * 8, "table.regMrDmaBuf");
_Static_assert(offsetof(ncclNet_v8_t, deregMr) == 9 * 8, "table.deregMr");
_Static_assert(offsetof(ncclNet_v8_t, isend) == 10 * 8, "table.isend");
_Static_assert(offsetof(ncclNet_v8_t, irecv) == 11 * 8, "table.irecv");
_Static_assert(offsetof(ncclNet_v8_t, iflush) == 12 * 8, "table.iflush");
_Static_assert(offsetof(ncclNet_v8_t, test) == 13 * 8, "table.test");
_Static_assert(offsetof(ncclNet_v8_t, closeSend) == 14 * 8, "table.closeSend");
_Static_assert(offsetof(ncclNet_v8_t, closeRecv) == 15 * 8, "table.closeRecv");
_Static_assert(offsetof(ncclNet_v8_t, closeListen) == 16 * 8, "table.closeListen");
_Static_assert(offsetof(ncclNet_v8_t, getDeviceMr) == 17 * 8, "table.getDeviceMr");
_Static_assert(offsetof(ncclNet_v8_t, irecvConsumed) == 18 * 8, "table.irecvConsumed");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_NET_V8_H */
