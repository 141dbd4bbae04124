/* CTS entry layout, imm encoding, multi-QP and multi-device striping arithmetic, WR pieces, handshake and record
 * validation (wire version 2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static void test_cts_layout(void **state) {
  (void)state;
  assert_int_equal(sizeof(struct gdr_cts_entry), 64);
  assert_int_equal(offsetof(struct gdr_cts_entry, addr), 0);
  assert_int_equal(offsetof(struct gdr_cts_entry, size), 8);
  assert_int_equal(offsetof(struct gdr_cts_entry, tag), 16);
  assert_int_equal(offsetof(struct gdr_cts_entry, nreqs), 20);
  assert_int_equal(offsetof(struct gdr_cts_entry, idx), 21);
  assert_int_equal(offsetof(struct gdr_cts_entry, rkey), 24);
  assert_int_equal(sizeof(((struct gdr_cts_entry *)0)->rkey) / sizeof(uint32_t), GDR_RDMA_MAX_CONN_DEVS);
  assert_int_equal(offsetof(struct gdr_cts_entry, seq), 56);
  assert_int_equal(sizeof(((struct gdr_cts_entry *)0)->size), 8); /* 64-bit receive sizes */
  assert_int_equal(sizeof(struct gdr_cts_slot), GDR_RDMA_MAX_RECVS * 64);
  /* in a 64-byte aligned FIFO every entry is one cache line: never split */
  struct gdr_cts_slot *fifo = aligned_alloc(64, sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS);
  assert_non_null(fifo);
  for (int s = 0; s < GDR_RDMA_FIFO_SLOTS; s++)
    for (int r = 0; r < GDR_RDMA_MAX_RECVS; r++) {
      uintptr_t a = (uintptr_t)&fifo[s].e[r];
      assert_int_equal(a % 64, 0);
      assert_int_equal((a + sizeof(struct gdr_cts_entry) - 1) / 64, a / 64);
    }
  free(fifo);
  assert_int_equal(sizeof(struct gdr_sizes_slot), 64);
  assert_int_equal(sizeof(((struct gdr_sizes_slot *)0)->size[0]), 8);
  assert_int_equal(sizeof(((struct gdr_rdma_fb_sent *)0)->size[0]), 8);
  /* the largest FB_SSTATE fits a record */
  assert_true(GDR_RDMA_FB_MAX_SENT * sizeof(struct gdr_rdma_fb_sent) <= GDR_RDMA_CTRL_MAX_PAYLOAD);
  /* a handshake of any version has magic, version and size at the same place */
  assert_int_equal(offsetof(struct gdr_rdma_hs, magic), 0);
  assert_int_equal(offsetof(struct gdr_rdma_hs, version), 4);
  assert_int_equal(offsetof(struct gdr_rdma_hs, size), 6);
}

static void test_imm(void **state) {
  (void)state;
  assert_false(gdr_imm_is_group(gdr_imm_single(0)));
  assert_int_equal(gdr_imm_single(0x7fffffff), 0x7fffffffu);
  assert_false(gdr_imm_is_group(gdr_imm_single(0x7fffffff)));
  uint32_t g = gdr_imm_group(0x1234567890ull);
  assert_true(gdr_imm_is_group(g));
  assert_int_equal(g & 0x7fffffffu, 0x1234567890ull & 0x7fffffffu);
  assert_int_equal(GDR_IMM_SIZE_MAX, 0x7fffffffu);
}

/* WRs of at most max_wr bytes: a stripe of len bytes needs ceil(len / max_wr) of them, an empty one one. */
static void test_wr_pieces(void **state) {
  (void)state;
  const uint64_t g = 1ull << 30;
  assert_int_equal(gdr_wr_pieces(0, g), 1);
  assert_int_equal(gdr_wr_pieces(1, g), 1);
  assert_int_equal(gdr_wr_pieces(g, g), 1);
  assert_int_equal(gdr_wr_pieces(g + 1, g), 2);
  assert_int_equal(gdr_wr_pieces((2ull << 30) + 4099, g), 3); /* integration.rdma.large: 2 GiB + 4099 bytes */
  assert_int_equal(gdr_wr_pieces(GDR_RDMA_MAX_MSG, g), 1024);
  assert_int_equal(gdr_wr_pieces(GDR_RDMA_MAX_MSG, 1ull << 31), 512);
  assert_int_equal(gdr_wr_pieces(4097, 4096), 2);
}

/* Checks the invariants of a split of `size` over nqps QPs. */
static void check_split(uint64_t size, int nqps) {
  uint64_t chunk = gdr_stripe_chunk(size, nqps);
  assert_int_equal(chunk % GDR_RDMA_CHUNK_ALIGN, 0);
  if (size) assert_true(chunk * (uint64_t)nqps >= size);
  uint64_t expect = 0;
  int seen_short = 0;
  for (int q = 0; q < nqps; q++) {
    uint64_t off, len;
    gdr_stripe_part(size, nqps, q, &off, &len);
    assert_int_equal(off % GDR_RDMA_CHUNK_ALIGN == 0 || off == size, 1);
    assert_int_equal(off, expect); /* contiguous, in order */
    assert_true(len <= chunk);
    if (len < chunk) seen_short = 1;
    else assert_false(seen_short); /* only the tail may be short */
    /* no 128-byte line straddles two QPs: a part ends on a line boundary or at the end */
    assert_true((off + len) % GDR_RDMA_CHUNK_ALIGN == 0 || off + len == size);
    expect = off + len;
  }
  assert_int_equal(expect, size); /* every byte exactly once */
}

static void test_stripe_basic(void **state) {
  (void)state;
  assert_int_equal(gdr_stripe_chunk(0, 4), 0);
  assert_int_equal(gdr_stripe_chunk(1, 4), 128);
  assert_int_equal(gdr_stripe_chunk(512, 4), 128);
  assert_int_equal(gdr_stripe_chunk(513, 4), 256);
  assert_int_equal(gdr_stripe_chunk(1 << 20, 1), 1 << 20);
  assert_int_equal(gdr_stripe_chunk(1000, 0), 1024); /* nqps < 1 reads as 1 */
  uint64_t off, len;
  /* smaller than the QP count: all on QP 0 */
  gdr_stripe_part(3, 8, 0, &off, &len);
  assert_int_equal(off, 0);
  assert_int_equal(len, 3);
  for (int q = 1; q < 8; q++) {
    gdr_stripe_part(3, 8, q, &off, &len);
    assert_int_equal(len, 0);
    assert_int_equal(off, 3);
  }
  /* zero bytes: every part empty */
  for (int q = 0; q < 4; q++) {
    gdr_stripe_part(0, 4, q, &off, &len);
    assert_int_equal(off, 0);
    assert_int_equal(len, 0);
  }
  /* 1000 bytes over 3 QPs: chunk 384 -> 384, 384, 232 */
  gdr_stripe_part(1000, 3, 0, &off, &len);
  assert_int_equal(len, 384);
  gdr_stripe_part(1000, 3, 2, &off, &len);
  assert_int_equal(off, 768);
  assert_int_equal(len, 232);
}

static void test_stripe_sweep(void **state) {
  (void)state;
  static const uint64_t sizes[] = {0, 1, 2, 63, 127, 128, 129, 255, 256, 257, 383, 384, 385, 1000, 1023, 1024,
                                   1025, 4095, 4096, 4097, 65535, 65536, 65537, 1048575, 1048576, 1048577,
                                   (1ull << 31) - 1};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    for (int nqps = 1; nqps <= GDR_RDMA_MAX_QPS; nqps++) check_split(sizes[i], nqps);
  /* odd sizes */
  for (uint64_t s = 0; s < 5000; s += 7)
    for (int nqps = 1; nqps <= 5; nqps++) check_split(s, nqps);
}

static void test_stripe_qp_choice(void **state) {
  (void)state;
  /* whole messages rotate */
  assert_int_equal(gdr_stripe_nparts(4, 0, 1), 1);
  for (uint64_t m = 0; m < 12; m++) assert_int_equal(gdr_stripe_qp(m, 4, 1, 0), (int)(m % 4));
  /* split messages use every QP */
  assert_int_equal(gdr_stripe_nparts(4, 1, 1), 4);
  assert_int_equal(gdr_stripe_nparts(4, 1, 2), 4);
  for (int p = 0; p < 4; p++) assert_int_equal(gdr_stripe_qp(99, 4, 4, p), p);
  assert_int_equal(gdr_stripe_qp(5, 1, 1, 0), 0);
  /* a fused sender of n devices (QP i on device i % n): every message has one stripe on each device, rotating over
   * the QPs of each device */
  for (int n = 2; n <= GDR_RDMA_MAX_CONN_DEVS; n++)
    for (int per = 1; per * n <= GDR_RDMA_MAX_QPS; per++) {
      int nqps = per * n, used[GDR_RDMA_MAX_QPS] = {0};
      assert_int_equal(gdr_stripe_nparts(nqps, 0, n), n);
      for (uint64_t m = 0; m < (uint64_t)(4 * per); m++) {
        int dev_seen = 0;
        for (int p = 0; p < n; p++) {
          int q = gdr_stripe_qp(m, nqps, n, p);
          assert_true(q >= 0 && q < nqps);
          dev_seen |= 1 << (q % n);
          used[q]++;
        }
        assert_int_equal(dev_seen, (1 << n) - 1); /* every device carries a stripe of every message */
      }
      for (int q = 0; q < nqps; q++) assert_int_equal(used[q], 4); /* and every QP as many */
    }
  /* huge message numbers do not overflow */
  assert_true(gdr_stripe_qp(UINT64_MAX, 16, 8, 7) < 16);
}

static struct gdr_rdma_hs good_hs(void) {
  struct gdr_rdma_hs hs;
  memset(&hs, 0, sizeof(hs));
  hs.magic = GDR_RDMA_HS_MAGIC;
  hs.version = GDR_RDMA_HS_VERSION;
  hs.size = sizeof(hs);
  hs.role = GDR_RDMA_ROLE_SEND;
  hs.ndevs = 2;
  for (int d = 0; d < 2; d++) {
    hs.dev[d].link_layer = 2;
    hs.dev[d].port = 1;
    hs.dev[d].mtu = 3;
    hs.dev[d].rkey = 7u + (uint32_t)d;
  }
  hs.nqps = 2;
  hs.max_msg = 1ull << 30;
  hs.qpn[0] = 0x11;
  hs.qpn[1] = 0x12;
  hs.raddr = 0x10000;
  strcpy(hs.devname, "vemu0+vemu1");
  return hs;
}

static void test_hs_check(void **state) {
  (void)state;
  struct gdr_rdma_hs hs = good_hs();
  assert_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_SEND));
  assert_non_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_RECV));
  hs.magic = __builtin_bswap32(GDR_RDMA_HS_MAGIC);
  assert_non_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_SEND));
#define BAD(field, val)                                                                                              \
  do {                                                                                                               \
    hs = good_hs();                                                                                                  \
    hs.field = val;                                                                                                  \
    assert_non_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_SEND));                                                    \
  } while (0)
  BAD(magic, 0);
  BAD(version, 99);
  BAD(size, 100);
  BAD(version, 1); /* the 256-byte handshake of messages below 2 GiB */
  BAD(dev[0].link_layer, 0);
  BAD(dev[1].link_layer, 3);
  BAD(dev[0].mtu, 0);
  BAD(dev[1].mtu, 6);
  BAD(nqps, 0);
  BAD(nqps, GDR_RDMA_MAX_QPS + 1);
  BAD(ndevs, 0);
  BAD(ndevs, GDR_RDMA_MAX_CONN_DEVS + 1);
  BAD(split, 2);
  BAD(dev[1].port, 0);
  BAD(qpn[1], 0);
  BAD(qpn[0], 0x1000000);
  BAD(psn[0], 0x1000000);
  BAD(raddr, 0);
  BAD(dev[0].rkey, 0);
  BAD(dev[1].rkey, 0);
  BAD(max_msg, 0);
  BAD(max_msg, 4095);
  /* devices past ndevs are not looked at */
  hs = good_hs();
  hs.ndevs = 1;
  hs.dev[1].link_layer = 0;
  assert_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_SEND));
  /* a TCP-only side has no QPs, no buffer, no keys */
  hs = good_hs();
  hs.caps = GDR_RDMA_CAP_TCP_ONLY;
  hs.qpn[0] = 0;
  hs.raddr = 0;
  hs.dev[0].rkey = 0;
  hs.max_msg = 0;
  assert_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_SEND));
  hs = good_hs();
  memset(hs.devname, 'x', sizeof(hs.devname));
  assert_non_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_SEND));
  /* IB without GRH needs a unicast LID */
  hs = good_hs();
  hs.dev[1].link_layer = 1;
  hs.dev[1].lid = 0;
  assert_non_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_SEND));
  hs.dev[1].lid = 5;
  assert_null(gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_SEND));
  /* random garbage is rejected, never crashes */
  srand(1);
  for (int i = 0; i < 10000; i++) {
    unsigned char *p = (unsigned char *)&hs;
    for (size_t b = 0; b < sizeof(hs); b++) p[b] = (unsigned char)rand();
    if (i % 2) hs.magic = GDR_RDMA_HS_MAGIC;
    (void)gdr_rdma_hs_check(&hs, GDR_RDMA_ROLE_RECV);
  }
}

/* Each control record type: accepted from the role that writes it with its length, rejected from the other role,
 * with a wrong length or epoch; unknown types and bad magic rejected. */
static void test_ctrl_check(void **state) {
  (void)state;
  const int S = GDR_RDMA_ROLE_SEND, R = GDR_RDMA_ROLE_RECV, ANY = -1;
  const struct {
    int type, writer;
    size_t len;
    uint64_t seq;
  } ok[] = {
    {GDR_CTRL_SIZE_ERR, S, 0, 1},
    {GDR_CTRL_BYE, ANY, 0, 0},
    {GDR_CTRL_REC_REQ, R, 0, 1},
    {GDR_CTRL_REC_STATE, ANY, sizeof(struct gdr_rdma_rec_state), 1},
    {GDR_CTRL_REC_GO, S, 0, 1},
    {GDR_CTRL_FB_REQ, S, 5, 1},
    {GDR_CTRL_FB_RSTATE, R, sizeof(struct gdr_rdma_fb_rstate), 1},
    {GDR_CTRL_FB_SSTATE, S, 2 * sizeof(struct gdr_rdma_fb_sent), 1},
    {GDR_CTRL_BACK_OFFER, R, sizeof(struct gdr_rdma_rec_state), 1},
    {GDR_CTRL_BACK_READY, S, sizeof(struct gdr_rdma_rec_state), 1},
    {GDR_CTRL_BACK_NOT_YET, ANY, 0, 1},
    {GDR_CTRL_BACK_SWITCH, R, 2 * sizeof(struct gdr_rdma_back_tag), 1},
    {GDR_CTRL_BACK_AT, S, sizeof(struct gdr_rdma_back_tag), 1},
    {GDR_CTRL_BACK_FINAL, R, 0, 1},
  };
  struct gdr_rdma_ctrl m;
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    memset(&m, 0, sizeof(m));
    m.magic = GDR_RDMA_CTRL_MAGIC;
    m.type = (uint16_t)ok[i].type;
    m.len = (uint16_t)ok[i].len;
    m.seq = ok[i].seq;
    for (int role = S; role <= R; role++) {
      const char *why = gdr_rdma_ctrl_check(&m, role);
      if (ok[i].writer == ANY || ok[i].writer == role)
        assert_null(why);
      else
        assert_non_null(why); /* a record only the other side writes */
    }
    int w = ok[i].writer == ANY ? S : ok[i].writer;
    if (ok[i].type != GDR_CTRL_REC_FAIL && ok[i].type != GDR_CTRL_FB_REQ) {
      m.len = (uint16_t)(ok[i].len + 3); /* a wrong length */
      assert_non_null(gdr_rdma_ctrl_check(&m, w));
      m.len = (uint16_t)ok[i].len;
    }
    m.magic ^= 1;
    assert_non_null(gdr_rdma_ctrl_check(&m, w));
  }
  memset(&m, 0, sizeof(m));
  m.magic = GDR_RDMA_CTRL_MAGIC;
  m.type = GDR_CTRL_TYPE_MAX + 1;
  assert_non_null(gdr_rdma_ctrl_check(&m, S));
  m.type = GDR_CTRL_FB_REQ; /* epoch 0 */
  assert_non_null(gdr_rdma_ctrl_check(&m, S));
  m.type = GDR_CTRL_REC_FAIL;
  m.len = GDR_RDMA_CTRL_MAX_PAYLOAD + 1;
  assert_non_null(gdr_rdma_ctrl_check(&m, S));
}

/* BACK_SWITCH/AT/FINAL's per-tag counts: whole entries, each tag once, at most GDR_RDMA_BACK_MAX_TAGS, counts in
 * range (the way back splits the stream per tag by them: a tag twice would leave its split ambiguous). */
static void test_back_tags_check(void **state) {
  (void)state;
  struct gdr_rdma_back_tag v[GDR_RDMA_BACK_MAX_TAGS + 1];
  memset(v, 0, sizeof(v));
  for (int i = 0; i <= GDR_RDMA_BACK_MAX_TAGS; i++) {
    v[i].tag = i - 3; /* negative tags too: NCCL's are ints */
    v[i].n = (uint64_t)i * 1000;
  }
  assert_null(gdr_rdma_back_tags_check(v, 0));
  assert_null(gdr_rdma_back_tags_check(v, 3 * sizeof(v[0])));
  assert_null(gdr_rdma_back_tags_check(v, GDR_RDMA_BACK_MAX_TAGS * sizeof(v[0])));
  assert_non_null(gdr_rdma_back_tags_check(v, (GDR_RDMA_BACK_MAX_TAGS + 1) * sizeof(v[0]))); /* too many */
  assert_non_null(gdr_rdma_back_tags_check(v, 3 * sizeof(v[0]) + 8));                      /* not whole */
  v[2].tag = v[0].tag;
  assert_non_null(gdr_rdma_back_tags_check(v, 3 * sizeof(v[0]))); /* a tag twice */
  v[2].tag = 99999;
  v[1].n = 1ull << 48;
  assert_non_null(gdr_rdma_back_tags_check(v, 3 * sizeof(v[0]))); /* a count out of range */
  v[1].n = (1ull << 48) - 1;
  assert_null(gdr_rdma_back_tags_check(v, 3 * sizeof(v[0])));
}

/* REC_STATE (and BACK_*): the devices' addresses and keys; FB_SSTATE: 64-bit placed sizes up to the largest
 * message. */
static void test_state_checks(void **state) {
  (void)state;
  struct gdr_rdma_rec_state st;
  memset(&st, 0, sizeof(st));
  st.nqps = 2;
  st.ndevs = 2;
  st.qpn[0] = 1;
  st.qpn[1] = 2;
  for (int d = 0; d < 2; d++) {
    st.dev[d].link_layer = 2;
    st.dev[d].port = 1;
    st.dev[d].mtu = 5;
    st.dev[d].rkey = 9;
  }
  st.raddr = 0x1000;
  assert_null(gdr_rdma_rec_state_check(&st, sizeof(st), GDR_RDMA_ROLE_SEND, 2));
  assert_non_null(gdr_rdma_rec_state_check(&st, sizeof(st), GDR_RDMA_ROLE_SEND, 3));
  assert_non_null(gdr_rdma_rec_state_check(&st, sizeof(st) - 8, GDR_RDMA_ROLE_SEND, 2));
  st.dev[1].rkey = 0;
  assert_non_null(gdr_rdma_rec_state_check(&st, sizeof(st), GDR_RDMA_ROLE_SEND, 2));
  st.dev[1].rkey = 9;
  st.ndevs = 9;
  assert_non_null(gdr_rdma_rec_state_check(&st, sizeof(st), GDR_RDMA_ROLE_SEND, 2));
  st.ndevs = 2;
  st.head = 1;
  assert_non_null(gdr_rdma_rec_state_check(&st, sizeof(st), GDR_RDMA_ROLE_SEND, 2));
  assert_null(gdr_rdma_rec_state_check(&st, sizeof(st), GDR_RDMA_ROLE_RECV, 2));

  struct gdr_rdma_fb_sent e[2];
  memset(e, 0, sizeof(e));
  e[0].seq = 3;
  e[0].n = 1;
  e[0].placed = 1;
  e[0].size[0] = (2ull << 30) + 4099; /* above 2^31: the old 32-bit field could not say it */
  e[1].n = 8;
  e[1].placed = 0xff;
  e[1].size[7] = GDR_RDMA_MAX_MSG;
  assert_null(gdr_rdma_fb_sstate_check(e, sizeof(e)));
  e[1].size[7] = GDR_RDMA_MAX_MSG + 1;
  assert_non_null(gdr_rdma_fb_sstate_check(e, sizeof(e)));
  e[1].size[7] = 0;
  e[0].placed = 2; /* beyond the receive's one buffer */
  assert_non_null(gdr_rdma_fb_sstate_check(e, sizeof(e)));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cts_layout),   cmocka_unit_test(test_imm),
    cmocka_unit_test(test_stripe_basic), cmocka_unit_test(test_stripe_sweep),
    cmocka_unit_test(test_stripe_qp_choice), cmocka_unit_test(test_hs_check), cmocka_unit_test(test_ctrl_check), cmocka_unit_test(test_back_tags_check),
    cmocka_unit_test(test_wr_pieces),        cmocka_unit_test(test_state_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
