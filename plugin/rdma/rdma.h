/* The RDMA transport's internal structures, split by lifecycle like NCCL's IB transport, in layers that call down
 * only (README.md here, "Layers"):
 *   dev.c      init, devices, properties, GDR probes, relaxed ordering, registration (regcache.c)
 *   async.c    one thread per device reading async events; queues them for the connections they hit
 *   qpset.c    the QP API: one RC QP, a connection's QP set
 *   conn.c     listen/connect/accept state machines, the connection's own buffers, control channel, close
 *   p2p.c      the RDMA data path (CTS FIFO, WRITE/WRITE_WITH_IMM, multi-QP and multi-device striping, WRs cut to
 *              max_msg_sz and queued for send-queue room, flush, quiesce)
 *   fallback.c the move to TCP and back, through fb_tcp.h (the one seam to the TCP transport)
 *   recover.c  recovery, the resiliency step (gdr_rdma_progress) and gdr_rdma_resiliency (struct gdr_rdma_up)
 *   transport.c the gdr_transport table and the entries NCCL's calls reach; service.c the idle-peer service
 * Wire formats and arithmetic are in proto.h, the verbs loader in ibvwrap.h. */
#ifndef GDRNET_RDMA_RDMA_H
#define GDRNET_RDMA_RDMA_H

#include <endian.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../health.h"
#include "../log.h"
#include "../param.h"
#include "../sock.h"
#include "../stats.h"
#include "../transport.h"
#include "ibvwrap.h"
#include "proto.h"
#include "regcache.h"

#define GDR_RDMA_MAX_DEVS 32
#define GDR_RDMA_SEND_REQS (GDR_RDMA_MAX_REQS * GDR_RDMA_MAX_RECVS) /* 32 x 8 on the send side */
#define GDR_RDMA_CQ_BATCH 16
#define GDR_RDMA_CTS_SIGNAL_EVERY 16 /* one CTS write in 16 per QP is signaled to drain the send queue */
/* Queue depths. Sender, per QP: 32 messages x (8 part WRITEs + 1 WRITE_WITH_IMM) = 288 WRs for messages of at most
 * max_msg_sz per QP; longer ones are several WRITEs each, and what does not fit the 512 waits in the connection's
 * posting queue (p2p.c); receiver: 32 CTS writes. Receive queue: 32 receives in flight. */
#define GDR_RDMA_QP_SEND_WR 512
#define GDR_RDMA_QP_RECV_WR 64
#define GDR_RDMA_INLINE 256 /* a CTS of up to 4 entries (64 bytes each) */
/* CQ: every signaled WR of every QP of the connection may be outstanding at once (the sender's send queues bound
 * theirs: longer messages wait for room, p2p.c) */
#define GDR_RDMA_CQE(nqps) ((GDR_RDMA_QP_SEND_WR + GDR_RDMA_FIFO_SLOTS) * (nqps) + 2 * GDR_RDMA_MAX_REQS + 64)
#define GDR_RDMA_MIN_CQE GDR_RDMA_CQE(GDR_RDMA_MAX_QPS)

/* ------------------------------------------------------------------------------------------ devices -- */

struct gdr_rdma_comm;
struct gdr_rdma_pending;
struct gdr_rdma_pending_ev;

/* A connection on a device's list (async thread): a fused connection is on each of its devices' lists. */
struct gdr_rdma_link {
  struct gdr_rdma_comm *c;
  struct gdr_rdma_link *next;
  int attached;
};

struct gdr_rdma_dev {
  char name[80];   /* as NCCL sees it: "mlx5_0", or "mlx5_0:2" on multi-port devices */
  char ibname[64]; /* verbs device name */
  char *pci_path;  /* realpath of <ibdev_path>/device, or NULL */
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  int port;
  int link_layer; /* IBV_LINK_LAYER_* */
  int active_mtu; /* enum ibv_mtu */
  int gid_index;
  union ibv_gid gid;
  uint16_t lid;
  int grh_required; /* the port says every packet needs a GRH (IBV_QPF_GRH_REQUIRED) */
  uint64_t guid;    /* sys_image_guid, as NCCL's IB transport */
  int speed;        /* Mbps */
  int max_qp;
  int max_qp_wr;
  uint64_t max_msg;   /* the port's max_msg_sz: the longest work request it takes */
  int ptr_support;    /* NCCL_PTR_* */
  int relaxed;        /* register data buffers with IBV_ACCESS_RELAXED_ORDERING */
  char gdr_desc[512]; /* "GDR via nvidia-peermem", "GDR off: ..." */
  struct gdr_regcache cache;

  /* comms of this device, for the async thread */
  pthread_mutex_t lock;
  struct gdr_rdma_link *comms;
  int ncomms;
  pthread_t thread;
  int thread_running;
  int stop_fd;        /* eventfd: wakes the async thread to stop */
  int fatal;          /* DEVICE_FATAL seen, and not back yet (gdr_rdma_dev_revive) */
  uint64_t revive_ns; /* the next time a lost device is looked for again */
  int nretired;       /* contexts (and PDs) of earlier lives of the device, closed at fini */
  struct ibv_context *retired_ctx[4];
  struct ibv_pd *retired_pd[4];
  char ibdev_path[256]; /* sysfs directory of the verbs device (GID types are read again after a port flap) */

  /* counters over every connection of the device (GDRNET_STATS_FILE, stats.h) */
  struct gdr_dev_counters ctr;
};

struct gdr_rdma_state {
  int ndevs;
  struct gdr_rdma_dev devs[GDR_RDMA_MAX_DEVS];
  union gdr_sockaddr if_addr; /* local address for listeners */
  char if_name[IF_NAMESIZE];
  int nqps;    /* GDRNET_QPS_PER_CONN */
  int split;   /* GDRNET_SPLIT_DATA */
  int tcp_ok;  /* the TCP transport is initialised for the fallback (GDRNET_FALLBACK=1) */
  int tcp_dev; /* its device on the handshake's interface */
};
extern struct gdr_rdma_state gdr_rdma;

/* dev.c */
ncclResult_t gdr_rdma_init(int *ndev, char *why, size_t whylen);
ncclResult_t gdr_rdma_get_properties(int dev, struct gdr_props *props);
void gdr_rdma_fini(void);
void gdr_rdma_quiesce(void);
ncclResult_t gdr_rdma_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t gdr_rdma_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                    void **mhandle);
ncclResult_t gdr_rdma_dereg_mr(void *comm, void *mhandle);
/* Registers a transport-internal buffer (FIFO, sizes, staging) outside the cache. */
struct ibv_mr *gdr_rdma_reg_internal(struct gdr_rdma_dev *d, void *buf, size_t len, int access);
const char *gdr_rdma_reg_hint(int err); /* a fix for a registration errno (memlock, ...) */
/* The port as it is now: *active = 1 when ACTIVE; the GID chosen again (GDRNET_GID_INDEX, else the selection
 * rules: a flap can move an address to another index), the LID and the active MTU. The device's own copy is
 * updated under its lock. 0, or an errno of ibv_query_port. */
int gdr_rdma_dev_refresh(struct gdr_rdma_dev *d, int *active, union ibv_gid *gid, int *gid_index, uint16_t *lid,
                         int *mtu);
/* Is a device of the connection lost (DEVICE_FATAL)? */
int gdr_rdma_comm_fatal(const struct gdr_rdma_comm *c);

/* async.c */
/* Adds/removes a comm to/from its device's list; the first add starts the device's async thread,
 * the last remove stops and joins it. *lost: a device of the comm that had a DEVICE_FATAL already, or NULL. */
ncclResult_t gdr_rdma_async_attach(struct gdr_rdma_comm *c, const struct gdr_rdma_dev **lost);
void gdr_rdma_async_detach(struct gdr_rdma_comm *c);
/* The hand-over queue of a connection's async faults: init/destroy with the comm; push (any thread, in arrival order;
 * full: folded into the newest, the worse action wins); pop (the progress thread): 1 and the oldest, or 0. */
void gdr_rdma_pending_init(struct gdr_rdma_pending *p);
void gdr_rdma_pending_destroy(struct gdr_rdma_pending *p);
void gdr_rdma_pending_push(struct gdr_rdma_pending *p, int action, unsigned gen, const char *why);
int gdr_rdma_pending_pop(struct gdr_rdma_pending *p, struct gdr_rdma_pending_ev *out);
/* Stops and joins the device's thread even if comms are still open (fini after leaked comms). */
void gdr_rdma_async_stop(struct gdr_rdma_dev *d);
ncclResult_t gdr_rdma_async_swap_ctx(struct gdr_rdma_dev *d, struct ibv_context *ctx, struct ibv_pd *pd);
int gdr_rdma_dev_revive(struct gdr_rdma_dev *d); /* a lost device back: 0 when usable again */

/* ---------------------------------------------------------------------------------------- requests -- */

/* A memory handle NCCL gets from regMr: the buffer's registration on every device of the connection (QP i of a
 * fused connection uses the keys of its device i % ndevs), each an entry of that device's cache. */
#define GDR_RDMA_MH_MAGIC 0x474d4852u /* "RHMG" */
struct gdr_rdma_mh {
  uint32_t magic;
  int n;          /* registrations (0: a connection on TCP, nothing registered with a NIC) */
  int kind;       /* enum gdr_reg_kind */
  uintptr_t base; /* the range NCCL registered */
  size_t len;
  uint32_t lkey[GDR_RDMA_MAX_CONN_DEVS];
  uint32_t rkey[GDR_RDMA_MAX_CONN_DEVS];
  struct gdr_reg_entry *e[GDR_RDMA_MAX_CONN_DEVS];
};

enum { GDR_RREQ_FREE = 0, GDR_RREQ_SEND, GDR_RREQ_RECV, GDR_RREQ_FLUSH, GDR_RREQ_FAILED };

struct gdr_rdma_req {
  struct gdr_rdma_comm *comm;
  int type;
  int nreqs;          /* receive: n of the group; send: n of the group it is part of */
  int events;         /* completions still awaited (send: its WRs, plus the WRITE_WITH_IMMs if it carries them) */
  int slot;           /* FIFO slot (seq % 32) */
  int idx;            /* send: position in the grouped receive it matched */
  uint64_t seq;       /* message sequence number (both sides name it alike) */
  ncclResult_t error; /* sticky failure of this request alone */
  /* send */
  size_t size;
  int tag;
  /* receive */
  size_t sent[GDR_RDMA_MAX_RECVS];
  size_t cap[GDR_RDMA_MAX_RECVS];
  int row; /* receive: the sent sizes ride in the sizes row (grouped, or 2^31 bytes and more) */
  /* flush: what the loopback READs read, one per device that carries data (re-posted after a recovery) */
  uint64_t flush_addr;
  const struct gdr_rdma_mh *flush_mh;
  /* receive: the buffers' registrations (a fallback carries them over TCP) */
  struct gdr_rdma_mh *mh[GDR_RDMA_MAX_RECVS];
  /* carried by TCP (fallback.c): the TCP request, the buffers it covers (receive: indices of this request's
   * buffers, the others were placed over RDMA already), or done without one */
  int on_tcp;
  int tcp_done;
  void *treq;
  int tn;
  uint8_t tmap[GDR_RDMA_MAX_RECVS];
  void *data[GDR_RDMA_MAX_RECVS]; /* send: data[0]; receive: the buffers (for the re-issue) */
};

/* wr_id: kind in the top byte, an 8-bit argument in the next (slot, slot | part << 5, or a request index), the
 * message's seq in the low 48 bits */
enum {
  GDR_WR_DATA = 1,
  GDR_WR_RECV = 2,
  GDR_WR_CTS = 3,
  GDR_WR_FLUSH = 4,
  GDR_WR_IMM = 5,
  GDR_WR_PROBE = 6,
  GDR_WR_DRAIN = 7 /* quiesce's marker on a QP in ERR (recover.c) */
};
static inline uint64_t gdr_wr_id(int kind, int arg, uint64_t seq) {
  return ((uint64_t)kind << 56) | ((uint64_t)(arg & 0xff) << 48) | (seq & 0xffffffffffffull);
}
static inline int gdr_wr_kind(uint64_t id) { return (int)(id >> 56); }
static inline int gdr_wr_arg(uint64_t id) { return (int)((id >> 48) & 0xff); }
static inline uint64_t gdr_wr_seq(uint64_t id) { return id & 0xffffffffffffull; }
/* DATA: the slot and the part of the group (GDR_RDMA_FIFO_SLOTS = 32 = 5 bits, GDR_RDMA_MAX_RECVS = 8 = 3 bits) */
static inline int gdr_wr_data_arg(int slot, int part) { return slot | (part << 5); }
static inline int gdr_wr_data_slot(uint64_t id) { return gdr_wr_arg(id) & 0x1f; }
static inline int gdr_wr_data_part(uint64_t id) { return gdr_wr_arg(id) >> 5; }

/* ------------------------------------------------------------------------------------------- comms -- */

enum { GDR_RCOMM_SEND = 1, GDR_RCOMM_RECV = 2 };

/* blob types of the handshake */
#define GDR_RDMA_BLOB_HS 0x52444831u    /* "RDH1": struct gdr_rdma_hs */
#define GDR_RDMA_BLOB_READY 0x52444852u /* "RDHR": sender's QPs are RTS (its word: READY, or READY_TCP) */
#define GDR_RDMA_READY_TCP 0x52444854u  /* "RDHT" as READY's word: the RDMA part failed, the connection runs on TCP */
#define GDR_RDMA_BLOB_TCPH 0x52445448u  /* "RDTH": the receiver's TCP listener handle (128 bytes) for that */

/* The verbs objects of one incarnation of a connection: recovery builds a new set and destroys the old one (the CQ
 * too, so no completion of the old QPs can be mistaken for a new one). */
struct gdr_rdma_qpset {
  struct ibv_cq *cq;                          /* cqs[0]; NULL when there is no set */
  struct ibv_cq *cqs[GDR_RDMA_MAX_CONN_DEVS]; /* one per device that carries QPs (a QP and its CQ share a context) */
  int ncq;
  struct ibv_qp *qps[GDR_RDMA_MAX_QPS];            /* QP i on the connection's device i % ndevs */
  struct ibv_qp *flush_qp[GDR_RDMA_MAX_CONN_DEVS]; /* receiver with GDR: a QP connected to itself on each device */
  uint32_t psn[GDR_RDMA_MAX_QPS];
  uint32_t cts_count[GDR_RDMA_MAX_QPS]; /* receiver: CTS writes posted per QP */
  int sq_used[GDR_RDMA_MAX_QPS];        /* sender: WRs posted whose completion is not polled yet (all signaled) */
  int max_inline;
};

/* Sender: one isend of a message (one buffer of the receiver's group). */
struct gdr_rdma_part {
  struct gdr_rdma_req *req; /* NULL once test() released it */
  void *data;
  size_t size;
  const struct gdr_rdma_mh *mh; /* its registration (the lkey of each device) */
  /* the receiver's buffer, from its CTS entry when the isend matched it (a replay posts to the same place without
   * reading the FIFO again, which the receiver may be rewriting): its address and rkey on each receiver device */
  uint64_t raddr;
  uint32_t rkey[GDR_RDMA_MAX_CONN_DEVS];
  int posted; /* its WRITEs went to the QPs (or wait in the send queue, p2p.c) */
};

/* Sender: the message in FIFO slot seq % 32, from its first matched isend until test() released every part. */
struct gdr_rdma_smsg {
  uint64_t seq;
  int n;          /* buffers of the receiver's group (from the CTS entry) */
  int matched;    /* isends matched to it so far */
  int live;       /* part requests not released yet */
  int row;        /* the sizes ride in the receiver's sizes row (n > 1, or one part of 2^31 bytes or more) */
  int imm_posted; /* the WRITE_WITH_IMMs that complete the receive are on the QPs (row) */
  struct gdr_rdma_req *imm_req; /* the part whose completion waits for those (the last one matched) */
  struct gdr_rdma_part part[GDR_RDMA_MAX_RECVS];
};

/* Faults seen by the async threads (one per device of the connection), handed to the progress thread in the order
 * they came: none is lost. A full queue folds a new event into its newest entry, the worse action winning (a
 * DEVICE_FATAL is never dropped for an older event still unread). */
#define GDR_RDMA_PENDING_MAX 8
struct gdr_rdma_pending_ev {
  int action;   /* enum gdr_fault_action */
  unsigned gen; /* the qpset generation it hit */
  char why[256];
};
struct gdr_rdma_pending {
  pthread_mutex_t lock;
  _Atomic int n; /* queued (read without the lock: the progress thread's quick look) */
  int head;
  uint64_t folded; /* events folded into the newest entry because the queue was full */
  struct gdr_rdma_pending_ev ev[GDR_RDMA_PENDING_MAX];
};

/* Recovery (recover.c). */
enum { GDR_REC_IDLE = 0, GDR_REC_WAIT_PORT, GDR_REC_WAIT_PEER, GDR_REC_WAIT_GO };
struct gdr_rdma_rec {
  int phase;            /* GDR_REC_* */
  uint32_t attempt;     /* the attempt both sides are in (0: none yet) */
  int action;           /* the worst action asked in this attempt (RECOVER or REKEY) */
  unsigned rekey;       /* GDR_REKEY_SEND/RECV: whose own buffers get new keys in this attempt (both sides
                           * agree: REC_REQ/REC_STATE carry it) */
  int rekeyed;          /* this side registered its own buffers again in this attempt */
  int episode_attempts; /* attempts since the connection last worked */
  uint64_t episode_start_ns, deadline_ns, retry_ns, port_check_ns;
  int healthy;   /* a completion succeeded since the last recovery (ends the episode) */
  int have_peer; /* peer's REC_STATE for `attempt` received */
  struct gdr_rdma_rec_state peer;
  uint32_t peer_attempt_seen; /* highest attempt the peer named */
  /* counters (this connection) */
  uint64_t faults, recoveries, attempts, replayed_msgs, replayed_bytes, recover_ns, ignored_wcs;
  uint64_t faults_by_action[6];
  char first_fault[256];
};

/* The fallback to TCP and back (fallback.c). */
enum { GDR_PATH_RDMA = 0, GDR_PATH_MOVING, GDR_PATH_TCP };
enum { GDR_FB_IDLE = 0, GDR_FB_WAIT_RSTATE, GDR_FB_WAIT_SSTATE, GDR_FB_CONNECT, GDR_FB_DONE };
/* the way back: receiver NONE -> OFFERED -> PROBING -> FROZEN -> [AT_WAIT: P > R] -> AT -> SWITCHED; sender NONE
 * -> READY -> [AT_WAIT: P > R, its switch point not final] -> AT -> SWITCHED; SWITCHED -> (nothing left on TCP)
 * path RDMA, NONE. From FROZEN on, a fault is a new fallback (the peer may have switched). */
enum {
  GDR_BACK_NONE = 0,
  GDR_BACK_OFFERED,
  GDR_BACK_READY,
  GDR_BACK_PROBING,
  GDR_BACK_FROZEN,
  GDR_BACK_AT_WAIT,
  GDR_BACK_AT,
  GDR_BACK_SWITCHED
};
/* where the next message of a connection goes (gdr_rdma_fb_route) */
enum { GDR_ROUTE_RDMA = 0, GDR_ROUTE_TCP, GDR_ROUTE_WAIT };
#define GDR_FB_QUEUE (GDR_RDMA_SEND_REQS)
struct gdr_rdma_fb {
  int path;       /* GDR_PATH_* */
  int phase;      /* GDR_FB_* while moving */
  uint32_t epoch; /* fallbacks of this connection (both sides count alike) */
  uint64_t deadline_ns, since_ns;
  char reason[256];
  int tcp_dev;
  void *tcp_listen; /* receiver: the TCP listener announced in FB_RSTATE */
  struct gdr_handle tcp_handle;
  void *tcp; /* the TCP comm */
  struct gdr_rdma_fb_rstate rstate;
  int have_rstate;
  /* requests to hand to TCP, in message order, before any new one */
  struct gdr_rdma_req *queue[GDR_FB_QUEUE];
  int qhead, qtail;
  uint64_t replayed_msgs, replayed_bytes;
  uint64_t move_msgs0, move_bytes0; /* the two above when the current move began */
  /* back to RDMA */
  int back; /* GDR_BACK_* */
  uint64_t probe_ns, probe_backoff_ns;
  uint32_t offer;     /* the number of the current offer (a in BACK_*) */
  int probes;         /* receiver: probe WRITEs still to complete */
  uint64_t switch_at; /* the sum of the per-tag switch point (logs) */
  /* per tag, TCP messages of the whole connection: sender: R from BACK_SWITCH (AT_WAIT: tag t goes over TCP below
   * R_t, else waits), then F from BACK_FINAL (SWITCHED: over TCP below F_t, else over RDMA); receiver: S from
   * BACK_AT (AT_WAIT: its receives go over TCP until they cover S) */
  struct gdr_rdma_back_tag bound[GDR_RDMA_BACK_MAX_TAGS];
  int nbound;
  uint64_t told;   /* receiver, AT_WAIT: the sum of the counts it last sent (BACK_SWITCH again when it grew) */
  int tcp_pending; /* requests on TCP not yet complete */
  uint64_t probes_failed;
  uint64_t flap_ns[8];
  int nflaps;
  int pinned; /* stays on TCP for good (flapped too often, or cannot return) */
  /* counters */
  uint64_t fallbacks, returns, tcp_ns, tcp_bytes;
};

/* One device of a connection: a fused device's connection has several (QP i on device i % ndevs, as NCCL's IB). */
struct gdr_rdma_member {
  struct gdr_rdma_dev *dev;
  int devidx;
  union ibv_gid gid; /* this side's address on it as used by this incarnation */
  uint16_t lid;
  int gid_index;
  /* the connection's own buffers on it: what the peer writes into (sender: the CTS FIFO; receiver: the sizes
   * array), what this side writes from (sender: the sizes rows; receiver: the CTS entries), the flush's byte */
  struct ibv_mr *fifo_mr, *sizes_src_mr, *cts_src_mr, *sizes_mr, *flush_mr;
  struct gdr_rdma_link link; /* on dev->comms */
};

/* Sender: the work requests waiting for room in the send queues, in post order (a message's stripes are cut into
 * WRs of at most max_wr bytes: a long one does not fit at once). Dropped with the QP set they were for. */
enum { GDR_PQ_PART = 1, GDR_PQ_IMM };
struct gdr_rdma_pq_item {
  uint8_t kind, slot, r, p; /* GDR_PQ_*, the message's slot, its part, the next stripe to post */
  uint32_t rsvd;
  uint64_t off; /* bytes of stripe p already posted */
};
#define GDR_RDMA_PQ 512 /* >= 32 messages x (8 parts + 1) */
struct gdr_rdma_pq {
  unsigned head, tail, gen; /* gen: the QP set (qs_gen) the items are for */
  struct gdr_rdma_pq_item it[GDR_RDMA_PQ];
};

struct gdr_rdma_comm {
  int kind;                 /* GDR_RCOMM_* */
  struct gdr_rdma_dev *dev; /* m[0]'s: names, counters */
  int devidx;
  int ndevs; /* devices the connection runs on (m[]) */
  struct gdr_rdma_member m[GDR_RDMA_MAX_CONN_DEVS];
  char desc[256]; /* "RDMA send connection to 10.0.0.2:5000 (mlx5_0 port 1)", for WARN lines */

  /* control channel */
  int fd;
  char peer[GDR_ADDR_STRLEN];
  struct gdr_rdma_ctrl ctrl_in;
  size_t ctrl_in_off; /* over header + payload */
  uint8_t ctrl_payload[GDR_RDMA_CTRL_MAX_PAYLOAD];
  uint8_t ctrl_out[4096]; /* records not yet written (non-blocking socket) */
  size_t ctrl_out_len, ctrl_out_off;
  uint64_t ctrl_next_check_ns;
  uint64_t eof_ns;        /* when the peer's EOF (or BYE) was seen (0: not seen) */
  uint64_t peer_bye_head; /* BYE's seq: messages the peer posted before it closed */
  int peer_gone;          /* EOF or BYE seen */

  /* handshake */
  int stage;
  uint64_t deadline_ns;
  struct gdr_connector connector;
  struct gdr_blob_io bio;
  struct gdr_rdma_hs local, remote;
  uint32_t ready_word;

  /* verbs */
  struct gdr_rdma_qpset qs;
  unsigned qs_gen; /* incremented with every new qpset (under dev->lock: the async thread reads qs) */
  int drain_seen;  /* quiesce: the markers' completions polled so far */
  int nqps, split, nparts;
  enum ibv_mtu mtu;                  /* the smallest path MTU of its QPs */
  uint64_t max_wr;                   /* the longest work request: both sides' max_msg, a multiple of 128 */
  uint8_t qp_ldev[GDR_RDMA_MAX_QPS]; /* QP i's device on this side (i % ndevs) and on the peer's (i % remote.ndevs) */
  uint8_t qp_rdev[GDR_RDMA_MAX_QPS];

  int tc; /* the communicator's traffic class (-1 undefined): see gdr_rdma_traffic_class */

  struct gdr_health health;
  const struct gdr_rdma_up *up;    /* the resiliency layer it reports to (set when connect/accept return it) */
  struct gdr_rdma_pending pending; /* from the async thread */
  struct gdr_rdma_rec rec;
  struct gdr_rdma_fb fb;
  int tcp_only; /* the RDMA part could not be set up at connect: TCP from the start */

  uint64_t head; /* next message sequence number */

  /* sender */
  struct gdr_cts_slot *fifo;        /* written by the receiver */
  struct gdr_sizes_slot *sizes_src; /* sizes of grouped sends, source of the WRITE_WITH_IMM */
  uint64_t rsizes_addr;
  uint32_t rsizes_rkey[GDR_RDMA_MAX_CONN_DEVS]; /* on each of the receiver's devices */
  struct gdr_rdma_smsg smsg[GDR_RDMA_FIFO_SLOTS];
  struct gdr_rdma_pq pq;

  /* receiver */
  struct gdr_cts_slot *cts_src; /* staging of the entries the receiver writes (kept: recovery writes them again) */
  struct gdr_sizes_slot *sizes; /* written by the sender (grouped receives) */
  uint64_t rfifo_addr;
  uint32_t rfifo_rkey[GDR_RDMA_MAX_CONN_DEVS]; /* on each of the sender's devices */
  struct gdr_rdma_req *recv_slot[GDR_RDMA_FIFO_SLOTS];
  int gdr_flush; /* receiver on a GDR device: flushes with a loopback READ */
  void *flush_buf;
  struct ibv_mr *flush_mr;

  int nreqs_alloc;
  struct gdr_rdma_req *reqs;
  int nreqs_pool;

  /* service.c: the owner's calls (every entry of the table, under svc_mu) and the idle-peer service's view */
  pthread_mutex_t svc_mu;
  uint64_t svc_calls; /* test() calls of the owner so far (under svc_mu) */
  uint64_t svc_seen;  /* svc_calls at the service's last look (under svc_mu) */
  uint64_t svc_id;    /* 0: not attached; else its key in the service's epoll set */
  int svc_watch;      /* a record arrived, or a recovery or move runs: looked at every tick (under the list lock) */
  int svc_fresh;      /* watched since this tick: its owner gets one tick to read the record itself */
  int svc_acted;      /* the service progressed it in this watch (one INFO line per watch) */
  int svc_hup;        /* its channel's EOF or error arrived: looked at until it is read (under the list lock) */
};

struct gdr_rdma_listen {
  int dev;
  int tc;                                  /* the communicator's traffic class for the accepted comms (-1 undefined) */
  int ndevs, devs[GDR_RDMA_MAX_CONN_DEVS]; /* the devices of the accepted comms */
  struct gdr_listener l;
  struct gdr_rdma_comm *pending; /* the connection being accepted */
  void *door; /* the TCP door (sock.h): a TCP listen comm where peers without RDMA connect, or NULL */
  struct gdr_handle door_handle; /* its TCP handle */
};

/* Key recovery: whose own buffers (sender: CTS FIFO, sizes rows; receiver: sizes array, CTS staging, flush byte)
 * are registered again. On the wire (REC_REQ/REC_STATE's `a`): the roles; 0 from a peer = it does not say. */
#define GDR_REKEY_SEND 0x1u /* the sender's */
#define GDR_REKEY_RECV 0x2u /* the receiver's */
/* relative to the side that saw the fault (classify.c) */
#define GDR_REKEY_LOCAL 0x1u
#define GDR_REKEY_REMOTE 0x2u
static inline unsigned gdr_rekey_role_bit(int kind) { return kind == GDR_RCOMM_SEND ? GDR_REKEY_SEND : GDR_REKEY_RECV; }

/* classify.c: the RDMA rows of the fault classification (health.h) */
/* GDR_REKEY_LOCAL and/or GDR_REKEY_REMOTE: whose key a completion status names. */
unsigned gdr_rdma_rekey_side_wc(int status);
const struct gdr_fault_class *gdr_rdma_fault_wc(int status);
const struct gdr_fault_class *gdr_rdma_fault_event(int event);
const struct gdr_fault_class *gdr_rdma_fault_wc_table(int *n);
const struct gdr_fault_class *gdr_rdma_fault_event_table(int *n);

/* The GRH traffic class of a connection's QPs, NCCL's IB precedence: GDRNET_IB_TC /
 * NCCL_IB_TC when set, else the communicator's (comm_tc, -1 undefined), else the knob's default. */
static inline int gdr_rdma_traffic_class(int comm_tc) {
  if (comm_tc < 0 || gdr_param_source(GDR_PARAM_IB_TC) != GDR_PSRC_DEFAULT) return (int)gdr_param_int(GDR_PARAM_IB_TC);
  return comm_tc & 0xff;
}

/* The TCP transport's options for a connection this RDMA comm carries over TCP: the communicator's traffic class
 * (-1 undefined) is kept. */
/* GDR_CAP_* of this process: RDMA, and TCP for peers without RDMA unless GDRNET_TRANSPORT=rdma or no TCP transport */
static inline uint32_t gdr_rdma_caps(void) { return gdr_caps_local(GDR_TP_RDMA, gdr_rdma.tcp_ok); }

static inline struct gdr_conn_opts gdr_rdma_tcp_opts(int tc) {
  struct gdr_conn_opts o = gdr_conn_opts_one(gdr_rdma.tcp_dev);
  o.traffic_class = tc;
  o.caps = gdr_rdma_caps();
  return o;
}

/* A control record's handler: the header is checked (gdr_rdma_ctrl_check), the payload complete. */
typedef ncclResult_t gdr_rdma_record_handler(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m,
                                             const void *payload);
typedef gdr_rdma_record_handler *gdr_rdma_record_fn;

/* What the layers below the resiliency layer hand up to it, without naming it (they call down only): the faults the
 * data path finds, and the control records of recovery, fallback and the way back, one handler per type (the
 * control channel's reader, conn.c, handles SIZE_ERR and BYE itself). recover.c defines the one instance,
 * gdr_rdma_resiliency; the transport's table (transport.c) hands it to every connection connect/accept return. */
struct gdr_rdma_up {
  /* a failed post or completion: recover, move to TCP, or fail (rekey: GDR_REKEY_* for a key fault, else 0) */
  void (*fault)(struct gdr_rdma_comm *c, int action, unsigned rekey, ncclResult_t res, const char *why);
  gdr_rdma_record_fn record[GDR_CTRL_TYPE_MAX + 1];
};

/* qpset.c: the QP API, one way for every user (qpset.c's top comment). */
/* One end of an RC connection as the transitions need it: the QP number and PSN (near end: its send PSN), the LID,
 * the GID (16 bytes) and, at the near end, its index. */
struct gdr_rdma_qp_end {
  uint32_t qpn, psn;
  uint16_t lid;
  int gid_index;
  const uint8_t *gid;
};
/* The port's active MTU as it is now (a recovery's refresh may change it, under the device's lock). */
int gdr_rdma_dev_mtu(struct gdr_rdma_dev *d);
/* One RC QP on d's PD, both queues on cq (context: its qp_context), max_inline_data GDR_RDMA_INLINE if the provider
 * takes it (*max_inline: what it took; may be NULL). NULL (a WARN) on failure. */
struct ibv_qp *gdr_rdma_qp_create(struct gdr_rdma_dev *d, struct ibv_cq *cq, void *context, int max_send, int max_recv,
                                  int *max_inline);
/* RESET -> INIT on d's port with these access flags; INIT -> RTR -> RTS from near towards far (path MTU mtu, the GRH's
 * traffic class); -> ERR. 0, or the errno of the failed ibv_modify_qp (a WARN names it; not for ERR). */
int gdr_rdma_qp_init(const struct gdr_rdma_dev *d, struct ibv_qp *qp, int access);
int gdr_rdma_qp_rts(struct ibv_qp *qp, const struct gdr_rdma_dev *d, const struct gdr_rdma_qp_end *near,
                    const struct gdr_rdma_qp_end *far, enum ibv_mtu mtu, int traffic_class);
int gdr_rdma_qp_err(struct ibv_qp *qp);
/* A connection's set: make (a CQ per device + data QPs in INIT, QP i on device i % ndevs, + a flush QP connected to
 * itself per device on a GDR receiver: RTS), connect the data QPs to the peer's (RTR, RTS; QP i towards the peer's
 * device i % rndevs; c->mtu the smallest path MTU), destroy (QPs, then CQs), poll (every CQ of the set: up to n
 * completions into wc; < 0 on a failed poll). */
ncclResult_t gdr_rdma_qpset_make(struct gdr_rdma_comm *c, struct gdr_rdma_qpset *qs);
ncclResult_t gdr_rdma_qpset_connect(struct gdr_rdma_comm *c, struct gdr_rdma_qpset *qs, const uint32_t *rqpn,
                                    const uint32_t *rpsn, const struct gdr_rdma_addr *rdev, int rndevs);
void gdr_rdma_qpset_destroy(struct gdr_rdma_qpset *qs);
int gdr_rdma_poll_cqs(struct gdr_rdma_qpset *qs, int n, struct ibv_wc *wc);

/* conn.c */
/* opts: the connection's devices (ndevs > 1: a fused device, its QPs spread over them) and its traffic class (the
 * accepted recv comms get the listen's). */
ncclResult_t gdr_rdma_listen(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **listen_comm);
ncclResult_t gdr_rdma_connect(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **send_comm);
ncclResult_t gdr_rdma_accept(void *listen_comm, void **recv_comm);
ncclResult_t gdr_rdma_close_send(void *send_comm);
ncclResult_t gdr_rdma_close_recv(void *recv_comm);
int gdr_rdma_describe(void *comm, struct gdr_conn_desc *out); /* transport.h describe (conn.c) */
ncclResult_t gdr_rdma_close_listen(void *listen_comm);
/* The connection gives up (first reason wins); thread-safe. */
void gdr_rdma_comm_fail(struct gdr_rdma_comm *c, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The error a comm's calls return once it failed (WARNs the reason once). ncclSuccess if not failed. */
ncclResult_t gdr_rdma_comm_check(struct gdr_rdma_comm *c);
/* "::ffff:10.0.0.1" (RoCE GID) or "LID 5" (IB) of this side (remote = 0) or of the peer (remote = 1). */
void gdr_rdma_addr_str(const struct gdr_rdma_comm *c, int remote, char *buf, size_t len);
/* Reads what the peer said on the control channel and writes what is queued (non-blocking); every record goes to
 * its handler (SIZE_ERR, BYE: here; the others: c->up). */
ncclResult_t gdr_rdma_ctrl_poll(struct gdr_rdma_comm *c);
/* The peer's EOF (or BYE) was seen more than GDR_RDMA_EOF_GRACE_NS ago (completions may trail its close): the
 * connection fails. 1 when it has failed (now or before), else 0. */
#define GDR_RDMA_EOF_GRACE_NS 1000000000ull
int gdr_rdma_ctrl_eof(struct gdr_rdma_comm *c);
/* Queues one control record (+ payload) and writes what the socket takes now. */
ncclResult_t gdr_rdma_ctrl_send(struct gdr_rdma_comm *c, int type, uint64_t seq, uint64_t a, uint64_t b,
                                const void *payload, size_t len);
/* The connection's next QP set: its own MRs that are missing registered first (else no set), then
 * gdr_rdma_qpset_make (qpset.c). */
ncclResult_t gdr_rdma_qpset_create(struct gdr_rdma_comm *c, struct gdr_rdma_qpset *qs);
/* Puts `in` (NULL: no set) in place of the comm's QP set, the old one into *out (may be NULL), under the lock of
 * every device of the connection (their async threads read it); a new generation. */
void gdr_rdma_qs_swap(struct gdr_rdma_comm *c, const struct gdr_rdma_qpset *in, struct gdr_rdma_qpset *out);
/* This side's QPs, its devices' addresses and its own buffer's address and keys (REC_STATE, BACK_*). */
void gdr_rdma_fill_qp_state(struct gdr_rdma_comm *c, struct gdr_rdma_rec_state *st);
/* The comm's QPs to RTS towards the peer's new ones (st: its REC_STATE/BACK_* payload, already checked), whose
 * addresses and buffer keys become the peer's. 0, or -1 (the device count differs, a QP transition failed). */
int gdr_rdma_connect_peer(struct gdr_rdma_comm *c, const struct gdr_rdma_rec_state *st);
/* Every device's port as it is now (gdr_rdma_dev_refresh): *active when all are ACTIVE; the addresses of this
 * incarnation refreshed. 0, or an errno of ibv_query_port. */
int gdr_rdma_comm_refresh(struct gdr_rdma_comm *c, int *active);
/* Releases the registrations of the connection's own buffers (its device is lost). */
void gdr_rdma_dereg_own(struct gdr_rdma_comm *c);
/* Registers the connection's own buffers again, for new keys. On failure what could not be registered stays NULL
 * (gdr_rdma_qpset_create registers it before it makes QPs, or makes none). */
ncclResult_t gdr_rdma_rekey(struct gdr_rdma_comm *c);
/* Every own MR of the connection (FIFO and sizes rows, or sizes array, CTS staging and flush byte) is registered. */
int gdr_rdma_own_registered(const struct gdr_rdma_comm *c);

/* p2p.c: the RDMA data path. It never calls up: a fault goes to c->up->fault. */
/* A fault, as one line, goes up to c->up->fault (recover, move to TCP, or fail): the data path's (failed posts and
 * completions) and those a control record names (recover.c); a connection handed to none (a comm built by hand, as a
 * unit harness does) fails unless the action is GDR_FAULT_NONE. */
void gdr_rdma_fault(struct gdr_rdma_comm *c, int action, unsigned rekey, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An isend / irecv over RDMA (the connection is not recovering, not on TCP): the request, or NULL (no clear-to-send
 * yet, no free request, 32 receives in flight: try again). irecv's n is checked by the caller. */
ncclResult_t gdr_rdma_dp_isend(struct gdr_rdma_comm *c, void *data, size_t size, int tag, void *mhandle,
                               void **request);
ncclResult_t gdr_rdma_dp_irecv(struct gdr_rdma_comm *c, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                               void **request);
/* The GDR flush READs of a receive on RDMA (busy: a recovery runs, which posts them with the rest). */
ncclResult_t gdr_rdma_dp_iflush(struct gdr_rdma_comm *c, int n, void **data, int *sizes, void **mhandles, int busy,
                                void **request);
/* A request whose completions are all in: its sizes (a grouped receive's from the sizes row, checked), released,
 * *done = 1. */
ncclResult_t gdr_rdma_dp_done(struct gdr_rdma_req *r, int *done, size_t *sizes);
/* QPs to ERR, CQ drained (successes applied), the QP set destroyed (recovery and fallback both stop RDMA so). */
void gdr_rdma_quiesce_qps(struct gdr_rdma_comm *c);
/* Release of a request. */
void gdr_rdma_req_release(struct gdr_rdma_comm *c, struct gdr_rdma_req *r);
/* Polls the comm's CQ until it is empty, applying every successful completion; the first failed one (and any
 * other fault seen) starts a recovery. *progress = completions seen (may be NULL). */
ncclResult_t gdr_rdma_poll(struct gdr_rdma_comm *c, int *progress);
/* Posting, for the data path and for replay after a recovery. A sender's parts and immediates are queued in post
 * order and posted as far as the send queues have room (the rest as completions free it: gdr_rdma_poll); their
 * requests count every WR at once. */
ncclResult_t gdr_rdma_post_part(struct gdr_rdma_comm *c, int slot, int r);
ncclResult_t gdr_rdma_post_imm(struct gdr_rdma_comm *c, int slot);
ncclResult_t gdr_rdma_post_recv_wrs(struct gdr_rdma_comm *c, struct gdr_rdma_req *req);
ncclResult_t gdr_rdma_post_cts(struct gdr_rdma_comm *c, struct gdr_rdma_req *req);
ncclResult_t gdr_rdma_post_flush(struct gdr_rdma_comm *c, struct gdr_rdma_req *req);
/* The request pool: a free request, or NULL (every one is in use). */
struct gdr_rdma_req *gdr_rdma_req_get(struct gdr_rdma_comm *c);

/* fallback.c */
/* May this connection move to TCP (GDRNET_FALLBACK=1, the peer speaks it, a TCP device exists)? */
int gdr_rdma_fb_allowed(const struct gdr_rdma_comm *c);
/* Moves the connection to TCP (both sides agree on what was delivered; the rest goes over TCP exactly once). */
void gdr_rdma_fb_begin(struct gdr_rdma_comm *c, const char *why);
/* FB_* and BACK_* records from the peer, one handler per type (gdr_rdma_resiliency's table). */
gdr_rdma_record_handler gdr_rdma_fb_on_req, gdr_rdma_fb_on_rstate, gdr_rdma_fb_on_sstate;
gdr_rdma_record_handler gdr_rdma_back_on_offer, gdr_rdma_back_on_ready, gdr_rdma_back_on_not_yet;
gdr_rdma_record_handler gdr_rdma_back_on_switch, gdr_rdma_back_on_at, gdr_rdma_back_on_final;
/* Progress while moving or on TCP: the TCP connection, the requests handed over, the way back. *busy while
 * moving (the caller waits). */
void gdr_rdma_fb_step(struct gdr_rdma_comm *c, int *busy);
/* Does a new isend/irecv go over TCP now? */
int gdr_rdma_fb_route(struct gdr_rdma_comm *c, int tag); /* tag: the isend's (a receiver's call: any) */
ncclResult_t gdr_rdma_fb_isend(struct gdr_rdma_comm *c, void *data, size_t size, int tag, void *mhandle,
                               void **request);
ncclResult_t gdr_rdma_fb_irecv(struct gdr_rdma_comm *c, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                               void **request);
ncclResult_t gdr_rdma_fb_test(struct gdr_rdma_req *r, int *done, size_t *sizes);
void gdr_rdma_fb_close(struct gdr_rdma_comm *c);
void gdr_rdma_fb_report(struct gdr_rdma_comm *c);
/* A fault while the connection is on TCP or moving: handled there (a failed way back), 1; else 0 (recover.c). */
int gdr_rdma_fb_absorb(struct gdr_rdma_comm *c, int action, const char *why);

/* recover.c: the top of the resiliency layer */
/* The resiliency step, as NCCL's ncclIbResiliencyProgress: called from test (and by the idle-peer service) only:
 * takes faults from the async thread, reads the control channel now and then, drives a recovery in progress, the
 * move to TCP and the way back, and the peer's EOF. Returns ncclSuccess, or the comm's error once it failed.
 * *busy = 1 while a recovery or a move is in progress (the caller then waits: NULL request, done = 0). */
ncclResult_t gdr_rdma_progress(struct gdr_rdma_comm *c, int *busy);
/* One INFO line with the connection's counters, when anything happened (close). */
void gdr_rdma_rec_report(struct gdr_rdma_comm *c);
/* The layer's face (struct gdr_rdma_up, above). */
extern const struct gdr_rdma_up gdr_rdma_resiliency;
/* Before the connection's close (conn.c): the fallback's TCP comm closed, the counters reported. */
void gdr_rdma_resil_close(struct gdr_rdma_comm *c);

/* transport.c: the entries NCCL's calls reach (each under the connection's lock): isend/irecv/iflush post over RDMA,
 * or route to TCP (fallback.c), or say "try again" while a recovery or a move runs; test drives the resiliency
 * (gdr_rdma_progress), the posting entries only while there is resiliency work (transport.c, gate). */
ncclResult_t gdr_rdma_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request);
ncclResult_t gdr_rdma_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                            void **request);
ncclResult_t gdr_rdma_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request);
ncclResult_t gdr_rdma_test(void *request, int *done, size_t *sizes);

/* service.c (the top: called by transport.c's table only) */
/* The connection joins the service (connect/accept returned it) / leaves it (before close: waits for a pass of the
 * service in progress on it; the last one joins the thread). */
ncclResult_t gdr_rdma_svc_attach(struct gdr_rdma_comm *c);
void gdr_rdma_svc_detach(struct gdr_rdma_comm *c);
/* Around every isend/irecv/iflush/test of the connection's owner; test (which drives the resiliency) counts as a
 * call that progressed it: the service leaves a connection alone whose owner tests it. */
static inline void gdr_rdma_svc_enter(struct gdr_rdma_comm *c) { pthread_mutex_lock(&c->svc_mu); }
static inline void gdr_rdma_svc_enter_test(struct gdr_rdma_comm *c) {
  pthread_mutex_lock(&c->svc_mu);
  c->svc_calls++;
}
static inline void gdr_rdma_svc_leave(struct gdr_rdma_comm *c) { pthread_mutex_unlock(&c->svc_mu); }

#endif /* GDRNET_RDMA_RDMA_H */
