/* GDRNET_STATS_FILE: the counters in the Prometheus text format (stats.h). */
#include "stats.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "connstat.h"
#include "log.h"
#include "param.h"

#ifndef GDRNET_VERSION_STRING
#define GDRNET_VERSION_STRING "unknown"
#endif

#define MAX_DEVS 64

struct gdr_tp_counters gdr_stats_tp[GDR_STATS_NTP];

/* The registry and the writer thread: g_mu guards every field below (the counters themselves are atomics). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv;
static struct {
  char transport[8], device[64];
  int port;
  const struct gdr_dev_counters *ctr;
} g_devs[MAX_DEVS];
static int g_ndevs;
static pthread_t g_thread;
static int g_running, g_stop, g_poked, g_warned;
static int g_remove; /* GDRNET_STATS_DIR: the file goes at a clean stop */
static char g_path[PATH_MAX];
static long long g_interval_s;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

/* A fork child has no writer thread (the parent's, which a join in gdr_stats_stop would wait for forever): it writes
 * no file, and its fini has nothing to stop. */
static void stats_atfork_child(void) {
  g_running = 0;
  g_stop = 0;
  pthread_mutex_init(&g_mu, NULL);
}

static void stats_atfork_register(void) {
  if (pthread_atfork(NULL, NULL, stats_atfork_child) != 0) GDR_WARN("GDRNET_STATS_FILE: pthread_atfork failed");
}

int gdr_stats_register(const char *transport, const char *device, int port, const struct gdr_dev_counters *ctr) {
  int rc = -1;
  pthread_mutex_lock(&g_mu);
  if (g_ndevs < MAX_DEVS) {
    snprintf(g_devs[g_ndevs].transport, sizeof(g_devs[0].transport), "%s", transport);
    snprintf(g_devs[g_ndevs].device, sizeof(g_devs[0].device), "%s", device);
    g_devs[g_ndevs].port = port;
    g_devs[g_ndevs].ctr = ctr;
    g_ndevs++;
    rc = 0;
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

void gdr_stats_unregister(const struct gdr_dev_counters *ctr) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_ndevs; i++)
    if (g_devs[i].ctr == ctr) {
      g_devs[i] = g_devs[--g_ndevs];
      break;
    }
  pthread_mutex_unlock(&g_mu);
}

/* ------------------------------------------------------------------------------------------- text -- */

struct buf {
  char *p;
  size_t len, cap;
  int oom;
};

static void put(struct buf *b, const char *fmt, ...) {
  va_list ap;
  if (b->oom) return;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n;
    char *q = realloc(b->p, cap);
    if (q == NULL) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

static void head(struct buf *b, const char *name, const char *type, const char *help) {
  put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One metric per registered device; value(ctr) reads the counter (caller holds g_mu). */
struct dev_metric {
  const char *name, *type, *help;
  int seconds; /* a nanosecond counter written in seconds */
  size_t off;  /* offsetof the counter in struct gdr_dev_counters */
  int gauge;   /* an int64 gauge */
};

#define DM(n, t, h, s, f, g)                                                                                           \
  { n, t, h, s, offsetof(struct gdr_dev_counters, f), g }
static const struct dev_metric dev_metrics[] = {
    DM("gdrnet_faults_total", "counter", "RDMA faults seen (completion errors, failed posts, async events)", 0, faults,
       0),
    DM("gdrnet_recoveries_total", "counter", "recoveries of a connection on the same device that completed", 0,
       recoveries, 0),
    DM("gdrnet_recovery_replayed_messages_total", "counter", "messages replayed by recoveries", 0, replayed_msgs, 0),
    DM("gdrnet_recovery_replayed_bytes_total", "counter", "bytes replayed by recoveries", 0, replayed_bytes, 0),
    DM("gdrnet_recovery_seconds_total", "counter", "time spent recovering", 1, recover_ns, 0),
    DM("gdrnet_failed_connections_total", "counter", "connections that failed (NCCL got an error)", 0, failed, 0),
    DM("gdrnet_fallbacks_total", "counter", "moves of a connection from RDMA to TCP", 0, fallbacks, 0),
    DM("gdrnet_returns_total", "counter", "returns of a connection from TCP to RDMA", 0, returns, 0),
    DM("gdrnet_tcp_seconds_total", "counter",
       "time connections of the device spent on TCP (counted when they leave "
       "it or close)",
       1, tcp_ns, 0),
    DM("gdrnet_tcp_bytes_total", "counter", "bytes connections of the device carried over TCP", 0, tcp_bytes, 0),
    DM("gdrnet_fallback_handed_messages_total", "counter", "messages handed over to TCP when connections moved", 0,
       handed_msgs, 0),
    DM("gdrnet_fallback_handed_bytes_total", "counter", "bytes handed over to TCP when connections moved", 0,
       handed_bytes, 0),
    DM("gdrnet_tcp_only_connections_total", "counter",
       "connections that ran over TCP from the start (their RDMA "
       "set-up failed, or the peer has no RDMA)",
       0, tcp_only, 0),
    DM("gdrnet_connections_on_tcp", "gauge", "connections of the device over TCP now", 0, on_tcp, 1),
    DM("gdrnet_device_lost", "gauge",
       "1 while the device is lost (DEVICE_FATAL, not back yet): its connections run over "
       "TCP",
       0, lost, 1),
    DM("gdrnet_device_revivals_total", "counter",
       "times the lost device came back (a new context): new connections use "
       "RDMA again",
       0, revived, 0),
};

/* ------------------------------------------------------------------------------- per connection -- */

#define MAX_CONNS_WRITTEN 512 /* the stalled and the longest-waiting ones first; the rest are counted */

static void put_escaped(struct buf *b, const char *v) {
  for (const char *c = v; *c; c++) {
    if (*c == '"' || *c == '\\')
      put(b, "\\%c", *c);
    else if (*c == '\n')
      put(b, "\\n");
    else
      put(b, "%c", *c);
  }
}

static int snap_order(const void *pa, const void *pb) {
  const struct gdr_conn_snap *a = pa, *b = pb;
  if (a->stalled != b->stalled) return b->stalled - a->stalled;
  if (a->oldest_age_s != b->oldest_age_s) return a->oldest_age_s < b->oldest_age_s ? 1 : -1;
  return a->id < b->id ? -1 : a->id > b->id;
}

static void conn_labels(struct buf *b, int pid, const char *host, const char *lab, const struct gdr_conn_snap *s) {
  put(b, "{pid=\"%d\",host=\"%s\",%sconn=\"%llu\",dir=\"%s\",peer=\"", pid, host, lab, (unsigned long long)s->id,
      s->onesided ? "onesided"
      : s->send   ? "send"
                  : "recv");
  put_escaped(b, s->have_desc ? s->desc.peer : "");
  put(b, "\",peer_rank=\"");
  if (s->have_desc && s->desc.peer_rank >= 0) put(b, "%d", s->desc.peer_rank);
  put(b, "\",transport=\"%s\"", s->transport);
}

/* One gauge or counter per connection; value(s) says what. */
struct conn_metric {
  const char *name, *type, *help;
  int kind; /* the field's type: 0 double, 1 uint64_t, 2 int, 3 int64_t */
  size_t off;
  int optional; /* an int64 field of desc that may be -1 (then no sample) */
};
#define CM(n, t, h, k, f)                                                                                              \
  { n, t, h, k, offsetof(struct gdr_conn_snap, f), 0 }
#define CMD(n, t, h, f)                                                                                                \
  { n, t, h, 1, offsetof(struct gdr_conn_snap, desc) + offsetof(struct gdr_conn_desc, f), 1 }
static const struct conn_metric conn_metrics[] = {
    CM("gdrnet_conn_stalled", "gauge", "1 while the connection is stalled (GDRNET_STALL_WARN_MS without progress)", 2,
       stalled),
    CM("gdrnet_conn_stalls_total", "counter", "stalls of the connection so far", 1, stalls),
    CM("gdrnet_conn_inflight_requests", "gauge", "requests the transport accepted and test() has not reported done", 3,
       inflight),
    CM("gdrnet_conn_oldest_request_seconds", "gauge",
       "age of the oldest waiting request (or of an isend the transport "
       "keeps refusing); 0 when nothing waits",
       0, oldest_age_s),
    CM("gdrnet_conn_oldest_request_bytes", "gauge", "size of that request", 1, oldest_size),
    CM("gdrnet_conn_oldest_request_tag", "gauge", "NCCL's tag of that request", 2, oldest_tag),
    CM("gdrnet_conn_since_last_completion_seconds", "gauge",
       "time since the connection's last completed request (since "
       "it opened when none)",
       0, idle_s),
    CM("gdrnet_conn_requests_total", "counter", "requests completed", 1, requests),
    CM("gdrnet_conn_bytes_total", "counter", "bytes of completed requests (sent for dir=send, received for dir=recv)",
       1, bytes),
    CM("gdrnet_conn_latency_p50_seconds", "gauge",
       "median request latency (post to test() done), a histogram bucket's "
       "upper bound",
       0, p50_s),
    CM("gdrnet_conn_latency_p99_seconds", "gauge", "99th percentile request latency, a bucket's upper bound", 0, p99_s),
    CMD("gdrnet_conn_recoveries_total", "counter", "recoveries of the connection in place (RDMA)", recoveries),
    CMD("gdrnet_conn_moves_total", "counter", "moves of the connection to TCP (RDMA fallback)", moves),
    CMD("gdrnet_conn_peer_silent_milliseconds", "gauge",
        "since the last bytes from the peer on the connection's control "
        "socket",
        peer_silent_ms),
    CMD("gdrnet_conn_unsent_bytes", "gauge", "bytes queued on the connection's sockets that the peer has not taken",
        unsent),
};

static void render_conn_metric(struct buf *b, const struct conn_metric *cm, const struct gdr_conn_snap *v, int n,
                               int pid, const char *host, const char *lab) {
  head(b, cm->name, cm->type, cm->help);
  for (int i = 0; i < n; i++) {
    const char *p = (const char *)&v[i] + cm->off;
    if (cm->optional && *(const int64_t *)p < 0) continue;
    put(b, "%s", cm->name);
    conn_labels(b, pid, host, lab, &v[i]);
    if (cm->optional)
      put(b, "} %lld\n", (long long)*(const int64_t *)p);
    else if (cm->kind == 0)
      put(b, "} %.6f\n", *(const double *)p);
    else if (cm->kind == 1)
      put(b, "} %llu\n", (unsigned long long)*(const uint64_t *)p);
    else if (cm->kind == 2)
      put(b, "} %d\n", *(const int *)p);
    else
      put(b, "} %lld\n", (long long)*(const int64_t *)p);
  }
}

static void render_conn_hist(struct buf *b, const struct gdr_conn_snap *v, int n, int pid, const char *host,
                             const char *lab) {
  const char *name = "gdrnet_conn_latency_seconds";
  head(b, name, "histogram", "request latency, post to test() done (log2 buckets)");
  for (int i = 0; i < n; i++) {
    uint64_t acc = 0, count = 0;
    for (int k = 0; k < GDR_CONNSTAT_HIST; k++) count += v[i].hist[k];
    for (int k = 0; k < GDR_CONNSTAT_HIST; k++) {
      acc += v[i].hist[k];
      if (k < 10 || k > 36 || k % 2 != 0) continue; /* 1 us .. 69 s, every factor 4 */
      put(b, "%s_bucket", name);
      conn_labels(b, pid, host, lab, &v[i]);
      put(b, ",le=\"%.9g\"} %llu\n", (double)(1ull << k) / 1e9, (unsigned long long)acc);
    }
    put(b, "%s_bucket", name);
    conn_labels(b, pid, host, lab, &v[i]);
    put(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)count);
    put(b, "%s_sum", name);
    conn_labels(b, pid, host, lab, &v[i]);
    put(b, "} %.6f\n", v[i].lat_sum_s);
    put(b, "%s_count", name);
    conn_labels(b, pid, host, lab, &v[i]);
    put(b, "} %llu\n", (unsigned long long)count);
  }
}

/* A connection's info line (gdrnet_conn_info, gdrnet_closed_conn_info): its labels, device, state and path. */
static void conn_info_line(struct buf *b, const char *name, int pid, const char *host, const char *lab,
                           const struct gdr_conn_snap *v) {
  put(b, "%s", name);
  conn_labels(b, pid, host, lab, v);
  put(b, ",dev=\"%d\",state=\"%s\",path=\"", v->dev, v->have_desc ? gdr_conn_state_str(v->desc.state) : "unknown");
  put_escaped(b, v->have_desc ? v->desc.path : "");
  put(b, "\"} 1\n");
}

/* The last connections closed, as they ended (a short run's, like gdrnet-perf's, are all here at its end). */
static void render_closed(struct buf *b, int pid, const char *host, const char *lab) {
  struct gdr_conn_snap v[16];
  int n = gdr_connstat_closed(v, 16);
  if (n == 0) return;
  static const struct conn_metric cm[] = {
      CM("gdrnet_closed_conn_requests_total", "counter", "requests a recently closed connection completed", 1,
         requests),
      CM("gdrnet_closed_conn_bytes_total", "counter", "bytes of those requests", 1, bytes),
      CM("gdrnet_closed_conn_latency_p50_seconds", "gauge", "its median request latency (a bucket's upper bound)", 0,
         p50_s),
      CM("gdrnet_closed_conn_latency_p99_seconds", "gauge", "its 99th percentile request latency", 0, p99_s),
      CM("gdrnet_closed_conn_stalls_total", "counter", "its stalls", 1, stalls),
      CMD("gdrnet_closed_conn_recoveries_total", "counter", "its recoveries in place (RDMA)", recoveries),
      CMD("gdrnet_closed_conn_moves_total", "counter", "its moves to TCP (RDMA fallback)", moves),
  };
  head(b, "gdrnet_closed_conn_info", "gauge", "one of the last 16 connections closed: its state at the close");
  for (int i = 0; i < n; i++) conn_info_line(b, "gdrnet_closed_conn_info", pid, host, lab, &v[i]);
  for (size_t m = 0; m < sizeof(cm) / sizeof(cm[0]); m++) render_conn_metric(b, &cm[m], v, n, pid, host, lab);
}

/* The per-connection series (connstat.h): the stalled and longest-waiting connections first. */
static void render_conns(struct buf *b, int pid, const char *host, const char *lab) {
  int cap = MAX_CONNS_WRITTEN;
  struct gdr_conn_snap *v = calloc((size_t)cap, sizeof(*v));
  if (v == NULL) {
    b->oom = 1;
    return;
  }
  int total = gdr_connstat_snapshot(v, cap);
  int n = total < cap ? total : cap;
  qsort(v, (size_t)n, sizeof(*v), snap_order);
  head(b, "gdrnet_conns", "gauge", "send and receive connections with per-connection series (those that moved data)");
  put(b, "gdrnet_conns{pid=\"%d\"} %d\n", pid, total);
  head(b, "gdrnet_conns_omitted", "gauge", "connections left out of this file (more than it lists)");
  put(b, "gdrnet_conns_omitted{pid=\"%d\"} %d\n", pid, total - n);
  if (n > 0) {
    head(b, "gdrnet_conn_info", "gauge",
         "a connection: its state (rdma, recovering, moved-to-tcp, tcp, tcp-only, "
         "failed) and what carries it (device and QPs, or streams)");
    for (int i = 0; i < n; i++) conn_info_line(b, "gdrnet_conn_info", pid, host, lab, &v[i]);
    for (size_t m = 0; m < sizeof(conn_metrics) / sizeof(conn_metrics[0]); m++)
      render_conn_metric(b, &conn_metrics[m], v, n, pid, host, lab);
    render_conn_hist(b, v, n, pid, host, lab);
  }
  free(v);
  render_closed(b, pid, host, lab);
}

char *gdr_stats_render(void) {
  struct buf b = {malloc(4096), 0, 4096, 0};
  char host[256] = "";
  static const char *tps[GDR_STATS_NTP] = {"tcp", "rdma"};
  if (b.p == NULL) return NULL;
  b.p[0] = 0;
  if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "unknown");
  for (char *c = host; *c; c++)
    if (*c == '"' || *c == '\\') *c = '_';
  const int pid = (int)getpid();
  char lab[512];
  gdr_connstat_labels(lab, sizeof(lab));
  head(&b, "gdrnet_info", "gauge", "libnccl-net-gdr in this process (version, host, the launcher's rank and job)");
  put(&b, "gdrnet_info{pid=\"%d\",host=\"%s\",%sversion=\"%s\"} 1\n", pid, host, lab, GDRNET_VERSION_STRING);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  head(&b, "gdrnet_stats_written_seconds", "gauge", "when this file was written (Unix time)");
  put(&b, "gdrnet_stats_written_seconds{pid=\"%d\"} %lld\n", pid, (long long)ts.tv_sec);
  head(&b, "gdrnet_stats_interval_seconds", "gauge",
       "GDRNET_STATS_INTERVAL_S: a file older than a few of these is "
       "stale (its process died or hangs)");
  put(&b, "gdrnet_stats_interval_seconds{pid=\"%d\"} %lld\n", pid, g_interval_s);
  /* per transport */
  static const struct {
    const char *name, *type, *help;
    size_t off;
    int gauge;
  } tpm[] = {
      {"gdrnet_connections_total", "counter", "send and receive comms established",
       offsetof(struct gdr_tp_counters, conns), 0},
      {"gdrnet_connections_open", "gauge", "send and receive comms open now", offsetof(struct gdr_tp_counters, open),
       1},
      {"gdrnet_sent_bytes_total", "counter", "bytes of completed sends", offsetof(struct gdr_tp_counters, bytes_sent),
       0},
      {"gdrnet_received_bytes_total", "counter", "bytes of completed receives",
       offsetof(struct gdr_tp_counters, bytes_received), 0},
      {"gdrnet_failed_requests_total", "counter", "requests whose test() returned an error",
       offsetof(struct gdr_tp_counters, requests_failed), 0},
      {"gdrnet_gin_puts_total", "counter", "GIN/RMA puts issued", offsetof(struct gdr_tp_counters, gin_puts), 0},
      {"gdrnet_gin_signals_total", "counter", "GIN/RMA signals issued", offsetof(struct gdr_tp_counters, gin_signals),
       0},
      {"gdrnet_gin_gets_total", "counter", "GIN/RMA gets issued", offsetof(struct gdr_tp_counters, gin_gets), 0},
      {"gdrnet_gin_bytes_total", "counter", "GIN/RMA bytes put or got", offsetof(struct gdr_tp_counters, gin_bytes), 0},
      {"gdrnet_gin_errors_total", "counter", "GIN/RMA comms failed", offsetof(struct gdr_tp_counters, gin_errors), 0},
      {"gdrnet_gin_recoveries_total", "counter", "GIN/RMA one-sided RDMA QPs recovered in place",
       offsetof(struct gdr_tp_counters, gin_recoveries), 0},
      {"gdrnet_gin_replayed_total", "counter", "GIN/RMA operations posted again by a recovery",
       offsetof(struct gdr_tp_counters, gin_replayed), 0},
      {"gdrnet_gin_moves_total", "counter",
       "GIN/RMA peers moved from the one-sided RDMA path to the message path (recovery failed, GDRNET_FALLBACK=1)",
       offsetof(struct gdr_tp_counters, gin_moves), 0},
  };
  for (size_t m = 0; m < sizeof(tpm) / sizeof(tpm[0]); m++) {
    head(&b, tpm[m].name, tpm[m].type, tpm[m].help);
    for (int t = 0; t < GDR_STATS_NTP; t++) {
      const char *p = (const char *)&gdr_stats_tp[t] + tpm[m].off;
      long long v = tpm[m].gauge ? (long long)atomic_load_explicit((_Atomic int64_t *)p, memory_order_relaxed)
                                 : (long long)atomic_load_explicit((_Atomic uint64_t *)p, memory_order_relaxed);
      put(&b, "%s{pid=\"%d\",transport=\"%s\"} %lld\n", tpm[m].name, pid, tps[t], v);
    }
  }
  /* per device */
  pthread_mutex_lock(&g_mu);
  for (size_t m = 0; m < sizeof(dev_metrics) / sizeof(dev_metrics[0]); m++) {
    const struct dev_metric *dm = &dev_metrics[m];
    if (g_ndevs == 0) break;
    head(&b, dm->name, dm->type, dm->help);
    for (int i = 0; i < g_ndevs; i++) {
      const char *p = (const char *)g_devs[i].ctr + dm->off;
      char lab[256];
      snprintf(lab, sizeof(lab), "pid=\"%d\",transport=\"%.7s\",device=\"%.63s\",port=\"%d\"", pid, g_devs[i].transport,
               g_devs[i].device, g_devs[i].port);
      if (dm->gauge) {
        put(&b, "%s{%s} %lld\n", dm->name, lab,
            (long long)atomic_load_explicit((_Atomic int64_t *)p, memory_order_relaxed));
      } else {
        uint64_t v = atomic_load_explicit((_Atomic uint64_t *)p, memory_order_relaxed);
        if (dm->seconds)
          put(&b, "%s{%s} %.3f\n", dm->name, lab, (double)v / 1e9);
        else
          put(&b, "%s{%s} %llu\n", dm->name, lab, (unsigned long long)v);
      }
    }
  }
  pthread_mutex_unlock(&g_mu);
  render_conns(&b, pid, host, lab);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  return b.p;
}

int gdr_stats_path(const char *pattern, char *out, size_t len) {
  size_t o = 0;
  char host[256] = "";
  if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "unknown");
  for (const char *s = pattern; *s; s++) {
    char tmp[300];
    const char *add = tmp;
    if (s[0] == '%' && s[1] == 'p') {
      snprintf(tmp, sizeof(tmp), "%d", (int)getpid());
      s++;
    } else if (s[0] == '%' && s[1] == 'h') {
      add = host;
      s++;
    } else {
      tmp[0] = *s;
      tmp[1] = 0;
    }
    size_t n = strlen(add);
    if (o + n + 1 > len) return -1;
    memcpy(out + o, add, n);
    o += n;
  }
  if (o == 0) return -1;
  out[o] = 0;
  return 0;
}

/* ------------------------------------------------------------------------------------------ writer -- */

/* Writes the file (tmp + rename). The first failure WARNs (naming the knob); later ones are silent. */
static void write_file(void) {
  char tmp[PATH_MAX + 32];
  char *text = gdr_stats_render();
  FILE *f = NULL;
  const char *what = "out of memory";
  int err = ENOMEM;
  if (text == NULL) goto fail;
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", g_path, (int)getpid());
  what = "create";
  f = fopen(tmp, "w");
  if (f == NULL) goto fail_errno;
  what = "write";
  if (fputs(text, f) == EOF) goto fail_errno;
  if (fclose(f) != 0) {
    f = NULL;
    goto fail_errno;
  }
  f = NULL;
  what = "rename";
  if (rename(tmp, g_path) != 0) goto fail_errno;
  free(text);
  return;
fail_errno:
  err = errno;
fail:
  if (f != NULL) (void)fclose(f);
  if (text != NULL) (void)unlink(tmp);
  free(text);
  if (!g_warned) {
    g_warned = 1;
    GDR_WARN("GDRNET_STATS_FILE=%s: cannot %s the file (%s); the counters are not written (the directory must exist "
             "and be writable)",
             g_path, what, strerror(err));
  }
}

static void *writer(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  while (!g_stop) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += g_interval_s > 0 ? (time_t)g_interval_s : 3600;
    while (!g_stop && !g_poked) {
      int rc = pthread_cond_timedwait(&g_cv, &g_mu, &dl);
      if (rc == ETIMEDOUT) break;
    }
    if (g_stop) break;
    if (!g_poked && g_interval_s == 0) continue; /* writes at close only */
    g_poked = 0;
    pthread_mutex_unlock(&g_mu);
    write_file();
    pthread_mutex_lock(&g_mu);
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

ncclResult_t gdr_stats_start(void) {
  ncclResult_t res = ncclSuccess;
  pthread_condattr_t ca;
  const char *pat = gdr_param_str(GDR_PARAM_STATS_FILE);
  const char *dir = gdr_param_str(GDR_PARAM_STATS_DIR);
  char dpat[PATH_MAX];
  int in_dir = 0;
  if ((pat == NULL || pat[0] == 0) && dir != NULL && dir[0] != 0) {
    /* one file per process in the collector's directory: the name is what makes it unique */
    if (snprintf(dpat, sizeof(dpat), "%s/gdrnet-%%h-%%p.prom", dir) >= (int)sizeof(dpat)) {
      GDR_WARN("GDRNET_STATS_DIR=%s: the path is too long", dir);
      return ncclInvalidArgument;
    }
    pat = dpat;
    in_dir = 1;
  }
  if (pat == NULL || pat[0] == 0) return ncclSuccess;
  pthread_mutex_lock(&g_mu);
  if (g_running) goto out;
  if (gdr_stats_path(pat, g_path, sizeof(g_path)) != 0) {
    GDR_WARN("%s=%s: the path is too long (or empty); %%p (pid) and %%h (host name) are expanded",
             in_dir ? "GDRNET_STATS_DIR" : "GDRNET_STATS_FILE", in_dir ? dir : pat);
    res = ncclInvalidArgument;
    goto out;
  }
  g_remove = in_dir;
  g_interval_s = gdr_param_int(GDR_PARAM_STATS_INTERVAL_S);
  if (pthread_condattr_init(&ca) != 0) {
    res = ncclSystemError;
    goto out;
  }
  if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 || pthread_cond_init(&g_cv, &ca) != 0) {
    (void)pthread_condattr_destroy(&ca);
    res = ncclSystemError;
    goto out;
  }
  (void)pthread_condattr_destroy(&ca);
  g_stop = 0;
  g_poked = 1; /* a first file at once: the collector sees the process from its start */
  g_warned = 0;
  pthread_once(&g_fork_once, stats_atfork_register);
  int rc = pthread_create(&g_thread, NULL, writer, NULL);
  if (rc != 0) { /* the job runs without the file */
    GDR_WARN("GDRNET_STATS_FILE: cannot start the writer thread (%s): no counters are written", strerror(rc));
    (void)pthread_cond_destroy(&g_cv);
    goto out;
  }
  g_running = 1;
  gdr_connstat_on_change(gdr_stats_poke); /* a stall that starts or ends is in the file at once */
  if (g_interval_s > 0)
    GDR_INFO(NCCL_INIT | NCCL_NET, "counters go to %s (Prometheus text format) every %llds and at each close%s", g_path,
             g_interval_s, g_remove ? "; removed at a clean exit" : "");
  else
    GDR_INFO(NCCL_INIT | NCCL_NET, "counters go to %s (Prometheus text format) at each close only", g_path);
out:
  pthread_mutex_unlock(&g_mu);
  return res;
}

void gdr_stats_poke(void) {
  pthread_mutex_lock(&g_mu);
  if (g_running) {
    g_poked = 1;
    pthread_cond_signal(&g_cv);
  }
  pthread_mutex_unlock(&g_mu);
}

void gdr_stats_stop(void) {
  pthread_mutex_lock(&g_mu);
  if (!g_running) {
    pthread_mutex_unlock(&g_mu);
    return;
  }
  g_stop = 1;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  (void)pthread_join(g_thread, NULL);
  if (!g_remove)
    write_file();                                  /* the last word */
  else if (unlink(g_path) != 0 && errno != ENOENT) /* a clean end: the collector forgets the process */
    GDR_INFO(NCCL_NET, "GDRNET_STATS_DIR: cannot remove %s: %s", g_path, strerror(errno));
  pthread_mutex_lock(&g_mu);
  g_running = 0;
  (void)pthread_cond_destroy(&g_cv);
  pthread_mutex_unlock(&g_mu);
}
