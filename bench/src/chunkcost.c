/* chunkcost: CPU time and wake-ups per NCCL-sized message of the plugin's TCP transport, sender and receiver.
 *
 * Two processes (fork) on this host stream --iters messages of --size bytes (NCCL's Simple step is 512 KiB, its
 * p2p chunk 128 KiB) over --channels connections, each keeping --window requests in flight (NCCL_STEPS = 8), the
 * way NCCL's proxy thread drives a net plugin: one thread posts isend/irecv into a ring of slots and tests the
 * oldest outstanding request of each connection, round-robin over the connections, spinning (sched_yield() after a
 * round in which nothing progressed, as NCCL's proxy thread does). With --bidir each
 * process sends and receives at once (a 2-rank ring all_reduce: both directions loaded).
 *
 *   --mode plugin  the plugin (--plugin SO, ncclNet v8)
 *   --mode raw     the floor: one loopback TCP connection per channel and direction, a thread per connection
 *                  doing blocking write()/read() of whole messages (what the kernel alone costs per byte)
 *
 * Measured over the streaming loop only (connect/teardown excluded), per process, from getrusage: CPU of the
 * whole process (RUSAGE_SELF: every thread), of the driving thread (RUSAGE_THREAD: NCCL's proxy thread's share),
 * and the context switches of the whole process (voluntary: a thread slept and was woken = a wake-up;
 * involuntary: preempted), and the system calls of the driving thread and of the others (the kernel's
 * raw_syscalls:sys_enter tracepoint through perf_event_open: root or perf_event_paranoid <= -1; -1 where it cannot be
 * opened; the driver's own sched_yield() calls are not counted) with the test() calls made. Printed per message (the messages a side sent, or received when it only
 * receives).
 * A benchmark helper (bench/tcp-chunk builds and runs it), not a test.
 *
 * usage: chunkcost --mode plugin|raw [--plugin SO] [--size S] [--window W] [--iters N] [--warmup N]
 *                  [--channels C] [--bidir]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gdrnet/net_v8.h"
#define BENCH_PROG "chunkcost"
#include "bench_common.h"

#define MAX_CH 16
#define MAX_W 32

static ncclNet_v8_t *net;

/* Threads of this process now (/proc/self/task), and of them the plugin's (named gdr-tcp-*) in *plugin. */
static int count_threads(int *plugin) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;
  *plugin = 0;
  if (d == NULL) return -1;
  while ((e = readdir(d)) != NULL) {
    char path[300], name[64] = "";
    FILE *f;
    if (e->d_name[0] == '.') continue;
    n++;
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    if ((f = fopen(path, "r")) != NULL) {
      if (fgets(name, sizeof(name), f) != NULL && strncmp(name, "gdr-tcp-", 8) == 0) (*plugin)++;
      fclose(f);
    }
  }
  closedir(d);
  return n;
}

static double tv_us(struct timeval t) { return (double)t.tv_sec * 1e6 + (double)t.tv_usec; }

struct usage {
  double self_u, self_s, thr_u, thr_s, vcsw, ivcsw;
};

static void usage_now(struct usage *u) {
  struct rusage s, t;
  if (getrusage(RUSAGE_SELF, &s) != 0 || getrusage(RUSAGE_THREAD, &t) != 0) die("getrusage: %s", strerror(errno));
  u->self_u = tv_us(s.ru_utime);
  u->self_s = tv_us(s.ru_stime);
  u->thr_u = tv_us(t.ru_utime);
  u->thr_s = tv_us(t.ru_stime);
  u->vcsw = (double)s.ru_nvcsw;
  u->ivcsw = (double)s.ru_nivcsw;
}

/* System calls counted by the kernel (tracepoint raw_syscalls:sys_enter through perf_event_open): of this thread
 * alone (inherit 0: the proxy thread), and of this thread and every thread it creates after the call (inherit 1:
 * the plugin's helpers are created at connect). -1 where the tracepoint cannot be opened (no tracefs, not root). */
static int sys_counter(int inherit) {
  static const char *ids[] = {"/sys/kernel/tracing/events/raw_syscalls/sys_enter/id",
                              "/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id"};
  long id = -1;
  for (unsigned i = 0; i < sizeof ids / sizeof ids[0] && id < 0; i++) {
    FILE *f = fopen(ids[i], "r");
    if (f == NULL) continue;
    if (fscanf(f, "%ld", &id) != 1) id = -1;
    fclose(f);
  }
  if (id < 0) return -1;
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_TRACEPOINT;
  a.config = (unsigned long long)id;
  a.inherit = inherit ? 1 : 0;
  a.exclude_kernel = 0;
  return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static double counter_read(int fd) {
  uint64_t v = 0;
  if (fd < 0) return -1;
  if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) return -1;
  return (double)v;
}

static long n_tests, n_yields; /* test() calls and the driver's own sched_yield() calls in the streaming loop */

/* ------------------------------------------------------------------------------------------------ plugin -- */

struct chan {
  void *s, *r, *l, *smh, *rmh;
  char *sbuf, *rbuf;
  void *sreq[MAX_W], *rreq[MAX_W];
  long s_posted, s_done, r_posted, r_done;
};

static void plugin_setup(const char *so, int ctl, int nch, size_t size, int w, struct chan *ch) {
  void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!dl) die("dlopen: %s", dlerror());
  net = (ncclNet_v8_t *)dlsym(dl, "ncclNetPlugin_v8");
  if (!net) die("no ncclNetPlugin_v8 in %s", so);
  if (net->init(logger) != ncclSuccess) die("init failed");
  for (int c = 0; c < nch; c++) {
    char mine[NCCL_NET_HANDLE_MAXSIZE], peer[NCCL_NET_HANDLE_MAXSIZE];
    ncclNetDeviceHandle_v8_t *dh = NULL;
    struct chan *k = &ch[c];
    memset(k, 0, sizeof *k);
    if (net->listen(0, mine, &k->l) != ncclSuccess) die("listen failed");
    xfer_all(ctl, mine, sizeof mine, 1);
    xfer_all(ctl, peer, sizeof peer, 0);
    while (k->s == NULL || k->r == NULL) {
      if (k->s == NULL && net->connect(0, peer, &k->s, &dh) != ncclSuccess) die("connect failed");
      if (k->r == NULL && net->accept(k->l, &k->r, &dh) != ncclSuccess) die("accept failed");
    }
    size_t bytes = size * (size_t)w;
    if (posix_memalign((void **)&k->sbuf, 4096, bytes) != 0 || posix_memalign((void **)&k->rbuf, 4096, bytes) != 0)
      die("out of memory");
    memset(k->sbuf, role, bytes);
    memset(k->rbuf, 0, bytes);
    if (net->regMr(k->s, k->sbuf, bytes, NCCL_PTR_HOST, &k->smh) != ncclSuccess ||
        net->regMr(k->r, k->rbuf, bytes, NCCL_PTR_HOST, &k->rmh) != ncclSuccess)
      die("regMr failed");
  }
}

static void plugin_teardown(int nch, struct chan *ch) {
  for (int c = 0; c < nch; c++) {
    struct chan *k = &ch[c];
    if (net->deregMr(k->s, k->smh) != ncclSuccess || net->deregMr(k->r, k->rmh) != ncclSuccess ||
        net->closeSend(k->s) != ncclSuccess || net->closeRecv(k->r) != ncclSuccess ||
        net->closeListen(k->l) != ncclSuccess)
      die("close failed");
    free(k->sbuf);
    free(k->rbuf);
  }
}

/* One proxy thread: keeps w sends and/or w receives in flight per channel until n of each completed. */
static void plugin_stream(int nch, struct chan *ch, size_t size, int w, long n, int do_send, int do_recv) {
  int isz = (int)size, tag = 0;
  for (int c = 0; c < nch; c++) ch[c].s_posted = ch[c].s_done = ch[c].r_posted = ch[c].r_done = 0;
  for (;;) {
    int busy = 0, progressed = 0;
    for (int c = 0; c < nch; c++) {
      struct chan *k = &ch[c];
      if (do_recv) {
        while (k->r_posted < n && k->r_posted - k->r_done < w) {
          int slot = (int)(k->r_posted % w);
          void *d = k->rbuf + (size_t)slot * size, *req = NULL;
          if (net->irecv(k->r, 1, &d, &isz, &tag, &k->rmh, &req) != ncclSuccess) die("irecv failed");
          if (req == NULL) break;
          k->rreq[slot] = req;
          k->r_posted++;
          progressed = 1;
        }
        if (k->r_done < k->r_posted) {
          int done = 0, got = 0;
          n_tests++;
          if (net->test(k->rreq[k->r_done % w], &done, &got) != ncclSuccess) die("test (recv) failed");
          if (done) {
            if (got != isz) die("received %d bytes, expected %d", got, isz);
            k->r_done++;
            progressed = 1;
          }
        }
        busy |= k->r_done < n;
      }
      if (do_send) {
        while (k->s_posted < n && k->s_posted - k->s_done < w) {
          int slot = (int)(k->s_posted % w);
          void *req = NULL;
          if (net->isend(k->s, k->sbuf + (size_t)slot * size, isz, tag, k->smh, &req) != ncclSuccess)
            die("isend failed");
          if (req == NULL) break;
          k->sreq[slot] = req;
          k->s_posted++;
          progressed = 1;
        }
        if (k->s_done < k->s_posted) {
          int done = 0;
          n_tests++;
          if (net->test(k->sreq[k->s_done % w], &done, NULL) != ncclSuccess) die("test (send) failed");
          if (done) {
            k->s_done++;
            progressed = 1;
          }
        }
        busy |= k->s_done < n;
      }
    }
    if (!busy) break;
    if (!progressed) { /* as NCCL's proxy thread when no request progressed */
      n_yields++;
      sched_yield();
    }
  }
}

/* --------------------------------------------------------------------------------------------------- raw -- */

struct rawjob {
  int fd, is_write;
  char *buf;
  size_t size;
  long n;
};

static void *raw_thread(void *arg) {
  struct rawjob *j = arg;
  for (long i = 0; i < j->n; i++) xfer_all(j->fd, j->buf, j->size, j->is_write);
  return NULL;
}

/* A connects, B listens; the port goes over ctl. */
static int raw_conn(int ctl, int listener_side) {
  int fd, one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (listener_side) {
    socklen_t al = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0)
      die("listen: %s", strerror(errno));
    xfer_all(ctl, &a.sin_port, sizeof a.sin_port, 1);
    fd = accept(l, NULL, NULL);
    if (fd < 0) die("accept: %s", strerror(errno));
    close(l);
  } else {
    xfer_all(ctl, &a.sin_port, sizeof a.sin_port, 0);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) die("connect: %s", strerror(errno));
  }
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY: %s", strerror(errno));
  return fd;
}

/* ---------------------------------------------------------------------------------------------------- main -- */

int main(int argc, char **argv) {
  const char *mode = NULL, *plugin = NULL;
  long size = 512 * 1024, iters = 2000, warmup = 200, window = 8, nch = 1;
  int bidir = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--bidir")) {
      bidir = 1;
      continue;
    }
    if (!v) die("%s needs a value", a);
    if (!strcmp(a, "--mode"))
      mode = v;
    else if (!strcmp(a, "--plugin"))
      plugin = v;
    else if (!strcmp(a, "--size"))
      size = atol(v);
    else if (!strcmp(a, "--window"))
      window = atol(v);
    else if (!strcmp(a, "--iters"))
      iters = atol(v);
    else if (!strcmp(a, "--warmup"))
      warmup = atol(v);
    else if (!strcmp(a, "--channels"))
      nch = atol(v);
    else
      die("unknown option %s", a);
    i++;
  }
  if (!mode || (strcmp(mode, "raw") && strcmp(mode, "plugin")) || (!strcmp(mode, "plugin") && !plugin) || size < 1 ||
      size > (1L << 30) || window < 1 || window > MAX_W || iters < 1 || warmup < 0 || nch < 1 || nch > MAX_CH)
    die("usage: chunkcost --mode plugin|raw [--plugin SO] [--size S] [--window W<=%d] [--iters N] [--warmup N] "
        "[--channels C<=%d] [--bidir]",
        MAX_W, MAX_CH);
  int is_plugin = !strcmp(mode, "plugin");

  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) die("socketpair: %s", strerror(errno));
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) die("fork: %s", strerror(errno));
  role = child == 0 ? 'B' : 'A';
  int ctl = child == 0 ? sp[1] : sp[0];
  close(child == 0 ? sp[0] : sp[1]);
  int do_send = bidir || role == 'A', do_recv = bidir || role == 'B';

  int sc_all = sys_counter(1), sc_me = sys_counter(0); /* before the helpers exist */
  static struct chan ch[MAX_CH];
  int rfd[2][MAX_CH]; /* raw: [0] A->B, [1] B->A */
  char *rbuf = NULL;
  if (is_plugin) {
    plugin_setup(plugin, ctl, (int)nch, (size_t)size, (int)window, ch);
  } else {
    for (int c = 0; c < nch; c++) {
      rfd[0][c] = raw_conn(ctl, role == 'B');
      rfd[1][c] = bidir ? raw_conn(ctl, role == 'A') : -1;
    }
    if (posix_memalign((void **)&rbuf, 4096, (size_t)size * 2 * (size_t)nch) != 0) die("out of memory");
    memset(rbuf, role, (size_t)size * 2 * (size_t)nch);
  }

  char go = 'g';
  struct usage u0, u1;
  double sc0_all = -1, sc0_me = -1, sc1_all = -1, sc1_me = -1;
  uint64_t t0 = 0, t1 = 0;
  int nthreads = 0, nplugin = 0;            /* at the end of the measured loop */
  for (int phase = 0; phase < 2; phase++) { /* warm-up, then the measured run */
    long n = phase == 0 ? warmup : iters;
    if (n == 0) continue;
    if (role == 'A')
      xfer_all(ctl, &go, 1, 0);
    else
      xfer_all(ctl, &go, 1, 1);
    usage_now(&u0);
    sc0_all = counter_read(sc_all);
    sc0_me = counter_read(sc_me);
    n_tests = n_yields = 0;
    t0 = now_ns();
    if (is_plugin) {
      plugin_stream((int)nch, ch, (size_t)size, (int)window, n, do_send, do_recv);
    } else {
      pthread_t th[2 * MAX_CH];
      struct rawjob job[2 * MAX_CH];
      int nt = 0;
      for (int c = 0; c < nch; c++) {
        for (int d = 0; d < (bidir ? 2 : 1); d++) {
          int mine_writes = (d == 0) == (role == 'A');
          job[nt] = (struct rawjob){rfd[d][c], mine_writes, rbuf + (size_t)size * (size_t)(2 * c + d), (size_t)size, n};
          if (pthread_create(&th[nt], NULL, raw_thread, &job[nt]) != 0) die("pthread_create failed");
          nt++;
        }
      }
      for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    }
    t1 = now_ns();
    nthreads = count_threads(&nplugin);
    sc1_all = counter_read(sc_all);
    sc1_me = counter_read(sc_me);
    usage_now(&u1);
  }
  /* both sides done before anyone closes */
  if (role == 'A')
    xfer_all(ctl, &go, 1, 0);
  else
    xfer_all(ctl, &go, 1, 1);

  double msgs = (double)iters * (double)nch; /* per side: messages it sent (or received, when it only receives) */
  double wall = (double)(t1 - t0) / 1e9;
  int have_sc = sc0_all >= 0 && sc1_all >= 0 && sc0_me >= 0 && sc1_me >= 0;
  double res[13] = {wall,
                    (u1.thr_u - u0.thr_u) / msgs,
                    (u1.thr_s - u0.thr_s) / msgs,
                    ((u1.self_u - u0.self_u) - (u1.thr_u - u0.thr_u)) / msgs,
                    ((u1.self_s - u0.self_s) - (u1.thr_s - u0.thr_s)) / msgs,
                    (u1.vcsw - u0.vcsw) / msgs,
                    (u1.ivcsw - u0.ivcsw) / msgs,
                    wall * 1e6 / msgs,
                    have_sc ? (sc1_me - sc0_me - (double)n_yields) / msgs
                            : -1, /* the plugin's, not the driver's yields */
                    have_sc ? ((sc1_all - sc0_all) - (sc1_me - sc0_me)) / msgs : -1,
                    (double)n_tests / msgs,
                    (double)nthreads,
                    (double)nplugin};
  if (role == 'B') xfer_all(ctl, res, sizeof res, 1);
  if (is_plugin) {
    plugin_teardown((int)nch, ch);
  } else {
    for (int c = 0; c < nch; c++) {
      close(rfd[0][c]);
      if (rfd[1][c] >= 0) close(rfd[1][c]);
    }
    free(rbuf);
  }
  if (role == 'B') _exit(0);
  double peer[13];
  xfer_all(ctl, peer, sizeof peer, 0);
  int st = 0;
  if (waitpid(child, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) die("process B failed");
  for (int s = 0; s < 2; s++) {
    const double *r = s == 0 ? res : peer;
    const char *what = bidir ? (s == 0 ? "A" : "B") : (s == 0 ? "send" : "recv");
    /* one direction's bytes per wall second (bidir: each direction carries this much) */
    printf("chunkcost mode=%s side=%s size=%ld window=%ld channels=%ld bidir=%d msgs=%.0f wall_s=%.4f gbps=%.3f "
           "us_per_msg=%.2f proxy_user_us=%.2f proxy_sys_us=%.2f helper_user_us=%.2f helper_sys_us=%.2f vcsw=%.3f "
           "ivcsw=%.3f proxy_sys_calls=%.2f helper_sys_calls=%.2f tests=%.2f threads=%.0f plugin_threads=%.0f\n",
           mode, what, size, window, nch, bidir, msgs, r[0], msgs * (double)size / r[0] / 1e9, r[7], r[1], r[2], r[3],
           r[4], r[5], r[6], r[8], r[9], r[10], r[11], r[12]);
  }
  return 0;
}
