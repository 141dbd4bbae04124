/* The parameter table: parsing of every kind, every bad-value path, alias precedence, unknown-knob suggestions,
 * init failing on a bad knob, and the generated docs. */
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "param.h"
#include "unit_common.h"

extern char **environ;

/* Removes every GDRNET_ and aliased NCCL_ variable so each test starts clean. */
static void clean_env(void) {
  for (int i = 0; i < GDR_PARAM_COUNT; i++) {
    const struct gdr_param_info *p = gdr_param_info((enum gdr_param_id)i);
    unsetenv(p->name);
    if (p->alias) unsetenv(p->alias);
  }
  for (;;) {
    char name[256];
    int found = 0;
    for (char **e = environ; *e; e++) {
      if (strncmp(*e, "GDRNET_", 7) == 0 && strncmp(*e, "GDRNET_TEST_", 12) != 0) {
        size_t n = strcspn(*e, "=");
        if (n >= sizeof(name)) n = sizeof(name) - 1;
        memcpy(name, *e, n);
        name[n] = '\0';
        found = 1;
        break;
      }
    }
    if (!found) break;
    unsetenv(name);
  }
  gdr_params_reset();
  ut_warn_reset();
}

static int setup(void **state) {
  (void)state;
  gdr_log_init(ut_logger);
  clean_env();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  clean_env();
  setenv("GDRNET_SOCKET_IFNAME", "lo", 1);
  return 0;
}

static ncclResult_t parse(enum gdr_param_id id, const char *text, int64_t *v, char *why) {
  return gdr_param_parse(gdr_param_info(id), text, v, why, 256);
}

static void test_defaults_parse(void **state) {
  (void)state;
  for (int i = 0; i < GDR_PARAM_COUNT; i++) {
    const struct gdr_param_info *p = gdr_param_info((enum gdr_param_id)i);
    int64_t v;
    char why[256];
    assert_non_null(p->name);
    assert_int_equal(strncmp(p->name, "GDRNET_", 7), 0);
    assert_non_null(p->doc);
    assert_int_equal(gdr_param_parse(p, p->def, &v, why, sizeof(why)), ncclSuccess);
  }
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_int_equal(gdr_param_int(GDR_PARAM_TRANSPORT), GDR_TRANSPORT_AUTO);
  assert_string_equal(gdr_param_str(GDR_PARAM_TRANSPORT), "auto");
  assert_int_equal(gdr_param_int(GDR_PARAM_QPS_PER_CONN), 1);
  assert_int_equal(gdr_param_int(GDR_PARAM_IB_TIMEOUT), 20);
  assert_int_equal(gdr_param_int(GDR_PARAM_GDR), GDR_PARAM_AUTO);
  assert_int_equal(gdr_param_int(GDR_PARAM_TCP_MIN_CHUNK), 65536);
  assert_string_equal(gdr_param_str(GDR_PARAM_HCA), "");
  assert_int_equal(gdr_param_source(GDR_PARAM_HCA), GDR_PSRC_DEFAULT);
  assert_int_equal(ut_nwarn, 0);
  /* every knob docs/design.md section 2 requires exists */
  static const char *required[] = {
      "GDRNET_TRANSPORT",           "GDRNET_IBVERBS_LIB",      "GDRNET_HCA",          "GDRNET_QPS_PER_CONN",
      "GDRNET_SPLIT_DATA",          "GDRNET_RELAXED_ORDERING", "GDRNET_GDR",          "GDRNET_IB_TIMEOUT",
      "GDRNET_IB_RETRY_CNT",        "GDRNET_RNR_RETRY",        "GDRNET_FALLBACK",     "GDRNET_RECOVERY_ATTEMPTS",
      "GDRNET_RECOVERY_TIMEOUT_MS", "GDRNET_TCP_NSOCKS",       "GDRNET_TCP_NTHREADS", "GDRNET_SOCKET_IFNAME"};
  for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
    assert_int_not_equal(gdr_param_lookup(required[i]), GDR_PARAM_COUNT);
  assert_int_equal(gdr_param_lookup("GDRNET_NOPE"), GDR_PARAM_COUNT);
}

static void test_parse_int(void **state) {
  int64_t v = 0;
  char why[256];
  (void)state;
  assert_int_equal(parse(GDR_PARAM_QPS_PER_CONN, "4", &v, why), ncclSuccess);
  assert_int_equal(v, 4);
  assert_int_equal(parse(GDR_PARAM_QPS_PER_CONN, "  16 ", &v, why), ncclSuccess);
  assert_int_equal(v, 16);
  assert_int_equal(parse(GDR_PARAM_QPS_PER_CONN, "1", &v, why), ncclSuccess);
  const char *bad[] = {"0", "17", "-1", "abc", "4x", "", " ", "0x4", "4.5", "99999999999999999999999", "auto", "4K"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    why[0] = '\0';
    assert_int_equal(parse(GDR_PARAM_QPS_PER_CONN, bad[i], &v, why), ncclInvalidUsage);
    assert_non_null(strstr(why, "an integer in 1..16"));
  }
}

static void test_parse_autoint(void **state) {
  int64_t v = 0;
  char why[256];
  (void)state;
  assert_int_equal(parse(GDR_PARAM_GID_INDEX, "auto", &v, why), ncclSuccess);
  assert_int_equal(v, -1);
  assert_int_equal(parse(GDR_PARAM_GID_INDEX, "AUTO", &v, why), ncclSuccess);
  assert_int_equal(v, -1);
  assert_int_equal(parse(GDR_PARAM_GID_INDEX, "-1", &v, why), ncclSuccess); /* NCCL's "auto" for the GID index */
  assert_int_equal(v, -1);
  assert_int_equal(parse(GDR_PARAM_GID_INDEX, "3", &v, why), ncclSuccess);
  assert_int_equal(v, 3);
  assert_int_equal(parse(GDR_PARAM_GID_INDEX, "256", &v, why), ncclInvalidUsage);
  assert_non_null(strstr(why, "auto (or -1) or an integer in 0..255")); /* -1 is accepted: say so */
  assert_int_equal(parse(GDR_PARAM_GID_INDEX, "-2", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_RELAXED_ORDERING, "auto", &v, why), ncclSuccess);
  assert_int_equal(v, 2);
  assert_int_equal(parse(GDR_PARAM_RELAXED_ORDERING, "3", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_TCP_NSOCKS, "65", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_TCP_NSOCKS, "64", &v, why), ncclSuccess);
  assert_int_equal(parse(GDR_PARAM_GDR, "2", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_GDR, "1", &v, why), ncclSuccess);
  assert_int_equal(v, 1);
}

/* AUTOSIZE: auto, or a size with its suffixes in range; -1 is not a size */
static void test_parse_autosize(void **state) {
  static const struct {
    const char *text;
    int64_t v;
  } good[] = {
      {"auto", GDR_PARAM_AUTO}, {" Auto ", GDR_PARAM_AUTO}, {"128K", 128 << 10}, {"4096", 4096}, {"64MiB", 64 << 20}};
  int64_t v = 0;
  char why[256];
  (void)state;
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    assert_int_equal(parse(GDR_PARAM_TCP_HELP_BYTES, good[i].text, &v, why), ncclSuccess);
    assert_int_equal(v, good[i].v);
  }
  const char *bad[] = {"-1", "2K", "65M", "lots", "", "4.5K"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    why[0] = '\0';
    assert_int_equal(parse(GDR_PARAM_TCP_HELP_BYTES, bad[i], &v, why), ncclInvalidUsage);
    assert_non_null(strstr(why, "auto or a size in 4096..67108864 bytes (K, M, G suffixes allowed)"));
  }
}

static void test_parse_size(void **state) {
  int64_t v = 0;
  char why[256];
  (void)state;
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "64K", &v, why), ncclSuccess);
  assert_int_equal(v, 65536);
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "64k", &v, why), ncclSuccess);
  assert_int_equal(v, 65536);
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "64KiB", &v, why), ncclSuccess);
  assert_int_equal(v, 65536);
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "1MB", &v, why), ncclSuccess);
  assert_int_equal(v, 1 << 20);
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "8192", &v, why), ncclSuccess);
  assert_int_equal(v, 8192);
  assert_int_equal(parse(GDR_PARAM_TCP_MAX_CHUNK, "1G", &v, why), ncclInvalidUsage); /* > 256M */
  assert_non_null(strstr(why, "K, M, G"));
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "1K", &v, why), ncclInvalidUsage); /* < 4096 */
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "64X", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "64KBB", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_TCP_MIN_CHUNK, "K", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_TCP_INLINE, "0", &v, why), ncclSuccess);
  assert_int_equal(parse(GDR_PARAM_TCP_INLINE, "9999999999G", &v, why), ncclInvalidUsage); /* overflow */
}

static void test_parse_enum_and_str(void **state) {
  int64_t v = 0;
  char why[256];
  (void)state;
  assert_int_equal(parse(GDR_PARAM_TRANSPORT, "tcp", &v, why), ncclSuccess);
  assert_int_equal(v, GDR_TRANSPORT_TCP);
  assert_int_equal(parse(GDR_PARAM_TRANSPORT, "RDMA", &v, why), ncclSuccess);
  assert_int_equal(v, GDR_TRANSPORT_RDMA);
  assert_int_equal(parse(GDR_PARAM_TRANSPORT, "ib", &v, why), ncclInvalidUsage);
  assert_non_null(strstr(why, "one of auto, rdma, tcp"));
  assert_int_equal(parse(GDR_PARAM_TRANSPORT, "", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_IB_MTU, "4096", &v, why), ncclSuccess);
  assert_int_equal(v, 5); /* IBV_MTU_4096 */
  assert_int_equal(parse(GDR_PARAM_IB_MTU, "1500", &v, why), ncclInvalidUsage);
  assert_int_equal(parse(GDR_PARAM_SOCKET_FAMILY, "af_inet6", &v, why), ncclSuccess);
  assert_int_equal(v, GDR_SOCKET_FAMILY_INET6);
  assert_int_equal(parse(GDR_PARAM_HCA, "^=mlx5_0:1,mlx5_1", &v, why), ncclSuccess);
  {
    char longv[1024];
    memset(longv, 'a', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = '\0';
    assert_int_equal(parse(GDR_PARAM_HCA, longv, &v, why), ncclInvalidUsage);
  }
}

static void test_load_bad_values_fail(void **state) {
  static const char *cases[][3] = {
      {"GDRNET_QPS_PER_CONN", "0", "an integer in 1..16"},
      {"GDRNET_QPS_PER_CONN", "lots", "an integer in 1..16"},
      {"GDRNET_TRANSPORT", "ib", "one of auto, rdma, tcp"},
      {"GDRNET_GDR", "yes", "auto (or -1) or an integer in 0..1"},
      {"GDRNET_SPLIT_DATA", "2", "an integer in 0..1"},
      {"GDRNET_IB_TIMEOUT", "32", "an integer in 1..31"},
      {"GDRNET_TCP_INLINE", "2G", "a size in"},
      {"GDRNET_TCP_CTS_INLINE", "2M", "auto (or -1) or an integer in 0..1048576"},
      {"GDRNET_TCP_NSOCKS", "100", "auto (or -1) or an integer in 1..64"},
      {"GDRNET_TCP_HELP_BYTES", "1K", "auto or a size in 4096..67108864"},
      {"GDRNET_FALLBACK", "true", "an integer in 0..1"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    clean_env();
    setenv(cases[i][0], cases[i][1], 1);
    assert_int_equal(gdr_params_load(), ncclInvalidUsage);
    assert_true(ut_warned(cases[i][0]));
    assert_true(ut_warned(cases[i][1]));
    assert_true(ut_warned(cases[i][2]));
    /* cached: a second load answers the same without re-warning */
    int before = ut_nwarn;
    assert_int_equal(gdr_params_load(), ncclInvalidUsage);
    assert_int_equal(ut_nwarn, before);
  }
  /* two bad knobs: both named */
  clean_env();
  setenv("GDRNET_IB_SL", "16", 1);
  setenv("GDRNET_IB_TC", "-3", 1);
  assert_int_equal(gdr_params_load(), ncclInvalidUsage);
  assert_true(ut_warned("GDRNET_IB_SL"));
  assert_true(ut_warned("GDRNET_IB_TC"));
}

static void test_init_fails_on_bad_knob(void **state) {
  (void)state;
  unsetenv("NCCL_NET"); /* the init-failure WARN depends on it */
  setenv("GDRNET_SOCKET_IFNAME", "lo", 1);
  setenv("GDRNET_TCP_NTHREADS", "zero", 1);
  assert_int_equal(gdr_core_init(ut_logger), ncclInvalidUsage);
  assert_true(ut_warned("GDRNET_TCP_NTHREADS"));
  assert_true(ut_warned("plugin init fails"));
  unsetenv("GDRNET_TCP_NTHREADS"); /* fixed: init now works (the environment is read again) */
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  gdr_core_fini();
  setenv("GDRNET_SOCKET_IFNAME", "^=", 1); /* malformed interface list */
  assert_int_equal(gdr_core_init(ut_logger) == ncclSuccess, 0);
  gdr_core_fini();
  setenv("GDRNET_SOCKET_IFNAME", "=no_such_if0", 1); /* no device: init fails instead of 0 devices */
  ut_warn_reset();
  assert_int_equal(gdr_core_init(ut_logger) == ncclSuccess, 0);
  assert_true(ut_warned("no IP interface"));
  /* the WARN says what NCCL 2.28 does next: without NCCL_NET it falls back to IB/Socket, with NCCL_NET=GDR the
   * communicator's init fails (src/plugin/net.cc) */
  assert_true(ut_warned("NCCL_NET is unset: NCCL falls back to its own IB transport, else Socket"));
  assert_false(ut_warned("Failed to initialize any NET plugin\")"));
  gdr_core_fini();
  setenv("NCCL_NET", "gdr", 1);
  ut_warn_reset();
  assert_int_equal(gdr_core_init(ut_logger) == ncclSuccess, 0);
  assert_true(ut_warned("with NCCL_NET=gdr NCCL does not fall back: its communicator init fails (\"Failed to "
                        "initialize any NET plugin\")"));
  assert_false(ut_warned("falls back to its own"));
  gdr_core_fini();
  setenv("GDRNET_SOCKET_IFNAME", "lo", 1);
  setenv("GDRNET_TCP_NTHREADS", "zero", 1); /* a bad knob: the same words */
  ut_warn_reset();
  assert_int_equal(gdr_core_init(ut_logger), ncclInvalidUsage);
  assert_true(ut_warned("plugin init fails (with NCCL_NET=gdr NCCL does not fall back"));
  unsetenv("GDRNET_TCP_NTHREADS");
  unsetenv("NCCL_NET");
}

static void test_forced_rdma_unavailable(void **state) {
  (void)state;
  setenv("GDRNET_SOCKET_IFNAME", "lo", 1);
  setenv("GDRNET_TRANSPORT", "rdma", 1);
  setenv("GDRNET_IBVERBS_LIB", "/nonexistent/libibverbs.so.1", 1);
  assert_int_equal(gdr_core_init(ut_logger) == ncclSuccess, 0);
  assert_true(ut_warned("GDRNET_TRANSPORT=rdma"));
  gdr_core_fini();
  setenv("GDRNET_TRANSPORT", "tcp", 1);
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  assert_string_equal(gdr_core_transport()->name, "tcp");
  gdr_core_fini();
}

static void test_alias_precedence(void **state) {
  (void)state;
  setenv("NCCL_IB_QPS_PER_CONNECTION", "4", 1);
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_int_equal(gdr_param_int(GDR_PARAM_QPS_PER_CONN), 4);
  assert_int_equal(gdr_param_source(GDR_PARAM_QPS_PER_CONN), GDR_PSRC_ALIAS);

  gdr_params_reset();
  setenv("GDRNET_QPS_PER_CONN", "2", 1); /* ours wins */
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_int_equal(gdr_param_int(GDR_PARAM_QPS_PER_CONN), 2);
  assert_int_equal(gdr_param_source(GDR_PARAM_QPS_PER_CONN), GDR_PSRC_ENV);

  gdr_params_reset();
  setenv("GDRNET_QPS_PER_CONN", "", 1); /* empty = unset: the alias applies */
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_int_equal(gdr_param_int(GDR_PARAM_QPS_PER_CONN), 4);

  gdr_params_reset();
  ut_warn_reset();
  unsetenv("GDRNET_QPS_PER_CONN");
  setenv("NCCL_IB_QPS_PER_CONNECTION", "128", 1); /* fine for NCCL, not for us: warned, ignored */
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_int_equal(gdr_param_int(GDR_PARAM_QPS_PER_CONN), 1);
  assert_int_equal(gdr_param_source(GDR_PARAM_QPS_PER_CONN), GDR_PSRC_DEFAULT);
  assert_true(ut_warned("NCCL_IB_QPS_PER_CONNECTION"));
  assert_true(ut_warned("using the default"));

  gdr_params_reset();
  setenv("NCCL_SOCKET_IFNAME", "=eth0", 1);
  setenv("NCCL_IB_HCA", "^mlx5_2", 1);
  setenv("NCCL_IB_GID_INDEX", "-1", 1);
  setenv("NCCL_IB_TIMEOUT", "22", 1);
  assert_int_equal(gdr_params_load(), ncclSuccess);
  assert_string_equal(gdr_param_str(GDR_PARAM_SOCKET_IFNAME), "=eth0");
  assert_string_equal(gdr_param_str(GDR_PARAM_HCA), "^mlx5_2");
  assert_int_equal(gdr_param_int(GDR_PARAM_GID_INDEX), -1);
  assert_int_equal(gdr_param_int(GDR_PARAM_IB_TIMEOUT), 22);
}

static void test_unknown_knob_suggestion(void **state) {
  (void)state;
  assert_string_equal(gdr_param_suggest("GDRNET_TRANSPRT"), "GDRNET_TRANSPORT");
  assert_string_equal(gdr_param_suggest("GDRNET_QPS_PER_CONNECTION"), "GDRNET_QPS_PER_CONN");
  assert_string_equal(gdr_param_suggest("GDRNET_TCP_NSOCK"), "GDRNET_TCP_NSOCKS");
  assert_string_equal(gdr_param_suggest("gdrnet_hca"), "GDRNET_HCA");
  assert_null(gdr_param_suggest("GDRNET_COMPLETELY_DIFFERENT_THING"));
  /* every knob starts with GDRNET_: that shared prefix must not make a stranger look close */
  assert_null(gdr_param_suggest("GDRNET_FOO"));
  assert_null(gdr_param_suggest("GDRNET_X"));
  assert_string_equal(gdr_param_suggest("GDRNET_HAC"), "GDRNET_HCA"); /* two letters swapped */
  /* NCCL's spelling with our prefix: the knob that honours that NCCL name */
  assert_string_equal(gdr_param_suggest("GDRNET_IB_HCA"), "GDRNET_HCA");
  assert_string_equal(gdr_param_suggest("GDRNET_IB_GID_INDEX"), "GDRNET_GID_INDEX");
  assert_string_equal(gdr_param_suggest("GDRNET_IB_QPS_PER_CONNECTION"), "GDRNET_QPS_PER_CONN");
  assert_string_equal(gdr_param_suggest("GDRNET_SOCKET_NTHREADS"), "GDRNET_TCP_NTHREADS");
  /* equally close to two knobs: no guess */
  assert_null(gdr_param_suggest("GDRNET_TCP_M_CHUNK")); /* TCP_MIN_CHUNK or TCP_MAX_CHUNK */
  setenv("GDRNET_SOCKET_IFNAM", "eth0", 1);
  setenv("GDRNET_XYZZY_PLUGH_FROB_NICATE", "1", 1);
  setenv("GDRNET_TEST_PLUGIN", "/x.so", 1); /* tools' and tests' variables: not knobs, not warned */
  setenv("GDRNET_SKIP_PACKAGES", "1", 1);
  setenv("GDRNET_PLUGIN", "/y.so", 1);
  assert_int_equal(gdr_params_load(), ncclSuccess); /* unknown knobs warn, they do not fail */
  assert_true(ut_warned("unknown knob GDRNET_SOCKET_IFNAM ignored; did you mean GDRNET_SOCKET_IFNAME?"));
  assert_true(ut_warned("unknown knob GDRNET_XYZZY_PLUGH_FROB_NICATE ignored"));
  /* the reference named is one that exists: the installed doc, else (this source build) the repository's */
  char hint[4200];
  snprintf(hint, sizeof hint, "(knobs: %s)", gdr_param_config_doc());
  assert_true(ut_warned(hint));
  assert_int_equal(access(gdr_param_config_doc(), R_OK), 0);
  assert_false(ut_warned("GDRNET_TEST_PLUGIN"));
  assert_false(ut_warned("GDRNET_SKIP_PACKAGES"));
  assert_false(ut_warned("GDRNET_PLUGIN "));
  unsetenv("GDRNET_SKIP_PACKAGES");
  unsetenv("GDRNET_PLUGIN");
  unsetenv("GDRNET_SOCKET_IFNAM");
  unsetenv("GDRNET_XYZZY_PLUGH_FROB_NICATE");
  unsetenv("GDRNET_TEST_PLUGIN");
}

static void test_markdown(void **state) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  (void)state;
  assert_non_null(f);
  assert_int_equal(gdr_params_markdown(f), 0);
  fclose(f);
  for (int i = 0; i < GDR_PARAM_COUNT; i++) {
    const struct gdr_param_info *p = gdr_param_info((enum gdr_param_id)i);
    char cell[128];
    snprintf(cell, sizeof(cell), "| `%s` |", p->name);
    assert_non_null(strstr(buf, cell));
    if (p->alias) assert_non_null(strstr(buf, p->alias));
  }
  assert_non_null(strstr(buf, "one of auto, rdma, tcp"));
  assert_non_null(strstr(buf, "<!-- Generated from plugin/params.def"));
  free(buf);
}

/* The README's table: only the knobs named, in that order; a name that is no knob fails instead of vanishing. */
static void test_markdown_table_of(void **state) {
  static const char *const two[] = {"GDRNET_HCA", "GDRNET_TRANSPORT", NULL};
  static const char *const bad[] = {"GDRNET_TRANSPORT", "GDRNET_NO_SUCH_KNOB", NULL};
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  (void)state;
  assert_non_null(f);
  assert_int_equal(gdr_params_markdown_table_of(f, two), 0);
  fclose(f);
  const char *hca = strstr(buf, "| `GDRNET_HCA` |");
  const char *tp = strstr(buf, "| `GDRNET_TRANSPORT` |");
  assert_non_null(hca);
  assert_non_null(tp);
  assert_true(hca < tp);
  assert_null(strstr(buf, "| `GDRNET_FALLBACK` |"));
  int rows = 0;
  for (const char *c = buf; (c = strstr(c, "\n| `")) != NULL; c++) rows++;
  assert_int_equal(rows, 2);
  free(buf);
  buf = NULL;
  f = open_memstream(&buf, &len);
  assert_non_null(f);
  assert_int_equal(gdr_params_markdown_table_of(f, bad), -1);
  fclose(f);
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_defaults_parse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parse_int, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parse_autoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parse_autosize, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parse_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parse_enum_and_str, setup, teardown),
      cmocka_unit_test_setup_teardown(test_load_bad_values_fail, setup, teardown),
      cmocka_unit_test_setup_teardown(test_init_fails_on_bad_knob, setup, teardown),
      cmocka_unit_test_setup_teardown(test_forced_rdma_unavailable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_alias_precedence, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_knob_suggestion, setup, teardown),
      cmocka_unit_test_setup_teardown(test_markdown, setup, teardown),
      cmocka_unit_test_setup_teardown(test_markdown_table_of, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
