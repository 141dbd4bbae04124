/* Handshake blob validation (pure). See proto.h. */
#include "proto.h"

#include <string.h>

/* A device address of the handshake or of a recovery state. */
static const char *addr_check(const struct gdr_rdma_addr *a, int tcp_only) {
  if (a->link_layer != 1 && a->link_layer != 2) return "unknown link layer";
  if (a->mtu < 1 || a->mtu > 5) return "MTU out of range";
  if (a->port < 1) return "port out of range";
  if (tcp_only) return NULL;
  if (a->rkey == 0) return "missing FIFO/sizes rkey";
  if (a->link_layer == 1 && !a->is_global && (a->lid == 0 || a->lid >= 0xc000)) return "IB LID not unicast";
  return NULL;
}

const char *gdr_rdma_hs_check(const struct gdr_rdma_hs *hs, int expected_role) {
  if (hs->magic != GDR_RDMA_HS_MAGIC) {
    if (hs->magic == __builtin_bswap32(GDR_RDMA_HS_MAGIC)) return "peer has the other byte order";
    return "bad magic (not a libnccl-net-gdr RDMA peer)";
  }
  if (hs->version != GDR_RDMA_HS_VERSION) return "protocol version mismatch";
  if (hs->size != sizeof(*hs)) return "handshake size mismatch";
  if (hs->role != expected_role) return "unexpected role";
  if (hs->ndevs < 1 || hs->ndevs > GDR_RDMA_MAX_CONN_DEVS) return "device count out of range";
  if (hs->nqps < 1 || hs->nqps > GDR_RDMA_MAX_QPS) return "QP count out of range";
  if (hs->split > 1) return "split flag out of range";
  if (memchr(hs->devname, '\0', sizeof(hs->devname)) == NULL) return "device name not terminated";
  int tcp_only = (hs->caps & GDR_RDMA_CAP_TCP_ONLY) != 0; /* no QPs, no FIFO/sizes: TCP from the start */
  for (int d = 0; d < hs->ndevs; d++) {
    const char *bad = addr_check(&hs->dev[d], tcp_only);
    if (bad) return bad;
  }
  if (tcp_only) return NULL;
  if (hs->max_msg < GDR_RDMA_MIN_MAX_MSG) return "largest work request below 4096 bytes";
  for (int i = 0; i < hs->nqps; i++) {
    if (hs->qpn[i] == 0 || hs->qpn[i] > 0xffffffu) return "QP number out of range";
    if (hs->psn[i] > 0xffffffu) return "PSN out of range";
  }
  if (hs->raddr == 0) return "missing FIFO/sizes address";
  return NULL;
}

/* What each record type may be: who writes it (0: either side), its payload length, whether its seq (an attempt or
 * an epoch) must be set, and what a wrong one is called. One row per type, indexed by it. */
enum { LEN_ANY = 0, LEN_ZERO, LEN_EXACT, LEN_MULTIPLE };
struct ctrl_rule {
  int writer;               /* GDR_RDMA_ROLE_SEND / _RECV, or 0 */
  const char *wrong_writer; /* a record of this type from the other side */
  int len_rule;             /* LEN_* */
  size_t len;               /* LEN_EXACT: the length; LEN_MULTIPLE: the entry size */
  int seq_set;              /* seq > 0 */
  const char *malformed;    /* a wrong length or seq */
};

#define SEND GDR_RDMA_ROLE_SEND
#define RECV GDR_RDMA_ROLE_RECV
static const struct ctrl_rule ctrl_rules[GDR_CTRL_TYPE_MAX + 1] = {
    [GDR_CTRL_SIZE_ERR] = {SEND, "a size error from the receiver", LEN_ZERO, 0, 0, "unexpected payload"},
    [GDR_CTRL_BYE] = {0, NULL, LEN_ZERO, 0, 0, "unexpected payload"},
    [GDR_CTRL_REC_REQ] = {RECV, "a recovery request from the sender", LEN_ZERO, 0, 1, "bad recovery request"},
    [GDR_CTRL_REC_STATE] = {0, NULL, LEN_EXACT, sizeof(struct gdr_rdma_rec_state), 1,
                            "bad recovery state length or attempt"},
    [GDR_CTRL_REC_GO] = {SEND, "a recovery GO from the receiver", LEN_ZERO, 0, 1, "bad recovery GO"},
    [GDR_CTRL_REC_FAIL] = {0, NULL, LEN_ANY, 0, 0, NULL}, /* the payload is text (any bytes; the reader ends it) */
    [GDR_CTRL_FB_REQ] = {SEND, "a fallback request from the receiver", LEN_ANY, 0, 1, "bad fallback epoch"},
    [GDR_CTRL_FB_RSTATE] = {RECV, "a fallback receive state from the sender", LEN_EXACT,
                            sizeof(struct gdr_rdma_fb_rstate), 1, "bad fallback receive state"},
    [GDR_CTRL_FB_SSTATE] = {SEND, "a fallback send state from the receiver", LEN_MULTIPLE,
                            sizeof(struct gdr_rdma_fb_sent), 1, "bad fallback send state"},
    [GDR_CTRL_BACK_OFFER] = {RECV, "a failback offer from the sender", LEN_EXACT, sizeof(struct gdr_rdma_rec_state), 0,
                             "bad failback offer"},
    [GDR_CTRL_BACK_READY] = {SEND, "a failback answer from the receiver", LEN_EXACT, sizeof(struct gdr_rdma_rec_state),
                             0, "bad failback answer"},
    [GDR_CTRL_BACK_NOT_YET] = {0, NULL, LEN_ZERO, 0, 0, "unexpected payload"},
    [GDR_CTRL_BACK_SWITCH] = {RECV, "a failback switch from the sender", LEN_MULTIPLE, sizeof(struct gdr_rdma_back_tag),
                              0, "bad failback tag counts"},
    [GDR_CTRL_BACK_AT] = {SEND, "a failback switch point from the receiver", LEN_MULTIPLE,
                          sizeof(struct gdr_rdma_back_tag), 0, "bad failback tag counts"},
    [GDR_CTRL_BACK_FINAL] = {RECV, "a failback final switch point from the sender", LEN_MULTIPLE,
                             sizeof(struct gdr_rdma_back_tag), 0, "bad failback tag counts"},
};
#undef SEND
#undef RECV

static int len_ok(const struct ctrl_rule *r, size_t len) {
  switch (r->len_rule) {
  case LEN_ZERO: return len == 0;
  case LEN_EXACT: return len == r->len;
  case LEN_MULTIPLE: return len % r->len == 0;
  default: return 1;
  }
}

const char *gdr_rdma_ctrl_check(const struct gdr_rdma_ctrl *m, int writer_role) {
  if (m->magic != GDR_RDMA_CTRL_MAGIC) return "bad magic";
  if (m->len > GDR_RDMA_CTRL_MAX_PAYLOAD) return "payload too long";
  if (m->type < 1 || m->type > GDR_CTRL_TYPE_MAX) return "unknown record type";
  const struct ctrl_rule *r = &ctrl_rules[m->type];
  if (r->writer != 0 && r->writer != writer_role) return r->wrong_writer;
  if (!len_ok(r, m->len) || (r->seq_set && m->seq == 0)) return r->malformed;
  return NULL;
}

const char *gdr_rdma_rec_state_check(const struct gdr_rdma_rec_state *st, size_t len, int writer_role, int nqps) {
  if (len != sizeof(*st)) return "wrong length";
  if (st->nqps != nqps) return "QP count differs from the connection's";
  if (st->ndevs < 1 || st->ndevs > GDR_RDMA_MAX_CONN_DEVS) return "device count out of range";
  for (int d = 0; d < st->ndevs; d++) {
    const char *bad = addr_check(&st->dev[d], 0);
    if (bad) return bad;
  }
  for (int i = 0; i < st->nqps; i++) {
    if (st->qpn[i] == 0 || st->qpn[i] > 0xffffffu) return "QP number out of range";
    if (st->psn[i] > 0xffffffu) return "PSN out of range";
  }
  if (st->raddr == 0) return "missing FIFO/sizes address";
  if (writer_role == GDR_RDMA_ROLE_SEND && (st->head != 0 || st->incomplete != 0))
    return "a sender's state carries receive counts";
  if (writer_role == GDR_RDMA_ROLE_RECV && st->head < 32 && (st->incomplete >> st->head) != 0)
    return "incomplete messages before the first";
  return NULL;
}

const char *gdr_rdma_fb_sstate_check(const void *payload, size_t len) {
  const struct gdr_rdma_fb_sent *e = payload;
  if (len % sizeof(*e) != 0 || len / sizeof(*e) > GDR_RDMA_FB_MAX_SENT) return "wrong length";
  for (size_t i = 0; i < len / sizeof(*e); i++) {
    if (e[i].n < 1 || e[i].n > GDR_RDMA_MAX_RECVS) return "buffer count out of range";
    if (e[i].n < 8 && (e[i].placed >> e[i].n) != 0) return "a placed buffer beyond the receive's";
    for (int r = 0; r < e[i].n; r++)
      if ((e[i].placed >> r & 1) && e[i].size[r] > GDR_RDMA_MAX_MSG) return "placed size out of range";
  }
  return NULL;
}

const char *gdr_rdma_back_tags_check(const void *payload, size_t len) {
  const struct gdr_rdma_back_tag *e = payload;
  size_t n = len / sizeof(*e);
  if (len % sizeof(*e) != 0) return "not whole entries";
  if (n > GDR_RDMA_BACK_MAX_TAGS) return "too many tags";
  for (size_t i = 0; i < n; i++) {
    if (e[i].n >= 1ull << 48) return "a count out of range";
    for (size_t k = 0; k < i; k++)
      if (e[k].tag == e[i].tag) return "a tag twice";
  }
  return NULL;
}
