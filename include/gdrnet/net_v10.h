/* The NCCL network-plugin ABI, version 10 (NCCL 2.26.2+), as libnccl-net-gdr sees it.
 * v9 plus the profiler callback in init, the connect config {trafficClass} (before the handle), and the
 * profiler handles of isend/irecv. Properties as v9.
 *
 * Typed from NCCL's net plugin headers (NVIDIA/nccl v2.19..v2.30). Field order is the ABI: never reorder. The
 * _Static_asserts pin the x86_64 sizes and every field offset. */
#ifndef GDRNET_NET_V10_H
#define GDRNET_NET_V10_H

#include "gdrnet/net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} ncclNetVDeviceProps_v10_t;

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
  ncclNetVDeviceProps_v10_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v10_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v10_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v10_t **recvDevComm);
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
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} ncclNet_v10_t;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclNetProperties_v10_t) == 104, "ncclNetProperties_v10_t is 104 bytes");
_Static_assert(offsetof(ncclNetProperties_v10_t, name) == 0, "ncclNetProperties_v10_t.name");
_Static_assert(offsetof(ncclNetProperties_v10_t, pciPath) == 8, "ncclNetProperties_v10_t.pciPath");
_Static_assert(offsetof(ncclNetProperties_v10_t, guid) == 16, "ncclNetProperties_v10_t.guid");
_Static_assert(offsetof(ncclNetProperties_v10_t, ptrSupport) == 24, "ncclNetProperties_v10_t.ptrSupport");
_Static_assert(offsetof(ncclNetProperties_v10_t, regIsGlobal) == 28, "ncclNetProperties_v10_t.regIsGlobal");
_Static_assert(offsetof(ncclNetProperties_v10_t, forceFlush) == 32, "ncclNetProperties_v10_t.forceFlush");
_Static_assert(offsetof(ncclNetProperties_v10_t, speed) == 36, "ncclNetProperties_v10_t.speed");
_Static_assert(offsetof(ncclNetProperties_v10_t, port) == 40, "ncclNetProperties_v10_t.port");
_Static_assert(offsetof(ncclNetProperties_v10_t, latency) == 44, "ncclNetProperties_v10_t.latency");
_Static_assert(offsetof(ncclNetProperties_v10_t, maxComms) == 48, "ncclNetProperties_v10_t.maxComms");
_Static_assert(offsetof(ncclNetProperties_v10_t, maxRecvs) == 52, "ncclNetProperties_v10_t.maxRecvs");
_Static_assert(offsetof(ncclNetProperties_v10_t, netDeviceType) == 56, "ncclNetProperties_v10_t.netDeviceType");
_Static_assert(offsetof(ncclNetProperties_v10_t, netDeviceVersion) == 60, "ncclNetProperties_v10_t.netDeviceVersion");
_Static_assert(offsetof(ncclNetProperties_v10_t, vProps) == 64, "ncclNetProperties_v10_t.vProps");
_Static_assert(offsetof(ncclNetProperties_v10_t, vProps.ndevs) == 64, "ncclNetProperties_v10_t.vProps.ndevs");
_Static_assert(offsetof(ncclNetProperties_v10_t, vProps.devs) == 68, "ncclNetProperties_v10_t.vProps.devs");
_Static_assert(offsetof(ncclNetProperties_v10_t, maxP2pBytes) == 88, "ncclNetProperties_v10_t.maxP2pBytes");
_Static_assert(offsetof(ncclNetProperties_v10_t, maxCollBytes) == 96, "ncclNetProperties_v10_t.maxCollBytes");
_Static_assert(sizeof(ncclNetVDeviceProps_v10_t) == 20, "v10 vProps is 5 ints");

_Static_assert(sizeof(ncclNet_v10_t) == 160, "ncclNet_v10_t: 20 pointers");
_Static_assert(offsetof(ncclNet_v10_t, name) == 0 * 8, "ncclNet_v10_t.name");
_Static_assert(offsetof(ncclNet_v10_t, init) == 1 * 8, "ncclNet_v10_t.init");
_Static_assert(offsetof(ncclNet_v10_t, devices) == 2 * 8, "ncclNet_v10_t.devices");
_Static_assert(offsetof(ncclNet_v10_t, getProperties) == 3 * 8, "ncclNet_v10_t.getProperties");
_Static_assert(offsetof(ncclNet_v10_t, listen) == 4 * 8, "ncclNet_v10_t.listen");
_Static_assert(offsetof(ncclNet_v10_t, connect) == 5 * 8, "ncclNet_v10_t.connect");
_Static_assert(offsetof(ncclNet_v10_t, accept) == 6 * 8, "ncclNet_v10_t.accept");
_Static_assert(offsetof(ncclNet_v10_t, regMr) == 7 * 8, "ncclNet_v10_t.regMr");
_Static_assert(offsetof(ncclNet_v10_t, regMrDmaBuf) == 8 * 8, "ncclNet_v10_t.regMrDmaBuf");
_Static_assert(offsetof(ncclNet_v10_t, deregMr) == 9 * 8, "ncclNet_v10_t.deregMr");
_Static_assert(offsetof(ncclNet_v10_t, isend) == 10 * 8, "ncclNet_v10_t.isend");
_Static_assert(offsetof(ncclNet_v10_t, irecv) == 11 * 8, "ncclNet_v10_t.irecv");
_Static_assert(offsetof(ncclNet_v10_t, iflush) == 12 * 8, "ncclNet_v10_t.iflush");
_Static_assert(offsetof(ncclNet_v10_t, test) == 13 * 8, "ncclNet_v10_t.test");
_Static_assert(offsetof(ncclNet_v10_t, closeSend) == 14 * 8, "ncclNet_v10_t.closeSend");
_Static_assert(offsetof(ncclNet_v10_t, closeRecv) == 15 * 8, "ncclNet_v10_t.closeRecv");
_Static_assert(offsetof(ncclNet_v10_t, closeListen) == 16 * 8, "ncclNet_v10_t.closeListen");
_Static_assert(offsetof(ncclNet_v10_t, getDeviceMr) == 17 * 8, "ncclNet_v10_t.getDeviceMr");
_Static_assert(offsetof(ncclNet_v10_t, irecvConsumed) == 18 * 8, "ncclNet_v10_t.irecvConsumed");
_Static_assert(offsetof(ncclNet_v10_t, makeVDevice) == 19 * 8, "ncclNet_v10_t.makeVDevice");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_NET_V10_H */
