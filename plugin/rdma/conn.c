/* RDMA transport: listen / connect / accept (non-blocking state machines over the core's sockets),
 * QP sets (RESET -> INIT -> RTR -> RTS; recovery builds new ones), the control channel, close.
 *
 * Handshake on the connection's TCP control stream (after the core's HELLO/ACK with the listen
 * nonce, which the listener verifies):
 *   sender   -> receiver  HS   (role SEND: QPNs, PSNs, LID/GID, MTU, nqps/split, FIFO addr/rkey)
 *   receiver -> sender    HS   (role RECV: QPNs, PSNs, LID/GID, MTU, sizes-array addr/rkey)
 *   sender   -> receiver  READY (the sender's QPs are RTS: the receiver may now write CTS entries)
 * The receiver's QPs reach RTS before it answers; the sender's before READY.  The stream then stays
 * open as the control channel (keepalive and TCP_USER_TIMEOUT as the TCP transport's streams, so a
 * silent peer host is an error within GDRNET_TCP_TIMEOUT_MS): size errors, the recovery protocol
 * (recover.c) and BYE travel on it, and its EOF tells a peer that closed.
 * A peer without RDMA (sock.h, mixed pairs): a listen also opens a TCP door where such a peer connects with its
 * TCP transport, and a connect to a TCP listener uses this process's TCP transport; either way the TCP comm runs
 * inside an RDMA comm that runs over TCP from the start (tcp_only, no control stream of its own). */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../connstat.h"
#include "fb_tcp.h"
#include "gid.h"
#include "rdma.h"

/* ---------------------------------------------------------------------------------------- health -- */

void gdr_rdma_comm_fail(struct gdr_rdma_comm *c, ncclResult_t res, const char *fmt, ...) {
  char why[sizeof(c->health.why)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  gdr_health_fail(&c->health, res, "%s", why);
}

ncclResult_t gdr_rdma_comm_check(struct gdr_rdma_comm *c) { return gdr_health_error(&c->health, c->desc); }

void gdr_rdma_addr_str(const struct gdr_rdma_comm *c, int remote, char *buf, size_t len) {
  const struct gdr_rdma_dev *d = c->dev;
  int more = remote ? c->remote.ndevs - 1 : c->ndevs - 1, w;
  if (d->link_layer == IBV_LINK_LAYER_ETHERNET) {
    gdr_gid_format(remote ? c->remote.dev[0].gid : c->m[0].gid.raw, buf, (int)len);
    w = (int)strlen(buf);
  } else {
    w = snprintf(buf, len, "LID %u", remote ? c->remote.dev[0].lid : c->m[0].lid);
  }
  if (more > 0 && w >= 0 && (size_t)w < len)
    snprintf(buf + w, len - (size_t)w, " (+%d device%s)", more, more > 1 ? "s" : "");
}

static void set_desc(struct gdr_rdma_comm *c) {
  char devs[160];
  size_t off = 0;
  for (int i = 0; i < c->ndevs && off < sizeof(devs); i++) {
    int w =
        snprintf(devs + off, sizeof(devs) - off, "%s%s port %d", i ? " + " : "", c->m[i].dev->name, c->m[i].dev->port);
    if (w < 0) break;
    off += (size_t)w;
  }
  snprintf(c->desc, sizeof(c->desc), "RDMA %s connection %s %.64s (%.150s)",
           c->kind == GDR_RCOMM_SEND ? "send" : "receive", c->kind == GDR_RCOMM_SEND ? "to" : "from", c->peer, devs);
}

/* ------------------------------------------------------------------------------ control channel -- */

static void peer_eof(struct gdr_rdma_comm *c, int err) {
  if (c->peer_gone) return;
  c->peer_gone = 1;
  c->eof_ns = gdr_time_ns();
  c->ctrl_out_off = c->ctrl_out_len = 0; /* nobody reads it any more */
  if (err) {
    const struct gdr_fault_class *f = gdr_fault_errno(err);
    GDR_INFO(NCCL_NET, "%s: control channel: %s (%s)", c->desc, strerror(err), f->hint);
  }
}

/* Writes what is queued, as far as the socket takes it. */
static ncclResult_t ctrl_flush(struct gdr_rdma_comm *c) {
  if (c->ctrl_out_off == c->ctrl_out_len || c->fd < 0 || c->peer_gone) return ncclSuccess;
  if (gdr_sock_send_nb(c->fd, c->ctrl_out, c->ctrl_out_len, &c->ctrl_out_off) != ncclSuccess) {
    peer_eof(c, errno); /* the reader decides what it means for the requests */
    return ncclSuccess;
  }
  if (c->ctrl_out_off == c->ctrl_out_len) c->ctrl_out_off = c->ctrl_out_len = 0;
  return ncclSuccess;
}

ncclResult_t gdr_rdma_ctrl_send(struct gdr_rdma_comm *c, int type, uint64_t seq, uint64_t a, uint64_t b,
                                const void *payload, size_t len) {
  struct gdr_rdma_ctrl m;
  if (c->fd < 0 || c->peer_gone) return ncclSuccess;
  if (len > GDR_RDMA_CTRL_MAX_PAYLOAD) len = GDR_RDMA_CTRL_MAX_PAYLOAD;
  if (c->ctrl_out_off > 0) { /* make room: drop what is already written */
    memmove(c->ctrl_out, c->ctrl_out + c->ctrl_out_off, c->ctrl_out_len - c->ctrl_out_off);
    c->ctrl_out_len -= c->ctrl_out_off;
    c->ctrl_out_off = 0;
  }
  if (c->ctrl_out_len + sizeof(m) + len > sizeof(c->ctrl_out)) {
    gdr_rdma_comm_fail(c, ncclRemoteError,
                       "the control channel's send queue is full: the peer has read nothing of the last %zu bytes",
                       c->ctrl_out_len);
    return gdr_rdma_comm_check(c);
  }
  memset(&m, 0, sizeof(m));
  m.magic = GDR_RDMA_CTRL_MAGIC;
  m.type = (uint16_t)type;
  m.len = (uint16_t)len;
  m.seq = seq;
  m.a = a;
  m.b = b;
  memcpy(c->ctrl_out + c->ctrl_out_len, &m, sizeof(m));
  if (len) memcpy(c->ctrl_out + c->ctrl_out_len + sizeof(m), payload, len);
  c->ctrl_out_len += sizeof(m) + len;
  return ctrl_flush(c);
}

/* The connection's own records; the rest go up to the resiliency layer (c->up, rdma.h). */
static ncclResult_t on_size_err(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  struct gdr_rdma_req *r2 = c->recv_slot[m->seq % GDR_RDMA_FIFO_SLOTS];
  (void)payload;
  GDR_WARN("receive #%llu from %s: the peer sent %llu bytes but the receive buffer holds %llu "
           "(message dropped; the send failed with InvalidUsage)",
           (unsigned long long)m->seq, c->peer, (unsigned long long)m->a, (unsigned long long)m->b);
  if (r2 && r2->seq == m->seq) r2->error = ncclInvalidUsage;
  return ncclSuccess;
}

static ncclResult_t on_bye(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  (void)payload;
  c->peer_bye_head = m->seq;
  peer_eof(c, 0);
  return ncclSuccess;
}

static const gdr_rdma_record_fn conn_records[GDR_CTRL_TYPE_MAX + 1] = {
    [GDR_CTRL_SIZE_ERR] = on_size_err,
    [GDR_CTRL_BYE] = on_bye,
};

/* One record from the peer (header checked here; the payload, if any, is complete). */
static ncclResult_t ctrl_record(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  int peer_role = c->kind == GDR_RCOMM_SEND ? GDR_RDMA_ROLE_RECV : GDR_RDMA_ROLE_SEND;
  const char *bad = gdr_rdma_ctrl_check(m, peer_role);
  gdr_rdma_record_fn fn;
  if (bad) {
    gdr_rdma_comm_fail(c, ncclRemoteError,
                       "protocol error on the control channel: %s (magic 0x%x, type %u, length %u, seq %llu)", bad,
                       m->magic, m->type, m->len, (unsigned long long)m->seq);
    return gdr_rdma_comm_check(c);
  }
  fn = conn_records[m->type];
  if (fn != NULL) return fn(c, m, payload);
  if (gdr_health_failed(&c->health)) return gdr_rdma_comm_check(c);
  fn = c->up != NULL ? c->up->record[m->type] : NULL;
  return fn != NULL ? fn(c, m, payload) : ncclSuccess;
}

ncclResult_t gdr_rdma_ctrl_poll(struct gdr_rdma_comm *c) {
  ncclResult_t res = ncclSuccess;
  if (c->fd < 0) return ncclSuccess;
  GDR_CHECK(ctrl_flush(c));
  while (!c->peer_gone && !gdr_health_failed(&c->health)) {
    if (c->ctrl_in_off < sizeof(c->ctrl_in)) {
      size_t before = c->ctrl_in_off;
      if (gdr_sock_recv_nb(c->fd, &c->ctrl_in, sizeof(c->ctrl_in), &c->ctrl_in_off) != ncclSuccess) {
        peer_eof(c, errno);
        break;
      }
      if (c->ctrl_in_off < sizeof(c->ctrl_in)) {
        if (c->ctrl_in_off == before) break; /* nothing more now */
        continue;
      }
      if (c->ctrl_in.magic != GDR_RDMA_CTRL_MAGIC || c->ctrl_in.len > GDR_RDMA_CTRL_MAX_PAYLOAD) {
        GDR_CHECK(ctrl_record(c, &c->ctrl_in, NULL)); /* fails the comm, naming what is wrong */
        break;
      }
    }
    size_t want = sizeof(c->ctrl_in) + c->ctrl_in.len;
    if (c->ctrl_in_off < want) {
      size_t off = c->ctrl_in_off - sizeof(c->ctrl_in), before = off;
      if (gdr_sock_recv_nb(c->fd, c->ctrl_payload, c->ctrl_in.len, &off) != ncclSuccess) {
        peer_eof(c, errno);
        break;
      }
      c->ctrl_in_off = sizeof(c->ctrl_in) + off;
      if (c->ctrl_in_off < want) {
        if (off == before) break;
        continue;
      }
    }
    c->ctrl_in_off = 0;
    GDR_CHECK(ctrl_record(c, &c->ctrl_in, c->ctrl_payload));
  }
out:
  return res;
}

int gdr_rdma_ctrl_eof(struct gdr_rdma_comm *c) {
  const int sender = c->kind == GDR_RCOMM_SEND;
  char why[160];
  if (gdr_health_failed(&c->health)) return 1;
  if (!c->peer_gone || gdr_time_ns() <= c->eof_ns + GDR_RDMA_EOF_GRACE_NS) return 0;
  snprintf(why, sizeof(why), "the peer closed the connection (control channel EOF) %s #%llu",
           sender ? "while this side waited on message" : "with receives pending, the last posted",
           (unsigned long long)(sender ? c->head : c->head - 1));
  gdr_rdma_comm_fail(c, ncclRemoteError, "%s", why);
  atomic_fetch_add_explicit(&c->dev->ctr.failed, 1, memory_order_relaxed);
  return 1;
}

/* ------------------------------------------------------------------------------------------- QPs -- */

static ncclResult_t reg_own(struct gdr_rdma_comm *c);

/* The connection's next QP set (qpset.c), over a complete set of own MRs only (a failed key recovery left some
 * NULL): what is missing is registered first, or no QPs are made (the recovery retries within its bound; the way
 * back from TCP stays on TCP for now). */
ncclResult_t gdr_rdma_qpset_create(struct gdr_rdma_comm *c, struct gdr_rdma_qpset *qs) {
  ncclResult_t res;
  memset(qs, 0, sizeof(*qs));
  if (!gdr_rdma_own_registered(c) && (res = reg_own(c)) != ncclSuccess) {
    GDR_INFO(NCCL_NET, "%s: its own buffers cannot be registered again: no new QPs", c->desc);
    return res;
  }
  return gdr_rdma_qpset_make(c, qs);
}

/* The locks of every device of the connection, which keep their async threads off what they read of it (its QP
 * set, its peer's name), taken in one order for every connection (ascending device index): no two takers deadlock.
 * order: filled for unlock_devs. */
static void lock_devs(struct gdr_rdma_comm *c, int *order) {
  for (int i = 0; i < c->ndevs; i++) {
    int j = i;
    for (; j > 0 && c->m[order[j - 1]].devidx > c->m[i].devidx; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  for (int i = 0; i < c->ndevs; i++) pthread_mutex_lock(&c->m[order[i]].dev->lock);
}

static void unlock_devs(struct gdr_rdma_comm *c, const int *order) {
  for (int i = c->ndevs - 1; i >= 0; i--) pthread_mutex_unlock(&c->m[order[i]].dev->lock);
}

void gdr_rdma_qs_swap(struct gdr_rdma_comm *c, const struct gdr_rdma_qpset *in, struct gdr_rdma_qpset *out) {
  int order[GDR_RDMA_MAX_CONN_DEVS];
  lock_devs(c, order);
  if (out) *out = c->qs;
  if (in)
    c->qs = *in;
  else
    memset(&c->qs, 0, sizeof(c->qs));
  c->qs_gen++;
  unlock_devs(c, order);
}

int gdr_rdma_comm_refresh(struct gdr_rdma_comm *c, int *active) {
  *active = 1;
  for (int i = 0; i < c->ndevs; i++) {
    struct gdr_rdma_member *m = &c->m[i];
    int up = 0, mtu = 0, rc = gdr_rdma_dev_refresh(m->dev, &up, &m->gid, &m->gid_index, &m->lid, &mtu);
    if (rc != 0) return rc;
    if (!up) *active = 0;
  }
  return 0;
}

/* This side's devices as the handshake and the recovery records carry them; rkey: of the own buffer the peer
 * writes into. */
static void fill_addrs(struct gdr_rdma_comm *c, struct gdr_rdma_addr *a) {
  int cap = (int)gdr_param_int(GDR_PARAM_IB_MTU); /* 0 auto, 1..5 */
  for (int i = 0; i < c->ndevs; i++) {
    const struct gdr_rdma_member *m = &c->m[i];
    const struct ibv_mr *own = c->kind == GDR_RCOMM_SEND ? m->fifo_mr : m->sizes_mr;
    int mtu = gdr_rdma_dev_mtu(m->dev);
    memset(&a[i], 0, sizeof(a[i]));
    if (cap > 0 && cap < mtu) mtu = cap;
    a[i].link_layer = (uint8_t)m->dev->link_layer;
    a[i].port = (uint8_t)m->dev->port;
    a[i].mtu = (uint8_t)mtu;
    a[i].gid_index = (uint8_t)m->gid_index;
    a[i].is_global = m->dev->link_layer == IBV_LINK_LAYER_ETHERNET;
    a[i].lid = m->lid;
    a[i].rkey = own ? own->rkey : 0;
    memcpy(a[i].gid, m->gid.raw, 16);
  }
}

void gdr_rdma_fill_qp_state(struct gdr_rdma_comm *c, struct gdr_rdma_rec_state *st) {
  memset(st, 0, sizeof(*st));
  st->nqps = (uint8_t)c->nqps;
  st->ndevs = (uint8_t)c->ndevs;
  for (int i = 0; i < c->nqps; i++) {
    st->qpn[i] = c->qs.qps[i]->qp_num;
    st->psn[i] = c->qs.psn[i];
  }
  fill_addrs(c, st->dev);
  st->raddr = c->kind == GDR_RCOMM_SEND ? (uint64_t)(uintptr_t)c->fifo : (uint64_t)(uintptr_t)c->sizes;
}

/* The peer's devices' addresses and its buffer (raddr and its rkey on each device) from a handshake or a recovery
 * record. */
static void take_peer(struct gdr_rdma_comm *c, const struct gdr_rdma_addr *dev, int ndevs, uint64_t raddr) {
  for (int i = 0; i < ndevs; i++) {
    c->remote.dev[i] = dev[i];
    if (c->kind == GDR_RCOMM_SEND)
      c->rsizes_rkey[i] = dev[i].rkey;
    else
      c->rfifo_rkey[i] = dev[i].rkey;
  }
  if (c->kind == GDR_RCOMM_SEND)
    c->rsizes_addr = raddr;
  else
    c->rfifo_addr = raddr;
}

int gdr_rdma_connect_peer(struct gdr_rdma_comm *c, const struct gdr_rdma_rec_state *st) {
  if (st->ndevs != c->remote.ndevs) {
    GDR_WARN("%s: the peer's new QPs name %d device(s), its handshake %d", c->desc, st->ndevs, c->remote.ndevs);
    return -1;
  }
  if (gdr_rdma_qpset_connect(c, &c->qs, st->qpn, st->psn, st->dev, st->ndevs) != ncclSuccess) return -1;
  take_peer(c, st->dev, st->ndevs, st->raddr);
  return 0;
}

/* The connection's own buffers the peer writes into (sender: the CTS FIFO; receiver: the sizes array), and the
 * staging buffers this side writes from, on every device (the flush's byte too: each device reads into it). Only
 * what is missing is registered: a key recovery whose registration failed left NULLs (the connection then moved
 * to TCP), and whatever makes a new QP set registers them first (gdr_rdma_qpset_create), so no QP ever runs with
 * a missing own MR. */
static ncclResult_t reg_own(struct gdr_rdma_comm *c) {
  const size_t fifo_len = sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS;
  const size_t sizes_len = sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < c->ndevs; i++) {
    struct gdr_rdma_member *m = &c->m[i];
    struct gdr_rdma_dev *d = m->dev;
    if (c->kind == GDR_RCOMM_SEND) {
      /* the FIFO is polled by the CPU: no relaxed ordering on it */
      if (!m->fifo_mr)
        m->fifo_mr = gdr_rdma_reg_internal(d, c->fifo, fifo_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      if (!m->sizes_src_mr) m->sizes_src_mr = gdr_rdma_reg_internal(d, c->sizes_src, sizes_len, 0);
      if (!m->fifo_mr || !m->sizes_src_mr) {
        res = ncclSystemError;
        goto out;
      }
      continue;
    }
    if (!m->cts_src_mr) m->cts_src_mr = gdr_rdma_reg_internal(d, c->cts_src, fifo_len, 0);
    if (!m->sizes_mr)
      m->sizes_mr = gdr_rdma_reg_internal(d, c->sizes, sizes_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (c->gdr_flush && !m->flush_mr)
      m->flush_mr = gdr_rdma_reg_internal(d, c->flush_buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!m->cts_src_mr || !m->sizes_mr || (c->gdr_flush && !m->flush_mr)) {
      res = ncclSystemError;
      goto out;
    }
  }
out:
  return res;
}

/* Every own MR of the connection is there (a QP set may run on it). */
int gdr_rdma_own_registered(const struct gdr_rdma_comm *c) {
  for (int i = 0; i < c->ndevs; i++) {
    const struct gdr_rdma_member *m = &c->m[i];
    if (c->kind == GDR_RCOMM_SEND ? !m->fifo_mr || !m->sizes_src_mr
                                  : !m->cts_src_mr || !m->sizes_mr || (c->gdr_flush && !m->flush_mr))
      return 0;
  }
  return 1;
}

void gdr_rdma_dereg_own(struct gdr_rdma_comm *c) {
  for (int k = 0; k < c->ndevs; k++) {
    struct gdr_rdma_member *m = &c->m[k];
    struct ibv_mr **mrs[] = {&m->fifo_mr, &m->sizes_src_mr, &m->cts_src_mr, &m->sizes_mr, &m->flush_mr};
    for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++) {
      if (*mrs[i]) gdr_ibv.dereg_mr(*mrs[i]);
      *mrs[i] = NULL;
    }
  }
}

ncclResult_t gdr_rdma_rekey(struct gdr_rdma_comm *c) {
  gdr_rdma_dereg_own(c);
  ncclResult_t res = reg_own(c); /* (what it could not register stays NULL: the next QP set registers it first) */
  if (res == ncclSuccess)
    GDR_INFO(NCCL_NET, "%s: new keys for its own buffers (%s)", c->desc,
             c->kind == GDR_RCOMM_SEND ? "CTS FIFO, sizes rows" : "sizes array, CTS staging");
  return res;
}

/* ------------------------------------------------------------------------------- comm lifetime -- */

static void *page_alloc(size_t len) {
  void *p = NULL;
  long pg = sysconf(_SC_PAGESIZE);
  if (posix_memalign(&p, (size_t)(pg > 0 ? pg : 4096), len) != 0) return NULL;
  memset(p, 0, len);
  return p;
}

static void comm_free(struct gdr_rdma_comm *c) {
  if (c == NULL) return;
  gdr_rdma_async_detach(c);
  gdr_rdma_qpset_destroy(&c->qs);
  gdr_rdma_dereg_own(c);
  free(c->fifo);
  free(c->sizes_src);
  free(c->cts_src);
  free(c->sizes);
  free(c->flush_buf);
  free(c->reqs);
  gdr_rdma_pending_destroy(&c->pending);
  /* what a connection that ends half-way leaves: the TCP listener of an accept waiting for the TCP connection
   * (closeListen with the accept pending, or its deadline), and a TCP connect still in flight (the connect stage's
   * deadline, or a move to TCP that failed while connecting) */
  if (c->fb.tcp_listen) gdr_fb_tcp_close_listen(c->fb.tcp_listen);
  c->fb.tcp_listen = NULL;
  gdr_fb_tcp_connect_abort(&c->fb.tcp_handle);
  if (c->stage > 0 && c->kind == GDR_RCOMM_SEND && c->fd < 0) gdr_connector_abort(&c->connector);
  if (c->fd >= 0) gdr_sock_close_graceful(c->fd, c->desc);
  pthread_mutex_destroy(&c->svc_mu);
  free(c);
}

/* A comm on the devices devs[0..ndevs) (checked by the caller). */
static struct gdr_rdma_comm *comm_alloc(const int *devs, int ndevs, int kind) {
  struct gdr_rdma_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  pthread_mutex_init(&c->svc_mu, NULL); /* (service.c) */
  c->kind = kind;
  c->ndevs = ndevs;
  for (int i = 0; i < ndevs; i++) {
    c->m[i].devidx = devs[i];
    c->m[i].dev = &gdr_rdma.devs[devs[i]];
    c->m[i].link.c = c;
  }
  c->devidx = devs[0];
  c->dev = c->m[0].dev;
  c->fd = -1;
  gdr_health_init(&c->health);
  gdr_rdma_pending_init(&c->pending);
  c->tc = -1;
  snprintf(c->peer, sizeof(c->peer), "(connecting)");
  set_desc(c);
  c->fb.tcp_dev = gdr_rdma.tcp_dev;
  c->nreqs_pool = kind == GDR_RCOMM_SEND ? GDR_RDMA_SEND_REQS : 2 * GDR_RDMA_MAX_REQS;
  c->reqs = calloc((size_t)c->nreqs_pool, sizeof(*c->reqs));
  if (c->reqs == NULL) {
    gdr_rdma_pending_destroy(&c->pending);
    free(c);
    return NULL;
  }
  return c;
}

/* The control stream is established: a silent peer host must become an error (keepalive, TCP_USER_TIMEOUT). */
static ncclResult_t ctrl_established(struct gdr_rdma_comm *c, int fd, const union gdr_sockaddr *peer) {
  char name[sizeof(c->peer)];
  int order[GDR_RDMA_MAX_CONN_DEVS];
  c->fd = fd;
  gdr_sockaddr_str(peer, name, sizeof(name));
  /* a connecting comm is on its devices' async lists already: their threads name the peer in what they hand over */
  lock_devs(c, order);
  memcpy(c->peer, name, sizeof(c->peer));
  unlock_devs(c, order);
  set_desc(c);
  return gdr_sock_tune(fd, 1, 0, (int)gdr_param_int(GDR_PARAM_TCP_TIMEOUT_MS));
}

/* The side's own buffers, the first QP set (INIT) and the async-event watch. nqps/split (and on the receiver the
 * sender's handshake) must be there. */
static ncclResult_t comm_setup_verbs(struct gdr_rdma_comm *c) {
  const struct gdr_rdma_dev *lost = NULL;
  ncclResult_t res = ncclSuccess;
  int gdr = 1;
  c->nparts = gdr_stripe_nparts(c->nqps, c->split, c->kind == GDR_RCOMM_SEND ? c->ndevs : c->remote.ndevs);
  for (int i = 0; i < c->ndevs; i++) {
    struct gdr_rdma_member *m = &c->m[i];
    pthread_mutex_lock(&m->dev->lock);
    m->gid = m->dev->gid;
    m->gid_index = m->dev->gid_index;
    m->lid = m->dev->lid;
    pthread_mutex_unlock(&m->dev->lock);
    if (!(m->dev->ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF))) gdr = 0;
  }
  if (c->kind == GDR_RCOMM_SEND) {
    c->fifo = page_alloc(sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
    c->sizes_src = page_alloc(sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS);
    if (!c->fifo || !c->sizes_src) return ncclSystemError;
  } else {
    c->cts_src = page_alloc(sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
    c->sizes = page_alloc(sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS);
    if (!c->cts_src || !c->sizes) return ncclSystemError;
    c->gdr_flush = gdr;
    if (c->gdr_flush && (c->flush_buf = page_alloc(4096)) == NULL) return ncclSystemError;
  }
  GDR_CHECK(reg_own(c));
  GDR_CHECK(gdr_rdma_qpset_create(c, &c->qs));
  res = gdr_rdma_async_attach(c, &lost);
  if (lost != NULL) gdr_rdma_comm_fail(c, ncclSystemError, "device %s had a fatal error (DEVICE_FATAL)", lost->name);
out:
  return res;
}

/* A device of the connection is lost (DEVICE_FATAL) and not back: gdr_rdma_dev_revive looks for it again. */
static int comm_lost(struct gdr_rdma_comm *c) {
  for (int i = 0; i < c->ndevs; i++)
    if (c->m[i].dev->fatal && gdr_rdma_dev_revive(c->m[i].dev) != 0) return 1;
  return 0;
}

/* The RDMA part of a connection that will run on TCP from the start: whatever comm_setup_verbs made, undone. */
static void verbs_teardown(struct gdr_rdma_comm *c) {
  gdr_rdma_async_detach(c);
  gdr_rdma_qpset_destroy(&c->qs);
  gdr_rdma_dereg_own(c);
}

/* The RDMA part failed to come up (setup, QP connect, a lost device): TCP from the start, if allowed. 0 then;
 * -1 when the connection must fail (GDRNET_FALLBACK=0, no TCP transport, or a peer that cannot). */
static int go_tcp_only(struct gdr_rdma_comm *c, const char *why) {
  if (!gdr_fallback_allowed() || !gdr_rdma.tcp_ok ||
      (c->remote.magic == GDR_RDMA_HS_MAGIC && !(c->remote.caps & GDR_RDMA_CAP_FALLBACK))) {
    GDR_WARN("%s: %s, and no fallback to TCP (%s)", c->desc, why,
             !gdr_fallback_allowed() ? gdr_fallback_off_reason()
             : !gdr_rdma.tcp_ok      ? "no TCP transport here"
                                     : "the peer cannot (an older plugin)");
    return -1;
  }
  if (!c->tcp_only) {
    GDR_WARN("%s: %s: the connection runs over TCP from the start", c->desc, why);
    snprintf(c->fb.reason, sizeof(c->fb.reason), "%.255s", why);
  }
  c->tcp_only = 1;
  verbs_teardown(c);
  return 0;
}

/* The TCP connection of a tcp_only connection is up: its data path is TCP for good. */
static void tcp_only_done(struct gdr_rdma_comm *c, void *tcomm) {
  c->fb.tcp = tcomm;
  c->fb.path = GDR_PATH_TCP;
  c->fb.pinned = 1;
  c->fb.since_ns = gdr_time_ns();
  c->fb.fallbacks = 1;
  atomic_fetch_add_explicit(&c->dev->ctr.tcp_only, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->dev->ctr.on_tcp, 1, memory_order_relaxed);
  gdr_health_set_state(&c->health, GDR_HEALTH_ON_TCP);
  GDR_INFO(NCCL_NET, "%s runs over TCP (%s)", c->desc, c->fb.reason);
}

/* The smallest max_msg of this side's devices. */
static uint64_t local_max_msg(const struct gdr_rdma_comm *c) {
  uint64_t mm = UINT64_MAX;
  for (int i = 0; i < c->ndevs; i++)
    if (c->m[i].dev->max_msg < mm) mm = c->m[i].dev->max_msg;
  return mm;
}

static ncclResult_t fill_local_hs(struct gdr_rdma_comm *c, int role) {
  struct gdr_rdma_hs *hs = &c->local;
  int relaxed = 1, gdr = 1;
  size_t off = 0;
  for (int i = 0; i < c->ndevs; i++) {
    relaxed &= c->m[i].dev->relaxed != 0;
    gdr &= (c->m[i].dev->ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) != 0;
  }
  memset(hs, 0, sizeof(*hs));
  hs->magic = GDR_RDMA_HS_MAGIC;
  hs->version = GDR_RDMA_HS_VERSION;
  hs->size = sizeof(*hs);
  hs->caps = (relaxed ? GDR_RDMA_CAP_RELAXED_ORDERING : 0) | (gdr ? GDR_RDMA_CAP_GDR : 0) |
             (c->qs.flush_qp[0] ? GDR_RDMA_CAP_FLUSH : 0) | GDR_RDMA_CAP_RECOVERY |
             (gdr_fallback_allowed() && gdr_rdma.tcp_ok ? GDR_RDMA_CAP_FALLBACK | GDR_RDMA_CAP_BACK_TAGS : 0);
  hs->role = (uint8_t)role;
  hs->nqps = (uint8_t)c->nqps;
  hs->split = (uint8_t)c->split;
  hs->ndevs = (uint8_t)c->ndevs;
  hs->max_msg = local_max_msg(c);
  fill_addrs(c, hs->dev);
  for (int i = 0; i < c->ndevs && off + 1 < sizeof(hs->devname); i++) { /* "a" or, fused, "a+b" */
    int w = snprintf(hs->devname + off, sizeof(hs->devname) - off, "%s%s", i ? "+" : "", c->m[i].dev->name);
    if (w < 0) break;
    off += (size_t)w;
  }
  if (c->tcp_only) {
    hs->caps |= GDR_RDMA_CAP_TCP_ONLY;
    return ncclSuccess;
  }
  for (int i = 0; i < c->nqps; i++) {
    hs->qpn[i] = c->qs.qps[i]->qp_num;
    hs->psn[i] = c->qs.psn[i];
  }
  hs->raddr = role == GDR_RDMA_ROLE_SEND ? (uint64_t)(uintptr_t)c->fifo : (uint64_t)(uintptr_t)c->sizes;
  return ncclSuccess;
}

/* Validates the peer's blob and brings every data QP to RTS. */
static ncclResult_t connect_qps(struct gdr_rdma_comm *c, int expected_role) {
  struct gdr_rdma_dev *d = c->dev;
  const struct gdr_rdma_hs *r = &c->remote;
  const char *bad = gdr_rdma_hs_check(r, expected_role);
  if (bad) {
    GDR_WARN("%s: malformed RDMA handshake from %s: %s; connection rejected", d->name, c->peer, bad);
    return ncclRemoteError;
  }
  for (int i = 0; i < c->nqps; i++) {
    const struct gdr_rdma_dev *ld = c->m[i % c->ndevs].dev;
    const struct gdr_rdma_addr *ra = &r->dev[i % r->ndevs];
    if (ra->link_layer == ld->link_layer) continue;
    GDR_WARN("%s (%s) cannot talk to %s's %.64s (device %d: %s): link layers differ; set GDRNET_HCA on both sides",
             ld->name, ld->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB", c->peer, r->devname, i % r->ndevs,
             ra->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB");
    return ncclSystemError; /* no RDMA path between the two: TCP may carry the connection (fallback) */
  }
  if (expected_role == GDR_RDMA_ROLE_RECV && (r->nqps != c->nqps || r->split != c->split)) {
    GDR_WARN("%s: the receiver %s answered %d QPs split %d, asked %d split %d; connection rejected", d->name, c->peer,
             r->nqps, r->split, c->nqps, c->split);
    return ncclRemoteError;
  }
  if (gdr_rdma_qpset_connect(c, &c->qs, r->qpn, r->psn, r->dev, r->ndevs) != ncclSuccess) return ncclSystemError;
  take_peer(c, r->dev, r->ndevs, r->raddr);
  for (int i = 0; i < c->nqps; i++) { /* (the data path's table: no division per work request) */
    c->qp_ldev[i] = (uint8_t)(i % c->ndevs);
    c->qp_rdev[i] = (uint8_t)(i % r->ndevs);
  }
  /* the longest WR both sides' devices take, in whole 128-byte lines (a WRITE is never longer than 2^31 bytes) */
  uint64_t mw = local_max_msg(c);
  if (r->max_msg < mw) mw = r->max_msg;
  if (mw > (1ull << 31)) mw = 1ull << 31;
  c->max_wr = mw / GDR_RDMA_CHUNK_ALIGN * GDR_RDMA_CHUNK_ALIGN;
  char lg[96], rg[96];
  gdr_rdma_addr_str(c, 0, lg, sizeof(lg));
  gdr_rdma_addr_str(c, 1, rg, sizeof(rg));
  GDR_INFO(NCCL_NET, "%s connection %s %s <-> %s %.64s %s: %d QP%s (%s)%s, MTU %d, WRs of at most %llu bytes%s%s",
           c->kind == GDR_RCOMM_SEND ? "send" : "recv", c->local.devname, lg, c->peer, r->devname, rg, c->nqps,
           c->nqps > 1 ? "s" : "",
           c->split        ? "split, 128-byte chunks"
           : c->nparts > 1 ? "striped"
                           : "whole messages",
           c->ndevs > 1 || r->ndevs > 1 ? ", QP i on device i mod n of each side" : "", 128 << c->mtu,
           (unsigned long long)c->max_wr, c->qs.flush_qp[0] ? ", GDR flush" : "",
           (r->caps & GDR_RDMA_CAP_RECOVERY) ? "" : ", peer without recovery (an older plugin): faults fail");
  return ncclSuccess;
}

/* ---------------------------------------------------------------------------------------- listen -- */

/* The connection's devices (opts->devs: one, or a fused device's) exist and are distinct. */
static ncclResult_t devs_check(int dev, const struct gdr_conn_opts *opts) {
  if (opts->ndevs < 1 || opts->ndevs > GDR_RDMA_MAX_CONN_DEVS || opts->devs[0] != dev) return ncclInvalidArgument;
  for (int i = 0; i < opts->ndevs; i++) {
    if (opts->devs[i] < 0 || opts->devs[i] >= gdr_rdma.ndevs) return ncclInvalidArgument;
    for (int j = 0; j < i; j++)
      if (opts->devs[j] == opts->devs[i]) return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The TCP door of a listen, on the TCP device of the handshake's address (a peer reaches it where it reaches the
 * listener). Without one (no TCP device there, or its listen failed) the listener does not announce GDR_CAP_TCP:
 * a peer without RDMA is then refused at once, on both sides. */
static void open_door(struct gdr_rdma_listen *l) {
  struct gdr_conn_opts to = gdr_rdma_tcp_opts(l->tc);
  struct gdr_handle *h = &l->door_handle;
  memset(h, 0, sizeof(*h));
  if (!gdr_fb_tcp_dev_at(gdr_rdma.tcp_dev, &gdr_rdma.if_addr) ||
      gdr_fb_tcp_listen(gdr_rdma.tcp_dev, &to, h, &l->door) != ncclSuccess) {
    l->door = NULL;
    l->l.caps &= ~GDR_CAP_TCP;
  }
}

ncclResult_t gdr_rdma_listen(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **listen_comm) {
  *listen_comm = NULL;
  if (devs_check(dev, opts) != ncclSuccess) return ncclInvalidArgument;
  struct gdr_rdma_listen *l = calloc(1, sizeof(*l));
  if (l == NULL) return ncclSystemError;
  l->dev = dev;
  l->tc = opts->traffic_class;
  l->ndevs = opts->ndevs;
  memcpy(l->devs, opts->devs, sizeof(int) * (size_t)opts->ndevs);
  ncclResult_t res = gdr_listener_open(&l->l, &gdr_rdma.if_addr, GDR_TP_RDMA, gdr_rdma_caps());
  if (res != ncclSuccess) {
    free(l);
    return res;
  }
  if (l->l.caps & GDR_CAP_TCP) open_door(l);
  gdr_listener_handle(&l->l, (uint32_t)dev, handle);
  if (l->door != NULL) gdr_handle_door_set(handle, &l->door_handle);
  *listen_comm = l;
  return ncclSuccess;
}

ncclResult_t gdr_rdma_close_listen(void *listen_comm) {
  struct gdr_rdma_listen *l = listen_comm;
  if (l == NULL) return ncclSuccess;
  comm_free(l->pending);
  if (l->door != NULL) gdr_fb_tcp_close_listen(l->door);
  gdr_listener_close(&l->l);
  free(l);
  return ncclSuccess;
}

static ncclResult_t stage_deadline(struct gdr_rdma_comm *c, const char *what) {
  if (c->deadline_ns && gdr_time_ns() > c->deadline_ns) {
    GDR_WARN("%s: RDMA handshake with %s timed out (%s) after GDRNET_CONNECT_TIMEOUT_MS=%lld", c->dev->name, c->peer,
             what, (long long)gdr_connect_timeout_ms());
    return ncclRemoteError;
  }
  return ncclSuccess;
}

static void arm_deadline(struct gdr_rdma_comm *c) { c->deadline_ns = gdr_time_ns() + gdr_connect_timeout_ns(); }

/* One non-blocking step of a handshake blob on the control stream. *done once it is through (the blob
 * io is then reset for the next step); waiting past the handshake deadline fails. A received blob must
 * have exactly len bytes. `what` names the step in messages. */
static ncclResult_t hs_send(struct gdr_rdma_comm *c, uint32_t type, const void *data, uint32_t len, const char *what,
                            int *done) {
  *done = 0;
  ncclResult_t r = gdr_sock_blob_send(c->fd, &c->bio, type, data, len, done);
  if (r != ncclSuccess) return r;
  if (!*done) return stage_deadline(c, what);
  memset(&c->bio, 0, sizeof(c->bio));
  return ncclSuccess;
}

static ncclResult_t hs_recv(struct gdr_rdma_comm *c, uint32_t type, void *data, uint32_t len, const char *what,
                            int *done) {
  uint32_t got = 0;
  *done = 0;
  ncclResult_t r = gdr_sock_blob_recv(c->fd, &c->bio, type, data, len, &got, done);
  if (r != ncclSuccess) return r;
  if (!*done) return stage_deadline(c, what);
  memset(&c->bio, 0, sizeof(c->bio));
  if (type == GDR_RDMA_BLOB_HS && got >= 8) {
    /* magic, version and size sit where every version put them: a peer of another version is told apart */
    const struct gdr_rdma_hs *hs = data;
    if (hs->magic == GDR_RDMA_HS_MAGIC && hs->version != GDR_RDMA_HS_VERSION) {
      GDR_WARN("%s: %s from %s speaks RDMA protocol version %u, this plugin version %u (%s): run the same "
               "libnccl-net-gdr on both sides; connection rejected",
               c->dev->name, what, c->peer, hs->version, GDR_RDMA_HS_VERSION,
               hs->version < GDR_RDMA_HS_VERSION ? "the peer's plugin is older: messages below 2 GiB, no NIC fusion"
                                                 : "the peer's plugin is newer");
      return ncclRemoteError;
    }
  }
  if (got != len) {
    GDR_WARN("%s: %s from %s: %u bytes, expected %u; connection rejected", c->dev->name, what, c->peer, got, len);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* --------------------------------------------------------------------------------------- connect -- */

enum { CS_TCP = 1, CS_SEND_HS, CS_RECV_HS, CS_SEND_READY, CS_RECV_TCPH, CS_TCP_CONNECT, CS_TCP_DIRECT };

/* A TCP comm of a mixed pair inside an RDMA comm of this side (TCP from the start): its one INFO line. */
static struct gdr_rdma_comm *wrap_tcp_peer(const int *devs, int ndevs, int kind, void *tc) {
  struct gdr_rdma_comm *c = comm_alloc(devs, ndevs, kind);
  uint32_t peer_caps = 0;
  char m[200];
  if (c == NULL) return NULL;
  snprintf(c->peer, sizeof(c->peer), "%s", gdr_fb_tcp_peer(tc, &peer_caps));
  set_desc(c);
  c->tcp_only = 1;
  snprintf(c->fb.reason, sizeof(c->fb.reason), "%s", gdr_mixed_str(gdr_rdma_caps(), peer_caps, m, sizeof(m)));
  tcp_only_done(c, tc);
  return c;
}

/* A peer without RDMA listens with a TCP handle: the connection is a TCP one inside this RDMA comm, unless this
 * process cannot speak TCP to it (GDRNET_TRANSPORT=rdma, no TCP transport): then both sides fail at once. */
static ncclResult_t connect_tcp_peer(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle,
                                     void **send_comm) {
  ncclResult_t res = ncclSuccess;
  void *tc = NULL;
  struct gdr_conn_opts to = gdr_rdma_tcp_opts(opts->traffic_class);
  struct gdr_rdma_comm *c;
  if (devs_check(dev, opts) != ncclSuccess) return ncclInvalidArgument;
  if (!(gdr_rdma_caps() & GDR_CAP_TCP)) return gdr_connect_refuse(handle, GDR_TP_RDMA, gdr_rdma_caps());
  GDR_CHECK(gdr_fb_tcp_connect(gdr_rdma.tcp_dev, &to, handle, &tc));
  if (tc == NULL) return ncclSuccess; /* in progress (its state is in the handle) */
  c = wrap_tcp_peer(opts->devs, opts->ndevs, GDR_RCOMM_SEND, tc);
  if (c == NULL) {
    gdr_fb_tcp_close(tc, 1);
    return ncclSystemError;
  }
  *send_comm = c;
out:
  return res;
}

/* Connect, step by step: one function per stage, found through a table. Each returns an error (the comm goes), or
 * moves c->stage on (0: connected) or sets *wait (NCCL calls again). */
typedef ncclResult_t hs_stage_fn(struct gdr_rdma_comm *c, int *wait);

static ncclResult_t cs_tcp(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res = gdr_connector_poll(&c->connector, &done);
  if (res != ncclSuccess || (*wait = !done)) return res;
  if ((res = ctrl_established(c, c->connector.fd, &c->connector.peer)) != ncclSuccess) return res;
  if ((res = fill_local_hs(c, GDR_RDMA_ROLE_SEND)) != ncclSuccess) return res;
  arm_deadline(c);
  c->stage = CS_SEND_HS;
  return ncclSuccess;
}

static ncclResult_t cs_send_hs(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res = hs_send(c, GDR_RDMA_BLOB_HS, &c->local, sizeof(c->local), "sending our handshake", &done);
  *wait = !done;
  if (res == ncclSuccess && done) c->stage = CS_RECV_HS;
  return res;
}

/* The receiver's handshake: our QPs to RTS towards its (READY), or TCP from the start (READY_TCP). */
static ncclResult_t cs_recv_hs(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res = hs_recv(c, GDR_RDMA_BLOB_HS, &c->remote, sizeof(c->remote), "the receiver's handshake", &done);
  if (res != ncclSuccess || (*wait = !done)) return res;
  c->ready_word = GDR_RDMA_BLOB_READY;
  if (c->tcp_only || (c->remote.caps & GDR_RDMA_CAP_TCP_ONLY)) {
    const char *bad = gdr_rdma_hs_check(&c->remote, GDR_RDMA_ROLE_RECV);
    if (bad) {
      GDR_WARN("%s: malformed RDMA handshake from %s: %s; connection rejected", c->dev->name, c->peer, bad);
      return ncclRemoteError;
    }
    if (go_tcp_only(c, c->tcp_only ? c->fb.reason : "the receiver's RDMA part failed") != 0) return ncclSystemError;
    c->ready_word = GDR_RDMA_READY_TCP;
  } else {
    res = connect_qps(c, GDR_RDMA_ROLE_RECV);
    if (res == ncclRemoteError) return res; /* a malformed handshake is rejected, not worked around */
    if (res != ncclSuccess) {
      if (go_tcp_only(c, "bringing the QPs to RTS failed") != 0) return res;
      c->ready_word = GDR_RDMA_READY_TCP;
    }
  }
  c->stage = CS_SEND_READY;
  return ncclSuccess;
}

static ncclResult_t cs_send_ready(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res = hs_send(c, GDR_RDMA_BLOB_READY, &c->ready_word, sizeof(c->ready_word), "sending READY", &done);
  if (res != ncclSuccess || (*wait = !done)) return res;
  c->stage = c->ready_word == GDR_RDMA_BLOB_READY ? 0 : CS_RECV_TCPH;
  return ncclSuccess;
}

static ncclResult_t cs_recv_tcph(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res =
      hs_recv(c, GDR_RDMA_BLOB_TCPH, &c->fb.tcp_handle, sizeof(c->fb.tcp_handle), "the receiver's TCP listener", &done);
  if (res != ncclSuccess || (*wait = !done)) return res;
  c->stage = CS_TCP_CONNECT;
  return ncclSuccess;
}

static ncclResult_t cs_tcp_connect(struct gdr_rdma_comm *c, int *wait) {
  void *tc = NULL;
  struct gdr_conn_opts to = gdr_rdma_tcp_opts(c->tc);
  ncclResult_t res = gdr_fb_tcp_connect(gdr_rdma.tcp_dev, &to, &c->fb.tcp_handle, &tc);
  if (res != ncclSuccess) return res;
  if (tc == NULL) {
    *wait = 1;
    return stage_deadline(c, "the TCP connection"); /* past it: the comm and its TCP connect go */
  }
  tcp_only_done(c, tc);
  c->stage = 0;
  return ncclSuccess;
}

static hs_stage_fn *const connect_stages[] = {
    [CS_TCP] = cs_tcp,
    [CS_SEND_HS] = cs_send_hs,
    [CS_RECV_HS] = cs_recv_hs,
    [CS_SEND_READY] = cs_send_ready,
    [CS_RECV_TCPH] = cs_recv_tcph,
    [CS_TCP_CONNECT] = cs_tcp_connect,
};

/* Runs the stages of a handshake until it is through (c->stage 0) or waits (*wait). */
static ncclResult_t run_stages(struct gdr_rdma_comm *c, hs_stage_fn *const *stages, int nstages, int *wait) {
  ncclResult_t res = ncclSuccess;
  *wait = 0;
  while (c->stage != 0 && !*wait && res == ncclSuccess) {
    if (c->stage < 0 || c->stage >= nstages || stages[c->stage] == NULL) return ncclInternalError;
    res = stages[c->stage](c, wait);
  }
  return res;
}

/* A new send comm for the handle: its RDMA part (or TCP from the start) and the control stream's connect started. */
static ncclResult_t connect_start(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle,
                                  struct gdr_rdma_comm **out) {
  ncclResult_t res = ncclSuccess;
  union gdr_sockaddr peer;
  uint64_t conn_id = 0;
  struct gdr_rdma_comm *c;
  *out = NULL;
  if (devs_check(dev, opts) != ncclSuccess) return ncclInvalidArgument;
  if (gdr_handle_check(handle, &peer) != ncclSuccess) return ncclInvalidUsage;
  if (handle->transport != GDR_TP_RDMA) {
    GDR_WARN("RDMA connect with a handle for transport %d", handle->transport);
    return ncclInvalidUsage;
  }
  c = comm_alloc(opts->devs, opts->ndevs, GDR_RCOMM_SEND);
  if (c == NULL) return ncclSystemError;
  *out = c;
  c->tc = opts->traffic_class;
  gdr_sockaddr_str(&peer, c->peer, sizeof(c->peer));
  set_desc(c);
  /* GDRNET_QPS_PER_CONN per device (as NCCL's IB), a multiple of the devices, at most 16 */
  c->nqps = gdr_rdma.nqps * c->ndevs;
  if (c->nqps > GDR_RDMA_MAX_QPS) c->nqps = GDR_RDMA_MAX_QPS - GDR_RDMA_MAX_QPS % c->ndevs;
  c->split = gdr_rdma.split;
  gdr_random_bytes(&conn_id, sizeof(conn_id));
  if (comm_lost(c)) {
    if (go_tcp_only(c, "the device is lost (DEVICE_FATAL)") != 0) return ncclSystemError;
  } else if (comm_setup_verbs(c) != ncclSuccess && go_tcp_only(c, "setting up the RDMA part failed") != 0) {
    return ncclSystemError;
  }
  GDR_CHECK(gdr_connector_start(&c->connector, handle, GDR_STREAM_CTRL, 0, 0, conn_id, gdr_rdma_caps(), NULL));
  c->stage = CS_TCP;
  GDR_CHECK(gdr_handle_state_set(handle, c));
out:
  return res;
}

ncclResult_t gdr_rdma_connect(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **send_comm) {
  ncclResult_t res = ncclSuccess;
  struct gdr_rdma_comm *c = NULL;
  int wait = 0;
  *send_comm = NULL;
  if (handle->magic == GDR_HANDLE_MAGIC && handle->transport == GDR_TP_TCP)
    return connect_tcp_peer(dev, opts, handle, send_comm);
  c = gdr_handle_state_get(handle);
  if (c == NULL) {
    res = connect_start(dev, opts, handle, &c);
    if (res != ncclSuccess && c == NULL) return res; /* (refused before a comm existed) */
    if (res != ncclSuccess) goto out;
  }
  GDR_CHECK(run_stages(c, connect_stages, (int)(sizeof(connect_stages) / sizeof(connect_stages[0])), &wait));
  if (wait) return ncclSuccess;
  gdr_handle_state_set(handle, NULL);
  *send_comm = c;
  return ncclSuccess;
out:
  gdr_handle_state_set(handle, NULL);
  comm_free(c);
  return res;
}

/* ---------------------------------------------------------------------------------------- accept -- */

enum { AS_RECV_HS = 1, AS_SEND_HS, AS_RECV_READY, AS_SEND_TCPH, AS_TCP_ACCEPT };

/* The sender's handshake: the QPs it asks for, this side's RDMA part (or TCP from the start), our QPs to RTS. */
static ncclResult_t as_recv_hs(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res = hs_recv(c, GDR_RDMA_BLOB_HS, &c->remote, sizeof(c->remote), "the sender's handshake", &done);
  if (res != ncclSuccess || (*wait = !done)) return res;
  const char *bad = gdr_rdma_hs_check(&c->remote, GDR_RDMA_ROLE_SEND);
  if (bad) {
    GDR_WARN("%s: malformed RDMA handshake from %s: %s; connection rejected", c->dev->name, c->peer, bad);
    return ncclRemoteError;
  }
  c->nqps = c->remote.nqps; /* the sender decides */
  c->split = c->remote.split;
  if (c->nqps != gdr_rdma.nqps * c->ndevs || c->split != gdr_rdma.split)
    GDR_INFO(NCCL_NET,
             "%s: sender %s asks %d QPs split %d (local setting %d per device, split %d; %d device(s)): "
             "following the sender",
             c->dev->name, c->peer, c->nqps, c->split, gdr_rdma.nqps, gdr_rdma.split, c->ndevs);
  if (c->ndevs > c->nqps) { /* every device carries a QP: the devices past the QPs are left out */
    GDR_INFO(NCCL_NET, "%s: %d QP(s) for %d devices: the connection runs on the first %d", c->desc, c->nqps, c->ndevs,
             c->nqps);
    c->ndevs = c->nqps;
    set_desc(c);
  }
  const char *tcp_why = (c->remote.caps & GDR_RDMA_CAP_TCP_ONLY) ? "the sender's RDMA part failed"
                        : comm_lost(c)                           ? "the device is lost (DEVICE_FATAL)"
                        : comm_setup_verbs(c) != ncclSuccess     ? "setting up the RDMA part failed"
                                                                 : NULL;
  if (tcp_why != NULL && go_tcp_only(c, tcp_why) != 0) return ncclSystemError;
  if ((res = fill_local_hs(c, GDR_RDMA_ROLE_RECV)) != ncclSuccess) return res;
  if (!c->tcp_only) {
    res = connect_qps(c, GDR_RDMA_ROLE_SEND);
    if (res == ncclRemoteError) return res;
    if (res != ncclSuccess) {
      if (go_tcp_only(c, "bringing the QPs to RTS failed") != 0) return res;
      if ((res = fill_local_hs(c, GDR_RDMA_ROLE_RECV)) != ncclSuccess) return res;
    }
  }
  c->stage = AS_SEND_HS;
  return ncclSuccess;
}

static ncclResult_t as_send_hs(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res = hs_send(c, GDR_RDMA_BLOB_HS, &c->local, sizeof(c->local), "sending our handshake", &done);
  if (res != ncclSuccess || (*wait = !done)) return res;
  c->stage = AS_RECV_READY;
  return ncclSuccess;
}

/* READY: connected; READY_TCP (the sender's RDMA part failed after ours was up, or ours did): TCP from the start,
 * through a TCP listener of this side. */
static ncclResult_t as_recv_ready(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res = hs_recv(c, GDR_RDMA_BLOB_READY, &c->ready_word, sizeof(c->ready_word), "READY", &done);
  if (res != ncclSuccess || (*wait = !done)) return res;
  if (c->ready_word == GDR_RDMA_BLOB_READY && !c->tcp_only) {
    c->stage = 0;
    return ncclSuccess;
  }
  if (c->ready_word != GDR_RDMA_READY_TCP) {
    GDR_WARN("%s: bad READY from %s; connection rejected", c->dev->name, c->peer);
    return ncclRemoteError;
  }
  if (go_tcp_only(c, c->tcp_only ? c->fb.reason : "the sender could not bring its QPs up") != 0) return ncclSystemError;
  memset(&c->fb.tcp_handle, 0, sizeof(c->fb.tcp_handle));
  struct gdr_conn_opts to = gdr_rdma_tcp_opts(c->tc);
  if ((res = gdr_fb_tcp_listen(gdr_rdma.tcp_dev, &to, &c->fb.tcp_handle, &c->fb.tcp_listen)) != ncclSuccess) return res;
  c->stage = AS_SEND_TCPH;
  return ncclSuccess;
}

static ncclResult_t as_send_tcph(struct gdr_rdma_comm *c, int *wait) {
  int done = 0;
  ncclResult_t res =
      hs_send(c, GDR_RDMA_BLOB_TCPH, &c->fb.tcp_handle, sizeof(c->fb.tcp_handle), "sending our TCP listener", &done);
  if (res != ncclSuccess || (*wait = !done)) return res;
  c->stage = AS_TCP_ACCEPT;
  return ncclSuccess;
}

static ncclResult_t as_tcp_accept(struct gdr_rdma_comm *c, int *wait) {
  void *tc = NULL;
  ncclResult_t res = gdr_fb_tcp_accept(c->fb.tcp_listen, &tc);
  if (res != ncclSuccess) return res;
  if (tc == NULL) {
    *wait = 1;
    return stage_deadline(c, "the TCP connection");
  }
  gdr_fb_tcp_close_listen(c->fb.tcp_listen);
  c->fb.tcp_listen = NULL;
  tcp_only_done(c, tc);
  c->stage = 0;
  return ncclSuccess;
}

static hs_stage_fn *const accept_stages[] = {
    [AS_RECV_HS] = as_recv_hs,     [AS_SEND_HS] = as_send_hs,       [AS_RECV_READY] = as_recv_ready,
    [AS_SEND_TCPH] = as_send_tcph, [AS_TCP_ACCEPT] = as_tcp_accept,
};

/* A new connection at the listener: through the TCP door (a peer without RDMA: *recv_comm, done), or on the
 * listener's socket (l->pending, its handshake to run). Nothing yet: neither. */
static ncclResult_t accept_start(struct gdr_rdma_listen *l, void **recv_comm) {
  ncclResult_t res = ncclSuccess;
  struct gdr_stream s;
  struct gdr_rdma_comm *c;
  int got = 0;
  if (l->door != NULL) { /* a peer without RDMA, through the TCP door */
    void *tc = NULL;
    GDR_CHECK(gdr_fb_tcp_accept(l->door, &tc));
    if (tc != NULL) {
      c = wrap_tcp_peer(l->devs, l->ndevs, GDR_RCOMM_RECV, tc);
      if (c == NULL) {
        gdr_fb_tcp_close(tc, 0);
        return ncclSystemError;
      }
      *recv_comm = c;
      return ncclSuccess;
    }
  }
  GDR_CHECK(gdr_listener_poll(&l->l, &s, &got));
  if (!got) return ncclSuccess;
  c = comm_alloc(l->devs, l->ndevs, GDR_RCOMM_RECV);
  if (c == NULL) {
    close(s.fd);
    return ncclSystemError;
  }
  c->tc = l->tc;
  l->pending = c;
  GDR_CHECK(ctrl_established(c, s.fd, &s.peer));
  arm_deadline(c);
  c->stage = AS_RECV_HS;
out:
  return res;
}

ncclResult_t gdr_rdma_accept(void *listen_comm, void **recv_comm) {
  struct gdr_rdma_listen *l = listen_comm;
  ncclResult_t res = ncclSuccess;
  int wait = 0;
  *recv_comm = NULL;
  if (l->pending == NULL) {
    GDR_CHECK(accept_start(l, recv_comm));
    if (*recv_comm != NULL || l->pending == NULL) return ncclSuccess;
  }
  struct gdr_rdma_comm *c = l->pending;
  GDR_CHECK(run_stages(c, accept_stages, (int)(sizeof(accept_stages) / sizeof(accept_stages[0])), &wait));
  if (wait) return ncclSuccess;
  l->pending = NULL;
  *recv_comm = c;
  return ncclSuccess;
out:
  comm_free(l->pending);
  l->pending = NULL;
  return res;
}

/* ----------------------------------------------------------------------------------------- close -- */

/* (the resiliency layer closed its part first: gdr_rdma_resil_close) */
static ncclResult_t close_comm(struct gdr_rdma_comm *c) {
  if (c == NULL) return ncclSuccess;
  /* best effort: the peer learns that we are gone from the EOF anyway */
  if (c->stage == 0) (void)gdr_rdma_ctrl_send(c, GDR_CTRL_BYE, c->head, 0, 0, NULL, 0);
  comm_free(c);
  return ncclSuccess;
}

ncclResult_t gdr_rdma_close_send(void *send_comm) { return close_comm(send_comm); }
ncclResult_t gdr_rdma_close_recv(void *recv_comm) { return close_comm(recv_comm); }

/* ---------------------------------------------------------------------------------------------- describe -- */

/* transport.h describe, from another thread: the peer and the control socket (set at connect), the health state
 * (atomic); the QPs, counters and the TCP comm of a moved connection only when its svc_mu is free (tried a few
 * times, never waited for: the owner's calls hold it; the path is then left "" and the caller keeps the last one). */
int gdr_rdma_describe(void *comm, struct gdr_conn_desc *out) {
  struct gdr_rdma_comm *c = comm;
  if (c == NULL) return -1;
  snprintf(out->peer, sizeof(out->peer), "%s", c->peer);
  const int st = gdr_health_state(&c->health);
  out->state = gdr_health_failed(&c->health) ? GDR_CONN_FAILED
               : c->tcp_only                 ? GDR_CONN_TCP_ONLY
               : st == GDR_HEALTH_RECOVERING ? GDR_CONN_RECOVERING
               : st == GDR_HEALTH_ON_TCP     ? GDR_CONN_MOVED_TCP
                                             : GDR_CONN_RDMA;
  gdr_connstat_sock_facts(c->fd, out);
  int locked = 0;
  for (int i = 0; i < 64 && !(locked = pthread_mutex_trylock(&c->svc_mu) == 0); i++) sched_yield();
  if (!locked) return 0;
  size_t o = (size_t)snprintf(out->path, sizeof(out->path), "%s port %d, QP", c->dev->name, c->dev->port);
  for (int i = 0; i < c->nqps && c->qs.qps[i] != NULL && o < sizeof(out->path); i++)
    o += (size_t)snprintf(out->path + o, sizeof(out->path) - o, " 0x%x", c->qs.qps[i]->qp_num);
  if (c->qs.qps[0] == NULL && o < sizeof(out->path)) snprintf(out->path + o, sizeof(out->path) - o, "s: none now");
  out->recoveries = (int64_t)c->rec.recoveries;
  out->moves = (int64_t)c->fb.fallbacks;
  if (st == GDR_HEALTH_RECOVERING && c->rec.attempt > 0)
    snprintf(out->note, sizeof(out->note), "recovery attempt %u, first fault: %.200s", c->rec.attempt,
             c->rec.first_fault);
  if (out->state == GDR_CONN_RDMA && atomic_load_explicit(&c->pending.n, memory_order_acquire) > 0 &&
      pthread_mutex_trylock(&c->pending.lock) == 0) {
    /* a fault the event thread queued: its handling (a recovery, a move) starts at the next progress call */
    if (c->pending.n > 0) {
      out->state = GDR_CONN_RECOVERING;
      snprintf(out->note, sizeof(out->note), "fault queued, handled at the next progress call: %.200s",
               c->pending.ev[c->pending.head % GDR_RDMA_PENDING_MAX].why);
    }
    pthread_mutex_unlock(&c->pending.lock);
  }
  if (c->fb.tcp != NULL) {
    struct gdr_conn_desc t;
    memset(&t, 0, sizeof(t));
    t.peer_silent_ms = -1;
    t.unsent = -1;
    if (gdr_fb_tcp_describe(c->fb.tcp, &t) == 0) {
      snprintf(out->note, sizeof(out->note), "over TCP (%.20s) to %.48s%s%.60s", t.path, t.peer,
               c->fb.reason[0] ? ": " : "", c->fb.reason);
      out->unsent = t.unsent;
      out->peer_closed |= t.peer_closed;
    }
  }
  pthread_mutex_unlock(&c->svc_mu);
  return 0;
}
