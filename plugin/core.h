/* The core: implements the ncclNet semantics once, over the internal transport interface (transport.h), for the
 * per-version adapters (api_v8.c, later api_v9.c...). Split by lifecycle like NCCL's IB transport:
 *   core_init.c     init, devices, properties, transport choice, quiesce/fini
 *   core_connect.c  listen, connect, accept, close
 *   core_p2p.c      registration, isend/irecv/iflush/test
 *
 * Every comm, request and memory handle NCCL sees is a core object wrapping the transport's, so a connection can
 * later change transport (RDMA -> TCP fallback) without NCCL noticing: the wrapper keeps its address, the
 * transport pointer and transport object inside change. */
#ifndef GDRNET_CORE_H
#define GDRNET_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "gdrnet/net_v8.h"
#include "pool.h"
#include "transport.h"

#define GDR_COMM_LISTEN 0x4c524447u /* "GDRL" */
#define GDR_COMM_SEND 0x53524447u   /* "GDRS" */
#define GDR_COMM_RECV 0x52524447u   /* "GDRR" */
#define GDR_MR_MAGIC 0x4d524447u    /* "GDRM" */

struct gdr_comm {
  uint32_t magic; /* GDR_COMM_* */
  int dev;
  const struct gdr_transport *tp;
  void *tcomm;
  int max_recvs;
  struct gdr_pool reqs; /* struct gdr_request; send/recv comms only */
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
  void *treq;         /* NULL for GDR_REQ_FAILED */
  ncclResult_t error; /* GDR_REQ_FAILED: what test() returns */
};

struct gdr_mr {
  uint32_t magic;
  const struct gdr_transport *tp;
  void *tmr;
  void *data;
  size_t size;
  int type;
};

/* core_init.c */
ncclResult_t gdr_core_init(ncclDebugLogger_t logger);
ncclResult_t gdr_core_devices(int *ndev);
ncclResult_t gdr_core_get_properties(int dev, struct gdr_props *props);
/* Forgets the chosen transport and the parsed knobs; the next init starts from scratch. For tests; NCCL never
 * calls it (a v8 plugin has no finalize: it is dlclosed). */
void gdr_core_fini(void);
/* gdr_core_fini() when no comm is open (library unload); otherwise nothing: other threads may still be inside. */
void gdr_core_unload(void);
/* Comm accounting: when the last comm of the process closes, the transport is told to stop its threads. */
void gdr_core_comm_opened(void);
void gdr_core_comm_closed(const struct gdr_transport *tp);
/* The core's lock, held around connection set-up and teardown (service thread work, never the data path). */
void gdr_core_lock(void);
void gdr_core_unlock(void);
/* The transport chosen at init, or NULL before. */
const struct gdr_transport *gdr_core_transport(void);
/* Same, for callers holding the core lock; *ndev gets the device count. */
const struct gdr_transport *gdr_core_transport_locked(int *ndev);

/* core_connect.c */
ncclResult_t gdr_core_listen(int dev, void *handle, void **listen_comm);
ncclResult_t gdr_core_connect(int dev, void *handle, void **send_comm);
ncclResult_t gdr_core_accept(void *listen_comm, void **recv_comm);
ncclResult_t gdr_core_close_send(void *send_comm);
ncclResult_t gdr_core_close_recv(void *recv_comm);
ncclResult_t gdr_core_close_listen(void *listen_comm);

/* core_p2p.c */
ncclResult_t gdr_core_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t gdr_core_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                    void **mhandle);
ncclResult_t gdr_core_dereg_mr(void *comm, void *mhandle);
ncclResult_t gdr_core_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request);
ncclResult_t gdr_core_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                            void **request);
ncclResult_t gdr_core_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request);
/* sizes: NULL or GDR_MAX_RECVS entries, meaningful only once *done (the transport writes them directly); *n (may be
 * NULL) gets how many were filled (1 for a send, the group size for a receive, 0 for a flush). */
ncclResult_t gdr_core_test(void *request, int *done, size_t *sizes, int *n);

#endif /* GDRNET_CORE_H */
