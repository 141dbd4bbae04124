/* Target gin_msg: every GIN message a peer sends on the one-sided message path (plugin/gin/tcp_os.c): headers of
 * every operation (REG, PUT with inline bytes, data or a signal, GET, GET_REPLY, FLUSH, FLUSH_ACK, ABORT, MOVE) and
 * the QP exchange's GIN_OP_QP / QP_READY, as gin_os_rx_msg() takes them from a peer's receive buffer, then the data
 * a PUT or GET_REPLY announces (gin_os_rx_data_done). The comm is rank 0 of 2 with the memory of gin_os_alloc (no
 * net-core comms: what it queues towards a peer is checked and dropped), two host windows (ids 0 and 1, 256 and 64
 * bytes; the next id to register 2 + flags bits 0..1) and three operations waiting for replies (cookies 1 << 32 | k:
 * k = 0 a get of rank 1, 1 a flush of rank 1, 2 a get of rank 0). With the RDMA transport built, a GIN_OP_QP payload
 * also goes to gin_rdma_qpinfo_check. Input: flags, then messages {peer: u8 & 1, len: u16 % (GIN_MSG_MAX + 1),
 * len bytes}, until the input ends or one is refused (the comm's error is sticky).
 * Invariants: no crash, leak or sanitizer report; a refused message returns ncclRemoteError (ncclInvalidUsage for
 * the QP exchange on a comm without the RDMA path); data is only ever written into a window's bytes (what a header
 * announces lands inside the window it names, and a GET's reply is read from inside one); the early registrations
 * stay within GIN_EARLY_AHEAD per peer, never twice the same; no operation's count of what it waits for goes
 * negative; an accepted inline PUT's bytes are in its window; an accepted QP address has its fields in range. */
#include "fz.h"

#include <stdlib.h>

#include "gin/gin_int.h"

#define NWIN 2
static const size_t k_win_size[NWIN] = {256, 64};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_quiet_log();
  return 0;
}

struct fz_gin {
  struct gin_comm c;
  struct gin_mr mr[NWIN];
  struct gin_req *req[3];
};

static void win_init(struct fz_gin *f, int i) {
  struct gin_mr *m = &f->mr[i];
  m->magic = GDR_GIN_MR_MAGIC;
  m->id = (uint32_t)i;
  m->comm = &f->c;
  m->size = k_win_size[i];
  m->base = calloc(1, m->size);
  m->type = NCCL_PTR_HOST;
  m->smh = calloc(2, sizeof(void *));
  m->rmh = calloc(2, sizeof(void *));
  m->peer_size = calloc(2, sizeof(uint64_t));
  m->peer_va = calloc(2, sizeof(uint64_t));
  m->peer_rkey = calloc(2, sizeof(uint32_t));
  if (!m->base || !m->smh || !m->rmh || !m->peer_size || !m->peer_va || !m->peer_rkey) fz_fail("out of memory");
  m->peer_size[0] = m->peer_size[1] = UINT64_MAX;
  m->next = f->c.mrs;
  f->c.mrs = m;
}

static void win_free(struct gin_mr *m) {
  free(m->base);
  free(m->smh);
  free(m->rmh);
  free(m->peer_size);
  free(m->peer_va);
  free(m->peer_rkey);
}

static int in_window(struct fz_gin *f, const char *p, size_t n) {
  for (int i = 0; i < NWIN; i++)
    if (p >= f->mr[i].base && n <= f->mr[i].size && p - f->mr[i].base <= (ptrdiff_t)(f->mr[i].size - n)) return 1;
  return 0;
}

/* what the message queued towards a peer: headers from its tx ring, data from inside a window; then dropped */
static void drain(struct fz_gin *f) {
  for (int r = 0; r < f->c.nranks; r++) {
    struct gin_peer *p = &f->c.peers[r];
    for (uint32_t i = p->head; i != p->tail; i++) {
      struct gin_send *e = &p->q[i % p->qcap];
      int in_tx = e->data >= (char *)p->tx && e->data < (char *)p->tx + (size_t)p->qcap * GIN_MSG_MAX;
      if (!in_tx && !in_window(f, e->data, e->size)) fz_fail("a reply reads %zu bytes outside every window", e->size);
      if (in_tx && e->size > GIN_MSG_MAX) fz_fail("a queued header of %zu bytes", e->size);
    }
    p->head = p->tail;
  }
}

static void check_state(struct fz_gin *f) {
  for (const struct gin_early *e = f->c.early; e != NULL; e = e->next) {
    int same = 0, n = 0;
    for (const struct gin_early *o = f->c.early; o != NULL; o = o->next)
      if (o->peer == e->peer) n++, same += o->id == e->id;
    if (same != 1 || n > (int)GIN_EARLY_AHEAD || e->id - f->c.next_mr_id >= GIN_EARLY_AHEAD)
      fz_fail("early registration %u of rank %d: %d alike, %d of that rank", e->id, e->peer, same, n);
  }
  for (int k = 0; k < 3; k++)
    if (f->req[k]->pending < 0) fz_fail("request %d waits for %d", k, f->req[k]->pending);
}

#ifdef GDRNET_HAVE_RDMA
static void qp_payload(const uint8_t *q) {
  uint32_t qpn, psn;
  memcpy(&qpn, q, 4);
  memcpy(&psn, q + 4, 4);
  if (gin_rdma_qpinfo_check(q) == NULL &&
      (qpn == 0 || qpn > 0xffffffu || psn > 0xffffffu || q[10] < 1 || q[10] > 5 || (q[11] != 1 && q[11] != 2)))
    fz_fail("an accepted QP address: qpn 0x%x psn 0x%x mtu %u link layer %u", qpn, psn, q[10], q[11]);
}
#endif

/* one message from peer; returns its result */
static ncclResult_t one(struct fz_gin *f, int peer, struct fz_in *in) {
  struct gin_peer *p = &f->c.peers[peer];
  size_t len = fz_u16(in) % (GIN_MSG_MAX + 1);
  struct gin_hdr h;
  int more = 0, stall = 0;
  ncclResult_t res;
  fz_bytes(in, p->rx_buf, len);
  memcpy(&h, p->rx_buf, sizeof(h));
#ifdef GDRNET_HAVE_RDMA
  if (len >= sizeof(h) + GIN_QPINFO_BYTES) qp_payload(p->rx_buf + sizeof(h));
#endif
  res = gin_os_rx_msg(&f->c, peer, len, &more, &stall);
  if (res != ncclSuccess) {
    if (res != ncclRemoteError && !(res == ncclInvalidUsage && h.op >= GIN_OP_QP && h.op != GIN_OP_ABORT))
      fz_fail("a refused op %u returned %d", h.op, (int)res);
    if (more || stall) fz_fail("a refused message wants more");
    return res;
  }
  if (stall) fz_fail("a stall with room for every reply");
  if (more) {
    const struct gin_mr *m = gin_mr_find(&f->c, p->rx_hdr.mr);
    if ((p->rx_hdr.op != GIN_OP_PUT && p->rx_hdr.op != GIN_OP_GET_REPLY) || p->rx_hdr.size == 0 || m == NULL ||
        p->rx_dst < m->base || p->rx_hdr.size > m->size || (size_t)(p->rx_dst - m->base) > m->size - p->rx_hdr.size)
      fz_fail("op %u announces %llu data bytes outside window %u", p->rx_hdr.op, (unsigned long long)p->rx_hdr.size,
              p->rx_hdr.mr);
    memset(p->rx_dst, 0xd7, p->rx_hdr.size); /* the data, as the net core would place it */
    res = gin_os_rx_data_done(&f->c, peer);
    if (res != ncclSuccess && res != ncclRemoteError) fz_fail("data done returned %d", (int)res);
  } else if (h.op == GIN_OP_PUT && (h.flags & GIN_F_INLINE) && !(h.flags & GIN_F_SIGNAL)) {
    const struct gin_mr *m = gin_mr_find(&f->c, h.mr);
    if (m == NULL || memcmp(m->base + h.off, p->rx_buf + sizeof(h), h.size) != 0)
      fz_fail("an inline put of %llu bytes is not in window %u", (unsigned long long)h.size, h.mr);
  }
  drain(f);
  check_state(f);
  return res;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  struct fz_gin *f = calloc(1, sizeof(*f));
  uint8_t flags;
  if (f == NULL) fz_fail("out of memory");
  flags = fz_u8(&in);
  f->c.magic = GDR_GIN_COMM_MAGIC;
  f->c.rank = 0;
  f->c.nranks = 2;
  f->c.depth = 2;
  f->c.max_bytes = (size_t)1 << 20;
  f->c.path[GIN_PATH_RDMA] = &gin_rdma_path; /* its record check sees the QP records; no RDMA state: refused */
  f->c.peers = calloc(2, sizeof(*f->c.peers));
  if (f->c.peers == NULL || gin_os_alloc(&f->c) != ncclSuccess) fz_fail("gin_os_alloc failed");
  for (int i = 0; i < NWIN; i++) win_init(f, i);
  f->c.next_mr_id = NWIN + (flags & 3u);
  for (int k = 0; k < 3; k++) {
    struct gin_req *r = gin_req_get(&f->c);
    if (r == NULL || r->idx != (uint32_t)k || r->gen != 1) fz_fail("request %d from the pool", k);
    r->peer = k == 2 ? 0 : 1;
    r->pending = 1;
    r->await = k == 1 ? GIN_OP_FLUSH_ACK : GIN_OP_GET_REPLY;
    f->req[k] = r;
  }
  while (fz_left(&in)) {
    int peer = fz_u8(&in) & 1;
    if (one(f, peer, &in) != ncclSuccess) break;
  }
  while (f->c.early != NULL) {
    struct gin_early *e = f->c.early;
    f->c.early = e->next;
    free(e);
  }
  for (int i = 0; i < NWIN; i++) win_free(&f->mr[i]);
  gin_os_teardown(&f->c);
  free(f->c.peers);
  free(f);
  return 0;
}
