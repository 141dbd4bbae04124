/* TCP transport: devices (usable IP interfaces), properties, stream counts, chunk arithmetic, the table. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "tcp.h"

struct tcp_dev {
  char name[IF_NAMESIZE];
  char pci_path[256]; /* realpath of the PCI device, "" if none (no heap: v8 has no finalize, dlclose must not leak) */
  union gdr_sockaddr addr;
  int speed;
  uint64_t guid;
};

/* The devices found by init. Global: NCCL's devices are process-wide. Written only by init/fini, which the core
 * serialises under its lock before/after any comm exists; read-only in between. */
static struct tcp_dev g_devs[GDR_MAX_IFS];
static int g_ndev;

size_t gdr_tcp_resolve_cts_inline(size_t inline_max) {
  int64_t v = gdr_param_int(GDR_PARAM_TCP_CTS_INLINE);
  if (v == GDR_PARAM_AUTO) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    v = cores >= TCP_SPIN_AUTO_CORES ? TCP_CTS_INLINE_AUTO : (int64_t)inline_max;
  }
  return (size_t)v < inline_max ? (size_t)v : inline_max;
}

int gdr_tcp_resolve_proxy_io(void) {
  int64_t v = gdr_param_int(GDR_PARAM_TCP_PROXY_IO);
  return v == GDR_PARAM_AUTO ? TCP_PROXY_IO_AUTO : v != 0;
}

uint64_t gdr_tcp_resolve_help_after_ns(void) {
  int64_t v = gdr_param_int(GDR_PARAM_TCP_HELP_AFTER_US);
  if (v == GDR_PARAM_AUTO) v = gdr_tcp_resolve_spin_ns() > 0 ? TCP_HELP_AFTER_POLL_US : 0;
  return (uint64_t)v * 1000u;
}

size_t gdr_tcp_resolve_help_bytes(const char **why) {
  int64_t v = gdr_param_int(GDR_PARAM_TCP_HELP_BYTES);
  const char *w = "GDRNET_TCP_HELP_BYTES";
  if (v == GDR_PARAM_AUTO) {
    int poll = gdr_tcp_resolve_spin_ns() > 0;
    v = poll ? TCP_HELP_BYTES_POLL : TCP_HELP_BYTES_BLOCK;
    w = poll ? "auto: the I/O threads poll" : "auto: the I/O threads sleep";
  }
  if (why) *why = w;
  return (size_t)v;
}

int gdr_tcp_resolve_progress(const char **why) {
  int64_t v = gdr_param_int(GDR_PARAM_TCP_PROGRESS);
  int mode = v == TCP_PROGRESS_KNOB_AUTO ? TCP_PROGRESS_AUTO : (int)v;
  if (why) {
    if (gdr_tcp_resolve_spin_ns() == 0)
      *why = "no polling: GDRNET_TCP_SPIN_US is 0";
    else if (v == TCP_PROGRESS_KNOB_AUTO)
      *why = "auto";
    else
      *why = "GDRNET_TCP_PROGRESS";
  }
  return mode;
}

int gdr_tcp_resolve_spin_threads(int nthreads) {
  int64_t v = gdr_param_int(GDR_PARAM_TCP_SPIN_THREADS);
  if (v == GDR_PARAM_AUTO) {
    v = TCP_SPIN_THREADS_AUTO;
    /* adaptive: as many as the cores NCCL's two busy threads leave this rank (only threads with work poll) */
    if (gdr_tcp_resolve_progress(NULL) == TCP_PROGRESS_ADAPTIVE) v = gdr_tcp_rank_cores(NULL) - TCP_IO_NCCL_THREADS;
  }
  if (v > nthreads) v = nthreads;
  return v < 1 ? 1 : (int)v;
}

int gdr_tcp_resolve_spin_share(void) {
  int64_t v = gdr_param_int(GDR_PARAM_TCP_SPIN_SHARE);
  return v == GDR_PARAM_AUTO ? TCP_SPIN_SHARE_AUTO : v != 0;
}

uint64_t gdr_tcp_resolve_spin_max_ns(void) {
  int64_t us = gdr_param_int(GDR_PARAM_TCP_SPIN_MAX_US);
  if (us == GDR_PARAM_AUTO) us = gdr_tcp_resolve_spin_ns() > 0 ? TCP_SPIN_MAX_AUTO_US : 0;
  return us > 0 ? (uint64_t)us * 1000u : 0;
}

/* Reads a small sysfs file into buf (trailing newline removed); -1 if absent. */
static int read_sysfs(const char *ifname, const char *file, char *buf, size_t len) {
  char path[256];
  FILE *f;
  size_t n;
  snprintf(path, sizeof(path), "/sys/class/net/%.64s/%.64s", ifname, file);
  f = fopen(path, "r");
  if (f == NULL) return -1;
  n = fread(buf, 1, len - 1, f);
  fclose(f);
  if (n == 0) return -1;
  buf[n] = '\0';
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = '\0';
  return 0;
}

static uint64_t fnv1a(const char *s, uint64_t h) {
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

static void tcp_fini(void) {
  memset(g_devs, 0, sizeof(g_devs));
  g_ndev = 0;
}

static ncclResult_t tcp_init(int *ndev, char *why, size_t whylen) {
  ncclResult_t res = ncclSuccess;
  struct gdr_if ifs[GDR_MAX_IFS];
  const char *spec = gdr_param_str(GDR_PARAM_SOCKET_IFNAME);
  int64_t speed_knob = gdr_param_int(GDR_PARAM_TCP_SPEED);
  int n = 0, ns, nt;
  size_t off = 0;

  *ndev = 0;
  tcp_fini();
  res = gdr_if_find_configured(ifs, GDR_MAX_IFS, &n);
  if (res != ncclSuccess) {
    snprintf(why, whylen, "interface selection failed (GDRNET_SOCKET_IFNAME=\"%s\")", spec);
    goto out;
  }
  if (n == 0) {
    snprintf(why, whylen, "no IP interface is up%s%s%s", spec[0] ? " and matches GDRNET_SOCKET_IFNAME=\"" : "", spec,
             spec[0] ? "\"" : "");
    goto out;
  }
  for (int i = 0; i < n; i++) {
    struct tcp_dev *d = &g_devs[i];
    char buf[PATH_MAX], path[300];
    memcpy(d->name, ifs[i].name, sizeof(d->name));
    d->name[sizeof(d->name) - 1] = '\0';
    d->addr = ifs[i].addr;
    snprintf(path, sizeof(path), "/sys/class/net/%.64s/device", d->name);
    /* none for virtual interfaces (lo, bridges): NCCL then puts them on the CPU */
    if (realpath(path, buf) != NULL && strlen(buf) < sizeof(d->pci_path)) memcpy(d->pci_path, buf, strlen(buf) + 1);
    d->speed = 10000;
    if (speed_knob != GDR_PARAM_AUTO) {
      d->speed = (int)speed_knob;
    } else if (read_sysfs(d->name, "speed", buf, sizeof(buf)) == 0) {
      long s = strtol(buf, NULL, 10);
      if (s > 0 && s < INT_MAX) d->speed = (int)s;
    }
    d->guid = fnv1a(d->name, 14695981039346656037ull);
    if (read_sysfs(d->name, "address", buf, sizeof(buf)) == 0) d->guid = fnv1a(buf, d->guid);
  }
  g_ndev = n;
  *ndev = n;
  gdr_tcp_resolve_streams(&ns, &nt);
  for (int i = 0; i < n && off < whylen; i++) {
    char a[GDR_ADDR_STRLEN];
    off += (size_t)snprintf(why + off, whylen - off, "%s%s=%s", i ? ", " : "", g_devs[i].name,
                            gdr_sockaddr_str(&g_devs[i].addr, a, sizeof(a)));
  }
  /* the sizing, one short INFO(NET) line per decision; why keeps the addresses (the init line's detail) */
  {
    char pw[200];
    const char *pwhy;
    int np = gdr_tcp_pool_size(pw, sizeof(pw));
    int adaptive = gdr_tcp_resolve_progress(&pwhy) == TCP_PROGRESS_ADAPTIVE;
    const uint64_t spin_ns = gdr_tcp_resolve_spin_ns();
    GDR_INFO(NCCL_NET,
             "TCP: %d data stream(s) in %d lane(s) per connection, inline <= %lld B (<= %zu B after a "
             "clear-to-send)",
             ns, nt, (long long)gdr_param_int(GDR_PARAM_TCP_INLINE),
             gdr_tcp_resolve_cts_inline((size_t)gdr_param_int(GDR_PARAM_TCP_INLINE)));
    GDR_INFO(NCCL_NET, "TCP: %d I/O thread(s) per process: %s", np, pw);
    if (spin_ns == 0) /* the polling knobs do not apply: say only that */
      GDR_INFO(NCCL_NET, "TCP: progress %s (%s): I/O threads sleep until the kernel wakes them",
               adaptive ? "adaptive" : "fixed", pwhy);
    else
      GDR_INFO(NCCL_NET,
               "TCP: progress %s (%s): I/O threads poll %llu us before sleeping (up to %llu us while traffic "
               "is expected; at most %d at a time%s)",
               adaptive ? "adaptive" : "fixed", pwhy, (unsigned long long)(spin_ns / 1000u),
               (unsigned long long)(gdr_tcp_resolve_spin_max_ns() / 1000u), gdr_tcp_resolve_spin_threads(np),
               gdr_tcp_resolve_spin_share() ? ", and a polling one also serves sleeping threads" : "");
    {
      const size_t sc = gdr_tcp_resolve_steal_chunk();
      if (sc > 0)
        GDR_INFO(NCCL_NET,
                 "TCP: while the host steals %d %% or more of this VM's CPU time, chunks are at least %zu %s "
                 "(GDRNET_TCP_STEAL_CHUNK)",
                 TCP_STEAL_ON_BP / 100, sc % 1024u ? sc : sc >> 10, sc % 1024u ? "B" : "KiB");
    }
    if (gdr_tcp_resolve_proxy_io()) {
      const char *hwhy;
      size_t help = gdr_tcp_resolve_help_bytes(&hwhy);
      uint64_t after_us = gdr_tcp_resolve_help_after_ns() / 1000u;
      char after[96] = "";
      if (after_us > 0)
        snprintf(after, sizeof(after),
                 " once its streams moved nothing for %llu us (at once while wake-ups take longer)",
                 (unsigned long long)after_us);
      GDR_INFO(NCCL_NET,
               "TCP: NCCL's proxy thread helps idle I/O threads in test() (GDRNET_TCP_PROXY_IO)%s, %zu %s per "
               "stream a pass (%s)",
               after, help % 1024u ? help : help >> 10, help % 1024u ? "B" : "KiB", hwhy);
    } else
      GDR_INFO(NCCL_NET, "TCP: NCCL's proxy thread does not help the I/O threads");
  }
out:
  return res;
}

static ncclResult_t tcp_get_properties(int dev, struct gdr_props *p) {
  if (dev < 0 || dev >= g_ndev) return ncclInvalidArgument;
  memset(p, 0, sizeof(*p));
  p->name = g_devs[dev].name;
  p->pci_path = g_devs[dev].pci_path[0] ? g_devs[dev].pci_path : NULL;
  p->guid = g_devs[dev].guid;
  p->ptr_support = NCCL_PTR_HOST;
  p->reg_is_global = 1;
  p->force_flush = 0;
  p->speed = g_devs[dev].speed;
  p->port = 0;
  p->latency = 0;
  p->max_comms = 65536;
  p->max_recvs = TCP_MAX_RECVS;
  p->net_device_type = NCCL_NET_DEVICE_HOST;
  p->net_device_version = 0;
  /* 64-bit sizes and offsets on the wire: no limit of its own; NCCL's largest network message (1 TiB, as its own
   * transports report) keeps NCCL's arithmetic away from SIZE_MAX */
  p->max_p2p_bytes = TCP_MAX_MESSAGE;
  p->max_coll_bytes = TCP_MAX_MESSAGE;
  return ncclSuccess;
}

ncclResult_t gdr_tcp_dev_addr(int dev, union gdr_sockaddr *addr) {
  if (dev < 0 || dev >= g_ndev) return ncclInvalidArgument;
  *addr = g_devs[dev].addr;
  return ncclSuccess;
}

const struct gdr_transport gdr_transport_tcp = {
    .name = "tcp",
    .id = GDR_TP_TCP,
    .max_fused = GDR_MAX_FUSED,
    .init = tcp_init,
    .get_properties = tcp_get_properties,
    .listen = gdr_tcp_listen,
    .connect = gdr_tcp_connect,
    .accept = gdr_tcp_accept,
    .reg_mr = gdr_tcp_reg_mr,
    .reg_mr_staged = gdr_tcp_reg_mr_staged,
    .reg_mr_dmabuf = NULL,
    .dereg_mr = gdr_tcp_dereg_mr,
    .isend = gdr_tcp_isend,
    .irecv = gdr_tcp_irecv,
    .iflush = NULL,
    .test = gdr_tcp_test,
    .close_send = gdr_tcp_close_send,
    .close_recv = gdr_tcp_close_recv,
    .close_listen = gdr_tcp_close_listen,
    .describe = gdr_tcp_describe,
    .moved = gdr_tcp_moved,
    .quiesce = NULL, /* the I/O threads are joined when the last comm closes (tcp_pool.c) */
    .fini = tcp_fini,
};
