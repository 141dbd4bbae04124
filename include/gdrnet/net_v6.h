/* The NCCL network-plugin ABI, version 6, as libnccl-net-gdr sees it (NCCL 2.12-2.19 look for v6 or v7).
 * 17 entries; regMr, isend and irecv sizes are int; no device handles.
 *
 * Typed from NCCL's net plugin headers (NVIDIA/nccl v2.19..v2.30). Field order is the ABI: never reorder. The
 * _Static_asserts pin the x86_64 sizes and every field offset. */
#ifndef GDRNET_NET_V6_H
#define GDRNET_NET_V6_H

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
} ncclNetProperties_v6_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm);
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
} ncclNet_v6_t;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclNetProperties_v6_t) == 48, "ncclNetProperties_v6_t is 48 bytes");
_Static_assert(offsetof(ncclNetProperties_v6_t, name) == 0, "ncclNetProperties_v6_t.name");
_Static_assert(offsetof(ncclNetProperties_v6_t, pciPath) == 8, "ncclNetProperties_v6_t.pciPath");
_Static_assert(offsetof(ncclNetProperties_v6_t, guid) == 16, "ncclNetProperties_v6_t.guid");
_Static_assert(offsetof(ncclNetProperties_v6_t, ptrSupport) == 24, "ncclNetProperties_v6_t.ptrSupport");
_Static_assert(offsetof(ncclNetProperties_v6_t, speed) == 28, "ncclNetProperties_v6_t.speed");
_Static_assert(offsetof(ncclNetProperties_v6_t, port) == 32, "ncclNetProperties_v6_t.port");
_Static_assert(offsetof(ncclNetProperties_v6_t, latency) == 36, "ncclNetProperties_v6_t.latency");
_Static_assert(offsetof(ncclNetProperties_v6_t, maxComms) == 40, "ncclNetProperties_v6_t.maxComms");
_Static_assert(offsetof(ncclNetProperties_v6_t, maxRecvs) == 44, "ncclNetProperties_v6_t.maxRecvs");

_Static_assert(sizeof(ncclNet_v6_t) == 136, "ncclNet_v6_t: 17 pointers");
_Static_assert(offsetof(ncclNet_v6_t, name) == 0 * 8, "ncclNet_v6_t.name");
_Static_assert(offsetof(ncclNet_v6_t, init) == 1 * 8, "ncclNet_v6_t.init");
_Static_assert(offsetof(ncclNet_v6_t, devices) == 2 * 8, "ncclNet_v6_t.devices");
_Static_assert(offsetof(ncclNet_v6_t, getProperties) == 3 * 8, "ncclNet_v6_t.getProperties");
_Static_assert(offsetof(ncclNet_v6_t, listen) == 4 * 8, "ncclNet_v6_t.listen");
_Static_assert(offsetof(ncclNet_v6_t, connect) == 5 * 8, "ncclNet_v6_t.connect");
_Static_assert(offsetof(ncclNet_v6_t, accept) == 6 * 8, "ncclNet_v6_t.accept");
_Static_assert(offsetof(ncclNet_v6_t, regMr) == 7 * 8, "ncclNet_v6_t.regMr");
_Static_assert(offsetof(ncclNet_v6_t, regMrDmaBuf) == 8 * 8, "ncclNet_v6_t.regMrDmaBuf");
_Static_assert(offsetof(ncclNet_v6_t, deregMr) == 9 * 8, "ncclNet_v6_t.deregMr");
_Static_assert(offsetof(ncclNet_v6_t, isend) == 10 * 8, "ncclNet_v6_t.isend");
_Static_assert(offsetof(ncclNet_v6_t, irecv) == 11 * 8, "ncclNet_v6_t.irecv");
_Static_assert(offsetof(ncclNet_v6_t, iflush) == 12 * 8, "ncclNet_v6_t.iflush");
_Static_assert(offsetof(ncclNet_v6_t, test) == 13 * 8, "ncclNet_v6_t.test");
_Static_assert(offsetof(ncclNet_v6_t, closeSend) == 14 * 8, "ncclNet_v6_t.closeSend");
_Static_assert(offsetof(ncclNet_v6_t, closeRecv) == 15 * 8, "ncclNet_v6_t.closeRecv");
_Static_assert(offsetof(ncclNet_v6_t, closeListen) == 16 * 8, "ncclNet_v6_t.closeListen");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_NET_V6_H */
