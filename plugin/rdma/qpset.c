/* RDMA transport: queue pairs, made and moved one way for every user. Two levels:
 *   one RC QP on a device's PD and a CQ: create, RESET -> INIT, INIT -> RTR -> RTS towards the far end (the GRH when
 *     the link layer or the subnets need one; the transport timers from GDRNET_IB_TIMEOUT, GDRNET_IB_RETRY_CNT,
 *     GDRNET_RNR_RETRY, GDRNET_IB_SL), -> ERR (a recovery stops it), destroy;
 *   a connection's set (struct gdr_rdma_qpset, rdma.h): a CQ per device of the connection, its data QPs in INIT (QP
 *     i on device i % ndevs), a receiver's loopback flush QPs at RTS; then every data QP to RTS towards the peer's
 *     (QP i towards the peer's device i % rndevs); destroyed whole (its CQs too: nothing of an old set can be taken
 *     for a completion of the next).
 * conn.c makes a connection's first set (the handshake), recover.c and fallback.c the next ones (recovery, the way
 * back); the one-sided QPs of gin/ can take the same calls. */
#include <errno.h>
#include <string.h>

#include "gid.h"
#include "rdma.h"

int gdr_rdma_dev_mtu(struct gdr_rdma_dev *d) {
  pthread_mutex_lock(&d->lock);
  int mtu = d->active_mtu;
  pthread_mutex_unlock(&d->lock);
  return mtu;
}

/* ------------------------------------------------------------------------------------------ one QP -- */

struct ibv_qp *gdr_rdma_qp_create(struct gdr_rdma_dev *d, struct ibv_cq *cq, void *context, int max_send, int max_recv,
                                  int *max_inline) {
  struct ibv_qp_init_attr a;
  memset(&a, 0, sizeof(a));
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 0;
  a.cap.max_send_wr = (uint32_t)max_send;
  a.cap.max_recv_wr = (uint32_t)max_recv;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = GDR_RDMA_INLINE;
  a.qp_context = context;
  struct ibv_qp *qp = gdr_ibv.create_qp(d->pd, &a);
  if (qp == NULL) { /* some providers refuse inline data of that size: retry without */
    a.cap.max_inline_data = 0;
    qp = gdr_ibv.create_qp(d->pd, &a);
  }
  if (qp == NULL) {
    int e = errno;
    GDR_WARN("%s: ibv_create_qp failed: %s%s", d->name, strerror(e),
             e == ENOMEM ? " (out of QP/WQE memory or locked-memory limit: ulimit -l)" : "");
    return NULL;
  }
  if (max_inline) *max_inline = (int)a.cap.max_inline_data;
  return qp;
}

int gdr_rdma_qp_init(const struct gdr_rdma_dev *d, struct ibv_qp *qp, int access) {
  struct ibv_qp_attr at;
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_INIT;
  at.pkey_index = 0;
  at.port_num = (uint8_t)d->port;
  at.qp_access_flags = (unsigned)access;
  int rc = gdr_ibv.modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc) GDR_WARN("%s: QP 0x%x RESET->INIT failed: %s", d->name, qp->qp_num, strerror(rc));
  return rc;
}

/* INIT -> RTR towards the far end. */
static int qp_rtr(struct ibv_qp *qp, const struct gdr_rdma_dev *d, const struct gdr_rdma_qp_end *near,
                  const struct gdr_rdma_qp_end *far, enum ibv_mtu mtu, int traffic_class) {
  struct ibv_qp_attr at;
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = mtu;
  at.dest_qp_num = far->qpn;
  at.rq_psn = far->psn;
  at.max_dest_rd_atomic = 1;
  at.min_rnr_timer = 12;
  at.ah_attr.dlid = far->lid;
  at.ah_attr.sl = (uint8_t)gdr_param_int(GDR_PARAM_IB_SL);
  at.ah_attr.src_path_bits = 0;
  at.ah_attr.port_num = (uint8_t)d->port;
  /* RoCE always routes by GID; IB needs a GRH across subnets or where the port requires one */
  int global = d->link_layer == IBV_LINK_LAYER_ETHERNET || d->grh_required || memcmp(far->gid, near->gid, 8) != 0;
  if (d->link_layer == IBV_LINK_LAYER_INFINIBAND && !d->grh_required && gdr_gid_is_zero(far->gid)) global = 0;
  if (global) {
    at.ah_attr.is_global = 1;
    memcpy(at.ah_attr.grh.dgid.raw, far->gid, 16);
    at.ah_attr.grh.sgid_index = (uint8_t)near->gid_index;
    at.ah_attr.grh.hop_limit = 255;
    at.ah_attr.grh.flow_label = 0;
    at.ah_attr.grh.traffic_class = (uint8_t)traffic_class;
  }
  int rc = gdr_ibv.modify_qp(qp, &at,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc) {
    char g[64];
    gdr_gid_format(far->gid, g, sizeof(g));
    GDR_WARN("%s: QP 0x%x INIT->RTR towards QP 0x%x (LID %u, GID %s, MTU %d) failed: %s", d->name, qp->qp_num, far->qpn,
             far->lid, g, 128 << mtu, strerror(rc));
  }
  return rc;
}

int gdr_rdma_qp_rts(struct ibv_qp *qp, const struct gdr_rdma_dev *d, const struct gdr_rdma_qp_end *near,
                    const struct gdr_rdma_qp_end *far, enum ibv_mtu mtu, int traffic_class) {
  struct ibv_qp_attr at;
  int rc = qp_rtr(qp, d, near, far, mtu, traffic_class);
  if (rc) return rc;
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTS;
  at.timeout = (uint8_t)gdr_param_int(GDR_PARAM_IB_TIMEOUT);
  at.retry_cnt = (uint8_t)gdr_param_int(GDR_PARAM_IB_RETRY_CNT);
  at.rnr_retry = (uint8_t)gdr_param_int(GDR_PARAM_RNR_RETRY);
  at.sq_psn = near->psn;
  at.max_rd_atomic = 1;
  rc = gdr_ibv.modify_qp(qp, &at,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc) GDR_WARN("%s: QP 0x%x RTR->RTS failed: %s", d->name, qp->qp_num, strerror(rc));
  return rc;
}

int gdr_rdma_qp_err(struct ibv_qp *qp) {
  struct ibv_qp_attr at;
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_ERR;
  return gdr_ibv.modify_qp(qp, &at, IBV_QP_STATE);
}

/* ------------------------------------------------------------------------------------- a connection's set -- */

/* QP i of the connection lives on its device i % ndevs; a device's QPs share its CQ (cqs[k]). */
static inline int qp_member(const struct gdr_rdma_comm *c, int i) { return i % c->ndevs; }

/* This side's end of a QP on member m (psn: its send PSN). */
static struct gdr_rdma_qp_end near_end(const struct gdr_rdma_member *m, uint32_t psn) {
  struct gdr_rdma_qp_end e = {0, psn, m->lid, m->gid_index, m->gid.raw};
  return e;
}

void gdr_rdma_qpset_destroy(struct gdr_rdma_qpset *qs) {
  for (int i = 0; i < GDR_RDMA_MAX_QPS; i++)
    if (qs->qps[i]) gdr_ibv.destroy_qp(qs->qps[i]);
  for (int k = 0; k < GDR_RDMA_MAX_CONN_DEVS; k++)
    if (qs->flush_qp[k]) gdr_ibv.destroy_qp(qs->flush_qp[k]);
  for (int k = 0; k < GDR_RDMA_MAX_CONN_DEVS; k++)
    if (qs->cqs[k]) gdr_ibv.destroy_cq(qs->cqs[k]);
  memset(qs, 0, sizeof(*qs));
}

/* A CQ per device of the connection (every device carries a QP: ndevs <= nqps). */
static ncclResult_t make_cqs(struct gdr_rdma_comm *c, struct gdr_rdma_qpset *qs) {
  for (int k = 0; k < c->ndevs; k++) {
    struct gdr_rdma_member *m = &c->m[k];
    int cqe = GDR_RDMA_CQE((c->nqps - k + c->ndevs - 1) / c->ndevs);
    qs->cqs[k] = gdr_ibv.create_cq(m->dev->ctx, cqe, c, NULL, 0);
    if (qs->cqs[k] == NULL) {
      int e = errno;
      GDR_WARN("%s: ibv_create_cq(%d) failed: %s%s", m->dev->name, cqe, strerror(e), gdr_rdma_reg_hint(e));
      return ncclSystemError;
    }
    qs->ncq = k + 1;
  }
  qs->cq = qs->cqs[0];
  return ncclSuccess;
}

/* GDR flush: 1-byte READ of the received buffer, through a QP connected to itself, on every device that writes into
 * it (a READ orders only its own NIC's writes). */
static ncclResult_t make_flush_qps(struct gdr_rdma_comm *c, struct gdr_rdma_qpset *qs) {
  for (int k = 0; k < c->ndevs; k++) {
    struct gdr_rdma_member *m = &c->m[k];
    qs->flush_qp[k] = gdr_rdma_qp_create(m->dev, qs->cqs[k], c, GDR_RDMA_MAX_REQS * 2, 1, NULL);
    if (qs->flush_qp[k] == NULL) return ncclSystemError;
    struct gdr_rdma_qp_end self = near_end(m, 0);
    self.qpn = qs->flush_qp[k]->qp_num;
    if (gdr_rdma_qp_init(m->dev, qs->flush_qp[k], IBV_ACCESS_REMOTE_READ) ||
        gdr_rdma_qp_rts(qs->flush_qp[k], m->dev, &self, &self, (enum ibv_mtu)gdr_rdma_dev_mtu(m->dev),
                        gdr_rdma_traffic_class(c->tc)))
      return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t gdr_rdma_qpset_make(struct gdr_rdma_comm *c, struct gdr_rdma_qpset *qs) {
  ncclResult_t res = ncclSuccess;
  uint32_t rnd[GDR_RDMA_MAX_QPS];
  memset(qs, 0, sizeof(*qs));
  GDR_CHECK(make_cqs(c, qs));
  if (gdr_random_bytes(rnd, sizeof(rnd)) != ncclSuccess) memset(rnd, 0, sizeof(rnd));
  qs->max_inline = GDR_RDMA_INLINE;
  for (int i = 0; i < c->nqps; i++) {
    int inl = 0, k = qp_member(c, i);
    qs->qps[i] = gdr_rdma_qp_create(c->m[k].dev, qs->cqs[k], c, GDR_RDMA_QP_SEND_WR, GDR_RDMA_QP_RECV_WR, &inl);
    if (qs->qps[i] == NULL) {
      res = ncclSystemError;
      goto out;
    }
    if (inl < qs->max_inline) qs->max_inline = inl;
    qs->psn[i] = rnd[i] & 0xffffffu;
    /* the peer writes into us (sender: CTS entries into the FIFO; receiver: data and sizes) */
    if (gdr_rdma_qp_init(c->m[k].dev, qs->qps[i], IBV_ACCESS_REMOTE_WRITE)) {
      res = ncclSystemError;
      goto out;
    }
  }
  if (c->gdr_flush) GDR_CHECK(make_flush_qps(c, qs));
out:
  if (res != ncclSuccess) gdr_rdma_qpset_destroy(qs);
  return res;
}

ncclResult_t gdr_rdma_qpset_connect(struct gdr_rdma_comm *c, struct gdr_rdma_qpset *qs, const uint32_t *rqpn,
                                    const uint32_t *rpsn, const struct gdr_rdma_addr *rdev, int rndevs) {
  int low = 5;
  if (rndevs < 1) return ncclInternalError;
  for (int i = 0; i < c->nqps; i++) {
    int k = qp_member(c, i);
    const struct gdr_rdma_addr *r = &rdev[i % rndevs];
    int mtu = c->local.dev[k].mtu < r->mtu ? c->local.dev[k].mtu : r->mtu;
    if (r->link_layer != c->m[k].dev->link_layer) {
      GDR_WARN("%s (%s) cannot reach the peer's device %d (%s) for QP %d: link layers differ", c->m[k].dev->name,
               c->m[k].dev->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB", i % rndevs,
               r->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB", i);
      return ncclSystemError;
    }
    if (mtu < low) low = mtu;
    struct gdr_rdma_qp_end near = near_end(&c->m[k], qs->psn[i]);
    struct gdr_rdma_qp_end far = {rqpn[i], rpsn[i], r->lid, 0, r->gid};
    if (gdr_rdma_qp_rts(qs->qps[i], c->m[k].dev, &near, &far, (enum ibv_mtu)mtu, gdr_rdma_traffic_class(c->tc)))
      return ncclSystemError;
  }
  c->mtu = (enum ibv_mtu)low;
  return ncclSuccess;
}

int gdr_rdma_poll_cqs(struct gdr_rdma_qpset *qs, int n, struct ibv_wc *wc) {
  int got = 0;
  for (int k = 0; k < qs->ncq && got < n; k++) {
    int r = gdr_ibv_poll_cq(qs->cqs[k], n - got, wc + got);
    if (r < 0) return r;
    got += r;
  }
  return got;
}
