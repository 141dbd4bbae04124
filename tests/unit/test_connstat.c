/* Per-connection state and the stall detector (connstat.h): what the data path notes (in flight, the oldest request,
 * a refused isend, completions, the latency histogram and its quantiles), one stall WARN naming the peer, the
 * transport's description and the request, one "resumed" line, no second WARN within a minute, the closed
 * connections' summary; and a writer and a reader at once (the tsan stage runs it: label threads). The detector's
 * passes are called here with chosen times (GDRNET_STALL_WARN_MS=0 keeps its thread off). */
#include <pthread.h>

#include "connstat.h"
#include "log.h"
#include "param.h"
#include "stats.h"
#include "unit_common.h"

static int fake_describe(void *comm, struct gdr_conn_desc *out) {
  (void)comm;
  snprintf(out->peer, sizeof(out->peer), "10.9.8.7:4242");
  snprintf(out->path, sizeof(out->path), "fake0 port 1, QP 0x2a");
  out->state = GDR_CONN_RECOVERING;
  out->recoveries = 2;
  out->moves = 0;
  return 0;
}

static const struct gdr_transport fake_tp = {.name = "rdma", .describe = fake_describe};

static int fake_gin_describe(void *comm, struct gdr_conn_desc *out) {
  (void)comm;
  snprintf(out->peer, sizeof(out->peer), "10.9.8.6:4343");
  snprintf(out->path, sizeof(out->path), "fake0 port 1, QP 0x2b (GIN one-sided, rank 3)");
  out->peer_rank = 3;
  out->state = GDR_CONN_RDMA;
  return 0;
}

static const struct gdr_transport fake_gin_tp = {.name = "rdma-gin", .describe = fake_gin_describe};

static uint64_t g_moved; /* what fake_moving_tp reports as moved */
static uint64_t fake_moved(void *comm) {
  (void)comm;
  return g_moved;
}
static const struct gdr_transport fake_moving_tp = {.name = "tcp", .describe = fake_describe, .moved = fake_moved};

static int setup(void **state) {
  (void)state;
  gdr_log_init(ut_logger);
  setenv("GDRNET_STALL_WARN_MS", "0", 1);
  setenv("GDRNET_STATS_DIR", "/nonexistent", 1); /* something reads the state (no writer is started here) */
  gdr_params_reset();
  assert_int_equal(gdr_params_load(), ncclSuccess);
  ut_warn_reset();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  unsetenv("GDRNET_STALL_WARN_MS");
  unsetenv("GDRNET_STATS_DIR");
  gdr_params_reset();
  return 0;
}

/* Nobody would read it (no detector, no stats file): not kept at all. */
static void test_off(void **state) {
  (void)state;
  unsetenv("GDRNET_STATS_DIR");
  gdr_params_reset();
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_null(gdr_connstat_open(&fake_tp, NULL, 1, 0, 16));
  gdr_connstat_posted(NULL, 0, 1, 1); /* what the data path then calls: nothing happens */
  gdr_connstat_refused(NULL, 1, 1);
  gdr_connstat_done(NULL, 0, 1, 1);
  assert_int_equal(gdr_connstat_count(), 0);
}

static void test_quantile(void **state) {
  uint64_t h[GDR_CONNSTAT_HIST] = {0};
  (void)state;
  assert_true(gdr_connstat_quantile(h, 0.5) == 0);
  h[10] = 98; /* < 1024 ns */
  h[20] = 2;  /* < 1 ms */
  assert_true(gdr_connstat_quantile(h, 0.5) == 1024e-9);
  assert_true(gdr_connstat_quantile(h, 0.98) == 1024e-9);
  assert_true(gdr_connstat_quantile(h, 0.99) == (double)(1u << 20) / 1e9);
}

static struct gdr_conn_snap *find(struct gdr_conn_snap *v, int n, uint64_t id) {
  for (int i = 0; i < n; i++)
    if (v[i].id == id) return &v[i];
  return NULL;
}

static void test_bookkeeping_and_stall(void **state) {
  struct gdr_conn_snap v[8];
  (void)state;
  struct gdr_connstat *cs = gdr_connstat_open(&fake_tp, NULL, 1, 0, 16);
  assert_non_null(cs);
  assert_int_equal(gdr_connstat_count(), 1);
  gdr_connstat_posted(cs, 3, 1000, 7);
  gdr_connstat_done(cs, 3, 1000, 1);
  gdr_connstat_posted(cs, 5, 65536, 9); /* the oldest now */
  gdr_connstat_posted(cs, 6, 8, 1);
  gdr_connstat_refused(cs, 4096, 2); /* later than both: not the oldest */
  int n = gdr_connstat_snapshot(v, 8);
  assert_int_equal(n, 1);
  struct gdr_conn_snap *s = find(v, n, cs->id);
  assert_non_null(s);
  assert_int_equal(s->inflight, 2);
  assert_true(s->waiting);
  assert_int_equal(s->oldest_size, 65536);
  assert_int_equal(s->oldest_tag, 9);
  assert_false(s->oldest_refused);
  assert_int_equal(s->requests, 1);
  assert_int_equal(s->bytes, 1000);
  assert_true(s->p50_s > 0);
  assert_string_equal(s->desc.peer, "10.9.8.7:4242");
  assert_int_equal(s->desc.recoveries, 2);

  /* nothing for 2 s against a threshold of 1 s: one WARN naming the peer, the state, the path and the request */
  const uint64_t t = gdr_connstat_now_ns();
  assert_int_equal(gdr_connstat_check(t + 2000000000ull, 1000), 1);
  assert_int_equal(ut_nwarn, 1);
  assert_true(ut_warned("stall: send connection of this process"));
  assert_true(ut_warned("to 10.9.8.7:4242 over rdma, recovering (fake0 port 1, QP 0x2a)"));
  assert_true(ut_warned("oldest waiting: isend of 65536 bytes, tag 9"));
  assert_true(ut_warned("2 request(s) in flight"));
  assert_true(ut_warned("the connection is recovering"));
  assert_int_equal(gdr_connstat_check(t + 3000000000ull, 1000), 1); /* still stalled: no second line */
  assert_int_equal(ut_nwarn, 1);
  n = gdr_connstat_snapshot(v, 8);
  assert_true(find(v, n, cs->id)->stalled);

  /* a completion ends it: one "resumed" line */
  gdr_connstat_done(cs, 5, 65536, 1);
  assert_int_equal(gdr_connstat_check(gdr_connstat_now_ns(), 1000), 0);
  assert_int_equal(ut_nwarn, 2);
  assert_true(ut_warned("stall: send connection to 10.9.8.7:4242 (rdma) resumed after"));

  /* stalled again at once: counted, not WARNed again within a minute */
  const uint64_t t2 = gdr_connstat_now_ns();
  assert_int_equal(gdr_connstat_check(t2 + 2000000000ull, 1000), 1);
  assert_int_equal(ut_nwarn, 2);
  n = gdr_connstat_snapshot(v, 8);
  assert_int_equal(find(v, n, cs->id)->stalls, 2);
  gdr_connstat_done(cs, 6, 8, 1);
  assert_int_equal(gdr_connstat_check(gdr_connstat_now_ns(), 1000), 0);
  assert_int_equal(ut_nwarn, 2); /* no "resumed" for a stall that was not WARNed */

  /* the refused isend alone is a waiting request */
  n = gdr_connstat_snapshot(v, 8);
  s = find(v, n, cs->id);
  assert_true(s->waiting && s->oldest_refused);
  assert_int_equal(s->oldest_size, 4096);
  gdr_connstat_posted(cs, 1, 4096, 2); /* accepted: no longer refused */
  n = gdr_connstat_snapshot(v, 8);
  assert_false(find(v, n, cs->id)->oldest_refused);
  gdr_connstat_done(cs, 1, 0, 0); /* failed: no request counted, no bytes */
  n = gdr_connstat_snapshot(v, 8);
  s = find(v, n, cs->id);
  assert_false(s->waiting);
  assert_int_equal(s->requests, 3);

  /* the stats file's per-connection series */
  gdr_connstat_posted(cs, 2, 777, 3);
  char *text = gdr_stats_render();
  assert_non_null(text);
  assert_non_null(strstr(text, "# TYPE gdrnet_conn_oldest_request_seconds gauge\n"));
  assert_non_null(strstr(
      text, ",dir=\"send\",peer=\"10.9.8.7:4242\",peer_rank=\"\",transport=\"rdma\",dev=\"0\",state=\"recovering\","
            "path=\"fake0 port 1, QP 0x2a\"} 1\n"));
  assert_non_null(strstr(text, "gdrnet_conn_oldest_request_bytes{"));
  assert_non_null(strstr(text, ",transport=\"rdma\"} 777\n"));
  assert_non_null(strstr(text, "gdrnet_conn_recoveries_total{"));
  assert_non_null(strstr(text, "# TYPE gdrnet_conn_latency_seconds histogram\n"));
  assert_non_null(strstr(text, ",le=\"+Inf\"} 3\n"));
  free(text);
  gdr_connstat_done(cs, 2, 777, 1);

  const uint64_t id = cs->id;
  gdr_connstat_close(cs);
  assert_int_equal(gdr_connstat_count(), 0);
  n = gdr_connstat_closed(v, 8);
  assert_true(n >= 1);
  assert_int_equal(v[n - 1].id, id);
  assert_int_equal(v[n - 1].requests, 4);
  assert_int_equal(v[n - 1].bytes, 1000 + 65536 + 8 + 777);
}

/* A WARNed stall whose connection completes its requests and closes before the detector looks again: close says
 * it resumed (as the detector would have), not that it closed while stalled. Without a completion, close says only
 * the latter (an INFO line: no second WARN). */
static void test_close_after_resume(void **state) {
  (void)state;
  for (int resumed = 0; resumed < 2; resumed++) {
    ut_warn_reset();
    struct gdr_connstat *cs = gdr_connstat_open(&fake_tp, NULL, 1, 0, 16);
    assert_non_null(cs);
    gdr_connstat_posted(cs, 4, 8192, 1);
    assert_int_equal(gdr_connstat_check(gdr_connstat_now_ns() + 2000000000ull, 1000), 1);
    assert_int_equal(ut_nwarn, 1);
    if (resumed) gdr_connstat_done(cs, 4, 8192, 1);
    gdr_connstat_close(cs);
    assert_int_equal(ut_nwarn, resumed ? 2 : 1);
    assert_int_equal(ut_warned("stall: send connection to 10.9.8.7:4242 (rdma) resumed after"), resumed);
  }
}

/* The data path and a reader at once: every slot's (t0, size, tag) read back consistent. */
static _Atomic int g_stop;
static void *writer(void *arg) {
  struct gdr_connstat *cs = arg;
  for (unsigned i = 0; !atomic_load(&g_stop); i++) {
    int idx = (int)(i % 32);
    gdr_connstat_posted(cs, idx, 1000 + (size_t)idx, idx);
    if (i >= 16) gdr_connstat_done(cs, (int)((i - 16) % 32), 10, 1);
    if (i % 7 == 0) gdr_connstat_refused(cs, 1000 + (size_t)idx, idx);
  }
  return NULL;
}

/* A one-sided peer's record (gdr_connstat_open_fifo): a count in flight and the oldest operation in one slot, the
 * next oldest taking its place when it leaves; a stall WARN names the one-sided peer, its rank and the operation. */
static void test_onesided(void **state) {
  struct gdr_conn_snap v[8];
  (void)state;
  struct gdr_connstat *cs = gdr_connstat_open_fifo(&fake_gin_tp, NULL, 0);
  assert_non_null(cs);
  const uint64_t t0 = gdr_connstat_now_ns();
  gdr_connstat_os_issued(cs, t0, 4096, GDR_CS_OP_PUT | GDR_CS_OP_SIGNAL);
  gdr_connstat_os_issued(cs, t0 + 10, 8, GDR_CS_OP_FLUSH); /* not the oldest: slot 0 keeps the put */
  gdr_connstat_os_issued(cs, t0 + 20, 512, GDR_CS_OP_GET);
  int n = gdr_connstat_snapshot(v, 8);
  struct gdr_conn_snap *s = find(v, n, cs->id);
  assert_non_null(s);
  assert_true(s->onesided);
  assert_string_equal(s->transport, "rdma-gin");
  assert_int_equal(s->inflight, 3);
  assert_int_equal(s->oldest_size, 4096);
  assert_int_equal(s->oldest_tag, GDR_CS_OP_PUT | GDR_CS_OP_SIGNAL);
  assert_int_equal(s->desc.peer_rank, 3);
  assert_string_equal(s->desc.peer, "10.9.8.6:4343");
  /* the put leaves (done): the flush is the oldest */
  gdr_connstat_os_left(cs, t0, 4096, 1, t0 + 10, 8, GDR_CS_OP_FLUSH);
  n = gdr_connstat_snapshot(v, 8);
  s = find(v, n, cs->id);
  assert_int_equal(s->inflight, 2);
  assert_int_equal(s->oldest_tag, GDR_CS_OP_FLUSH);
  assert_int_equal(s->requests, 1);
  assert_int_equal(s->bytes, 4096);
  /* nothing more for 2 s: one WARN naming the one-sided peer, its rank and the flush */
  assert_int_equal(gdr_connstat_check(gdr_connstat_now_ns() + 2000000000ull, 1000), 1);
  assert_int_equal(ut_nwarn, 1);
  assert_true(ut_warned("stall: one-sided connection of this process"));
  assert_true(ut_warned("to peer rank 3 at 10.9.8.6:4343 over rdma-gin, rdma (fake0 port 1, QP 0x2b"));
  assert_true(ut_warned("oldest waiting: flush of 8 bytes, for"));
  assert_true(ut_warned("2 request(s) in flight"));
  assert_true(ut_warned("this side (initiator) has no completion of its one-sided operation"));
  gdr_connstat_os_left(cs, t0 + 10, 8, 1, t0 + 20, 512, GDR_CS_OP_GET);
  gdr_connstat_os_left(cs, t0 + 20, 512, 1, 0, 0, 0);
  assert_int_equal(gdr_connstat_check(gdr_connstat_now_ns(), 1000), 0);
  assert_true(ut_warned("stall: one-sided connection to peer rank 3 at 10.9.8.6:4343 (rdma-gin) resumed after"));
  n = gdr_connstat_snapshot(v, 8);
  s = find(v, n, cs->id);
  assert_int_equal(s->inflight, 0);
  assert_false(s->waiting);
  assert_int_equal(s->requests, 3);
  assert_int_equal(s->bytes, 4096 + 8 + 512);
  /* its peer left: everything forgotten */
  gdr_connstat_os_issued(cs, gdr_connstat_now_ns(), 64, GDR_CS_OP_PUT);
  gdr_connstat_os_clear(cs);
  n = gdr_connstat_snapshot(v, 8);
  assert_int_equal(find(v, n, cs->id)->inflight, 0);
  assert_false(find(v, n, cs->id)->waiting);
  gdr_connstat_close(cs);
  assert_int_equal(gdr_connstat_count(), 0);
}

/* The data path's clock (the TSC scaled where the kernel's clocksource is the TSC, else clock_gettime) agrees with
 * CLOCK_MONOTONIC and never goes back. */
static void test_clock(void **state) {
  (void)state;
  struct gdr_connstat *cs = gdr_connstat_open(&fake_tp, NULL, 1, 0, 1); /* calibrates, once per process */
  assert_non_null(cs);
  uint64_t prev = 0;
  for (int i = 0; i < 1000; i++) {
    const uint64_t a = gdr_connstat_clock_ns(), t = gdr_connstat_now_ns(), b = gdr_connstat_clock_ns();
    assert_true(t + 5000000ull >= a && t <= b + 5000000ull); /* within 5 ms: the scale's error, not a timing */
    assert_true(t >= prev);
    prev = t;
  }
  print_message("data path clock: %s\n", gdr_connstat_clock_is_tsc() ? "TSC" : "clock_gettime");
  gdr_connstat_close(cs);
}

/* A long message whose bytes keep moving is not a stall (the transport counts them as they go); once they stop, the
 * WARN comes one threshold after the last movement the detector saw, and movement again is a "resumed". */
static void test_bytes_moving(void **state) {
  (void)state;
  struct gdr_connstat *cs = gdr_connstat_open(&fake_moving_tp, NULL, 1, 0, 16);
  assert_non_null(cs);
  g_moved = 0;
  const uint64_t t = gdr_connstat_now_ns();
  gdr_connstat_posted(cs, 0, 1ull << 31, 1);
  for (int s = 1; s <= 10; s++) { /* 10 s of one 2 GiB isend, bytes moving at every look */
    g_moved += 100u << 20;
    assert_int_equal(gdr_connstat_check(t + (uint64_t)s * 1000000000ull, 1000), 0);
  }
  assert_int_equal(ut_nwarn, 0);
  /* the bytes stop: nothing at 10.5 s, a stall at 11.5 s (1 s after the last movement seen, at 10 s) */
  assert_int_equal(gdr_connstat_check(t + 10500000000ull, 1000), 0);
  assert_int_equal(gdr_connstat_check(t + 11500000000ull, 1000), 1);
  assert_int_equal(ut_nwarn, 1);
  assert_true(ut_warned("oldest waiting: isend of 2147483648 bytes"));
  g_moved += 4096; /* moving again: resumed, without a completion */
  assert_int_equal(gdr_connstat_check(t + 12000000000ull, 1000), 0);
  assert_int_equal(ut_nwarn, 2);
  assert_true(ut_warned("resumed after"));
  gdr_connstat_done(cs, 0, 1ull << 31, 1);
  gdr_connstat_close(cs);
}

/* A comm whose receives stand posted (GIN's message path): in flight, never a stall. */
static void test_standing(void **state) {
  struct gdr_conn_snap v[8];
  (void)state;
  struct gdr_connstat *cs = gdr_connstat_open(&fake_tp, NULL, 0, 0, 4);
  assert_non_null(cs);
  atomic_store(&cs->standing, 1);
  gdr_connstat_posted(cs, 0, 328, 0);
  assert_int_equal(gdr_connstat_check(gdr_connstat_now_ns() + 10000000000ull, 1000), 0);
  assert_int_equal(ut_nwarn, 0);
  int n = gdr_connstat_snapshot(v, 8);
  assert_int_equal(find(v, n, cs->id)->inflight, 1);
  assert_false(find(v, n, cs->id)->waiting);
  gdr_connstat_close(cs);
}

static void test_concurrent(void **state) {
  pthread_t th;
  struct gdr_conn_snap v[4];
  (void)state;
  struct gdr_connstat *cs = gdr_connstat_open(&fake_tp, NULL, 0, 0, 32);
  assert_non_null(cs);
  atomic_store(&g_stop, 0);
  assert_int_equal(pthread_create(&th, NULL, writer, cs), 0);
  for (int k = 0; k < 2000; k++) {
    int n = gdr_connstat_snapshot(v, 4);
    struct gdr_conn_snap *s = find(v, n, cs->id);
    assert_non_null(s);
    if (s->waiting) assert_int_equal(s->oldest_size, 1000 + (uint64_t)s->oldest_tag);
    (void)gdr_connstat_check(gdr_connstat_now_ns(), 3600000);
  }
  atomic_store(&g_stop, 1);
  assert_int_equal(pthread_join(th, NULL), 0);
  gdr_connstat_close(cs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_off, setup, teardown),
      cmocka_unit_test_setup_teardown(test_quantile, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bookkeeping_and_stall, setup, teardown),
      cmocka_unit_test_setup_teardown(test_onesided, setup, teardown),
      cmocka_unit_test_setup_teardown(test_standing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_clock, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bytes_moving, setup, teardown),
      cmocka_unit_test_setup_teardown(test_close_after_resume, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
