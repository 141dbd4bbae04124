/* gdrnet-soak: a long run of the plugin through its ABI, as NCCL drives it, between two processes (the
 * integration harness: it.h). scripts/soak.sh runs it for both transports; docs/SOAK.md records runs.
 *
 *   gdrnet-soak --seconds S [--comms N] [--sample S] [--rss-growth-mb M] [--fd-growth F] [--stall S] [--seed X]
 *               [--faults]
 *
 * N connections each way (on every device in turn), each with its own depth (1 or 2 messages in flight) and its
 * own stream of random sizes (0 B .. 4 MiB, log-spread: zero, eager/inline, chunked, pipelined), into receives
 * posted larger than the message one time in four; every byte of every message is checked, and the canary past it.
 * Traffic runs in rounds (64 messages per comm and direction); after each round both sides close one connection
 * pair and open it again (connection churn), and the parent decides whether to go on (it holds the clock).
 * Resident memory and open fds are sampled every --sample seconds (a line each) and at every round's end; the
 * baseline is taken at the end of the third round (allocator and emulator warm). Fails (exit 1, "FAIL soak ...")
 * on a wrong byte or size, an error from the plugin, no completion for --stall seconds (a hang), RSS above the
 * baseline by more than --rss-growth-mb, or more fds at a round's end than at the baseline plus --fd-growth.
 *
 * --faults (off by default): the RDMA transport runs with random VEMU_FAULTS rules in both processes (failed
 * completions and receive completions written after their QP failed, again and again through the run with every=; a
 * fatal QP and a missing receive credit, once), and expects recovery or a move to TCP and back: every byte still
 * arrives and no error reaches the caller (docs/recovery.md). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "it.h"

#define MAXSZ (4u << 20)
#define SLOTS 2
#define MAXC 32
#define ROUND_MSGS 64
#define BASE_ROUND 3

typedef struct {
  double seconds, sample_s, stall_s;
  int comms;
  double rss_growth_mb;
  int fd_growth;
  uint64_t seed;
  int faults;
} opts_t;

static opts_t O = {60, 5, 60, 6, 32, 4, 0x50a5, 0};

/* splitmix64: both processes draw a direction's sizes from the same sequence */
static uint64_t rnd(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* the next message of a direction: its size, and the receive's posted size (>= it) */
static void next_msg(uint64_t *s, int *size, int *cap) {
  uint64_t k = rnd(s) % 16, v = rnd(s), x = rnd(s);
  uint64_t sz = k == 0 ? 0 : k < 6 ? 1 + v % 4096 : k < 11 ? 1 + v % 65536 : k < 15 ? v % (1u << 20) : v % MAXSZ;
  *size = (int)sz;
  *cap = (int)(x % 4 == 0 ? sz + (rnd(s) % (MAXSZ - sz + 1)) : sz);
}

typedef struct {
  void *comm, *mh;
  unsigned char *buf; /* SLOTS x MAXSZ */
  uint64_t rng, posted, done;
  void *req[SLOTS];
  int size[SLOTS], cap[SLOTS];
  uint64_t iter[SLOTS];
} dir_t;

typedef struct {
  int id, dev, depth;
  dir_t s, r;
} pair_t;

typedef struct {
  it_plugin_t ip;
  pair_t p[MAXC];
  int fd, parent;
  uint64_t msgs, bytes, rounds, reopened;
  uint64_t t0, last_progress, next_sample;
  long rss0_kb, rss_max_kb, fds0, fds_max;
} soak_t;

static soak_t S;

static long rss_kb(void) {
  long pages = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL) return -1;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = -1;
  fclose(f);
  return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  long n = 0;
  if (d == NULL) return -1;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the one opendir holds */
}

static const char *role(void) { return S.parent ? "A" : "B"; }

static void sample(const char *when) {
  double t = (double)(gn_now_ns() - S.t0) / 1e9;
  long rss = rss_kb(), fds = fd_count();
  IT_CHECK(rss > 0 && fds > 0, "cannot read /proc/self (rss %ld, fds %ld)", rss, fds);
  if (S.rounds >= BASE_ROUND) {
    if (rss > S.rss_max_kb) S.rss_max_kb = rss;
    if (fds > S.fds_max) S.fds_max = fds;
  }
  printf("soak %s %s t=%.1fs rounds=%llu msgs=%llu GB=%.2f reopened=%llu rss=%.1fMiB fds=%ld%s\n",
         getenv("GDRNET_TRANSPORT") ? getenv("GDRNET_TRANSPORT") : "auto", role(), t, (unsigned long long)S.rounds,
         (unsigned long long)S.msgs, (double)S.bytes / 1e9, (unsigned long long)S.reopened, (double)rss / 1024.0, fds,
         when);
  fflush(stdout);
  if (S.rss0_kb > 0)
    IT_CHECK((double)(rss - S.rss0_kb) <= O.rss_growth_mb * 1024.0,
             "resident memory grew %.1f MiB above the baseline (%.1f -> %.1f MiB; bound %.1f MiB)",
             (double)(rss - S.rss0_kb) / 1024.0, (double)S.rss0_kb / 1024.0, (double)rss / 1024.0, O.rss_growth_mb);
}

/* ------------------------------------------------------------------------------------------- comms -- */

static void pair_open(pair_t *p) {
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, S.ip.net, 60);
  it_step("opening connection pair %d", p->id);
  IT_GN(&ctx, gn_establish(&ctx, p->dev, S.fd, &p->s.comm, &p->r.comm));
  IT_OK(S.ip.net->regMr(p->s.comm, p->s.buf, (size_t)SLOTS * MAXSZ, NCCL_PTR_HOST, &p->s.mh));
  IT_OK(S.ip.net->regMr(p->r.comm, p->r.buf, (size_t)SLOTS * MAXSZ, NCCL_PTR_HOST, &p->r.mh));
}

static void pair_close(pair_t *p) {
  it_step("closing connection pair %d", p->id);
  IT_OK(S.ip.net->deregMr(p->s.comm, p->s.mh));
  IT_OK(S.ip.net->deregMr(p->r.comm, p->r.mh));
  IT_OK(S.ip.net->closeSend(p->s.comm));
  IT_OK(S.ip.net->closeRecv(p->r.comm));
  p->s.comm = p->r.comm = NULL;
}

/* salt of a direction: the sending process's role and the pair */
static uint64_t salt(int sender_is_parent, int id) { return (uint64_t)(sender_is_parent ? 1000 : 2000) + (uint64_t)id; }

static void pair_init(pair_t *p, int id) {
  memset(p, 0, sizeof(*p));
  p->id = id;
  p->dev = id % S.ip.ndev;
  p->depth = 1 + (int)(rnd(&(uint64_t){O.seed ^ (uint64_t)id}) % SLOTS);
  p->s.buf = malloc((size_t)SLOTS * MAXSZ);
  p->r.buf = malloc((size_t)SLOTS * MAXSZ);
  IT_CHECK(p->s.buf && p->r.buf, "out of memory");
  /* resident from the start: the RSS baseline holds the buffers, growth is the plugin's (and the emulator's) */
  memset(p->s.buf, 0, (size_t)SLOTS * MAXSZ);
  memset(p->r.buf, 0, (size_t)SLOTS * MAXSZ);
  /* each direction's size stream, the same in both processes */
  p->s.rng = O.seed * 31 + salt(S.parent, id);
  p->r.rng = O.seed * 31 + salt(!S.parent, id);
  pair_open(p);
}

/* ------------------------------------------------------------------------------------------ traffic -- */

/* Posts and tests on every comm until each direction has done `target` messages. */
static void run_round(uint64_t target) {
  const ncclNet_v8_t *net = S.ip.net;
  for (;;) {
    int busy = 0, progress = 0;
    for (int i = 0; i < O.comms; i++) {
      pair_t *p = &S.p[i];
      dir_t *s = &p->s, *r = &p->r;
      /* sends */
      while (s->posted < target && s->posted - s->done < (uint64_t)p->depth) {
        int k = (int)(s->posted % SLOTS), size, cap;
        uint64_t save = s->rng;
        void *req = NULL;
        unsigned char *b = s->buf + (size_t)k * MAXSZ;
        if (s->req[k] != NULL) break;
        next_msg(&s->rng, &size, &cap);
        gn_pattern_fill(b, (size_t)size, gn_pattern_seed((uint64_t)size, s->posted, salt(S.parent, p->id)));
        IT_OK(net->isend(s->comm, b, size, 0, s->mh, &req));
        if (req == NULL) {
          s->rng = save; /* not taken: the same message again later */
          break;
        }
        s->req[k] = req;
        s->size[k] = size;
        s->iter[k] = s->posted++;
      }
      for (int k = 0; k < SLOTS; k++) {
        int done = 0;
        if (s->req[k] == NULL) continue;
        it_step("pair %d: send of message %llu (%d bytes)", p->id, (unsigned long long)s->iter[k], s->size[k]);
        IT_OK(net->test(s->req[k], &done, NULL));
        if (done) {
          s->req[k] = NULL;
          s->done++;
          progress++;
          S.msgs++;
          S.bytes += (uint64_t)s->size[k];
        }
      }
      /* receives */
      while (r->posted < target && r->posted - r->done < (uint64_t)p->depth) {
        int k = (int)(r->posted % SLOTS), size, cap, tag = 0;
        uint64_t save = r->rng;
        void *req = NULL, *data[1], *mh[1] = {r->mh};
        unsigned char *b = r->buf + (size_t)k * MAXSZ;
        if (r->req[k] != NULL) break;
        next_msg(&r->rng, &size, &cap);
        memset(b, IT_CANARY, (size_t)cap);
        data[0] = b;
        IT_OK(net->irecv(r->comm, 1, data, &cap, &tag, mh, &req));
        if (req == NULL) {
          r->rng = save;
          break;
        }
        r->req[k] = req;
        r->size[k] = size;
        r->cap[k] = cap;
        r->iter[k] = r->posted++;
      }
      for (int k = 0; k < SLOTS; k++) {
        int done = 0, got = -1;
        char what[96];
        if (r->req[k] == NULL) continue;
        it_step("pair %d: receive of message %llu (%d bytes)", p->id, (unsigned long long)r->iter[k], r->size[k]);
        IT_OK(net->test(r->req[k], &done, &got));
        if (!done) continue;
        snprintf(what, sizeof(what), "pair %d dev %d message %llu", p->id, p->dev, (unsigned long long)r->iter[k]);
        it_verify(r->buf + (size_t)k * MAXSZ, r->cap[k], got, r->size[k], r->iter[k], salt(!S.parent, p->id), what);
        r->req[k] = NULL;
        r->done++;
        progress++;
      }
      if (s->done < target || r->done < target) busy = 1;
    }
    uint64_t now = gn_now_ns();
    if (progress) S.last_progress = now;
    IT_CHECK((double)(now - S.last_progress) / 1e9 < O.stall_s,
             "no completion on any of %d connection pairs for %.0f s: a hang (round %llu)", O.comms, O.stall_s,
             (unsigned long long)S.rounds);
    if (now >= S.next_sample) {
      sample("");
      S.next_sample = now + (uint64_t)(O.sample_s * 1e9);
    }
    if (!busy) return;
  }
}

static void set_faults(void) {
  char rules[512];
  uint64_t s = O.seed ^ (uint64_t)getpid();
  const char *tr = getenv("GDRNET_TRANSPORT");
  if (!O.faults || tr == NULL || strcmp(tr, "rdma") != 0) return;
  snprintf(rules, sizeof(rules),
           "wc:op=write_imm:nth=%llu:every=%llu:status=retry_exc;wc:op=write:nth=%llu:every=%llu:status=rem_access;"
           "late_cqe:nth=%llu:every=%llu:ms=20;qp_fatal:nth=%llu;no_recv_credit:nth=%llu:every=%llu",
           (unsigned long long)(200 + rnd(&s) % 5000), (unsigned long long)(20000 + rnd(&s) % 20000),
           (unsigned long long)(100 + rnd(&s) % 5000), (unsigned long long)(30000 + rnd(&s) % 30000),
           (unsigned long long)(300 + rnd(&s) % 5000), (unsigned long long)(15000 + rnd(&s) % 15000),
           (unsigned long long)(2 + rnd(&s) % 20), (unsigned long long)(100 + rnd(&s) % 5000),
           (unsigned long long)(10000 + rnd(&s) % 10000));
  setenv("VEMU_FAULTS", rules, 1);
  it_log("fault mode: VEMU_FAULTS=%s (expects recovery)", rules);
}

static int side(int fd, int parent) {
  uint64_t go = 1;
  memset(&S, 0, sizeof(S));
  S.fd = fd;
  S.parent = parent;
  set_faults();
  it_load(&S.ip);
  S.t0 = S.last_progress = gn_now_ns();
  S.next_sample = S.t0 + (uint64_t)(O.sample_s * 1e9);
  for (int i = 0; i < O.comms; i++) pair_init(&S.p[i], i);
  while (go) {
    run_round((S.rounds + 1) * ROUND_MSGS);
    S.rounds++;
    /* the round's end: nothing in flight on either side; churn one pair; the parent says whether to go on */
    pair_t *p = &S.p[S.rounds % (uint64_t)O.comms];
    pair_close(p);
    pair_open(p);
    S.reopened++;
    if (S.parent) {
      go = (double)(gn_now_ns() - S.t0) / 1e9 < O.seconds;
      IT_CHECK(gn_boot_send_u64(fd, go) == 0, "bootstrap send");
    } else {
      IT_CHECK(gn_boot_recv_u64(fd, &go, 120) == 0, "bootstrap recv (the parent's go/stop)");
    }
    long fds = fd_count();
    if (S.rounds == BASE_ROUND) {
      S.rss0_kb = S.rss_max_kb = rss_kb();
      S.fds0 = S.fds_max = fds;
      sample(" (baseline)");
    } else if (S.rounds > BASE_ROUND) {
      if (fds > S.fds_max) S.fds_max = fds;
      IT_CHECK(fds <= S.fds0 + O.fd_growth, "open fds at round %llu's end: %ld, at the baseline: %ld (bound +%d)",
               (unsigned long long)S.rounds, fds, S.fds0, O.fd_growth);
    }
  }
  IT_CHECK(S.rounds > BASE_ROUND, "only %llu rounds in %.0f s: too short a run to judge growth",
           (unsigned long long)S.rounds, O.seconds);
  sample(" (end)");
  for (int i = 0; i < O.comms; i++) {
    pair_close(&S.p[i]);
    free(S.p[i].s.buf);
    free(S.p[i].r.buf);
  }
  printf("soak %s %s PASS: %.0f s, %llu rounds, %llu messages, %.2f GB, %llu reopened; rss %.1f MiB at the baseline, "
         "max %.1f; fds %ld at the baseline, max %ld\n",
         getenv("GDRNET_TRANSPORT") ? getenv("GDRNET_TRANSPORT") : "auto", role(), (double)(gn_now_ns() - S.t0) / 1e9,
         (unsigned long long)S.rounds, (unsigned long long)S.msgs, (double)S.bytes / 1e9,
         (unsigned long long)S.reopened, (double)S.rss0_kb / 1024.0, (double)S.rss_max_kb / 1024.0, S.fds0, S.fds_max);
  fflush(stdout);
  it_unload(&S.ip);
  return 0;
}

static void usage(const char *msg) {
  fprintf(stderr,
          "gdrnet-soak: %s\nusage: gdrnet-soak --seconds S [--comms N] [--sample S] [--rss-growth-mb M] "
          "[--fd-growth F] [--stall S] [--seed X] [--faults]\n",
          msg);
  exit(2);
}

static double num(const char *opt, const char *v) {
  char *end = NULL;
  double d = v ? strtod(v, &end) : 0;
  if (v == NULL || end == v || *end != '\0' || d < 0) usage(opt);
  return d;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--faults")) {
      O.faults = 1;
      continue;
    }
    if (!strcmp(a, "--seconds"))
      O.seconds = num(a, v);
    else if (!strcmp(a, "--comms"))
      O.comms = (int)num(a, v);
    else if (!strcmp(a, "--sample"))
      O.sample_s = num(a, v);
    else if (!strcmp(a, "--rss-growth-mb"))
      O.rss_growth_mb = num(a, v);
    else if (!strcmp(a, "--fd-growth"))
      O.fd_growth = (int)num(a, v);
    else if (!strcmp(a, "--stall"))
      O.stall_s = num(a, v);
    else if (!strcmp(a, "--seed"))
      O.seed = (uint64_t)num(a, v);
    else
      usage("unknown option");
    i++;
  }
  if (O.comms < 1 || O.comms > MAXC) usage("--comms must be 1..32");
  if (!(O.sample_s > 0) || !(O.stall_s > 0)) usage("--sample and --stall must be > 0");
  /* the watchdog: the run, plus time for its last rounds and the teardown */
  return it_two_sides("soak", (int)(O.seconds + O.stall_s + 120), side, O.stall_s + 120);
}
