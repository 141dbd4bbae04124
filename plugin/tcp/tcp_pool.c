/* TCP transport: the per-process pool of I/O threads that move the data streams' bytes.
 *
 * Before it, every connection had nthreads send or receive helper threads of its own, each blocking in send()/recv()
 * on its streams (4 + 4 per connection pair by default: 32 threads for two ranks of a 2-channel ring, more threads
 * than cores at 8 ranks per host). Now a process has P I/O threads ("gdr-tcp-io/N"), P from GDRNET_TCP_IO_THREADS
 * (auto: the cores this rank may use, shared with the host's other ranks, minus NCCL's own busy threads; see
 * gdr_tcp_pool_size), started with the first TCP comm and joined when the last one closes. Each serves, through one
 * epoll set, the data streams of many comms, all non-blocking:
 *   - a send comm's lanes (struct tcp_thread: the tasks queue_chunks pushes, their chunks written in the rotation
 *     over the lane's streams that older receivers expect) are spread over the threads, the least loaded first;
 *     the progress thread pushes a task and kicks the lane (gdr_tcp_lane_kick): the lane goes on its thread's ready
 *     list, and the thread is woken through an eventfd only when it sleeps. A lane writes until its socket is full
 *     (EAGAIN), then waits for EPOLLOUT (edge-triggered: an idle lane's socket raises nothing);
 *   - a receive comm's streams are spread likewise; each is a small state machine (header, then the payload straight
 *     into the posted buffer at its offset), read on EPOLLIN until EAGAIN; a payload read also asks for the next
 *     chunk's header in the same recvmsg (one system call per chunk, not two). Streams are independent: a chunk may
 *     come on any stream in any order (its header names the message and the offset);
 *   - a thread that made progress keeps polling (epoll_wait with no timeout, then sched_yield) for GDRNET_TCP_SPIN_US,
 *     or GDRNET_TCP_SPIN_MAX_US while one of its comms expects traffic (rx_expect/tx_expect, as the helpers did),
 *     then sleeps in epoll_wait: an idle process's I/O threads use no CPU. It polls only while it holds one of the
 *     process's GDRNET_TCP_SPIN_THREADS tokens (auto 1), else it sleeps at once and the kernel wakes it for its
 *     streams: with every thread polling, 2 ranks on 16 cores spent 5.8 cores per process in the pool where the
 *     copies needed 2.8 (docs/archive/PERFORMANCE-log.md section 10);
 *   - with GDRNET_TCP_PROGRESS adaptive (polling on, GDRNET_TCP_SPIN_US > 0) a thread polls only while a comm it
 *     serves has a request outstanding on its streams (io_outstanding: a receive whose clear-to-send went out, a
 *     clear-to-send not used, a lane with chunks) AND its progress comes faster than its window (the longer of the two
 *     spins: no progress for a window, or a moving average of the gaps between its progress of a window or more,
 *     ends it); else it sleeps at once, so an idle comm costs no polling tail. The tokens (auto: the rank's cores less NCCL's
 *     two busy threads) thus go to the threads that have work, whichever they are, and a thread gives its token back as soon as its work is
 *     done. Sleeping is always safe: the streams are in the epoll set edge-triggered, so bytes that land after the
 *     thread's last read raise an event even when it arrives between the decision to sleep and epoll_wait, and a
 *     kick that does not see `sleeping` is seen in has_ready before the thread sleeps.
 * One fairness bound: a lane or stream moves at most TCP_IO_BUDGET bytes per turn, then the thread serves the others
 * before coming back to it. What sleeping costs here is measured: a kick of a sleeping thread starts a clock that the
 * thread reads when it runs (wake_sleeper, io_thread), into a histogram logged at the pool's stop.
 *
 * Where the rank has fewer than 8 cores, NCCL's two busy threads (its proxy and the application's) share them with
 * the I/O threads, and the kernel's scheduler gives a core per runnable thread: the pool is then 16 blocking threads
 * (no polling). NCCL's proxy thread helps (GDRNET_TCP_PROXY_IO, on by default): a test() whose request waits for
 * chunks runs one bounded pass of the I/O threads serving its comm (gdr_tcp_pool_help: only a thread not at work, by
 * trylock of its io->mu; the kicked lanes, TCP_HELP_TURNS of the again list and of epoll's events,
 * GDRNET_TCP_HELP_BYTES per lane or stream), then wakes the thread for what it left. Where the threads poll, the one
 * with the token is at work and is skipped: the passes serve the sleeping ones, whose wake-up can come late on a busy
 * host (docs/results/2026-12-07, run 25), in smaller passes (128 KiB) so that NCCL's next steps wait less.
 * docs/archive/PERFORMANCE-log.md section 9 has the measurements where cores are shared.
 *
 * Locking: everything an I/O thread does to a comm happens under its io->mu, which it drops only around epoll_wait.
 * Detach (close) takes io->mu, removes the comm's fds from the epoll set and frees their slots (the generation in
 * each epoll event's data makes an event fetched before the removal harmless): once it returns, no I/O thread
 * touches the comm. Lane kicks take only io->rmu (short), never io->mu, so the progress thread never waits for an
 * I/O thread's batch. Order: lane->mu, then io->rmu; io->mu before either.
 *
 * Fork: a child has none of the parent's threads, and the epoll sets it inherits are the parent's own (an epoll_ctl
 * there would change what the parent's threads watch). The child handler forgets the pool (the child's copies of its
 * fds closed) and starts a new fork generation: the child's first comm starts a pool of its own, and a comm of an
 * older generation (the parent's, gdr_tcp_comm_inherited) is never served, kicked or helped here; its close only
 * forgets it, leaving the pool's counts and every epoll set alone.
 *
 * Unload: the running pool pins the library (gdr_core_pin, transport.h) from before its first thread starts until its
 * last is joined, so a dlclose with comms still open cannot unmap the code its threads run. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "tcp.h"

#define TCP_IO_MAX 64
#define TCP_IO_BUDGET (4u << 20) /* bytes per lane or stream per turn */
#define TCP_IO_EVENTS 64
#define TCP_HELP_TURNS 4    /* a help pass (gdr_tcp_pool_help): turns from the again list, and from epoll */
#define TCP_WAKE_BUCKETS 96 /* wake-up latency histogram: below 256 ns, then 4 an octave up to 2^31 ns (2.1 s) */

enum { SLOT_FREE = 0, SLOT_LANE, SLOT_STREAM, SLOT_AGAIN };

struct tcp_slot {
  int kind;
  int in_again; /* on io->again */
  uint32_t gen;
  struct tcp_thread *lane;
  struct tcp_stream *st;
};

struct tcp_io {
  int idx;
  int started;
  pthread_t tid;
  int ep, evfd;
  int load; /* lanes + streams attached (under g_pool.mu) */
  pthread_mutex_t mu;
  struct tcp_slot *slots; /* under mu */
  int nslots, cap;
  int stop; /* under mu */
  /* again: slots whose turn ended on the budget, served again before the next sleep (under mu; room for every slot) */
  int *again;
  int nagain;
  /* lanes with new tasks (under rmu) */
  pthread_mutex_t rmu;
  struct tcp_thread *ready;
  _Atomic int has_ready;
  _Atomic int sleeping;     /* in a blocking epoll_wait: a kick must write evfd */
  _Atomic int entered;      /* the thread runs io_thread (tests: past its start-up, see gdr_tcp_pool_entered) */
  _Atomic uint64_t kick_ns; /* when the first kick of its current sleep came (0: none yet; wake_sleeper, wake_done) */
  uint64_t spin_ns, spin_max_ns;
  uint64_t gap_ns;    /* adaptive: moving average of the time between its progress (the thread's own) */
  uint64_t last_prog; /* adaptive: when it last made progress (the thread's own) */
  size_t budget;      /* bytes per lane or stream per turn (under mu): TCP_IO_BUDGET, or the help pass's */
};

static struct {
  pthread_mutex_t mu;
  int users; /* attached comms */
  int n;     /* threads of the running pool */
  /* Polling tokens: a thread polls (epoll_wait without a timeout) only while it holds one; spin_cap is set before
   * the threads start (GDRNET_TCP_SPIN_THREADS) */
  int spin_cap;
  int adaptive; /* GDRNET_TCP_PROGRESS adaptive (set before the threads start) */
  int share;    /* GDRNET_TCP_SPIN_SHARE: a polling thread serves the sleeping threads' work too (set before start) */
  size_t help_budget; /* GDRNET_TCP_HELP_BYTES: a help pass's bytes per lane or stream (set before start) */
  _Atomic int nrun;   /* threads a sharing poller may serve: all of them once started, 0 while starting or stopping */
  _Atomic int spinners;
  _Atomic int spin_peak; /* the most held at once (tests) */
  _Atomic unsigned gen;  /* fork generation: +1 in each child (the comms attached before are the parent's) */
  int pinned;            /* holds a gdr_core_pin: from pool_start until pool_stop joined the threads (inherited by a
                          * fork child with the loader's reference it stands for) */
  /* why polling threads gave their token back (tests, traces): TCP_POLL_* */
  _Atomic uint64_t stops[4];
  /* wake-ups by a kick: a log histogram of their latency (wake_bucket), and the longest (gdr_tcp_pool_wake_stats) */
  _Atomic uint64_t wake_hist[TCP_WAKE_BUCKETS];
  _Atomic uint64_t wake_max;
  /* the host's steal and total CPU time when the pool started (steal_read; steal_ok 0: not readable) */
  uint64_t steal0[2];
  int steal_ok;
  /* the host's steal at run time (steal_tick): the next window's end (0: not tracked), whether it steals now, and the
   * window counts; the last reading and the state machine under steal_mu (one reader at a time, by trylock) */
  _Atomic uint64_t steal_next;
  _Atomic int stealing;
  _Atomic uint64_t steal_windows, steal_windows_on;
  uint64_t steal_window_ns;
  size_t steal_chunk; /* gdr_tcp_resolve_steal_chunk() at the start: the chunks while it steals (0: unchanged) */
  pthread_mutex_t steal_mu;
  uint64_t steal_last[2];
  struct gdr_tcp_steal_state steal;
  /* late wake-ups (gdr_tcp_pool_wakes_late): later than late_ns (GDRNET_TCP_HELP_AFTER_US; 0: not tracked, set before
   * the threads start), their moving share (1/65536), whether that is late now, the count and the periods */
  uint64_t late_ns;
  _Atomic uint32_t late_frac;
  _Atomic int late;
  _Atomic uint64_t late_n, late_periods;
  struct tcp_io io[TCP_IO_MAX];
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .steal_mu = PTHREAD_MUTEX_INITIALIZER};

/* Tests (gdr_tcp_pool_set_steal_source): what the pool reads for the host's steal, set while no pool runs */
static char g_steal_path[256] = "/proc/stat";
static uint64_t g_steal_window_ns;

/* ------------------------------------------------------------------------------------------- counters -- */

int gdr_tcp_pool_running(void) {
  int n;
  pthread_mutex_lock(&g_pool.mu);
  n = g_pool.n;
  pthread_mutex_unlock(&g_pool.mu);
  return n;
}

int gdr_tcp_pool_spin_peak(void) { return atomic_load(&g_pool.spin_peak); }

int gdr_tcp_pool_io_of(const struct tcp_comm *c, int i) {
  const struct tcp_io *io = NULL;
  if (c->is_send && i >= 0 && i < c->nthreads) io = c->threads[i].io;
  if (!c->is_send && c->streams != NULL && i >= 0 && i < c->nsocks) io = c->streams[i].io;
  return io ? io->idx : -1;
}

int gdr_tcp_pool_spinning(void) { return atomic_load(&g_pool.spinners); }

uint64_t gdr_tcp_pool_stops(int why) {
  return why >= 0 && why < 4 ? atomic_load_explicit(&g_pool.stops[why], memory_order_relaxed) : 0;
}

/* The histogram's bucket of a latency: 0 below 256 ns, then 4 buckets per power of two. */
static int wake_bucket(uint64_t ns) {
  int e, b;
  if (ns < 256) return 0;
  e = 63 - __builtin_clzll(ns);
  b = 1 + (e - 8) * 4 + (int)((ns >> (e - 2)) & 3u);
  return b < TCP_WAKE_BUCKETS ? b : TCP_WAKE_BUCKETS - 1;
}

/* The lowest latency of bucket b. */
static uint64_t wake_bucket_lo(int b) {
  const int e = (b - 1) / 4 + 8;
  return b == 0 ? 0 : (1ull << e) + ((uint64_t)((b - 1) % 4) << (e - 2));
}

/* One more wake-up of ns: the moving share of late ones, and the switch between in time and late (hysteresis). The
 * first switch to late is a TRACE line (an INFO line from an I/O thread, in the middle of a run, cut nccl-tests' result
 * row in two in run 27 s); the stop's INFO line counts the switches. */
static void late_note(uint64_t ns) {
  const int is_late = ns > g_pool.late_ns;
  uint32_t f = atomic_load_explicit(&g_pool.late_frac, memory_order_relaxed), nf;
  do {
    nf = f - f / TCP_LATE_WEIGHT + (is_late ? 65536u / TCP_LATE_WEIGHT : 0);
  } while (
      !atomic_compare_exchange_weak_explicit(&g_pool.late_frac, &f, nf, memory_order_relaxed, memory_order_relaxed));
  if (is_late) atomic_fetch_add_explicit(&g_pool.late_n, 1, memory_order_relaxed);
  if (nf >= TCP_LATE_ON && !atomic_load_explicit(&g_pool.late, memory_order_relaxed) &&
      atomic_exchange_explicit(&g_pool.late, 1, memory_order_relaxed) == 0 &&
      atomic_fetch_add_explicit(&g_pool.late_periods, 1, memory_order_relaxed) == 0)
    GDR_TRACE(NCCL_NET,
              "TCP: sleeping I/O threads wake up late (%u %% of the last ones after more than %llu us): NCCL's "
              "proxy thread helps at once while they do",
              (unsigned)((uint64_t)nf * 100u / 65536u), (unsigned long long)(g_pool.late_ns / 1000u));
  else if (nf < TCP_LATE_OFF && atomic_load_explicit(&g_pool.late, memory_order_relaxed))
    atomic_store_explicit(&g_pool.late, 0, memory_order_relaxed);
}

static void wake_record(uint64_t ns) {
  uint64_t m = atomic_load_explicit(&g_pool.wake_max, memory_order_relaxed);
  atomic_fetch_add_explicit(&g_pool.wake_hist[wake_bucket(ns)], 1, memory_order_relaxed);
  while (ns > m &&
         !atomic_compare_exchange_weak_explicit(&g_pool.wake_max, &m, ns, memory_order_relaxed, memory_order_relaxed)) {
  }
  if (g_pool.late_ns > 0) late_note(ns);
}

void gdr_tcp_pool_wake_note(uint64_t ns) { wake_record(ns); }

int gdr_tcp_pool_wakes_late(void) { return atomic_load_explicit(&g_pool.late, memory_order_relaxed); }

void gdr_tcp_pool_late_stats(uint64_t *late, uint64_t *periods) {
  *late = atomic_load_explicit(&g_pool.late_n, memory_order_relaxed);
  *periods = atomic_load_explicit(&g_pool.late_periods, memory_order_relaxed);
}

void gdr_tcp_pool_wake_stats(struct gdr_tcp_wake_stats *w) {
  uint64_t h[TCP_WAKE_BUCKETS], n = 0, seen = 0;
  const double q[3] = {0.50, 0.90, 0.99};
  uint64_t *out[3] = {&w->p50_ns, &w->p90_ns, &w->p99_ns};
  int k = 0;
  for (int b = 0; b < TCP_WAKE_BUCKETS; b++)
    n += h[b] = atomic_load_explicit(&g_pool.wake_hist[b], memory_order_relaxed);
  w->n = n;
  w->max_ns = atomic_load_explicit(&g_pool.wake_max, memory_order_relaxed);
  w->p50_ns = w->p90_ns = w->p99_ns = 0;
  for (int b = 0; b < TCP_WAKE_BUCKETS && k < 3; b++) {
    seen += h[b];
    while (k < 3 && n > 0 && (double)seen >= q[k] * (double)n) {
      /* the middle of the bucket (its lowest and the next one's), never above the longest seen */
      const uint64_t lo = wake_bucket_lo(b), mid = lo + (wake_bucket_lo(b + 1) - lo) / 2;
      *out[k++] = mid < w->max_ns ? mid : w->max_ns;
    }
  }
}

static void (*_Atomic g_sleep_hook)(int idx, int why); /* tests only: see gdr_tcp_pool_set_sleep_hook */

void gdr_tcp_pool_set_sleep_hook(void (*hook)(int idx, int why)) { atomic_store(&g_sleep_hook, hook); }

int gdr_tcp_pool_entered(void) {
  int n = 0;
  pthread_mutex_lock(&g_pool.mu);
  for (int i = 0; i < g_pool.n; i++) n += atomic_load(&g_pool.io[i].entered);
  pthread_mutex_unlock(&g_pool.mu);
  return n;
}

/* ------------------------------------------------------------------------------------------ the threads -- */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Its room is reserved with the slots (slot_add): at most one entry per slot, so this never allocates. */
static void again_push(struct tcp_io *io, int slot) {
  if (io->slots[slot].in_again) return;
  io->slots[slot].in_again = 1;
  io->again[io->nagain++] = slot;
}

static void stream_drop(struct tcp_io *io, struct tcp_stream *st) {
  st->dead = 1;
  (void)epoll_ctl(io->ep, EPOLL_CTL_DEL, st->fd, NULL); /* a dead stream's fd stays open until close */
}

/* The next chunk's header is complete in st->h: checks it against the posted receive, and takes its bytes on. 0 ok.
 * A receive takes its message one way only, and its chunks' bytes up to their total: a chunk for a message that
 * came inline or eager, or beyond the message's bytes (which could land after test() handed the buffer back), is a
 * protocol error. The slot is checked again after that: a chunk whose header passed a receive that completed
 * meanwhile (the slot then reset and armed again) is refused. */
static int stream_header(struct tcp_io *io, struct tcp_stream *st) {
  struct tcp_comm *c = st->comm;
  const struct tcp_chunk_hdr *h = &st->h;
  struct tcp_req *r = &c->req[h->seq % TCP_NREQ];
  const char *why = "does not fit the posted receive";
  if (h->magic != TCP_CHUNK_MAGIC || atomic_load_explicit(&r->armed, memory_order_acquire) != h->seq + 1 ||
      h->total > r->size || h->off > h->total || h->len > h->total - h->off)
    goto fail;
  why = "is for a message that came on the control stream, or of another size";
  if (!tcp_req_claim(r, (uint64_t)h->total + 1)) goto fail;
  why = "is beyond the message's bytes";
  if (atomic_fetch_add_explicit(&r->reserved, h->len, memory_order_acq_rel) + h->len > h->total) goto fail;
  why = "is for a receive that completed";
  if (atomic_load_explicit(&r->armed, memory_order_acquire) != h->seq + 1) goto fail;
  st->r = r;
  st->dst = r->data + h->off;
  st->left = h->len;
  st->hgot = 0;
  return 0;
fail:
  gdr_tcp_comm_fail(c, ncclRemoteError,
                    "protocol error on data stream %d: chunk magic 0x%x message %llu [%llu, +%u) of %llu bytes %s",
                    st->idx, h->magic, (unsigned long long)h->seq, (unsigned long long)h->off, h->len,
                    (unsigned long long)h->total, why);
  stream_drop(io, st);
  return -1;
}

static void chunk_landed(struct tcp_stream *st) {
  atomic_store_explicit(&st->r->total, (size_t)st->h.total, memory_order_relaxed);
  atomic_fetch_add_explicit(&st->r->done, st->h.len, memory_order_release);
  st->r = NULL;
}

/* Reads what a receiving stream has. 1: progress, 0: none; *more: the budget ended the turn. */
static int stream_progress(struct tcp_io *io, struct tcp_stream *st, int *more) {
  struct tcp_comm *c = st->comm;
  size_t moved = 0;
  int prog = 0;
  *more = 0;
  while (!st->dead) {
    struct tcp_chunk_hdr nh;
    struct iovec iov[2];
    struct msghdr mh;
    ssize_t n;
    if (moved >= io->budget) {
      *more = 1;
      break;
    }
    memset(&mh, 0, sizeof(mh));
    if (st->r == NULL) {
      iov[0].iov_base = (char *)&st->h + st->hgot;
      iov[0].iov_len = sizeof(st->h) - st->hgot;
      mh.msg_iovlen = 1;
    } else { /* the payload's rest, and the next header if it is there; at most the turn's budget (a help pass's
              * is small) */
      size_t room = io->budget - moved;
      iov[0].iov_base = st->dst;
      iov[0].iov_len = st->left < room ? st->left : room;
      iov[1].iov_base = &nh;
      iov[1].iov_len = sizeof(nh);
      mh.msg_iovlen = st->left <= room ? 2 : 1;
    }
    mh.msg_iov = iov;
    n = recvmsg(st->fd, &mh, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (!atomic_load(&c->stopping))
        gdr_tcp_comm_fail(c, ncclRemoteError, "receiving on data stream %d: %s", st->idx, strerror(errno));
      stream_drop(io, st);
      break;
    }
    if (n == 0) {
      if (st->r == NULL && st->hgot == 0) {
        /* clean EOF between chunks: the peer closed; test() decides whether anything is still missing */
        atomic_fetch_add(&c->streams_eof, 1);
      } else if (!atomic_load(&c->stopping)) {
        gdr_tcp_comm_fail(c, ncclRemoteError,
                          "receiving on data stream %d: the peer closed the connection in the "
                          "middle of a chunk",
                          st->idx);
      }
      stream_drop(io, st);
      break;
    }
    prog = 1;
    moved += (size_t)n;
    if (st->r == NULL) {
      st->hgot += (size_t)n;
      if (st->hgot < sizeof(st->h)) continue;
      if (stream_header(io, st) != 0) break;
      if (st->left == 0) chunk_landed(st);
      continue;
    }
    if ((size_t)n < st->left) {
      st->dst += n;
      st->left -= (size_t)n;
      continue;
    }
    {
      size_t extra = (size_t)n - st->left;
      st->left = 0;
      chunk_landed(st);
      if (extra > 0) {
        memcpy(&st->h, &nh, extra);
        st->hgot = extra;
        if (extra == sizeof(st->h)) {
          if (stream_header(io, st) != 0) break;
          if (st->left == 0) chunk_landed(st);
        }
      }
    }
  }
  if (moved > 0) atomic_fetch_add_explicit(&c->moved, (uint64_t)moved, memory_order_relaxed); /* connstat */
  return prog;
}

static void lane_fill_header(struct tcp_thread *ln) {
  size_t off = (size_t)ln->ci * ln->cur.chunk;
  size_t len = ln->cur.size - off < ln->cur.chunk ? ln->cur.size - off : ln->cur.chunk;
  ln->ch.magic = TCP_CHUNK_MAGIC;
  ln->ch.len = (uint32_t)len;
  ln->ch.seq = ln->cur.seq;
  ln->ch.off = off;
  ln->ch.total = ln->cur.size;
  ln->csent = 0;
}

/* Writes a send lane's chunks until its socket is full or it has nothing left. 1: progress; *more as above. */
static int lane_progress(struct tcp_thread *ln, int *more) {
  struct tcp_comm *c = ln->comm;
  size_t moved = 0;
  int prog = 0;
  *more = 0;
  for (;;) {
    struct iovec iov[2];
    struct msghdr mh;
    size_t len, room, hl = sizeof(ln->ch);
    ssize_t n;
    int fd;
    if (!ln->busy) {
      pthread_mutex_lock(&ln->mu);
      if (ln->head == atomic_load_explicit(&ln->tail, memory_order_relaxed)) {
        pthread_mutex_unlock(&ln->mu);
        break;
      }
      ln->cur = ln->q[ln->head % TCP_NREQ];
      ln->head++;
      pthread_mutex_unlock(&ln->mu);
      prog = 1;
      if (ln->dead || atomic_load(&c->failed)) continue; /* drain: the comm is dead, test() reports it */
      ln->busy = 1;
      ln->ci = ln->cur.first;
      if (ln->ci >= ln->cur.nchunks) {
        ln->busy = 0;
        continue;
      }
      lane_fill_header(ln);
    }
    if (moved >= ln->io->budget) {
      *more = 1;
      break;
    }
    len = ln->ch.len;
    room = ln->io->budget - moved; /* the turn's budget bounds each call too (a help pass's is small) */
    memset(&mh, 0, sizeof(mh));
    if (ln->csent < hl) {
      iov[0].iov_base = (char *)&ln->ch + ln->csent;
      iov[0].iov_len = hl - ln->csent;
      iov[1].iov_base = ln->cur.data + ln->ch.off;
      iov[1].iov_len = len < room ? len : room;
      mh.msg_iovlen = 2;
    } else {
      size_t rest = len - (ln->csent - hl);
      iov[0].iov_base = ln->cur.data + ln->ch.off + (ln->csent - hl);
      iov[0].iov_len = rest < room ? rest : room;
      mh.msg_iovlen = 1;
    }
    mh.msg_iov = iov;
    fd = ln->fds[ln->rot % (unsigned)ln->nfds];
    n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break; /* EPOLLOUT brings it back */
      if (!atomic_load(&c->stopping))
        gdr_tcp_comm_fail(c, ncclRemoteError, "sending message %llu on data stream %d: %s",
                          (unsigned long long)ln->cur.seq, ln->idx, strerror(errno));
      ln->busy = 0;
      ln->dead = 1;
      continue; /* drains the queue */
    }
    prog = 1;
    moved += (size_t)n;
    ln->csent += (size_t)n;
    if (ln->csent < hl + len) continue;
    atomic_fetch_add_explicit(&ln->cur.req->done, len, memory_order_release);
    ln->rot++;
    ln->ci += ln->cur.stride;
    if (ln->ci >= ln->cur.nchunks)
      ln->busy = 0;
    else
      lane_fill_header(ln);
  }
  if (moved > 0) atomic_fetch_add_explicit(&c->moved, (uint64_t)moved, memory_order_relaxed); /* connstat */
  return prog;
}

static int slot_progress(struct tcp_io *io, int s) {
  struct tcp_slot *sl = &io->slots[s];
  int more = 0, prog = 0;
  if (sl->kind == SLOT_LANE)
    prog = lane_progress(sl->lane, &more);
  else if (sl->kind == SLOT_STREAM)
    prog = stream_progress(io, sl->st, &more);
  if (more) again_push(io, s);
  return prog;
}

/* Lanes kicked since the last look (under io->mu). The list is taken whole under rmu and walked through next_taken
 * (the thread's own link): a lane kicked again meanwhile is on the new list through next_ready. */
static int take_ready(struct tcp_io *io) {
  struct tcp_thread *list;
  int prog = 0;
  pthread_mutex_lock(&io->rmu);
  list = io->ready;
  io->ready = NULL;
  atomic_store(&io->has_ready, 0);
  for (struct tcp_thread *l = list; l != NULL; l = l->next_ready) {
    l->in_ready = 0;
    l->next_taken = l->next_ready;
  }
  pthread_mutex_unlock(&io->rmu);
  for (struct tcp_thread *l = list; l != NULL; l = l->next_taken) {
    int more = 0;
    if (lane_progress(l, &more)) prog = 1;
    if (more) gdr_tcp_lane_kick(l);
  }
  return prog;
}

/* A polling token (GDRNET_TCP_SPIN_THREADS): 1 if taken. Without one the thread sleeps until the kernel or a kick
 * wakes it, so polling costs at most spin_cap cores whatever the pool's size. */
static int spin_take(void) {
  int n = atomic_load_explicit(&g_pool.spinners, memory_order_relaxed), peak;
  do {
    if (n >= g_pool.spin_cap) return 0;
  } while (
      !atomic_compare_exchange_weak_explicit(&g_pool.spinners, &n, n + 1, memory_order_relaxed, memory_order_relaxed));
  peak = atomic_load_explicit(&g_pool.spin_peak, memory_order_relaxed);
  while (peak < n + 1 && !atomic_compare_exchange_weak_explicit(&g_pool.spin_peak, &peak, n + 1, memory_order_relaxed,
                                                                memory_order_relaxed)) {}
  return 1;
}

static void spin_put(void) { atomic_fetch_sub_explicit(&g_pool.spinners, 1, memory_order_relaxed); }

/* While one of its comms expects traffic, the thread polls for the longer window. */
static int io_expecting(const struct tcp_io *io) {
  for (int s = 0; s < io->nslots; s++) {
    const struct tcp_slot *sl = &io->slots[s];
    const struct tcp_comm *c = sl->kind == SLOT_LANE ? sl->lane->comm : sl->kind == SLOT_STREAM ? sl->st->comm : NULL;
    if (c == NULL || atomic_load_explicit(&c->stopping, memory_order_relaxed) ||
        atomic_load_explicit(&c->failed, memory_order_relaxed))
      continue;
    if (atomic_load_explicit(c->is_send ? &c->tx_expect : &c->rx_expect, memory_order_relaxed) > 0) return 1;
  }
  return 0;
}

/* Adaptive: a request of a comm it serves is outstanding on its streams: a receive whose clear-to-send went out and
 * that is not complete, a clear-to-send the sender has not used, a lane with chunks to write (under io->mu). */
static int io_outstanding(const struct tcp_io *io) {
  for (int s = 0; s < io->nslots; s++) {
    const struct tcp_slot *sl = &io->slots[s];
    const struct tcp_comm *c = sl->kind == SLOT_LANE ? sl->lane->comm : sl->kind == SLOT_STREAM ? sl->st->comm : NULL;
    if (c == NULL || atomic_load_explicit(&c->stopping, memory_order_relaxed) ||
        atomic_load_explicit(&c->failed, memory_order_relaxed))
      continue;
    if (sl->kind == SLOT_LANE &&
        (sl->lane->busy || sl->lane->head != atomic_load_explicit(&sl->lane->tail, memory_order_relaxed)))
      return 1;
    if (atomic_load_explicit(c->is_send ? &c->tx_expect : &c->rx_expect, memory_order_relaxed) > 0) return 1;
  }
  return 0;
}

/* Adaptive: whether the thread polls now (TCP_POLL_ON) or why not. The window is the longer of the two spins. */
static int adapt_poll(const struct tcp_io *io, uint64_t now, uint64_t since) {
  uint64_t win = io->spin_max_ns > io->spin_ns ? io->spin_max_ns : io->spin_ns;
  if (!io_outstanding(io)) return TCP_POLL_STOP_IDLE;
  if (now - since >= win) return TCP_POLL_STOP_WINDOW;
  if (io->gap_ns >= win) return TCP_POLL_STOP_SLOW;
  return TCP_POLL_ON;
}

/* Adaptive: one more gap between progress in the moving average (weight 1/4; one long sleep counts as at most two
 * windows, so a few quick steps bring polling back). */
static void adapt_progress(struct tcp_io *io, uint64_t now) {
  uint64_t win = io->spin_max_ns > io->spin_ns ? io->spin_max_ns : io->spin_ns, gap;
  if (io->last_prog != 0) {
    gap = now - io->last_prog;
    if (gap > 2 * win) gap = 2 * win;
    io->gap_ns = io->gap_ns - io->gap_ns / 4 + gap / 4;
  }
  io->last_prog = now;
}

/* The front of the again list, at most max slots (<= TCP_IO_EVENTS), served from a copy (a slot may push itself
 * again); 1 if any made progress. */
static int serve_again(struct tcp_io *io, int max) {
  int na = io->nagain < max ? io->nagain : max, prog = 0;
  int tmp[TCP_IO_EVENTS];
  memcpy(tmp, io->again, (size_t)na * sizeof(int));
  memmove(io->again, io->again + na, (size_t)(io->nagain - na) * sizeof(int));
  io->nagain -= na;
  for (int i = 0; i < na; i++) io->slots[tmp[i]].in_again = 0;
  for (int i = 0; i < na; i++)
    if (slot_progress(io, tmp[i])) prog = 1;
  return prog;
}

/* What the thread does next, after its last progress at `since`: 0 polls (epoll_wait returns at once), -1 sleeps
 * until an event or a kick. Polling needs a token (*token, taken here); *stop gets why polling stopped (TCP_POLL_*):
 * the fixed rule (a window after progress, the longer one while traffic is expected) or the adaptive one. */
static int next_timeout(struct tcp_io *io, uint64_t since, int *token, int *stop) {
  uint64_t now;
  *stop = TCP_POLL_ON;
  if (io->nagain > 0 || atomic_load(&io->has_ready)) return 0;
  if (io->spin_ns == 0 || since == 0) return -1;
  now = gdr_time_ns();
  if (g_pool.adaptive) {
    *stop = adapt_poll(io, now, since);
  } else {
    uint64_t win = io->spin_ns;
    if (io->spin_max_ns > win && io_expecting(io)) win = io->spin_max_ns;
    if (now - since >= win) *stop = TCP_POLL_STOP_WINDOW;
  }
  if (*stop == TCP_POLL_ON && (*token || (*token = spin_take()))) return 0;
  return -1;
}

/* The events epoll_wait returned: the eventfd's (a kick) drained, the others' slots served; 1 if any made progress. */
static int serve_events(struct tcp_io *io, const struct epoll_event *ev, int n) {
  int prog = 0;
  for (int i = 0; i < n; i++) {
    uint64_t d = ev[i].data.u64;
    int s = (int)(d >> 32);
    if (d == UINT64_MAX) {
      uint64_t v;
      if (read(io->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN) GDR_TRACE(NCCL_NET, "TCP I/O eventfd read failed");
      continue;
    }
    if (s >= io->nslots || io->slots[s].gen != (uint32_t)d) continue; /* detached since */
    if (slot_progress(io, s)) prog = 1;
  }
  return prog;
}

static int io_pass(struct tcp_io *io, int with_epoll);
static void steal_tick(uint64_t now);

/* New work for io's own thread (a kick, what another thread's pass left): woken if it sleeps (an awake one sees it
 * in its loop). */
static void wake_sleeper(struct tcp_io *io) {
  uint64_t one = 1, none = 0;
  if (!atomic_load(&io->sleeping)) return;
  /* the first kick of this sleep starts the wake-up's clock (io_thread reads it when it runs again) */
  (void)atomic_compare_exchange_strong_explicit(&io->kick_ns, &none, gdr_time_ns(), memory_order_relaxed,
                                                memory_order_relaxed);
  /* EAGAIN: the counter is full, the thread is being woken anyway */
  if (write(io->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
    GDR_WARN("TCP: waking I/O thread %d failed: %s", io->idx, strerror(errno));
}

/* A pass over another thread's work (a poller's share, the proxy's help), if that thread is not at work itself: what
 * the pass left (a turn cut at its budget, a lane kicked meanwhile) is the thread's again, and wakes it. Called without
 * o->mu; 1 if the pass moved bytes. */
static int pass_other(struct tcp_io *o, int with_epoll) {
  int moved = 0, wake = 0;
  if (pthread_mutex_trylock(&o->mu) != 0) return 0; /* its thread is at work */
  if (!o->stop) {
    moved = io_pass(o, with_epoll);
    wake = o->nagain > 0 || atomic_load(&o->has_ready);
  }
  pthread_mutex_unlock(&o->mu);
  if (wake) wake_sleeper(o);
  return moved;
}

static _Atomic uint64_t g_share_passes; /* a poller's passes over another thread that moved bytes (tests) */

uint64_t gdr_tcp_pool_share_passes(void) { return atomic_load_explicit(&g_share_passes, memory_order_relaxed); }

/* A polling thread with nothing of its own (GDRNET_TCP_SPIN_SHARE) serves the threads that sleep: each one's kicked
 * lanes and again list at once, and what epoll reports for one of them per call (*rr, a syscall each), in bounded
 * passes under trylock, so that a hand-over does not wait for the sleeper's wake-up. What a pass leaves wakes its
 * owner, as after the proxy's passes. Called without io->mu. 1 if any moved bytes. */
static int share_pass(struct tcp_io *io, int *rr) {
  int n = atomic_load_explicit(&g_pool.nrun, memory_order_acquire), prog = 0;
  if (n < 2) return 0;
  *rr = (*rr + 1) % n;
  for (int i = 0; i < n; i++) {
    struct tcp_io *o = &g_pool.io[i];
    int polled = i == *rr;
    if (o == io || !atomic_load(&o->sleeping)) continue; /* an awake thread serves its own */
    if (!polled && !atomic_load(&o->has_ready)) continue;
    if (pass_other(o, polled)) {
      prog = 1;
      atomic_fetch_add_explicit(&g_share_passes, 1, memory_order_relaxed);
    }
  }
  return prog;
}

static void note_progress(struct tcp_io *io, uint64_t *since) {
  *since = gdr_time_ns();
  if (g_pool.adaptive) adapt_progress(io, *since);
}

/* Back from a sleep that began at slept: awake again, and the kick that ended the sleep, if one came during it (its
 * kick_ns is 0 without one), counts as a wake-up from that kick until now. */
static void wake_done(struct tcp_io *io, uint64_t slept) {
  const uint64_t k = atomic_exchange_explicit(&io->kick_ns, 0, memory_order_relaxed);
  atomic_store(&io->sleeping, 0);
  if (k >= slept) {
    const uint64_t now = gdr_time_ns();
    if (now >= k) wake_record(now - k);
  }
}

static void *io_thread(void *arg) {
  struct tcp_io *io = arg;
  struct epoll_event ev[TCP_IO_EVENTS];
  uint64_t since = 0; /* last progress */
  int token = 0;      /* holds a polling token (spin_take) */
  uint64_t slept = 0; /* when its current sleep began */
  int rr = io->idx;   /* share_pass: the thread whose epoll it looks at next */
  int shared = 0;     /* share_pass moved bytes */
  atomic_store(&io->entered, 1);
  pthread_mutex_lock(&io->mu);
  while (!io->stop) {
    int prog = 0, timeout, n, werr, stop;
    void (*hook)(int, int);
    if (atomic_load(&io->has_ready) && take_ready(io)) prog = 1;
    if (io->nagain > 0 && serve_again(io, TCP_IO_EVENTS)) prog = 1;
    if (prog) note_progress(io, &since);
    timeout = next_timeout(io, since, &token, &stop);
    if (timeout < 0) {
      if (token) {
        spin_put();
        atomic_fetch_add_explicit(&g_pool.stops[stop], 1, memory_order_relaxed);
      }
      token = 0;
      slept = gdr_time_ns();
      atomic_store_explicit(&io->kick_ns, 0, memory_order_relaxed); /* a kick of an earlier sleep is not this one's */
      atomic_store(&io->sleeping, 1);
      if (atomic_load(&io->has_ready)) { /* a kick that did not see sleeping: served now */
        atomic_store(&io->sleeping, 0);
        continue;
      }
    }
    pthread_mutex_unlock(&io->mu);
    if (timeout < 0) steal_tick(slept);
    if (timeout < 0 && (hook = atomic_load_explicit(&g_sleep_hook, memory_order_acquire)) != NULL) hook(io->idx, stop);
    n = epoll_wait(io->ep, ev, TCP_IO_EVENTS, timeout);
    werr = errno;
    if (timeout < 0) wake_done(io, slept);
    if (n == 0 && timeout == 0 && !atomic_load(&io->has_ready)) {
      if (g_pool.share && share_pass(io, &rr)) {
        shared = 1;
      } else {
        cpu_relax();
        steal_tick(gdr_time_ns());
        sched_yield(); /* polling: hand the core to whoever has work on a busy host */
      }
    }
    pthread_mutex_lock(&io->mu);
    if (shared) {
      shared = 0;
      note_progress(io, &since); /* the process's poller: its window follows the work it did for the others */
    }
    if (n < 0) {
      if (werr != EINTR) {
        GDR_WARN("TCP I/O thread %d: epoll_wait failed: %s", io->idx, strerror(werr));
        break; /* cannot happen with a valid epoll fd; its comms then time out in the peer's and NCCL's checks */
      }
      continue;
    }
    if (serve_events(io, ev, n)) note_progress(io, &since);
  }
  if (token) spin_put();
  pthread_mutex_unlock(&io->mu);
  return NULL;
}

void gdr_tcp_lane_kick(struct tcp_thread *th) {
  struct tcp_io *io = th->io;
  int wake = 0;
  if (io == NULL || gdr_tcp_comm_inherited(th->comm)) return; /* the parent's thread, absent here */
  pthread_mutex_lock(&io->rmu);
  if (!th->in_ready) {
    th->in_ready = 1;
    th->next_ready = io->ready;
    io->ready = th;
    atomic_store(&io->has_ready, 1);
    wake = 1;
  }
  pthread_mutex_unlock(&io->rmu);
  if (wake) wake_sleeper(io);
}

/* ------------------------------------------------------------------------------------------ help passes -- */

/* One bounded, non-blocking pass over io's work by a thread that is not its own (NCCL's proxy thread in test()):
 * the lanes kicked, the front of the again list, what epoll reports now; each lane or stream moves at most
 * GDRNET_TCP_HELP_BYTES. Under io->mu. The eventfd's readiness is left to the thread (level-triggered: it sees it). */
static int io_pass(struct tcp_io *io, int with_epoll) {
  struct epoll_event ev[TCP_HELP_TURNS];
  int prog = 0, n;
  io->budget = g_pool.help_budget;
  if (atomic_load(&io->has_ready) && take_ready(io)) prog = 1;
  if (io->nagain > 0 && serve_again(io, TCP_HELP_TURNS)) prog = 1;
  n = with_epoll ? epoll_wait(io->ep, ev, TCP_HELP_TURNS, 0) : 0;
  for (int i = 0; i < n; i++) {
    uint64_t d = ev[i].data.u64;
    int s = (int)(d >> 32);
    if (d == UINT64_MAX || s >= io->nslots || io->slots[s].gen != (uint32_t)d) continue;
    if (slot_progress(io, s)) prog = 1;
  }
  io->budget = TCP_IO_BUDGET;
  return prog;
}

static _Atomic uint64_t g_help_passes; /* passes that moved bytes (tests) */

uint64_t gdr_tcp_pool_help_passes(void) { return atomic_load_explicit(&g_help_passes, memory_order_relaxed); }

static int help_one(struct tcp_io *io, struct tcp_io **seen, int *nseen) {
  int prog;
  for (int i = 0; i < *nseen; i++)
    if (seen[i] == io) return 0;
  seen[(*nseen)++] = io;
  prog = pass_other(io, 1);
  if (prog) atomic_fetch_add_explicit(&g_help_passes, 1, memory_order_relaxed);
  return prog;
}

int gdr_tcp_pool_help(struct tcp_comm *c) {
  struct tcp_io *seen[TCP_MAX_STREAMS];
  int nseen = 0, prog = 0;
  if (!c->attached || gdr_tcp_comm_inherited(c)) return 0;
  if (c->is_send) {
    for (int i = 0; i < c->nthreads; i++)
      if (c->threads[i].io != NULL && help_one(c->threads[i].io, seen, &nseen)) prog = 1;
  } else {
    for (int i = 0; i < c->nsocks; i++)
      if (c->streams[i].io != NULL && help_one(c->streams[i].io, seen, &nseen)) prog = 1;
  }
  return prog;
}

/* ------------------------------------------------------------------------------------ start, stop, attach -- */

int gdr_tcp_steal_parse(const char *text, uint64_t *steal, uint64_t *total) {
  uint64_t f[8];
  const char *p = text;
  char *end;
  if (strncmp(p, "cpu ", 4) != 0) return -1;
  p += 4;
  for (int i = 0; i < 8; i++) {
    while (*p == ' ') p++;
    if (*p < '0' || *p > '9') return -1; /* fewer than eight fields: no steal column */
    f[i] = strtoull(p, &end, 10);
    p = end;
  }
  *steal = f[7];
  *total = 0;
  for (int i = 0; i < 8; i++) *total += f[i];
  return 0;
}

int64_t gdr_tcp_steal_bp(const uint64_t a[2], const uint64_t b[2]) {
  if (b[1] <= a[1] || b[0] < a[0] || b[0] - a[0] > b[1] - a[1]) return -1;
  return (int64_t)((b[0] - a[0]) * 10000u / (b[1] - a[1]));
}

int gdr_tcp_steal_step(struct gdr_tcp_steal_state *s, int64_t bp) {
  if (bp < 0) return s->on;
  if (!s->on && bp >= TCP_STEAL_ON_BP) {
    s->on = 1;
    s->quiet = 0;
    s->periods++;
  } else if (s->on) {
    s->quiet = bp < TCP_STEAL_OFF_BP ? s->quiet + 1 : 0;
    if (s->quiet >= TCP_STEAL_OFF_WINDOWS) s->on = 0;
  }
  return s->on;
}

/* The host's steal and total CPU time now: 0, or -1 where /proc/stat cannot be read (the line then says nothing). */
static int steal_read(uint64_t v[2]) {
  char line[256];
  int rc = -1;
  FILE *f = fopen(g_steal_path, "re");
  if (f == NULL) return -1;
  if (fgets(line, sizeof(line), f) != NULL) rc = gdr_tcp_steal_parse(line, &v[0], &v[1]);
  fclose(f);
  return rc;
}

int gdr_tcp_pool_stealing(void) { return atomic_load_explicit(&g_pool.stealing, memory_order_relaxed); }

void gdr_tcp_pool_steal_stats(uint64_t *windows, uint64_t *windows_on, uint64_t *periods) {
  *windows = atomic_load_explicit(&g_pool.steal_windows, memory_order_relaxed);
  *windows_on = atomic_load_explicit(&g_pool.steal_windows_on, memory_order_relaxed);
  pthread_mutex_lock(&g_pool.steal_mu);
  *periods = g_pool.steal.periods;
  pthread_mutex_unlock(&g_pool.steal_mu);
}

void gdr_tcp_pool_set_steal_source(const char *path, uint64_t window_ns) {
  snprintf(g_steal_path, sizeof(g_steal_path), "%s", path != NULL ? path : "/proc/stat");
  g_steal_window_ns = window_ns;
}

/* An I/O thread with nothing to do (about to sleep, or polling idle) at now: once a window, one of them reads the
 * host's steal since the last window and steps the state machine. Called without io->mu. */
static void steal_tick(uint64_t now) {
  uint64_t next = atomic_load_explicit(&g_pool.steal_next, memory_order_relaxed), v[2];
  int64_t bp = -1;
  int on, was;
  if (next == 0 || now < next || pthread_mutex_trylock(&g_pool.steal_mu) != 0) return;
  if (now < atomic_load_explicit(&g_pool.steal_next, memory_order_relaxed)) { /* another thread read this window */
    pthread_mutex_unlock(&g_pool.steal_mu);
    return;
  }
  atomic_store_explicit(&g_pool.steal_next, now + g_pool.steal_window_ns, memory_order_relaxed);
  if (steal_read(v) == 0) {
    bp = gdr_tcp_steal_bp(g_pool.steal_last, v);
    g_pool.steal_last[0] = v[0];
    g_pool.steal_last[1] = v[1];
  }
  was = g_pool.steal.on;
  on = gdr_tcp_steal_step(&g_pool.steal, bp);
  if (bp >= 0) { /* under steal_mu: a later window's reader cannot store its state first */
    atomic_fetch_add_explicit(&g_pool.steal_windows, 1, memory_order_relaxed);
    if (on) atomic_fetch_add_explicit(&g_pool.steal_windows_on, 1, memory_order_relaxed);
    atomic_store_explicit(&g_pool.stealing, on, memory_order_relaxed);
  }
  pthread_mutex_unlock(&g_pool.steal_mu);
  if (on != was) /* TRACE: an I/O thread's INFO line mid-run cuts nccl-tests' rows (the stop's line counts these) */
    GDR_TRACE(NCCL_NET, "TCP: the host %s CPU time from this VM (%lld.%02lld %% over the last %llu ms)%s",
              on ? "steals" : "no longer steals", (long long)(bp / 100), (long long)(bp % 100),
              (unsigned long long)(g_pool.steal_window_ns / 1000000u),
              on && g_pool.steal_chunk > 0 ? ": sends go in larger chunks" : "");
}

/* The host's steal over the pool's life, one INFO line where it reached TCP_STEAL_NOTE_BP: on a VM whose hypervisor
 * holds its CPUs back, a woken I/O thread's CPU waits for it, and a wake-up's figures above are the host's. */
static void steal_log(void) {
  uint64_t now[2];
  int64_t bp;
  if (!g_pool.steal_ok || steal_read(now) != 0) return;
  bp = gdr_tcp_steal_bp(g_pool.steal0, now);
  if (bp >= TCP_STEAL_NOTE_BP) {
    uint64_t w, won, periods;
    char tail[128] = "";
    gdr_tcp_pool_steal_stats(&w, &won, &periods);
    if (periods > 0)
      snprintf(tail, sizeof(tail), "; %llu of %llu windows at %d %% or more (%llu period(s))%s",
               (unsigned long long)won, (unsigned long long)w, TCP_STEAL_ON_BP / 100, (unsigned long long)periods,
               g_pool.steal_chunk > 0 ? ", with larger chunks then" : "");
    GDR_INFO(NCCL_NET,
             "TCP: the host stole %lld.%02lld %% of this VM's CPU time while the I/O threads ran (/proc/stat): "
             "a woken thread waits for it%s",
             (long long)(bp / 100), (long long)(bp % 100), tail);
  }
}

/* The pool's wake-ups, one INFO line (none if no sleeping thread was kicked). */
static void wake_log(void) {
  struct gdr_tcp_wake_stats w;
  uint64_t late, periods;
  char tail[96] = "";
  gdr_tcp_pool_wake_stats(&w);
  gdr_tcp_pool_late_stats(&late, &periods);
  if (g_pool.late_ns > 0 && w.n > 0)
    snprintf(tail, sizeof(tail), "; %.1f %% after more than %llu us, late %llu time(s)",
             100.0 * (double)late / (double)w.n, (unsigned long long)(g_pool.late_ns / 1000u),
             (unsigned long long)periods);
  if (w.n > 0)
    GDR_INFO(NCCL_NET,
             "TCP: %llu wake-ups of sleeping I/O threads for new work: p50 %.1f us, p90 %.1f us, p99 %.1f us, "
             "max %.1f us%s",
             (unsigned long long)w.n, (double)w.p50_ns / 1e3, (double)w.p90_ns / 1e3, (double)w.p99_ns / 1e3,
             (double)w.max_ns / 1e3, tail);
}

static void pool_stop(void) { /* under g_pool.mu */
  /* every thread stops and is joined before any is freed: a sharing poller may be in another's pass */
  atomic_store_explicit(&g_pool.nrun, 0, memory_order_release);
  for (int i = 0; i < g_pool.n; i++) {
    struct tcp_io *io = &g_pool.io[i];
    if (io->started) {
      uint64_t one = 1;
      pthread_mutex_lock(&io->mu);
      io->stop = 1;
      pthread_mutex_unlock(&io->mu);
      if (write(io->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        GDR_WARN("TCP: waking I/O thread %d failed: %s", i, strerror(errno));
    }
  }
  for (int i = 0; i < g_pool.n; i++)
    if (g_pool.io[i].started) pthread_join(g_pool.io[i].tid, NULL);
  wake_log();
  steal_log();
  for (int i = 0; i < g_pool.n; i++) {
    struct tcp_io *io = &g_pool.io[i];
    if (io->ep >= 0) close(io->ep);
    if (io->evfd >= 0) close(io->evfd);
    pthread_mutex_destroy(&io->mu);
    pthread_mutex_destroy(&io->rmu);
    free(io->slots);
    free(io->again);
    memset(io, 0, sizeof(*io));
  }
  g_pool.n = 0;
  if (g_pool.pinned) { /* every thread joined: the code may go */
    g_pool.pinned = 0;
    gdr_core_unpin();
  }
}

/* The steal at the pool's start, and the windows of steal_tick: TCP_STEAL_WINDOW_MS, or a thousand times what one read
 * of /proc/stat costs where that is longer (a host with many CPUs and interrupts); none where it cannot be read. */
static void steal_start(void) {
  const uint64_t t0 = gdr_time_ns();
  uint64_t cost;
  g_pool.steal_ok = steal_read(g_pool.steal0) == 0;
  cost = gdr_time_ns() - t0;
  g_pool.steal_chunk = gdr_tcp_resolve_steal_chunk();
  g_pool.steal_window_ns = g_steal_window_ns > 0 ? g_steal_window_ns : (uint64_t)TCP_STEAL_WINDOW_MS * 1000000u;
  if (g_steal_window_ns == 0 && cost * 1000u > g_pool.steal_window_ns) g_pool.steal_window_ns = cost * 1000u;
  pthread_mutex_lock(&g_pool.steal_mu);
  memset(&g_pool.steal, 0, sizeof(g_pool.steal));
  g_pool.steal_last[0] = g_pool.steal0[0];
  g_pool.steal_last[1] = g_pool.steal0[1];
  pthread_mutex_unlock(&g_pool.steal_mu);
  atomic_store_explicit(&g_pool.stealing, 0, memory_order_relaxed);
  atomic_store_explicit(&g_pool.steal_windows, 0, memory_order_relaxed);
  atomic_store_explicit(&g_pool.steal_windows_on, 0, memory_order_relaxed);
  atomic_store_explicit(&g_pool.steal_next, g_pool.steal_ok ? t0 + g_pool.steal_window_ns : 0, memory_order_relaxed);
}

static ncclResult_t pool_start(void) { /* under g_pool.mu */
  ncclResult_t res = ncclSuccess;
  int n = gdr_tcp_pool_size(NULL, 0); /* its reason is in tcp_init's INFO line */
  uint64_t spin = gdr_tcp_resolve_spin_ns(), spin_max = gdr_tcp_resolve_spin_max_ns();
  if (n > TCP_IO_MAX) n = TCP_IO_MAX;
  g_pool.spin_cap = gdr_tcp_resolve_spin_threads(n);
  g_pool.adaptive = gdr_tcp_resolve_progress(NULL) == TCP_PROGRESS_ADAPTIVE;
  g_pool.share = gdr_tcp_resolve_spin_share();
  g_pool.help_budget = gdr_tcp_resolve_help_bytes(NULL);
  if (!g_pool.pinned) {
    gdr_core_pin();
    g_pool.pinned = 1;
  }
  atomic_store(&g_pool.spinners, 0);
  atomic_store(&g_pool.spin_peak, 0);
  for (int b = 0; b < TCP_WAKE_BUCKETS; b++) atomic_store_explicit(&g_pool.wake_hist[b], 0, memory_order_relaxed);
  atomic_store_explicit(&g_pool.wake_max, 0, memory_order_relaxed);
  g_pool.late_ns = gdr_tcp_resolve_proxy_io() ? gdr_tcp_resolve_help_after_ns() : 0;
  atomic_store_explicit(&g_pool.late_frac, 0, memory_order_relaxed);
  atomic_store_explicit(&g_pool.late, 0, memory_order_relaxed);
  atomic_store_explicit(&g_pool.late_n, 0, memory_order_relaxed);
  atomic_store_explicit(&g_pool.late_periods, 0, memory_order_relaxed);
  steal_start();
  for (int i = 0; i < n; i++) {
    struct tcp_io *io = &g_pool.io[i];
    struct epoll_event ev;
    int rc;
    memset(io, 0, sizeof(*io));
    io->idx = i;
    io->ep = io->evfd = -1;
    io->spin_ns = spin;
    io->spin_max_ns = spin_max;
    io->budget = TCP_IO_BUDGET;
    pthread_mutex_init(&io->mu, NULL); /* default mutexes: cannot fail on Linux */
    pthread_mutex_init(&io->rmu, NULL);
    g_pool.n = i + 1;
    io->ep = epoll_create1(EPOLL_CLOEXEC);
    io->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (io->ep < 0 || io->evfd < 0) {
      GDR_WARN("TCP: cannot create the I/O thread pool's epoll/eventfd: %s", strerror(errno));
      res = ncclSystemError;
      goto out;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u64 = UINT64_MAX;
    if (epoll_ctl(io->ep, EPOLL_CTL_ADD, io->evfd, &ev) != 0) {
      GDR_WARN("TCP: epoll_ctl(eventfd) failed: %s", strerror(errno));
      res = ncclSystemError;
      goto out;
    }
    rc = pthread_create(&io->tid, NULL, io_thread, io);
    if (rc != 0) {
      GDR_WARN("TCP: cannot start I/O thread %d of %d: %s", i, n, strerror(rc));
      res = ncclSystemError;
      goto out;
    }
    io->started = 1;
    {
      /* named by its creator, so that it has its name once the comm exists (what top -H and /proc show) */
      char name[16];
      snprintf(name, sizeof(name), "gdr-tcp-io/%d", i % 100);
      (void)pthread_setname_np(io->tid, name); /* a name is a convenience: no failure to report */
    }
  }
  atomic_store_explicit(&g_pool.nrun, n, memory_order_release);
  GDR_INFO(NCCL_NET, "TCP: %d I/O thread(s) started for the data streams of every connection of this process", n);
out:
  if (res != ncclSuccess) pool_stop();
  return res;
}

static struct tcp_io *least_loaded(void) { /* under g_pool.mu */
  struct tcp_io *best = &g_pool.io[0];
  for (int i = 1; i < g_pool.n; i++)
    if (g_pool.io[i].load < best->load) best = &g_pool.io[i];
  best->load++;
  return best;
}

/* A slot of io for a lane or stream, its fd in io's epoll set (under io->mu). -1 on failure. */
static int slot_add(struct tcp_io *io, int fd, int kind, struct tcp_thread *lane, struct tcp_stream *st) {
  struct epoll_event ev;
  int s;
  for (s = 0; s < io->nslots; s++)
    if (io->slots[s].kind == SLOT_FREE) break;
  if (s == io->nslots) {
    if (io->nslots == io->cap) {
      int cap = io->cap ? io->cap * 2 : 16;
      struct tcp_slot *n = realloc(io->slots, (size_t)cap * sizeof(*n));
      int *ag;
      if (n == NULL) {
        GDR_WARN("TCP: out of memory for an I/O thread's slots");
        return -1;
      }
      memset(n + io->cap, 0, (size_t)(cap - io->cap) * sizeof(*n));
      io->slots = n;
      ag = realloc(io->again, (size_t)cap * sizeof(*ag));
      if (ag == NULL) {
        GDR_WARN("TCP: out of memory for an I/O thread's slots");
        return -1; /* slots grew, cap not: the next add tries again */
      }
      io->again = ag;
      io->cap = cap;
    }
    io->nslots++;
  }
  memset(&ev, 0, sizeof(ev));
  ev.events = (kind == SLOT_LANE ? EPOLLOUT : EPOLLIN | EPOLLRDHUP) | EPOLLET;
  ev.data.u64 = ((uint64_t)(uint32_t)s << 32) | io->slots[s].gen;
  if (epoll_ctl(io->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    GDR_WARN("TCP: epoll_ctl(ADD) of a data stream failed: %s", strerror(errno));
    return -1;
  }
  io->slots[s].kind = kind;
  io->slots[s].lane = lane;
  io->slots[s].st = st;
  return s;
}

/* Removes every slot of comm c from io (under io->mu). */
static void slots_remove(struct tcp_io *io, const struct tcp_comm *c) {
  for (int s = 0; s < io->nslots; s++) {
    struct tcp_slot *sl = &io->slots[s];
    if (sl->kind == SLOT_LANE && sl->lane->comm == c) {
      for (int f = 0; f < sl->lane->nfds; f++) (void)epoll_ctl(io->ep, EPOLL_CTL_DEL, sl->lane->fds[f], NULL);
    } else if (sl->kind == SLOT_STREAM && sl->st->comm == c) {
      if (!sl->st->dead) (void)epoll_ctl(io->ep, EPOLL_CTL_DEL, sl->st->fd, NULL);
    } else {
      continue;
    }
    sl->kind = SLOT_FREE;
    sl->gen++;
    sl->lane = NULL;
    sl->st = NULL;
  }
  for (int i = 0; i < io->nagain;) { /* freed slots leave the again list */
    if (io->slots[io->again[i]].kind == SLOT_FREE) {
      io->slots[io->again[i]].in_again = 0;
      io->again[i] = io->again[--io->nagain];
    } else {
      i++;
    }
  }
}

static void detach_locked(struct tcp_comm *c) { /* under g_pool.mu */
  for (int i = 0; i < g_pool.n; i++) {
    struct tcp_io *io = &g_pool.io[i];
    pthread_mutex_lock(&io->mu);
    slots_remove(io, c);
    pthread_mutex_unlock(&io->mu);
    pthread_mutex_lock(&io->rmu); /* a lane still on the ready list leaves it */
    for (struct tcp_thread **p = &io->ready; *p != NULL;) {
      if ((*p)->comm == c) {
        (*p)->in_ready = 0;
        *p = (*p)->next_ready;
      } else {
        p = &(*p)->next_ready;
      }
    }
    pthread_mutex_unlock(&io->rmu);
  }
  if (c->is_send) {
    for (int t = 0; t < c->nthreads; t++) {
      if (c->threads[t].io != NULL) c->threads[t].io->load--;
      c->threads[t].io = NULL;
    }
  } else if (c->streams != NULL) {
    for (int s = 0; s < c->nsocks; s++) {
      if (c->streams[s].io != NULL) c->streams[s].io->load--;
      c->streams[s].io = NULL;
    }
  }
}

/* A child forked while the pool runs has none of its threads: it forgets the parent's pool (whose comms it cannot use
 * either) and starts its own with its first comm. Only the child's copies of the epoll and event fds are closed: the
 * parent's sets stay as they are. */
static void pool_atfork_child(void) {
  atomic_fetch_add(&g_pool.gen, 1);
  for (int i = 0; i < g_pool.n; i++) {
    struct tcp_io *io = &g_pool.io[i];
    if (io->ep >= 0) close(io->ep);
    if (io->evfd >= 0) close(io->evfd);
    free(io->slots);
    free(io->again);
    memset(io, 0, sizeof(*io));
  }
  g_pool.n = 0;
  g_pool.users = 0;
  atomic_store(&g_pool.nrun, 0);
  atomic_store(&g_pool.spinners, 0);
  pthread_mutex_init(&g_pool.mu, NULL);
  pthread_mutex_init(&g_pool.steal_mu, NULL); /* a parent's I/O thread may have held it in steal_tick */
  atomic_store(&g_pool.steal_next, 0);
  atomic_store(&g_pool.stealing, 0);
}

int gdr_tcp_comm_inherited(const struct tcp_comm *c) {
  return c->pool_gen != atomic_load_explicit(&g_pool.gen, memory_order_relaxed);
}

static void pool_atfork_register(void) {
  if (pthread_atfork(NULL, NULL, pool_atfork_child) != 0) GDR_WARN("TCP: pthread_atfork failed");
}

ncclResult_t gdr_tcp_pool_attach(struct tcp_comm *c) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  ncclResult_t res = ncclSuccess;
  int n = c->is_send ? c->nthreads : c->nsocks;
  pthread_once(&once, pool_atfork_register);
  pthread_mutex_lock(&g_pool.mu);
  c->pool_gen = atomic_load(&g_pool.gen);
  if (g_pool.users == 0 && g_pool.n == 0) {
    res = pool_start();
    if (res != ncclSuccess) goto out;
  }
  g_pool.users++;
  c->attached = 1;
  for (int i = 0; i < n; i++) {
    struct tcp_io *io = least_loaded();
    int ok = 1;
    pthread_mutex_lock(&io->mu);
    if (c->is_send) {
      struct tcp_thread *ln = &c->threads[i];
      ln->io = io;
      /* one slot per stream, all naming the lane: whichever of its sockets gets room brings it back */
      for (int f = 0; f < ln->nfds && ok; f++)
        if (slot_add(io, ln->fds[f], SLOT_LANE, ln, NULL) < 0) ok = 0;
    } else {
      struct tcp_stream *st = &c->streams[i];
      st->io = io;
      if (slot_add(io, st->fd, SLOT_STREAM, NULL, st) < 0) ok = 0;
    }
    pthread_mutex_unlock(&io->mu);
    if (!ok) {
      res = ncclSystemError;
      goto out;
    }
  }
  /* a stream whose bytes came before it was added is reported by epoll_ctl(ADD) itself (it polls the file) */
out:
  if (res != ncclSuccess && c->attached) {
    detach_locked(c);
    c->attached = 0;
    if (--g_pool.users == 0) pool_stop();
  }
  pthread_mutex_unlock(&g_pool.mu);
  return res;
}

/* A comm of an older fork generation: its lanes and streams name the parent's threads, absent here; nothing of this
 * process's pool is its. */
static void forget_inherited(struct tcp_comm *c) {
  if (c->is_send) {
    for (int t = 0; t < c->nthreads; t++) c->threads[t].io = NULL;
  } else if (c->streams != NULL) {
    for (int s = 0; s < c->nsocks; s++) c->streams[s].io = NULL;
  }
  c->attached = 0;
}

void gdr_tcp_pool_detach(struct tcp_comm *c) {
  if (!c->attached) return;
  if (gdr_tcp_comm_inherited(c)) {
    forget_inherited(c);
    return;
  }
  pthread_mutex_lock(&g_pool.mu);
  detach_locked(c);
  c->attached = 0;
  if (--g_pool.users == 0) pool_stop();
  pthread_mutex_unlock(&g_pool.mu);
}
