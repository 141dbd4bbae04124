/* Targets rdma_cts and rdma_imm: what the RDMA data path reads that the peer wrote into this process's memory or
 * completions. The plugin's own isend/irecv/test (p2p.c) run on a comm whose NIC is a fake of this file: its QPs'
 * post_send/post_recv check and record the work requests, its CQ returns completions the input decides. No
 * parser is copied; the fake only stands where hardware would. The comm is what conn.c builds, with a peer that
 * announced neither recovery nor fallback: a fault fails it (recovery and fallback need QPs this NIC cannot make;
 * their records' validators are fuzzed by rdma_ctrl).
 *
 * rdma_cts (FZ_SIDE_SEND): a send comm. The fuzzer writes clear-to-send entries into the comm's FIFO (as the
 *   receiver's RDMA WRITE does: well-formed-ish entries of fuzzed fields, or raw bytes anywhere in the FIFO), calls
 *   isend with fuzzed sizes and tags, delivers completions (good, or failed ones), writes control records, calls
 *   test. Messages go up to 8 GiB (the fake never touches the send buffer: its addresses are only checked), WRs of at
 *   most 1 GiB or 64 KiB (fuzzed). Invariants checked by the fake NIC: every local SGE lies inside the buffer isend
 *   was given (or the comm's own sizes array); a WRITE lands inside an entry the receiver offered for that message,
 *   with its rkey (a part is posted by the isend that matched it, from the entry it checked), and is no longer than
 *   the largest WR; the sizes WRITE_WITH_IMM inside the receiver's sizes array; every WR is signaled and no QP has
 *   more than its send queue's WRs outstanding; a completed send reports its size; a posted message's sends complete
 *   or fail once their completions arrived.
 * rdma_imm (FZ_SIDE_RECV): a receive comm. The fuzzer posts grouped or single receives (irecv), delivers receive
 *   completions with fuzzed immediate data and wr_id, writes the grouped-receive sizes array (as the sender's
 *   WRITE_WITH_IMM does), calls test. Invariants: a completed receive reports, per buffer, at most what was posted;
 *   the CTS WRITE the plugin posts carries exactly the posted buffers; receive WRs consume no buffer. */
#include "fz.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdma/rdma.h"

#define SBUF_LEN (8ull << 30) /* the send buffer's span: addresses only, never touched */
#define SBUF_ADDR 0x100000000ull
#define NOUT 64
#define MAXOPS 128
#define SBUF_LKEY 0x5151u
#define SIZES_LKEY 0x5252u
#define CTS_LKEY 0x5353u
#define RBUF_RKEY 0x6161u
#define RSIZES_ADDR 0x70000000ull
#define RSIZES_RKEY 0x7171u
#define RFIFO_ADDR 0x7a000000ull
#define RFIFO_RKEY 0x7a7au

/* ------------------------------------------------------------------------------------------ fake NIC -- */

struct fz_nic {
  struct ibv_context ctx;
  struct ibv_cq cq;
  struct ibv_qp qp[GDR_RDMA_MAX_QPS];
  struct ibv_wc ring[4096];
  unsigned head, tail;
  struct gdr_rdma_comm *c;
  uint8_t *sbuf;            /* send side: the one buffer isend is given */
  int sq[GDR_RDMA_MAX_QPS]; /* send side: WRs posted per QP whose completion was not polled */
  uint64_t last_wr_id;
  uint64_t posted_recv_wrs, cts_writes;
};
static struct fz_nic nic;

static void cq_push(uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t qpn, uint32_t imm) {
  struct ibv_wc *w;
  if (nic.tail - nic.head >= sizeof(nic.ring) / sizeof(nic.ring[0])) return; /* CQ overrun: dropped */
  w = &nic.ring[nic.tail++ % (sizeof(nic.ring) / sizeof(nic.ring[0]))];
  memset(w, 0, sizeof(*w));
  w->wr_id = wr_id;
  w->status = st;
  w->opcode = op;
  w->qp_num = qpn;
  w->imm_data = htobe32(imm);
  w->wc_flags = IBV_WC_WITH_IMM;
}

static int in_range(uint64_t a, uint64_t len, uint64_t base, uint64_t blen) {
  return a >= base && len <= blen && a - base <= blen - len;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  struct gdr_rdma_comm *c = nic.c;
  int n = 0;
  for (; wr != NULL; wr = wr->next, n++) {
    uint64_t len = wr->num_sge ? wr->sg_list[0].length : 0;
    int slot = gdr_wr_data_slot(wr->wr_id);
    if (n > GDR_RDMA_MAX_RECVS + 1 || wr->num_sge > 1) fz_fail("a chain of %d WRs / %d SGEs", n, wr->num_sge);
    if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
      fz_fail("opcode %d posted", wr->opcode);
    if (c->kind == GDR_RCOMM_SEND) {
      int q = (int)(qp - nic.qp);
      if (!(wr->send_flags & IBV_SEND_SIGNALED)) fz_fail("an unsignaled WR of the sender");
      if (len > c->max_wr)
        fz_fail("a WR of %llu bytes, the largest is %llu", (unsigned long long)len, (unsigned long long)c->max_wr);
      if (++nic.sq[q] > GDR_RDMA_QP_SEND_WR) fz_fail("QP %d has %d WRs outstanding", q, nic.sq[q]);
    }
    if (len && !(wr->send_flags & IBV_SEND_INLINE)) {
      const struct ibv_sge *s = &wr->sg_list[0];
      int ok = 0;
      if (s->lkey == SBUF_LKEY) ok = in_range(s->addr, s->length, SBUF_ADDR, SBUF_LEN);
      if (s->lkey == SIZES_LKEY && c->sizes_src)
        ok = in_range(s->addr, s->length, (uintptr_t)c->sizes_src, sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS);
      if (s->lkey == CTS_LKEY && c->cts_src)
        ok = in_range(s->addr, s->length, (uintptr_t)c->cts_src, sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
      if (!ok)
        fz_fail("a local SGE [0x%llx, +%u) lkey 0x%x outside its buffer", (unsigned long long)s->addr, s->length,
                s->lkey);
    }
    if (c->kind == GDR_RCOMM_RECV) {
      /* the receiver's only send: its CTS entries into the sender's FIFO */
      const struct gdr_cts_entry *e = (const struct gdr_cts_entry *)(uintptr_t)wr->sg_list[0].addr;
      if (wr->wr.rdma.rkey != RFIFO_RKEY || wr->opcode != IBV_WR_RDMA_WRITE || len % sizeof(*e) != 0 || len == 0 ||
          !in_range(wr->wr.rdma.remote_addr, len, RFIFO_ADDR, sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS))
        fz_fail("a malformed clear-to-send WRITE");
      for (uint64_t i = 0; i < len / sizeof(*e); i++)
        if (e[i].nreqs != len / sizeof(*e) || e[i].idx != i || e[i].seq == 0)
          fz_fail("a malformed CTS entry %llu", (unsigned long long)i);
      nic.cts_writes++;
    } else if (gdr_wr_kind(wr->wr_id) == GDR_WR_IMM) {
      /* the sizes row, known by its wr_id: a data WRITE may carry any rkey the receiver's CTS named, this one too */
      if (wr->wr.rdma.rkey != RSIZES_RKEY || wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM || len == 0 ||
          !in_range(wr->wr.rdma.remote_addr, len, RSIZES_ADDR, sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS) ||
          len > sizeof(struct gdr_sizes_slot))
        fz_fail("the sizes WRITE_WITH_IMM lands outside the receiver's sizes array");
    } else if (len > 0) {
      /* data: inside one entry the receiver offered for this message */
      const struct gdr_cts_entry *e = c->fifo[slot].e;
      int ok = 0;
      for (int r = 0; r < GDR_RDMA_MAX_RECVS && !ok; r++)
        ok = e[r].rkey[0] == wr->wr.rdma.rkey && in_range(wr->wr.rdma.remote_addr, len, e[r].addr, e[r].size);
      if (!ok)
        fz_fail("a WRITE of %llu bytes to 0x%llx rkey 0x%x is outside every entry of slot %d", (unsigned long long)len,
                (unsigned long long)wr->wr.rdma.remote_addr, wr->wr.rdma.rkey, slot);
    }
    if (wr->send_flags & IBV_SEND_SIGNALED) {
      nic.last_wr_id = wr->wr_id;
      cq_push(wr->wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, qp->qp_num, 0);
    }
  }
  (void)bad;
  return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  (void)qp;
  (void)bad;
  for (; wr != NULL; wr = wr->next) {
    if (wr->num_sge != 0) fz_fail("a receive WR with %d SGEs (WRITE_WITH_IMM consumes no buffer)", wr->num_sge);
    nic.posted_recv_wrs++;
  }
  return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  int k = 0;
  (void)cq;
  while (k < n && nic.head != nic.tail) {
    wc[k] = nic.ring[nic.head++ % (sizeof(nic.ring) / sizeof(nic.ring[0]))];
    for (int q = 0; q < GDR_RDMA_MAX_QPS; q++) /* (as the plugin counts: every completion of a QP frees a slot) */
      if (wc[k].qp_num == nic.qp[q].qp_num && nic.sq[q] > 0) nic.sq[q]--;
    k++;
  }
  return k;
}

/* ------------------------------------------------------------------------------------------ the comm -- */

static struct gdr_rdma_dev fzdev;
static struct ibv_mr sizes_mr, cts_mr;

static void *page_alloc(size_t len) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, len) != 0) fz_fail("out of memory");
  memset(p, 0, len);
  return p;
}

static struct gdr_rdma_comm *comm_new(int kind, int nqps, int split, uint64_t max_wr, int fd) {
  struct gdr_rdma_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) fz_fail("out of memory");
  memset(&nic, 0, sizeof(nic));
  nic.ctx.ops.post_send = fake_post_send;
  nic.ctx.ops.post_recv = fake_post_recv;
  nic.ctx.ops.poll_cq = fake_poll_cq;
  nic.cq.context = &nic.ctx;
  nic.c = c;
  snprintf(fzdev.name, sizeof(fzdev.name), "fz0");
  fzdev.port = 1;
  fzdev.link_layer = IBV_LINK_LAYER_ETHERNET;
  /* what conn.c's comm_alloc and the handshake leave; the peer announced no recovery or fallback (remote.caps 0):
   * a fault fails the comm instead of bringing up QPs this fake NIC does not have */
  c->kind = kind;
  c->dev = &fzdev;
  c->ndevs = 1;
  c->m[0].dev = &fzdev;
  c->remote.ndevs = 1;
  c->max_wr = max_wr;
  c->fd = fd;
  gdr_health_init(&c->health);
  gdr_rdma_pending_init(&c->pending);
  c->up = &gdr_rdma_resiliency; /* (what the transport's table hands every connection it returns) */
  snprintf(c->peer, sizeof(c->peer), "fuzzer");
  snprintf(c->desc, sizeof(c->desc), "RDMA %s connection with the fuzzer (fz0 port 1)",
           kind == GDR_RCOMM_SEND ? "send" : "receive");
  c->qs.cq = &nic.cq;
  c->qs.cqs[0] = &nic.cq;
  c->qs.ncq = 1;
  c->nqps = nqps;
  c->split = split;
  c->nparts = gdr_stripe_nparts(nqps, split, 1);
  for (int i = 0; i < nqps; i++) {
    nic.qp[i].context = &nic.ctx;
    nic.qp[i].qp_num = 0x100u + (unsigned)i;
    c->qs.qps[i] = &nic.qp[i];
  }
  c->qs.max_inline = 256;
  c->nreqs_pool = kind == GDR_RCOMM_SEND ? GDR_RDMA_SEND_REQS : 2 * GDR_RDMA_MAX_REQS;
  c->reqs = calloc((size_t)c->nreqs_pool, sizeof(*c->reqs));
  if (kind == GDR_RCOMM_SEND) {
    c->fifo = page_alloc(sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
    c->sizes_src = page_alloc(sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS);
    sizes_mr.lkey = SIZES_LKEY;
    c->m[0].sizes_src_mr = &sizes_mr;
    c->rsizes_addr = RSIZES_ADDR;
    c->rsizes_rkey[0] = RSIZES_RKEY;
  } else {
    c->cts_src = page_alloc(sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
    c->sizes = page_alloc(sizeof(struct gdr_sizes_slot) * GDR_RDMA_FIFO_SLOTS);
    cts_mr.lkey = CTS_LKEY;
    c->m[0].cts_src_mr = &cts_mr;
    c->rfifo_addr = RFIFO_ADDR;
    c->rfifo_rkey[0] = RFIFO_RKEY;
  }
  if (c->reqs == NULL) fz_fail("out of memory");
  return c;
}

static void comm_free(struct gdr_rdma_comm *c) {
  free(c->fifo);
  free(c->sizes_src);
  free(c->cts_src);
  free(c->sizes);
  free(c->reqs);
  gdr_rdma_pending_destroy(&c->pending);
  free(c);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_quiet_log();
  return 0;
}

/* ------------------------------------------------------------------------------------------- sender -- */

#ifdef FZ_SIDE_SEND
struct out {
  void *req;
  size_t size;
  uint64_t seq;
};

/* 1 when finished (completed and checked, or failed) */
static int test_send(struct gdr_rdma_comm *c, struct out *o) {
  size_t sizes[GDR_RDMA_MAX_RECVS] = {0};
  int done = 0;
  (void)c;
  if (gdr_rdma_test(o->req, &done, sizes) != ncclSuccess) return 1;
  if (!done) return 0;
  if (sizes[0] != o->size) fz_fail("a send of %zu bytes completed with %zu", o->size, sizes[0]);
  return 1;
}

static void run(struct fz_in *in, int comm_fd, int peer_fd) {
  uint8_t flags = fz_u8(in);
  int nqps = 1 + (flags & 3), split = (flags >> 2) & 1;
  /* WRs of at most 1 GiB (as ConnectX: messages above it are cut), or 64 KiB (many pieces, full send queues) */
  const uint64_t max_wr = flags & 8 ? 65536 : 1ull << 30, big = flags & 8 ? 1ull << 20 : SBUF_LEN;
  struct gdr_rdma_comm *c = comm_new(GDR_RCOMM_SEND, nqps, split, max_wr, comm_fd);
  struct gdr_rdma_mh mh;
  struct out out[NOUT];
  int nout = 0, ops = 0;

  nic.sbuf = (uint8_t *)(uintptr_t)SBUF_ADDR;
  memset(&mh, 0, sizeof(mh));
  mh.magic = GDR_RDMA_MH_MAGIC;
  mh.n = 1;
  mh.base = SBUF_ADDR;
  mh.len = SBUF_LEN;
  mh.lkey[0] = SBUF_LKEY;
  mh.rkey[0] = 0x5150u;
  while (fz_left(in) && ops++ < MAXOPS) {
    int slot = (int)(c->head % GDR_RDMA_FIFO_SLOTS);
    switch (fz_u8(in) % 6) {
    case 0: { /* a CTS entry of the current (or a fuzzed) message, placed as the NIC would: seq last */
      struct gdr_cts_entry e;
      uint8_t f = fz_u8(in);
      int r = fz_u8(in) % GDR_RDMA_MAX_RECVS;
      if (f & 1) slot = fz_u8(in) % GDR_RDMA_FIFO_SLOTS;
      memset(&e, 0, sizeof(e));
      e.addr = f & 2 ? fz_u64(in) : 0x20000000ull + ((uint64_t)fz_u16(in) << 12);
      e.size = f & 4 ? fz_u64(in) : fz_u64(in) % (2 * big);
      e.rkey[0] = f & 8 ? fz_u32(in) : RBUF_RKEY;
      e.tag = fz_u8(in) % 4;
      e.nreqs = f & 16 ? fz_u8(in) : 1 + fz_u8(in) % GDR_RDMA_MAX_RECVS;
      e.idx = (uint8_t)r;
      e.rsvd = 0;
      e.seq = f & 32 ? fz_u64(in) : c->head + 1;
      memcpy(&c->fifo[slot].e[r], &e, offsetof(struct gdr_cts_entry, seq));
      __atomic_store_n(&c->fifo[slot].e[r].seq, e.seq, __ATOMIC_RELEASE);
      break;
    }
    case 1: { /* raw bytes anywhere in the FIFO */
      size_t off = fz_u16(in) % (sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
      size_t len = fz_u8(in) % 64, room = sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS - off;
      uint8_t b[64];
      len = fz_bytes(in, b, len < room ? len : room);
      memcpy((uint8_t *)c->fifo + off, b, len);
      break;
    }
    case 2: { /* isend */
      uint8_t f = fz_u8(in);
      size_t size = f & 1 ? fz_u64(in) % big : fz_u16(in) % 4096;
      int tag = fz_u8(in) % 4;
      void *req = NULL;
      if (nout == NOUT) break;
      if (gdr_rdma_isend(c, nic.sbuf, size, tag, &mh, &req) == ncclSuccess && req != NULL) {
        out[nout].req = req;
        out[nout].size = size;
        out[nout].seq = ((struct gdr_rdma_req *)req)->seq;
        nout++;
      }
      break;
    }
    case 3: /* test */
      for (int i = 0; i < nout; i++)
        if (out[i].req != NULL && test_send(c, &out[i])) out[i].req = NULL;
      break;
    case 4: { /* a failed completion of the last signaled WR, or of a fuzzed wr_id */
      uint8_t f = fz_u8(in);
      uint64_t id = f & 1 ? fz_u64(in) : nic.last_wr_id;
      cq_push(id, (enum ibv_wc_status)(1 + fz_u8(in) % 21), IBV_WC_RDMA_WRITE, 0x100, 0);
      break;
    }
    default: { /* a control record from the receiver */
      uint8_t b[64];
      size_t k = fz_bytes(in, b, fz_u8(in) % sizeof(b));
      (void)fz_write(peer_fd, b, k);
      break;
    }
    }
  }
  /* every completion was delivered: a send of a posted message must finish */
  for (int i = 0; i < nout; i++) {
    int k = 0;
    if (out[i].req == NULL || out[i].seq >= c->head) continue;
    while (!test_send(c, &out[i]))
      if (++k > 100) fz_fail("a send of posted message #%llu never completes", (unsigned long long)out[i].seq);
    out[i].req = NULL;
  }
  comm_free(c);
}
#endif

/* ------------------------------------------------------------------------------------------ receiver -- */

#ifdef FZ_SIDE_RECV
struct out {
  void *req;
  int n;
  size_t cap[GDR_RDMA_MAX_RECVS];
  uint8_t *buf[GDR_RDMA_MAX_RECVS];
};

static int test_recv(struct out *o) {
  size_t sizes[GDR_RDMA_MAX_RECVS] = {0};
  int done = 0;
  if (gdr_rdma_test(o->req, &done, sizes) != ncclSuccess) return 1;
  if (!done) return 0;
  for (int i = 0; i < o->n; i++)
    if (sizes[i] > o->cap[i]) fz_fail("buffer %d of a receive of %zu bytes completed with %zu", i, o->cap[i], sizes[i]);
  return 1;
}

static void run(struct fz_in *in, int comm_fd, int peer_fd) {
  uint8_t flags = fz_u8(in);
  int nqps = 1 + (flags & 3), split = (flags >> 2) & 1;
  struct gdr_rdma_comm *c = comm_new(GDR_RCOMM_RECV, nqps, split, 1ull << 30, comm_fd);
  struct gdr_rdma_mh mh;
  struct out out[NOUT];
  int nout = 0, ops = 0;

  memset(&mh, 0, sizeof(mh));
  mh.magic = GDR_RDMA_MH_MAGIC;
  mh.n = 1;
  mh.lkey[0] = 0x6160u;
  mh.rkey[0] = RBUF_RKEY;
  memset(out, 0, sizeof(out));
  while (fz_left(in) && ops++ < MAXOPS) {
    switch (fz_u8(in) % 5) {
    case 0: { /* irecv of 1..8 buffers */
      struct out *o = nout < NOUT ? &out[nout] : NULL;
      void *data[GDR_RDMA_MAX_RECVS], *mhs[GDR_RDMA_MAX_RECVS];
      size_t sizes[GDR_RDMA_MAX_RECVS];
      int tags[GDR_RDMA_MAX_RECVS];
      if (o == NULL) break;
      o->n = 1 + (fz_u8(in) % 4 == 0 ? fz_u8(in) % GDR_RDMA_MAX_RECVS : 0);
      for (int i = 0; i < o->n; i++) {
        uint8_t k = fz_u8(in);
        o->cap[i] = k & 1 ? fz_u32(in) : k & 2 ? fz_u64(in) % (GDR_RDMA_MAX_MSG + 1) : fz_u16(in); /* (to 1 TiB) */
        o->buf[i] = malloc(1);
        if (o->buf[i] == NULL) fz_fail("out of memory");
        data[i] = o->buf[i]; /* never written: the fake NIC places nothing */
        sizes[i] = o->cap[i];
        tags[i] = i;
        mhs[i] = &mh;
      }
      if (gdr_rdma_irecv(c, o->n, data, sizes, tags, mhs, &o->req) != ncclSuccess) o->req = NULL;
      if (o->req == NULL) {
        for (int i = 0; i < o->n; i++) free(o->buf[i]);
      } else {
        nout++;
      }
      break;
    }
    case 1: { /* a receive completion with fuzzed immediate data: for the oldest posted receive, or a fuzzed wr_id */
      uint8_t f = fz_u8(in);
      uint64_t seq = c->head > 0 ? c->head - 1 - (fz_u8(in) % (c->head < 32 ? c->head : 32)) : 0;
      uint64_t id = f & 1 ? fz_u64(in) : gdr_wr_id(GDR_WR_RECV, (int)(seq % GDR_RDMA_FIFO_SLOTS), seq);
      uint32_t imm = f & 2 ? fz_u32(in) : (f & 4 ? gdr_imm_group(seq) : fz_u32(in) % (1u << 20));
      cq_push(id, f & 8 ? (enum ibv_wc_status)(1 + fz_u8(in) % 21) : IBV_WC_SUCCESS,
              f & 16 ? (enum ibv_wc_opcode)fz_u8(in) : IBV_WC_RECV_RDMA_WITH_IMM, 0x100, imm);
      break;
    }
    case 2: { /* the sender's sizes WRITE into the sizes array */
      int slot = fz_u8(in) % GDR_RDMA_FIFO_SLOTS;
      struct gdr_sizes_slot s;
      fz_bytes(in, &s, sizeof(s));
      memcpy(&c->sizes[slot], &s, sizeof(s));
      break;
    }
    case 3:
      for (int i = 0; i < nout; i++)
        if (out[i].req != NULL && test_recv(&out[i])) out[i].req = NULL;
      break;
    default: { /* control records from the sender */
      uint8_t b[64];
      size_t k = fz_bytes(in, b, fz_u8(in) % sizeof(b));
      (void)fz_write(peer_fd, b, k);
      break;
    }
    }
  }
  if (nic.posted_recv_wrs != (uint64_t)c->head * (uint64_t)c->nparts || nic.cts_writes != c->head)
    fz_fail("%llu receives posted %llu receive WRs and %llu CTS writes", (unsigned long long)c->head,
            (unsigned long long)nic.posted_recv_wrs, (unsigned long long)nic.cts_writes);
  for (int i = 0; i < nout; i++)
    for (int k = 0; k < out[i].n; k++) free(out[i].buf[k]);
  comm_free(c);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) fz_fail("socketpair failed");
  run(&in, sv[0], sv[1]);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
