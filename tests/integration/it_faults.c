/* The fault matrix: seeded random traffic in both directions at once while the verbs emulator injects
 * faults (VEMU_FAULTS) into one process or both, and the plugin must recover with nothing lost, duplicated or
 * corrupted: every byte and every reported size checked, every request completing exactly once and in order, the
 * recovery seen in the counters, the run inside its bound. Cases where recovery is impossible by design expect the
 * clean error instead, within GDRNET_RECOVERY_TIMEOUT_MS.
 *
 * Environment (tests/integration/CMakeLists.txt registers the matrix):
 *   GNIT_FAULTS_PARENT, GNIT_FAULTS_CHILD   VEMU_FAULTS of each process (either may be empty), rules joined with
 *                                           '+' instead of ';' (CTest's environment lists split at ';')
 *   GNIT_MSGS (default 300)                 messages per direction
 *   GNIT_GROUPS (default 1)                 one message in four is a grouped receive of 2..8 buffers
 *   GNIT_FLUSH (default 0)                  receive buffers are registered as DMA-BUF ("device" memory on the
 *                                           emulator) and every receive is flushed (RDMA READ) before it is checked;
 *                                           with VEMU_GDR_LAZY=1 the data is visible only after the flush
 *   GNIT_MAXSIZE (default 8 MiB)            largest single message
 *   GNIT_EXPECT=recover (default): at least GNIT_MIN_RECOVERIES (default 1) recoveries in the two processes
 *              =fallback: at least GNIT_EXPECT_MOVES (default 2) moves of a connection end to TCP and
 *                         GNIT_EXPECT_BACK (default 0) returns to RDMA in the two processes, every byte still
 *                         checked; GNIT_EXPECT_PROBE_FAIL=1: a probe of the way back failed and nothing returned;
 *                         GNIT_EXPECT_PINNED=1: a flapping connection was pinned to TCP
 *              =tcp_only: a connection's RDMA part could not be set up: it runs over TCP from the start
 *              =clean: no fault and no recovery at all (a rule that cannot hit a connection)
 *              =error: the run must fail with ncclRemoteError or ncclSystemError within GNIT_ERROR_BOUND_S
 *   GNIT_RECONNECT=1                        after the run, new connections once the lost device is back
 *                                           (reconnect()); GNIT_RECONNECT_KEEP=1: the first connections and their
 *                                           registrations stay open meanwhile (the new ones register the same
 *                                           buffers: the cache must not hand out the dead context's keys)
 *   GNIT_MAX_RECOVERIES=N                   at most N recoveries in both processes (a peer that is gone must not be
 *                                           recovered again and again: each episode's attempts are bounded)
 *   GNIT_EXPECT_REKEY=recv|send|none        a key fault: that end (of either process) registered its own buffers
 *                                           again (the INFO line "new keys for its own buffers"), the other never;
 *                                           none: faults that name no key, and no end registered anything again
 *   GNIT_SEED                               traffic seed (default 1)
 *   GNIT_FUSE=N (v9+ tables)                the connections run on a fused device of the first N (it.c) */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "it.h"

#define INFLIGHT 8
#define MAXN 8
#define PART_MAX (1u << 20)
#define PAD 256

struct msgspec {
  int n;               /* buffers (1: a plain message) */
  int size[MAXN];      /* bytes sent into buffer i */
  int tag[MAXN];
  int order[MAXN];     /* the sender's posting order */
};

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Message m of flow dir (0: parent -> child, 1: child -> parent): the same on both sides (shared seed). */
static void spec_of(uint64_t seed, int dir, int m, int groups, int maxsize, struct msgspec *sp) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + (uint64_t)dir * 7919 + (uint64_t)m * 104729 + 1;
  for (int i = 0; i < 4; i++) rnd(&s);
  sp->n = groups && rnd(&s) % 4 == 0 ? 2 + (int)(rnd(&s) % (MAXN - 1)) : 1;
  for (int i = 0; i < sp->n; i++) {
    uint64_t r = rnd(&s) % 100;
    int lim = sp->n > 1 ? (int)PART_MAX : maxsize;
    int sz = r < 5 ? 0 : r < 50 ? (int)(rnd(&s) % 65537) : r < 90 ? (int)(rnd(&s) % (1u << 20)) : (int)(rnd(&s) % ((uint64_t)lim + 1));
    sp->size[i] = sz > lim ? lim : sz;
    sp->tag[i] = 1000 + 17 * i + (int)(rnd(&s) % 5) * 200; /* distinct within the group */
    sp->order[i] = i;
  }
  for (int i = sp->n - 1; i > 0; i--) {
    int j = (int)(rnd(&s) % (uint64_t)(i + 1)), t = sp->order[i];
    sp->order[i] = sp->order[j];
    sp->order[j] = t;
  }
}

struct dirstate {
  int posted, completed;   /* messages */
  void *req[INFLIGHT][MAXN];
  int nreq[INFLIGHT];      /* requests of that slot still to complete */
  int msg[INFLIGHT];
};

struct run {
  it_conn_t c;
  it_plugin_t *ip;
  uint64_t seed;
  int msgs, groups, flush, maxsize;
  int txflow, rxflow;      /* the flow (0: parent -> child, 1: child -> parent) each direction carries */
  size_t slot_len;
  struct dirstate tx, rx;
  ncclResult_t failed;     /* first error seen (GNIT_EXPECT=error) */
  uint64_t fail_ns;
};

static unsigned char *slot_buf(unsigned char *base, const struct run *R, int slot, int part) {
  return base + (size_t)slot * R->slot_len + (size_t)part * (PART_MAX + PAD);
}

static int note_error(struct run *R, ncclResult_t r, const char *what) {
  if (r == ncclSuccess) return 0;
  if (R->failed == ncclSuccess) {
    R->failed = r;
    R->fail_ns = gn_now_ns();
    it_log("%s returned %s", what, gn_result_str(r));
  }
  return 1;
}

/* One step of the send direction: post the next message's parts (all of them, in its order), complete oldest
 * first. Returns -1 on an error (noted), else 1 when it did something. */
static int step_tx(struct run *R) {
  const ncclNet_v8_t *net = R->ip->net;
  struct msgspec sp;
  int busy = 0;
  if (R->tx.posted < R->msgs && R->tx.posted - R->tx.completed < INFLIGHT) {
    int m = R->tx.posted, k = m % INFLIGHT;
    spec_of(R->seed, R->txflow, m, R->groups, R->maxsize, &sp);
    int done_parts = 0;
    for (int j = 0; j < sp.n; j++)
      if (R->tx.req[k][j]) done_parts++;
    if (done_parts == 0)
      for (int i = 0; i < sp.n; i++)
        gn_pattern_fill(slot_buf(R->c.sbuf, R, k, i), (size_t)sp.size[i],
                        gn_pattern_seed((uint64_t)sp.size[i], (uint64_t)m, (uint64_t)sp.tag[i]));
    /* the parts go out in sp.order; each isend may say "later" */
    int j = done_parts;
    int i = sp.order[j];
    void *rq = NULL;
    ncclResult_t r = net->isend(R->c.s, slot_buf(R->c.sbuf, R, k, i), sp.size[i], sp.tag[i], R->c.smh, &rq);
    if (note_error(R, r, "isend")) return -1;
    if (rq) {
      R->tx.req[k][j] = rq;
      if (j + 1 == sp.n) {
        R->tx.nreq[k] = sp.n;
        R->tx.msg[k] = m;
        R->tx.posted++;
      }
    }
    busy = 1;
  }
  if (R->tx.completed < R->tx.posted) {
    int k = R->tx.completed % INFLIGHT;
    spec_of(R->seed, R->txflow, R->tx.msg[k], R->groups, R->maxsize, &sp);
    for (int j = 0; j < sp.n; j++) {
      if (R->tx.req[k][j] == NULL) continue;
      int d = 0, sz = -1;
      ncclResult_t r = net->test(R->tx.req[k][j], &d, &sz);
      if (note_error(R, r, "test (send)")) return -1;
      if (!d) break;
      IT_CHECK(sz == sp.size[sp.order[j]], "send of message %d part %d: test reported %d bytes, %d sent",
               R->tx.msg[k], j, sz, sp.size[sp.order[j]]);
      R->tx.req[k][j] = NULL;
      R->tx.nreq[k]--;
    }
    if (R->tx.nreq[k] == 0) R->tx.completed++;
    busy = 1;
  }
  return busy;
}

/* One step of each direction; returns 1 while anything is left to do. */
static int step(struct run *R) {
  const ncclNet_v8_t *net = R->ip->net;
  struct msgspec sp;
  int busy = step_tx(R);
  if (busy < 0) return 0;
  /* --- receive: post grouped/plain receives, complete oldest first, flush, check --- */
  if (R->rx.posted < R->msgs && R->rx.posted - R->rx.completed < INFLIGHT) {
    int m = R->rx.posted, k = m % INFLIGHT;
    void *data[MAXN], *mhs[MAXN], *rq = NULL;
    int sizes[MAXN];
    spec_of(R->seed, R->rxflow, m, R->groups, R->maxsize, &sp);
    for (int i = 0; i < sp.n; i++) {
      data[i] = slot_buf(R->c.rbuf, R, k, i);
      mhs[i] = R->c.rmh;
      sizes[i] = sp.size[i] + PAD; /* larger than the send: the reported size must be the sent one */
      memset(data[i], IT_CANARY, (size_t)sizes[i]);
    }
    ncclResult_t r = net->irecv(R->c.r, sp.n, data, sizes, sp.tag, mhs, &rq);
    if (note_error(R, r, "irecv")) return 0;
    if (rq) {
      R->rx.req[k][0] = rq;
      R->rx.msg[k] = m;
      R->rx.posted++;
    }
    busy = 1;
  }
  if (R->rx.completed < R->rx.posted) {
    int k = R->rx.completed % INFLIGHT, m = R->rx.msg[k], d = 0, got[MAXN];
    spec_of(R->seed, R->rxflow, m, R->groups, R->maxsize, &sp);
    for (int i = 0; i < MAXN; i++) got[i] = -1;
    ncclResult_t r = net->test(R->rx.req[k][0], &d, got);
    if (note_error(R, r, "test (receive)")) return 0;
    if (d) {
      if (R->flush) {
        void *data[MAXN], *mhs[MAXN], *fq = NULL;
        for (int i = 0; i < sp.n; i++) {
          data[i] = slot_buf(R->c.rbuf, R, k, i);
          mhs[i] = R->c.rmh;
        }
        r = net->iflush(R->c.r, sp.n, data, got, mhs, &fq);
        if (note_error(R, r, "iflush")) return 0;
        uint64_t fdl = gn_deadline_ns(60);
        while (fq != NULL) {
          int fd2 = 0;
          r = net->test(fq, &fd2, NULL);
          if (note_error(R, r, "test (flush)")) return 0;
          if (fd2) break;
          IT_CHECK(!gn_expired(fdl), "message %d: the flush never completed", m);
          /* the other direction goes on meanwhile, as NCCL's proxy progresses every connection: a recovery of
           * this receive may need this process's send side (the peer's own flush may wait on it) */
          if (step_tx(R) < 0) return 0;
        }
      }
      for (int i = 0; i < sp.n; i++) {
        char what[96];
        snprintf(what, sizeof what, "message %d (of %d buffers) buffer %d tag %d", m, sp.n, i, sp.tag[i]);
        it_verify(slot_buf(R->c.rbuf, R, k, i), sp.size[i] + PAD, got[i], sp.size[i], (uint64_t)m,
                  (uint64_t)sp.tag[i], what);
      }
      R->rx.req[k][0] = NULL;
      R->rx.completed++;
    }
    busy = 1;
  }
  return busy || R->tx.completed < R->msgs || R->rx.completed < R->msgs;
}

/* "recovered:" lines of this process's plugin log. */
static int count_in_log(const char *needle) {
  char *log = gn_log_captured();
  int n = 0;
  for (const char *p = log; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  free(log);
  return n;
}

/* Lines of this process's plugin log that hold both strings. */
static int count_lines_with(const char *a, const char *b) {
  char *log = gn_log_captured();
  int n = 0;
  for (char *line = log; line && *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = '\0';
    if (strstr(line, a) && strstr(line, b)) n++;
    line = end ? end + 1 : NULL;
  }
  free(log);
  return n;
}

/* GNIT_RECONNECT=1 (a lost device that comes back, device_fatal with for_ms): new connections are made until
 * both ends of one run over RDMA (each try that ran over TCP from the start is closed), within GNIT_PHASE_S; then
 * GNIT_RECONNECT_MSGS messages each way over it, every byte checked, and no end of it may move to TCP. */
static void reconnect(struct run *R, gn_ctx_t *ctx, int fd) {
  const ncclNet_v8_t *net = R->ip->net;
  uint64_t dl = gn_deadline_ns(it_env_double("GNIT_RECONNECT_S", 20));
  int tries = 0;
  it_step("reconnecting");
  for (;;) {
    int before = count_in_log(" runs over TCP (");
    IT_GN(ctx, gn_establish(ctx, R->ip->dev, fd, &R->c.s, &R->c.r));
    int tcp[2] = {count_in_log(" runs over TCP (") > before, 0};
    tries++;
    IT_CHECK(gn_boot_send(fd, &tcp[0], sizeof(int)) == 0 && gn_boot_recv(fd, &tcp[1], sizeof(int), 60) == 0,
             "bootstrap");
    if (!tcp[0] && !tcp[1]) break;
    IT_OK(net->closeSend(R->c.s));
    IT_OK(net->closeRecv(R->c.r));
    IT_CHECK(!gn_expired(dl), "no connection over RDMA after %d tries: the device did not come back", tries);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL); /* pacing between tries; the loop's condition is the connection's transport */
  }
  it_log("a connection over RDMA again after %d tries", tries);
  size_t len = R->slot_len * INFLIGHT;
  int moves0 = count_in_log(" now runs over TCP");
  IT_OK(net->regMr(R->c.s, R->c.sbuf, len, NCCL_PTR_HOST, &R->c.smh));
  IT_OK(net->regMr(R->c.r, R->c.rbuf, len, NCCL_PTR_HOST, &R->c.rmh));
  memset(&R->tx, 0, sizeof(R->tx));
  memset(&R->rx, 0, sizeof(R->rx));
  R->msgs = (int)it_env_double("GNIT_RECONNECT_MSGS", 50);
  R->flush = 0;
  it_step("traffic after the device came back");
  while (step(R)) {
    IT_CHECK(!gn_expired(dl), "traffic stuck after the device came back: sent %d/%d, received %d/%d",
             R->tx.completed, R->msgs, R->rx.completed, R->msgs);
    sched_yield();
  }
  IT_CHECK(R->failed == ncclSuccess, "the run after the device came back failed with %s", gn_result_str(R->failed));
  IT_CHECK(count_in_log(" now runs over TCP") == moves0, "the connection made after the device came back moved to TCP");
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  IT_OK(net->deregMr(R->c.s, R->c.smh));
  IT_OK(net->deregMr(R->c.r, R->c.rmh));
  IT_OK(net->closeSend(R->c.s));
  IT_OK(net->closeRecv(R->c.r));
}

/* Sum of the values of every line of metric `name` (any labels) in the text, and how many lines. */
static double metric_sum(const char *text, const char *name, int *lines) {
  double sum = 0;
  size_t n = strlen(name);
  *lines = 0;
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, name, n) == 0 && p[n] == '{') {
      const char *sp = strchr(p, '}');
      if (sp) sum += atof(sp + 1);
      (*lines)++;
    }
  return sum;
}

/* GDRNET_STATS_FILE (%p expanded) as the plugin left it: the counters say what the log said. */
static void stats_check(int moves, int returns) {
  const char *pat = getenv("GDRNET_STATS_FILE");
  char path[512], *text = NULL;
  IT_CHECK(pat != NULL, "GNIT_STATS_CHECK needs GDRNET_STATS_FILE");
  const char *pp = strstr(pat, "%p");
  IT_CHECK(pp != NULL, "GNIT_STATS_CHECK wants %%p in GDRNET_STATS_FILE");
  snprintf(path, sizeof path, "%.*s%d%s", (int)(pp - pat), pat, (int)getpid(), pp + 2);
  FILE *f = fopen(path, "r");
  IT_CHECK(f != NULL, "GDRNET_STATS_FILE: %s was not written", path);
  text = calloc(1, 1 << 20);
  IT_CHECK(text != NULL, "out of memory");
  size_t got = fread(text, 1, (1 << 20) - 1, f);
  fclose(f);
  text[got] = 0;
  int n = 0;
  double fb = metric_sum(text, "gdrnet_fallbacks_total", &n);
  IT_CHECK(n >= 1, "%s has no gdrnet_fallbacks_total line", path);
  IT_CHECK(fb == moves, "%s: gdrnet_fallbacks_total sums to %.0f, the log says %d move(s) to TCP", path, fb, moves);
  double back = metric_sum(text, "gdrnet_returns_total", &n);
  IT_CHECK(back == returns, "%s: gdrnet_returns_total sums to %.0f, the log says %d return(s)", path, back, returns);
  double on_tcp = metric_sum(text, "gdrnet_connections_on_tcp", &n);
  IT_CHECK(on_tcp == 0, "%s: %.0f connection(s) still on TCP after every close", path, on_tcp);
  double open_now = metric_sum(text, "gdrnet_connections_open", &n);
  IT_CHECK(open_now == 0, "%s: %.0f comm(s) open after every close", path, open_now);
  double rx = metric_sum(text, "gdrnet_received_bytes_total", &n);
  IT_CHECK(rx > 0, "%s: no bytes received", path);
  if (moves > 0) {
    double secs = metric_sum(text, "gdrnet_tcp_seconds_total", &n);
    IT_CHECK(secs > 0, "%s: no time on TCP counted for %d move(s)", path, moves);
  }
  it_log("%s: %.0f fallback(s), %.0f return(s), %.0f bytes received: as the log says", path, fb, back, rx);
  free(text);
}

static int side(int fd, int parent) {
  struct run R;
  it_plugin_t ip;
  const char *faults = getenv(parent ? "GNIT_FAULTS_PARENT" : "GNIT_FAULTS_CHILD");
  const char *expect = getenv("GNIT_EXPECT") ? getenv("GNIT_EXPECT") : "recover";
  int expect_error = strcmp(expect, "error") == 0;
  double bound = it_env_double("GNIT_ERROR_BOUND_S", 10);
  memset(&R, 0, sizeof R);
  if (faults && *faults) {
    char rules[1024];
    snprintf(rules, sizeof rules, "%s", faults);
    for (char *p = rules; *p; p++)
      if (*p == '+') *p = ';';
    setenv("VEMU_FAULTS", rules, 1);
  } else {
    unsetenv("VEMU_FAULTS");
  }
  it_load(&ip);
  R.ip = &ip;
  R.seed = (uint64_t)it_env_double("GNIT_SEED", 1);
  R.txflow = parent ? 0 : 1;
  R.rxflow = parent ? 1 : 0;
  R.msgs = (int)it_env_double("GNIT_MSGS", 300);
  R.groups = (int)it_env_double("GNIT_GROUPS", 1);
  R.flush = (int)it_env_double("GNIT_FLUSH", 0);
  R.maxsize = (int)it_env_double("GNIT_MAXSIZE", 8 << 20);
  R.slot_len = (size_t)MAXN * (PART_MAX + PAD);
  if ((size_t)R.maxsize + PAD > R.slot_len) R.slot_len = (size_t)R.maxsize + PAD;
  if (R.flush) IT_CHECK(ip.props[0].ptrSupport & NCCL_PTR_DMABUF, "GNIT_FLUSH needs DMA-BUF (GDRNET_GDR=1)");
  it_log("faults \"%s\", %d messages per direction, groups %d, flush %d, expect %s", faults ? faults : "", R.msgs,
         R.groups, R.flush, expect);

  /* both directions: a send comm to the peer and a receive comm from it */
  size_t len = R.slot_len * INFLIGHT;
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, 60);
  it_step("connecting");
  IT_GN(&ctx, gn_establish(&ctx, ip.dev, fd, &R.c.s, &R.c.r)); /* 0, or a fused device (GNIT_FUSE) */
  R.c.net = ip.net;
  IT_CHECK(posix_memalign((void **)&R.c.sbuf, 4096, len) == 0 && posix_memalign((void **)&R.c.rbuf, 4096, len) == 0,
           "out of memory");
  IT_OK(ip.net->regMr(R.c.s, R.c.sbuf, len, NCCL_PTR_HOST, &R.c.smh));
  if (R.flush) {
    int dfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    IT_CHECK(dfd >= 0, "open /dev/null");
    IT_OK(ip.net->regMrDmaBuf(R.c.r, R.c.rbuf, len, NCCL_PTR_CUDA, 0, dfd, &R.c.rmh));
    close(dfd);
  } else {
    IT_OK(ip.net->regMr(R.c.r, R.c.rbuf, len, NCCL_PTR_HOST, &R.c.rmh));
  }

  uint64_t t0 = gn_now_ns(), dl = gn_deadline_ns(it_env_double("GNIT_PHASE_S", 150));
  it_step("traffic");
  while (step(&R)) {
    IT_CHECK(!gn_expired(dl), "traffic stuck: sent %d/%d (posted %d), received %d/%d (posted %d)", R.tx.completed,
             R.msgs, R.tx.posted, R.rx.completed, R.msgs, R.rx.posted);
    sched_yield();
  }
  double secs = (double)(gn_now_ns() - t0) / 1e9;
  if (expect_error) {
    IT_CHECK(R.failed == ncclRemoteError || R.failed == ncclSystemError,
             "expected the connection to fail (clean error), got %s after %.2f s with everything delivered",
             gn_result_str(R.failed), secs);
    double to_err = (double)(R.fail_ns - t0) / 1e9;
    IT_CHECK(to_err < bound, "the error took %.2f s (bound %.1f s)", to_err, bound);
    it_log("failed cleanly with %s after %.2f s", gn_result_str(R.failed), to_err);
  } else {
    IT_CHECK(R.failed == ncclSuccess, "the run failed with %s", gn_result_str(R.failed));
  }
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  /* GNIT_RECONNECT_KEEP=1: the first connections and their registrations stay (as NCCL keeps a communicator that
   * was pinned to TCP) while the new ones register the same buffers on the revived device */
  it_conn_t first = R.c;
  int keep = it_env_double("GNIT_RECONNECT", 0) != 0 && it_env_double("GNIT_RECONNECT_KEEP", 0) != 0;
  if (!keep) {
    IT_OK(ip.net->deregMr(R.c.s, R.c.smh));
    IT_OK(ip.net->deregMr(R.c.r, R.c.rmh));
    IT_OK(ip.net->closeSend(R.c.s));
    IT_OK(ip.net->closeRecv(R.c.r));
  }
  if (it_env_double("GNIT_RECONNECT", 0) != 0) reconnect(&R, &ctx, fd);
  if (keep) {
    IT_OK(ip.net->deregMr(first.s, first.smh));
    IT_OK(ip.net->deregMr(first.r, first.rmh));
    IT_OK(ip.net->closeSend(first.s));
    IT_OK(ip.net->closeRecv(first.r));
  }
  /* the counters: the recoveries and the stats line each connection logs at close */
  int mine[8] = {count_in_log(" recovered: "),
                 count_in_log(" now runs over TCP"),
                 count_in_log(" is back on RDMA"),
                 count_in_log(" runs over TCP ("),
                 count_in_log("the probe WRITE over the new QPs failed"),
                 count_in_log("it stays on TCP (GDRNET_FAILBACK_FLAPS"),
                 count_lines_with("RDMA send connection", ": new keys for its own buffers"),
                 count_lines_with("RDMA receive connection", ": new keys for its own buffers")};
  int peer[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  it_log("%.2f s; this process: %d recoveries, %d moves to TCP, %d returns to RDMA (%d connection(s) with faults)", secs,
         mine[0], mine[1], mine[2], count_in_log(" fault(s) ("));
  IT_CHECK(gn_boot_send(fd, mine, sizeof mine) == 0 && gn_boot_recv(fd, peer, sizeof peer, 60) == 0, "bootstrap");
  if (parent && !expect_error) {
    int rec = mine[0] + peer[0], moved = mine[1] + peer[1], back = mine[2] + peer[2];
    int min = (int)it_env_double("GNIT_MIN_RECOVERIES", 1), max = (int)it_env_double("GNIT_MAX_RECOVERIES", -1);
    IT_CHECK(max < 0 || rec <= max, "%d recoveries in both processes, expected at most %d (GNIT_MAX_RECOVERIES)", rec,
             max);
    if (strcmp(expect, "clean") == 0) {
      IT_CHECK(rec + moved == 0, "%d recoveries and %d moves to TCP where the rules cannot hit a connection", rec,
               moved);
    } else if (strcmp(expect, "tcp_only") == 0) {
      IT_CHECK(mine[3] + peer[3] >= 2, "%d connection end(s) run over TCP from the start, expected both ends of one",
               mine[3] + peer[3]);
    } else if (strcmp(expect, "fallback") == 0) {
      int want_moves = (int)it_env_double("GNIT_EXPECT_MOVES", 2), want_back = (int)it_env_double("GNIT_EXPECT_BACK", 0);
      IT_CHECK(moved >= want_moves, "%d move(s) of a connection end to TCP, expected at least %d", moved, want_moves);
      IT_CHECK(back >= want_back, "%d return(s) of a connection end to RDMA, expected at least %d", back, want_back);
      if (it_env_double("GNIT_EXPECT_PROBE_FAIL", 0) != 0) {
        /* the ports are up but the path is not: the probe must say so, and nothing may return to RDMA */
        IT_CHECK(mine[4] + peer[4] >= 1, "no failed probe of the way back (the path to the peer is dead)");
        IT_CHECK(back == 0, "%d return(s) to RDMA over a dead path", back);
      }
      if (it_env_double("GNIT_EXPECT_PINNED", 0) != 0)
        IT_CHECK(mine[5] + peer[5] >= 1, "the flapping connection was not pinned to TCP");
    } else {
      IT_CHECK(rec >= min, "%d recoveries in both processes, expected at least %d", rec, min);
      IT_CHECK(moved == 0, "%d moves to TCP where recovery was expected", moved);
    }
    const char *rekey = getenv("GNIT_EXPECT_REKEY");
    if (rekey && *rekey) {
      /* the side whose own buffer the key fault names re-registers it, and only that side */
      int snd = mine[6] + peer[6], rcv = mine[7] + peer[7], want_recv = strcmp(rekey, "recv") == 0;
      IT_CHECK(strcmp(rekey, "recv") == 0 || strcmp(rekey, "send") == 0 || strcmp(rekey, "none") == 0,
               "GNIT_EXPECT_REKEY=%s: expected recv, send or none", rekey);
      if (strcmp(rekey, "none") == 0) {
        /* faults that name no key: no end registers anything again */
        IT_CHECK(snd + rcv == 0, "%d send and %d receive end re-registration(s) for faults that name no key", snd,
                 rcv);
      } else {
        IT_CHECK(want_recv ? rcv >= 1 : snd >= 1, "no %s connection end registered its own buffers again (send %d, "
                 "receive %d re-registrations)", rekey, snd, rcv);
        IT_CHECK(want_recv ? snd == 0 : rcv == 0, "the %s end re-registered its own buffers %d time(s) for a key "
                 "fault of the %s end", want_recv ? "send" : "receive", want_recv ? snd : rcv, rekey);
      }
    }
  }
  free(R.c.sbuf);
  free(R.c.rbuf);
  it_unload(&ip); /* the plugin's fini writes GDRNET_STATS_FILE a last time */
  if (it_env_double("GNIT_STATS_CHECK", 0) != 0) stats_check(mine[1], mine[2]);
  return 0;
}

int main(void) { return it_two_sides("faults", 240, side, 120); }
