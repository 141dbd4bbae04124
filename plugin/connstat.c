/* Per-connection state and the stall detector (connstat.h). */
#include "connstat.h"

#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "sock.h"

/* The registry and the detector: g_mu guards the list, the detector's fields of each entry and g_det. */
struct detector {
  pthread_t th;
  int stop;
};
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv;
static int g_cv_ok;
static struct gdr_connstat *g_list;
static int g_count;
static uint64_t g_next_id;
static struct detector *g_det; /* the running detector, NULL when none */
#define NCLOSED 16
static struct gdr_conn_snap g_closed[NCLOSED]; /* the last connections closed, their final state (a ring) */
static uint64_t g_nclosed;
static uint64_t g_thawed_ns;      /* this process was not running until then (stopped, starved): no stall before it */
static void (*g_on_change)(void); /* told when a connection's stall starts or ends (the stats writer) */
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

const char *gdr_conn_state_str(int state) {
  switch (state) {
  case GDR_CONN_RDMA: return "rdma";
  case GDR_CONN_RECOVERING: return "recovering";
  case GDR_CONN_MOVED_TCP: return "moved-to-tcp";
  case GDR_CONN_TCP: return "tcp";
  case GDR_CONN_TCP_ONLY: return "tcp-only";
  case GDR_CONN_FAILED: return "failed";
  default: return "unknown";
  }
}

double gdr_connstat_quantile(const uint64_t *hist, double q) {
  uint64_t n = 0, acc = 0;
  for (int i = 0; i < GDR_CONNSTAT_HIST; i++) n += hist[i];
  if (n == 0) return 0;
  const double want = q * (double)n;
  for (int i = 0; i < GDR_CONNSTAT_HIST; i++) {
    acc += hist[i];
    if ((double)acc >= want && acc > 0) return (double)(1ull << i) / 1e9;
  }
  return (double)(1ull << (GDR_CONNSTAT_HIST - 1)) / 1e9;
}

/* ------------------------------------------------------------------------------------- socket facts -- */

void gdr_connstat_sock_facts(int fd, struct gdr_conn_desc *d) {
  struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
  struct tcp_info ti;
  socklen_t tl = sizeof(ti);
  int q = 0;
  if (fd < 0) return;
  if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) d->peer_closed = 1;
  memset(&ti, 0, sizeof(ti));
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && tl >= offsetof(struct tcp_info, tcpi_rcv_rtt))
    d->peer_silent_ms = (int64_t)ti.tcpi_last_data_recv;
  if (ioctl(fd, SIOCOUTQ, &q) == 0 && q >= 0) d->unsent = (d->unsent > 0 ? d->unsent : 0) + q;
}

/* ------------------------------------------------------------------------------------------ registry -- */

static void connstat_atfork_child(void) {
  g_det = NULL; /* the parent's thread is not in this process, nor its wait on g_cv: both start afresh */
  g_cv_ok = 0;
  pthread_mutex_init(&g_mu, NULL);
}

/* ---------------------------------------------------------------------------------------------- clock -- */

struct gdr_cs_clock gdr_cs_clock;

#if defined(__x86_64__)
/* one (CLOCK_MONOTONIC, TSC) pair: the clock read between two TSC reads, the closest of a few tries (a preemption
 * between the reads is not taken) */
static void clock_pair(uint64_t *ns, uint64_t *tsc) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 5; i++) {
    const uint64_t a = __builtin_ia32_rdtsc(), n = gdr_connstat_clock_ns(), b = __builtin_ia32_rdtsc();
    if (b - a < best) {
      best = b - a;
      *ns = n;
      *tsc = a + (b - a) / 2;
    }
  }
}

static int clocksource_is_tsc(void) {
  char cs[32] = "";
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (f == NULL) return 0;
  int ok = fgets(cs, sizeof(cs), f) != NULL && strcmp(cs, "tsc\n") == 0;
  (void)fclose(f);
  return ok;
}
#endif

/* The TSC's scale against CLOCK_MONOTONIC over 2 ms (connstat.h), where the kernel's clocksource is the TSC. */
static void clock_calibrate(void) {
#if defined(__x86_64__)
  uint64_t n0, t0, n1, t1;
  const struct timespec wait = {0, 2000000};
  if (getenv("GDRNET_TEST_NO_TSC") != NULL || !clocksource_is_tsc()) return; /* (a test's control) */
  clock_pair(&n0, &t0);
  if (nanosleep(&wait, NULL) != 0) return;
  clock_pair(&n1, &t1);
  if (t1 <= t0 || n1 <= n0) return;
  const unsigned __int128 mult = ((unsigned __int128)(n1 - n0) << 32) / (t1 - t0);
  if (mult == 0 || mult > UINT32_MAX * (unsigned __int128)64) return; /* a TSC under 62.5 MHz: not this one */
  atomic_store_explicit(&gdr_cs_clock.tsc0, t1, memory_order_relaxed);
  atomic_store_explicit(&gdr_cs_clock.ns0, n1, memory_order_relaxed);
  atomic_store_explicit(&gdr_cs_clock.mult, (uint64_t)mult, memory_order_relaxed);
  atomic_store_explicit(&gdr_cs_clock.ok, 1, memory_order_release);
#endif
}

int gdr_connstat_clock_is_tsc(void) { return atomic_load_explicit(&gdr_cs_clock.ok, memory_order_acquire); }

static void connstat_atfork_register(void) {
  if (pthread_atfork(NULL, NULL, connstat_atfork_child) != 0) GDR_WARN("stall detector: pthread_atfork failed");
  clock_calibrate(); /* once, before the first connection's data path */
}

static const char *dir_word(const struct gdr_connstat *cs) {
  return cs->fifo ? "one-sided" : cs->send ? "send" : "recv";
}

static void *detector_main(void *arg);
static void snap_locked(struct gdr_connstat *cs, uint64_t now, struct gdr_conn_snap *o);

/* Caller holds g_mu: the detector runs (GDRNET_STALL_WARN_MS > 0). Failing to start it costs only the WARNs. It
 * takes no pin of the library (transport.h): it runs only while a connection is registered, that is open, and every
 * open connection's transport keeps a thread of its own, and the pin with it, until its close, which comes after
 * the connection left the registry (and the last one joined this thread). */
static void detector_start_locked(void) {
  if (g_det != NULL || gdr_param_int(GDR_PARAM_STALL_WARN_MS) <= 0) return;
  if (!g_cv_ok) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return;
    int bad = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 || pthread_cond_init(&g_cv, &ca) != 0;
    (void)pthread_condattr_destroy(&ca);
    if (bad) return;
    g_cv_ok = 1;
  }
  struct detector *d = calloc(1, sizeof(*d));
  if (d == NULL) return;
  int rc = pthread_create(&d->th, NULL, detector_main, d);
  if (rc != 0) {
    free(d);
    GDR_WARN("GDRNET_STALL_WARN_MS: cannot start the stall detector (%s): stalls are not reported", strerror(rc));
    return;
  }
  (void)pthread_setname_np(d->th, "gdr-stall"); /* named before anyone can count it (a name is a convenience) */
  g_det = d;
}

/* Caller holds g_mu; returns the detector to join (outside the lock), or NULL. */
static struct detector *detector_claim_locked(void) {
  struct detector *d = g_det;
  if (d == NULL) return NULL;
  g_det = NULL;
  d->stop = 1;
  pthread_cond_broadcast(&g_cv);
  return d;
}

static void detector_join(struct detector *d) {
  if (d == NULL) return;
  (void)pthread_join(d->th, NULL);
  free(d);
}

static struct gdr_connstat *open_common(const struct gdr_transport *tp, void *tcomm, int send, int dev, int nslots,
                                        int fifo) {
  const char *file = gdr_param_str(GDR_PARAM_STATS_FILE), *dir = gdr_param_str(GDR_PARAM_STATS_DIR);
  if (gdr_param_int(GDR_PARAM_STALL_WARN_MS) <= 0 && (file == NULL || file[0] == 0) && (dir == NULL || dir[0] == 0))
    return NULL; /* nobody reads it: no bookkeeping at all */
  struct gdr_connstat *cs = calloc(1, sizeof(*cs));
  if (cs == NULL) return NULL;
  cs->slots = calloc((size_t)(nslots > 0 ? nslots : 1), sizeof(*cs->slots));
  if (cs->slots == NULL) {
    free(cs);
    return NULL;
  }
  cs->nslots = nslots;
  cs->fifo = fifo;
  cs->send = send;
  cs->dev = dev;
  cs->tp = tp;
  cs->tcomm = tcomm;
  pthread_once(&g_fork_once, connstat_atfork_register);
  atomic_store_explicit(&cs->last_done_ns, gdr_connstat_now_ns(), memory_order_relaxed);
  pthread_mutex_lock(&g_mu);
  cs->id = ++g_next_id;
  cs->next = g_list;
  g_list = cs;
  g_count++;
  detector_start_locked();
  pthread_mutex_unlock(&g_mu);
  return cs;
}

struct gdr_connstat *gdr_connstat_open(const struct gdr_transport *tp, void *tcomm, int send, int dev, int nslots) {
  return open_common(tp, tcomm, send, dev, nslots, 0);
}

struct gdr_connstat *gdr_connstat_open_fifo(const struct gdr_transport *tp, void *tcomm, int dev) {
  return open_common(tp, tcomm, 1, dev, 1, 1);
}

const char *gdr_connstat_op_str(int tag) {
  switch (tag) {
  case GDR_CS_OP_PUT: return "put";
  case GDR_CS_OP_PUT | GDR_CS_OP_SIGNAL: return "put+signal";
  case GDR_CS_OP_GET: return "get";
  case GDR_CS_OP_FLUSH: return "flush";
  default: return "operation";
  }
}

static void report_resumed(struct gdr_connstat *cs, uint64_t last, uint64_t now); /* (below, with the detector) */
static int bytes_moved(struct gdr_connstat *cs, uint64_t now);

void gdr_connstat_close(struct gdr_connstat *cs) {
  struct detector *d = NULL;
  if (cs == NULL) return;
  pthread_mutex_lock(&g_mu);
  for (struct gdr_connstat **p = &g_list; *p != NULL; p = &(*p)->next)
    if (*p == cs) {
      *p = cs->next;
      g_count--;
      break;
    }
  snap_locked(cs, gdr_connstat_now_ns(), &g_closed[g_nclosed++ % NCLOSED]); /* the transport's comm is still open */
  if (cs->stalled && cs->stall_warned_ns != 0) {
    /* It may have moved again since the detector last looked (a peer continued, its last requests done, and then
     * NCCL closed): that is a resumed connection, said as the detector would have said it, not a close mid-stall. */
    const uint64_t now = gdr_connstat_now_ns(), last = atomic_load_explicit(&cs->last_done_ns, memory_order_acquire);
    if (last > cs->stall_since_ns || bytes_moved(cs, now))
      report_resumed(cs, last, now);
    else
      GDR_INFO(NCCL_NET, "stall: the %s connection %s %s closed while stalled (for %.1f s)", dir_word(cs),
               cs->send ? "to" : "from", cs->desc.peer, (double)(now - cs->stall_since_ns) / 1e9);
  }
  if (g_list == NULL) d = detector_claim_locked(); /* the last connection: the thread ends with it */
  pthread_mutex_unlock(&g_mu);
  detector_join(d);
  free(cs->slots);
  free(cs);
}

int gdr_connstat_closed(struct gdr_conn_snap *out, int max) {
  int n = 0;
  pthread_mutex_lock(&g_mu);
  const uint64_t first = g_nclosed > NCLOSED ? g_nclosed - NCLOSED : 0;
  for (uint64_t i = first; i < g_nclosed && n < max; i++) out[n++] = g_closed[i % NCLOSED];
  pthread_mutex_unlock(&g_mu);
  return n;
}

void gdr_connstat_on_change(void (*fn)(void)) {
  pthread_mutex_lock(&g_mu);
  g_on_change = fn;
  pthread_mutex_unlock(&g_mu);
}

int gdr_connstat_count(void) {
  pthread_mutex_lock(&g_mu);
  int n = g_count;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* ------------------------------------------------------------------------------------------- reading -- */

/* The oldest waiting thing of a connection, read against its writer. */
struct measure {
  int64_t inflight;
  uint64_t since; /* its start (0: nothing waits) */
  uint64_t size;
  int tag, refused;
};

static void measure(struct gdr_connstat *cs, struct measure *m) {
  const int standing = atomic_load_explicit(&cs->standing, memory_order_relaxed);
  memset(m, 0, sizeof(*m));
  for (int i = 0; i < cs->nslots; i++) {
    struct gdr_connstat_slot *s = &cs->slots[i];
    uint64_t t0 = atomic_load_explicit(&s->t0, memory_order_acquire);
    if (t0 == 0) continue;
    m->inflight++;
    if (standing || (m->since != 0 && t0 >= m->since)) continue;
    uint64_t size = atomic_load_explicit(&s->size, memory_order_relaxed);
    int tag = atomic_load_explicit(&s->tag, memory_order_relaxed);
    if (atomic_load_explicit(&s->t0, memory_order_acquire) != t0) continue; /* reused meanwhile */
    m->since = t0;
    m->size = size;
    m->tag = tag;
  }
  if (cs->fifo) m->inflight = atomic_load_explicit(&cs->pending, memory_order_relaxed);
  uint64_t r = atomic_load_explicit(&cs->refused_ns, memory_order_acquire);
  if (r != 0 && (m->since == 0 || r < m->since)) {
    m->since = r;
    m->size = atomic_load_explicit(&cs->refused_size, memory_order_relaxed);
    m->tag = atomic_load_explicit(&cs->refused_tag, memory_order_relaxed);
    m->refused = 1;
  }
}

/* Caller holds g_mu: the transport's view now; a field it could not read keeps its last value. */
static void describe_locked(struct gdr_connstat *cs) {
  struct gdr_conn_desc d;
  if (cs->tp->describe == NULL) return;
  memset(&d, 0, sizeof(d));
  d.peer_silent_ms = -1;
  d.unsent = -1;
  d.recoveries = -1;
  d.moves = -1;
  d.peer_rank = -1;
  if (cs->tp->describe(cs->tcomm, &d) != 0) return;
  if (d.peer_rank < 0) d.peer_rank = gdr_peer_rank_of(d.peer); /* what its handle or HELLO said (sock.h) */
  if (cs->have_desc) {
    if (d.peer_rank < 0) d.peer_rank = cs->desc.peer_rank;
    if (d.path[0] == 0) memcpy(d.path, cs->desc.path, sizeof(d.path));
    if (d.recoveries < 0) d.recoveries = cs->desc.recoveries;
    if (d.moves < 0) d.moves = cs->desc.moves;
  }
  cs->desc = d;
  cs->have_desc = 1;
}

static double secs(uint64_t a, uint64_t b) { return a > b ? (double)(a - b) / 1e9 : 0.0; }

static void snap_locked(struct gdr_connstat *cs, uint64_t now, struct gdr_conn_snap *o) {
  struct measure m;
  memset(o, 0, sizeof(*o));
  describe_locked(cs);
  measure(cs, &m);
  o->id = cs->id;
  o->send = cs->send;
  o->onesided = cs->fifo;
  o->dev = cs->dev;
  o->transport = cs->tp->name;
  o->desc = cs->desc;
  o->have_desc = cs->have_desc;
  o->inflight = m.inflight;
  o->waiting = m.since != 0;
  o->oldest_refused = m.refused;
  o->oldest_age_s = m.since != 0 ? secs(now, m.since) : 0;
  o->oldest_size = m.size;
  o->oldest_tag = m.tag;
  o->idle_s = secs(now, atomic_load_explicit(&cs->last_done_ns, memory_order_acquire));
  o->bytes = atomic_load_explicit(&cs->bytes, memory_order_relaxed);
  o->lat_sum_s = (double)atomic_load_explicit(&cs->lat_sum_ns, memory_order_relaxed) / 1e9;
  for (int i = 0; i < GDR_CONNSTAT_HIST; i++) {
    o->hist[i] = atomic_load_explicit(&cs->hist[i], memory_order_relaxed);
    o->requests += o->hist[i];
  }
  o->p50_s = gdr_connstat_quantile(o->hist, 0.50);
  o->p99_s = gdr_connstat_quantile(o->hist, 0.99);
  o->stalled = cs->stalled;
  o->stalls = cs->stalls;
}

int gdr_connstat_snapshot(struct gdr_conn_snap *out, int max) {
  const uint64_t now = gdr_connstat_now_ns();
  int n = 0;
  pthread_mutex_lock(&g_mu);
  for (struct gdr_connstat *cs = g_list; cs != NULL; cs = cs->next, n++)
    if (n < max) snap_locked(cs, now, &out[n]);
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* ------------------------------------------------------------------------------------------ detector -- */

static void put_label(char *out, size_t len, const char *key, const char *const *vars) {
  for (int i = 0; vars[i] != NULL; i++) {
    const char *v = getenv(vars[i]);
    if (v == NULL || v[0] == 0) continue;
    size_t o = strlen(out);
    int n = snprintf(out + o, len - o, "%s=\"", key);
    if (n < 0 || (size_t)n >= len - o) return;
    o += (size_t)n;
    for (const char *c = v; *c && o + 4 < len && c - v < 64; c++) {
      if (*c == '"' || *c == '\\') out[o++] = '\\';
      out[o++] = *c == '\n' ? ' ' : *c;
    }
    if (o + 3 > len) return;
    out[o++] = '"';
    out[o++] = ',';
    out[o] = 0;
    return;
  }
}

void gdr_connstat_labels(char *out, size_t len) {
  static const char *const rank[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
  static const char *const local[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                      NULL};
  static const char *const job[] = {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID",     "PBS_JOBID", "LSB_JOBID",
                                    "JOB_ID",       "OMPI_MCA_ess_base_jobid", NULL};
  if (len == 0) return;
  out[0] = 0;
  put_label(out, len, "rank", rank);
  put_label(out, len, "local_rank", local);
  put_label(out, len, "job", job);
}

/* "this process (host h, pid p, rank r)" for the WARN line. */
static void self_name(char *out, size_t len) {
  char host[128] = "?", lab[256];
  if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "?");
  host[sizeof(host) - 1] = 0;
  gdr_connstat_labels(lab, sizeof(lab));
  const char *r = strstr(lab, "rank=\"");
  if (r != NULL && (r == lab || r[-1] == ',')) {
    char rank[72] = "";
    const char *e = strchr(r + 6, '"');
    snprintf(rank, sizeof(rank), "%.*s", e != NULL ? (int)(e - r - 6) : 0, r + 6);
    snprintf(out, len, "host %s, pid %d, rank %s", host, (int)getpid(), rank);
  } else {
    snprintf(out, len, "host %s, pid %d", host, (int)getpid());
  }
}

/* What is known about why it waits, from the transport's description and which side waits. */
static void known_facts(const struct gdr_connstat *cs, const struct measure *m, char *out, size_t len) {
  const struct gdr_conn_desc *d = &cs->desc;
  size_t o = 0;
#define ADD(...)                                                                                                       \
  do {                                                                                                                 \
    if (o < len) {                                                                                                     \
      int n_ = snprintf(out + o, len - o, __VA_ARGS__);                                                                \
      if (n_ > 0) o += (size_t)n_;                                                                                     \
    }                                                                                                                  \
  } while (0)
  out[0] = 0;
  if (cs->have_desc && d->state == GDR_CONN_FAILED) ADD("the connection failed (test() returns the error); ");
  if (cs->have_desc && d->state == GDR_CONN_RECOVERING)
    ADD("the connection is recovering (new QPs, then a replay): it waits for that, not for a silent peer; ");
  if (cs->have_desc && d->state == GDR_CONN_MOVED_TCP) ADD("the connection moved to TCP; ");
  if (cs->have_desc && d->note[0]) ADD("%s; ", d->note);
  if (cs->have_desc && d->peer_closed)
    ADD("the peer's socket is closed (the peer process ended or reset it); ");
  else if (cs->have_desc && d->peer_silent_ms >= 0 && d->state != GDR_CONN_RECOVERING)
    ADD("the peer's socket is open but silent for %.1f s; ", (double)d->peer_silent_ms / 1e3);
  if (cs->have_desc && d->unsent > 0)
    ADD("%lld bytes queued to the peer are not taken (it does not read: stopped, hung or busy); ",
        (long long)d->unsent);
  if (cs->have_desc && d->state == GDR_CONN_RECOVERING)
    ADD("both sides wait for the recovery (bounded by GDRNET_RECOVERY_TIMEOUT_MS)");
  else if (cs->fifo)
    ADD("this side (initiator) has no completion of its one-sided operation on the QP: the peer's NIC has not "
        "acknowledged it (the peer needs no call for it: a stopped or hung peer process does not explain this on "
        "a real NIC; a port, link or fabric problem does)");
  else if (!cs->send)
    ADD("this side (receiver) waits for the peer's data");
  else if (m->refused)
    ADD("this side (sender) waits for the peer to post the matching receive (no clear-to-send yet)");
  else if (cs->have_desc && d->state == GDR_CONN_RDMA)
    ADD("this side (sender) has no completion on its QPs: the peer's side has not acknowledged the data");
  else
    ADD("this side (sender) waits for the peer to take the data");
#undef ADD
}

/* "peer rank 3 at " where the peer's rank is known (the handle or HELLO carried it, or GIN's), else "" */
static const char *peer_rank_at(const struct gdr_connstat *cs, char *out, size_t len) {
  out[0] = 0;
  if (cs->have_desc && cs->desc.peer_rank >= 0) snprintf(out, len, "peer rank %d at ", cs->desc.peer_rank);
  return out;
}

static void warn_stall(struct gdr_connstat *cs, const struct measure *m, uint64_t now) {
  char self[256], facts[768], tag[32] = "";
  const struct gdr_conn_desc *d = &cs->desc;
  char prank[32];
  if (!cs->fifo) snprintf(tag, sizeof(tag), ", tag %d", m->tag); /* a one-sided operation has none */
  (void)peer_rank_at(cs, prank, sizeof(prank));
  self_name(self, sizeof(self));
  known_facts(cs, m, facts, sizeof(facts));
  const char *state = cs->have_desc ? gdr_conn_state_str(d->state) : "unknown";
  const int same = strcmp(state, cs->tp->name) == 0;
  GDR_WARN("stall: %s connection of this process (%s) %s %s%s over %s%s%s (%s): no progress for %.1f s; oldest "
           "waiting: %s of %llu bytes%s, for %.1f s; %lld request(s) in flight; %s. Reported, not an error: "
           "NCCL's own timeout decides (docs/recovery.md, \"Diagnosing a hang\"; gdrnet-top)",
           dir_word(cs), self, cs->send ? "to" : "from", prank, cs->have_desc && d->peer[0] ? d->peer : "?",
           cs->tp->name, same ? "" : ", ", same ? "" : state, cs->have_desc && d->path[0] ? d->path : "no detail",
           secs(now, cs->stall_since_ns),
           cs->fifo     ? gdr_connstat_op_str(m->tag)
           : m->refused ? "isend (not accepted yet)"
           : cs->send   ? "isend"
                        : "irecv",
           (unsigned long long)m->size, tag, secs(now, m->since), (long long)m->inflight, facts);
}

/* Bytes moving count as progress where the transport counts them as they go (a long message on a slow link is not
 * a stall): 1 if its count changed since the last look (under g_mu). */
static int bytes_moved(struct gdr_connstat *cs, uint64_t now) {
  if (cs->tp->moved == NULL) return 0;
  const uint64_t v = cs->tp->moved(cs->tcomm);
  if (v == cs->moved_seen) return 0;
  cs->moved_seen = v;
  cs->moved_ns = now;
  return 1;
}

/* The WARN that ends a WARNed stall: progress came again, at the last completion if there was one since the stall
 * began, else by now (bytes moved). Caller holds g_mu. */
static void report_resumed(struct gdr_connstat *cs, uint64_t last, uint64_t now) {
  const uint64_t end = last > cs->stall_since_ns ? last : now;
  char rk[32];
  GDR_WARN("stall: %s connection %s %s%s (%s) resumed after %.1f s", dir_word(cs), cs->send ? "to" : "from",
           peer_rank_at(cs, rk, sizeof(rk)), cs->have_desc ? cs->desc.peer : "?", cs->tp->name,
           secs(end, cs->stall_since_ns));
}

/* Caller holds g_mu. Returns 1 if the connection's stall state changed. */
static int check_one(struct gdr_connstat *cs, uint64_t now, uint64_t warn_ns) {
  struct measure m;
  measure(cs, &m);
  const uint64_t last = atomic_load_explicit(&cs->last_done_ns, memory_order_acquire);
  const int moving = bytes_moved(cs, now) && m.since != 0; /* looked at every tick: moved_ns stays fresh */
  if (cs->stalled) {
    if (m.since != 0 && last <= cs->stall_since_ns && !moving) return 0;
    if (cs->stall_warned_ns != 0) report_resumed(cs, last, now);
    cs->stalled = 0;
    cs->stall_warned_ns = 0;
    return 1;
  }
  if (m.since == 0) return 0;
  uint64_t ref = last > m.since ? last : m.since;
  if (ref < cs->moved_ns) ref = cs->moved_ns;
  if (ref < g_thawed_ns) ref = g_thawed_ns;
  if (now < ref || now - ref < warn_ns) return 0;
  cs->stalled = 1;
  cs->stall_since_ns = ref;
  cs->stalls++;
  describe_locked(cs);
  if (cs->last_warn_ns == 0 || now - cs->last_warn_ns >= (uint64_t)GDR_CONNSTAT_REWARN_S * 1000000000ull) {
    warn_stall(cs, &m, now);
    cs->last_warn_ns = now;
    cs->stall_warned_ns = now;
  }
  return 1;
}

int gdr_connstat_check(uint64_t now_ns, long long ms) {
  int stalled = 0, changed = 0;
  if (ms <= 0) return 0;
  pthread_mutex_lock(&g_mu);
  for (struct gdr_connstat *cs = g_list; cs != NULL; cs = cs->next) {
    changed |= check_one(cs, now_ns, (uint64_t)ms * 1000000ull);
    stalled += cs->stalled;
  }
  void (*tell)(void) = g_on_change;
  pthread_mutex_unlock(&g_mu);
  if (changed && tell != NULL) tell(); /* the stats file shows it now, not at the next interval */
  return stalled;
}

static void *detector_main(void *arg) {
  struct detector *d = arg;
  long long ms = gdr_param_int(GDR_PARAM_STALL_WARN_MS);
  long long tick = ms / 4 < 10 ? 10 : ms / 4 > 1000 ? 1000 : ms / 4;
  uint64_t prev = gdr_connstat_now_ns();
  pthread_mutex_lock(&g_mu);
  while (!d->stop) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += (long)(tick % 1000) * 1000000L;
    dl.tv_sec += (time_t)(tick / 1000) + dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    while (!d->stop) {
      if (pthread_cond_timedwait(&g_cv, &g_mu, &dl) == ETIMEDOUT) break;
    }
    if (d->stop) break;
    /* A tick much later than asked: this process itself did not run (SIGSTOP, a debugger, starved), and its peers
     * are not to blame for that time. */
    const uint64_t now = gdr_connstat_now_ns();
    if (now - prev > (uint64_t)(tick + ms / 2) * 1000000ull) g_thawed_ns = now;
    prev = now;
    pthread_mutex_unlock(&g_mu);
    (void)gdr_connstat_check(now, ms);
    pthread_mutex_lock(&g_mu);
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}
