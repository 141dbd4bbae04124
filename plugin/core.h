/* The core: implements the ncclNet semantics once, over the internal transport interface (transport.h), for the
 * per-version adapters (plugin/api/v6.c .. v12.c). Split by lifecycle like NCCL's IB transport:
 *   core_state.c    the process-wide state and the core lock (transport, comm accounting, contexts, fused devices)
 *   core_init.c     init, devices, properties, transport choice, quiesce/fini
 *   core_ctx.c      v11+ per-communicator contexts (init/finalize, setNetAttr), fused devices (makeVDevice)
 *   core_connect.c  listen, connect, accept, close
 *   core_p2p.c      registration, isend/irecv/iflush/test, profiler events
 * They call down only: core_ctx.c -> core_connect.c -> core_init.c -> core_state.c (and core_connect.c ->
 * core_p2p.c for the requests of a closing comm).
 *
 * Every comm, request and memory handle NCCL sees is a core object wrapping the transport's. The core chooses a
 * connection's transport once (c->tp, at connect/accept; per connection for mixed pairs) and never changes it. The
 * move of a live RDMA connection to TCP and back is the RDMA transport's own (rdma/fallback.c): its comm stays the
 * object the core wraps and carries a TCP comm of the TCP transport inside it, reached through one seam
 * (rdma/fb_tcp.h), so NCCL's handles never change. */
#ifndef GDRNET_CORE_H
#define GDRNET_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "gdrnet/net_common.h"
#include "pool.h"
#include "transport.h"

#define GDR_COMM_LISTEN 0x4c524447u /* "GDRL" */
#define GDR_COMM_SEND 0x53524447u   /* "GDRS" */
#define GDR_COMM_RECV 0x52524447u   /* "GDRR" */
#define GDR_MR_MAGIC 0x4d524447u    /* "GDRM" */

#define GDR_CTX_MAGIC 0x58524447u /* "GDRX" */

/* A fused device (makeVDevice): NCCL's device index = physical count + its index in the core's table. */
#define GDR_MAX_VDEVS 32
#define GDR_VDEV_NAME_MAX (GDR_MAX_FUSED * 81)
struct gdr_vdev {
  int ndevs;
  int devs[GDR_MAX_FUSED];
  char name[GDR_VDEV_NAME_MAX]; /* "vemu0+vemu1": the physical names joined with '+' (stable: a topology key) */
  int said_first;               /* the "runs on its first device" INFO was printed */
};

struct gdr_comm;

/* setNetAttr's hints (ncclNetAttr_v11/v12), -1 = undefined. */
struct gdr_net_attr {
  int32_t send_max_peers, send_min_peers, send_max_flows, send_min_flows;
  int32_t recv_max_peers, recv_min_peers, recv_max_flows, recv_min_flows;
  uint32_t op, algo, proto;
};

/* A v11+ communicator's context (init(ctx, commId, config, ...) .. finalize(ctx)); v6..v10 have none (NULL). Every
 * field under the core lock. */
struct gdr_ctx {
  uint32_t magic; /* GDR_CTX_MAGIC while live */
  int abi;        /* table version that created it (11, 12) */
  uint64_t comm_id;
  int traffic_class; /* -1 undefined */
  ncclProfilerCallback_t profiler;
  struct gdr_net_attr attr;
  int attr_logged;        /* the "hints not used" INFO line was printed */
  struct gdr_comm *comms; /* its open comms (listen, send, recv), for finalize */
  int ncomms;
  struct gdr_ctx *next; /* the live contexts (core_state.c): a pointer is checked against them, never read */
};

struct gdr_comm {
  uint32_t magic; /* GDR_COMM_* while open; 0 once claimed for closing */
  uint32_t kind;  /* GDR_COMM_*, for good */
  int dev;        /* NCCL's device (may be a fused one) */
  const struct gdr_transport *tp;
  void *tcomm;
  int max_recvs;
  size_t max_bytes;                /* largest isend/irecv (the device's max_p2p_bytes) */
  ncclProfilerCallback_t profiler; /* NULL: no events */
  uint32_t profiler_id;            /* NCCL_PROFILER_NET_TYPE_* | descriptor version */
  struct gdr_conn_opts opts;       /* what it was asked for (a recv comm: its listen comm's) */
  struct gdr_ctx *ctx;             /* v11+: owner; NULL for v6..v10 */
  struct gdr_comm *ctx_prev, *ctx_next;
  struct gdr_pool reqs;    /* struct gdr_request; send/recv comms only */
  struct gdr_connstat *cs; /* per-connection state (connstat.h) from the first isend/irecv; NULL before or if none */
  int cs_tried;            /* gdr_connstat_open was called (once: out of memory leaves the comm untracked) */
};

enum { GDR_REQ_SEND = 1, GDR_REQ_RECV = 2, GDR_REQ_FLUSH = 3, GDR_REQ_FAILED = 4 };

#define GDR_REQ_MAGIC 0x51524447u /* "GDRQ" */

/* Wraps a transport request (the seam that lets a connection change transport). Taken from the comm's pool only
 * once the transport has accepted the operation, every field set (no zeroing), freed by index (by test(), when it
 * reports done or an error).
 *
 * One behaviour for a connection that failed (the peer closed or died, a fault was not recovered), whatever the
 * transport: isend and irecv keep returning requests (GDR_REQ_FAILED, no transport request behind them) and their
 * test() returns the connection's error; NCCL learns it from test, as it does for requests already in flight. */
struct gdr_request {
  uint32_t magic; /* GDR_REQ_MAGIC while outstanding */
  int kind;       /* GDR_REQ_* */
  int n;          /* receives in the group */
  int idx;        /* in comm->reqs */
  struct gdr_comm *comm;
  void *treq;              /* NULL for GDR_REQ_FAILED */
  ncclResult_t error;      /* GDR_REQ_FAILED: what test() returns */
  int nev;                 /* profiler events started (0 without a profiler or phandles, and for GDR_REQ_FAILED) */
  void *ev[GDR_MAX_RECVS]; /* their eHandles; NULL where NCCL's profiler took none */
};

struct gdr_mr {
  uint32_t magic;
  const struct gdr_transport *tp;
  void *tmr;
  void *data;
  size_t size;
  int type;
};

/* core_state.c: the process-wide state, every call but gdr_core_lock/unlock and gdr_core_transport under the core
 * lock (set-up and teardown only, never the data path). */
/* The core's lock, held around connection set-up and teardown (service thread work, never the data path). */
void gdr_core_lock(void);
void gdr_core_unlock(void);
/* The transport chosen at init, or NULL before. */
const struct gdr_transport *gdr_core_transport(void);
/* Same, for callers holding the core lock; *ndev gets the physical device count. */
const struct gdr_transport *gdr_core_transport_locked(int *ndev);
/* init's choice: the transport and its physical device count. */
void gdr_core_set_transport_locked(const struct gdr_transport *tp, int ndev);
/* Devices NCCL sees (physical + fused); ncclInternalError before init. */
ncclResult_t gdr_core_devices_locked(int *ndev);
/* A v6..v10 init happened (no finalize will come for it); profiler: v10's callback, kept unless NULL. */
void gdr_core_legacy_init_locked(ncclProfilerCallback_t profiler);
/* The process-wide v10 profiler (NULL when none). */
ncclProfilerCallback_t gdr_core_profiler_locked(void);
/* fini: forgets the transport, the comm count, the v6..v10 init, the profiler and the fused devices. */
void gdr_core_state_reset_locked(void);
/* Comm accounting: a comm of a v11+ context is linked into it when opened, and detached from it when claimed for
 * closing; when the last comm of the process has closed, the transport is told to stop its threads. */
void gdr_core_comm_opened(struct gdr_comm *c);
void gdr_core_comm_detach_locked(struct gdr_comm *c);
void gdr_core_comm_closed(const struct gdr_transport *tp);
/* Open comms of every kind. */
int gdr_core_ncomms_locked(void);
/* Nothing needs the loaded state once no v11+ context is left (no comm open, no v6..v10 init, which gets no
 * finalize). */
int gdr_core_idle_locked(void);
/* The context of an ABI call, or NULL with a WARN if ctx is not a live one of ours (it is looked up among the live
 * contexts, so a finalized or foreign pointer is never dereferenced). */
struct gdr_ctx *gdr_core_ctx_check(void *ctx, const char *what);
/* Adds a context to the live ones; returns how many are live now. */
int gdr_core_ctx_link_locked(struct gdr_ctx *x);
/* Removes a live context. */
void gdr_core_ctx_unlink_locked(struct gdr_ctx *x);
/* Live v11+ contexts. */
int gdr_core_nctx_locked(void);
/* Fused device v (dev - physical count), or NULL. */
struct gdr_vdev *gdr_core_vdev_locked(int v);
/* The index of the fused device over exactly these devices, or -1. */
int gdr_core_vdev_find_locked(int ndevs, const int *devs);
/* Fused devices made so far (at most GDR_MAX_VDEVS). */
int gdr_core_nvdevs_locked(void);
/* Keeps a copy of v as the next fused device: its index, or -1 when GDR_MAX_VDEVS are made already. */
int gdr_core_vdev_add_locked(const struct gdr_vdev *v);

/* core_init.c */
/* v6..v10 init: once per process (NCCL may call it again: later calls only log). abi: the table NCCL called
 * (6..10), for the log; profiler: v10's callback or NULL. */
ncclResult_t gdr_core_init_table(ncclDebugLogger_t logger, int abi, ncclProfilerCallback_t profiler);
/* The same for a caller that is no table (unit tests): as v8. */
ncclResult_t gdr_core_init(ncclDebugLogger_t logger);
/* Physical devices plus the fused ones made so far. */
ncclResult_t gdr_core_devices(int *ndev);
/* Any device NCCL sees, fused ones included; the vdev_* and v11/v12 fields are filled. */
ncclResult_t gdr_core_get_properties(int dev, struct gdr_props *props);
/* Forgets the chosen transport and the parsed knobs; the next init starts from scratch. For tests; NCCL never
 * calls it (a v8 plugin has no finalize: it is dlclosed). */
void gdr_core_fini(void);
/* gdr_core_fini() when no comm is open (library unload); otherwise only the stats writer thread stops: other threads
 * may still be inside (the threads that serve open comms keep the library pinned, transport.h). */
void gdr_core_unload(void);
/* Under the core lock: what it takes to connect on NCCL's device dev: its properties and its physical devices
 * (opts->ndevs capped at the transport's max_fused, saying so once per fused device). ncclInvalidArgument for a
 * device that does not exist. */
ncclResult_t gdr_core_resolve_locked(int dev, struct gdr_props *props, struct gdr_conn_opts *opts);
/* Under the core lock: a physical device's properties, the core's fields filled. */
ncclResult_t gdr_core_phys_props_locked(int dev, struct gdr_props *props);
/* Under the core lock: the knobs and the transport, loaded once (until a fini). */
ncclResult_t gdr_core_load_locked(void);
/* Under the core lock: gdr_core_fini's work. */
void gdr_core_fini_locked(void);

/* core_ctx.c */
/* v11+ init: one context per communicator over the process-wide state (reference-counted: the first one loads
 * the knobs and chooses the transport). traffic_class: the config's (-1 undefined). */
ncclResult_t gdr_core_ctx_init(void **ctx, uint64_t comm_id, int traffic_class, ncclDebugLogger_t logger,
                               ncclProfilerCallback_t profiler, int abi);
/* Closes what the communicator still holds (comms NCCL did not close: abort paths) and frees the context; the last
 * one stops every thread and forgets the devices (NCCL >= 2.28 dlcloses the plugin next). */
ncclResult_t gdr_core_ctx_finalize(void *ctx);
/* Records the hints; those that map to something (the receive side's flows per peer: the data streams of the TCP
 * connections the context's listens accept later) are used, the rest said once at INFO. attr may be NULL. */
ncclResult_t gdr_core_set_net_attr(void *ctx, const struct gdr_net_attr *attr);
/* A fused device over ndevs (1..max_devs) distinct physical devices; *d is its index (the same index for the
 * same list: NCCL asks again for every communicator). ndevs 1 gives the physical device itself. */
ncclResult_t gdr_core_make_vdevice(int *d, int ndevs, const int *devs, int max_devs);

/* core_connect.c */
/* ctx: NULL (v6..v10) or a v11+ context. connect's traffic_class: v10's config value, -1 for the context's. */
ncclResult_t gdr_core_listen(void *ctx, int dev, void *handle, void **listen_comm);
ncclResult_t gdr_core_connect(void *ctx, int dev, int traffic_class, void *handle, void **send_comm);
ncclResult_t gdr_core_accept(void *listen_comm, void **recv_comm);
/* Closes a comm claimed under the core lock (magic 0, detached from its context), without the lock held: the
 * transport's close, then the accounting under the lock (finalize of its context uses it too). */
ncclResult_t gdr_core_close_claimed(struct gdr_comm *c);
ncclResult_t gdr_core_close_send(void *send_comm);
ncclResult_t gdr_core_close_recv(void *recv_comm);
/* The receives of this comm stand posted whether or not anything is expected (GIN's message path: a one-sided
 * target expects nothing): the stall detector does not count them as waiting (connstat.h, standing). Its thread. */
void gdr_core_recv_standing(void *recv_comm);
ncclResult_t gdr_core_close_listen(void *listen_comm);

/* core_p2p.c */
/* type flag of gdr_core_reg_mr for internal users (the GIN core): device memory (NCCL_PTR_CUDA | GDR_PTR_STAGED) that a
 * host-only transport may stage through host buffers (transport.h reg_mr_staged); NCCL never passes it. */
#define GDR_PTR_STAGED 0x100
ncclResult_t gdr_core_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t gdr_core_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                    void **mhandle);
ncclResult_t gdr_core_dereg_mr(void *comm, void *mhandle);
/* phandle(s): v10+ profiler parents (NULL: no events); an event starts for each non-NULL one once the transport
 * accepted the operation, and stops when test reports it done or failed. */
ncclResult_t gdr_core_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void *phandle,
                            void **request);
ncclResult_t gdr_core_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                            void **phandles, void **request);
ncclResult_t gdr_core_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request);
/* A send/recv comm closes, maybe with requests outstanding (a peer died, an abort): their profiler events stop, and
 * its per-connection state (connstat.h) is released, before the transport's close. */
void gdr_core_requests_close(struct gdr_comm *c);
/* sizes: NULL or GDR_MAX_RECVS entries, meaningful only once *done (the transport writes them directly); *n (may be
 * NULL) gets how many were filled (1 for a send, the group size for a receive, 0 for a flush). */
ncclResult_t gdr_core_test(void *request, int *done, size_t *sizes, int *n);

#endif /* GDRNET_CORE_H */
