/* idle: what an idle communicator costs (the bound: under 1 % of a core per process).
 *
 * Two processes (A and B, forked) load the plugin with dlopen as NCCL does (ncclNetPlugin_v8), open --comms
 * connections each way, move --warm messages of --size bytes on each in lock step (so the helpers have run and
 * are in their idle state, as after a training step), then make no call for --idle seconds, as NCCL's proxy makes
 * none when no operation is posted. With --pending 1 a receive is posted on every connection before the window and
 * its message sent only after it (NCCL's proxy posts the next step's receives ahead: a connection that expects
 * traffic), and nobody calls test() meanwhile. Over that window each process reads every thread's time on the CPU from
 * /proc/self/task/<tid>/schedstat (nanoseconds) and prints, per process, the threads, the CPU time, the share of a
 * core, and the threads that spent any of it, by name:
 *   idle A threads 13 cpu_ms 0.412 core_pct 0.041 window_s 1.000 | gdr-tcp-rx/0 0.101 ...
 * A benchmark (it prints numbers), not a test: bench/idle-cpu builds and runs it.
 * usage: idle PLUGIN.so [--comms N] [--size B] [--warm N] [--idle S] [--pending 0|1] */
#define BENCH_PROG "idle"
#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "bench_common.h"

static ncclNet_v8_t *net;

#define MAXT 512
struct tcpu {
  int tid;
  char name[32];
  uint64_t ns;
};

/* every thread of this process and its time on the CPU so far; returns how many */
static int threads_cpu(struct tcpu *t) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;
  if (d == NULL) die("opendir /proc/self/task: %s", strerror(errno));
  while ((e = readdir(d)) != NULL && n < MAXT) {
    char path[300];
    FILE *f;
    unsigned long long ns = 0;
    if (e->d_name[0] == '.') continue;
    t[n].tid = atoi(e->d_name);
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) continue; /* the thread ended */
    if (fscanf(f, "%llu", &ns) != 1) ns = 0;
    fclose(f);
    t[n].ns = ns;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    f = fopen(path, "r");
    t[n].name[0] = 0;
    if (f != NULL) {
      if (fgets(t[n].name, sizeof t[n].name, f) == NULL) t[n].name[0] = 0;
      fclose(f);
      t[n].name[strcspn(t[n].name, "\n")] = 0;
    }
    n++;
  }
  closedir(d);
  return n;
}

static void wait_done(void *req, int *got) {
  int done = 0;
  uint64_t t0 = now_ns();
  while (!done) {
    if (net->test(req, &done, got) != ncclSuccess) die("test failed");
    if (now_ns() - t0 > 60ull * 1000000000ull) die("no completion within 60 s");
  }
}

static void post_recvs(struct pconn *c, int ncomms, int size, void **rr) {
  for (int i = 0; i < ncomms; i++) {
    void *d = c[i].rbuf, *mh = c[i].rmh;
    int sz = size, tag = 0;
    rr[i] = NULL;
    while (rr[i] == NULL)
      if (net->irecv(c[i].r, 1, &d, &sz, &tag, &mh, &rr[i]) != ncclSuccess) die("irecv failed");
  }
}

/* one message each way on every connection (the receives already posted when pre) */
static void exchange(struct pconn *c, int ncomms, int size, void **pre) {
  void *rr[64], *sr[64];
  if (pre == NULL)
    post_recvs(c, ncomms, size, rr);
  else
    memcpy(rr, pre, sizeof(void *) * (size_t)ncomms);
  for (int i = 0; i < ncomms; i++) {
    sr[i] = NULL;
    while (sr[i] == NULL)
      if (net->isend(c[i].s, c[i].sbuf, size, 0, c[i].smh, &sr[i]) != ncclSuccess) die("isend failed");
  }
  for (int i = 0; i < ncomms; i++) {
    int got;
    wait_done(sr[i], &got);
    wait_done(rr[i], &got);
  }
}

static void side(const char *so, int ctl, int ncomms, int size, int warm, double idle_s, int pending) {
  struct pconn c[64];
  void *pre[64];
  struct tcpu t0[MAXT], t1[MAXT];
  char sync = 0;
  void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!dl) die("dlopen: %s", dlerror());
  net = (ncclNet_v8_t *)dlsym(dl, "ncclNetPlugin_v8");
  if (!net) die("no ncclNetPlugin_v8 in %s", so);
  if (net->init(logger) != ncclSuccess) die("init failed");
  for (int i = 0; i < ncomms; i++) pconn_open(net, ctl, (size_t)size, (size_t)size, &c[i]);
  for (int k = 0; k < warm; k++) exchange(c, ncomms, size, NULL);
  if (pending) post_recvs(c, ncomms, size, pre);
  xfer_all(ctl, &sync, 1, 1); /* both sides are done with the traffic */
  xfer_all(ctl, &sync, 1, 0);
  int n0 = threads_cpu(t0);
  uint64_t w0 = now_ns();
  struct timespec ts = {(time_t)idle_s, (long)((idle_s - (double)(time_t)idle_s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  int n1 = threads_cpu(t1);
  double win = (double)(now_ns() - w0) / 1e9;
  uint64_t total = 0;
  char line[4096];
  size_t o = 0;
  for (int i = 0; i < n1; i++) {
    uint64_t before = 0, d;
    for (int j = 0; j < n0; j++)
      if (t0[j].tid == t1[i].tid) before = t0[j].ns;
    d = t1[i].ns - before;
    total += d;
    if (d > 0 && o < sizeof line - 64)
      o += (size_t)snprintf(line + o, sizeof line - o, " %s %.3f", t1[i].name, (double)d / 1e6);
  }
  line[o] = 0;
  if (pending) exchange(c, ncomms, size, pre); /* the posted receives' messages, after the window */
  printf("idle %c threads %d cpu_ms %.3f core_pct %.3f window_s %.3f |%s\n", role, n1, (double)total / 1e6,
         (double)total / 1e9 / win * 100.0, win, line);
  fflush(stdout);
  xfer_all(ctl, &sync, 1, 1); /* both measured before either closes */
  xfer_all(ctl, &sync, 1, 0);
  for (int i = 0; i < ncomms; i++)
    if (net->deregMr(c[i].s, c[i].smh) != ncclSuccess || net->deregMr(c[i].r, c[i].rmh) != ncclSuccess ||
        net->closeSend(c[i].s) != ncclSuccess || net->closeRecv(c[i].r) != ncclSuccess ||
        net->closeListen(c[i].l) != ncclSuccess)
      die("close failed");
}

int main(int argc, char **argv) {
  int ncomms = 1, size = 1 << 20, warm = 50, pending = 0, sp[2], st = 0;
  double idle_s = 1.0;
  if (argc < 2) die("usage: idle PLUGIN.so [--comms N] [--size B] [--warm N] [--idle S]");
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--comms"))
      ncomms = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--size"))
      size = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--warm"))
      warm = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--idle"))
      idle_s = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--pending"))
      pending = atoi(argv[i + 1]);
    else
      die("unknown option %s (--comms, --size, --warm, --idle, --pending)", argv[i]);
  }
  if (ncomms < 1 || ncomms > 64 || size < 1 || warm < 0 || idle_s <= 0) die("bad option value");
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) die("socketpair: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    role = 'B';
    close(sp[0]);
    side(argv[1], sp[1], ncomms, size, warm, idle_s, pending);
    _exit(0);
  }
  role = 'A';
  close(sp[1]);
  side(argv[1], sp[0], ncomms, size, warm, idle_s, pending);
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) die("process B failed");
  return 0;
}
