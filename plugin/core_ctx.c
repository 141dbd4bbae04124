/* v11+ per-communicator contexts and fused devices.
 *
 * Contexts: NCCL >= 2.28 calls init(ctx, commId, config, ...) once per communicator and finalize(ctx) when it is
 * destroyed, then dlcloses the plugin after the last one. The process-wide state (knobs, transport, devices) is
 * loaded by the first context and forgotten with the last (core_state.c counts the live ones); each context
 * remembers its traffic class, profiler callback and setNetAttr hints, and the comms opened through it, so that
 * finalize can release what an aborted communicator left open (its helper threads would otherwise outlive the
 * dlclose).
 *
 * Fused devices (makeVDevice, v9+): NCCL merges NICs (NCCL_NET_MERGE_LEVEL) into one device index. They are made
 * here and kept in core_state.c's table; core_init.c turns an entry into properties and connection options. Same
 * list, same index: v11+ NCCL builds its topology (and asks again) for every communicator.
 *
 * Everything under the core lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "log.h"

/* ------------------------------------------------------------------------------------------------ contexts -- */

ncclResult_t gdr_core_ctx_init(void **ctx, uint64_t comm_id, int traffic_class, ncclDebugLogger_t logger,
                               ncclProfilerCallback_t profiler, int abi) {
  ncclResult_t res = ncclSuccess;
  struct gdr_ctx *x = NULL;
  int ndev = 0, nctx = 0;

  if (ctx == NULL) {
    GDR_WARN("ncclNetPlugin_v%d init: NULL context pointer", abi);
    return ncclInternalError;
  }
  *ctx = NULL;
  gdr_log_init(logger);
  if (traffic_class < -1 || traffic_class > 255) {
    GDR_WARN("ncclNetPlugin_v%d init: communicator 0x%llx asks traffic class %d (0..255, or -1 undefined): "
             "ignored",
             abi, (unsigned long long)comm_id, traffic_class);
    traffic_class = -1;
  }
  x = calloc(1, sizeof(*x));
  if (x == NULL) {
    GDR_WARN("init: out of memory for a communicator context");
    return ncclSystemError;
  }
  x->magic = GDR_CTX_MAGIC;
  x->abi = abi;
  x->comm_id = comm_id;
  x->traffic_class = traffic_class;
  x->profiler = profiler;
  memset(&x->attr, 0xff, sizeof(x->attr)); /* every hint undefined (-1) */
  gdr_core_lock();
  res = gdr_core_load_locked();
  if (res == ncclSuccess) {
    nctx = gdr_core_ctx_link_locked(x);
    (void)gdr_core_devices_locked(&ndev);
    GDR_INFO(NCCL_INIT | NCCL_NET,
             "NCCL called ncclNetPlugin_v%d: communicator 0x%llx, context %p, trafficClass %d%s, profiler %s; %d "
             "context(s) open, %d device(s)",
             abi, (unsigned long long)comm_id, (void *)x, traffic_class, traffic_class < 0 ? " (undefined)" : "",
             profiler != NULL ? "given" : "none", nctx, ndev);
  }
  gdr_core_unlock();
  if (res != ncclSuccess) {
    x->magic = 0;
    free(x);
    return res;
  }
  *ctx = x;
  return ncclSuccess;
}

ncclResult_t gdr_core_ctx_finalize(void *ctx) {
  ncclResult_t res = ncclSuccess;
  struct gdr_ctx *x;
  struct gdr_comm *left_open = NULL;
  uint64_t comm_id;
  int nopen, left;

  /* NCCL 2.28 finalizes the context of an init that failed (and so returned none): nothing to do, nothing to warn
   * about (the init's WARN said why) */
  if (ctx == NULL) {
    GDR_INFO(NCCL_INIT | NCCL_NET, "finalize of no context (an init that failed): nothing to do");
    return ncclSuccess;
  }
  gdr_core_lock();
  x = gdr_core_ctx_check(ctx, "finalize");
  if (x == NULL) {
    gdr_core_unlock();
    return ncclInternalError;
  }
  /* claim what the communicator left open (as a close would, one by one), then close it without the lock */
  nopen = x->ncomms;
  while (x->comms != NULL) {
    struct gdr_comm *c = x->comms;
    c->magic = 0;
    gdr_core_comm_detach_locked(c);
    c->ctx_next = left_open;
    left_open = c;
  }
  x->magic = 0;
  gdr_core_ctx_unlink_locked(x);
  comm_id = x->comm_id;
  free(x);
  gdr_core_unlock();

  if (left_open != NULL)
    GDR_INFO(NCCL_INIT | NCCL_NET, "finalize of communicator 0x%llx closes the %d comm(s) it left open",
             (unsigned long long)comm_id, nopen);
  while (left_open != NULL) {
    struct gdr_comm *c = left_open;
    left_open = c->ctx_next;
    c->ctx_next = NULL;
    ncclResult_t r = gdr_core_close_claimed(c);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }

  gdr_core_lock();
  left = gdr_core_nctx_locked();
  int last = left == 0 && gdr_core_idle_locked();
  GDR_INFO(NCCL_INIT | NCCL_NET, "finalize: communicator 0x%llx (context %p) done; %d context(s) left%s",
           (unsigned long long)comm_id, ctx, left, last ? ": every thread stopped, devices released" : "");
  if (last) gdr_core_fini_locked();
  gdr_core_unlock();
  return res;
}

ncclResult_t gdr_core_set_net_attr(void *ctx, const struct gdr_net_attr *a) {
  ncclResult_t res = ncclSuccess;
  struct gdr_ctx *x;

  gdr_core_lock();
  x = gdr_core_ctx_check(ctx, "setNetAttr");
  if (x == NULL) {
    res = ncclInternalError;
    goto out;
  }
  if (a == NULL) goto out;
  x->attr = *a;
  if (!x->attr_logged) {
    /* flows per peer bound the data streams of the TCP connections the communicator's listens accept later */
    int nphys = 0;
    const struct gdr_transport *tp = gdr_core_transport_locked(&nphys);
    int tcp = tp != NULL && tp->id == GDR_TP_TCP;
    x->attr_logged = 1;
    GDR_INFO(NCCL_INIT | NCCL_NET,
             "setNetAttr (communicator 0x%llx): flows per peer (recv %d..%d) %s; the other hints (send flows "
             "%d..%d, concurrent peers send %d..%d recv %d..%d, op %d, algo %d, proto %d) have no counterpart in "
             "this plugin and are not used (said once per communicator)",
             (unsigned long long)x->comm_id, a->recv_min_flows, a->recv_max_flows,
             tcp ? "bound the data streams of the connections its listens accept from now on"
                 : "are not used either: the RDMA transport's QPs per connection follow GDRNET_QPS_PER_CONN",
             a->send_min_flows, a->send_max_flows, a->send_min_peers, a->send_max_peers, a->recv_min_peers,
             a->recv_max_peers, (int)a->op, (int)a->algo, (int)a->proto);
  }
out:
  gdr_core_unlock();
  return res;
}

/* ---------------------------------------------------------------------------------------------- fused devices -- */

ncclResult_t gdr_core_make_vdevice(int *d, int ndevs, const int *devs, int max_devs) {
  ncclResult_t res = ncclSuccess;
  int nphys = 0, ntotal = 0;
  struct gdr_vdev v;
  size_t off = 0;
  int k;

  gdr_core_lock();
  if (gdr_core_transport_locked(&nphys) == NULL) {
    GDR_WARN("makeVDevice called before a successful init()");
    res = ncclInternalError;
    goto out;
  }
  if (d == NULL || devs == NULL || ndevs < 1 || ndevs > max_devs || ndevs > GDR_MAX_FUSED) {
    GDR_WARN("makeVDevice: %d devices (1..%d)", ndevs, max_devs < GDR_MAX_FUSED ? max_devs : GDR_MAX_FUSED);
    res = ncclInvalidArgument;
    goto out;
  }
  for (int i = 0; i < ndevs; i++) {
    if (devs[i] < 0 || devs[i] >= nphys) {
      GDR_WARN("makeVDevice: device %d is not a physical device (0..%d)", devs[i], nphys - 1);
      res = ncclInvalidArgument;
      goto out;
    }
    for (int j = 0; j < i; j++)
      if (devs[j] == devs[i]) {
        GDR_WARN("makeVDevice: device %d listed twice", devs[i]);
        res = ncclInvalidArgument;
        goto out;
      }
  }
  if (ndevs == 1) { /* a device of one is the device */
    *d = devs[0];
    goto out;
  }
  k = gdr_core_vdev_find_locked(ndevs, devs);
  if (k >= 0) {
    *d = nphys + k;
    goto out;
  }
  if (gdr_core_nvdevs_locked() == GDR_MAX_VDEVS) {
    GDR_WARN("makeVDevice: %d fused devices made already (the most this plugin keeps)", GDR_MAX_VDEVS);
    res = ncclInternalError;
    goto out;
  }
  memset(&v, 0, sizeof(v));
  v.ndevs = ndevs;
  memcpy(v.devs, devs, (size_t)ndevs * sizeof(int));
  for (int i = 0; i < ndevs; i++) {
    struct gdr_props p;
    if (gdr_core_phys_props_locked(devs[i], &p) != ncclSuccess || p.name == NULL) {
      GDR_WARN("makeVDevice: no properties for device %d", devs[i]);
      res = ncclInternalError;
      goto out;
    }
    off += (size_t)snprintf(v.name + off, sizeof(v.name) - off, "%s%s", i ? "+" : "", p.name);
    if (off >= sizeof(v.name)) off = sizeof(v.name) - 1;
  }
  k = gdr_core_vdev_add_locked(&v); /* not full: checked above, under the same lock */
  *d = nphys + k;
  ntotal = nphys + gdr_core_nvdevs_locked();
  GDR_INFO(NCCL_INIT | NCCL_NET, "made fused device [%d] %s over %d devices (%d device(s) now)", *d, v.name, ndevs,
           ntotal);
out:
  gdr_core_unlock();
  return res;
}
