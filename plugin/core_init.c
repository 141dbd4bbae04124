/* init, devices, properties: which transport serves this process, and the devices NCCL sees (the transport's
 * physical ones, then the fused ones of core_ctx.c). The state it sets up lives in core_state.c. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core.h"
#include "log.h"
#include "param.h"
#include "stats.h"

/* What NCCL does when this plugin's init fails, for the WARN (NCCL 2.28.9 src/plugin/net.cc, ncclNetInit): a failed
 * external plugin is skipped and the next one in the list is tried (NCCL's own IB, then Socket), unless the
 * communicator asks for a network by name (NCCL_NET, or ncclConfig_t.netName): then only plugins of that name are
 * tried, and none left means "Failed to initialize any NET plugin" and the communicator's init fails. */
static const char *init_fail_consequence(char *buf, size_t len) {
  const char *net = getenv("NCCL_NET");
  if (net != NULL && strcasecmp(net, "GDR") == 0)
    snprintf(buf, len,
             "with NCCL_NET=%s NCCL does not fall back: its communicator init fails (\"Failed to initialize any NET "
             "plugin\")",
             net);
  else if (net != NULL && net[0] != '\0')
    snprintf(buf, len, "NCCL_NET=%s selects another network: NCCL uses that one", net);
  else
    snprintf(buf, len,
             "NCCL_NET is unset: NCCL falls back to its own IB transport, else Socket, and says so only at INFO "
             "(\"Failed to initialize NET plugin GDR\"); with NCCL_NET=GDR it would be an error instead");
  return buf;
}

/* Appends "name (extra)" of each device to buf. */
/* buf: every device with its speed and PCI path (the INFO(NET) detail); names: "eth0, eth1" (the decision line). */
static void describe_devices(const struct gdr_transport *tp, int ndev, char *buf, size_t len, char *names,
                             size_t nlen) {
  size_t off = 0, noff = 0;
  buf[0] = '\0';
  names[0] = '\0';
  for (int d = 0; d < ndev && off < len; d++) {
    struct gdr_props p;
    memset(&p, 0, sizeof(p));
    if (tp->get_properties(d, &p) != ncclSuccess) continue;
    off += (size_t)snprintf(buf + off, len - off, "%s[%d]%s %d Mbps%s%s", d ? ", " : "", d, p.name ? p.name : "?",
                            p.speed, p.pci_path ? " pci " : "", p.pci_path ? p.pci_path : "");
    if (noff < nlen) noff += (size_t)snprintf(names + noff, nlen - noff, "%s%s", d ? ", " : "", p.name ? p.name : "?");
  }
}

static ncclResult_t choose_transport(void) {
  ncclResult_t res = ncclSuccess;
  int64_t want = gdr_param_int(GDR_PARAM_TRANSPORT);
  char rdma_why[512] = "";
  char tcp_why[512] = "";
  char devs[1024], names[96];
  int ndev = 0;
  const struct gdr_transport *tp = NULL;
  const char *reason = "";

  if (want == GDR_TRANSPORT_RDMA || want == GDR_TRANSPORT_AUTO) {
#ifdef GDRNET_HAVE_RDMA
    ncclResult_t r = gdr_transport_rdma.init(&ndev, rdma_why, sizeof(rdma_why));
    if (r == ncclSuccess && ndev > 0) {
      tp = &gdr_transport_rdma;
      reason = want == GDR_TRANSPORT_RDMA ? "GDRNET_TRANSPORT=rdma" : "GDRNET_TRANSPORT=auto found RDMA devices";
    } else {
      if (r == ncclSuccess) {
        if (rdma_why[0] == '\0') snprintf(rdma_why, sizeof(rdma_why), "no usable RDMA device");
        if (gdr_transport_rdma.fini) gdr_transport_rdma.fini();
      }
      ndev = 0;
    }
#else
    snprintf(rdma_why, sizeof(rdma_why), "this build has no RDMA transport");
#endif
    if (tp == NULL && want == GDR_TRANSPORT_RDMA) {
      char cons[320];
      GDR_WARN("GDRNET_TRANSPORT=rdma but RDMA cannot work here: %s. Plugin init fails (%s); unset GDRNET_TRANSPORT "
               "or set it to auto/tcp to use TCP",
               rdma_why, init_fail_consequence(cons, sizeof(cons)));
      res = ncclSystemError;
      goto out;
    }
  }
  if (tp == NULL) {
    ncclResult_t r = gdr_transport_tcp.init(&ndev, tcp_why, sizeof(tcp_why));
    if (r != ncclSuccess || ndev <= 0) {
      char cons[320];
      GDR_WARN("TCP transport cannot work: %s. Plugin init fails (%s)", tcp_why[0] ? tcp_why : "no usable IP interface",
               init_fail_consequence(cons, sizeof(cons)));
      if (r == ncclSuccess && gdr_transport_tcp.fini) gdr_transport_tcp.fini();
      res = r != ncclSuccess ? r : ncclSystemError;
      goto out;
    }
    tp = &gdr_transport_tcp;
    reason = want == GDR_TRANSPORT_TCP ? "GDRNET_TRANSPORT=tcp" : "no usable RDMA device";
  }
  gdr_core_set_transport_locked(tp, ndev);
  describe_devices(tp, ndev, devs, sizeof(devs), names, sizeof(names));
  {
    /* one short line for the decision (kubectl logs), the devices and the transport's own summary at INFO(NET) */
    const char *tpwhy = tp == &gdr_transport_tcp ? tcp_why : rdma_why;
    int auto_tcp = tp == &gdr_transport_tcp && want == GDR_TRANSPORT_AUTO;
    GDR_INFO(NCCL_INIT | NCCL_NET, "using the %s transport (%s%s%.120s); %d device(s): %s", tp->name, reason,
             auto_tcp ? ": " : "", auto_tcp ? rdma_why : "", ndev, names);
    GDR_INFO(NCCL_NET, "devices: %s%s%s", devs, tpwhy[0] ? "; " : "", tpwhy);
  }
out:
  return res;
}

/* Knobs and transport, once per load (or after a fini): caller holds the core lock. */
ncclResult_t gdr_core_load_locked(void) {
  ncclResult_t res = ncclSuccess;
  int ndev = 0;
  if (gdr_core_transport_locked(&ndev) != NULL)
    goto out; /* initialised before in this load: NCCL may call init once per user of the table */
  if (gdr_params_load() != ncclSuccess) {
    char cons[320];
    GDR_WARN("plugin init fails (%s): fix the environment knob(s) named above (the knobs: %s)",
             init_fail_consequence(cons, sizeof(cons)), gdr_param_config_doc());
    res = ncclInvalidUsage;
    gdr_params_reset(); /* a later init re-reads the environment */
    goto out;
  }
  res = gdr_stats_start(); /* GDRNET_STATS_FILE (a bad path fails init, like any bad knob) */
  if (res == ncclSuccess) res = choose_transport();
  if (res != ncclSuccess) {
    gdr_stats_stop();
    gdr_params_reset();
  }
out:
  return res;
}

ncclResult_t gdr_core_init(ncclDebugLogger_t logger) { return gdr_core_init_table(logger, 8, NULL); }

ncclResult_t gdr_core_init_table(ncclDebugLogger_t logger, int abi, ncclProfilerCallback_t profiler) {
  ncclResult_t res = ncclSuccess;
  int ndev = 0;
  gdr_log_init(logger);
  gdr_core_lock();
  GDR_CHECK(gdr_core_load_locked());
  gdr_core_legacy_init_locked(profiler);
  (void)gdr_core_transport_locked(&ndev);
  GDR_INFO(NCCL_INIT | NCCL_NET, "NCCL called ncclNetPlugin_v%d (process-wide init%s; %d device(s))", abi,
           abi >= 10 ? (profiler != NULL ? ", profiler callback given" : ", no profiler callback") : "", ndev);
out:
  gdr_core_unlock();
  return res;
}

ncclResult_t gdr_core_devices(int *ndev) {
  ncclResult_t res;
  gdr_core_lock();
  res = gdr_core_devices_locked(ndev);
  gdr_core_unlock();
  if (res != ncclSuccess) GDR_WARN("devices() called before a successful init()");
  return res;
}

ncclResult_t gdr_core_phys_props_locked(int dev, struct gdr_props *p) {
  ncclResult_t res = ncclSuccess;
  int ndev = 0;
  memset(p, 0, sizeof(*p));
  GDR_CHECK(gdr_core_transport_locked(&ndev)->get_properties(dev, p));
  p->vdev_ndevs = 1;
  p->vdev_devs[0] = dev;
  p->max_multi_request_size = 1;
  p->rail_id = -1;
  p->plane_id = -1;
  /* GDRNET_FORCE_FLUSH / NCCL_NET_FORCE_FLUSH: NCCL flushes every GPUDirect receive */
  if (gdr_param_int(GDR_PARAM_FORCE_FLUSH) && (p->ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF))) p->force_flush = 1;
out:
  return res;
}

/* Properties of any device NCCL sees (caller holds the core lock). A fused device: the first device's, with speed the
 * sum, what every member supports (pointer types, grouped receives, comms, sizes), the largest latency. */
static ncclResult_t props_locked(int dev, struct gdr_props *p) {
  ncclResult_t res = ncclSuccess;
  const struct gdr_vdev *v;
  int nphys = 0;
  if (gdr_core_transport_locked(&nphys) == NULL) {
    GDR_WARN("getProperties called before a successful init()");
    res = ncclInternalError;
    goto out;
  }
  if (dev >= 0 && dev < nphys) {
    GDR_CHECK(gdr_core_phys_props_locked(dev, p));
    goto out;
  }
  v = dev >= nphys ? gdr_core_vdev_locked(dev - nphys) : NULL;
  if (v == NULL) {
    int n = 0;
    (void)gdr_core_devices_locked(&n);
    GDR_WARN("getProperties: device %d does not exist (%d device(s))", dev, n);
    res = ncclInvalidArgument;
    goto out;
  }
  GDR_CHECK(gdr_core_phys_props_locked(v->devs[0], p));
  for (int i = 1; i < v->ndevs; i++) {
    struct gdr_props q;
    GDR_CHECK(gdr_core_phys_props_locked(v->devs[i], &q));
    p->speed = p->speed > INT_MAX - q.speed ? INT_MAX : p->speed + q.speed;
    p->ptr_support &= q.ptr_support;
    p->reg_is_global &= q.reg_is_global;
    p->force_flush |= q.force_flush;
    if (q.latency > p->latency) p->latency = q.latency;
    if (q.max_comms < p->max_comms) p->max_comms = q.max_comms;
    if (q.max_recvs < p->max_recvs) p->max_recvs = q.max_recvs;
    if (q.max_p2p_bytes < p->max_p2p_bytes) p->max_p2p_bytes = q.max_p2p_bytes;
    if (q.max_coll_bytes < p->max_coll_bytes) p->max_coll_bytes = q.max_coll_bytes;
  }
  p->name = v->name;
  p->vdev_ndevs = v->ndevs;
  memcpy(p->vdev_devs, v->devs, sizeof(p->vdev_devs));
out:
  return res;
}

ncclResult_t gdr_core_get_properties(int dev, struct gdr_props *props) {
  ncclResult_t res;
  gdr_core_lock();
  res = props_locked(dev, props);
  gdr_core_unlock();
  return res;
}

ncclResult_t gdr_core_resolve_locked(int dev, struct gdr_props *props, struct gdr_conn_opts *opts) {
  ncclResult_t res = ncclSuccess;
  int nphys = 0;
  const struct gdr_transport *tp = gdr_core_transport_locked(&nphys);
  int max = tp != NULL && tp->max_fused > 1 ? tp->max_fused : 1;
  GDR_CHECK(props_locked(dev, props));
  memset(opts, 0, sizeof(*opts));
  opts->traffic_class = -1;
  opts->min_flows = opts->max_flows = -1;
  opts->ndevs = props->vdev_ndevs < max ? props->vdev_ndevs : max;
  memcpy(opts->devs, props->vdev_devs, sizeof(opts->devs));
  if (opts->ndevs < props->vdev_ndevs) {
    struct gdr_vdev *v = gdr_core_vdev_locked(dev - nphys);
    if (v != NULL && !v->said_first) {
      struct gdr_props first;
      v->said_first = 1;
      if (gdr_core_phys_props_locked(v->devs[0], &first) == ncclSuccess)
        GDR_INFO(NCCL_INIT | NCCL_NET,
                 "fused device [%d] %s: the %s transport stripes a connection over at most %d device(s), not %d; "
                 "its connections run on %d device(s) from %s (its first)",
                 dev, v->name, tp->name, max, v->ndevs, opts->ndevs, first.name ? first.name : "?");
    }
  }
out:
  return res;
}

void gdr_core_fini_locked(void) {
  int ndev = 0;
  const struct gdr_transport *tp = gdr_core_transport_locked(&ndev);
  gdr_stats_stop(); /* the last file, with the devices' counters, before the transport forgets them */
  if (tp != NULL) {
    if (tp->quiesce) tp->quiesce();
    if (tp->fini) tp->fini();
  }
  gdr_linger_drain();
  gdr_core_state_reset_locked();
  gdr_params_reset();
}

void gdr_core_fini(void) {
  gdr_core_lock();
  gdr_core_fini_locked();
  gdr_core_unlock();
}

/* Pins (transport.h): the library holds a reference on itself while any of its threads runs, so that NCCL's dlclose
 * with comms still open (an abort that skipped a close) leaves the code mapped under those threads; the last unpin
 * gives the reference back and a later dlclose unloads. The handle comes from dlopen(RTLD_NOLOAD) of the file that
 * holds this code: never a second copy. A program that links the plugin statically has no such file to pin (its
 * NOLOAD open names the program, which is never unloaded anyway). */
static pthread_mutex_t g_pin_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_pins;              /* thread groups running (under g_pin_mu) */
static void *g_pin_handle;      /* the reference they hold, NULL when none could be taken (under g_pin_mu) */
static _Atomic int g_unloading; /* the destructor runs: the process exits (an unpin then gives nothing back) */

void gdr_core_pin(void) {
  Dl_info info;
  pthread_mutex_lock(&g_pin_mu);
  if (g_pins++ == 0 && dladdr((void *)&gdr_core_pin, &info) != 0 && info.dli_fname != NULL &&
      info.dli_fname[0] != '\0') {
    g_pin_handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (g_pin_handle == NULL)
      GDR_TRACE(NCCL_INIT, "cannot hold %s loaded while the plugin's threads run: %s", info.dli_fname, dlerror());
  }
  pthread_mutex_unlock(&g_pin_mu);
}

void gdr_core_unpin(void) {
  void *h = NULL;
  pthread_mutex_lock(&g_pin_mu);
  if (g_pins > 0 && --g_pins == 0) {
    h = g_pin_handle;
    g_pin_handle = NULL;
  }
  pthread_mutex_unlock(&g_pin_mu);
  /* never the last reference here: the caller runs this library's code for someone who holds one (NCCL's handle),
   * or is the exit-time destructor, which leaves the reference to the exiting process */
  if (h != NULL && !atomic_load(&g_unloading) && dlclose(h) != 0) GDR_TRACE(NCCL_INIT, "dlclose: %s", dlerror());
}

int gdr_core_pins(void) {
  int n;
  pthread_mutex_lock(&g_pin_mu);
  n = g_pins;
  pthread_mutex_unlock(&g_pin_mu);
  return n;
}

/* The destructor: at dlclose (no pin is held then: no TCP I/O or RDMA thread runs) or at exit (pins may be held).
 * With comms still open only the GDRNET_STATS_FILE writer stops: it lives from init to fini, and a v6..v10 table's
 * fini is this destructor, so it pins nothing; a comm left open without a thread of its own (a listen comm) must
 * not leave it running on unmapped code. */
void gdr_core_unload(void) {
  atomic_store(&g_unloading, 1);
  gdr_core_lock();
  int idle = gdr_core_ncomms_locked() == 0;
  gdr_core_unlock();
  if (idle)
    gdr_core_fini();
  else
    gdr_stats_stop();
}
