/* GDRNET_STATS_FILE: the Prometheus text (every metric has HELP/TYPE, the labels, the values of a registered
 * device's counters), the path expansion, the writer thread (a file at start, at a poke, at stop; written through
 * a temporary file and rename), and an unwritable path WARNed once naming the knob. */
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "stats.h"
#include "unit_common.h"

static char dir[256];

static int setup(void **state) {
  (void)state;
  gdr_log_init(ut_logger);
  snprintf(dir, sizeof(dir), "/tmp/gdrnet-unit-stats-%d", (int)getpid());
  (void)mkdir(dir, 0700);
  unsetenv("GDRNET_STATS_FILE");
  unsetenv("GDRNET_STATS_INTERVAL_S");
  gdr_params_reset();
  ut_warn_reset();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  gdr_stats_stop();
  gdr_params_reset();
  unsetenv("GDRNET_STATS_FILE");
  unsetenv("GDRNET_STATS_INTERVAL_S");
  return 0;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return NULL;
  char *b = calloc(1, 1 << 20);
  assert_non_null(b);
  size_t n = fread(b, 1, (1 << 20) - 1, f);
  b[n] = 0;
  fclose(f);
  return b;
}

/* The value of the line that starts with `prefix` (a metric and its labels), or -1. */
static double value_of(const char *text, const char *prefix) {
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, prefix, strlen(prefix)) == 0) return atof(p + strlen(prefix));
  return -1;
}

static void test_render(void **state) {
  (void)state;
  static struct gdr_dev_counters ctr;
  char lab[256], key[400];
  memset(&ctr, 0, sizeof(ctr));
  assert_int_equal(gdr_stats_register("rdma", "mlx5_7", 2, &ctr), 0);
  atomic_store(&ctr.faults, 5);
  atomic_store(&ctr.fallbacks, 2);
  atomic_store(&ctr.returns, 1);
  atomic_store(&ctr.tcp_ns, 1500000000ull);
  atomic_store(&ctr.on_tcp, 1);
  atomic_store(&ctr.lost, 1);
  atomic_fetch_add(&gdr_stats_tp[GDR_STATS_TP_RDMA].bytes_sent, 12345);
  char *t = gdr_stats_render();
  assert_non_null(t);
  snprintf(lab, sizeof(lab), "{pid=\"%d\",transport=\"rdma\",device=\"mlx5_7\",port=\"2\"} ", (int)getpid());
  const struct {
    const char *m;
    double v;
  } want[] = {{"gdrnet_faults_total", 5},     {"gdrnet_fallbacks_total", 2},    {"gdrnet_returns_total", 1},
              {"gdrnet_tcp_seconds_total", 1.5}, {"gdrnet_connections_on_tcp", 1}, {"gdrnet_device_lost", 1},
              {"gdrnet_recoveries_total", 0}};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    snprintf(key, sizeof(key), "%s%s", want[i].m, lab);
    assert_true(value_of(t, key) == want[i].v);
    snprintf(key, sizeof(key), "# TYPE %s ", want[i].m); /* every metric is typed */
    assert_non_null(strstr(t, key));
  }
  snprintf(key, sizeof(key), "gdrnet_sent_bytes_total{pid=\"%d\",transport=\"rdma\"} ", (int)getpid());
  assert_true(value_of(t, key) >= 12345);
  assert_non_null(strstr(t, "gdrnet_info{"));
  /* every non-comment line is "name{labels} value" */
  for (char *p = t; *p;) {
    char *nl = strchr(p, '\n');
    assert_non_null(nl);
    *nl = 0;
    if (*p != '#') {
      char *sp = strrchr(p, ' ');
      assert_true(sp != NULL && sp > p);
      assert_true(strchr(p, '{') != NULL && *(sp - 1) == '}');
    }
    *nl = '\n';
    p = nl + 1;
  }
  free(t);
  gdr_stats_unregister(&ctr);
  t = gdr_stats_render();
  assert_null(strstr(t, "mlx5_7"));
  free(t);
}

static void test_path(void **state) {
  (void)state;
  char out[512], want[512], host[256] = "";
  assert_int_equal(gdr_stats_path("/x/gdrnet-%p.prom", out, sizeof(out)), 0);
  snprintf(want, sizeof(want), "/x/gdrnet-%d.prom", (int)getpid());
  assert_string_equal(out, want);
  gethostname(host, sizeof(host) - 1);
  assert_int_equal(gdr_stats_path("%h-%p", out, sizeof(out)), 0);
  snprintf(want, sizeof(want), "%s-%d", host, (int)getpid());
  assert_string_equal(out, want);
  assert_int_equal(gdr_stats_path("/plain", out, sizeof(out)), 0);
  assert_string_equal(out, "/plain");
  assert_int_equal(gdr_stats_path("/a/long/path", out, 5), -1);
  assert_int_equal(gdr_stats_path("", out, sizeof(out)), -1);
}

static void test_writer(void **state) {
  (void)state;
  char pat[300], path[300];
  snprintf(pat, sizeof(pat), "%s/w-%%p.prom", dir);
  snprintf(path, sizeof(path), "%s/w-%d.prom", dir, (int)getpid());
  unlink(path);
  setenv("GDRNET_STATS_FILE", pat, 1);
  setenv("GDRNET_STATS_INTERVAL_S", "0", 1); /* at start, poke and stop only */
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_int_equal(gdr_stats_start(), ncclSuccess);
  /* the first file comes at once (bounded wait: the thread writes it) */
  char *t = NULL;
  for (int i = 0; i < 2000 && (t = slurp(path)) == NULL; i++) usleep(1000);
  assert_non_null(t);
  assert_non_null(strstr(t, "# TYPE gdrnet_connections_total counter"));
  free(t);
  /* a poke writes again: the counter moves */
  uint64_t before = atomic_load(&gdr_stats_tp[GDR_STATS_TP_TCP].conns);
  atomic_fetch_add(&gdr_stats_tp[GDR_STATS_TP_TCP].conns, 7);
  char key[128];
  snprintf(key, sizeof(key), "gdrnet_connections_total{pid=\"%d\",transport=\"tcp\"} ", (int)getpid());
  gdr_stats_poke();
  double v = -1;
  for (int i = 0; i < 2000; i++) {
    t = slurp(path);
    if (t) v = value_of(t, key);
    free(t);
    if (v == (double)(before + 7)) break;
    usleep(1000);
  }
  assert_true(v == (double)(before + 7));
  /* stop writes the last file synchronously */
  atomic_fetch_add(&gdr_stats_tp[GDR_STATS_TP_TCP].conns, 1);
  gdr_stats_stop();
  t = slurp(path);
  assert_non_null(t);
  assert_true(value_of(t, key) == (double)(before + 8));
  free(t);
  /* no temporary file left behind */
  char tmp[400];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  assert_int_equal(access(tmp, F_OK), -1);
  assert_int_equal(ut_nwarn, 0);
  unlink(path);
}

static void test_unwritable(void **state) {
  (void)state;
  setenv("GDRNET_STATS_FILE", "/nonexistent-dir-gdrnet/x.prom", 1);
  setenv("GDRNET_STATS_INTERVAL_S", "0", 1);
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_int_equal(gdr_stats_start(), ncclSuccess); /* the job runs on without the file */
  gdr_stats_poke();
  gdr_stats_stop();
  assert_int_equal(ut_nwarn, 1); /* once, whatever the number of attempts */
  assert_non_null(strstr(ut_warns, "GDRNET_STATS_FILE=/nonexistent-dir-gdrnet/x.prom"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_render, setup, teardown),
    cmocka_unit_test_setup_teardown(test_path, setup, teardown),
    cmocka_unit_test_setup_teardown(test_writer, setup, teardown),
    cmocka_unit_test_setup_teardown(test_unwritable, setup, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  (void)rmdir(dir); /* empty once every test removed its files; a failed test's files stay, with the directory */
  return rc;
}
