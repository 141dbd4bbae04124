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
    size_t left = sizeof(e->hdr) + e->len - e->off;
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
  while (c->tx_head != c->tx_tail) {
    struct iovec iov[64];
    struct msghdr mh;
    int niov = 0;
    ssize_t n;
    for (unsigned i = c->tx_head; i != c->tx_tail && niov < 62; i++) {
      struct tcp_txent *e = &c->txq[i % TCP_TXQ];
      size_t off = e->off;
      if (off < sizeof(e->hdr)) {
        iov[niov].iov_base = (char *)&e->hdr + off;
        iov[niov].iov_len = sizeof(e->hdr) - off;
        niov++;
        off = sizeof(e->hdr);
      }
      if (e->len > 0) {
        iov[niov].iov_base = (char *)e->payload + (off - sizeof(e->hdr));
        iov[niov].iov_len = e->len - (off - sizeof(e->hdr));
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

/* Queues one control message (+ payload, which must stay valid until sent) and writes what the socket takes now:
 * one sendmsg in the common case. req: a send request that completes when the last byte is in the kernel. */
static ncclResult_t tx_send(struct tcp_comm *c, uint32_t type, uint32_t aux, uint64_t seq, uint64_t size,
                            const void *payload, size_t len, struct tcp_req *req) {
  struct tcp_txent *e;
  if (c->tx_dead) return ncclSuccess;
  if (c->tx_tail - c->tx_head >= TCP_TXQ) {
    GDR_WARN("TCP %s: control queue full (%d messages)", c->peer_str, TCP_TXQ);
    return ncclInternalError;
  }
  e = &c->txq[c->tx_tail % TCP_TXQ];
  e->hdr.type = type;
  e->hdr.aux = aux;
  e->hdr.seq = seq;
  e->hdr.size = size;
  e->payload = payload;
  e->len = len;
  e->off = 0;
  e->req = req;
  c->tx_tail++;
  if (c->tx_tail - c->tx_head == 1) {
    /* the usual case, nothing else queued: one sendmsg of header + payload, no queue walk */
    struct iovec iov[2] = {{&e->hdr, sizeof(e->hdr)}, {(void *)payload, len}};
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

/* Queues a control message whose small payload (<= sizeof own) is copied: the caller's bytes may change before the
 * socket takes them. */
static ncclResult_t tx_send_copy(struct tcp_comm *c, uint32_t type, uint32_t aux, uint64_t seq, const void *payload,
                                 size_t len) {
  struct tcp_txent *e;
  if (c->tx_dead) return ncclSuccess;
  if (c->tx_tail - c->tx_head >= TCP_TXQ || len > sizeof(e->own)) {
    GDR_WARN("TCP %s: control queue full (%d messages)", c->peer_str, TCP_TXQ);
    return ncclInternalError;
  }
  e = &c->txq[c->tx_tail % TCP_TXQ];
  memcpy(e->own, payload, len);
  e->hdr.type = type;
  e->hdr.aux = aux;
  e->hdr.seq = seq;
  e->hdr.size = len;
  e->payload = e->own;
  e->len = len;
  e->off = 0;
  e->req = NULL;
  c->tx_tail++;
  return tx_flush(c);
}

/* ---------------------------------------------------------------------------------------- eager credits -- */

ncclResult_t gdr_tcp_eager_setup(struct tcp_comm *c) {
  if (c->is_send) return ncclSuccess; /* the sender learns everything from the receiver's GRANT */
  if (!(c->peer_features & TCP_FEAT_EAGER)) {
    /* an older sender (TCP protocol version 1): it knows no GRANT, EAGER or RTS; every receive sends its CTS */
    GDR_INFO(NCCL_NET, "TCP: the sender %s speaks TCP protocol version %u (an older libnccl-net-gdr): no eager "
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
  return tx_send(c, TCP_MSG_GRANT, c->ncredits, TCP_PROTO_VERSION, c->eager_max, NULL, 0, NULL);
}

void gdr_tcp_eager_free(struct tcp_comm *c) {
  if (c->bounce != NULL)
    for (uint32_t i = 0; i < c->ncredits; i++) free(c->bounce[i].buf);
  free(c->bounce);
  c->bounce = NULL;
}

/* Receiver: one more eager message consumed; credits go back in batches of max(1, C/2). */
static ncclResult_t credit_consumed(struct tcp_comm *c) {
  uint32_t n = ++c->unreturned;
  if (n < (c->ncredits >= 2 ? c->ncredits / 2 : 1)) return ncclSuccess;
  c->unreturned = 0;
  return tx_send(c, TCP_MSG_CREDIT, 0, 0, n, NULL, 0, NULL);
}

/* Receiver: the message for the posted receive r is `sent` bytes, more than r takes. WARNs with both sizes, fails
 * r and the comm, tells the sender (which WARNs too and fails its next call). */
static ncclResult_t recv_too_small(struct tcp_comm *c, struct tcp_req *r, uint64_t sent) {
  GDR_WARN("TCP: the peer %s sends %llu bytes as message %llu but this receive posted only %zu bytes; a send "
           "larger than its receive is invalid usage",
           c->peer_str, (unsigned long long)sent, (unsigned long long)r->seq, r->size);
  r->err = ncclInvalidUsage;
  c->warned = 1;
  gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu: send of %llu bytes into a receive of %zu bytes",
                    (unsigned long long)r->seq, (unsigned long long)sent, r->size);
  (void)tx_send(c, TCP_MSG_ERR_RECV, r->size > UINT32_MAX ? UINT32_MAX : (uint32_t)r->size, r->seq, sent, NULL, 0,
                NULL);
  return ncclSuccess;
}

static void recv_complete(struct tcp_req *r, size_t bytes) {
  atomic_store_explicit(&r->total, bytes, memory_order_relaxed);
  atomic_store_explicit(&r->done, bytes, memory_order_release);
}

/* Receiver: the posted buffer an eager message (seq, tag) lands in: the receive posted as seq, or, when seq is one
 * of a grouped receive's messages, that group's buffer with this tag (the first not yet given a message). NULL
 * when that receive is not posted yet; *bad when it is posted but cannot take the message (no buffer with the tag,
 * or its buffer already has one). */
static struct tcp_req *eager_target(struct tcp_comm *c, uint64_t seq, int tag, int *bad) {
  struct tcp_req *r, *h;
  *bad = 0;
  if (seq >= c->next_seq) return NULL;
  r = &c->req[seq % TCP_NREQ];
  if (r->state != TCP_REQ_RECV || r->seq != seq) {
    *bad = 1;
    return NULL;
  }
  h = &c->req[r->gbase % TCP_NREQ];
  if (h->gn <= 1) {
    if (r->matched) *bad = 1;
    r->matched = 1;
    return *bad ? NULL : r;
  }
  for (int i = 0; i < h->gn; i++) {
    struct tcp_req *q = &c->req[(h->gbase + (uint64_t)i) % TCP_NREQ];
    if (!q->matched && q->tag == tag) {
      q->matched = 1;
      return q;
    }
  }
  *bad = 1;
  return NULL;
}

/* Receiver: hands bounced eager messages to their receives, in order, as far as those are posted. */
static ncclResult_t bounce_drain(struct tcp_comm *c) {
  ncclResult_t res = ncclSuccess;
  while (c->b_head != c->b_tail) {
    struct tcp_bounce *b = &c->bounce[c->b_head % c->ncredits];
    struct tcp_req *r;
    int bad = 0;
    if (!b->full) break;
    r = eager_target(c, b->seq, b->tag, &bad);
    if (r == NULL) {
      if (bad) {
        gdr_tcp_comm_fail(c, ncclRemoteError, "protocol error: eager message %llu (tag %d) fits no buffer of its "
                          "receive", (unsigned long long)b->seq, b->tag);
        return comm_error(c);
      }
      break;
    }
    c->b_head++;
    if (b->size > r->size) return recv_too_small(c, r, b->size);
    if (b->size > 0) memcpy(r->data, b->buf, b->size);
    recv_complete(r, b->size);
    GDR_CHECK(credit_consumed(c));
  }
out:
  return res;
}

/* Receiver: the receive whose first buffer is h sent its clear-to-send, so its data is on the way (the helpers'
 * polling hint, until test() completes it). */
static void expect_data(struct tcp_comm *c, struct tcp_req *h) {
  if (h->expect) return;
  h->expect = 1;
  atomic_fetch_add_explicit(&c->rx_expect, 1, memory_order_relaxed);
}

/* Receiver: announces a grouped receive's buffers (sizes and tags) so that the sender can place each send. */
static ncclResult_t send_cts_group(struct tcp_comm *c, struct tcp_req *h) {
  struct tcp_group_ent ent[TCP_MAX_RECVS];
  memset(ent, 0, sizeof(ent));
  for (int i = 0; i < h->gn; i++) {
    struct tcp_req *q = &c->req[(h->gbase + (uint64_t)i) % TCP_NREQ];
    ent[i].size = q->size;
    ent[i].tag = (uint32_t)q->tag;
    q->cts = 1;
  }
  c->n_cts++;
  expect_data(c, h);
  return tx_send_copy(c, TCP_MSG_CTS_GROUP, (uint32_t)h->gn, h->gbase, ent, (size_t)h->gn * sizeof(ent[0]));
}

/* ------------------------------------------------------------------------------------- control stream rx -- */

/* The end of an INLINE/EAGER payload. */
static ncclResult_t rx_finish(struct tcp_comm *c) {
  struct tcp_req *r = c->rx_req;
  c->rx_in_payload = 0;
  if (r != NULL) {
    c->rx_req = NULL;
    recv_complete(r, c->rx_total);
    return c->rx_eager ? credit_consumed(c) : ncclSuccess;
  }
  c->rx_bounce->full = 1;
  c->rx_bounce = NULL;
  return bounce_drain(c); /* its receive may have been posted while the payload was arriving */
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
  gdr_tcp_comm_fail(c, ncclRemoteError, "protocol error: %s (message %llu, type %u, size %llu, aux %u)", what,
                    (unsigned long long)h->seq, h->type, (unsigned long long)h->size, h->aux);
  return comm_error(c);
}

/* Sender: one message from the receiver (payload: CTS_GROUP's entries, complete). */
static ncclResult_t rx_message_send(struct tcp_comm *c, const struct tcp_ctrl_hdr *h, const char *payload) {
  switch (h->type) {
  case TCP_MSG_CTS:
    if (h->seq >= c->next_seq) atomic_fetch_add_explicit(&c->tx_expect, 1, memory_order_relaxed);
    c->cts[h->seq % TCP_NREQ].seq = h->seq + 1;
    c->cts[h->seq % TCP_NREQ].size = h->size;
    c->cts[h->seq % TCP_NREQ].group = 0;
    return ncclSuccess;
  case TCP_MSG_CTS_GROUP: {
    unsigned n = h->aux;
    /* (some of its messages may have gone eagerly already: seq may be below next_seq) */
    if (n < 2 || n > TCP_MAX_RECVS || h->size != n * sizeof(struct tcp_group_ent) || h->seq + TCP_NREQ < c->next_seq)
      return protocol_error(c, h, "bad grouped clear-to-send");
    __typeof__(c->groups[0]) *g = &c->groups[h->seq % TCP_NREQ];
    g->base = h->seq;
    g->n = (int)n;
    g->used = 0;
    memcpy(g->ent, payload, n * sizeof(struct tcp_group_ent));
    for (unsigned i = 0; i < n; i++) {
      if (h->seq + i >= c->next_seq) atomic_fetch_add_explicit(&c->tx_expect, 1, memory_order_relaxed);
      c->cts[(h->seq + i) % TCP_NREQ].seq = h->seq + i + 1;
      c->cts[(h->seq + i) % TCP_NREQ].size = 0;
      c->cts[(h->seq + i) % TCP_NREQ].group = h->seq + 1;
    }
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
    GDR_WARN("TCP: isend of %llu bytes to %s as message %llu, but the receiver posted only %u bytes; a send larger "
             "than its receive is invalid usage",
             (unsigned long long)h->size, c->peer_str, (unsigned long long)h->seq, h->aux);
    c->warned = 1;
    gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu: send of %llu bytes into a receive of %u bytes",
                      (unsigned long long)h->seq, (unsigned long long)h->size, h->aux);
    return ncclSuccess;
  default:
    return protocol_error(c, h, "unexpected message type from the receiver");
  }
}

/* Receiver: RTS for a message that belongs to the posted grouped receive h: its CTS_GROUP now, if not sent. */
static ncclResult_t group_rts(struct tcp_comm *c, struct tcp_req *h) {
  return c->req[h->gbase % TCP_NREQ].cts ? ncclSuccess : send_cts_group(c, h);
}

/* Receiver: one message from the sender; may enter the payload state. */
static ncclResult_t rx_message_recv(struct tcp_comm *c, const struct tcp_ctrl_hdr *h) {
  struct tcp_req *r = &c->req[h->seq % TCP_NREQ];
  int posted = r->state == TCP_REQ_RECV && r->seq == h->seq &&
               atomic_load_explicit(&r->total, memory_order_relaxed) == SIZE_MAX;
  switch (h->type) {
  case TCP_MSG_EAGER: {
    int bad = 0;
    struct tcp_req *t;
    if (c->ncredits == 0 || h->size > c->eager_max) return protocol_error(c, h, "eager message beyond the grant");
    c->n_eager++;
    t = eager_target(c, h->seq, (int)h->aux, &bad);
    if (t != NULL) {
      if (h->size > t->size) return recv_too_small(c, t, h->size);
      return rx_start(c, t->data, (size_t)h->size, t, NULL, 1);
    }
    if (bad) return protocol_error(c, h, "eager message that fits no buffer of its posted receive (tag in aux)");
    if (c->b_tail - c->b_head >= c->ncredits) return protocol_error(c, h, "eager message beyond the credits");
    /* a sender is at most one message per credit (and per request slot) ahead of the receives posted here, and
     * its messages come in order: a number outside that window is a corrupt or hostile peer, not something to
     * buffer */
    if (h->seq >= c->next_seq + c->ncredits + TCP_NREQ ||
        (c->b_tail != c->b_head && h->seq <= c->bounce[(c->b_tail - 1) % c->ncredits].seq))
      return protocol_error(c, h, "eager message numbered outside the window the credits allow");
    {
      struct tcp_bounce *b = &c->bounce[c->b_tail % c->ncredits];
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
      b->seq = h->seq;
      b->tag = (int)h->aux;
      b->size = (size_t)h->size;
      b->full = 0;
      c->b_tail++;
      c->n_bounced++;
      return rx_start(c, b->buf, b->size, NULL, b, 1);
    }
  }
  case TCP_MSG_INLINE:
    if (!posted || h->size > r->size || r->matched)
      return protocol_error(c, h, "inline message matching no posted receive");
    r->matched = 1;
    return rx_start(c, r->data, (size_t)h->size, r, NULL, 0);
  case TCP_MSG_RTS:
    /* a message too big for eager waits for a CTS: a receive posted with <= E bytes sent none */
    if (c->ncredits == 0) return protocol_error(c, h, "RTS without eager credits");
    if (h->seq < c->next_seq) { /* posted already */
      if (r->state == TCP_REQ_RECV && r->seq == h->seq && c->req[r->gbase % TCP_NREQ].gn > 1)
        return group_rts(c, &c->req[r->gbase % TCP_NREQ]);
      if (r->state == TCP_REQ_RECV && r->seq == h->seq && !r->cts) {
        /* irecv sent no CTS for it (<= E bytes): this message cannot fit (or the two sides disagree on E: send
         * the CTS now) */
        if (h->size > r->size) return recv_too_small(c, r, h->size);
        c->n_cts++;
        r->cts = 1;
        expect_data(c, r);
        return tx_send(c, TCP_MSG_CTS, 0, r->seq, r->size, NULL, 0, NULL);
      }
      return ncclSuccess; /* its CTS went out at irecv (its data may even be arriving already) */
    }
    if (c->rts_seq != 0) return protocol_error(c, h, "a second RTS for receives not posted yet");
    c->rts_seq = h->seq + 1;
    c->rts_size = h->size;
    return ncclSuccess;
  case TCP_MSG_ERR_SIZE:
    if (!posted) return protocol_error(c, h, "size error for no posted receive");
    GDR_WARN("TCP: the peer %s sends %llu bytes as message %llu but this receive posted only %zu bytes; a send "
             "larger than its receive is invalid usage",
             c->peer_str, (unsigned long long)h->size, (unsigned long long)h->seq, r->size);
    r->err = ncclInvalidUsage;
    c->warned = 1;
    gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu: send of %llu bytes into a receive of %zu bytes",
                      (unsigned long long)h->seq, (unsigned long long)h->size, r->size);
    return ncclSuccess;
  default:
    return protocol_error(c, h, "unexpected message type from the sender");
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
    if (avail < sizeof(struct tcp_ctrl_hdr)) break;
    {
      struct tcp_ctrl_hdr h;
      const char *payload = NULL;
      memcpy(&h, c->rx + c->rx_off, sizeof(h));
      if (c->is_send && h.type == TCP_MSG_CTS_GROUP) { /* its entries are consumed with it */
        if (h.size > TCP_MAX_RECVS * sizeof(struct tcp_group_ent)) {
          res = protocol_error(c, &h, "grouped clear-to-send too long");
          goto out;
        }
        if (avail < sizeof(h) + h.size) break;
        payload = c->rx + c->rx_off + sizeof(h);
        c->rx_off += (size_t)h.size;
      }
      c->rx_off += sizeof(h);
      GDR_CHECK(c->is_send ? rx_message_send(c, &h, payload) : rx_message_recv(c, &h));
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
  gdr_tcp_plan_chunks(r->size, c->nthreads, c->min_chunk, c->max_chunk, &plan);
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

ncclResult_t gdr_tcp_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = send_comm;
  uint64_t seq = c->next_seq;
  unsigned slot = (unsigned)(seq % TCP_NREQ);
  struct tcp_req *r = &c->req[slot];
  const struct tcp_mr *mr = mhandle;
  char *wire = data; /* what goes on the wire: data, or its pinned copy for device memory */

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
  if (c->cts[slot].seq != seq + 1) {
    /* no CTS (yet): eager if it fits and a credit is left; read the control stream first when credits run low, or
     * when the message would rather be chunked (above GDRNET_TCP_CTS_INLINE) should its CTS be there already */
    if (size > c->eager_max || size > c->cts_inline_max || c->credits <= c->ncredits / 4) {
      GDR_CHECK(send_poll(c));
      GDR_CHECK(comm_error(c)); /* e.g. an ERR_RECV just read */
    }
    if (c->cts[slot].seq != seq + 1) {
      if (size <= c->eager_max && c->credits > 0) {
        if (mr && mr->cuda_ctx && size > 0) GDR_CHECK(gdr_tcp_stage_out(r, mr, data, size, &wire));
        c->credits--;
        c->n_eager++;
        send_start(c, r, seq, wire, size, SIZE_MAX);
        GDR_TRACE(NCCL_NET, "TCP isend %s seq %llu size %zu eager (%u credits left)", c->peer_str,
                  (unsigned long long)seq, size, c->credits);
        GDR_CHECK(tx_send(c, TCP_MSG_EAGER, (uint32_t)tag, seq, size, wire, size, r));
        *request = r;
        goto out;
      }
      if (c->ncredits > 0 && size > c->eager_max && c->rts_sent != seq + 1) {
        /* the receive may be posted with <= E bytes, which sends no CTS: let the receiver check */
        c->rts_sent = seq + 1;
        GDR_CHECK(tx_send(c, TCP_MSG_RTS, 0, seq, size, NULL, 0, NULL));
      }
      if (c->ctrl_eof) {
        gdr_tcp_comm_fail(c, ncclRemoteError, "the receiver closed the connection (message %llu not posted)",
                          (unsigned long long)seq);
        res = comm_error(c);
      }
      goto out; /* the receive is not posted yet, or no credit */
    }
  }
  {
    uint64_t cap = c->cts[slot].size, wseq = seq;
    if (c->cts[slot].group) {
      /* a buffer of a grouped receive: the one with this tag */
      __typeof__(c->groups[0]) *g = &c->groups[(c->cts[slot].group - 1) % TCP_NREQ];
      int j = 0;
      while (j < g->n && ((g->used >> j) & 1u || g->ent[j].tag != (uint32_t)tag)) j++;
      if (j == g->n) {
        GDR_WARN("TCP: isend to %s as message %llu with tag %d, but no buffer of the grouped receive it belongs to "
                 "(messages %llu..%llu) is free with that tag",
                 c->peer_str, (unsigned long long)seq, tag, (unsigned long long)g->base,
                 (unsigned long long)(g->base + (uint64_t)g->n - 1));
        c->warned = 1;
        gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu: tag %d matches no buffer of its grouped receive",
                          (unsigned long long)seq, tag);
        res = ncclInvalidUsage;
        goto out;
      }
      g->used |= 1u << j;
      cap = g->ent[j].size;
      wseq = g->base + (uint64_t)j;
    }
    if (size > cap) {
      GDR_WARN("TCP: isend of %zu bytes to %s as message %llu, but the receiver posted only %llu bytes; a send larger "
               "than its receive is invalid usage",
               size, c->peer_str, (unsigned long long)seq, (unsigned long long)cap);
      c->warned = 1;
      gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu: send of %zu bytes into a receive of %llu bytes",
                        (unsigned long long)seq, size, (unsigned long long)cap);
      (void)tx_send(c, TCP_MSG_ERR_SIZE, 0, wseq, size, NULL, 0, NULL);
      res = ncclInvalidUsage;
      goto out;
    }
    c->cts[slot].seq = 0;
    atomic_fetch_sub_explicit(&c->tx_expect, 1, memory_order_relaxed); /* counted when it came (seq >= next_seq) */
    GDR_TRACE(NCCL_NET, "TCP isend %s seq %llu (wire %llu) size %zu %s", c->peer_str, (unsigned long long)seq,
              (unsigned long long)wseq, size, size <= c->cts_inline_max ? "inline" : "chunked");
    if (mr && mr->cuda_ctx && size > 0) GDR_CHECK(gdr_tcp_stage_out(r, mr, data, size, &wire));
    if (size <= c->cts_inline_max) {
      send_start(c, r, seq, wire, size, SIZE_MAX);
      r->wseq = wseq;
      GDR_CHECK(tx_send(c, TCP_MSG_INLINE, 0, wseq, size, wire, size, r));
    } else {
      send_start(c, r, seq, wire, size, 0);
      r->wseq = wseq;
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
  return c->rts_sent == c->next_seq + 1;
}

/* ----------------------------------------------------------------------------------------------- irecv -- */

/* Receiver: arms the receive of message seq (one buffer of a group whose first message is base). */
static void recv_arm(struct tcp_comm *c, uint64_t seq, uint64_t base, int gn, void *data, size_t size, int tag) {
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
  r->matched = 0;
  atomic_store_explicit(&r->done, 0, memory_order_relaxed);
  atomic_store_explicit(&r->total, SIZE_MAX, memory_order_relaxed);
  atomic_store_explicit(&r->armed, seq + 1, memory_order_release);
}

ncclResult_t gdr_tcp_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                           void **request) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = recv_comm;
  uint64_t seq = c->next_seq;
  struct tcp_req *r = &c->req[seq % TCP_NREQ];
  size_t size;
  int need_cts = 0;

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
  for (int i = 0; i < n; i++) { /* device buffers receive into their slot's pinned buffer (before any is armed) */
    const struct tcp_mr *mr = mhandles ? mhandles[i] : NULL;
    struct tcp_req *q = &c->req[(seq + (uint64_t)i) % TCP_NREQ];
    char *dst = NULL;
    q->dev = NULL;
    if (mr && mr->cuda_ctx && sizes[i] > 0) GDR_CHECK(gdr_tcp_stage_in(q, mr, data[i], sizes[i], &dst));
  }
  for (int i = 0; i < n; i++) {
    struct tcp_req *q = &c->req[(seq + (uint64_t)i) % TCP_NREQ];
    recv_arm(c, seq + (uint64_t)i, seq, i == 0 ? n : 0, q->dev ? q->stage : data[i], sizes[i], tags[i]);
    if (sizes[i] > c->eager_max || c->ncredits == 0) need_cts = 1;
  }
  c->next_seq = seq + (uint64_t)n;
  size = sizes[0];
  GDR_TRACE(NCCL_NET, "TCP irecv %s seq %llu n %d posted %zu", c->peer_str, (unsigned long long)seq, n, size);
  if (c->rts_seq != 0 && c->rts_seq - 1 >= seq && c->rts_seq - 1 < seq + (uint64_t)n) {
    /* the sender is waiting for a CTS for a message too big for eager */
    c->rts_seq = 0;
    if (n > 1) {
      need_cts = 1;
    } else if (c->rts_size > size) {
      GDR_CHECK(recv_too_small(c, r, c->rts_size));
      need_cts = 0;
    } else {
      need_cts = 1;
    }
  }
  /* A receive of <= E bytes can only be matched by an eager message: no CTS for it. (Not sending the CTS of a
   * larger receive until its message turns out to be big, on the RTS, would save a sendmsg per NCCL LL step; but
   * then a big isend could progress only while the receiver calls test(), which a caller spinning on isend before
   * testing its receives never does: GDRNET_TCP_INLINE >= NCCL's LL step, 64 KiB, gets the saving safely.) */
  if (need_cts && n > 1) {
    GDR_CHECK(send_cts_group(c, r));
  } else if (need_cts) {
    c->n_cts++;
    r->cts = 1;
    expect_data(c, r);
    GDR_CHECK(tx_send(c, TCP_MSG_CTS, 0, seq, size, NULL, 0, NULL));
  }
  /* messages that came eagerly before their receive was posted: copied now (or when the rest arrives) */
  if (c->b_head != c->b_tail) GDR_CHECK(bounce_drain(c));
  *request = r;
out:
  return res;
}

/* ------------------------------------------------------------------------------------------------ test -- */

/* Receiver: the first buffer of r's group (r itself for a plain receive) that is not complete, or NULL; *err gets a
 * request's own failure. */
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
      /* The streams' EOF count first, then the bytes: a helper adds its last chunk to done before it reads the EOF
       * that follows it, so every byte that arrived before the EOFs counted here is visible below (reading them in
       * the other order could see the chunk missing and then the EOF, and fail a message that is complete). done
       * before total: a helper adds to done after storing total. */
      int all_eof = c->ctrl_eof && atomic_load_explicit(&c->streams_eof, memory_order_acquire) >= c->nsocks;
      struct tcp_req *q = recv_pending(c, r, &err);
      if (err != ncclSuccess) return err;
      if (q != NULL) {
        GDR_CHECK(comm_error(c));
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
  *done = 1;
out:
  return res;
}
