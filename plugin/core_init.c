/* init, devices, properties: which transport serves this process, and the devices NCCL sees. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "log.h"
#include "param.h"
#include "stats.h"

/* Process-wide plugin state. Global because NCCL's plugin ABI is a set of free functions; every field is
 * protected by g_lock (init and set-up/teardown paths only; the data path never takes it). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct gdr_transport *g_tp; /* chosen transport, NULL before a successful init */
static int g_ndev;
static int g_ncomms; /* open comms of every kind, for quiesce */

void gdr_core_lock(void) { pthread_mutex_lock(&g_lock); }
void gdr_core_unlock(void) { pthread_mutex_unlock(&g_lock); }

const struct gdr_transport *gdr_core_transport(void) {
  const struct gdr_transport *tp;
  pthread_mutex_lock(&g_lock);
  tp = g_tp;
  pthread_mutex_unlock(&g_lock);
  return tp;
}

/* Called with g_lock held by the connection paths. */
void gdr_core_comm_opened(void) { g_ncomms++; }

void gdr_core_comm_closed(const struct gdr_transport *tp) {
  if (g_ncomms > 0) g_ncomms--;
  if (g_ncomms > 0) return;
  if (tp != NULL && tp->quiesce != NULL) tp->quiesce();
  gdr_linger_drain(); /* streams still delivering a closed comm's last bytes: done before NCCL may unload us */
}

/* Appends "name (extra)" of each device to buf. */
static void describe_devices(const struct gdr_transport *tp, int ndev, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int d = 0; d < ndev && off < len; d++) {
    struct gdr_props p;
    memset(&p, 0, sizeof(p));
    if (tp->get_properties(d, &p) != ncclSuccess) continue;
    off += (size_t)snprintf(buf + off, len - off, "%s[%d]%s %d Mbps%s%s", d ? ", " : "", d, p.name ? p.name : "?",
                            p.speed, p.pci_path ? " pci " : "", p.pci_path ? p.pci_path : "");
  }
}

static ncclResult_t choose_transport(void) {
  ncclResult_t res = ncclSuccess;
  int64_t want = gdr_param_int(GDR_PARAM_TRANSPORT);
  char rdma_why[512] = "";
  char tcp_why[512] = "";
  char devs[1024];
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
      GDR_WARN("GDRNET_TRANSPORT=rdma but RDMA cannot work here: %s. Plugin init fails (NCCL falls back to its own "
               "transports); unset GDRNET_TRANSPORT or set it to auto/tcp to use TCP",
               rdma_why);
      res = ncclSystemError;
      goto out;
    }
  }
  if (tp == NULL) {
    ncclResult_t r = gdr_transport_tcp.init(&ndev, tcp_why, sizeof(tcp_why));
    if (r != ncclSuccess || ndev <= 0) {
      GDR_WARN("TCP transport cannot work: %s. Plugin init fails (NCCL falls back to its own transports)",
               tcp_why[0] ? tcp_why : "no usable IP interface");
      if (r == ncclSuccess && gdr_transport_tcp.fini) gdr_transport_tcp.fini();
      res = r != ncclSuccess ? r : ncclSystemError;
      goto out;
    }
    tp = &gdr_transport_tcp;
    reason = want == GDR_TRANSPORT_TCP ? "GDRNET_TRANSPORT=tcp" : "no usable RDMA device";
  }
  g_tp = tp;
  g_ndev = ndev;
  describe_devices(tp, ndev, devs, sizeof(devs));
  {
    const char *tpwhy = tp == &gdr_transport_tcp ? tcp_why : rdma_why;
    int auto_tcp = tp == &gdr_transport_tcp && want == GDR_TRANSPORT_AUTO;
    GDR_INFO(NCCL_INIT | NCCL_NET, "using the %s transport (%s%s%s); %d device(s): %s%s%s", tp->name, reason,
             auto_tcp ? ": " : "", auto_tcp ? rdma_why : "", ndev, devs, tpwhy[0] ? "; " : "", tpwhy);
  }
out:
  return res;
}

ncclResult_t gdr_core_init(ncclDebugLogger_t logger) {
  ncclResult_t res = ncclSuccess;
  gdr_log_init(logger);
  pthread_mutex_lock(&g_lock);
  if (g_tp != NULL) goto out; /* initialised before in this load: NCCL may call init once per user of the table */
  if (gdr_params_load() != ncclSuccess) {
    GDR_WARN("plugin init fails: fix the environment knob(s) named above (docs/configuration.md lists them)");
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
  pthread_mutex_unlock(&g_lock);
  return res;
}

ncclResult_t gdr_core_devices(int *ndev) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&g_lock);
  if (g_tp == NULL) {
    GDR_WARN("devices() called before a successful init()");
    res = ncclInternalError;
    goto out;
  }
  *ndev = g_ndev;
out:
  pthread_mutex_unlock(&g_lock);
  return res;
}

ncclResult_t gdr_core_get_properties(int dev, struct gdr_props *props) {
  ncclResult_t res = ncclSuccess;
  const struct gdr_transport *tp;
  int ndev;
  pthread_mutex_lock(&g_lock);
  tp = g_tp;
  ndev = g_ndev;
  pthread_mutex_unlock(&g_lock);
  if (tp == NULL || dev < 0 || dev >= ndev) {
    GDR_WARN("getProperties: device %d does not exist (%d device(s))", dev, ndev);
    res = ncclInvalidArgument;
    goto out;
  }
  memset(props, 0, sizeof(*props));
  GDR_CHECK(tp->get_properties(dev, props));
out:
  return res;
}

void gdr_core_fini(void) {
  pthread_mutex_lock(&g_lock);
  gdr_stats_stop(); /* the last file, with the devices' counters, before the transport forgets them */
  if (g_tp != NULL) {
    if (g_tp->quiesce) g_tp->quiesce();
    if (g_tp->fini) g_tp->fini();
  }
  gdr_linger_drain();
  g_tp = NULL;
  g_ndev = 0;
  g_ncomms = 0;
  gdr_params_reset();
  pthread_mutex_unlock(&g_lock);
}

void gdr_core_unload(void) {
  pthread_mutex_lock(&g_lock);
  int idle = g_ncomms == 0;
  pthread_mutex_unlock(&g_lock);
  if (idle) gdr_core_fini();
}

/* Used by core_connect.c: the transport and device count under the lock's protection (caller holds it). */
const struct gdr_transport *gdr_core_transport_locked(int *ndev) {
  *ndev = g_ndev;
  return g_tp;
}
