/* The RDMA transport's wire formats and data-path arithmetic (no verbs types: unit-tested alone). Wire version 2
 * (the handshake's version; a peer of another version is refused at the handshake, naming both versions).
 *
 * Devices: a connection runs on one physical device, or stripes over the ndevs (<= 8) devices of a fused one
 *   (makeVDevice): this side's QP i lives on its device i % ndevs, as in NCCL's IB transport. Each side announces its
 *   devices in the handshake (address, MTU, the rkey of its own buffer on each); a memory registration holds one
 *   key pair per device, and a clear-to-send entry carries the receive buffer's rkey on each of the receiver's
 *   devices: the WRITE on QP i uses the receiver's key of its device i % ndevs (the peer's count).
 *
 * CTS FIFO (receiver-driven, as NCCL's IB transport):
 *   The sender owns a FIFO of GDR_RDMA_FIFO_SLOTS slots x GDR_RDMA_MAX_RECVS entries, registered
 *   REMOTE_WRITE.  For message number m (0, 1, 2, ... per connection; the message's sequence
 *   number, named identically on both sides), the receiver fills n entries (one per buffer of
 *   a grouped receive) of slot m % SLOTS and RDMA-WRITEs them in one work request.  Every entry
 *   carries seq = m + 1 in its last 8 bytes; the sender consumes slot m % SLOTS once all n entries
 *   show seq == m + 1.  An entry is 64 bytes and 64-byte aligned (one cache line: placed whole, as NCCL's 64-byte
 *   FIFO entries are; the FIFO is never registered with relaxed ordering).
 *
 * Data:
 *   The sender RDMA-WRITEs each buffer of the group to the address/rkey of its entry and ends
 *   the message on each QP it used with one RDMA_WRITE_WITH_IMM (every WR of the sender is signaled).  A WRITE
 *   longer than the smaller max_msg of the two sides (the ports' max_msg_sz: 1 GiB on ConnectX, announced in the
 *   handshake) is posted as several, in order on the QP.  imm (host order, sent big-endian):
 *     bit 31 = 0  single receive of at most 2^31-1 bytes: imm = the number of bytes sent; the data's last WR per
 *                 QP is the WRITE_WITH_IMM, so a message up to max_msg bytes is exactly one WR per QP used;
 *     bit 31 = 1  the sizes ride in the receiver's sizes row (a grouped receive, n > 1, or a single one of 2^31
 *                 bytes or more): low 31 bits = seq & 0x7fffffff; the WRITE_WITH_IMM carries the n sent sizes
 *                 (uint64) into the receiver's sizes array, slot m % SLOTS.
 *   That is NCCL IB's count: n data WRITEs + 1 WRITE_WITH_IMM per QP for a group of n > 1,
 *   1 WRITE_WITH_IMM per QP for a single receive.  A message is at most GDR_RDMA_MAX_MSG bytes (NCCL's own largest
 *   network message, 1 TiB); test() reports INT_MAX for one above INT_MAX (its sizes are int in every ABI).
 *
 * Multi-QP (nparts = the stripes of a message):
 *   split = 1: nparts = nqps, message m goes over every QP, QP q carrying bytes [q*chunk, min(size,(q+1)*chunk))
 *              with chunk = roundup(ceil(size / nparts), 128): a 128-byte line (LL/LL128) never
 *              straddles two QPs;
 *   split = 0: nparts = the sender's devices (1 unless fused): message m goes whole to QP m % nqps, or, fused, in
 *              nparts stripes to QPs (m * nparts + p) % nqps, one on each of the sender's devices;
 *   stripes past the end carry a zero-length WRITE_WITH_IMM so that the receiver counts exactly nparts
 *   completions per message (none for a message whose sizes ride in the row, where only the imms count).
 *   A receive completes only when every QP that carries part of it has delivered its WRITE_WITH_IMM
 *   (RC places a QP's writes before its later WRITE_WITH_IMM completes).
 */
#ifndef GDRNET_RDMA_PROTO_H
#define GDRNET_RDMA_PROTO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GDR_RDMA_MAX_REQS 32 /* NCCL_NET_MAX_REQUESTS: in-flight messages per comm */
#define GDR_RDMA_MAX_RECVS 8 /* maxRecvs: buffers of one grouped receive */
#define GDR_RDMA_FIFO_SLOTS GDR_RDMA_MAX_REQS
#define GDR_RDMA_MAX_QPS 16           /* GDRNET_QPS_PER_CONN upper bound */
#define GDR_RDMA_CHUNK_ALIGN 128      /* LL128 line: never split across QPs */
#define GDR_RDMA_MAX_CONN_DEVS 8      /* devices one connection stripes over (a fused device; GDR_MAX_FUSED) */
#define GDR_RDMA_MAX_MSG (1ull << 40) /* largest message: NCCL_MAX_NET_SIZE_BYTES, as the TCP transport */
#define GDR_RDMA_MIN_MAX_MSG 4096ull  /* the smallest max_msg a peer may announce */

/* ---- CTS entry ---- */
struct gdr_cts_entry {
  uint64_t addr;                         /* receive buffer (iova = VA) */
  uint64_t size;                         /* receive buffer size (the most the sender may write) */
  uint32_t tag;                          /* the receive's tag: matches isend's tag within a group */
  uint8_t nreqs;                         /* n of the grouped receive, identical in the group's n entries */
  uint8_t idx;                           /* position of this entry in the group */
  uint16_t rsvd;                         /* 0 */
  uint32_t rkey[GDR_RDMA_MAX_CONN_DEVS]; /* the buffer's rkey on each of the receiver's devices (unused ones 0) */
  uint64_t seq;                          /* message sequence + 1 (never 0); written last, polled by the sender */
};

_Static_assert(sizeof(struct gdr_cts_entry) == 64, "a CTS entry is 64 bytes");
_Static_assert(offsetof(struct gdr_cts_entry, seq) == 56, "seq is the entry's last 8 bytes");

/* One FIFO slot = one message's entries. Allocated page aligned. */
struct gdr_cts_slot {
  struct gdr_cts_entry e[GDR_RDMA_MAX_RECVS];
};
_Static_assert(sizeof(struct gdr_cts_slot) == 512, "a slot is 8 entries");

/* Receiver's array of sent sizes (grouped receives, and single ones of 2^31 bytes or more), one row per slot;
 * written by the sender. */
struct gdr_sizes_slot {
  uint64_t size[GDR_RDMA_MAX_RECVS];
};
_Static_assert(sizeof(struct gdr_sizes_slot) == 64, "a sizes row is 64 bytes");

/* ---- imm ---- */
#define GDR_IMM_GROUP_BIT 0x80000000u
#define GDR_IMM_SIZE_MAX 0x7fffffffu /* the largest single receive whose size the imm carries */

static inline uint32_t gdr_imm_single(uint32_t size) { return size & 0x7fffffffu; }
static inline uint32_t gdr_imm_group(uint64_t seq) { return GDR_IMM_GROUP_BIT | (uint32_t)(seq & 0x7fffffffu); }
static inline int gdr_imm_is_group(uint32_t imm) { return (imm & GDR_IMM_GROUP_BIT) != 0; }

/* ---- striping (split = 1) ---- */
/* Bytes per QP: ceil(size / nqps) rounded up to 128; 0 for a zero-byte message. */
static inline uint64_t gdr_stripe_chunk(uint64_t size, int nqps) {
  if (nqps < 1) nqps = 1;
  uint64_t per = (size + (uint64_t)nqps - 1) / (uint64_t)nqps;
  return (per + GDR_RDMA_CHUNK_ALIGN - 1) / GDR_RDMA_CHUNK_ALIGN * GDR_RDMA_CHUNK_ALIGN;
}

/* Part q of a message of `size` bytes over nqps QPs: [*off, *off + *len). Parts past the end are
 * empty (len 0, off = size). The parts tile [0, size) in order, every part but the last non-empty
 * one is exactly `chunk` bytes, and every offset is a multiple of 128. */
static inline void gdr_stripe_part(uint64_t size, int nqps, int q, uint64_t *off, uint64_t *len) {
  uint64_t chunk = gdr_stripe_chunk(size, nqps);
  uint64_t o = chunk * (uint64_t)q;
  if (o > size) o = size;
  uint64_t l = size - o;
  if (l > chunk) l = chunk;
  *off = o;
  *len = l;
}

/* The QP that carries stripe `part` (0..nparts-1) of message `seq`: with nparts = nqps (split) stripe p on QP p;
 * else the message's nparts stripes on consecutive QPs from (seq * nparts) % nqps (nparts 1: QP seq % nqps). */
static inline int gdr_stripe_qp(uint64_t seq, int nqps, int nparts, int part) {
  if (nqps <= 1) return 0;
  if (nparts == nqps) return part;
  return (int)(((seq % (uint64_t)nqps) * (uint64_t)nparts + (uint64_t)part) % (uint64_t)nqps);
}
/* How many stripes (and hence WRITE_WITH_IMM completions) one message has: every QP when split, else one per device
 * of the sender (1 unless fused). */
static inline int gdr_stripe_nparts(int nqps, int split, int sender_devs) {
  return split ? nqps : (sender_devs < 1 ? 1 : sender_devs);
}
/* Work requests of `len` bytes in pieces of at most max_wr. */
static inline uint64_t gdr_wr_pieces(uint64_t len, uint64_t max_wr) {
  return len == 0 ? 1 : (len + max_wr - 1) / max_wr;
}

/* ---- connection handshake (over the TCP control stream) ---- */
#define GDR_RDMA_HS_MAGIC 0x31524447u /* "GDR1" little-endian; a byte-swapped peer reads 0x47445231 */
/* 1: 256-byte handshake, 32-byte CTS entries with one rkey, 31-bit sizes (messages < 2 GiB), one device. 2: this. */
#define GDR_RDMA_HS_VERSION 2
enum { GDR_RDMA_ROLE_SEND = 1, GDR_RDMA_ROLE_RECV = 2 };
#define GDR_RDMA_CAP_RELAXED_ORDERING 0x1u /* this side registers with relaxed ordering */
#define GDR_RDMA_CAP_GDR 0x2u              /* this side can register device memory */
#define GDR_RDMA_CAP_FLUSH 0x4u            /* receiver flushes GDR writes with a loopback READ */
#define GDR_RDMA_CAP_RECOVERY 0x8u         /* speaks the REC_* control records (recover.c); else a fault fails */
#define GDR_RDMA_CAP_FALLBACK 0x10u        /* speaks FB_* / BACK_* (fallback.c): can move the connection to TCP */
#define GDR_RDMA_CAP_TCP_ONLY 0x20u        /* this side's RDMA part could not be set up: the connection runs on TCP */
#define GDR_RDMA_CAP_BACK_TAGS                                                                                         \
  0x40u /* BACK_SWITCH/AT/FINAL carry per-tag counts (struct gdr_rdma_back_tag):
                                            * without it on both sides a connection on TCP stays there */

/* One device of a side: where its QPs are, and the rkey of the side's own buffer (sender: FIFO; receiver: sizes
 * array) on it. */
struct gdr_rdma_addr {
  uint8_t link_layer; /* IBV_LINK_LAYER_INFINIBAND (1) or _ETHERNET (2) */
  uint8_t port;
  uint8_t mtu; /* active MTU, enum ibv_mtu 1..5 (or the GDRNET_IB_MTU cap) */
  uint8_t gid_index;
  uint8_t is_global; /* GID valid/needed: RoCE, or IB with a GRH */
  uint8_t rsvd0;
  uint16_t lid;
  uint32_t rkey;
  uint32_t rsvd1;
  uint8_t gid[16]; /* port GID at gid_index (IB: the subnet prefix decides whether a GRH is needed) */
};
_Static_assert(sizeof(struct gdr_rdma_addr) == 32, "a device address is 32 bytes");

struct gdr_rdma_hs {
  uint32_t magic;
  uint16_t version;
  uint16_t size;    /* sizeof(struct gdr_rdma_hs) */
  uint32_t caps;    /* GDR_RDMA_CAP_* */
  uint8_t role;     /* GDR_RDMA_ROLE_* of the writer */
  uint8_t nqps;     /* data QPs (the sender decides; the receiver echoes) */
  uint8_t split;    /* GDRNET_SPLIT_DATA (the sender decides; the receiver echoes) */
  uint8_t ndevs;    /* this side's devices (1..8): QP i is on dev[i % ndevs] */
  uint64_t max_msg; /* the longest work request this side's devices take (the smallest port max_msg_sz) */
  uint64_t raddr;   /* sender: its CTS FIFO; receiver: its sizes array (rkeys in dev[]) */
  uint32_t qpn[GDR_RDMA_MAX_QPS];
  uint32_t psn[GDR_RDMA_MAX_QPS];
  struct gdr_rdma_addr dev[GDR_RDMA_MAX_CONN_DEVS];
  char devname[64]; /* for logs: the device NCCL connected (a fused one's "a+b") */
};
_Static_assert(sizeof(struct gdr_rdma_hs) == 480, "the handshake blob is 480 bytes");
_Static_assert(offsetof(struct gdr_rdma_hs, version) == 4 && offsetof(struct gdr_rdma_hs, size) == 6,
               "magic, version and size where every version has them");

/* ---- control channel records (after the handshake) ---- */
/* Control-channel records after the handshake: a 32-byte header, then `len` payload bytes. Version-1 peers wrote
 * `uint32_t type` where type and len now are: their records read as len 0. */
#define GDR_RDMA_CTRL_MAGIC 0x43524447u /* "GDRC" */
enum {
  GDR_CTRL_SIZE_ERR = 1,  /* sender -> receiver: message seq is a bytes, its receive only b */
  GDR_CTRL_BYE = 2,       /* the comm is closing; seq = messages this side posted */
  GDR_CTRL_REC_REQ = 3,   /* receiver -> sender: recover, attempt seq (the sender answers with REC_STATE); a = whose
                           * own buffers get new keys in it (bit 0 the sender's, bit 1 the receiver's; 0: none
                           * named, as from a plugin before this field; other bits ignored) */
  GDR_CTRL_REC_STATE = 4, /* both: attempt seq, a as REC_REQ's; payload struct gdr_rdma_rec_state */
  GDR_CTRL_REC_GO = 5,    /* sender -> receiver: attempt seq is done on the sender: write the clear-to-sends again */
  GDR_CTRL_REC_FAIL = 6,  /* this side gave up on the connection (a = its ncclResult_t); payload: the reason text */
  /* the fallback to TCP and back (fallback.c); seq = the fallback epoch both sides count */
  GDR_CTRL_FB_REQ = 7,    /* sender -> receiver: move the connection to TCP; payload: the reason text */
  GDR_CTRL_FB_RSTATE = 8, /* receiver -> sender: what it has (struct gdr_rdma_fb_rstate), where its TCP listener is */
  GDR_CTRL_FB_SSTATE = 9, /* sender -> receiver: the parts already placed of what the receiver lacks */
  /* the way back; a = the offer number (both directions), seq = the epoch */
  GDR_CTRL_BACK_OFFER = 10,   /* receiver -> sender: its port is up again: new QPs (struct gdr_rdma_rec_state) */
  GDR_CTRL_BACK_READY = 11,   /* sender -> receiver: its new QPs are RTS (struct gdr_rdma_rec_state), FIFO cleared */
  GDR_CTRL_BACK_NOT_YET = 12, /* either way: not now (a port is down, the probe over the new QPs failed): later */
  /* BACK_SWITCH/AT/FINAL: payload struct gdr_rdma_back_tag[] (per tag, TCP messages of the whole connection), b =
   * their sum (for logs) */
  GDR_CTRL_BACK_SWITCH = 13, /* receiver -> sender: the probe went through; R = its TCP buffers per tag; it posts no
                               * more receives until BACK_AT; again while it posts TCP receives after BACK_AT (R grew:
                               * the sender may fill those over TCP) */
  GDR_CTRL_BACK_AT = 14,     /* sender -> receiver: S = its TCP messages per tag (accepted, or announced by an RTS):
                               * the receiver posts TCP receives until it has S_t buffers of every tag t */
  GDR_CTRL_BACK_FINAL = 15,  /* receiver -> sender: F >= S, its TCP buffers per tag when they covered S: the k-th
                               * message with tag t goes over TCP for k < F_t, else over RDMA (numbered from 0) */
  GDR_CTRL_TYPE_MAX = 15,
};
struct gdr_rdma_ctrl {
  uint32_t magic;
  uint16_t type;
  uint16_t len; /* payload bytes that follow, <= GDR_RDMA_CTRL_MAX_PAYLOAD */
  uint64_t seq;
  uint64_t a, b; /* SIZE_ERR: a = bytes the sender had, b = bytes the receive could take */
};
_Static_assert(sizeof(struct gdr_rdma_ctrl) == 32, "control record header is 32 bytes");
#define GDR_RDMA_CTRL_MAX_PAYLOAD 4096
/* The header's magic, type and length are sane for a peer of this role (ROLE_SEND: records a sender writes). NULL if
 * well-formed, else what is wrong. */
const char *gdr_rdma_ctrl_check(const struct gdr_rdma_ctrl *m, int writer_role);

/* REC_STATE: where this side's new QPs are, and (receiver) which messages it has received. */
struct gdr_rdma_rec_state {
  uint8_t nqps;
  uint8_t ndevs;
  uint16_t rsvd0;
  uint32_t rsvd1;
  uint32_t qpn[GDR_RDMA_MAX_QPS];
  uint32_t psn[GDR_RDMA_MAX_QPS];
  struct gdr_rdma_addr dev[GDR_RDMA_MAX_CONN_DEVS]; /* the devices' addresses now, and the rkeys of raddr */
  uint64_t raddr;      /* sender: its FIFO; receiver: its sizes array (new keys after a REKEY fault) */
  uint64_t head;       /* receiver: receives posted so far (messages < head) */
  uint32_t incomplete; /* receiver: bit i set = message head - 1 - i is posted and not complete */
  uint32_t rsvd2;
};
_Static_assert(sizeof(struct gdr_rdma_rec_state) == 416, "REC_STATE payload");
/* FB_RSTATE: the receiver's view when the connection moves to TCP, and its TCP listener's handle. */
struct gdr_rdma_fb_rstate {
  uint64_t head;           /* receives posted so far */
  uint32_t incomplete;     /* bit i set = message head - 1 - i is posted and not complete (as REC_STATE) */
  uint32_t flags;          /* GDR_RDMA_FB_REUSE: the TCP connection of an earlier fallback carries on (no listener) */
  uint8_t tcp_handle[128]; /* the TCP transport's handle (struct gdr_handle) of the listener for this connection */
};
_Static_assert(sizeof(struct gdr_rdma_fb_rstate) == 144, "FB_RSTATE payload");
#define GDR_RDMA_FB_REUSE 1u

/* FB_SSTATE: for each message the receiver lacks of which the sender posted parts, the parts already placed (their
 * writes were acknowledged) and their sizes: the receiver completes those buffers without waiting for them again. */
struct gdr_rdma_fb_sent {
  uint64_t seq;
  uint8_t n;      /* buffers of the receive */
  uint8_t placed; /* bit r: buffer r is placed with size[r] bytes */
  uint16_t rsvd0;
  uint32_t rsvd1;
  uint64_t size[GDR_RDMA_MAX_RECVS];
};
_Static_assert(sizeof(struct gdr_rdma_fb_sent) == 80, "FB_SSTATE entry");
#define GDR_RDMA_FB_MAX_SENT 32
/* An FB_SSTATE payload of len bytes: NULL if well-formed (whole entries, n in 1..8, placed within n), else what is
 * wrong. */
const char *gdr_rdma_fb_sstate_check(const void *payload, size_t len);

/* BACK_SWITCH/AT/FINAL: one entry per tag with a nonzero count, each tag once. */
struct gdr_rdma_back_tag {
  int32_t tag;
  uint32_t rsvd;
  uint64_t n; /* TCP messages (buffers) with that tag, of the whole connection */
};
_Static_assert(sizeof(struct gdr_rdma_back_tag) == 16, "BACK_* entry");
#define GDR_RDMA_BACK_MAX_TAGS 128
/* A BACK_SWITCH/AT/FINAL payload of len bytes: NULL if well-formed (whole entries, at most GDR_RDMA_BACK_MAX_TAGS,
 * each tag once, counts below 2^48), else what is wrong. */
const char *gdr_rdma_back_tags_check(const void *payload, size_t len);

/* A REC_STATE payload from a peer of writer_role for a connection of nqps QPs: NULL if well-formed, else what is
 * wrong. (Its device count is checked against the handshake's where it is used.) */
const char *gdr_rdma_rec_state_check(const struct gdr_rdma_rec_state *st, size_t len, int writer_role, int nqps);

/* Checks a received blob (sizes, magic, version, role, ranges). Returns NULL if well-formed,
 * else a static string naming what is wrong. A blob of another version says "protocol version mismatch"
 * (hs->version names it). */
const char *gdr_rdma_hs_check(const struct gdr_rdma_hs *hs, int expected_role);

#ifdef __cplusplus
}
#endif

#endif
