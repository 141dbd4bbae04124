/* The host-staged one-sided path (gin/gin.h): messages over the net core's send/receive comms of a GIN collComm,
 * in order per target. Used on every transport the net core runs (TCP, and the RDMA transport's two-sided
 * messages, with its RDMA -> TCP fallback underneath). Everything here runs under the comm's lock, from the
 * initiating calls and from progress/test, and never blocks. */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cuda.h"
#include "gin/gin_int.h"
#include "log.h"

static struct gin_send *slot(struct gin_peer *p, uint32_t pos) { return &p->q[pos % p->qcap]; }

/* The FIFO towards a peer holds every context's operations (2 entries each) and the replies; the pool every
 * operation of every peer. Past GIN_OS_BUDGET FIFO entries (x GIN_MSG_MAX bytes of ring) or GIN_OS_POOL_MAX
 * requests over all peers they shrink with the ranks (at least GIN_OS_MIN_QCAP, and one peer's full depth): a full
 * FIFO or pool answers "try again", a reply that finds no room waits for the next progress. */
#define GIN_OS_BUDGET (1u << 16)
#define GIN_OS_MIN_QCAP 64u
#define GIN_OS_POOL_MAX (1u << 16)

ncclResult_t gin_os_setup(struct gin_comm *c) {
  ncclResult_t res = ncclSuccess;
  uint32_t qcap = (uint32_t)(2 * c->depth * (GDR_GIN_MAX_CONTEXTS + 1) + 8);
  uint32_t full_pool = (uint32_t)c->depth * GDR_GIN_MAX_CONTEXTS;
  if ((uint64_t)qcap * (uint32_t)c->nranks > GIN_OS_BUDGET)
    qcap = GIN_OS_BUDGET / (uint32_t)c->nranks > GIN_OS_MIN_QCAP ? GIN_OS_BUDGET / (uint32_t)c->nranks
                                                                 : GIN_OS_MIN_QCAP;
  c->npool = (uint32_t)c->nranks * full_pool;
  if ((uint64_t)full_pool * (uint32_t)c->nranks > GIN_OS_POOL_MAX)
    c->npool = GIN_OS_POOL_MAX > full_pool ? GIN_OS_POOL_MAX : full_pool;
  c->pool = calloc(c->npool, sizeof(*c->pool));
  if (c->pool == NULL) {
    res = ncclSystemError;
    goto out;
  }
  for (uint32_t i = c->npool; i-- > 0;) {
    c->pool[i].idx = i;
    c->pool[i].next_free = c->free_list;
    c->free_list = &c->pool[i];
  }
  for (int r = 0; r < c->nranks; r++) {
    struct gin_peer *p = &c->peers[r];
    p->qcap = qcap;
    p->q = calloc(qcap, sizeof(*p->q));
    p->tx = calloc(qcap, GIN_MSG_MAX);
    p->rx_buf = calloc(1, GIN_MSG_MAX);
    if (p->q == NULL || p->tx == NULL || p->rx_buf == NULL) {
      GDR_WARN("GIN connect: out of memory for the queues towards rank %d", r);
      res = ncclSystemError;
      goto out;
    }
    GDR_CHECK(gdr_core_reg_mr(p->send, p->tx, (size_t)qcap * GIN_MSG_MAX, NCCL_PTR_HOST, &p->tx_smh));
    GDR_CHECK(gdr_core_reg_mr(p->recv, p->rx_buf, GIN_MSG_MAX, NCCL_PTR_HOST, &p->rx_rmh));
  }
out:
  return res;
}

void gin_os_teardown(struct gin_comm *c) {
  for (int r = 0; c->peers != NULL && r < c->nranks; r++) {
    struct gin_peer *p = &c->peers[r];
    if (p->tx_smh != NULL) (void)gdr_core_dereg_mr(p->send, p->tx_smh);
    if (p->rx_rmh != NULL) (void)gdr_core_dereg_mr(p->recv, p->rx_rmh);
    p->tx_smh = p->rx_rmh = NULL;
    free(p->q);
    free(p->tx);
    free(p->rx_buf);
    p->q = NULL;
    p->tx = NULL;
    p->rx_buf = NULL;
  }
  free(c->pool);
  c->pool = NULL;
  c->free_list = NULL;
}

uint32_t gin_os_room(struct gin_comm *c, int peer) {
  struct gin_peer *p = &c->peers[peer];
  return p->qcap - (p->tail - p->head);
}

static struct gin_send *push(struct gin_peer *p, struct gin_req *owner) {
  struct gin_send *e = slot(p, p->tail);
  memset(e, 0, sizeof(*e));
  e->owner = owner;
  if (owner != NULL) owner->pending++;
  return e;
}

void gin_os_queue_hdr(struct gin_comm *c, int peer, struct gin_req *owner, const struct gin_hdr *h, const void *inl,
                      size_t inl_len) {
  struct gin_peer *p = &c->peers[peer];
  unsigned char *buf = p->tx + (size_t)(p->tail % p->qcap) * GIN_MSG_MAX;
  struct gin_send *e = push(p, owner);
  memcpy(buf, h, sizeof(*h));
  if (inl_len > 0) memcpy(buf + sizeof(*h), inl, inl_len);
  e->data = (char *)buf;
  e->size = e->chunk = sizeof(*h) + inl_len;
  e->mh = p->tx_smh;
  p->tail++;
}

void gin_os_queue_data(struct gin_comm *c, int peer, struct gin_req *owner, char *data, size_t size, void *mh) {
  struct gin_peer *p = &c->peers[peer];
  struct gin_send *e = push(p, owner);
  e->data = data;
  e->size = size;
  e->chunk = GDR_GIN_CHUNK < c->max_bytes ? GDR_GIN_CHUNK : c->max_bytes;
  e->mh = mh;
  p->tail++;
}

uint32_t gin_os_put_entries(const struct gin_mr *src, size_t size) {
  return size > 0 && !(size <= GDR_GIN_INLINE && src->type == NCCL_PTR_HOST) ? 2 : 1;
}

void gin_os_put(struct gin_comm *c, struct gin_req *r, struct gin_mr *src, uint64_t src_off, struct gin_mr *dst,
                uint64_t dst_off, size_t size, struct gin_mr *sig, uint64_t sig_off, uint64_t sig_val, int signal) {
  const int inl = size > 0 && gin_os_put_entries(src, size) == 1;
  struct gin_hdr h;
  memset(&h, 0, sizeof(h));
  h.magic = GIN_WIRE_MAGIC;
  h.op = GIN_OP_PUT;
  h.flags = (uint16_t)((signal ? GIN_F_SIGNAL : 0) | (inl ? GIN_F_INLINE : size > 0 ? GIN_F_DATA : 0));
  h.mr = dst != NULL ? dst->id : 0;
  h.off = dst_off;
  h.size = size;
  if (signal) {
    h.sig_mr = sig->id;
    h.sig_off = sig_off;
    h.sig_val = sig_val;
  }
  gin_os_queue_hdr(c, r->peer, r, &h, inl ? src->base + src_off : NULL, inl ? size : 0);
  if (size > 0 && !inl) gin_os_queue_data(c, r->peer, r, src->base + src_off, size, src->smh[r->peer]);
}

void gin_os_get(struct gin_comm *c, struct gin_req *r, struct gin_mr *rm, uint64_t roff, struct gin_mr *lm,
                uint64_t loff, size_t size) {
  struct gin_hdr h;
  memset(&h, 0, sizeof(h));
  h.magic = GIN_WIRE_MAGIC;
  h.op = GIN_OP_GET;
  h.mr = rm->id;
  h.off = roff;
  h.size = size;
  h.aux_mr = lm->id;
  h.aux = loff;
  h.cookie = gin_req_cookie(r);
  r->pending++; /* the reply */
  gin_os_queue_hdr(c, r->peer, r, &h, NULL, 0);
}

void gin_os_flush(struct gin_comm *c, struct gin_req *r) {
  struct gin_hdr h;
  memset(&h, 0, sizeof(h));
  h.magic = GIN_WIRE_MAGIC;
  h.op = GIN_OP_FLUSH;
  h.cookie = gin_req_cookie(r);
  r->pending++; /* the acknowledgement */
  gin_os_queue_hdr(c, r->peer, r, &h, NULL, 0);
}

static ncclResult_t send_progress(struct gin_comm *c, int peer);
static ncclResult_t recv_progress(struct gin_comm *c, int peer);

void gin_fail(struct gin_comm *c, ncclResult_t res, const char *what, int peer) {
  if (c->error == ncclSuccess) {
    GDR_WARN("GIN rank %d: %s (rank %d): %s; the connection is failed, every operation on it reports the error",
             c->rank, what, peer, res == ncclRemoteError ? "remote error" : "error");
    __atomic_store_n(&c->error, res, __ATOMIC_RELAXED); /* gdr_gin_progress reads it without the lock */
    GIN_COUNT(c, errors, 1);
    /* best effort: the other ranks fail now too (their operations towards this rank would wait for RDMA retries
     * or the peer's TCP timeout otherwise); not after this rank's GIN_OP_BYE: it has left them already */
    for (int r = 0; c->peers != NULL && r < c->nranks && !c->closing; r++) {
      struct gin_hdr h;
      if (r == c->rank || c->peers[r].q == NULL || c->peers[r].gone || gin_os_room(c, r) < 1) continue;
      memset(&h, 0, sizeof(h));
      h.magic = GIN_WIRE_MAGIC;
      h.op = GIN_OP_ABORT;
      gin_os_queue_hdr(c, r, NULL, &h, NULL, 0);
      (void)send_progress(c, r);
    }
  }
}

/* A send towards peer failed: a peer that closed cleanly (its GIN_OP_BYE, maybe still unread) is no failure, what
 * was queued to it is dropped; else the error stands. */
static ncclResult_t send_lost(struct gin_comm *c, int peer, ncclResult_t res) {
  struct gin_peer *p = &c->peers[peer];
  if (!p->gone) (void)recv_progress(c, peer);
  if (!p->gone) return res;
  p->head = p->tail;
  return ncclSuccess;
}

/* Posts and tests the peer's sends; frees the done ones from the head. */
static ncclResult_t send_progress(struct gin_comm *c, int peer) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  int blocked = 0;
  for (uint32_t i = p->head; i != p->tail; i++) {
    struct gin_send *e = slot(p, i);
    if (e->nreq != NULL) {
      int done = 0;
      res = gdr_core_test(e->nreq, &done, NULL, NULL);
      if (res != ncclSuccess) {
        e->nreq = NULL;
        if ((res = send_lost(c, peer, res)) != ncclSuccess) gin_fail(c, res, "a send failed", peer);
        goto out;
      }
      if (done) {
        e->nreq = NULL;
        e->acked += e->cur;
      }
    }
    if (blocked || e->posted == e->size) continue;
    if (e->nreq == NULL) {
      size_t n = e->size - e->posted < e->chunk ? e->size - e->posted : e->chunk;
      void *nreq = NULL;
      res = gdr_core_isend(p->send, e->data + e->posted, n, 0, e->mh, NULL, &nreq);
      if (res != ncclSuccess) {
        if ((res = send_lost(c, peer, res)) != ncclSuccess) gin_fail(c, res, "a send could not be posted", peer);
        goto out;
      }
      if (nreq != NULL) {
        e->nreq = nreq;
        e->cur = n;
        e->posted += n;
      }
    }
    if (e->posted < e->size) blocked = 1; /* its next piece, then the later entries, come after */
  }
  while (p->head != p->tail) {
    struct gin_send *e = slot(p, p->head);
    if (e->nreq != NULL || e->acked < e->size) break;
    if (e->owner != NULL && --e->owner->pending == 0) gin_req_finish(c, e->owner);
    p->head++;
  }
out:
  return res;
}

static ncclResult_t win_copy(struct gin_mr *m, char *dst, const void *src, size_t n) {
  if (m->type == NCCL_PTR_CUDA) return gdr_cuda_copy(m->cuda_ctx, dst, src, n, 1);
  memcpy(dst, src, n);
  return ncclSuccess;
}

ncclResult_t gin_apply_signal(struct gin_comm *c, int peer, uint32_t id, uint64_t off, uint64_t val) {
  ncclResult_t res = ncclSuccess;
  struct gin_mr *m = gin_mr_find(c, id);
  if (m == NULL || off % 8 != 0 || off > m->size || m->size - off < 8) {
    GDR_WARN("GIN rank %d: a signal from rank %d names window %u offset %llu: %s", c->rank, peer, id,
             (unsigned long long)off, m == NULL ? "no such window" : "not an aligned word inside it");
    res = ncclRemoteError;
    goto out;
  }
  if (m->type == NCCL_PTR_CUDA) {
    uint64_t v = 0;
    GDR_CHECK(gdr_cuda_copy(m->cuda_ctx, &v, m->base + off, 8, 0));
    v += val;
    GDR_CHECK(gdr_cuda_copy(m->cuda_ctx, m->base + off, &v, 8, 1));
  } else {
    __atomic_fetch_add((uint64_t *)(void *)(m->base + off), val, __ATOMIC_SEQ_CST);
  }
out:
  return res;
}

static ncclResult_t apply_signal(struct gin_comm *c, int peer, const struct gin_hdr *h) {
  return gin_apply_signal(c, peer, h->sig_mr, h->sig_off, h->sig_val);
}

static ncclResult_t bad_range(struct gin_comm *c, int peer, const char *what, uint32_t id, uint64_t off,
                              uint64_t size) {
  GDR_WARN("GIN rank %d: %s from rank %d names window %u bytes [%llu, +%llu): outside every window", c->rank, what,
           peer, id, (unsigned long long)off, (unsigned long long)size);
  return ncclRemoteError;
}

static int in_range(const struct gin_mr *m, uint64_t off, uint64_t size) {
  return m != NULL && off <= m->size && size <= m->size - off;
}

/* A header received: apply it, or start receiving its data (*more = 1). *stall = 1: no room for a reply yet. */
static ncclResult_t rx_header(struct gin_comm *c, int peer, int *more, int *stall) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  const struct gin_hdr *h = &p->rx_hdr;
  struct gin_mr *m = NULL;
  *more = *stall = 0;
  switch (h->op) {
  case GIN_OP_REG: {
    m = gin_mr_find(c, h->mr);
    if (m != NULL) {
      m->peer_size[peer] = h->size;
      m->peer_va[peer] = h->aux;
      m->peer_rkey[peer] = h->rkey;
    } else {
      struct gin_early *e = calloc(1, sizeof(*e));
      if (e == NULL) {
        res = ncclSystemError;
        goto out;
      }
      e->id = h->mr;
      e->peer = peer;
      e->size = h->size;
      e->va = h->aux;
      e->rkey = h->rkey;
      e->next = c->early;
      c->early = e;
    }
    break;
  }
  case GIN_OP_PUT:
    m = gin_mr_find(c, h->mr);
    if (h->size > 0 && !in_range(m, h->off, h->size)) {
      res = bad_range(c, peer, "a put", h->mr, h->off, h->size);
      goto out;
    }
    if (h->flags & GIN_F_INLINE) {
      GDR_CHECK(win_copy(m, m->base + h->off, p->rx_buf + sizeof(*h), h->size));
    } else if (h->flags & GIN_F_DATA) {
      p->rx_dst = m->base + h->off;
      *more = 1;
      goto out;
    }
    if (h->flags & GIN_F_SIGNAL) GDR_CHECK(apply_signal(c, peer, h));
    break;
  case GIN_OP_GET: {
    struct gin_hdr r;
    m = gin_mr_find(c, h->mr);
    if (!in_range(m, h->off, h->size)) {
      res = bad_range(c, peer, "a get", h->mr, h->off, h->size);
      goto out;
    }
    if (gin_os_room(c, peer) < 2) {
      *stall = 1;
      goto out;
    }
    memset(&r, 0, sizeof(r));
    r.magic = GIN_WIRE_MAGIC;
    r.op = GIN_OP_GET_REPLY;
    r.flags = h->size > 0 ? GIN_F_DATA : 0;
    r.mr = h->aux_mr;
    r.off = h->aux;
    r.size = h->size;
    r.cookie = h->cookie;
    gin_os_queue_hdr(c, peer, NULL, &r, NULL, 0);
    if (h->size > 0) gin_os_queue_data(c, peer, NULL, m->base + h->off, h->size, m->smh[peer]);
    break;
  }
  case GIN_OP_GET_REPLY:
    m = gin_mr_find(c, h->mr);
    if (h->size > 0) {
      if (!in_range(m, h->off, h->size)) {
        res = bad_range(c, peer, "a get reply", h->mr, h->off, h->size);
        goto out;
      }
      p->rx_dst = m->base + h->off;
      *more = 1;
      goto out;
    }
    __attribute__((fallthrough)); /* an empty get is done with its reply */
  case GIN_OP_FLUSH_ACK: {
    struct gin_req *r = gin_req_by_cookie(c, h->cookie);
    if (r == NULL) {
      GDR_WARN("GIN rank %d: a reply from rank %d names no operation in flight", c->rank, peer);
      res = ncclRemoteError;
      goto out;
    }
    if (--r->pending == 0) gin_req_finish(c, r);
    break;
  }
  case GIN_OP_FLUSH: {
    struct gin_hdr r;
    if (gin_os_room(c, peer) < 1) {
      *stall = 1;
      goto out;
    }
    memset(&r, 0, sizeof(r));
    r.magic = GIN_WIRE_MAGIC;
    r.op = GIN_OP_FLUSH_ACK;
    r.cookie = h->cookie;
    gin_os_queue_hdr(c, peer, NULL, &r, NULL, 0);
    break;
  }
  case GIN_OP_ABORT:
    GDR_WARN("GIN rank %d: rank %d failed its GIN connection", c->rank, peer);
    res = ncclRemoteError;
    break;
  case GIN_OP_QP:
  case GIN_OP_QP_READY:
  case GIN_OP_MOVE: res = gin_rdma_message(c, peer, h, p->rx_buf + sizeof(*h)); break;
  default: GDR_WARN("GIN rank %d: rank %d sent an unknown operation %u", c->rank, peer, h->op); res = ncclRemoteError;
  }
out:
  return res;
}

/* The data of a PUT or GET_REPLY is all in. */
static ncclResult_t rx_data_done(struct gin_comm *c, int peer) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  const struct gin_hdr *h = &p->rx_hdr;
  if (h->op == GIN_OP_PUT) {
    if (h->flags & GIN_F_SIGNAL) res = apply_signal(c, peer, h);
  } else {
    struct gin_req *r = gin_req_by_cookie(c, h->cookie);
    if (r == NULL) {
      GDR_WARN("GIN rank %d: a get reply from rank %d names no operation in flight", c->rank, peer);
      res = ncclRemoteError;
    } else if (--r->pending == 0) {
      gin_req_finish(c, r);
    }
  }
  return res;
}

static ncclResult_t recv_progress(struct gin_comm *c, int peer) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  for (int rounds = 0; rounds < 16; rounds++) {
    int done = 0;
    if (p->gone) goto out; /* nothing follows its GIN_OP_BYE */
    if (p->rx == GIN_RX_IDLE) {
      if (p->rx_stalled) {
        int more = 0, stall = 0;
        GDR_CHECK(rx_header(c, peer, &more, &stall));
        if (stall) goto out;
        p->rx_stalled = 0;
        continue;
      }
      void *data = p->rx_buf;
      size_t size = GIN_MSG_MAX;
      int tag = 0;
      void *mh = p->rx_rmh;
      void *req = NULL;
      res = gdr_core_irecv(p->recv, 1, &data, &size, &tag, &mh, NULL, &req);
      if (res != ncclSuccess) {
        gin_fail(c, res, "a receive could not be posted", peer);
        goto out;
      }
      if (req == NULL) goto out;
      p->rx_req = req;
      p->rx = GIN_RX_HDR;
    }
    if (p->rx == GIN_RX_HDR) {
      size_t sizes[GDR_MAX_RECVS] = {0};
      int more = 0, stall = 0;
      res = gdr_core_test(p->rx_req, &done, sizes, NULL);
      if (res != ncclSuccess) {
        gin_fail(c, res, "a receive failed", peer);
        goto out;
      }
      if (!done) goto out;
      p->rx_req = NULL;
      p->rx = GIN_RX_IDLE;
      memcpy(&p->rx_hdr, p->rx_buf, sizeof(p->rx_hdr));
      if (sizes[0] < sizeof(struct gin_hdr) || p->rx_hdr.magic != GIN_WIRE_MAGIC ||
          ((p->rx_hdr.flags & GIN_F_INLINE) && sizes[0] != sizeof(struct gin_hdr) + p->rx_hdr.size)) {
        GDR_WARN("GIN rank %d: a malformed message (%zu bytes) from rank %d", c->rank, sizes[0], peer);
        res = ncclRemoteError;
        goto out;
      }
      if (p->rx_hdr.op == GIN_OP_BYE) {
        gin_peer_bye(c, peer);
        goto out;
      }
      GDR_CHECK(rx_header(c, peer, &more, &stall));
      if (stall) {
        p->rx_stalled = 1;
        goto out;
      }
      if (more) {
        p->rx = GIN_RX_DATA;
        p->rx_got = p->rx_cur = 0;
      }
    }
    if (p->rx == GIN_RX_DATA) {
      struct gin_mr *m = gin_mr_find(c, p->rx_hdr.mr);
      if (p->rx_req != NULL) {
        res = gdr_core_test(p->rx_req, &done, NULL, NULL);
        if (res != ncclSuccess) {
          gin_fail(c, res, "a data receive failed", peer);
          goto out;
        }
        if (!done) goto out;
        p->rx_req = NULL;
        p->rx_got += p->rx_cur;
      }
      if (p->rx_got == p->rx_hdr.size) {
        p->rx = GIN_RX_IDLE;
        GDR_CHECK(rx_data_done(c, peer));
        continue;
      }
      {
        size_t chunk = GDR_GIN_CHUNK < c->max_bytes ? GDR_GIN_CHUNK : c->max_bytes;
        size_t n = p->rx_hdr.size - p->rx_got < chunk ? p->rx_hdr.size - p->rx_got : chunk;
        void *data = p->rx_dst + p->rx_got;
        int tag = 0;
        void *mh = m->rmh[peer];
        void *req = NULL;
        res = gdr_core_irecv(p->recv, 1, &data, &n, &tag, &mh, NULL, &req);
        if (res != ncclSuccess) {
          gin_fail(c, res, "a data receive could not be posted", peer);
          goto out;
        }
        if (req == NULL) goto out;
        p->rx_req = req;
        p->rx_cur = n;
      }
      goto out; /* tested at the next round of progress */
    }
  }
out:
  return res;
}

ncclResult_t gin_os_progress(struct gin_comm *c) {
  ncclResult_t res = c->error;
  if (res != ncclSuccess) goto out;
  for (int r = 0; r < c->nranks; r++) {
    res = send_progress(c, r);
    if (res == ncclSuccess) res = recv_progress(c, r);
    if (res == ncclSuccess) res = send_progress(c, r); /* the replies just queued */
    if (res != ncclSuccess) {
      gin_fail(c, res, "progress", r);
      goto out;
    }
  }
  if (c->rdma != NULL) res = gin_rdma_progress(c);
out:
  return res;
}
