/* The core's process-wide state and its lock: the transport chosen at init and its device count, the open comms
 * (for quiesce and finalize), the live v11+ contexts, the fused devices and the v10 profiler. The bottom of the
 * core: core_init.c, core_ctx.c and core_connect.c read and change the state only through these calls, and this
 * file calls none of them.
 *
 * Global because NCCL's plugin ABI is a set of free functions. Every field is protected by g_lock, which only
 * init and the set-up/teardown paths take (the data path never does); a function named *_locked expects its caller
 * to hold it. */
#include <pthread.h>
#include <string.h>

#include "core.h"
#include "log.h"
#include "sock.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct gdr_transport *g_tp;       /* chosen transport, NULL before a successful init */
static int g_ndev;                             /* physical devices of g_tp */
static int g_ncomms;                           /* open comms of every kind, for quiesce */
static int g_legacy;                           /* a v6..v10 init (no finalize will come) happened since the last fini */
static ncclProfilerCallback_t g_profiler;      /* v10's, process-wide (v11+ contexts carry their own) */
static int g_nctx;                             /* live contexts */
static struct gdr_ctx *g_ctxs;                 /* ... in a list */
static struct gdr_vdev g_vdevs[GDR_MAX_VDEVS]; /* fused devices, in creation order */
static int g_nvdevs;

void gdr_core_lock(void) { pthread_mutex_lock(&g_lock); }
void gdr_core_unlock(void) { pthread_mutex_unlock(&g_lock); }

/* ----------------------------------------------------------------------------------------------- transport -- */

const struct gdr_transport *gdr_core_transport(void) {
  const struct gdr_transport *tp;
  pthread_mutex_lock(&g_lock);
  tp = g_tp;
  pthread_mutex_unlock(&g_lock);
  return tp;
}

const struct gdr_transport *gdr_core_transport_locked(int *ndev) {
  *ndev = g_ndev;
  return g_tp;
}

void gdr_core_set_transport_locked(const struct gdr_transport *tp, int ndev) {
  g_tp = tp;
  g_ndev = ndev;
}

ncclResult_t gdr_core_devices_locked(int *ndev) {
  *ndev = 0;
  if (g_tp == NULL) return ncclInternalError;
  *ndev = g_ndev + g_nvdevs;
  return ncclSuccess;
}

void gdr_core_legacy_init_locked(ncclProfilerCallback_t profiler) {
  g_legacy = 1;
  if (profiler != NULL) g_profiler = profiler;
}

ncclProfilerCallback_t gdr_core_profiler_locked(void) { return g_profiler; }

void gdr_core_state_reset_locked(void) {
  g_tp = NULL;
  g_ndev = 0;
  g_ncomms = 0;
  g_legacy = 0;
  g_profiler = NULL;
  memset(g_vdevs, 0, sizeof(g_vdevs));
  g_nvdevs = 0;
}

/* --------------------------------------------------------------------------------------------------- comms -- */

void gdr_core_comm_opened(struct gdr_comm *c) {
  struct gdr_ctx *x = c->ctx;
  g_ncomms++;
  if (x == NULL) return;
  c->ctx_prev = NULL;
  c->ctx_next = x->comms;
  if (x->comms != NULL) x->comms->ctx_prev = c;
  x->comms = c;
  x->ncomms++;
}

void gdr_core_comm_detach_locked(struct gdr_comm *c) {
  struct gdr_ctx *x = c->ctx;
  if (x == NULL) return;
  if (c->ctx_prev != NULL)
    c->ctx_prev->ctx_next = c->ctx_next;
  else
    x->comms = c->ctx_next;
  if (c->ctx_next != NULL) c->ctx_next->ctx_prev = c->ctx_prev;
  c->ctx_prev = c->ctx_next = NULL;
  c->ctx = NULL;
  x->ncomms--;
}

void gdr_core_comm_closed(const struct gdr_transport *tp) {
  if (g_ncomms > 0) g_ncomms--;
  if (g_ncomms > 0) return;
  if (tp != NULL && tp->quiesce != NULL) tp->quiesce();
  gdr_linger_drain(); /* streams still delivering a closed comm's last bytes: done before NCCL may unload us */
}

int gdr_core_ncomms_locked(void) { return g_ncomms; }

int gdr_core_idle_locked(void) { return g_ncomms == 0 && !g_legacy; }

/* ------------------------------------------------------------------------------------------------ contexts -- */

struct gdr_ctx *gdr_core_ctx_check(void *ctx, const char *what) {
  struct gdr_ctx *x = g_ctxs;
  while (x != NULL && (void *)x != ctx) x = x->next;
  if (x == NULL || x->magic != GDR_CTX_MAGIC) {
    GDR_WARN("%s: %p is not a context this plugin's init() returned (or it was finalized)", what, ctx);
    return NULL;
  }
  return x;
}

int gdr_core_ctx_link_locked(struct gdr_ctx *x) {
  x->next = g_ctxs;
  g_ctxs = x;
  return ++g_nctx;
}

void gdr_core_ctx_unlink_locked(struct gdr_ctx *x) {
  for (struct gdr_ctx **pp = &g_ctxs; *pp != NULL; pp = &(*pp)->next)
    if (*pp == x) {
      *pp = x->next;
      g_nctx--;
      return;
    }
}

int gdr_core_nctx_locked(void) { return g_nctx; }

/* ------------------------------------------------------------------------------------------- fused devices -- */

struct gdr_vdev *gdr_core_vdev_locked(int v) {
  return v >= 0 && v < g_nvdevs ? &g_vdevs[v] : NULL;
}

int gdr_core_vdev_find_locked(int ndevs, const int *devs) {
  for (int k = 0; k < g_nvdevs; k++)
    if (g_vdevs[k].ndevs == ndevs && memcmp(g_vdevs[k].devs, devs, (size_t)ndevs * sizeof(int)) == 0) return k;
  return -1;
}

int gdr_core_nvdevs_locked(void) { return g_nvdevs; }

int gdr_core_vdev_add_locked(const struct gdr_vdev *v) {
  if (g_nvdevs == GDR_MAX_VDEVS) return -1;
  g_vdevs[g_nvdevs] = *v;
  return g_nvdevs++;
}
