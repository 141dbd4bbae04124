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

#define DM(n, t, h, s, f, g) {n, t, h, s, offsetof(struct gdr_dev_counters, f), g}
static const struct dev_metric dev_metrics[] = {
  DM("gdrnet_faults_total", "counter", "RDMA faults seen (completion errors, failed posts, async events)", 0, faults, 0),
  DM("gdrnet_recoveries_total", "counter", "recoveries of a connection on the same device that completed", 0,
     recoveries, 0),
  DM("gdrnet_recovery_replayed_messages_total", "counter", "messages replayed by recoveries", 0, replayed_msgs, 0),
  DM("gdrnet_recovery_replayed_bytes_total", "counter", "bytes replayed by recoveries", 0, replayed_bytes, 0),
  DM("gdrnet_recovery_seconds_total", "counter", "time spent recovering", 1, recover_ns, 0),
  DM("gdrnet_failed_connections_total", "counter", "connections that failed (NCCL got an error)", 0, failed, 0),
  DM("gdrnet_fallbacks_total", "counter", "moves of a connection from RDMA to TCP", 0, fallbacks, 0),
  DM("gdrnet_returns_total", "counter", "returns of a connection from TCP to RDMA", 0, returns, 0),
  DM("gdrnet_tcp_seconds_total", "counter", "time connections of the device spent on TCP (counted when they leave "
     "it or close)", 1, tcp_ns, 0),
  DM("gdrnet_tcp_bytes_total", "counter", "bytes connections of the device carried over TCP", 0, tcp_bytes, 0),
  DM("gdrnet_fallback_handed_messages_total", "counter", "messages handed over to TCP when connections moved", 0,
     handed_msgs, 0),
  DM("gdrnet_fallback_handed_bytes_total", "counter", "bytes handed over to TCP when connections moved", 0,
     handed_bytes, 0),
  DM("gdrnet_tcp_only_connections_total", "counter", "connections that ran over TCP from the start (their RDMA "
     "set-up failed, or the peer has no RDMA)", 0, tcp_only, 0),
  DM("gdrnet_connections_on_tcp", "gauge", "connections of the device over TCP now", 0, on_tcp, 1),
  DM("gdrnet_device_lost", "gauge", "1 while the device is lost (DEVICE_FATAL, not back yet): its connections run over "
     "TCP", 0, lost, 1),
  DM("gdrnet_device_revivals_total", "counter", "times the lost device came back (a new context): new connections use "
     "RDMA again", 0, revived, 0),
};

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
  head(&b, "gdrnet_info", "gauge", "libnccl-net-gdr in this process (version, host)");
  put(&b, "gdrnet_info{pid=\"%d\",host=\"%s\",version=\"%s\"} 1\n", pid, host, GDRNET_VERSION_STRING);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  head(&b, "gdrnet_stats_written_seconds", "gauge", "when this file was written (Unix time)");
  put(&b, "gdrnet_stats_written_seconds{pid=\"%d\"} %lld\n", pid, (long long)ts.tv_sec);
  /* per transport */
  static const struct {
    const char *name, *type, *help;
    size_t off;
    int gauge;
  } tpm[] = {
    {"gdrnet_connections_total", "counter", "send and receive comms established",
     offsetof(struct gdr_tp_counters, conns), 0},
    {"gdrnet_connections_open", "gauge", "send and receive comms open now", offsetof(struct gdr_tp_counters, open), 1},
    {"gdrnet_sent_bytes_total", "counter", "bytes of completed sends", offsetof(struct gdr_tp_counters, bytes_sent), 0},
    {"gdrnet_received_bytes_total", "counter", "bytes of completed receives",
     offsetof(struct gdr_tp_counters, bytes_received), 0},
    {"gdrnet_failed_requests_total", "counter", "requests whose test() returned an error",
     offsetof(struct gdr_tp_counters, requests_failed), 0},
    {"gdrnet_gin_puts_total", "counter", "GIN/RMA puts issued", offsetof(struct gdr_tp_counters, gin_puts), 0},
    {"gdrnet_gin_signals_total", "counter", "GIN/RMA signals issued",
     offsetof(struct gdr_tp_counters, gin_signals), 0},
    {"gdrnet_gin_gets_total", "counter", "GIN/RMA gets issued", offsetof(struct gdr_tp_counters, gin_gets), 0},
    {"gdrnet_gin_bytes_total", "counter", "GIN/RMA bytes put or got", offsetof(struct gdr_tp_counters, gin_bytes),
     0},
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
  if (pat == NULL || pat[0] == 0) return ncclSuccess;
  pthread_mutex_lock(&g_mu);
  if (g_running) goto out;
  if (gdr_stats_path(pat, g_path, sizeof(g_path)) != 0) {
    GDR_WARN("GDRNET_STATS_FILE=%s: the path is too long (or empty); %%p (pid) and %%h (host name) are expanded", pat);
    res = ncclInvalidArgument;
    goto out;
  }
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
  if (g_interval_s > 0)
    GDR_INFO(NCCL_INIT | NCCL_NET, "counters go to %s (Prometheus text format) every %llds and at each close", g_path,
             g_interval_s);
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
  write_file(); /* the last word */
  pthread_mutex_lock(&g_mu);
  g_running = 0;
  (void)pthread_cond_destroy(&g_cv);
  pthread_mutex_unlock(&g_mu);
}
