/* cpumsg: a lock-step driver of the plugin's ncclNet v8 ABI for bench/cpu-per-msg.
 *
 * Two processes (fork): the parent sends, the child receives. They move --n messages of --size bytes
 * in batches of --window, in lock step over a socketpair, so that every test() call finds its request
 * already complete (after a sleep of --settle-us) and the instruction count does not depend on how
 * long anyone spun: that is what makes callgrind's counts repeatable.
 *
 *   receiver: post W irecvs                                       -> 'p'
 *   sender:   (after a sleep) post W isends                        -> 's'
 *   receiver: (after a sleep) test each until done                 -> 'r'
 *   sender:   test each send until done                            -> 'd'
 * (a test() that says "not done" is followed by a sleep before the next one).
 *
 * An isend/irecv that returned a NULL request or a test() that said "not done" is counted as a retry
 * and printed at the end (retries make the count depend on timing; the script reports them).
 *
 * Not a test and not a benchmark of time: a benchmark-only helper, built by bench/cpu-per-msg with cc.
 * --recv-size R: the receiver posts R-byte receives (R >= S) for S-byte messages, as NCCL does (it posts whole
 * steps: 65536 bytes for LL, and sends 16 bytes into them for an 8-byte all_reduce). Default: S.
 *
 * usage: cpumsg --plugin SO --n N --size S [--recv-size R] [--window W] [--settle-us U] [--roles FILE]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gdrnet/net_v8.h"
#define BENCH_PROG "cpumsg"
#include "bench_common.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#define MAXW 32
#define CALIB 32

static ncclNet_v8_t *net;
static int ctl = -1;
static long settle_us = 200;
static unsigned long retries, post_retries;
static long cur_msg;
static int debug;



static void put(char c) {
  if (write(ctl, &c, 1) != 1) die("control write: %s", strerror(errno));
}

static void get(char want) {
  char c = 0;
  ssize_t n;
  do n = read(ctl, &c, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1) die("control read: peer gone");
  if (c != want) die("control: got '%c', expected '%c'", c, want);
}

static void nap(void) { usleep((useconds_t)settle_us); }

static void wait_done(void *req, int *size) {
  for (;;) {
    int done = 0;
    if (net->test(req, &done, size) != ncclSuccess) die("test() failed");
    if (done) return;
    retries++;
    if (debug) fprintf(stderr, "cpumsg[%c] test retry at message %ld\n", role, cur_msg);
    nap();
  }
}

/* The calibration probes run on threads of their own (joined at once), so that callgrind
 * (--separate-threads=yes) reports their cost, per library, apart from the message loop's: the
 * script divides it by the number of probes to get the cost of one call that does not complete. */
struct probe {
  int kind; /* 't': test(req) until done or CALIB times; 'i': isend until non-NULL or CALIB times */
  void *req, *comm, *data, *mh;
  int size;
  long empty; /* calls that did not complete */
  int done;
};

__attribute__((noinline)) static int calib_test(void *req) {
  int done = 0, size = 0;
  if (net->test(req, &done, &size) != ncclSuccess) die("test() failed (calibration)");
  return done;
}

__attribute__((noinline)) static void *calib_isend(void *comm, void *data, int size, void *mh) {
  void *req = NULL;
  if (net->isend(comm, data, size, 0, mh, &req) != ncclSuccess) die("isend failed (calibration)");
  return req;
}

/* A finished probe thread stays parked until probes_release(): valgrind reuses the id of a thread that
 * has exited, and callgrind would then add the next probe's counts to the same per-thread file. */
static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;
static int park_open;
static int probe_done_flag;
static pthread_t probe_threads[4];
static int nprobe_threads;

static void *probe_main(void *arg) {
  struct probe *p = arg;
  CALLGRIND_START_INSTRUMENTATION;
  for (int k = 0; k < CALIB && !p->done; k++) {
    if (p->kind == 't') {
      p->done = calib_test(p->req);
    } else {
      p->req = calib_isend(p->comm, p->data, p->size, p->mh);
      p->done = p->req != NULL;
    }
    if (!p->done) p->empty++;
  }
  CALLGRIND_STOP_INSTRUMENTATION;
  pthread_mutex_lock(&park_mu);
  probe_done_flag = 1;
  pthread_cond_broadcast(&park_cv);
  while (!park_open) pthread_cond_wait(&park_cv, &park_mu);
  pthread_mutex_unlock(&park_mu);
  return NULL;
}

static void probe_run(struct probe *p) {
  pthread_mutex_lock(&park_mu);
  probe_done_flag = 0;
  pthread_mutex_unlock(&park_mu);
  if (nprobe_threads >= 4 || pthread_create(&probe_threads[nprobe_threads++], NULL, probe_main, p) != 0)
    die("probe thread");
  pthread_mutex_lock(&park_mu);
  while (!probe_done_flag) pthread_cond_wait(&park_cv, &park_mu);
  pthread_mutex_unlock(&park_mu);
}

static void probes_release(void) {
  pthread_mutex_lock(&park_mu);
  park_open = 1;
  pthread_cond_broadcast(&park_cv);
  pthread_mutex_unlock(&park_mu);
  for (int i = 0; i < nprobe_threads; i++) pthread_join(probe_threads[i], NULL);
}

static void *post_recv(void *comm, void *data, int size, void *mh) {
  void *req = NULL;
  int sizes = size, tags = 0;
  for (;;) {
    if (net->irecv(comm, 1, &data, &sizes, &tags, &mh, &req) != ncclSuccess) die("irecv failed");
    if (req) return req;
    post_retries++;
    if (debug) fprintf(stderr, "cpumsg[%c] irecv retry at message %ld\n", role, cur_msg);
    nap();
  }
}

static void *post_send(void *comm, void *data, int size, void *mh) {
  void *req = NULL;
  for (;;) {
    if (net->isend(comm, data, size, 0, mh, &req) != ncclSuccess) die("isend failed");
    if (req) return req;
    post_retries++;
    if (debug) fprintf(stderr, "cpumsg[%c] isend retry at message %ld\n", role, cur_msg);
    nap();
  }
}


int main(int argc, char **argv) {
  const char *plugin = NULL, *roles = NULL;
  long n = 1000, size = 8, window = 1, rsize = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) die("%s needs a value", a);
    if (!strcmp(a, "--plugin")) plugin = v;
    else if (!strcmp(a, "--n")) n = atol(v);
    else if (!strcmp(a, "--size")) size = atol(v);
    else if (!strcmp(a, "--recv-size")) rsize = atol(v);
    else if (!strcmp(a, "--window")) window = atol(v);
    else if (!strcmp(a, "--settle-us")) settle_us = atol(v);
    else if (!strcmp(a, "--roles")) roles = v;
    else die("unknown option %s", a);
    i++;
  }
  if (rsize < 0) rsize = size;
  if (!plugin || n < 1 || size < 0 || size > (1 << 20) || rsize < size || rsize > (1 << 24) || window < 1 ||
      window > MAXW || n % window)
    die("usage: cpumsg --plugin SO --n N --size S [--recv-size R >= S] [--window W (1..32, divides N)] "
        "[--settle-us U] [--roles FILE]");

  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) die("socketpair: %s", strerror(errno));
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) die("fork: %s", strerror(errno));
  role = child == 0 ? 'R' : 'S';
  ctl = child == 0 ? sp[1] : sp[0];
  close(child == 0 ? sp[0] : sp[1]);
  if (roles && child == 0) {
    FILE *f = fopen(roles, "a");
    if (!f) die("%s: %s", roles, strerror(errno));
    fprintf(f, "receiver %d\n", (int)getpid());
    fclose(f);
  } else if (roles) {
    FILE *f = fopen(roles, "a");
    if (!f) die("%s: %s", roles, strerror(errno));
    fprintf(f, "sender %d\n", (int)getpid());
    fclose(f);
  }

  void *dl = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  if (!dl) die("dlopen: %s", dlerror());
  net = (ncclNet_v8_t *)dlsym(dl, "ncclNetPlugin_v8");
  if (!net) die("no ncclNetPlugin_v8 in %s", plugin);
  if (net->init(logger) != ncclSuccess) die("init failed");
  int ndev = 0;
  if (net->devices(&ndev) != ncclSuccess || ndev < 1) die("no devices");

  size_t stride = (size_t)(rsize ? rsize : 1);
  size_t bytes = stride * (size_t)window;
  bytes = (bytes + 4095) & ~(size_t)4095;
  char *buf = NULL;
  if (posix_memalign((void **)&buf, 4096, bytes) != 0) die("out of memory");
  memset(buf, role, bytes);
  void *mh = NULL, *comm = NULL, *lcomm = NULL;
  ncclNetDeviceHandle_v8_t *dh = NULL;
  char handle[NCCL_NET_HANDLE_MAXSIZE];

  if (role == 'R') {
    if (net->listen(0, handle, &lcomm) != ncclSuccess) die("listen failed");
    if (write(ctl, handle, sizeof handle) != (ssize_t)sizeof handle) die("handle write");
    while (comm == NULL) {
      if (net->accept(lcomm, &comm, &dh) != ncclSuccess) die("accept failed");
      if (comm == NULL) usleep(2000);
    }
  } else {
    size_t got = 0;
    while (got < sizeof handle) {
      ssize_t r = read(ctl, handle + got, sizeof handle - got);
      if (r <= 0) die("handle read");
      got += (size_t)r;
    }
    while (comm == NULL) {
      if (net->connect(0, handle, &comm, &dh) != ncclSuccess) die("connect failed");
      if (comm == NULL) usleep(2000);
    }
  }
  if (net->regMr(comm, buf, bytes, NCCL_PTR_HOST, &mh) != ncclSuccess) die("regMr failed");
  put('c');
  get('c');
  debug = getenv("CPUMSG_DEBUG") != NULL;

  /* Calibration: the cost of calls that do not complete, measured where they cannot complete.
   *  receiver: test() on a posted receive the sender has not sent yet (CALIB times);
   *  sender:   test() on a send while the receiver process is stopped (SIGSTOP), and isend() with no
   *            receive posted by the peer (returns NULL on a receiver-driven transport; a transport that
   *            sends without one delivers it, and the receiver absorbs it). */
  int isz = (int)size, rsz = (int)rsize;
  long calib_test_empty = 0, calib_isend_null = 0;
  /* Run under callgrind with --instr-atstart=no: only the calibration probes and the message loop are
   * counted, not init/connect/registration/teardown (whose retry loops depend on timing). */
  if (role == 'R') {
    void *r = post_recv(comm, buf, rsz, mh);
    struct probe pt = {.kind = 't', .req = r};
    probe_run(&pt);
    if (pt.done) die("calibration: a receive completed before anything was sent");
    calib_test_empty = pt.empty;
    put('k');
    get('K');
    wait_done(r, NULL);
    put('k');
    char c = 0;
    if (read(ctl, &c, 1) != 1) die("control read: peer gone");
    if (c == 'J') { /* the sender's calibration isend went out: absorb it */
      r = post_recv(comm, buf, rsz, mh);
      wait_done(r, NULL);
    } else if (c != 'j') die("control: got '%c', expected 'j' or 'J'", c);
    put('k');
  } else {
    get('k');
    nap();
    void *r = post_send(comm, buf, isz, mh);
    if (kill(child, SIGSTOP) != 0) die("SIGSTOP: %s", strerror(errno));
    usleep(20000);
    struct probe pt = {.kind = 't', .req = r};
    probe_run(&pt);
    calib_test_empty = pt.empty;
    if (kill(child, SIGCONT) != 0) die("SIGCONT: %s", strerror(errno));
    if (!pt.done) wait_done(r, NULL);
    put('K');
    get('k');
    struct probe pi = {.kind = 'i', .comm = comm, .data = buf, .size = isz, .mh = mh};
    probe_run(&pi);
    calib_isend_null = pi.empty;
    put(pi.req ? 'J' : 'j');
    if (pi.req) wait_done(pi.req, NULL);
    get('k');
  }
  probes_release();
  unsigned long setup_retries = retries + post_retries;
  retries = post_retries = 0;
  CALLGRIND_START_INSTRUMENTATION;

  void *req[MAXW];
  for (long i = 0; i < n; i += window) {
    if (role == 'R') {
      for (long w = 0; w < window; w++) {
        cur_msg = i + w;
        req[w] = post_recv(comm, buf + (size_t)w * stride, rsz, mh);
      }
      put('p');
      get('s');
      nap();
      for (long w = 0; w < window; w++) {
        int got = -1;
        cur_msg = i + w;
        wait_done(req[w], &got);
        if (got != isz) die("message %ld: received %d bytes, %d sent", i + w, got, isz);
      }
      put('r');
      get('d');
    } else {
      get('p');
      nap();
      for (long w = 0; w < window; w++) {
        cur_msg = i + w;
        req[w] = post_send(comm, buf + (size_t)w * stride, isz, mh);
      }
      put('s');
      get('r'); /* the receiver has its data: the sender's completions are due by now */
      for (long w = 0; w < window; w++) {
        cur_msg = i + w;
        wait_done(req[w], NULL);
      }
      put('d');
    }
  }
  unsigned long loop_retries = retries;
  CALLGRIND_STOP_INSTRUMENTATION;

  put('e');
  get('e');
  if (net->deregMr(comm, mh) != ncclSuccess) die("deregMr failed");
  if (role == 'R') {
    if (net->closeRecv(comm) != ncclSuccess) die("closeRecv failed");
    if (net->closeListen(lcomm) != ncclSuccess) die("closeListen failed");
  } else {
    if (net->closeSend(comm) != ncclSuccess) die("closeSend failed");
  }
  free(buf);
  printf("cpumsg %s pid=%d n=%ld size=%ld recv_size=%ld window=%ld test_retries=%lu post_retries=%lu setup_retries=%lu "
         "calib_test_empty=%ld calib_isend_null=%ld\n",
         role == 'S' ? "sender" : "receiver", (int)getpid(), n, size, rsize, window, loop_retries, post_retries,
         setup_retries, calib_test_empty, calib_isend_null);
  fflush(stdout);
  if (role == 'S') {
    int st = 0;
    if (waitpid(child, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) die("receiver failed");
  }
  return 0;
}
