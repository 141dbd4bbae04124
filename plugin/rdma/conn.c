/* RDMA transport: listen / connect / accept (non-blocking state machines over the core's sockets),
 * QP bring-up RESET -> INIT -> RTR -> RTS, the control channel, close.
 *
 * Handshake on the connection's TCP control stream (after the core's HELLO/ACK with the listen
 * nonce, which the listener verifies):
 *   sender   -> receiver  HS   (role SEND: QPNs, PSNs, LID/GID, MTU, nqps/split, FIFO addr/rkey)
 *   receiver -> sender    HS   (role RECV: QPNs, PSNs, LID/GID, MTU, sizes-array addr/rkey)
 *   sender   -> receiver  READY (the sender's QPs are RTS: the receiver may now write CTS entries)
 * The receiver's QPs reach RTS before it answers; the sender's before READY.  The stream then stays
 * open as the control channel: size errors travel on it, and its EOF tells a dead peer. */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gid.h"
#include "rdma.h"

#define GDR_RDMA_QP_SEND_WR 512 /* >= 32 messages x (8 WRITEs + 1 WRITE_WITH_IMM) per QP */
#define GDR_RDMA_QP_RECV_WR 64  /* >= 32 receives in flight per QP */
#define GDR_RDMA_INLINE 256     /* a whole grouped CTS (8 x 32 bytes) */

/* ---------------------------------------------------------------------------------------- fatal -- */

/* fatal: 0 healthy, 2 a reason is being written (by the async thread or the progress thread, whoever
 * came first), 1 failed with fatal_why complete. */
void gdr_rdma_comm_mark_fatal(struct gdr_rdma_comm *c, const char *fmt, ...) {
  int expect = 0;
  if (!atomic_compare_exchange_strong_explicit(&c->fatal, &expect, 2, memory_order_acq_rel, memory_order_acquire))
    return; /* the first reason wins */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->fatal_why, sizeof(c->fatal_why), fmt, ap);
  va_end(ap);
  atomic_store_explicit(&c->fatal, 1, memory_order_release);
}

ncclResult_t gdr_rdma_comm_check(struct gdr_rdma_comm *c) {
  int f = atomic_load_explicit(&c->fatal, memory_order_acquire);
  if (f == 0) return ncclSuccess;
  for (int i = 0; f == 2 && i < 100000; i++) { /* the reason is being written (a snprintf away) */
    sched_yield();
    f = atomic_load_explicit(&c->fatal, memory_order_acquire);
  }
  if (!c->fatal_warned) {
    c->fatal_warned = 1;
    GDR_WARN("%s connection to %s (%s port %d) failed: %s", c->kind == GDR_RCOMM_SEND ? "send" : "receive",
             c->peer, c->dev->name, c->dev->port, c->fatal_why);
  }
  return ncclRemoteError;
}

void gdr_rdma_addr_str(const struct gdr_rdma_comm *c, int remote, char *buf, size_t len) {
  const struct gdr_rdma_dev *d = c->dev;
  if (d->link_layer == IBV_LINK_LAYER_ETHERNET)
    gdr_gid_format(remote ? c->remote.gid : d->gid.raw, buf, (int)len);
  else
    snprintf(buf, len, "LID %u", remote ? c->remote.lid : d->lid);
}

/* ------------------------------------------------------------------------------ control channel -- */

ncclResult_t gdr_rdma_ctrl_poll(struct gdr_rdma_comm *c) {
  if (c->fd < 0 || c->eof_ns) return ncclSuccess;
  for (;;) {
    size_t before = c->ctrl_in_off;
    ncclResult_t r = gdr_sock_recv_nb(c->fd, &c->ctrl_in, sizeof(c->ctrl_in), &c->ctrl_in_off);
    if (r != ncclSuccess) {
      c->eof_ns = gdr_time_ns();
      return ncclSuccess; /* the caller decides after a grace period (completions may still be queued) */
    }
    if (c->ctrl_in_off < sizeof(c->ctrl_in)) {
      if (c->ctrl_in_off == before) return ncclSuccess; /* nothing more now */
      continue;
    }
    c->ctrl_in_off = 0;
    struct gdr_rdma_ctrl *m = &c->ctrl_in;
    if (m->magic != GDR_RDMA_CTRL_MAGIC) {
      gdr_rdma_comm_mark_fatal(c, "garbage on the control channel (magic 0x%x)", m->magic);
      return ncclSuccess;
    }
    if (m->type == GDR_CTRL_SIZE_ERR && c->kind == GDR_RCOMM_RECV) {
      struct gdr_rdma_req *r2 = c->recv_slot[m->seq % GDR_RDMA_FIFO_SLOTS];
      GDR_WARN("receive #%llu from %s: the peer sent %llu bytes but the receive buffer holds %llu "
               "(message dropped; the send failed with InvalidUsage)",
               (unsigned long long)m->seq, c->peer, (unsigned long long)m->a, (unsigned long long)m->b);
      if (r2 && r2->seq == m->seq) r2->error = ncclInvalidUsage;
    } else if (m->type == GDR_CTRL_BYE) {
      c->eof_ns = gdr_time_ns();
      return ncclSuccess;
    }
  }
}

/* ------------------------------------------------------------------------------------------- QPs -- */

static struct ibv_qp *create_qp(struct gdr_rdma_comm *c, int max_send, int max_recv, int *max_inline) {
  struct ibv_qp_init_attr a;
  memset(&a, 0, sizeof(a));
  a.send_cq = c->cq;
  a.recv_cq = c->cq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 0;
  a.cap.max_send_wr = (uint32_t)max_send;
  a.cap.max_recv_wr = (uint32_t)max_recv;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = GDR_RDMA_INLINE;
  a.qp_context = c;
  struct ibv_qp *qp = gdr_ibv.create_qp(c->dev->pd, &a);
  if (qp == NULL) { /* some providers refuse inline data of that size: retry without */
    a.cap.max_inline_data = 0;
    qp = gdr_ibv.create_qp(c->dev->pd, &a);
  }
  if (qp == NULL) {
    int e = errno;
    GDR_WARN("%s: ibv_create_qp failed: %s%s", c->dev->name, strerror(e),
             e == ENOMEM ? " (out of QP/WQE memory or locked-memory limit: ulimit -l)" : "");
    return NULL;
  }
  if (max_inline) *max_inline = (int)a.cap.max_inline_data;
  return qp;
}

static int qp_to_init(struct gdr_rdma_comm *c, struct ibv_qp *qp, int access) {
  struct ibv_qp_attr at;
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_INIT;
  at.pkey_index = 0;
  at.port_num = (uint8_t)c->dev->port;
  at.qp_access_flags = (unsigned)access;
  int rc = gdr_ibv.modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc) GDR_WARN("%s: QP 0x%x RESET->INIT failed: %s", c->dev->name, qp->qp_num, strerror(rc));
  return rc;
}

/* remote: the peer's addressing (for the loopback flush QP, our own) */
static int qp_to_rtr_rts(struct gdr_rdma_comm *c, struct ibv_qp *qp, uint32_t rqpn, uint32_t rpsn, uint32_t lpsn,
                         const struct gdr_rdma_hs *remote) {
  struct gdr_rdma_dev *d = c->dev;
  struct ibv_qp_attr at;
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = c->mtu;
  at.dest_qp_num = rqpn;
  at.rq_psn = rpsn;
  at.max_dest_rd_atomic = 1;
  at.min_rnr_timer = 12;
  at.ah_attr.dlid = remote->lid;
  at.ah_attr.sl = (uint8_t)gdr_param_int(GDR_PARAM_IB_SL);
  at.ah_attr.src_path_bits = 0;
  at.ah_attr.port_num = (uint8_t)d->port;
  /* RoCE always routes by GID; IB needs a GRH across subnets or where the port requires one */
  int global = d->link_layer == IBV_LINK_LAYER_ETHERNET || d->grh_required || memcmp(remote->gid, d->gid.raw, 8) != 0;
  if (d->link_layer == IBV_LINK_LAYER_INFINIBAND && !d->grh_required && gdr_gid_is_zero(remote->gid)) global = 0;
  if (global) {
    at.ah_attr.is_global = 1;
    memcpy(at.ah_attr.grh.dgid.raw, remote->gid, 16);
    at.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
    at.ah_attr.grh.hop_limit = 255;
    at.ah_attr.grh.flow_label = 0;
    at.ah_attr.grh.traffic_class = (uint8_t)gdr_param_int(GDR_PARAM_IB_TC);
  }
  int rc = gdr_ibv.modify_qp(qp, &at,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc) {
    char g[64];
    gdr_gid_format(remote->gid, g, sizeof(g));
    GDR_WARN("%s: QP 0x%x INIT->RTR towards QP 0x%x (LID %u, GID %s, MTU %d) failed: %s", d->name,
             qp->qp_num, rqpn, remote->lid, g, 128 << c->mtu, strerror(rc));
    return rc;
  }
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTS;
  at.timeout = (uint8_t)gdr_param_int(GDR_PARAM_IB_TIMEOUT);
  at.retry_cnt = (uint8_t)gdr_param_int(GDR_PARAM_IB_RETRY_CNT);
  at.rnr_retry = (uint8_t)gdr_param_int(GDR_PARAM_RNR_RETRY);
  at.sq_psn = lpsn;
  at.max_rd_atomic = 1;
  rc = gdr_ibv.modify_qp(qp, &at,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc) GDR_WARN("%s: QP 0x%x RTR->RTS failed: %s", d->name, qp->qp_num, strerror(rc));
  return rc;
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
  for (int i = 0; i < c->nqps; i++)
    if (c->qps[i]) gdr_ibv.destroy_qp(c->qps[i]);
  if (c->flush_qp) gdr_ibv.destroy_qp(c->flush_qp);
  if (c->cq) gdr_ibv.destroy_cq(c->cq);
  struct ibv_mr *mrs[] = {c->fifo_mr, c->sizes_src_mr, c->cts_src_mr, c->sizes_mr, c->flush_mr};
  for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
    if (mrs[i]) gdr_ibv.dereg_mr(mrs[i]);
  free(c->fifo);
  free(c->sizes_src);
  free(c->cts_src);
  free(c->sizes);
  free(c->flush_buf);
  free(c->reqs);
  if (c->stage > 0 && c->kind == GDR_RCOMM_SEND && c->fd < 0) gdr_connector_abort(&c->connector);
  if (c->fd >= 0) close(c->fd);
  free(c);
}

static struct gdr_rdma_comm *comm_alloc(int devidx, int kind) {
  struct gdr_rdma_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->kind = kind;
  c->devidx = devidx;
  c->dev = &gdr_rdma.devs[devidx];
  c->fd = -1;
  atomic_init(&c->fatal, 0);
  snprintf(c->peer, sizeof(c->peer), "(connecting)");
  c->nreqs_pool = kind == GDR_RCOMM_SEND ? GDR_RDMA_SEND_REQS : 2 * GDR_RDMA_MAX_REQS;
  c->reqs = calloc((size_t)c->nreqs_pool, sizeof(*c->reqs));
  if (c->reqs == NULL) {
    free(c);
    return NULL;
  }
  return c;
}

/* Creates the CQ and data QPs (INIT) and the side's own buffers. nqps/split must be set. */
static ncclResult_t comm_setup_verbs(struct gdr_rdma_comm *c) {
  struct gdr_rdma_dev *d = c->dev;
  c->nparts = gdr_stripe_nparts(c->nqps, c->split);
  int cqe = 4 * GDR_RDMA_MAX_REQS * c->nqps + 2 * GDR_RDMA_MAX_REQS + 64;
  c->cq = gdr_ibv.create_cq(d->ctx, cqe, c, NULL, 0);
  if (c->cq == NULL) {
    int e = errno;
    GDR_WARN("%s: ibv_create_cq(%d) failed: %s%s", d->name, cqe, strerror(e), gdr_rdma_reg_hint(e));
    return ncclSystemError;
  }
  c->max_inline = GDR_RDMA_INLINE;
  for (int i = 0; i < c->nqps; i++) {
    int inl = 0;
    c->qps[i] = create_qp(c, GDR_RDMA_QP_SEND_WR, GDR_RDMA_QP_RECV_WR, &inl);
    if (c->qps[i] == NULL) return ncclSystemError;
    if (inl < c->max_inline) c->max_inline = inl;
    /* the peer writes into us (sender: CTS entries into the FIFO; receiver: data and sizes) */
    if (qp_to_init(c, c->qps[i], IBV_ACCESS_REMOTE_WRITE)) return ncclSystemError;
  }
  if (c->kind == GDR_RCOMM_SEND) {
    c->fifo = page_alloc(sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
    c->sizes_src = page_alloc(sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS);
    if (!c->fifo || !c->sizes_src) return ncclSystemError;
    /* the FIFO is polled by the CPU: no relaxed ordering on it */
    c->fifo_mr = gdr_rdma_reg_internal(d, c->fifo, sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS,
                                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    c->sizes_src_mr = gdr_rdma_reg_internal(d, c->sizes_src, sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS, 0);
    if (!c->fifo_mr || !c->sizes_src_mr) return ncclSystemError;
  } else {
    c->cts_src = page_alloc(sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
    c->sizes = page_alloc(sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS);
    if (!c->cts_src || !c->sizes) return ncclSystemError;
    c->cts_src_mr = gdr_rdma_reg_internal(d, c->cts_src, sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS, 0);
    c->sizes_mr = gdr_rdma_reg_internal(d, c->sizes, sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS,
                                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!c->cts_src_mr || !c->sizes_mr) return ncclSystemError;
    if (d->ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) {
      /* GDR flush: 1-byte READ of the received buffer, through a QP connected to itself */
      c->flush_buf = page_alloc(4096);
      if (!c->flush_buf) return ncclSystemError;
      c->flush_mr = gdr_rdma_reg_internal(d, c->flush_buf, 4096, IBV_ACCESS_LOCAL_WRITE);
      if (!c->flush_mr) return ncclSystemError;
      c->flush_qp = create_qp(c, GDR_RDMA_MAX_REQS * 2, 1, NULL);
      if (c->flush_qp == NULL) return ncclSystemError;
      if (qp_to_init(c, c->flush_qp, IBV_ACCESS_REMOTE_READ)) return ncclSystemError;
      struct gdr_rdma_hs self;
      memset(&self, 0, sizeof(self));
      self.lid = d->lid;
      memcpy(self.gid, d->gid.raw, 16);
      uint32_t psn = 0;
      c->mtu = (enum ibv_mtu)d->active_mtu;
      if (qp_to_rtr_rts(c, c->flush_qp, c->flush_qp->qp_num, psn, psn, &self)) return ncclSystemError;
    }
  }
  return gdr_rdma_async_attach(c);
}

static ncclResult_t fill_local_hs(struct gdr_rdma_comm *c, int role) {
  struct gdr_rdma_dev *d = c->dev;
  struct gdr_rdma_hs *hs = &c->local;
  memset(hs, 0, sizeof(*hs));
  hs->magic = GDR_RDMA_HS_MAGIC;
  hs->version = GDR_RDMA_HS_VERSION;
  hs->size = sizeof(*hs);
  hs->caps = (d->relaxed ? GDR_RDMA_CAP_RELAXED_ORDERING : 0) |
             ((d->ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) ? GDR_RDMA_CAP_GDR : 0) |
             (c->flush_qp ? GDR_RDMA_CAP_FLUSH : 0);
  hs->role = (uint8_t)role;
  hs->link_layer = (uint8_t)d->link_layer;
  hs->port = (uint8_t)d->port;
  int mtu = d->active_mtu;
  int cap = (int)gdr_param_int(GDR_PARAM_IB_MTU); /* 0 auto, 1..5 */
  if (cap > 0 && cap < mtu) mtu = cap;
  hs->mtu = (uint8_t)mtu;
  hs->nqps = (uint8_t)c->nqps;
  hs->split = (uint8_t)c->split;
  hs->gid_index = (uint8_t)d->gid_index;
  hs->is_global = d->link_layer == IBV_LINK_LAYER_ETHERNET;
  hs->lid = d->lid;
  memcpy(hs->gid, d->gid.raw, 16);
  uint32_t rnd[GDR_RDMA_MAX_QPS];
  if (gdr_random_bytes(rnd, sizeof(rnd)) != ncclSuccess) memset(rnd, 0, sizeof(rnd));
  for (int i = 0; i < c->nqps; i++) {
    hs->qpn[i] = c->qps[i]->qp_num;
    hs->psn[i] = rnd[i] & 0xffffffu;
  }
  if (role == GDR_RDMA_ROLE_SEND) {
    hs->raddr = (uint64_t)(uintptr_t)c->fifo;
    hs->rkey = c->fifo_mr->rkey;
  } else {
    hs->raddr = (uint64_t)(uintptr_t)c->sizes;
    hs->rkey = c->sizes_mr->rkey;
  }
  snprintf(hs->devname, sizeof(hs->devname), "%.63s", d->name);
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
  if (r->link_layer != d->link_layer) {
    GDR_WARN("%s (%s) cannot talk to %s's %.64s (%s): link layers differ; set GDRNET_HCA on both sides",
             d->name, d->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB", c->peer, r->devname,
             r->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB");
    return ncclRemoteError;
  }
  if (expected_role == GDR_RDMA_ROLE_RECV && (r->nqps != c->nqps || r->split != c->split)) {
    GDR_WARN("%s: the receiver %s answered %d QPs split %d, asked %d split %d; connection rejected", d->name,
             c->peer, r->nqps, r->split, c->nqps, c->split);
    return ncclRemoteError;
  }
  int mtu = c->local.mtu < r->mtu ? c->local.mtu : r->mtu;
  c->mtu = (enum ibv_mtu)mtu;
  for (int i = 0; i < c->nqps; i++)
    if (qp_to_rtr_rts(c, c->qps[i], r->qpn[i], r->psn[i], c->local.psn[i], r)) return ncclSystemError;
  if (expected_role == GDR_RDMA_ROLE_RECV) { /* we are the sender: the peer gave its sizes array */
    c->rsizes_addr = r->raddr;
    c->rsizes_rkey = r->rkey;
  } else {
    c->rfifo_addr = r->raddr;
    c->rfifo_rkey = r->rkey;
  }
  char lg[64], rg[64];
  gdr_rdma_addr_str(c, 0, lg, sizeof(lg));
  gdr_rdma_addr_str(c, 1, rg, sizeof(rg));
  GDR_INFO(NCCL_NET, "%s connection %s %s <-> %s %.64s %s: %d QP%s (%s), MTU %d%s",
           c->kind == GDR_RCOMM_SEND ? "send" : "recv", d->name, lg, c->peer, r->devname, rg, c->nqps,
           c->nqps > 1 ? "s" : "", c->split ? "split, 128-byte chunks" : "whole messages", 128 << mtu,
           c->flush_qp ? ", GDR flush" : "");
  return ncclSuccess;
}

/* ---------------------------------------------------------------------------------------- listen -- */

ncclResult_t gdr_rdma_listen(int dev, struct gdr_handle *handle, void **listen_comm) {
  *listen_comm = NULL;
  if (dev < 0 || dev >= gdr_rdma.ndevs) return ncclInvalidArgument;
  struct gdr_rdma_listen *l = calloc(1, sizeof(*l));
  if (l == NULL) return ncclSystemError;
  l->dev = dev;
  ncclResult_t res = gdr_listener_open(&l->l, &gdr_rdma.if_addr, GDR_TP_RDMA, GDR_CAP_RDMA);
  if (res != ncclSuccess) {
    free(l);
    return res;
  }
  gdr_listener_handle(&l->l, (uint32_t)dev, handle);
  *listen_comm = l;
  return ncclSuccess;
}

ncclResult_t gdr_rdma_close_listen(void *listen_comm) {
  struct gdr_rdma_listen *l = listen_comm;
  if (l == NULL) return ncclSuccess;
  comm_free(l->pending);
  gdr_listener_close(&l->l);
  free(l);
  return ncclSuccess;
}

static ncclResult_t stage_deadline(struct gdr_rdma_comm *c, const char *what) {
  if (c->deadline_ns && gdr_time_ns() > c->deadline_ns) {
    GDR_WARN("%s: RDMA handshake with %s timed out (%s) after GDRNET_CONNECT_TIMEOUT_MS=%lld",
             c->dev->name, c->peer, what, (long long)gdr_param_int(GDR_PARAM_CONNECT_TIMEOUT_MS));
    return ncclRemoteError;
  }
  return ncclSuccess;
}

static void arm_deadline(struct gdr_rdma_comm *c) {
  c->deadline_ns = gdr_time_ns() + (uint64_t)gdr_param_int(GDR_PARAM_CONNECT_TIMEOUT_MS) * 1000000ull;
}

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
  if (got != len) {
    GDR_WARN("%s: %s from %s: %u bytes, expected %u; connection rejected", c->dev->name, what, c->peer, got, len);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* --------------------------------------------------------------------------------------- connect -- */

enum { CS_TCP = 1, CS_SEND_HS, CS_RECV_HS, CS_SEND_READY };

ncclResult_t gdr_rdma_connect(int dev, struct gdr_handle *handle, void **send_comm) {
  *send_comm = NULL;
  ncclResult_t res = ncclSuccess;
  struct gdr_rdma_comm *c = gdr_handle_state_get(handle);
  if (c == NULL) {
    if (dev < 0 || dev >= gdr_rdma.ndevs) return ncclInvalidArgument;
    union gdr_sockaddr peer;
    if (gdr_handle_check(handle, &peer) != ncclSuccess) return ncclInvalidUsage;
    if (handle->transport != GDR_TP_RDMA) {
      GDR_WARN("RDMA connect with a handle for transport %d", handle->transport);
      return ncclInvalidUsage;
    }
    c = comm_alloc(dev, GDR_RCOMM_SEND);
    if (c == NULL) return ncclSystemError;
    gdr_sockaddr_str(&peer, c->peer, sizeof(c->peer));
    c->nqps = gdr_rdma.nqps;
    c->split = gdr_rdma.split;
    uint64_t conn_id = 0;
    gdr_random_bytes(&conn_id, sizeof(conn_id));
    GDR_CHECK(comm_setup_verbs(c));
    GDR_CHECK(gdr_connector_start(&c->connector, handle, GDR_STREAM_CTRL, 0, 0, conn_id, GDR_CAP_RDMA, NULL));
    c->stage = CS_TCP;
    gdr_handle_state_set(handle, c);
  }
  switch (c->stage) {
  case CS_TCP: {
    int done = 0;
    GDR_CHECK(gdr_connector_poll(&c->connector, &done));
    if (!done) return ncclSuccess;
    c->fd = c->connector.fd;
    gdr_sockaddr_str(&c->connector.peer, c->peer, sizeof(c->peer));
    GDR_CHECK(fill_local_hs(c, GDR_RDMA_ROLE_SEND));
    arm_deadline(c);
    c->stage = CS_SEND_HS;
  } /* fall through */
  case CS_SEND_HS: {
    int done = 0;
    GDR_CHECK(hs_send(c, GDR_RDMA_BLOB_HS, &c->local, sizeof(c->local), "sending our handshake", &done));
    if (!done) return ncclSuccess;
    c->stage = CS_RECV_HS;
  } /* fall through */
  case CS_RECV_HS: {
    int done = 0;
    GDR_CHECK(hs_recv(c, GDR_RDMA_BLOB_HS, &c->remote, sizeof(c->remote), "the receiver's handshake", &done));
    if (!done) return ncclSuccess;
    GDR_CHECK(connect_qps(c, GDR_RDMA_ROLE_RECV));
    c->ready_word = GDR_RDMA_BLOB_READY;
    c->stage = CS_SEND_READY;
  } /* fall through */
  case CS_SEND_READY: {
    int done = 0;
    GDR_CHECK(hs_send(c, GDR_RDMA_BLOB_READY, &c->ready_word, sizeof(c->ready_word), "sending READY", &done));
    if (!done) return ncclSuccess;
    break;
  }
  default:
    res = ncclInternalError;
    goto out;
  }
  c->stage = 0;
  gdr_handle_state_set(handle, NULL);
  *send_comm = c;
  return ncclSuccess;
out:
  gdr_handle_state_set(handle, NULL);
  comm_free(c);
  return res;
}

/* ---------------------------------------------------------------------------------------- accept -- */

enum { AS_RECV_HS = 1, AS_SEND_HS, AS_RECV_READY };

ncclResult_t gdr_rdma_accept(void *listen_comm, void **recv_comm) {
  *recv_comm = NULL;
  struct gdr_rdma_listen *l = listen_comm;
  ncclResult_t res = ncclSuccess;
  struct gdr_rdma_comm *c = l->pending;
  if (c == NULL) {
    struct gdr_stream s;
    int got = 0;
    ncclResult_t r = gdr_listener_poll(&l->l, &s, &got);
    if (r != ncclSuccess) return r;
    if (!got) return ncclSuccess;
    c = comm_alloc(l->dev, GDR_RCOMM_RECV);
    if (c == NULL) {
      close(s.fd);
      return ncclSystemError;
    }
    c->fd = s.fd;
    gdr_sockaddr_str(&s.peer, c->peer, sizeof(c->peer));
    arm_deadline(c);
    c->stage = AS_RECV_HS;
    l->pending = c;
  }
  switch (c->stage) {
  case AS_RECV_HS: {
    int done = 0;
    GDR_CHECK(hs_recv(c, GDR_RDMA_BLOB_HS, &c->remote, sizeof(c->remote), "the sender's handshake", &done));
    if (!done) return ncclSuccess;
    const char *bad = gdr_rdma_hs_check(&c->remote, GDR_RDMA_ROLE_SEND);
    if (bad) {
      GDR_WARN("%s: malformed RDMA handshake from %s: %s; connection rejected", c->dev->name, c->peer, bad);
      res = ncclRemoteError;
      goto out;
    }
    c->nqps = c->remote.nqps; /* the sender decides */
    c->split = c->remote.split;
    if (c->nqps != gdr_rdma.nqps || c->split != gdr_rdma.split)
      GDR_INFO(NCCL_NET, "%s: sender %s asks %d QPs split %d (local setting %d, %d): following the sender",
               c->dev->name, c->peer, c->nqps, c->split, gdr_rdma.nqps, gdr_rdma.split);
    GDR_CHECK(comm_setup_verbs(c));
    GDR_CHECK(fill_local_hs(c, GDR_RDMA_ROLE_RECV));
    GDR_CHECK(connect_qps(c, GDR_RDMA_ROLE_SEND));
    c->stage = AS_SEND_HS;
  } /* fall through */
  case AS_SEND_HS: {
    int done = 0;
    GDR_CHECK(hs_send(c, GDR_RDMA_BLOB_HS, &c->local, sizeof(c->local), "sending our handshake", &done));
    if (!done) return ncclSuccess;
    c->stage = AS_RECV_READY;
  } /* fall through */
  case AS_RECV_READY: {
    int done = 0;
    GDR_CHECK(hs_recv(c, GDR_RDMA_BLOB_READY, &c->ready_word, sizeof(c->ready_word), "READY", &done));
    if (!done) return ncclSuccess;
    if (c->ready_word != GDR_RDMA_BLOB_READY) {
      GDR_WARN("%s: bad READY from %s; connection rejected", c->dev->name, c->peer);
      res = ncclRemoteError;
      goto out;
    }
    break;
  }
  default:
    res = ncclInternalError;
    goto out;
  }
  c->stage = 0;
  l->pending = NULL;
  *recv_comm = c;
  return ncclSuccess;
out:
  l->pending = NULL;
  comm_free(c);
  return res;
}

/* ----------------------------------------------------------------------------------------- close -- */

static void say_bye(struct gdr_rdma_comm *c) {
  if (c->fd < 0 || c->eof_ns) return;
  struct gdr_rdma_ctrl m = {GDR_RDMA_CTRL_MAGIC, GDR_CTRL_BYE, c->head, 0, 0};
  size_t off = 0;
  (void)gdr_sock_send_nb(c->fd, &m, sizeof(m), &off); /* best effort: EOF says the same */
}

ncclResult_t gdr_rdma_close_send(void *send_comm) {
  struct gdr_rdma_comm *c = send_comm;
  if (c == NULL) return ncclSuccess;
  say_bye(c);
  comm_free(c);
  return ncclSuccess;
}

ncclResult_t gdr_rdma_close_recv(void *recv_comm) {
  struct gdr_rdma_comm *c = recv_comm;
  if (c == NULL) return ncclSuccess;
  say_bye(c);
  comm_free(c);
  return ncclSuccess;
}
