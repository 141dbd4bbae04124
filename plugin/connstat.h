/* Per-connection state, and the stall detector over it.
 *
 * Every send/recv comm NCCL drives gets a struct gdr_connstat on its first isend/irecv (core_p2p.c), released when
 * the comm closes (before the transport's close). The data path writes it, the detector thread and the stats writer
 * read it:
 *   - written only by the thread that drives the comm (NCCL drives one comm from one thread at a time): every field
 *     is a relaxed atomic, updated with a plain load and store (no locked instruction on the data path);
 *   - an in-flight request is one slot per index of the comm's request pool: its start time is stored last (release)
 *     and cleared at completion; a reader takes t0 (acquire), then size and tag, then t0 again, and drops a slot
 *     whose t0 changed under it (a seqlock of one word);
 *   - the registry (a list under one mutex) is touched only at a comm's first data call and at its close.
 *
 * The detector (one thread, "gdr-stall", started with the first connection of the process, joined when the last one
 * closes) looks at every connection each tick. A connection is stalled when something waits on it (a request in
 * flight, or an isend the transport has kept refusing) and it has made no progress (no completion) for
 * GDRNET_STALL_WARN_MS. Then it logs one WARN naming this side, the peer, the transport and its QPs or streams, the
 * oldest waiting request (size, tag, age) and what the transport knows (describe, transport.h: recovering, moved to
 * TCP, the peer's socket open but silent), and one more line when it resumes. At most one WARN per
 * GDR_CONNSTAT_REWARN_S per connection. A stall is never an error: NCCL's own timeouts decide. */
#ifndef GDRNET_CONNSTAT_H
#define GDRNET_CONNSTAT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "transport.h"

#define GDR_CONNSTAT_HIST 40     /* latency buckets: bucket i counts latencies in [2^(i-1), 2^i) ns (i = 0: < 1 ns) */
#define GDR_CONNSTAT_REWARN_S 60 /* one stall WARN per connection at most this often */

struct gdr_connstat_slot {
  _Atomic uint64_t t0; /* monotonic ns when the transport accepted it; 0: free */
  _Atomic uint64_t size;
  _Atomic int32_t tag;
};

struct gdr_connstat {
  /* set at open, read-only after */
  uint64_t id; /* process-wide connection number, from 1 */
  int send;    /* 1 a send comm, 0 a receive comm */
  int dev;     /* NCCL's device */
  const struct gdr_transport *tp;
  void *tcomm;
  int nslots;
  struct gdr_connstat_slot *slots; /* one per request index of the comm */
  /* the data path (one writer at a time); requests completed = the histogram's sum, in flight = the slots in use */
  _Atomic uint64_t bytes;        /* of the completed requests */
  _Atomic uint64_t last_done_ns; /* the last completion, or the open */
  _Atomic uint64_t lat_sum_ns;
  _Atomic uint64_t hist[GDR_CONNSTAT_HIST];
  _Atomic uint64_t refused_ns; /* isend refused ("try again") since, 0: the last one was accepted */
  _Atomic uint64_t refused_size;
  _Atomic int32_t refused_tag;
  /* a one-sided record (gdr_connstat_open_fifo): the operations in flight are counted here, slot 0 is the oldest */
  int fifo;
  _Atomic int64_t pending;
  /* its receives stand posted whether or not anything is expected (gdr_core_recv_standing): they are in flight,
   * not waiting (no stall) */
  _Atomic int standing;
  /* the detector's and the writer's (under the registry lock) */
  struct gdr_conn_desc desc; /* the transport's last description */
  int have_desc;
  int stalled;
  uint64_t stall_since_ns, stall_warned_ns, last_warn_ns, stalls;
  uint64_t moved_seen, moved_ns; /* the transport's moved count at the last look, and when it last changed */
  struct gdr_connstat *next;
};

/* The data path's clock: CLOCK_MONOTONIC in ns. Where the kernel keeps time with the TSC (its clocksource is "tsc":
 * invariant and synchronised across CPUs, the kernel checked), it reads the TSC and scales it (rdtsc, a subtraction,
 * one multiply) instead of clock_gettime (a libc call into the vDSO, its sequence lock, the same rdtsc and the
 * kernel's scaling): scaled against CLOCK_MONOTONIC once, at the first connection of the process
 * (gdr_connstat_open), so both agree within microseconds. Elsewhere, or before that, clock_gettime. */
struct gdr_cs_clock {
  _Atomic uint64_t tsc0, ns0, mult; /* ns = ns0 + (tsc - tsc0) * mult / 2^32 */
  _Atomic int ok;                   /* set last (release) */
};
extern struct gdr_cs_clock gdr_cs_clock; /* connstat.c: written once (pthread_once), read by every data path */

static inline uint64_t gdr_connstat_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t gdr_connstat_now_ns(void) {
#if defined(__x86_64__)
  if (__builtin_expect(atomic_load_explicit(&gdr_cs_clock.ok, memory_order_acquire), 1)) {
    const uint64_t d = __builtin_ia32_rdtsc() - atomic_load_explicit(&gdr_cs_clock.tsc0, memory_order_relaxed);
    return atomic_load_explicit(&gdr_cs_clock.ns0, memory_order_relaxed) +
           (uint64_t)(((unsigned __int128)d * atomic_load_explicit(&gdr_cs_clock.mult, memory_order_relaxed)) >> 32);
  }
#endif
  return gdr_connstat_clock_ns();
}
/* Whether gdr_connstat_now_ns reads the TSC (for tests and the INFO line). */
int gdr_connstat_clock_is_tsc(void);

static inline void gdr_cs_bump(_Atomic uint64_t *a, uint64_t d) {
  atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + d, memory_order_relaxed);
}

/* A completed request's bytes and latency, in the log2 histogram (the writer's side). */
static inline void gdr_cs_count_done(struct gdr_connstat *cs, uint64_t bytes, uint64_t lat) {
  int b = lat == 0 ? 0 : 64 - __builtin_clzll(lat);
  if (b >= GDR_CONNSTAT_HIST) b = GDR_CONNSTAT_HIST - 1;
  gdr_cs_bump(&cs->bytes, bytes);
  gdr_cs_bump(&cs->lat_sum_ns, lat);
  gdr_cs_bump(&cs->hist[b], 1);
}

/* A request the transport accepted, at pool index idx. */
static inline void gdr_connstat_posted(struct gdr_connstat *cs, int idx, size_t size, int tag) {
  if (cs == NULL || (unsigned)idx >= (unsigned)cs->nslots) return;
  struct gdr_connstat_slot *s = &cs->slots[idx];
  atomic_store_explicit(&s->size, size, memory_order_relaxed);
  atomic_store_explicit(&s->tag, tag, memory_order_relaxed);
  atomic_store_explicit(&s->t0, gdr_connstat_now_ns(), memory_order_release);
  if (atomic_load_explicit(&cs->refused_ns, memory_order_relaxed) != 0)
    atomic_store_explicit(&cs->refused_ns, 0, memory_order_relaxed);
}

/* An isend the transport refused for now (no request): the first of a run is remembered. */
static inline void gdr_connstat_refused(struct gdr_connstat *cs, size_t size, int tag) {
  if (cs == NULL || atomic_load_explicit(&cs->refused_ns, memory_order_relaxed) != 0) return;
  atomic_store_explicit(&cs->refused_size, size, memory_order_relaxed);
  atomic_store_explicit(&cs->refused_tag, tag, memory_order_relaxed);
  atomic_store_explicit(&cs->refused_ns, gdr_connstat_now_ns(), memory_order_release);
}

/* The request at idx is over: done (bytes moved) or failed (ok = 0). */
static inline void gdr_connstat_done(struct gdr_connstat *cs, int idx, uint64_t bytes, int ok) {
  if (cs == NULL || (unsigned)idx >= (unsigned)cs->nslots) return;
  struct gdr_connstat_slot *s = &cs->slots[idx];
  const uint64_t t0 = atomic_load_explicit(&s->t0, memory_order_relaxed);
  if (t0 == 0) return;
  const uint64_t now = gdr_connstat_now_ns();
  atomic_store_explicit(&s->t0, 0, memory_order_release);
  if (ok) gdr_cs_count_done(cs, bytes, now > t0 ? now - t0 : 0);
  atomic_store_explicit(&cs->last_done_ns, now, memory_order_release);
}

/* A one-sided peer (GIN's RDMA path, gin/rdma_os.c): its operations complete in issue order per peer (one RC QP, a
 * list in issue order), so the record keeps a count and one slot, the oldest: an operation issued at t0 (its
 * owner keeps t0, size and tag, the oldest's are in slot 0); left: the oldest one is over (done or handed to another
 * path), next_t0/next_size/next_tag the new oldest (next_t0 0: none). Under the owner's lock, as the p2p calls. */
static inline void gdr_connstat_os_issued(struct gdr_connstat *cs, uint64_t t0, size_t size, int tag) {
  const int64_t n = atomic_load_explicit(&cs->pending, memory_order_relaxed);
  atomic_store_explicit(&cs->pending, n + 1, memory_order_relaxed);
  if (n == 0) {
    atomic_store_explicit(&cs->slots[0].size, size, memory_order_relaxed);
    atomic_store_explicit(&cs->slots[0].tag, tag, memory_order_relaxed);
    atomic_store_explicit(&cs->slots[0].t0, t0, memory_order_release);
  }
}

static inline void gdr_connstat_os_left(struct gdr_connstat *cs, uint64_t t0, uint64_t bytes, int ok, uint64_t next_t0,
                                        size_t next_size, int next_tag) {
  const uint64_t now = gdr_connstat_now_ns();
  const int64_t n = atomic_load_explicit(&cs->pending, memory_order_relaxed);
  atomic_store_explicit(&cs->pending, n > 0 ? n - 1 : 0, memory_order_relaxed);
  atomic_store_explicit(&cs->slots[0].t0, 0, memory_order_release);
  if (next_t0 != 0) {
    atomic_store_explicit(&cs->slots[0].size, next_size, memory_order_relaxed);
    atomic_store_explicit(&cs->slots[0].tag, next_tag, memory_order_relaxed);
    atomic_store_explicit(&cs->slots[0].t0, next_t0, memory_order_release);
  }
  if (ok && t0 != 0) gdr_cs_count_done(cs, bytes, now > t0 ? now - t0 : 0);
  atomic_store_explicit(&cs->last_done_ns, now, memory_order_release);
}

/* Every operation of a one-sided record forgotten (its peer left: they failed). */
static inline void gdr_connstat_os_clear(struct gdr_connstat *cs) {
  atomic_store_explicit(&cs->pending, 0, memory_order_relaxed);
  atomic_store_explicit(&cs->slots[0].t0, 0, memory_order_release);
  atomic_store_explicit(&cs->last_done_ns, gdr_connstat_now_ns(), memory_order_release);
}

/* Registry: a comm's state on its first data call, released at its close (any thread but the detector; the comm's
 * data path has ended). NULL (the comm is not tracked, its data path pays one branch per call) when out of memory,
 * or when nothing would read it: GDRNET_STALL_WARN_MS=0 and no stats file. */
struct gdr_connstat *gdr_connstat_open(const struct gdr_transport *tp, void *tcomm, int send, int dev, int nslots);
void gdr_connstat_close(struct gdr_connstat *cs);
/* A one-sided peer's record (above): tp names it ("rdma-gin") and describes tcomm; dev: NCCL's device. NULL as
 * gdr_connstat_open. Its tags are GDR_CS_OP_* (the WARN and the stats file name the operation). */
struct gdr_connstat *gdr_connstat_open_fifo(const struct gdr_transport *tp, void *tcomm, int dev);
enum { GDR_CS_OP_PUT = 1, GDR_CS_OP_GET = 2, GDR_CS_OP_FLUSH = 3, GDR_CS_OP_SIGNAL = 4 /* or'ed into a put */ };
/* "put", "put+signal", "get", "flush" for a one-sided record's tag */
const char *gdr_connstat_op_str(int tag);

/* A copy of one connection, for the stats file, gdrnet-top and tests. */
struct gdr_conn_snap {
  uint64_t id;
  int send, dev;
  int onesided;          /* a one-sided peer (GIN): oldest_tag is GDR_CS_OP_* */
  const char *transport; /* the transport's name (static) */
  struct gdr_conn_desc desc;
  int have_desc;
  int64_t inflight;
  int waiting;         /* something waits: a request in flight, or a refused isend */
  int oldest_refused;  /* the oldest waiting one is an isend not accepted yet */
  double oldest_age_s; /* its age, 0 when nothing waits */
  uint64_t oldest_size;
  int oldest_tag;
  double idle_s; /* since the last completion (since the open when none) */
  uint64_t requests, bytes;
  double lat_sum_s;
  uint64_t hist[GDR_CONNSTAT_HIST];
  double p50_s, p99_s; /* upper bounds of the histogram's buckets; 0 without completions */
  int stalled;
  uint64_t stalls;
};
/* Up to max connections into out (refreshing their descriptions); returns how many exist (may exceed max). */
int gdr_connstat_snapshot(struct gdr_conn_snap *out, int max);
/* The last (up to 16) connections closed, oldest first, as they were at their close; returns how many. */
int gdr_connstat_closed(struct gdr_conn_snap *out, int max);
/* fn (or NULL) is called, outside every lock of this module, when a connection's stall starts or ends: the stats
 * writer registers its poke, so that this module calls nothing of it by name. */
void gdr_connstat_on_change(void (*fn)(void));
/* Connections tracked now. */
int gdr_connstat_count(void);
/* "send"/"recv" state word for a desc state (GDR_CONN_*). */
const char *gdr_conn_state_str(int state);
/* Quantile q (0..1) of a latency histogram, in seconds (a bucket's upper bound); 0 when empty. */
double gdr_connstat_quantile(const uint64_t *hist, double q);

/* Socket facts for a transport's describe: whether the peer closed it or it failed, and how long since its last
 * bytes (TCP_INFO), into d (peer_closed, peer_silent_ms, unsent). Never blocks. */
void gdr_connstat_sock_facts(int fd, struct gdr_conn_desc *d);

/* The detector: one pass over every connection at time now with a threshold of warn_ms (the thread calls it each
 * tick with GDRNET_STALL_WARN_MS; tests call it directly). Returns the connections stalled after it. */
int gdr_connstat_check(uint64_t now_ns, long long warn_ms);

/* This process's launcher labels for the stats file: rank, local_rank, job (from RANK/LOCAL_RANK,
 * OMPI_COMM_WORLD_RANK, SLURM_PROCID, SLURM_JOB_ID, TORCHELASTIC_RUN_ID, ...), each `key="value",` (escaped), into
 * out; "" when none is known. */
void gdr_connstat_labels(char *out, size_t len);

#endif /* GDRNET_CONNSTAT_H */
