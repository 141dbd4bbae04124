/* The NCCL network-plugin ABI as libnccl-net-gdr sees it: what every table version v6..v12 shares (result codes,
 * logger, constants, the device handle, the profiler callback, fused-device and attribute types).
 *
 * Typed from NCCL's net plugin headers (NVIDIA/nccl v2.19..v2.30). Field order is the ABI: never reorder. The
 * _Static_asserts pin the x86_64 sizes and every field offset. One header per table version includes this one:
 * net_v6.h .. net_v12.h (net.h includes them all). */
#ifndef GDRNET_NET_COMMON_H
#define GDRNET_NET_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes (int enum in NCCL). A plugin never returns 7 (InProgress). */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
} ncclResult_t;

/* Logger levels and subsystem flags. */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_ALL = ~0,
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                                  const char *fmt, ...);

#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_NET_MAX_REQUESTS 32

#define NCCL_NET_DEVICE_HOST 0
#define NCCL_NET_DEVICE_UNPACK 1

/* Device handle: identical v7..v12, 32 bytes. */
typedef struct {
  int netDeviceType;
  int netDeviceVersion;
  void *handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v7_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v12_t;

/* v6 allowed 8 requests in flight per comm; v7+ 32 (NCCL_NET_MAX_REQUESTS). */
#define NCCL_NET_MAX_REQUESTS_V6 8

/* ---- v9+: fused (virtual) devices ---- */
#define NCCL_NET_MAX_DEVS_PER_NIC_V9 4  /* v9, v10, v11 */
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8 /* v12 */

/* ---- v10+: profiler callback and per-connection configuration ---- */
/* type: 0 start, 1 stop, 2 update, 3 update and stop. pluginId: NCCL_PROFILER_NET_TYPE_* | descriptor version. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void **eHandle, int type, void *pHandle, int64_t pluginId,
                                               void *extData);
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3,
};
#define NCCL_PROFILER_NET_VER_BITS 16
#define NCCL_PROFILER_NET_TYPE_IB (1u << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_SOCK (2u << NCCL_PROFILER_NET_VER_BITS)

/* Event descriptors passed as extData (version 1 of each). */
#define NCCL_PROFILER_NET_IB_VER 1
#define NCCL_PROFILER_NET_SOCKET_VER 1
enum { ncclProfileQp = (1 << 0) };     /* IB descriptor type */
enum { ncclProfileSocket = (1 << 0) }; /* socket descriptor type */
typedef struct {
  uint8_t type; /* ncclProfileQp */
  union {
    struct {
      int device;
      uint64_t wr_id;
      int opcode;
      int qpNum;
      size_t length;
    } qp;
  };
} ncclProfilerNetIbDescr_v1_t;
typedef struct {
  uint8_t type; /* ncclProfileSocket */
  union {
    struct {
      int fd;
      int op;
      size_t length;
    } sock;
  };
} ncclProfilerNetSockDescr_v1_t;

#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1
/* v10 connect() / v11+ init() configuration; identical in v10, v11, v12. */
typedef struct {
  int trafficClass; /* -1: undefined */
} ncclNetCommConfig_v10_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v12_t;

/* ---- v11+: setNetAttr hints; identical in v11 and v12. -1 means undefined. ---- */
#define NCCL_NET_ATTR_UNDEF -1
typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;
typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;
typedef ncclNetCommAttr_v11_t ncclNetCommAttr_v12_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

/* v12: railId/planeId when unknown. */
#define NCCL_NET_ID_UNDEF -1

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclResult_t) == 4, "ncclResult_t is an int enum");
_Static_assert(sizeof(ncclNetDeviceHandle_v8_t) == 32, "device handle is 32 bytes");
_Static_assert(offsetof(ncclNetDeviceHandle_v8_t, netDeviceType) == 0, "devHandle.netDeviceType");
_Static_assert(offsetof(ncclNetDeviceHandle_v8_t, netDeviceVersion) == 4, "devHandle.netDeviceVersion");
_Static_assert(offsetof(ncclNetDeviceHandle_v8_t, handle) == 8, "devHandle.handle");
_Static_assert(offsetof(ncclNetDeviceHandle_v8_t, size) == 16, "devHandle.size");
_Static_assert(offsetof(ncclNetDeviceHandle_v8_t, needsProxyProgress) == 24, "devHandle.needsProxyProgress");
_Static_assert(sizeof(ncclNetCommConfig_v10_t) == 4, "comm config is one int");
_Static_assert(sizeof(ncclNetCommAttr_v11_t) == 16, "comm attr is 4 int32");
_Static_assert(offsetof(ncclNetCommAttr_v11_t, minConcurrentPeers) == 4, "commAttr.minConcurrentPeers");
_Static_assert(offsetof(ncclNetCommAttr_v11_t, maxFlowsPerPeer) == 8, "commAttr.maxFlowsPerPeer");
_Static_assert(offsetof(ncclNetCommAttr_v11_t, minFlowsPerPeer) == 12, "commAttr.minFlowsPerPeer");
_Static_assert(sizeof(ncclNetAttr_v11_t) == 44, "net attr is 2 comm attrs + 3 u32");
_Static_assert(offsetof(ncclNetAttr_v11_t, recvCommAttr) == 16, "attr.recvCommAttr");
_Static_assert(offsetof(ncclNetAttr_v11_t, op) == 32, "attr.op");
_Static_assert(offsetof(ncclNetAttr_v11_t, algo) == 36, "attr.algo");
_Static_assert(offsetof(ncclNetAttr_v11_t, proto) == 40, "attr.proto");
_Static_assert(offsetof(ncclProfilerNetIbDescr_v1_t, qp.device) == 8, "ib descr.qp.device");
_Static_assert(offsetof(ncclProfilerNetIbDescr_v1_t, qp.length) == 32, "ib descr.qp.length");
_Static_assert(offsetof(ncclProfilerNetSockDescr_v1_t, sock.length) == 16, "sock descr.sock.length");
#endif

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_NET_COMMON_H */
