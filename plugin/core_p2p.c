/* Registration and the data path. isend/irecv/iflush/test run on NCCL's progress thread, one comm at a time per
 * thread: no lock here; the request pool belongs to the comm.
 *
 * Per-connection state (connstat.h): a comm's first isend/irecv opens it; each accepted send/receive is noted at its
 * pool index (start time, size, tag), an isend the transport refuses marks "waiting since", and test's verdict
 * closes the note (latency, bytes). Plain relaxed stores: the stall detector and the stats writer only read.
 *
 * Profiler events (v10+): one per message (per buffer of a grouped receive), started once the transport accepted
 * the operation, with the phandle NCCL passed (never a NULL one) and an eHandle initialised to NULL; stopped when
 * test reports the request done or failed, the eHandle reset after the stop (NCCL's callback writes it only when
 * its profiler takes net-plugin events). The descriptor is NCCL's socket one (TCP: fd -1) or IB one (RDMA: QP 0,
 * this layer does not know which QP carries the message); the length is the posted size. */
#include <stdlib.h>
#include <string.h>

#include "connstat.h"
#include "core.h"
#include "log.h"
#include "stats.h"

static int is_data_comm(const struct gdr_comm *c) {
  return c != NULL && (c->magic == GDR_COMM_SEND || c->magic == GDR_COMM_RECV);
}

/* regMr and regMrDmaBuf: the transport registers, the core wraps its handle (dmabuf selects the DMA-BUF entry). */
static ncclResult_t reg_common(const char *op, void *comm, void *data, size_t size, int type, int dmabuf,
                               uint64_t offset, int fd, void **mhandle) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = comm;
  struct gdr_mr *mr = NULL;

  const int staged = (type & GDR_PTR_STAGED) != 0 && (type & ~GDR_PTR_STAGED) == NCCL_PTR_CUDA;
  type &= ~GDR_PTR_STAGED;
  *mhandle = NULL;
  if (!is_data_comm(c)) {
    GDR_WARN("%s: %p is not a send/recv comm of this plugin", op, comm);
    res = ncclInternalError;
    goto out;
  }
  if (staged && c->tp->reg_mr_staged != NULL) /* the transport stages device memory: no DMA-BUF either */
    dmabuf = 0;
  if (dmabuf && c->tp->reg_mr_dmabuf == NULL) {
    /* Only reached if NCCL calls it without NCCL_PTR_DMABUF in ptrSupport, or for host memory. */
    if (type == NCCL_PTR_HOST) return reg_common("regMr", comm, data, size, type, 0, 0, -1, mhandle);
    GDR_WARN("%s: the %s transport does not take DMA-BUF registrations", op, c->tp->name);
    res = ncclInvalidUsage;
    goto out;
  }
  mr = calloc(1, sizeof(*mr));
  if (mr == NULL) {
    GDR_WARN("%s: out of memory", op);
    res = ncclSystemError;
    goto out;
  }
  if (staged && c->tp->reg_mr_staged != NULL)
    GDR_CHECK(c->tp->reg_mr_staged(c->tcomm, data, size, &mr->tmr));
  else if (dmabuf)
    GDR_CHECK(c->tp->reg_mr_dmabuf(c->tcomm, data, size, type, offset, fd, &mr->tmr));
  else
    GDR_CHECK(c->tp->reg_mr(c->tcomm, data, size, type, &mr->tmr));
  mr->magic = GDR_MR_MAGIC;
  mr->tp = c->tp;
  mr->data = data;
  mr->size = size;
  mr->type = type;
  *mhandle = mr;
  mr = NULL;
out:
  free(mr);
  return res;
}

ncclResult_t gdr_core_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  return reg_common("regMr", comm, data, size, type, 0, 0, -1, mhandle);
}

ncclResult_t gdr_core_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                    void **mhandle) {
  return reg_common("regMrDmaBuf", comm, data, size, type, 1, offset, fd, mhandle);
}

ncclResult_t gdr_core_dereg_mr(void *comm, void *mhandle) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = comm;
  struct gdr_mr *mr = mhandle;

  if (mr == NULL) return ncclSuccess;
  if (!is_data_comm(c) || mr->magic != GDR_MR_MAGIC) {
    GDR_WARN("deregMr: comm %p / mhandle %p are not this plugin's", comm, mhandle);
    res = ncclInternalError;
    goto out;
  }
  res = mr->tp->dereg_mr(c->tcomm, mr->tmr);
  mr->magic = 0;
  free(mr);
out:
  return res;
}

static void *tmr_of(void *mhandle) {
  struct gdr_mr *mr = mhandle;
  return mr != NULL ? mr->tmr : NULL;
}

/* The wrapper of an operation the transport accepted. The pool holds 2 x 32 x maxRecvs: callers check nfree
 * before asking the transport, so this never fails. */
static struct gdr_request *wrap_req(struct gdr_comm *c, int kind, int n, void *treq) {
  int idx = -1;
  struct gdr_request *r = gdr_pool_get_idx(&c->reqs, &idx);
  r->magic = GDR_REQ_MAGIC;
  r->kind = kind;
  r->n = n;
  r->idx = idx;
  r->comm = c;
  r->treq = treq;
  r->error = ncclSuccess;
  r->nev = 0;
  return r;
}

/* The transport refused an isend/irecv because the connection failed (it WARNed why): a request that reports it. */
static ncclResult_t failed_req(struct gdr_comm *c, ncclResult_t res, void **request) {
  struct gdr_request *r = wrap_req(c, GDR_REQ_FAILED, 0, NULL);
  r->error = res;
  *request = r;
  return ncclSuccess;
}

/* Starts the profiler events of a request: phandles[i] for buffer i (n of them; NULL entries get none). */
static void events_start(struct gdr_request *r, int n, void *const *phandles, const size_t *sizes, int op) {
  struct gdr_comm *c = r->comm;
  for (int i = 0; i < n; i++) {
    r->ev[i] = NULL;
    if (phandles[i] == NULL) continue;
    if (c->tp->id == GDR_TP_TCP) {
      ncclProfilerNetSockDescr_v1_t d;
      memset(&d, 0, sizeof(d));
      d.type = ncclProfileSocket;
      d.sock.fd = -1;
      d.sock.op = op;
      d.sock.length = sizes[i];
      (void)c->profiler(&r->ev[i], ncclProfilerNetEventStart, phandles[i], (int64_t)c->profiler_id, &d);
    } else {
      ncclProfilerNetIbDescr_v1_t d;
      memset(&d, 0, sizeof(d));
      d.type = ncclProfileQp;
      d.qp.device = c->dev;
      d.qp.opcode = -1;
      d.qp.length = sizes[i];
      (void)c->profiler(&r->ev[i], ncclProfilerNetEventStart, phandles[i], (int64_t)c->profiler_id, &d);
    }
  }
  r->nev = n;
}

static void events_stop(struct gdr_request *r) {
  for (int i = 0; i < r->nev; i++) {
    if (r->ev[i] == NULL) continue;
    (void)r->comm->profiler(&r->ev[i], ncclProfilerNetEventStop, NULL, 0, NULL);
    r->ev[i] = NULL;
  }
  r->nev = 0;
}

void gdr_core_requests_close(struct gdr_comm *c) {
  for (int i = 0; c->profiler != NULL && i < c->reqs.cap; i++) {
    struct gdr_request *r = (struct gdr_request *)(c->reqs.mem + (size_t)i * c->reqs.objsize);
    if (c->reqs.used[i] && r->magic == GDR_REQ_MAGIC && r->nev > 0) events_stop(r);
  }
  gdr_connstat_close(c->cs);
  c->cs = NULL;
}

/* The comm's per-connection state, opened on its first data call (connstat.h); NULL if it could not be. */
static inline struct gdr_connstat *conn_state(struct gdr_comm *c) {
  if (__builtin_expect(c->cs == NULL && !c->cs_tried, 0)) {
    c->cs_tried = 1;
    c->cs = gdr_connstat_open(c->tp, c->tcomm, c->kind == GDR_COMM_SEND, c->dev, c->reqs.cap);
  }
  return c->cs;
}

void gdr_core_recv_standing(void *recv_comm) {
  struct gdr_comm *c = recv_comm;
  struct gdr_connstat *cs = c != NULL ? conn_state(c) : NULL;
  if (cs != NULL) atomic_store_explicit(&cs->standing, 1, memory_order_relaxed);
}

/* A message bigger than the device's maxP2pBytes (v9+ sizes are size_t): refused, never truncated. */
static ncclResult_t size_check(const struct gdr_comm *c, size_t size, const char *op) {
  if (size <= c->max_bytes) return ncclSuccess;
  GDR_WARN("%s of %zu bytes: the %s transport takes at most %zu bytes per message (maxP2pBytes)", op, size, c->tp->name,
           c->max_bytes);
  return ncclInvalidArgument;
}

ncclResult_t gdr_core_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void *phandle,
                            void **request) {
  struct gdr_comm *c = send_comm;
  void *treq = NULL;
  ncclResult_t res;

  *request = NULL;
  if (c == NULL || c->magic != GDR_COMM_SEND) {
    GDR_WARN("isend: %p is not a send comm of this plugin", send_comm);
    return ncclInternalError;
  }
  res = size_check(c, size, "isend");
  if (res != ncclSuccess) return res;
  if (c->reqs.nfree == 0) return ncclSuccess; /* NCCL holds too many: try again later */
  res = c->tp->isend(c->tcomm, data, size, tag, tmr_of(mhandle), &treq);
  if (res != ncclSuccess) return failed_req(c, res, request);
  if (treq != NULL) {
    struct gdr_request *r = wrap_req(c, GDR_REQ_SEND, 1, treq);
    if (c->profiler != NULL && phandle != NULL) events_start(r, 1, &phandle, &size, 0);
    gdr_connstat_posted(conn_state(c), r->idx, size, tag);
    *request = r;
  } else {
    gdr_connstat_refused(conn_state(c), size, tag);
  }
  return ncclSuccess;
}

/* recv_comm is one of our receive comms and n fits one grouped receive on its device; else a WARN naming op. */
static ncclResult_t recv_group_check(const struct gdr_comm *c, const void *recv_comm, int n, const char *op,
                                     const char *what) {
  if (c == NULL || c->magic != GDR_COMM_RECV) {
    GDR_WARN("%s: %p is not a recv comm of this plugin", op, recv_comm);
    return ncclInternalError;
  }
  if (n < 1 || n > c->max_recvs) {
    GDR_WARN("%s: %d %s in one group, this device takes 1..%d", op, n, what, c->max_recvs);
    return ncclInternalError;
  }
  return ncclSuccess;
}

/* The transport's memory handles of a group (NULL where NCCL passed none). */
static void transport_mrs(int n, void **mhandles, void **tmrs) {
  for (int i = 0; i < n; i++) tmrs[i] = mhandles ? tmr_of(mhandles[i]) : NULL;
}

ncclResult_t gdr_core_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                            void **phandles, void **request) {
  struct gdr_comm *c = recv_comm;
  void *tmrs[GDR_MAX_RECVS];
  void *treq = NULL;
  ncclResult_t res;

  *request = NULL;
  res = recv_group_check(c, recv_comm, n, "irecv", "receives");
  if (res != ncclSuccess) return res;
  for (int i = 0; i < n; i++) {
    res = size_check(c, sizes[i], "irecv");
    if (res != ncclSuccess) return res;
  }
  if (c->reqs.nfree == 0) return ncclSuccess;
  transport_mrs(n, mhandles, tmrs);
  res = c->tp->irecv(c->tcomm, n, data, sizes, tags, tmrs, &treq);
  if (res != ncclSuccess) return failed_req(c, res, request);
  if (treq != NULL) {
    struct gdr_request *r = wrap_req(c, GDR_REQ_RECV, n, treq);
    if (c->profiler != NULL && phandles != NULL) events_start(r, n, phandles, sizes, 1);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    gdr_connstat_posted(conn_state(c), r->idx, total, tags[0]);
    *request = r;
  }
  return ncclSuccess;
}

ncclResult_t gdr_core_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request) {
  struct gdr_comm *c = recv_comm;
  void *tmrs[GDR_MAX_RECVS];
  void *treq = NULL;
  ncclResult_t res;

  *request = NULL;
  res = recv_group_check(c, recv_comm, n, "iflush", "buffers");
  if (res != ncclSuccess) return res;
  if (c->tp->iflush == NULL) return ncclSuccess; /* nothing to wait for */
  if (c->reqs.nfree == 0) {
    GDR_WARN("iflush: more than %d requests outstanding on one comm", c->reqs.cap);
    return ncclInternalError;
  }
  transport_mrs(n, mhandles, tmrs);
  res = c->tp->iflush(c->tcomm, n, data, sizes, tmrs, &treq);
  if (res == ncclSuccess && treq != NULL) *request = wrap_req(c, GDR_REQ_FLUSH, 0, treq);
  return res; /* a NULL request: nothing to wait for */
}

ncclResult_t gdr_core_test(void *request, int *done, size_t *sizes, int *n) {
  struct gdr_request *r = request;
  struct gdr_comm *c;
  ncclResult_t res;

  *done = 0;
  if (n) *n = 0;
  /* magic first (a foreign pointer rarely has it), then that it is the outstanding request it claims to be */
  if (r == NULL || r->magic != GDR_REQ_MAGIC || (c = r->comm) == NULL || !gdr_pool_is(&c->reqs, r, r->idx)) {
    GDR_WARN("test: %p is not an outstanding request of this plugin", request);
    return ncclInternalError;
  }
  /* the transport writes the sizes straight into the caller's array (only read once done) */
  size_t own[GDR_MAX_RECVS];
  size_t *sz = sizes != NULL ? sizes : (r->kind == GDR_REQ_SEND || r->kind == GDR_REQ_RECV ? own : NULL);
  res = r->kind == GDR_REQ_FAILED ? r->error : c->tp->test(r->treq, done, sz);
  if (r->nev > 0 && (res != ncclSuccess || *done)) events_stop(r);
  if (res != ncclSuccess || *done) {
    struct gdr_tp_counters *tc = &gdr_stats_tp[gdr_stats_tp_index(c->tp->name)];
    if (res != ncclSuccess) {
      atomic_fetch_add_explicit(&tc->requests_failed, 1, memory_order_relaxed);
      if (r->kind == GDR_REQ_SEND || r->kind == GDR_REQ_RECV) gdr_connstat_done(c->cs, r->idx, 0, 0);
    } else if (r->kind == GDR_REQ_SEND || r->kind == GDR_REQ_RECV) {
      uint64_t bytes = 0;
      for (int i = 0; i < (r->kind == GDR_REQ_SEND ? 1 : r->n); i++) bytes += sz[i];
      atomic_fetch_add_explicit(r->kind == GDR_REQ_SEND ? &tc->bytes_sent : &tc->bytes_received, bytes,
                                memory_order_relaxed);
      gdr_connstat_done(c->cs, r->idx, bytes, 1);
    }
    if (n && res == ncclSuccess) *n = r->n;
    r->magic = 0;
    gdr_pool_put_idx(&c->reqs, r->idx);
  }
  return res;
}
