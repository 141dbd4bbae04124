/* Unload safety: NCCL >= 2.28 dlcloses the plugin after its last communicator and may load it again. Load the
 * built .so exactly as NCCL does (RTLD_NOW | RTLD_LOCAL), run connections with helper threads, close them,
 * dlclose: every thread must be gone and the library really unmapped; then again, several times. A dlclose with
 * connections still open (an abort path that skipped their close) leaves the library loaded under their threads. */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "unit_common.h"

#ifndef GDRNET_PLUGIN_PATH
#error "GDRNET_PLUGIN_PATH must name build/lib/libnccl-net-gdr.so"
#endif

static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static const char *plugin_path(void) {
  const char *p = getenv("GDRNET_TEST_PLUGIN");
  return p && *p ? p : GDRNET_PLUGIN_PATH;
}

/* Loads the plugin, connects a pair and moves one message of 8 MB over it (both ends in this process); *sp, *rp:
 * the pair, left open. */
static void *open_and_move(int cycle, const ncclNet_v8_t **netp, void **sp, void **rp) {
  void *lib = dlopen(plugin_path(), RTLD_NOW | RTLD_LOCAL);
  const ncclNet_v8_t *net;
  int ndev = 0;
  char handle[NCCL_NET_HANDLE_MAXSIZE], copy[NCCL_NET_HANDLE_MAXSIZE];
  void *l = NULL, *s = NULL, *r = NULL;
  size_t size = 8 << 20;
  char *sb = malloc(size), *rb = malloc(size);
  double t0;

  assert_non_null(lib);
  net = dlsym(lib, "ncclNetPlugin_v8");
  assert_non_null(net);
  assert_string_equal(net->name, "GDR");
  assert_null(net->getDeviceMr);
  assert_null(net->irecvConsumed);
  assert_int_equal(net->init(ut_logger), ncclSuccess);
  assert_int_equal(net->devices(&ndev), ncclSuccess);
  assert_true(ndev >= 1);
  assert_int_equal(net->listen(0, handle, &l), ncclSuccess);
  memcpy(copy, handle, sizeof(copy));
  t0 = ut_now();
  while (s == NULL || r == NULL) {
    if (s == NULL) assert_int_equal(net->connect(0, copy, &s, NULL), ncclSuccess);
    if (r == NULL) assert_int_equal(net->accept(l, &r, NULL), ncclSuccess);
    assert_true(ut_now() - t0 < 10.0);
  }
  assert_int_equal(net->closeListen(l), ncclSuccess);
  {
    void *smr, *rmr, *sreq = NULL, *rreq = NULL;
    void *data[1] = {rb};
    int sizes[1] = {(int)size}, tags[1] = {0}, sd = 0, rd = 0, got[1] = {0};
    memset(sb, cycle, size);
    assert_int_equal(net->regMr(s, sb, size, NCCL_PTR_HOST, &smr), ncclSuccess);
    assert_int_equal(net->regMr(r, rb, size, NCCL_PTR_HOST, &rmr), ncclSuccess);
    void *mh[1] = {rmr};
    assert_int_equal(net->irecv(r, 1, data, sizes, tags, mh, &rreq), ncclSuccess);
    assert_non_null(rreq);
    while (!sd || !rd) {
      if (sreq == NULL) assert_int_equal(net->isend(s, sb, (int)size, 0, smr, &sreq), ncclSuccess);
      if (sreq && !sd) assert_int_equal(net->test(sreq, &sd, NULL), ncclSuccess);
      if (!rd) assert_int_equal(net->test(rreq, &rd, got), ncclSuccess);
      assert_true(ut_now() - t0 < 30.0);
    }
    assert_int_equal(got[0], (int)size);
    assert_memory_equal(sb, rb, size);
    assert_int_equal(net->deregMr(s, smr), ncclSuccess);
    assert_int_equal(net->deregMr(r, rmr), ncclSuccess);
  }
  free(sb);
  free(rb);
  *netp = net;
  *sp = s;
  *rp = r;
  return lib;
}

/* gone: the dlclose unloads the library (nothing else holds it) */
static void one_cycle(int cycle, int gone) {
  const ncclNet_v8_t *net;
  void *s, *r, *lib = open_and_move(cycle, &net, &s, &r);
  assert_int_equal(net->closeSend(s), ncclSuccess);
  assert_int_equal(net->closeRecv(r), ncclSuccess);
  assert_int_equal(dlclose(lib), 0);
  if (gone) {
    /* really gone (no -z nodelete, nothing pinning it) */
    assert_null(dlopen(plugin_path(), RTLD_NOW | RTLD_NOLOAD));
  } else {
    void *still = dlopen(plugin_path(), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(still);
    assert_int_equal(dlclose(still), 0);
  }
}

static void *noop_thread(void *arg) { return arg; }

static void test_unload_cycles(void **state) {
  pthread_t t;
  int base;
  (void)state;
  /* ThreadSanitizer starts a background thread of its own at the first pthread_create: before the baseline */
  assert_int_equal(pthread_create(&t, NULL, noop_thread, NULL), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  base = count_threads();
  for (int i = 0; i < 4; i++) {
    one_cycle(i + 1, 1);
    assert_int_equal(count_threads(), base); /* every helper thread joined */
  }
}

/* Context switches, summed, of this process's threads whose name starts with prefix (/proc/self/task/N/status). */
static long long ctxt_switches(const char *prefix, int *nthreads) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  long long sum = 0;
  *nthreads = 0;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    char path[300], line[128] = "";
    FILE *f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    if ((f = fopen(path, "r")) == NULL) continue; /* a thread that just ended */
    if (fgets(line, sizeof(line), f) == NULL) line[0] = '\0';
    fclose(f);
    if (strncmp(line, prefix, strlen(prefix)) != 0) continue;
    (*nthreads)++;
    snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
    if ((f = fopen(path, "r")) == NULL) continue;
    while (fgets(line, sizeof(line), f) != NULL) {
      long long v;
      if (sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1 ||
          sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1)
        sum += v;
    }
    fclose(f);
  }
  closedir(d);
  return sum;
}

/* Shuts down every socket of this process: each data stream of the pair left open reports its end to the I/O thread
 * that serves it. */
static void shutdown_sockets(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) (void)shutdown(fd, SHUT_RDWR);
  }
  closedir(d);
}

/* NCCL unloads the plugin after its last communicator even when an abort skipped a comm's close. The dlclose must
 * not unmap the code the comm's TCP I/O threads run: they keep the library loaded. They then wake (every socket
 * shut down: their streams end) and go back to sleep in the plugin's code, and a later load finds the same library
 * and works. Before: the threads woke in unmapped code (SIGSEGV). The comms stay open to the end of the process:
 * the last test. */
static void *volatile g_left[2]; /* the comms left open, to the end of the process (reachable: no leak report) */

static void test_unload_with_comms_open(void **state) {
  const ncclNet_v8_t *net;
  void *s, *r, *lib, *again;
  long long before, after;
  int nio = 0, n = 0;
  double t0;
  (void)state;
  lib = open_and_move(9, &net, &s, &r);
  g_left[0] = s;
  g_left[1] = r;
  before = ctxt_switches("gdr-tcp-io/", &nio);
  assert_true(nio >= 1);
  assert_int_equal(dlclose(lib), 0);
  shutdown_sockets();
  /* the I/O threads serving the pair woke and ran the plugin's code to sleep again (bounded: a thread that died in
   * unmapped code takes the process with it) */
  t0 = ut_now();
  while ((after = ctxt_switches("gdr-tcp-io/", &n)) == before) {
    assert_true(ut_now() - t0 < 30.0);
    sched_yield();
  }
  assert_int_equal(n, nio); /* every thread still there */
  again = dlopen(plugin_path(), RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(again); /* still loaded: held by its threads */
  assert_int_equal(dlclose(again), 0);
  /* loaded again, as NCCL would for its next communicator: the same library, with the old comms still in it */
  one_cycle(10, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unload_cycles),
      cmocka_unit_test(test_unload_with_comms_open),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
