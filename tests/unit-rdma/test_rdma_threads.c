/* The RDMA transport driven from several threads of one process at once, over the verbs emulator:
 * every thread repeatedly listens, connects and accepts (both ends in this process, as NCCL's ranks of
 * one process do), moves a few checked messages, and closes in a random order. The device's async
 * thread is started and joined again and again, concurrently with other comms coming and going; at
 * the end no thread of the transport is left. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "transport.h"

#ifndef XT_VEMU_LIB
#error "XT_VEMU_LIB (path of the emulator's libibverbs.so.1) must be defined"
#endif

#define NTHREADS 4
#define ROUNDS 12
#define MSGS 6
#define LEN 70000

static const struct gdr_transport *T = &gdr_transport_rdma;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int thread_count(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

struct worker {
  int id;
  int failed;
  char why[256];
};

#define WCHECK(cond)                                                                                                 \
  do {                                                                                                               \
    if (!(cond)) {                                                                                                   \
      snprintf(w->why, sizeof(w->why), "thread %d round %d: %s (line %d)", w->id, round, #cond, __LINE__);         \
      w->failed = 1;                                                                                                 \
      return NULL;                                                                                                   \
    }                                                                                                                \
  } while (0)

static void *worker_main(void *arg) {
  struct worker *w = arg;
  unsigned seed = (unsigned)w->id * 2654435761u + 7;
  unsigned char *sb = malloc(LEN), *rb = malloc(LEN + 64);
  int round = 0;
  WCHECK(sb && rb);
  for (round = 0; round < ROUNDS; round++) {
    struct gdr_handle h;
    memset(&h, 0, sizeof(h));
    void *lc = NULL, *sc = NULL, *rc = NULL;
    struct gdr_conn_opts o0 = gdr_conn_opts_one(0);
    WCHECK(T->listen(0, &o0, &h, &lc) == ncclSuccess);
    double t0 = now_s();
    while (sc == NULL || rc == NULL) {
      if (sc == NULL) WCHECK(T->connect(0, &o0, &h, &sc) == ncclSuccess);
      if (rc == NULL) WCHECK(T->accept(lc, &rc) == ncclSuccess);
      WCHECK(now_s() - t0 < 30);
    }
    WCHECK(T->close_listen(lc) == ncclSuccess);
    void *smh = NULL, *rmh = NULL;
    WCHECK(T->reg_mr(sc, sb, LEN, NCCL_PTR_HOST, &smh) == ncclSuccess);
    WCHECK(T->reg_mr(rc, rb, LEN + 64, NCCL_PTR_HOST, &rmh) == ncclSuccess);
    for (int m = 0; m < MSGS; m++) {
      size_t size = (size_t)(rand_r(&seed) % LEN);
      for (size_t i = 0; i < size; i++) sb[i] = (unsigned char)(i * 13 + (size_t)m + (size_t)w->id);
      memset(rb, 0xEE, LEN + 64);
      void *rreq = NULL, *sreq = NULL;
      void *data[1] = {rb}, *mhs[1] = {rmh};
      size_t cap[1] = {LEN + 64};
      int tags[1] = {w->id};
      t0 = now_s();
      while (rreq == NULL) {
        WCHECK(T->irecv(rc, 1, data, cap, tags, mhs, &rreq) == ncclSuccess);
        WCHECK(now_s() - t0 < 30);
      }
      while (sreq == NULL) {
        WCHECK(T->isend(sc, sb, size, w->id, smh, &sreq) == ncclSuccess);
        WCHECK(now_s() - t0 < 30);
      }
      int sdone = 0, rdone = 0;
      size_t got = 0, sent = 0;
      while (!sdone || !rdone) {
        if (!sdone) WCHECK(T->test(sreq, &sdone, &sent) == ncclSuccess);
        if (!rdone) WCHECK(T->test(rreq, &rdone, &got) == ncclSuccess);
        WCHECK(now_s() - t0 < 30);
      }
      WCHECK(got == size && sent == size);
      for (size_t i = 0; i < size; i++) WCHECK(rb[i] == (unsigned char)(i * 13 + (size_t)m + (size_t)w->id));
      WCHECK(rb[size] == 0xEE);
    }
    WCHECK(T->dereg_mr(sc, smh) == ncclSuccess);
    WCHECK(T->dereg_mr(rc, rmh) == ncclSuccess);
    if (rand_r(&seed) & 1) {
      WCHECK(T->close_send(sc) == ncclSuccess);
      WCHECK(T->close_recv(rc) == ncclSuccess);
    } else {
      WCHECK(T->close_recv(rc) == ncclSuccess);
      WCHECK(T->close_send(sc) == ncclSuccess);
    }
  }
  free(sb);
  free(rb);
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  char dir[] = "/tmp/gdr-xt-threads-XXXXXX";
  assert_non_null(mkdtemp(dir));
  setenv("VEMU_DIR", dir, 1);
  setenv("GDRNET_IBVERBS_LIB", XT_VEMU_LIB, 1);
  setenv("GDRNET_SOCKET_IFNAME", "lo", 1);
  if (!getenv("VEMU_DEVICES")) setenv("VEMU_DEVICES", "vemu0:roce", 1);
  gdr_params_reset();
  assert_int_equal(gdr_params_load(), ncclSuccess);
  int ndev = 0;
  char why[512] = "";
  assert_int_equal(T->init(&ndev, why, sizeof(why)), ncclSuccess);
  assert_true(ndev >= 1);
  int threads0 = thread_count(); /* the emulator's agent is up by now (opened at init) */

  pthread_t t[NTHREADS];
  struct worker w[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].id = i + 1;
    assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(t[i], NULL);
    if (w[i].failed) fprintf(stderr, "%s\n", w[i].why);
    assert_false(w[i].failed);
  }
  assert_int_equal(thread_count(), threads0); /* every async thread joined */
  T->quiesce();
  T->fini();
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
