/* The TCP transport end to end, in one process, through the core (exactly the calls the v8 table makes). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "param.h"
#include "tcp/tcp.h"
#include "unit_common.h"
#include "unit_pair.h"

static void init_plugin(void) {
  ut_warn_reset();
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
}

static void fini_plugin(void) { gdr_core_fini(); }

/* The eager path is off by default (GDRNET_TCP_EAGER_CREDITS=0); these tests turn it on. */
static void eager_on(const char *credits) { setenv("GDRNET_TCP_EAGER_CREDITS", credits, 1); }
static void eager_default(void) { unsetenv("GDRNET_TCP_EAGER_CREDITS"); }

/* Posts one receive of rsize and one send of ssize, drives both to completion, checks bytes and reported size. */
static void xfer(struct pair *p, size_t ssize, size_t rsize, unsigned seed) {
  unsigned char *sb = malloc(ssize ? ssize : 1), *rb = malloc(rsize + 16);
  void *smr = NULL, *rmr = NULL, *sreq = NULL, *rreq = NULL;
  void *data[1] = {rb};
  size_t sizes[1] = {rsize};
  int tags[1] = {7};
  int sdone = 0, rdone = 0, n = 0;
  size_t got[GDR_MAX_RECVS] = {0};
  double t0 = ut_now();

  assert_non_null(sb);
  assert_non_null(rb);
  ut_fill(sb, ssize, seed);
  memset(rb, 0xA5, rsize + 16);
  assert_int_equal(gdr_core_reg_mr(p->s, sb, ssize ? ssize : 1, NCCL_PTR_HOST, &smr), ncclSuccess);
  assert_int_equal(gdr_core_reg_mr(p->r, rb, rsize + 16, NCCL_PTR_HOST, &rmr), ncclSuccess);
  void *mh[1] = {rmr};
  while (rreq == NULL) assert_int_equal(gdr_core_irecv(p->r, 1, data, sizes, tags, mh, NULL, &rreq), ncclSuccess);
  while (!sdone || !rdone) {
    if (sreq == NULL) assert_int_equal(gdr_core_isend(p->s, sb, ssize, 7, smr, NULL, &sreq), ncclSuccess);
    if (sreq != NULL && !sdone) assert_int_equal(gdr_core_test(sreq, &sdone, NULL, NULL), ncclSuccess);
    if (!rdone) assert_int_equal(gdr_core_test(rreq, &rdone, got, &n), ncclSuccess);
    assert_true(ut_now() - t0 < 60.0);
  }
  assert_int_equal(n, 1);
  assert_int_equal(got[0], ssize);
  assert_memory_equal(sb, rb, ssize);
  for (size_t i = ssize; i < rsize + 16; i++) assert_int_equal(rb[i], 0xA5); /* nothing written past the message */
  assert_int_equal(gdr_core_dereg_mr(p->s, smr), ncclSuccess);
  assert_int_equal(gdr_core_dereg_mr(p->r, rmr), ncclSuccess);
  free(sb);
  free(rb);
}

static void test_chunk_plan(void **state) {
  struct gdr_tcp_plan p;
  (void)state;
  gdr_tcp_plan_chunks(1 << 20, 4, 64 << 10, 1 << 20, &p);
  assert_int_equal(p.chunk, 256 << 10);
  assert_int_equal(p.nchunks, 4);
  gdr_tcp_plan_chunks(100000, 4, 64 << 10, 1 << 20, &p); /* 25000 -> 28672 < min: 64K chunks */
  assert_int_equal(p.chunk, 64 << 10);
  assert_int_equal(p.nchunks, 2);
  assert_int_equal(gdr_tcp_chunk_len(&p, 100000, 0), 65536);
  assert_int_equal(gdr_tcp_chunk_len(&p, 100000, 1), 100000 - 65536);
  assert_int_equal(gdr_tcp_chunk_len(&p, 100000, 2), 0);
  assert_int_equal(gdr_tcp_chunk_off(&p, 1), 65536);
  gdr_tcp_plan_chunks((size_t)64 << 20, 8, 64 << 10, 1 << 20, &p); /* capped at max: pipelined */
  assert_int_equal(p.chunk, 1 << 20);
  assert_int_equal(p.nchunks, 64);
  gdr_tcp_plan_chunks(3 * 4096 + 1, 3, 4096, 1 << 20, &p); /* rounded up to 4 KiB */
  assert_int_equal(p.chunk, 8192);
  assert_int_equal(p.nchunks, 2);
  gdr_tcp_plan_chunks(5, 0, 0, 0, &p); /* degenerate inputs stay sane */
  assert_true(p.chunk >= 1);
  assert_true((size_t)p.chunk * p.nchunks >= 5);
  /* every byte covered exactly once */
  for (size_t size = 1; size < (3u << 20); size = size * 3 + 4097) {
    for (int t = 1; t <= 5; t++) {
      size_t sum = 0;
      gdr_tcp_plan_chunks(size, t, 64 << 10, 1 << 20, &p);
      for (uint32_t i = 0; i < p.nchunks; i++) {
        assert_int_equal(gdr_tcp_chunk_off(&p, i), sum);
        assert_true(gdr_tcp_chunk_len(&p, size, i) > 0);
        sum += gdr_tcp_chunk_len(&p, size, i);
      }
      assert_int_equal(sum, size);
    }
  }
}

static void test_resolve_streams(void **state) {
  int ns, nt;
  (void)state;
  setenv("GDRNET_TCP_NSOCKS", "4", 1);
  setenv("GDRNET_TCP_NTHREADS", "2", 1);
  gdr_params_reset();
  gdr_tcp_resolve_streams(&ns, &nt);
  assert_int_equal(ns, 4);
  assert_int_equal(nt, 2);
  setenv("GDRNET_TCP_NTHREADS", "9", 1); /* more threads than streams: one per stream */
  gdr_params_reset();
  gdr_tcp_resolve_streams(&ns, &nt);
  assert_int_equal(nt, 4);
  unsetenv("GDRNET_TCP_NSOCKS");
  unsetenv("GDRNET_TCP_NTHREADS");
  setenv("NCCL_SOCKET_NTHREADS", "2", 1);
  setenv("NCCL_NSOCKS_PERTHREAD", "3", 1);
  gdr_params_reset();
  gdr_tcp_resolve_streams(&ns, &nt);
  assert_int_equal(ns, 6);
  assert_int_equal(nt, 2);
  unsetenv("NCCL_SOCKET_NTHREADS");
  unsetenv("NCCL_NSOCKS_PERTHREAD");
  gdr_params_reset();
  gdr_tcp_resolve_streams(&ns, &nt);
  assert_true(ns >= 2 && ns <= 8);
  assert_int_equal(nt, ns);
  gdr_params_reset();
}

static void test_properties(void **state) {
  struct gdr_props p;
  int ndev = 0;
  (void)state;
  init_plugin();
  assert_int_equal(gdr_core_devices(&ndev), ncclSuccess);
  assert_int_equal(ndev, 1); /* GDRNET_SOCKET_IFNAME=lo in the test environment */
  assert_int_equal(gdr_core_get_properties(0, &p), ncclSuccess);
  assert_string_equal(p.name, "lo");
  assert_null(p.pci_path);
  assert_int_equal(p.ptr_support, NCCL_PTR_HOST);
  assert_int_equal(p.reg_is_global, 1);
  assert_int_equal(p.max_recvs, 8); /* grouped receives, as the RDMA transport */
  assert_true(p.speed > 0);
  assert_true(p.max_comms >= 1024);
  assert_int_equal(p.net_device_type, NCCL_NET_DEVICE_HOST);
  assert_int_equal(gdr_core_get_properties(1, &p), ncclInvalidArgument);
  fini_plugin();
}

static void test_sizes(void **state) {
  static const size_t sizes[] = {0, 1, 7, 127, 128, 4095, 4096, 8191, 8192, 8193, 65535, 65536, 65537,
                                 (1 << 20) + 3, (4 << 20) + 4096, (16 << 20) + 17};
  struct pair p;
  (void)state;
  setenv("GDRNET_TCP_NSOCKS", "3", 1);
  init_plugin();
  pair_open(&p);
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    xfer(&p, sizes[i], sizes[i], (unsigned)i);
    xfer(&p, sizes[i], sizes[i] + 1000, (unsigned)i + 100); /* receive larger than send reports the sent size */
  }
  xfer(&p, (64u << 20) + 1, (64u << 20) + 1, 999);
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  unsetenv("GDRNET_TCP_NSOCKS");
}

static void test_streams_threads_variants(void **state) {
  static const char *cfg[][2] = {{"1", "1"}, {"4", "2"}, {"5", "3"}, {"8", "8"}, {"64", "8"}};
  (void)state;
  for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
    struct pair p;
    setenv("GDRNET_TCP_NSOCKS", cfg[k][0], 1);
    setenv("GDRNET_TCP_NTHREADS", cfg[k][1], 1);
    setenv("GDRNET_TCP_MIN_CHUNK", "4K", 1);
    setenv("GDRNET_TCP_INLINE", k % 2 ? "0" : "1K", 1);
    setenv("GDRNET_TCP_SOCKBUF", k == 2 ? "256K" : "0", 1);
    eager_on(k % 3 == 0 ? "0" : (k % 3 == 1 ? "32" : "1"));
    init_plugin();
    pair_open(&p);
    for (unsigned i = 0; i < 12; i++) xfer(&p, 9000 + i * 77777, 9000 + i * 77777, i);
    xfer(&p, 0, 10, 77); /* zero bytes with inline 0: still inline (a header only) */
    xfer(&p, 1, 10, 78);
    pair_close(&p);
    fini_plugin();
  }
  unsetenv("GDRNET_TCP_NSOCKS");
  unsetenv("GDRNET_TCP_NTHREADS");
  unsetenv("GDRNET_TCP_MIN_CHUNK");
  unsetenv("GDRNET_TCP_INLINE");
  unsetenv("GDRNET_TCP_SOCKBUF");
  eager_default();
}

/* 32 receives and 32 sends in flight; the 33rd receive is refused (NULL) until one completes. */
static void test_inflight_32_mode(const char *credits) {
  enum { N = NCCL_NET_MAX_REQUESTS };
  struct pair p;
  unsigned char *sb[N], *rb[N];
  void *sreq[N] = {0}, *rreq[N] = {0}, *extra = NULL;
  size_t sz[N];
  int sdone[N] = {0}, rdone[N] = {0}, left = 2 * N;
  double t0;
  eager_on(credits);
  init_plugin();
  pair_open(&p);
  for (int i = 0; i < N; i++) {
    void *data[1];
    size_t s[1];
    int tag = 0;
    sz[i] = (size_t)(i % 4 == 0 ? 3000 * i : (i % 4 == 1 ? 0 : 50000 * i + 13));
    sb[i] = malloc(sz[i] + 1);
    rb[i] = malloc(sz[i] + 1);
    ut_fill(sb[i], sz[i], (unsigned)i);
    data[0] = rb[i];
    s[0] = sz[i];
    assert_int_equal(gdr_core_irecv(p.r, 1, data, s, &tag, NULL, NULL, &rreq[i]), ncclSuccess);
    assert_non_null(rreq[i]);
  }
  {
    void *data[1] = {rb[0]};
    size_t s[1] = {1};
    int tag = 0;
    assert_int_equal(gdr_core_irecv(p.r, 1, data, s, &tag, NULL, NULL, &extra), ncclSuccess);
    assert_null(extra); /* 33rd: try again later */
  }
  t0 = ut_now();
  for (int i = 0; i < N; i++) {
    while (sreq[i] == NULL) {
      assert_int_equal(gdr_core_isend(p.s, sb[i], sz[i], 0, NULL, NULL, &sreq[i]), ncclSuccess);
      assert_true(ut_now() - t0 < 30.0);
    }
  }
  while (left > 0) {
    for (int i = 0; i < N; i++) {
      size_t got[GDR_MAX_RECVS];
      if (!sdone[i]) {
        assert_int_equal(gdr_core_test(sreq[i], &sdone[i], NULL, NULL), ncclSuccess);
        left -= sdone[i];
      }
      if (!rdone[i]) {
        assert_int_equal(gdr_core_test(rreq[i], &rdone[i], got, NULL), ncclSuccess);
        if (rdone[i]) {
          assert_int_equal(got[0], sz[i]);
          assert_memory_equal(sb[i], rb[i], sz[i]);
          left--;
        }
      }
    }
    assert_true(ut_now() - t0 < 60.0);
  }
  /* the pool is whole again: another 32 round trips reuse it */
  for (int i = 0; i < N; i++) xfer(&p, 100 + (size_t)i, 100 + (size_t)i, (unsigned)i);
  for (int i = 0; i < N; i++) {
    free(sb[i]);
    free(rb[i]);
  }
  pair_close(&p);
  fini_plugin();
  eager_default();
}

static void test_inflight_32(void **state) {
  (void)state;
  test_inflight_32_mode("0");
  test_inflight_32_mode("32"); /* (with fewer credits than eager sends this driver, which tests nothing before all
                                   32 sends are posted, would wait for credits forever: legitimately) */
}

static struct tcp_comm *tcomm_of(void *core_comm) { return ((struct gdr_comm *)core_comm)->tcomm; }

/* Waits (poll, no sleeping) until fd reports one of `want` (POLLIN, POLLRDHUP, POLLHUP...); fails after limit_s. */
static void wait_fd(int fd, short want, double limit_s) {
  double t0 = ut_now();
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = want};
    double left = limit_s - (ut_now() - t0);
    assert_true(left > 0);
    int r = poll(&pf, 1, (int)(left * 1000) + 1);
    assert_true(r >= 0 || errno == EINTR);
    if (r > 0 && (pf.revents & want)) return;
  }
}

/* Waits until at least `bytes` are readable on the receiver's control stream (what the sender wrote has arrived;
 * the receiver reads it only in test()). SO_RCVLOWAT makes poll() report POLLIN only once that many are queued. */
static void wait_ctrl_bytes(void *recv_comm, int bytes) {
  int fd = tcomm_of(recv_comm)->ctrl_fd, old = 1, n = 0;
  socklen_t len = sizeof(old);
  assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &old, &len), 0);
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)), 0);
  wait_fd(fd, POLLIN, 10.0);
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &old, sizeof(old)), 0);
  assert_int_equal(ioctl(fd, FIONREAD, &n), 0);
  assert_true(n >= bytes);
}

static void *post_recv(void *r, void *buf, size_t size) {
  void *req = NULL;
  void *data[1] = {buf};
  size_t s[1] = {size};
  int tag = 0;
  assert_int_equal(gdr_core_irecv(r, 1, data, s, &tag, NULL, NULL, &req), ncclSuccess);
  assert_non_null(req);
  return req;
}

static void *post_send(void *s, void *buf, size_t size) {
  void *req = NULL;
  double t0 = ut_now();
  while (req == NULL) {
    assert_int_equal(gdr_core_isend(s, buf, size, 0, NULL, NULL, &req), ncclSuccess);
    assert_true(ut_now() - t0 < 10.0);
  }
  return req;
}

/* Tests req to completion; returns the size it reports. */
static size_t wait_req(void *req) {
  size_t got[GDR_MAX_RECVS] = {0};
  int done = 0;
  double t0 = ut_now();
  while (!done) {
    assert_int_equal(gdr_core_test(req, &done, got, NULL), ncclSuccess);
    assert_true(ut_now() - t0 < 20.0);
  }
  return got[0];
}

/* A send larger than the posted receive: InvalidUsage with both sizes named, on both sides, whoever sees it first:
 *   0: eager message into a posted receive (the receiver sees it; the sender's eager send may have completed: a
 *      later isend/test of the sender fails);
 *   1: chunked message after a CTS (the sender sees it);
 *   2: chunked message into a receive of <= the eager size, which sends no CTS (the sender's RTS, the receiver);
 *   3: eager message that arrived before its receive was posted (bounced; irecv sees it);
 *   4: as 2, the receive posted after the RTS arrived. */
static void test_send_larger_than_recv(void **state) {
  static char sbuf[200000], rbuf[200000];
  static const size_t ssizes[] = {200, 200000, 200000, 200, 200000};
  static const size_t rsizes[] = {100, 100000, 100, 100, 1000};
  (void)state;
  for (int kk = 0; kk < 7; kk++) {
    int k = kk % 5; /* 5, 6: cases 0 and 1 again with the eager path off (the sender sees it after a CTS) */
    if (kk < 5) eager_on("32");
    else eager_on("0");
    struct pair p;
    void *sreq = NULL, *rreq = NULL, *r0 = NULL;
    int done = 0;
    ncclResult_t sr = ncclSuccess, rr = ncclSuccess;
    char a[32], b[32];
    double t0 = ut_now();
    init_plugin();
    pair_open(&p);
    if (k == 3 || k == 4) {
      /* message 0 is fine; message 1 comes before its receive is posted */
      r0 = post_recv(p.r, rbuf, 8);
      wait_req(post_send(p.s, sbuf, 8));
      if (k == 3) {
        sreq = post_send(p.s, sbuf, ssizes[k]); /* eager: goes at once */
        wait_ctrl_bytes(p.r, 2 * (int)sizeof(struct tcp_ctrl_hdr) + 8 + (int)ssizes[k]);
      } else {
        while (tcomm_of(p.s)->rts_out != 1) { /* the big one waits for a CTS and says so (RTS) */
          assert_int_equal(gdr_core_isend(p.s, sbuf, ssizes[k], 0, NULL, NULL, &sreq), ncclSuccess);
          assert_null(sreq);
          assert_true(ut_now() - t0 < 10.0);
        }
        wait_ctrl_bytes(p.r, 2 * (int)sizeof(struct tcp_ctrl_hdr) + 8);
      }
      assert_int_equal(wait_req(r0), 8); /* reads message 1 (k = 3) / the RTS (k = 4) too */
      if (k == 3) assert_int_equal(tcomm_of(p.r)->n_bounced, 1);
      if (k == 4) assert_int_equal(tcomm_of(p.r)->nrts, 1); /* held for its receive */
    }
    rreq = post_recv(p.r, rbuf, rsizes[k]);
    while (sr == ncclSuccess) {
      /* the sender: its message, then (once that completed, as an eager send does) further small ones, until an
       * isend or test fails */
      if (sreq == NULL) {
        sr = gdr_core_isend(p.s, sbuf, done ? 1 : ssizes[k], 0, NULL, NULL, &sreq);
      } else {
        int d = 0;
        sr = gdr_core_test(sreq, &d, NULL, NULL);
        if (d) {
          sreq = NULL;
          done = 1;
        }
      }
      if (rr == ncclSuccess) {
        int d = 0;
        rr = gdr_core_test(rreq, &d, NULL, NULL);
        assert_int_equal(d, 0);
      }
      assert_true(ut_now() - t0 < 10.0);
    }
    assert_int_equal(sr, ncclInvalidUsage);
    while (rr == ncclSuccess) {
      int d = 0;
      rr = gdr_core_test(rreq, &d, NULL, NULL);
      assert_int_equal(d, 0);
      assert_true(ut_now() - t0 < 10.0);
    }
    assert_int_equal(rr, ncclInvalidUsage);
    snprintf(a, sizeof(a), "%zu", ssizes[k]);
    snprintf(b, sizeof(b), "%zu", rsizes[k]);
    assert_true(ut_warned("isend of"));                 /* the sender's WARN */
    assert_true(ut_warned("this receive posted only")); /* the receiver's */
    assert_true(ut_warned(a));
    assert_true(ut_warned(b));
    pair_close(&p);
    fini_plugin();
  }
  eager_default();
}

/* Eager messages into posted receives: no CTS at all, sizes 0..the eager size, receives larger than the send. */
static void test_eager_posted(void **state) {
  static const size_t sizes[] = {0, 1, 8, 100, 4095, 4096, 20000, 32768};
  enum { N = sizeof(sizes) / sizeof(sizes[0]) };
  static unsigned char sb[N][32768], rb[N][32768 + 100];
  struct pair p;
  void *rreq[N], *sreq[N];
  (void)state;
  eager_on("32");
  init_plugin();
  pair_open(&p);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) {
      ut_fill(sb[i], sizes[i], (unsigned)(i + 10 * round));
      size_t rs = sizes[i] + (round == 1 ? 100 : 0);
      rreq[i] = post_recv(p.r, rb[i], rs > 32768 ? 32768 : rs); /* not above the eager size: no CTS */
    }
    for (int i = 0; i < N; i++) sreq[i] = post_send(p.s, sb[i], sizes[i]);
    for (int i = 0; i < N; i++) {
      assert_int_equal(wait_req(sreq[i]), sizes[i]);
      assert_int_equal(wait_req(rreq[i]), sizes[i]);
      assert_memory_equal(sb[i], rb[i], sizes[i]);
    }
  }
  assert_int_equal(tcomm_of(p.s)->n_eager, 3 * N);
  assert_int_equal(tcomm_of(p.r)->n_eager, 3 * N);
  assert_int_equal(tcomm_of(p.r)->n_cts, 0);
  assert_int_equal(tcomm_of(p.r)->n_bounced, 0);
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  eager_default();
}

/* The helpers' polling hint (GDRNET_TCP_SPIN_MAX_US): the receiver counts receives whose CTS went out until they
 * complete, the sender CTSs it has read until it uses them; both end at zero, also when a CTS'd receive gets an eager
 * message (its CTS reaches the sender after the send: not counted). */
static void test_expect_counts(void **state) {
  enum { N = 4, BIG = 256 * 1024 };
  static unsigned char sb[N][BIG], rb[N][BIG];
  struct pair p;
  void *rreq[N], *sreq[N];
  (void)state;
  eager_on("32");
  setenv("GDRNET_TCP_SPIN_US", "50", 1);
  setenv("GDRNET_TCP_SPIN_MAX_US", "1000", 1);
  init_plugin();
  pair_open(&p);
  assert_int_equal(tcomm_of(p.r)->spin_max_ns, 1000000);
  for (int i = 0; i < N; i++) rreq[i] = post_recv(p.r, rb[i], BIG); /* above the eager size: a CTS each */
  assert_int_equal(atomic_load(&tcomm_of(p.r)->rx_expect), N);
  /* the receiver's GRANT and the four CTSs are at the sender, which has not read its control stream yet */
  wait_ctrl_bytes(p.s, (N + 1) * (int)sizeof(struct tcp_ctrl_hdr));
  for (int i = 0; i < N; i++) {
    ut_fill(sb[i], BIG, (unsigned)i);
    sreq[i] = post_send(p.s, sb[i], i < 2 ? BIG : 100); /* two chunked, two small ones (eager would do; a CTS is
                                                         * there, so they go inline after it) */
    if (i == 0) assert_int_equal(atomic_load(&tcomm_of(p.s)->tx_expect), N - 1); /* read all four, used one */
  }
  for (int i = 0; i < N; i++) {
    assert_int_equal(wait_req(sreq[i]), i < 2 ? BIG : 100);
    assert_int_equal(wait_req(rreq[i]), i < 2 ? BIG : 100);
    assert_memory_equal(sb[i], rb[i], i < 2 ? BIG : 100);
  }
  assert_int_equal(atomic_load(&tcomm_of(p.r)->rx_expect), 0);
  assert_int_equal(atomic_load(&tcomm_of(p.s)->tx_expect), 0);
  /* an eager send into a CTS'd receive: the send goes before the sender reads the CTS. The sender reads its control
   * stream unasked every TCP_SEND_POLL_CALLS isend/test calls: the waits above counted towards that, and the read
   * could then take the late CTS before the check below, which expects it still unread (1 run in 15 under load). */
  tcomm_of(p.s)->idle_calls = 0;
  sreq[0] = post_send(p.s, sb[0], 100);
  rreq[0] = post_recv(p.r, rb[0], BIG);
  assert_int_equal(atomic_load(&tcomm_of(p.r)->rx_expect), 1);
  assert_int_equal(wait_req(sreq[0]), 100);
  assert_int_equal(wait_req(rreq[0]), 100);
  assert_int_equal(atomic_load(&tcomm_of(p.r)->rx_expect), 0);
  /* a big message next: its isend reads the control stream, the late CTS (not counted) and its own (counted, used) */
  rreq[1] = post_recv(p.r, rb[1], BIG);
  wait_ctrl_bytes(p.s, 2 * (int)sizeof(struct tcp_ctrl_hdr));
  sreq[1] = post_send(p.s, sb[1], BIG);
  assert_int_equal(atomic_load(&tcomm_of(p.s)->tx_expect), 0);
  assert_int_equal(wait_req(sreq[1]), BIG);
  assert_int_equal(wait_req(rreq[1]), BIG);
  assert_memory_equal(sb[1], rb[1], BIG);
  assert_int_equal(atomic_load(&tcomm_of(p.r)->rx_expect), 0);
  assert_int_equal(atomic_load(&tcomm_of(p.s)->tx_expect), 0);
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  unsetenv("GDRNET_TCP_SPIN_US");
  unsetenv("GDRNET_TCP_SPIN_MAX_US");
  eager_default();
}

/* Eager messages that arrive before their receives are posted wait in bounce slots; irecv completes them at once. */
static void test_eager_unposted(void **state) {
  static const size_t sizes[] = {8, 0, 1000, 32768, 5};
  enum { N = sizeof(sizes) / sizeof(sizes[0]) };
  static unsigned char sb[N][32768], rb[N][32768 + 10];
  struct pair p;
  void *sreq[N], *rreq[N];
  int bytes = 0;
  (void)state;
  eager_on("32");
  init_plugin();
  pair_open(&p);
  for (int i = 0; i < N; i++) {
    ut_fill(sb[i], sizes[i], (unsigned)i + 40);
    sreq[i] = post_send(p.s, sb[i], sizes[i]);
    assert_int_equal(wait_req(sreq[i]), sizes[i]); /* complete with no receive posted */
    bytes += (int)sizeof(struct tcp_ctrl_hdr) + (int)sizes[i];
  }
  wait_ctrl_bytes(p.r, bytes);
  rreq[0] = post_recv(p.r, rb[0], sizes[0]);
  assert_int_equal(wait_req(rreq[0]), sizes[0]); /* one read takes them all: the other four are bounced */
  assert_int_equal(tcomm_of(p.r)->n_bounced, N - 1);
  for (int i = 1; i < N; i++) {
    size_t got[GDR_MAX_RECVS];
    int done = 0;
    rreq[i] = post_recv(p.r, rb[i], sizes[i] + (i % 2 ? 10 : 0)); /* larger receive: the sent size is reported */
    assert_int_equal(gdr_core_test(rreq[i], &done, got, NULL), ncclSuccess);
    assert_int_equal(done, 1); /* copied from its bounce slot by irecv */
    assert_int_equal(got[0], sizes[i]);
  }
  for (int i = 0; i < N; i++) assert_memory_equal(sb[i], rb[i], sizes[i]);
  assert_int_equal(tcomm_of(p.r)->n_cts, 0);
  xfer(&p, 77, 77, 1); /* and it goes on */
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  eager_default();
}

/* A big eager message (GDRNET_TCP_INLINE=1M) whose receive is posted while its payload is still arriving into a
 * bounce slot is completed when the rest arrives. */
static void test_eager_posted_mid_payload(void **state) {
  enum { BIG = 1 << 20 };
  unsigned char *sb = malloc(BIG), *rb = malloc(BIG);
  struct pair p;
  void *s0, *s1, *r0, *r1;
  int sdone = 0, rdone = 0;
  double t0;
  (void)state;
  setenv("GDRNET_TCP_INLINE", "1M", 1);
  eager_on("32");
  init_plugin();
  pair_open(&p);
  ut_fill(sb, BIG, 3);
  r0 = post_recv(p.r, rb, 8);
  s0 = post_send(p.s, sb, 8);
  s1 = post_send(p.s, sb, BIG); /* eager too; the socket takes part of it now */
  assert_int_equal(wait_req(r0), 8);
  printf("mid-payload: the big eager message was %s when its receive was posted\n",
         tcomm_of(p.r)->rx_bounce != NULL ? "arriving into a bounce slot" : "not started or complete");
  r1 = post_recv(p.r, rb, BIG);
  assert_int_equal(wait_req(s0), 8);
  t0 = ut_now();
  while (!sdone || !rdone) {
    size_t got[GDR_MAX_RECVS];
    if (!sdone) assert_int_equal(gdr_core_test(s1, &sdone, NULL, NULL), ncclSuccess);
    if (!rdone) {
      assert_int_equal(gdr_core_test(r1, &rdone, got, NULL), ncclSuccess);
      if (rdone) assert_int_equal(got[0], BIG);
    }
    assert_true(ut_now() - t0 < 20.0);
  }
  assert_memory_equal(sb, rb, BIG);
  assert_int_equal(tcomm_of(p.r)->n_eager, 2);
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  eager_default();
  unsetenv("GDRNET_TCP_INLINE");
  free(sb);
  free(rb);
}

/* Credits run out: isend says "not now" (NULL) until the receiver has consumed messages and credited them back. */
static void test_eager_credit_exhaustion(void **state) {
  enum { C = 4, N = 12 };
  static unsigned char sb[N][64], rb[N][64];
  struct pair p;
  void *sreq[N] = {0}, *rreq[N] = {0};
  int sent = 0, recvd = 0;
  double t0;
  (void)state;
  eager_on("4");
  init_plugin();
  pair_open(&p);
  for (int i = 0; i < N; i++) ut_fill(sb[i], 64, (unsigned)i + 7);
  for (; sent < C; sent++) sreq[sent] = post_send(p.s, sb[sent], 64);
  assert_int_equal(tcomm_of(p.s)->credits, 0);
  /* every eager message has reached the receiver (at least its payload bytes are queued there) */
  wait_ctrl_bytes(p.r, C * 64);
  for (int k = 0; k < 200; k++) { /* no receive posted: no credit comes back, however often it asks */
    void *req = NULL;
    assert_int_equal(gdr_core_isend(p.s, sb[sent], 64, 0, NULL, NULL, &req), ncclSuccess);
    assert_null(req);
  }
  { /* and nothing at all came back on the sender's control stream: no credit is on its way either */
    int n = -1;
    assert_int_equal(ioctl(tcomm_of(p.s)->ctrl_fd, FIONREAD, &n), 0);
    assert_int_equal(n, 0);
  }
  t0 = ut_now();
  while (recvd < N || sent < N) {
    if (recvd < sent) { /* the receiver consumes one: every C/2 consumed go back as credits */
      rreq[recvd] = post_recv(p.r, rb[recvd], 64);
      assert_int_equal(wait_req(rreq[recvd]), 64);
      recvd++;
    }
    if (sent < N) {
      void *req = NULL;
      assert_int_equal(gdr_core_isend(p.s, sb[sent], 64, 0, NULL, NULL, &req), ncclSuccess);
      if (req != NULL) {
        assert_true(sent - recvd < C + 1);
        sreq[sent++] = req;
      }
    }
    assert_true(ut_now() - t0 < 20.0);
  }
  for (int i = 0; i < N; i++) {
    assert_int_equal(wait_req(sreq[i]), 64);
    assert_memory_equal(sb[i], rb[i], 64);
  }
  assert_int_equal(tcomm_of(p.s)->n_eager, N);
  assert_int_equal(tcomm_of(p.r)->n_cts, 0);
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  eager_default();
}

/* GDRNET_TCP_CTS_INLINE: a message whose clear-to-send came (its receive is bigger than the eager size, as NCCL's
 * Simple steps) goes inline only up to that size, above it chunked; a small message into a receive of the eager size
 * (NCCL's LL) is still eager, and its receive sends no clear-to-send. */
static void test_cts_inline(void **state) {
  enum { N = 6, BIG = 1 << 20, MSG = 65536 };
  (void)state;
  setenv("GDRNET_TCP_NSOCKS", "2", 1);
  setenv("GDRNET_TCP_INLINE", "64K", 1);
  for (int cfg = 0; cfg < 3; cfg++) { /* 32768: chunked above 32 KiB; 65536 and 1048576: inline up to GDRNET_TCP_INLINE */
    static const char *const val[] = {"32768", "65536", "1048576"};
    unsigned char *sb = malloc(BIG), *rb = malloc(BIG);
    struct pair p;
    assert_non_null(sb);
    assert_non_null(rb);
    setenv("GDRNET_TCP_CTS_INLINE", val[cfg], 1);
    eager_on("32");
    init_plugin();
    pair_open(&p);
    for (int i = 0; i < N; i++) { /* 64 KiB into 1 MiB receives: each with its clear-to-send */
      ut_fill(sb, MSG, (unsigned)(cfg * 100 + i));
      void *rreq = post_recv(p.r, rb, BIG);
      wait_ctrl_bytes(p.s, 1); /* its CTS is there (else the message may go eagerly: it fits the eager size) */
      void *sreq = post_send(p.s, sb, MSG);
      assert_int_equal(wait_req(rreq), MSG);
      assert_int_equal(wait_req(sreq), MSG);
      assert_memory_equal(sb, rb, MSG);
    }
    assert_int_equal(tcomm_of(p.s)->n_chunked, cfg == 0 ? N : 0);
    assert_int_equal(tcomm_of(p.r)->n_cts, N);
    for (int i = 0; i < N; i++) { /* 8 B into 64 KiB receives (NCCL's LL): eager, no clear-to-send */
      ut_fill(sb, 8, (unsigned)(cfg * 100 + 50 + i));
      void *rreq = post_recv(p.r, rb, MSG);
      void *sreq = post_send(p.s, sb, 8);
      assert_int_equal(wait_req(rreq), 8);
      assert_int_equal(wait_req(sreq), 8);
      assert_memory_equal(sb, rb, 8);
    }
    assert_int_equal(tcomm_of(p.r)->n_cts, N);
    /* (inline up to 64 KiB, the 64 KiB ones may have gone eagerly too: a CTS is read only when needed) */
    if (cfg == 0) assert_int_equal(tcomm_of(p.s)->n_eager, N);
    else assert_true(tcomm_of(p.s)->n_eager >= N);
    assert_int_equal(tcomm_of(p.s)->n_chunked, cfg == 0 ? N : 0);
    pair_close(&p);
    assert_int_equal(ut_nwarn, 0);
    fini_plugin();
    free(sb);
    free(rb);
  }
  unsetenv("GDRNET_TCP_CTS_INLINE");
  unsetenv("GDRNET_TCP_INLINE");
  unsetenv("GDRNET_TCP_NSOCKS");
  eager_default();
}

/* Eager, inline-after-CTS and chunked messages mixed, in order, with receives posted ahead of the sends and behind
 * them; small messages into big receives (their CTS goes unused) and big ones waiting for their CTS (RTS). */
static void test_eager_mixed_order(void **state) {
  static const size_t sizes[] = {8, 100000, 0, 32768, 40000, 5, (1 << 20) + 7, 16, 32769, 3, 65536, 1};
  enum { N = sizeof(sizes) / sizeof(sizes[0]), MAXSZ = (1 << 20) + 7 + 100 };
  unsigned char *sb[N], *rb[N];
  (void)state;
  setenv("GDRNET_TCP_NSOCKS", "2", 1);
  for (int m = 0; m < 6; m++) { /* 0: receives first; 1: sends first (as far as they go); 2: alternating */
    int mode = m % 3;                /* m >= 3: the same with the eager path off */
    struct pair p;
    void *sreq[N] = {0}, *rreq[N] = {0};
    int ns = 0, nr = 0, ds = 0, dr = 0;
    double t0 = ut_now();
    eager_on(m < 3 ? "32" : "0");
    init_plugin();
    pair_open(&p);
    for (int i = 0; i < N; i++) {
      sb[i] = malloc(MAXSZ);
      rb[i] = malloc(MAXSZ);
      ut_fill(sb[i], sizes[i], (unsigned)(i * 3 + mode));
    }
    while (ds < N || dr < N) {
      int want_recv = mode == 0 ? 1 : (mode == 1 ? (ns == N || sreq[ns] == NULL) : (nr <= ns));
      if (nr < N && want_recv) {
        /* every third small message gets a receive bigger than the eager size: a CTS goes out, unused */
        size_t rs = sizes[nr] + (nr % 3 == 0 ? 70000 : 0);
        rreq[nr] = post_recv(p.r, rb[nr], rs);
        nr++;
      }
      if (ns < N) {
        void *req = NULL;
        assert_int_equal(gdr_core_isend(p.s, sb[ns], sizes[ns], 0, NULL, NULL, &req), ncclSuccess);
        if (req) sreq[ns++] = req;
      }
      for (int i = ds; i < ns; i++) { /* tested in order, as NCCL does */
        int d = 0;
        assert_int_equal(gdr_core_test(sreq[i], &d, NULL, NULL), ncclSuccess);
        if (!d) break;
        ds++;
      }
      for (int i = dr; i < nr; i++) {
        int d = 0;
        size_t got[GDR_MAX_RECVS];
        assert_int_equal(gdr_core_test(rreq[i], &d, got, NULL), ncclSuccess);
        if (!d) break;
        assert_int_equal(got[0], sizes[i]);
        assert_memory_equal(sb[i], rb[i], sizes[i]);
        dr++;
      }
      assert_true(ut_now() - t0 < 30.0);
    }
    if (m < 3) assert_true(tcomm_of(p.s)->n_eager >= 4);
    else assert_int_equal(tcomm_of(p.s)->n_eager, 0);
    for (int i = 0; i < N; i++) {
      free(sb[i]);
      free(rb[i]);
    }
    pair_close(&p);
    assert_int_equal(ut_nwarn, 0);
    fini_plugin();
  }
  eager_default();
  unsetenv("GDRNET_TCP_NSOCKS");
}

/* GDRNET_TCP_EAGER_CREDITS=0: every message waits for its CTS, as before the eager path. */
static void test_eager_off(void **state) {
  struct pair p;
  (void)state;
  eager_on("0");
  init_plugin();
  pair_open(&p);
  xfer(&p, 0, 0, 1);
  xfer(&p, 8, 100, 2);
  xfer(&p, 32768, 32768, 3);
  xfer(&p, 100000, 100000, 4);
  assert_int_equal(tcomm_of(p.s)->n_eager, 0);
  assert_int_equal(tcomm_of(p.r)->n_cts, 4);
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  eager_default();
}

/* The sender goes away: the receiver's pending request fails within a bounded time, never hangs. */
static void test_peer_closes(void **state) {
  static char rbuf[1 << 20];
  (void)state;
  /* k 0..3: a big receive (CTS) / a small one (no CTS when eager), eager off / on; k 4: receives posted after the
   * sender closed (their CTSs reach a closed socket, the second one fails to send: not an error by itself) */
  for (int k = 0; k < 5; k++) {
    struct pair p;
    void *rreq = NULL;
    void *data[1] = {rbuf};
    size_t rs[1] = {k % 2 ? 100 : sizeof(rbuf)};
    int tag = 0, done = 0;
    ncclResult_t r = ncclSuccess;
    double t0;
    eager_on(k < 2 ? "0" : "32");
    init_plugin();
    pair_open(&p);
    xfer(&p, 1000, 1000, 1);
    if (k < 4) assert_int_equal(gdr_core_irecv(p.r, 1, data, rs, &tag, NULL, NULL, &rreq), ncclSuccess);
    assert_int_equal(gdr_core_close_send(p.s), ncclSuccess);
    p.s = NULL;
    if (k == 4) {
      void *first = NULL;
      int fd = tcomm_of(p.r)->ctrl_fd;
      wait_fd(fd, POLLRDHUP, 10.0); /* the sender's FIN has arrived */
      assert_int_equal(gdr_core_irecv(p.r, 1, data, rs, &tag, NULL, NULL, &first), ncclSuccess);
      wait_fd(fd, POLLERR | POLLHUP, 10.0); /* the closed peer answered the first CTS with a reset */
      assert_int_equal(gdr_core_irecv(p.r, 1, data, rs, &tag, NULL, NULL, &rreq), ncclSuccess);
      assert_non_null(rreq);
    }
    t0 = ut_now();
    while (r == ncclSuccess && !done) {
      r = gdr_core_test(rreq, &done, NULL, NULL);
      assert_true(ut_now() - t0 < 10.0);
    }
    assert_int_equal(done, 0);
    assert_int_equal(r, ncclRemoteError);
    assert_true(ut_warned("127.0.0.1")); /* names the peer */
    pair_close(&p);
    fini_plugin();
  }
  eager_default();
}

/* The receiver goes away: the sender's isend fails within a bounded time, small (eager, credits left) or big. */
static void test_receiver_closes(void **state) {
  static char sbuf[100000];
  (void)state;
  for (int k = 0; k < 4; k++) { /* small / big, eager off / on */
    struct pair p;
    ncclResult_t r = ncclSuccess;
    double t0;
    eager_on(k < 2 ? "0" : "32");
    init_plugin();
    pair_open(&p);
    xfer(&p, 10, 10, 1);
    assert_int_equal(gdr_core_close_recv(p.r), ncclSuccess);
    p.r = NULL;
    t0 = ut_now();
    while (r == ncclSuccess) {
      void *req = NULL;
      int done = 0;
      r = gdr_core_isend(p.s, sbuf, k % 2 ? sizeof(sbuf) : 8, 0, NULL, NULL, &req);
      while (r == ncclSuccess && req != NULL && !done) r = gdr_core_test(req, &done, NULL, NULL);
      assert_true(ut_now() - t0 < 10.0);
    }
    assert_int_equal(r, ncclRemoteError);
    assert_true(ut_warned("127.0.0.1"));
    pair_close(&p);
    fini_plugin();
  }
  eager_default();
}

/* The sender completes sends and closes at once: what it sent still arrives. */
static void test_close_after_send_delivers_mode(const char *credits) {
  enum { N = 6 };
  static unsigned char sb[N][3 << 20], rb[N][3 << 20];
  struct pair p;
  void *sreq[N] = {0}, *rreq[N] = {0};
  size_t sz[N] = {0, 10, 5000, 70000, 1 << 20, 3 << 20};
  size_t got[N][GDR_MAX_RECVS];
  int rdone[N] = {0};
  eager_on(credits);
  init_plugin();
  pair_open(&p);
  for (int i = 0; i < N; i++) {
    void *data[1] = {rb[i]};
    size_t s[1] = {sz[i]};
    int tag = 0;
    ut_fill(sb[i], sz[i], (unsigned)i + 5);
    assert_int_equal(gdr_core_irecv(p.r, 1, data, s, &tag, NULL, NULL, &rreq[i]), ncclSuccess);
  }
  for (int i = 0; i < N; i++) {
    int done = 0;
    double t0 = ut_now();
    while (sreq[i] == NULL) {
      assert_int_equal(gdr_core_isend(p.s, sb[i], sz[i], 0, NULL, NULL, &sreq[i]), ncclSuccess);
      for (int j = 0; j < N && sreq[i] == NULL; j++) { /* out of credits: the receiver consumes one */
        if (rdone[j]) continue;
        assert_int_equal(gdr_core_test(rreq[j], &rdone[j], got[j], NULL), ncclSuccess);
        break;
      }
      assert_true(ut_now() - t0 < 10.0);
    }
    while (!done) {
      assert_int_equal(gdr_core_test(sreq[i], &done, NULL, NULL), ncclSuccess);
      assert_true(ut_now() - t0 < 10.0);
    }
  }
  assert_int_equal(gdr_core_close_send(p.s), ncclSuccess);
  p.s = NULL;
  /* the receiver consumes the rest (with 2 credits each consumed message sends one back: to a closed peer) */
  for (int i = 0; i < N; i++) {
    double t0 = ut_now();
    while (!rdone[i]) {
      assert_int_equal(gdr_core_test(rreq[i], &rdone[i], got[i], NULL), ncclSuccess);
      assert_true(ut_now() - t0 < 10.0);
    }
    assert_int_equal(got[i][0], sz[i]);
    assert_memory_equal(sb[i], rb[i], sz[i]);
  }
  if (getenv("GDRNET_TEST_VERBOSE"))
    printf("close after send, %s credits: the receiver's control stream %s\n", credits,
           tcomm_of(p.r)->tx_dead ? "found the sender gone (sends dropped)" : "never found the sender gone");
  pair_close(&p);
  fini_plugin();
  eager_default();
}

static void test_close_after_send_delivers(void **state) {
  (void)state;
  test_close_after_send_delivers_mode("0");
  test_close_after_send_delivers_mode("32");
  test_close_after_send_delivers_mode("2"); /* credits come back while the sender is closing */
}

static void test_reg_refuses_cuda(void **state) {
  struct pair p;
  char buf[64];
  void *mh = NULL;
  (void)state;
  init_plugin();
  pair_open(&p);
  assert_int_equal(gdr_core_reg_mr(p.s, buf, sizeof(buf), NCCL_PTR_CUDA, &mh), ncclInvalidUsage);
  assert_null(mh);
  assert_true(ut_warned("TCP transport needs host memory; NCCL stages GPU buffers when ptrSupport is HOST"));
  assert_int_equal(gdr_core_reg_mr(p.r, buf, sizeof(buf), NCCL_PTR_HOST, &mh), ncclSuccess);
  assert_int_equal(gdr_core_dereg_mr(p.r, mh), ncclSuccess);
  {
    void *req = (void *)1;
    void *data[1] = {buf};
    int sizes[1] = {64};
    assert_int_equal(gdr_core_iflush(p.r, 1, data, sizes, NULL, &req), ncclSuccess);
    assert_null(req); /* nothing to wait for */
  }
  pair_close(&p);
  fini_plugin();
}

/* Several connections at once, driven round-robin, each with its own data. */
static void test_many_comms(void **state) {
  enum { C = 8 };
  struct pair p[C];
  (void)state;
  setenv("GDRNET_TCP_NSOCKS", "2", 1);
  init_plugin();
  for (int i = 0; i < C; i++) pair_open(&p[i]);
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < C; i++) xfer(&p[i], (size_t)(round * 300000 + i * 1000), (size_t)(round * 300000 + i * 1000) + 1, (unsigned)(i * 10 + round));
  for (int i = 0; i < C; i++) pair_close(&p[i]);
  fini_plugin();
  unsetenv("GDRNET_TCP_NSOCKS");
}

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int n = 0;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] != '.') n++;
    if (getenv("GDRNET_TEST_VERBOSE") && e->d_name[0] != '.') {
      char p[300], t[300] = "";
      snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
      ssize_t k = readlink(p, t, sizeof(t) - 1);
      if (k > 0) t[k] = 0;
      fprintf(stderr, "fd %s -> %s\n", e->d_name, t);
    }
  }
  closedir(d);
  return n;
}

/* Listen/connect/accept/close cycles leak no descriptor and never close one they do not own (fd 0 included: a
 * calloc'd fd field is 0, not -1). */
static void test_no_fd_leak_or_stray_close(void **state) {
  struct stat before, after;
  int n0;
  (void)state;
  if (fstat(0, &before) != 0) { /* no stdin here: put something on fd 0 to watch */
    int fd = open("/dev/null", O_RDONLY);
    assert_int_equal(fd, 0);
  }
  init_plugin();
  assert_int_equal(fstat(0, &before), 0);
  n0 = count_fds();
  for (int k = 0; k < 5; k++) {
    struct pair p;
    void *l = NULL;
    char h[NCCL_NET_HANDLE_MAXSIZE];
    pair_open(&p);
    xfer(&p, 100000, 100000, (unsigned)k);
    pair_close(&p);
    assert_int_equal(gdr_core_listen(NULL, 0, h, &l), ncclSuccess); /* a listen closed without any accept */
    assert_int_equal(gdr_core_close_listen(l), ncclSuccess);
  }
  assert_int_equal(count_fds(), n0);
  assert_int_equal(fstat(0, &after), 0);
  assert_int_equal(before.st_ino, after.st_ino);
  assert_int_equal(before.st_dev, after.st_dev);
  fini_plugin();
}

/* IPv6: the loopback's ::1 when the host has it. */
static void test_ipv6(void **state) {
  struct pair p;
  struct gdr_props props;
  FILE *f = fopen("/proc/net/if_inet6", "r");
  char line[256];
  int have = 0;
  (void)state;
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "00000000000000000000000000000001", 32) == 0) have = 1;
  if (f) fclose(f);
  if (!have) {
    skip();
  }
  setenv("GDRNET_SOCKET_FAMILY", "AF_INET6", 1);
  init_plugin();
  assert_int_equal(gdr_core_get_properties(0, &props), ncclSuccess);
  assert_string_equal(props.name, "lo");
  pair_open(&p);
  xfer(&p, 12345, 12345, 1);
  xfer(&p, 3 << 20, 3 << 20, 2);
  pair_close(&p);
  fini_plugin();
  unsetenv("GDRNET_SOCKET_FAMILY");
}

/* Randomised traffic: sizes 0..2 MiB, receives posted ahead up to 32, requests tested in random order, across
 * random stream/thread/inline/chunk settings; every byte and every reported size checked. */
struct rt_cfgs {
  int from, to; /* the configurations this instance runs (three instances: CTest runs them in parallel shards) */
};
static const struct rt_cfgs rt_cfgs[] = {{0, 2}, {2, 4}, {4, 6}};

static void test_random_traffic(void **state) {
  enum { N = NCCL_NET_MAX_REQUESTS, MSGS = 400, FULLSZ = 2 << 20 };
  const struct rt_cfgs *rc = *state;
  /* sizes 0..2 MiB; 0..256 KiB under ThreadSanitizer (UT_TSAN, set by CTest there): still up to 64 chunks each */
  const size_t MAXSZ = getenv("UT_TSAN") != NULL ? (size_t)256 << 10 : (size_t)FULLSZ;
  uint32_t x;
#define RND() (x = x * 1664525u + 1013904223u, x >> 8)
  for (int cfg = rc->from; cfg < rc->to; cfg++) {
    struct pair p;
    char v[6][16];
    x = 12345u + 7919u * (uint32_t)cfg; /* each configuration's own stream: the same whatever the sharding */
    unsigned char *sb[N], *rb[N];
    void *sreq[N] = {0}, *rreq[N] = {0};
    size_t rsz[N];
    int rseq[N];
    int posted_r = 0, posted_s = 0, done_r = 0, done_s = 0;
    double t0 = ut_now();
    snprintf(v[0], 16, "%u", 1 + RND() % 6);
    snprintf(v[1], 16, "%u", 1 + RND() % 3);
    snprintf(v[2], 16, "%u", (unsigned)(RND() % 3) * 16384);
    snprintf(v[3], 16, "%u", 4096u << (RND() % 5));
    setenv("GDRNET_TCP_NSOCKS", v[0], 1);
    setenv("GDRNET_TCP_NTHREADS", v[1], 1);
    setenv("GDRNET_TCP_INLINE", v[2], 1);
    setenv("GDRNET_TCP_MIN_CHUNK", v[3], 1);
    static const char *const cts_inline[] = {"auto", "0", "16384"}; /* after a CTS: inline up to .. (0: chunked) */
    snprintf(v[5], 16, "%s", cts_inline[RND() % 3]);
    setenv("GDRNET_TCP_CTS_INLINE", v[5], 1);
    snprintf(v[4], 16, "%u", cfg % 3 == 0 ? 0u : (cfg % 3 == 1 ? 32u : 1u + RND() % 8)); /* eager credits */
    eager_on(v[4]);
    init_plugin();
    pair_open(&p);
    for (int i = 0; i < N; i++) {
      sb[i] = malloc(MAXSZ);
      rb[i] = malloc(MAXSZ + 70064);
    }
    /* message k: size sz(k), the receive posted for it is at least that big */
    while (done_r < MSGS || done_s < MSGS) {
      int k = (int)(RND() % N);
      int op = (int)(RND() % 4);
      if (op == 0 && posted_r < MSGS) {
        for (int i = 0; i < N; i++) {
          if (rreq[i] != NULL) continue;
          uint32_t y = (uint32_t)posted_r * 2654435761u;
          size_t sz = (y >> 4) % 4 == 0 ? (y >> 8) % 64 : (y >> 8) % MAXSZ;
          void *data[1] = {rb[i]};
          /* a quarter of the receives are bigger than any eager size: their CTS goes out, and the message takes the
           * inline-after-CTS or the chunked path (GDRNET_TCP_CTS_INLINE) whatever its size */
          size_t s1[1] = {sz + (RND() % 4 == 0 ? 70000 + RND() % 64 : RND() % 64)};
          int tag = 0;
          memset(rb[i], 0xee, s1[0]);
          assert_int_equal(gdr_core_irecv(p.r, 1, data, s1, &tag, NULL, NULL, &rreq[i]), ncclSuccess);
          if (rreq[i] == NULL) break; /* the plugin's 32 are out */
          rsz[i] = sz;
          rseq[i] = posted_r++;
          break;
        }
      } else if (op == 1 && posted_s < posted_r) {
        for (int i = 0; i < N; i++) {
          if (sreq[i] != NULL) continue;
          uint32_t y = (uint32_t)posted_s * 2654435761u;
          size_t sz = (y >> 4) % 4 == 0 ? (y >> 8) % 64 : (y >> 8) % MAXSZ;
          ut_fill(sb[i], sz, (unsigned)posted_s);
          assert_int_equal(gdr_core_isend(p.s, sb[i], sz, 0, NULL, NULL, &sreq[i]), ncclSuccess);
          if (sreq[i] == NULL) break;
          posted_s++;
          break;
        }
      } else if (op == 2 && sreq[k] != NULL) {
        int d = 0;
        assert_int_equal(gdr_core_test(sreq[k], &d, NULL, NULL), ncclSuccess);
        if (d) {
          sreq[k] = NULL;
          done_s++;
        }
      } else if (op == 3 && rreq[k] != NULL) {
        int d = 0, n = 0;
        size_t got[GDR_MAX_RECVS];
        assert_int_equal(gdr_core_test(rreq[k], &d, got, &n), ncclSuccess);
        if (d) {
          unsigned char *ref = malloc(rsz[k] + 1);
          assert_int_equal(got[0], rsz[k]);
          ut_fill(ref, rsz[k], (unsigned)rseq[k]);
          assert_memory_equal(ref, rb[k], rsz[k]);
          free(ref);
          rreq[k] = NULL;
          done_r++;
        }
      }
      assert_true(ut_now() - t0 < 120.0);
    }
    for (int i = 0; i < N; i++) {
      free(sb[i]);
      free(rb[i]);
    }
    pair_close(&p);
    assert_int_equal(ut_nwarn, 0);
    fini_plugin();
  }
#undef RND
  unsetenv("GDRNET_TCP_NSOCKS");
  unsetenv("GDRNET_TCP_NTHREADS");
  unsetenv("GDRNET_TCP_INLINE");
  unsetenv("GDRNET_TCP_MIN_CHUNK");
  unsetenv("GDRNET_TCP_CTS_INLINE");
  eager_default();
}

/* Misuse through the core is an error with a WARN, never a crash. */
/* The receiver's bounce ring buffers eager messages that come before their receive is posted, but only inside the
 * window the credits allow: an eager header numbered far ahead (or not after the last one buffered),
 * written straight onto the control stream as a broken or hostile sender would, fails the connection with a
 * protocol error instead of being buffered. */
static void test_eager_out_of_window(void **state) {
  struct pair p;
  unsigned char buf[64];
  (void)state;
  init_plugin();
  for (int variant = 0; variant < 2; variant++) {
    pair_open(&p);
    struct tcp_comm *sc = ((struct gdr_comm *)p.s)->tcomm;
    struct tcp_ctrl_hdr h[2];
    memset(h, 0, sizeof(h));
    h[0].type = TCP_MSG_EAGER;
    h[0].seq = variant == 0 ? 1000000 : 5; /* far ahead; or a fine first one... */
    h[0].size = 8;
    h[1] = h[0];
    h[1].seq = 3; /* ...followed by one numbered before it */
    char wire[2 * (sizeof(h[0]) + 8)];
    memcpy(wire, &h[0], sizeof(h[0]));
    memset(wire + sizeof(h[0]), 7, 8);
    memcpy(wire + sizeof(h[0]) + 8, &h[1], sizeof(h[1]));
    memset(wire + 2 * sizeof(h[0]) + 8, 7, 8);
    size_t len = variant == 0 ? sizeof(h[0]) + 8 : sizeof(wire);
    assert_int_equal(send(sc->ctrl_fd, wire, len, MSG_NOSIGNAL), (ssize_t)len);
    void *req = post_recv(p.r, buf, sizeof(buf)); /* message 0: not what arrived */
    int done = 0;
    ncclResult_t r = ncclSuccess;
    double t0 = ut_now();
    while (r == ncclSuccess && !done) {
      r = gdr_core_test(req, &done, NULL, NULL);
      assert_true(ut_now() - t0 < 10.0);
    }
    assert_int_equal(r, ncclRemoteError);
    assert_true(ut_warned("protocol error: eager message numbered outside the window"));
    pair_close(&p);
  }
  fini_plugin();
}

static void test_core_misuse(void **state) {
  struct pair p;
  char buf[64] = {0};
  void *req = NULL, *mh = NULL;
  int done = 0;
  size_t sz[1] = {sizeof(buf)};
  void *data[1] = {buf};
  int tag = 0;
  (void)state;
  init_plugin();
  pair_open(&p);
  assert_int_equal(gdr_core_isend(p.r, buf, 1, 0, NULL, NULL, &req), ncclInternalError); /* a recv comm */
  assert_int_equal(gdr_core_irecv(p.s, 1, data, sz, &tag, NULL, NULL, &req), ncclInternalError);
  assert_int_equal(gdr_core_irecv(p.r, 9, data, sz, &tag, NULL, NULL, &req), ncclInternalError); /* maxRecvs 8 */
  assert_int_equal(gdr_core_test(buf, &done, NULL, NULL), ncclInternalError);
  { /* a request tested again after it completed (it was freed) */
    char rb[8];
    void *rq = post_recv(p.r, rb, sizeof(rb)), *sq = post_send(p.s, buf, 8);
    assert_int_equal(wait_req(sq), 8);
    assert_int_equal(wait_req(rq), 8);
    assert_int_equal(gdr_core_test(rq, &done, NULL, NULL), ncclInternalError);
    assert_int_equal(gdr_core_test(sq, &done, NULL, NULL), ncclInternalError);
  }
  assert_int_equal(gdr_core_reg_mr(buf, buf, 1, NCCL_PTR_HOST, &mh), ncclInternalError);
  assert_int_equal(gdr_core_close_send(p.r), ncclInternalError);
  assert_int_equal(gdr_core_accept(p.s, &req), ncclInternalError);
  {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    void *s = NULL;
    memset(h, 0x5a, sizeof(h)); /* a handle that is not ours */
    assert_int_equal(gdr_core_connect(NULL, 0, -1, h, &s), ncclInvalidUsage);
    assert_int_equal(gdr_core_listen(NULL, 7, h, &s), ncclInvalidArgument);
    assert_int_equal(gdr_core_connect(NULL, -1, -1, h, &s), ncclInvalidArgument);
  }
  assert_true(ut_nwarn >= 10);
  pair_close(&p);
  fini_plugin();
  assert_int_equal(gdr_core_devices(&done), ncclInternalError); /* before init */
}

/* A stream of large messages, D in flight, over the default streams: every byte and every reported size checked
 * (each message its own pattern, each receive buffer prefilled). Speed is a benchmark's business, not a test's:
 * bench/tcp-loopback measures it. */
static void test_loopback_stream(void **state) {
  enum { D = 8, ITERS = 64 };
  size_t msg = 4 << 20;
  struct pair p;
  unsigned char *sb = malloc(msg * D), *rb = malloc(msg * D); /* one buffer per request in flight, each side */
  unsigned char *ex = malloc(msg);                              /* the bytes a receive must hold */
  void *sreq[D] = {0}, *rreq[D] = {0};
  int rmsg[D];
  int posted_s = 0, posted_r = 0, done_s = 0, done_r = 0;
  double t0;
  (void)state;
  assert_non_null(sb);
  assert_non_null(rb);
  assert_non_null(ex);
  init_plugin();
  pair_open(&p);
  t0 = ut_now();
  while (done_r < ITERS || done_s < ITERS) {
    for (int k = 0; k < D; k++) {
      int d = 0;
      unsigned char *rbk = rb + (size_t)k * msg, *sbk = sb + (size_t)k * msg;
      if (rreq[k] == NULL && posted_r < ITERS) {
        void *data[1] = {rbk};
        size_t s[1] = {msg};
        int tag = 0;
        memset(rbk, 0xA5, msg);
        assert_int_equal(gdr_core_irecv(p.r, 1, data, s, &tag, NULL, NULL, &rreq[k]), ncclSuccess);
        if (rreq[k]) rmsg[k] = posted_r++;
      }
      if (sreq[k] == NULL && posted_s < posted_r && posted_s < ITERS) {
        size_t sz = msg - (size_t)(posted_s % 3); /* 4 MiB, 4 MiB - 1, 4 MiB - 2 */
        ut_fill(sbk, sz, (unsigned)posted_s + 100);
        assert_int_equal(gdr_core_isend(p.s, sbk, sz, 0, NULL, NULL, &sreq[k]), ncclSuccess);
        if (sreq[k]) posted_s++;
      }
      if (rreq[k]) {
        size_t got[GDR_MAX_RECVS] = {0};
        assert_int_equal(gdr_core_test(rreq[k], &d, got, NULL), ncclSuccess);
        if (d) {
          /* messages complete in order on one comm: receive k carries message rmsg[k] */
          size_t want = msg - (size_t)(rmsg[k] % 3);
          assert_int_equal(got[0], want);
          ut_fill(ex, want, (unsigned)rmsg[k] + 100);
          assert_memory_equal(rbk, ex, want);
          for (size_t i = want; i < msg; i++) assert_int_equal(rbk[i], 0xA5);
          rreq[k] = NULL;
          done_r++;
        }
      }
      d = 0;
      if (sreq[k]) {
        assert_int_equal(gdr_core_test(sreq[k], &d, NULL, NULL), ncclSuccess);
        if (d) {
          sreq[k] = NULL;
          done_s++;
        }
      }
    }
    assert_true(ut_now() - t0 < 120.0);
  }
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  free(sb);
  free(rb);
  free(ex);
}

/* ----------------------------------------------------------------------------- matching by NCCL's rule -- */

/* NCCL IB's rule: the k-th isend with tag t fills the first free buffer with tag t of the current slot (the oldest
 * receive not filled yet); an isend that fits nothing there is "not now" (NULL), never an error. With PXN the proxy
 * posts each sub's isend on its own (tag = source rank), so tag 1 of message m+1 can come before tag 2 of message m.
 * The sender here is one sub per tag, each retrying its next message; sub s may try message m only once sub s-1 has
 * tried message m+1 (so the order is tag 1 of message 1 before tag 2 of message 0). Receives are posted all at once
 * (lazy = 0) or each only once the one before completed (lazy = 1). Every byte and reported size is checked, and no
 * call fails or WARNs. */
#define MO_MSGS 3
#define MO_TAGS 2
struct mo_case {
  const char *credits;
  size_t size[MO_MSGS][MO_TAGS]; /* bytes sent into buffer t of message m (its receive is 700 bytes larger) */
  int lazy;
};

static void match_order_run(const struct mo_case *mc) {
  static unsigned char sb[MO_MSGS][MO_TAGS][262144], rb[MO_MSGS][MO_TAGS][262144 + 700], ex[262144];
  static const int tagv[MO_TAGS] = {1, 2};
  struct pair p;
  void *sreq[MO_MSGS][MO_TAGS] = {{0}}, *rreq[MO_MSGS] = {0};
  int snext[MO_TAGS] = {0}, tried[MO_TAGS][MO_MSGS + 1] = {{0}}, sdone[MO_MSGS][MO_TAGS] = {{0}};
  int rposted = 0, rdone[MO_MSGS] = {0}, left = MO_MSGS * (MO_TAGS + 1);
  double t0;
  eager_on(mc->credits);
  init_plugin();
  pair_open(&p);
  for (int m = 0; m < MO_MSGS; m++)
    for (int t = 0; t < MO_TAGS; t++) ut_fill(sb[m][t], mc->size[m][t], (unsigned)(16 * m + t + 1));
  t0 = ut_now();
  while (left > 0) {
    while (rposted < MO_MSGS && (!mc->lazy || rposted == 0 || rdone[rposted - 1])) {
      void *data[MO_TAGS];
      size_t rs[MO_TAGS];
      int tags[MO_TAGS];
      for (int t = 0; t < MO_TAGS; t++) {
        data[t] = rb[rposted][t];
        rs[t] = mc->size[rposted][t] + 700;
        tags[t] = tagv[t];
        memset(rb[rposted][t], 0xA5, rs[t]);
      }
      assert_int_equal(gdr_core_irecv(p.r, MO_TAGS, data, rs, tags, NULL, NULL, &rreq[rposted]), ncclSuccess);
      if (rreq[rposted] == NULL) break;
      rposted++;
    }
    for (int t = 0; t < MO_TAGS; t++) {
      int m = snext[t];
      if (m >= MO_MSGS || (t > 0 && !tried[t - 1][m + 1] && snext[t - 1] < MO_MSGS)) continue;
      tried[t][m] = 1;
      assert_int_equal(gdr_core_isend(p.s, sb[m][t], mc->size[m][t], tagv[t], NULL, NULL, &sreq[m][t]),
                       ncclSuccess);
      if (sreq[m][t] != NULL) snext[t]++;
    }
    for (int m = 0; m < MO_MSGS; m++) {
      for (int t = 0; t < MO_TAGS; t++) {
        size_t got[GDR_MAX_RECVS] = {0};
        if (sreq[m][t] == NULL || sdone[m][t]) continue;
        assert_int_equal(gdr_core_test(sreq[m][t], &sdone[m][t], got, NULL), ncclSuccess);
        if (sdone[m][t]) {
          assert_int_equal(got[0], mc->size[m][t]);
          left--;
        }
      }
      if (rreq[m] != NULL && !rdone[m]) {
        size_t got[GDR_MAX_RECVS] = {0};
        int n = 0;
        assert_int_equal(gdr_core_test(rreq[m], &rdone[m], got, &n), ncclSuccess);
        if (rdone[m]) {
          assert_int_equal(n, MO_TAGS);
          for (int t = 0; t < MO_TAGS; t++) {
            /* buffer t of message m holds (message m, tag t): nothing else, nothing past it */
            assert_int_equal(got[t], mc->size[m][t]);
            ut_fill(ex, mc->size[m][t], (unsigned)(16 * m + t + 1));
            assert_memory_equal(rb[m][t], ex, mc->size[m][t]);
            for (size_t i = mc->size[m][t]; i < mc->size[m][t] + 700; i++) assert_int_equal(rb[m][t][i], 0xA5);
          }
          left--;
        }
      }
    }
    assert_true(ut_now() - t0 < 30.0);
  }
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  eager_default();
}

/* PXN's order: the tag-1 sub runs a message ahead of the tag-2 sub. Eager-sized, CTS-sized and mixed
 * parts, receives posted up front or one at a time (an eager message for a later slot must wait, not fail), with
 * and without the eager path. */
static void test_match_tag_order(void **state) {
  enum { S = 1000, B = 200000 };
  static const struct mo_case cases[] = {
      {"32", {{S, S}, {S, S}, {S, S}}, 0},  {"32", {{S, S}, {S, S}, {S, S}}, 1},
      {"32", {{B, B}, {B, B}, {B, B}}, 0},  {"32", {{B, B}, {B, B}, {B, B}}, 1},
      {"32", {{S, B}, {B, S}, {S, S}}, 0},  {"32", {{B, S}, {S, B}, {B, S}}, 1},
      {"0", {{S, B}, {B, S}, {S, S}}, 0},   {"0", {{B, S}, {S, B}, {B, B}}, 1},
      {"2", {{S, S}, {S, S}, {S, S}}, 1},   {"2", {{S, B}, {S, S}, {B, S}}, 1},
  };
  (void)state;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    printf("tag order case %zu: credits %s, lazy %d\n", i, cases[i].credits, cases[i].lazy);
    match_order_run(&cases[i]);
  }
}

/* One grouped receive of 8 buffers, all with the same tag, 32 KiB .. 256 KiB (across the eager size:
 * some eager, some after a clear-to-send). The sender posts its 8 isends in order (retrying a NULL one), then tests
 * them; the k-th send lands in the k-th buffer. */
static void test_match_same_tag_group(void **state) {
  enum { N = 8, U = 32768 };
  static unsigned char sb[N][N * U], rb[N][N * U], ex[N * U];
  struct pair p;
  void *sreq[N] = {0}, *rreq = NULL, *data[N];
  size_t rs[N], got[GDR_MAX_RECVS] = {0};
  int tags[N], n = 0, done = 0;
  double t0;
  (void)state;
  eager_on("32");
  init_plugin();
  pair_open(&p);
  for (int i = 0; i < N; i++) {
    data[i] = rb[i];
    rs[i] = (size_t)(i + 1) * U;
    tags[i] = 5;
    memset(rb[i], 0xA5, sizeof(rb[i]));
    ut_fill(sb[i], rs[i], (unsigned)i + 300);
  }
  xfer(&p, 100, 100, 1); /* the sender has its GRANT: its first sends below go eager, before it reads a CTS */
  assert_int_equal(gdr_core_irecv(p.r, N, data, rs, tags, NULL, NULL, &rreq), ncclSuccess);
  assert_non_null(rreq);
  wait_ctrl_bytes(p.s, (int)sizeof(struct tcp_ctrl_hdr)); /* the clear-to-send is there, not read yet */
  t0 = ut_now();
  for (int i = 0; i < N; i++) {
    while (sreq[i] == NULL) {
      assert_int_equal(gdr_core_isend(p.s, sb[i], rs[i], 5, NULL, NULL, &sreq[i]), ncclSuccess);
      assert_true(ut_now() - t0 < 20.0);
    }
  }
  for (int i = 0; i < N; i++) assert_int_equal(wait_req(sreq[i]), rs[i]);
  while (!done) {
    assert_int_equal(gdr_core_test(rreq, &done, got, &n), ncclSuccess);
    assert_true(ut_now() - t0 < 30.0);
  }
  assert_int_equal(n, N);
  for (int i = 0; i < N; i++) {
    assert_int_equal(got[i], rs[i]);
    ut_fill(ex, rs[i], (unsigned)i + 300);
    assert_memory_equal(rb[i], ex, rs[i]);
  }
  pair_close(&p);
  assert_int_equal(ut_nwarn, 0);
  fini_plugin();
  eager_default();
}

/* A listener of TCP protocol version 3 (numbering by arrival, 24-byte headers): the connector refuses it at
 * connect with a WARN naming both versions, instead of mismatching messages later. */
static void test_refuses_version_3(void **state) {
  struct pair p;
  struct gdr_handle h;
  struct tcp_proto tp;
  void *s = NULL, *r = NULL;
  ncclResult_t res = ncclSuccess;
  char hb[NCCL_NET_HANDLE_MAXSIZE];
  double t0;
  (void)state;
  init_plugin();
  memset(&p, 0, sizeof(p));
  assert_int_equal(gdr_core_listen(NULL, 0, p.handle, &p.l), ncclSuccess);
  memcpy(&h, p.handle, sizeof(h));
  memcpy(&tp, h.tp_data, sizeof(tp));
  assert_int_equal(tp.version, TCP_PROTO_VERSION);
  tp.version = 3; /* what a plugin of the version before this one writes */
  memcpy(h.tp_data, &tp, sizeof(tp));
  memcpy(hb, &h, sizeof(hb));
  t0 = ut_now();
  while (res == ncclSuccess && s == NULL) {
    res = gdr_core_connect(NULL, 0, -1, hb, &s);
    if (r == NULL) assert_int_equal(gdr_core_accept(p.l, &r), ncclSuccess);
    assert_true(ut_now() - t0 < 20.0);
  }
  assert_int_equal(res, ncclInvalidUsage);
  assert_null(s);
  assert_true(ut_warned("speaks TCP protocol version 3, this plugin version 4"));
  assert_true(ut_warned("use the same plugin version on every rank"));
  if (r != NULL) assert_int_equal(gdr_core_close_recv(r), ncclSuccess);
  assert_int_equal(gdr_core_close_listen(p.l), ncclSuccess);
  fini_plugin();
}

/* RTS messages for buffers not posted yet are kept per tag: a newer one of a tag replaces an older one (that message
 * went another way), one not after the last of its tag is a broken peer (written straight onto the control stream
 * as such a sender would). */
static void test_rts_per_tag(void **state) {
  struct pair p;
  unsigned char buf[64];
  struct tcp_ctrl_hdr h[3];
  char wire[3 * sizeof(struct tcp_ctrl_hdr) + 8];
  (void)state;
  eager_on("32");
  init_plugin();
  pair_open(&p);
  struct tcp_comm *sc = tcomm_of(p.s);
  memset(h, 0, sizeof(h));
  h[0].type = TCP_MSG_RTS;
  h[0].aux = 3; /* tag 3, message 0, 100000 bytes: waits for its CTS */
  h[0].size = 100000;
  h[1] = h[0];
  h[1].seq = 1; /* tag 3, message 1: message 0 went another way */
  h[2].type = TCP_MSG_EAGER; /* tag 0, message 0: completes the receive below */
  h[2].size = 8;
  memcpy(wire, h, sizeof(h));
  memset(wire + sizeof(h), 9, 8);
  assert_int_equal(send(sc->ctrl_fd, wire, sizeof(wire), MSG_NOSIGNAL), (ssize_t)sizeof(wire));
  assert_int_equal(wait_req(post_recv(p.r, buf, sizeof(buf))), 8);
  assert_int_equal(tcomm_of(p.r)->nrts, 1); /* the newer of tag 3 */
  assert_int_equal(ut_nwarn, 0);
  assert_int_equal(send(sc->ctrl_fd, &h[1], sizeof(h[1]), MSG_NOSIGNAL), (ssize_t)sizeof(h[1])); /* again */
  void *req = post_recv(p.r, buf, sizeof(buf));
  int done = 0;
  ncclResult_t r = ncclSuccess;
  double t0 = ut_now();
  while (r == ncclSuccess && !done) {
    r = gdr_core_test(req, &done, NULL, NULL);
    assert_true(ut_now() - t0 < 10.0);
  }
  assert_int_equal(r, ncclRemoteError);
  assert_true(ut_warned("protocol error: an RTS not after the last one of its tag"));
  pair_close(&p);
  fini_plugin();
  eager_default();
}

/* Waits until the receiver's I/O threads have read at least `bytes` more than `from` off its data streams (a chunk
 * header and part of its payload: the thread that read them is mid-chunk, writing into the posted buffer). */
static void wait_moved(struct tcp_comm *rc, uint64_t from, uint64_t bytes) {
  double t0 = ut_now();
  while (atomic_load(&rc->moved) < from + bytes) {
    assert_true(ut_now() - t0 < 10.0);
    sched_yield();
  }
}

/* Writes a chunk header for buffer seq, [off, +len) of a message of total bytes, and `with` payload bytes. */
static void send_chunk(int fd, uint64_t seq, uint64_t off, uint32_t len, uint64_t total, size_t with) {
  static char wire[sizeof(struct tcp_chunk_hdr) + 65536];
  struct tcp_chunk_hdr h = {.magic = TCP_CHUNK_MAGIC, .len = len, .seq = seq, .off = off, .total = total};
  assert_true(with <= 65536);
  memcpy(wire, &h, sizeof(h));
  memset(wire + sizeof(h), 0x5c, with);
  assert_int_equal(send(fd, wire, sizeof(h) + with, MSG_NOSIGNAL), (ssize_t)(sizeof(h) + with));
}

/* A receive takes its message one way: inline on the control stream, or in chunks on the data streams, up to the
 * chunks' total. A hostile sender that sends one message both ways, or more chunk bytes than the message has, gets
 * a protocol error, whichever way comes first; before, the receive could complete while an I/O thread still wrote
 * into its buffer (which NCCL reuses at once). Each case holds the first way mid-payload:
 *   0: a chunk's header and half its payload read by an I/O thread, then the whole message inline;
 *   1: an inline header and half its payload read by test(), then the whole message as one chunk;
 *   2: the whole message as one chunk, then the same chunk again;
 *   3: half the message as a chunk, then a chunk that says the message has another size. */
static void test_message_both_ways(void **state) {
  enum { N = 65536 };
  static unsigned char buf[N], wire[sizeof(struct tcp_ctrl_hdr) + N];
  static const char *const want[] = {
      "protocol error: inline message for a buffer chunks fill",
      "is for a message that came on the control stream, or of another size",
      "is beyond the message's bytes",
      "is for a message that came on the control stream, or of another size",
  };
  (void)state;
  init_plugin();
  for (int v = 0; v < 4; v++) {
    struct pair p;
    pair_open(&p);
    struct tcp_comm *sc = tcomm_of(p.s), *rc = tcomm_of(p.r);
    uint64_t seq = rc->next_seq, moved0 = atomic_load(&rc->moved);
    struct tcp_ctrl_hdr h = {.type = TCP_MSG_INLINE, .aux = 0, .seq = 0, .size = N, .id = seq};
    void *req = post_recv(p.r, buf, N); /* 64 KiB: a clear-to-send goes out, either way may come */
    int done = 0;
    ncclResult_t r = ncclSuccess;
    memcpy(wire, &h, sizeof(h));
    memset(wire + sizeof(h), 0x3a, N);
    if (v == 0) {
      send_chunk(sc->fds[0], seq, 0, N, N, N / 2);
      wait_moved(rc, moved0, sizeof(struct tcp_chunk_hdr) + N / 2);
      assert_int_equal(send(sc->ctrl_fd, wire, sizeof(wire), MSG_NOSIGNAL), (ssize_t)sizeof(wire));
    } else if (v == 1) {
      double t0 = ut_now();
      assert_int_equal(send(sc->ctrl_fd, wire, sizeof(h) + N / 2, MSG_NOSIGNAL), (ssize_t)(sizeof(h) + N / 2));
      while (!rc->rx_in_payload) {
        assert_int_equal(gdr_core_test(req, &done, NULL, NULL), ncclSuccess);
        assert_int_equal(done, 0);
        assert_true(ut_now() - t0 < 10.0);
      }
      send_chunk(sc->fds[0], seq, 0, N, N, N);
    } else if (v == 2) {
      send_chunk(sc->fds[0], seq, 0, N, N, N);
      send_chunk(sc->fds[0], seq, 0, N, N, N);
    } else {
      send_chunk(sc->fds[0], seq, 0, N / 2, N, N / 2);
      send_chunk(sc->fds[0], seq, N / 2, N / 4, 3 * N / 4, N / 4);
    }
    if (v >= 2) { /* the first chunk alone completes the receive in 2: the second must have been refused first */
      double t0 = ut_now();
      while (!atomic_load(&rc->failed)) {
        assert_true(ut_now() - t0 < 10.0);
        sched_yield();
      }
    }
    double t0 = ut_now();
    while (r == ncclSuccess && !done) {
      r = gdr_core_test(req, &done, NULL, NULL);
      assert_true(ut_now() - t0 < 10.0);
    }
    assert_int_equal(r, ncclRemoteError);
    assert_true(ut_warned(want[v]));
    pair_close(&p);
  }
  fini_plugin();
}

int main(void) {
  setenv("GDRNET_SOCKET_IFNAME", "lo", 0); /* single-host: loopback (CTest sets it too) */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chunk_plan),
      cmocka_unit_test(test_resolve_streams),
      cmocka_unit_test(test_properties),
      cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_streams_threads_variants),
      cmocka_unit_test(test_inflight_32),
      cmocka_unit_test(test_send_larger_than_recv),
      cmocka_unit_test(test_eager_posted),
      cmocka_unit_test(test_expect_counts),
      cmocka_unit_test(test_eager_unposted),
      cmocka_unit_test(test_eager_posted_mid_payload),
      cmocka_unit_test(test_eager_credit_exhaustion),
      cmocka_unit_test(test_eager_mixed_order),
      cmocka_unit_test(test_eager_off),
      cmocka_unit_test(test_peer_closes),
      cmocka_unit_test(test_receiver_closes),
      cmocka_unit_test(test_close_after_send_delivers),
      cmocka_unit_test(test_reg_refuses_cuda),
      cmocka_unit_test(test_many_comms),
      cmocka_unit_test(test_no_fd_leak_or_stray_close),
      cmocka_unit_test(test_core_misuse),
      cmocka_unit_test(test_eager_out_of_window),
      cmocka_unit_test(test_cts_inline),
      cmocka_unit_test(test_match_tag_order),
      cmocka_unit_test(test_match_same_tag_group),
      cmocka_unit_test(test_refuses_version_3),
      cmocka_unit_test(test_rts_per_tag),
      cmocka_unit_test(test_message_both_ways),
      cmocka_unit_test_prestate(test_random_traffic, (void *)&rt_cfgs[0]),
      cmocka_unit_test_prestate(test_random_traffic, (void *)&rt_cfgs[1]),
      cmocka_unit_test_prestate(test_random_traffic, (void *)&rt_cfgs[2]),
      cmocka_unit_test(test_ipv6),
      cmocka_unit_test(test_loopback_stream),
  };
  /* UT_SHARD=K/N: only the tests whose index is K-1 modulo N (CTest runs unit_tcp as N shards in parallel:
   * under ThreadSanitizer the whole takes minutes) */
  enum { NT = sizeof(tests) / sizeof(tests[0]) };
  struct CMUnitTest sel[NT];
  size_t nsel = 0;
  unsigned k = 1, n = 1;
  const char *sh = getenv("UT_SHARD");
  if (sh != NULL && (sscanf(sh, "%u/%u", &k, &n) != 2 || n == 0 || k == 0 || k > n)) {
    fprintf(stderr, "UT_SHARD=%s: want K/N with 1 <= K <= N\n", sh);
    return 2;
  }
  const char *only = getenv("UT_ONLY"); /* UT_ONLY=substring: only the tests whose name holds it (by hand) */
  for (size_t i = 0; i < NT; i++)
    if (i % n == k - 1 && (only == NULL || strstr(tests[i].name, only) != NULL)) sel[nsel++] = tests[i];
  return _cmocka_run_group_tests("unit_tcp", sel, nsel, NULL, NULL);
}
