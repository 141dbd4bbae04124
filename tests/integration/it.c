/* The integration tests' harness (see it.h). */
#include "it.h"

#include "gdrnet/net.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef GDRNET_IT_DEFAULT_PLUGIN
#define GDRNET_IT_DEFAULT_PLUGIN "libnccl-net-gdr.so"
#endif

static const char *g_name = "it";
static int g_child;
/* atomic: a failing test thread (it_fail) and the watchdog's signal handler may both walk them */
static pid_t g_children[64];
static int g_nchildren;
static char g_step[256] = "starting";
static int g_timeout_s;

int it_is_child(void) { return g_child; }

static void vlog(const char *tag, const char *fmt, va_list ap) {
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fprintf(stderr, "[%s %s %d] %s%s\n", g_name, g_child ? "child" : "parent", (int)getpid(), tag, msg);
  fflush(stderr);
}

void it_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("", fmt, ap);
  va_end(ap);
}

static void kill_children(void) {
  for (int i = 0; i < __atomic_load_n(&g_nchildren, __ATOMIC_ACQUIRE); i++) {
    pid_t p = __atomic_exchange_n(&g_children[i], 0, __ATOMIC_ACQ_REL); /* each child killed and reaped once */
    if (p > 0) {
      (void)kill(p, SIGKILL);
      (void)waitpid(p, NULL, 0);
    }
  }
}

void it_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL %s [%s %d] %s:%d: %s: %s (while: %s)\n", g_name, g_child ? "child" : "parent", (int)getpid(),
          file, line, cond, msg, g_step);
  fflush(stderr);
  if (g_child) _exit(1);
  kill_children();
  exit(1);
}

void it_step(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_step, sizeof g_step, fmt, ap);
  va_end(ap);
}

static void on_alarm(int sig) {
  (void)sig;
  /* async-signal-safe output only */
  char buf[512];
  int n = snprintf(buf, sizeof buf, "FAIL %s [%s %d] watchdog: no progress within %d s (while: %s)\n", g_name,
                   g_child ? "child" : "parent", (int)getpid(), g_timeout_s, g_step);
  if (n > 0) (void)!write(2, buf, (size_t)n);
  if (!g_child)
    for (int i = 0; i < __atomic_load_n(&g_nchildren, __ATOMIC_ACQUIRE); i++) {
      pid_t p = __atomic_load_n(&g_children[i], __ATOMIC_ACQUIRE);
      if (p > 0) (void)kill(p, SIGKILL);
    }
  _exit(3);
}

double it_env_double(const char *name, double dflt) {
  const char *e = getenv(name);
  if (e == NULL || *e == '\0') return dflt;
  char *end = NULL;
  double v = strtod(e, &end);
  if (end == e) return dflt;
  return v;
}

static void mkdir_p(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p == '/') {
      *p = '\0';
      (void)mkdir(buf, 0700);
      *p = '/';
    }
  }
  (void)mkdir(buf, 0700);
}

void it_init(const char *name, int timeout_s) {
  g_name = name;
  g_timeout_s = (int)it_env_double("GNIT_TIMEOUT_S", timeout_s);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  alarm((unsigned)g_timeout_s);
  const char *vd = getenv("VEMU_DIR");
  if (vd != NULL && *vd != '\0') mkdir_p(vd);
  it_log("plugin %s, GDRNET_TRANSPORT=%s, table ncclNetPlugin_v%d", it_plugin_path(),
         getenv("GDRNET_TRANSPORT") ? getenv("GDRNET_TRANSPORT") : "(unset)", it_abi());
}

const char *it_plugin_path(void) {
  const char *e = getenv("GDRNET_TEST_PLUGIN");
  if (e != NULL && *e != '\0') return e;
  return GDRNET_IT_DEFAULT_PLUGIN;
}

void it_fork(it_child_t *c, int (*fn)(int fd, void *arg), void *arg) {
  int sv[2];
  IT_CHECK(gn_boot_socketpair(sv) == 0, "socketpair: %s", strerror(errno));
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  IT_CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    g_child = 1;
    __atomic_store_n(&g_nchildren, 0, __ATOMIC_RELEASE);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(1);
    close(sv[0]);
    alarm((unsigned)g_timeout_s);
    int rc = fn(sv[1], arg);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  close(sv[1]);
  c->pid = pid;
  c->fd = sv[0];
  if (g_nchildren < 64) {
    __atomic_store_n(&g_children[g_nchildren], pid, __ATOMIC_RELEASE);
    __atomic_store_n(&g_nchildren, g_nchildren + 1, __ATOMIC_RELEASE);
  }
}

static void forget_child(pid_t pid) {
  for (int i = 0; i < __atomic_load_n(&g_nchildren, __ATOMIC_ACQUIRE); i++) {
    pid_t p = pid;
    (void)__atomic_compare_exchange_n(&g_children[i], &p, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
}

int it_reap(it_child_t *c, double timeout_s) {
  uint64_t dl = gn_deadline_ns(timeout_s);
  int st = 0;
  /* pidfd: wait without polling where the kernel has it */
  int pfd = (int)syscall(SYS_pidfd_open, c->pid, 0);
  for (;;) {
    pid_t r = waitpid(c->pid, &st, WNOHANG);
    IT_CHECK(r >= 0, "waitpid(%d): %s", (int)c->pid, strerror(errno));
    if (r == c->pid) break;
    IT_CHECK(!gn_expired(dl), "child %d still running after %.0f s", (int)c->pid, timeout_s);
    if (pfd >= 0) {
      struct pollfd p = {.fd = pfd, .events = POLLIN};
      (void)poll(&p, 1, 100);
    } else {
      (void)poll(NULL, 0, 5);
    }
  }
  if (pfd >= 0) close(pfd);
  forget_child(c->pid);
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  return st;
}

void it_join(it_child_t *c, double timeout_s) {
  pid_t pid = c->pid;
  int st = it_reap(c, timeout_s);
  IT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d %s %d (its FAIL line above says why)", (int)pid,
           WIFEXITED(st) ? "exited with status" : "died of signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

int it_abi(void) {
  int v = (int)it_env_double("GDRNET_TEST_ABI", 8);
  IT_CHECK(v >= 6 && v <= 12, "GDRNET_TEST_ABI=%d: the plugin's tables are v6..v12", v);
  return v;
}

void it_load(it_plugin_t *ip) {
  char err[1024];
  memset(ip, 0, sizeof *ip);
  it_step("loading %s (ncclNetPlugin_v%d)", it_plugin_path(), it_abi());
  IT_CHECK(gn_plugin_open_version(&ip->p, it_plugin_path(), it_abi(), (int)it_env_double("GNIT_TRAFFIC_CLASS", -1),
                                  err, sizeof err) == 0,
           "%s", err);
  ip->net = ip->p.net;
  IT_CHECK(ip->net->name != NULL && strcmp(ip->net->name, "GDR") == 0, "the table's name is \"%s\", not \"GDR\"",
           ip->net->name ? ip->net->name : "(null)");
  gn_log_capture(1);
  it_step("init");
  IT_OK(ip->net->init(gn_logger));
  IT_OK(ip->net->devices(&ip->ndev));
  IT_CHECK(ip->ndev >= 1 && ip->ndev <= IT_MAX_DEVS, "devices() gave %d", ip->ndev);
  for (int d = 0; d < ip->ndev; d++) {
    memset(&ip->props[d], 0, sizeof ip->props[d]);
    IT_OK(ip->net->getProperties(d, &ip->props[d]));
  }
  ip->dev = 0;
  int fuse = (int)it_env_double("GNIT_FUSE", 0);
  if (fuse > 1) {
    char sym[32];
    int n = 0;
    ncclNetVDeviceProps_v12_t vp; /* v9..v11's {ndevs; devs[4]} is its prefix */
    IT_CHECK(it_abi() >= 9, "GNIT_FUSE needs a v9+ table (makeVDevice), not v%d", it_abi());
    IT_CHECK(fuse <= ip->ndev && fuse <= (it_abi() >= 12 ? 8 : 4), "GNIT_FUSE=%d: %d device(s)", fuse, ip->ndev);
    snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", it_abi());
    const void *t = dlsym(ip->p.dl, sym);
    IT_CHECK(t != NULL, "%s", sym);
    memset(&vp, 0, sizeof vp);
    vp.ndevs = fuse;
    for (int d = 0; d < fuse; d++) vp.devs[d] = d;
    IT_OK(it_abi() >= 12 ? ((const ncclNet_v12_t *)t)->makeVDevice(&ip->dev, &vp)
                         : ((const ncclNet_v9_t *)t)->makeVDevice(&ip->dev, (ncclNetVDeviceProps_v9_t *)&vp));
    IT_OK(ip->net->devices(&n));
    IT_CHECK(ip->dev == ip->ndev && n == ip->ndev + 1, "fused device %d, %d device(s)", ip->dev, n);
    it_log("connections on the fused device [%d] over the first %d devices", ip->dev, fuse);
  }
  it_step("running");
}

void it_unload(it_plugin_t *ip) {
  if (ip->p.version >= 10) {
    /* every event the plugin started was stopped, by the rules (test() saw every request done) */
    gn_prof_stats_t st;
    gn_compat_prof_stats(&st);
    it_log("profiler events through ncclNetPlugin_v%d: %ld started, %ld stopped", ip->p.version, st.starts,
           st.stops);
    IT_CHECK(st.bad == 0, "the plugin misused the profiler callback %ld time(s) (NULL or foreign phandle, eHandle "
             "not NULL at start, stop of an eHandle start did not set)", st.bad);
    IT_CHECK(st.starts == st.stops, "%ld profiler events started, %ld stopped", st.starts, st.stops);
  }
  IT_CHECK(gn_plugin_close(&ip->p) == 0, "finalize or dlclose failed");
  ip->net = NULL;
}

void it_conn_open(it_plugin_t *ip, int dev, int fd, size_t len, it_conn_t *c) {
  memset(c, 0, sizeof *c);
  c->net = ip->net;
  c->len = len;
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip->net, it_env_double("GNIT_CONNECT_S", 60));
  it_step("connecting on dev %d", dev);
  IT_GN(&ctx, gn_establish(&ctx, dev, fd, &c->s, &c->r));
  IT_CHECK(posix_memalign((void **)&c->sbuf, 4096, len ? len : 1) == 0, "out of memory");
  IT_CHECK(posix_memalign((void **)&c->rbuf, 4096, len ? len : 1) == 0, "out of memory");
  memset(c->sbuf, 0, len);
  memset(c->rbuf, IT_CANARY, len);
  IT_OK(ip->net->regMr(c->s, c->sbuf, len, NCCL_PTR_HOST, &c->smh));
  IT_OK(ip->net->regMr(c->r, c->rbuf, len, NCCL_PTR_HOST, &c->rmh));
  IT_CHECK(c->smh != NULL && c->rmh != NULL, "regMr succeeded with a NULL mhandle");
  it_step("running");
}

void it_conn_close(it_conn_t *c) {
  it_step("closing");
  IT_OK(c->net->deregMr(c->s, c->smh));
  IT_OK(c->net->deregMr(c->r, c->rmh));
  IT_OK(c->net->closeSend(c->s));
  IT_OK(c->net->closeRecv(c->r));
  free(c->sbuf);
  free(c->rbuf);
  memset(c, 0, sizeof *c);
}

void it_send_pattern(gn_ctx_t *ctx, it_conn_t *c, size_t off, int size, uint64_t iter, uint64_t salt) {
  IT_CHECK(off + (size_t)size <= c->len, "test bug: send range");
  gn_pattern_fill(c->sbuf + off, (size_t)size, gn_pattern_seed((uint64_t)size, iter, salt));
  IT_GN(ctx, gn_send_sync(ctx, c->s, c->sbuf + off, size, 0, c->smh));
}

void it_verify(const unsigned char *buf, int cap, int got, int expect, uint64_t iter, uint64_t salt, const char *what) {
  IT_CHECK(got == expect, "%s: test() reported %d bytes received, the peer sent %d (posted %d)", what, got, expect, cap);
  uint64_t seed = gn_pattern_seed((uint64_t)expect, iter, salt);
  size_t bad = gn_pattern_check(buf, (size_t)expect, seed);
  IT_CHECK(bad == (size_t)expect, "%s: %d-byte message %llu: byte %zu is 0x%02x, expected 0x%02x", what, expect,
           (unsigned long long)iter, bad, buf[bad], gn_pattern_byte(seed, bad));
  /* past the message: the canary, 8 bytes at a time (a byte loop over MiBs of canary dominated sanitizer runs) */
  int i = expect;
  for (; i + 8 <= cap; i += 8) {
    uint64_t w;
    memcpy(&w, buf + i, 8);
    if (w != 0x0101010101010101ull * IT_CANARY) break;
  }
  for (; i < cap; i++)
    IT_CHECK(buf[i] == IT_CANARY, "%s: %d-byte message into a %d-byte receive: byte %d past the message was written",
             what, expect, cap, i);
}

void it_recv_pattern(gn_ctx_t *ctx, it_conn_t *c, size_t off, int cap, int expect, uint64_t iter, uint64_t salt) {
  IT_CHECK(off + (size_t)cap <= c->len, "test bug: recv range");
  memset(c->rbuf + off, IT_CANARY, (size_t)cap);
  int got = -1;
  IT_GN(ctx, gn_recv_sync(ctx, c->r, c->rbuf + off, cap, 0, c->rmh, &got));
  it_verify(c->rbuf + off, cap, got, expect, iter, salt, "receive");
}

struct two_sides {
  int (*side)(int fd, int parent);
};

static int two_sides_child(int fd, void *arg) { return ((struct two_sides *)arg)->side(fd, 0); }

int it_two_sides(const char *name, int timeout_s, int (*side)(int fd, int parent), double join_s) {
  struct two_sides ts = {side};
  it_child_t c;
  it_init(name, timeout_s);
  it_fork(&c, two_sides_child, &ts);
  side(c.fd, 1);
  it_join(&c, join_s);
  it_log("PASS");
  return 0;
}

/* Threads that belong to the verbs library rather than to the plugin: the emulator's agent thread (it
 * plays the NIC: one per process, for good, in a -z nodelete library), or a real provider's. Start them
 * before the baseline by opening and closing every device once through the same library the plugin
 * will load; it stays loaded. Only for the RDMA transport. */
static void *noop_thread(void *arg) { return arg; }

/* A sanitizer runtime's own thread: ThreadSanitizer starts a background thread at the process's first
 * pthread_create, for good. One thread created and joined before the baseline starts it. */
static void settle_runtime_threads(void) {
  pthread_t t;
  IT_CHECK(pthread_create(&t, NULL, noop_thread, NULL) == 0, "pthread_create failed");
  IT_CHECK(pthread_join(t, NULL) == 0, "pthread_join failed");
}

void it_settle_verbs_threads(void) {
  settle_runtime_threads();
  const char *tr = getenv("GDRNET_TRANSPORT");
  if (tr == NULL || strcmp(tr, "rdma") != 0) return;
  const char *lib = getenv("GDRNET_IBVERBS_LIB");
  void *h = dlopen(lib && *lib ? lib : "libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  IT_CHECK(h != NULL, "dlopen(%s): %s", lib && *lib ? lib : "libibverbs.so.1", dlerror());
  void **(*get_list)(int *) = (void **(*)(int *))dlsym(h, "ibv_get_device_list");
  void (*free_list)(void **) = (void (*)(void **))dlsym(h, "ibv_free_device_list");
  void *(*open_dev)(void *) = (void *(*)(void *))dlsym(h, "ibv_open_device");
  int (*close_dev)(void *) = (int (*)(void *))dlsym(h, "ibv_close_device");
  IT_CHECK(get_list && free_list && open_dev && close_dev, "the verbs library lacks the device calls");
  int n = 0;
  void **list = get_list(&n);
  IT_CHECK(list != NULL && n > 0, "the verbs library shows no device");
  for (int i = 0; i < n; i++) {
    void *ctx = open_dev(list[i]);
    IT_CHECK(ctx != NULL, "ibv_open_device failed");
    IT_CHECK(close_dev(ctx) == 0, "ibv_close_device failed");
  }
  free_list(list);
  it_log("verbs library threads started before the baseline: %d thread(s) now", gn_thread_count());
}

int it_count_sockets(int (*pred)(int fd, void *arg), void *arg) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int n = 0;
  IT_CHECK(d != NULL, "opendir(/proc/self/fd): %s", strerror(errno));
  while ((e = readdir(d)) != NULL) {
    char path[300], link[64];
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(path, link, sizeof link - 1);
    if (k <= 0) continue;
    link[k] = '\0';
    if (strncmp(link, "socket:", 7) != 0) continue;
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    struct sockaddr_storage ss;
    len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
      continue;
    if (pred(fd, arg)) n++;
  }
  closedir(d);
  return n;
}
