/* TCP transport data path: the control stream protocol (progress thread), registration, isend/irecv/test; the data
 * streams' I/O is in tcp_pool.c. Design in tcp.h. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "tcp.h"

/* ------------------------------------------------------------------------------------------- registration -- */

ncclResult_t gdr_tcp_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  struct tcp_mr *mr;
  (void)comm;
  *mhandle = NULL;
  /* NCCL's type is trusted: with ptrSupport HOST it passes its pinned host buffers, which may be cuMem host
   * allocations that a pointer query would not call plain host memory. */
  if (type != NCCL_PTR_HOST) {
    GDR_WARN("regMr of %zu bytes at %p (type %d): TCP transport needs host memory; NCCL stages GPU buffers when "
             "ptrSupport is HOST",
             size, data, type);
    return ncclInvalidUsage;
  }
  mr = calloc(1, sizeof(*mr));
  if (mr == NULL) {
    GDR_WARN("regMr: out of memory");
    return ncclSystemError;
  }
  mr->data = data;
  mr->size = size;
  mr->type = type;
  *mhandle = mr;
  return ncclSuccess;
}

ncclResult_t gdr_tcp_reg_mr_staged(void *comm, void *data, size_t size, void **mhandle) {
  ncclResult_t res = ncclSuccess;
  struct tcp_mr *mr = calloc(1, sizeof(*mr));
  (void)comm;
  *mhandle = NULL;
  if (mr == NULL) {
    GDR_WARN("regMr: out of memory");
    return ncclSystemError;
  }
  res = gdr_tcp_mr_make(data, size, NCCL_PTR_CUDA, mr);
  if (res != ncclSuccess) goto out;
  *mhandle = mr;
  mr = NULL;
out:
  free(mr);
  return res;
}

ncclResult_t gdr_tcp_dereg_mr(void *comm, void *mhandle) {
  (void)comm;
  free(mhandle);
  return ncclSuccess;
}

/* ---------------------------------------------------------------------------------------- comm failure -- */

/* The comm's error, WARNed once, or ncclSuccess. */
static ncclResult_t comm_error(struct tcp_comm *c) {
  if (!atomic_load(&c->failed)) return ncclSuccess;
  if (!c->warned) {
    c->warned = 1;
    GDR_WARN("TCP connection %s %s failed: %s", c->is_send ? "to" : "from", c->peer_str, c->fail_why);
  }
  return c->fail_res;
}

static ncclResult_t io_fail(struct tcp_comm *c, ncclResult_t r, int err, const char *what) {
  gdr_tcp_comm_fail(c, r, "%s: %s", what, err ? strerror(err) : "the peer closed the connection");
  return comm_error(c);
}

/* ------------------------------------------------------------------------------------- control stream tx -- */

/* Marks n more bytes of the queue sent; an entry whose last byte is out completes its send request. */
static void tx_advance(struct tcp_comm *c, size_t n) {
  while (c->tx_head != c->tx_tail) {
    struct tcp_txent *e = &c->txq[c->tx_head % TCP_TXQ];
    size_t left = c->hdr_len + e->len - e->off;
    if (n < left) {
      e->off += n;
      return;
    }
    n -= left;
    if (e->req != NULL) atomic_store_explicit(&e->req->done, e->req->size, memory_order_release);
    c->tx_head++;
  }
}

/* A failed sendmsg on the control stream (not EAGAIN/EINTR). */
static ncclResult_t tx_error(struct tcp_comm *c, int err) {
  if (!c->is_send && (err == EPIPE || err == ECONNRESET)) {
    /* The sender is gone (it may close right after its last send completed): what a receiver sends (CTS, credits,
     * errors) no longer matters, and its reads tell what can still arrive. Not an error here. */
    c->tx_dead = 1;
    c->tx_head = c->tx_tail;
    return ncclSuccess;
  }
  return io_fail(c, err == EPIPE || err == ECONNRESET || err == ETIMEDOUT ? ncclRemoteError : ncclSystemError, err,
                 "sending on the control stream");
}

/* Writes what is queued, as far as the socket takes it (never blocks). */
static ncclResult_t tx_flush(struct tcp_comm *c) {
  const size_t hl = c->hdr_len;
  while (c->tx_head != c->tx_tail) {
    struct iovec iov[64];
    struct msghdr mh;
    int niov = 0;
    ssize_t n;
    for (unsigned i = c->tx_head; i != c->tx_tail && niov < 62; i++) {
      struct tcp_txent *e = &c->txq[i % TCP_TXQ];
      size_t off = e->off;
      if (off < hl) {
        iov[niov].iov_base = (char *)&e->hdr + off;
        iov[niov].iov_len = hl - off;
        niov++;
        off = hl;
      }
      if (e->len > 0) {
        iov[niov].iov_base = (char *)e->payload + (off - hl);
        iov[niov].iov_len = e->len - (off - hl);
        niov++;
      }
    }
    mh.msg_name = NULL;
    mh.msg_namelen = 0;
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)niov;
    mh.msg_control = NULL;
    mh.msg_controllen = 0;
    mh.msg_flags = 0;
    n = sendmsg(c->ctrl_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
      return tx_error(c, errno);
    }
    tx_advance(c, (size_t)n);
  }
  return ncclSuccess;
}

/* Queues one control message (+ payload, which must stay valid until sent) without writing it; NULL when the queue
 * is full (WARNed). */
static struct tcp_txent *tx_queue(struct tcp_comm *c, uint32_t type, uint32_t aux, uint64_t seq, uint64_t size,
                                  uint64_t id, const void *payload, size_t len, struct tcp_req *req) {
  struct tcp_txent *e;
  if (c->tx_tail - c->tx_head >= TCP_TXQ) {
    GDR_WARN("TCP %s: control queue full (%d messages)", c->peer_str, TCP_TXQ);
    return NULL;
  }
  e = &c->txq[c->tx_tail % TCP_TXQ];
  e->hdr.type = type;
  e->hdr.aux = aux;
  e->hdr.seq = seq;
  e->hdr.size = size;
  e->hdr.id = id;
  e->payload = payload;
  e->len = len;
  e->off = 0;
  e->req = req;
  c->tx_tail++;
  return e;
}

/* Queues one control message (+ payload, which must stay valid until sent) and writes what the socket takes now:
 * one sendmsg in the common case. req: a send request that completes when the last byte is in the kernel. */
static ncclResult_t tx_send(struct tcp_comm *c, uint32_t type, uint32_t aux, uint64_t seq, uint64_t size, uint64_t id,
                            const void *payload, size_t len, struct tcp_req *req) {
  struct tcp_txent *e;
  if (c->tx_dead) return ncclSuccess;
  e = tx_queue(c, type, aux, seq, size, id, payload, len, req);
  if (e == NULL) return ncclInternalError;
  if (c->tx_tail - c->tx_head == 1) {
    /* the usual case, nothing else queued: one sendmsg of header + payload, no queue walk */
    struct iovec iov[2] = {{&e->hdr, c->hdr_len}, {(void *)payload, len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len > 0 ? 2 : 1};
    ssize_t n = sendmsg(c->ctrl_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      tx_advance(c, (size_t)n);
      return ncclSuccess;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    if (errno != EINTR) return tx_error(c, errno);
  }
  return tx_flush(c);
}

/* ------------------------------------------------------------------------------------------ tag ordinals -- */

static unsigned tag_hash(int tag) {
  uint32_t x = (uint32_t)tag * 0x9E3779B1u;
  return x ^ (x >> 15);
}

/* The entry of tag, or NULL when this comm has not seen it. */
static struct tcp_tagent *tag_find(struct tcp_comm *c, int tag) {
  unsigned mask = c->tags_cap - 1;
  if (c->tags_cap == 0) return NULL;
  for (unsigned i = tag_hash(tag) & mask, n = 0; n < c->tags_cap; i = (i + 1) & mask, n++) {
    struct tcp_tagent *e = &c->tags[i];
    if (!e->used) return NULL;
    if (e->tag == tag) return e;
  }
  return NULL;
}

static struct tcp_tagent *tag_insert(struct tcp_tagent *tab, unsigned cap, int tag) {
  unsigned mask = cap - 1, i = tag_hash(tag) & mask;
  while (tab[i].used) i = (i + 1) & mask;
  tab[i].used = 1;
  tab[i].tag = tag;
  return &tab[i];
}

/* The entry of tag, made (next ordinal 0) when new; NULL when out of memory (the comm failed). The table holds the
 * tags of this comm's own calls (isend, irecv) and of the clear-to-sends it got: NCCL's tags (0, or the PXN source
 * ranks), a handful. */
static struct tcp_tagent *tag_get(struct tcp_comm *c, int tag) {
  struct tcp_tagent *e = tag_find(c, tag);
  if (e != NULL) return e;
  if ((c->tags_n + 1) * 2 > c->tags_cap) {
    unsigned cap = c->tags_cap ? c->tags_cap * 2 : 16;
    struct tcp_tagent *tab = calloc(cap, sizeof(*tab));
    if (tab == NULL) {
      gdr_tcp_comm_fail(c, ncclSystemError, "out of memory for the ordinals of %u tags", cap);
      return NULL;
    }
    for (unsigned i = 0; i < c->tags_cap; i++)
      if (c->tags[i].used) *tag_insert(tab, cap, c->tags[i].tag) = c->tags[i];
    free(c->tags);
    c->tags = tab;
    c->tags_cap = cap;
  }
  c->tags_n++;
  return tag_insert(c->tags, c->tags_cap, tag);
}

/* The next ordinal of tag (0 for a tag not seen). */
static uint64_t tag_next(struct tcp_comm *c, int tag) {
  const struct tcp_tagent *e = tag_find(c, tag);
  return e ? e->next : 0;
}

/* ---------------------------------------------------------------------------------------- eager credits -- */

ncclResult_t gdr_tcp_eager_setup(struct tcp_comm *c) {
  c->match_tags = c->peer_version >= TCP_PROTO_MATCH;
  c->hdr_len = c->peer_version >= TCP_PROTO_MATCH ? sizeof(struct tcp_ctrl_hdr) : TCP_HDR_V1;
  if (c->peer_version > 1 && c->peer_version < TCP_PROTO_MATCH) {
    /* versions 2 and 3 number messages by arrival (and place grouped sends by a CTS_GROUP): not NCCL's rule, and a
     * header this one does not read */
    GDR_WARN("TCP: the peer %s speaks TCP protocol version %u, this plugin version %u (which matches messages to "
             "receives by tag and ordinal); use the same plugin version on every rank",
             c->peer_str, c->peer_version, TCP_PROTO_VERSION);
    return ncclInvalidUsage;
  }
  if (c->is_send) return ncclSuccess; /* the sender learns everything from the receiver's GRANT */
  if (!(c->peer_features & TCP_FEAT_EAGER)) {
    /* an older sender (TCP protocol version 1): it knows no GRANT, EAGER or RTS; every receive sends its CTS */
    GDR_INFO(NCCL_NET,
             "TCP: the sender %s speaks TCP protocol version %u (an older libnccl-net-gdr): no eager "
             "messages on this connection",
             c->peer_str, c->peer_version);
    return ncclSuccess;
  }
  c->ncredits = (uint32_t)gdr_param_int(GDR_PARAM_TCP_EAGER_CREDITS);
  if (c->ncredits > TCP_MAX_CREDITS) c->ncredits = TCP_MAX_CREDITS;
  c->eager_max = c->ncredits ? c->inline_max : 0;
  if (c->ncredits) {
    c->bounce = calloc(c->ncredits, sizeof(*c->bounce));
    if (c->bounce == NULL) {
      GDR_WARN("TCP: out of memory for %u eager slots", c->ncredits);
      return ncclSystemError;
    }
  }
  /* sent to every eager-capable sender, even with no credits: it knows the receiver's protocol before it sends
   * RTS messages */
  return tx_send(c, TCP_MSG_GRANT, c->ncredits, TCP_PROTO_VERSION, c->eager_max, 0, NULL, 0, NULL);
}

void gdr_tcp_eager_free(struct tcp_comm *c) {
  if (c->bounce != NULL)
    for (uint32_t i = 0; i < c->ncredits; i++) free(c->bounce[i].buf);
  free(c->bounce);
  c->bounce = NULL;
  free(c->tags);
  c->tags = NULL;
  c->tags_cap = c->tags_n = 0;
}

static ncclResult_t send_cts(struct tcp_comm *c, struct tcp_req *q, int flush);

/* Receiver: every credit consumed and not returned yet goes back to the sender, in one CREDIT message. */
static ncclResult_t credit_send(struct tcp_comm *c) {
  const uint32_t n = c->unreturned;
  c->unreturned = 0;
  return tx_send(c, TCP_MSG_CREDIT, 0, 0, n, 0, NULL, 0, NULL);
}

/* Receiver: the sender may be out of credits with every one of them held here (bounce slots for buffers not posted
 * yet, consumed ones not credited back). Its next message may be the one the current receive waits for: the
 * credits consumed go back now, and while every credit is held in a bounce slot each posted buffer that waits for
 * an eager message gets a clear-to-send (its message then comes inline), so the two sides never wait on each other.
 * With credits to spare (the usual case) this does nothing. */
static ncclResult_t credit_check(struct tcp_comm *c) {
  ncclResult_t res = ncclSuccess;
  int queued = 0;
  if (c->ncredits == 0 || c->nbounce + c->unreturned < c->ncredits) return ncclSuccess;
  if (c->unreturned > 0) return credit_send(c);
  for (int i = 0; i < TCP_NREQ; i++) {
    struct tcp_req *q = &c->req[i];
    if (q->state != TCP_REQ_RECV || q->matched || q->cts ||
        atomic_load_explicit(&q->total, memory_order_relaxed) != SIZE_MAX)
      continue;
    GDR_CHECK(send_cts(c, q, 0));
    queued = 1;
  }
  if (queued) GDR_CHECK(tx_flush(c));
out:
  return res;
}

/* Receiver: one more eager message consumed. Credits go back in batches of max(1, C/2), sent by credit_return where
 * the proxy thread waits anyway: in a test() whose message has not come. Not in the test() that completes a message,
 * nor in irecv: NCCL (and a ping-pong) hears of the message, or answers it, only after that sendmsg (1-2 us, once
 * every C/2 messages). They go at once when every credit is held here (credit_check), or when the sender is down to
 * C/4 (it then reads its control stream at every isend): a receiver that finds every message already in never waits. */
static ncclResult_t credit_consumed(struct tcp_comm *c) {
  if (++c->unreturned < c->ncredits - c->ncredits / 4) return credit_check(c);
  return credit_send(c);
}

/* Receiver, in a test() whose message has not come: a batch of consumed credits goes back (see credit_consumed). */
static ncclResult_t credit_return(struct tcp_comm *c) {
  if (c->unreturned < (c->ncredits >= 2 ? c->ncredits / 2 : 1)) return ncclSuccess;
  return credit_send(c);
}

/* Receiver: the message for the posted receive r is `sent` bytes, more than r takes. WARNs with both sizes, fails
 * r and the comm, tells the sender (which WARNs too and fails its next call). */
static ncclResult_t recv_too_small(struct tcp_comm *c, struct tcp_req *r, uint64_t sent) {
  GDR_WARN("TCP: the peer %s sends %llu bytes as message %llu of tag %d but this receive posted only %zu bytes "
           "(buffer %llu); a send larger than its receive is invalid usage",
           c->peer_str, (unsigned long long)sent, (unsigned long long)r->ord, r->tag, r->size,
           (unsigned long long)r->seq);
  r->err = ncclInvalidUsage;
  c->warned = 1;
  gdr_tcp_comm_fail(c, ncclInvalidUsage, "buffer %llu: send of %llu bytes into a receive of %zu bytes",
                    (unsigned long long)r->seq, (unsigned long long)sent, r->size);
  (void)tx_send(c, TCP_MSG_ERR_RECV, r->size > UINT32_MAX ? UINT32_MAX : (uint32_t)r->size, r->ord, sent,
                (uint64_t)(uint32_t)r->tag, NULL, 0, NULL);
  return ncclSuccess;
}

static void recv_complete(struct tcp_req *r, size_t bytes) {
  atomic_store_explicit(&r->total, bytes, memory_order_relaxed);
  atomic_store_explicit(&r->done, bytes, memory_order_release);
}

/* Receiver: the posted buffer of message (tag, ord) that has not completed, or NULL when it is not posted (yet, or
 * any more). At most TCP_NREQ buffers are posted. */
static struct tcp_req *posted_find(struct tcp_comm *c, int tag, uint64_t ord) {
  for (int i = 0; i < TCP_NREQ; i++) {
    struct tcp_req *q = &c->req[i];
    if (q->state == TCP_REQ_RECV && q->ord == ord && q->tag == tag &&
        atomic_load_explicit(&q->total, memory_order_relaxed) == SIZE_MAX)
      return q;
  }
  return NULL;
}

/* Receiver: the bounced message b goes into its buffer q (b is full); the slot is free again. */
static ncclResult_t bounce_apply(struct tcp_comm *c, struct tcp_bounce *b, struct tcp_req *q) {
  b->used = 0;
  b->dst = NULL;
  c->nbounce--;
  if (b->size > q->size) return recv_too_small(c, q, b->size);
  if (b->size > 0) memcpy(q->data, b->buf, b->size);
  recv_complete(q, b->size);
  return credit_consumed(c);
}

/* Receiver: the receive whose first buffer is h sent its clear-to-send, so its data is on the way (the helpers'
 * polling hint, until test() completes it). */
static void expect_data(struct tcp_comm *c, struct tcp_req *h) {
  if (h->expect) return;
  h->expect = 1;
  atomic_fetch_add_explicit(&c->rx_expect, 1, memory_order_relaxed);
}

/* Receiver: the clear-to-send of buffer q (its number, size, tag and ordinal); flush 0: queued only (the caller
 * writes a grouped receive's in one go). */
static ncclResult_t send_cts(struct tcp_comm *c, struct tcp_req *q, int flush) {
  q->cts = 1;
  c->n_cts++;
  expect_data(c, &c->req[q->gbase % TCP_NREQ]);
  if (flush) return tx_send(c, TCP_MSG_CTS, (uint32_t)q->tag, q->ord, q->size, q->seq, NULL, 0, NULL);
  if (c->tx_dead) return ncclSuccess;
  return tx_queue(c, TCP_MSG_CTS, (uint32_t)q->tag, q->ord, q->size, q->seq, NULL, 0, NULL) ? ncclSuccess
                                                                                            : ncclInternalError;
}

/* ------------------------------------------------------------------------------------- control stream rx -- */

/* The end of an INLINE/EAGER payload. */
static ncclResult_t rx_finish(struct tcp_comm *c) {
  struct tcp_req *r = c->rx_req;
  struct tcp_bounce *b = c->rx_bounce;
  c->rx_in_payload = 0;
  if (r != NULL) {
    c->rx_req = NULL;
    recv_complete(r, c->rx_total);
    return c->rx_eager ? credit_consumed(c) : ncclSuccess;
  }
  c->rx_bounce = NULL;
  b->full = 1;
  /* its buffer may have been posted while the payload was arriving */
  return b->dst != NULL ? bounce_apply(c, b, b->dst) : ncclSuccess;
}

static ncclResult_t rx_start(struct tcp_comm *c, char *dst, size_t size, struct tcp_req *r, struct tcp_bounce *b,
                             int eager) {
  c->rx_dst = dst;
  c->rx_total = size;
  c->rx_left = size;
  c->rx_req = r;
  c->rx_bounce = b;
  c->rx_eager = eager;
  c->rx_in_payload = 1;
  return size == 0 ? rx_finish(c) : ncclSuccess;
}

static ncclResult_t protocol_error(struct tcp_comm *c, const struct tcp_ctrl_hdr *h, const char *what) {
  gdr_tcp_comm_fail(c, ncclRemoteError,
                    "protocol error: %s (type %u, tag/aux %u, ordinal %llu, buffer %llu, size %llu)", what, h->type,
                    h->aux, (unsigned long long)h->seq, (unsigned long long)h->id, (unsigned long long)h->size);
  return comm_error(c);
}

/* Sender: one message from the receiver. */
static ncclResult_t rx_message_send(struct tcp_comm *c, const struct tcp_ctrl_hdr *h) {
  switch (h->type) {
  case TCP_MSG_CTS: {
    int tag = c->match_tags ? (int)h->aux : 0;
    struct tcp_cts *e = NULL;
    if (h->seq < tag_next(c, tag)) return ncclSuccess; /* that message went eager: its buffer has it */
    for (int i = 0; i < TCP_NREQ; i++) {
      struct tcp_cts *x = &c->cts[i];
      if (x->used && x->tag == tag && x->ord == h->seq) return protocol_error(c, h, "a second clear-to-send");
      if (!x->used && e == NULL) e = x;
    }
    if (e == NULL) return protocol_error(c, h, "more clear-to-sends than a receiver can have posted");
    e->used = 1;
    e->tag = tag;
    e->ord = h->seq;
    e->id = h->id;
    e->size = h->size;
    c->ncts++;
    atomic_fetch_add_explicit(&c->tx_expect, 1, memory_order_relaxed);
    return ncclSuccess;
  }
  case TCP_MSG_CREDIT:
    if (h->size > (uint64_t)c->ncredits - c->credits) return protocol_error(c, h, "more credits back than granted");
    c->credits += (uint32_t)h->size;
    return ncclSuccess;
  case TCP_MSG_GRANT:
    if (c->granted || h->aux > TCP_MAX_CREDITS || h->size > ((size_t)1 << 30)) return protocol_error(c, h, "bad grant");
    c->granted = 1;
    if (h->seq >= 2) c->peer_version = (unsigned)h->seq;
    c->ncredits = c->credits = h->aux;
    c->eager_max = c->ncredits ? (size_t)h->size : 0;
    return ncclSuccess;
  case TCP_MSG_ERR_RECV:
    GDR_WARN("TCP: isend of %llu bytes to %s as message %llu of tag %d, but the receiver posted only %u bytes; a send "
             "larger than its receive is invalid usage",
             (unsigned long long)h->size, c->peer_str, (unsigned long long)h->seq, (int)(uint32_t)h->id, h->aux);
    c->warned = 1;
    gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu of tag %d: send of %llu bytes into a receive of %u bytes",
                      (unsigned long long)h->seq, (int)(uint32_t)h->id, (unsigned long long)h->size, h->aux);
    return ncclSuccess;
  default: return protocol_error(c, h, "unexpected message type from the receiver");
  }
}

/* Receiver: an EAGER message (tag, ord): into its buffer if posted, else into a bounce slot. */
static ncclResult_t rx_eager(struct tcp_comm *c, const struct tcp_ctrl_hdr *h) {
  int tag = (int)h->aux;
  uint64_t next;
  struct tcp_req *t;
  struct tcp_bounce *b = NULL;
  if (c->ncredits == 0 || h->size > c->eager_max) return protocol_error(c, h, "eager message beyond the grant");
  c->n_eager++;
  t = posted_find(c, tag, h->seq);
  if (t != NULL) {
    if (t->matched) return protocol_error(c, h, "a second message for one buffer");
    if (!tcp_req_claim(t, TCP_CLAIM_CTRL)) return protocol_error(c, h, "eager message for a buffer chunks fill");
    t->matched = 1;
    if (h->size > t->size) return recv_too_small(c, t, h->size);
    return rx_start(c, t->data, (size_t)h->size, t, NULL, 1);
  }
  next = tag_next(c, tag);
  if (h->seq < next) return protocol_error(c, h, "eager message for a buffer that has its message");
  if (c->nbounce >= c->ncredits) return protocol_error(c, h, "eager message beyond the credits");
  /* A sender is at most one message per credit ahead of the buffers posted here with its tag, and its messages of a
   * tag come in order: an ordinal outside that window is a corrupt or hostile peer, not something to buffer. */
  if (h->seq >= next + c->ncredits)
    return protocol_error(c, h, "eager message numbered outside the window the credits allow");
  for (uint32_t i = 0; i < c->ncredits; i++) {
    struct tcp_bounce *x = &c->bounce[i];
    if (x->used && x->tag == tag && x->ord >= h->seq)
      return protocol_error(c, h,
                            "eager message numbered outside the window the credits allow (not after the "
                            "last one of its tag)");
    if (!x->used && b == NULL) b = x;
  }
  if (b->cap < h->size) {
    char *nb = realloc(b->buf, (size_t)h->size);
    if (nb == NULL) {
      gdr_tcp_comm_fail(c, ncclSystemError, "out of memory for an eager message of %llu bytes",
                        (unsigned long long)h->size);
      return comm_error(c);
    }
    b->buf = nb;
    b->cap = (size_t)h->size;
  }
  b->used = 1;
  b->ord = h->seq;
  b->tag = tag;
  b->size = (size_t)h->size;
  b->full = 0;
  b->dst = NULL;
  c->nbounce++;
  c->n_bounced++;
  {
    ncclResult_t res = credit_check(c);
    if (res != ncclSuccess) return res;
  }
  return rx_start(c, b->buf, b->size, NULL, b, 1);
}

/* Receiver: an RTS: message (tag, ord) of `size` bytes waits for its clear-to-send. */
static ncclResult_t rx_rts(struct tcp_comm *c, const struct tcp_ctrl_hdr *h) {
  int tag = (int)h->aux;
  struct tcp_req *r;
  struct tcp_rts *e = NULL;
  if (c->ncredits == 0) return protocol_error(c, h, "RTS without eager credits");
  r = posted_find(c, tag, h->seq);
  if (r != NULL) {
    if (r->matched || r->cts) return ncclSuccess; /* its CTS went out at irecv (its data may be arriving already) */
    /* irecv sent no CTS for it (<= E bytes): this message cannot fit (or the two sides disagree on E) */
    if (h->size > r->size) return recv_too_small(c, r, h->size);
    return send_cts(c, r, 1);
  }
  if (h->seq < tag_next(c, tag)) return ncclSuccess; /* the buffer has its message already */
  for (int i = 0; i < TCP_MAX_RTS; i++) {
    struct tcp_rts *x = &c->rtsq[i];
    if (x->used && x->tag == tag) {
      /* a sender announces only the next message of a tag: an older announcement of the tag is obsolete (that
       * message went another way, e.g. over RDMA after a return), a newer one means a broken peer */
      if (x->ord >= h->seq) return protocol_error(c, h, "an RTS not after the last one of its tag");
      x->used = 0;
      c->nrts--;
    }
    if (!x->used && e == NULL) e = x;
  }
  if (e == NULL) return protocol_error(c, h, "more RTS messages than a sender may have outstanding");
  e->used = 1;
  e->tag = tag;
  e->ord = h->seq;
  e->size = h->size;
  c->nrts++;
  return ncclSuccess;
}

/* Receiver: one message from the sender; may enter the payload state. */
static ncclResult_t rx_message_recv(struct tcp_comm *c, const struct tcp_ctrl_hdr *h) {
  struct tcp_req *r = &c->req[h->id % TCP_NREQ];
  /* the buffer that an INLINE / ERR_SIZE names: posted, not complete, and (version 4) for this very message */
  int posted = r->state == TCP_REQ_RECV && r->seq == h->id && h->id < c->next_seq &&
               atomic_load_explicit(&r->total, memory_order_relaxed) == SIZE_MAX &&
               (!c->match_tags || (r->tag == (int)h->aux && r->ord == h->seq));
  switch (h->type) {
  case TCP_MSG_EAGER: return rx_eager(c, h);
  case TCP_MSG_INLINE:
    if (!posted || h->size > r->size || r->matched)
      return protocol_error(c, h, "inline message matching no posted receive");
    if (!tcp_req_claim(r, TCP_CLAIM_CTRL)) return protocol_error(c, h, "inline message for a buffer chunks fill");
    r->matched = 1;
    return rx_start(c, r->data, (size_t)h->size, r, NULL, 0);
  case TCP_MSG_RTS: return rx_rts(c, h);
  case TCP_MSG_ERR_SIZE:
    if (!posted) return protocol_error(c, h, "size error for no posted receive");
    GDR_WARN("TCP: the peer %s sends %llu bytes as message %llu of tag %d but this receive posted only %zu bytes "
             "(buffer %llu); a send larger than its receive is invalid usage",
             c->peer_str, (unsigned long long)h->size, (unsigned long long)r->ord, r->tag, r->size,
             (unsigned long long)h->id);
    r->err = ncclInvalidUsage;
    c->warned = 1;
    gdr_tcp_comm_fail(c, ncclInvalidUsage, "buffer %llu: send of %llu bytes into a receive of %zu bytes",
                      (unsigned long long)h->id, (unsigned long long)h->size, r->size);
    return ncclSuccess;
  default: return protocol_error(c, h, "unexpected message type from the sender");
  }
}

/* Parses what is staged: headers, and payload bytes into their destination. Leaves at most a partial header. */
static ncclResult_t rx_consume(struct tcp_comm *c) {
  ncclResult_t res = ncclSuccess;
  for (;;) {
    size_t avail = c->rx_len - c->rx_off;
    if (c->rx_in_payload) {
      size_t k = avail < c->rx_left ? avail : c->rx_left;
      if (k > 0) {
        memcpy(c->rx_dst + (c->rx_total - c->rx_left), c->rx + c->rx_off, k);
        c->rx_off += k;
        c->rx_left -= k;
      }
      if (c->rx_left > 0) break;
      GDR_CHECK(rx_finish(c));
      continue;
    }
    if (avail < c->hdr_len) break;
    {
      struct tcp_ctrl_hdr h;
      memset(&h, 0, sizeof(h));
      memcpy(&h, c->rx + c->rx_off, c->hdr_len);
      if (!c->match_tags) { /* a version-1 peer: one stream of messages, numbered as the buffers */
        h.id = h.seq;
        h.aux = 0;
      }
      c->rx_off += c->hdr_len;
      GDR_CHECK(c->is_send ? rx_message_send(c, &h) : rx_message_recv(c, &h));
      if (atomic_load_explicit(&c->failed, memory_order_relaxed)) {
        res = comm_error(c);
        goto out;
      }
    }
  }
  if (c->rx_off == c->rx_len) {
    c->rx_off = c->rx_len = 0;
  } else if (c->rx_off > 0) {
    memmove(c->rx, c->rx + c->rx_off, c->rx_len - c->rx_off);
    c->rx_len -= c->rx_off;
    c->rx_off = 0;
  }
out:
  return res;
}

/* Reads the control stream until it is drained: stops after a short read (the kernel had no more) or after a
 * payload read straight into its buffer, so a message costs one recv(), not one more that says EAGAIN. */
static ncclResult_t rx_progress(struct tcp_comm *c) {
  ncclResult_t res = ncclSuccess;
  for (int iter = 0; iter < 64 && !c->ctrl_eof; iter++) {
    ssize_t n;
    size_t space;
    if (c->rx_in_payload && c->rx_len == 0 && c->rx_left >= 4096) {
      /* a big payload goes straight into its buffer, exactly what is left of it */
      space = c->rx_left;
      n = recv(c->ctrl_fd, c->rx_dst + (c->rx_total - c->rx_left), space, MSG_DONTWAIT);
      if (n > 0) {
        c->rx_left -= (size_t)n;
        if (c->rx_left == 0) GDR_CHECK(rx_finish(c));
        break;
      }
    } else {
      space = TCP_RXBUF - c->rx_len;
      n = recv(c->ctrl_fd, c->rx + c->rx_len, space, MSG_DONTWAIT);
      if (n > 0) {
        c->rx_len += (size_t)n;
        GDR_CHECK(rx_consume(c));
        if ((size_t)n < space) break; /* drained */
        continue;
      }
    }
    if (n == 0) {
      c->ctrl_eof = 1;
      if (c->rx_in_payload) {
        gdr_tcp_comm_fail(c, ncclRemoteError, "the peer closed the control stream in the middle of a message");
        res = comm_error(c);
      }
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno == ECONNRESET && !c->is_send && !c->rx_in_payload) {
      /* a reset after the last message (the sender closed while a credit was on its way): as EOF */
      c->ctrl_eof = 1;
      break;
    }
    res = io_fail(c, ncclRemoteError, errno, "receiving on the control stream");
    break;
  }
out:
  return res;
}

/* Sender: writes what is queued and reads what the receiver sent (CTS, credits, errors). */
static ncclResult_t send_poll(struct tcp_comm *c) {
  c->idle_calls = 0;
  if (c->tx_head != c->tx_tail) {
    ncclResult_t res = tx_flush(c);
    if (res != ncclSuccess) return res;
  }
  return rx_progress(c);
}

/* The data streams' I/O (chunks written by the send lanes, read by the receiving streams) is in tcp_pool.c. */

/* ----------------------------------------------------------------------------------------------- isend -- */

static ncclResult_t queue_chunks(struct tcp_comm *c, struct tcp_req *r) {
  struct gdr_tcp_plan plan;
  unsigned base = c->rr;
  size_t min_chunk = c->min_chunk;
  if (c->steal_chunk > min_chunk && gdr_tcp_pool_stealing()) min_chunk = c->steal_chunk; /* fewer hand-overs */
  gdr_tcp_plan_chunks(r->size, c->nthreads, min_chunk, c->max_chunk, &plan);
  c->chunks_queued += plan.nchunks;
  c->rr = (c->rr + 1) % (unsigned)c->nthreads;
  for (int t = 0; t < c->nthreads; t++) {
    struct tcp_thread *th = &c->threads[t];
    uint32_t first = ((unsigned)t + (unsigned)c->nthreads - base) % (unsigned)c->nthreads;
    struct tcp_task *task;
    if (first >= plan.nchunks) continue;
    pthread_mutex_lock(&th->mu);
    if (th->tail - th->head >= TCP_NREQ) {
      pthread_mutex_unlock(&th->mu);
      GDR_WARN("TCP %s: helper queue overflow", c->peer_str);
      return ncclInternalError;
    }
    task = &th->q[th->tail % TCP_NREQ];
    task->req = r;
    task->seq = r->wseq;
    task->data = r->data;
    task->size = r->size;
    task->chunk = plan.chunk;
    task->first = first;
    task->nchunks = plan.nchunks;
    task->stride = (uint32_t)c->nthreads;
    th->tail++;
    gdr_tcp_lane_kick(th);
    pthread_mutex_unlock(&th->mu);
  }
  return ncclSuccess;
}

static void send_start(struct tcp_comm *c, struct tcp_req *r, uint64_t seq, void *data, size_t size, size_t done0) {
  c->next_seq = seq + 1;
  r->state = TCP_REQ_SEND;
  r->seq = seq;
  r->data = data;
  r->size = size;
  r->err = ncclSuccess;
  r->wseq = seq;
  atomic_store_explicit(&r->done, done0, memory_order_relaxed);
}

/* Sender: the clear-to-send of message (tag, ord), or NULL. */
static struct tcp_cts *cts_find(struct tcp_comm *c, int tag, uint64_t ord) {
  if (c->ncts == 0) return NULL;
  for (int i = 0; i < TCP_NREQ; i++)
    if (c->cts[i].used && c->cts[i].ord == ord && c->cts[i].tag == tag) return &c->cts[i];
  return NULL;
}

/* Sender: message (tag e->tag, ordinal e->next) is accepted: the tag's next one is next; its RTS is answered. */
static void tag_sent(struct tcp_comm *c, struct tcp_tagent *e) {
  if (e->rts == e->next + 1) {
    e->rts = 0;
    c->rts_out--;
  }
  e->next++;
}

ncclResult_t gdr_tcp_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = send_comm;
  uint64_t seq = c->next_seq, ord;
  unsigned slot = (unsigned)(seq % TCP_NREQ);
  struct tcp_req *r = &c->req[slot];
  const struct tcp_mr *mr = mhandle;
  char *wire = data; /* what goes on the wire: data, or its pinned copy for device memory */
  struct tcp_tagent *te;
  struct tcp_cts *cts;

  *request = NULL;
  if (atomic_load_explicit(&c->failed, memory_order_relaxed)) return comm_error(c);
  if (++c->idle_calls >= TCP_SEND_POLL_CALLS) GDR_CHECK(send_poll(c));
  if (c->ctrl_eof) {
    /* the receiver closed its end: nothing sent now can be received */
    gdr_tcp_comm_fail(c, ncclRemoteError, "the receiver closed the connection (message %llu not sent)",
                      (unsigned long long)seq);
    return comm_error(c);
  }
  if (r->state != TCP_REQ_FREE) goto out; /* 32 in flight: try again later */
  if (!c->match_tags) tag = 0;            /* a version-1 receiver: one stream of plain receives */
  te = tag_get(c, tag);
  if (te == NULL) return comm_error(c);
  ord = te->next; /* this is message (tag, ord): it belongs in the receiver's buffer (tag, ord) */
  cts = cts_find(c, tag, ord);
  if (cts == NULL) {
    /* no CTS (yet): eager if it fits and a credit is left; read the control stream first when credits run low, or
     * when the message would rather be chunked (above GDRNET_TCP_CTS_INLINE) should its CTS be there already */
    if (size > c->eager_max || size > c->cts_inline_max || c->credits <= c->ncredits / 4) {
      GDR_CHECK(send_poll(c));
      GDR_CHECK(comm_error(c)); /* e.g. an ERR_RECV just read */
      cts = cts_find(c, tag, ord);
    }
    if (cts == NULL) {
      if (size <= c->eager_max && c->credits > 0) {
        if (mr && mr->cuda_ctx && size > 0) GDR_CHECK(gdr_tcp_stage_out(r, mr, data, size, &wire));
        c->credits--;
        c->n_eager++;
        send_start(c, r, seq, wire, size, SIZE_MAX);
        r->ord = ord;
        tag_sent(c, te);
        GDR_TRACE(NCCL_NET, "TCP isend %s seq %llu (tag %d #%llu) size %zu eager (%u credits left)", c->peer_str,
                  (unsigned long long)seq, tag, (unsigned long long)ord, size, c->credits);
        GDR_CHECK(tx_send(c, TCP_MSG_EAGER, (uint32_t)tag, ord, size, 0, wire, size, r));
        *request = r;
        goto out;
      }
      if (c->ncredits > 0 && size > c->eager_max && te->rts != ord + 1 && c->rts_out < TCP_MAX_RTS) {
        /* the receive may be posted with <= E bytes, which sends no CTS: let the receiver check */
        te->rts = ord + 1;
        c->rts_out++;
        GDR_CHECK(tx_send(c, TCP_MSG_RTS, (uint32_t)tag, ord, size, 0, NULL, 0, NULL));
      }
      if (c->ctrl_eof) {
        gdr_tcp_comm_fail(c, ncclRemoteError, "the receiver closed the connection (message %llu not posted)",
                          (unsigned long long)seq);
        res = comm_error(c);
      }
      goto out; /* its buffer is not posted yet, or no credit: NCCL tries again */
    }
  }
  if (size > cts->size) {
    GDR_WARN("TCP: isend of %zu bytes to %s as message %llu of tag %d, but the receiver posted only %llu bytes; a "
             "send larger than its receive is invalid usage",
             size, c->peer_str, (unsigned long long)ord, tag, (unsigned long long)cts->size);
    c->warned = 1;
    gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu of tag %d: send of %zu bytes into a receive of %llu bytes",
                      (unsigned long long)ord, tag, size, (unsigned long long)cts->size);
    (void)tx_send(c, TCP_MSG_ERR_SIZE, (uint32_t)tag, ord, size, cts->id, NULL, 0, NULL);
    res = ncclInvalidUsage;
    goto out;
  }
  {
    uint64_t wseq = cts->id;
    cts->used = 0;
    c->ncts--;
    atomic_fetch_sub_explicit(&c->tx_expect, 1, memory_order_relaxed); /* counted when it came */
    GDR_TRACE(NCCL_NET, "TCP isend %s seq %llu (tag %d #%llu, buffer %llu) size %zu %s", c->peer_str,
              (unsigned long long)seq, tag, (unsigned long long)ord, (unsigned long long)wseq, size,
              size <= c->cts_inline_max ? "inline" : "chunked");
    if (mr && mr->cuda_ctx && size > 0) GDR_CHECK(gdr_tcp_stage_out(r, mr, data, size, &wire));
    tag_sent(c, te);
    if (size <= c->cts_inline_max) {
      send_start(c, r, seq, wire, size, SIZE_MAX);
      r->wseq = wseq;
      r->ord = ord;
      GDR_CHECK(tx_send(c, TCP_MSG_INLINE, (uint32_t)tag, ord, size, wseq, wire, size, r));
    } else {
      send_start(c, r, seq, wire, size, 0);
      r->wseq = wseq;
      r->ord = ord;
      c->n_chunked++;
      GDR_CHECK(queue_chunks(c, r));
    }
  }
  *request = r;
out:
  return res;
}

int gdr_tcp_send_announced(const void *send_comm) {
  const struct tcp_comm *c = send_comm;
  return (int)c->rts_out;
}

int gdr_tcp_tag_counts(const void *comm, int *tags, uint64_t *counts, int max) {
  const struct tcp_comm *c = comm;
  int n = 0;
  for (unsigned i = 0; i < c->tags_cap; i++) {
    const struct tcp_tagent *e = &c->tags[i];
    uint64_t k = e->next;
    if (!e->used) continue;
    if (c->is_send && e->rts > k) k = e->rts; /* announced: its retry comes to this comm */
    if (k == 0) continue;
    if (n < max) {
      tags[n] = e->tag;
      counts[n] = k;
    }
    n++;
  }
  return n;
}

uint64_t gdr_tcp_tag_count(const void *comm, int tag) {
  const struct tcp_tagent *e = tag_find((struct tcp_comm *)comm, tag);
  return e ? e->next : 0;
}

/* ----------------------------------------------------------------------------------------------- irecv -- */

/* Receiver: arms buffer seq (one buffer of a group whose first buffer is base), message (tag, ord) of its peer. */
static void recv_arm(struct tcp_comm *c, uint64_t seq, uint64_t base, int gn, void *data, size_t size, int tag,
                     uint64_t ord) {
  struct tcp_req *r = &c->req[seq % TCP_NREQ];
  r->state = TCP_REQ_RECV;
  r->seq = seq;
  r->data = data;
  r->size = size;
  r->err = ncclSuccess;
  r->cts = 0;
  r->expect = 0;
  r->gn = gn;
  r->gbase = base;
  r->tag = tag;
  r->ord = ord;
  r->matched = 0;
  atomic_store_explicit(&r->done, 0, memory_order_relaxed);
  atomic_store_explicit(&r->total, SIZE_MAX, memory_order_relaxed);
  /* release: an I/O thread that sees these reset (its chunk header passed the slot's previous arming just before)
   * sees the previous receive's disarming too (test()), and stream_header refuses the chunk */
  atomic_store_explicit(&r->reserved, 0, memory_order_release);
  atomic_store_explicit(&r->claim, TCP_CLAIM_NONE, memory_order_release);
  atomic_store_explicit(&r->armed, seq + 1, memory_order_release);
}

/* Receiver: buffer q was just posted: a message held for it is copied (or will be, when its payload is in), an RTS
 * for it is answered; *need_cts: it waits for a message that needs its clear-to-send. */
static ncclResult_t recv_match(struct tcp_comm *c, struct tcp_req *q, int *need_cts) {
  ncclResult_t res = ncclSuccess;
  struct tcp_rts *rts = NULL;
  *need_cts = 0;
  if (c->nrts > 0)
    for (int i = 0; i < TCP_MAX_RTS && rts == NULL; i++)
      if (c->rtsq[i].used && c->rtsq[i].tag == q->tag && c->rtsq[i].ord == q->ord) rts = &c->rtsq[i];
  if (rts != NULL) {
    rts->used = 0;
    c->nrts--;
  }
  for (uint32_t i = 0; c->nbounce > 0 && i < c->ncredits; i++) {
    struct tcp_bounce *b = &c->bounce[i];
    if (!b->used || b->tag != q->tag || b->ord != q->ord) continue;
    if (!tcp_req_claim(q, TCP_CLAIM_CTRL)) {
      gdr_tcp_comm_fail(c, ncclRemoteError, "protocol error: message %llu of tag %d came eager and in chunks",
                        (unsigned long long)q->ord, q->tag);
      return comm_error(c);
    }
    q->matched = 1;
    if (b->full)
      GDR_CHECK(bounce_apply(c, b, q));
    else
      b->dst = q; /* rx_finish copies it */
    goto out;
  }
  if (rts != NULL && rts->size > q->size) {
    GDR_CHECK(recv_too_small(c, q, rts->size));
    goto out;
  }
  *need_cts = rts != NULL || q->size > c->eager_max || c->ncredits == 0;
out:
  return res;
}

ncclResult_t gdr_tcp_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                           void **request) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = recv_comm;
  uint64_t seq = c->next_seq;
  struct tcp_req *r = &c->req[seq % TCP_NREQ];
  struct tcp_tagent *te[TCP_MAX_RECVS];
  int ncts = 0;

  *request = NULL;
  if (n < 1 || n > TCP_MAX_RECVS) {
    GDR_WARN("TCP irecv: %d buffers in one grouped receive (1..%d)", n, TCP_MAX_RECVS);
    return ncclInternalError;
  }
  if (atomic_load_explicit(&c->failed, memory_order_relaxed)) return comm_error(c);
  if (n > 1 && !(c->peer_features & TCP_FEAT_GROUPS)) {
    GDR_WARN("TCP irecv from %s: a grouped receive of %d buffers, but the sender runs an older libnccl-net-gdr "
             "(TCP protocol version %u) without grouped receives; use the same plugin version on every rank",
             c->peer_str, n, c->peer_version);
    return ncclInvalidUsage;
  }
  for (int i = 0; i < n; i++)
    if (c->req[(seq + (uint64_t)i) % TCP_NREQ].state != TCP_REQ_FREE) goto out; /* 32 in flight */
  for (int i = 0; i < n; i++) /* every tag's entry first: nothing is armed when one cannot be made */
    if (tag_get(c, c->match_tags ? tags[i] : 0) == NULL) return comm_error(c);
  for (int i = 0; i < n; i++) te[i] = tag_find(c, c->match_tags ? tags[i] : 0); /* (the table no longer grows) */
  for (int i = 0; i < n; i++) { /* device buffers receive into their slot's pinned buffer (before any is armed) */
    const struct tcp_mr *mr = mhandles ? mhandles[i] : NULL;
    struct tcp_req *q = &c->req[(seq + (uint64_t)i) % TCP_NREQ];
    char *dst = NULL;
    q->dev = NULL;
    if (mr && mr->cuda_ctx && sizes[i] > 0) GDR_CHECK(gdr_tcp_stage_in(q, mr, data[i], sizes[i], &dst));
  }
  /* buffer i is message (tag, the tag's next ordinal): the k-th buffer with tag t takes the sender's k-th isend
   * with tag t (NCCL's rule: a slot's buffers fill before the next slot's, the first free one with the tag) */
  for (int i = 0; i < n; i++) {
    struct tcp_req *q = &c->req[(seq + (uint64_t)i) % TCP_NREQ];
    recv_arm(c, seq + (uint64_t)i, seq, i == 0 ? n : 0, q->dev ? q->stage : data[i], sizes[i], te[i]->tag,
             te[i]->next++);
  }
  c->next_seq = seq + (uint64_t)n;
  GDR_TRACE(NCCL_NET, "TCP irecv %s seq %llu n %d posted %zu tag %d #%llu", c->peer_str, (unsigned long long)seq, n,
            sizes[0], r->tag, (unsigned long long)r->ord);
  for (int i = 0; i < n; i++) {
    struct tcp_req *q = &c->req[(seq + (uint64_t)i) % TCP_NREQ];
    int need = 0;
    GDR_CHECK(recv_match(c, q, &need));
    if (atomic_load_explicit(&c->failed, memory_order_relaxed)) break; /* a size error: test() reports it */
    /* A receive of <= E bytes can only be matched by an eager message: no CTS for it. (Not sending the CTS of a
     * larger receive until its message turns out to be big, on the RTS, would save a sendmsg per NCCL LL step; but
     * then a big isend could progress only while the receiver calls test(), which a caller spinning on isend before
     * testing its receives never does: GDRNET_TCP_INLINE >= NCCL's LL step, 64 KiB, gets the saving safely.) */
    if (need) {
      GDR_CHECK(send_cts(c, q, 0));
      ncts++;
    }
  }
  if (ncts > 0) GDR_CHECK(tx_flush(c)); /* a grouped receive's clear-to-sends in one write */
  GDR_CHECK(credit_check(c));
  *request = r;
out:
  return res;
}

/* ------------------------------------------------------------------------------------------------ test -- */

/* Receiver: the first buffer of r's group (r itself for a plain receive) that is not complete, or NULL; *err gets a
 * request's own failure. A buffer's count is filled one way only (tcp_req_claim): a hostile peer cannot complete it
 * with chunks while the control stream still writes its payload (fuzz_tcp_recv found that once). */
static struct tcp_req *recv_pending(struct tcp_comm *c, struct tcp_req *r, ncclResult_t *err) {
  *err = ncclSuccess;
  for (int i = 0; i < r->gn; i++) {
    struct tcp_req *q = &c->req[(r->gbase + (uint64_t)i) % TCP_NREQ];
    size_t d = atomic_load_explicit(&q->done, memory_order_acquire);
    size_t t = atomic_load_explicit(&q->total, memory_order_relaxed);
    if (q->err != ncclSuccess) *err = q->err;
    if (t == SIZE_MAX || d != t) return q;
  }
  return NULL;
}

/* NCCL's proxy thread helps the I/O threads serving c (gdr_tcp_pool_help), at once or, with GDRNET_TCP_HELP_AFTER_US,
 * only once c's data streams have moved nothing for that long since a test() first found a request waiting for chunks
 * (or since a request completed, or they last moved bytes): the I/O threads are late (a sleeping one's wake-up did
 * not come). It then helps in every test() until they move bytes again; its own passes' bytes do not count as theirs.
 * While the pool's wake-ups come later than that wait (gdr_tcp_pool_wakes_late), waiting only adds it: at once. */
static void proxy_help(struct tcp_comm *c) {
  if (c->help_after_ns != 0 && !gdr_tcp_pool_wakes_late()) {
    const uint64_t m = atomic_load_explicit(&c->moved, memory_order_relaxed);
    const uint64_t now = gdr_time_ns();
    if (m != c->help_seen || c->help_ns == 0) {
      c->help_seen = m;
      c->help_ns = now;
      return;
    }
    if (now - c->help_ns < c->help_after_ns) return;
  }
  (void)gdr_tcp_pool_help(c);
  c->help_seen = atomic_load_explicit(&c->moved, memory_order_relaxed);
}

ncclResult_t gdr_tcp_test(void *request, int *done, size_t *sizes) {
  ncclResult_t res = ncclSuccess, err;
  struct tcp_req *r = request;
  struct tcp_comm *c = r->comm;
  size_t bytes;

  *done = 0;
  if (r->state == TCP_REQ_FREE) {
    GDR_WARN("TCP test: request %p is not outstanding", request);
    return ncclInternalError;
  }
  if (r->err != ncclSuccess) return r->err;
  if (atomic_load_explicit(&c->failed, memory_order_relaxed)) return comm_error(c);
  if (r->state == TCP_REQ_SEND) {
    /* complete when every byte is in the kernel: an inline/eager send usually is when isend returns */
    if (++c->idle_calls >= TCP_SEND_POLL_CALLS) GDR_CHECK(send_poll(c));
    bytes = r->size;
    if (atomic_load_explicit(&r->done, memory_order_acquire) != bytes) {
      if (c->tx_head != c->tx_tail) GDR_CHECK(tx_flush(c));
      /* the control stream drained and bytes still missing: they are chunks on the send lanes */
      if (c->proxy_io && c->tx_head == c->tx_tail) proxy_help(c);
      if (atomic_load_explicit(&r->done, memory_order_acquire) != bytes) {
        GDR_CHECK(comm_error(c));
        goto out;
      }
    }
    if (sizes) sizes[0] = bytes;
    r->state = TCP_REQ_FREE;
  } else {
    if (recv_pending(c, r, &err) != NULL) {
      if (c->tx_head != c->tx_tail) GDR_CHECK(tx_flush(c));
      GDR_CHECK(rx_progress(c));
      /* only while a receive waits for chunks on the data streams (its CTS went out): an inline or eager message
       * comes on the control stream, which rx_progress reads, and the pass would only add system calls */
      if (c->proxy_io && atomic_load_explicit(&c->rx_expect, memory_order_relaxed) > 0) proxy_help(c);
      /* The streams' EOF count first, then the bytes: a helper adds its last chunk to done before it reads the EOF
       * that follows it, so every byte that arrived before the EOFs counted here is visible below (reading them in
       * the other order could see the chunk missing and then the EOF, and fail a message that is complete). done
       * before total: a helper adds to done after storing total. */
      int all_eof = c->ctrl_eof && atomic_load_explicit(&c->streams_eof, memory_order_acquire) >= c->nsocks;
      struct tcp_req *q = recv_pending(c, r, &err);
      if (err != ncclSuccess) return err;
      if (q != NULL) {
        GDR_CHECK(comm_error(c));
        GDR_CHECK(credit_return(c)); /* the message is not here: the proxy waits anyway */
        if (all_eof) {
          gdr_tcp_comm_fail(c, ncclRemoteError, "the peer closed the connection before message %llu arrived",
                            (unsigned long long)q->seq);
          res = comm_error(c);
        }
        goto out;
      }
    } else if (err != ncclSuccess) {
      return err;
    }
    for (int i = 0; i < r->gn; i++) { /* device buffers get their bytes before NCCL hears of them */
      struct tcp_req *q = &c->req[(r->gbase + (uint64_t)i) % TCP_NREQ];
      GDR_CHECK(gdr_tcp_stage_done(q, atomic_load_explicit(&q->total, memory_order_relaxed)));
    }
    for (int i = 0; i < r->gn; i++) {
      struct tcp_req *q = &c->req[(r->gbase + (uint64_t)i) % TCP_NREQ];
      if (sizes) sizes[i] = atomic_load_explicit(&q->total, memory_order_relaxed);
      atomic_store_explicit(&q->armed, 0, memory_order_relaxed);
      if (q != r) q->state = TCP_REQ_FREE;
    }
    bytes = sizes ? sizes[0] : 0;
    if (r->expect) atomic_fetch_sub_explicit(&c->rx_expect, 1, memory_order_relaxed);
    r->expect = 0;
    r->state = TCP_REQ_FREE;
  }
  GDR_TRACE(NCCL_NET, "TCP %s done %s seq %llu bytes %zu", c->is_send ? "send" : "recv", c->peer_str,
            (unsigned long long)r->seq, bytes);
  c->help_ns = 0; /* the next request's wait starts the clock of GDRNET_TCP_HELP_AFTER_US again */
  *done = 1;
out:
  return res;
}
