/* Unload safety: NCCL >= 2.28 dlcloses the plugin after its last communicator and may load it again. Load the
 * built .so exactly as NCCL does (RTLD_NOW | RTLD_LOCAL), run connections with helper threads, close them,
 * dlclose: every thread must be gone and the library really unmapped; then again, several times. */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>

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

static void one_cycle(int cycle) {
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
  assert_int_equal(net->closeSend(s), ncclSuccess);
  assert_int_equal(net->closeRecv(r), ncclSuccess);
  assert_int_equal(dlclose(lib), 0);
  /* really gone (no -z nodelete, nothing pinning it) */
  assert_null(dlopen(plugin_path(), RTLD_NOW | RTLD_NOLOAD));
  free(sb);
  free(rb);
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
    one_cycle(i + 1);
    assert_int_equal(count_threads(), base); /* every helper thread joined */
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unload_cycles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
