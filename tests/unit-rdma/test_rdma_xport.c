/* The RDMA transport end to end over the verbs emulator, below the ABI: two processes (a receiver
 * that listens and accepts, a sender that connects) drive gdr_transport_rdma exactly as the core
 * does, every byte checked.  Each case runs in fresh processes with its own VEMU_DIR.
 *
 *   test_rdma_xport            every case
 *   test_rdma_xport NAME...    only those cases (names below)
 * XT_VERBOSE=1 prints the plugin's INFO lines.
 *
 * Expected failures are asserted, not just "the child exited non-zero": each side reports to the parent (a pipe)
 * which call failed, with which ncclResult_t, and when (CLOCK_MONOTONIC, shared by the processes of one host).
 * The parent checks the call's result against the case's expectation and its time against a bound, measured
 * either from the side's own start (a local fault: it must be noticed) or from the moment the peer process
 * ended (the peer failed or vanished: this side must learn it). The results the transport owes:
 *   - the connection fails (a work completion error, a fatal QP or port event, the peer gone or failed):
 *     ncclRemoteError, as NCCL documents it ("a network error or a remote process exiting prematurely");
 *   - a peer that presents the listener's nonce but then a malformed RDMA handshake: accept fails with
 *     ncclRemoteError (and closes the socket: the peer sees the hang-up);
 *   - misuse by the caller (a send larger than the receive): ncclInvalidUsage.
 * XT_BOUND_S (5 s) is generous for what takes well under 2 s here (VEMU_TIME_SCALE shrinks the QP timers), and
 * far below the 30 s a hang would take to trip the cases' own deadlines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "transport.h"
#include "rdma/rdma.h"

#ifndef XT_VEMU_LIB
#error "XT_VEMU_LIB (path of the emulator's libibverbs.so.1) must be defined"
#endif

static const char *who = "parent";
static const struct gdr_transport *T = &gdr_transport_rdma;

/* Bound on noticing a failure (see the top). */
#define XT_BOUND_S 5.0

/* What a child reports to the parent when it ends (one record on its report pipe). */
enum xphase { XP_NONE = 0, XP_ACCEPT, XP_CONNECT, XP_ISEND, XP_IRECV, XP_TEST, XP_RAW };
static const char *const xphase_name[] = {"none", "accept", "connect", "isend", "irecv", "test", "raw peer"};
struct xreport {
  int ok;                         /* 1: the side ran to its end */
  int phase;                      /* XP_*: the call that failed, when !ok */
  int res;                        /* its ncclResult_t */
  int msg;                        /* message number, -1 if none */
  double t_start, t_fail, t_end;  /* CLOCK_MONOTONIC seconds: side started (setup done), call failed, exiting */
  uint64_t recoveries, fallbacks; /* the transport's counters over this process's devices when it reported */
};
static struct xreport g_rep;
static int g_rep_fd = -1;

static double now_s(void);
/* The transport's counters into the report (before fini, which forgets the devices). */
static void count_now(void) {
  g_rep.recoveries = g_rep.fallbacks = 0;
  for (int i = 0; i < gdr_rdma.ndevs; i++) {
    g_rep.recoveries += atomic_load(&gdr_rdma.devs[i].ctr.recoveries);
    g_rep.fallbacks += atomic_load(&gdr_rdma.devs[i].ctr.fallbacks);
  }
}
static void report_send(void) {
  g_rep.t_end = now_s();
  if (g_rep_fd >= 0 && write(g_rep_fd, &g_rep, sizeof(g_rep)) != (ssize_t)sizeof(g_rep))
    fprintf(stderr, "cannot write the report: %s\n", strerror(errno));
}
/* An expected kind of failure happened: report the call, its result and the time, and exit 1. */
static void report_fail(int phase, ncclResult_t r, int msg) {
  g_rep.ok = 0;
  g_rep.phase = phase;
  g_rep.res = (int)r;
  g_rep.msg = msg;
  g_rep.t_fail = now_s();
  report_send();
  _exit(1);
}

#define CK(cond)                                                                                                       \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "[%s] %s:%d: check failed: %s\n", who, __FILE__, __LINE__, #cond);                               \
      _exit(2);                                                                                                        \
    }                                                                                                                  \
  } while (0)
#define CKR(call)                                                                                                      \
  do {                                                                                                                 \
    ncclResult_t r_ = (call);                                                                                          \
    if (r_ != ncclSuccess) {                                                                                           \
      fprintf(stderr, "[%s] %s:%d: %s returned %d\n", who, __FILE__, __LINE__, #call, (int)r_);                        \
      _exit(3);                                                                                                        \
    }                                                                                                                  \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level > NCCL_LOG_WARN && !getenv("XT_VERBOSE")) return;
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[%s %d] %s %s\n", who, (int)getpid(), level == NCCL_LOG_WARN ? "WARN" : "INFO", msg);
}

/* ----------------------------------------------------------------------------------- a test case -- */

#define MAXCOMMS 8

struct xcase;
typedef void (*body_fn)(const struct xcase *x, void **comms, int *devs, int ncomms);

struct xcase {
  const char *name;
  const char *env[12];     /* both sides */
  const char *env_send[4]; /* sender only */
  const char *env_recv[4]; /* receiver only */
  body_fn send, recv;
  void (*raw_send)(struct gdr_handle *h); /* instead of connect + send: speaks to the listener itself */
  int ncomms;                             /* 1 if 0 */
  int alldevs;                            /* comm i on device i % ndev */
  struct xexpect {
    int fail;         /* 1: this side must fail... */
    int phases;       /* ...in one of these calls (bits 1 << XP_*)... */
    ncclResult_t res; /* ...with this result... */
    int from_peer;    /* ...within XT_BOUND_S of the peer's end (1) or of this side's start (0) */
  } expect_send, expect_recv;
  int timeout_s;
  int min_recoveries; /* recovered on the same device at least this often (both sides' counters), never on TCP */
  /* stream parameters */
  const uint32_t *sizes;
  int nsizes;
  int iters;
  int inflight;
};

static void put_env(const char *const *kv, int n) {
  for (int i = 0; i < n && kv[i]; i++) putenv((char *)kv[i]);
}

/* Threads of this process (the transport's async thread must be gone once its comms are closed). */
static int thread_count(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* thread_count() once it is `want`, or what it is after a bounded wait: a thread pthread_join returned for can
 * still be listed in /proc/self/task until its exit is reaped (seen under load). A thread left running stays. */
static int thread_count_settled(int want) {
  int n = thread_count();
  for (double t0 = now_s(); n != want && now_s() - t0 < 5; n = thread_count()) sched_yield();
  return n;
}

static int setup_process(const struct xcase *x, int sender, const char *vemu_dir) {
  static char dirvar[512];
  snprintf(dirvar, sizeof(dirvar), "VEMU_DIR=%s", vemu_dir);
  putenv(dirvar);
  putenv((char *)"GDRNET_IBVERBS_LIB=" XT_VEMU_LIB);
  putenv((char *)"GDRNET_SOCKET_IFNAME=lo");
  if (!getenv("VEMU_DEVICES")) putenv((char *)"VEMU_DEVICES=vemu0:roce");
  put_env(x->env, 12);
  put_env(sender ? x->env_send : x->env_recv, 4);
  gdr_log_init(logger);
  gdr_params_reset();
  CKR(gdr_params_load());
  int ndev = 0;
  char why[512] = "";
  CKR(T->init(&ndev, why, sizeof(why)));
  if (ndev < 1) fprintf(stderr, "[%s] no device: %s\n", who, why);
  CK(ndev >= 1);
  return ndev;
}

static void run_receiver(const struct xcase *x, int fd, const char *vemu_dir) {
  who = "recv";
  int ndev = setup_process(x, 0, vemu_dir);
  int threads0 = thread_count();
  int n = (x->ncomms > 0 && x->ncomms <= MAXCOMMS) ? x->ncomms : 1;
  void *lc[MAXCOMMS], *rc[MAXCOMMS];
  int devs[MAXCOMMS];
  struct gdr_handle h[MAXCOMMS];
  for (int i = 0; i < n; i++) {
    devs[i] = x->alldevs ? i % ndev : 0;
    memset(&h[i], 0, sizeof(h[i]));
    struct gdr_conn_opts o = gdr_conn_opts_one(devs[i]);
    CKR(T->listen(devs[i], &o, &h[i], &lc[i]));
  }
  size_t hbytes = sizeof(h[0]) * (size_t)(n & (2 * MAXCOMMS - 1));
  CK(write(fd, h, hbytes) == (ssize_t)hbytes);
  g_rep.t_start = now_s();
  for (int i = 0; i < n; i++) {
    rc[i] = NULL;
    double t0 = now_s();
    while (rc[i] == NULL) {
      ncclResult_t r = T->accept(lc[i], &rc[i]);
      if (r != ncclSuccess && x->expect_recv.fail) {
        CK(rc[i] == NULL); /* no comm on failure */
        CKR(T->close_listen(lc[i]));
        report_fail(XP_ACCEPT, r, -1);
      }
      CKR(r);
      CK(now_s() - t0 < 30);
    }
    CKR(T->close_listen(lc[i]));
  }
  CK(thread_count() > threads0); /* the device's async event thread runs while comms are open */
  x->recv(x, rc, devs, n);
  for (int i = 0; i < n; i++) CKR(T->close_recv(rc[i]));
  CK(thread_count_settled(threads0) == threads0); /* ... and is joined with the last one */
  count_now();
  T->quiesce();
  T->fini();
  g_rep.ok = 1;
  report_send();
  exit(0); /* not _exit: LeakSanitizer checks the child at exit */
}

static void run_sender(const struct xcase *x, int fd, const char *vemu_dir) {
  who = "send";
  int ndev = setup_process(x, 1, vemu_dir);
  int threads0 = thread_count();
  int n = (x->ncomms > 0 && x->ncomms <= MAXCOMMS) ? x->ncomms : 1;
  void *sc[MAXCOMMS];
  int devs[MAXCOMMS];
  struct gdr_handle h[MAXCOMMS];
  size_t got = 0;
  while (got < sizeof(h[0]) * (size_t)n) {
    ssize_t r = read(fd, (char *)h + got, sizeof(h[0]) * (size_t)n - got);
    CK(r > 0);
    got += (size_t)r;
  }
  g_rep.t_start = now_s();
  if (x->raw_send) {
    x->raw_send(&h[0]);
    T->fini();
    g_rep.ok = 1;
    report_send();
    exit(0);
  }
  for (int i = 0; i < n; i++) {
    devs[i] = x->alldevs ? i % ndev : 0;
    sc[i] = NULL;
    double t0 = now_s();
    while (sc[i] == NULL) {
      struct gdr_conn_opts o = gdr_conn_opts_one(devs[i]);
      ncclResult_t r = T->connect(devs[i], &o, &h[i], &sc[i]);
      if (r != ncclSuccess && x->expect_send.fail) report_fail(XP_CONNECT, r, -1);
      CKR(r);
      CK(now_s() - t0 < 30);
    }
  }
  CK(thread_count() > threads0);
  x->send(x, sc, devs, n);
  for (int i = 0; i < n; i++) CKR(T->close_send(sc[i]));
  CK(thread_count_settled(threads0) == threads0);
  count_now();
  T->quiesce();
  T->fini();
  g_rep.ok = 1;
  report_send();
  exit(0); /* not _exit: LeakSanitizer checks the child at exit */
}

static int wait_child(pid_t pid, double deadline, int *status) {
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return 0;
    if (now_s() > deadline) {
      /* a hang: show where every thread of the child is before killing it (when gdb is there) */
      if (access("/usr/bin/gdb", X_OK) == 0) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "timeout 60 /usr/bin/gdb -p %d -batch -ex 'thread apply all bt' >&2 2>/dev/null",
                 (int)pid);
        if (system(cmd) != 0) fprintf(stderr, "(gdb could not attach to %d)\n", (int)pid);
      }
      kill(pid, SIGKILL);
      waitpid(pid, status, 0);
      return -1;
    }
    usleep(2000);
  }
}

/* Reads a child's report (it has exited: the record, if any, is in the pipe). 0 if there was one. */
static int read_report(int fd, struct xreport *r) {
  memset(r, 0, sizeof(*r));
  ssize_t n = read(fd, r, sizeof(*r));
  return n == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* One side's outcome against the case's expectation; prints what was wrong. 1 if as expected. */
static int side_as_expected(const char *name, const char *side, int st, int have, const struct xreport *r,
                            const struct xexpect *e, const struct xreport *peer, int peer_have) {
  if (!have) {
    fprintf(stderr, "[%s] %s exited (status 0x%x) without a report: a check failed or it crashed (see above)\n", name,
            side, st);
    return 0;
  }
  if (!e->fail) {
    if (r->ok && WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;
    fprintf(stderr, "[%s] %s failed: %s returned %d, status 0x%x\n", name, side, xphase_name[r->phase], r->res, st);
    return 0;
  }
  if (r->ok) {
    fprintf(stderr, "[%s] %s succeeded, but it must fail with %d\n", name, side, (int)e->res);
    return 0;
  }
  int good = 1;
  if (!(e->phases & (1 << r->phase)) || r->res != (int)e->res) {
    char want[64] = "";
    for (int p = 0; p <= XP_RAW; p++)
      if (e->phases & (1 << p))
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s", want[0] ? "/" : "", xphase_name[p]);
    fprintf(stderr, "[%s] %s: %s returned %d (message %d); expected %s to return %d\n", name, side,
            xphase_name[r->phase], r->res, r->msg, want, (int)e->res);
    good = 0;
  }
  double ref = r->t_start;
  const char *from = "its start";
  if (e->from_peer) {
    if (!peer_have) {
      fprintf(stderr, "[%s] %s: no report from the peer to time the failure against\n", name, side);
      return 0;
    }
    ref = peer->t_end;
    from = "the peer's end";
  }
  double took = r->t_fail - ref;
  fprintf(stderr, "[%s] %s: %s returned %d %.3f s after %s (bound %.1f s)\n", name, side, xphase_name[r->phase], r->res,
          took, from, XT_BOUND_S);
  if (took > XT_BOUND_S) {
    fprintf(stderr, "[%s] %s: the failure took %.3f s to surface, more than %.1f s\n", name, side, took, XT_BOUND_S);
    good = 0;
  }
  return good;
}

static void run_case(const struct xcase *x) {
  char dir[] = "/tmp/gdr-xt-XXXXXX";
  assert_non_null(mkdtemp(dir));
  int sv[2], rp_s[2], rp_r[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(pipe(rp_s), 0);
  assert_int_equal(pipe(rp_r), 0);
  fflush(NULL);
  pid_t pr = fork();
  assert_true(pr >= 0);
  if (pr == 0) {
    close(sv[0]);
    close(rp_r[0]);
    close(rp_s[0]);
    close(rp_s[1]);
    g_rep_fd = rp_r[1];
    run_receiver(x, sv[1], dir);
  }
  pid_t ps = fork();
  assert_true(ps >= 0);
  if (ps == 0) {
    close(sv[1]);
    close(rp_s[0]);
    close(rp_r[0]);
    close(rp_r[1]);
    g_rep_fd = rp_s[1];
    run_sender(x, sv[0], dir);
  }
  close(sv[0]);
  close(sv[1]);
  close(rp_s[1]);
  close(rp_r[1]);
  double deadline = now_s() + (x->timeout_s ? x->timeout_s : 60);
  int st_s = 0, st_r = 0;
  int to_s = wait_child(ps, deadline, &st_s);
  int to_r = wait_child(pr, deadline + 5, &st_r);
  struct xreport rs, rr;
  int have_s = read_report(rp_s[0], &rs) == 0, have_r = read_report(rp_r[0], &rr) == 0;
  close(rp_s[0]);
  close(rp_r[0]);
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
  if (to_s || to_r) fprintf(stderr, "[%s] timed out (sender %d, receiver %d)\n", x->name, to_s, to_r);
  assert_int_equal(to_s, 0);
  assert_int_equal(to_r, 0);
  int ok_s = side_as_expected(x->name, "sender", st_s, have_s, &rs, &x->expect_send, &rr, have_r);
  int ok_r = side_as_expected(x->name, "receiver", st_r, have_r, &rr, &x->expect_recv, &rs, have_s);
  assert_true(ok_s);
  assert_true(ok_r);
  if (x->min_recoveries > 0) {
    /* the path the case names ran: recoveries counted, and none of it moved to TCP instead */
    uint64_t rec = (have_s ? rs.recoveries : 0) + (have_r ? rr.recoveries : 0);
    uint64_t fb = (have_s ? rs.fallbacks : 0) + (have_r ? rr.fallbacks : 0);
    if (rec < (uint64_t)x->min_recoveries || fb != 0)
      fprintf(stderr, "[%s] %llu recovery(ies) (expected at least %d) and %llu move(s) to TCP (expected none)\n",
              x->name, (unsigned long long)rec, x->min_recoveries, (unsigned long long)fb);
    assert_true(have_s && have_r);
    assert_true(rec >= (uint64_t)x->min_recoveries);
    assert_int_equal(fb, 0);
  }
}

/* ------------------------------------------------------------------------------------- helpers -- */

static void pattern(uint8_t *p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    if ((i & 7) == 0) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
    }
    p[i] = (uint8_t)(s >> ((i & 7) * 8));
  }
}

static int pattern_ok(const uint8_t *p, size_t n, uint64_t seed, size_t *bad) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    if ((i & 7) == 0) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
    }
    if (p[i] != (uint8_t)(s >> ((i & 7) * 8))) {
      *bad = i;
      return 0;
    }
  }
  return 1;
}

/* Tests until done; returns the result of test(). */
static ncclResult_t wait_req(void *req, size_t *sizes, double limit_s) {
  double t0 = now_s();
  for (;;) {
    int done = 0;
    ncclResult_t r = T->test(req, &done, sizes);
    if (r != ncclSuccess) return r;
    if (done) return ncclSuccess;
    if (now_s() - t0 > limit_s) {
      fprintf(stderr, "[%s] request %p not done after %.0f s\n", who, req, limit_s);
      _exit(4);
    }
  }
}

#define EXTRA 100 /* receives are larger than the sends: the reported size must be the sent one */
#define CANARY 0xEE

static uint32_t msg_size(const struct xcase *x, int m) { return x->sizes[m % x->nsizes]; }

static size_t max_size(const struct xcase *x) {
  size_t mx = 0;
  for (int i = 0; i < x->nsizes; i++)
    if (x->sizes[i] > mx) mx = x->sizes[i];
  return mx;
}

/* ------------------------------------------------------------------------------- stream bodies -- */

/* Every comm carries iters x nsizes messages, inflight at a time, round-robin over the comms. */
struct stream {
  void *comm;
  uint8_t *buf;
  void *mh;
  size_t slot_len;
  void *req[32];
  int msg[32];
  int posted, completed, total;
};

/* Per comm: `inflight` buffers of the largest size (+EXTRA), one registration. */
static void stream_open(const struct xcase *x, void **comms, int n, int inflight, struct stream *s) {
  for (int c = 0; c < n; c++) {
    memset(&s[c], 0, sizeof(s[c]));
    s[c].comm = comms[c];
    s[c].slot_len = max_size(x) + EXTRA;
    s[c].buf = malloc(s[c].slot_len * (size_t)inflight + 1);
    CK(s[c].buf);
    CKR(T->reg_mr(comms[c], s[c].buf, s[c].slot_len * (size_t)inflight, NCCL_PTR_HOST, &s[c].mh));
    s[c].total = x->iters * x->nsizes;
  }
}

static void stream_close(struct stream *s, int n) {
  for (int c = 0; c < n; c++) {
    CKR(T->dereg_mr(s[c].comm, s[c].mh));
    free(s[c].buf);
  }
}

static void stream_send(const struct xcase *x, void **comms, int *devs, int n) {
  (void)devs;
  int inflight = x->inflight ? x->inflight : 4;
  struct stream s[MAXCOMMS];
  stream_open(x, comms, n, inflight, s);
  double t0 = now_s();
  int left = n;
  while (left) {
    CK(now_s() - t0 < 60);
    for (int c = 0; c < n; c++) {
      struct stream *st = &s[c];
      if (st->completed == st->total) continue;
      /* post */
      if (st->posted < st->total && st->posted - st->completed < inflight) {
        int m = st->posted, k = m % inflight;
        uint8_t *p = st->buf + st->slot_len * (size_t)k;
        uint32_t sz = msg_size(x, m);
        if (st->req[k] == NULL) pattern(p, sz, (uint64_t)m * 31 + (uint64_t)c);
        void *req = NULL;
        CKR(T->isend(st->comm, p, sz, 7, st->mh, &req));
        if (req) {
          st->req[k] = req;
          st->msg[k] = m;
          st->posted++;
        }
      }
      /* complete, in order */
      if (st->completed < st->posted) {
        int k = st->completed % inflight, done = 0;
        size_t sz = 0;
        CKR(T->test(st->req[k], &done, &sz));
        if (done) {
          CK(sz == msg_size(x, st->msg[k]));
          st->req[k] = NULL;
          if (++st->completed == st->total) left--;
        }
      }
    }
  }
  stream_close(s, n);
}

static void stream_recv(const struct xcase *x, void **comms, int *devs, int n) {
  (void)devs;
  int inflight = x->inflight ? x->inflight : 4;
  struct stream s[MAXCOMMS];
  stream_open(x, comms, n, inflight, s);
  double t0 = now_s();
  int left = n;
  while (left) {
    CK(now_s() - t0 < 60);
    for (int c = 0; c < n; c++) {
      struct stream *st = &s[c];
      if (st->completed == st->total) continue;
      if (st->posted < st->total && st->posted - st->completed < inflight) {
        int m = st->posted, k = m % inflight;
        uint8_t *p = st->buf + st->slot_len * (size_t)k;
        if (st->req[k] == NULL) memset(p, CANARY, st->slot_len);
        void *data[1] = {p};
        size_t cap[1] = {msg_size(x, m) + EXTRA};
        int tags[1] = {7};
        void *mhs[1] = {st->mh};
        void *req = NULL;
        CKR(T->irecv(st->comm, 1, data, cap, tags, mhs, &req));
        if (req) {
          st->req[k] = req;
          st->msg[k] = m;
          st->posted++;
        }
      }
      if (st->completed < st->posted) {
        int k = st->completed % inflight, done = 0;
        size_t sz = 0;
        CKR(T->test(st->req[k], &done, &sz));
        if (done) {
          int m = st->msg[k];
          uint32_t want = msg_size(x, m);
          if (sz != want) fprintf(stderr, "[recv] comm %d msg %d: size %zu, sent %u\n", c, m, sz, want);
          CK(sz == want);
          uint8_t *p = st->buf + st->slot_len * (size_t)k;
          size_t bad = 0;
          if (!pattern_ok(p, want, (uint64_t)m * 31 + (uint64_t)c, &bad)) {
            fprintf(stderr, "[recv] comm %d msg %d (%u bytes): wrong byte at %zu\n", c, m, want, bad);
            CK(0);
          }
          for (size_t i = want; i < want + EXTRA; i++) CK(p[i] == CANARY); /* nothing past the sent bytes */
          st->req[k] = NULL;
          if (++st->completed == st->total) left--;
        }
      }
    }
  }
  stream_close(s, n);
}

static const uint32_t sizes_small[] = {0, 1, 7, 127, 128, 129, 255, 256, 383, 1000, 4096, 4097, 65536, 65537};
static const uint32_t sizes_mixed[] = {0, 1, 128, 129, 4095, 65537, 1048576 + 3, 3 * 1048576 + 129, 8u << 20};
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------------------------ grouped receive -- */

#define GROUP_N 3
static const int group_tags[GROUP_N] = {10, 11, 12};
static uint32_t group_size(int m, int i) {
  static const uint32_t s[] = {0, 1, 129, 4096, 70000, 300};
  return s[(m + i * 2) % 6];
}

static void group_send(const struct xcase *x, void **comms, int *devs, int n) {
  (void)devs;
  (void)n;
  void *comm = comms[0];
  size_t len = 80000;
  uint8_t *buf = malloc(len * GROUP_N);
  void *mh;
  CKR(T->reg_mr(comm, buf, len * GROUP_N, NCCL_PTR_HOST, &mh));
  static const int order[GROUP_N] = {2, 0, 1}; /* tags out of order */
  for (int m = 0; m < x->iters; m++) {
    void *req[GROUP_N] = {0};
    for (int j = 0; j < GROUP_N; j++) {
      int i = order[j];
      uint8_t *p = buf + len * (size_t)i;
      pattern(p, group_size(m, i), (uint64_t)m * 8 + (uint64_t)i);
      double t0 = now_s();
      while (req[i] == NULL) {
        CKR(T->isend(comm, p, group_size(m, i), group_tags[i], mh, &req[i]));
        CK(now_s() - t0 < 30);
      }
    }
    for (int i = 0; i < GROUP_N; i++) {
      size_t sz = 0;
      CKR(wait_req(req[i], &sz, 30));
      CK(sz == group_size(m, i));
    }
  }
  CKR(T->dereg_mr(comm, mh));
  free(buf);
}

static void group_recv(const struct xcase *x, void **comms, int *devs, int n) {
  (void)devs;
  (void)n;
  void *comm = comms[0];
  size_t len = 80000;
  uint8_t *buf = malloc(len * GROUP_N);
  void *mh;
  CKR(T->reg_mr(comm, buf, len * GROUP_N, NCCL_PTR_HOST, &mh));
  for (int m = 0; m < x->iters; m++) {
    memset(buf, CANARY, len * GROUP_N);
    void *data[GROUP_N], *mhs[GROUP_N];
    size_t cap[GROUP_N];
    int tags[GROUP_N];
    for (int i = 0; i < GROUP_N; i++) {
      data[i] = buf + len * (size_t)i;
      mhs[i] = mh;
      cap[i] = len;
      tags[i] = group_tags[i];
    }
    void *req = NULL;
    double t0 = now_s();
    while (req == NULL) {
      CKR(T->irecv(comm, GROUP_N, data, cap, tags, mhs, &req));
      CK(now_s() - t0 < 30);
    }
    size_t sz[GROUP_N] = {0};
    CKR(wait_req(req, sz, 30));
    for (int i = 0; i < GROUP_N; i++) {
      CK(sz[i] == group_size(m, i));
      size_t bad;
      CK(pattern_ok(data[i], sz[i], (uint64_t)m * 8 + (uint64_t)i, &bad));
      CK(((uint8_t *)data[i])[sz[i]] == CANARY);
    }
  }
  CKR(T->dereg_mr(comm, mh));
  free(buf);
}

/* ------------------------------------------------------------------------------ size mismatch -- */

static void oversize_send(const struct xcase *x, void **comms, int *devs, int n) {
  (void)x;
  (void)devs;
  (void)n;
  uint8_t *buf = calloc(1, 4096);
  void *mh, *req = NULL;
  CKR(T->reg_mr(comms[0], buf, 4096, NCCL_PTR_HOST, &mh));
  double t0 = now_s();
  ncclResult_t r = ncclSuccess;
  while (req == NULL && r == ncclSuccess) {
    r = T->isend(comms[0], buf, 200, 7, mh, &req);
    CK(now_s() - t0 < XT_BOUND_S); /* the error comes within the bound */
  }
  CK(r == ncclInvalidUsage);
  CK(req == NULL);
  CKR(T->dereg_mr(comms[0], mh));
  free(buf);
}

static void oversize_recv(const struct xcase *x, void **comms, int *devs, int n) {
  (void)x;
  (void)devs;
  (void)n;
  uint8_t *buf = calloc(1, 4096);
  void *mh, *req = NULL;
  CKR(T->reg_mr(comms[0], buf, 4096, NCCL_PTR_HOST, &mh));
  void *data[1] = {buf};
  size_t cap[1] = {100};
  int tags[1] = {7};
  CKR(T->irecv(comms[0], 1, data, cap, tags, &mh, &req));
  CK(req != NULL);
  double t0 = now_s();
  ncclResult_t r;
  int done = 0;
  do {
    r = T->test(req, &done, NULL);
    CK(now_s() - t0 < XT_BOUND_S); /* the error comes within the bound */
  } while (r == ncclSuccess && !done);
  CK(r == ncclInvalidUsage);
  CKR(T->dereg_mr(comms[0], mh));
  free(buf);
}

/* ------------------------------------------------------------------------------------- flush -- */

/* VEMU_GDR_LAZY=1: writes into "device" memory (a DMA-BUF registration, which the emulator takes as
 * device memory) land only at the next RDMA READ on the device.  Without the flush the receiver
 * would read stale bytes: this case fails if iflush does not post its READ. */
#define FLUSH_LEN 65536
#define FLUSH_MSGS 8

static void flush_send(const struct xcase *x, void **comms, int *devs, int n) {
  (void)x;
  (void)devs;
  (void)n;
  uint8_t *buf = malloc(FLUSH_LEN);
  void *mh;
  CKR(T->reg_mr(comms[0], buf, FLUSH_LEN, NCCL_PTR_HOST, &mh));
  for (int m = 0; m < FLUSH_MSGS; m++) {
    pattern(buf, FLUSH_LEN, (uint64_t)m + 1000);
    void *req = NULL;
    double t0 = now_s();
    while (req == NULL) {
      CKR(T->isend(comms[0], buf, FLUSH_LEN, 3, mh, &req));
      CK(now_s() - t0 < 30);
    }
    CKR(wait_req(req, NULL, 30));
  }
  CKR(T->dereg_mr(comms[0], mh));
  free(buf);
}

static void flush_recv(const struct xcase *x, void **comms, int *devs, int n) {
  (void)x;
  (void)devs;
  (void)n;
  long pg = sysconf(_SC_PAGESIZE);
  uint8_t *dev = aligned_alloc((size_t)pg, FLUSH_LEN); /* "device" memory, registered through DMA-BUF */
  uint8_t *host = malloc(FLUSH_LEN);
  void *mh_dev, *mh_host;
  int fd = open("/dev/null", O_RDONLY); /* any open fd: the emulator resolves the DMA-BUF by its iova */
  CK(fd >= 0);
  CKR(T->reg_mr_dmabuf(comms[0], dev, FLUSH_LEN, NCCL_PTR_CUDA, 0, fd, &mh_dev));
  close(fd); /* as NCCL does, right after the registration */
  CKR(T->reg_mr(comms[0], host, FLUSH_LEN, NCCL_PTR_HOST, &mh_host));
  int stale_seen = 0;
  for (int m = 0; m < FLUSH_MSGS; m++) {
    memset(dev, CANARY, FLUSH_LEN);
    void *data[1] = {dev};
    size_t cap[1] = {FLUSH_LEN};
    int tags[1] = {3};
    void *req = NULL;
    double t0 = now_s();
    while (req == NULL) {
      CKR(T->irecv(comms[0], 1, data, cap, tags, &mh_dev, &req));
      CK(now_s() - t0 < 30);
    }
    size_t sz = 0;
    CKR(wait_req(req, &sz, 30));
    CK(sz == FLUSH_LEN);
    size_t bad;
    if (!pattern_ok(dev, FLUSH_LEN, (uint64_t)m + 1000, &bad)) stale_seen++;
    /* a flush on host memory has nothing to wait for */
    int hsz[1] = {FLUSH_LEN};
    void *hdata[1] = {host}, *freq = (void *)1;
    CKR(T->iflush(comms[0], 1, hdata, hsz, &mh_host, &freq));
    CK(freq == NULL);
    /* zero bytes received: nothing to flush either */
    int zsz[1] = {0};
    freq = (void *)1;
    CKR(T->iflush(comms[0], 1, data, zsz, &mh_dev, &freq));
    CK(freq == NULL);
    /* the real flush */
    int fsz[1] = {(int)sz};
    freq = NULL;
    CKR(T->iflush(comms[0], 1, data, fsz, &mh_dev, &freq));
    CK(freq != NULL);
    CKR(wait_req(freq, NULL, 30));
    if (!pattern_ok(dev, FLUSH_LEN, (uint64_t)m + 1000, &bad)) {
      fprintf(stderr, "[recv] message %d wrong at byte %zu after the flush\n", m, bad);
      CK(0);
    }
  }
  /* the emulator really was lazy: without the flush the data was not there */
  if (stale_seen == 0) fprintf(stderr, "[recv] VEMU_GDR_LAZY had no effect: the case proves nothing\n");
  CK(stale_seen == FLUSH_MSGS);
  CKR(T->dereg_mr(comms[0], mh_dev));
  CKR(T->dereg_mr(comms[0], mh_host));
  free(dev);
  free(host);
}

/* ----------------------------------------------------------------------------------- failures -- */

/* Sends until a call fails: reports the failing call (report_fail exits 1); returns if everything went through. */
static void until_error_send(const struct xcase *x, void **comms, int *devs, int n) {
  (void)devs;
  (void)n;
  uint8_t *buf = calloc(1, 65536);
  void *mh;
  CKR(T->reg_mr(comms[0], buf, 65536, NCCL_PTR_HOST, &mh));
  double t0 = now_s();
  for (int m = 0; m < x->iters; m++) {
    void *req = NULL;
    ncclResult_t r = ncclSuccess;
    int phase = XP_ISEND;
    while (req == NULL && r == ncclSuccess) {
      r = T->isend(comms[0], buf, 65536, 7, mh, &req);
      CK(now_s() - t0 < 30);
    }
    if (r == ncclSuccess) phase = XP_TEST;
    while (r == ncclSuccess) {
      int done = 0;
      r = T->test(req, &done, NULL);
      if (done) break;
      CK(now_s() - t0 < 30);
    }
    if (r != ncclSuccess) {
      double t_fail = now_s();
      fprintf(stderr, "[send] message %d: %s failed with %d after %.2f s\n", m, xphase_name[phase], (int)r,
              t_fail - t0);
      /* and it stays failed */
      void *req2 = NULL;
      CK(T->isend(comms[0], buf, 1, 7, mh, &req2) != ncclSuccess);
      CK(req2 == NULL);
      g_rep.t_fail = t_fail;
      report_fail(phase, r, m);
    }
  }
  CKR(T->dereg_mr(comms[0], mh));
  free(buf);
}

static void until_error_recv(const struct xcase *x, void **comms, int *devs, int n) {
  (void)devs;
  (void)n;
  uint8_t *buf = calloc(1, 65536);
  void *mh;
  CKR(T->reg_mr(comms[0], buf, 65536, NCCL_PTR_HOST, &mh));
  double t0 = now_s();
  for (int m = 0; m < x->iters; m++) {
    void *req = NULL;
    ncclResult_t r = ncclSuccess;
    int phase = XP_IRECV;
    void *data[1] = {buf};
    size_t cap[1] = {65536};
    int tags[1] = {7};
    while (req == NULL && r == ncclSuccess) {
      r = T->irecv(comms[0], 1, data, cap, tags, &mh, &req);
      CK(now_s() - t0 < 30);
    }
    if (r == ncclSuccess) phase = XP_TEST;
    while (r == ncclSuccess) {
      int done = 0;
      r = T->test(req, &done, NULL);
      if (done) break;
      CK(now_s() - t0 < 30);
    }
    if (r != ncclSuccess) {
      fprintf(stderr, "[recv] message %d: %s failed with %d after %.2f s\n", m, xphase_name[phase], (int)r,
              now_s() - t0);
      report_fail(phase, r, m);
    }
  }
  CKR(T->dereg_mr(comms[0], mh));
  free(buf);
}

/* The receiver vanishes right after the handshake (no close, no BYE): the sender waiting for a
 * clear-to-send must get an error, not hang. */
static void vanish_recv(const struct xcase *x, void **comms, int *devs, int n) {
  (void)x;
  (void)comms;
  (void)devs;
  (void)n;
  g_rep.ok = 1;
  report_send(); /* t_end: the moment the peer is gone */
  _exit(0);
}

/* A peer that passes the core's HELLO (it has the handle and its nonce) but then sends a malformed RDMA
 * handshake: the receiver's accept must reject it with a WARN, neither crash nor hang. */
static void bad_handshake_send(struct gdr_handle *h) {
  struct gdr_connector con;
  memset(&con, 0, sizeof(con));
  CKR(gdr_connector_start(&con, h, GDR_STREAM_CTRL, 0, 0, 42, GDR_CAP_RDMA, NULL));
  int done = 0;
  double t0 = now_s();
  while (!done) {
    CKR(gdr_connector_poll(&con, &done));
    CK(now_s() - t0 < 30);
  }
  unsigned char junk[256];
  for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (unsigned char)(i * 37 + 11);
  struct gdr_blob_io io;
  memset(&io, 0, sizeof(io));
  done = 0;
  while (!done)
    CKR(gdr_sock_blob_send(con.fd, &io, 0x52444831u /* the RDMA handshake's blob type */, junk, sizeof(junk), &done));
  /* The receiver must hang up on us (EOF or a reset), within the bound: polled without sleeping. */
  double t_sent = now_s();
  struct pollfd pf = {.fd = con.fd, .events = POLLIN};
  int hung_up = 0;
  while (!hung_up) {
    double left = XT_BOUND_S - (now_s() - t_sent);
    if (left <= 0) break;
    int pr = poll(&pf, 1, (int)(left * 1000) + 1);
    CK(pr >= 0 || errno == EINTR);
    if (pr <= 0) continue;
    char c[64];
    ssize_t r = recv(con.fd, c, sizeof(c), MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) hung_up = 1;
  }
  if (!hung_up) fprintf(stderr, "[send] the receiver kept the connection of a malformed handshake open\n");
  CK(hung_up);
  close(con.fd);
}

static void never_recv(const struct xcase *x, void **comms, int *devs, int n) {
  (void)x;
  (void)comms;
  (void)devs;
  (void)n;
  fprintf(stderr, "[recv] accept returned a connection for a malformed handshake\n");
  CK(0); /* accept must have failed */
}

/* The control channel of an RDMA connection must notice a silent peer host by itself: a sender waiting for a
 * clear-to-send (or a receiver whose clear-to-send was acknowledged) has no work request outstanding, so no
 * retry-exceeded ever comes. Both ends' control sockets carry keepalive and TCP_USER_TIMEOUT =
 * GDRNET_TCP_TIMEOUT_MS (the end-to-end check, a silent host in a network namespace, is in tests/netns). */
static void check_ctrl_socket(void **comms) {
  const struct gdr_rdma_comm *c = comms[0];
  int ka = 0;
  unsigned int ut = 0;
  socklen_t len = sizeof(ka);
  CK(c->fd >= 0);
  CK(getsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &ka, &len) == 0 && ka == 1);
  len = sizeof(ut);
  CK(getsockopt(c->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, &len) == 0);
  CK(ut == (unsigned int)gdr_param_int(GDR_PARAM_TCP_TIMEOUT_MS));
}

static void keepalive_send(const struct xcase *x, void **comms, int *devs, int n) {
  check_ctrl_socket(comms);
  stream_send(x, comms, devs, n);
}

static void keepalive_recv(const struct xcase *x, void **comms, int *devs, int n) {
  check_ctrl_socket(comms);
  stream_recv(x, comms, devs, n);
}

/* ----------------------------------------------------------------------------------- the cases -- */

/* The side fails with ncclRemoteError in one of the calls PH (a mask), within XT_BOUND_S of its own start / of the
 * peer's end. On the data path either isend or test may be the first to know. */
#define XP_DATA ((1 << XP_ISEND) | (1 << XP_IRECV) | (1 << XP_TEST))
#define XFAIL_LOCAL(PH)                                                                                                \
  { .fail = 1, .phases = (PH), .res = ncclRemoteError, .from_peer = 0 }
#define XFAIL_PEER(PH)                                                                                                 \
  { .fail = 1, .phases = (PH), .res = ncclRemoteError, .from_peer = 1 }

/* The cases, a few lines each (clang-format would put every field on its own line). */
/* clang-format off */
static const struct xcase cases[] = {
  {.name = "basic_roce", .send = stream_send, .recv = stream_recv, .sizes = sizes_small, .nsizes = N(sizes_small),
   .iters = 6, .inflight = 8},
  {.name = "basic_ib", .env = {"VEMU_DEVICES=vemu1:ib"}, .send = stream_send, .recv = stream_recv,
   .sizes = sizes_small, .nsizes = N(sizes_small), .iters = 4, .inflight = 8},
  {.name = "large", .send = stream_send, .recv = stream_recv, .sizes = sizes_mixed, .nsizes = N(sizes_mixed),
   .iters = 2, .inflight = 4, .timeout_s = 120},
  {.name = "qps4_rr", .env = {"GDRNET_QPS_PER_CONN=4", "GDRNET_SPLIT_DATA=0"}, .send = stream_send,
   .recv = stream_recv, .sizes = sizes_small, .nsizes = N(sizes_small), .iters = 5, .inflight = 16},
  {.name = "qps4_split", .env = {"GDRNET_QPS_PER_CONN=4", "GDRNET_SPLIT_DATA=1"}, .send = stream_send,
   .recv = stream_recv, .sizes = sizes_mixed, .nsizes = N(sizes_mixed), .iters = 2, .inflight = 8,
   .timeout_s = 120},
  {.name = "qps3_split_small", .env = {"GDRNET_QPS_PER_CONN=3", "GDRNET_SPLIT_DATA=1"}, .send = stream_send,
   .recv = stream_recv, .sizes = sizes_small, .nsizes = N(sizes_small), .iters = 5, .inflight = 32},
  {.name = "group", .send = group_send, .recv = group_recv, .iters = 70},
  {.name = "group_qps2_split", .env = {"GDRNET_QPS_PER_CONN=2", "GDRNET_SPLIT_DATA=1"}, .send = group_send,
   .recv = group_recv, .iters = 40},
  {.name = "oversize", .send = oversize_send, .recv = oversize_recv},
  {.name = "flush_lazy", .env = {"GDRNET_GDR=1", "VEMU_GDR_LAZY=1"}, .send = flush_send, .recv = flush_recv},
  {.name = "many_comms", .ncomms = 8, .send = stream_send, .recv = stream_recv, .sizes = sizes_small,
   .nsizes = N(sizes_small), .iters = 2, .inflight = 4, .timeout_s = 120},
  {.name = "two_devices", .env = {"VEMU_DEVICES=vemu0:roce,vemu1:ib"}, .ncomms = 2, .alldevs = 1,
   .send = stream_send, .recv = stream_recv, .sizes = sizes_small, .nsizes = N(sizes_small), .iters = 3,
   .inflight = 8},
  /* recovered (recover.c): every message arrives, every byte and size checked by the stream bodies */
  {.name = "fatal_qp_event", .env = {"VEMU_TIME_SCALE=0.001"}, .env_send = {"VEMU_FAULTS=qp_fatal:nth=1"},
   .send = stream_send, .recv = stream_recv, .sizes = sizes_small, .nsizes = N(sizes_small), .iters = 20,
   .inflight = 8, .min_recoveries = 1},
  {.name = "wc_error", .env = {"VEMU_TIME_SCALE=0.001"},
   .env_send = {"VEMU_FAULTS=wc:op=write_imm:nth=5:status=rem_access"}, .send = stream_send, .recv = stream_recv,
   .sizes = sizes_small, .nsizes = N(sizes_small), .iters = 20, .inflight = 8, .min_recoveries = 1},
  /* the same faults without recovery and without fallback: the error, on both sides, within the bound */
  {.name = "fatal_qp_event_norecover",
   .env = {"VEMU_TIME_SCALE=0.001", "GDRNET_RECOVERY_ATTEMPTS=0", "GDRNET_FALLBACK=0"},
   .env_send = {"VEMU_FAULTS=qp_fatal:nth=1"}, .send = until_error_send, .recv = until_error_recv, .iters = 1000,
   .expect_send = XFAIL_LOCAL(XP_DATA), .expect_recv = XFAIL_PEER(XP_DATA)},
  {.name = "wc_error_norecover",
   .env = {"VEMU_TIME_SCALE=0.001", "GDRNET_RECOVERY_ATTEMPTS=0", "GDRNET_FALLBACK=0"},
   .env_send = {"VEMU_FAULTS=wc:op=write_imm:nth=5:status=rem_access"}, .send = until_error_send,
   .recv = until_error_recv, .iters = 1000, .expect_send = XFAIL_LOCAL(XP_DATA),
   .expect_recv = XFAIL_PEER(XP_DATA)},
  /* a port that stays down, no fallback: both sides fail within GDRNET_RECOVERY_TIMEOUT_MS (+ the time to notice) */
  {.name = "port_down", .env = {"VEMU_TIME_SCALE=0.001", "GDRNET_RECOVERY_TIMEOUT_MS=1500", "GDRNET_FALLBACK=0"},
   .env_send = {"VEMU_FAULTS=port_down:dev=vemu0:after_ms=300"}, .send = until_error_send,
   .recv = until_error_recv, .iters = 1000000, .expect_send = XFAIL_LOCAL(XP_DATA),
   .expect_recv = XFAIL_PEER(XP_DATA), .timeout_s = 20},
  /* the receiver's NIC goes silent mid-stream (no FIN from anyone: its process lives on): the sender's writes
   * exhaust their retries, the receiver's own clear-to-send writes too; recovery cannot reach the peer, and without
   * the fallback (which it-faults' fallback-peer-loss covers) both sides get the error */
  {.name = "peer_loss", .env = {"VEMU_TIME_SCALE=0.001", "GDRNET_RECOVERY_TIMEOUT_MS=1500", "GDRNET_FALLBACK=0"},
   .env_recv = {"VEMU_FAULTS=peer_loss:after_bytes=300000"}, .send = until_error_send, .recv = until_error_recv,
   .iters = 1000, .expect_send = XFAIL_LOCAL(XP_DATA), .expect_recv = XFAIL_LOCAL(XP_DATA), .timeout_s = 20},
  /* an RNR NAK with no RNR retries (GDRNET_RNR_RETRY=0; 7 would retry for ever and never recover): RNR_RETRY_EXC,
   * recovered */
  {.name = "rnr_recovers", .env = {"VEMU_TIME_SCALE=0.01", "GDRNET_RNR_RETRY=0"},
   .env_recv = {"VEMU_FAULTS=no_recv_credit:nth=3"}, .send = stream_send, .recv = stream_recv, .sizes = sizes_small,
   .nsizes = N(sizes_small), .iters = 2, .inflight = 4, .min_recoveries = 1},
  {.name = "ctrl_keepalive", .env = {"GDRNET_TCP_TIMEOUT_MS=4321"}, .send = keepalive_send, .recv = keepalive_recv,
   .sizes = sizes_small, .nsizes = N(sizes_small), .iters = 1, .inflight = 4},
  {.name = "bad_handshake", .raw_send = bad_handshake_send, .recv = never_recv,
   .expect_recv = XFAIL_LOCAL(1 << XP_ACCEPT)},
  {.name = "peer_vanishes", .send = until_error_send, .recv = vanish_recv, .iters = 10,
   .expect_send = XFAIL_PEER(XP_DATA)},
};
/* clang-format on */

static const struct xcase *current;
static void run_current(void **state) {
  (void)state;
  run_case(current);
}

int main(int argc, char **argv) {
  int failed = 0;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int pick = argc < 2;
    for (int a = 1; a < argc; a++) pick |= strcmp(argv[a], cases[i].name) == 0;
    if (!pick) continue;
    current = &cases[i];
    const struct CMUnitTest t[] = {cmocka_unit_test(run_current)};
    double t0 = now_s();
    int f = _cmocka_run_group_tests(cases[i].name, t, 1, NULL, NULL);
    fprintf(stderr, "  %-20s %s %.2f s\n", cases[i].name, f ? "FAILED" : "ok", now_s() - t0);
    failed += f;
  }
  return failed ? 1 : 0;
}
