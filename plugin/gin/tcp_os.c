/* The host-staged one-sided path (gin/gin.h), gin_msg_path to core.c: messages over the net core's send/receive
 * comms of a GIN collComm, in order per target. Used on every transport the net core runs (TCP, and the RDMA
 * transport's two-sided messages, with its RDMA -> TCP fallback underneath). Everything here runs under the comm's
 * lock, from the initiating calls and from progress/test, and never blocks. A peer's message is checked field by
 * field before anything of it is applied (rx_check, then its operation's handler: "receiving" below); a malformed
 * one is a protocol error of that peer (a WARN naming it, ncclRemoteError for the comm), never a crash, a write
 * outside a window, or memory kept without bound. */
#include <stdarg.h>
#include <stdio.h>
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

ncclResult_t gin_os_alloc(struct gin_comm *c) {
  ncclResult_t res = ncclSuccess;
  uint32_t qcap = (uint32_t)(2 * c->depth * (GDR_GIN_MAX_CONTEXTS + 1) + 8);
  uint32_t full_pool = (uint32_t)c->depth * GDR_GIN_MAX_CONTEXTS;
  if ((uint64_t)qcap * (uint32_t)c->nranks > GIN_OS_BUDGET)
    qcap =
        GIN_OS_BUDGET / (uint32_t)c->nranks > GIN_OS_MIN_QCAP ? GIN_OS_BUDGET / (uint32_t)c->nranks : GIN_OS_MIN_QCAP;
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
  }
out:
  return res;
}

static ncclResult_t os_setup(struct gin_comm *c) {
  ncclResult_t res = ncclSuccess;
  GDR_CHECK(gin_os_alloc(c));
  for (int r = 0; r < c->nranks; r++) {
    struct gin_peer *p = &c->peers[r];
    GDR_CHECK(gdr_core_reg_mr(p->send, p->tx, (size_t)p->qcap * GIN_MSG_MAX, NCCL_PTR_HOST, &p->tx_smh));
    GDR_CHECK(gdr_core_reg_mr(p->recv, p->rx_buf, GIN_MSG_MAX, NCCL_PTR_HOST, &p->rx_rmh));
  }
out:
  return res;
}

/* gin_msg_path.teardown: the tx ring and the receive buffers off the net core's comms (still open) */
static void os_unregister(struct gin_comm *c) {
  for (int r = 0; c->peers != NULL && r < c->nranks; r++) {
    struct gin_peer *p = &c->peers[r];
    if (p->tx_smh != NULL) (void)gdr_core_dereg_mr(p->send, p->tx_smh);
    if (p->rx_rmh != NULL) (void)gdr_core_dereg_mr(p->recv, p->rx_rmh);
    p->tx_smh = p->rx_rmh = NULL;
  }
}

/* gin_msg_path.release, once the comms are closed: a receive may be posted into rx_buf until then (a peer's
 * GIN_OP_BYE that crosses this rank's own close lands there) */
void gin_os_teardown(struct gin_comm *c) {
  os_unregister(c);
  for (int r = 0; c->peers != NULL && r < c->nranks; r++) {
    struct gin_peer *p = &c->peers[r];
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

/* free FIFO entries towards peer */
static uint32_t os_room(struct gin_comm *c, int peer) {
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

/* Queues a header (copied into the tx ring, with inline bytes) or a data message behind the peer's others; the
 * caller checked the room. owner's pending is counted. */
static void queue_hdr(struct gin_comm *c, int peer, struct gin_req *owner, const struct gin_hdr *h, const void *inl,
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

static void queue_data(struct gin_comm *c, int peer, struct gin_req *owner, char *data, size_t size, void *mh) {
  struct gin_peer *p = &c->peers[peer];
  struct gin_send *e = push(p, owner);
  e->data = data;
  e->size = size;
  e->chunk = GDR_GIN_CHUNK < c->max_bytes ? GDR_GIN_CHUNK : c->max_bytes;
  e->mh = mh;
  p->tail++;
}

/* the FIFO entries of a put: a header, and a data message unless its bytes ride inline (host source windows) */
static uint32_t put_entries(const struct gin_mr *src, size_t size) {
  return size > 0 && !(size <= GDR_GIN_INLINE && src->type == NCCL_PTR_HOST) ? 2 : 1;
}

/* One user operation as messages towards r->peer, behind the peer's others: a put (a header with its bytes inline,
 * or a header and a data message), a get or a flush (a header; the reply is awaited). */
static void os_put(struct gin_comm *c, struct gin_req *r, const struct gin_op *o) {
  const int inl = o->size > 0 && put_entries(o->lm, o->size) == 1;
  struct gin_hdr h;
  memset(&h, 0, sizeof(h));
  h.magic = GIN_WIRE_MAGIC;
  h.op = GIN_OP_PUT;
  h.flags = (uint16_t)((o->signal ? GIN_F_SIGNAL : 0) | (inl ? GIN_F_INLINE : o->size > 0 ? GIN_F_DATA : 0));
  h.mr = o->size > 0 ? o->rm->id : GIN_MR_NONE; /* 0 bytes move nothing: no window, whatever the caller named */
  h.off = o->size > 0 ? o->roff : 0;
  h.size = o->size;
  if (o->signal) {
    h.sig_mr = o->sm->id;
    h.sig_off = o->soff;
    h.sig_val = o->sval;
  }
  queue_hdr(c, r->peer, r, &h, inl ? o->lm->base + o->loff : NULL, inl ? o->size : 0);
  if (o->size > 0 && !inl) queue_data(c, r->peer, r, o->lm->base + o->loff, o->size, o->lm->smh[r->peer]);
}

static void os_issue(struct gin_comm *c, struct gin_req *r, const struct gin_op *o) {
  struct gin_hdr h;
  if (o->kind == GIN_K_PUT) {
    os_put(c, r, o);
    return;
  }
  memset(&h, 0, sizeof(h));
  h.magic = GIN_WIRE_MAGIC;
  h.cookie = gin_req_cookie(r);
  if (o->kind == GIN_K_GET) {
    h.op = GIN_OP_GET;
    h.mr = o->rm->id;
    h.off = o->roff;
    h.size = o->size;
    h.aux_mr = o->lm->id;
    h.aux = o->loff;
  } else {
    h.op = GIN_OP_FLUSH;
  }
  r->pending++; /* the reply or the acknowledgement */
  r->await = o->kind == GIN_K_GET ? GIN_OP_GET_REPLY : GIN_OP_FLUSH_ACK;
  queue_hdr(c, r->peer, r, &h, NULL, 0);
}

static int os_room_for(struct gin_comm *c, int peer, const struct gin_op *o) {
  return os_room(c, peer) >= (o->kind == GIN_K_PUT ? put_entries(o->lm, o->size) : 1);
}

static int os_say(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *inl, size_t len) {
  if (os_room(c, peer) < 1) return 0;
  queue_hdr(c, peer, NULL, h, inl, len);
  return 1;
}

static ncclResult_t send_progress(struct gin_comm *c, int peer);
static ncclResult_t recv_progress(struct gin_comm *c, int peer);

/* gin_fail's hook: best effort, the other ranks fail now too (their operations towards this rank would wait for RDMA
 * retries or the peer's TCP timeout otherwise); not after this rank's GIN_OP_BYE: it has left them already */
static void os_abort(struct gin_comm *c) {
  for (int r = 0; c->peers != NULL && r < c->nranks && !c->closing; r++) {
    struct gin_hdr h;
    if (r == c->rank || c->peers[r].q == NULL || c->peers[r].gone || os_room(c, r) < 1) continue;
    memset(&h, 0, sizeof(h));
    h.magic = GIN_WIRE_MAGIC;
    h.op = GIN_OP_ABORT;
    queue_hdr(c, r, NULL, &h, NULL, 0);
    (void)send_progress(c, r);
  }
}

/* gin_peer_bye's hook: the sends already posted finish (or fail, unheeded); the rest are dropped; no entry names a
 * request now */
static void os_peer_gone(struct gin_comm *c, int peer) {
  struct gin_peer *p = &c->peers[peer];
  for (uint32_t i = p->head; i != p->tail; i++) {
    struct gin_send *e = &p->q[i % p->qcap];
    e->owner = NULL;
    if (e->posted == 0) {
      p->tail = i;
      break;
    }
    e->size = e->posted;
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

/* ------------------------------------------------------------------------------------------- receiving -- */
/* Every message a peer sends is checked before anything is applied: a field out of its range is a protocol error
 * for that peer (proto_err: a WARN naming it, ncclRemoteError, the comm fails), never a crash and never memory
 * kept without bound. What each operation may carry (struct rule): its flags, whether its size counts inline or
 * data bytes; the handlers then check the windows, offsets, sizes, cookies and signal words they name. */

static const char *op_name(unsigned op) {
  static const char *const names[] = {"?",         "REG", "PUT",      "GET",   "GET_REPLY", "FLUSH",
                                      "FLUSH_ACK", "QP",  "QP_READY", "ABORT", "MOVE"};
  return op < sizeof(names) / sizeof(names[0]) ? names[op] : "unknown";
}

static ncclResult_t proto_err(struct gin_comm *c, int peer, const struct gin_hdr *h, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ncclResult_t proto_err(struct gin_comm *c, int peer, const struct gin_hdr *h, const char *fmt, ...) {
  char why[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  GDR_WARN("GIN rank %d: a malformed %s message (op %u) from rank %d: %s", c->rank, op_name(h->op), h->op, peer, why);
  return ncclRemoteError;
}

static ncclResult_t win_copy(struct gin_mr *m, char *dst, const void *src, size_t n) {
  if (m->type == NCCL_PTR_CUDA) return gdr_cuda_copy(m->cuda_ctx, dst, src, n, 1);
  memcpy(dst, src, n);
  return ncclSuccess;
}

static ncclResult_t apply_signal(struct gin_comm *c, int peer, const struct gin_hdr *h) {
  return gin_apply_signal(c, peer, h->sig_mr, h->sig_off, h->sig_val);
}

static int in_range(const struct gin_mr *m, uint64_t off, uint64_t size) {
  return m != NULL && off <= m->size && size <= m->size - off;
}

/* the window [off, off + size) of id names, or NULL after a WARN (*res: the protocol error) */
static struct gin_mr *window(struct gin_comm *c, int peer, const struct gin_hdr *h, uint32_t id, uint64_t off,
                             uint64_t size, ncclResult_t *res) {
  struct gin_mr *m = gin_mr_find(c, id);
  if (m == NULL)
    *res = proto_err(c, peer, h, "it names window %u: no such window", id);
  else if (!in_range(m, off, size))
    *res = proto_err(c, peer, h, "bytes [%llu, +%llu) are outside window %u (%zu bytes)", (unsigned long long)off,
                     (unsigned long long)size, id, m->size);
  return *res == ncclSuccess ? m : NULL;
}

/* the user operation a GET_REPLY / FLUSH_ACK answers: a live one towards peer waiting for that reply */
static struct gin_req *reply_req(struct gin_comm *c, int peer, const struct gin_hdr *h) {
  struct gin_req *r = gin_req_by_cookie(c, h->cookie);
  return r != NULL && r->peer == peer && r->await == h->op ? r : NULL;
}

static ncclResult_t reply_done(struct gin_comm *c, int peer, const struct gin_hdr *h) {
  struct gin_req *r = reply_req(c, peer, h);
  if (r == NULL)
    return proto_err(c, peer, h, "cookie 0x%llx names no operation waiting for it", (unsigned long long)h->cookie);
  r->await = 0;
  if (--r->pending == 0) gin_req_finish(c, r);
  return ncclSuccess;
}

static ncclResult_t rx_reg(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  struct gin_mr *m = gin_mr_find(c, h->mr);
  struct gin_early *e;
  uint32_t nearly = 0;
  (void)more, (void)stall;
  if (m != NULL) {
    if (m->peer_size[peer] != UINT64_MAX) return proto_err(c, peer, h, "window %u registered twice", h->mr);
    m->peer_size[peer] = h->size;
    m->peer_va[peer] = h->aux;
    m->peer_rkey[peer] = h->rkey;
    return ncclSuccess;
  }
  if (h->mr - c->next_mr_id >= GIN_EARLY_AHEAD)
    return proto_err(c, peer, h, "window %u is not among the next %u this rank registers (from %u)", h->mr,
                     GIN_EARLY_AHEAD, c->next_mr_id);
  for (e = c->early; e != NULL; e = e->next) {
    if (e->peer != peer) continue;
    if (e->id == h->mr) return proto_err(c, peer, h, "window %u registered twice", h->mr);
    nearly++;
  }
  if (nearly >= GIN_EARLY_AHEAD) /* not reached while ids are distinct and within the bound; kept as the bound */
    return proto_err(c, peer, h, "%u windows registered ahead of this rank", nearly);
  e = calloc(1, sizeof(*e));
  if (e == NULL) return ncclSystemError;
  e->id = h->mr;
  e->peer = peer;
  e->size = h->size;
  e->va = h->aux;
  e->rkey = h->rkey;
  e->next = c->early;
  c->early = e;
  return ncclSuccess;
}

static ncclResult_t rx_put(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  struct gin_mr *m = NULL;
  (void)stall;
  if (h->size == 0 && h->mr == GIN_MR_NONE) {
    if (h->off != 0) return proto_err(c, peer, h, "no window, but offset %llu", (unsigned long long)h->off);
  } else {
    m = window(c, peer, h, h->mr, h->off, h->size, &res);
    if (m == NULL) return res;
  }
  if (h->flags & GIN_F_SIGNAL) { /* checked before its data lands: nothing of a bad message is applied */
    struct gin_mr *s = gin_mr_find(c, h->sig_mr);
    if (s == NULL || h->sig_off % 8 != 0 || h->sig_off > s->size || s->size - h->sig_off < 8)
      return proto_err(c, peer, h, "its signal names window %u offset %llu: %s", h->sig_mr,
                       (unsigned long long)h->sig_off, s == NULL ? "no such window" : "not an aligned word inside it");
  } else if (h->sig_mr != 0 || h->sig_off != 0 || h->sig_val != 0) {
    return proto_err(c, peer, h, "a signal word without the signal flag");
  }
  if (h->flags & GIN_F_DATA) {
    p->rx_dst = m->base + h->off;
    *more = 1;
    return ncclSuccess;
  }
  if (h->flags & GIN_F_INLINE) GDR_CHECK(win_copy(m, m->base + h->off, p->rx_buf + sizeof(*h), h->size));
  if (h->flags & GIN_F_SIGNAL) GDR_CHECK(apply_signal(c, peer, h));
out:
  return res;
}

static ncclResult_t rx_get(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  ncclResult_t res = ncclSuccess;
  struct gin_mr *m = window(c, peer, h, h->mr, h->off, h->size, &res);
  struct gin_hdr r;
  (void)more;
  if (m == NULL) return res;
  if (os_room(c, peer) < 2) {
    *stall = 1;
    return ncclSuccess;
  }
  memset(&r, 0, sizeof(r));
  r.magic = GIN_WIRE_MAGIC;
  r.op = GIN_OP_GET_REPLY;
  r.flags = h->size > 0 ? GIN_F_DATA : 0;
  r.mr = h->aux_mr;
  r.off = h->aux;
  r.size = h->size;
  r.cookie = h->cookie;
  queue_hdr(c, peer, NULL, &r, NULL, 0);
  if (h->size > 0) queue_data(c, peer, NULL, m->base + h->off, h->size, m->smh[peer]);
  return ncclSuccess;
}

static ncclResult_t rx_get_reply(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  ncclResult_t res = ncclSuccess;
  struct gin_mr *m;
  (void)stall;
  if (reply_req(c, peer, h) == NULL)
    return proto_err(c, peer, h, "cookie 0x%llx names no get waiting for it", (unsigned long long)h->cookie);
  if (h->size == 0) return reply_done(c, peer, h); /* an empty get is done with its reply */
  m = window(c, peer, h, h->mr, h->off, h->size, &res);
  if (m == NULL) return res;
  c->peers[peer].rx_dst = m->base + h->off;
  *more = 1;
  return ncclSuccess;
}

static ncclResult_t rx_flush(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  struct gin_hdr r;
  (void)more;
  if (os_room(c, peer) < 1) {
    *stall = 1;
    return ncclSuccess;
  }
  memset(&r, 0, sizeof(r));
  r.magic = GIN_WIRE_MAGIC;
  r.op = GIN_OP_FLUSH_ACK;
  r.cookie = h->cookie;
  queue_hdr(c, peer, NULL, &r, NULL, 0);
  return ncclSuccess;
}

static ncclResult_t rx_flush_ack(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  (void)more, (void)stall;
  return reply_done(c, peer, h);
}

static ncclResult_t rx_abort(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  (void)h, (void)more, (void)stall;
  GDR_WARN("GIN rank %d: rank %d failed its GIN connection", c->rank, peer);
  return ncclRemoteError;
}

/* The peer closes cleanly (sent only by peers that said GIN_CAP_BYE): it is gone for this rank alone. */
static ncclResult_t rx_bye(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  (void)h, (void)more, (void)stall;
  gin_peer_bye(c, peer);
  return ncclSuccess;
}

/* the RDMA path's records (its bring-up, recovery and move over the message path): handed to it */
static ncclResult_t rx_rdma(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall) {
  const void *payload = c->peers[peer].rx_buf + sizeof(*h);
  const struct gin_path *rp = c->path[GIN_PATH_RDMA];
  const char *bad = rp != NULL && rp->record_check != NULL ? rp->record_check(h, payload) : NULL;
  (void)more, (void)stall;
  if (bad != NULL) return proto_err(c, peer, h, "%s", bad);
  if (rp == NULL || rp->record == NULL) {
    GDR_WARN("GIN rank %d: rank %d brings up one-sided RDMA, this comm has no one-sided RDMA path", c->rank, peer);
    return ncclInvalidUsage;
  }
  return rp->record(c, peer, h, payload);
}

/* What each operation may carry. flags: those allowed; inl: INLINE is required (1) or optional (0); bytes: its size
 * counts bytes it moves (a window's, inline or as a data message), else it must be `size` exactly. */
struct rule {
  ncclResult_t (*fn)(struct gin_comm *c, int peer, const struct gin_hdr *h, int *more, int *stall);
  uint16_t flags;
  uint8_t inl, bytes;
  uint64_t size;
};
static const struct rule rules[] = {
    [GIN_OP_REG] = {rx_reg, 0, 0, 1, 0},
    [GIN_OP_PUT] = {rx_put, GIN_F_SIGNAL | GIN_F_INLINE | GIN_F_DATA, 0, 1, 0},
    [GIN_OP_GET] = {rx_get, 0, 0, 1, 0},
    [GIN_OP_GET_REPLY] = {rx_get_reply, GIN_F_DATA, 0, 1, 0},
    [GIN_OP_FLUSH] = {rx_flush, 0, 0, 0, 0},
    [GIN_OP_FLUSH_ACK] = {rx_flush_ack, 0, 0, 0, 0},
    [GIN_OP_QP] = {rx_rdma, GIN_F_INLINE | GIN_F_RECOVER, 1, 0, GIN_QPINFO_BYTES},
    [GIN_OP_QP_READY] = {rx_rdma, GIN_F_RECOVER, 0, 0, 0},
    [GIN_OP_ABORT] = {rx_abort, 0, 0, 0, 0},
    [GIN_OP_MOVE] = {rx_rdma, 0, 0, 0, 0},
    [GIN_OP_BYE] = {rx_bye, 0, 0, 0, 0},
};

/* the header as the handlers may take it, or a protocol error */
static ncclResult_t rx_check(struct gin_comm *c, int peer, const struct gin_hdr *h, size_t len) {
  const struct rule *u;
  if (len < sizeof(*h) || h->magic != GIN_WIRE_MAGIC)
    return proto_err(c, peer, h, "%zu bytes, magic 0x%x", len, len < sizeof(*h) ? 0 : h->magic);
  if (h->op >= sizeof(rules) / sizeof(rules[0]) || rules[h->op].fn == NULL)
    return proto_err(c, peer, h, "an unknown operation");
  u = &rules[h->op];
  if (h->op == GIN_OP_QP && h->size == 0 && h->flags == 0 && len == sizeof(*h))
    return ncclSuccess; /* an empty GIN_OP_QP: the sender cannot bring its one-sided RDMA end up (rdma_os.c) */
  if (h->flags & ~u->flags) return proto_err(c, peer, h, "flags 0x%x (allowed: 0x%x)", h->flags, u->flags);
  if ((h->flags & GIN_F_INLINE) && (h->flags & GIN_F_DATA)) return proto_err(c, peer, h, "both inline and data");
  if (u->inl && !(h->flags & GIN_F_INLINE)) return proto_err(c, peer, h, "its payload is not inline");
  if (!u->bytes && h->size != u->size)
    return proto_err(c, peer, h, "size %llu, not %llu", (unsigned long long)h->size, (unsigned long long)u->size);
  if (len != sizeof(*h) + ((h->flags & GIN_F_INLINE) ? h->size : 0))
    return proto_err(c, peer, h, "%zu bytes with size %llu%s", len, (unsigned long long)h->size,
                     (h->flags & GIN_F_INLINE) ? " inline" : "");
  /* a PUT or GET_REPLY moves bytes exactly when it says how (inline or a data message) */
  if ((h->op == GIN_OP_PUT || h->op == GIN_OP_GET_REPLY) &&
      (h->size > 0) != ((h->flags & (GIN_F_INLINE | GIN_F_DATA)) != 0))
    return proto_err(c, peer, h, "size %llu with flags 0x%x", (unsigned long long)h->size, h->flags);
  return ncclSuccess;
}

/* the checked header in rx_hdr: apply it (again after a stall) */
static ncclResult_t rx_header(struct gin_comm *c, int peer, int *more, int *stall) {
  const struct gin_hdr *h = &c->peers[peer].rx_hdr;
  *more = *stall = 0;
  return rules[h->op].fn(c, peer, h, more, stall);
}

ncclResult_t gin_os_rx_msg(struct gin_comm *c, int peer, size_t len, int *more, int *stall) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  *more = *stall = 0;
  memset(&p->rx_hdr, 0, sizeof(p->rx_hdr));
  memcpy(&p->rx_hdr, p->rx_buf, len < sizeof(p->rx_hdr) ? len : sizeof(p->rx_hdr));
  GDR_CHECK(rx_check(c, peer, &p->rx_hdr, len));
  res = rx_header(c, peer, more, stall);
out:
  return res;
}

/* The data of a PUT or GET_REPLY is all in. */
ncclResult_t gin_os_rx_data_done(struct gin_comm *c, int peer) {
  const struct gin_hdr *h = &c->peers[peer].rx_hdr;
  if (h->op == GIN_OP_PUT) return (h->flags & GIN_F_SIGNAL) ? apply_signal(c, peer, h) : ncclSuccess;
  return reply_done(c, peer, h);
}

/* Receiving from a peer is a state machine (gin_peer.rx), stepped by recv_progress: IDLE, a header's receive
 * posted (HDR), then for a PUT or GET_REPLY with data its pieces into the window (DATA). Each step sets *stop when
 * nothing more can be done now (a receive not in yet, a reply without room, a failure). */

/* IDLE: a header that found no room for its reply is applied again; else the next header's receive is posted */
static ncclResult_t rx_idle(struct gin_comm *c, int peer, int *stop) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  void *data = p->rx_buf, *mh = p->rx_rmh, *req = NULL;
  size_t size = GIN_MSG_MAX;
  int tag = 0;
  if (p->rx_stalled) {
    int more = 0, stall = 0;
    GDR_CHECK(rx_header(c, peer, &more, &stall));
    if (stall)
      *stop = 1;
    else
      p->rx_stalled = 0;
    goto out; /* the next header in the next round */
  }
  res = gdr_core_irecv(p->recv, 1, &data, &size, &tag, &mh, NULL, &req);
  if (res != ncclSuccess) {
    gin_fail(c, res, "a receive could not be posted", peer);
    goto out;
  }
  if (req == NULL) {
    *stop = 1;
    goto out;
  }
  p->rx_req = req;
  p->rx = GIN_RX_HDR;
out:
  return res;
}

/* HDR: the header, once in, is checked and applied, or its data is awaited (DATA), or it waits for room */
static ncclResult_t rx_hdr(struct gin_comm *c, int peer, int *stop) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  size_t sizes[GDR_MAX_RECVS] = {0};
  int done = 0, more = 0, stall = 0;
  res = gdr_core_test(p->rx_req, &done, sizes, NULL);
  if (res != ncclSuccess) {
    gin_fail(c, res, "a receive failed", peer);
    goto out;
  }
  if (!done) {
    *stop = 1;
    goto out;
  }
  p->rx_req = NULL;
  p->rx = GIN_RX_IDLE;
  GDR_CHECK(gin_os_rx_msg(c, peer, sizes[0], &more, &stall));
  if (p->gone) { /* its GIN_OP_BYE: nothing follows it, no receive is posted again */
    *stop = 1;
  } else if (stall) {
    p->rx_stalled = 1;
    *stop = 1;
  } else if (more) {
    p->rx = GIN_RX_DATA;
    p->rx_got = p->rx_cur = 0;
  }
out:
  return res;
}

/* DATA: the piece in flight, once in, counts; all in, the message is done (IDLE); else the next piece is posted */
static ncclResult_t rx_data(struct gin_comm *c, int peer, int *stop) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  struct gin_mr *m = gin_mr_find(c, p->rx_hdr.mr);
  size_t chunk = GDR_GIN_CHUNK < c->max_bytes ? GDR_GIN_CHUNK : c->max_bytes, n;
  void *data, *mh, *req = NULL;
  int done = 0, tag = 0;
  *stop = 1;       /* a piece posted is tested at the next round of progress */
  if (m == NULL) { /* deregistered here while its data comes: the user's error, still no crash */
    GDR_WARN("GIN rank %d: window %u was deregistered while rank %d's data for it came", c->rank, p->rx_hdr.mr, peer);
    res = ncclInvalidUsage;
    goto out;
  }
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
    *stop = 0;
    GDR_CHECK(gin_os_rx_data_done(c, peer));
    goto out;
  }
  n = p->rx_hdr.size - p->rx_got < chunk ? p->rx_hdr.size - p->rx_got : chunk;
  data = p->rx_dst + p->rx_got;
  mh = m->rmh[peer];
  res = gdr_core_irecv(p->recv, 1, &data, &n, &tag, &mh, NULL, &req);
  if (res != ncclSuccess) {
    gin_fail(c, res, "a data receive could not be posted", peer);
    goto out;
  }
  if (req == NULL) goto out;
  p->rx_req = req;
  p->rx_cur = n;
out:
  return res;
}

static ncclResult_t recv_progress(struct gin_comm *c, int peer) {
  ncclResult_t res = ncclSuccess;
  struct gin_peer *p = &c->peers[peer];
  int stop = 0;
  for (int rounds = 0; rounds < 16 && !stop && !p->gone; rounds++) { /* nothing follows a GIN_OP_BYE */
    if (p->rx == GIN_RX_IDLE) GDR_CHECK(rx_idle(c, peer, &stop));
    if (!stop && p->rx == GIN_RX_HDR) GDR_CHECK(rx_hdr(c, peer, &stop));
    if (!stop && p->rx == GIN_RX_DATA) GDR_CHECK(rx_data(c, peer, &stop));
  }
out:
  return res;
}

static ncclResult_t os_progress(struct gin_comm *c) {
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
out:
  return res;
}

const struct gin_path gin_msg_path = {
    .name = "messages",
    .setup = os_setup,
    .teardown = os_unregister,
    .release = gin_os_teardown,
    .progress = os_progress,
    .room = os_room_for,
    .issue = os_issue,
    .kick = 1,
    .on_fail = os_abort,
    .on_peer_gone = os_peer_gone,
    .say = os_say,
};
