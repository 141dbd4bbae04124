/* TCP transport data path: the control stream protocol (progress thread), the helper threads (data streams),
 * registration, isend/irecv/test. Design in tcp.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
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

static ncclResult_t tx_push(struct tcp_comm *c, uint32_t type, uint64_t seq, uint64_t size, const void *payload,
                            size_t len, struct tcp_req *req) {
  struct tcp_txent *e;
  if (c->tx_tail - c->tx_head >= TCP_TXQ) {
    GDR_WARN("TCP %s: control queue full (%d messages)", c->peer_str, TCP_TXQ);
    return ncclInternalError;
  }
  e = &c->txq[c->tx_tail % TCP_TXQ];
  memset(e, 0, sizeof(*e));
  e->hdr.type = type;
  e->hdr.seq = seq;
  e->hdr.size = size;
  e->payload = payload;
  e->len = len;
  e->req = req;
  c->tx_tail++;
  return ncclSuccess;
}

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
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)niov;
    n = sendmsg(c->ctrl_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
      return io_fail(c, errno == EPIPE || errno == ECONNRESET || errno == ETIMEDOUT ? ncclRemoteError : ncclSystemError,
                     errno, "sending on the control stream");
    }
    while (n > 0 || (c->tx_head != c->tx_tail)) {
      struct tcp_txent *e = &c->txq[c->tx_head % TCP_TXQ];
      size_t left = sizeof(e->hdr) + e->len - e->off;
      size_t k = (size_t)n < left ? (size_t)n : left;
      e->off += k;
      n -= (ssize_t)k;
      if (e->off < sizeof(e->hdr) + e->len) break;
      if (e->req != NULL) atomic_store_explicit(&e->req->done, e->req->size, memory_order_release);
      c->tx_head++;
      if (n == 0) break;
    }
  }
  return ncclSuccess;
}

/* ------------------------------------------------------------------------------------- control stream rx -- */

static void rx_finish_inline(struct tcp_comm *c) {
  struct tcp_req *r = c->rx_req;
  atomic_store_explicit(&r->done, r->size == 0 ? 0 : atomic_load(&r->total), memory_order_release);
  c->rx_in_payload = 0;
  c->rx_req = NULL;
}

/* Handles one control message header; may enter the INLINE payload state. */
static ncclResult_t rx_message(struct tcp_comm *c, const struct tcp_ctrl_hdr *h) {
  struct tcp_req *r = &c->req[h->seq % TCP_NREQ];
  if (c->is_send) {
    if (h->type != TCP_MSG_CTS) {
      gdr_tcp_comm_fail(c, ncclRemoteError, "protocol error: message type %u from the receiver", h->type);
      return comm_error(c);
    }
    c->cts[h->seq % TCP_NREQ].seq = h->seq + 1;
    c->cts[h->seq % TCP_NREQ].size = h->size;
    return ncclSuccess;
  }
  if (r->state != TCP_REQ_RECV || r->seq != h->seq) {
    gdr_tcp_comm_fail(c, ncclRemoteError, "protocol error: message %llu (type %u) matches no posted receive",
                      (unsigned long long)h->seq, h->type);
    return comm_error(c);
  }
  if (h->type == TCP_MSG_ERR_SIZE) {
    GDR_WARN("TCP: the peer %s sends %llu bytes as message %llu but this receive posted only %zu bytes; a send "
             "larger than its receive is invalid usage",
             c->peer_str, (unsigned long long)h->size, (unsigned long long)h->seq, r->size);
    r->err = ncclInvalidUsage;
    c->warned = 1;
    gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu: send of %llu bytes into a receive of %zu bytes",
                      (unsigned long long)h->seq, (unsigned long long)h->size, r->size);
    return ncclSuccess;
  }
  if (h->type != TCP_MSG_INLINE || h->size > r->size) {
    gdr_tcp_comm_fail(c, ncclRemoteError, "protocol error: message %llu type %u of %llu bytes (posted %zu)",
                      (unsigned long long)h->seq, h->type, (unsigned long long)h->size, r->size);
    return comm_error(c);
  }
  atomic_store_explicit(&r->total, (size_t)h->size, memory_order_relaxed);
  c->rx_req = r;
  c->rx_left = h->size;
  c->rx_in_payload = 1;
  if (h->size == 0) rx_finish_inline(c);
  return ncclSuccess;
}

static ncclResult_t rx_progress(struct tcp_comm *c) {
  ncclResult_t res = ncclSuccess;
  for (int iter = 0; iter < 64 && !c->ctrl_eof; iter++) {
    ssize_t n;
    /* 1. consume what is staged */
    for (;;) {
      size_t avail = c->rx_len - c->rx_off;
      if (c->rx_in_payload) {
        struct tcp_req *r = c->rx_req;
        size_t k = avail < c->rx_left ? avail : c->rx_left;
        size_t dst = atomic_load_explicit(&r->total, memory_order_relaxed) - c->rx_left;
        if (k > 0) memcpy(r->data + dst, c->rx + c->rx_off, k);
        c->rx_off += k;
        c->rx_left -= k;
        if (c->rx_left == 0) rx_finish_inline(c);
        if (c->rx_in_payload) break;
        continue;
      }
      if (avail < sizeof(struct tcp_ctrl_hdr)) break;
      {
        struct tcp_ctrl_hdr h;
        memcpy(&h, c->rx + c->rx_off, sizeof(h));
        c->rx_off += sizeof(h);
        GDR_CHECK(rx_message(c, &h));
      }
    }
    if (c->rx_off == c->rx_len) {
      c->rx_off = c->rx_len = 0;
    } else if (c->rx_off > 0) {
      memmove(c->rx, c->rx + c->rx_off, c->rx_len - c->rx_off);
      c->rx_len -= c->rx_off;
      c->rx_off = 0;
    }
    /* 2. read more: a big inline payload goes straight into the receive buffer */
    if (c->rx_in_payload && c->rx_len == 0 && c->rx_left >= 4096) {
      struct tcp_req *r = c->rx_req;
      size_t dst = atomic_load_explicit(&r->total, memory_order_relaxed) - c->rx_left;
      n = recv(c->ctrl_fd, r->data + dst, c->rx_left, MSG_DONTWAIT);
      if (n > 0) {
        c->rx_left -= (size_t)n;
        if (c->rx_left == 0) rx_finish_inline(c);
        continue;
      }
    } else {
      n = recv(c->ctrl_fd, c->rx + c->rx_len, TCP_RXBUF - c->rx_len, MSG_DONTWAIT);
      if (n > 0) {
        c->rx_len += (size_t)n;
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
    res = io_fail(c, ncclRemoteError, errno, "receiving on the control stream");
    break;
  }
out:
  return res;
}

/* ----------------------------------------------------------------------------------------- helper threads -- */

static int thread_stopping(struct tcp_thread *th) {
  int stop;
  pthread_mutex_lock(&th->mu);
  stop = th->stop;
  pthread_mutex_unlock(&th->mu);
  return stop;
}

/* Writes header + payload with as few syscalls as the kernel allows. 0, or errno (EPIPE... ; -1 never). */
static int send_chunk(int fd, const struct tcp_chunk_hdr *h, const char *data, size_t len) {
  struct iovec iov[2] = {{(void *)h, sizeof(*h)}, {(void *)data, len}};
  struct msghdr mh;
  size_t total = sizeof(*h) + len, sent = 0;
  memset(&mh, 0, sizeof(mh));
  while (sent < total) {
    ssize_t n;
    struct iovec *v = iov;
    int nv = 2;
    if (sent >= sizeof(*h)) {
      iov[1].iov_base = (char *)data + (sent - sizeof(*h));
      iov[1].iov_len = len - (sent - sizeof(*h));
      v = &iov[1];
      nv = 1;
    } else {
      iov[0].iov_base = (char *)h + sent;
      iov[0].iov_len = sizeof(*h) - sent;
    }
    mh.msg_iov = v;
    mh.msg_iovlen = (size_t)nv;
    n = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    sent += (size_t)n;
  }
  return 0;
}

void *gdr_tcp_send_thread(void *arg) {
  struct tcp_thread *th = arg;
  struct tcp_comm *c = th->comm;
  unsigned rot = 0;
  for (;;) {
    struct tcp_task t;
    pthread_mutex_lock(&th->mu);
    while (th->head == th->tail && !th->stop) pthread_cond_wait(&th->cv, &th->mu);
    if (th->head == th->tail) {
      pthread_mutex_unlock(&th->mu);
      break;
    }
    t = th->q[th->head % TCP_NREQ];
    th->head++;
    pthread_mutex_unlock(&th->mu);
    if (atomic_load(&c->failed)) continue; /* drain: the comm is dead, test() reports it */
    for (uint32_t i = t.first; i < t.nchunks; i += t.stride) {
      struct tcp_chunk_hdr h;
      size_t off = (size_t)i * t.chunk;
      size_t len = t.size - off < t.chunk ? t.size - off : t.chunk;
      int fd = th->fds[rot % (unsigned)th->nfds];
      int err;
      rot++;
      h.magic = TCP_CHUNK_MAGIC;
      h.len = (uint32_t)len;
      h.seq = t.seq;
      h.off = off;
      h.total = t.size;
      err = send_chunk(fd, &h, t.data + off, len);
      if (err != 0) {
        if (!thread_stopping(th))
          gdr_tcp_comm_fail(c, ncclRemoteError, "sending message %llu on data stream %d: %s",
                            (unsigned long long)t.seq, th->idx, strerror(err));
        break;
      }
      atomic_fetch_add_explicit(&t.req->done, len, memory_order_release);
    }
  }
  return NULL;
}

/* Exact receive on a blocking socket. 0 ok; else the errno, or -1 for EOF (*got says after how many bytes). */
static int recv_exact(int fd, void *buf, size_t len, size_t *got) {
  *got = 0;
  while (*got < len) {
    ssize_t n = recv(fd, (char *)buf + *got, len - *got, MSG_WAITALL);
    if (n == 0) return -1;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    *got += (size_t)n;
  }
  return 0;
}

void *gdr_tcp_recv_thread(void *arg) {
  struct tcp_thread *th = arg;
  struct tcp_comm *c = th->comm;
  unsigned rot = 0;
  for (;;) {
    struct tcp_chunk_hdr h;
    struct tcp_req *r;
    size_t got = 0;
    int fd = th->fds[rot % (unsigned)th->nfds];
    int err;
    rot++;
    err = recv_exact(fd, &h, sizeof(h), &got);
    if (err != 0) {
      if (thread_stopping(th)) break;
      if (err == -1 && got == 0) {
        /* clean EOF between chunks: the peer closed; test() decides whether anything is still missing */
        atomic_fetch_add(&c->streams_eof, th->nfds);
      } else {
        gdr_tcp_comm_fail(c, ncclRemoteError, "receiving on data stream %d: %s", th->idx,
                          err == -1 ? "the peer closed the connection in the middle of a chunk" : strerror(err));
      }
      break;
    }
    r = &c->req[h.seq % TCP_NREQ];
    if (h.magic != TCP_CHUNK_MAGIC || atomic_load_explicit(&r->armed, memory_order_acquire) != h.seq + 1 ||
        h.total > r->size || h.off > h.total || h.len > h.total - h.off) {
      gdr_tcp_comm_fail(c, ncclRemoteError,
                        "protocol error on data stream %d: chunk magic 0x%x message %llu [%llu, +%u) of %llu bytes "
                        "does not fit the posted receive",
                        th->idx, h.magic, (unsigned long long)h.seq, (unsigned long long)h.off, h.len,
                        (unsigned long long)h.total);
      break;
    }
    err = recv_exact(fd, r->data + h.off, h.len, &got);
    if (err != 0) {
      if (thread_stopping(th)) break;
      gdr_tcp_comm_fail(c, ncclRemoteError, "receiving message %llu on data stream %d: %s",
                        (unsigned long long)h.seq, th->idx,
                        err == -1 ? "the peer closed the connection in the middle of a chunk" : strerror(err));
      break;
    }
    atomic_store_explicit(&r->total, (size_t)h.total, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->done, h.len, memory_order_release);
  }
  return NULL;
}

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
    task->seq = r->seq;
    task->data = r->data;
    task->size = r->size;
    task->chunk = plan.chunk;
    task->first = first;
    task->nchunks = plan.nchunks;
    task->stride = (uint32_t)c->nthreads;
    th->tail++;
    pthread_cond_signal(&th->cv);
    pthread_mutex_unlock(&th->mu);
  }
  return ncclSuccess;
}

ncclResult_t gdr_tcp_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = send_comm;
  uint64_t seq = c->next_seq;
  unsigned slot = (unsigned)(seq % TCP_NREQ);
  struct tcp_req *r = &c->req[slot];
  (void)tag;
  (void)mhandle;

  *request = NULL;
  GDR_CHECK(comm_error(c));
  if (r->state != TCP_REQ_FREE) goto out; /* 32 in flight: try again later */
  if (c->cts[slot].seq != seq + 1) {
    GDR_CHECK(tx_flush(c));
    GDR_CHECK(rx_progress(c));
    if (c->cts[slot].seq != seq + 1) {
      if (c->ctrl_eof) {
        gdr_tcp_comm_fail(c, ncclRemoteError, "the receiver closed the connection (message %llu not posted)",
                          (unsigned long long)seq);
        res = comm_error(c);
      }
      goto out; /* the receive is not posted yet */
    }
  }
  if (size > c->cts[slot].size) {
    GDR_WARN("TCP: isend of %zu bytes to %s as message %llu, but the receiver posted only %llu bytes; a send larger "
             "than its receive is invalid usage",
             size, c->peer_str, (unsigned long long)seq, (unsigned long long)c->cts[slot].size);
    c->warned = 1;
    gdr_tcp_comm_fail(c, ncclInvalidUsage, "message %llu: send of %zu bytes into a receive of %llu bytes",
                      (unsigned long long)seq, size, (unsigned long long)c->cts[slot].size);
    if (tx_push(c, TCP_MSG_ERR_SIZE, seq, size, NULL, 0, NULL) == ncclSuccess) tx_flush(c);
    res = ncclInvalidUsage;
    goto out;
  }
  c->cts[slot].seq = 0;
  c->next_seq++;
  r->state = TCP_REQ_SEND;
  r->seq = seq;
  r->data = data;
  r->size = size;
  r->err = ncclSuccess;
  atomic_store_explicit(&r->done, 0, memory_order_relaxed);
  GDR_TRACE(NCCL_NET, "TCP isend %s seq %llu size %zu %s", c->peer_str, (unsigned long long)seq, size,
            size <= c->inline_max ? "inline" : "chunked");
  if (size <= c->inline_max) {
    GDR_CHECK(tx_push(c, TCP_MSG_INLINE, seq, size, data, size, r));
    GDR_CHECK(tx_flush(c));
  } else {
    GDR_CHECK(queue_chunks(c, r));
  }
  *request = r;
out:
  return res;
}

/* ----------------------------------------------------------------------------------------------- irecv -- */

ncclResult_t gdr_tcp_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                           void **request) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = recv_comm;
  uint64_t seq = c->next_seq;
  struct tcp_req *r = &c->req[seq % TCP_NREQ];
  (void)tags;
  (void)mhandles;

  *request = NULL;
  if (n != 1) {
    GDR_WARN("TCP irecv: grouped receives (n = %d) are not supported (maxRecvs is 1)", n);
    return ncclInternalError;
  }
  GDR_CHECK(comm_error(c));
  if (r->state != TCP_REQ_FREE) goto out;
  r->state = TCP_REQ_RECV;
  r->seq = seq;
  r->data = data[0];
  r->size = sizes[0];
  r->err = ncclSuccess;
  atomic_store_explicit(&r->done, 0, memory_order_relaxed);
  atomic_store_explicit(&r->total, SIZE_MAX, memory_order_relaxed);
  atomic_store_explicit(&r->armed, seq + 1, memory_order_release);
  c->next_seq++;
  GDR_TRACE(NCCL_NET, "TCP irecv %s seq %llu posted %zu", c->peer_str, (unsigned long long)seq, sizes[0]);
  GDR_CHECK(tx_push(c, TCP_MSG_CTS, seq, sizes[0], NULL, 0, NULL));
  GDR_CHECK(tx_flush(c));
  *request = r;
out:
  return res;
}

/* ------------------------------------------------------------------------------------------------ test -- */

static int req_complete(struct tcp_req *r, size_t *bytes) {
  size_t done = atomic_load_explicit(&r->done, memory_order_acquire);
  if (r->state == TCP_REQ_SEND) {
    *bytes = r->size;
    return done == r->size && (r->size != 0 || r->err == ncclSuccess) && done == r->size;
  }
  {
    size_t total = atomic_load_explicit(&r->total, memory_order_relaxed);
    *bytes = total;
    return total != SIZE_MAX && done == total;
  }
}

ncclResult_t gdr_tcp_test(void *request, int *done, size_t *sizes) {
  ncclResult_t res = ncclSuccess;
  struct tcp_req *r = request;
  struct tcp_comm *c = r->comm;
  size_t bytes = 0;
  int complete;

  *done = 0;
  if (r->state == TCP_REQ_FREE) {
    GDR_WARN("TCP test: request %p is not outstanding", request);
    return ncclInternalError;
  }
  if (r->err != ncclSuccess) return r->err;
  complete = req_complete(r, &bytes);
  if (!complete) {
    if (c->tx_head != c->tx_tail) GDR_CHECK(tx_flush(c));
    if (!c->is_send) GDR_CHECK(rx_progress(c));
    if (r->err != ncclSuccess) return r->err;
    complete = req_complete(r, &bytes);
  }
  if (!complete) {
    GDR_CHECK(comm_error(c));
    if (!c->is_send && c->ctrl_eof && atomic_load(&c->streams_eof) >= c->nsocks) {
      gdr_tcp_comm_fail(c, ncclRemoteError, "the peer closed the connection before message %llu arrived",
                        (unsigned long long)r->seq);
      res = comm_error(c);
    }
    goto out;
  }
  if (sizes) sizes[0] = bytes;
  GDR_TRACE(NCCL_NET, "TCP %s done %s seq %llu bytes %zu", c->is_send ? "send" : "recv", c->peer_str,
            (unsigned long long)r->seq, bytes);
  atomic_store_explicit(&r->armed, 0, memory_order_relaxed);
  r->state = TCP_REQ_FREE;
  *done = 1;
out:
  return res;
}
