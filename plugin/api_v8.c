/* ncclNet v8: the exported table and thin adapters over the core (ints <-> size_t, props layout). */
#include <limits.h>
#include <string.h>

#include "core.h"
#include "log.h"

static ncclResult_t v8_init(ncclDebugLogger_t logger) { return gdr_core_init(logger); }

/* NCCL >= 2.28 dlcloses the plugin after its last communicator, and a v8 plugin gets no finalize call: give back
 * what init took (verbs contexts and PDs, the parameter cache) when the library is unloaded. Only when no comm is
 * open: a process that exits with comms still open may have other threads inside the plugin. */
__attribute__((destructor)) static void v8_unload(void) { gdr_core_unload(); }

static ncclResult_t v8_devices(int *ndev) { return gdr_core_devices(ndev); }

static ncclResult_t v8_get_properties(int dev, ncclNetProperties_v8_t *props) {
  struct gdr_props p;
  ncclResult_t res = gdr_core_get_properties(dev, &p);
  if (res != ncclSuccess) return res;
  memset(props, 0, sizeof(*props));
  props->name = (char *)p.name;
  props->pciPath = (char *)p.pci_path;
  props->guid = p.guid;
  props->ptrSupport = p.ptr_support;
  props->regIsGlobal = p.reg_is_global;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.max_comms;
  props->maxRecvs = p.max_recvs;
  props->netDeviceType = p.net_device_type;
  props->netDeviceVersion = p.net_device_version;
  return ncclSuccess;
}

static ncclResult_t v8_listen(int dev, void *handle, void **listen_comm) {
  return gdr_core_listen(dev, handle, listen_comm);
}

static ncclResult_t v8_connect(int dev, void *handle, void **send_comm, ncclNetDeviceHandle_v8_t **send_dev_comm) {
  if (send_dev_comm) *send_dev_comm = NULL;
  return gdr_core_connect(dev, handle, send_comm);
}

static ncclResult_t v8_accept(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v8_t **recv_dev_comm) {
  if (recv_dev_comm) *recv_dev_comm = NULL;
  return gdr_core_accept(listen_comm, recv_comm);
}

static ncclResult_t v8_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  return gdr_core_reg_mr(comm, data, size, type, mhandle);
}

static ncclResult_t v8_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                     void **mhandle) {
  return gdr_core_reg_mr_dmabuf(comm, data, size, type, offset, fd, mhandle);
}

static ncclResult_t v8_dereg_mr(void *comm, void *mhandle) { return gdr_core_dereg_mr(comm, mhandle); }

static ncclResult_t v8_isend(void *send_comm, void *data, int size, int tag, void *mhandle, void **request) {
  if (size < 0) {
    GDR_WARN("isend: negative size %d", size);
    return ncclInvalidArgument;
  }
  return gdr_core_isend(send_comm, data, (size_t)size, tag, mhandle, request);
}

static ncclResult_t v8_irecv(void *recv_comm, int n, void **data, int *sizes, int *tags, void **mhandles,
                             void **request) {
  size_t s[GDR_MAX_RECVS];
  if (n < 1 || n > GDR_MAX_RECVS) {
    GDR_WARN("irecv: %d receives in one group (1..%d)", n, GDR_MAX_RECVS);
    return ncclInternalError;
  }
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0) {
      GDR_WARN("irecv: negative size %d", sizes[i]);
      return ncclInvalidArgument;
    }
    s[i] = (size_t)sizes[i];
  }
  return gdr_core_irecv(recv_comm, n, data, s, tags, mhandles, request);
}

static ncclResult_t v8_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request) {
  return gdr_core_iflush(recv_comm, n, data, sizes, mhandles, request);
}

static ncclResult_t v8_test(void *request, int *done, int *sizes) {
  size_t s[GDR_MAX_RECVS];
  int n = 0;
  ncclResult_t res = gdr_core_test(request, done, sizes ? s : NULL, &n);
  if (res == ncclSuccess && *done && sizes) {
    for (int i = 0; i < n; i++) sizes[i] = s[i] > INT_MAX ? INT_MAX : (int)s[i];
  }
  return res;
}

static ncclResult_t v8_close_send(void *send_comm) { return gdr_core_close_send(send_comm); }
static ncclResult_t v8_close_recv(void *recv_comm) { return gdr_core_close_recv(recv_comm); }
static ncclResult_t v8_close_listen(void *listen_comm) { return gdr_core_close_listen(listen_comm); }

__attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "GDR",
    .init = v8_init,
    .devices = v8_devices,
    .getProperties = v8_get_properties,
    .listen = v8_listen,
    .connect = v8_connect,
    .accept = v8_accept,
    .regMr = v8_reg_mr,
    .regMrDmaBuf = v8_reg_mr_dmabuf,
    .deregMr = v8_dereg_mr,
    .isend = v8_isend,
    .irecv = v8_irecv,
    .iflush = v8_iflush,
    .test = v8_test,
    .closeSend = v8_close_send,
    .closeRecv = v8_close_recv,
    .closeListen = v8_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};
