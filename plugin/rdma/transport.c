/* The RDMA transport's table for the core (plugin/transport.h), and the entries NCCL's calls reach. The entries that
 * drive a connection take its lock (service.c: a connection whose NCCL calls nothing still answers its peer from the
 * service's thread); connect and accept hand a new connection to the resiliency layer (recover.c) and to the
 * service, close takes it back first.
 *
 * The layers below call down only: device (dev.c, async.c) -> connection (conn.c) -> data path (p2p.c) ->
 * resiliency (fallback.c, then recover.c). These entries sit on top: isend/irecv/iflush look at the connection's
 * state and post over RDMA (p2p.c) or hand the message to TCP (fallback.c's routing); test drives the resiliency
 * (gdr_rdma_progress), as NCCL's net_ib calls ncclIbResiliencyProgress from ncclIbTest. In the steady state the
 * posting entries never do (gate, below, says when they must); a record from the peer for an owner that only posts
 * is answered by the idle-peer service. */
#include "rdma.h"

/* ----------------------------------------------------------------------------------------- the entries -- */

/* What isend/irecv/iflush may do now: the connection's error once it failed (the peer's EOF past its grace fails it
 * here: an owner that only posts learns it); *busy while a recovery or a move runs (the caller says "try again").
 * In the steady state (on RDMA, nothing to recover) that is a look at the connection's state and no more. An owner
 * that only posts (a sender spinning on isend for a clear-to-send, no request to test) must still keep its own
 * recovery going, take the faults the async thread queued for it, and carry a connection on TCP (the hand-over
 * queue, the way back): then, and only then, these entries run the resiliency step too; the idle-peer service
 * wakes on the peer's records alone. */
static ncclResult_t gate(struct gdr_rdma_comm *c, int *busy) {
  *busy = 0;
  if (gdr_rdma_ctrl_eof(c)) return gdr_rdma_comm_check(c);
  if (c->rec.phase != GDR_REC_IDLE || c->fb.path != GDR_PATH_RDMA ||
      atomic_load_explicit(&c->pending.n, memory_order_acquire) > 0)
    return gdr_rdma_progress(c, busy);
  return ncclSuccess;
}

ncclResult_t gdr_rdma_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  struct gdr_rdma_comm *c = send_comm;
  int busy = 0;
  *request = NULL;
  ncclResult_t res = gate(c, &busy);
  if (res != ncclSuccess || busy) return res;
  switch (gdr_rdma_fb_route(c, tag)) {
  case GDR_ROUTE_TCP: return gdr_rdma_fb_isend(c, data, size, tag, mhandle, request);
  case GDR_ROUTE_WAIT: return ncclSuccess; /* the way back: at the switch point, not final yet */
  default: return gdr_rdma_dp_isend(c, data, size, tag, mhandle, request);
  }
}

ncclResult_t gdr_rdma_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                            void **request) {
  struct gdr_rdma_comm *c = recv_comm;
  int busy = 0;
  *request = NULL;
  ncclResult_t res = gate(c, &busy);
  if (res != ncclSuccess || busy) return res;
  if (n < 1 || n > GDR_RDMA_MAX_RECVS) {
    GDR_WARN("irecv with n = %d buffers (1..%d)", n, GDR_RDMA_MAX_RECVS);
    return ncclInternalError;
  }
  switch (gdr_rdma_fb_route(c, 0)) {
  case GDR_ROUTE_TCP: return gdr_rdma_fb_irecv(c, n, data, sizes, tags, mhandles, request);
  case GDR_ROUTE_WAIT: return ncclSuccess; /* the way back: the switch point is being agreed */
  default: return gdr_rdma_dp_irecv(c, n, data, sizes, tags, mhandles, request);
  }
}

ncclResult_t gdr_rdma_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request) {
  struct gdr_rdma_comm *c = recv_comm;
  int busy = 0;
  *request = NULL;
  ncclResult_t res = gate(c, &busy);
  if (res != ncclSuccess) return res;
  if (!c->gdr_flush) return ncclSuccess; /* no GDR: nothing can be pending in a PCIe write buffer */
  if (c->fb.path != GDR_PATH_RDMA && (busy || gdr_rdma_fb_route(c, 0) != GDR_ROUTE_RDMA))
    return ncclSuccess; /* over TCP a receive completes once its bytes are in the GPU: nothing left to flush */
  return gdr_rdma_dp_iflush(c, n, data, sizes, mhandles, busy, request);
}

/* A request the fallback handed to TCP: the resiliency steps first (the move, the hand-over queue). */
static ncclResult_t test_tcp(struct gdr_rdma_req *r, int *done, size_t *sizes) {
  int busy = 0;
  *done = 0;
  if (!r->tcp_done) {
    ncclResult_t res = gdr_rdma_progress(r->comm, &busy);
    if (res != ncclSuccess) {
      gdr_rdma_req_release(r->comm, r);
      return res;
    }
  }
  return gdr_rdma_fb_test(r, done, sizes);
}

ncclResult_t gdr_rdma_test(void *request, int *done, size_t *sizes) {
  struct gdr_rdma_req *r = request;
  struct gdr_rdma_comm *c = r->comm;
  int busy = 0;
  ncclResult_t res;
  *done = 0;
  if (r->on_tcp) return test_tcp(r, done, sizes);
  if (r->error != ncclSuccess) { /* this request alone failed (the peer reported a size error for it) */
    res = r->error;
    gdr_rdma_req_release(c, r);
    return res;
  }
  if (r->events > 0 && gdr_health_state(&c->health) == GDR_HEALTH_OK) (void)gdr_rdma_poll(c, NULL);
  res = gdr_rdma_progress(c, &busy);
  if (r->on_tcp) return test_tcp(r, done, sizes); /* the connection moved while we progressed it */
  if (r->events > 0) {
    if (res != ncclSuccess) gdr_rdma_req_release(c, r); /* given up: every pending request ends with the error */
    return res;
  }
  return gdr_rdma_dp_done(r, done, sizes);
}

/* ------------------------------------------------------------------------------------ under the lock -- */

/* A connection connect/accept returned: it reports to the resiliency layer, and the idle-peer service watches it. */
static void hand_over(struct gdr_rdma_comm *c) {
  c->up = &gdr_rdma_resiliency;
  if (gdr_rdma_svc_attach(c) != ncclSuccess)
    GDR_WARN("%s: the idle-peer service cannot watch it: its peer is answered on its own calls only", c->desc);
}

static ncclResult_t connect_svc(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle,
                                void **send_comm) {
  ncclResult_t res = gdr_rdma_connect(dev, opts, handle, send_comm);
  if (res == ncclSuccess && *send_comm != NULL) hand_over(*send_comm);
  return res;
}

static ncclResult_t accept_svc(void *listen_comm, void **recv_comm) {
  ncclResult_t res = gdr_rdma_accept(listen_comm, recv_comm);
  if (res == ncclSuccess && *recv_comm != NULL) hand_over(*recv_comm);
  return res;
}

static ncclResult_t isend_svc(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  struct gdr_rdma_comm *c = send_comm;
  gdr_rdma_svc_enter(c);
  ncclResult_t res = gdr_rdma_isend(c, data, size, tag, mhandle, request);
  gdr_rdma_svc_leave(c);
  return res;
}

static ncclResult_t irecv_svc(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                              void **request) {
  struct gdr_rdma_comm *c = recv_comm;
  gdr_rdma_svc_enter(c);
  ncclResult_t res = gdr_rdma_irecv(c, n, data, sizes, tags, mhandles, request);
  gdr_rdma_svc_leave(c);
  return res;
}

static ncclResult_t iflush_svc(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request) {
  struct gdr_rdma_comm *c = recv_comm;
  gdr_rdma_svc_enter(c);
  ncclResult_t res = gdr_rdma_iflush(c, n, data, sizes, mhandles, request);
  gdr_rdma_svc_leave(c);
  return res;
}

static ncclResult_t test_svc(void *request, int *done, size_t *sizes) {
  struct gdr_rdma_comm *c = ((struct gdr_rdma_req *)request)->comm; /* (the pool is the comm's: valid after) */
  gdr_rdma_svc_enter_test(c);
  ncclResult_t res = gdr_rdma_test(request, done, sizes);
  gdr_rdma_svc_leave(c);
  return res;
}

static ncclResult_t close_send_svc(void *send_comm) {
  gdr_rdma_svc_detach(send_comm);
  gdr_rdma_resil_close(send_comm);
  return gdr_rdma_close_send(send_comm);
}

static ncclResult_t close_recv_svc(void *recv_comm) {
  gdr_rdma_svc_detach(recv_comm);
  gdr_rdma_resil_close(recv_comm);
  return gdr_rdma_close_recv(recv_comm);
}

const struct gdr_transport gdr_transport_rdma = {
    .name = "rdma",
    .id = GDR_TP_RDMA,
    .max_fused =
        GDR_RDMA_MAX_CONN_DEVS, /* a fused device's QPs spread over its devices (conn.c; the core caps v9..v11 at 4) */
    .init = gdr_rdma_init,
    .get_properties = gdr_rdma_get_properties,
    .listen = gdr_rdma_listen,
    .connect = connect_svc,
    .accept = accept_svc,
    .reg_mr = gdr_rdma_reg_mr,
    .reg_mr_dmabuf = gdr_rdma_reg_mr_dmabuf,
    .dereg_mr = gdr_rdma_dereg_mr,
    .isend = isend_svc,
    .irecv = irecv_svc,
    .iflush = iflush_svc,
    .test = test_svc,
    .close_send = close_send_svc,
    .close_recv = close_recv_svc,
    .close_listen = gdr_rdma_close_listen,
    .describe = gdr_rdma_describe,
    .quiesce = gdr_rdma_quiesce,
    .fini = gdr_rdma_fini,
};
