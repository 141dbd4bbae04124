/* The TCP transport's per-process I/O thread pool (plugin/tcp/tcp_pool.c): its thread count stays bounded whatever the
 * number of connections, every byte of many concurrent connections lands where it belongs, idle connections cost no
 * CPU, and the threads go away with the last connection. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "param.h"
#include "tcp/tcp.h"
#include "unit_common.h"
#include "unit_pair.h"

#define UT_NO_STAT "/nonexistent/gdrnet-ut/stat" /* the pool's steal source in these tests: none */

/* Threads of this process whose name starts with prefix; their tids in tids[] (up to max). */
static int threads_named(const char *prefix, pid_t *tids, int max) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    char path[300], name[64] = "";
    FILE *f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) continue; /* a thread that just ended */
    if (fgets(name, sizeof(name), f) == NULL) name[0] = '\0';
    fclose(f);
    if (strncmp(name, prefix, strlen(prefix)) == 0) {
      if (n < max) tids[n] = (pid_t)atoi(e->d_name);
      n++;
    }
  }
  closedir(d);
  return n;
}

/* CPU time (ns) of a thread of this process, by its tid (Linux's per-thread CPU clock, as pthread_getcpuclockid). */
static uint64_t thread_cpu_ns(pid_t tid) {
  clockid_t cid = (clockid_t)((~(unsigned)tid << 3) | 6u); /* CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED */
  struct timespec ts;
  if (clock_gettime(cid, &ts) != 0) return 0; /* the thread ended */
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define NPAIRS 8

/* Every pair gets one message at once (sizes differ by pair and round), all driven together; every byte checked. */
static void traffic_all(struct pair *p, int npairs, int round) {
  unsigned char *sb[NPAIRS], *rb[NPAIRS];
  void *smr[NPAIRS], *rmr[NPAIRS], *sreq[NPAIRS], *rreq[NPAIRS];
  size_t size[NPAIRS];
  int sdone[NPAIRS], rdone[NPAIRS], left = 2 * npairs;
  double t0 = ut_now();
  static const size_t base[] = {4u << 20, 65537, 1u << 20, 3000001};
  for (int i = 0; i < npairs; i++) {
    void *data[1];
    size_t sizes[1];
    int tags[1] = {1};
    size[i] = base[(i + round) % 4] + (size_t)i * 4097;
    sb[i] = malloc(size[i]);
    rb[i] = malloc(size[i]);
    assert_non_null(sb[i]);
    assert_non_null(rb[i]);
    ut_fill(sb[i], size[i], (unsigned)(round * 100 + i));
    memset(rb[i], 0, size[i]);
    assert_int_equal(gdr_core_reg_mr(p[i].s, sb[i], size[i], NCCL_PTR_HOST, &smr[i]), ncclSuccess);
    assert_int_equal(gdr_core_reg_mr(p[i].r, rb[i], size[i], NCCL_PTR_HOST, &rmr[i]), ncclSuccess);
    data[0] = rb[i];
    sizes[0] = size[i];
    rreq[i] = sreq[i] = NULL;
    sdone[i] = rdone[i] = 0;
    void *mh[1] = {rmr[i]};
    while (rreq[i] == NULL)
      assert_int_equal(gdr_core_irecv(p[i].r, 1, data, sizes, tags, mh, NULL, &rreq[i]), ncclSuccess);
  }
  while (left > 0) {
    for (int i = 0; i < npairs; i++) {
      if (sreq[i] == NULL)
        assert_int_equal(gdr_core_isend(p[i].s, sb[i], size[i], 1, smr[i], NULL, &sreq[i]), ncclSuccess);
      if (sreq[i] != NULL && !sdone[i]) {
        assert_int_equal(gdr_core_test(sreq[i], &sdone[i], NULL, NULL), ncclSuccess);
        left -= sdone[i];
      }
      if (!rdone[i]) {
        size_t got[GDR_MAX_RECVS] = {0};
        int n = 0;
        assert_int_equal(gdr_core_test(rreq[i], &rdone[i], got, &n), ncclSuccess);
        if (rdone[i]) {
          assert_int_equal(n, 1);
          assert_int_equal(got[0], size[i]);
          left--;
        }
      }
    }
    assert_true(ut_now() - t0 < 60.0);
  }
  for (int i = 0; i < npairs; i++) {
    assert_memory_equal(sb[i], rb[i], size[i]);
    assert_int_equal(gdr_core_dereg_mr(p[i].s, smr[i]), ncclSuccess);
    assert_int_equal(gdr_core_dereg_mr(p[i].r, rmr[i]), ncclSuccess);
    free(sb[i]);
    free(rb[i]);
  }
}

/* 8 connections of 4 streams (both ends in this process: 16 comms, 64 streams) are served by the pool's 3 threads,
 * not by 64 helpers; their data is intact; the threads end with the last comm. Before the pool: 64 threads. */
static void test_bounded_threads(void **state) {
  struct pair p[NPAIRS];
  pid_t tids[128];
  (void)state;
  setenv("GDRNET_TCP_NSOCKS", "4", 1);
  setenv("GDRNET_TCP_IO_THREADS", "3", 1);
  ut_warn_reset();
  gdr_params_reset(); /* this test's knobs */
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  assert_int_equal(threads_named("gdr-tcp-", tids, 128), 0);
  for (int i = 0; i < NPAIRS; i++) pair_open(&p[i]);
  assert_int_equal(threads_named("gdr-tcp-", tids, 128), 3);
  assert_int_equal(threads_named("gdr-tcp-io/", tids, 128), 3);
  assert_int_equal(gdr_tcp_pool_running(), 3);
  for (int round = 0; round < 3; round++) traffic_all(p, NPAIRS, round);
  for (int i = 0; i < NPAIRS; i++) {
    pair_close(&p[i]);
    if (i < NPAIRS - 1) assert_int_equal(threads_named("gdr-tcp-", tids, 128), 3); /* comms remain */
  }
  assert_int_equal(threads_named("gdr-tcp-", tids, 128), 0); /* joined with the last comm */
  assert_int_equal(gdr_tcp_pool_running(), 0);
  /* and started again with the next one */
  pair_open(&p[0]);
  assert_int_equal(threads_named("gdr-tcp-", tids, 128), 3);
  traffic_all(p, 1, 0);
  pair_close(&p[0]);
  assert_int_equal(threads_named("gdr-tcp-", tids, 128), 0);
  gdr_core_fini();
  unsetenv("GDRNET_TCP_NSOCKS");
  unsetenv("GDRNET_TCP_IO_THREADS");
}

#define PROXY_IO_MAX_ROUNDS 64 /* traffic rounds that may pass before a help pass must have moved bytes */

/* GDRNET_TCP_PROXY_IO: the thread calling test() runs passes of the I/O thread serving its comm when that thread is
 * not at work (1 thread for 8 connections here); off, it never does. Every byte checked either way. */
static void proxy_io_round(const char *knob, uint64_t *passes) {
  struct pair p[NPAIRS];
  uint64_t before;
  setenv("GDRNET_TCP_NSOCKS", "2", 1);
  setenv("GDRNET_TCP_IO_THREADS", "1", 1);
  setenv("GDRNET_TCP_PROXY_IO", knob, 1);
  ut_warn_reset();
  gdr_params_reset();
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  for (int i = 0; i < NPAIRS; i++) pair_open(&p[i]);
  before = gdr_tcp_pool_help_passes();
  /* A pass runs only where the I/O thread is not at work when test() looks: on a loaded host that may take more than
   * a few rounds, so on, the rounds go on until one pass moved bytes (at most PROXY_IO_MAX_ROUNDS); off gets as
   * many */
  for (int round = 0; round < 4 || (round < PROXY_IO_MAX_ROUNDS && gdr_tcp_pool_help_passes() == before); round++)
    traffic_all(p, NPAIRS, round);
  *passes = gdr_tcp_pool_help_passes() - before;
  for (int i = 0; i < NPAIRS; i++) pair_close(&p[i]);
  gdr_core_fini();
  unsetenv("GDRNET_TCP_NSOCKS");
  unsetenv("GDRNET_TCP_IO_THREADS");
  unsetenv("GDRNET_TCP_PROXY_IO");
}

static void test_proxy_io(void **state) {
  uint64_t off = 0, on = 0;
  (void)state;
  proxy_io_round("0", &off);
  assert_int_equal(off, 0);
  proxy_io_round("1", &on);
  print_message("help passes that moved bytes: %llu with GDRNET_TCP_PROXY_IO=1, %llu with 0\n", (unsigned long long)on,
                (unsigned long long)off);
  assert_true(on > 0);
}

/* With polling on (as on hosts of 8 cores and more), idle connections cost the I/O threads under 1 % of a core:
 * they poll only for their window after the last traffic, then sleep in epoll_wait. CPU time of every gdr-tcp-*
 * thread (found in /proc/self/task) over one idle second. */
static void test_idle_cpu(void **state) {
  struct pair p[4];
  pid_t tids[64];
  uint64_t before[64], used = 0;
  int n;
  struct timespec idle = {1, 0};
  (void)state;
  setenv("GDRNET_TCP_SPIN_US", "200", 1);
  setenv("GDRNET_TCP_SPIN_MAX_US", "1000", 1);
  setenv("GDRNET_TCP_IO_THREADS", "2", 1);
  ut_warn_reset();
  gdr_params_reset(); /* this test's knobs */
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  for (int i = 0; i < 4; i++) pair_open(&p[i]);
  traffic_all(p, 4, 1);
  /* the polling windows (at most 1 ms) end well within this: the measured second starts after it */
  nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  n = threads_named("gdr-tcp-", tids, 64);
  assert_int_equal(n, 2);
  for (int i = 0; i < n; i++) before[i] = thread_cpu_ns(tids[i]);
  while (nanosleep(&idle, &idle) != 0 && errno == EINTR) {}
  for (int i = 0; i < n; i++) used += thread_cpu_ns(tids[i]) - before[i];
  printf("# idle second: the I/O threads used %.3f ms of CPU\n", (double)used / 1e6);
  assert_true(used < 10u * 1000 * 1000); /* < 1 % of a core */
  traffic_all(p, 4, 2);                  /* and they wake up for the next traffic */
  for (int i = 0; i < 4; i++) pair_close(&p[i]);
  gdr_core_fini();
  unsetenv("GDRNET_TCP_SPIN_US");
  unsetenv("GDRNET_TCP_SPIN_MAX_US");
  unsetenv("GDRNET_TCP_IO_THREADS");
}

/* GDRNET_TCP_SPIN_THREADS: however many I/O threads the pool has and however long their polling windows, no more
 * than the cap poll at once (the others sleep between their streams' bytes), and every byte still lands. */
static int spin_cap_round(const char *cap) {
  struct pair p[NPAIRS];
  int peak;
  setenv("GDRNET_TCP_NSOCKS", "4", 1);
  setenv("GDRNET_TCP_IO_THREADS", "4", 1);
  setenv("GDRNET_TCP_SPIN_US", "5000", 1);
  setenv("GDRNET_TCP_SPIN_MAX_US", "20000", 1);
  setenv("GDRNET_TCP_SPIN_THREADS", cap, 1);
  ut_warn_reset();
  gdr_params_reset();
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  for (int i = 0; i < NPAIRS; i++) pair_open(&p[i]);
  for (int round = 0; round < 2; round++) traffic_all(p, NPAIRS, round);
  peak = gdr_tcp_pool_spin_peak();
  for (int i = 0; i < NPAIRS; i++) pair_close(&p[i]);
  gdr_core_fini();
  unsetenv("GDRNET_TCP_NSOCKS");
  unsetenv("GDRNET_TCP_IO_THREADS");
  unsetenv("GDRNET_TCP_SPIN_US");
  unsetenv("GDRNET_TCP_SPIN_MAX_US");
  unsetenv("GDRNET_TCP_SPIN_THREADS");
  return peak;
}

static void test_spin_cap(void **state) {
  int one, three, all, dflt;
  (void)state;
  one = spin_cap_round("1");
  three = spin_cap_round("3");
  all = spin_cap_round("4");
  dflt = spin_cap_round("auto");
  print_message("most I/O threads polling at once (of 4): %d with GDRNET_TCP_SPIN_THREADS=1, %d with 3, %d with 4, "
                "%d with auto\n",
                one, three, all, dflt);
  assert_int_equal(one, 1); /* they did poll, one at a time */
  assert_true(three >= 1 && three <= 3);
  assert_true(all >= 1 && all <= 4);
  assert_int_equal(dflt, 1);
}

/* ------------------------------------------------------------------------ GDRNET_TCP_PROGRESS=adaptive -- */

/* The I/O threads' sleeps as the pool's hook reports them: why each last stopped polling, and one thread parked in
 * its hook (between giving up its token and epoll_wait) on demand. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int last_why[64]; /* per I/O thread: TCP_POLL_* of its last stop (TCP_POLL_ON: none yet) */
  int park_idx;     /* park this thread at its next stop for park_why (-1: none) */
  int park_why;     /* -1: any */
  int parked, release;
  int inside; /* threads parked in the hook now */
} hk = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .park_idx = -1};

static void sleep_hook(int idx, int why) {
  pthread_mutex_lock(&hk.mu);
  if (idx >= 0 && idx < 64 && why != TCP_POLL_ON) hk.last_why[idx] = why;
  if (idx == hk.park_idx && (hk.park_why < 0 || why == hk.park_why)) {
    struct timespec until;
    hk.park_idx = -1;
    hk.parked = 1;
    pthread_cond_broadcast(&hk.cv);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60; /* a bound: the test releases it */
    hk.inside++;
    while (!hk.release)
      if (pthread_cond_timedwait(&hk.cv, &hk.mu, &until) == ETIMEDOUT) break;
    hk.inside--;
  }
  pthread_cond_broadcast(&hk.cv);
  pthread_mutex_unlock(&hk.mu);
}

static void hook_reset(void) {
  pthread_mutex_lock(&hk.mu);
  for (int i = 0; i < 64; i++) hk.last_why[i] = TCP_POLL_ON;
  hk.park_idx = -1;
  hk.parked = hk.release = 0;
  pthread_mutex_unlock(&hk.mu);
}

/* Waits (bounded) until I/O thread idx's last stop was for why. 1 if it was. */
static int wait_stop(int idx, int why) {
  struct timespec until;
  int ok;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&hk.mu);
  while (hk.last_why[idx] != why)
    if (pthread_cond_timedwait(&hk.cv, &hk.mu, &until) == ETIMEDOUT) break;
  ok = hk.last_why[idx] == why;
  pthread_mutex_unlock(&hk.mu);
  return ok;
}

static void adaptive_env(const char *mode, const char *spin_us, const char *spin_max_us) {
  setenv("GDRNET_TCP_PROGRESS", mode, 1);
  setenv("GDRNET_TCP_SPIN_US", spin_us, 1);
  setenv("GDRNET_TCP_SPIN_MAX_US", spin_max_us, 1);
  setenv("GDRNET_TCP_IO_THREADS", "2", 1);
  setenv("GDRNET_TCP_NSOCKS", "1", 1);
  setenv("GDRNET_TCP_PROXY_IO", "0", 1);     /* only the I/O threads move the streams' bytes */
  setenv("GDRNET_TCP_SPIN_THREADS", "2", 1); /* fixed: each thread may poll (auto is 1 token) */
  setenv("GDRNET_TCP_SPIN_SHARE", "0", 1);   /* each thread's own wake-ups are under test, not a poller's help */
  ut_warn_reset();
  gdr_params_reset();
  hook_reset();
  gdr_tcp_pool_set_sleep_hook(sleep_hook);
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
}

static void adaptive_unenv(void) {
  gdr_core_fini();
  gdr_tcp_pool_set_sleep_hook(NULL);
  unsetenv("GDRNET_TCP_PROGRESS");
  unsetenv("GDRNET_TCP_SPIN_US");
  unsetenv("GDRNET_TCP_SPIN_MAX_US");
  unsetenv("GDRNET_TCP_IO_THREADS");
  unsetenv("GDRNET_TCP_NSOCKS");
  unsetenv("GDRNET_TCP_PROXY_IO");
  unsetenv("GDRNET_TCP_SPIN_THREADS");
  unsetenv("GDRNET_TCP_SPIN_SHARE");
}

struct msg {
  unsigned char *sb, *rb;
  size_t size;
  void *smr, *rmr, *sreq, *rreq;
  int sdone, rdone;
};

static void msg_post_recv(struct pair *p, struct msg *m, size_t size, unsigned seed) {
  void *data[1];
  size_t sizes[1] = {size};
  int tags[1] = {1};
  void *mh[1];
  memset(m, 0, sizeof(*m));
  m->size = size;
  m->sb = malloc(size);
  m->rb = calloc(1, size);
  assert_non_null(m->sb);
  assert_non_null(m->rb);
  ut_fill(m->sb, size, seed);
  assert_int_equal(gdr_core_reg_mr(p->s, m->sb, size, NCCL_PTR_HOST, &m->smr), ncclSuccess);
  assert_int_equal(gdr_core_reg_mr(p->r, m->rb, size, NCCL_PTR_HOST, &m->rmr), ncclSuccess);
  data[0] = m->rb;
  mh[0] = m->rmr;
  while (m->rreq == NULL) assert_int_equal(gdr_core_irecv(p->r, 1, data, sizes, tags, mh, NULL, &m->rreq), ncclSuccess);
}

static void msg_post_send(struct pair *p, struct msg *m) {
  double t0 = ut_now();
  while (m->sreq == NULL) {
    assert_int_equal(gdr_core_isend(p->s, m->sb, m->size, 1, m->smr, NULL, &m->sreq), ncclSuccess);
    assert_true(ut_now() - t0 < 30.0);
  }
}

/* Drives both ends until the message is complete (bounded), checks its bytes and frees it. */
static void msg_finish(struct pair *p, struct msg *m) {
  double t0 = ut_now();
  msg_post_send(p, m);
  while (!m->sdone || !m->rdone) {
    if (!m->sdone) assert_int_equal(gdr_core_test(m->sreq, &m->sdone, NULL, NULL), ncclSuccess);
    if (!m->rdone) {
      size_t got[GDR_MAX_RECVS] = {0};
      int n = 0;
      assert_int_equal(gdr_core_test(m->rreq, &m->rdone, got, &n), ncclSuccess);
      if (m->rdone) assert_int_equal(got[0], m->size);
    }
    assert_true(ut_now() - t0 < 30.0);
  }
  assert_memory_equal(m->sb, m->rb, m->size);
  assert_int_equal(gdr_core_dereg_mr(p->s, m->smr), ncclSuccess);
  assert_int_equal(gdr_core_dereg_mr(p->r, m->rmr), ncclSuccess);
  free(m->sb);
  free(m->rb);
}

static int recv_io(struct pair *p) {
  int idx = gdr_tcp_pool_io_of(((struct gdr_comm *)p->r)->tcomm, 0);
  assert_true(idx >= 0 && idx < 64);
  return idx;
}

/* A comm that goes idle stops polling at once, not at the end of its window: the receiving stream's I/O thread
 * polled while the receive was outstanding, and gave its token back because nothing was outstanding any more (the
 * window, 100 ms, plays no part). With fixed polling the same thread keeps its token for the window. */
static int idle_stop_round(const char *mode) {
  struct pair p;
  struct msg m;
  uint64_t idle0, win0;
  int idx, why;
  double t0;
  adaptive_env(mode, "10000", "100000");
  pair_open(&p);
  idx = recv_io(&p);
  idle0 = gdr_tcp_pool_stops(TCP_POLL_STOP_IDLE);
  win0 = gdr_tcp_pool_stops(TCP_POLL_STOP_WINDOW);
  /* A thread polls (takes a token) only when it waits for bytes of an outstanding message; one that finds bytes in
   * its socket at every turn never does. On a loaded machine (ThreadSanitizer, 2 busy cores) a whole 4 MiB message
   * can go that way: messages follow until one was polled for and its stop counted, at most 20 */
  for (int round = 0; round < 20; round++) {
    msg_post_recv(&p, &m, 4u << 20, 7 + round);
    msg_finish(&p, &m);
    t0 = ut_now();
    if (gdr_tcp_pool_spin_peak() < 1) continue;
    assert_true(wait_stop(idx, strcmp(mode, "adaptive") == 0 ? TCP_POLL_STOP_IDLE : TCP_POLL_STOP_WINDOW));
    if (strcmp(mode, "adaptive") == 0 ? gdr_tcp_pool_stops(TCP_POLL_STOP_IDLE) > idle0
                                      : gdr_tcp_pool_stops(TCP_POLL_STOP_WINDOW) > win0)
      break;
  }
  assert_true(gdr_tcp_pool_spin_peak() >= 1); /* it polled */
  assert_true(wait_stop(idx, strcmp(mode, "adaptive") == 0 ? TCP_POLL_STOP_IDLE : TCP_POLL_STOP_WINDOW));
  print_message("%s: the idle comm's I/O thread stopped polling %.1f ms after the last message\n", mode,
                (ut_now() - t0) * 1e3);
  pthread_mutex_lock(&hk.mu);
  why = hk.last_why[idx];
  pthread_mutex_unlock(&hk.mu);
  if (strcmp(mode, "adaptive") == 0) {
    assert_true(gdr_tcp_pool_stops(TCP_POLL_STOP_IDLE) > idle0);
  } else {
    assert_int_equal(gdr_tcp_pool_stops(TCP_POLL_STOP_IDLE), idle0); /* fixed mode never stops for idleness */
    assert_true(gdr_tcp_pool_stops(TCP_POLL_STOP_WINDOW) > win0);
  }
  pair_close(&p);
  adaptive_unenv();
  return why;
}

static void test_adaptive_idle_stops(void **state) {
  (void)state;
#if defined(__SANITIZE_THREAD__)
  /* Under ThreadSanitizer the instrumented reader is the slower end: its I/O thread finds bytes at every turn, never
   * waits for them and so never polls (20 messages of 4 MiB in the CI's TSan stage, twice), which leaves no stop to
   * observe. The idle stop is checked in the release and ASan runs; the threads' hand-offs around a stop are checked
   * here by test_adaptive_no_lost_wakeup and test_adaptive_window_then_wake. */
  skip();
#endif
  assert_int_equal(idle_stop_round("adaptive"), TCP_POLL_STOP_IDLE);
  assert_int_equal(idle_stop_round("fixed"), TCP_POLL_STOP_WINDOW);
}

/* No lost wakeup: the receiving stream's I/O thread is held right after it stopped polling (its token given back,
 * before epoll_wait) while a whole message lands in its socket; released, it sleeps, and must still be woken for
 * those bytes, with nothing else happening (no further traffic, no help from test()). */
static void test_adaptive_no_lost_wakeup(void **state) {
  struct pair p;
  struct msg a, b;
  struct tcp_comm *rc;
  double t0;
  int idx, avail = 0;
  (void)state;
  adaptive_env("adaptive", "10000", "100000");
  pair_open(&p);
  rc = ((struct gdr_comm *)p.r)->tcomm;
  idx = recv_io(&p);
  assert_int_not_equal(idx, gdr_tcp_pool_io_of(((struct gdr_comm *)p.s)->tcomm, 0)); /* sender's lane elsewhere */
  msg_post_recv(&p, &a, 1u << 20, 1);
  pthread_mutex_lock(&hk.mu);
  hk.park_idx = idx; /* its next stop for idleness: once a's receive is complete */
  hk.park_why = TCP_POLL_STOP_IDLE;
  pthread_mutex_unlock(&hk.mu);
  msg_finish(&p, &a);
  {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&hk.mu);
    while (!hk.parked)
      if (pthread_cond_timedwait(&hk.cv, &hk.mu, &until) == ETIMEDOUT) break;
    pthread_mutex_unlock(&hk.mu);
    assert_true(hk.parked);
  }
  /* b (96 KiB: chunked, and it fits the sockets' buffers) lands while the thread is held */
  msg_post_recv(&p, &b, 96u << 10, 2);
  msg_post_send(&p, &b);
  t0 = ut_now();
  while (avail <= 0) {
    assert_int_equal(ioctl(rc->streams[0].fd, FIONREAD, &avail), 0);
    if (avail <= 0) sched_yield();
    assert_true(ut_now() - t0 < 30.0);
  }
  pthread_mutex_lock(&hk.mu);
  hk.release = 1;
  pthread_cond_broadcast(&hk.cv);
  pthread_mutex_unlock(&hk.mu);
  msg_finish(&p, &b);
  pair_close(&p);
  adaptive_unenv();
}

/* No request is left waiting when polling stops: a receive outstanding with nothing coming keeps its thread polling
 * only for the window (then it sleeps, token given back), and its message, sent after that, still arrives. */
static void test_adaptive_window_then_wake(void **state) {
  struct pair p;
  struct msg a, c;
  int idx;
  (void)state;
  adaptive_env("adaptive", "200", "1000");
  pair_open(&p);
  idx = recv_io(&p);
  msg_post_recv(&p, &a, 1u << 20, 3);
  msg_post_recv(&p, &c, 1u << 20, 4); /* outstanding until sent below */
  msg_finish(&p, &a);
  {
    /* every thread sleeps, the receiving one last stopped with c outstanding: its window (or the gaps between its
     * progress) ended the polling, not idleness */
    double t0 = ut_now();
    int why = TCP_POLL_ON;
    while (gdr_tcp_pool_spinning() != 0 || (why != TCP_POLL_STOP_WINDOW && why != TCP_POLL_STOP_SLOW)) {
      sched_yield();
      pthread_mutex_lock(&hk.mu);
      why = hk.last_why[idx];
      pthread_mutex_unlock(&hk.mu);
      assert_true(ut_now() - t0 < 30.0);
    }
    assert_int_equal(c.rdone, 0);
  }
  msg_finish(&p, &c);
  pair_close(&p);
  adaptive_unenv();
}

/* ------------------------------------------------------------------------------- GDRNET_TCP_SPIN_SHARE -- */

static int hook_parked(void) {
  int parked;
  pthread_mutex_lock(&hk.mu);
  parked = hk.parked;
  pthread_mutex_unlock(&hk.mu);
  return parked;
}

/* I/O thread idx is held at its next sleep, whatever the reason it stops (the hook reset first). */
static void hook_hold(int idx) {
  hook_reset();
  pthread_mutex_lock(&hk.mu);
  hk.park_idx = idx;
  hk.park_why = -1;
  pthread_mutex_unlock(&hk.mu);
}

/* Lets a held thread go (or one about to be held), and waits until no thread is inside the hook. */
static void hook_release_all(void) {
  pthread_mutex_lock(&hk.mu);
  hk.park_idx = -1;
  hk.release = 1;
  pthread_cond_broadcast(&hk.cv);
  while (hk.inside > 0) pthread_cond_wait(&hk.cv, &hk.mu);
  pthread_mutex_unlock(&hk.mu);
}

/* Drives m until it is received (1) or it cannot move: the held thread is parked and no thread polls (0). */
static int share_drive(struct pair *p, struct msg *m) {
  double t0 = ut_now(), idle_since = 0;
  msg_post_send(p, m);
  while (!m->rdone) {
    size_t got[GDR_MAX_RECVS] = {0};
    int n = 0;
    if (!m->sdone) assert_int_equal(gdr_core_test(m->sreq, &m->sdone, NULL, NULL), ncclSuccess);
    assert_int_equal(gdr_core_test(m->rreq, &m->rdone, got, &n), ncclSuccess);
    if (m->rdone) break;
    if (hook_parked() && gdr_tcp_pool_spinning() == 0) { /* only the held thread could move its bytes now */
      if (idle_since == 0) idle_since = ut_now();
      if (ut_now() - idle_since > 0.05) return 0;
    } else {
      idle_since = 0;
    }
    sched_yield();
    assert_true(ut_now() - t0 < 30.0);
  }
  return 1;
}

/* One try of test_share_serves_sleeper: the thread is held from its next sleep on (during or after message a), then
 * message b moves. 1: a message completed while that thread was held and the poller's passes moved bytes; 0: not
 * shown this time (the poller's window ran out first, as on a loaded machine). Either way the thread is released and
 * the messages complete with every byte checked. */
static int share_try(struct pair *p, int held, unsigned seed) {
  struct msg a, b;
  uint64_t shared0 = gdr_tcp_pool_share_passes();
  double t0;
  int shown = 0, moved;
  hook_hold(held);
  memset(&b, 0, sizeof(b));
  msg_post_recv(p, &a, 1u << 20, seed);
  moved = share_drive(p, &a);
  if (moved) {
    shown = hook_parked(); /* a completed after the thread was held */
    t0 = ut_now();
    while (!hook_parked() && ut_now() - t0 < 30.0) sched_yield(); /* idle, it sleeps once its window has passed */
    assert_true(hook_parked());
    if (!shown) {
      msg_post_recv(p, &b, 1u << 20, seed + 1000);
      moved = share_drive(p, &b);
      shown = moved;
    }
  }
  t0 = ut_now();
  while (shown && gdr_tcp_pool_share_passes() == shared0 && ut_now() - t0 < 30.0)
    sched_yield(); /* the pass that read the last bytes counts itself once it has let the stream go */
  shown = shown && gdr_tcp_pool_share_passes() > shared0;
  hook_release_all(); /* before anything else: the pool must stop whatever happened; out of the hook before the next
                       * try resets it */
  msg_finish(p, &a);  /* every byte checked */
  if (b.size) msg_finish(p, &b);
  return shown;
}

/* One I/O thread that sleeps at once, NCCL's proxy helping (GDRNET_TCP_PROXY_IO=1; the caller's other knobs set
 * before), a pair open, and the thread held at its next sleep (hook_hold). The thread may be asleep already: a chunked
 * message (seed) wakes it (its lane's kick, its sockets' events), and it is held when it sleeps again; the proxy's
 * help finishes that message. */
static void one_thread_held(struct pair *p, unsigned seed) {
  struct msg m;
  double t0;
  adaptive_env("fixed", "0", "0"); /* the threads sleep at once */
  gdr_core_fini();
  setenv("GDRNET_TCP_IO_THREADS", "1", 1);
  setenv("GDRNET_TCP_PROXY_IO", "1", 1);
  gdr_params_reset();
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  pair_open(p);
  hook_hold(0);
  msg_post_recv(p, &m, 1u << 20, seed);
  msg_finish(p, &m);
  t0 = ut_now();
  while (!hook_parked()) {
    assert_true(ut_now() - t0 < 30.0);
    sched_yield();
  }
}

/* A message of 1 MiB (seed) from its send to its completion while the one I/O thread is held: only the passes of
 * these test() calls move its bytes. Returns the help passes that moved bytes; *secs (may be NULL) the time from the
 * send to the completion, *early (may be NULL) the passes that moved bytes within the first tenth of a second. */
static uint64_t held_message(struct pair *p, struct msg *m, unsigned seed, double *secs, uint64_t *early) {
  const uint64_t passes0 = gdr_tcp_pool_help_passes();
  double t0;
  if (early) *early = 0;
  msg_post_recv(p, m, 1u << 20, seed);
  msg_post_send(p, m);
  t0 = ut_now();
  while (!m->sdone || !m->rdone) {
    if (!m->sdone) assert_int_equal(gdr_core_test(m->sreq, &m->sdone, NULL, NULL), ncclSuccess);
    if (!m->rdone) assert_int_equal(gdr_core_test(m->rreq, &m->rdone, NULL, NULL), ncclSuccess);
    if (early && ut_now() - t0 < 0.1) *early = gdr_tcp_pool_help_passes() - passes0; /* calls that ended by then */
    assert_true(ut_now() - t0 < 30.0);
  }
  if (secs) *secs = ut_now() - t0;
  return gdr_tcp_pool_help_passes() - passes0;
}

/* One message of 1 MiB moved by NCCL's proxy thread's help passes alone (GDRNET_TCP_PROXY_IO=1): the one I/O
 * thread, which serves both the send lane and the receiving stream, is held at its first sleep. Returns the help
 * passes that moved bytes. GDRNET_TCP_HELP_BYTES (help, NULL: its default) bounds what a pass moves per lane or
 * stream, each system call included; GDRNET_TCP_HELP_AFTER_US (after, NULL: its default) delays the first pass.
 * *secs (may be NULL) gets the time from the send to the message's completion; *early the passes that moved bytes
 * while the test() calls were still within after's first tenth of a second from the send (after: 100000). */
static uint64_t help_round(const char *help, const char *after, double *secs, uint64_t *early) {
  struct pair p;
  struct msg m;
  uint64_t passes;
  if (help != NULL) setenv("GDRNET_TCP_HELP_BYTES", help, 1);
  if (after != NULL) setenv("GDRNET_TCP_HELP_AFTER_US", after, 1);
  one_thread_held(&p, 10);
  passes = held_message(&p, &m, 11, secs, early);
  assert_true(hook_parked());
  hook_release_all();
  msg_finish(&p, &m); /* every byte checked */
  pair_close(&p);
  adaptive_unenv();
  unsetenv("GDRNET_TCP_HELP_BYTES");
  unsetenv("GDRNET_TCP_HELP_AFTER_US");
  return passes;
}

static uint64_t help_bytes_round(const char *help) { return help_round(help, NULL, NULL, NULL); }

/* GDRNET_TCP_HELP_BYTES: with 4 KiB a pass, 1 MiB each way takes many more of the proxy's passes than with auto (512
 * KiB: the threads sleep here; a pass serves the lane and the stream, each at most a few times: at least 1 MiB / 16
 * KiB = 64). */
static void test_help_bytes(void **state) {
  uint64_t small, dflt;
  (void)state;
  small = help_bytes_round("4K");
  dflt = help_bytes_round(NULL);
  print_message("help passes for 1 MiB: %llu with GDRNET_TCP_HELP_BYTES=4K, %llu with the default\n",
                (unsigned long long)small, (unsigned long long)dflt);
  assert_true(small >= 64);
  assert_true(small > 4 * dflt);
}

/* GDRNET_TCP_HELP_AFTER_US: the proxy helps only once the connection's streams have moved nothing for that long. With
 * 100 ms and the one I/O thread held, no pass moves bytes while the test() calls are within the first 100 ms, and the
 * message then completes through the passes alone, no sooner than 100 ms after the send; at once (0) it is helped
 * within those 100 ms. */
static void test_help_after(void **state) {
  double secs = 0;
  uint64_t early = 0, passes;
  (void)state;
  passes = help_round(NULL, "100000", &secs, &early);
  print_message("GDRNET_TCP_HELP_AFTER_US=100000: %llu passes, %llu within 100 ms, done after %.3f s\n",
                (unsigned long long)passes, (unsigned long long)early, secs);
  assert_int_equal(early, 0);
  assert_true(passes >= 1);
  assert_true(secs >= 0.1);
  passes = help_round(NULL, "0", &secs, &early);
  print_message("GDRNET_TCP_HELP_AFTER_US=0: %llu passes, %llu within 100 ms, done after %.3f s\n",
                (unsigned long long)passes, (unsigned long long)early, secs);
  assert_true(passes >= 1);
  if (secs < 0.1) assert_int_equal(early, passes); /* a loaded host may take longer: then only the count is checked */
}

/* The host's steal time (the pool's stop line): /proc/stat's cpu line parsed field by field (steal is the eighth, the
 * total the sum of the first eight, guest time being inside user's), a line without a steal column or not the cpu line
 * refused, and the share between two readings in hundredths of a percent, refused where no time passed or a counter
 * went back. This machine's own /proc/stat parses. */
static void test_steal(void **state) {
  uint64_t steal = 1, total = 1, a[2] = {1000, 100000}, b[2];
  char line[256];
  FILE *f;
  (void)state;
  assert_int_equal(gdr_tcp_steal_parse("cpu  10 1 20 300 4 0 5 60 7 0\n", &steal, &total), 0);
  assert_int_equal(steal, 60);
  assert_int_equal(total, 10 + 1 + 20 + 300 + 4 + 0 + 5 + 60);
  assert_int_equal(gdr_tcp_steal_parse("cpu  10 1 20 300 4 0 5\n", &steal, &total), -1);
  assert_int_equal(gdr_tcp_steal_parse("cpu0 10 1 20 300 4 0 5 60\n", &steal, &total), -1);
  assert_int_equal(gdr_tcp_steal_parse("intr 10 1 20 300 4 0 5 60\n", &steal, &total), -1);
  assert_int_equal(gdr_tcp_steal_parse("cpu  10 1 x 300 4 0 5 60\n", &steal, &total), -1);
  b[0] = 1000 + 820, b[1] = 100000 + 10000; /* 8.2 % */
  assert_int_equal(gdr_tcp_steal_bp(a, b), 820);
  b[0] = 1000, b[1] = 100000 + 10000;
  assert_int_equal(gdr_tcp_steal_bp(a, b), 0);
  b[1] = 100000; /* no time */
  assert_int_equal(gdr_tcp_steal_bp(a, b), -1);
  b[0] = 999, b[1] = 100000 + 10; /* steal went back */
  assert_int_equal(gdr_tcp_steal_bp(a, b), -1);
  b[0] = 1000 + 20, b[1] = 100000 + 10; /* more steal than time */
  assert_int_equal(gdr_tcp_steal_bp(a, b), -1);
  f = fopen("/proc/stat", "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof(line), f));
  fclose(f);
  assert_int_equal(gdr_tcp_steal_parse(line, &steal, &total), 0);
  assert_true(total > 0 && steal <= total);
}

/* The host-steal state machine: on from a window at 3 %, off only after eight windows in a row under 1 % (a window
 * between the two, or one at 1 % or more, starts the count again); an unknown window (-1) changes nothing. */
static void test_steal_step(void **state) {
  struct gdr_tcp_steal_state st;
  (void)state;
  memset(&st, 0, sizeof(st));
  assert_int_equal(gdr_tcp_steal_step(&st, 299), 0);
  assert_int_equal(gdr_tcp_steal_step(&st, -1), 0);
  assert_int_equal(gdr_tcp_steal_step(&st, TCP_STEAL_ON_BP), 1);
  assert_int_equal(st.periods, 1);
  for (int i = 0; i < TCP_STEAL_OFF_WINDOWS - 1; i++) assert_int_equal(gdr_tcp_steal_step(&st, 0), 1);
  assert_int_equal(gdr_tcp_steal_step(&st, TCP_STEAL_OFF_BP), 1); /* 1 %: the count starts again */
  assert_int_equal(gdr_tcp_steal_step(&st, -1), 1);
  for (int i = 0; i < TCP_STEAL_OFF_WINDOWS - 1; i++) assert_int_equal(gdr_tcp_steal_step(&st, 99), 1);
  assert_int_equal(gdr_tcp_steal_step(&st, 99), 0);
  assert_int_equal(gdr_tcp_steal_step(&st, 200), 0); /* between: stays off */
  assert_int_equal(gdr_tcp_steal_step(&st, 5000), 1);
  assert_int_equal(st.periods, 2);
}

static char g_stat_path[64];

/* A stand-in /proc/stat: steal and total CPU ticks so far */
static void stat_write(uint64_t steal, uint64_t total) {
  char tmp[80];
  FILE *f;
  snprintf(tmp, sizeof(tmp), "%s.tmp", g_stat_path);
  f = fopen(tmp, "w");
  assert_non_null(f);
  fprintf(f, "cpu  %llu 0 0 0 0 0 0 %llu 0 0\ncpu0 1 0 0 0 0 0 0 0 0 0\n", (unsigned long long)(total - steal),
          (unsigned long long)steal);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(rename(tmp, g_stat_path), 0); /* the pool reads a whole file, old or new */
}

/* One 1 MiB message, checked: the chunks the sender cut for it */
static uint64_t chunks_of_one(struct pair *p, unsigned seed) {
  struct tcp_comm *sc = ((struct gdr_comm *)p->s)->tcomm;
  const uint64_t c0 = sc->chunks_queued;
  struct msg m;
  msg_post_recv(p, &m, 1u << 20, seed);
  msg_finish(p, &m);
  return sc->chunks_queued - c0;
}

static uint64_t g_stat_steal, g_stat_total;

/* The pool's stop line about the host's steal, as the logger last got it */
static pthread_mutex_t g_steal_line_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_steal_line[512];

static void steal_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt,
                         ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (strstr(msg, "the host stole") != NULL) {
    pthread_mutex_lock(&g_steal_line_mu);
    snprintf(g_steal_line, sizeof(g_steal_line), "%s", msg);
    pthread_mutex_unlock(&g_steal_line_mu);
  }
  ut_logger(level, flags, file, line, "%s", msg);
}

/* Closes the pair after a last reading of a lot of steal (the pool's life then has more than 1 %): the stop's line,
 * which must count the windows at 3 % or more and name the larger chunks only where they were on */
static void steal_close(struct pair *p, int chunks) {
  g_stat_total += 100000;
  g_stat_steal += 90000;
  stat_write(g_stat_steal, g_stat_total);
  pthread_mutex_lock(&g_steal_line_mu);
  g_steal_line[0] = '\0';
  pthread_mutex_unlock(&g_steal_line_mu);
  pair_close(p);
  pthread_mutex_lock(&g_steal_line_mu);
  print_message("stop line: %s\n", g_steal_line);
  assert_non_null(strstr(g_steal_line, "windows at 3 % or more"));
  assert_true((strstr(g_steal_line, "with larger chunks then") != NULL) == chunks);
  pthread_mutex_unlock(&g_steal_line_mu);
}

/* Messages until the pool's steal state is want, at most 10 s: before each, the stand-in /proc/stat moves on by
 * 100000 ticks, pct % of them stolen (each message lets the I/O threads go to sleep, when they read a window of 1 ms).
 * The chunks of the last one. */
static uint64_t chunks_until(struct pair *p, int want, unsigned pct, unsigned seed) {
  double t0 = ut_now();
  uint64_t n = 0;
  while (gdr_tcp_pool_stealing() != want) {
    g_stat_total += 100000;
    g_stat_steal += 1000u * pct;
    stat_write(g_stat_steal, g_stat_total);
    n = chunks_of_one(p, seed++);
    assert_true(ut_now() - t0 < 10.0);
  }
  return n;
}

/* While the host steals (the pool's windows of a stand-in /proc/stat), a send is cut into GDRNET_TCP_STEAL_CHUNK
 * chunks: with 512K, 1 MiB over 4 lanes goes as 4 chunks of 256 KiB, then as 2 of 512 KiB once a window saw 10 %
 * steal, and as 4 again once windows without steal followed; the pool counts one period. Unset (the default), or not
 * above GDRNET_TCP_MIN_CHUNK, the steal is seen and the chunks stay. */
static void test_steal_chunks(void **state) {
  static const char *const off[][2] = {{"GDRNET_TCP_STEAL_CHUNK", NULL}, {"GDRNET_TCP_STEAL_CHUNK", "64K"}};
  struct pair p;
  uint64_t n, w, won, periods;
  (void)state;
  snprintf(g_stat_path, sizeof(g_stat_path), "/tmp/gdrnet-ut-stat.%d", (int)getpid());
  g_stat_steal = 1000, g_stat_total = 100000;
  stat_write(g_stat_steal, g_stat_total);
  gdr_tcp_pool_set_steal_source(g_stat_path, 1000000);
  setenv("GDRNET_TCP_NTHREADS", "4", 1);
  setenv("GDRNET_TCP_NSOCKS", "4", 1);
  setenv("GDRNET_TCP_STEAL_CHUNK", "512K", 1);
  gdr_params_reset();
  assert_int_equal(gdr_core_init(steal_logger), ncclSuccess);
  pair_open(&p);
  assert_int_equal(gdr_tcp_resolve_steal_chunk(), 512u << 10);
  assert_int_equal(chunks_of_one(&p, 1), 4);
  n = chunks_until(&p, 1, 10, 2);
  if (n != 2) n = chunks_of_one(&p, 30); /* the message that saw the switch may have been cut before it */
  assert_int_equal(n, 2);
  n = chunks_until(&p, 0, 0, 31);
  if (n != 4) n = chunks_of_one(&p, 60);
  assert_int_equal(n, 4);
  gdr_tcp_pool_steal_stats(&w, &won, &periods);
  print_message("steal windows: %llu read, %llu while stealing, %llu period(s)\n", (unsigned long long)w,
                (unsigned long long)won, (unsigned long long)periods);
  assert_int_equal(periods, 1);
  assert_true(won >= TCP_STEAL_OFF_WINDOWS && won < w);
  steal_close(&p, 1);
  gdr_core_fini();
  for (size_t k = 0; k < sizeof(off) / sizeof(off[0]); k++) { /* the rule off: 4 chunks under 10 % steal */
    if (off[k][1] != NULL)
      setenv(off[k][0], off[k][1], 1);
    else
      unsetenv(off[k][0]);
    gdr_params_reset();
    assert_int_equal(gdr_core_init(steal_logger), ncclSuccess);
    pair_open(&p);
    assert_int_equal(gdr_tcp_resolve_steal_chunk(), 0);
    assert_int_equal(chunks_until(&p, 1, 10, 70), 4); /* the pool still sees the steal */
    assert_int_equal(chunks_of_one(&p, 100), 4);
    steal_close(&p, 0);
    gdr_core_fini();
    unsetenv(off[k][0]);
  }
  unsetenv("GDRNET_TCP_NTHREADS");
  unsetenv("GDRNET_TCP_NSOCKS");
  gdr_params_reset();
  gdr_tcp_pool_set_steal_source(UT_NO_STAT, 0);
  unlink(g_stat_path);
}

/* A sleeping I/O thread's wake-up is timed from the kick that wakes it until it runs: the one I/O thread (it sleeps at
 * once) is held as it goes to sleep (test()'s help finishes the message in flight then), a chunked message kicks its
 * lane, and the thread is let go 20 ms later (no test() meanwhile). The longest wake-up counted is then at least those
 * 20 ms, its percentiles are in order, and the counts outlive the pool (its INFO line at the stop reads them). */
static void test_wake_latency(void **state) {
  struct pair p;
  struct msg m;
  struct gdr_tcp_wake_stats w0, w;
  double t0;
  (void)state;
  one_thread_held(&p, 20);
  gdr_tcp_pool_wake_stats(&w0);
  msg_post_recv(&p, &m, 1u << 20, 21);
  msg_post_send(&p, &m); /* its lane's kick finds the thread asleep */
  t0 = ut_now();
  while (ut_now() - t0 < 0.02) sched_yield();
  hook_release_all();
  msg_finish(&p, &m);
  pair_close(&p);
  gdr_tcp_pool_wake_stats(&w);
  print_message("wake-ups: %llu, p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us\n", (unsigned long long)w.n,
                (double)w.p50_ns / 1e3, (double)w.p90_ns / 1e3, (double)w.p99_ns / 1e3, (double)w.max_ns / 1e3);
  assert_true(w.n > w0.n);
  assert_true(w.max_ns >= 20000000ull);
  assert_true(w.p50_ns <= w.p90_ns && w.p90_ns <= w.p99_ns && w.p99_ns <= w.max_ns);
  assert_true(w.p50_ns > 0);
  adaptive_unenv();
}

/* Wake-ups counted as an I/O thread counts them (gdr_tcp_pool_wake_note) until gdr_tcp_pool_wakes_late() is want:
 * how many it took, at most limit (then the test fails). */
static int notes_until(int want, uint64_t ns, int limit) {
  int n = 0;
  while (gdr_tcp_pool_wakes_late() != want) {
    assert_true(n < limit);
    gdr_tcp_pool_wake_note(ns);
    n++;
  }
  return n;
}

/* Late wake-ups make NCCL's proxy help at once (gdr_tcp_pool_wakes_late). GDRNET_TCP_HELP_AFTER_US is 100 ms here and
 * the one I/O thread is held asleep, so the wake-ups are the test's: 10 us ones in time, 200 ms ones late.
 *   - 3 late in 8 (the KV example's receiving side on a fast host: 37-45 % over 50 us) never switch it on;
 *   - a run of late ones does, within the moving share's weight; the proxy then moves the held thread's message within
 *     100 ms (test_help_after shows no pass there with wake-ups in time);
 *   - a run of prompt ones switches it off again, and the stop's counts have both. */
static void test_help_late(void **state) {
  struct pair p;
  struct msg m;
  int on, off;
  uint64_t late, periods, early = 0;
  (void)state;
  setenv("GDRNET_TCP_HELP_AFTER_US", "100000", 1);
  one_thread_held(&p, 40);
  for (int i = 0; i < 4096; i++) {
    gdr_tcp_pool_wake_note(i % 8 < 3 ? 200000000ull : 10000ull);
    assert_false(gdr_tcp_pool_wakes_late());
  }
  on = notes_until(1, 200000000ull, TCP_LATE_WEIGHT);
  (void)held_message(&p, &m, 41, NULL, &early);
  off = notes_until(0, 10000ull, TCP_LATE_WEIGHT);
  gdr_tcp_pool_late_stats(&late, &periods);
  print_message("late after %d late wake-ups, %llu pass(es) within 100 ms, in time after %d prompt ones; %llu late, "
                "%llu period(s)\n",
                on, (unsigned long long)early, off, (unsigned long long)late, (unsigned long long)periods);
  assert_true(early >= 1);
  assert_true(late >= 1536u + (uint64_t)on);
  assert_int_equal(periods, 1);
  hook_release_all();
  msg_finish(&p, &m); /* every byte checked */
  pair_close(&p);
  adaptive_unenv();
  unsetenv("GDRNET_TCP_HELP_AFTER_US");
}

/* The polling thread serves a sleeping thread's work: the receiving stream's I/O thread is held at its next sleep (as
 * a thread whose wake-up is slow), and the sender's lane is on the other thread, which polls once it has sent (the
 * process's one token). The message completes while the stream's thread is held, through the poller's passes
 * (NCCL's proxy does not help: GDRNET_TCP_PROXY_IO=0). Without the sharing it never would. */
static void test_share_serves_sleeper(void **state) {
  struct pair p;
  int held, tries, shown = 0;
  (void)state;
  adaptive_env("fixed", "10000", "0");
  gdr_core_fini(); /* adaptive_env's settings, with the poller's sharing on and one token */
  setenv("GDRNET_TCP_SPIN_SHARE", "1", 1);
  setenv("GDRNET_TCP_SPIN_THREADS", "1", 1);
  gdr_params_reset();
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  pair_open(&p);
  held = recv_io(&p);
  assert_int_not_equal(held, gdr_tcp_pool_io_of(((struct gdr_comm *)p.s)->tcomm, 0)); /* the lane elsewhere */
  for (tries = 1; tries <= 20 && !shown; tries++) shown = share_try(&p, held, 8u + (unsigned)tries);
  print_message("a message moved while its stream's I/O thread was held, through the poller: %s (try %d)\n",
                shown ? "yes" : "no", tries - 1);
  assert_true(shown);
  pair_close(&p);
  adaptive_unenv();
}

/* A child forked while the pool runs (the parent's I/O threads do not exist in it) starts its own pool with its first
 * comm and moves data; without the fork handler its lanes would go to threads that are not there and hang. */
static void test_fork_child(void **state) {
  struct pair p[1];
  pid_t pid;
  int st = 0;
  (void)state;
#if defined(__SANITIZE_THREAD__)
  skip(); /* ThreadSanitizer cannot start threads in the child of a multi-threaded process */
#endif
  setenv("GDRNET_TCP_IO_THREADS", "2", 1);
  ut_warn_reset();
  gdr_params_reset(); /* this test's knobs */
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  pair_open(&p[0]);
  /* The fork waits for the pool's threads to be past their start-up. A thread starting under ASan is inside its
   * allocator (pthread_getattr_np frees), and GCC 12's ASan takes no lock around fork: an allocator lock held there
   * at the fork stays held in the child, whose own threads then hang at their start (CI's asan stage; here 3 hangs
   * in about 100 loaded runs before, none in 400 after) */
  {
    double t0 = ut_now();
    while (gdr_tcp_pool_entered() < 2) {
      assert_true(ut_now() - t0 < 20.0);
      sched_yield();
    }
  }
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct pair q[1];
    pid_t tids[8];
    alarm(60); /* a hang ends the child */
    assert_int_equal(gdr_tcp_pool_running(), 0);
    pair_open(&q[0]);
    assert_int_equal(threads_named("gdr-tcp-io/", tids, 8), 2);
    traffic_all(q, 1, 3);
    pair_close(&q[0]);
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  traffic_all(p, 1, 2); /* the parent's pool still works */
  pair_close(&p[0]);
  gdr_core_fini();
  unsetenv("GDRNET_TCP_IO_THREADS");
}

/* A child closes the comms it inherited, then connects anew. The inherited comms count nothing in its pool (it starts
 * one of its own, which goes again with the child's last comm), and closing them in the child touches nothing of the
 * parent's (no shutdown of the shared sockets, no epoll_ctl on the parent's epoll sets): the parent's pair still moves
 * data once the child is gone. Before: the child's close took the pool's user count below 0, and its next connect
 * failed (epoll_ctl(ADD) on an epoll fd the fork handler had forgotten: EINVAL). With GDRNET_STATS_FILE the parent
 * runs the counters' writer thread; the child's fini must not wait for it (it is not the child's). */
static void test_fork_child_closes_inherited(void **state) {
  struct pair p[1];
  pid_t pid;
  int st = 0;
  (void)state;
#if defined(__SANITIZE_THREAD__)
  skip(); /* ThreadSanitizer cannot start threads in the child of a multi-threaded process */
#endif
  char stats[64];
  snprintf(stats, sizeof(stats), "/tmp/gdrnet-ut-fork-%d.prom", (int)getpid());
  setenv("GDRNET_TCP_IO_THREADS", "2", 1);
  setenv("GDRNET_STATS_FILE", stats, 1);
  ut_warn_reset();
  gdr_params_reset(); /* this test's knobs */
  assert_int_equal(gdr_core_init(ut_logger), ncclSuccess);
  assert_int_equal(gdr_core_pins(), 0);
  pair_open(&p[0]);
  assert_int_equal(gdr_core_pins(), 1); /* the running pool holds the library loaded (transport.h) */
  traffic_all(p, 1, 4);
  { /* forked once the threads are past their start-up: see test_fork_child */
    double t0 = ut_now();
    while (gdr_tcp_pool_entered() < 2) {
      assert_true(ut_now() - t0 < 20.0);
      sched_yield();
    }
  }
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct pair q[1];
    pid_t tids[8];
    alarm(60);         /* a hang ends the child */
    pair_close(&p[0]); /* the parent's comms, inherited */
    assert_int_equal(gdr_tcp_pool_running(), 0);
    assert_int_equal(gdr_core_pins(), 1); /* the parent's pool's, inherited with the loader's reference it stands for */
    for (int k = 0; k < 2; k++) {         /* the child's own pool, started and stopped twice */
      pair_open(&q[0]);
      assert_int_equal(gdr_core_pins(), 1);
      assert_int_equal(gdr_tcp_pool_running(), 2);
      assert_int_equal(threads_named("gdr-tcp-io/", tids, 8), 2);
      traffic_all(q, 1, 5 + k);
      pair_close(&q[0]);
      assert_int_equal(gdr_tcp_pool_running(), 0); /* its user count came back to 0: the last close stopped it */
      assert_int_equal(gdr_core_pins(), 0);        /* and gave the pin back */
    }
    gdr_core_fini(); /* (the stats writer is the parent's) */
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_int_equal(gdr_tcp_pool_running(), 2);
  traffic_all(p, 1, 6); /* the parent's connection and pool are as they were */
  traffic_all(p, 1, 7);
  pair_close(&p[0]);
  assert_int_equal(gdr_tcp_pool_running(), 0);
  assert_int_equal(gdr_core_pins(), 0); /* given back with the last thread */
  gdr_core_fini();
  assert_int_equal(unlink(stats), 0); /* the parent's writer wrote it */
  unsetenv("GDRNET_STATS_FILE");
  unsetenv("GDRNET_TCP_IO_THREADS");
}

/* The pool's size: the knob, or auto from the cores and the ranks on the host; named with how it was chosen. */
static int reload(void) {
  gdr_params_reset();
  return gdr_params_load() == ncclSuccess ? 0 : -1;
}

static void test_pool_size(void **state) {
  char why[160];
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int n;
  (void)state;
  setenv("GDRNET_TCP_IO_THREADS", "5", 1);
  assert_int_equal(reload(), 0);
  assert_int_equal(gdr_tcp_pool_size(why, sizeof(why)), 5);
  assert_non_null(strstr(why, "GDRNET_TCP_IO_THREADS=5"));
  unsetenv("GDRNET_TCP_IO_THREADS");
  assert_int_equal(reload(), 0);
  n = gdr_tcp_pool_size(why, sizeof(why));
  assert_true(n >= 2 && n <= 16);
  assert_non_null(strstr(why, "auto"));
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "64", 1); /* many ranks on the host: fewer than 8 cores each */
  n = gdr_tcp_pool_size(why, sizeof(why));
  if (online < 64 * 8 && gdr_tcp_rank_cores(NULL) >= online) {
    assert_int_equal(gdr_tcp_rank_cores(NULL), online / 64 > 0 ? online / 64 : 1);
    assert_int_equal(n, 16);
    assert_non_null(strstr(why, "fewer than 8"));
    assert_int_equal(gdr_tcp_resolve_spin_ns(), 0); /* blocking threads where cores are shared */
    assert_int_equal(gdr_tcp_resolve_proxy_io(), 1);
    assert_int_equal(gdr_tcp_resolve_help_bytes(NULL), 512u << 10);
  }
  assert_non_null(strstr(why, "OMPI_COMM_WORLD_LOCAL_SIZE"));
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
  n = gdr_tcp_pool_size(why, sizeof(why));
  if (gdr_tcp_rank_cores(NULL) >= 8) {
    int c = gdr_tcp_rank_cores(NULL);
    assert_int_equal(n, c - 2 < 16 ? c - 2 : 16);
    assert_int_equal(gdr_tcp_resolve_spin_ns(), 200000u);
    assert_int_equal(gdr_tcp_resolve_proxy_io(), 1); /* the proxy serves the threads that sleep */
    assert_int_equal(gdr_tcp_resolve_help_bytes(NULL), 128u << 10);
    assert_int_equal(gdr_tcp_resolve_spin_threads(n), 1); /* one thread polls at a time */
    setenv("GDRNET_TCP_SPIN_US", "0", 1);
    assert_int_equal(reload(), 0);
    assert_int_equal(gdr_tcp_resolve_spin_ns(), 0);
    assert_int_equal(gdr_tcp_resolve_proxy_io(), 1);
    assert_int_equal(gdr_tcp_resolve_help_bytes(NULL), 512u << 10);
    unsetenv("GDRNET_TCP_SPIN_US");
    assert_int_equal(reload(), 0);
  } else {
    assert_int_equal(n, 16);
  }
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  setenv("GDRNET_TCP_SPIN_THREADS", "3", 1);
  assert_int_equal(reload(), 0);
  assert_int_equal(gdr_tcp_resolve_spin_threads(8), 3);
  assert_int_equal(gdr_tcp_resolve_spin_threads(2), 2); /* never more than the pool has */
  setenv("GDRNET_TCP_SPIN_THREADS", "0", 1);            /* out of range: named */
  assert_int_not_equal(reload(), 0);
  unsetenv("GDRNET_TCP_SPIN_THREADS");
  setenv("GDRNET_TCP_IO_THREADS", "0", 1); /* out of range: named */
  assert_int_not_equal(reload(), 0);
  unsetenv("GDRNET_TCP_IO_THREADS");
  /* GDRNET_TCP_PROGRESS: auto is TCP_PROGRESS_AUTO; adaptive lets up to the rank's free cores poll (at least 1) */
  {
    const char *pwhy = NULL;
    int cores = gdr_tcp_rank_cores(NULL);
    assert_int_equal(reload(), 0);
    assert_int_equal(gdr_tcp_resolve_progress(&pwhy), TCP_PROGRESS_AUTO);
    setenv("GDRNET_TCP_SPIN_US", "100", 1);
    setenv("GDRNET_TCP_PROGRESS", "adaptive", 1);
    assert_int_equal(reload(), 0);
    assert_int_equal(gdr_tcp_resolve_progress(&pwhy), TCP_PROGRESS_ADAPTIVE);
    assert_string_equal(pwhy, "GDRNET_TCP_PROGRESS");
    assert_int_equal(gdr_tcp_resolve_spin_threads(64), cores - 2 > 1 ? cores - 2 : 1);
    setenv("GDRNET_TCP_PROGRESS", "fixed", 1);
    assert_int_equal(reload(), 0);
    assert_int_equal(gdr_tcp_resolve_progress(NULL), TCP_PROGRESS_FIXED);
    assert_int_equal(gdr_tcp_resolve_spin_threads(64), 1);
    setenv("GDRNET_TCP_PROGRESS", "sometimes", 1); /* not a mode: named */
    assert_int_not_equal(reload(), 0);
    unsetenv("GDRNET_TCP_PROGRESS");
    unsetenv("GDRNET_TCP_SPIN_US");
  }
  assert_int_equal(reload(), 0);
}

/* GDRNET_TCP_PROXY_IO auto is on whatever the cores; GDRNET_TCP_HELP_BYTES and _AFTER_US auto follow whether the I/O
 * threads poll (set here by GDRNET_TCP_SPIN_US, so that the test does not depend on the host's cores), and a value set
 * wins. */
static void test_help_autos(void **state) {
  const char *why = NULL;
  (void)state;
  setenv("GDRNET_TCP_SPIN_US", "150", 1);
  assert_int_equal(reload(), 0);
  assert_int_equal(gdr_tcp_resolve_proxy_io(), 1);
  assert_int_equal(gdr_tcp_resolve_help_bytes(&why), 128u << 10);
  assert_string_equal(why, "auto: the I/O threads poll");
  assert_int_equal(gdr_tcp_resolve_help_after_ns(), 50000u); /* only the late ones */
  setenv("GDRNET_TCP_SPIN_US", "0", 1);
  assert_int_equal(reload(), 0);
  assert_int_equal(gdr_tcp_resolve_proxy_io(), 1);
  assert_int_equal(gdr_tcp_resolve_help_bytes(&why), 512u << 10);
  assert_string_equal(why, "auto: the I/O threads sleep");
  assert_int_equal(gdr_tcp_resolve_help_after_ns(), 0u); /* at once */
  setenv("GDRNET_TCP_HELP_BYTES", "64K", 1);
  setenv("GDRNET_TCP_PROXY_IO", "0", 1);
  setenv("GDRNET_TCP_HELP_AFTER_US", "7", 1);
  assert_int_equal(reload(), 0);
  assert_int_equal(gdr_tcp_resolve_help_after_ns(), 7000u);
  assert_int_equal(gdr_tcp_resolve_proxy_io(), 0);
  assert_int_equal(gdr_tcp_resolve_help_bytes(&why), 64u << 10);
  assert_string_equal(why, "GDRNET_TCP_HELP_BYTES");
  setenv("GDRNET_TCP_HELP_BYTES", "1K", 1); /* below the smallest pass: named */
  assert_int_not_equal(reload(), 0);
  unsetenv("GDRNET_TCP_HELP_BYTES");
  unsetenv("GDRNET_TCP_HELP_AFTER_US");
  unsetenv("GDRNET_TCP_PROXY_IO");
  unsetenv("GDRNET_TCP_SPIN_US");
  assert_int_equal(reload(), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_size),
      cmocka_unit_test(test_help_autos),
      cmocka_unit_test(test_bounded_threads),
      cmocka_unit_test(test_proxy_io),
      cmocka_unit_test(test_help_bytes),
      cmocka_unit_test(test_help_after),
      cmocka_unit_test(test_idle_cpu),
      cmocka_unit_test(test_spin_cap),
      cmocka_unit_test(test_adaptive_idle_stops),
      cmocka_unit_test(test_adaptive_no_lost_wakeup),
      cmocka_unit_test(test_adaptive_window_then_wake),
      cmocka_unit_test(test_share_serves_sleeper),
      cmocka_unit_test(test_wake_latency),
      cmocka_unit_test(test_steal),
      cmocka_unit_test(test_steal_step),
      cmocka_unit_test(test_steal_chunks),
      cmocka_unit_test(test_help_late),
      cmocka_unit_test(test_fork_child),
      cmocka_unit_test(test_fork_child_closes_inherited),
  };
  /* the host's own steal would change the chunks of the tests' messages on a busy VM: none, but in test_steal_chunks */
  gdr_tcp_pool_set_steal_source(UT_NO_STAT, 0);
  return cmocka_run_group_tests_name("unit_tcp_pool", tests, NULL, NULL);
}
