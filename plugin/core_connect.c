/* listen, connect, accept, close: the connection lifecycle, on NCCL's service thread(s). All of it runs under the
 * core lock: set-up and teardown are rare, and the lock orders comm accounting against quiesce. */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "log.h"
#include "stats.h"

static ncclResult_t check_dev(const struct gdr_transport *tp, int ndev, int dev, const char *what) {
  if (tp == NULL) {
    GDR_WARN("%s called before a successful init()", what);
    return ncclInternalError;
  }
  if (dev < 0 || dev >= ndev) {
    GDR_WARN("%s: device %d does not exist (%d device(s))", what, dev, ndev);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t wrap_comm(const struct gdr_transport *tp, uint32_t magic, int dev, void *tcomm,
                              struct gdr_comm **out) {
  ncclResult_t res = ncclSuccess;
  struct gdr_props props;
  struct gdr_comm *c = calloc(1, sizeof(*c));
  int nreq;

  *out = NULL;
  if (c == NULL) {
    GDR_WARN("out of memory allocating a comm");
    res = ncclSystemError;
    goto out;
  }
  c->magic = magic;
  c->dev = dev;
  c->tp = tp;
  c->tcomm = tcomm;
  c->max_recvs = 1;
  if (magic != GDR_COMM_LISTEN) {
    memset(&props, 0, sizeof(props));
    if (tp->get_properties(dev, &props) == ncclSuccess && props.max_recvs > 1) c->max_recvs = props.max_recvs;
    if (c->max_recvs > GDR_MAX_RECVS) c->max_recvs = GDR_MAX_RECVS;
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

ncclResult_t gdr_core_listen(int dev, void *handle, void **listen_comm) {
  ncclResult_t res = ncclSuccess;
  const struct gdr_transport *tp;
  void *tcomm = NULL;
  struct gdr_comm *c = NULL;
  int ndev;

  *listen_comm = NULL;
  gdr_core_lock();
  tp = gdr_core_transport_locked(&ndev);
  GDR_CHECK(check_dev(tp, ndev, dev, "listen"));
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  GDR_CHECK(tp->listen(dev, (struct gdr_handle *)handle, &tcomm));
  res = wrap_comm(tp, GDR_COMM_LISTEN, dev, tcomm, &c);
  if (res != ncclSuccess) {
    tp->close_listen(tcomm);
    goto out;
  }
  gdr_core_comm_opened();
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

ncclResult_t gdr_core_connect(int dev, void *handle, void **send_comm) {
  ncclResult_t res = ncclSuccess;
  const struct gdr_transport *tp;
  void *tcomm = NULL;
  struct gdr_comm *c = NULL;
  int ndev;

  *send_comm = NULL;
  gdr_core_lock();
  tp = gdr_core_transport_locked(&ndev);
  GDR_CHECK(check_dev(tp, ndev, dev, "connect"));
  GDR_CHECK(tp->connect(dev, (struct gdr_handle *)handle, &tcomm));
  if (tcomm == NULL) goto out; /* in progress: NCCL calls again with the same handle */
  res = wrap_comm(tp, GDR_COMM_SEND, dev, tcomm, &c);
  if (res != ncclSuccess) {
    tp->close_send(tcomm);
    goto out;
  }
  gdr_core_comm_opened();
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
  res = wrap_comm(l->tp, GDR_COMM_RECV, l->dev, tcomm, &c);
  if (res != ncclSuccess) {
    l->tp->close_recv(tcomm);
    goto out;
  }
  gdr_core_comm_opened();
  count_open(l->tp, 1);
  *recv_comm = c;
out:
  gdr_core_unlock();
  return res;
}

/* The transport's close (which joins the comm's helper threads and may wait on the network a little) runs without
 * the core lock, so that closing one comm never holds up another comm's set-up; the accounting after it (and the
 * quiesce when this was the process's last comm) takes the lock again. */
static ncclResult_t close_comm(void *comm, uint32_t magic, const char *what) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = comm;
  const struct gdr_transport *tp;

  if (c == NULL) return ncclSuccess;
  gdr_core_lock();
  if (c->magic != magic) {
    GDR_WARN("%s: %p is not such a comm of this plugin", what, comm);
    gdr_core_unlock();
    return ncclInternalError;
  }
  c->magic = 0; /* claimed: a second close of the same comm is refused above */
  gdr_core_unlock();
  tp = c->tp;
  if (magic == GDR_COMM_SEND) res = tp->close_send(c->tcomm);
  if (magic == GDR_COMM_RECV) res = tp->close_recv(c->tcomm);
  if (magic == GDR_COMM_LISTEN) res = tp->close_listen(c->tcomm);
  gdr_core_lock();
  free_comm(c, magic);
  gdr_core_comm_closed(tp);
  gdr_core_unlock();
  if (magic != GDR_COMM_LISTEN) {
    count_open(tp, -1);
    gdr_stats_poke(); /* GDRNET_STATS_FILE: written at each close */
  }
  return res;
}

ncclResult_t gdr_core_close_send(void *send_comm) { return close_comm(send_comm, GDR_COMM_SEND, "closeSend"); }
ncclResult_t gdr_core_close_recv(void *recv_comm) { return close_comm(recv_comm, GDR_COMM_RECV, "closeRecv"); }
ncclResult_t gdr_core_close_listen(void *listen_comm) {
  return close_comm(listen_comm, GDR_COMM_LISTEN, "closeListen");
}
