/* The GIN/RMA tables (ncclGinPlugin_v11/v12/v13, ncclRmaPlugin_v13/v14/v15/v16), one harness for all:
 * GNIT_GIN_TABLE=gin11|gin12|gin13|rma13|rma14|rma15|rma16 picks the table, GNIT_GIN_RANKS (default 2) the processes (a full mesh), GNIT_GIN_MODE
 * the scenario: "all" (every check below), "peerdeath" (the last rank dies mid-run: the others get an error from
 * test and queryLastError within the timeout, never a hang), "fault" (an RDMA READ made to fail by VEMU_FAULTS:
 * the same) or "bye" (3+ ranks: the last rank closes cleanly with nothing in flight; the others go on with puts and
 * signals between them, every byte checked, their comm healthy; an operation towards the rank that left fails with
 * ncclRemoteError).
 * Every rank runs a progress thread (ginProgress/rmaProgress in a loop, as NCCL's GIN proxy thread does) beside
 * the thread that issues and tests operations, and a reader thread races every signal: it waits for the signal
 * word to reach its value and then checks every byte of the put it follows (a signal seen before its data fails).
 * Checks: symmetric registration (mhandle == ginHandle, a put past the peer's window refused); puts of every size
 * class, inline, chunked (past the 4 MiB pieces) and zero-byte, with INC and ADD signals; signal-only puts; gets
 * (v13+); flush (v13+: the data is at the target once the flush is done); a full queue answers NULL ("try again")
 * and takes again once a request is returned; several contexts; close with operations in flight. RMA v15/v16: the
 * operations' optFlags cycle through none, AggregateRequests, and AggregateRequests with a bit no NCCL defines (each
 * is taken and completes on its own, with the same data); v16: getRmaProperties says flushesAllPutsOnAnySignal false
 * and refuses a NULL collComm or properties. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gdrnet/gin.h"
#include "gdrnet/rma.h"
#include "it.h"

#define MAXR 4
#define WIN ((size_t)40 << 20)
#define NSIGW 512

/* ---- the table, in one shape ---- */
typedef struct {
  int v; /* 11, 12, 13, 14, 15, 16 */
  int rma;
  const void *t;
} tbl_t;
static tbl_t T;
#define G11 ((const ncclGin_v11_t *)T.t)
#define G12 ((const ncclGin_v12_t *)T.t)
#define G13 ((const ncclGin_v13_t *)T.t)
#define R14 ((const ncclRma_v14_t *)T.t)
#define R15 ((const ncclRma_v15_t *)T.t)
#define R16 ((const ncclRma_v16_t *)T.t)
/* the RMA tables' entry points of one signature from v14 on (v15/v16: those without optFlags) */
#define CALL_R14(f, ...) (T.v == 14 ? R14->f(__VA_ARGS__) : T.v == 15 ? R15->f(__VA_ARGS__) : R16->f(__VA_ARGS__))
/* the entry points whose signature every table shares; CALL_NO12: all but v12's; CALL_V13: v13's and later */
#define CALL(f, ...)                                                                                                   \
  (T.v == 11   ? G11->f(__VA_ARGS__)                                                                                   \
   : T.v == 12 ? G12->f(__VA_ARGS__)                                                                                   \
   : T.v == 13 ? G13->f(__VA_ARGS__)                                                                                   \
               : CALL_R14(f, __VA_ARGS__))
#define CALL_NO12(f, ...) (T.v == 11 ? G11->f(__VA_ARGS__) : T.v == 13 ? G13->f(__VA_ARGS__) : CALL_R14(f, __VA_ARGS__))
#define CALL_V13(f, ...) (T.v == 13 ? G13->f(__VA_ARGS__) : CALL_R14(f, __VA_ARGS__))

/* v15/v16 optFlags, one per operation in turn: none, the aggregation hint, the hint with a bit no NCCL defines */
static atomic_uint g_nops;
static uint32_t next_opt_flags(void) {
  static const uint32_t k_flags[] = {NCCL_RMA_OPT_FLAGS_DEFAULT, NCCL_RMA_OPT_FLAG_AGGREGATE_REQUESTS,
                                     NCCL_RMA_OPT_FLAG_AGGREGATE_REQUESTS | 0x80000000u};
  return k_flags[atomic_fetch_add(&g_nops, 1) % 3];
}

/* set when the plugin's INFO at init names the table this process loaded ("GIN/RMA table vN: ...") */
static atomic_int g_table_logged;

/* GNIT_GIN_EXPECT_LOG: a line of the plugin's log that every rank must see by the end of conn_open (the path a test
 * names was taken: e.g. which signal path the one-sided RDMA path chose) */
static atomic_int g_expect_seen;

/* GNIT_GIN_MODE=stall: the stall detector's WARNs about a one-sided peer ("rdma-gin") and its resumption */
static atomic_int g_gin_stall_warns, g_gin_resumed;
static atomic_int g_recv_stall_warns; /* about a net-core receive of the message path: it stands, expects nothing */
static char g_gin_stall_line[1024];
static pthread_mutex_t g_gin_stall_mu = PTHREAD_MUTEX_INITIALIZER;

static atomic_int
    g_fallback_warns; /* WARNs that the one-sided RDMA path is not brought up (GNIT_GIN_EXPECT_FALLBACK) */

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  const char *want = getenv("GNIT_GIN_EXPECT_LOG");
  char msg[1024], tv[32];
  va_list ap;
  (void)flags;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (want != NULL && strstr(msg, want) != NULL) atomic_store(&g_expect_seen, 1);
  if (level == NCCL_LOG_WARN && strstr(msg, "one-sided operations go as messages") != NULL)
    atomic_fetch_add(&g_fallback_warns, 1);
  if (level == NCCL_LOG_WARN && strstr(msg, "stall: recv connection of this process") != NULL)
    atomic_fetch_add(&g_recv_stall_warns, 1);
  if (level == NCCL_LOG_WARN && strstr(msg, "stall: ") != NULL && strstr(msg, "rdma-gin") != NULL) {
    if (strstr(msg, "resumed after") != NULL) {
      atomic_fetch_add(&g_gin_resumed, 1);
    } else {
      pthread_mutex_lock(&g_gin_stall_mu);
      snprintf(g_gin_stall_line, sizeof(g_gin_stall_line), "%s", msg);
      pthread_mutex_unlock(&g_gin_stall_mu);
      atomic_fetch_add(&g_gin_stall_warns, 1);
    }
  }
  if (level == NCCL_LOG_INFO) {
    snprintf(tv, sizeof tv, "table v%d:", T.v);
    if (strstr(msg, tv) != NULL) atomic_store(&g_table_logged, 1);
  }
  if (level >= NCCL_LOG_INFO && getenv("GNIT_GIN_VERBOSE") == NULL) return;
  fprintf(stderr, "[gin %d] %s:%d %s\n", (int)getpid(), file, line, msg);
}

static void *load_table(void) {
  const char *name = getenv("GNIT_GIN_TABLE");
  const char *sym = NULL;
  void *lib = dlopen(it_plugin_path(), RTLD_NOW | RTLD_LOCAL);
  IT_CHECK(lib != NULL, "dlopen %s: %s", it_plugin_path(), dlerror());
  if (name == NULL) name = "gin11";
  if (!strcmp(name, "gin11"))
    T.v = 11, sym = "ncclGinPlugin_v11";
  else if (!strcmp(name, "gin12"))
    T.v = 12, sym = "ncclGinPlugin_v12";
  else if (!strcmp(name, "gin13"))
    T.v = 13, sym = "ncclGinPlugin_v13";
  else if (!strcmp(name, "rma13"))
    T.v = 13, T.rma = 1, sym = "ncclRmaPlugin_v13";
  else if (!strcmp(name, "rma14"))
    T.v = 14, T.rma = 1, sym = "ncclRmaPlugin_v14";
  else if (!strcmp(name, "rma15"))
    T.v = 15, T.rma = 1, sym = "ncclRmaPlugin_v15";
  else if (!strcmp(name, "rma16"))
    T.v = 16, T.rma = 1, sym = "ncclRmaPlugin_v16";
  IT_CHECK(sym != NULL, "GNIT_GIN_TABLE=%s: gin11|gin12|gin13|rma13|rma14|rma15|rma16", name);
  T.t = dlsym(lib, sym);
  IT_CHECK(T.t != NULL, "%s not exported", sym);
  return lib;
}

/* ---- ranks: the parent is rank 0, children 1..n-1; the parent relays ---- */
static int g_n, g_rank;
static int g_live;     /* the ranks in the barriers: ranks [0, g_live) (mode "bye": the last one leaves) */
static int g_fd[MAXR]; /* parent: to each child; child: g_fd[0] to the parent */
static int g_max_recvs;
static pid_t g_pid[MAXR]; /* parent: the children's pids */

static void hub_barrier(void) {
  for (int round = 0; round < 2; round++) {
    if (g_rank == 0) {
      for (int r = 1; r < g_live; r++) IT_CHECK(gn_boot_barrier(g_fd[r], 120) == 0, "barrier with rank %d", r);
    } else {
      IT_CHECK(gn_boot_barrier(g_fd[0], 120) == 0, "barrier with rank 0");
    }
  }
}

static void allgather_handles(char all[][NCCL_NET_HANDLE_MAXSIZE]) {
  if (g_rank == 0) {
    for (int r = 1; r < g_n; r++)
      IT_CHECK(gn_boot_recv(g_fd[r], all[r], NCCL_NET_HANDLE_MAXSIZE, 60) == 0, "handle from rank %d", r);
    for (int r = 1; r < g_n; r++)
      IT_CHECK(gn_boot_send(g_fd[r], all, (size_t)g_n * NCCL_NET_HANDLE_MAXSIZE) == 0, "handles to rank %d", r);
  } else {
    IT_CHECK(gn_boot_send(g_fd[0], all[g_rank], NCCL_NET_HANDLE_MAXSIZE) == 0, "handle to rank 0");
    IT_CHECK(gn_boot_recv(g_fd[0], all, (size_t)g_n * NCCL_NET_HANDLE_MAXSIZE, 60) == 0, "handles from rank 0");
  }
}

/* ---- one connection (collComm + context) with its progress thread ---- */
typedef struct {
  void *inst, *cc, *ctx; /* ctx: the operations' target (the collComm for v11/v12) */
  void *gctx;            /* v13+: createContext's */
  unsigned char *win, *loc;
  uint64_t *sig;
  void *wmh, *lmh, *smh;
  pthread_t prog;
  pthread_mutex_t pmu; /* held by the progress thread around each progress call (see sync_progress) */
  atomic_int stop;
  atomic_int prog_err;
} conn_t;

static void *progress_main(void *arg) {
  conn_t *c = arg;
  while (!atomic_load(&c->stop)) {
    pthread_mutex_lock(&c->pmu);
    ncclResult_t r = T.v == 11   ? G11->ginProgress(c->ctx)
                     : T.v == 12 ? G12->ginProgress(c->ctx)
                     : T.v == 13 ? G13->ginProgress(c->ctx)
                                 : CALL_R14(rmaProgress, c->ctx);
    pthread_mutex_unlock(&c->pmu);
    if (r != ncclSuccess) {
      atomic_store(&c->prog_err, (int)r);
      break;
    }
    sched_yield();
  }
  return NULL;
}

static void reg(conn_t *c, void *data, size_t size, void **mh) {
  void *gh = NULL;
  if (T.v >= 14) {
    IT_OK(CALL_R14(regMrSym, c->cc, data, size, NCCL_PTR_HOST, 0, mh));
  } else {
    IT_OK(T.v == 11   ? G11->regMrSym(c->cc, data, size, NCCL_PTR_HOST, 0, mh, &gh)
          : T.v == 12 ? G12->regMrSym(c->cc, data, size, NCCL_PTR_HOST, 0, mh, &gh)
                      : G13->regMrSym(c->cc, data, size, NCCL_PTR_HOST, 0, mh, &gh));
    IT_CHECK(gh == *mh && gh != NULL, "ginHandle %p is the mhandle %p", gh, *mh);
  }
}

static void conn_open(conn_t *c, int ncontexts, int depth) {
  char all[MAXR][NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  void *handles[MAXR];
  int ndev = 0;
  memset(c, 0, sizeof(*c));
  memset(all, 0, sizeof(all));
  IT_OK(CALL(init, &c->inst, 0x1234, logger));
  IT_CHECK(atomic_load(&g_table_logged), "init through the v%d table: no \"GIN/RMA table v%d:\" line", T.v, T.v);
  IT_OK(CALL(devices, &ndev));
  IT_CHECK(ndev >= 1, "%d devices", ndev);
  if (T.v <= 12) {
    ncclNetProperties_v11_t p;
    IT_OK(T.v == 11 ? G11->getProperties(0, &p) : G12->getProperties(0, &p));
    g_max_recvs = p.maxRecvs;
    IT_CHECK(p.netDeviceType == NCCL_NET_DEVICE_GIN_PROXY, "netDeviceType %d", p.netDeviceType);
  } else {
    ncclNetProperties_v12_t p;
    IT_OK(CALL_V13(getProperties, 0, &p));
    g_max_recvs = p.maxRecvs;
    IT_CHECK(p.netDeviceType == NCCL_NET_DEVICE_GIN_PROXY, "netDeviceType %d", p.netDeviceType);
  }
  IT_OK(CALL(listen, c->inst, 0, all[g_rank], &lc));
  allgather_handles(all);
  for (int r = 0; r < g_n; r++) handles[r] = all[r];
  it_step("connecting the mesh");
  if (T.v == 12)
    IT_OK(G12->connect(c->inst, handles, g_n, g_rank, ncontexts, depth, lc, &c->cc));
  else
    IT_OK(CALL_NO12(connect, c->inst, handles, g_n, g_rank, lc, &c->cc));
  IT_CHECK(c->cc != NULL, "no collComm");
  IT_OK(CALL(closeListen, lc));
  c->ctx = c->cc;
  if (T.v == 13) {
    ncclGinConfig_v13_t cfg = {NSIGW, 16, ncontexts, depth, -1};
    IT_OK(G13->createContext(c->cc, &cfg, &c->gctx, NULL));
    c->ctx = c->gctx;
  } else if (T.v >= 14) {
    ncclRmaConfig_v14_t cfg = {ncontexts, -1, 1};
    IT_OK(CALL_R14(createContext, c->cc, &cfg, &c->gctx));
    c->ctx = c->gctx;
  }
  if (T.v == 16) {
    /* a signal orders only its own initiator's earlier puts here: NCCL must keep its per-peer flush */
    ncclRmaProperties_v16_t rp;
    memset(&rp, 0xff, sizeof(rp));
    IT_OK(R16->getRmaProperties(c->cc, &rp));
    IT_CHECK(!rp.flushesAllPutsOnAnySignal, "getRmaProperties: flushesAllPutsOnAnySignal is true");
    IT_CHECK(R16->getRmaProperties(NULL, &rp) == ncclInvalidArgument, "getRmaProperties took a NULL collComm");
    IT_CHECK(R16->getRmaProperties(c->cc, NULL) == ncclInvalidArgument, "getRmaProperties took NULL properties");
  }
  c->win = calloc(1, WIN);
  c->loc = calloc(1, WIN);
  c->sig = calloc(NSIGW, sizeof(uint64_t));
  IT_CHECK(c->win && c->loc && c->sig, "out of memory");
  it_step("registering the windows");
  reg(c, c->win, WIN, &c->wmh);
  reg(c, c->sig, NSIGW * sizeof(uint64_t), &c->smh);
  reg(c, c->loc, WIN, &c->lmh);
  IT_CHECK(pthread_mutex_init(&c->pmu, NULL) == 0, "mutex");
  IT_CHECK(pthread_create(&c->prog, NULL, progress_main, c) == 0, "pthread_create");
  IT_CHECK(getenv("GNIT_GIN_EXPECT_LOG") == NULL || atomic_load(&g_expect_seen),
           "the plugin never logged \"%s\": the test did not take the path it names", getenv("GNIT_GIN_EXPECT_LOG"));
}

/* The ranks order their steps by barriers over sockets, which ThreadSanitizer does not see as synchronisation. Window
 * bytes this thread wrote for a peer to get, and bytes a peer put that this thread reads after the peer's flush, are
 * ordered with the plugin's threads through the progress thread's mutex: this thread takes it once after writing
 * (before the barrier), and once before reading (after it). */
static void sync_progress(conn_t *c) {
  pthread_mutex_lock(&c->pmu);
  pthread_mutex_unlock(&c->pmu);
}

static ncclResult_t op_put_signal(conn_t *c, int context, uint64_t so, size_t size, uint64_t d, int rank, int slot,
                                  uint64_t val, uint32_t op, void **req);
static void wait_req(conn_t *c, void *req, const char *what);

/* sync_progress, and on the one-sided RDMA path the NIC too: a signal-only ADD 0 to this rank itself, waited for,
 * orders this thread's window writes before the (emulated) NIC's later reads for a peer, and the NIC's earlier
 * writes from a peer before this thread's reads (its completion). */
static void publish(conn_t *c) {
  void *r = NULL;
  sync_progress(c);
  IT_OK(op_put_signal(c, 0, 0, 0, 0, g_rank, NSIGW - 1, 0, NCCL_NET_SIGNAL_OP_ADD, &r));
  wait_req(c, r, "publish");
  sync_progress(c);
}

static void conn_stop_progress(conn_t *c) {
  atomic_store(&c->stop, 1);
  IT_CHECK(pthread_join(c->prog, NULL) == 0, "join");
}

static void conn_close(conn_t *c, int check_progress) {
  conn_stop_progress(c);
  if (check_progress) IT_CHECK(atomic_load(&c->prog_err) == 0, "progress returned %d", atomic_load(&c->prog_err));
  IT_OK(CALL(deregMrSym, c->cc, c->wmh));
  IT_OK(CALL(deregMrSym, c->cc, c->smh));
  IT_OK(CALL(deregMrSym, c->cc, c->lmh));
  if (c->gctx != NULL) IT_OK(CALL(destroyContext, c->gctx));
  IT_OK(CALL(closeColl, c->cc));
  IT_OK(CALL(finalize, c->inst));
  free(c->win);
  free(c->loc);
  free(c->sig);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- operations ---- */
static ncclResult_t op_put(conn_t *c, int context, uint64_t so, void *smh, size_t size, uint64_t d, void *dmh, int rank,
                           void **req) {
  if (T.v == 11) return G11->iput(c->ctx, so, smh, size, d, dmh, (uint32_t)rank, req);
  if (T.v == 12) return G12->iput(c->ctx, so, smh, size, d, dmh, (uint32_t)rank, context, req);
  if (T.v == 15) return R15->iput(c->ctx, context, so, smh, size, d, dmh, (uint32_t)rank, next_opt_flags(), req);
  if (T.v == 16) return R16->iput(c->ctx, context, so, smh, size, d, dmh, (uint32_t)rank, next_opt_flags(), req);
  return T.v == 13 ? G13->iput(c->ctx, context, so, smh, size, d, dmh, (uint32_t)rank, req)
                   : R14->iput(c->ctx, context, so, smh, size, d, dmh, (uint32_t)rank, req);
}
static ncclResult_t op_put_signal_at(conn_t *c, int context, uint64_t so, size_t size, uint64_t d, int rank,
                                     uint64_t sigoff, uint64_t val, uint32_t op, void **req) {
  void *smh = size > 0 ? c->wmh : NULL, *dmh = size > 0 ? c->wmh : NULL;
  if (T.v == 11) return G11->iputSignal(c->ctx, so, smh, size, d, dmh, (uint32_t)rank, sigoff, c->smh, val, op, req);
  if (T.v == 12)
    return G12->iputSignal(c->ctx, so, smh, size, d, dmh, (uint32_t)rank, sigoff, c->smh, val, op, context, req);
  if (T.v == 13)
    return G13->iputSignal(c->ctx, context, so, smh, size, d, dmh, (uint32_t)rank, sigoff, c->smh, val, op, req);
  if (T.v == 15)
    return R15->iputSignal(c->ctx, context, so, smh, size, d, dmh, (uint32_t)rank, sigoff, c->smh, val, op, true,
                           next_opt_flags(), req);
  if (T.v == 16)
    return R16->iputSignal(c->ctx, context, so, smh, size, d, dmh, (uint32_t)rank, sigoff, c->smh, val, op, true,
                           next_opt_flags(), req);
  return R14->iputSignal(c->ctx, context, so, smh, size, d, dmh, (uint32_t)rank, sigoff, c->smh, val, op, true, req);
}
/* v13+ */
static ncclResult_t op_get(conn_t *c, int context, uint64_t ro, size_t size, uint64_t lo, int rank, void **req) {
  if (T.v == 15) return R15->iget(c->ctx, context, ro, c->wmh, size, lo, c->lmh, (uint32_t)rank, next_opt_flags(), req);
  if (T.v == 16) return R16->iget(c->ctx, context, ro, c->wmh, size, lo, c->lmh, (uint32_t)rank, next_opt_flags(), req);
  return T.v == 13 ? G13->iget(c->ctx, context, ro, c->wmh, size, lo, c->lmh, (uint32_t)rank, req)
                   : R14->iget(c->ctx, context, ro, c->wmh, size, lo, c->lmh, (uint32_t)rank, req);
}
static ncclResult_t op_put_signal(conn_t *c, int context, uint64_t so, size_t size, uint64_t d, int rank, int slot,
                                  uint64_t val, uint32_t op, void **req) {
  return op_put_signal_at(c, context, so, size, d, rank, (uint64_t)slot * 8, val, op, req);
}

static void wait_req(conn_t *c, void *req, const char *what) {
  int done = 0;
  IT_CHECK(req != NULL, "%s: no request", what);
  while (!done) IT_OK(CALL(test, c->cc, req, &done));
}

static unsigned char pat(int from, int i, size_t k) { return (unsigned char)(from * 31 + i * 7 + k * 13 + (k >> 8)); }

static const size_t k_sizes[] = {0,
                                 1,
                                 7,
                                 8,
                                 9,
                                 255,
                                 256,
                                 257,
                                 4095,
                                 4096,
                                 65537,
                                 (1 << 20) + 3,
                                 (size_t)4 << 20,
                                 ((size_t)4 << 20) + 1,
                                 ((size_t)9 << 20) + 5};
#define NSIZES (int)(sizeof k_sizes / sizeof k_sizes[0])
static size_t off_of(int i) { return (size_t)i * 13 + (i % 2); } /* odd offsets too */

static size_t g_region[NSIZES + 1]; /* region(i), filled once */
static pthread_once_t g_region_once = PTHREAD_ONCE_INIT;

static void region_init(void) {
  size_t o = 0;
  for (int i = 0; i <= NSIZES; i++) {
    g_region[i] = o + off_of(i) % 8;
    if (i < NSIZES) o += k_sizes[i] + 64;
  }
}

/* region i of a window: sizes are laid out one after the other (a table: the sanitizer builds are -O0) */
static size_t region(int i) {
  IT_CHECK(pthread_once(&g_region_once, region_init) == 0, "pthread_once");
  return g_region[i];
}

/* size i's pattern from `from` written at p */
static void fill(unsigned char *p, int from, int i) {
  for (size_t k = 0; k < k_sizes[i]; k++) p[k] = pat(from, i, k);
}

/* the first byte at p that is not size i's pattern from `from`, or SIZE_MAX */
static size_t mismatch(const unsigned char *p, int from, int i) {
  for (size_t k = 0; k < k_sizes[i]; k++)
    if (p[k] != pat(from, i, k)) return k;
  return SIZE_MAX;
}

typedef struct {
  conn_t *c;
  int from;
  atomic_int checked;
  const char *err;
} reader_t;

/* Waits for every signal of the sizes test and checks its put's bytes at once: a signal must never be seen before
 * its data. */
static void *reader_main(void *arg) {
  reader_t *rd = arg;
  conn_t *c = rd->c;
  uint64_t t0 = now_ns();
  for (int i = 0; i < NSIZES; i++) {
    uint64_t want = i % 2 == 0 ? 1 : (uint64_t)i + 1000;
    while (__atomic_load_n(&c->sig[i], __ATOMIC_ACQUIRE) < want) {
      if (now_ns() - t0 > 120ull * 1000000000ull) {
        rd->err = "a signal never came";
        return NULL;
      }
    }
    const unsigned char *w = c->win + region(i);
    size_t k = mismatch(w, rd->from, i);
    if (k != SIZE_MAX) {
      rd->err = "a signal was seen before its data";
      fprintf(stderr, "size %zu byte %zu: %u, not %u\n", k_sizes[i], k, w[k], pat(rd->from, i, k));
      return NULL;
    }
    atomic_fetch_add(&rd->checked, 1);
  }
  return NULL;
}

/* puts of every size, each with a signal the peer's reader races; a repeated INC; signal-only */
static void check_puts(conn_t *c) {
  int to = (g_rank + 1) % g_n, from = (g_rank - 1 + g_n) % g_n;
  reader_t rd = {c, from, 0, NULL};
  pthread_t th;
  void *reqs[NSIZES];
  IT_CHECK(region(NSIZES) < WIN / 2 - 4096, "layout");
  for (int i = 0; i < NSIZES; i++) fill(c->loc + region(i), g_rank, i);
  memcpy(c->win + WIN / 2, c->loc, region(NSIZES)); /* the source: the upper half of the window */
  publish(c);
  hub_barrier();
  IT_CHECK(pthread_create(&th, NULL, reader_main, &rd) == 0, "pthread_create");
  it_step("putting every size with a signal to rank %d", to);
  for (int i = 0; i < NSIZES; i++) {
    uint32_t op = i % 2 == 0 ? NCCL_NET_SIGNAL_OP_INC : NCCL_NET_SIGNAL_OP_ADD;
    uint64_t val = i % 2 == 0 ? 77 : (uint64_t)i + 1000; /* INC ignores the value */
    reqs[i] = NULL;
    IT_OK(op_put_signal(c, 0, WIN / 2 + region(i), k_sizes[i], region(i), to, i, val, op, &reqs[i]));
    IT_CHECK(reqs[i] != NULL, "put %d refused", i);
  }
  for (int i = 0; i < NSIZES; i++) wait_req(c, reqs[i], "put");
  IT_CHECK(pthread_join(th, NULL) == 0, "join");
  IT_CHECK(rd.err == NULL, "reader: %s", rd.err);
  IT_CHECK(atomic_load(&rd.checked) == NSIZES, "%d of %d puts checked", atomic_load(&rd.checked), NSIZES);
  hub_barrier();
  /* 100 INCs on one word, and signal-only ADDs on another */
  it_step("100 INC signals and 10 signal-only ADDs");
  for (int i = 0; i < 100; i++) {
    void *r = NULL;
    IT_OK(op_put_signal(c, 0, WIN / 2, 8, 0, to, 300, 0, NCCL_NET_SIGNAL_OP_INC, &r));
    wait_req(c, r, "INC");
  }
  for (int i = 0; i < 10; i++) {
    void *r = NULL;
    IT_OK(op_put_signal(c, 0, 0, 0, 0, to, 301, 5, NCCL_NET_SIGNAL_OP_ADD, &r));
    wait_req(c, r, "signal only");
  }
  hub_barrier(); /* every rank's requests done: the applications are ordered before the completions? no: poll */
  for (uint64_t t0 = now_ns();
       __atomic_load_n(&c->sig[300], __ATOMIC_ACQUIRE) < 100 || __atomic_load_n(&c->sig[301], __ATOMIC_ACQUIRE) < 50;)
    IT_CHECK(now_ns() - t0 < 60ull * 1000000000ull, "signals %llu %llu", (unsigned long long)c->sig[300],
             (unsigned long long)c->sig[301]);
  hub_barrier();
  IT_CHECK(c->sig[300] == 100 && c->sig[301] == 50, "INC x100 gave %llu, ADD 5 x10 gave %llu",
           (unsigned long long)c->sig[300], (unsigned long long)c->sig[301]);
  /* past the peer's window: refused, nothing sent */
  {
    void *r = NULL;
    IT_CHECK(op_put(c, 0, 0, c->wmh, 16, WIN - 8, c->wmh, to, &r) != ncclSuccess && r == NULL,
             "a put past the peer's window was accepted");
    IT_CHECK(op_put_signal(c, 0, 0, 8, 0, to, NSIGW, 1, NCCL_NET_SIGNAL_OP_INC, &r) != ncclSuccess && r == NULL,
             "a signal past the peer's signal window was accepted");
    IT_CHECK(op_put_signal(c, 0, 0, 8, 0, to, 0, 1, 9, &r) != ncclSuccess && r == NULL, "signal op 9 was accepted");
    /* offset + length sums that wrap: refused with ncclInvalidArgument, nothing sent (the peer would fail the comm,
     * and every check after this one with it) */
    IT_CHECK(op_put_signal_at(c, 0, 0, 0, 0, to, UINT64_MAX - 7, 1, NCCL_NET_SIGNAL_OP_INC, &r) ==
                     ncclInvalidArgument &&
                 r == NULL,
             "a signal at offset 2^64-8 was not refused with ncclInvalidArgument");
    IT_CHECK(op_put_signal_at(c, 0, 0, 8, 0, to, UINT64_MAX - 7, 1, NCCL_NET_SIGNAL_OP_INC, &r) ==
                     ncclInvalidArgument &&
                 r == NULL,
             "a put with a signal at offset 2^64-8 was not refused with ncclInvalidArgument");
    IT_CHECK(op_put(c, 0, 16, c->wmh, SIZE_MAX - 7, 0, c->wmh, to, &r) == ncclInvalidArgument && r == NULL,
             "a put whose source range wraps was accepted");
    IT_CHECK(op_put(c, 0, 0, c->wmh, 16, UINT64_MAX - 7, c->wmh, to, &r) == ncclInvalidArgument && r == NULL,
             "a put whose target range wraps was accepted");
    if (T.v >= 13) {
      IT_CHECK(op_get(c, 0, UINT64_MAX - 7, 16, 0, to, &r) == ncclInvalidArgument && r == NULL,
               "a get whose remote range wraps was accepted");
      IT_CHECK(op_get(c, 0, 0, 16, UINT64_MAX - 7, to, &r) == ncclInvalidArgument && r == NULL,
               "a get whose local range wraps was accepted");
    }
  }
}

static void check_gets_flush(conn_t *c) {
  int to = (g_rank + 1) % g_n, from = (g_rank - 1 + g_n) % g_n;
  void *reqs[NSIZES];
  if (T.v < 13) return;
  for (int i = 0; i < NSIZES; i++) fill(c->win + region(i), g_rank + 10, i);
  memset(c->loc, 0, WIN);
  publish(c);
  hub_barrier();
  it_step("getting every size from rank %d", to);
  for (int i = 0; i < NSIZES; i++) {
    reqs[i] = NULL;
    IT_OK(op_get(c, i % 2, region(i), k_sizes[i], region(i), to, &reqs[i]));
    IT_CHECK(reqs[i] != NULL, "get %d refused", i);
  }
  for (int i = 0; i < NSIZES; i++) wait_req(c, reqs[i], "get");
  for (int i = 0; i < NSIZES; i++) {
    size_t k = mismatch(c->loc + region(i), to + 10, i);
    IT_CHECK(k == SIZE_MAX, "get of %zu bytes: byte %zu is %u, not %u", k_sizes[i], k, c->loc[region(i) + k],
             pat(to + 10, i, k));
  }
  hub_barrier();
  /* flush: puts without signals, then a flush; once it is done the bytes are at the target */
  it_step("puts then a flush to rank %d", to);
  for (int i = 0; i < NSIZES; i++) fill(c->win + WIN / 2 + region(i), g_rank + 20, i);
  publish(c);
  hub_barrier();
  for (int i = 0; i < NSIZES; i++) {
    reqs[i] = NULL;
    IT_OK(op_put(c, 0, WIN / 2 + region(i), c->wmh, k_sizes[i], region(i), c->wmh, to, &reqs[i]));
  }
  {
    void *f = NULL;
    IT_OK(CALL_V13(iflush, c->ctx, 0, c->smh, (uint32_t)to, &f));
    wait_req(c, f, "flush");
  }
  for (int i = 0; i < NSIZES; i++) wait_req(c, reqs[i], "put");
  hub_barrier(); /* every rank's flush is done: its target has the bytes */
  publish(c);
  for (int i = 0; i < NSIZES; i++) {
    size_t k = mismatch(c->win + region(i), from + 20, i);
    IT_CHECK(k == SIZE_MAX, "after the flush: %zu bytes, byte %zu is %u, not %u", k_sizes[i], k, c->win[region(i) + k],
             pat(from + 20, i, k));
  }
  publish(c); /* these reads before the plugin's next writes there */
  hub_barrier();
}

/* a full queue answers NULL, and takes again once a request is returned; every context has its own queue. Its puts
 * land below the upper half, clear of what the earlier checks read */
#define QDST (WIN / 2 - 4096)
static void check_queue(conn_t *c, int ncontexts, int depth) {
  int to = (g_rank + 1) % g_n;
  void **reqs = calloc((size_t)ncontexts * depth + 1, sizeof(void *));
  int n = 0;
  IT_CHECK(reqs != NULL, "oom");
  it_step("filling %d context(s) %d deep", ncontexts, depth);
  for (int x = 0; x < ncontexts; x++) {
    void *r = NULL;
    for (int i = 0; i < depth; i++) {
      r = NULL;
      IT_OK(op_put_signal(c, x, WIN / 2, 8, QDST + (size_t)x * 64, to, 400 + x, 1, NCCL_NET_SIGNAL_OP_ADD, &r));
      IT_CHECK(r != NULL, "context %d: put %d of %d refused", x, i, depth);
      reqs[n++] = r;
    }
    r = NULL;
    IT_OK(op_put_signal(c, x, WIN / 2, 8, QDST, to, 400 + x, 1, NCCL_NET_SIGNAL_OP_ADD, &r));
    IT_CHECK(r == NULL, "context %d: a put past the depth %d was taken", x, depth);
  }
  /* return one of context 0's: it takes one again */
  wait_req(c, reqs[0], "queue");
  reqs[0] = NULL;
  IT_OK(op_put_signal(c, 0, WIN / 2, 8, QDST, to, 400, 1, NCCL_NET_SIGNAL_OP_ADD, &reqs[0]));
  IT_CHECK(reqs[0] != NULL, "a freed slot was not taken again");
  for (int i = 0; i < n; i++) wait_req(c, reqs[i], "queue");
  hub_barrier();
  for (int x = 0; x < ncontexts; x++) {
    for (uint64_t t0 = now_ns(); __atomic_load_n(&c->sig[400 + x], __ATOMIC_ACQUIRE) < (uint64_t)depth + (x == 0);)
      IT_CHECK(now_ns() - t0 < 60ull * 1000000000ull, "context %d: signal %llu of %d", x,
               (unsigned long long)c->sig[400 + x], depth + (x == 0));
  }
  hub_barrier();
  for (int x = 0; x < ncontexts; x++)
    IT_CHECK(c->sig[400 + x] == (uint64_t)depth + (x == 0), "context %d: signal %llu, not %d", x,
             (unsigned long long)c->sig[400 + x], depth + (x == 0));
  free(reqs);
}

/* close with operations in flight: big puts, never tested, then closeColl (bounded by the watchdog) */
static void close_in_flight(conn_t *c) {
  int to = (g_rank + 1) % g_n;
  hub_barrier();
  it_step("closing with puts in flight");
  for (int i = 0; i < 8; i++) {
    void *r = NULL;
    IT_OK(op_put(c, 0, WIN / 2, c->wmh, (size_t)2 << 20, 0, c->wmh, to, &r));
  }
  hub_barrier();
}

static void peer_death(conn_t *c) {
  int to = g_n - 1;
  bool err = false;
  hub_barrier();
  if (g_rank == g_n - 1) _exit(0); /* dies with its comm open */
  it_step("rank %d died: operations towards it fail", to);
  uint64_t t0 = now_ns();
  for (;;) {
    void *r = NULL;
    ncclResult_t res = op_put(c, 0, WIN / 2, c->wmh, (size_t)1 << 20, 0, c->wmh, to, &r);
    int done = 0;
    if (res != ncclSuccess) break;
    if (r != NULL) {
      while (!done && res == ncclSuccess) res = CALL(test, c->cc, r, &done);
      if (res != ncclSuccess) break;
    }
    IT_CHECK(now_ns() - t0 < 90ull * 1000000000ull, "no error 90 s after the peer died");
  }
  IT_OK(CALL(queryLastError, c->ctx, &err));
  IT_CHECK(err, "queryLastError does not report the failed connection");
}

/* GDRNET_STATS_FILE (with %p): this process's gdrnet_gin_*_total counters, summed over the transports */
static uint64_t stat_of(const char *text, const char *name) {
  char key[128];
  uint64_t sum = 0;
  snprintf(key, sizeof(key), "%s{pid=\"%d\",", name, (int)getpid());
  for (const char *p = strstr(text, key); p != NULL; p = strstr(p + 1, key)) {
    const char *v = strchr(p, ' ');
    if (v != NULL) sum += strtoull(v + 1, NULL, 10);
  }
  return sum;
}

static void check_stats(void) {
  const char *pat_env = getenv("GDRNET_STATS_FILE");
  char path[512], text[65536];
  const char *q;
  size_t o = 0, n;
  FILE *f;
  if (pat_env == NULL) return;
  for (const char *p = pat_env; *p && o + 16 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'p')
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid()), p++;
    else
      path[o++] = *p;
  }
  path[o] = 0;
  f = fopen(path, "r");
  IT_CHECK(f != NULL, "stats file %s not written", path);
  n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = 0;
  q = text;
  IT_CHECK(stat_of(q, "gdrnet_gin_puts_total") >= (uint64_t)NSIZES + 110, "gin puts %llu",
           (unsigned long long)stat_of(q, "gdrnet_gin_puts_total"));
  IT_CHECK(stat_of(q, "gdrnet_gin_signals_total") >= (uint64_t)NSIZES + 110, "gin signals %llu",
           (unsigned long long)stat_of(q, "gdrnet_gin_signals_total"));
  IT_CHECK(stat_of(q, "gdrnet_gin_bytes_total") >= region(NSIZES) - 64 * NSIZES, "gin bytes %llu",
           (unsigned long long)stat_of(q, "gdrnet_gin_bytes_total"));
  IT_CHECK(T.v < 13 || stat_of(q, "gdrnet_gin_gets_total") >= (uint64_t)NSIZES, "gin gets %llu",
           (unsigned long long)stat_of(q, "gdrnet_gin_gets_total"));
  /* the last phase closes with puts in flight: a rank whose peer closed first may see that connection fail (an
   * abort, as with NCCL IB: the put the peer was sending is cut off), once per peer at most; an error before that
   * phase fails the operation's test() above */
  IT_CHECK(stat_of(q, "gdrnet_gin_errors_total") <= (uint64_t)(g_n - 1),
           "gin errors %llu (at most %d: the close "
           "with puts in flight)",
           (unsigned long long)stat_of(q, "gdrnet_gin_errors_total"), g_n - 1);
  /* GNIT_GIN_EXPECT_RECOVER=N: the one-sided RDMA path recovered in place at least N times in this process */
  if (getenv("GNIT_GIN_EXPECT_RECOVER") != NULL) {
    uint64_t want = strtoull(getenv("GNIT_GIN_EXPECT_RECOVER"), NULL, 10);
    IT_CHECK(stat_of(q, "gdrnet_gin_recoveries_total") >= want,
             "gin recoveries %llu, %llu expected: the test did "
             "not take the path it names",
             (unsigned long long)stat_of(q, "gdrnet_gin_recoveries_total"), (unsigned long long)want);
    it_log("%llu recovery(ies) in place, %llu operation(s) posted again",
           (unsigned long long)stat_of(q, "gdrnet_gin_recoveries_total"),
           (unsigned long long)stat_of(q, "gdrnet_gin_replayed_total"));
  }
  /* GNIT_GIN_NORDMA_RANK=k: the ranks with RDMA ran exactly their two connections with rank k (a send, a receive)
   * over TCP from the start and kept RDMA for the others; rank k ran none (it has no RDMA device) */
  if (getenv("GNIT_GIN_NORDMA_RANK") != NULL) {
    int k = (int)it_env_double("GNIT_GIN_NORDMA_RANK", -1);
    uint64_t tcp_only = stat_of(q, "gdrnet_tcp_only_connections_total");
    uint64_t conns = stat_of(q, "gdrnet_connections_total");
    IT_CHECK(tcp_only == (g_rank == k ? 0u : 2u), "rank %d: %llu connection(s) over TCP from the start", g_rank,
             (unsigned long long)tcp_only);
    IT_CHECK(conns >= tcp_only + 2 * (uint64_t)(g_n - 1), "rank %d: %llu connection(s), %llu over TCP from the start",
             g_rank, (unsigned long long)conns, (unsigned long long)tcp_only);
    it_log("rank %d: %llu connection(s), %llu over TCP from the start", g_rank, (unsigned long long)conns,
           (unsigned long long)tcp_only);
  }
  /* GNIT_GIN_EXPECT_MOVE=N: at least N peers of this process moved from the one-sided RDMA path to the message path
   * (a failed recovery, GDRNET_FALLBACK=1); every check above passed over the move */
  if (getenv("GNIT_GIN_EXPECT_MOVE") != NULL) {
    uint64_t want = strtoull(getenv("GNIT_GIN_EXPECT_MOVE"), NULL, 10);
    IT_CHECK(stat_of(q, "gdrnet_gin_moves_total") >= want,
             "gin moves %llu, %llu expected: the test did not take the path it names",
             (unsigned long long)stat_of(q, "gdrnet_gin_moves_total"), (unsigned long long)want);
    it_log("%llu peer(s) moved to the message path, %llu recovery(ies) in place, %llu error(s)",
           (unsigned long long)stat_of(q, "gdrnet_gin_moves_total"),
           (unsigned long long)stat_of(q, "gdrnet_gin_recoveries_total"),
           (unsigned long long)stat_of(q, "gdrnet_gin_errors_total"));
  }
}

/* VEMU_FAULTS makes one of this process's RDMA READs fail (GNIT_GIN_MODE=fault, RMA v14 on the one-sided RDMA path):
 * gets until one reports the error; queryLastError says so, closeColl returns. Never a hang (the watchdog). */
static void fault_run(conn_t *c) {
  int to = (g_rank + 1) % g_n;
  bool err = false;
  ncclResult_t res = ncclSuccess;
  hub_barrier();
  it_step("gets to rank %d until the injected fault", to);
  for (int i = 0; res == ncclSuccess; i++) {
    void *r = NULL;
    int done = 0;
    IT_CHECK(i < 10000, "no error after 10000 gets");
    res = op_get(c, 0, 0, 4096, 0, to, &r);
    while (res == ncclSuccess && r != NULL && !done) res = CALL(test, c->cc, r, &done);
  }
  IT_OK(CALL(queryLastError, c->ctx, &err));
  IT_CHECK(err, "queryLastError does not report the failed connection");
  hub_barrier();
}

/* GNIT_GIN_MODE=bye, on the ranks that stay after the last one closed cleanly: rounds of a put with a signal to the
 * next live rank (sizes from inline to chunked), each checked byte by byte at the target; then an operation towards
 * the rank that left fails with ncclRemoteError, and the comm reports no error. */
static void bye_run(conn_t *c) {
  int live = g_n - 1, to = (g_rank + 1) % live, from = (g_rank - 1 + live) % live, leaver = g_n - 1;
  const size_t sizes[] = {0, 8, 256, 257, 65537, ((size_t)4 << 20) + 3};
  const int nsz = (int)(sizeof sizes / sizeof sizes[0]);
  bool err = true;
  for (int i = 0; i < 4 * nsz; i++) {
    size_t size = sizes[i % nsz];
    void *r = NULL;
    for (size_t k = 0; k < size; k++) c->win[WIN / 2 + k] = pat(g_rank + 40, i, k);
    publish(c);
    hub_barrier();
    it_step("round %d: %zu bytes and a signal to rank %d after rank %d left", i, size, to, leaver);
    IT_OK(op_put_signal(c, i % 2, WIN / 2, size, 0, to, 200, 1, NCCL_NET_SIGNAL_OP_ADD, &r));
    wait_req(c, r, "put after a rank left");
    for (uint64_t t0 = now_ns(); __atomic_load_n(&c->sig[200], __ATOMIC_ACQUIRE) < (uint64_t)i + 1;)
      IT_CHECK(now_ns() - t0 < 60ull * 1000000000ull, "round %d: signal %llu", i, (unsigned long long)c->sig[200]);
    sync_progress(c);
    for (size_t k = 0; k < size; k++)
      IT_CHECK(c->win[k] == pat(from + 40, i, k), "round %d: %zu bytes from rank %d, byte %zu is %u, not %u", i, size,
               from, k, c->win[k], pat(from + 40, i, k));
    publish(c); /* these reads before the plugin's next writes there */
    hub_barrier();
  }
  IT_CHECK(c->sig[200] == (uint64_t)4 * nsz, "signal %llu, not %d", (unsigned long long)c->sig[200], 4 * nsz);
  it_step("an operation towards rank %d, which left", leaver);
  {
    void *r = NULL;
    int done = 0;
    ncclResult_t res = op_put(c, 0, WIN / 2, c->wmh, 4096, 0, c->wmh, leaver, &r);
    for (uint64_t t0 = now_ns(); res == ncclSuccess && r != NULL && !done;) {
      res = CALL(test, c->cc, r, &done);
      IT_CHECK(now_ns() - t0 < 60ull * 1000000000ull, "a put towards the rank that left is not failed in 60 s");
    }
    IT_CHECK(res == ncclRemoteError, "a put towards the rank that left gave %d (request %p), not ncclRemoteError",
             (int)res, r);
  }
  IT_OK(CALL(queryLastError, c->ctx, &err));
  IT_CHECK(!err, "queryLastError reports an error after a rank closed cleanly");
  hub_barrier();
}

/* this process's stats file (GDRNET_STATS_FILE with %p) into text; 0 if none */
static int read_stats(char *text, size_t len) {
  const char *pat_env = getenv("GDRNET_STATS_FILE");
  char path[512];
  size_t o = 0, n;
  FILE *f;
  if (pat_env == NULL) return 0;
  for (const char *p = pat_env; *p && o + 16 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'p')
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid()), p++;
    else
      path[o++] = *p;
  }
  path[o] = 0;
  f = fopen(path, "r");
  if (f == NULL) return 0;
  n = fread(text, 1, len - 1, f);
  fclose(f);
  text[n] = 0;
  return 1;
}

/* the value of series name (a gdrnet_conn_* gauge or counter) of this process's one-sided connection to rank 1 in
 * its stats file ("rdma-gin", dir "onesided", peer_rank 1); -1 if there is none */
static double stats_gin(const char *name) {
  static char text[1 << 18];
  char key[128];
  if (!read_stats(text, sizeof(text))) return -1;
  snprintf(key, sizeof(key), "\n%s{", name);
  for (const char *p = strstr(text, key); p != NULL; p = strstr(p + 1, key)) {
    const char *e = strchr(p + 1, '\n');
    if (e == NULL) break;
    char line[1024];
    snprintf(line, sizeof(line), "%.*s", (int)(e - p - 1), p + 1);
    const char *v = strrchr(line, ' ');
    if (strstr(line, "transport=\"rdma-gin\"") != NULL && strstr(line, "dir=\"onesided\"") != NULL &&
        strstr(line, "peer_rank=\"1\"") != NULL && v != NULL)
      return strtod(v + 1, NULL);
  }
  return -1;
}

/* GNIT_GIN_MODE=stall (2 ranks, the one-sided RDMA path, GDRNET_STALL_WARN_MS small): rank 0 stops rank 1 (SIGSTOP:
 * the emulated NIC of its process stops with it, so nothing rank 0 writes there is acknowledged), puts with a
 * signal towards it, and sees the stall detector's WARN name the one-sided peer ("rdma-gin", rank 1, the put+signal
 * of that size) and the stats file show the connection stalled; then SIGCONT: the put completes, its bytes and
 * signal arrive, and a "resumed" line follows. Every wait is for a condition, bounded. */
static void stall_run(conn_t *c) {
  const size_t size = 65536;
  void *r = NULL;
  hub_barrier();
  if (g_rank == 0) {
    char state = 0;
    for (size_t k = 0; k < size; k++) c->win[WIN / 2 + k] = pat(60, 0, k);
    sync_progress(c);
    it_step("stopping rank 1 (pid %d)", (int)g_pid[1]);
    IT_CHECK(kill(g_pid[1], SIGSTOP) == 0, "kill SIGSTOP");
    for (uint64_t t0 = now_ns(); state != 'T' && state != 't';) {
      char path[64], buf[512];
      snprintf(path, sizeof(path), "/proc/%d/stat", (int)g_pid[1]);
      FILE *f = fopen(path, "r");
      IT_CHECK(f != NULL, "%s: cannot read", path);
      size_t n = fread(buf, 1, sizeof(buf) - 1, f);
      fclose(f);
      buf[n] = 0;
      const char *e = strrchr(buf, ')');
      state = e != NULL && e[1] == ' ' ? e[2] : 0;
      IT_CHECK(now_ns() - t0 < 10ull * 1000000000ull, "rank 1 not stopped after 10 s (state %c)", state);
    }
    it_step("a put with a signal towards the stopped rank 1");
    IT_OK(op_put_signal(c, 0, WIN / 2, size, 0, 1, 300, 1, NCCL_NET_SIGNAL_OP_ADD, &r));
    IT_CHECK(r != NULL, "no request");
    for (uint64_t t0 = now_ns(); atomic_load(&g_gin_stall_warns) == 0 || stats_gin("gdrnet_conn_stalled") != 1;)
      IT_CHECK(now_ns() - t0 < 30ull * 1000000000ull, "%s after 30 s",
               atomic_load(&g_gin_stall_warns) == 0 ? "no stall WARN naming the one-sided peer"
                                                    : "the stats file does not show the one-sided peer stalled");
    pthread_mutex_lock(&g_gin_stall_mu);
    it_log("WARN: %s", g_gin_stall_line);
    IT_CHECK(strstr(g_gin_stall_line, "peer rank 1") != NULL, "the WARN does not name peer rank 1");
    IT_CHECK(strstr(g_gin_stall_line, "put+signal of 65536 bytes") != NULL, "the WARN does not name the put");
    IT_CHECK(strstr(g_gin_stall_line, "1 request(s) in flight") != NULL, "the WARN does not count 1 in flight");
    pthread_mutex_unlock(&g_gin_stall_mu);
    /* the message path's receives from the stopped rank stand posted for what it may send: not a stall */
    IT_CHECK(atomic_load(&g_recv_stall_warns) == 0, "%d stall WARN(s) about a standing receive of the message path",
             atomic_load(&g_recv_stall_warns));
    IT_CHECK(kill(g_pid[1], SIGCONT) == 0, "kill SIGCONT");
    wait_req(c, r, "the put towards the resumed rank");
    for (uint64_t t0 = now_ns(); atomic_load(&g_gin_resumed) == 0;)
      IT_CHECK(now_ns() - t0 < 30ull * 1000000000ull, "no \"resumed\" line 30 s after SIGCONT");
    /* the record counted it (the file is written at the resumption, or within GDRNET_STATS_INTERVAL_S) */
    for (uint64_t t0 = now_ns(); stats_gin("gdrnet_conn_stalled") != 0 || stats_gin("gdrnet_conn_bytes_total") < size ||
                                 stats_gin("gdrnet_conn_requests_total") < 1;)
      IT_CHECK(now_ns() - t0 < 30ull * 1000000000ull,
               "the stats file: the one-sided connection stalled %g, %g bytes in %g requests (%zu, 1 expected)",
               stats_gin("gdrnet_conn_stalled"), stats_gin("gdrnet_conn_bytes_total"),
               stats_gin("gdrnet_conn_requests_total"), size);
  } else {
    for (uint64_t t0 = now_ns(); __atomic_load_n(&c->sig[300], __ATOMIC_ACQUIRE) < 1;)
      IT_CHECK(now_ns() - t0 < 90ull * 1000000000ull, "the signal from rank 0 never came");
    sync_progress(c);
    for (size_t k = 0; k < size; k++)
      IT_CHECK(c->win[k] == pat(60, 0, k), "byte %zu is %u, not %u", k, c->win[k], pat(60, 0, k));
  }
  hub_barrier();
}

/* as NCCL >= 2.28 after the last finalize; the dl error state of a failed lookup (the verbs loader's optional symbols)
 * is released with it (LeakSanitizer does not scan TLS here) */
static void unload(void *lib) {
  (void)dlerror();
  IT_CHECK(dlclose(lib) == 0, "dlclose: %s", dlerror());
}

static int rank_main(int rank) {
  conn_t c;
  const char *mode = getenv("GNIT_GIN_MODE");
  int ncontexts, depth;
  void *lib;
  g_rank = rank;
  /* GNIT_GIN_NORDMA_RANK=k: rank k has no usable RDMA device (GDRNET_HCA selects none): every rank runs
   * GDRNET_TRANSPORT=auto, so rank k runs TCP and the others RDMA, with the message path to rank k */
  if (getenv("GNIT_GIN_NORDMA_RANK") != NULL) {
    IT_CHECK(setenv("GDRNET_TRANSPORT", "auto", 1) == 0, "setenv");
    if (rank == (int)it_env_double("GNIT_GIN_NORDMA_RANK", -1))
      IT_CHECK(setenv("GDRNET_HCA", "nomatch0", 1) == 0, "setenv");
  }
  /* GNIT_GIN_FAULT_RANK=r: only rank r keeps VEMU_FAULTS (the emulator reads it when the plugin loads it) */
  if (getenv("GNIT_GIN_FAULT_RANK") != NULL && atoi(getenv("GNIT_GIN_FAULT_RANK")) != rank) unsetenv("VEMU_FAULTS");
  lib = load_table();
  ncontexts = T.v == 11 ? 1 : 4;
  depth = T.v == 11 || T.v >= 14 ? 0 : 16; /* v14+: no depth in the config */
  conn_open(&c, ncontexts, depth);
  if (depth == 0) depth = NCCL_NET_MAX_REQUESTS * g_max_recvs; /* the default: NCCL's own GIN proxy queue size */
  if (mode != NULL && !strcmp(mode, "fault")) {
    fault_run(&c);
    conn_stop_progress(&c);
    if (c.gctx != NULL) IT_OK(CALL(destroyContext, c.gctx));
    IT_OK(CALL(closeColl, c.cc)); /* with the failed connection (and the windows still registered): returns */
    IT_OK(CALL(finalize, c.inst));
    free(c.win), free(c.loc), free(c.sig);
    unload(lib);
    return 0;
  }
  if (mode != NULL && !strcmp(mode, "peerdeath")) {
    peer_death(&c);
    conn_stop_progress(&c);
    if (c.gctx != NULL) IT_OK(CALL(destroyContext, c.gctx));
    IT_OK(CALL(closeColl, c.cc)); /* with the failed connection: returns */
    IT_OK(CALL(finalize, c.inst));
    free(c.win), free(c.loc), free(c.sig);
    unload(lib);
    return 0;
  }
  if (mode != NULL && !strcmp(mode, "stall")) {
    stall_run(&c);
    conn_close(&c, 1);
    hub_barrier();
    unload(lib);
    return 0;
  }
  if (mode != NULL && !strcmp(mode, "bye")) {
    hub_barrier();
    if (g_rank == g_n - 1) { /* leaves: nothing in flight */
      conn_close(&c, 1);
      hub_barrier();
      unload(lib);
      return 0;
    }
    hub_barrier(); /* the last rank has closed */
    g_live = g_n - 1;
    bye_run(&c);
    conn_close(&c, 1);
    hub_barrier();
    unload(lib);
    return 0;
  }
  /* GNIT_GIN_EXPECT_FALLBACK=1: the one-sided RDMA path could not be brought up, said in a WARN, and every check
   * below runs over the message path; =0: it was brought up (no such WARN) */
  if (getenv("GNIT_GIN_EXPECT_FALLBACK") != NULL) {
    int want = atoi(getenv("GNIT_GIN_EXPECT_FALLBACK"));
    IT_CHECK(want ? atomic_load(&g_fallback_warns) >= 1 : atomic_load(&g_fallback_warns) == 0,
             "%d WARN(s) that the one-sided RDMA path fell back to messages, GNIT_GIN_EXPECT_FALLBACK=%d",
             atomic_load(&g_fallback_warns), want);
  }
  check_puts(&c);
  check_gets_flush(&c);
  check_queue(&c, ncontexts, depth);
  close_in_flight(&c);
  conn_close(&c, 0);
  check_stats();
  hub_barrier();
  unload(lib);
  return 0;
}

static int child_main(int fd, void *arg) {
  g_fd[0] = fd;
  return rank_main((int)(intptr_t)arg);
}

int main(void) {
  it_child_t ch[MAXR];
  g_n = (int)it_env_double("GNIT_GIN_RANKS", 2);
  g_live = g_n;
  const char *mode = getenv("GNIT_GIN_MODE");
  it_init("gin", 240);
  IT_CHECK(g_n >= 2 && g_n <= MAXR, "GNIT_GIN_RANKS=%d: 2..%d", g_n, MAXR);
  IT_CHECK(mode == NULL || strcmp(mode, "bye") != 0 || g_n >= 3, "GNIT_GIN_MODE=bye needs GNIT_GIN_RANKS >= 3");
  for (int r = 1; r < g_n; r++) {
    it_fork(&ch[r], child_main, (void *)(intptr_t)r);
    g_fd[r] = ch[r].fd;
    g_pid[r] = ch[r].pid;
  }
  rank_main(0);
  for (int r = 1; r < g_n; r++) {
    if (mode != NULL && !strcmp(mode, "peerdeath") && r == g_n - 1)
      (void)it_reap(&ch[r], 60);
    else
      it_join(&ch[r], 120);
  }
  it_log("PASS");
  return 0;
}
