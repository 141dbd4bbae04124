/* The TCP transport carrying device memory (what the RDMA fallback hands it), against the emulator's fake CUDA driver
 * (tests/verbs-emu/selftest/fakecuda.c, loaded as libcuda.so.1): its "device memory" is PROT_NONE with a hidden
 * shadow, so only the driver's copies move bytes, and it models the H200's context lock: while an application
 * thread sits in a synchronous copy (fakecu_hold_sync(1), PyTorch's .item() right after a collective), every copy
 * enqueued with the primary context current blocks. NCCL's buffers are cuMem* (VMM) memory: the plugin must stage
 * them in a context of its own, or a DDP job that falls back to TCP hangs (it did on the H200, 2026-12-01).
 *
 * Every transfer runs while another thread holds that lock; a watchdog fails the test if a copy blocks. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "core.h"
#include "cuda.h"
#include "tcp/tcp.h"
#include "unit_common.h"
#include "../verbs-emu/selftest/fakecuda.h"

static void (*f_hold)(int);
static void *(*f_alloc_vmm)(size_t);
static int (*f_poke)(void *, const void *, size_t);
static int (*f_peek)(void *, const void *, size_t);
static void (*f_stats)(struct fakecu_stats *);

/* the application thread in a synchronous copy: holds the fake's primary-context lock until told to stop */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_state; /* 1: holding, 2: let go */

static void *holder(void *arg) {
  f_hold(1);
  pthread_mutex_lock(&g_mu);
  g_state = 1;
  pthread_cond_broadcast(&g_cv);
  while (g_state != 2) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  f_hold(0);
  return arg;
}

static void on_alarm(int sig) {
  static const char msg[] = "test_tcp_cuda: FAIL: a staging copy blocked behind the application's synchronous "
                            "copy (the primary context's lock) for 60 s\n";
  (void)sig;
  (void)!write(2, msg, sizeof(msg) - 1);
  _exit(1);
}

static void load_fake(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  assert_non_null(h);
  *(void **)&f_hold = dlsym(h, "fakecu_hold_sync");
  *(void **)&f_alloc_vmm = dlsym(h, "fakecu_alloc_vmm");
  *(void **)&f_poke = dlsym(h, "fakecu_poke");
  *(void **)&f_peek = dlsym(h, "fakecu_peek");
  *(void **)&f_stats = dlsym(h, "fakecu_get_stats");
  /* the fake driver, not a real one: the test needs its hooks */
  assert_true(f_hold && f_alloc_vmm && f_poke && f_peek && f_stats);
}

static void test_vmm_staging_under_sync_copy(void **state) {
  static const size_t sizes[] = {0, 100, 70000, 1u << 20, 8u << 20};
  void *l = NULL, *s = NULL, *r = NULL;
  char h[NCCL_NET_HANDLE_MAXSIZE];
  pthread_t th;
  struct fakecu_stats st0, st1;
  double t0;
  (void)state;

  load_fake();
  setenv("GDRNET_TRANSPORT", "tcp", 1);
  ut_warn_reset();
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  assert_int_equal(gdr_core_listen(NULL, 0, h, &l), ncclSuccess);
  t0 = ut_now();
  while (s == NULL || r == NULL) {
    if (s == NULL) assert_int_equal(gdr_core_connect(NULL, 0, -1, h, &s), ncclSuccess);
    if (r == NULL) assert_int_equal(gdr_core_accept(l, &r), ncclSuccess);
    assert_true(ut_now() - t0 < 20.0);
  }
  assert_int_equal(gdr_core_close_listen(l), ncclSuccess);
  void *st = ((struct gdr_comm *)s)->tcomm, *rt = ((struct gdr_comm *)r)->tcomm;

  assert_int_equal(pthread_create(&th, NULL, holder, NULL), 0);
  pthread_mutex_lock(&g_mu);
  while (g_state != 1) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  f_stats(&st0);
  signal(SIGALRM, on_alarm);
  alarm(60);

  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    size_t n = sizes[k], cap = n + 64;
    unsigned char *src = f_alloc_vmm(cap), *dst = f_alloc_vmm(cap);
    unsigned char *want = malloc(cap), *got = malloc(cap);
    struct tcp_mr smr, rmr;
    void *sreq = NULL, *rreq = NULL, *rmh = &rmr, *rdata = dst;
    size_t rsize = cap, rs[1] = {0};
    int tag = 3, sdone = 0, rdone = 0;
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(want);
    assert_non_null(got);
    ut_fill(want, cap, (unsigned)k + 1);
    memset(got, 0xA5, cap);
    assert_int_equal(f_poke(src, want, cap), 0);
    assert_int_equal(f_poke(dst, got, cap), 0); /* the receive buffer prefilled */
    assert_int_equal(gdr_tcp_mr_make(src, n, NCCL_PTR_CUDA, &smr), ncclSuccess);
    assert_int_equal(gdr_tcp_mr_make(dst, cap, NCCL_PTR_CUDA, &rmr), ncclSuccess);
    assert_non_null(smr.cuda_ctx);
    t0 = ut_now();
    while (rreq == NULL) {
      assert_int_equal(gdr_transport_tcp.irecv(rt, 1, &rdata, &rsize, &tag, &rmh, &rreq), ncclSuccess);
      assert_true(ut_now() - t0 < 20.0);
    }
    while (sreq == NULL) {
      assert_int_equal(gdr_transport_tcp.isend(st, src, n, tag, &smr, &sreq), ncclSuccess);
      assert_true(ut_now() - t0 < 20.0);
    }
    while (!sdone || !rdone) {
      if (!sdone) assert_int_equal(gdr_transport_tcp.test(sreq, &sdone, NULL), ncclSuccess);
      if (!rdone) assert_int_equal(gdr_transport_tcp.test(rreq, &rdone, rs), ncclSuccess);
      assert_true(ut_now() - t0 < 30.0);
    }
    assert_int_equal(rs[0], n);
    assert_int_equal(f_peek(got, dst, cap), 0);
    assert_memory_equal(got, want, n);
    for (size_t i = n; i < cap; i++) assert_int_equal(got[i], 0xA5); /* nothing past the message */
    free(want);
    free(got);
  }
  alarm(0);
  f_stats(&st1);
  /* a context of the plugin's own, the copies made there, from pinned buffers only, every call well-formed */
  assert_true(st1.private_ctxs >= 1);
  assert_true(st1.private_copies - st0.private_copies >= 6); /* 3 non-empty messages, out and in */
  assert_int_equal(st1.pageable, st0.pageable);
  assert_int_equal(st1.bad, 0);
  assert_int_equal(ut_nwarn, 0); /* the plugin's own context was made: nothing to warn about */

  /* device memory through the core: NCCL's regMr of it is refused (ptrSupport HOST), the GIN core's staged one
   * (GDR_PTR_STAGED) becomes a staging handle in the plugin's own context */
  {
    unsigned char *win = f_alloc_vmm(4096);
    void *mh = NULL;
    assert_non_null(win);
    assert_int_equal(gdr_core_reg_mr(s, win, 4096, NCCL_PTR_CUDA, &mh), ncclInvalidUsage);
    assert_null(mh);
    assert_int_equal(gdr_core_reg_mr(s, win, 4096, NCCL_PTR_CUDA | GDR_PTR_STAGED, &mh), ncclSuccess);
    assert_non_null(mh);
    const struct tcp_mr *tm = ((struct gdr_mr *)mh)->tmr;
    assert_int_equal(tm->type, NCCL_PTR_CUDA);
    assert_non_null(tm->cuda_ctx);
    assert_int_equal(((struct gdr_mr *)mh)->type, NCCL_PTR_CUDA);
    assert_int_equal(gdr_core_dereg_mr(s, mh), ncclSuccess);
  }

  pthread_mutex_lock(&g_mu);
  g_state = 2;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(gdr_core_close_send(s), ncclSuccess);
  assert_int_equal(gdr_core_close_recv(r), ncclSuccess);
  gdr_core_fini();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vmm_staging_under_sync_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
