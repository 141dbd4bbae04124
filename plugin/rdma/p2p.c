/* RDMA transport: the data path (isend / irecv / iflush / test). Protocol in proto.h.
 *
 * Work requests per message (n = buffers of the receive, P = QPs the message uses: 1, or nqps
 * when split):
 *   receiver: P receive WRs (num_sge 0) + 1 CTS RDMA WRITE (inline, 1 in 16 signaled)
 *   sender:   n == 1: P WRITE_WITH_IMM carrying the data (signaled, the only CQE per QP);
 *             n > 1:  per QP, one unsignaled WRITE per non-empty part + 1 WRITE_WITH_IMM with the sizes.
 * The same count as NCCL's IB transport (fewer for empty parts of a group, which NIB still posts). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rdma.h"

#define CTRL_CHECK_NS 1000000ull       /* look at the control channel at most every 1 ms while idle */
#define EOF_GRACE_NS 1000000000ull     /* completions may trail the peer's close by this much */

/* -------------------------------------------------------------------------------------- requests -- */

static struct gdr_rdma_req *req_get(struct gdr_rdma_comm *c) {
  for (int k = 0; k < c->nreqs_pool; k++) {
    int i = (c->nreqs_alloc + k) % c->nreqs_pool;
    struct gdr_rdma_req *r = &c->reqs[i];
    if (r->type == GDR_RREQ_FREE) {
      c->nreqs_alloc = i + 1;
      memset(r, 0, sizeof(*r));
      r->comm = c;
      return r;
    }
  }
  return NULL;
}

static inline int req_index(const struct gdr_rdma_comm *c, const struct gdr_rdma_req *r) {
  return (int)(r - c->reqs);
}

/* ----------------------------------------------------------------------------------- liveness -- */

/* Called when a call found nothing to do: reads the control channel now and then; the peer's EOF,
 * past a grace period for completions still in flight, fails the connection. */
static void idle_check(struct gdr_rdma_comm *c) {
  uint64_t now = gdr_time_ns();
  if (now < c->ctrl_next_check_ns) return;
  c->ctrl_next_check_ns = now + CTRL_CHECK_NS;
  gdr_rdma_ctrl_poll(c);
  if (c->eof_ns && now > c->eof_ns + EOF_GRACE_NS)
    gdr_rdma_comm_mark_fatal(c, "the peer closed the connection (control channel EOF) %s #%llu",
                             c->kind == GDR_RCOMM_SEND ? "while this side waited on message" : "with receives pending, the last posted",
                             (unsigned long long)(c->kind == GDR_RCOMM_SEND ? c->head : c->head - 1));
}

/* ------------------------------------------------------------------------------------------ send -- */

static ncclResult_t post_message(struct gdr_rdma_comm *c, int slot, int n) {
  const uint64_t seq = c->head;
  volatile struct gdr_cts_entry *e = c->fifo[slot].e;
  struct ibv_send_wr wrs[GDR_RDMA_MAX_RECVS + 1];
  struct ibv_sge sges[GDR_RDMA_MAX_RECVS + 1];
  for (int p = 0; p < c->nparts; p++) {
    int qpi = gdr_stripe_qp(seq, c->nqps, c->split, p);
    int nw = 0;
    for (int r = 0; r < n; r++) {
      uint64_t size = c->send_size[slot][r], off = 0, len = size;
      if (c->split) gdr_stripe_part(size, c->nqps, p, &off, &len);
      if (n > 1 && len == 0) continue; /* nothing of this buffer on this QP */
      struct ibv_send_wr *w = &wrs[nw];
      memset(w, 0, sizeof(*w));
      sges[nw].addr = (uint64_t)(uintptr_t)c->send_data[slot][r] + off;
      sges[nw].length = (uint32_t)len;
      sges[nw].lkey = c->send_lkey[slot][r];
      w->sg_list = &sges[nw];
      w->num_sge = len ? 1 : 0;
      w->opcode = IBV_WR_RDMA_WRITE;
      w->wr.rdma.remote_addr = e[r].addr + off;
      w->wr.rdma.rkey = e[r].rkey;
      nw++;
    }
    if (n == 1) {
      /* the data WR itself carries the immediate: the size of the message */
      wrs[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wrs[0].imm_data = htobe32(gdr_imm_single((uint32_t)c->send_size[slot][0]));
    } else {
      struct ibv_send_wr *w = &wrs[nw];
      memset(w, 0, sizeof(*w));
      sges[nw].addr = (uint64_t)(uintptr_t)&c->sizes_src[slot];
      sges[nw].length = (uint32_t)(n * sizeof(int32_t));
      sges[nw].lkey = c->sizes_src_mr->lkey;
      w->sg_list = &sges[nw];
      w->num_sge = 1;
      w->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      w->imm_data = htobe32(gdr_imm_group(seq));
      w->wr.rdma.remote_addr = c->rsizes_addr + (uint64_t)slot * sizeof(struct gdr_sizes_slot);
      w->wr.rdma.rkey = c->rsizes_rkey;
      if ((int)sges[nw].length <= c->max_inline) w->send_flags = IBV_SEND_INLINE;
      nw++;
    }
    for (int i = 0; i < nw; i++) {
      wrs[i].next = i + 1 < nw ? &wrs[i + 1] : NULL;
      wrs[i].wr_id = gdr_wr_id(GDR_WR_DATA, slot, seq); /* unsignaled ones too: a failed completion names it */
    }
    wrs[nw - 1].send_flags |= IBV_SEND_SIGNALED;
    struct ibv_send_wr *bad = NULL;
    int rc = gdr_ibv_post_send(c->qps[qpi], wrs, &bad);
    if (rc) {
      gdr_rdma_comm_mark_fatal(c, "ibv_post_send of message #%llu on QP 0x%x (%s port %d, peer %s) failed: %s",
                               (unsigned long long)seq, c->qps[qpi]->qp_num, c->dev->name, c->dev->port, c->peer,
                               strerror(rc));
      return gdr_rdma_comm_check(c);
    }
  }
  return ncclSuccess;
}

ncclResult_t gdr_rdma_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  struct gdr_rdma_comm *c = send_comm;
  *request = NULL;
  ncclResult_t res = gdr_rdma_comm_check(c);
  if (res != ncclSuccess) return res;
  if (size > 0x7fffffffu) {
    GDR_WARN("isend of %zu bytes to %s: more than 2^31-1 bytes in one message", size, c->peer);
    return ncclInvalidUsage;
  }
  const int slot = (int)(c->head % GDR_RDMA_FIFO_SLOTS);
  const uint64_t want = c->head + 1;
  struct gdr_cts_entry *e = c->fifo[slot].e;
  if (__atomic_load_n(&e[0].seq, __ATOMIC_ACQUIRE) != want) {
    idle_check(c); /* no clear-to-send yet */
    return gdr_rdma_comm_check(c);
  }
  /* the slot still holds requests of message #head-32 that NCCL has not tested yet */
  if (c->send_live[slot] && c->slot_seq[slot] != c->head) return ncclSuccess;
  int n = __atomic_load_n(&e[0].nreqs, __ATOMIC_RELAXED);
  if (n < 1 || n > GDR_RDMA_MAX_RECVS) {
    gdr_rdma_comm_mark_fatal(c, "corrupt clear-to-send entry #%llu from the receiver (n = %d)",
                             (unsigned long long)c->head, n);
    return gdr_rdma_comm_check(c);
  }
  for (int r = 1; r < n; r++)
    if (__atomic_load_n(&e[r].seq, __ATOMIC_ACQUIRE) != want) return ncclSuccess; /* still landing */
  __atomic_thread_fence(__ATOMIC_ACQUIRE);

  int r = 0;
  for (; r < n; r++)
    if (c->send_slot[slot][r] == NULL && e[r].tag == (uint32_t)tag) break;
  if (r == n) return ncclSuccess; /* no buffer with this tag in the group (yet) */

  const uint64_t cap = e[r].size;
  if (size > cap) {
    GDR_WARN("isend #%llu to %s (tag %d): %zu bytes do not fit the posted receive of %llu bytes",
             (unsigned long long)c->head, c->peer, tag, size, (unsigned long long)cap);
    struct gdr_rdma_ctrl m = {GDR_RDMA_CTRL_MAGIC, GDR_CTRL_SIZE_ERR, c->head, size, cap};
    size_t off = 0;
    (void)gdr_sock_send_nb(c->fd, &m, sizeof(m), &off);
    gdr_rdma_comm_mark_fatal(c, "message #%llu: send of %zu bytes larger than the receive (%llu bytes)",
                             (unsigned long long)c->head, size, (unsigned long long)cap);
    c->fatal_warned = 1; /* said above */
    return ncclInvalidUsage;
  }
  struct gdr_reg_entry *mh = mhandle;
  if (size > 0 && mh == NULL) {
    GDR_WARN("isend of %zu bytes to %s without a memory handle", size, c->peer);
    return ncclInvalidUsage;
  }
  if (size > 0 && (e[r].addr == 0 || e[r].rkey == 0)) {
    gdr_rdma_comm_mark_fatal(c, "receiver posted an invalid buffer for message #%llu (addr 0x%llx rkey 0x%x)",
                             (unsigned long long)c->head, (unsigned long long)e[r].addr, e[r].rkey);
    return gdr_rdma_comm_check(c);
  }
  struct gdr_rdma_req *req = req_get(c);
  if (req == NULL) return ncclSuccess; /* all requests in use: try again later */
  req->type = GDR_RREQ_SEND;
  req->seq = c->head;
  req->slot = slot;
  req->idx = r;
  req->nreqs = n;
  req->size = size;
  req->events = c->nparts;
  c->send_slot[slot][r] = req;
  c->send_size[slot][r] = size;
  c->send_data[slot][r] = data;
  c->send_lkey[slot][r] = mh ? mh->lkey : 0;
  c->sizes_src[slot].size[r] = (int32_t)size;
  c->slot_seq[slot] = c->head;
  c->send_live[slot]++;
  *request = req;
  if (++c->send_matched[slot] < n) return ncclSuccess; /* the rest of the group comes with later isends */
  c->send_matched[slot] = 0;
  res = post_message(c, slot, n);
  c->head++;
  return res;
}

/* ------------------------------------------------------------------------------------------ recv -- */

ncclResult_t gdr_rdma_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                            void **request) {
  struct gdr_rdma_comm *c = recv_comm;
  *request = NULL;
  ncclResult_t res = gdr_rdma_comm_check(c);
  if (res != ncclSuccess) return res;
  if (n < 1 || n > GDR_RDMA_MAX_RECVS) {
    GDR_WARN("irecv with n = %d buffers (1..%d)", n, GDR_RDMA_MAX_RECVS);
    return ncclInternalError;
  }
  const uint64_t seq = c->head;
  const int slot = (int)(seq % GDR_RDMA_FIFO_SLOTS);
  if (c->recv_slot[slot] != NULL) return ncclSuccess; /* 32 receives in flight */
  struct gdr_rdma_req *req = req_get(c);
  if (req == NULL) return ncclSuccess;

  struct gdr_cts_entry *ce = c->cts_src[slot].e;
  for (int i = 0; i < n; i++) {
    struct gdr_reg_entry *mh = mhandles ? mhandles[i] : NULL;
    size_t cap = sizes[i] > 0x7fffffffu ? 0x7fffffffu : sizes[i];
    if (cap > 0 && mh == NULL) {
      GDR_WARN("irecv of %zu bytes from %s without a memory handle", sizes[i], c->peer);
      return ncclInvalidUsage;
    }
    req->cap[i] = cap;
    ce[i].addr = (uint64_t)(uintptr_t)data[i];
    ce[i].size = (uint32_t)cap;
    ce[i].rkey = mh ? mh->rkey : 0;
    ce[i].tag = (uint32_t)tags[i];
    ce[i].nreqs = (uint8_t)n;
    ce[i].idx = (uint8_t)i;
    ce[i].rsvd = 0;
    ce[i].seq = seq + 1; /* last */
  }
  req->type = GDR_RREQ_RECV;
  req->seq = seq;
  req->slot = slot;
  req->nreqs = n;
  req->events = c->nparts;

  /* receive WRs first (one per QP the message will use): the sender cannot write before it reads
   * the CTS below, so a WRITE_WITH_IMM never finds an empty receive queue (no RNR) */
  for (int p = 0; p < c->nparts; p++) {
    int qpi = gdr_stripe_qp(seq, c->nqps, c->split, p);
    struct ibv_recv_wr rw, *bad = NULL;
    struct ibv_sge none = {0, 0, 0};
    memset(&rw, 0, sizeof(rw));
    rw.wr_id = gdr_wr_id(GDR_WR_RECV, slot, seq);
    rw.sg_list = &none; /* num_sge 0 (WRITE_WITH_IMM consumes no buffer); a valid pointer all the same */
    int rc = gdr_ibv_post_recv(c->qps[qpi], &rw, &bad);
    if (rc) {
      req->type = GDR_RREQ_FREE;
      gdr_rdma_comm_mark_fatal(c, "ibv_post_recv for message #%llu on QP 0x%x failed: %s", (unsigned long long)seq,
                               c->qps[qpi]->qp_num, strerror(rc));
      return gdr_rdma_comm_check(c);
    }
  }
  /* clear to send: the entries into the sender's FIFO */
  int cq = (int)(seq % (uint64_t)c->nqps);
  struct ibv_sge sge = {(uint64_t)(uintptr_t)ce, (uint32_t)(n * sizeof(struct gdr_cts_entry)), c->cts_src_mr->lkey};
  struct ibv_send_wr w, *bad = NULL;
  memset(&w, 0, sizeof(w));
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.wr.rdma.remote_addr = c->rfifo_addr + (uint64_t)slot * sizeof(struct gdr_cts_slot);
  w.wr.rdma.rkey = c->rfifo_rkey;
  if ((int)sge.length <= c->max_inline) w.send_flags = IBV_SEND_INLINE;
  w.wr_id = gdr_wr_id(GDR_WR_CTS, slot, seq); /* unsignaled too: a failed completion names it */
  if (c->cts_count[cq]++ % GDR_RDMA_CTS_SIGNAL_EVERY == 0) w.send_flags |= IBV_SEND_SIGNALED;
  int rc = gdr_ibv_post_send(c->qps[cq], &w, &bad);
  if (rc) {
    req->type = GDR_RREQ_FREE;
    gdr_rdma_comm_mark_fatal(c, "ibv_post_send of the clear-to-send #%llu on QP 0x%x failed: %s",
                             (unsigned long long)seq, c->qps[cq]->qp_num, strerror(rc));
    return gdr_rdma_comm_check(c);
  }
  c->recv_slot[slot] = req;
  c->head++;
  *request = req;
  return ncclSuccess;
}

/* ----------------------------------------------------------------------------------------- flush -- */

ncclResult_t gdr_rdma_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request) {
  struct gdr_rdma_comm *c = recv_comm;
  *request = NULL;
  ncclResult_t res = gdr_rdma_comm_check(c);
  if (res != ncclSuccess) return res;
  if (c->flush_qp == NULL) return ncclSuccess; /* no GDR: nothing can be pending in a PCIe write buffer */
  int last = -1;
  for (int i = 0; i < n; i++) {
    struct gdr_reg_entry *mh = mhandles ? mhandles[i] : NULL;
    if (sizes[i] > 0 && mh && mh->kind != GDR_REG_HOST) last = i;
  }
  if (last < 0) return ncclSuccess; /* host buffers: the CPU sees them after the completion already */
  struct gdr_rdma_req *req = req_get(c);
  if (req == NULL) return ncclSuccess;
  struct gdr_reg_entry *mh = mhandles[last];
  req->type = GDR_RREQ_FLUSH;
  req->events = 1;
  req->seq = c->head;
  struct ibv_sge sge = {(uint64_t)(uintptr_t)c->flush_buf, 1, c->flush_mr->lkey};
  struct ibv_send_wr w, *bad = NULL;
  memset(&w, 0, sizeof(w));
  w.wr_id = gdr_wr_id(GDR_WR_FLUSH, req_index(c, req), c->head);
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_READ;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = (uint64_t)(uintptr_t)data[last];
  w.wr.rdma.rkey = mh->rkey;
  int rc = gdr_ibv_post_send(c->flush_qp, &w, &bad);
  if (rc) {
    req->type = GDR_RREQ_FREE;
    gdr_rdma_comm_mark_fatal(c, "ibv_post_send of the GDR flush READ on QP 0x%x failed: %s", c->flush_qp->qp_num,
                             strerror(rc));
    return gdr_rdma_comm_check(c);
  }
  *request = req;
  return ncclSuccess;
}

/* ------------------------------------------------------------------------------------------ test -- */

static const char *wr_kind_str(int k) {
  switch (k) {
  case GDR_WR_DATA: return "RDMA_WRITE_WITH_IMM (data)";
  case GDR_WR_RECV: return "RECV_RDMA_WITH_IMM (data)";
  case GDR_WR_CTS: return "RDMA_WRITE (clear-to-send)";
  case GDR_WR_FLUSH: return "RDMA_READ (GDR flush)";
  default: return "unknown";
  }
}

static void wc_failed(struct gdr_rdma_comm *c, const struct ibv_wc *wc) {
  struct gdr_rdma_dev *d = c->dev;
  char lg[64], rg[64];
  gdr_rdma_addr_str(c, 0, lg, sizeof(lg));
  gdr_rdma_addr_str(c, 1, rg, sizeof(rg));
  int kind = gdr_wr_kind(wc->wr_id);
  gdr_rdma_comm_mark_fatal(c,
                           "work completion error: status %s (%d), vendor_err 0x%x, %s of message #%llu, QP 0x%x, "
                           "%s port %d, local %s, peer %s remote %s",
                           gdr_ibv_wc_status_str(wc->status), (int)wc->status, wc->vendor_err, wr_kind_str(kind),
                           (unsigned long long)gdr_wr_seq(wc->wr_id), wc->qp_num, d->name, d->port, lg, c->peer, rg);
}

static ncclResult_t process_wc(struct gdr_rdma_comm *c, const struct ibv_wc *wc) {
  if (wc->status != IBV_WC_SUCCESS) {
    wc_failed(c, wc);
    return gdr_rdma_comm_check(c);
  }
  int kind = gdr_wr_kind(wc->wr_id), slot = gdr_wr_slot(wc->wr_id);
  uint64_t seq48 = gdr_wr_seq(wc->wr_id);
  switch (kind) {
  case GDR_WR_DATA: {
    int hit = 0;
    for (int r = 0; r < GDR_RDMA_MAX_RECVS; r++) {
      struct gdr_rdma_req *q = c->send_slot[slot][r];
      if (q && (q->seq & 0xffffffffffffull) == seq48) {
        q->events--;
        hit = 1;
      }
    }
    if (!hit) goto unexpected;
    return ncclSuccess;
  }
  case GDR_WR_RECV: {
    struct gdr_rdma_req *q = c->recv_slot[slot];
    if (q == NULL || (q->seq & 0xffffffffffffull) != seq48 || wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM) goto unexpected;
    uint32_t imm = be32toh(wc->imm_data);
    if (gdr_imm_is_group(imm)) {
      if (q->nreqs < 2 || (imm & 0x7fffffffu) != (uint32_t)(q->seq & 0x7fffffffu)) goto unexpected;
    } else {
      if (q->nreqs != 1) goto unexpected;
      if (imm > q->cap[0]) {
        gdr_rdma_comm_mark_fatal(c, "message #%llu from %s: %u bytes arrived for a receive of %zu",
                                 (unsigned long long)q->seq, c->peer, imm, q->cap[0]);
        return gdr_rdma_comm_check(c);
      }
      q->sent[0] = imm;
    }
    q->events--;
    return ncclSuccess;
  }
  case GDR_WR_CTS:
    return ncclSuccess;
  case GDR_WR_FLUSH: {
    if (slot >= c->nreqs_pool || c->reqs[slot].type != GDR_RREQ_FLUSH) goto unexpected;
    c->reqs[slot].events--;
    return ncclSuccess;
  }
  default:
    break;
  }
unexpected:
  gdr_rdma_comm_mark_fatal(c, "unexpected completion: %s, wr_id 0x%llx, QP 0x%x, imm 0x%x",
                           gdr_ibv_wc_opcode_str(wc->opcode), (unsigned long long)wc->wr_id, wc->qp_num,
                           be32toh(wc->imm_data));
  return gdr_rdma_comm_check(c);
}

/* Polls the comm's CQ in batches until it is empty. *progress = completions seen. */
static ncclResult_t poll_cq(struct gdr_rdma_comm *c, int *progress) {
  struct ibv_wc wcs[GDR_RDMA_CQ_BATCH];
  *progress = 0;
  for (;;) {
    int n = gdr_ibv_poll_cq(c->cq, GDR_RDMA_CQ_BATCH, wcs);
    if (n < 0) {
      gdr_rdma_comm_mark_fatal(c, "ibv_poll_cq failed (%d) on %s", n, c->dev->name);
      return gdr_rdma_comm_check(c);
    }
    for (int i = 0; i < n; i++) {
      ncclResult_t r = process_wc(c, &wcs[i]);
      if (r != ncclSuccess) return r;
    }
    *progress += n;
    if (n < GDR_RDMA_CQ_BATCH) return ncclSuccess;
  }
}

static void req_release(struct gdr_rdma_comm *c, struct gdr_rdma_req *r) {
  if (r->type == GDR_RREQ_SEND) {
    c->send_slot[r->slot][r->idx] = NULL;
    c->send_live[r->slot]--;
  } else if (r->type == GDR_RREQ_RECV) {
    c->recv_slot[r->slot] = NULL;
  }
  r->type = GDR_RREQ_FREE;
}

/* A request that failed on its own (the peer reported a size error for it): released with its error. */
static ncclResult_t req_failed(struct gdr_rdma_comm *c, struct gdr_rdma_req *r) {
  ncclResult_t e = r->error;
  req_release(c, r);
  return e;
}

ncclResult_t gdr_rdma_test(void *request, int *done, size_t *sizes) {
  struct gdr_rdma_req *r = request;
  struct gdr_rdma_comm *c = r->comm;
  *done = 0;
  if (r->error != ncclSuccess) return req_failed(c, r);
  ncclResult_t res = gdr_rdma_comm_check(c);
  if (res != ncclSuccess) return res;
  if (r->events > 0) {
    int progress = 0;
    res = poll_cq(c, &progress);
    if (res != ncclSuccess) return res;
    if (r->events > 0 && progress == 0) idle_check(c); /* nothing moved: is the peer still there? */
    if (r->error != ncclSuccess) return req_failed(c, r);
    if (r->events > 0) return gdr_rdma_comm_check(c);
  }
  /* done */
  if (r->type == GDR_RREQ_RECV) {
    if (r->nreqs > 1) {
      volatile struct gdr_sizes_slot *s = &c->sizes[r->slot];
      for (int i = 0; i < r->nreqs; i++) {
        int32_t v = s->size[i];
        if (v < 0 || (size_t)v > r->cap[i]) {
          gdr_rdma_comm_mark_fatal(c, "message #%llu from %s: buffer %d got %d bytes for a receive of %zu",
                                   (unsigned long long)r->seq, c->peer, i, v, r->cap[i]);
          return gdr_rdma_comm_check(c);
        }
        r->sent[i] = (size_t)v;
      }
    }
    if (sizes)
      for (int i = 0; i < r->nreqs; i++) sizes[i] = r->sent[i];
  } else if (r->type == GDR_RREQ_SEND) {
    if (sizes) sizes[0] = r->size;
  }
  req_release(c, r);
  *done = 1;
  return ncclSuccess;
}
