/* The TCP transport (gdr_transport_tcp).
 *
 * A connection = one control stream + nsocks data streams served by nthreads helper threads per side.
 *
 * Receiver-driven, like NIB's CTS FIFO: irecv sends CTS{seq, posted size} on the control stream at once; isend
 * of message seq waits (NULL request) until CTS{seq} is there, so the sender always knows the receive is posted
 * and how big it is:
 *   - send > posted: the sender WARNs with both sizes, tells the receiver (ERR_SIZE), both requests fail with
 *     ncclInvalidUsage;
 *   - size <= GDRNET_TCP_INLINE: header + payload on the control stream, written by NCCL's progress thread
 *     (no thread hop, lowest latency); the receiver copies it straight into the posted buffer;
 *   - larger: cut into chunks (gdr_tcp_plan_chunks) spread round-robin over the helper threads; each chunk
 *     carries {seq, offset, length, total}, so the receiving helper thread recv()s it directly into the posted
 *     buffer at its offset (no copy besides the kernel's). Thread t of both sides owns the streams s with
 *     s % nthreads == t and uses them in the same rotation, so blocking I/O on both ends pairs up.
 * Sends complete when their bytes are in the kernel; receives when every byte has landed (atomic counters the
 * helpers bump, test() reads). Requests live in a 32-slot ring per comm indexed by seq.
 *
 * Failure: EOF/reset on any stream, or TCP_USER_TIMEOUT/keepalive expiry (GDRNET_TCP_TIMEOUT_MS) on a silent peer,
 * fails the comm; test() then returns ncclRemoteError/ncclSystemError with a WARN naming the peer. A receiver whose
 * peer closed cleanly keeps completing what is still in flight and fails only what can no longer arrive. */
#ifndef GDRNET_TCP_H
#define GDRNET_TCP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sock.h"
#include "transport.h"

/* Chunk plan of a large message: nchunks chunks of chunk bytes (the last one shorter). chunk = size / nthreads
 * rounded up to 4 KiB, clamped to [min_chunk, max_chunk]. */
struct gdr_tcp_plan {
  size_t chunk;
  uint32_t nchunks;
};
void gdr_tcp_plan_chunks(size_t size, int nthreads, size_t min_chunk, size_t max_chunk, struct gdr_tcp_plan *plan);
static inline size_t gdr_tcp_chunk_off(const struct gdr_tcp_plan *p, uint32_t i) { return (size_t)i * p->chunk; }
static inline size_t gdr_tcp_chunk_len(const struct gdr_tcp_plan *p, size_t size, uint32_t i) {
  size_t off = (size_t)i * p->chunk;
  return off >= size ? 0 : (size - off < p->chunk ? size - off : p->chunk);
}

/* Stream/thread counts for this host: GDRNET_TCP_NSOCKS/NTHREADS, their NCCL aliases, the core count. */
void gdr_tcp_resolve_streams(int *nsocks, int *nthreads);

/* ------------------------------------------------------------------------------------------- internals -- */

#define TCP_NREQ NCCL_NET_MAX_REQUESTS /* request ring per comm */
#define TCP_MAX_STREAMS 64
#define TCP_TXQ 128          /* control messages queued per comm */
#define TCP_RXBUF (64 * 1024) /* control stream staging */
#define TCP_CHUNK_MAGIC 0x4b4e4843u /* "CHNK" */

enum { TCP_MSG_CTS = 1, TCP_MSG_INLINE = 2, TCP_MSG_ERR_SIZE = 3 };

struct tcp_ctrl_hdr {
  uint32_t type;
  uint32_t pad;
  uint64_t seq;
  uint64_t size; /* CTS: posted size; INLINE: payload bytes that follow; ERR_SIZE: the send size */
};
_Static_assert(sizeof(struct tcp_ctrl_hdr) == 24, "ctrl header");

struct tcp_chunk_hdr {
  uint32_t magic;
  uint32_t len;
  uint64_t seq;
  uint64_t off;
  uint64_t total;
};
_Static_assert(sizeof(struct tcp_chunk_hdr) == 32, "chunk header");

enum { TCP_REQ_FREE = 0, TCP_REQ_SEND, TCP_REQ_RECV };

struct tcp_req {
  struct tcp_comm *comm;
  int state; /* TCP_REQ_*; progress thread only */
  uint64_t seq;
  char *data;
  size_t size;              /* send: bytes to send; recv: posted size */
  _Atomic uint64_t armed;   /* recv: seq + 1 while posted (helpers check chunks against it), 0 otherwise */
  _Atomic size_t done;      /* bytes sent to the kernel / landed in the buffer */
  _Atomic size_t total;     /* recv: the sent size once known (SIZE_MAX before) */
  ncclResult_t err;         /* failure of this request alone (size mismatch) */
};

struct tcp_task { /* one message's chunks for one helper thread: chunks first, first + stride, ... */
  struct tcp_req *req;
  uint64_t seq;
  char *data;
  size_t size;
  size_t chunk;
  uint32_t first, nchunks, stride;
};

struct tcp_comm;

struct tcp_thread {
  struct tcp_comm *comm;
  int idx;
  int started;
  pthread_t tid;
  int nfds;
  int fds[TCP_MAX_STREAMS];
  /* send side: task queue */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct tcp_task q[TCP_NREQ];
  unsigned head, tail; /* under mu */
  int stop;            /* under mu */
};

struct tcp_txent {
  struct tcp_ctrl_hdr hdr;
  const char *payload;
  size_t len; /* payload bytes */
  size_t off; /* over header + payload */
  struct tcp_req *req; /* inline send completed by this entry, or NULL */
};

struct tcp_comm {
  int is_send;
  int dev;
  int ctrl_fd;
  int nsocks, nthreads;
  int fds[TCP_MAX_STREAMS];
  struct tcp_thread *threads;
  union gdr_sockaddr peer;
  char peer_str[GDR_ADDR_STRLEN];
  size_t inline_max, min_chunk, max_chunk;

  /* progress-thread state */
  uint64_t next_seq;
  struct tcp_req req[TCP_NREQ];
  unsigned rr; /* next helper thread for a chunked send */
  struct {
    uint64_t seq; /* seq + 1 when valid */
    uint64_t size;
  } cts[TCP_NREQ];
  struct tcp_txent txq[TCP_TXQ];
  unsigned tx_head, tx_tail;
  char *rx;          /* TCP_RXBUF staging */
  size_t rx_len, rx_off;
  int rx_in_payload; /* receiving an INLINE payload */
  struct tcp_req *rx_req;
  size_t rx_left;
  int ctrl_eof;
  int warned;

  /* shared with the helper threads */
  _Atomic int streams_eof; /* data streams that saw a clean EOF */
  _Atomic int failed;      /* fail_res is set */
  pthread_mutex_t fail_mu;
  int fail_mu_ok; /* fail_mu initialised */
  int nsync;      /* threads[] whose mu/cv are initialised */
  ncclResult_t fail_res;
  char fail_why[256];
};

struct tcp_mr {
  void *data;
  size_t size;
  int type;
};

/* tcp_conn.c */
ncclResult_t gdr_tcp_comm_start(struct tcp_comm *c); /* spawns the helper threads */
void gdr_tcp_comm_fail(struct tcp_comm *c, ncclResult_t res, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* tcp_p2p.c */
void *gdr_tcp_send_thread(void *arg);
void *gdr_tcp_recv_thread(void *arg);
ncclResult_t gdr_tcp_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t gdr_tcp_dereg_mr(void *comm, void *mhandle);
ncclResult_t gdr_tcp_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request);
ncclResult_t gdr_tcp_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                           void **request);
ncclResult_t gdr_tcp_test(void *request, int *done, size_t *sizes);
/* tcp_init.c */
ncclResult_t gdr_tcp_dev_addr(int dev, union gdr_sockaddr *addr);
/* tcp_conn.c */
ncclResult_t gdr_tcp_listen(int dev, struct gdr_handle *handle, void **listen_comm);
ncclResult_t gdr_tcp_connect(int dev, struct gdr_handle *handle, void **send_comm);
ncclResult_t gdr_tcp_accept(void *listen_comm, void **recv_comm);
ncclResult_t gdr_tcp_close_send(void *send_comm);
ncclResult_t gdr_tcp_close_recv(void *recv_comm);
ncclResult_t gdr_tcp_close_listen(void *listen_comm);

#endif /* GDRNET_TCP_H */
