/* The one-sided core's objects, shared by core.c (the version-neutral entry points) and tcp_os.c (the host-staged
 * message path over the net core's comms). Not seen outside plugin/gin/. */
#ifndef GDRNET_GIN_INT_H
#define GDRNET_GIN_INT_H

#include <pthread.h>
#include <stdint.h>

#include "gin/gin.h"
#include "stats.h"

/* bumps the comm's counter and the stats file's */
#define GIN_COUNT(c, field, n)                                                                                         \
  do {                                                                                                                 \
    (c)->field += (n);                                                                                                 \
    atomic_fetch_add_explicit(&gdr_stats_tp[(c)->stats_tp].gin_##field, (uint64_t)(n), memory_order_relaxed);          \
  } while (0)

#define GDR_GIN_INST_MAGIC 0x49524447u /* "GDRI" */
#define GDR_GIN_COMM_MAGIC 0x43524447u /* "GDRC" */
#define GDR_GIN_CTX_MAGIC 0x4b524447u  /* "GDRK" */
#define GDR_GIN_MR_MAGIC 0x57524447u   /* "GDRW" */
#define GDR_GIN_REQ_MAGIC 0x50524447u  /* "GDRP" */

#define GDR_GIN_INLINE 256 /* put bytes carried inside the header message (host source windows) */

/* wire ops */
enum {
  GIN_OP_REG = 1,
  GIN_OP_PUT,
  GIN_OP_GET,
  GIN_OP_GET_REPLY,
  GIN_OP_FLUSH,
  GIN_OP_FLUSH_ACK,
  GIN_OP_QP,
  GIN_OP_QP_READY,
  GIN_OP_ABORT, /* the sender's comm failed: fail too, at once (not after RDMA retries or a TCP timeout) */
  GIN_OP_MOVE,  /* rdma_os.c: the sender moved to the message path towards the receiver; aux: signals applied */
  GIN_OP_BYE    /* the sender closes its comm cleanly: nothing follows it; sent only to peers with GIN_CAP_BYE */
};
/* capability bits in the connect-time introduction (core.c's struct ident; older plugins send 0 and ignore them) */
#define GIN_CAP_BYE 0x1u /* understands GIN_OP_BYE: a clean close is said, not seen as a connection failure */
#define GIN_F_SIGNAL 0x1u
#define GIN_F_INLINE 0x2u
#define GIN_F_DATA 0x4u            /* a data message follows the header */
#define GIN_F_RECOVER 0x8u         /* a recovery's GIN_OP_QP/QP_READY (rdma_os.c): cookie epoch, aux signals applied */
#define GIN_WIRE_MAGIC 0x47524447u /* "GDRG" */
#define GIN_MR_NONE UINT32_MAX     /* PUT of 0 bytes: no target window (off 0) */
/* How far a peer's GIN_OP_REG may name windows ahead of this rank's next id. Registration is collective and in
 * order: regMrSym returns only once every rank's REG for that window is in, so a peer registers window k + 1 only
 * after this rank sent its REG for k (next id >= k + 1): a peer is at most one window ahead. 8 leaves slack; the
 * early list then holds at most 8 entries per peer (duplicates refused), and a REG past that is a protocol error. */
#define GIN_EARLY_AHEAD 8u
#define GIN_QPINFO_BYTES 56 /* GIN_OP_QP's inline payload (rdma_os.c's struct qpinfo) */

struct gin_hdr {
  uint32_t magic;
  uint16_t op;
  uint16_t flags;
  uint32_t mr;     /* window id (target's for PUT/GET; initiator's for GET_REPLY) */
  uint32_t sig_mr; /* window id of the signal word */
  uint64_t off;
  uint64_t size;
  uint64_t sig_off;
  uint64_t sig_val; /* what to add (INC: 1) */
  uint64_t cookie;  /* GET/FLUSH: the initiator's request (index | generation << 32) */
  uint64_t aux;     /* GET: the initiator's window offset; REG: the window's base address */
  uint32_t aux_mr;  /* GET: the initiator's window id */
  uint32_t rkey;    /* REG: the window's remote key on the one-sided RDMA path (0 without) */
};
_Static_assert(sizeof(struct gin_hdr) == 72, "gin_hdr is 72 bytes");
#define GIN_MSG_MAX (sizeof(struct gin_hdr) + GDR_GIN_INLINE)

struct gin_comm;

/* A window: the same id on every rank. */
struct gin_mr {
  uint32_t magic;
  uint32_t id;
  struct gin_comm *comm;
  char *base;
  size_t size;
  int type;            /* NCCL_PTR_HOST / NCCL_PTR_CUDA */
  void *cuda_ctx;      /* CUDA windows: for the host-staged copies */
  void **smh;          /* [nranks] net-core mhandles on the send comms */
  void **rmh;          /* [nranks] on the receive comms */
  uint64_t *peer_size; /* [nranks] every rank's size (UINT64_MAX: not yet heard) */
  uint64_t *peer_va;   /* [nranks] every rank's base address */
  uint32_t *peer_rkey; /* [nranks] and remote key (one-sided RDMA path) */
  void *ibmr;          /* its registration on the one-sided RDMA path (struct ibv_mr), or NULL */
  struct gin_mr *next;
};

/* One user operation, from the comm's fixed pool (a reply names it by index and generation). */
enum { GIN_RQ_FREE = 0, GIN_RQ_USER };
struct gin_req {
  uint32_t magic; /* GDR_GIN_REQ_MAGIC while handed to NCCL */
  int kind;       /* GIN_RQ_* */
  uint32_t idx, gen;
  int peer, context;
  int pending; /* net-core sends not yet complete, + 1 while a reply (GET, FLUSH) is awaited */
  int nwr;     /* one-sided RDMA path: the work requests it posted (freed from the send queue at its completion) */
  int done;
  uint16_t await;   /* the reply it waits for (GIN_OP_GET_REPLY, GIN_OP_FLUSH_ACK on the message path), or 0 */
  ncclResult_t err; /* with done: what test() returns (its peer left: ncclRemoteError) */
  struct gin_req *next_free;
};

/* One net-core message to a peer, in a FIFO that keeps a peer's messages in order. A header is sent from the
 * peer's registered tx ring (slot = FIFO position); data goes from the window itself, in pieces of the header's
 * chunk, one piece in flight at a time; a later entry is posted only after every byte of the earlier ones. */
struct gin_send {
  struct gin_req *owner; /* NULL: a reply (GET_REPLY, FLUSH_ACK) */
  char *data;
  size_t size, chunk, posted, acked, cur;
  void *mh;
  void *nreq; /* the net-core request of the piece in flight */
};
#define GDR_GIN_CHUNK ((size_t)4 << 20) /* pieces of a large put/get (also what "past max_msg_sz" tests cross) */
#define GDR_GIN_MAX_CONTEXTS 8          /* contexts a comm's FIFOs are sized for (more share them) */

enum { GIN_RX_IDLE = 0, GIN_RX_HDR, GIN_RX_DATA };
struct gin_peer {
  void *send, *recv;     /* net-core comms */
  void *tx_smh, *rx_rmh; /* tx ring and rx buffer, registered on them */
  /* send FIFO [head, tail) (positions modulo qcap) and its header ring */
  struct gin_send *q;
  unsigned char *tx; /* qcap x GIN_MSG_MAX, host */
  uint32_t qcap, head, tail;
  /* receive state machine */
  int rx;
  void *rx_req;
  struct gin_hdr rx_hdr; /* the header being applied (GIN_RX_DATA) */
  size_t rx_got, rx_cur; /* data bytes received, the piece in flight */
  char *rx_dst;          /* where the data goes */
  unsigned char *rx_buf; /* GIN_MSG_MAX, host */
  int rx_stalled;        /* a reply found the FIFO full: the header is applied again at the next progress */
  int inflight[GDR_GIN_MAX_CONTEXTS]; /* user operations in flight to this peer, per context (mod the max) */
  uint32_t caps;                      /* GIN_CAP_* from its introduction */
  int gone; /* it closed cleanly (GIN_OP_BYE): nothing more is received from it, operations towards it fail with
             * ncclRemoteError, the comm stays healthy for the other peers */
};

struct gin_early {
  uint32_t id;
  int peer;
  uint64_t size, va;
  uint32_t rkey;
  struct gin_early *next;
};

struct gin_comm {
  uint32_t magic;
  int rank, nranks, dev;
  void *netctx; /* the instance's net-core context */
  pthread_mutex_t lock;
  int ncontexts, depth; /* of the implicit context */
  size_t max_bytes;     /* largest net-core message */
  struct gin_peer *peers;
  struct gin_req *pool;
  uint32_t npool;
  struct gin_req *free_list;
  struct gin_mr *mrs;
  struct gin_early *early; /* peers' registrations heard before this rank made the window */
  uint32_t next_mr_id;
  ncclResult_t error; /* sticky: the first failure (a dead peer, a broken connection) */
  int closing;        /* a clean close has said GIN_OP_BYE: a failure now is this rank's alone (no GIN_OP_ABORT) */
  int nctx_live;
  struct gin_rdma *rdma; /* the one-sided RDMA path (rdma_os.c), or NULL: every operation is a message */
  uint64_t puts, signals, gets, bytes, errors, recoveries, replayed, moves;
  int stats_tp; /* GDR_STATS_TP_*: the transport under it, for the stats file's gdrnet_gin_* counters */
};

struct gin_ctx {
  uint32_t magic;
  struct gin_comm *comm;
  int ncontexts, depth;
};

struct gin_rdma;

/* GDRNET_GIN_PATH (params.def) */
enum { GDR_GIN_PATH_AUTO = 0, GDR_GIN_PATH_MESSAGES = 1 };
/* GDRNET_GIN_SIGNAL */
enum { GDR_GIN_SIGNAL_IMM = 0, GDR_GIN_SIGNAL_ATOMIC = 1 };

/* tcp_os.c */
/* The pool (size from the comm's contexts and depth), the FIFOs and the receive buffers; registered on every comm. */
ncclResult_t gin_os_setup(struct gin_comm *c);
/* gin_os_setup's memory alone (no registration): the pool, the FIFOs and the receive buffers (gin_os_teardown). */
ncclResult_t gin_os_alloc(struct gin_comm *c);
/* A message of len bytes from peer is in its receive buffer: checks every field (a malformed one is a protocol
 * error: a WARN naming the peer, ncclRemoteError) and applies it, or leaves its data to be received into
 * peers[peer].rx_dst (*more: rx_hdr.size bytes, then gin_os_rx_data_done), or finds no room for its reply yet
 * (*stall: applied again at the next progress). */
ncclResult_t gin_os_rx_msg(struct gin_comm *c, int peer, size_t len, int *more, int *stall);
ncclResult_t gin_os_rx_data_done(struct gin_comm *c, int peer);
void gin_os_teardown(struct gin_comm *c);
/* Free FIFO entries towards peer. */
uint32_t gin_os_room(struct gin_comm *c, int peer);
/* Queues a header (copied into the tx ring, with inline bytes) or a data message behind the peer's others; the
 * caller checked the room. owner's pending is counted. */
void gin_os_queue_hdr(struct gin_comm *c, int peer, struct gin_req *owner, const struct gin_hdr *h, const void *inl,
                      size_t inl_len);
void gin_os_queue_data(struct gin_comm *c, int peer, struct gin_req *owner, char *data, size_t size, void *mh);
/* Posts, tests, receives and applies what it can without blocking; a failure is recorded (sticky) and returned. */
ncclResult_t gin_os_progress(struct gin_comm *c);
struct gin_req *gin_req_get(struct gin_comm *c);
void gin_req_put(struct gin_comm *c, struct gin_req *r);
/* A user operation finished (its sends done, its reply in); its queue slot is freed when test() returns it. */
void gin_req_finish(struct gin_comm *c, struct gin_req *r);
/* A GET_REPLY/FLUSH_ACK cookie -> the request, or NULL (not a live one). */
struct gin_req *gin_req_by_cookie(struct gin_comm *c, uint64_t cookie);
static inline uint64_t gin_req_cookie(const struct gin_req *r) { return (uint64_t)r->idx | (uint64_t)r->gen << 32; }
/* One user operation as messages towards r->peer, behind the peer's others; the caller checked the room
 * (gin_os_put_entries for a put, 1 for a get or a flush). sig_val is what the target adds. */
uint32_t gin_os_put_entries(const struct gin_mr *src, size_t size);
void gin_os_put(struct gin_comm *c, struct gin_req *r, struct gin_mr *src, uint64_t src_off, struct gin_mr *dst,
                uint64_t dst_off, size_t size, struct gin_mr *sig, uint64_t sig_off, uint64_t sig_val, int signal);
void gin_os_get(struct gin_comm *c, struct gin_req *r, struct gin_mr *rm, uint64_t roff, struct gin_mr *lm,
                uint64_t loff, size_t size);
void gin_os_flush(struct gin_comm *c, struct gin_req *r);
struct gin_mr *gin_mr_find(struct gin_comm *c, uint32_t id);
void gin_fail(struct gin_comm *c, ncclResult_t res, const char *what, int peer);
/* core.c: peer's GIN_OP_BYE came: it is gone (its sends not yet posted dropped, its operations in flight failed) */
void gin_peer_bye(struct gin_comm *c, int peer);
/* INC/ADD (val) on the 8-byte word at off of window id, after the data it follows (both paths apply it so). */
ncclResult_t gin_apply_signal(struct gin_comm *c, int peer, uint32_t id, uint64_t off, uint64_t val);
/* A GIN_OP_QP / GIN_OP_QP_READY / GIN_OP_MOVE message (rdma_os.c's bring-up, recovery and move over the message
 * path). */
ncclResult_t gin_rdma_message(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload);
/* What is wrong with a GIN_OP_QP payload (GIN_QPINFO_BYTES), or NULL (rdma_os.c) */
const char *gin_rdma_qpinfo_check(const void *payload);

/* rdma_os.c: one RC QP per rank on the comm's device, RDMA WRITE for puts, READ for gets and flushes, a
 * WRITE_WITH_IMM of a signal record that the target's progress applies after the data. */
/* Brings it up when the net core runs RDMA and GDRNET_GIN_PATH allows (else c->rdma stays NULL). */
ncclResult_t gin_rdma_setup(struct gin_comm *c);
void gin_rdma_teardown(struct gin_comm *c);
ncclResult_t gin_rdma_reg(struct gin_comm *c, struct gin_mr *m, uint64_t offset, int fd);
void gin_rdma_dereg(struct gin_comm *c, struct gin_mr *m);
uint32_t gin_rdma_rkey(const struct gin_mr *m); /* 0 without a registration */
/* Whether operations towards peer go to rdma_os.c (gin_rdma_room/put/get/flush): c->rdma is up, and the peer has
 * not moved to the message path or operations issued before that still wait in its list to go as messages (the
 * ones issued now queue behind them). Else they are messages (gin_os_put/get/flush). */
int gin_rdma_peer_active(struct gin_comm *c, int peer);
/* Room towards peer for an operation of nwr work requests (signal: it needs an inbox slot too). */
int gin_rdma_room(struct gin_comm *c, int peer, size_t size, int signal);
void gin_rdma_put(struct gin_comm *c, struct gin_req *r, struct gin_mr *src, uint64_t src_off, struct gin_mr *dst,
                  uint64_t dst_off, size_t size, struct gin_mr *sig, uint64_t sig_off, uint64_t sig_val, int signal);
void gin_rdma_get(struct gin_comm *c, struct gin_req *r, struct gin_mr *rm, uint64_t roff, struct gin_mr *lm,
                  uint64_t loff, size_t size);
void gin_rdma_flush(struct gin_comm *c, struct gin_req *r, struct gin_mr *m);
ncclResult_t gin_rdma_progress(struct gin_comm *c);
/* peer left cleanly: its listed operations are forgotten (core.c failed them) and its QP's completions ignored */
void gin_rdma_peer_gone(struct gin_comm *c, int peer);

#endif /* GDRNET_GIN_INT_H */
