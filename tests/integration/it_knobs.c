/* Bad knob values: init must fail and the logger output must name the knob. Each case runs in a fresh
 * process (setenv, dlopen, init with a capturing logger, dlclose). Positive controls: valid values
 * load; a bad value of an NCCL_IB_* alias is only WARNed (it was meant for NCCL's own transport);
 * an unknown GDRNET_ variable draws a WARN naming it and the closest knob.
 *
 * Selections that select nothing: an interface filter (GDRNET_SOCKET_IFNAME / NCCL_SOCKET_IFNAME) matching no
 * interface, and (over the emulator) GDRNET_HCA / NCCL_IB_HCA matching no port, must WARN with the value and what
 * exists; NCCL_IB_DISABLE=1 means no RDMA (auto: TCP; GDRNET_TRANSPORT=rdma: init fails saying why). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "it.h"

typedef struct {
  const char *knob, *value;
  int must_fail;       /* 1: init fails; 0: init succeeds */
  const char *expect;  /* a name the log must contain as a whole word (NULL: nothing required) */
  const char *expect2; /* another one (NULL: none) */
  const char *sub[3];  /* texts the log must contain (NULL-terminated) */
  const char *env2;    /* another variable NAME=VALUE for the case (NULL: none) */
  const char *only;    /* run only under this GDRNET_TRANSPORT (the test's variant), NULL: always */
} knob_case_t;

static const knob_case_t k_cases[] = {
    {.knob = "GDRNET_TRANSPORT", .value = "bogus", .must_fail = 1, .expect = "GDRNET_TRANSPORT"},
    {.knob = "GDRNET_QPS_PER_CONN", .value = "99", .must_fail = 1, .expect = "GDRNET_QPS_PER_CONN"},
    {.knob = "GDRNET_QPS_PER_CONN", .value = "0", .must_fail = 1, .expect = "GDRNET_QPS_PER_CONN"},
    {.knob = "GDRNET_QPS_PER_CONN", .value = "abc", .must_fail = 1, .expect = "GDRNET_QPS_PER_CONN"},
    {.knob = "GDRNET_QPS_PER_CONN", .value = "4x", .must_fail = 1, .expect = "GDRNET_QPS_PER_CONN"},
    {.knob = "GDRNET_SPLIT_DATA", .value = "2", .must_fail = 1, .expect = "GDRNET_SPLIT_DATA"},
    {.knob = "GDRNET_RELAXED_ORDERING", .value = "7", .must_fail = 1, .expect = "GDRNET_RELAXED_ORDERING"},
    {.knob = "GDRNET_GDR", .value = "maybe", .must_fail = 1, .expect = "GDRNET_GDR"},
    {.knob = "GDRNET_FALLBACK", .value = "2", .must_fail = 1, .expect = "GDRNET_FALLBACK"},
    {.knob = "GDRNET_IB_TIMEOUT", .value = "99", .must_fail = 1, .expect = "GDRNET_IB_TIMEOUT"},
    {.knob = "GDRNET_IB_RETRY_CNT", .value = "8", .must_fail = 1, .expect = "GDRNET_IB_RETRY_CNT"},
    {.knob = "GDRNET_RNR_RETRY", .value = "-1", .must_fail = 1, .expect = "GDRNET_RNR_RETRY"},
    {.knob = "GDRNET_RECOVERY_ATTEMPTS", .value = "-5", .must_fail = 1, .expect = "GDRNET_RECOVERY_ATTEMPTS"},
    {.knob = "GDRNET_TCP_NSOCKS", .value = "0", .must_fail = 1, .expect = "GDRNET_TCP_NSOCKS"},
    {.knob = "GDRNET_TCP_NTHREADS", .value = "lots", .must_fail = 1, .expect = "GDRNET_TCP_NTHREADS"},
    /* positive controls */
    {.knob = "GDRNET_QPS_PER_CONN", .value = "16"},
    {.knob = "GDRNET_SPLIT_DATA", .value = "1"},
    {.knob = "GDRNET_TCP_NSOCKS", .value = "auto"},
    {.knob = "NCCL_IB_QPS_PER_CONNECTION", .value = "99", .expect = "NCCL_IB_QPS_PER_CONNECTION"},
    /* an unknown GDRNET_ variable: a WARN naming it and the closest known knob; init goes on */
    {.knob = "GDRNET_QPS_PER_CONNECTION",
     .value = "4",
     .expect = "GDRNET_QPS_PER_CONNECTION",
     .expect2 = "GDRNET_QPS_PER_CONN"},
    {.knob = "GDRNET_FOO", .value = "1", .expect = "GDRNET_FOO", .sub = {"unknown knob GDRNET_FOO ignored (knobs: /"}},
    /* an interface filter that selects nothing: the value and the interfaces that exist */
    {.knob = "GDRNET_SOCKET_IFNAME",
     .value = "nosuchif0",
     .must_fail = 1,
     .expect = "GDRNET_SOCKET_IFNAME",
     .sub = {"GDRNET_SOCKET_IFNAME=\"nosuchif0\" selects no usable interface", "the interfaces here: ", "lo (IPv4"}},
    {.knob = "NCCL_SOCKET_IFNAME",
     .value = "=nosuchif0",
     .must_fail = 1,
     .expect = "NCCL_SOCKET_IFNAME",
     .sub = {"NCCL_SOCKET_IFNAME=\"=nosuchif0\" selects no usable interface", "lo (IPv4"}},
    /* NCCL_IB_DISABLE=1: no RDMA */
    {.knob = "NCCL_IB_DISABLE",
     .value = "1",
     .sub = {"using the tcp transport", "NCCL_IB_DISABLE=1"},
     .env2 = "GDRNET_TRANSPORT=auto"},
    {.knob = "NCCL_IB_DISABLE",
     .value = "1",
     .must_fail = 1,
     .sub = {"GDRNET_TRANSPORT=rdma", "NCCL_IB_DISABLE=1 turns the RDMA transport off"},
     .only = "rdma"},
    {.knob = "GDRNET_IB_DISABLE", .value = "2", .must_fail = 1, .expect = "GDRNET_IB_DISABLE"},
    /* GDRNET_HCA / NCCL_IB_HCA selecting no port of the emulator's (vemu0:roce, vemu1:ib) */
    {.knob = "GDRNET_HCA",
     .value = "mlx5",
     .sub = {"GDRNET_HCA=\"mlx5\" selects none of the active RDMA ports; the ports here: vemu0:1 (ACTIVE), vemu1:1 "
             "(ACTIVE)",
             "using the tcp transport"},
     .env2 = "GDRNET_TRANSPORT=auto",
     .only = "rdma"},
    {.knob = "NCCL_IB_HCA",
     .value = "^vemu",
     .must_fail = 1,
     .sub = {"NCCL_IB_HCA=\"^vemu\" selects none of the active RDMA ports"},
     .only = "rdma"},
    {.knob = "GDRNET_HCA",
     .value = "vemu0,mlx5_0:1",
     .sub = {"GDRNET_HCA=\"vemu0,mlx5_0:1\": \"mlx5_0:1\" names no RDMA port here", "using the rdma transport"},
     .only = "rdma"},
};
#define NCASES (int)(sizeof k_cases / sizeof k_cases[0])

/* name appears in log as a whole word (not as the prefix of a longer name) */
static const char *find_word(const char *log, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(log, name); p != NULL; p = strstr(p + 1, name)) {
    char c = p[n];
    int ident = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    int lead = p > log && ((p[-1] >= 'A' && p[-1] <= 'Z') || p[-1] == '_');
    if (!ident && !lead) return p;
  }
  return NULL;
}

static int case_main(int fd, void *arg) {
  (void)fd;
  const knob_case_t *k = arg;
  /* the interface filters of the caller's shell (GDRNET_SOCKET_IFNAME=lo, as the unit tests set it) would override
   * or hide a case's own: each case selects interfaces only by what it sets */
  IT_CHECK(unsetenv("GDRNET_SOCKET_IFNAME") == 0 && unsetenv("NCCL_SOCKET_IFNAME") == 0, "unsetenv");
  IT_CHECK(setenv(k->knob, k->value, 1) == 0, "setenv");
  if (k->env2 != NULL) IT_CHECK(putenv((char *)k->env2) == 0, "putenv");
  it_step("init with %s=%s", k->knob, k->value);
  gn_plugin_t p;
  char err[1024];
  IT_CHECK(gn_plugin_open(&p, it_plugin_path(), err, sizeof err) == 0, "%s", err);
  gn_log_capture(1);
  gn_log_set_level(NCCL_LOG_NONE); /* captured, not printed */
  ncclResult_t r = p.net->init(gn_logger);
  char *log = gn_log_captured();
  gn_log_set_level(-1);
  int ndev = 0;
  if (r == ncclSuccess) IT_OK(p.net->devices(&ndev));
  if (k->must_fail) {
    IT_CHECK(r != ncclSuccess, "%s=\"%s\": init succeeded (%d devices); it must fail. Log:\n%s", k->knob, k->value,
             ndev, log);
  } else {
    IT_CHECK(r == ncclSuccess, "%s=\"%s\": init returned %s; it must work. Log:\n%s", k->knob, k->value,
             gn_result_str(r), log);
    IT_CHECK(ndev >= 1, "%s=%s: %d devices", k->knob, k->value, ndev);
  }
  if (k->expect != NULL)
    IT_CHECK(find_word(log, k->expect) != NULL, "%s=\"%s\": the log does not name %s:\n%s", k->knob, k->value,
             k->expect, log);
  if (k->expect2 != NULL)
    IT_CHECK(find_word(log, k->expect2) != NULL, "%s=\"%s\": the log does not name %s:\n%s", k->knob, k->value,
             k->expect2, log);
  for (int i = 0; i < 3 && k->sub[i] != NULL; i++)
    IT_CHECK(strstr(log, k->sub[i]) != NULL, "%s=\"%s\": the log does not say \"%s\":\n%s", k->knob, k->value,
             k->sub[i], log);
  /* the first line naming the knob, for the record */
  const char *at = k->expect ? find_word(log, k->expect) : NULL;
  if (at != NULL) {
    const char *b = at, *e = strchr(at, '\n');
    while (b > log && b[-1] != '\n') b--;
    it_log("%s=\"%s\" -> %s: %.*s", k->knob, k->value, gn_result_str(r), (int)(e ? e - b : (long)strlen(b)), b);
  } else {
    it_log("%s=\"%s\" -> %s", k->knob, k->value, gn_result_str(r));
  }
  free(log);
  IT_CHECK(gn_plugin_close(&p) == 0, "dlclose");
  return 0;
}

int main(void) {
  it_init("knobs", 100);
  int failures = 0;
  const char *tp = getenv("GDRNET_TRANSPORT");
  for (int i = 0; i < NCASES; i++) {
    it_child_t c;
    if (k_cases[i].only != NULL && (tp == NULL || strcmp(tp, k_cases[i].only) != 0)) continue;
    it_fork(&c, case_main, (void *)&k_cases[i]);
    int st = it_reap(&c, 30);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) failures++;
  }
  IT_CHECK(failures == 0, "%d of %d knob cases failed (FAIL lines above)", failures, NCASES);
  it_log("PASS");
  return 0;
}
