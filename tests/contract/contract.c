/* The model-based tester of the matching contract (docs/design.md "Contract: matching"; model.h).
 *
 * Each seed makes one schedule, shaped like NCCL's proxy over one connection: the receiver posts receives in slot
 * order (plain ones and grouped ones of 2..8 buffers whose tags repeat), at most `window` ahead; the sender has
 * several subs (tag = their source rank) that isend independently, each in its own order, a NULL request retried
 * later, each testing its oldest request. Sizes cross every threshold: 0, inline, the TCP eager size
 * (GDRNET_TCP_INLINE), a clear-to-send, chunked over streams, WRITEs cut at the port's max_msg_sz (VEMU_MAX_MSG_SZ).
 * Isends go before or after their receives (pace), GPUDirect receives are flushed (iflush, GDRNET_GDR=1, lazy
 * device memory on the emulator), and some schedules close with requests in flight. The model says where each
 * isend lands; the payload of the k-th isend with tag t is words (magic, t, k, word index), so a byte in the wrong
 * place names the message it came from.
 *
 * Each seed runs in two fresh processes (a sender and a receiver, forked from this coordinator), loading the
 * plugin as NCCL does (tests/integration/it.c), with the seed's knobs and, with CONTRACT_FAULTS, one of the
 * emulator's fault rules (VEMU_FAULTS) on one side or both, fallback and failback on. Checks: no isend/irecv/test
 * error on a valid schedule, every isend accepted in the end, every request completing once, every reported size
 * and every byte as the model says (a canary after each), close with requests in flight returning, and the
 * counters (GDRNET_STATS_FILE): bytes sent and received as the model moved them, no failed request, no open comm,
 * and when a fault was seen, a recovery or a move to TCP.
 *
 * Environment (tests/contract/CMakeLists.txt sets the transport's):
 *   GDRNET_TRANSPORT=tcp|rdma   the transport (rdma: the emulator's environment as the integration tests set it)
 *   CONTRACT_SEED (1)           the first seed; CONTRACT_SEEDS (100000) how many; CONTRACT_SECONDS (110): no new
 *                               seed is started after that many seconds
 *   CONTRACT_FAULTS=0|1|mix     no fault rules (default), one per seed (RDMA only), every other seed
 *   CONTRACT_SHAPE=nccl|plain   nccl (default): as above; plain: one sub and plain receives only (no grouped
 *                               receive, one tag), every size, pace, flush and fault as above
 *   CONTRACT_STOP=1             stop at the first failing seed
 *   CONTRACT_SEED_S (60)        watchdog of one seed (its processes are killed, the seed fails)
 *   CONTRACT_WRONG_MODEL=1      self-test: a deliberately wrong model (the LAST free buffer with the tag); the run
 *                               must then fail naming a misplaced message
 *   CONTRACT_ENV                knobs set over each seed's own ("GDRNET_FAILBACK=0 ..."), e.g. to tell a hang of
 *                               the move to TCP from one of the way back; the reproduce command carries it
 *   CONTRACT_DIR                where each seed's log and counters go (default $VEMU_DIR, else /tmp); a failing
 *                               seed's log is kept and its tail printed
 * On failure it prints the seed, the schedule, the fault and the exact command that reproduces the seed alone. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it.h"
#include "model.h"

#define MAXSLOTS 48
#define MAXSUBS 4
#define SUB_INFLIGHT 8   /* NCCL_STEPS per sub */
#define SEND_INFLIGHT 32 /* NET_MAX_REQUESTS */
#define MAGIC 0xc7u
#define TOTAL_MAX (40u << 20)

/* ---- the schedule ---- */
struct sched {
  uint64_t seed;
  int rdma, wrong;
  int nsubs, subtag[MAXSUBS];
  int nslots, window, pace; /* pace 0: free, 1: receives first, 2: isends first */
  int n[MAXSLOTS], tag[MAXSLOTS][CM_MAXN], cap[MAXSLOTS][CM_MAXN], size[MAXSLOTS][CM_MAXN];
  size_t off[MAXSLOTS][CM_MAXN], total; /* buffer offsets (the same in the send and the receive region) */
  int ord[MAXSLOTS][CM_MAXN];           /* the model's ordinal of each buffer among its tag's */
  int cnt[MAXSUBS];                     /* isends of each sub */
  int pslot[MAXSUBS][MAXSLOTS * CM_MAXN], pbuf[MAXSUBS][MAXSLOTS * CM_MAXN]; /* the model's placement */
  int flush, lazy, close_inflight;
  int rounds; /* the schedule runs this many times over the connection (the buffers reused) */
  long long bytes;
  char env[1024];     /* knobs, "K=V K=V" */
  char fault[2][512]; /* VEMU_FAULTS of the sender [0] and the receiver [1] ('+' for ';' nowhere: real ';') */
  const char *fault_kind;
};

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static int rr(uint64_t *s, int n) { return n <= 1 ? 0 : (int)(rnd(s) % (uint64_t)n); }
static int pick(uint64_t *s, const int *v, int n) { return v[rr(s, n)]; }

static void env_add(struct sched *S, const char *fmt, ...) GN_PRINTF(2, 3);
static void env_add(struct sched *S, const char *fmt, ...) {
  size_t l = strlen(S->env);
  va_list ap;
  va_start(ap, fmt);
  if (l) S->env[l++] = ' ';
  vsnprintf(S->env + l, sizeof S->env - l, fmt, ap);
  va_end(ap);
}

static int max_msg_sz(const struct sched *S) {
  const char *p = strstr(S->env, "VEMU_MAX_MSG_SZ=");
  return p ? atoi(p + 16) : 1 << 30;
}

static int draw_size(uint64_t *s, int lim, int mms) {
  static const int edges[] = {64, 65, 4096, 32768, 32769, 65535, 65536, 65537, 131072, 262144};
  int r = rr(s, 100), v;
  if (r < 8)
    v = 0;
  else if (r < 22)
    v = 1 + rr(s, 64);
  else if (r < 45)
    v = 65 + rr(s, 65536 - 64);
  else if (r < 57)
    v = pick(s, edges, 10) + rr(s, 3) - 1;
  else if (r < 77)
    v = 65537 + rr(s, (1 << 20) - 65536);
  else if (r < 87)
    v = (1 << 20) + rr(s, 3 << 20);
  else
    v = mms < (1 << 22) ? mms * (1 + rr(s, 4)) + rr(s, 3) - 1 : rr(s, 1 << 22);
  if (v < 0) v = 0;
  return v > lim ? lim : v;
}

static const char *k_status[] = {"rem_access", "retry_exc", "rnr_retry_exc", "rem_op", "loc_prot"};

/* One of the emulator's fault kinds, on the sender (0), the receiver (1) or both. */
static void draw_fault(struct sched *S, uint64_t *s) {
  int nb = 0;
  for (int i = 0; i < S->nslots; i++) nb += S->n[i];
  int kind = rr(s, 14), side = rr(s, 2);
  const char *st = k_status[rr(s, 5)];
  char *f = S->fault[side];
  size_t fl = sizeof S->fault[0];
  static const int tmo[] = {300, 1000, 1500};
  int tm = pick(s, tmo, 3);
  env_add(S, "VEMU_TIME_SCALE=0.01 GDRNET_FALLBACK=1 GDRNET_FAILBACK=%d GDRNET_RECOVERY_TIMEOUT_MS=%d", rr(s, 3) != 0,
          tm);
  if (rr(s, 4) == 0) env_add(S, "GDRNET_RECOVERY_ATTEMPTS=%d", rr(s, 2));
  switch (kind) {
  case 0:
    S->fault_kind = "wc write_imm"; /* the sender's data (the receiver posts none) */
    snprintf(S->fault[0], fl, "wc:op=write_imm:nth=%d:status=%s", 1 + rr(s, S->nslots + 1), st);
    break;
  case 1:
    S->fault_kind = "wc write";
    snprintf(f, fl, "wc:op=write:nth=%d:status=%s", 1 + rr(s, 2 * nb), st);
    break;
  case 2:
    if (S->flush) {
      S->fault_kind = "wc read (flush)";
      snprintf(S->fault[1], fl, "wc:op=read:nth=%d:status=%s", 1 + rr(s, S->nslots), st);
    } else {
      S->fault_kind = "wc write_imm every";
      snprintf(f, fl, "wc:op=write_imm:nth=%d:every=%d:status=%s", 1 + rr(s, nb), 20 + rr(s, 40), st);
    }
    break;
  case 3:
    S->fault_kind = "qp_fatal";
    snprintf(f, fl, "qp_fatal:nth=%d", 1 + rr(s, 3));
    break;
  case 4: {
    /* a flap (recovered), or down past the recovery bound (to TCP) and back soon after (the return) */
    S->fault_kind = "port_down";
    snprintf(f, fl, "port_down:dev=vemu0:after_ms=%d:for_ms=%d", 20 + rr(s, 300),
             rr(s, 3) ? tm + 200 + rr(s, 600) : 100);
    break;
  }
  case 5:
    S->fault_kind = "key recovery + reg_mr failure";
    snprintf(S->fault[0], fl, "wc:op=write_imm:nth=%d:status=%s;fail:call=reg_mr:nth=%d:errno=ENOMEM",
             1 + rr(s, S->nslots + 1), rr(s, 2) ? "loc_prot" : "rem_access", 2 + rr(s, 10));
    break;
  case 6: {
    static const char *calls[] = {"create_qp", "create_cq", "modify_qp", "alloc_pd", "reg_mr"};
    S->fault_kind = "fail call";
    snprintf(f, fl, "fail:call=%s:nth=%d:errno=%s", calls[rr(s, 5)], 1 + rr(s, 6), rr(s, 2) ? "ENOMEM" : "EIO");
    break;
  }
  case 7:
    S->fault_kind = "no_recv_credit";
    snprintf(S->fault[1], fl, "no_recv_credit:nth=%d", 1 + rr(s, nb));
    if (rr(s, 2)) env_add(S, "GDRNET_RNR_RETRY=0");
    break;
  case 8:
    S->fault_kind = "late_cqe";
    snprintf(S->fault[1], fl, "late_cqe:nth=%d:ms=%d", 1 + rr(s, nb), 50 + rr(s, 150));
    break;
  case 9:
    S->fault_kind = "device_fatal";
    if (rr(s, 2))
      snprintf(f, fl, "device_fatal:dev=vemu0:after_bytes=%d:for_ms=%d", rr(s, (int)(S->bytes + 1)), 200 + rr(s, 600));
    else
      snprintf(f, fl, "device_fatal:dev=vemu0:after_bytes=%d", rr(s, (int)(S->bytes + 1)));
    break;
  case 10:
    S->fault_kind = "peer_loss";
    snprintf(f, fl, "peer_loss:after_bytes=%d", rr(s, (int)(S->bytes + 1)));
    break;
  case 11:
    S->fault_kind = "fault during a recovery";
    snprintf(S->fault[0], fl, "wc:op=write_imm:nth=%d:status=retry_exc", 1 + rr(s, S->nslots + 1));
    snprintf(S->fault[1], fl, "qp_fatal:nth=%d", 2 + rr(s, 3));
    break;
  case 12:
    S->fault_kind = "fault during a move to TCP and the return";
    snprintf(f, fl, "port_down:dev=vemu0:after_ms=%d:for_ms=%d;wc:op=write_imm:nth=%d:status=%s", 20 + rr(s, 200),
             tm + 200 + rr(s, 800), 1 + rr(s, nb), st);
    snprintf(S->fault[!side], fl, "fail:call=%s:nth=%d:errno=ENOMEM", rr(s, 2) ? "reg_mr" : "create_qp", 3 + rr(s, 6));
    break;
  default:
    S->fault_kind = "rem_access on the sender's sizes write";
    snprintf(S->fault[0], fl, "wc:op=write:nth=%d:status=rem_access", 1 + rr(s, 2 * nb));
    break;
  }
}

/* The schedule of a seed: the same in every process. Returns 0, or -1 when the model refuses it (a bug here). */
static int make_sched(struct sched *S, uint64_t seed, int rdma, int faults, int wrong, int plain) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x1234567ull;
  memset(S, 0, sizeof *S);
  S->seed = seed;
  S->rdma = rdma;
  S->wrong = wrong;
  for (int i = 0; i < 8; i++) rnd(&s);
  /* knobs first: the sizes depend on max_msg_sz */
  if (rdma) {
    static const int mms[] = {65536, 262144, 1 << 20};
    static const int qps[] = {1, 2, 4};
    if (rr(&s, 2)) env_add(S, "VEMU_MAX_MSG_SZ=%d", pick(&s, mms, 3));
    env_add(S, "GDRNET_QPS_PER_CONN=%d GDRNET_SPLIT_DATA=%d", pick(&s, qps, 3), rr(&s, 2));
    if (rr(&s, 4) == 0) {
      S->flush = 1;
      S->lazy = rr(&s, 2);
      env_add(S, "GDRNET_GDR=1 VEMU_GDR_LAZY=%d", S->lazy);
    }
  } else {
    static const int credits[] = {32, 0, 2, 8};
    static const int socks[] = {1, 2, 4};
    static const int ctsin[] = {0, 4096, 32768, 65536};
    env_add(S, "GDRNET_TCP_EAGER_CREDITS=%d GDRNET_TCP_NSOCKS=%d", pick(&s, credits, 4), pick(&s, socks, 3));
    if (rr(&s, 2)) env_add(S, "GDRNET_TCP_CTS_INLINE=%d", pick(&s, ctsin, 4));
  }
  S->nsubs = plain ? 1 : 1 + rr(&s, MAXSUBS);
  for (int i = 0; i < S->nsubs; i++) {
    int t, dup;
    do { /* distinct source ranks */
      t = rr(&s, 16);
      dup = 0;
      for (int j = 0; j < i; j++) dup |= S->subtag[j] == t;
    } while (dup);
    S->subtag[i] = t;
  }
  S->nslots = 4 + rr(&s, MAXSLOTS - 4);
  S->window = 1 + rr(&s, 8);
  S->pace = rr(&s, 3);
  S->close_inflight = rr(&s, 4) == 0;
  int mms = max_msg_sz(S);
  size_t budget = 0;
  for (int i = 0; i < S->nslots; i++) {
    int grouped = !plain && rr(&s, 10) < 6;
    S->n[i] = grouped ? 2 + rr(&s, CM_MAXN - 1) : 1;
    int lim = S->n[i] > 1 ? 1 << 20 : 8 << 20;
    /* a grouped receive often repeats one tag (PXN: several steps of one source rank) */
    int one = rr(&s, 3) == 0;
    for (int j = 0; j < S->n[i]; j++) {
      S->tag[i][j] = S->subtag[one ? 0 : rr(&s, S->nsubs)];
      int sz = draw_size(&s, lim, mms), cap, r = rr(&s, 10);
      if (r < 4)
        cap = sz;
      else if (r < 7)
        cap = sz + rr(&s, 4096);
      else if (r < 9)
        cap = sz > 65537 ? sz : 65537 + rr(&s, 65536); /* a clear-to-send for a small message */
      else
        cap = sz + (1 << 20);
      if (budget + (size_t)cap + 4096 > (wrong ? TOTAL_MAX / 8 : TOTAL_MAX)) sz = cap = rr(&s, 65);
      S->size[i][j] = sz;
      S->cap[i][j] = cap;
      budget += ((size_t)cap + 4095) / 4096 * 4096 + 4096;
      S->bytes += sz;
    }
    if (wrong) /* the self-test: every buffer of a slot as large as its largest, so misplaced sends still fit and
                  the data and size checks are what must catch them */
      for (int j = 0; j < S->n[i]; j++)
        for (int k = 0; k < S->n[i]; k++)
          if (S->cap[i][k] > S->cap[i][j]) S->cap[i][j] = S->cap[i][k];
  }
  for (int i = 0; i < S->nslots; i++)
    for (int j = 0; j < S->n[i]; j++) {
      S->off[i][j] = S->total;
      S->total += ((size_t)S->cap[i][j] + 4095) / 4096 * 4096 + 4096;
    }
  if (faults) draw_fault(S, &s);
  /* the model's placement: all slots posted, the subs isending round-robin, NULLs retried */
  cm_model_t m;
  cm_init(&m);
  m.wrong = wrong;
  for (int i = 0; i < S->nslots; i++)
    if (cm_post(&m, S->n[i], S->tag[i], S->cap[i]) < 0) return -1;
  int total = 0, placed = 0, nord[16] = {0};
  for (int i = 0; i < S->nslots; i++) total += S->n[i];
  while (placed < total) {
    int progress = 0;
    for (int u = 0; u < S->nsubs; u++) {
      int sl, b;
      if (cm_isend(&m, S->subtag[u], 0, &sl, &b) != CM_PLACED) continue;
      S->pslot[u][S->cnt[u]] = sl;
      S->pbuf[u][S->cnt[u]] = b;
      S->ord[sl][b] = nord[S->subtag[u]]++;
      S->cnt[u]++;
      placed++;
      progress = 1;
    }
    if (!progress) {
      cm_free(&m);
      return -1;
    }
  }
  cm_free(&m);
  /* faults: traffic long enough for a recovery, and for a move to TCP and the return once the port or the device is
   * back; a receive buffer is posted again only after its last receive completed */
  S->rounds = 1;
  if (faults) S->rounds = strstr(S->fault[0], "for_ms") || strstr(S->fault[1], "for_ms") ? 24 : 1 + rr(&s, 3);
  if (S->window > S->nslots) S->window = S->nslots;
  return 0;
}

static int sub_of_tag(const struct sched *S, int tag) {
  for (int u = 0; u < S->nsubs; u++)
    if (S->subtag[u] == tag) return u;
  return -1;
}

static void describe(const struct sched *S, char *out, size_t len) {
  int nb = 0, ng = 0, rep = 0, mx = 0;
  for (int i = 0; i < S->nslots; i++) {
    nb += S->n[i];
    ng += S->n[i] > 1;
    int r = 0;
    for (int j = 0; j < S->n[i]; j++) {
      for (int k = 0; k < j; k++) r |= S->tag[i][j] == S->tag[i][k];
      if (S->size[i][j] > mx) mx = S->size[i][j];
    }
    rep += r;
  }
  static const char *paces[] = {"free", "receives first", "isends first"};
  snprintf(out, len,
           "%d slots (%d buffers, %d grouped, %d with repeated tags), %d subs, window %d, pace %s, sizes up to %d, "
           "%.1f MiB x %d round(s)%s%s%s; knobs: %s",
           S->nslots, nb, ng, rep, S->nsubs, S->window, paces[S->pace], mx, (double)S->bytes / (1 << 20), S->rounds,
           S->flush ? (S->lazy ? ", iflush (lazy)" : ", iflush") : "", S->close_inflight ? ", close in flight" : "",
           S->wrong ? ", WRONG MODEL" : "", S->env);
}

/* ---- payload: word w of the k-th message with tag t ---- */
static uint64_t word_of(int tag, int ord, uint64_t w) {
  return ((uint64_t)MAGIC << 56) | ((uint64_t)(tag & 0xff) << 48) | ((uint64_t)(ord & 0xffff) << 32) |
         (w & 0xffffffffu);
}

static void fill(unsigned char *p, int size, int tag, int ord) {
  for (int o = 0; o < size; o += 8) {
    uint64_t v = word_of(tag, ord, (uint64_t)o / 8);
    memcpy(p + o, &v, size - o < 8 ? (size_t)(size - o) : 8);
  }
}

/* Checks buffer (i, j) as the model fills it; fails naming what is there instead. */
static void verify(const struct sched *S, const unsigned char *p, int rnd_, int i, int j, int got) {
  int tag = S->tag[i][j], size = S->size[i][j], cap = S->cap[i][j];
  int ord = rnd_ * S->cnt[sub_of_tag(S, tag)] + S->ord[i][j];
  IT_CHECK(got == size,
           "seed %llu: slot %d buffer %d (tag %d, its message %d): test() reported %d bytes, the model says %d "
           "(posted %d)",
           (unsigned long long)S->seed, i, j, tag, ord, got, size, cap);
  for (int o = 0; o < size; o += 8) {
    uint64_t v = word_of(tag, ord, (uint64_t)o / 8), h = 0;
    size_t n = size - o < 8 ? (size_t)(size - o) : 8;
    memcpy(&h, p + o, n);
    if (memcmp(&h, &v, n) == 0) continue;
    char what[160];
    if (n == 8 && (h >> 56) == MAGIC) {
      int t2 = (int)((h >> 48) & 0xff), k2 = (int)((h >> 32) & 0xffff), u = sub_of_tag(S, t2);
      if (u >= 0 && k2 < S->cnt[u] * S->rounds)
        snprintf(what, sizeof what, "data of (tag %d, message %d) byte %llu, which the model puts in slot %d buffer %d",
                 t2, k2, (unsigned long long)(h & 0xffffffffu) * 8,
                 k2 / S->cnt[u] * S->nslots + S->pslot[u][k2 % S->cnt[u]], S->pbuf[u][k2 % S->cnt[u]]);
      else
        snprintf(what, sizeof what, "data of (tag %d, message %d) that the schedule never sent", t2, k2);
    } else if (h == 0x0101010101010101ull * IT_CANARY) {
      snprintf(what, sizeof what, "never written (the canary)");
    } else {
      snprintf(what, sizeof what, "0x%016llx", (unsigned long long)h);
    }
    IT_CHECK(0, "seed %llu: slot %d buffer %d (tag %d, its message %d, %d bytes): byte %d holds %s",
             (unsigned long long)S->seed, i, j, tag, ord, size, o, what);
  }
  for (int o = size; o < cap; o++)
    IT_CHECK(p[o] == IT_CANARY,
             "seed %llu: slot %d buffer %d (tag %d, message %d): %d bytes into a %d-byte receive, "
             "byte %d past them was written",
             (unsigned long long)S->seed, i, j, tag, ord, size, cap, o);
}

/* ---- the two processes ---- */
static double g_step_s = 40; /* no progress for this long: the side fails with its state */

struct side {
  const struct sched *S;
  it_plugin_t ip;
  void *comm, *mh;
  unsigned char *buf;
  int fd;
  int tcp_start; /* the RDMA part of the connection failed at setup: it runs over TCP from the start */
};

static void apply_env(const struct sched *S, int receiver) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", S->env);
  for (char *save = NULL, *kv = strtok_r(tmp, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(kv, '=');
    if (eq == NULL) continue;
    *eq = 0;
    setenv(kv, eq + 1, 1);
  }
  /* CONTRACT_ENV: knobs over the seed's (e.g. GDRNET_FAILBACK=0: the move to TCP without the way back) */
  if (getenv("CONTRACT_ENV")) {
    snprintf(tmp, sizeof tmp, "%s", getenv("CONTRACT_ENV"));
    for (char *save = NULL, *kv = strtok_r(tmp, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
      char *eq = strchr(kv, '=');
      if (eq == NULL) continue;
      *eq = 0;
      setenv(kv, eq + 1, 1);
    }
  }
  if (S->fault[receiver][0])
    setenv("VEMU_FAULTS", S->fault[receiver], 1);
  else
    unsetenv("VEMU_FAULTS");
}

static void open_side(struct side *X, int receiver) {
  const struct sched *S = X->S;
  gn_ctx_t ctx;
  it_load(&X->ip);
  gn_ctx_init(&ctx, X->ip.net, 60);
  it_step("seed %llu: connecting", (unsigned long long)S->seed);
  IT_GN(&ctx, gn_establish(&ctx, X->ip.dev, X->fd, receiver ? NULL : &X->comm, receiver ? &X->comm : NULL));
  {
    /* a fault at setup (a failed reg_mr or create_qp of the plugin's own) may leave the connection on TCP from the
     * start (conn.c says so): TCP may take an eager isend before its receive is posted */
    char *cap = gn_log_captured();
    X->tcp_start = cap != NULL && strstr(cap, "runs over TCP from the start") != NULL;
    free(cap);
    if (X->tcp_start) it_log("seed %llu: the connection runs over TCP from the start", (unsigned long long)S->seed);
  }
  IT_CHECK(posix_memalign((void **)&X->buf, 4096, S->total) == 0, "out of memory");
  memset(X->buf, receiver ? IT_CANARY : 0, S->total);
  if (receiver && S->flush) {
    IT_CHECK(X->ip.props[0].ptrSupport & NCCL_PTR_DMABUF, "GDRNET_GDR=1 but no DMA-BUF support advertised");
    int dfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    IT_CHECK(dfd >= 0, "open /dev/null: %s", strerror(errno));
    IT_OK(X->ip.net->regMrDmaBuf(X->comm, X->buf, S->total, NCCL_PTR_CUDA, 0, dfd, &X->mh));
    close(dfd);
  } else {
    ncclResult_t r = X->ip.net->regMr(X->comm, X->buf, S->total, NCCL_PTR_HOST, &X->mh);
    /* a reg_mr fault rule may hit this registration, not the plugin's own: the error is right (NCCL gets it); the
     * rule fires once, so the application's second try registers */
    if (r == ncclSystemError && strstr(S->fault[receiver], "call=reg_mr")) {
      it_log("seed %llu: regMr failed under the injected reg_mr failure (right): registering again",
             (unsigned long long)S->seed);
      r = X->ip.net->regMr(X->comm, X->buf, S->total, NCCL_PTR_HOST, &X->mh);
    }
    IT_CHECK(r == ncclSuccess, "seed %llu: regMr of the %s's %zu bytes returned %s", (unsigned long long)S->seed,
             receiver ? "receiver" : "sender", S->total, gn_result_str(r));
  }
}

static void sync_byte(int fd, int send) {
  char b = 'x';
  if (send)
    IT_CHECK(gn_boot_send(fd, &b, 1) == 0, "bootstrap");
  else
    IT_CHECK(gn_boot_recv(fd, &b, 1, 120) == 0, "bootstrap");
}

struct subst {
  int next;                /* next ordinal to isend */
  int done;                /* ordinals completed */
  int filled;              /* 1 + the ordinal whose payload the send buffer holds */
  void *req[SUB_INFLIGHT]; /* ring: ordinals done..next-1 */
  long nulls;
};

static void run_sender(struct side *X) {
  const struct sched *S = X->S;
  const ncclNet_v8_t *net = X->ip.net;
  struct subst st[MAXSUBS];
  int total = 0, done = 0, inflight = 0;
  memset(st, 0, sizeof st);
  for (int u = 0; u < S->nsubs; u++) total += S->cnt[u] * S->rounds;
  if (S->pace == 1) sync_byte(X->fd, 0);
  uint64_t last = gn_now_ns();
  int first_pass = S->pace == 2;
  unsigned rot = 0;
  while (done < total) {
    int progress = 0;
    rot++;
    for (int uu = 0; uu < S->nsubs; uu++) {
      int u = (int)((uu + rot) % (unsigned)S->nsubs);
      struct subst *b = &st[u];
      int tag = S->subtag[u];
      /* post the next isend of this sub (NCCL's proxy: one per sub per round; a NULL is tried again later) */
      /* (at most cnt in flight: message k + cnt reuses the send buffer of message k) */
      while (b->next < S->cnt[u] * S->rounds && b->next - b->done < SUB_INFLIGHT && b->next - b->done < S->cnt[u] &&
             inflight < SEND_INFLIGHT) {
        int k = b->next, i = S->pslot[u][k % S->cnt[u]], j = S->pbuf[u][k % S->cnt[u]];
        if (b->filled != k + 1) {
          fill(X->buf + S->off[i][j], S->size[i][j], tag, k);
          b->filled = k + 1;
        }
        void *rq = NULL;
        it_step("seed %llu: isend tag %d message %d (slot %d buffer %d, %d bytes)", (unsigned long long)S->seed, tag, k,
                i, j, S->size[i][j]);
        ncclResult_t r = net->isend(X->comm, X->buf + S->off[i][j], S->size[i][j], tag, X->mh, &rq);
        IT_CHECK(r == ncclSuccess,
                 "seed %llu: isend of tag %d message %d (%d bytes; the model puts it in slot %d buffer %d of %d bytes) "
                 "returned %s: a valid schedule gets a request or NULL, never an error",
                 (unsigned long long)S->seed, tag, k, S->size[i][j], i, j, S->cap[i][j], gn_result_str(r));
        if (rq == NULL) {
          b->nulls++;
          break;
        }
        /* RDMA sends only into a posted receive (its clear-to-send): with isends first, none is posted yet */
        IT_CHECK(!(first_pass && S->rdma && !X->tcp_start),
                 "seed %llu: isend of tag %d message %d accepted before the receiver posted "
                 "any receive (RDMA needs its clear-to-send)",
                 (unsigned long long)S->seed, tag, k);
        b->req[k % SUB_INFLIGHT] = rq;
        b->next++;
        inflight++;
        progress = 1;
        if (!first_pass) break;
      }
      if (first_pass) continue;
      /* test the oldest request of this sub */
      if (b->done < b->next) {
        int k = b->done, i = S->pslot[u][k % S->cnt[u]], j = S->pbuf[u][k % S->cnt[u]], d = 0, sz = -1;
        ncclResult_t r = net->test(b->req[k % SUB_INFLIGHT], &d, &sz);
        IT_CHECK(r == ncclSuccess, "seed %llu: test of the send of tag %d message %d (slot %d buffer %d) returned %s",
                 (unsigned long long)S->seed, tag, k, i, j, gn_result_str(r));
        if (d) {
          IT_CHECK(sz == S->size[i][j], "seed %llu: send of tag %d message %d: test reported %d bytes, %d were sent",
                   (unsigned long long)S->seed, tag, k, sz, S->size[i][j]);
          b->req[k % SUB_INFLIGHT] = NULL;
          b->done++;
          done++;
          inflight--;
          progress = 1;
        }
      }
    }
    if (first_pass) {
      first_pass = 0;
      sync_byte(X->fd, 1);
    }
    if (progress) {
      last = gn_now_ns();
    } else {
      if ((double)(gn_now_ns() - last) / 1e9 > g_step_s) {
        char msg[1024];
        size_t l = 0;
        for (int u = 0; u < S->nsubs; u++) {
          int k = st[u].next;
          l += (size_t)snprintf(msg + l, sizeof msg - l, "; tag %d: %d/%d completed, %d posted", S->subtag[u],
                                st[u].done, S->cnt[u] * S->rounds, k);
          if (k < S->cnt[u] * S->rounds && l < sizeof msg)
            l += (size_t)snprintf(msg + l, sizeof msg - l, ", next (message %d, slot %d buffer %d) NULL %ld times", k,
                                  k / S->cnt[u] * S->nslots + S->pslot[u][k % S->cnt[u]], S->pbuf[u][k % S->cnt[u]],
                                  st[u].nulls);
          if (l >= sizeof msg) break;
        }
        IT_CHECK(0, "seed %llu: the sender made no progress for %.0f s%s", (unsigned long long)S->seed, g_step_s, msg);
      }
      sched_yield();
    }
  }
}

static void run_receiver(struct side *X) {
  const struct sched *S = X->S;
  const ncclNet_v8_t *net = X->ip.net;
  void *req[MAXSLOTS] = {0};
  int posted = 0, completed = 0, signalled = 0, canaried = 0;
  long nulls = 0;
  if (S->pace == 2) sync_byte(X->fd, 0);
  uint64_t last = gn_now_ns();
  const int nall = S->nslots * S->rounds; /* slot g is slot g % nslots of round g / nslots */
  while (completed < nall) {
    int progress = 0;
    while (posted < nall && posted - completed < S->window) {
      int g = posted, i = g % S->nslots;
      if (g >= S->nslots && !canaried) { /* a buffer posted again: the canary again */
        for (int j = 0; j < S->n[i]; j++) memset(X->buf + S->off[i][j], IT_CANARY, (size_t)S->cap[i][j]);
        canaried = 1;
      }
      void *data[CM_MAXN], *mhs[CM_MAXN];
      for (int j = 0; j < S->n[i]; j++) {
        data[j] = X->buf + S->off[i][j];
        mhs[j] = X->mh;
      }
      it_step("seed %llu: irecv slot %d (%d buffers)", (unsigned long long)S->seed, i, S->n[i]);
      ncclResult_t r = net->irecv(X->comm, S->n[i], data, (int *)S->cap[i], (int *)S->tag[i], mhs, &req[i]);
      IT_CHECK(r == ncclSuccess, "seed %llu: irecv of slot %d (%d buffers) returned %s", (unsigned long long)S->seed, i,
               S->n[i], gn_result_str(r));
      if (req[i] == NULL) {
        nulls++;
        break;
      }
      canaried = 0;
      posted++;
      progress = 1;
    }
    if (S->pace == 1 && !signalled) {
      /* what could be posted is: the sender may start (after one pass, NULLs or not: a receive that waits for a
       * recovery would wait for the sender's calls, and the sender waits here) */
      sync_byte(X->fd, 1);
      signalled = 1;
    }
    if (completed < posted) {
      int g = completed, i = g % S->nslots, d = 0, got[CM_MAXN];
      for (int j = 0; j < CM_MAXN; j++) got[j] = -1;
      it_step("seed %llu: test slot %d", (unsigned long long)S->seed, i);
      ncclResult_t r = net->test(req[i], &d, got);
      IT_CHECK(r == ncclSuccess, "seed %llu: test of slot %d (%d buffers) returned %s", (unsigned long long)S->seed, i,
               S->n[i], gn_result_str(r));
      if (d) {
        if (S->flush) {
          void *data[CM_MAXN], *mhs[CM_MAXN], *fq = NULL;
          for (int j = 0; j < S->n[i]; j++) {
            data[j] = X->buf + S->off[i][j];
            mhs[j] = X->mh;
          }
          it_step("seed %llu: iflush slot %d", (unsigned long long)S->seed, i);
          IT_OK(net->iflush(X->comm, S->n[i], data, got, mhs, &fq));
          uint64_t fdl = gn_deadline_ns(g_step_s);
          for (int fd2 = 0; fq != NULL && !fd2;) {
            IT_OK(net->test(fq, &fd2, NULL));
            IT_CHECK(!gn_expired(fdl), "seed %llu: the flush of slot %d never completed", (unsigned long long)S->seed,
                     i);
          }
        }
        for (int j = 0; j < S->n[i]; j++) verify(S, X->buf + S->off[i][j], g / S->nslots, i, j, got[j]);
        req[i] = NULL;
        completed++;
        progress = 1;
      }
    }
    if (progress) {
      last = gn_now_ns();
    } else {
      if ((double)(gn_now_ns() - last) / 1e9 > g_step_s) {
        int i = completed % S->nslots;
        char msg[512];
        size_t l = 0;
        for (int j = 0; j < S->n[i] && l < sizeof msg; j++)
          l += (size_t)snprintf(msg + l, sizeof msg - l, " [tag %d message %d, %d of %d bytes]", S->tag[i][j],
                                S->ord[i][j], S->size[i][j], S->cap[i][j]);
        IT_CHECK(0,
                 "seed %llu: the receiver made no progress for %.0f s: slot %d of %d not complete (%d posted, irecv "
                 "NULL %ld times); its buffers:%s",
                 (unsigned long long)S->seed, g_step_s, i, S->nslots, posted, nulls, msg);
      }
      sched_yield();
    }
  }
}

/* Close with requests in flight: one more receive (or isend per sub) that nothing completes, then deregMr and
 * close: they must return (the watchdog fails a hang), with success. */
static void close_inflight(struct side *X, int receiver) {
  const struct sched *S = X->S;
  const ncclNet_v8_t *net = X->ip.net;
  void *rq = NULL;
  it_step("seed %llu: requests in flight at close", (unsigned long long)S->seed);
  if (receiver) {
    void *data[2] = {X->buf, X->buf + 4096}, *mhs[2] = {X->mh, X->mh};
    int sizes[2] = {64, 64}, tags[2] = {S->subtag[0], S->subtag[S->nsubs - 1]};
    for (int t = 0; t < 1000 && rq == NULL; t++) IT_OK(net->irecv(X->comm, 2, data, sizes, tags, mhs, &rq));
  } else {
    for (int u = 0; u < S->nsubs; u++) {
      rq = NULL;
      for (int t = 0; t < 100 && rq == NULL; t++) IT_OK(net->isend(X->comm, X->buf, 0, S->subtag[u], X->mh, &rq));
    }
  }
  IT_CHECK(gn_boot_barrier(X->fd, 60) == 0, "barrier");
}

/* Sum of every line of metric `name` in a Prometheus text. */
static double metric(const char *text, const char *name) {
  double sum = 0;
  size_t n = strlen(name);
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, name, n) == 0 && p[n] == '{') {
      const char *sp = strchr(p, '}');
      if (sp) sum += atof(sp + 1);
    }
  return sum;
}

enum { C_SENT, C_RECV, C_FAILREQ, C_FAILCONN, C_OPEN, C_FAULTS, C_RECOV, C_FALLB, C_RET, C_N };
#define C_BUSY C_N /* not a metric: the comm closed while its recovery or move was still waiting (its stats line) */
static const char *k_ctr[C_N] = {
    "gdrnet_sent_bytes_total",         "gdrnet_received_bytes_total", "gdrnet_failed_requests_total",
    "gdrnet_failed_connections_total", "gdrnet_connections_open",     "gdrnet_faults_total",
    "gdrnet_recoveries_total",         "gdrnet_fallbacks_total",      "gdrnet_returns_total"};

static void read_stats(const char *pat, double *c) {
  char path[600], *text = calloc(1, 1 << 20);
  const char *pp = strstr(pat, "%p");
  IT_CHECK(text != NULL && pp != NULL, "stats path %s", pat);
  snprintf(path, sizeof path, "%.*s%d%s", (int)(pp - pat), pat, (int)getpid(), pp + 2);
  FILE *f = fopen(path, "r");
  IT_CHECK(f != NULL, "GDRNET_STATS_FILE: %s was not written", path);
  size_t got = fread(text, 1, (1 << 20) - 1, f);
  fclose(f);
  (void)unlink(path);
  text[got] = 0;
  for (int i = 0; i < C_N; i++) c[i] = metric(text, k_ctr[i]);
  free(text);
}

struct pair_arg {
  const struct sched *S;
};

static int side_main(const struct sched *S, int fd, int receiver) {
  struct side X;
  double c[C_N + 1], peer[C_N + 1];
  memset(&X, 0, sizeof X);
  X.S = S;
  X.fd = fd;
  alarm((unsigned)it_env_double("CONTRACT_SEED_S", 60));
  apply_env(S, receiver);
  open_side(&X, receiver);
  if (receiver)
    run_receiver(&X);
  else
    run_sender(&X);
  it_step("seed %llu: barrier after the traffic", (unsigned long long)S->seed);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  if (S->close_inflight) close_inflight(&X, receiver);
  it_step("seed %llu: closing", (unsigned long long)S->seed);
  IT_OK(X.ip.net->deregMr(X.comm, X.mh));
  IT_OK(receiver ? X.ip.net->closeRecv(X.comm) : X.ip.net->closeSend(X.comm));
  /* a fault late in the schedule: its recovery (or move) may wait for a peer whose work is all done, and so calls
   * nothing, until close; the comm's stats line at close says so */
  char *cap = gn_log_captured();
  int busy = cap != NULL && strstr(cap, "flushed completion(s) ignored; state recovering") != NULL;
  free(cap);
  it_unload(&X.ip);
  free(X.buf);
  read_stats(getenv("GDRNET_STATS_FILE"), c);
  c[C_BUSY] = busy;
  IT_CHECK(gn_boot_send(fd, c, sizeof c) == 0 && gn_boot_recv(fd, peer, sizeof peer, 60) == 0, "bootstrap");
  /* this process's own counters */
  const char *me = receiver ? "receiver" : "sender";
  IT_CHECK(c[C_FAILREQ] == 0 && c[C_FAILCONN] == 0,
           "seed %llu: the %s counts %.0f failed request(s), %.0f failed "
           "connection(s)",
           (unsigned long long)S->seed, me, c[C_FAILREQ], c[C_FAILCONN]);
  IT_CHECK(c[C_OPEN] == 0, "seed %llu: the %s counts %.0f comm(s) open after close", (unsigned long long)S->seed, me,
           c[C_OPEN]);
  if (receiver)
    IT_CHECK(c[C_RECV] == (double)S->bytes * S->rounds,
             "seed %llu: the receiver counts %.0f bytes received, the model moved %lld", (unsigned long long)S->seed,
             c[C_RECV], S->bytes);
  else
    IT_CHECK(c[C_SENT] == (double)S->bytes * S->rounds,
             "seed %llu: the sender counts %.0f bytes sent, the model moved %lld", (unsigned long long)S->seed,
             c[C_SENT], S->bytes);
  IT_CHECK(c[C_RET] <= c[C_FALLB], "seed %llu: the %s counts %.0f returns to RDMA but %.0f moves to TCP",
           (unsigned long long)S->seed, me, c[C_RET], c[C_FALLB]);
  if (!receiver) {
    double faults = c[C_FAULTS] + peer[C_FAULTS], handled = c[C_RECOV] + peer[C_RECOV] + c[C_FALLB] + peer[C_FALLB];
    printf("COUNTERS seed %llu faults %.0f recoveries %.0f fallbacks %.0f returns %.0f\n", (unsigned long long)S->seed,
           faults, c[C_RECOV] + peer[C_RECOV], c[C_FALLB] + peer[C_FALLB], c[C_RET] + peer[C_RET]);
    fflush(stdout);
    IT_CHECK(faults == 0 || handled > 0 || c[C_BUSY] + peer[C_BUSY] > 0,
             "seed %llu: %.0f fault(s) counted but no recovery and no move to TCP, and none in progress at close",
             (unsigned long long)S->seed, faults);
  }
  return 0;
}

static int receiver_child(int fd, void *arg) { return side_main(((struct pair_arg *)arg)->S, fd, 1); }

/* The pair: this process sends, a child receives. */
static int pair_main(int unused_fd, void *arg) {
  struct pair_arg *A = arg;
  it_child_t c;
  (void)unused_fd;
  it_fork(&c, receiver_child, A);
  side_main(A->S, c.fd, 0);
  it_join(&c, 60);
  return 0;
}

/* ---- the coordinator ---- */
static void print_tail(const char *path, int lines) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  static char ring[80][400];
  int n = 0;
  while (fgets(ring[n % 80], sizeof ring[0], f)) n++;
  fclose(f);
  int from = n > lines ? n - lines : 0;
  if (n - from > 80) from = n - 80;
  for (int i = from; i < n; i++) fprintf(stderr, "    | %s", ring[i % 80]);
}

/* FAIL lines and the counters line of a seed's log */
static int grep_log(const char *path, const char *needle, char *out, size_t len) {
  FILE *f = fopen(path, "r");
  char line[2048];
  int hits = 0;
  if (f == NULL) return 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, needle)) {
      if (out && len > 0 && hits == 0) { /* the first hit, cut to fit */
        size_t k = strnlen(line, len - 1);
        memcpy(out, line, k);
        out[k] = '\0';
      }
      hits++;
    }
  fclose(f);
  return hits;
}

int main(void) {
  const char *tr = getenv("GDRNET_TRANSPORT");
  int rdma = tr && strcmp(tr, "rdma") == 0;
  const char *fe = getenv("CONTRACT_FAULTS") ? getenv("CONTRACT_FAULTS") : "0";
  int fmode = strcmp(fe, "mix") == 0 ? 2 : atoi(fe) != 0;
  uint64_t seed0 = (uint64_t)it_env_double("CONTRACT_SEED", 1);
  long nseeds = (long)it_env_double("CONTRACT_SEEDS", 100000);
  double secs = it_env_double("CONTRACT_SECONDS", 110), seed_s = it_env_double("CONTRACT_SEED_S", 60);
  int stop = it_env_double("CONTRACT_STOP", 0) != 0, wrong = it_env_double("CONTRACT_WRONG_MODEL", 0) != 0;
  const char *shape = getenv("CONTRACT_SHAPE") ? getenv("CONTRACT_SHAPE") : "nccl";
  int plain = strcmp(shape, "plain") == 0;
  if (!plain && strcmp(shape, "nccl") != 0) {
    fprintf(stderr, "contract: CONTRACT_SHAPE=%s: accepted values are nccl (the default) and plain\n", shape);
    return 2;
  }
  g_step_s = seed_s * 2 / 3;
  const char *dir = getenv("CONTRACT_DIR");
  if (dir == NULL || !*dir) dir = getenv("VEMU_DIR");
  if (dir == NULL || !*dir) dir = "/tmp";
  if (fmode && !rdma) {
    fprintf(stderr, "contract: CONTRACT_FAULTS=%s needs GDRNET_TRANSPORT=rdma (the emulator's faults)\n", fe);
    return 2;
  }
  it_init("contract", (int)(secs + 4 * seed_s + 60));
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("contract: %s, seeds from %llu, up to %ld, %.0f s, faults %s, shape %s%s\n",
         rdma ? "rdma (verbs emulator)" : "tcp", (unsigned long long)seed0, nseeds, secs,
         fmode == 2 ? "every other seed"
         : fmode    ? "every seed"
                    : "none",
         shape, wrong ? ", WRONG MODEL (self-test)" : "");
  uint64_t t0 = gn_now_ns();
  long ran = 0, failed = 0, nfaulted = 0;
  struct {
    const char *kind;
    long seeds, fired, failed;
  } tally[24];
  int ntally = 0;
  double sum_c[4] = {0, 0, 0, 0};
  char fails[4096] = "";
  size_t fl = 0;
  for (long q = 0; q < nseeds; q++) {
    if (q > 0 && (double)(gn_now_ns() - t0) / 1e9 > secs) break;
    uint64_t seed = seed0 + (uint64_t)q;
    struct sched *S = calloc(1, sizeof *S);
    IT_CHECK(S != NULL, "out of memory");
    int faults = fmode == 1 || (fmode == 2 && (seed & 1));
    IT_CHECK(make_sched(S, seed, rdma, faults, wrong, plain) == 0, "seed %llu: the model refused its own schedule",
             (unsigned long long)seed);
    char desc[1600], logp[700], statp[700];
    describe(S, desc, sizeof desc);
    snprintf(logp, sizeof logp, "%s/contract-%s-%llu.log", dir, rdma ? "rdma" : "tcp", (unsigned long long)seed);
    snprintf(statp, sizeof statp, "%s/contract-%llu-stats-%%p.prom", dir, (unsigned long long)seed);
    setenv("GDRNET_STATS_FILE", statp, 1);
    printf("seed %llu: %s%s%s%s%s%s%s\n", (unsigned long long)seed, desc, faults ? "; fault: " : "",
           faults ? S->fault_kind : "", S->fault[0][0] ? ", sender " : "", S->fault[0],
           S->fault[1][0] ? ", receiver " : "", S->fault[1]);
    /* the pair's output goes to the seed's log */
    fflush(stderr);
    int saved = dup(2), lfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    IT_CHECK(saved >= 0 && lfd >= 0, "%s: %s", logp, strerror(errno));
    struct pair_arg A = {S};
    it_child_t c;
    IT_CHECK(dup2(lfd, 2) == 2, "dup2");
    int ofd = dup(1);
    IT_CHECK(ofd >= 0 && dup2(lfd, 1) == 1, "dup2");
    it_fork(&c, pair_main, &A);
    IT_CHECK(dup2(saved, 2) == 2 && dup2(ofd, 1) == 1, "dup2");
    close(saved);
    close(ofd);
    close(lfd);
    uint64_t ts = gn_now_ns(), dl = gn_deadline_ns(seed_s + 30);
    int st = 0, killed = 0;
    for (;;) {
      pid_t r = waitpid(c.pid, &st, WNOHANG);
      if (r == c.pid) break;
      if (r < 0 && errno != EINTR) break;
      if (gn_expired(dl) && !killed) {
        (void)kill(c.pid, SIGKILL);
        killed = 1;
      }
      struct pollfd p = {.fd = c.fd, .events = POLLIN};
      (void)poll(&p, 1, 50);
    }
    close(c.fd);
    alarm((unsigned)(secs + 4 * seed_s + 60)); /* the coordinator's own watchdog, per seed */
    ran++;
    double took = (double)(gn_now_ns() - ts) / 1e9;
    int ok = !killed && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    char cl[256] = "";
    if (grep_log(logp, "COUNTERS seed", cl, sizeof cl)) {
      double f = 0, r = 0, b = 0, k = 0;
      unsigned long long sd = 0;
      if (sscanf(cl, "COUNTERS seed %llu faults %lf recoveries %lf fallbacks %lf returns %lf", &sd, &f, &r, &b, &k) ==
          5) {
        sum_c[0] += f;
        sum_c[1] += r;
        sum_c[2] += b;
        sum_c[3] += k;
        nfaulted += f > 0;
      }
      cl[strcspn(cl, "\n")] = 0;
    }
    if (faults) {
      int t = 0;
      while (t < ntally && strcmp(tally[t].kind, S->fault_kind) != 0) t++;
      if (t == ntally && ntally < 24) {
        tally[t].kind = S->fault_kind;
        tally[t].seeds = tally[t].fired = tally[t].failed = 0;
        ntally++;
      }
      if (t < ntally) {
        tally[t].seeds++;
        tally[t].fired += strstr(cl, " faults 0 ") == NULL && cl[0];
        tally[t].failed += !ok;
      }
    }
    if (ok) {
      const char *cs = cl[0] ? strstr(cl, " faults ") : NULL;
      printf("seed %llu: ok, %.2f s%s%s\n", (unsigned long long)seed, took, cs ? ";" : "", cs ? cs : "");
      (void)unlink(logp);
    } else {
      failed++;
      char fline[2048] = "";
      if (!grep_log(logp, "FAIL contract", fline, sizeof fline))
        snprintf(fline, sizeof fline, "(no FAIL line: %s)\n",
                 killed            ? "killed after the seed's time"
                 : WIFSIGNALED(st) ? strsignal(WTERMSIG(st))
                                   : "exit status");
      const char *vars[] = {"GDRNET_TRANSPORT", "GDRNET_IBVERBS_LIB", "LD_LIBRARY_PATH",
                            "VEMU_DEVICES",     "VEMU_DIR",           "GDRNET_TEST_PLUGIN",
                            "GNIT_REAL_PLUGIN", "GNIT_CORRUPT",       "CONTRACT_WRONG_MODEL",
                            "CONTRACT_SHAPE",   "CONTRACT_ENV"};
      char cmd[4096];
      size_t l = (size_t)snprintf(cmd, sizeof cmd, "env");
      for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
        if (getenv(vars[v]) && l < sizeof cmd)
          l += (size_t)snprintf(cmd + l, sizeof cmd - l, " %s='%s'", vars[v], getenv(vars[v]));
      char self[1024];
      ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
      self[sl > 0 ? sl : 0] = 0;
      if (l < sizeof cmd)
        snprintf(cmd + l, sizeof cmd - l, " CONTRACT_FAULTS=%d CONTRACT_SEED=%llu CONTRACT_SEEDS=1 %s", faults,
                 (unsigned long long)seed, self);
      printf("FAIL seed %llu after %.2f s: %s", (unsigned long long)seed, took, fline);
      printf("  schedule: %s\n", desc);
      if (faults) printf("  fault (%s): sender \"%s\", receiver \"%s\"\n", S->fault_kind, S->fault[0], S->fault[1]);
      printf("  reproduce: %s\n  log: %s (its end:)\n", cmd, logp);
      fflush(stdout);
      print_tail(logp, 25);
      if (fl < sizeof fails) fl += (size_t)snprintf(fails + fl, sizeof fails - fl, " %llu", (unsigned long long)seed);
    }
    free(S);
    if (!ok && stop) break;
  }
  double total = (double)(gn_now_ns() - t0) / 1e9;
  for (int t = 0; t < ntally; t++)
    printf("contract: fault kind \"%s\": %ld seed(s), the plugin counted a fault in %ld, %ld wrong\n", tally[t].kind,
           tally[t].seeds, tally[t].fired, tally[t].failed);
  printf("contract: %ld schedule(s) (seeds %llu..%llu) in %.0f s over %s; %ld with a fault counted (%.0f faults, %.0f "
         "recoveries, %.0f moves to TCP, %.0f returns); %ld wrong%s%s\n",
         ran, (unsigned long long)seed0, (unsigned long long)(seed0 + (uint64_t)ran - 1), total, rdma ? "rdma" : "tcp",
         nfaulted, sum_c[0], sum_c[1], sum_c[2], sum_c[3], failed, failed ? ": seeds" : "", fails);
  return failed ? 1 : 0;
}
