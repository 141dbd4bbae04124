/* The one-sided core's objects, shared by core.c (the version-neutral entry points, on top), its two paths below it
 * (tcp_os.c: the host-staged message path over the net core's comms; rdma_os.c: the one-sided RDMA path), which
 * core.c calls only through their struct gin_path, and shared.c at the bottom (requests, window lookup, signals,
 * failure). Not seen outside plugin/gin/. */
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
struct gin_path;
/* the paths under a comm (struct gin_path, below) */
enum { GIN_PATH_MSG = 0, GIN_PATH_RDMA = 1, GIN_NPATHS = 2 };

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
  uint32_t rkey;       /* and its remote key (0 without) */
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
  void *send, *recv;       /* net-core comms */
  void *send_tc, *recv_tc; /* the transport's comms under them (core.c reads them off the net core's) */
  void *tx_smh, *rx_rmh;   /* tx ring and rx buffer, registered on them */
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
  const struct gin_path *path[GIN_NPATHS]; /* GIN_PATH_*: the paths core.c put under the comm (NULL: none) */
  struct gin_rdma *rdma; /* the one-sided RDMA path's state (rdma_os.c), or NULL: every operation is a message */
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

/* One user operation as core.c hands it to a path (checked against the windows already). */
enum { GIN_K_PUT = 1, GIN_K_GET, GIN_K_FLUSH };
struct gin_op {
  int kind, signal;
  struct gin_mr *lm, *rm, *sm;     /* the local window, the peer's window, the signal's window */
  uint64_t loff, roff, soff, sval; /* sval: what the target adds */
  size_t size;
};

/* A one-sided path under core.c, in the manner of a provider's ops table: the message path (tcp_os.c,
 * gin_msg_path) and the one-sided RDMA path (rdma_os.c, gin_rdma_path). core.c sets c->path[] and calls the paths
 * only through it; a path reaches the other only through it too (the RDMA path sends its records as messages, the
 * message path hands them over). A NULL member: the path has nothing to do there. */
struct gin_path {
  const char *name;
  ncclResult_t (*setup)(struct gin_comm *c); /* after the mesh, in path order (the RDMA path talks over messages) */
  void (*teardown)(struct gin_comm *c);      /* in reverse order; also after a failed setup */
  /* after the net core's comms are closed (nothing is placed into a receive posted on them any more): the memory
   * they were given */
  void (*release)(struct gin_comm *c);
  /* posts, tests, receives and applies what it can without blocking; a failure is recorded (sticky) and returned */
  ncclResult_t (*progress)(struct gin_comm *c);
  ncclResult_t (*reg)(struct gin_comm *c, struct gin_mr *m, uint64_t offset, int fd); /* a new window */
  void (*dereg)(struct gin_comm *c, struct gin_mr *m);
  /* whether operations towards peer go this way now (NULL: always) */
  int (*carries)(struct gin_comm *c, int peer);
  /* room towards peer for the operation; then issue it (r's pending counts what it waits for) */
  int (*room)(struct gin_comm *c, int peer, const struct gin_op *o);
  void (*issue)(struct gin_comm *c, struct gin_req *r, const struct gin_op *o);
  int kick; /* issue only queues: core.c runs the progress after it */
  /* hooks of shared.c: the comm just failed (gin_fail); peer closed cleanly (gin_peer_bye) */
  void (*on_fail)(struct gin_comm *c);
  void (*on_peer_gone)(struct gin_comm *c, int peer);
  /* the message path: a control header (with len bytes inline) towards peer behind its others; 0: no room */
  int (*say)(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *inl, size_t len);
  /* the RDMA path: its records that come over the message path (GIN_OP_QP, QP_READY, MOVE): what is wrong with
   * one (NULL: nothing), checked before anything is applied; then the record itself */
  const char *(*record_check)(const struct gin_hdr *h, const void *payload);
  ncclResult_t (*record)(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload);
};
extern const struct gin_path gin_msg_path;  /* tcp_os.c */
extern const struct gin_path gin_rdma_path; /* rdma_os.c */

/* shared.c */
struct gin_req *gin_req_get(struct gin_comm *c);
void gin_req_put(struct gin_comm *c, struct gin_req *r);
/* A user operation finished (its sends done, its reply in); its queue slot is freed when test() returns it. */
void gin_req_finish(struct gin_comm *c, struct gin_req *r);
/* A GET_REPLY/FLUSH_ACK cookie -> the request, or NULL (not a live one). */
struct gin_req *gin_req_by_cookie(struct gin_comm *c, uint64_t cookie);
static inline uint64_t gin_req_cookie(const struct gin_req *r) { return (uint64_t)r->idx | (uint64_t)r->gen << 32; }
struct gin_mr *gin_mr_find(struct gin_comm *c, uint32_t id);
/* INC/ADD (val) on the 8-byte word at off of window id, after the data it follows (both paths apply it so). */
ncclResult_t gin_apply_signal(struct gin_comm *c, int peer, uint32_t id, uint64_t off, uint64_t val);
/* The comm fails (sticky, the first failure only): a WARN, then every path's on_fail. */
void gin_fail(struct gin_comm *c, ncclResult_t res, const char *what, int peer);
/* peer's GIN_OP_BYE came: it is gone (every path's on_peer_gone, its operations in flight failed) */
void gin_peer_bye(struct gin_comm *c, int peer);

/* tcp_os.c, besides gin_msg_path (the fuzz target gin_msg drives these directly) */
/* gin_msg_path.setup's memory alone (no registration): the pool, the FIFOs and the receive buffers. */
ncclResult_t gin_os_alloc(struct gin_comm *c);
/* A message of len bytes from peer is in its receive buffer: checks every field (a malformed one is a protocol
 * error: a WARN naming the peer, ncclRemoteError) and applies it, or leaves its data to be received into
 * peers[peer].rx_dst (*more: rx_hdr.size bytes, then gin_os_rx_data_done), or finds no room for its reply yet
 * (*stall: applied again at the next progress). */
ncclResult_t gin_os_rx_msg(struct gin_comm *c, int peer, size_t len, int *more, int *stall);
ncclResult_t gin_os_rx_data_done(struct gin_comm *c, int peer);
void gin_os_teardown(struct gin_comm *c);

/* rdma_os.c, besides gin_rdma_path: what is wrong with a GIN_OP_QP payload (GIN_QPINFO_BYTES), or NULL */
const char *gin_rdma_qpinfo_check(const void *payload);

#endif /* GDRNET_GIN_INT_H */
