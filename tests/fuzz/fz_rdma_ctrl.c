/* Target rdma_ctrl: the RDMA transport's control records (struct gdr_rdma_ctrl, a 32-byte header and a payload:
 * SIZE_ERR, BYE, the recovery records REC_*, the fallback and failback records FB_* and BACK_*), as a connection reads
 * them from its TCP control stream after the handshake. Two modes:
 *   stream (flags bit 4 clear): the real gdr_rdma_ctrl_poll() and gdr_rdma_comm_check() on a comm that has what they
 *     touch (the stream, the receive slots, the device's name) and whose peer announced neither recovery nor fallback
 *     (as an older plugin): the framing, gdr_rdma_ctrl_check, SIZE_ERR and BYE, and the REC_/FB_/BACK_ handlers'
 *     refusal of a peer that never offered them. (Those state machines with a peer that does need live QPs and a TCP
 *     comm: the fault matrix and the fallback tests drive them over the emulator.)
 *   records (flags bit 4 set): the validators those handlers call on what the peer sent, on the input: the header
 *     (gdr_rdma_ctrl_check, for either writer role), a REC_STATE / BACK_* payload (gdr_rdma_rec_state_check), an
 *     FB_SSTATE payload (gdr_rdma_fb_sstate_check) and BACK_SWITCH/AT/FINAL tag counts (gdr_rdma_back_tags_check); an accepted one is checked against what recover.c/fallback.c
 *     then index with it.
 * Input (stream): flags (bit 0: a send comm, else a receive comm; bit 1: every receive slot holds a posted receive of
 * message slot + 32 * (bits 2..3)), then the bytes the peer sends (the writer then closes). Invariants: polling ends
 * (the peer's EOF or BYE, or the comm failed for garbage) within a bounded number of calls; a SIZE_ERR marks only the
 * receive it names. */
#include "fz.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdma/rdma.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_quiet_log();
  return 0;
}

static void records(struct fz_in *in) {
  struct gdr_rdma_ctrl m;
  uint8_t payload[GDR_RDMA_CTRL_MAX_PAYLOAD];
  int role = fz_u8(in) & 1 ? GDR_RDMA_ROLE_SEND : GDR_RDMA_ROLE_RECV;
  int nqps = 1 + fz_u8(in) % GDR_RDMA_MAX_QPS;
  size_t len;
  const char *bad;
  fz_bytes(in, &m, sizeof(m));
  len = fz_bytes(in, payload, sizeof(payload));
  bad = gdr_rdma_ctrl_check(&m, role);
  if (bad == NULL &&
      (m.magic != GDR_RDMA_CTRL_MAGIC || m.len > GDR_RDMA_CTRL_MAX_PAYLOAD || m.type < 1 || m.type > GDR_CTRL_TYPE_MAX))
    fz_fail("an accepted record header: magic 0x%x type %u len %u", m.magic, m.type, m.len);
  if (gdr_rdma_rec_state_check((const struct gdr_rdma_rec_state *)payload, len, role, nqps) == NULL) {
    const struct gdr_rdma_rec_state *st = (const void *)payload;
    if (len != sizeof(*st) || st->nqps != nqps || st->raddr == 0 || st->ndevs < 1 || st->ndevs > GDR_RDMA_MAX_CONN_DEVS)
      fz_fail("an accepted recovery state of %zu bytes, %u QPs, %u devices", len, st->nqps, st->ndevs);
    for (int d = 0; d < st->ndevs; d++)
      if (st->dev[d].rkey == 0 || st->dev[d].mtu < 1 || st->dev[d].mtu > 5 ||
          (st->dev[d].link_layer != 1 && st->dev[d].link_layer != 2))
        fz_fail("accepted device %d out of range", d);
    for (int i = 0; i < st->nqps; i++)
      if (st->qpn[i] == 0 || st->qpn[i] > 0xffffffu || st->psn[i] > 0xffffffu)
        fz_fail("accepted QP %d out of range", i);
  }
  if (gdr_rdma_back_tags_check(payload, len) == NULL) {
    const struct gdr_rdma_back_tag *e = (const void *)payload;
    if (len % sizeof(*e) != 0 || len / sizeof(*e) > GDR_RDMA_BACK_MAX_TAGS)
      fz_fail("accepted tag counts of %zu bytes", len);
    for (size_t i = 0; i < len / sizeof(*e); i++) {
      if (e[i].n >= 1ull << 48) fz_fail("accepted count of entry %zu", i);
      for (size_t k = 0; k < i; k++)
        if (e[k].tag == e[i].tag) fz_fail("accepted tag %d twice", e[i].tag);
    }
  }
  if (gdr_rdma_fb_sstate_check(payload, len) == NULL) {
    const struct gdr_rdma_fb_sent *e = (const void *)payload;
    if (len % sizeof(*e) != 0 || len / sizeof(*e) > GDR_RDMA_FB_MAX_SENT)
      fz_fail("an accepted send state of %zu bytes", len);
    for (size_t i = 0; i < len / sizeof(*e); i++)
      if (e[i].n < 1 || e[i].n > GDR_RDMA_MAX_RECVS || (e[i].placed >> e[i].n) != 0) fz_fail("accepted entry %zu", i);
    for (size_t i = 0; i < len / sizeof(*e); i++)
      for (int r = 0; r < e[i].n; r++)
        if ((e[i].placed >> r & 1) && e[i].size[r] > GDR_RDMA_MAX_MSG) fz_fail("accepted size of entry %zu", i);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  static struct gdr_rdma_dev dev;
  struct gdr_rdma_req reqs[GDR_RDMA_FIFO_SLOTS];
  struct gdr_rdma_comm *c = calloc(1, sizeof(*c));
  uint8_t flags = fz_u8(&in);
  uint64_t base = 32ull * ((flags >> 2) & 3);
  int sv[2], calls = 0;

  if (c == NULL) fz_fail("out of memory");
  if (flags & 16) {
    records(&in);
    free(c);
    return 0;
  }
  snprintf(dev.name, sizeof(dev.name), "fz0");
  dev.port = 1;
  c->kind = flags & 1 ? GDR_RCOMM_SEND : GDR_RCOMM_RECV;
  c->dev = &dev;
  c->ndevs = 1;
  c->m[0].dev = &dev;
  gdr_health_init(&c->health);
  gdr_rdma_pending_init(&c->pending);
  c->up = &gdr_rdma_resiliency; /* (what the transport's table hands every connection it returns) */
  snprintf(c->peer, sizeof(c->peer), "fuzzer");
  snprintf(c->desc, sizeof(c->desc), "RDMA connection with the fuzzer (fz0 port 1)");
  memset(reqs, 0, sizeof(reqs));
  if (flags & 2)
    for (int i = 0; i < GDR_RDMA_FIFO_SLOTS; i++) {
      reqs[i].type = GDR_RREQ_RECV;
      reqs[i].seq = base + (uint64_t)i;
      reqs[i].comm = c;
      c->recv_slot[i] = &reqs[i];
    }
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fz_fail("socketpair failed");
  if (gdr_sock_set_nonblocking(sv[0], 1) != ncclSuccess) fz_fail("cannot make the stream non-blocking");
  c->fd = sv[0];
  if (fz_write_all(sv[1], in.p, in.n, 5.0) != 0) fz_fail("cannot write %zu bytes into a socketpair", in.n);
  close(sv[1]);
  while (!c->peer_gone && !gdr_health_failed(&c->health)) {
    if (gdr_rdma_ctrl_poll(c) != ncclSuccess && !gdr_health_failed(&c->health))
      fz_fail("gdr_rdma_ctrl_poll returned an error, the comm is not failed");
    if (++calls > 10000) fz_fail("the control channel neither ended nor failed after %d polls", calls);
  }
  (void)gdr_rdma_comm_check(c);
  for (int i = 0; i < GDR_RDMA_FIFO_SLOTS; i++)
    if (reqs[i].error != ncclSuccess &&
        (!(flags & 2) || reqs[i].error != ncclInvalidUsage || c->kind != GDR_RCOMM_RECV))
      fz_fail("receive %d got error %d", i, (int)reqs[i].error);
  close(sv[0]);
  gdr_rdma_pending_destroy(&c->pending);
  free(c);
  return 0;
}
