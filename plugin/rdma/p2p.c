/* RDMA transport: the data path (isend / irecv / iflush / test). Protocol in proto.h.
 *
 * Work requests per message (n = buffers of the receive, P = QPs the message uses: 1, or nqps when split):
 *   receiver: P receive WRs (num_sge 0) + 1 CTS RDMA WRITE (inline, 1 in 16 signaled)
 *   sender:   n == 1: P WRITE_WITH_IMM carrying the data (signaled, the only CQE per QP);
 *             n > 1:  each isend's data as it is posted (one signaled WRITE per QP its stripe uses, so every part
 *                     completes on its own: a sender may wait for one part before it posts the next), then, with
 *                     the last part, per QP one WRITE_WITH_IMM carrying the sizes (signaled; the last part's
 *                     request completes with them).
 *
 * Faults: every completion is applied, in order, even after a failed one (a receive whose data landed completes);
 * a failed completion or a failed post goes up to the resiliency layer (c->up->fault: recover.c), which brings new
 * QPs up and replays what the peer did not get. While it does, isend/irecv answer "try again" and test says not done
 * (transport.c). This file never calls up by name. */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rdma.h"

/* -------------------------------------------------------------------------------------- requests -- */

struct gdr_rdma_req *gdr_rdma_req_get(struct gdr_rdma_comm *c) {
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

static inline int req_index(const struct gdr_rdma_comm *c, const struct gdr_rdma_req *r) { return (int)(r - c->reqs); }

/* A fault the data path found goes up to the resiliency layer (rdma.h). */
void gdr_rdma_fault(struct gdr_rdma_comm *c, int action, unsigned rekey, ncclResult_t res, const char *fmt, ...) {
  char why[sizeof(c->health.why)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  if (c->up != NULL)
    c->up->fault(c, action, rekey, res, why);
  else if (action != GDR_FAULT_NONE)
    gdr_rdma_comm_fail(c, res, "%s", why);
}

/* A failed post: the work request is accounted as posted (a recovery replays it), the connection recovers. */
static void post_failed(struct gdr_rdma_comm *c, struct ibv_qp *qp, int rc, const char *what, uint64_t seq) {
  gdr_rdma_fault(c, GDR_FAULT_RECOVER, 0, ncclSystemError, "%s of message #%llu on QP 0x%x failed: %s", what,
                 (unsigned long long)seq, qp->qp_num, strerror(rc));
}

/* ------------------------------------------------------------------------------------------ send -- */

/* The sender's posting queue. Every WR of the sender is signaled, so a QP's send queue holds exactly the WRs whose
 * completion is not polled yet (qs.sq_used). A message's stripes are cut into WRs of at most max_wr bytes; what
 * does not fit the send queue waits here, in post order (a QP's WRs stay in order: the receiver's receive WRs are
 * consumed in message order), and goes out as completions free room (gdr_rdma_poll). A part's request counts
 * every WR it will have when it is queued, so it cannot look done before the last one completed. Items are for
 * one QP set: a recovery or a move to TCP drops them (its replay queues what must go again). */

/* (one slot is left for the quiesce's drain marker, recover.c) */
static inline int sq_room(const struct gdr_rdma_comm *c, int qpi) {
  return c->qs.sq_used[qpi] < GDR_RDMA_QP_SEND_WR - 1;
}

/* Stripe p of part r: [*off, *off + *len) of its buffer. */
static inline void part_stripe(const struct gdr_rdma_comm *c, const struct gdr_rdma_part *pt, int p, uint64_t *off,
                               uint64_t *len) {
  *off = 0;
  *len = pt->size;
  if (c->nparts > 1) gdr_stripe_part(pt->size, c->nparts, p, off, len);
}

/* The WRs of part r: every stripe's pieces; an empty stripe has one (the zero-length WRITE_WITH_IMM) unless the
 * sizes ride in the row. */
static int part_wrs(const struct gdr_rdma_comm *c, const struct gdr_rdma_smsg *m, int r) {
  uint64_t n = 0;
  if (c->nparts == 1) return m->row && m->part[r].size == 0 ? 0 : (int)gdr_wr_pieces(m->part[r].size, c->max_wr);
  for (int p = 0; p < c->nparts; p++) {
    uint64_t off, len;
    part_stripe(c, &m->part[r], p, &off, &len);
    if (!(m->row && len == 0)) n += gdr_wr_pieces(len, c->max_wr);
  }
  return (int)n;
}

/* Posts what fits of a part: 1 when all of it is posted, 0 when a send queue is full, -1 when a post failed (a
 * recovery took over). */
static int pump_part(struct gdr_rdma_comm *c, struct gdr_rdma_pq_item *it) {
  struct gdr_rdma_smsg *m = &c->smsg[it->slot];
  struct gdr_rdma_part *pt = &m->part[it->r];
  const uint64_t seq = m->seq;
  for (; it->p < c->nparts; it->p++, it->off = 0) {
    const int qpi = gdr_stripe_qp(seq, c->nqps, c->nparts, it->p), k = c->qp_ldev[qpi];
    uint64_t off, len;
    part_stripe(c, pt, it->p, &off, &len);
    if (m->row && len == 0) continue; /* nothing of this buffer on this QP */
    do {
      uint64_t n = len - it->off < c->max_wr ? len - it->off : c->max_wr;
      struct ibv_send_wr w, *bad = NULL;
      struct ibv_sge sge;
      if (!sq_room(c, qpi)) return 0;
      memset(&w, 0, sizeof(w));
      sge.addr = (uint64_t)(uintptr_t)pt->data + off + it->off;
      sge.length = (uint32_t)n;
      sge.lkey = pt->mh ? pt->mh->lkey[k] : 0;
      w.sg_list = &sge;
      w.num_sge = n ? 1 : 0;
      w.wr.rdma.remote_addr = pt->raddr + off + it->off;
      w.wr.rdma.rkey = pt->rkey[c->qp_rdev[qpi]];
      w.wr_id = gdr_wr_id(GDR_WR_DATA, gdr_wr_data_arg(it->slot, it->r), seq);
      w.send_flags = IBV_SEND_SIGNALED;
      if (!m->row && it->off + n == len) {
        /* a single receive's last piece on this QP carries the immediate: the size of the message */
        w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        w.imm_data = htobe32(gdr_imm_single((uint32_t)pt->size));
      } else {
        w.opcode = IBV_WR_RDMA_WRITE;
      }
      c->qs.sq_used[qpi]++;
      int rc = gdr_ibv_post_send(c->qs.qps[qpi], &w, &bad);
      if (rc) {
        post_failed(c, c->qs.qps[qpi], rc, "ibv_post_send (data)", seq);
        return -1;
      }
      it->off += n;
    } while (it->off < len);
  }
  return 1;
}

/* The WRITE_WITH_IMMs that carry a message's sizes row, one per stripe's QP. As pump_part. */
static int pump_imm(struct gdr_rdma_comm *c, struct gdr_rdma_pq_item *it) {
  struct gdr_rdma_smsg *m = &c->smsg[it->slot];
  const uint64_t seq = m->seq;
  for (; it->p < c->nparts; it->p++) {
    const int qpi = gdr_stripe_qp(seq, c->nqps, c->nparts, it->p), k = c->qp_ldev[qpi];
    struct ibv_send_wr w, *bad = NULL;
    struct ibv_sge sge = {(uint64_t)(uintptr_t)&c->sizes_src[it->slot], (uint32_t)(m->n * sizeof(uint64_t)),
                          c->m[k].sizes_src_mr->lkey};
    if (!sq_room(c, qpi)) return 0;
    memset(&w, 0, sizeof(w));
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    w.imm_data = htobe32(gdr_imm_group(seq));
    w.wr.rdma.remote_addr = c->rsizes_addr + (uint64_t)it->slot * sizeof(struct gdr_sizes_slot);
    w.wr.rdma.rkey = c->rsizes_rkey[c->qp_rdev[qpi]];
    w.send_flags = IBV_SEND_SIGNALED;
    if ((int)sge.length <= c->qs.max_inline) w.send_flags |= IBV_SEND_INLINE;
    w.wr_id = gdr_wr_id(GDR_WR_IMM, it->slot, seq);
    c->qs.sq_used[qpi]++;
    int rc = gdr_ibv_post_send(c->qs.qps[qpi], &w, &bad);
    if (rc) {
      post_failed(c, c->qs.qps[qpi], rc, "ibv_post_send (sizes + immediate)", seq);
      return -1;
    }
  }
  return 1;
}

/* Posts the queue's items in order as far as the send queues take them. */
static void pump(struct gdr_rdma_comm *c) {
  struct gdr_rdma_pq *q = &c->pq;
  const unsigned gen = c->qs_gen;
  if (q->gen != gen) q->head = q->tail = q->gen = gen; /* items of an old QP set: dropped */
  while (q->head != q->tail) {
    struct gdr_rdma_pq_item *it = &q->it[q->head % GDR_RDMA_PQ];
    int r = it->kind == GDR_PQ_PART ? pump_part(c, it) : pump_imm(c, it);
    if (r <= 0) return; /* full (later), or a failed post started a recovery (which dropped the rest) */
    q->head++;
  }
}

/* Posts a part or the immediates now when nothing waits before it, and queues what does not fit (or all of it
 * behind what waits). */
static void enqueue(struct gdr_rdma_comm *c, int kind, int slot, int r) {
  struct gdr_rdma_pq *q = &c->pq;
  struct gdr_rdma_pq_item now = {(uint8_t)kind, (uint8_t)slot, (uint8_t)r, 0, 0, 0};
  if (q->gen != c->qs_gen) q->head = q->tail = q->gen = c->qs_gen;
  if (q->head == q->tail) { /* the common case: straight to the QPs */
    int rc = kind == GDR_PQ_PART ? pump_part(c, &now) : pump_imm(c, &now);
    if (rc != 0) return; /* all posted, or a failed post started a recovery */
    if (q->gen != c->qs_gen) return;
  }
  if (q->tail - q->head >= GDR_RDMA_PQ) { /* cannot happen: 32 messages x (8 parts + 1) */
    gdr_rdma_comm_fail(c, ncclInternalError, "the send queue of message #%llu overflows (%u items waiting)",
                       (unsigned long long)c->smsg[slot].seq, q->tail - q->head);
    return;
  }
  q->it[q->tail++ % GDR_RDMA_PQ] = now; /* (what of it is posted already is in its p and off) */
  pump(c);
}

ncclResult_t gdr_rdma_post_part(struct gdr_rdma_comm *c, int slot, int r) {
  struct gdr_rdma_smsg *m = &c->smsg[slot];
  struct gdr_rdma_part *pt = &m->part[r];
  pt->posted = 1;
  if (pt->req) pt->req->events += part_wrs(c, m, r);
  enqueue(c, GDR_PQ_PART, slot, r);
  return ncclSuccess;
}

ncclResult_t gdr_rdma_post_imm(struct gdr_rdma_comm *c, int slot) {
  struct gdr_rdma_smsg *m = &c->smsg[slot];
  m->imm_posted = 1;
  m->imm_req->events += c->nparts;
  enqueue(c, GDR_PQ_IMM, slot, 0);
  return ncclSuccess;
}

/* The clear-to-send of message #head, written by the receiver's RDMA WRITE: its n entries have all landed and the
 * slot is free (test() released message #head-32): n; 0: not yet; -1: a corrupt entry (the connection failed). The
 * first isend of the message takes the slot. */
static int cts_of_head(struct gdr_rdma_comm *c, int slot) {
  const uint64_t want = c->head + 1;
  struct gdr_cts_entry *e = c->fifo[slot].e;
  struct gdr_rdma_smsg *m = &c->smsg[slot];
  if (__atomic_load_n(&e[0].seq, __ATOMIC_ACQUIRE) != want) return 0; /* no clear-to-send yet */
  /* the slot still holds requests of message #head-32 that NCCL has not tested yet */
  if (m->live && m->seq != c->head) return 0;
  int n = __atomic_load_n(&e[0].nreqs, __ATOMIC_RELAXED);
  if (n < 1 || n > GDR_RDMA_MAX_RECVS) {
    gdr_rdma_comm_fail(c, ncclRemoteError, "corrupt clear-to-send entry #%llu from the receiver (n = %d)",
                       (unsigned long long)c->head, n);
    return -1;
  }
  for (int r = 1; r < n; r++)
    if (__atomic_load_n(&e[r].seq, __ATOMIC_ACQUIRE) != want) return 0; /* still landing */
  /* (each seq load above is an acquire: the entries' other fields are read after all of them) */
  if (m->matched == 0) { /* the first isend of this message (only its n parts are cleared: they are all it uses) */
    m->seq = c->head;
    m->n = n;
    m->live = 0;
    m->row = n > 1;
    m->imm_posted = 0;
    m->imm_req = NULL;
    memset(m->part, 0, (size_t)n * sizeof(m->part[0]));
  }
  return n;
}

/* The receiver's buffer r for this send (its address and keys into the part): ncclSuccess when the send fits it;
 * else the error (a send larger than the receive, a missing memory handle, a corrupt entry). */
static ncclResult_t part_check(struct gdr_rdma_comm *c, const struct gdr_cts_entry *e, struct gdr_rdma_part *pt,
                               size_t size, int tag, const struct gdr_rdma_mh *mh) {
  const uint64_t cap = __atomic_load_n(&e->size, __ATOMIC_RELAXED);
  const uint64_t raddr = __atomic_load_n(&e->addr, __ATOMIC_RELAXED);
  int nokey = 0;
  for (int k = 0; k < c->remote.ndevs; k++) { /* (into the part: it is unused until this isend takes it) */
    pt->rkey[k] = __atomic_load_n(&e->rkey[k], __ATOMIC_RELAXED);
    nokey |= pt->rkey[k] == 0;
  }
  if (size > cap) {
    GDR_WARN("isend #%llu to %s (tag %d): %zu bytes do not fit the posted receive of %llu bytes",
             (unsigned long long)c->head, c->peer, tag, size, (unsigned long long)cap);
    (void)gdr_rdma_ctrl_send(c, GDR_CTRL_SIZE_ERR, c->head, size, cap, NULL, 0);
    gdr_rdma_comm_fail(c, ncclInvalidUsage, "message #%llu: send of %zu bytes larger than the receive (%llu bytes)",
                       (unsigned long long)c->head, size, (unsigned long long)cap);
    c->health.warned = 1; /* said above */
    return ncclInvalidUsage;
  }
  if (size > 0 && (mh == NULL || mh->magic != GDR_RDMA_MH_MAGIC || mh->n < c->ndevs)) {
    GDR_WARN("isend of %zu bytes to %s without a memory handle of this connection", size, c->peer);
    return ncclInvalidUsage;
  }
  /* (a buffer whose end wraps past 2^64: the parts' remote addresses, addr + offset, would wrap to elsewhere) */
  if (size > 0 && (raddr == 0 || nokey || raddr + cap < raddr)) {
    gdr_rdma_comm_fail(c, ncclRemoteError,
                       "receiver posted an invalid buffer for message #%llu (addr 0x%llx size %llu rkey 0x%x)",
                       (unsigned long long)c->head, (unsigned long long)raddr, (unsigned long long)cap, pt->rkey[0]);
    return gdr_rdma_comm_check(c);
  }
  pt->raddr = raddr;
  return ncclSuccess;
}

ncclResult_t gdr_rdma_dp_isend(struct gdr_rdma_comm *c, void *data, size_t size, int tag, void *mhandle,
                               void **request) {
  ncclResult_t res = ncclSuccess;
  *request = NULL;
  if (size > GDR_RDMA_MAX_MSG) { /* (the core refuses it first: maxP2pBytes) */
    GDR_WARN("isend of %zu bytes to %s: more than %llu bytes in one message", size, c->peer,
             (unsigned long long)GDR_RDMA_MAX_MSG);
    return ncclInvalidArgument;
  }
  const int slot = (int)(c->head % GDR_RDMA_FIFO_SLOTS);
  struct gdr_cts_entry *e = c->fifo[slot].e;
  struct gdr_rdma_smsg *m = &c->smsg[slot];
  const int n = cts_of_head(c, slot);
  if (n < 0) return gdr_rdma_comm_check(c);
  if (n == 0) return ncclSuccess;

  /* The entries' fields are read with relaxed atomic loads: after a recovery the receiver writes the clear-to-send
   * of an incomplete receive again (the same bytes) while this side may be reading it. */
  int r = 0;
  for (; r < n; r++)
    if (m->part[r].req == NULL && !m->part[r].posted && __atomic_load_n(&e[r].tag, __ATOMIC_RELAXED) == (uint32_t)tag)
      break;
  if (r == n) return ncclSuccess; /* no buffer with this tag in the group (yet) */

  struct gdr_rdma_part *pt = &m->part[r];
  struct gdr_rdma_mh *mh = mhandle;
  GDR_CHECK(part_check(c, &e[r], pt, size, tag, mh));
  struct gdr_rdma_req *req = gdr_rdma_req_get(c);
  if (req == NULL) return ncclSuccess; /* all requests in use: try again later */
  req->type = GDR_RREQ_SEND;
  req->seq = c->head;
  req->slot = slot;
  req->idx = r;
  req->nreqs = n;
  req->size = size;
  req->tag = tag;
  req->data[0] = data;
  req->mh[0] = mh;
  req->events = 0;
  pt->req = req;
  pt->data = data;
  pt->size = size;
  pt->mh = mh;
  c->sizes_src[slot].size[r] = size;
  if (n == 1 && size > GDR_IMM_SIZE_MAX) m->row = 1; /* the imm cannot say it: the size rides in the row */
  m->live++;
  *request = req;
  int last = ++m->matched == n;
  if (last) {
    m->imm_req = req; /* the receive completes with the immediates: this part's request waits for them */
    c->head++;
  }
  GDR_TRACE(NCCL_NET, "RDMA isend %s #%llu part %d/%d tag %d size %zu", c->peer, (unsigned long long)m->seq, r, n, tag,
            size);
  GDR_CHECK(gdr_rdma_post_part(c, slot, r));
  if (last && m->row) {
    if (gdr_health_state(&c->health) == GDR_HEALTH_OK)
      GDR_CHECK(gdr_rdma_post_imm(c, slot));
    else
      m->imm_posted = 1; /* the part's post started a recovery: it posts the immediates with the replay */
  }
out:
  return res;
}

/* ------------------------------------------------------------------------------------------ recv -- */

ncclResult_t gdr_rdma_post_recv_wrs(struct gdr_rdma_comm *c, struct gdr_rdma_req *req) {
  /* one per QP the message will use; posted before its CTS, so a WRITE_WITH_IMM never finds an empty receive
   * queue (no RNR) */
  for (int p = 0; p < c->nparts; p++) {
    int qpi = gdr_stripe_qp(req->seq, c->nqps, c->nparts, p);
    struct ibv_recv_wr rw, *bad = NULL;
    struct ibv_sge none = {0, 0, 0};
    memset(&rw, 0, sizeof(rw));
    rw.wr_id = gdr_wr_id(GDR_WR_RECV, req->slot, req->seq);
    rw.sg_list = &none; /* num_sge 0 (WRITE_WITH_IMM consumes no buffer); a valid pointer all the same */
    int rc = gdr_ibv_post_recv(c->qs.qps[qpi], &rw, &bad);
    if (rc) {
      post_failed(c, c->qs.qps[qpi], rc, "ibv_post_recv", req->seq);
      return ncclSuccess;
    }
  }
  return ncclSuccess;
}

ncclResult_t gdr_rdma_post_cts(struct gdr_rdma_comm *c, struct gdr_rdma_req *req) {
  int qi = (int)(req->seq % (uint64_t)c->nqps);
  struct gdr_cts_entry *ce = c->cts_src[req->slot].e;
  struct ibv_sge sge = {(uint64_t)(uintptr_t)ce, (uint32_t)(req->nreqs * sizeof(struct gdr_cts_entry)),
                        c->m[c->qp_ldev[qi]].cts_src_mr->lkey};
  struct ibv_send_wr w, *bad = NULL;
  memset(&w, 0, sizeof(w));
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.wr.rdma.remote_addr = c->rfifo_addr + (uint64_t)req->slot * sizeof(struct gdr_cts_slot);
  w.wr.rdma.rkey = c->rfifo_rkey[c->qp_rdev[qi]]; /* the sender's FIFO on the device of its QP qi */
  if ((int)sge.length <= c->qs.max_inline) w.send_flags = IBV_SEND_INLINE;
  w.wr_id = gdr_wr_id(GDR_WR_CTS, req->slot, req->seq); /* unsignaled too: a failed completion names it */
  if (c->qs.cts_count[qi]++ % GDR_RDMA_CTS_SIGNAL_EVERY == 0) w.send_flags |= IBV_SEND_SIGNALED;
  int rc = gdr_ibv_post_send(c->qs.qps[qi], &w, &bad);
  if (rc) post_failed(c, c->qs.qps[qi], rc, "ibv_post_send (clear-to-send)", req->seq);
  return ncclSuccess;
}

ncclResult_t gdr_rdma_dp_irecv(struct gdr_rdma_comm *c, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                               void **request) {
  ncclResult_t res = ncclSuccess;
  *request = NULL;
  const uint64_t seq = c->head;
  const int slot = (int)(seq % GDR_RDMA_FIFO_SLOTS);
  if (c->recv_slot[slot] != NULL) return ncclSuccess; /* 32 receives in flight */
  for (int i = 0; i < n; i++) {
    const struct gdr_rdma_mh *mh = mhandles ? mhandles[i] : NULL;
    if (sizes[i] > 0 && (mh == NULL || mh->magic != GDR_RDMA_MH_MAGIC || mh->n < c->ndevs)) {
      GDR_WARN("irecv of %zu bytes from %s without a memory handle of this connection", sizes[i], c->peer);
      return ncclInvalidUsage;
    }
    if (sizes[i] > GDR_RDMA_MAX_MSG) { /* (the core refuses it first: maxP2pBytes) */
      GDR_WARN("irecv of %zu bytes from %s: more than %llu bytes in one message", sizes[i], c->peer,
               (unsigned long long)GDR_RDMA_MAX_MSG);
      return ncclInvalidArgument;
    }
  }
  struct gdr_rdma_req *req = gdr_rdma_req_get(c);
  if (req == NULL) return ncclSuccess;

  struct gdr_cts_entry *ce = c->cts_src[slot].e;
  for (int i = 0; i < n; i++) {
    struct gdr_rdma_mh *mh = mhandles ? mhandles[i] : NULL;
    req->cap[i] = sizes[i];
    req->data[i] = data[i];
    req->mh[i] = mh;
    ce[i].addr = (uint64_t)(uintptr_t)data[i];
    ce[i].size = sizes[i];
    for (int k = 0; k < c->ndevs; k++) ce[i].rkey[k] = mh ? mh->rkey[k] : 0; /* (the rest stay 0; mh->n >= ndevs) */
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
  c->recv_slot[slot] = req;
  c->head++;
  *request = req;
  GDR_TRACE(NCCL_NET, "RDMA irecv %s #%llu n %d", c->peer, (unsigned long long)seq, n);
  GDR_CHECK(gdr_rdma_post_recv_wrs(c, req));
  if (gdr_health_state(&c->health) == GDR_HEALTH_OK) GDR_CHECK(gdr_rdma_post_cts(c, req));
out:
  return res;
}

/* ----------------------------------------------------------------------------------------- flush -- */

/* One 1-byte READ on every device of the connection: a READ orders only the writes its own NIC made. */
ncclResult_t gdr_rdma_post_flush(struct gdr_rdma_comm *c, struct gdr_rdma_req *req) {
  req->events = c->ndevs;
  for (int k = 0; k < c->ndevs; k++) {
    struct ibv_sge sge = {(uint64_t)(uintptr_t)c->flush_buf, 1, c->m[k].flush_mr->lkey};
    struct ibv_send_wr w, *bad = NULL;
    memset(&w, 0, sizeof(w));
    w.wr_id = gdr_wr_id(GDR_WR_FLUSH, req_index(c, req), req->seq);
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_READ;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = req->flush_addr;
    w.wr.rdma.rkey = req->flush_mh->rkey[k];
    int rc = gdr_ibv_post_send(c->qs.flush_qp[k], &w, &bad);
    if (rc) {
      post_failed(c, c->qs.flush_qp[k], rc, "ibv_post_send (GDR flush READ)", req->seq);
      return ncclSuccess;
    }
  }
  return ncclSuccess;
}

ncclResult_t gdr_rdma_dp_iflush(struct gdr_rdma_comm *c, int n, void **data, int *sizes, void **mhandles, int busy,
                                void **request) {
  *request = NULL;
  int last = -1;
  for (int i = 0; i < n; i++) {
    struct gdr_rdma_mh *mh = mhandles ? mhandles[i] : NULL;
    if (sizes[i] > 0 && mh && mh->kind != GDR_REG_HOST && mh->n >= c->ndevs) last = i;
  }
  if (last < 0) return ncclSuccess; /* host buffers: the CPU sees them after the completion already */
  struct gdr_rdma_req *req = gdr_rdma_req_get(c);
  if (req == NULL) {
    /* A NULL request would tell NCCL "nothing to flush" and let the GPU read stale data: never. The pool holds
     * 32 receives and 32 flushes, NCCL's most. */
    GDR_WARN("iflush on %s: more than %d requests outstanding on one receive comm", c->desc, c->nreqs_pool);
    return ncclInternalError;
  }
  req->type = GDR_RREQ_FLUSH;
  req->seq = c->head;
  req->flush_addr = (uint64_t)(uintptr_t)data[last];
  req->flush_mh = mhandles[last];
  *request = req;
  if (busy) {
    req->events = c->ndevs; /* posted by the recovery, with everything else pending */
    return ncclSuccess;
  }
  return gdr_rdma_post_flush(c, req);
}

/* ------------------------------------------------------------------------------------------ test -- */

static const char *wr_kind_str(int k) {
  switch (k) {
  case GDR_WR_DATA: return "RDMA_WRITE (data)";
  case GDR_WR_IMM: return "RDMA_WRITE_WITH_IMM (sizes)";
  case GDR_WR_RECV: return "RECV_RDMA_WITH_IMM (data)";
  case GDR_WR_CTS: return "RDMA_WRITE (clear-to-send)";
  case GDR_WR_FLUSH: return "RDMA_READ (GDR flush)";
  case GDR_WR_PROBE: return "RDMA_WRITE (path probe)";
  default: return "unknown";
  }
}

static void wc_failed(struct gdr_rdma_comm *c, const struct ibv_wc *wc) {
  struct gdr_rdma_dev *d = c->dev;
  const struct gdr_fault_class *f = gdr_rdma_fault_wc(wc->status);
  char lg[64], rg[64];
  gdr_rdma_addr_str(c, 0, lg, sizeof(lg));
  gdr_rdma_addr_str(c, 1, rg, sizeof(rg));
  /* a key fault: whose key it names, this side's buffer or the peer's (the loopback flush READ reads only this
   * side's); any other fault asks nobody for new keys */
  unsigned side = f->action != GDR_FAULT_REKEY             ? 0
                  : gdr_wr_kind(wc->wr_id) == GDR_WR_FLUSH ? GDR_REKEY_LOCAL
                                                           : gdr_rdma_rekey_side_wc(wc->status);
  unsigned me = gdr_rekey_role_bit(c->kind), peer = me ^ (GDR_REKEY_SEND | GDR_REKEY_RECV);
  unsigned rekey = ((side & GDR_REKEY_LOCAL) ? me : 0) | ((side & GDR_REKEY_REMOTE) ? peer : 0);
  gdr_rdma_fault(
      c, f->action, rekey, f->res,
      "work completion error %s (%d, vendor_err 0x%x) on %s of message #%llu, QP 0x%x, %s port %d, local %s, peer %s "
      "remote %s: %s",
      gdr_ibv_wc_status_str(wc->status), (int)wc->status, wc->vendor_err, wr_kind_str(gdr_wr_kind(wc->wr_id)),
      (unsigned long long)gdr_wr_seq(wc->wr_id), wc->qp_num, d->name, d->port, lg, c->peer, rg, f->hint);
}

static void unexpected(struct gdr_rdma_comm *c, const struct ibv_wc *wc) {
  const struct gdr_rdma_req *q = c->kind == GDR_RCOMM_RECV ? c->recv_slot[gdr_wr_arg(wc->wr_id) & 0x1f] : NULL;
  gdr_rdma_comm_fail(c, ncclInternalError,
                     "unexpected completion: %s, wr_id 0x%llx, QP 0x%x, imm 0x%x (its slot holds %s #%lld with %d "
                     "completion(s) awaited; head %llu, recovery attempt %u)",
                     gdr_ibv_wc_opcode_str(wc->opcode), (unsigned long long)wc->wr_id, wc->qp_num,
                     be32toh(wc->imm_data), q ? "receive" : "nothing", q ? (long long)q->seq : -1LL, q ? q->events : 0,
                     (unsigned long long)c->head, c->rec.attempt);
}

/* A successful completion. */
static void process_wc(struct gdr_rdma_comm *c, const struct ibv_wc *wc) {
  int kind = gdr_wr_kind(wc->wr_id);
  uint64_t seq48 = gdr_wr_seq(wc->wr_id);
  switch (kind) {
  case GDR_WR_DATA: {
    struct gdr_rdma_smsg *m = &c->smsg[gdr_wr_data_slot(wc->wr_id)];
    const int pi = gdr_wr_data_part(wc->wr_id);
    struct gdr_rdma_req *q = pi < m->n ? m->part[pi].req : NULL; /* (parts past n are not cleared) */
    if (q == NULL || (m->seq & 0xffffffffffffull) != seq48 || q->events <= 0) return unexpected(c, wc);
    q->events--;
    return;
  }
  case GDR_WR_IMM: {
    struct gdr_rdma_smsg *m = &c->smsg[gdr_wr_arg(wc->wr_id) & 0x1f];
    if (m->imm_req == NULL || (m->seq & 0xffffffffffffull) != seq48 || m->imm_req->events <= 0)
      return unexpected(c, wc);
    m->imm_req->events--;
    return;
  }
  case GDR_WR_RECV: {
    struct gdr_rdma_req *q = c->recv_slot[gdr_wr_arg(wc->wr_id) & 0x1f];
    if (q == NULL || (q->seq & 0xffffffffffffull) != seq48 || wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || q->events <= 0)
      return unexpected(c, wc);
    uint32_t imm = be32toh(wc->imm_data);
    if (gdr_imm_is_group(imm)) { /* the sizes are in the row (grouped, or one buffer of 2^31 bytes or more) */
      if ((imm & 0x7fffffffu) != (uint32_t)(q->seq & 0x7fffffffu)) return unexpected(c, wc);
      q->row = 1;
    } else {
      if (q->nreqs != 1 || q->row) return unexpected(c, wc);
      if (imm > q->cap[0]) {
        gdr_rdma_comm_fail(c, ncclRemoteError, "message #%llu from %s: %u bytes arrived for a receive of %zu",
                           (unsigned long long)q->seq, c->peer, imm, q->cap[0]);
        return;
      }
      q->sent[0] = imm;
    }
    q->events--;
    return;
  }
  case GDR_WR_CTS:
  case GDR_WR_PROBE: /* a late probe of the way back (fallback.c) */ return;
  case GDR_WR_FLUSH: {
    int i = gdr_wr_arg(wc->wr_id);
    if (i >= c->nreqs_pool || c->reqs[i].type != GDR_RREQ_FLUSH || c->reqs[i].events <= 0) return unexpected(c, wc);
    c->reqs[i].events--;
    return;
  }
  default: return unexpected(c, wc);
  }
}

/* Sender: a completion (good or not) of one of its QPs frees its send-queue slot (every sender WR is signaled). */
static inline void sq_release(struct gdr_rdma_comm *c, uint32_t qp_num) {
  int i = 0;
  if (c->nqps > 1) /* (the set exists while its CQs are polled: every QP is there) */
    while (i < c->nqps && c->qs.qps[i]->qp_num != qp_num) i++;
  if (i < c->nqps && c->qs.sq_used[i] > 0) c->qs.sq_used[i]--;
}

ncclResult_t gdr_rdma_poll(struct gdr_rdma_comm *c, int *progress) {
  struct ibv_wc wcs[GDR_RDMA_CQ_BATCH], bad;
  int total = 0, nbad = 0;
  const int sender = c->kind == GDR_RCOMM_SEND;
  memset(&bad, 0, sizeof(bad)); /* read only when nbad > 0; -O3 cannot tell */
  if (progress) *progress = 0;
  for (int k = 0; k < c->qs.ncq && c->qs.cq != NULL; k++) { /* no CQ between QP sets (recovery) */
    struct ibv_cq *cq = c->qs.cqs[k];
    int n;
    do {
      n = gdr_ibv_poll_cq(cq, GDR_RDMA_CQ_BATCH, wcs);
      if (n < 0) {
        gdr_rdma_fault(c, GDR_FAULT_RECOVER, 0, ncclSystemError, "ibv_poll_cq failed (%d) on %s", n, c->m[k].dev->name);
        break;
      }
      /* every completion, in order: a failed one does not hide the successes after it */
      for (int i = 0; i < n; i++) {
        if (sender) sq_release(c, wcs[i].qp_num);
        if (gdr_wr_kind(wcs[i].wr_id) == GDR_WR_DRAIN) {
          c->drain_seen++; /* a quiesce marker: every completion of its queue came before it */
        } else if (wcs[i].status == IBV_WC_SUCCESS) {
          process_wc(c, &wcs[i]);
          /* the episode ends with a completion the peer's NIC answered: a flush READ on this side's own loopback
         * QP proves nothing about the path, and ending the episode with it lets a peer that is gone restart the
         * recovery for ever */
          if (gdr_health_state(&c->health) == GDR_HEALTH_OK && gdr_wr_kind(wcs[i].wr_id) != GDR_WR_FLUSH)
            c->rec.healthy = 1;
        } else if (gdr_health_state(&c->health) == GDR_HEALTH_OK && nbad++ == 0) {
          bad = wcs[i]; /* the first fault decides; the recovery starts once the CQ is drained */
        } else {
          c->rec.ignored_wcs++; /* flushed after the fault that starts (or started) the recovery */
        }
      }
      total += n;
    } while (n == GDR_RDMA_CQ_BATCH && !gdr_health_failed(&c->health) && c->qs.cq != NULL);
    if (n < 0 || gdr_health_failed(&c->health)) break;
  }
  if (nbad) wc_failed(c, &bad);
  /* room in the send queues: what waits for it goes out (not while the set is being taken down) */
  if (sender && c->pq.head != c->pq.tail && gdr_health_state(&c->health) == GDR_HEALTH_OK) pump(c);
  if (progress) *progress = total;
  return ncclSuccess;
}

void gdr_rdma_req_release(struct gdr_rdma_comm *c, struct gdr_rdma_req *r) {
  if (r->on_tcp) { /* the RDMA path forgot it when the connection moved (fallback.c) */
    r->type = GDR_RREQ_FREE;
    return;
  }
  if (r->type == GDR_RREQ_SEND) {
    struct gdr_rdma_smsg *m = &c->smsg[r->slot];
    m->part[r->idx].req = NULL;
    if (m->imm_req == r) m->imm_req = NULL;
    if (--m->live == 0 && m->matched == m->n) m->matched = 0; /* the slot is free for message #seq+32 */
  } else if (r->type == GDR_RREQ_RECV) {
    c->recv_slot[r->slot] = NULL;
  }
  r->type = GDR_RREQ_FREE;
}

ncclResult_t gdr_rdma_dp_done(struct gdr_rdma_req *r, int *done, size_t *sizes) {
  struct gdr_rdma_comm *c = r->comm;
  *done = 0;
  /* what landed is complete, whatever happened to the connection since */
  if (r->type == GDR_RREQ_RECV) {
    if (r->row) {
      volatile struct gdr_sizes_slot *s = &c->sizes[r->slot];
      for (int i = 0; i < r->nreqs; i++) {
        uint64_t v = s->size[i];
        if (v > r->cap[i]) {
          gdr_rdma_comm_fail(c, ncclRemoteError, "message #%llu from %s: buffer %d got %llu bytes for a receive of %zu",
                             (unsigned long long)r->seq, c->peer, i, (unsigned long long)v, r->cap[i]);
          gdr_rdma_req_release(c, r);
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
  gdr_rdma_req_release(c, r);
  *done = 1;
  return ncclSuccess;
}

/* -------------------------------------------------------------------------------------------- quiesce -- */

/* One marker on each queue of a QP in ERR (as the kernel's ib_drain_qp): it completes, flushed, after every
 * completion the NIC still had for that queue. Returns the number posted. */
static int post_markers(struct ibv_qp *qp, int recv) {
  struct ibv_send_wr sw, *sbad = NULL;
  struct ibv_recv_wr rw, *rbad = NULL;
  struct ibv_sge none = {0, 0, 0};
  int n = 0;
  memset(&sw, 0, sizeof(sw));
  sw.wr_id = gdr_wr_id(GDR_WR_DRAIN, 0, 0);
  sw.sg_list = &none;
  sw.opcode = IBV_WR_RDMA_WRITE;
  sw.send_flags = IBV_SEND_SIGNALED;
  if (gdr_ibv_post_send(qp, &sw, &sbad) == 0) n++;
  if (recv) {
    memset(&rw, 0, sizeof(rw));
    rw.wr_id = gdr_wr_id(GDR_WR_DRAIN, 1, 0);
    rw.sg_list = &none;
    if (gdr_ibv_post_recv(qp, &rw, &rbad) == 0) n++;
  }
  return n;
}

/* Stops the QPs (ERR), applies what already completed, destroys the set (and its CQ: nothing of it can be taken
 * for a completion of the next one). The async threads see the swap under the devices' locks.
 *
 * "What already completed" is every completion up to the markers: a NIC may acknowledge a WRITE_WITH_IMM before
 * the receive completion it produced reaches the CQ. Destroying the CQ in that window would lose a receive the
 * sender holds complete (and has released): the receiver would post its receive WRs again, the sender would not
 * replay it, and every later message would complete the receive before its own. A device that produces no
 * completions any more (fatal) is waited for GDR_DRAIN_NS at most. */
#define GDR_DRAIN_NS 1000000000ull
void gdr_rdma_quiesce_qps(struct gdr_rdma_comm *c) {
  struct gdr_rdma_qpset old;
  int want = 0;
  c->drain_seen = 0;
  for (int i = 0; i < c->nqps; i++)
    if (c->qs.qps[i] && gdr_rdma_qp_err(c->qs.qps[i]) == 0) want += post_markers(c->qs.qps[i], 1);
  for (int k = 0; k < GDR_RDMA_MAX_CONN_DEVS; k++) /* (a flush QP per device of the connection) */
    if (c->qs.flush_qp[k] && gdr_rdma_qp_err(c->qs.flush_qp[k]) == 0) want += post_markers(c->qs.flush_qp[k], 0);
  /* successes still count; the flushed ones are ignored while recovering */
  uint64_t until = gdr_time_ns() + GDR_DRAIN_NS;
  for (;;) {
    int got = 0;
    (void)gdr_rdma_poll(c, &got);
    if (c->drain_seen >= want || c->qs.cq == NULL || gdr_health_failed(&c->health)) break;
    if (gdr_time_ns() > until) {
      GDR_INFO(NCCL_NET, "%s: %d of %d drain marker(s) completed within %llu ms; the QPs are destroyed regardless",
               c->desc, c->drain_seen, want, GDR_DRAIN_NS / 1000000ull);
      break;
    }
    if (got == 0) sched_yield();
  }
  gdr_rdma_qs_swap(c, NULL, &old); /* under the lock of every device of the connection */
  gdr_rdma_qpset_destroy(&old);
}
