/* The one-sided RDMA path (gin/gin_int.h): one RC QP per rank (itself included) on the comm's device, brought up
 * over the message path (tcp_os.c: GIN_OP_QP with the QP's address, then GIN_OP_QP_READY once it is RTS).
 *   put     RDMA WRITEs (cut at the port's max_msg_sz), the last one signaled; its completion is the request's.
 *   signal  after the data, on the same QP: a WRITE_WITH_IMM of a 32-byte record {window, offset, value} into the
 *           target's inbox for this initiator (a ring of GIN_RDMA_RING records, slot = imm). The target's progress
 *           polls the receive completion, which RC orders after the data's placement, and applies the record
 *           (gin_apply_signal), so a signal is never seen before its data. The target gives the ring's slots
 *           back by RDMA-writing the count it applied into the initiator's credit word (every quarter ring).
 *           (An RDMA atomic where the device reports atomic_cap would do without the target's progress; the
 *           WRITE_WITH_IMM is the one that works on every device and on the verbs emulator.)
 *   get     RDMA READs into the local window.
 *   flush   an 8-byte READ of the target's inbox, signaled: it completes after every earlier WRITE on the QP.
 * Recovery in place (the net core's terms: GDRNET_RECOVERY_ATTEMPTS, GDRNET_RECOVERY_TIMEOUT_MS). Every operation is
 * kept, in post order per peer, until its completion. A failed completion towards a peer (or the peer's word that
 * it recovers) starts an attempt of epoch e: the QP to ERR, a marker on its send and receive queues, the queues
 * drained (completions that succeeded still count, signals that arrived are applied); then a new QP, a full ring of
 * receives, and GIN_OP_QP{RECOVER, e, the count of the peer's signals this side applied} over the message path;
 * with the peer's: RTR/RTS and GIN_OP_QP_READY{RECOVER, e}; with the peer's READY the operations not completed are
 * posted again, in order. What the peer's count shows applied is not: a put or flush at or before the last signal
 * it applied is complete (RC placed it before that signal), so no signal is applied twice and no data is written
 * again after a signal the target may have acted on; gets are read again. Operations issued meanwhile wait in the
 * list (a flush is never answered "try again"). Attempts exhausted, the time bound passed or a QP that cannot be
 * made: with GDRNET_FALLBACK=1 the peer moves to the message path (below); with GDRNET_FALLBACK=0, or an RDMA atomic
 * signal in flight (GDRNET_GIN_SIGNAL=atomic: whether it was applied cannot be known), the comm fails (sticky): test
 * returns the error, queryLastError reports it.
 * The move to the message path, per peer, once. The side whose recovery failed stops the QP and drains it as an
 * attempt does (or lets the attempt's drain under way finish), destroys it and sends GIN_OP_MOVE{aux: the count of
 * the peer's signals it applied} over the message path; a side that gets GIN_OP_MOVE does the same in whatever state
 * it is (a recovery under way ends: its messages are ignored from then on). Each side sends one GIN_OP_MOVE, so two
 * that cross need nothing more. With the peer's count in and this side's QP gone, the listed operations follow the
 * rule of replay (a put or flush at or before the last signal the peer applied is complete, gets are read again)
 * and the rest go as messages (tcp_os.c), in order, as the FIFO has room. Until the list is empty new operations
 * towards the peer are listed behind (rdma_carries), then core.c sends them down the message path: nothing
 * passes an operation issued before it, and the messages apply each put's data before its signal. No answer
 * within GDRNET_RECOVERY_TIMEOUT_MS fails the comm. Everything runs under the comm's lock and never blocks. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "connstat.h"
#include "core.h"
#include "gin/gin_int.h"
#include "log.h"
#include "sock.h"

#ifdef GDRNET_HAVE_RDMA
#include "rdma/gid.h"
#include "rdma/rdma.h"

/* Send queue per QP: 8192 (or the device's max_qp_wr), room for every context's queue (GDR_GIN_MAX_CONTEXTS x
 * NCCL's 256 per rank), two work requests each (a put and its signal), and the credits' lag (a quarter of the ring
 * at most). Signal ring per peer (= the QP's receive queue): as deep, within GIN_RDMA_RING_BUDGET slots over all
 * peers (inbox + outbox: 64 bytes a slot). One CQ takes every QP's both queues, within the smaller of the device's
 * max_cqe and GIN_RDMA_CQE_BUDGET (2^20 entries: 64 MiB of pinned CQEs at mlx5's 64 bytes, where a device's 2^22
 * would pin 256 MiB per rank): past it the send queues, then the rings, shrink (n x (sq + ring) + 64 <= it). The
 * send queues keep 8192 up to 95 ranks; at 512 a peer gets 1535 and 512 ring slots. Below GIN_RDMA_MIN_Q either,
 * the comm's operations are messages (tcp_os.c), said in a WARN. A full send queue or ring answers "try again".
 * Every rank computes the same sizes from n and the device; the ring goes in the QP address and a peer with another
 * fails. */
#define GIN_RDMA_QDEPTH 8192
#define GIN_RDMA_RING_BUDGET (1 << 18)
#define GIN_RDMA_CQE_BUDGET (1 << 20)
#define GIN_RDMA_MIN_Q 64
#define GIN_RDMA_RING (c->rdma->ring)
#define GIN_RDMA_SQ (c->rdma->sq)
#define GIN_REC_MAGIC 0x53524447u

enum { WR_USER = 1, WR_CREDIT = 2, WR_MARK = 3 };
#define GIN_DRAIN_NS 1000000000ull /* markers not back within 1 s: the QP is destroyed regardless */

/* an operation on this path, kept from its issue to its completion (index = its request's pool index) */
struct rop {
  struct gin_op op;
  int posted_once;
  uint64_t seq; /* its signal's number towards the peer (WRITE_WITH_IMM signals) */
  int nwr;      /* work requests it takes */
  int next;     /* the peer's next operation in issue order, -1 */
  uint64_t t0;  /* its issue (connstat's clock), with the peer's record; 0 without */
};

/* a peer's QP: running, or an attempt of recovery (drain the old QP, wait for the peer's new one, wait for its READY),
 * or gone: the peer moved to the message path */
enum { RS_OK = 0, RS_DRAIN, RS_WAIT, RS_READY, RS_MOVED };
/* the move to the message path: the QP stopped and drained (RS_DRAIN), this side's GIN_OP_MOVE to be queued, the
 * peer's awaited, then on the message path (the listed operations go as messages as the FIFO has room) */
enum { MV_NONE = 0, MV_STOP, MV_SEND, MV_WAIT, MV_ON };

struct sig_rec {
  uint32_t mr;
  uint32_t magic;
  uint64_t off;
  uint64_t val;
  uint64_t seq;
};
_Static_assert(sizeof(struct sig_rec) == 32, "signal record is 32 bytes");

struct qpinfo {
  uint32_t qpn, psn;
  uint16_t lid;
  uint8_t mtu, link_layer;
  uint32_t inbox_rkey;
  uint8_t gid[16];
  uint64_t inbox_va;
  uint64_t credit_va;
  uint32_t credit_rkey;
  uint32_t ring; /* the sender's signal ring (0: an older plugin's, min(max_qp_wr, GIN_RDMA_QDEPTH)) */
};
_Static_assert(sizeof(struct qpinfo) == GIN_QPINFO_BYTES, "GIN_QPINFO_BYTES is struct qpinfo's size");

/* a control header towards peer over the message path, behind what is queued to it; 0: no room */
static int say(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload, size_t len) {
  return c->path[GIN_PATH_MSG]->say(c, peer, h, payload, len);
}

const char *gin_rdma_qpinfo_check(const void *payload) {
  struct qpinfo q;
  memcpy(&q, payload, sizeof(q));
  if (q.qpn == 0 || q.qpn > 0xffffffu) return "a QP number outside 24 bits";
  if (q.psn > 0xffffffu) return "a PSN outside 24 bits";
  if (q.mtu < IBV_MTU_256 || q.mtu > IBV_MTU_4096) return "an MTU that is not 1..5";
  if (q.link_layer != IBV_LINK_LAYER_INFINIBAND && q.link_layer != IBV_LINK_LAYER_ETHERNET) return "no link layer";
  return NULL;
}

struct rpeer {
  struct ibv_qp *qp;
  uint32_t psn;
  int sq_used;
  uint64_t sig_sent; /* records written into its inbox */
  uint64_t consumed; /* its records this side applied */
  uint64_t credit_sent;
  int credit_inflight;
  int have_remote, ready;
  int remote_off; /* bring-up: its GIN_OP_QP came empty, it cannot */
  struct qpinfo remote;
  /* recovery */
  int head, tail; /* its operations in issue order (struct rop indices), -1: none */
  int listed_wr;  /* work requests of the listed operations (posted or waiting for a recovery) */
  int rs;         /* RS_* */
  uint32_t epoch;
  int marks, attempts;
  int episode; /* from a fault until an operation completes on a recovered QP: attempts and the bound count on */
  uint64_t t_fault, drain_until, rec_until;
  uint64_t remote_consumed; /* the peer's count of this side's signals it applied, from its GIN_OP_QP{RECOVER} or
                             * GIN_OP_MOVE */
  int mv;                   /* MV_* */
  int mv_heard;             /* the peer's GIN_OP_MOVE is in (its count in remote_consumed) */
  uint64_t mv_until;        /* the peer's GIN_OP_MOVE awaited until then (GDRNET_RECOVERY_TIMEOUT_MS) */
  /* its per-connection record (connstat.h, "rdma-gin": the stall detector, the stats file, gdrnet-top) from the
   * bring-up to the teardown, NULL without (a peer on the message path from the start is the net core's) */
  struct gdr_connstat *cs;
  struct gin_comm *c; /* for the record's describe */
  int rank;
};

struct gin_rdma {
  struct gdr_rdma_dev *d;
  struct ibv_cq *cq;
  struct rpeer *p;
  struct sig_rec *inbox, *outbox; /* nranks x ring: [initiator][slot] / [target][slot] */
  uint64_t *credits;              /* [target]: how many of this side's records it applied (it writes them) */
  uint64_t *credit_src;           /* [initiator]: the counts this side writes back */
  uint64_t scratch;
  struct ibv_mr *inbox_mr, *outbox_mr, *credits_mr, *credit_src_mr, *scratch_mr;
  size_t max_wr;
  int ring;        /* signal slots per peer = the receive queue */
  int sq;          /* send queue per QP */
  int off;         /* bring-up: this rank cannot (the peers' answers are still collected, then it is torn down) */
  int atomic;      /* signals are RDMA FETCH_AND_ADDs (GDRNET_GIN_SIGNAL=atomic on a device with atomic_cap) */
  struct rop *ops; /* [c->npool] */
};

static uint64_t wr_user(const struct gin_req *r) {
  return (uint64_t)WR_USER << 60 | (uint64_t)(r->gen & 0xfffffffu) << 32 | r->idx;
}

/* ------------------------------------------------------------------------------------------------- the QPs -- */
/* Every verbs call on a peer's QP's life is here: made (RESET -> INIT), connected (RTR, RTS) and moved to ERR through
 * rdma/'s QP API (qpset.c: the same verbs the RDMA connections' QPs go through), its receives, destroyed (the work
 * posted on it is the data path's, below). Nothing else makes, moves or destroys one. */

static ncclResult_t qp_create(struct gin_rdma *g, struct rpeer *p) {
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     (g->atomic ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  p->qp = gdr_rdma_qp_create(g->d, g->cq, NULL, g->sq, g->ring, NULL);
  if (p->qp == NULL) return ncclSystemError; /* WARNed by the QP API */
  if (gdr_rdma_qp_init(g->d, p->qp, access) != 0) return ncclSystemError;
  if (gdr_random_bytes(&p->psn, sizeof(p->psn)) != ncclSuccess) p->psn = 0;
  p->psn &= 0xffffffu;
  return ncclSuccess;
}

/* INIT -> RTR -> RTS towards the peer's QP through rdma/'s QP API (the connections' own rule for the GRH; traffic
 * class 0: the GIN QPs carry none). */
static ncclResult_t qp_connect(struct gin_rdma *g, struct rpeer *p) {
  struct gdr_rdma_dev *d = g->d;
  const struct qpinfo *r = &p->remote;
  if (r->link_layer != d->link_layer) {
    GDR_WARN("GIN %s: the peer's device has another link layer", d->name);
    return ncclSystemError;
  }
  const struct gdr_rdma_qp_end near = {p->qp->qp_num, p->psn, d->lid, d->gid_index, d->gid.raw};
  const struct gdr_rdma_qp_end far = {r->qpn, r->psn, r->lid, 0, r->gid};
  const enum ibv_mtu mtu = (enum ibv_mtu)(r->mtu < d->active_mtu ? r->mtu : d->active_mtu);
  return gdr_rdma_qp_rts(p->qp, d, &near, &far, mtu, 0) == 0 ? ncclSuccess : ncclSystemError;
}

static int qp_post_recv(struct rpeer *p) {
  struct ibv_recv_wr rw, *bad = NULL;
  struct ibv_sge none = {0, 0, 0};
  memset(&rw, 0, sizeof(rw));
  rw.sg_list = &none; /* num_sge 0: a WRITE_WITH_IMM consumes no buffer */
  return gdr_ibv_post_recv(p->qp, &rw, &bad);
}

/* to ERR: what is posted completes, flushed (1), or the QP is not there or would not move (0) */
static int qp_to_err(struct rpeer *p) { return p->qp != NULL && gdr_rdma_qp_err(p->qp) == 0; }

static void qp_destroy(struct rpeer *p) {
  if (p->qp != NULL) (void)gdr_ibv.destroy_qp(p->qp);
  p->qp = NULL;
}

/* this side's end of the QP to a peer, as the peer needs it */
static void my_qpinfo(const struct gin_rdma *g, const struct rpeer *p, struct qpinfo *q) {
  memset(q, 0, sizeof(*q));
  q->qpn = p->qp->qp_num;
  q->psn = p->psn;
  q->lid = g->d->lid;
  q->mtu = (uint8_t)g->d->active_mtu;
  q->link_layer = (uint8_t)g->d->link_layer;
  memcpy(q->gid, g->d->gid.raw, 16);
  q->inbox_va = (uint64_t)(uintptr_t)g->inbox;
  q->inbox_rkey = g->inbox_mr->rkey;
  q->credit_va = (uint64_t)(uintptr_t)g->credits;
  q->credit_rkey = g->credits_mr->rkey;
  q->ring = (uint32_t)g->ring;
}

/* the queues' sizes (above); 0: they do not fit the device */
static int size_queues(struct gin_comm *c, struct gin_rdma *g, int max_cqe) {
  long cap = max_cqe < GIN_RDMA_CQE_BUDGET ? max_cqe : GIN_RDMA_CQE_BUDGET;
  long n = c->nranks, per = cap > 64 ? (cap - 64) / n : 0;
  long sq = g->d->max_qp_wr > 0 && g->d->max_qp_wr < GIN_RDMA_QDEPTH ? g->d->max_qp_wr : GIN_RDMA_QDEPTH;
  long ring = GIN_RDMA_RING_BUDGET / n < sq ? GIN_RDMA_RING_BUDGET / n : sq;
  if (ring < GIN_RDMA_MIN_Q) ring = GIN_RDMA_MIN_Q;
  if (sq + ring > per) {
    if (ring > per / 2) ring = per / 2;
    sq = per - ring < sq ? per - ring : sq;
  }
  g->sq = (int)sq;
  g->ring = (int)ring;
  return sq >= GIN_RDMA_MIN_Q && ring >= GIN_RDMA_MIN_Q;
}

static struct ibv_mr *reg(struct gin_rdma *g, void *buf, size_t len, int access) {
  return gdr_rdma_reg_internal(g->d, buf, len, access);
}

/* A peer whose net-core connections run over TCP from the start (a rank without RDMA, or a pair whose RDMA part could
 * not be set up; both ends of a connection see the same) has no QP: it is on the message path from the start. */
static int peer_tcp_only(const struct gin_comm *c, int r) {
  const struct gdr_rdma_comm *s = c->peers[r].send_tc, *v = c->peers[r].recv_tc;
  return (s != NULL && s->tcp_only) || (v != NULL && v->tcp_only);
}

static ncclResult_t rdma_progress(struct gin_comm *c);
static void rdma_teardown(struct gin_comm *c);

/* whether this comm runs the one-sided RDMA path: the net core runs RDMA and GDRNET_GIN_PATH allows (else an INFO,
 * and every operation is a message) */
static int rdma_wanted(const struct gin_comm *c) {
  const struct gdr_transport *tp = gdr_core_transport();
  if (tp != NULL && strcmp(tp->name, "rdma") == 0 && gdr_param_int(GDR_PARAM_GIN_PATH) != GDR_GIN_PATH_MESSAGES)
    return 1;
  GDR_INFO(NCCL_INIT | NCCL_NET, "GIN rank %d: one-sided operations as messages over the %s transport%s", c->rank,
           tp != NULL ? tp->name : "?", tp != NULL && !strcmp(tp->name, "rdma") ? " (GDRNET_GIN_PATH=messages)" : "");
  return 0;
}

/* c->rdma on the comm's device, its peers without a QP yet; the ones whose connections run over TCP are on the
 * message path from the start (no QP, no GIN_OP_QP) */
static ncclResult_t rdma_alloc(struct gin_comm *c) {
  ncclResult_t res = ncclSuccess;
  struct gdr_props props;
  struct gin_rdma *g;
  int pdev;
  GDR_CHECK(gdr_core_get_properties(c->dev, &props));
  pdev = props.vdev_ndevs > 0 ? props.vdev_devs[0] : c->dev;
  if (pdev < 0 || pdev >= gdr_rdma.ndevs) return ncclInternalError;
  g = calloc(1, sizeof(*g));
  if (g == NULL) return ncclSystemError;
  c->rdma = g;
  g->d = &gdr_rdma.devs[pdev];
  g->p = calloc((size_t)c->nranks, sizeof(*g->p));
  if (g->p == NULL) return ncclSystemError;
  for (int r = 0; r < c->nranks; r++) {
    struct rpeer *p = &g->p[r];
    p->head = p->tail = -1;
    if (peer_tcp_only(c, r)) {
      p->rs = RS_MOVED;
      p->mv = MV_ON;
      p->have_remote = p->ready = 1;
      GDR_INFO(NCCL_INIT | NCCL_NET,
               "GIN rank %d: rank %d's connections run over TCP: one-sided operations to it as messages", c->rank, r);
    }
  }
out:
  return res;
}

/* the device's limits: the queues' sizes (size_queues) and how signals go; 0 and why: they do not fit */
static int rdma_limits(struct gin_comm *c, struct gin_rdma *g, char *why, size_t len) {
  struct ibv_device_attr da;
  memset(&da, 0, sizeof(da));
  if (gdr_ibv.query_device(g->d->ctx, &da) != 0) {
    snprintf(why, len, "ibv_query_device failed: %s", strerror(errno));
    return 0;
  }
  if (!size_queues(c, g, da.max_cqe)) {
    snprintf(why, len, "%d ranks do not fit one CQ (max_cqe %d, max_qp_wr %d)", c->nranks, da.max_cqe, g->d->max_qp_wr);
    return 0;
  }
  if (gdr_param_int(GDR_PARAM_GIN_SIGNAL) == GDR_GIN_SIGNAL_ATOMIC) {
    if (da.atomic_cap != IBV_ATOMIC_NONE)
      g->atomic = 1;
    else
      GDR_INFO(NCCL_INIT | NCCL_NET,
               "GIN rank %d: GDRNET_GIN_SIGNAL=atomic, but %s reports no RDMA atomics "
               "(atomic_cap NONE): signals by WRITE_WITH_IMM",
               c->rank, g->d->name);
  }
  g->max_wr = g->d->max_msg > 0 && g->d->max_msg < ((size_t)1 << 30) ? g->d->max_msg : ((size_t)1 << 30);
  return 1;
}

/* the signal rings, the credit words, the operations' list, the CQ and the registrations; 0 and why: one failed */
static int rdma_rings(struct gin_comm *c, struct gin_rdma *g, char *why, size_t len) {
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  const size_t n = (size_t)c->nranks, ring = n * GIN_RDMA_RING * sizeof(struct sig_rec);
  const int cqe = c->nranks * (GIN_RDMA_SQ + GIN_RDMA_RING) + 64;
  g->inbox = calloc(n * GIN_RDMA_RING, sizeof(struct sig_rec));
  g->outbox = calloc(n * GIN_RDMA_RING, sizeof(struct sig_rec));
  g->credits = calloc(n, sizeof(uint64_t));
  g->credit_src = calloc(n, sizeof(uint64_t));
  g->ops = calloc(c->npool > 0 ? c->npool : 1, sizeof(*g->ops));
  if (!g->inbox || !g->outbox || !g->credits || !g->credit_src || !g->ops) {
    snprintf(why, len, "out of memory for the signal rings of %d ranks", c->nranks);
    return 0;
  }
  g->cq = gdr_ibv.create_cq(g->d->ctx, cqe, NULL, NULL, 0);
  if (g->cq == NULL) {
    snprintf(why, len, "ibv_create_cq(%d) failed: %s", cqe, strerror(errno));
    return 0;
  }
  g->inbox_mr = reg(g, g->inbox, ring, rw);
  g->outbox_mr = reg(g, g->outbox, ring, IBV_ACCESS_LOCAL_WRITE);
  g->credits_mr = reg(g, g->credits, n * sizeof(uint64_t), rw);
  g->credit_src_mr = reg(g, g->credit_src, n * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE);
  g->scratch_mr = reg(g, &g->scratch, sizeof(g->scratch), IBV_ACCESS_LOCAL_WRITE);
  if (!g->inbox_mr || !g->outbox_mr || !g->credits_mr || !g->credit_src_mr || !g->scratch_mr) {
    snprintf(why, len, "the signal rings could not be registered");
    return 0;
  }
  return 1;
}

/* a QP to every peer on RDMA, with a full ring of receives; 0 and why: one could not be made */
static int rdma_qps(struct gin_comm *c, struct gin_rdma *g, char *why, size_t len) {
  for (int r = 0; r < c->nranks; r++) {
    struct rpeer *p = &g->p[r];
    if (peer_tcp_only(c, r)) continue; /* on the message path from the start (rdma_alloc) */
    if (qp_create(g, p) != ncclSuccess) {
      snprintf(why, len, "a QP could not be made");
      return 0;
    }
    for (int k = 0; k < GIN_RDMA_RING; k++) {
      int rc = qp_post_recv(p);
      if (rc) {
        snprintf(why, len, "ibv_post_recv failed: %s", strerror(rc));
        return 0;
      }
    }
  }
  return 1;
}

/* every rank learns whether every rank brought its end up: a GIN_OP_QP with the QP's address, or an empty one
 * (this rank cannot, g->off); any empty one and every rank leaves the one-sided path alike */
static void rdma_announce(struct gin_comm *c, struct gin_rdma *g) {
  for (int r = 0; r < c->nranks; r++) {
    struct gin_hdr h;
    struct qpinfo q;
    if (peer_tcp_only(c, r)) continue; /* it runs no one-sided RDMA: it expects no GIN_OP_QP */
    memset(&h, 0, sizeof(h));
    h.magic = GIN_WIRE_MAGIC;
    h.op = GIN_OP_QP;
    if (!g->off) {
      my_qpinfo(g, &g->p[r], &q);
      h.flags = GIN_F_INLINE;
      h.size = sizeof(q);
    }
    (void)say(c, r, &h, &q, g->off ? 0 : sizeof(q)); /* the FIFOs are empty yet */
  }
}

/* both paths' progress until every peer's QP address (ready 0) or READY (ready 1) is in, within the deadline */
static ncclResult_t rdma_await(struct gin_comm *c, int ready, uint64_t deadline) {
  struct gin_rdma *g = c->rdma;
  for (;;) {
    ncclResult_t res = c->path[GIN_PATH_MSG]->progress(c);
    int all = 1;
    if (res == ncclSuccess) res = rdma_progress(c);
    if (res != ncclSuccess) return res;
    for (int r = 0; r < c->nranks; r++)
      if (ready ? !g->p[r].ready : !g->p[r].have_remote) all = 0;
    if (all) return ncclSuccess;
    if (gdr_time_ns() > deadline) {
      GDR_WARN("GIN rank %d: the one-sided RDMA QPs did not come up within GDRNET_CONNECT_TIMEOUT_MS", c->rank);
      return ncclRemoteError;
    }
  }
}

/* every peer's address in: each QP to RTS, and GIN_OP_QP_READY to its peer */
static ncclResult_t rdma_connect_all(struct gin_comm *c) {
  struct gin_rdma *g = c->rdma;
  for (int r = 0; r < c->nranks; r++) {
    struct gin_hdr h;
    ncclResult_t res;
    if (g->p[r].qp == NULL) continue; /* on the message path from the start */
    res = qp_connect(g, &g->p[r]);
    if (res != ncclSuccess) return res;
    memset(&h, 0, sizeof(h));
    h.magic = GIN_WIRE_MAGIC;
    h.op = GIN_OP_QP_READY;
    (void)say(c, r, &h, NULL, 0);
  }
  return ncclSuccess;
}

/* The record's describe (connstat.h), from the detector's thread: the peer's address (set at connect) and its NCCL
 * rank (the GIN comm's), and, when the comm's lock is free (tried a few times, never waited for: the data path holds
 * it), the peer's QP and state; else the path is left "" and connstat keeps the last one. */
static int gin_cs_describe(void *comm, struct gdr_conn_desc *out) {
  struct rpeer *p = comm;
  struct gin_comm *c = p->c;
  const struct gdr_rdma_comm *tc = c->peers[p->rank].send_tc;
  int locked = 0;
  if (tc != NULL) snprintf(out->peer, sizeof(out->peer), "%s", tc->peer);
  out->peer_rank = p->rank;
  for (int i = 0; i < 64 && !(locked = pthread_mutex_trylock(&c->lock) == 0); i++) sched_yield();
  if (!locked) {
    out->state = GDR_CONN_RDMA;
    return 0;
  }
  out->state = c->error != ncclSuccess ? GDR_CONN_FAILED
               : p->mv != MV_NONE      ? GDR_CONN_MOVED_TCP
               : p->rs != RS_OK        ? GDR_CONN_RECOVERING
                                       : GDR_CONN_RDMA;
  if (p->qp != NULL)
    snprintf(out->path, sizeof(out->path), "%s port %d, QP 0x%x (GIN one-sided, rank %d)", c->rdma->d->name,
             c->rdma->d->port, p->qp->qp_num, p->rank);
  else
    snprintf(out->path, sizeof(out->path), "%s port %d, no QP now (GIN one-sided, rank %d)", c->rdma->d->name,
             c->rdma->d->port, p->rank);
  out->recoveries = (int64_t)p->epoch;
  out->moves = p->mv != MV_NONE;
  if (p->rs != RS_OK && p->rs != RS_MOVED)
    snprintf(out->note, sizeof(out->note), "one-sided recovery attempt %d (epoch %u)", p->attempts, p->epoch);
  else if (p->mv == MV_ON)
    snprintf(out->note, sizeof(out->note), "moved to the message path: its operations go as messages");
  pthread_mutex_unlock(&c->lock);
  return 0;
}

static const struct gdr_transport gin_cs_tp = {.name = "rdma-gin", .describe = gin_cs_describe};

/* gin_rdma_path.setup: the device's resources, then every rank's QP address, then every QP ready on both ends
 * before anything is written. A rank that cannot (the device's limits, memory, a QP) says so with an empty
 * GIN_OP_QP, and every rank goes on as messages; only a peer that does not answer in time fails the connect. */
static ncclResult_t rdma_setup(struct gin_comm *c) {
  ncclResult_t res = ncclSuccess;
  uint64_t deadline = gdr_time_ns() + gdr_connect_timeout_ns();
  char why[192] = "";
  struct gin_rdma *g;
  if (!rdma_wanted(c)) return ncclSuccess;
  GDR_CHECK(rdma_alloc(c));
  g = c->rdma;
  if (rdma_limits(c, g, why, sizeof(why)) && rdma_rings(c, g, why, sizeof(why))) (void)rdma_qps(c, g, why, sizeof(why));
  g->off = why[0] != 0;
  rdma_announce(c, g);
  GDR_CHECK(rdma_await(c, 0, deadline));
  for (int r = 0; r < c->nranks && !g->off; r++)
    if (g->p[r].remote_off) {
      snprintf(why, sizeof(why), "rank %d cannot bring its end up", r);
      g->off = 1;
    }
  if (g->off) {
    GDR_WARN("GIN rank %d: no one-sided RDMA on %s: %s; one-sided operations go as messages over the rdma transport",
             c->rank, g->d->name, why);
    rdma_teardown(c);
    goto out;
  }
  GDR_CHECK(rdma_connect_all(c));
  GDR_CHECK(rdma_await(c, 1, deadline));
  for (int r = 0; r < c->nranks; r++) /* the peers with a QP: a record each (connstat.h) */
    if (g->p[r].rs != RS_MOVED) {
      g->p[r].c = c;
      g->p[r].rank = r;
      g->p[r].cs = gdr_connstat_open_fifo(&gin_cs_tp, &g->p[r], c->dev);
    }
  GDR_INFO(NCCL_INIT | NCCL_NET,
           "GIN rank %d: one-sided RDMA on %s (port %d): %d-deep send queues, %d-slot signal rings, a CQ of %d; "
           "RDMA WRITE puts, READ gets, %s",
           c->rank, g->d->name, g->d->port, g->sq, g->ring, c->nranks * (g->sq + g->ring) + 64,
           g->atomic ? "FETCH_AND_ADD signals after the data"
                     : "WRITE_WITH_IMM signals applied by the target's progress");
out:
  if (res != ncclSuccess) rdma_teardown(c);
  return res;
}

static void rdma_teardown(struct gin_comm *c) {
  struct gin_rdma *g = c->rdma;
  struct ibv_mr *mrs[5];
  if (g == NULL) return;
  for (int r = 0; g->p != NULL && r < c->nranks; r++) {
    gdr_connstat_close(g->p[r].cs); /* first: its describe reads the peer's QP */
    g->p[r].cs = NULL;
    qp_destroy(&g->p[r]);
  }
  mrs[0] = g->inbox_mr, mrs[1] = g->outbox_mr, mrs[2] = g->credits_mr, mrs[3] = g->credit_src_mr;
  mrs[4] = g->scratch_mr;
  for (int i = 0; i < 5; i++)
    if (mrs[i] != NULL) (void)gdr_ibv.dereg_mr(mrs[i]);
  if (g->cq != NULL) (void)gdr_ibv.destroy_cq(g->cq);
  free(g->p);
  free(g->inbox);
  free(g->outbox);
  free(g->credits);
  free(g->credit_src);
  free(g->ops);
  free(g);
  c->rdma = NULL;
}

static ncclResult_t rdma_reg(struct gin_comm *c, struct gin_mr *m, uint64_t offset, int fd) {
  struct gin_rdma *g = c->rdma;
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  struct ibv_mr *mr = NULL;
  if (g == NULL) return ncclSuccess;
  if (g->atomic) access |= IBV_ACCESS_REMOTE_ATOMIC;
  if (fd >= 0 && gdr_ibv.reg_dmabuf_mr != NULL)
    mr = gdr_ibv.reg_dmabuf_mr(g->d->pd, offset, m->size, (uint64_t)(uintptr_t)m->base, fd, access);
  if (mr == NULL) mr = reg(g, m->base, m->size, access);
  if (mr == NULL) return ncclSystemError;
  m->ibmr = mr;
  m->rkey = mr->rkey;
  return ncclSuccess;
}

static void rdma_dereg(struct gin_comm *c, struct gin_mr *m) {
  (void)c;
  if (m->ibmr != NULL) (void)gdr_ibv.dereg_mr(m->ibmr);
  m->ibmr = NULL;
  m->rkey = 0;
}

static int nwr_of(const struct gin_rdma *g, size_t size) { return (int)((size + g->max_wr - 1) / g->max_wr); }

/* room towards peer for the operation's work requests (a flush: one; a signal needs an inbox slot too) */
static int rdma_room(struct gin_comm *c, int peer, const struct gin_op *o) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  const int signal = o->kind == GIN_K_PUT && o->signal;
  int nwr = nwr_of(g, o->kind == GIN_K_FLUSH ? 8 : o->size) + (signal ? 1 : 0);
  if (p->listed_wr + nwr + 1 > GIN_RDMA_SQ) return 0; /* one kept for the credit write */
  if (signal && !g->atomic && p->mv == MV_NONE &&
      p->sig_sent - __atomic_load_n(&g->credits[peer], __ATOMIC_ACQUIRE) >= (uint64_t)GIN_RDMA_RING)
    return 0;
  return 1;
}

/* ---------------------------------------------------------------------------- the operations' list -- */

/* an operation's tag in its peer's record (GDR_CS_OP_*) */
static int cs_tag(const struct gin_op *o) {
  return o->kind == GIN_K_GET     ? GDR_CS_OP_GET
         : o->kind == GIN_K_FLUSH ? GDR_CS_OP_FLUSH
                                  : GDR_CS_OP_PUT | (o->signal ? GDR_CS_OP_SIGNAL : 0);
}

static void op_link(struct gin_rdma *g, struct rpeer *p, int i) {
  g->ops[i].next = -1;
  if (p->tail >= 0)
    g->ops[p->tail].next = i;
  else
    p->head = i;
  p->tail = i;
  p->listed_wr += g->ops[i].nwr;
}

static void op_unlink(struct gin_rdma *g, struct rpeer *p, int i) {
  for (int k = p->head, prev = -1; k >= 0; prev = k, k = g->ops[k].next) {
    if (k != i) continue;
    if (prev < 0)
      p->head = g->ops[k].next;
    else
      g->ops[prev].next = g->ops[k].next;
    if (p->tail == k) p->tail = prev;
    p->listed_wr -= g->ops[k].nwr;
    if (p->cs != NULL) { /* over (done, or complete by the replay's rule, or handed to the message path) */
      const struct rop *n = p->head >= 0 ? &g->ops[p->head] : NULL;
      gdr_connstat_os_left(p->cs, g->ops[k].t0, g->ops[k].op.size, 1, n != NULL ? n->t0 : 0, n != NULL ? n->op.size : 0,
                           n != NULL ? cs_tag(&n->op) : 0);
    }
    return;
  }
}

/* WRs of size bytes between a local and a remote range, cut at max_wr; returns how many */
static int span(struct gin_rdma *g, struct ibv_send_wr *wr, struct ibv_sge *sge, enum ibv_wr_opcode op, char *local,
                uint32_t lkey, uint64_t remote, uint32_t rkey, size_t size) {
  int k = 0;
  for (size_t done = 0; done < size; done += g->max_wr, k++) {
    size_t n = size - done < g->max_wr ? size - done : g->max_wr;
    memset(&wr[k], 0, sizeof(wr[k]));
    sge[k].addr = (uint64_t)(uintptr_t)(local + done);
    sge[k].length = (uint32_t)n;
    sge[k].lkey = lkey;
    wr[k].opcode = op;
    wr[k].sg_list = &sge[k];
    wr[k].num_sge = 1;
    wr[k].wr.rdma.remote_addr = remote + done;
    wr[k].wr.rdma.rkey = rkey;
    if (k > 0) wr[k - 1].next = &wr[k];
  }
  return k;
}

/* the signal after a put's data: a FETCH_AND_ADD (NCCL IB's proxy), or the record's WRITE_WITH_IMM into the target's
 * inbox (slot = the signal's number modulo the ring); returns 1 */
static int signal_wr(struct gin_comm *c, int peer, const struct rop *o, struct ibv_send_wr *wr, struct ibv_sge *sge) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  memset(wr, 0, sizeof(*wr));
  wr->sg_list = sge;
  wr->num_sge = 1;
  if (g->atomic) {
    sge->addr = (uint64_t)(uintptr_t)&g->scratch;
    sge->length = sizeof(g->scratch);
    sge->lkey = g->scratch_mr->lkey;
    wr->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr->wr.atomic.remote_addr = o->op.sm->peer_va[peer] + o->op.soff;
    wr->wr.atomic.compare_add = o->op.sval;
    wr->wr.atomic.rkey = o->op.sm->peer_rkey[peer];
    return 1;
  }
  uint32_t slot = (uint32_t)(o->seq % GIN_RDMA_RING);
  struct sig_rec *rec = &g->outbox[(size_t)peer * GIN_RDMA_RING + slot];
  rec->mr = o->op.sm->id;
  rec->magic = GIN_REC_MAGIC;
  rec->off = o->op.soff;
  rec->val = o->op.sval;
  rec->seq = o->seq;
  sge->addr = (uint64_t)(uintptr_t)rec;
  sge->length = sizeof(*rec);
  sge->lkey = g->outbox_mr->lkey;
  wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr->imm_data = htobe32((uint32_t)o->seq);
  wr->wr.rdma.remote_addr = p->remote.inbox_va + ((uint64_t)c->rank * GIN_RDMA_RING + slot) * sizeof(struct sig_rec);
  wr->wr.rdma.rkey = p->remote.inbox_rkey;
  return 1;
}

#define POST_STACK_WRS 16 /* work requests built on the stack (more: on the heap) */

/* posts an operation of the list on the peer's QP (its first post, or a replay); the last WR is signaled and its
 * completion is the request's */
static void post_op(struct gin_comm *c, struct gin_req *r) {
  struct gin_rdma *g = c->rdma;
  struct rop *o = &g->ops[r->idx];
  struct rpeer *p = &g->p[r->peer];
  struct ibv_send_wr wr_s[POST_STACK_WRS], *wr = wr_s, *bad = NULL;
  struct ibv_sge sge_s[POST_STACK_WRS], *sge = sge_s;
  int k = 0, rc;
  if (o->nwr == 0) { /* nothing to move: done at once */
    op_unlink(g, p, (int)r->idx);
    if (o->posted_once) r->pending--;
    if (r->pending == 0) gin_req_finish(c, r);
    return;
  }
  if (o->nwr > POST_STACK_WRS) { /* a put or get past POST_STACK_WRS x max_msg_sz: its WRs on the heap */
    wr = calloc((size_t)o->nwr, sizeof(*wr));
    sge = calloc((size_t)o->nwr, sizeof(*sge));
    if (wr == NULL || sge == NULL) {
      gin_fail(c, ncclSystemError, "out of memory for work requests", r->peer);
      goto out;
    }
  } else {
    memset(wr_s, 0, sizeof(wr_s));
  }
  switch (o->op.kind) {
  case GIN_K_PUT:
    if (o->op.size > 0)
      k = span(g, wr, sge, IBV_WR_RDMA_WRITE, o->op.lm->base + o->op.loff, ((struct ibv_mr *)o->op.lm->ibmr)->lkey,
               o->op.rm->peer_va[r->peer] + o->op.roff, o->op.rm->peer_rkey[r->peer], o->op.size);
    if (o->op.signal) {
      k += signal_wr(c, r->peer, o, &wr[k], &sge[k]);
      if (k > 1) wr[k - 2].next = &wr[k - 1];
    }
    break;
  case GIN_K_GET:
    k = span(g, wr, sge, IBV_WR_RDMA_READ, o->op.lm->base + o->op.loff, ((struct ibv_mr *)o->op.lm->ibmr)->lkey,
             o->op.rm->peer_va[r->peer] + o->op.roff, o->op.rm->peer_rkey[r->peer], o->op.size);
    break;
  default: /* a flush: an 8-byte READ of the target's inbox completes after every earlier WRITE on the QP */
    k = span(g, wr, sge, IBV_WR_RDMA_READ, (char *)&g->scratch, g->scratch_mr->lkey, p->remote.inbox_va,
             p->remote.inbox_rkey, sizeof(g->scratch));
    break;
  }
  wr[k - 1].send_flags |= IBV_SEND_SIGNALED;
  wr[k - 1].wr_id = wr_user(r);
  rc = gdr_ibv_post_send(p->qp, wr, &bad);
  if (rc) {
    GDR_WARN("GIN rank %d: ibv_post_send to rank %d failed: %s", c->rank, r->peer, strerror(rc));
    gin_fail(c, ncclSystemError, "a post failed", r->peer);
    goto out;
  }
  p->sq_used += k;
  r->nwr = k;
  if (!o->posted_once) r->pending++;
  o->posted_once = 1;
out:
  if (wr != wr_s) free(wr);
  if (sge != sge_s) free(sge);
}

static void move_pump(struct gin_comm *c, int peer);

/* lists an operation; posts it unless its peer's QP is being recovered (then the recovery posts it) or the peer moves
 * to the message path (then it goes as messages behind the listed ones) */
static void rdma_issue(struct gin_comm *c, struct gin_req *r, const struct gin_op *op) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[r->peer];
  struct rop *o = &g->ops[r->idx];
  memset(o, 0, sizeof(*o));
  o->op = *op;
  if (op->kind == GIN_K_PUT && op->signal && !g->atomic) o->seq = p->sig_sent++;
  o->nwr = op->kind == GIN_K_FLUSH ? 1 : (op->size > 0 ? nwr_of(g, op->size) : 0) + (op->signal ? 1 : 0);
  if (p->cs != NULL) {
    o->t0 = gdr_connstat_now_ns();
    gdr_connstat_os_issued(p->cs, o->t0, op->size, cs_tag(op));
  }
  op_link(g, p, (int)r->idx);
  if (p->rs == RS_OK)
    post_op(c, r);
  else if (p->mv == MV_ON)
    move_pump(c, r->peer);
}

/* whether operations towards peer go here: the path is up, and the peer has not moved to the message path or
 * operations issued before that still wait in its list to go as messages (the ones issued now queue behind them) */
static int rdma_carries(struct gin_comm *c, int peer) {
  const struct rpeer *p;
  if (c->rdma == NULL) return 0;
  p = &c->rdma->p[peer];
  return p->mv != MV_ON || p->head >= 0;
}

/* gin_peer_bye's hook: its listed operations are forgotten (shared.c failed them), its QP's completions ignored */
static void rdma_peer_gone(struct gin_comm *c, int peer) {
  struct rpeer *p;
  if (c->rdma == NULL) return;
  p = &c->rdma->p[peer];
  p->head = p->tail = -1; /* those requests failed: their pool slots are free for others */
  p->listed_wr = 0;
  if (p->cs != NULL) gdr_connstat_os_clear(p->cs);
}

static int peer_of_qp(struct gin_comm *c, uint32_t qpn) {
  for (int r = 0; r < c->nranks; r++)
    if (c->rdma->p[r].qp != NULL && c->rdma->p[r].qp->qp_num == qpn) return r;
  return -1;
}

/* ------------------------------------------------------------------------------------------ recovery -- */

static ncclResult_t send_ctrl(struct gin_comm *c, int peer, int op, const void *payload, size_t len) {
  struct rpeer *p = &c->rdma->p[peer];
  struct gin_hdr h;
  memset(&h, 0, sizeof(h));
  h.magic = GIN_WIRE_MAGIC;
  h.op = (uint16_t)op;
  h.flags = (uint16_t)(GIN_F_RECOVER | (len > 0 ? GIN_F_INLINE : 0));
  h.cookie = p->epoch;
  h.aux = p->consumed; /* the peer's signals this side applied: final once its old QP is drained */
  h.size = len;
  if (!say(c, peer, &h, payload, len)) {
    GDR_WARN("GIN rank %d: no room towards rank %d for the recovery's message", c->rank, peer);
    return ncclInternalError;
  }
  return ncclSuccess;
}

static void move_start(struct gin_comm *c, int peer, const char *why);

/* an RDMA atomic signal posted and not completed: whether the target applied it cannot be known */
static int atomic_in_flight(const struct gin_rdma *g, const struct rpeer *p) {
  if (g->atomic)
    for (int k = p->head; k >= 0; k = g->ops[k].next)
      if (g->ops[k].op.signal && g->ops[k].posted_once) return 1;
  return 0;
}

/* recovery in place failed: the peer moves to the message path (GDRNET_FALLBACK=1), or the comm fails */
static void rec_fail(struct gin_comm *c, int peer, const char *why) {
  struct rpeer *p = &c->rdma->p[peer];
  if (gdr_fallback_allowed() && !atomic_in_flight(c->rdma, p)) {
    move_start(c, peer, why);
    return;
  }
  GDR_WARN("GIN rank %d: the one-sided RDMA QP to rank %d is not recovered: %s (attempt %d of at most %d, %llu ms "
           "after the fault); the GIN connection fails",
           c->rank, peer, why, p->attempts, gdr_recovery_attempts(),
           (unsigned long long)((gdr_time_ns() - p->t_fault) / 1000000ull));
  gin_fail(c, ncclRemoteError, why, peer);
}

static void drain_done(struct gin_comm *c, int peer);
static void qp_stop(struct gin_comm *c, int peer);

/* an attempt of epoch e: the QP to ERR and drained (what completed still counts), then a new one */
static void start_attempt(struct gin_comm *c, int peer, uint32_t epoch, const char *why) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  uint64_t now = gdr_time_ns();
  int max = gdr_recovery_attempts();
  if (p->rs == RS_OK && !p->episode) {
    p->episode = 1;
    p->t_fault = now;
    p->rec_until = now + gdr_recovery_timeout_ns();
    p->attempts = 0;
    GDR_WARN("GIN rank %d: the one-sided RDMA QP to rank %d: %s; %s", c->rank, peer, why,
             max > 0 ? "it recovers in place (GDRNET_RECOVERY_ATTEMPTS, GDRNET_RECOVERY_TIMEOUT_MS)"
                     : "recovery is off (GDRNET_RECOVERY_ATTEMPTS=0)");
  }
  if (++p->attempts > max) {
    rec_fail(c, peer, max > 0 ? "the attempts are used up" : why);
    return;
  }
  if (atomic_in_flight(g, p)) {
    rec_fail(c, peer,
             "an RDMA atomic signal was in flight: whether the target applied it cannot be known, so it cannot "
             "be replayed exactly once (GDRNET_GIN_SIGNAL=imm recovers)");
    return;
  }
  p->epoch = epoch;
  p->have_remote = p->ready = 0;
  qp_stop(c, peer);
}

/* the QP to ERR, a marker on its send and receive queues: drain_done once both are back (or after GIN_DRAIN_NS) */
static void qp_stop(struct gin_comm *c, int peer) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  struct ibv_send_wr sw, *sbad = NULL;
  struct ibv_recv_wr rw, *rbad = NULL;
  struct ibv_sge none = {0, 0, 0};
  uint64_t now = gdr_time_ns();
  p->rs = RS_DRAIN;
  p->marks = 0;
  p->drain_until = now + GIN_DRAIN_NS;
  if (qp_to_err(p)) {
    /* markers: posted to a QP in ERR they complete (flushed) after everything posted before them */
    memset(&sw, 0, sizeof(sw));
    sw.opcode = IBV_WR_RDMA_WRITE;
    sw.send_flags = IBV_SEND_SIGNALED;
    sw.wr_id = (uint64_t)WR_MARK << 60 | (uint32_t)peer;
    if (gdr_ibv_post_send(p->qp, &sw, &sbad) == 0) p->marks++;
    memset(&rw, 0, sizeof(rw));
    rw.sg_list = &none;
    rw.wr_id = (uint64_t)WR_MARK << 60 | (uint32_t)peer;
    if (gdr_ibv_post_recv(p->qp, &rw, &rbad) == 0) p->marks++;
  }
  if (p->marks == 0) drain_done(c, peer);
}

static void replay(struct gin_comm *c, int peer);

/* the peer's QP address is here and this side's new QP exists: RTR/RTS, and READY */
static void connect_ready(struct gin_comm *c, int peer) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  if (qp_connect(g, p) != ncclSuccess) {
    start_attempt(c, peer, p->epoch + 1, "the new QP did not connect");
    return;
  }
  if (send_ctrl(c, peer, GIN_OP_QP_READY, NULL, 0) != ncclSuccess) {
    rec_fail(c, peer, "the recovery's READY could not be queued");
    return;
  }
  p->rs = RS_READY;
  if (p->ready) replay(c, peer);
}

/* the old QP drained (or the drain's bound passed): destroyed; a new one, its receives, and its address */
static void move_drained(struct gin_comm *c, int peer);

static void drain_done(struct gin_comm *c, int peer) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  struct qpinfo q;
  if (p->mv != MV_NONE) {
    move_drained(c, peer);
    return;
  }
  qp_destroy(p);
  p->sq_used = 0;
  p->credit_inflight = 0;
  p->credit_sent = 0; /* the count is written again on the new QP */
  if (qp_create(g, p) != ncclSuccess) {
    qp_destroy(p);
    rec_fail(c, peer, "a new QP could not be made");
    return;
  }
  for (int k = 0; k < GIN_RDMA_RING; k++)
    if (qp_post_recv(p) != 0) {
      rec_fail(c, peer, "the new QP's receives could not be posted");
      return;
    }
  my_qpinfo(g, p, &q);
  if (send_ctrl(c, peer, GIN_OP_QP, &q, sizeof(q)) != ncclSuccess) {
    rec_fail(c, peer, "the recovery's QP address could not be queued");
    return;
  }
  p->rs = RS_WAIT;
  if (p->have_remote) connect_ready(c, peer);
}

/* both new QPs are RTS: what the peer shows applied is complete, the rest is posted again, in order */
static void replay(struct gin_comm *c, int peer) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  int last = -1, known = 0, again = 0;
  for (int k = p->head; k >= 0; k = g->ops[k].next)
    if (g->ops[k].op.signal && !g->atomic && g->ops[k].posted_once && g->ops[k].seq < p->remote_consumed) last = k;
  p->rs = RS_OK;
  for (int k = p->head, passed = last < 0; k >= 0;) {
    int nx = g->ops[k].next;
    struct gin_req *r = &c->pool[k];
    if (!passed && g->ops[k].op.kind != GIN_K_GET && g->ops[k].posted_once) {
      op_unlink(g, p, k); /* placed before a signal the peer applied */
      if (--r->pending == 0) gin_req_finish(c, r);
      known++;
    } else {
      post_op(c, r);
      again++;
    }
    if (k == last) passed = 1;
    if (c->error != ncclSuccess) return;
    k = nx;
  }
  GIN_COUNT(c, recoveries, 1);
  GIN_COUNT(c, replayed, again);
  GDR_INFO(NCCL_NET,
           "GIN rank %d: the one-sided RDMA QP to rank %d recovered in place after %llu ms (attempt %d): %d "
           "operation(s) posted again, %d known complete",
           c->rank, peer, (unsigned long long)((gdr_time_ns() - p->t_fault) / 1000000ull), p->attempts, again, known);
}

/* ------------------------------------------------------------------------ the move to the message path -- */

/* The peer moves to the message path (recovery failed here, why, GDRNET_FALLBACK=1; or the peer's GIN_OP_MOVE came,
 * why NULL): the QP stops and drains as a recovery's does (a drain already under way is the one), then
 * GIN_OP_MOVE{aux: the peer's signals this side applied} goes over the message path. Each side sends one; with the
 * peer's in, move_agree. */
static void move_start(struct gin_comm *c, int peer, const char *why) {
  struct rpeer *p = &c->rdma->p[peer];
  if (p->mv != MV_NONE) return;
  if (why != NULL)
    GDR_INFO(NCCL_NET,
             "GIN rank %d: the one-sided RDMA QP to rank %d is not recovered in place: %s (attempt %d, %llu ms after "
             "the fault); the operations towards rank %d move to the message path (GDRNET_FALLBACK=1)",
             c->rank, peer, why, p->attempts, (unsigned long long)((gdr_time_ns() - p->t_fault) / 1000000ull), peer);
  else
    GDR_INFO(NCCL_NET, "GIN rank %d: rank %d moved to the message path: the operations towards it move too", c->rank,
             peer);
  p->mv = MV_STOP;
  p->mv_until = gdr_time_ns() + gdr_recovery_timeout_ns();
  p->episode = 0;
  if (p->rs != RS_DRAIN || p->marks == 0) qp_stop(c, peer); /* else the drain under way ends in move_drained */
}

static void move_agree(struct gin_comm *c, int peer);

/* this side's GIN_OP_MOVE, once the FIFO has room (else again at the next progress) */
static void move_send(struct gin_comm *c, int peer) {
  struct rpeer *p = &c->rdma->p[peer];
  struct gin_hdr h;
  memset(&h, 0, sizeof(h));
  h.magic = GIN_WIRE_MAGIC;
  h.op = GIN_OP_MOVE;
  h.aux = p->consumed; /* final: the QP is drained and destroyed */
  if (!say(c, peer, &h, NULL, 0)) return;
  p->mv = MV_WAIT;
  if (p->mv_heard) move_agree(c, peer);
}

/* the old QP drained: nothing more arrives on it, this side's count of the peer's signals is final */
static void move_drained(struct gin_comm *c, int peer) {
  struct rpeer *p = &c->rdma->p[peer];
  qp_destroy(p);
  p->sq_used = 0;
  p->credit_inflight = 0;
  p->rs = RS_MOVED;
  p->mv = MV_SEND;
  move_send(c, peer);
}

/* Both sides' QPs are drained and both counts known: what the peer shows applied is complete (the rule of replay:
 * a put or flush at or before the last signal it applied), the rest goes as messages, in order (move_pump). */
static void move_agree(struct gin_comm *c, int peer) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  int last = -1, known = 0, left = 0;
  if (atomic_in_flight(g, p)) {
    GDR_WARN("GIN rank %d: rank %d moved to the message path with an RDMA atomic signal of this rank's in flight: "
             "whether it was applied cannot be known (GDRNET_GIN_SIGNAL=imm moves exactly)",
             c->rank, peer);
    gin_fail(c, ncclRemoteError, "a signal in flight could not be moved", peer);
    return;
  }
  for (int k = p->head; k >= 0; k = g->ops[k].next)
    if (g->ops[k].op.signal && g->ops[k].posted_once && g->ops[k].seq < p->remote_consumed) last = k;
  for (int k = p->head, passed = last < 0; k >= 0;) {
    int nx = g->ops[k].next;
    if (!passed && g->ops[k].op.kind != GIN_K_GET && g->ops[k].posted_once) {
      struct gin_req *r = &c->pool[k];
      op_unlink(g, p, k); /* placed before a signal the peer applied */
      if (--r->pending == 0) gin_req_finish(c, r);
      known++;
    } else {
      left++;
    }
    if (k == last) passed = 1;
    k = nx;
  }
  p->mv = MV_ON;
  GIN_COUNT(c, moves, 1);
  GDR_INFO(NCCL_NET,
           "GIN rank %d: rank %d is on the message path now (%llu of its signals applied here over RDMA, %llu of "
           "this rank's there): %d operation(s) go again as messages, %d known complete",
           c->rank, peer, (unsigned long long)p->consumed, (unsigned long long)p->remote_consumed, left, known);
  move_pump(c, peer);
}

/* the listed operations as messages, in order, as far as the FIFO has room; the ones issued meanwhile are listed
 * behind them (rdma_carries), so nothing to the peer passes one listed before it */
static void move_pump(struct gin_comm *c, int peer) {
  const struct gin_path *mp = c->path[GIN_PATH_MSG];
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  while (p->head >= 0) {
    int k = p->head;
    struct rop *o = &g->ops[k];
    struct gin_req *r = &c->pool[k];
    if (!mp->room(c, peer, &o->op)) return;
    op_unlink(g, p, k);
    if (o->posted_once) r->pending--; /* its completion on the destroyed QP never comes: the messages' do */
    r->nwr = 0;
    mp->issue(c, r, &o->op);
  }
}

/* the moves under way: a send that found no room, the operations still listed, the peer's answer's bound */
static void move_progress(struct gin_comm *c, int peer) {
  struct rpeer *p = &c->rdma->p[peer];
  if (p->mv == MV_SEND) move_send(c, peer);
  if (p->mv == MV_ON) {
    move_pump(c, peer);
  } else if (p->rs != RS_DRAIN && gdr_time_ns() > p->mv_until) {
    GDR_WARN("GIN rank %d: rank %d did not answer the move to the message path within GDRNET_RECOVERY_TIMEOUT_MS=%d",
             c->rank, peer, (int)gdr_recovery_timeout_ms());
    gin_fail(c, ncclRemoteError, "the move to the message path was not answered", peer);
  }
}

static void recovery_timers(struct gin_comm *c) {
  uint64_t now = gdr_time_ns();
  for (int r = 0; r < c->nranks && c->error == ncclSuccess; r++) {
    struct rpeer *p = &c->rdma->p[r];
    if (c->peers[r].gone) continue;
    if (p->mv != MV_NONE) {
      if (p->rs == RS_DRAIN && now > p->drain_until) drain_done(c, r);
      if (c->error == ncclSuccess) move_progress(c, r);
      continue;
    }
    if (p->rs == RS_OK && !p->episode) continue;
    if (now > p->rec_until && p->rs != RS_OK)
      rec_fail(c, r, "not recovered within GDRNET_RECOVERY_TIMEOUT_MS");
    else if (p->rs == RS_DRAIN && now > p->drain_until)
      drain_done(c, r);
  }
}

/* ------------------------------------------------------------------------------------- records over messages -- */
/* The message path hands over this path's records (gin_rdma_path.record): one handler per record, through
 * records[] below; the message path checked the header's flags and sizes against its rules, rdma_record_check the
 * QP address's fields. */

/* a peer's count of this side's signals it applied (GIN_OP_MOVE, a recovery's GIN_OP_QP): never more than sent */
static int count_ok(struct gin_comm *c, int peer, const struct gin_hdr *h) {
  const struct rpeer *p = &c->rdma->p[peer];
  if (h->aux <= p->sig_sent) return 1;
  GDR_WARN("GIN rank %d: a malformed %s message from rank %d: %llu signal records applied of %llu sent", c->rank,
           h->op == GIN_OP_MOVE ? "MOVE" : "QP", peer, (unsigned long long)h->aux, (unsigned long long)p->sig_sent);
  return 0;
}

/* its signals land in this rank's ring for it: the same size on both sides (0: an older plugin's default) */
static int ring_ok(struct gin_comm *c, int peer, const void *payload) {
  const struct gin_rdma *g = c->rdma;
  struct qpinfo q;
  uint32_t ring;
  memcpy(&q, payload, sizeof(q));
  ring = q.ring != 0                                                ? q.ring
         : g->d->max_qp_wr > 0 && g->d->max_qp_wr < GIN_RDMA_QDEPTH ? (uint32_t)g->d->max_qp_wr
                                                                    : GIN_RDMA_QDEPTH;
  if (ring == (uint32_t)g->ring) return 1;
  GDR_WARN("GIN rank %d: rank %d's signal ring has %u slots, this rank's %d (another plugin version or device)",
           c->rank, peer, ring, g->ring);
  return 0;
}

/* a recovery's GIN_OP_QP (payload: the new QP's address) or GIN_OP_QP_READY (payload NULL) of epoch cookie */
static ncclResult_t rec_recover(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload) {
  struct rpeer *p = &c->rdma->p[peer];
  uint32_t e = (uint32_t)h->cookie;
  if (p->mv != MV_NONE) return ncclSuccess;                                  /* a recovery the move ended */
  if (e < p->epoch || (e == p->epoch && p->rs == RS_OK)) return ncclSuccess; /* an attempt already over */
  if (e > p->epoch) start_attempt(c, peer, e, "the peer recovers the QP between them");
  if (c->error != ncclSuccess || p->epoch != e) return c->error;
  if (payload != NULL) {
    memcpy(&p->remote, payload, sizeof(struct qpinfo));
    p->remote_consumed = h->aux;
    p->have_remote = 1;
    if (p->rs == RS_WAIT) connect_ready(c, peer);
  } else {
    p->ready = 1;
    if (p->rs == RS_READY) replay(c, peer);
  }
  return c->error;
}

/* GIN_OP_QP: the peer's QP address (bring-up or recovery), or empty: it cannot bring its end up */
static ncclResult_t rec_qp(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  if ((h->flags & GIN_F_RECOVER) && !count_ok(c, peer, h)) return ncclRemoteError;
  if (h->size == 0 && !(h->flags & GIN_F_RECOVER) && !p->have_remote) {
    p->remote_off = p->have_remote = 1; /* the peer cannot bring its end up: every rank leaves the path */
    return ncclSuccess;
  }
  if (h->size != sizeof(struct qpinfo)) {
    GDR_WARN("GIN rank %d: a malformed QP message from rank %d (%llu bytes)", c->rank, peer,
             (unsigned long long)h->size);
    return ncclRemoteError;
  }
  if (!g->off && !ring_ok(c, peer, payload)) return ncclRemoteError;
  if (h->flags & GIN_F_RECOVER) return rec_recover(c, peer, h, payload);
  memcpy(&p->remote, payload, sizeof(struct qpinfo));
  p->have_remote = 1;
  return ncclSuccess;
}

/* GIN_OP_QP_READY: the peer's QP is RTS (bring-up or recovery) */
static ncclResult_t rec_ready(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload) {
  (void)payload;
  if (h->flags & GIN_F_RECOVER) return rec_recover(c, peer, h, NULL);
  c->rdma->p[peer].ready = 1;
  return ncclSuccess;
}

/* GIN_OP_MOVE: the peer moved to the message path (aux: this side's signals it applied); this side follows */
static ncclResult_t rec_move(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload) {
  struct rpeer *p = &c->rdma->p[peer];
  (void)payload;
  if (!count_ok(c, peer, h)) return ncclRemoteError;
  if (p->mv_heard) {
    GDR_WARN("GIN rank %d: rank %d moved to the message path twice", c->rank, peer);
    return ncclRemoteError;
  }
  p->mv_heard = 1;
  p->remote_consumed = h->aux;
  if (p->mv == MV_NONE)
    move_start(c, peer, NULL);
  else if (p->mv == MV_WAIT)
    move_agree(c, peer);
  return c->error;
}

typedef ncclResult_t (*record_fn)(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload);
static const record_fn records[] = {
    [GIN_OP_QP] = rec_qp,
    [GIN_OP_QP_READY] = rec_ready,
    [GIN_OP_MOVE] = rec_move,
};

static ncclResult_t rdma_record(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload) {
  if (c->rdma == NULL) {
    GDR_WARN("GIN rank %d: rank %d brings up one-sided RDMA, this rank does not (GDRNET_GIN_PATH or "
             "GDRNET_TRANSPORT differ between the ranks)",
             c->rank, peer);
    return ncclInvalidUsage;
  }
  if (h->op >= sizeof(records) / sizeof(records[0]) || records[h->op] == NULL) {
    GDR_WARN("GIN rank %d: op %u from rank %d is no record of the one-sided RDMA path", c->rank, h->op, peer);
    return ncclInternalError; /* the message path hands over only the ops its rules give rx_rdma */
  }
  return records[h->op](c, peer, h, payload);
}

/* gives a peer its ring slots back: the count of its records this side applied, into its credit word */
static void credit(struct gin_comm *c, int peer) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  struct ibv_send_wr wr, *bad = NULL;
  struct ibv_sge sge;
  int rc;
  if (c->peers[peer].gone || p->rs != RS_OK || p->credit_inflight ||
      p->consumed - p->credit_sent < (uint64_t)GIN_RDMA_RING / 8 || p->sq_used + 1 > GIN_RDMA_SQ)
    return;
  g->credit_src[peer] = p->consumed;
  (void)span(g, &wr, &sge, IBV_WR_RDMA_WRITE, (char *)&g->credit_src[peer], g->credit_src_mr->lkey,
             p->remote.credit_va + (uint64_t)c->rank * sizeof(uint64_t), p->remote.credit_rkey, sizeof(uint64_t));
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = (uint64_t)WR_CREDIT << 60 | (uint32_t)peer;
  rc = gdr_ibv_post_send(p->qp, &wr, &bad);
  if (rc) {
    GDR_WARN("GIN rank %d: ibv_post_send (credits) to rank %d failed: %s", c->rank, peer, strerror(rc));
    gin_fail(c, ncclSystemError, "a post failed", peer);
    return;
  }
  p->sq_used++;
  p->credit_inflight = 1;
  p->credit_sent = p->consumed;
}

/* a failed completion towards peer (not a drain's): an attempt of recovery, or the comm fails (neither recovery nor
 * fallback) */
static void wc_failed(struct gin_comm *c, int peer, const struct ibv_wc *wc) {
  struct rpeer *p = &c->rdma->p[peer];
  char why[160];
  if (p->rs == RS_DRAIN) return; /* flushed with the QP this attempt drains */
  snprintf(why, sizeof why, "a completion failed: %s (vendor error %u)", gdr_ibv_wc_status_str(wc->status),
           wc->vendor_err);
  if (gdr_recovery_attempts() == 0 && !gdr_fallback_allowed()) {
    GDR_WARN("GIN rank %d: a completion towards rank %d failed: %s (vendor error %u)", c->rank, peer,
             gdr_ibv_wc_status_str(wc->status), wc->vendor_err);
    gin_fail(c, ncclRemoteError, "an RDMA operation failed", peer);
    return;
  }
  start_attempt(c, peer, p->epoch + 1, why);
}

/* a signal record from peer landed (its WRITE_WITH_IMM's receive): applied, in order, and its receive replaced */
static void wc_signal(struct gin_comm *c, int peer, const struct ibv_wc *wc) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  uint32_t seq = be32toh(wc->imm_data);
  struct sig_rec rec = g->inbox[(size_t)peer * GIN_RDMA_RING + p->consumed % GIN_RDMA_RING];
  if (rec.magic != GIN_REC_MAGIC || (uint32_t)rec.seq != seq || seq != (uint32_t)p->consumed) {
    GDR_WARN("GIN rank %d: signal record %u from rank %d is not the one expected (%llu)", c->rank, seq, peer,
             (unsigned long long)p->consumed);
    gin_fail(c, ncclRemoteError, "a bad signal record", peer);
    return;
  }
  if (gin_apply_signal(c, peer, rec.mr, rec.off, rec.val) != ncclSuccess) {
    gin_fail(c, ncclRemoteError, "a signal could not be applied", peer);
    return;
  }
  p->consumed++;
  if (p->rs != RS_DRAIN) { /* a drained QP's receives are not replaced: the new QP gets a full ring */
    int rc = qp_post_recv(p);
    if (rc) {
      GDR_WARN("GIN rank %d: ibv_post_recv failed: %s", c->rank, strerror(rc));
      gin_fail(c, ncclSystemError, "a receive could not be posted", peer);
    }
  }
}

/* a user operation's last work request completed: the request's, if it is one in flight towards peer */
static void wc_user(struct gin_comm *c, int peer, const struct ibv_wc *wc) {
  struct gin_rdma *g = c->rdma;
  struct rpeer *p = &g->p[peer];
  uint32_t idx = (uint32_t)wc->wr_id, gen = (uint32_t)(wc->wr_id >> 32) & 0xfffffffu;
  struct gin_req *r = idx < c->npool ? &c->pool[idx] : NULL;
  if (r == NULL || r->kind != GIN_RQ_USER || (r->gen & 0xfffffffu) != gen || r->done || r->peer != peer) {
    GDR_WARN("GIN rank %d: a completion names no operation in flight", c->rank);
    gin_fail(c, ncclInternalError, "a stray completion", peer);
    return;
  }
  p->sq_used -= r->nwr;
  p->episode = 0; /* the QP carries operations again: a later fault is a new episode */
  op_unlink(g, p, (int)idx);
  if (--r->pending == 0) gin_req_finish(c, r);
}

/* one completion; returns c->error */
static ncclResult_t completion(struct gin_comm *c, const struct ibv_wc *wc) {
  int peer = peer_of_qp(c, wc->qp_num);
  unsigned kind = (unsigned)(wc->wr_id >> 60);
  struct rpeer *p;
  if (peer < 0) return c->error; /* a QP already destroyed (its completions were drained) */
  /* it closed: what was towards it already failed; its signals that still arrive are applied */
  if (c->peers[peer].gone && (wc->status != IBV_WC_SUCCESS || wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM)) return c->error;
  p = &c->rdma->p[peer];
  if (kind == WR_MARK && wc->wr_id == ((uint64_t)WR_MARK << 60 | (uint32_t)peer)) {
    if (p->rs == RS_DRAIN && --p->marks == 0) drain_done(c, peer);
  } else if (wc->status != IBV_WC_SUCCESS) {
    wc_failed(c, peer, wc);
  } else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    wc_signal(c, peer, wc);
  } else if (kind == WR_CREDIT) {
    p->sq_used--;
    p->credit_inflight = 0;
  } else {
    wc_user(c, peer, wc);
  }
  return c->error;
}

static ncclResult_t rdma_progress(struct gin_comm *c) {
  struct gin_rdma *g = c->rdma;
  struct ibv_wc wc[16];
  int n = 0;
  if (g == NULL || g->off) return c->error; /* a bring-up that failed here: nothing was posted */
  while (c->error == ncclSuccess && (n = gdr_ibv_poll_cq(g->cq, 16, wc)) > 0)
    for (int i = 0; i < n && c->error == ncclSuccess; i++) (void)completion(c, &wc[i]);
  if (c->error == ncclSuccess && n < 0) {
    gin_fail(c, ncclSystemError, "ibv_poll_cq failed", -1);
    return c->error;
  }
  if (c->error == ncclSuccess) recovery_timers(c);
  for (int r = 0; r < c->nranks && c->error == ncclSuccess; r++) {
    /* the peer's NIC writes its count of this side's records it applied: never more than were written */
    uint64_t applied = __atomic_load_n(&g->credits[r], __ATOMIC_ACQUIRE);
    if (applied > g->p[r].sig_sent) {
      GDR_WARN("GIN rank %d: rank %d says it applied %llu signal records of %llu sent", c->rank, r,
               (unsigned long long)applied, (unsigned long long)g->p[r].sig_sent);
      gin_fail(c, ncclRemoteError, "a bad credit count", r);
      break;
    }
    credit(c, r);
  }
  return c->error;
}

static const char *rdma_record_check(const struct gin_hdr *h, const void *payload) {
  return h->op == GIN_OP_QP && h->size > 0 ? gin_rdma_qpinfo_check(payload) : NULL;
}

const struct gin_path gin_rdma_path = {
    .name = "rdma",
    .setup = rdma_setup,
    .teardown = rdma_teardown,
    .progress = rdma_progress,
    .reg = rdma_reg,
    .dereg = rdma_dereg,
    .carries = rdma_carries,
    .room = rdma_room,
    .issue = rdma_issue,
    .on_peer_gone = rdma_peer_gone,
    .record_check = rdma_record_check,
    .record = rdma_record,
};

#else /* no RDMA transport built */

const char *gin_rdma_qpinfo_check(const void *payload) {
  (void)payload;
  return NULL;
}

static ncclResult_t rdma_record(struct gin_comm *c, int peer, const struct gin_hdr *h, const void *payload) {
  (void)h;
  (void)payload;
  GDR_WARN("GIN rank %d: rank %d brings up one-sided RDMA, this build has no RDMA transport", c->rank, peer);
  return ncclInvalidUsage;
}

/* nothing but the answer to a peer that brings one-sided RDMA up: every operation is a message */
const struct gin_path gin_rdma_path = {
    .name = "rdma",
    .record = rdma_record,
};

#endif
