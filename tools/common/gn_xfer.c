/* Driving the plugin like NCCL's proxy thread: re-entered connect/accept, re-posted isend/irecv,
 * test() until done. Polls with sched_yield (CI has 2 cores and the plugin has helper threads). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "gn.h"

void gn_ctx_init(gn_ctx_t *c, const ncclNet_v8_t *net, double timeout_s) {
  memset(c, 0, sizeof *c);
  c->net = net;
  c->deadline_ns = gn_deadline_ns(timeout_s);
}

ncclResult_t gn_fail(gn_ctx_t *c, ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return r;
}

static ncclResult_t timeout(gn_ctx_t *c, const char *what) {
  c->timed_out = 1;
  return gn_fail(c, ncclSystemError, "%s: timed out (gdrnet tool deadline)", what);
}

ncclResult_t gn_connect(gn_ctx_t *c, int dev, void *handle, void **sendComm) {
  *sendComm = NULL;
  for (;;) {
    ncclNetDeviceHandle_v8_t *dh = NULL;
    ncclResult_t r = c->net->connect(dev, handle, sendComm, &dh);
    if (r != ncclSuccess) return gn_fail(c, r, "connect(dev %d) returned %s", dev, gn_result_str(r));
    if (*sendComm != NULL) return ncclSuccess;
    if (gn_expired(c->deadline_ns)) return timeout(c, "connect");
    sched_yield();
  }
}

ncclResult_t gn_accept(gn_ctx_t *c, void *listenComm, void **recvComm) {
  *recvComm = NULL;
  for (;;) {
    ncclNetDeviceHandle_v8_t *dh = NULL;
    ncclResult_t r = c->net->accept(listenComm, recvComm, &dh);
    if (r != ncclSuccess) return gn_fail(c, r, "accept returned %s", gn_result_str(r));
    if (*recvComm != NULL) return ncclSuccess;
    if (gn_expired(c->deadline_ns)) return timeout(c, "accept");
    sched_yield();
  }
}

ncclResult_t gn_establish(gn_ctx_t *c, int dev, int bootfd, void **sendComm, void **recvComm) {
  char myh[NCCL_NET_HANDLE_MAXSIZE], peerh[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  ncclResult_t r;
  memset(myh, 0, sizeof myh);
  memset(peerh, 0, sizeof peerh);
  if (sendComm) *sendComm = NULL;
  if (recvComm) *recvComm = NULL;
  if (recvComm != NULL) {
    r = c->net->listen(dev, myh, &lc);
    if (r != ncclSuccess) return gn_fail(c, r, "listen(dev %d) returned %s", dev, gn_result_str(r));
    if (lc == NULL) return gn_fail(c, ncclInternalError, "listen(dev %d) succeeded with a NULL listenComm", dev);
    if (gn_boot_send(bootfd, myh, sizeof myh) != 0) {
      c->net->closeListen(lc);
      return gn_fail(c, ncclSystemError, "bootstrap: sending the handle: %s", strerror(errno));
    }
  }
  if (sendComm != NULL) {
    double left = (double)(c->deadline_ns - gn_now_ns()) / 1e9;
    if (gn_boot_recv(bootfd, peerh, sizeof peerh, left > 0 ? left : 0) != 0) {
      if (lc) c->net->closeListen(lc);
      return gn_fail(c, ncclSystemError, "bootstrap: receiving the peer's handle: %s", strerror(errno));
    }
  }
  int need_s = sendComm != NULL, need_r = recvComm != NULL;
  while (need_s || need_r) {
    if (need_s) {
      ncclNetDeviceHandle_v8_t *dh = NULL;
      r = c->net->connect(dev, peerh, sendComm, &dh);
      if (r != ncclSuccess) {
        if (lc) c->net->closeListen(lc);
        return gn_fail(c, r, "connect(dev %d) returned %s", dev, gn_result_str(r));
      }
      if (*sendComm != NULL) need_s = 0;
    }
    if (need_r) {
      ncclNetDeviceHandle_v8_t *dh = NULL;
      r = c->net->accept(lc, recvComm, &dh);
      if (r != ncclSuccess) {
        c->net->closeListen(lc);
        return gn_fail(c, r, "accept returned %s", gn_result_str(r));
      }
      if (*recvComm != NULL) {
        need_r = 0;
        r = c->net->closeListen(lc);
        lc = NULL;
        if (r != ncclSuccess) return gn_fail(c, r, "closeListen returned %s", gn_result_str(r));
      }
    }
    if ((need_s || need_r) && gn_expired(c->deadline_ns)) {
      if (lc) c->net->closeListen(lc);
      return timeout(c, need_s ? "connect" : "accept");
    }
    if (need_s || need_r) sched_yield();
  }
  return ncclSuccess;
}

ncclResult_t gn_isend(gn_ctx_t *c, void *comm, void *data, int size, int tag, void *mh, void **req) {
  *req = NULL;
  for (;;) {
    ncclResult_t r = c->net->isend(comm, data, size, tag, mh, req);
    if (r != ncclSuccess) return gn_fail(c, r, "isend(size %d, tag %d) returned %s", size, tag, gn_result_str(r));
    if (*req != NULL) return ncclSuccess;
    if (gn_expired(c->deadline_ns)) return timeout(c, "isend (request stayed NULL)");
    sched_yield();
  }
}

ncclResult_t gn_irecv(gn_ctx_t *c, void *comm, int n, void **data, int *sizes, int *tags, void **mhs, void **req) {
  *req = NULL;
  for (;;) {
    ncclResult_t r = c->net->irecv(comm, n, data, sizes, tags, mhs, req);
    if (r != ncclSuccess) return gn_fail(c, r, "irecv(n %d, size[0] %d) returned %s", n, sizes[0], gn_result_str(r));
    if (*req != NULL) return ncclSuccess;
    if (gn_expired(c->deadline_ns)) return timeout(c, "irecv (request stayed NULL)");
    sched_yield();
  }
}

ncclResult_t gn_test(gn_ctx_t *c, void *req, int *done, int *sizes) {
  *done = 0;
  ncclResult_t r = c->net->test(req, done, sizes);
  if (r != ncclSuccess) return gn_fail(c, r, "test returned %s", gn_result_str(r));
  return ncclSuccess;
}

ncclResult_t gn_wait(gn_ctx_t *c, void *req, int *sizes) {
  for (;;) {
    int done = 0;
    ncclResult_t r = gn_test(c, req, &done, sizes);
    if (r != ncclSuccess) return r;
    if (done) return ncclSuccess;
    if (gn_expired(c->deadline_ns)) return timeout(c, "test (request never completed)");
    sched_yield();
  }
}

ncclResult_t gn_flush(gn_ctx_t *c, void *comm, int n, void **data, int *sizes, void **mhs) {
  void *req = NULL;
  ncclResult_t r = c->net->iflush(comm, n, data, sizes, mhs, &req);
  if (r != ncclSuccess) return gn_fail(c, r, "iflush returned %s", gn_result_str(r));
  if (req == NULL) return ncclSuccess; /* nothing to wait for */
  return gn_wait(c, req, NULL);
}

ncclResult_t gn_send_sync(gn_ctx_t *c, void *comm, void *data, int size, int tag, void *mh) {
  void *req = NULL;
  ncclResult_t r = gn_isend(c, comm, data, size, tag, mh, &req);
  if (r != ncclSuccess) return r;
  return gn_wait(c, req, NULL);
}

ncclResult_t gn_recv_sync(gn_ctx_t *c, void *comm, void *data, int size, int tag, void *mh, int *got) {
  void *req = NULL;
  int sizes[1] = {size}, tags[1] = {tag};
  void *datas[1] = {data}, *mhs[1] = {mh};
  ncclResult_t r = gn_irecv(c, comm, 1, datas, sizes, tags, mhs, &req);
  if (r != ncclSuccess) return r;
  int out[1] = {-1};
  r = gn_wait(c, req, out);
  if (got) *got = out[0];
  return r;
}
