/* GIN over the RDMA transport at many ranks (GNIT_MANY_RANKS, default 512), on the verbs emulator, in two processes.
 * Rank 0 (the parent) is the plugin's RMA v14 comm (ncclRmaPlugin_v14, through the .so as NCCL loads it) in a mesh
 * of n ranks; the child plays the other n - 1 ranks, each only towards rank 0 (they never talk to each other):
 *   the mesh       per fake rank a listen comm, a send comm to rank 0 and a receive comm from it, with the plugin's
 *                  ncclNet table (the RDMA transport's net-core connections, as real ranks have them), and the
 *                  16-byte introduction (rank, n, GIN_CAP_BYE);
 *   the QP         on rank 0's GIN_OP_QP, an RC QP of the fake's own on the emulator (the device whose GID rank 0
 *                  sent), connected to rank 0's and brought to RTS, then GIN_OP_QP with its address (the signal ring
 *                  rank 0 announced, an inbox, a credit word) and GIN_OP_QP_READY;
 *   the window     on rank 0's GIN_OP_REG, one of its own: 4 KiB registered REMOTE_WRITE, announced by GIN_OP_REG;
 *   the close      on GIN_OP_BYE, nothing more posted.
 * GNIT_MANY_MODE=rdma (default): rank 0 must come up on the one-sided RDMA path: its INFO line "one-sided RDMA on"
 * with a CQ of at most the device's max_cqe (ibv_query_device); then iputSignal (64 bytes and a signal) to five
 * fake ranks (1, 2, n/2, n-2, n-1): each completes; each target's RDMA WRITE lands in its window, and its signal
 * record (window 0, offset 0, value = its rank, seq 0) in its inbox with a WRITE_WITH_IMM receive completion.
 * GNIT_MANY_MODE=empty: every fake rank answers with an empty GIN_OP_QP (it cannot bring its end up): rank 0 must
 * connect anyway, with one WARN "one-sided operations go as messages", and the same five iputSignal go as messages
 * (the fake ranks check the inline PUT: bytes, window, signal).
 * Both modes: no other WARN; connect returns ncclSuccess within GNIT_MANY_CONNECT_S (default 60 s); deregMrSym,
 * destroyContext and closeColl return ncclSuccess and every fake rank gets its GIN_OP_BYE (the clean close said to
 * all n - 1); and three memory bounds on rank 0's connect (/proc/self/status, after minus before):
 *   resident (VmHWM - VmRSS) < GNIT_MANY_MAX_MB (default 300 MB). At 512 ranks it is mostly the net core's 2 x 512
 *     RDMA connections (struct gdr_rdma_comm and its request pool in the plugin, QPs and CQ rings in the emulator:
 *     ~190 KB each): 216-220 MB measured on either path;
 *   GIN's own resident part < GNIT_MANY_GIN_MB (default 64 MB): rank 0's growth minus the helper's over its 2 x 511
 *     net-core connections (the same connections without a GIN comm: 195 MB measured). Expected from GIN's budgets:
 *     at most 2^16 message FIFO entries over all peers (a 328-byte header slot and a 72-byte entry each: ~26 MB),
 *     the request pool and the one-sided path's operations (2^16 each: ~11 MB), the signal inbox and outbox
 *     (2 x n x 512 slots x 32 bytes: 16.8 MB), less where untouched: 21 MB measured;
 *   mapped (VmPeak - VmSize) < GNIT_MANY_MAX_VM_MB (default 1000 MB). The emulator touches no page at registration,
 *     where an HCA pins every registered byte: memory allocated and registered but unwritten shows only here. 496 MB
 *     measured: the net core's connections with their threads' malloc arenas (the helper: 309-437 MB), the CQ of
 *     1048128 entries (GIN_RDMA_CQE_BUDGET; 64 bytes each in the emulator: 67 MB; mlx5's CQEs are 64 bytes too),
 *     GIN's budgets. The CQ at the device's max_cqe (4193856 entries) measured 688 MB; the message path's per-peer
 *     rings before its budget (1.5 MB each: 768 MB) fail it (1567 MB measured).
 * The sanitizer builds check no bound (shadow memory); ThreadSanitizer's runs 128 ranks.
 * What it does not prove: that n real processes or n real HCAs scale (the fake ranks share one process, one verbs
 * context and one CQ), nor any traffic between fake ranks. The test raises RLIMIT_NOFILE's soft limit towards the
 * hard one (at most 65536): rank 0 holds about 2n sockets. */
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "gdrnet/gin.h"
#include "gin_wire.h"
#include "it.h"

#define WIN 4096
#define PUT_LEN 64
#define DST_OFF 256
#define MSG_MAX (72 + 256)
#define SLOT 128 /* a fake rank's outgoing message (the largest: a header and a QP address) */
#define NTARGETS 5
#define FAKE_RECVS 8 /* receives posted on a fake rank's QP (one signal arrives) */

static int g_n;
static int g_empty;
static void targets(int t[NTARGETS]) { t[0] = 1, t[1] = 2, t[2] = g_n / 2, t[3] = g_n - 2, t[4] = g_n - 1; }
static uint8_t pat(int target, int j) { return (uint8_t)(target * 7 + j + 1); }

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void raise_nofile(void) {
  struct rlimit rl;
  IT_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit: %s", strerror(errno));
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = want;
    IT_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
  }
  IT_CHECK(rl.rlim_cur >= (rlim_t)(3 * g_n + 64), "RLIMIT_NOFILE %llu: %d ranks need about %d descriptors",
           (unsigned long long)rl.rlim_cur, g_n, 3 * g_n + 64);
}

/* ---- the verbs calls the test makes itself (the emulator the plugin loads: GDRNET_IBVERBS_LIB) ---- */
static struct {
  struct ibv_device **(*get_list)(int *);
  void (*free_list)(struct ibv_device **);
  struct ibv_context *(*open)(struct ibv_device *);
  int (*close)(struct ibv_context *);
  int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
  int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *);
  int (*dealloc_pd)(struct ibv_pd *);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
  int (*dereg_mr)(struct ibv_mr *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
  int (*destroy_cq)(struct ibv_cq *);
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
} V;

static void verbs_load(void) {
  const char *lib = getenv("GDRNET_IBVERBS_LIB");
  void *h = dlopen(lib != NULL && *lib ? lib : "libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  IT_CHECK(h != NULL, "dlopen(%s): %s", lib != NULL && *lib ? lib : "libibverbs.so.1", dlerror());
#define SYM(f, s) IT_CHECK((*(void **)&V.f = dlsym(h, s)) != NULL, "the verbs library lacks %s", s)
  SYM(get_list, "ibv_get_device_list");
  SYM(free_list, "ibv_free_device_list");
  SYM(open, "ibv_open_device");
  SYM(close, "ibv_close_device");
  SYM(query_device, "ibv_query_device");
  SYM(query_port, "ibv_query_port");
  SYM(query_gid, "ibv_query_gid");
  SYM(alloc_pd, "ibv_alloc_pd");
  SYM(dealloc_pd, "ibv_dealloc_pd");
  SYM(reg_mr, "ibv_reg_mr");
  SYM(dereg_mr, "ibv_dereg_mr");
  SYM(create_cq, "ibv_create_cq");
  SYM(destroy_cq, "ibv_destroy_cq");
  SYM(create_qp, "ibv_create_qp");
  SYM(modify_qp, "ibv_modify_qp");
  SYM(destroy_qp, "ibv_destroy_qp");
#undef SYM
}

/* ---- rank 0: the plugin's RMA v14 comm ---- */
static const ncclRma_v14_t *R;
static atomic_int g_warns, g_fallback_warns, g_rdma_up;
static char g_rdma_line[512];

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  (void)flags;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN) {
    if (strstr(msg, "one-sided operations go as messages") != NULL)
      atomic_fetch_add(&g_fallback_warns, 1);
    else
      atomic_fetch_add(&g_warns, 1);
  }
  if (level == NCCL_LOG_INFO && strstr(msg, "one-sided RDMA on") != NULL && strstr(msg, "a CQ of") != NULL) {
    snprintf(g_rdma_line, sizeof(g_rdma_line), "%s", msg);
    atomic_store(&g_rdma_up, 1);
  }
  if (level == NCCL_LOG_WARN || getenv("GNIT_GIN_VERBOSE") != NULL)
    fprintf(stderr, "[plugin %d] %s:%d %s\n", (int)getpid(), file, line, msg);
}

/* VmRSS / VmHWM of this process, in kB */
static long status_kb(const char *key) {
  char line[256];
  long v = -1;
  size_t k = strlen(key);
  FILE *f = fopen("/proc/self/status", "r");
  IT_CHECK(f != NULL, "/proc/self/status: %s", strerror(errno));
  while (fgets(line, sizeof(line), f) != NULL)
    if (!strncmp(line, key, k) && line[k] == ':') v = atol(line + k + 1);
  fclose(f);
  IT_CHECK(v >= 0, "no %s in /proc/self/status", key);
  return v;
}

static int device_max_cqe(void) {
  int nd = 0, max_cqe = -1;
  struct ibv_device **l = V.get_list(&nd);
  IT_CHECK(l != NULL && nd > 0, "the verbs library shows no device");
  struct ibv_context *ctx = V.open(l[0]);
  struct ibv_device_attr da;
  IT_CHECK(ctx != NULL, "ibv_open_device failed");
  memset(&da, 0, sizeof(da));
  IT_CHECK(V.query_device(ctx, &da) == 0, "ibv_query_device failed");
  max_cqe = da.max_cqe;
  IT_CHECK(V.close(ctx) == 0, "ibv_close_device");
  V.free_list(l);
  return max_cqe;
}

static void wait_req(void *cc, void *ctx, void *req, int target) {
  int done = 0;
  uint64_t t0 = now_ns();
  while (!done) {
    IT_OK(R->rmaProgress(ctx));
    IT_OK(R->test(cc, req, &done));
    IT_CHECK(now_ns() - t0 < 30ull * 1000000000ull, "the put to rank %d never completed", target);
    if (!done) sched_yield();
  }
}

static void rank0(int fd) {
  static char hs[8192][NCCL_NET_HANDLE_MAXSIZE];
  void *handles[8192];
  void *lib, *inst = NULL, *lc = NULL, *cc = NULL, *ctx = NULL, *mh = NULL;
  unsigned char *win = calloc(1, WIN);
  int t[NTARGETS], max_cqe = g_empty ? 0 : device_max_cqe(), ndev = 0;
  long rss0, hwm0, rss1, hwm1, gin_kb, max_mb = (long)it_env_double("GNIT_MANY_MAX_MB", 300);
  long gin_mb = (long)it_env_double("GNIT_MANY_GIN_MB", 64);
  long vm0, vm1, max_vm_mb = (long)it_env_double("GNIT_MANY_MAX_VM_MB", 1000);
  uint64_t net_kb = 0, net_vm_kb = 0;
  double connect_s, max_s = it_env_double("GNIT_MANY_CONNECT_S", 60);
  uint64_t t0;
  char rep;
  IT_CHECK(win != NULL, "oom");
  lib = dlopen(it_plugin_path(), RTLD_NOW | RTLD_LOCAL);
  IT_CHECK(lib != NULL, "dlopen %s: %s", it_plugin_path(), dlerror());
  R = dlsym(lib, "ncclRmaPlugin_v14");
  IT_CHECK(R != NULL, "ncclRmaPlugin_v14 not exported");
  IT_OK(R->init(&inst, 0x512, logger));
  IT_OK(R->devices(&ndev));
  IT_CHECK(ndev >= 1, "%d devices", ndev);
  memset(hs, 0, sizeof(hs));
  IT_OK(R->listen(inst, 0, hs[0], &lc));
  it_step("exchanging %d handles", g_n);
  IT_CHECK(gn_boot_recv(fd, hs[1], (size_t)(g_n - 1) * NCCL_NET_HANDLE_MAXSIZE, 120) == 0, "handles of the fakes");
  IT_CHECK(gn_boot_send(fd, hs[0], NCCL_NET_HANDLE_MAXSIZE) == 0, "rank 0's handle");
  for (int r = 0; r < g_n; r++) handles[r] = hs[r];
  rss0 = status_kb("VmRSS"), hwm0 = status_kb("VmHWM"), vm0 = status_kb("VmSize");
  it_step("connecting %d ranks", g_n);
  t0 = now_ns();
  IT_OK(R->connect(inst, handles, g_n, 0, lc, &cc));
  connect_s = (now_ns() - t0) / 1e9;
  rss1 = status_kb("VmRSS"), hwm1 = status_kb("VmHWM"), vm1 = status_kb("VmPeak");
  IT_CHECK(cc != NULL, "no collComm");
  IT_OK(R->closeListen(lc));
  it_log("rank 0 of %d connected in %.2f s; VmRSS %ld -> %ld MB, VmHWM %ld -> %ld MB (bound: %ld MB of growth), "
         "VmSize %ld -> VmPeak %ld MB (bound: %ld MB of growth)",
         g_n, connect_s, rss0 / 1024, rss1 / 1024, hwm0 / 1024, hwm1 / 1024, max_mb, vm0 / 1024, vm1 / 1024, max_vm_mb);
  IT_CHECK(connect_s < max_s, "the connect took %.1f s (GNIT_MANY_CONNECT_S=%.0f)", connect_s, max_s);
  IT_CHECK(hwm1 - rss0 < max_mb * 1024, "the connect grew rank 0 by %ld MB (VmHWM), more than %ld MB",
           (hwm1 - rss0) / 1024, max_mb);
  IT_CHECK(vm1 - vm0 < max_vm_mb * 1024, "the connect mapped %ld MB more in rank 0 (VmPeak), more than %ld MB",
           (vm1 - vm0) / 1024, max_vm_mb);
  if (g_empty) {
    IT_CHECK(atomic_load(&g_fallback_warns) == 1 && !atomic_load(&g_rdma_up),
             "every fake rank sent an empty QP address: %d WARN(s) of the fall back to messages, RDMA up %d",
             atomic_load(&g_fallback_warns), atomic_load(&g_rdma_up));
  } else {
    const char *p = strstr(g_rdma_line, "a CQ of ");
    long cqe;
    IT_CHECK(atomic_load(&g_rdma_up) && p != NULL, "no \"one-sided RDMA on\" INFO line: the one-sided path is not up");
    cqe = atol(p + 8);
    it_log("%s", g_rdma_line);
    IT_CHECK(cqe > g_n && cqe <= max_cqe, "a CQ of %ld entries for %d ranks, the device's max_cqe %d", cqe, g_n,
             max_cqe);
    IT_CHECK(atomic_load(&g_fallback_warns) == 0, "the one-sided path fell back to messages");
  }
  IT_CHECK(atomic_load(&g_warns) == 0, "%d WARN(s) at the connect", atomic_load(&g_warns));

  it_step("one window on %d ranks", g_n);
  {
    ncclRmaConfig_v14_t cfg = {1, -1, 1};
    IT_OK(R->createContext(cc, &cfg, &ctx));
  }
  IT_OK(R->regMrSym(cc, win, WIN, NCCL_PTR_HOST, 0, &mh));
  targets(t);
  for (int i = 0; i < NTARGETS; i++)
    for (int j = 0; j < PUT_LEN; j++) win[1024 + i * PUT_LEN + j] = pat(t[i], j);
  for (int i = 0; i < NTARGETS; i++) {
    void *req = NULL;
    it_step("iputSignal to rank %d", t[i]);
    while (req == NULL) {
      IT_OK(R->iputSignal(ctx, 0, 1024 + (uint64_t)i * PUT_LEN, mh, PUT_LEN, DST_OFF, mh, (uint32_t)t[i], 0, mh,
                          (uint64_t)t[i], NCCL_NET_SIGNAL_OP_ADD, true, &req));
      if (req == NULL) IT_OK(R->rmaProgress(ctx));
    }
    wait_req(cc, ctx, req, t[i]);
  }
  it_step("the fake ranks check what landed");
  IT_CHECK(gn_boot_recv(fd, &rep, 1, 60) == 0, "no report from the fake ranks");
  IT_CHECK(rep == 'k', "the fake ranks found the puts or signals wrong (see above)");
  IT_CHECK(gn_boot_recv_u64(fd, &net_kb, 10) == 0 && gn_boot_recv_u64(fd, &net_vm_kb, 10) == 0, "the helper's memory");
  gin_kb = hwm1 - rss0 - (long)net_kb;
  it_log("the helper's %d x 2 net-core connections took %ld MB (%ld MB mapped): rank 0's GIN comm itself about %ld MB "
         "(bound: %ld MB)",
         g_n - 1, (long)net_kb / 1024, (long)net_vm_kb / 1024, gin_kb / 1024, gin_mb);
  IT_CHECK(gin_kb < gin_mb * 1024,
           "rank 0 grew by %ld MB more than the helper's net-core connections: more than %ld MB", gin_kb / 1024,
           gin_mb);
  it_step("closing");
  IT_OK(R->deregMrSym(cc, mh));
  IT_OK(R->destroyContext(ctx));
  IT_OK(R->closeColl(cc));
  IT_CHECK(atomic_load(&g_warns) == 0, "%d WARN(s)", atomic_load(&g_warns));
  IT_OK(R->finalize(inst));
  IT_CHECK(gn_boot_send(fd, "d", 1) == 0, "done to the fake ranks");
  IT_CHECK(gn_boot_recv(fd, &rep, 1, 60) == 0 && rep == 'b', "not every fake rank got GIN_OP_BYE");
  (void)dlerror();
  IT_CHECK(dlclose(lib) == 0, "dlclose: %s", dlerror());
  it_log("%d ranks: %s path up, %d puts with signals checked, closed cleanly", g_n,
         g_empty ? "message (every fake rank refused the QP)" : "one-sided RDMA", NTARGETS);
  free(win);
}

/* ---- ranks 1..n-1: one helper process ---- */
typedef struct {
  void *lc, *s, *r, *smh, *rmh, *sreq, *rreq;
  unsigned char *sb, *rb; /* 4 x SLOT outgoing, MSG_MAX incoming */
  int slen[4], nq, ns, nrecv, bye, ready, signals;
  struct ibv_qp *qp;
  uint64_t put_seen; /* messages mode: the inline put checked */
} fake_t;

typedef struct {
  it_plugin_t ip;
  fake_t *f;
  unsigned char *slab;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_mr *win_mr, *inbox_mr, *credit_mr;
  unsigned char *wins; /* [n][WIN] */
  struct sig_rec *inbox;
  uint64_t *credits;
  int ring, gid_index, lid, link_layer, active_mtu;
  union ibv_gid gid;
} helper_t;

static void queue_msg(fake_t *f, const void *a, size_t alen, const void *b, size_t blen) {
  IT_CHECK(f->nq < 4 && alen + blen <= SLOT, "a fake rank's outgoing queue is full");
  memcpy(f->sb + f->nq * SLOT, a, alen);
  if (blen > 0) memcpy(f->sb + f->nq * SLOT + alen, b, blen);
  f->slen[f->nq++] = (int)(alen + blen);
}

static struct hdr H(uint16_t op) {
  struct hdr h;
  memset(&h, 0, sizeof(h));
  h.magic = WIRE_MAGIC, h.op = op;
  return h;
}

/* the device rank 0 runs on: the one whose port has its link layer and GID; with it the fake ranks' objects */
static void
helper_verbs(helper_t *x, const struct qpinfo *q) {
  int nd = 0;
  struct ibv_device **l = V.get_list(&nd);
  IT_CHECK(l != NULL && nd > 0, "the verbs library shows no device");
  for (int d = 0; d < nd && x->ctx == NULL; d++) {
    struct ibv_context *ctx = V.open(l[d]);
    struct ibv_port_attr pa;
    IT_CHECK(ctx != NULL, "ibv_open_device failed");
    memset(&pa, 0, sizeof(pa));
    IT_CHECK(V.query_port(ctx, 1, &pa) == 0, "ibv_query_port failed");
    for (int i = 0; pa.link_layer == q->link_layer && i < pa.gid_tbl_len && x->ctx == NULL; i++) {
      union ibv_gid g;
      if (V.query_gid(ctx, 1, i, &g) == 0 && !memcmp(g.raw, q->gid, 16)) {
        x->ctx = ctx, x->gid_index = i, x->gid = g, x->lid = pa.lid, x->link_layer = pa.link_layer;
        x->active_mtu = pa.active_mtu;
      }
    }
    if (x->ctx == NULL) IT_CHECK(V.close(ctx) == 0, "ibv_close_device");
  }
  V.free_list(l);
  IT_CHECK(x->ctx != NULL, "no device has rank 0's GID");
  x->ring = (int)q->ring;
  IT_CHECK(x->ring >= 1, "rank 0 announced a signal ring of %d slots", x->ring);
  x->pd = V.alloc_pd(x->ctx);
  IT_CHECK(x->pd != NULL, "ibv_alloc_pd failed");
  x->cq = V.create_cq(x->ctx, g_n * (FAKE_RECVS + 2) + 64, NULL, NULL, 0);
  IT_CHECK(x->cq != NULL, "ibv_create_cq failed: %s", strerror(errno));
  x->wins = calloc((size_t)g_n, WIN);
  x->inbox = calloc((size_t)g_n * (size_t)x->ring, sizeof(struct sig_rec));
  x->credits = calloc((size_t)g_n, sizeof(uint64_t));
  IT_CHECK(x->wins && x->inbox && x->credits, "oom");
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  x->win_mr = V.reg_mr(x->pd, x->wins, (size_t)g_n * WIN, rw);
  x->inbox_mr = V.reg_mr(x->pd, x->inbox, (size_t)g_n * (size_t)x->ring * sizeof(struct sig_rec), rw);
  x->credit_mr = V.reg_mr(x->pd, x->credits, (size_t)g_n * sizeof(uint64_t), rw);
  IT_CHECK(x->win_mr && x->inbox_mr && x->credit_mr, "ibv_reg_mr failed: %s", strerror(errno));
}

/* fake rank k's QP towards rank 0 (q: rank 0's address for it), at RTS, with its address in *me */
static void fake_qp(helper_t *x, int k, const struct qpinfo *q, struct qpinfo *me) {
  fake_t *f = &x->f[k];
  struct ibv_qp_init_attr a;
  struct ibv_qp_attr at;
  if (x->ctx == NULL) helper_verbs(x, q);
  IT_CHECK((int)q->ring == x->ring, "rank 0 announced rings of %u and %d slots", q->ring, x->ring);
  memset(&a, 0, sizeof(a));
  a.send_cq = a.recv_cq = x->cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 1;
  a.cap.max_recv_wr = FAKE_RECVS;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  f->qp = V.create_qp(x->pd, &a);
  IT_CHECK(f->qp != NULL, "ibv_create_qp (fake rank %d): %s", k, strerror(errno));
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  IT_CHECK(V.modify_qp(f->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
           "fake rank %d: QP to INIT", k);
  for (int i = 0; i < FAKE_RECVS; i++) {
    struct ibv_recv_wr rw, *bad = NULL;
    struct ibv_sge none = {0, 0, 0};
    memset(&rw, 0, sizeof(rw));
    rw.wr_id = (uint64_t)k;
    rw.sg_list = &none;
    IT_CHECK(ibv_post_recv(f->qp, &rw, &bad) == 0, "fake rank %d: ibv_post_recv", k);
  }
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = (enum ibv_mtu)(q->mtu < x->active_mtu ? q->mtu : x->active_mtu);
  at.dest_qp_num = q->qpn;
  at.rq_psn = q->psn;
  at.max_dest_rd_atomic = 1;
  at.min_rnr_timer = 12;
  at.ah_attr.dlid = q->lid;
  at.ah_attr.port_num = 1;
  if (x->link_layer == IBV_LINK_LAYER_ETHERNET) {
    at.ah_attr.is_global = 1;
    memcpy(at.ah_attr.grh.dgid.raw, q->gid, 16);
    at.ah_attr.grh.sgid_index = (uint8_t)x->gid_index;
    at.ah_attr.grh.hop_limit = 255;
  }
  IT_CHECK(V.modify_qp(f->qp, &at,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
           "fake rank %d: QP to RTR", k);
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTS;
  at.timeout = 14;
  at.retry_cnt = 7;
  at.rnr_retry = 7;
  at.sq_psn = (uint32_t)k * 7u;
  at.max_rd_atomic = 1;
  IT_CHECK(V.modify_qp(f->qp, &at,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC) == 0,
           "fake rank %d: QP to RTS", k);
  memset(me, 0, sizeof(*me));
  me->qpn = f->qp->qp_num;
  me->psn = (uint32_t)k * 7u;
  me->lid = (uint16_t)x->lid;
  me->mtu = (uint8_t)x->active_mtu;
  me->link_layer = (uint8_t)x->link_layer;
  memcpy(me->gid, x->gid.raw, 16);
  /* rank 0's records land at inbox_va + (0 x ring + slot) x 32: this fake rank's own part of the inbox */
  me->inbox_va = (uint64_t)(uintptr_t)&x->inbox[(size_t)k * (size_t)x->ring];
  me->inbox_rkey = x->inbox_mr->rkey;
  me->credit_va = (uint64_t)(uintptr_t)&x->credits[k];
  me->credit_rkey = x->credit_mr->rkey;
  me->ring = (uint32_t)x->ring;
}

/* a message from rank 0 to fake rank k */
static void fake_message(helper_t *x, int k, int size) {
  fake_t *f = &x->f[k];
  struct hdr h;
  if (f->nrecv++ == 0) {
    struct ident id;
    IT_CHECK(size == (int)sizeof(id), "fake rank %d: an introduction of %d bytes", k, size);
    memcpy(&id, f->rb, sizeof(id));
    IT_CHECK(id.magic == WIRE_MAGIC && id.rank == 0 && id.nranks == (uint32_t)g_n,
             "fake rank %d: introduction of rank %u of %u", k, id.rank, id.nranks);
    return;
  }
  IT_CHECK(size >= (int)sizeof(h), "fake rank %d: a message of %d bytes", k, size);
  memcpy(&h, f->rb, sizeof(h));
  IT_CHECK(h.magic == WIRE_MAGIC, "fake rank %d: bad magic", k);
  if (h.op == OP_QP) {
    struct hdr a = H(OP_QP);
    struct qpinfo q, me;
    IT_CHECK(f->qp == NULL && size == (int)(sizeof(h) + sizeof(q)) && h.size == sizeof(q),
             "fake rank %d: a QP address of %d bytes", k, size);
    if (g_empty) {
      queue_msg(f, &a, sizeof(a), NULL, 0); /* this rank cannot bring its end up */
      return;
    }
    memcpy(&q, f->rb + sizeof(h), sizeof(q));
    fake_qp(x, k, &q, &me);
    a.flags = F_INLINE, a.size = sizeof(me);
    queue_msg(f, &a, sizeof(a), &me, sizeof(me));
    a = H(OP_QP_READY);
    queue_msg(f, &a, sizeof(a), NULL, 0);
  } else if (h.op == OP_QP_READY) {
    IT_CHECK(!g_empty && f->qp != NULL, "fake rank %d: QP_READY without a QP", k);
    f->ready = 1;
  } else if (h.op == OP_REG) {
    struct hdr a = H(OP_REG);
    IT_CHECK(h.mr == 0 && h.size == WIN, "fake rank %d: REG of window %u, %llu bytes", k, h.mr,
             (unsigned long long)h.size);
    a.mr = 0, a.size = WIN, a.aux = (uint64_t)(uintptr_t)(x->wins + (size_t)k * WIN);
    a.rkey = g_empty ? 0 : x->win_mr->rkey;
    queue_msg(f, &a, sizeof(a), NULL, 0);
  } else if (h.op == OP_PUT && g_empty) { /* the message path: an inline put with its signal */
    IT_CHECK(h.flags == (F_INLINE | F_SIGNAL) && h.mr == 0 && h.off == DST_OFF && h.size == PUT_LEN &&
                 size == (int)(sizeof(h) + PUT_LEN) && h.sig_mr == 0 && h.sig_off == 0 && h.sig_val == (uint64_t)k,
             "fake rank %d: PUT flags 0x%x window %u off %llu size %llu signal %u/%llu/%llu (%d bytes)", k, h.flags,
             h.mr, (unsigned long long)h.off, (unsigned long long)h.size, h.sig_mr, (unsigned long long)h.sig_off,
             (unsigned long long)h.sig_val, size);
    for (int j = 0; j < PUT_LEN; j++)
      IT_CHECK(f->rb[sizeof(h) + j] == pat(k, j), "fake rank %d: put byte %d is 0x%x", k, j, f->rb[sizeof(h) + j]);
    f->signals++;
  } else if (h.op == OP_BYE) {
    f->bye = 1;
  } else {
    IT_CHECK(0, "fake rank %d: unexpected op %u", k, h.op);
  }
}

/* the one-sided path: the signal records on the fake ranks' QPs */
static void helper_poll_cq(helper_t *x) {
  struct ibv_wc wc[16];
  int n;
  if (x->cq == NULL) return;
  n = ibv_poll_cq(x->cq, 16, wc);
  IT_CHECK(n >= 0, "ibv_poll_cq failed");
  for (int i = 0; i < n; i++) {
    int k = (int)wc[i].wr_id;
    IT_CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && k > 0 && k < g_n,
             "fake rank %d: completion status %d opcode %d", k, wc[i].status, wc[i].opcode);
    uint32_t seq = be32toh(wc[i].imm_data);
    struct sig_rec rec = x->inbox[(size_t)k * (size_t)x->ring + seq % (uint32_t)x->ring];
    IT_CHECK(seq == 0 && rec.magic == REC_MAGIC && rec.seq == 0 && rec.mr == 0 && rec.off == 0 &&
                 rec.val == (uint64_t)k,
             "fake rank %d: signal record seq %u: magic 0x%x window %u off %llu value %llu", k, seq, rec.magic, rec.mr,
             (unsigned long long)rec.off, (unsigned long long)rec.val);
    /* RC places the put before the WRITE_WITH_IMM that follows it on the QP */
    for (int j = 0; j < PUT_LEN; j++)
      IT_CHECK(x->wins[(size_t)k * WIN + DST_OFF + j] == pat(k, j), "fake rank %d: put byte %d is 0x%x", k, j,
               x->wins[(size_t)k * WIN + DST_OFF + j]);
    x->f[k].signals++;
  }
}

static void helper_step(helper_t *x) {
  const ncclNet_v8_t *net = x->ip.net;
  for (int k = 1; k < g_n; k++) {
    fake_t *f = &x->f[k];
    int done = 0, size = 0;
    if (f->sreq == NULL && f->ns < f->nq)
      IT_OK(net->isend(f->s, f->sb + f->ns * SLOT, f->slen[f->ns], 0, f->smh, &f->sreq));
    if (f->sreq != NULL) {
      IT_OK(net->test(f->sreq, &done, &size));
      if (done) f->sreq = NULL, f->ns++;
    }
    if (f->rreq == NULL && !f->bye) {
      void *d = f->rb;
      int sz = MSG_MAX, tag = 0;
      IT_OK(net->irecv(f->r, 1, &d, &sz, &tag, &f->rmh, &f->rreq));
    }
    if (f->rreq != NULL) {
      done = 0;
      IT_OK(net->test(f->rreq, &done, &size));
      if (done) {
        f->rreq = NULL;
        fake_message(x, k, size);
      }
    }
  }
  helper_poll_cq(x);
}

static int readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

static void helper(int fd) {
  static char hs[8192][NCCL_NET_HANDLE_MAXSIZE];
  char h0[NCCL_NET_HANDLE_MAXSIZE];
  helper_t x;
  int nconn = 0, t[NTARGETS], reported = 0, byes = 0;
  long rss0, vm0, net_kb, net_vm_kb;
  uint64_t t0;
  char c;
  memset(&x, 0, sizeof(x));
  it_load(&x.ip);
  x.f = calloc((size_t)g_n, sizeof(*x.f));
  x.slab = calloc((size_t)g_n, 4 * SLOT + MSG_MAX);
  IT_CHECK(x.f != NULL && x.slab != NULL, "oom");
  memset(hs, 0, sizeof(hs));
  it_step("%d listen comms", g_n - 1);
  for (int k = 1; k < g_n; k++) {
    x.f[k].sb = x.slab + (size_t)k * (4 * SLOT + MSG_MAX);
    x.f[k].rb = x.f[k].sb + 4 * SLOT;
    IT_OK(x.ip.net->listen(x.ip.dev, hs[k], &x.f[k].lc));
  }
  IT_CHECK(gn_boot_send(fd, hs[1], (size_t)(g_n - 1) * NCCL_NET_HANDLE_MAXSIZE) == 0, "handles to rank 0");
  IT_CHECK(gn_boot_recv(fd, h0, sizeof(h0), 60) == 0, "rank 0's handle");
  it_step("%d x 2 connections to rank 0", g_n - 1);
  rss0 = status_kb("VmRSS"), vm0 = status_kb("VmSize");
  t0 = now_ns();
  while (nconn < 2 * (g_n - 1)) {
    for (int k = 1; k < g_n; k++) {
      fake_t *f = &x.f[k];
      ncclNetDeviceHandle_v8_t *dh = NULL;
      if (f->s == NULL) {
        IT_OK(x.ip.net->connect(x.ip.dev, h0, &f->s, &dh));
        if (f->s != NULL) nconn++;
      }
      if (f->r == NULL) {
        IT_OK(x.ip.net->accept(f->lc, &f->r, &dh));
        if (f->r != NULL) nconn++;
      }
    }
    IT_CHECK(now_ns() - t0 < 120ull * 1000000000ull, "%d of %d connections after 120 s", nconn, 2 * (g_n - 1));
  }
  for (int k = 1; k < g_n; k++) {
    fake_t *f = &x.f[k];
    struct ident me = {WIRE_MAGIC, (uint32_t)k, (uint32_t)g_n, CAP_BYE};
    IT_OK(x.ip.net->regMr(f->s, f->sb, 4 * SLOT, NCCL_PTR_HOST, &f->smh));
    IT_OK(x.ip.net->regMr(f->r, f->rb, MSG_MAX, NCCL_PTR_HOST, &f->rmh));
    queue_msg(f, &me, sizeof(me), NULL, 0);
  }
  net_kb = status_kb("VmHWM") - rss0, net_vm_kb = status_kb("VmPeak") - vm0;
  it_step("the fake ranks' GIN exchange");
  targets(t);
  for (;;) {
    helper_step(&x);
    if (!reported) {
      int all = 1;
      for (int i = 0; i < NTARGETS; i++)
        if (x.f[t[i]].signals != 1) all = 0;
      if (all) {
        int extra = 0;
        for (int k = 1; k < g_n; k++) extra += x.f[k].signals;
        IT_CHECK(extra == NTARGETS, "%d signals arrived, %d sent", extra, NTARGETS);
        IT_CHECK(gn_boot_send(fd, "k", 1) == 0 && gn_boot_send_u64(fd, (uint64_t)net_kb) == 0 &&
                     gn_boot_send_u64(fd, (uint64_t)net_vm_kb) == 0,
                 "report to rank 0");
        reported = 1;
      }
    }
    if (readable(fd)) break; /* rank 0 closed its comm */
  }
  IT_CHECK(reported, "rank 0 finished before its puts arrived");
  IT_CHECK(gn_boot_recv(fd, &c, 1, 10) == 0 && c == 'd', "rank 0's done");
  for (int k = 1; k < g_n; k++) byes += x.f[k].bye;
  it_log("%d fake ranks: %d GIN_OP_BYE received", g_n - 1, byes);
  IT_CHECK(gn_boot_send(fd, byes == g_n - 1 ? "b" : "x", 1) == 0, "bye report");
  for (int k = 1; k < g_n; k++) {
    fake_t *f = &x.f[k];
    IT_CHECK(f->sreq == NULL && f->ns == f->nq, "fake rank %d: %d of %d messages sent", k, f->ns, f->nq);
    IT_OK(x.ip.net->deregMr(f->s, f->smh));
    IT_OK(x.ip.net->deregMr(f->r, f->rmh));
    IT_OK(x.ip.net->closeSend(f->s));
    IT_OK(x.ip.net->closeRecv(f->r));
    IT_OK(x.ip.net->closeListen(f->lc));
    if (f->qp != NULL) IT_CHECK(V.destroy_qp(f->qp) == 0, "ibv_destroy_qp");
  }
  if (x.ctx != NULL) {
    IT_CHECK(V.dereg_mr(x.win_mr) == 0 && V.dereg_mr(x.inbox_mr) == 0 && V.dereg_mr(x.credit_mr) == 0, "dereg");
    IT_CHECK(V.destroy_cq(x.cq) == 0 && V.dealloc_pd(x.pd) == 0 && V.close(x.ctx) == 0, "verbs clean-up");
  }
  free(x.wins);
  free(x.inbox);
  free(x.credits);
  free(x.f);
  free(x.slab);
  it_unload(&x.ip);
}

static int side(int fd, int parent) {
  if (parent)
    rank0(fd);
  else
    helper(fd);
  return 0;
}

int main(void) {
  const char *m = getenv("GNIT_MANY_MODE");
  g_n = (int)it_env_double("GNIT_MANY_RANKS", 512);
  IT_CHECK(g_n >= 4 && g_n <= 8192, "GNIT_MANY_RANKS=%d: 4..8192", g_n);
  IT_CHECK(m == NULL || !strcmp(m, "rdma") || !strcmp(m, "empty"), "GNIT_MANY_MODE=%s: rdma or empty", m);
  g_empty = m != NULL && !strcmp(m, "empty");
  raise_nofile();
  verbs_load();
  return it_two_sides("gin-many", 200, side, 60);
}
