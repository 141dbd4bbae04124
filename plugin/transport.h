/* The internal transport interface. The core (core_*.c) implements the ncclNet ABI once and dispatches to one
 * of these; the TCP transport (plugin/tcp/, gdr_transport_tcp) and the RDMA transport (plugin/rdma/,
 * gdr_transport_rdma, built only when GDRNET_HAVE_RDMA is defined) implement it.
 *
 * It mirrors the ncclNet table with the version differences taken out: sizes are size_t, properties are the
 * union of every ABI version's fields (the plugin/api/vN.c adapters convert), there are no device handles. What the
 * newer versions add to a connection (the fused device's physical devices, the communicator's traffic class, the
 * setNetAttr hints) reaches listen/connect as struct gdr_conn_opts; per-communicator contexts, profiler events
 * and fused-device bookkeeping stay in the core.
 *
 * The core wraps every comm, request and memory handle a transport returns (struct gdr_comm / gdr_request /
 * gdr_mr in core.h) so that a connection can later move to another transport under NCCL's feet (RDMA -> TCP
 * fallback); a transport never sees the core's objects.
 *
 * Threading (as NCCL drives the plugin, docs/abi.md): init/devices/get_properties on the application thread;
 * listen/connect/accept/reg_mr/dereg_mr/close_* on NCCL's service thread; isend/irecv/iflush/test on its progress
 * thread. Several comms and GPUs of one process share the transport: global state needs a lock. One comm is used
 * by one thread at a time for the data path.
 *
 * Contracts every transport keeps:
 *   - connect/accept never block: *comm = NULL means "call again" (state lives in the handle / listen comm).
 *   - isend/irecv never block: *request = NULL means "try again later" (no credit, no free request, no CTS).
 *   - at least NCCL_NET_MAX_REQUESTS (32) requests in flight per comm (x max_recvs on send comms).
 *   - test frees the request when it reports done; sizes[i] = bytes actually received (the sent size).
 *   - a send larger than the posted receive fails (ncclInvalidUsage) with a WARN naming both sizes on both sides.
 *   - a dead peer becomes an error from test within a bounded time, never a hang.
 *   - iflush may return *request = NULL: nothing to wait for.
 *   - quiesce(): no comm is left in the process (NCCL may dlclose the plugin right after): stop and join every
 *     thread the transport started; later listen/connect must work again (restart lazily).
 */
#ifndef GDRNET_TRANSPORT_H
#define GDRNET_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "gdrnet/net_v8.h"
#include "sock.h"

/* Unload safety (core_init.c): every part of the plugin that starts a thread calls gdr_core_pin() before it runs
 * and gdr_core_unpin() once it is joined. While any is pinned the library holds a reference on itself, so that
 * NCCL's dlclose of a plugin with comms still open (an abort path that skipped a close) cannot unmap code those
 * threads run; the library stays loaded, with its state, until they end (a later dlopen finds it as it was). */
void gdr_core_pin(void);
void gdr_core_unpin(void);
int gdr_core_pins(void); /* thread groups pinning the library now (tests) */

#define GDR_MAX_RECVS 8 /* largest grouped receive any transport may announce (as NCCL's IB transport: 8) */
#define GDR_MAX_FUSED 8 /* physical devices of one fused device (makeVDevice): v12's 8 (v9..v11: 4) */

/* Device properties: every field of ncclNetProperties v8..v12. Strings are owned by the transport and live until
 * its fini(). */
struct gdr_props {
  const char *name;     /* unique, stable: a key in NCCL's topology */
  const char *pci_path; /* realpath of the NIC's PCI device in sysfs, or NULL */
  uint64_t guid;
  int ptr_support; /* NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF */
  int reg_is_global;
  int force_flush; /* v9+ */
  int speed;       /* Mbps */
  int port;
  float latency; /* us, 0 = NCCL default */
  int max_comms;
  int max_recvs;
  int net_device_type; /* NCCL_NET_DEVICE_HOST */
  int net_device_version;
  size_t max_p2p_bytes;  /* v9+: largest isend/irecv; the core refuses bigger ones */
  size_t max_coll_bytes; /* v9+ */
  /* filled by the core (a transport leaves them zero): */
  int vdev_ndevs; /* v9+ vProps: the physical devices behind this device (1: itself) */
  int vdev_devs[GDR_MAX_FUSED];
  int max_multi_request_size; /* v11+ */
  int rail_id, plane_id;      /* v12, -1 = unknown */
};

/* What a connection is asked for beyond its device, filled by the core from the ABI version's arguments.
 *   - ndevs/devs: the physical devices of NCCL's device; devs[0] is the `dev` argument. ndevs > 1 only for a fused
 *     device (makeVDevice) and only up to the transport's max_fused: the transport stripes the connection's traffic
 *     over them. A transport with max_fused 1 always gets ndevs 1 (the core says so once per fused device).
 *   - traffic_class: the communicator's (v10 connect config, v11+ init config), -1 undefined. Its knobs may take
 *     precedence (RDMA: GDRNET_IB_TC/NCCL_IB_TC when set, as NCCL's IB transport).
 *   - min_flows/max_flows: listen only: setNetAttr's receive-side flows per peer (the streams of the connections
 *     it accepts), -1 undefined. */
struct gdr_conn_opts {
  int ndevs;
  int devs[GDR_MAX_FUSED];
  int traffic_class;
  int min_flows, max_flows;
  uint32_t caps; /* GDR_CAP_* this process announces in its handles and HELLOs; 0: the transport's own
                  * (gdr_caps_local): an RDMA process's nested TCP connections announce the RDMA process's */
};
/* A connection on one physical device with nothing else asked (tests, tools). */
static inline struct gdr_conn_opts gdr_conn_opts_one(int dev) {
  struct gdr_conn_opts o = {1, {dev}, -1, -1, -1, 0};
  return o;
}

/* A connection as its transport sees it now (describe, below): for the stall detector and the stats file
 * (connstat.h). -1: not known. */
enum {
  GDR_CONN_UNKNOWN = 0,
  GDR_CONN_RDMA,
  GDR_CONN_RECOVERING,
  GDR_CONN_MOVED_TCP,
  GDR_CONN_TCP,
  GDR_CONN_TCP_ONLY,
  GDR_CONN_FAILED
};
struct gdr_conn_desc {
  char peer[GDR_ADDR_STRLEN]; /* the peer's address ("10.0.0.2:43121") */
  int peer_rank;              /* its launcher's rank (RANK, SLURM_PROCID, ...) or GIN rank; -1: not known */
  char path[128];             /* what carries it: "vemu0 port 1, QP 0x12 0x13", "4 streams"; "" if not known now */
  int state;                  /* GDR_CONN_* */
  int peer_closed;            /* the peer's socket saw EOF, a reset or an error */
  int64_t peer_silent_ms;     /* since the last bytes from the peer on its control socket */
  int64_t unsent;             /* bytes this side queued on its sockets that the peer has not taken */
  int64_t recoveries, moves;  /* of this connection: recoveries in place, moves to TCP */
  char note[256];             /* anything else worth a line ("recovery attempt 2, first fault: ...") */
};

struct gdr_transport {
  const char *name; /* "tcp", "rdma" */
  uint8_t id;       /* GDR_TP_* (sock.h): goes into handles and hellos */

  /* Finds and opens devices. Success means usable with *ndev >= 1. On failure, or ndev == 0, `why` says why in
   * one sentence for the user (e.g. "libibverbs.so.1 not found: dlopen: ..."). On success `why` may describe the
   * devices ("mlx5_0:1 (RoCE v2, GID 3), GDR via DMA-BUF"). Called once per core init, under the core's lock. */
  ncclResult_t (*init)(int *ndev, char *why, size_t whylen);
  ncclResult_t (*get_properties)(int dev, struct gdr_props *props);

  /* Physical devices one connection can stripe over (gdr_conn_opts.ndevs); 1 = no NIC fusion (yet). */
  int max_fused;

  /* handle: NCCL's 128-byte buffer. listen fills it (use gdr_listener_open + gdr_listener_handle). opts is never
   * NULL; dev == opts->devs[0]. The accepted recv comm inherits what its listen comm was asked for. */
  ncclResult_t (*listen)(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **listen_comm);
  ncclResult_t (*connect)(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **send_comm);
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm);

  /* comm: a send or recv comm of this transport. type: NCCL_PTR_HOST / NCCL_PTR_CUDA. reg_mr_dmabuf may be NULL
   * (the core then answers ncclInternalError: NCCL only calls it when ptr_support has NCCL_PTR_DMABUF). */
  ncclResult_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*dereg_mr)(void *comm, void *mhandle);
  /* Device memory that a host-only transport stages through pinned host buffers (the GIN core's windows over TCP:
   * NCCL itself never registers device memory with a transport whose ptr_support is HOST). NULL: the transport
   * registers device memory with reg_mr (RDMA). Freed with dereg_mr. */
  ncclResult_t (*reg_mr_staged)(void *comm, void *data, size_t size, void **mhandle);

  ncclResult_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request);
  /* n <= max_recvs of the device */
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request);
  /* sizes: NULL, or n entries for a receive (1 for a send). */
  ncclResult_t (*test)(void *request, int *done, size_t *sizes);

  ncclResult_t (*close_send)(void *send_comm);
  ncclResult_t (*close_recv)(void *recv_comm);
  ncclResult_t (*close_listen)(void *listen_comm);

  /* May be NULL. What the connection is now (peer, state, QPs or streams, the peer's socket): called from another
   * thread than the one driving comm, while comm is open (never during or after its close). Reads only what
   * connect/accept set, atomics and the kernel's socket state, and never waits for a lock of the connection (it
   * may try one). out comes zeroed with the -1 fields set; 0, or -1 if nothing could be said. */
  int (*describe)(void *comm, struct gdr_conn_desc *out);

  /* May be NULL. Bytes the connection has moved so far, counted as they go (each write or read of its streams), so
   * that a long message that is moving is not taken for a stall; NULL where only whole requests are seen. Called as
   * describe is: from another thread, while comm is open; an atomic read. */
  uint64_t (*moved)(void *comm);

  void (*quiesce)(void); /* may be NULL */
  void (*fini)(void);    /* forget the devices; init may follow (a new load or a re-init) */
};

/* GDRNET_HAVE_RDMA: defined by plugin/CMakeLists.txt unless configured with -DGDRNET_WITH_RDMA=OFF. */
extern const struct gdr_transport gdr_transport_tcp;
#ifdef GDRNET_HAVE_RDMA
extern const struct gdr_transport gdr_transport_rdma;
#endif

#endif /* GDRNET_TRANSPORT_H */
