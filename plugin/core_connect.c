/* listen, connect, accept, close: the connection lifecycle, on NCCL's service thread(s). All of it runs under the
 * core lock: set-up and teardown are rare, and the lock orders comm accounting against quiesce and finalize.
 *
 * NCCL's device may be a fused one: gdr_core_resolve_locked turns it into the transport's physical devices
 * (struct gdr_conn_opts), with the communicator's traffic class and setNetAttr hints added here. */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "log.h"
#include "stats.h"

static ncclResult_t wrap_comm(const struct gdr_transport *tp, uint32_t magic, int dev, const struct gdr_props *props,
                              const struct gdr_conn_opts *opts, struct gdr_ctx *ctx, void *tcomm,
                              struct gdr_comm **out) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = calloc(1, sizeof(*c));
  int nreq;

  *out = NULL;
  if (c == NULL) {
    GDR_WARN("out of memory allocating a comm");
    res = ncclSystemError;
    goto out;
  }
  c->magic = magic;
  c->kind = magic;
  c->dev = dev;
  c->tp = tp;
  c->tcomm = tcomm;
  c->opts = *opts;
  c->ctx = ctx;
  c->max_recvs = props->max_recvs > 1 ? props->max_recvs : 1;
  if (c->max_recvs > GDR_MAX_RECVS) c->max_recvs = GDR_MAX_RECVS;
  c->max_bytes = props->max_p2p_bytes;
  c->profiler = ctx != NULL ? ctx->profiler : gdr_core_profiler_locked();
  c->profiler_id = (tp->id == GDR_TP_TCP ? NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER
                                         : NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER);
  if (magic != GDR_COMM_LISTEN) {
    /* Requests NCCL may hold at once: 32 per comm (x maxRecvs for sends), plus flushes. The transport is the one
     * that says "not now"; this pool only has to never be the limit. */
    nreq = 2 * NCCL_NET_MAX_REQUESTS * c->max_recvs;
    if (gdr_pool_init(&c->reqs, sizeof(struct gdr_request), nreq) != 0) {
      GDR_WARN("out of memory allocating %d requests", nreq);
      res = ncclSystemError;
      goto out;
    }
  }
  *out = c;
  c = NULL;
out:
  free(c);
  return res;
}

static void free_comm(struct gdr_comm *c, uint32_t magic) {
  if (magic != GDR_COMM_LISTEN) gdr_pool_fini(&c->reqs);
  c->magic = 0;
  free(c);
}

/* The context of a listen/connect (NULL for v6..v10), its device resolved and its options filled. */
static ncclResult_t prepare(void *ctx, int dev, int traffic_class, int listener, const char *what, struct gdr_ctx **x,
                            struct gdr_props *props, struct gdr_conn_opts *opts) {
  ncclResult_t res = ncclSuccess;
  int ndev = 0;
  *x = NULL;
  if (gdr_core_devices_locked(&ndev) != ncclSuccess) {
    GDR_WARN("%s called before a successful init()", what);
    res = ncclInternalError;
    goto out;
  }
  if (ctx != NULL && (*x = gdr_core_ctx_check(ctx, what)) == NULL) {
    res = ncclInternalError;
    goto out;
  }
  if (dev < 0 || dev >= ndev) {
    GDR_WARN("%s: device %d does not exist (%d device(s))", what, dev, ndev);
    res = ncclInvalidArgument;
    goto out;
  }
  GDR_CHECK(gdr_core_resolve_locked(dev, props, opts));
  if (traffic_class < -1 || traffic_class > 255) {
    GDR_WARN("%s: traffic class %d (0..255, or -1 undefined) ignored", what, traffic_class);
    traffic_class = -1;
  }
  opts->traffic_class = traffic_class >= 0 ? traffic_class : *x != NULL ? (*x)->traffic_class : -1;
  if (*x != NULL && listener) {
    /* the listener (receiver) decides the streams of a connection: its side's hints */
    opts->min_flows = (*x)->attr.recv_min_flows;
    opts->max_flows = (*x)->attr.recv_max_flows;
  }
out:
  return res;
}

ncclResult_t gdr_core_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  ncclResult_t res = ncclSuccess;
  const struct gdr_transport *tp;
  struct gdr_props props;
  struct gdr_conn_opts opts;
  struct gdr_ctx *x = NULL;
  void *tcomm = NULL;
  struct gdr_comm *c = NULL;
  int nphys;

  *listen_comm = NULL;
  gdr_core_lock();
  GDR_CHECK(prepare(ctx, dev, -1, 1, "listen", &x, &props, &opts));
  tp = gdr_core_transport_locked(&nphys);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  GDR_CHECK(tp->listen(opts.devs[0], &opts, (struct gdr_handle *)handle, &tcomm));
  res = wrap_comm(tp, GDR_COMM_LISTEN, dev, &props, &opts, x, tcomm, &c);
  if (res != ncclSuccess) {
    tp->close_listen(tcomm);
    goto out;
  }
  gdr_core_comm_opened(c);
  *listen_comm = c;
out:
  gdr_core_unlock();
  return res;
}

/* GDRNET_STATS_FILE's per-transport connection counts */
static void count_open(const struct gdr_transport *tp, int d) {
  struct gdr_tp_counters *tc = &gdr_stats_tp[gdr_stats_tp_index(tp->name)];
  if (d > 0) atomic_fetch_add_explicit(&tc->conns, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&tc->open, d, memory_order_relaxed);
}

ncclResult_t gdr_core_connect(void *ctx, int dev, int traffic_class, void *handle, void **send_comm) {
  ncclResult_t res = ncclSuccess;
  const struct gdr_transport *tp;
  struct gdr_props props;
  struct gdr_conn_opts opts;
  struct gdr_ctx *x = NULL;
  void *tcomm = NULL;
  struct gdr_comm *c = NULL;
  int nphys;

  *send_comm = NULL;
  gdr_core_lock();
  GDR_CHECK(prepare(ctx, dev, traffic_class, 0, "connect", &x, &props, &opts));
  tp = gdr_core_transport_locked(&nphys);
  GDR_CHECK(tp->connect(opts.devs[0], &opts, (struct gdr_handle *)handle, &tcomm));
  if (tcomm == NULL) goto out; /* in progress: NCCL calls again with the same handle */
  res = wrap_comm(tp, GDR_COMM_SEND, dev, &props, &opts, x, tcomm, &c);
  if (res != ncclSuccess) {
    tp->close_send(tcomm);
    goto out;
  }
  gdr_core_comm_opened(c);
  count_open(tp, 1);
  *send_comm = c;
out:
  gdr_core_unlock();
  return res;
}

ncclResult_t gdr_core_accept(void *listen_comm, void **recv_comm) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *l = listen_comm;
  struct gdr_comm *c = NULL;
  struct gdr_props props;
  void *tcomm = NULL;

  *recv_comm = NULL;
  gdr_core_lock();
  if (l == NULL || l->magic != GDR_COMM_LISTEN) {
    GDR_WARN("accept: %p is not a listen comm of this plugin", listen_comm);
    res = ncclInternalError;
    goto out;
  }
  GDR_CHECK(l->tp->accept(l->tcomm, &tcomm));
  if (tcomm == NULL) goto out;
  memset(&props, 0, sizeof(props));
  props.max_recvs = l->max_recvs;
  props.max_p2p_bytes = l->max_bytes;
  res = wrap_comm(l->tp, GDR_COMM_RECV, l->dev, &props, &l->opts, l->ctx, tcomm, &c);
  if (res != ncclSuccess) {
    l->tp->close_recv(tcomm);
    goto out;
  }
  c->profiler = l->profiler;
  gdr_core_comm_opened(c);
  count_open(l->tp, 1);
  *recv_comm = c;
out:
  gdr_core_unlock();
  return res;
}

/* The transport's close (which joins the comm's helper threads and may wait on the network a little) runs without
 * the core lock, so that closing one comm never holds up another comm's set-up; the accounting after it (and the
 * quiesce when this was the process's last comm) takes the lock again. */
ncclResult_t gdr_core_close_claimed(struct gdr_comm *c) {
  ncclResult_t res = ncclSuccess;
  const struct gdr_transport *tp = c->tp;
  if (c->kind != GDR_COMM_LISTEN) gdr_core_requests_close(c);
  if (c->kind == GDR_COMM_SEND) res = tp->close_send(c->tcomm);
  if (c->kind == GDR_COMM_RECV) res = tp->close_recv(c->tcomm);
  if (c->kind == GDR_COMM_LISTEN) res = tp->close_listen(c->tcomm);
  gdr_core_lock();
  int kind = c->kind;
  free_comm(c, kind);
  gdr_core_comm_closed(tp);
  gdr_core_unlock();
  if (kind != GDR_COMM_LISTEN) {
    count_open(tp, -1);
    gdr_stats_poke(); /* GDRNET_STATS_FILE: written at each close */
  }
  return res;
}

static ncclResult_t close_comm(void *comm, uint32_t magic, const char *what) {
  struct gdr_comm *c = comm;

  if (c == NULL) return ncclSuccess;
  gdr_core_lock();
  if (c->magic != magic) {
    GDR_WARN("%s: %p is not such a comm of this plugin", what, comm);
    gdr_core_unlock();
    return ncclInternalError;
  }
  c->magic = 0; /* claimed: a second close of the same comm, or its context's finalize, no longer sees it */
  gdr_core_comm_detach_locked(c);
  gdr_core_unlock();
  return gdr_core_close_claimed(c);
}

ncclResult_t gdr_core_close_send(void *send_comm) { return close_comm(send_comm, GDR_COMM_SEND, "closeSend"); }
ncclResult_t gdr_core_close_recv(void *recv_comm) { return close_comm(recv_comm, GDR_COMM_RECV, "closeRecv"); }
ncclResult_t gdr_core_close_listen(void *listen_comm) {
  return close_comm(listen_comm, GDR_COMM_LISTEN, "closeListen");
}
