/* The version-neutral one-sided core (gin/gin.h): instances, the full mesh, contexts, symmetric windows and the
 * operation entry points. Below it, through their struct gin_path only (gin_int.h), the two paths an operation
 * takes: the message path (tcp_os.c) and the one-sided RDMA path (rdma_os.c); below all, shared.c. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cuda.h"
#include "gin/gin_int.h"
#include "log.h"
#include "param.h"
#include "sock.h"

struct gin_inst {
  uint32_t magic;
  void *netctx;
};

/* ------------------------------------------------------------------------------------------------ instance -- */

ncclResult_t gdr_gin_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger, int abi) {
  ncclResult_t res = ncclSuccess;
  struct gin_inst *g = NULL;
  if (ctx == NULL) return ncclInternalError;
  *ctx = NULL;
  g = calloc(1, sizeof(*g));
  if (g == NULL) {
    res = ncclSystemError;
    goto out;
  }
  GDR_CHECK(gdr_core_ctx_init(&g->netctx, comm_id, -1, logger, NULL, 11));
  g->magic = GDR_GIN_INST_MAGIC;
  GDR_INFO(NCCL_INIT | NCCL_NET,
           "GIN/RMA table v%d: proxy backend over the %s transport (host-staged one-sided "
           "messages)",
           abi, gdr_core_transport() != NULL ? gdr_core_transport()->name : "?");
  *ctx = g;
  g = NULL;
out:
  free(g);
  return res;
}

ncclResult_t gdr_gin_finalize(void *ctx) {
  struct gin_inst *g = ctx;
  ncclResult_t res = ncclSuccess;
  if (g == NULL || g->magic != GDR_GIN_INST_MAGIC) {
    GDR_WARN("GIN finalize: %p is not a GIN instance of this plugin", ctx);
    return ncclInvalidArgument;
  }
  res = gdr_core_ctx_finalize(g->netctx);
  g->magic = 0;
  free(g);
  return res;
}

ncclResult_t gdr_gin_devices(int *ndev) { return gdr_core_devices(ndev); }

ncclResult_t gdr_gin_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  struct gin_inst *g = ctx;
  if (g == NULL || g->magic != GDR_GIN_INST_MAGIC) {
    GDR_WARN("GIN listen: %p is not a GIN instance of this plugin", ctx);
    return ncclInvalidArgument;
  }
  return gdr_core_listen(g->netctx, dev, handle, listen_comm);
}

ncclResult_t gdr_gin_close_listen(void *listen_comm) { return gdr_core_close_listen(listen_comm); }

/* ---------------------------------------------------------------------------------------------- the mesh -- */

/* caps: GIN_CAP_* (an older plugin sends 0 there and does not read it) */
struct ident {
  uint32_t magic, rank, nranks, caps;
};

/* every path's progress, in order; the first failure stops it (and is sticky: c->error) */
static ncclResult_t progress(struct gin_comm *c) {
  ncclResult_t res = c->error;
  for (int k = 0; k < GIN_NPATHS && res == ncclSuccess; k++)
    if (c->path[k] != NULL && c->path[k]->progress != NULL) res = c->path[k]->progress(c);
  return res;
}

/* a control header towards peer over the message path, behind what is queued to it; 0: no room */
static int say(struct gin_comm *c, int peer, const struct gin_hdr *h) {
  return c->path[GIN_PATH_MSG]->say(c, peer, h, NULL, 0);
}

static void comm_free(struct gin_comm *c) {
  if (c == NULL) return;
  for (int k = GIN_NPATHS; k-- > 0;)
    if (c->path[k] != NULL && c->path[k]->teardown != NULL) c->path[k]->teardown(c);
  for (int r = 0; c->peers != NULL && r < c->nranks; r++) {
    if (c->peers[r].send != NULL) (void)gdr_core_close_send(c->peers[r].send);
    if (c->peers[r].recv != NULL) (void)gdr_core_close_recv(c->peers[r].recv);
  }
  for (int k = GIN_NPATHS; k-- > 0;) /* a peer's last message may land until its receive comm is closed */
    if (c->path[k] != NULL && c->path[k]->release != NULL) c->path[k]->release(c);
  while (c->early != NULL) {
    struct gin_early *e = c->early;
    c->early = e->next;
    free(e);
  }
  free(c->peers);
  pthread_mutex_destroy(&c->lock);
  c->magic = 0;
  free(c);
}

/* The mesh's scratch while it is built: the handles, the accepted comms, the introductions and their requests. */
struct mesh {
  int n, nconn, nacc, nid;
  struct gdr_handle *hc;
  void **acc;          /* accepted comms in accept order; NULL once one is a peer's */
  void **accc;         /* acc in accept order, for the deregistration */
  struct ident *ids;   /* [0, n) sent, [n, 2n) received */
  void **smh, **rmh;   /* their registrations */
  void **sreq, **rreq; /* the sends and receives in flight */
  int *sdone, *rdone;
  uint64_t deadline; /* GDRNET_CONNECT_TIMEOUT_MS x 2 for the whole mesh */
};

static int mesh_alloc(struct mesh *m, int n, void *handles[]) {
  memset(m, 0, sizeof(*m));
  m->n = n;
  m->hc = calloc((size_t)n, sizeof(*m->hc));
  m->acc = calloc((size_t)n, sizeof(*m->acc));
  m->accc = calloc((size_t)n, sizeof(*m->accc));
  m->ids = calloc((size_t)2 * n, sizeof(*m->ids));
  m->smh = calloc((size_t)n, sizeof(void *)), m->rmh = calloc((size_t)n, sizeof(void *));
  m->sreq = calloc((size_t)n, sizeof(void *)), m->rreq = calloc((size_t)n, sizeof(void *));
  m->sdone = calloc((size_t)n, sizeof(int)), m->rdone = calloc((size_t)n, sizeof(int));
  m->deadline = gdr_time_ns() + gdr_connect_timeout_ns() * 2;
  if (!m->hc || !m->acc || !m->accc || !m->ids || !m->smh || !m->rmh || !m->sreq || !m->rreq || !m->sdone || !m->rdone)
    return 0;
  for (int r = 0; r < n; r++) memcpy(&m->hc[r], handles[r], sizeof(m->hc[r]));
  return 1;
}

/* the introductions' registrations, the accepted comms no peer took, the scratch */
static void mesh_free(struct gin_comm *c, struct mesh *m) {
  for (int r = 0; r < m->n && m->smh != NULL; r++)
    if (m->smh[r] != NULL) (void)gdr_core_dereg_mr(c->peers[r].send, m->smh[r]);
  for (int r = 0; r < m->n && m->rmh != NULL && m->accc != NULL; r++)
    if (m->rmh[r] != NULL) (void)gdr_core_dereg_mr(m->accc[r], m->rmh[r]);
  for (int r = 0; r < m->n && m->acc != NULL; r++)
    if (m->acc[r] != NULL) (void)gdr_core_close_recv(m->acc[r]);
  free(m->hc);
  free(m->acc);
  free(m->accc);
  free(m->ids);
  free(m->smh);
  free(m->rmh);
  free(m->sreq);
  free(m->rreq);
  free(m->sdone);
  free(m->rdone);
}

/* a send comm to every rank and every rank's accepted, within the deadline */
static ncclResult_t mesh_connect(struct gin_comm *c, struct mesh *m, void *netctx, void *listen_comm) {
  ncclResult_t res = ncclSuccess;
  const int n = m->n;
  while (m->nconn < n || m->nacc < n) {
    for (int r = 0; r < n; r++) {
      if (c->peers[r].send != NULL) continue;
      GDR_CHECK(gdr_core_connect(netctx, c->dev, -1, &m->hc[r], &c->peers[r].send));
      if (c->peers[r].send != NULL) m->nconn++;
    }
    if (m->nacc < n) {
      GDR_CHECK(gdr_core_accept(listen_comm, &m->acc[m->nacc]));
      if (m->acc[m->nacc] != NULL) m->accc[m->nacc] = m->acc[m->nacc], m->nacc++;
    }
    if (gdr_time_ns() > m->deadline) {
      GDR_WARN("GIN connect: rank %d of %d has %d of %d connections and %d of %d accepted after %lld ms: a rank "
               "is missing or unreachable",
               c->rank, n, m->nconn, n, m->nacc, n, (long long)gdr_connect_timeout_ms() * 2);
      res = ncclRemoteError;
      goto out;
    }
    if (m->nconn < n || m->nacc < n) sched_yield();
  }
out:
  return res;
}

/* one round of rank r's introductions: this rank's on its send comm, and what came on the r-th accepted comm */
static ncclResult_t mesh_introduce(struct gin_comm *c, struct mesh *m, int r) {
  ncclResult_t res = ncclSuccess;
  if (m->sreq[r] == NULL && !m->sdone[r])
    GDR_CHECK(gdr_core_isend(c->peers[r].send, &m->ids[r], sizeof(m->ids[r]), 0, m->smh[r], NULL, &m->sreq[r]));
  if (m->rreq[r] == NULL && !m->rdone[r]) {
    void *d = &m->ids[m->n + r];
    size_t sz = sizeof(m->ids[r]);
    int tag = 0;
    GDR_CHECK(gdr_core_irecv(m->acc[r], 1, &d, &sz, &tag, &m->rmh[r], NULL, &m->rreq[r]));
  }
  if (m->sreq[r] != NULL) {
    GDR_CHECK(gdr_core_test(m->sreq[r], &m->sdone[r], NULL, NULL));
    if (m->sdone[r]) m->sreq[r] = NULL, m->nid++;
  }
  if (m->rreq[r] != NULL) {
    GDR_CHECK(gdr_core_test(m->rreq[r], &m->rdone[r], NULL, NULL));
    if (m->rdone[r]) m->rreq[r] = NULL, m->nid++;
  }
out:
  return res;
}

/* every rank says who it is on its send comm (struct ident), and every accepted comm's first message is read */
static ncclResult_t mesh_exchange(struct gin_comm *c, struct mesh *m) {
  ncclResult_t res = ncclSuccess;
  const int n = m->n;
  for (int r = 0; r < n; r++) {
    m->ids[r].magic = GIN_WIRE_MAGIC;
    m->ids[r].rank = (uint32_t)c->rank;
    m->ids[r].nranks = (uint32_t)n;
    m->ids[r].caps = GIN_CAP_BYE;
    GDR_CHECK(gdr_core_reg_mr(c->peers[r].send, &m->ids[r], sizeof(m->ids[r]), NCCL_PTR_HOST, &m->smh[r]));
    GDR_CHECK(gdr_core_reg_mr(m->acc[r], &m->ids[n + r], sizeof(m->ids[r]), NCCL_PTR_HOST, &m->rmh[r]));
  }
  while (m->nid < 2 * n) {
    for (int r = 0; r < n; r++) GDR_CHECK(mesh_introduce(c, m, r));
    if (gdr_time_ns() > m->deadline) {
      GDR_WARN("GIN connect: rank %d of %d: the ranks did not introduce themselves in time", c->rank, n);
      res = ncclRemoteError;
      goto out;
    }
  }
out:
  return res;
}

/* each accepted comm is the receive comm of the rank it introduced, once: no stranger, no rank twice */
static ncclResult_t mesh_assign(struct gin_comm *c, struct mesh *m) {
  const int n = m->n;
  for (int i = 0; i < n; i++) {
    struct ident *id = &m->ids[n + i];
    if (id->magic != GIN_WIRE_MAGIC || id->nranks != (uint32_t)n || id->rank >= (uint32_t)n ||
        c->peers[id->rank].recv != NULL) {
      GDR_WARN("GIN connect: rank %d of %d: an accepted connection says rank %u of %u: not one of this group", c->rank,
               n, id->rank, id->nranks);
      return ncclInvalidUsage;
    }
    c->peers[id->rank].recv = m->acc[i];
    c->peers[id->rank].caps = id->caps;
    m->acc[i] = NULL;
  }
  return ncclSuccess;
}

/* Connects to every rank and accepts every rank (bounded by GDRNET_CONNECT_TIMEOUT_MS), then learns which
 * accepted comm is whose from a first message on each send comm. */
static ncclResult_t mesh(struct gin_comm *c, void *netctx, void *handles[], void *listen_comm) {
  ncclResult_t res = ncclSuccess;
  struct mesh m;
  if (!mesh_alloc(&m, c->nranks, handles)) {
    GDR_WARN("GIN connect: out of memory for %d ranks", c->nranks);
    res = ncclSystemError;
    goto out;
  }
  GDR_CHECK(mesh_connect(c, &m, netctx, listen_comm));
  GDR_CHECK(mesh_exchange(c, &m));
  GDR_CHECK(mesh_assign(c, &m));
out:
  mesh_free(c, &m);
  return res;
}

ncclResult_t gdr_gin_connect(void *ctx, void *handles[], int nranks, int rank, int nconn, int depth, void *listen_comm,
                             void **coll_comm) {
  ncclResult_t res = ncclSuccess;
  struct gin_inst *g = ctx;
  struct gin_comm *c = NULL;
  struct gdr_props props;
  const struct gdr_comm *lc = listen_comm;
  if (coll_comm == NULL) return ncclInternalError;
  *coll_comm = NULL;
  if (g == NULL || g->magic != GDR_GIN_INST_MAGIC || lc == NULL || lc->magic != GDR_COMM_LISTEN || handles == NULL ||
      nranks < 1 || rank < 0 || rank >= nranks) {
    GDR_WARN("GIN connect: bad arguments (instance %p, listen comm %p, rank %d of %d)", ctx, listen_comm, rank, nranks);
    return ncclInvalidArgument;
  }
  GDR_CHECK(gdr_core_get_properties(lc->dev, &props));
  c = calloc(1, sizeof(*c));
  if (c == NULL) {
    res = ncclSystemError;
    goto out;
  }
  pthread_mutex_init(&c->lock, NULL);
  c->magic = GDR_GIN_COMM_MAGIC;
  c->path[GIN_PATH_MSG] = &gin_msg_path; /* in the order they come up: the RDMA path talks over messages */
  c->path[GIN_PATH_RDMA] = &gin_rdma_path;
  c->rank = rank;
  c->nranks = nranks;
  c->dev = lc->dev;
  c->netctx = g->netctx;
  c->stats_tp = gdr_stats_tp_index(gdr_core_transport() != NULL ? gdr_core_transport()->name : NULL);
  c->ncontexts = nconn > 0 ? nconn : 1;
  c->depth = depth > 0 ? depth : NCCL_NET_MAX_REQUESTS * (props.max_recvs > 0 ? props.max_recvs : 1);
  c->max_bytes = props.max_p2p_bytes > 0 ? props.max_p2p_bytes : ((size_t)1 << 30);
  c->peers = calloc((size_t)nranks, sizeof(*c->peers));
  if (c->peers == NULL) {
    res = ncclSystemError;
    goto out;
  }
  GDR_CHECK(mesh(c, g->netctx, handles, listen_comm));
  for (int r = 0; r < nranks; r++) { /* what the RDMA path asks of the transport's comms, without the net core's */
    c->peers[r].send_tc = ((struct gdr_comm *)c->peers[r].send)->tcomm;
    c->peers[r].recv_tc = ((struct gdr_comm *)c->peers[r].recv)->tcomm;
    /* its receive stands posted for whatever a peer may send: not a stall when none comes (a one-sided target
     * expects nothing; the initiator's sends and its one-sided records are watched) */
    gdr_core_recv_standing(c->peers[r].recv);
  }
  for (int k = 0; k < GIN_NPATHS; k++)
    if (c->path[k]->setup != NULL) GDR_CHECK(c->path[k]->setup(c));
  GDR_INFO(NCCL_INIT | NCCL_NET,
           "GIN rank %d of %d connected on device %d (%s): %d context(s), %d operations in "
           "flight per rank and context",
           rank, nranks, c->dev, props.name, c->ncontexts, c->depth);
  *coll_comm = c;
  c = NULL;
out:
  comm_free(c);
  return res;
}

/* Nothing of this rank's in flight: no operation, every queued message wholly posted (what is left only awaits its
 * completion), no data being received: a close now is clean, and progress touches no window (they may be gone). */
static int quiescent(const struct gin_comm *c) {
  for (uint32_t i = 0; i < c->npool; i++)
    if (c->pool[i].kind == GIN_RQ_USER && !c->pool[i].done) return 0;
  for (int r = 0; r < c->nranks; r++) {
    const struct gin_peer *p = &c->peers[r];
    if (p->rx == GIN_RX_DATA) return 0;
    for (uint32_t k = p->head; k != p->tail; k++)
      if (p->q[k % p->qcap].posted != p->q[k % p->qcap].size) return 0;
  }
  return 1;
}

/* A clean close: GIN_OP_BYE to every peer that understands it, behind what is queued to it, and the sends given
 * GDRNET_CONNECT_TIMEOUT_MS to go out (a peer that left meanwhile is skipped); then nothing more is received. A
 * failed comm, or one with operations in flight, says nothing (its peers had GIN_OP_ABORT, or see the connection
 * end). */
static void say_bye(struct gin_comm *c) {
  uint64_t deadline = gdr_time_ns() + gdr_connect_timeout_ns();
  pthread_mutex_lock(&c->lock);
  if (c->error == ncclSuccess && !quiescent(c)) {
    GDR_INFO(NCCL_NET, "GIN rank %d closes with operations in flight: the peers see its connections end", c->rank);
    goto out;
  }
  for (int r = 0; r < c->nranks && c->error == ncclSuccess; r++) {
    struct gin_hdr h;
    if (r == c->rank || c->peers[r].gone || !(c->peers[r].caps & GIN_CAP_BYE)) continue;
    memset(&h, 0, sizeof(h));
    h.magic = GIN_WIRE_MAGIC;
    h.op = GIN_OP_BYE;
    if (!say(c, r, &h))
      GDR_INFO(NCCL_NET, "GIN rank %d closes: the queue towards rank %d is full, it is not told", c->rank, r);
  }
  c->closing = 1;
  while (c->error == ncclSuccess && progress(c) == ncclSuccess) {
    int left = 0;
    for (int r = 0; r < c->nranks; r++)
      if (r != c->rank && !c->peers[r].gone && c->peers[r].head != c->peers[r].tail) left++;
    if (left == 0) break;
    if (gdr_time_ns() > deadline) {
      GDR_INFO(NCCL_NET,
               "GIN rank %d closes: %d rank(s) did not take its last messages within "
               "GDRNET_CONNECT_TIMEOUT_MS",
               c->rank, left);
      break;
    }
    pthread_mutex_unlock(&c->lock);
    sched_yield();
    pthread_mutex_lock(&c->lock);
  }
out:
  pthread_mutex_unlock(&c->lock);
}

ncclResult_t gdr_gin_close_coll(void *coll_comm) {
  struct gin_comm *c = coll_comm;
  if (c == NULL) return ncclSuccess;
  if (c->magic != GDR_GIN_COMM_MAGIC) {
    GDR_WARN("GIN closeColl: %p is not a GIN comm of this plugin", coll_comm);
    return ncclInvalidArgument;
  }
  say_bye(c);
  GDR_INFO(NCCL_NET,
           "GIN rank %d closes: %llu puts, %llu signals, %llu gets, %llu bytes applied, %llu errors, %llu "
           "recoveries in place, %llu peer(s) moved to the message path",
           c->rank, (unsigned long long)c->puts, (unsigned long long)c->signals, (unsigned long long)c->gets,
           (unsigned long long)c->bytes, (unsigned long long)c->errors, (unsigned long long)c->recoveries,
           (unsigned long long)c->moves);
  while (c->mrs != NULL) (void)gdr_gin_dereg_mr_sym(c, c->mrs);
  comm_free(c);
  return ncclSuccess;
}

/* ------------------------------------------------------------------------------------------------ contexts -- */

ncclResult_t gdr_gin_create_context(void *coll_comm, int ncontexts, int depth, void **gin_ctx) {
  struct gin_comm *c = coll_comm;
  struct gin_ctx *x;
  if (gin_ctx == NULL) return ncclInternalError;
  *gin_ctx = NULL;
  if (c == NULL || c->magic != GDR_GIN_COMM_MAGIC) {
    GDR_WARN("GIN createContext: %p is not a GIN comm of this plugin", coll_comm);
    return ncclInvalidArgument;
  }
  x = calloc(1, sizeof(*x));
  if (x == NULL) return ncclSystemError;
  x->magic = GDR_GIN_CTX_MAGIC;
  x->comm = c;
  x->ncontexts = ncontexts > 0 ? ncontexts : 1;
  x->depth = depth > 0 && depth < c->depth ? depth : c->depth;
  pthread_mutex_lock(&c->lock);
  c->nctx_live++;
  pthread_mutex_unlock(&c->lock);
  *gin_ctx = x;
  return ncclSuccess;
}

ncclResult_t gdr_gin_destroy_context(void *gin_ctx) {
  struct gin_ctx *x = gin_ctx;
  if (x == NULL) return ncclSuccess;
  if (x->magic != GDR_GIN_CTX_MAGIC) {
    GDR_WARN("GIN destroyContext: %p is not a GIN context of this plugin", gin_ctx);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&x->comm->lock);
  x->comm->nctx_live--;
  pthread_mutex_unlock(&x->comm->lock);
  x->magic = 0;
  free(x);
  return ncclSuccess;
}

/* target: a collComm (implicit context) or a context -> the comm, its context count and depth */
static struct gin_comm *resolve(void *target, int *ncontexts, int *depth, const char *what) {
  const struct gin_ctx *x = target;
  struct gin_comm *c = target;
  if (target != NULL && x->magic == GDR_GIN_CTX_MAGIC) {
    *ncontexts = x->ncontexts;
    *depth = x->depth;
    return x->comm;
  }
  if (target != NULL && c->magic == GDR_GIN_COMM_MAGIC) {
    *ncontexts = c->ncontexts;
    *depth = c->depth;
    return c;
  }
  GDR_WARN("GIN %s: %p is neither a GIN comm nor a GIN context of this plugin", what, target);
  return NULL;
}

/* ------------------------------------------------------------------------------------------------- windows -- */

static ncclResult_t mr_free(struct gin_comm *c, struct gin_mr *m) {
  ncclResult_t res = ncclSuccess, r;
  for (int k = 0; k < GIN_NPATHS; k++)
    if (c->path[k]->dereg != NULL) c->path[k]->dereg(c, m);
  for (int p = 0; p < c->nranks; p++) {
    if (m->smh != NULL && m->smh[p] != NULL && (r = gdr_core_dereg_mr(c->peers[p].send, m->smh[p])) != ncclSuccess)
      res = r;
    if (m->rmh != NULL && m->rmh[p] != NULL && (r = gdr_core_dereg_mr(c->peers[p].recv, m->rmh[p])) != ncclSuccess)
      res = r;
  }
  free(m->smh);
  free(m->rmh);
  free(m->peer_size);
  free(m->peer_va);
  free(m->peer_rkey);
  m->magic = 0;
  free(m);
  return res;
}

/* out of the comm's list of windows: 1, or 0 where it was not in it */
static int mr_unlink(struct gin_comm *c, struct gin_mr *m) {
  for (struct gin_mr **pm = &c->mrs; *pm != NULL; pm = &(*pm)->next)
    if (*pm == m) {
      *pm = m->next;
      return 1;
    }
  return 0;
}

/* A window over [data, +size), every rank's size not yet heard, registered on each of the mesh's comms and on every
 * path that registers windows. *out is the window as soon as it exists, also after a failure (mr_free frees it). */
static ncclResult_t mr_make(struct gin_comm *c, void *data, size_t size, int type, uint64_t offset, int fd,
                            struct gin_mr **out) {
  ncclResult_t res = ncclSuccess;
  struct gin_mr *m = calloc(1, sizeof(*m));
  /* device memory may go over a host-only transport (TCP stages it): GDR_PTR_STAGED */
  const int t = type == NCCL_PTR_CUDA ? NCCL_PTR_CUDA | GDR_PTR_STAGED : type;
  *out = m;
  if (m == NULL) return ncclSystemError;
  m->smh = calloc((size_t)c->nranks, sizeof(void *));
  m->rmh = calloc((size_t)c->nranks, sizeof(void *));
  m->peer_size = calloc((size_t)c->nranks, sizeof(uint64_t));
  m->peer_va = calloc((size_t)c->nranks, sizeof(uint64_t));
  m->peer_rkey = calloc((size_t)c->nranks, sizeof(uint32_t));
  if (m->smh == NULL || m->rmh == NULL || m->peer_size == NULL || m->peer_va == NULL || m->peer_rkey == NULL)
    return ncclSystemError;
  m->magic = GDR_GIN_MR_MAGIC;
  m->comm = c;
  m->base = data;
  m->size = size;
  m->type = type;
  if (type == NCCL_PTR_CUDA) GDR_CHECK(gdr_cuda_mem_ctx(data, &m->cuda_ctx));
  for (int p = 0; p < c->nranks; p++) {
    m->peer_size[p] = UINT64_MAX;
    if (fd >= 0) {
      GDR_CHECK(gdr_core_reg_mr_dmabuf(c->peers[p].send, data, size, t, offset, fd, &m->smh[p]));
      GDR_CHECK(gdr_core_reg_mr_dmabuf(c->peers[p].recv, data, size, t, offset, fd, &m->rmh[p]));
    } else {
      GDR_CHECK(gdr_core_reg_mr(c->peers[p].send, data, size, t, &m->smh[p]));
      GDR_CHECK(gdr_core_reg_mr(c->peers[p].recv, data, size, t, &m->rmh[p]));
    }
  }
  for (int k = 0; k < GIN_NPATHS; k++)
    if (c->path[k]->reg != NULL) GDR_CHECK(c->path[k]->reg(c, m, offset, fd));
out:
  return res;
}

/* Under the lock: the window takes the next id (the same on every rank: registration is collective, in order), and
 * what peers registered for that id before this rank did is taken in. */
static void mr_adopt(struct gin_comm *c, struct gin_mr *m) {
  m->id = c->next_mr_id++;
  m->next = c->mrs;
  c->mrs = m;
  for (struct gin_early **pe = &c->early; *pe != NULL;) {
    struct gin_early *e = *pe;
    if (e->id == m->id) {
      m->peer_size[e->peer] = e->size;
      m->peer_va[e->peer] = e->va;
      m->peer_rkey[e->peer] = e->rkey;
      *pe = e->next;
      free(e);
    } else {
      pe = &e->next;
    }
  }
}

/* GIN_OP_REG {id, size, base, rkey} to every rank still there (one that closed is not awaited either) */
static ncclResult_t mr_announce(struct gin_comm *c, const struct gin_mr *m) {
  for (int p = 0; p < c->nranks; p++) {
    struct gin_hdr h;
    if (c->peers[p].gone) continue;
    memset(&h, 0, sizeof(h));
    h.magic = GIN_WIRE_MAGIC;
    h.op = GIN_OP_REG;
    h.mr = m->id;
    h.size = m->size;
    h.aux = (uint64_t)(uintptr_t)m->base;
    h.rkey = m->rkey;
    if (!say(c, p, &h)) {
      GDR_WARN("GIN regMrSym: the queue towards rank %d is full (register with no operation in flight)", p);
      return ncclInvalidUsage;
    }
  }
  return ncclSuccess;
}

/* Under the lock (left while yielding): every rank's size, before the deadline (a rank that never registers this
 * window is missing). */
static ncclResult_t mr_await(struct gin_comm *c, const struct gin_mr *m, uint64_t deadline) {
  ncclResult_t res = ncclSuccess;
  for (;;) {
    int heard = 1;
    GDR_CHECK(progress(c));
    for (int p = 0; p < c->nranks; p++)
      if (m->peer_size[p] == UINT64_MAX && !c->peers[p].gone) heard = 0;
    if (heard) break;
    if (gdr_time_ns() > deadline) {
      GDR_WARN("GIN regMrSym: rank %d: not every rank registered window %u within GDRNET_CONNECT_TIMEOUT_MS", c->rank,
               m->id);
      res = ncclRemoteError;
      goto out;
    }
    pthread_mutex_unlock(&c->lock);
    sched_yield();
    pthread_mutex_lock(&c->lock);
  }
out:
  return res;
}

ncclResult_t gdr_gin_reg_mr_sym(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                uint64_t mr_flags, void **mhandle) {
  ncclResult_t res = ncclSuccess;
  struct gin_comm *c = coll_comm;
  struct gin_mr *m = NULL;
  int locked = 0;
  uint64_t deadline = gdr_time_ns() + gdr_connect_timeout_ns();
  (void)mr_flags; /* every put is applied before its signal: ordering is strong already */
  if (mhandle == NULL) return ncclInternalError;
  *mhandle = NULL;
  if (c == NULL || c->magic != GDR_GIN_COMM_MAGIC || (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA)) {
    GDR_WARN("GIN regMrSym: bad arguments (comm %p, type %d)", coll_comm, type);
    return ncclInvalidArgument;
  }
  GDR_CHECK(mr_make(c, data, size, type, offset, fd, &m));
  pthread_mutex_lock(&c->lock);
  locked = 1;
  mr_adopt(c, m);
  GDR_CHECK(mr_announce(c, m));
  GDR_CHECK(mr_await(c, m, deadline));
  GDR_INFO(NCCL_NET, "GIN rank %d: window %u %p %zu bytes (%s) registered on all %d ranks", c->rank, m->id, data, size,
           type == NCCL_PTR_CUDA ? "CUDA" : "host", c->nranks);
  *mhandle = m;
  m = NULL;
out:
  if (m != NULL) {
    if (locked) (void)mr_unlink(c, m);
    (void)mr_free(c, m);
  }
  if (locked) pthread_mutex_unlock(&c->lock);
  return res;
}

ncclResult_t gdr_gin_dereg_mr_sym(void *coll_comm, void *mhandle) {
  struct gin_comm *c = coll_comm;
  struct gin_mr *m = mhandle;
  ncclResult_t res = ncclInvalidArgument;
  if (c == NULL || c->magic != GDR_GIN_COMM_MAGIC || m == NULL || m->magic != GDR_GIN_MR_MAGIC || m->comm != c) {
    GDR_WARN("GIN deregMrSym: %p is not a window of GIN comm %p", mhandle, coll_comm);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&c->lock);
  if (mr_unlink(c, m)) res = ncclSuccess;
  pthread_mutex_unlock(&c->lock);
  if (res == ncclSuccess) res = mr_free(c, m);
  return res;
}

/* ---------------------------------------------------------------------------------------------- operations -- */

/* Every operation's prologue: *request cleared, the comm of target and its depth; NULL with *res set if either is
 * not usable. */
static struct gin_comm *op_begin(void *target, void **request, int *depth, const char *what, ncclResult_t *res) {
  int ncontexts = 1;
  struct gin_comm *c;
  *depth = 1;
  if (request == NULL) {
    *res = ncclInternalError;
    return NULL;
  }
  *request = NULL;
  c = resolve(target, &ncontexts, depth, what);
  if (c == NULL) *res = ncclInvalidArgument;
  return c;
}

static struct gin_mr *mr_of(struct gin_comm *c, void *mh) {
  struct gin_mr *m = mh;
  return m != NULL && m->magic == GDR_GIN_MR_MAGIC && m->comm == c ? m : NULL;
}

/* the path operations towards peer take now: the last one that carries them (the message path carries all) */
static const struct gin_path *route(struct gin_comm *c, int peer) {
  for (int k = GIN_NPATHS; k-- > 0;) {
    const struct gin_path *p = c->path[k];
    if (p->issue != NULL && (p->carries == NULL || p->carries(c, peer))) return p;
  }
  return c->path[GIN_PATH_MSG];
}

/* Admits one operation towards rank (context slot; room on the path it takes, *via), or *request = NULL. */
static ncclResult_t admit(struct gin_comm *c, int context, int depth, uint32_t rank, const struct gin_op *o,
                          struct gin_req **out, const struct gin_path **via) {
  struct gin_peer *p = &c->peers[rank];
  int slotc = context % GDR_GIN_MAX_CONTEXTS;
  *out = NULL;
  if (c->error != ncclSuccess) return c->error;
  (void)progress(c); /* frees what completed; an error is in c->error */
  if (c->error != ncclSuccess) return c->error;
  if (p->gone) {
    GDR_WARN("GIN rank %d: an operation towards rank %u, which closed its comm", c->rank, rank);
    return ncclRemoteError;
  }
  if (p->inflight[slotc] >= depth) return ncclSuccess;
  *via = route(c, (int)rank);
  if (!(*via)->room(c, (int)rank, o)) return ncclSuccess;
  *out = gin_req_get(c);
  if (*out == NULL) return ncclSuccess;
  (*out)->peer = (int)rank;
  (*out)->context = context;
  (*out)->nwr = 0;
  p->inflight[slotc]++;
  return ncclSuccess;
}

/* the admitted operation to its path (one that only queues is progressed at once) */
static void issue(struct gin_comm *c, const struct gin_path *via, struct gin_req *r, const struct gin_op *o) {
  via->issue(c, r, o);
  if (via->kick) (void)progress(c);
}

static ncclResult_t put_common(void *target, int context, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                               void *dst_mh, uint32_t rank, int signal, uint64_t sig_off, void *sig_mh,
                               uint64_t sig_val, uint32_t sig_op, void **request, const char *what) {
  ncclResult_t res = ncclSuccess;
  int depth;
  struct gin_comm *c = op_begin(target, request, &depth, what, &res);
  struct gin_mr *src, *dst, *sig = NULL;
  struct gin_req *r = NULL;
  const struct gin_path *via = NULL;
  struct gin_op op;
  memset(&op, 0, sizeof(op));
  if (c == NULL) return res;
  src = mr_of(c, src_mh);
  dst = mr_of(c, dst_mh);
  if (signal) sig = mr_of(c, sig_mh);
  if (rank >= (uint32_t)c->nranks || context < 0 || (size > 0 && (src == NULL || dst == NULL)) ||
      (signal && (sig == NULL || (sig_op != NCCL_NET_SIGNAL_OP_INC && sig_op != NCCL_NET_SIGNAL_OP_ADD)))) {
    GDR_WARN("GIN %s: bad arguments (rank %u of %d, context %d, windows %p %p, signal %p op %u)", what, rank, c->nranks,
             context, src_mh, dst_mh, sig_mh, sig_op);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&c->lock);
  if (size > 0 && (src_off > src->size || size > src->size - src_off || dst_off > dst->peer_size[rank] ||
                   size > dst->peer_size[rank] - dst_off)) {
    GDR_WARN("GIN %s: %zu bytes from offset %llu of window %u (%zu bytes) to offset %llu of rank %u's (%llu bytes): "
             "outside the windows",
             what, size, (unsigned long long)src_off, src->id, src->size, (unsigned long long)dst_off, rank,
             (unsigned long long)dst->peer_size[rank]);
    res = ncclInvalidArgument;
    goto out;
  }
  if (signal && (sig_off % 8 != 0 || sig_off > sig->peer_size[rank] || sig->peer_size[rank] - sig_off < 8)) {
    GDR_WARN("GIN %s: signal offset %llu is not an aligned word of rank %u's window %u", what,
             (unsigned long long)sig_off, rank, sig->id);
    res = ncclInvalidArgument;
    goto out;
  }
  op.kind = GIN_K_PUT;
  op.lm = src, op.loff = src_off, op.rm = dst, op.roff = dst_off, op.size = size;
  op.signal = signal, op.sm = sig, op.soff = sig_off, op.sval = sig_op == NCCL_NET_SIGNAL_OP_INC ? 1 : sig_val;
  GDR_CHECK(admit(c, context, depth, rank, &op, &r, &via));
  if (r == NULL) goto out; /* try again */
  GIN_COUNT(c, puts, 1);
  GIN_COUNT(c, bytes, size);
  if (signal) GIN_COUNT(c, signals, 1);
  issue(c, via, r, &op);
  *request = r;
out:
  pthread_mutex_unlock(&c->lock);
  return res;
}

ncclResult_t gdr_gin_iput(void *target, int context, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                          void *dst_mh, uint32_t rank, void **request) {
  return put_common(target, context, src_off, src_mh, size, dst_off, dst_mh, rank, 0, 0, NULL, 0, 0, request, "iput");
}

ncclResult_t gdr_gin_iput_signal(void *target, int context, uint64_t src_off, void *src_mh, size_t size,
                                 uint64_t dst_off, void *dst_mh, uint32_t rank, uint64_t sig_off, void *sig_mh,
                                 uint64_t sig_val, uint32_t sig_op, void **request) {
  return put_common(target, context, src_off, src_mh, size, dst_off, dst_mh, rank, 1, sig_off, sig_mh, sig_val, sig_op,
                    request, "iputSignal");
}

ncclResult_t gdr_gin_iget(void *target, int context, uint64_t remote_off, void *remote_mh, size_t size,
                          uint64_t local_off, void *local_mh, uint32_t rank, void **request) {
  ncclResult_t res = ncclSuccess;
  int depth;
  struct gin_comm *c = op_begin(target, request, &depth, "iget", &res);
  struct gin_mr *rm, *lm;
  struct gin_req *r = NULL;
  const struct gin_path *via = NULL;
  struct gin_op op;
  memset(&op, 0, sizeof(op));
  if (c == NULL) return res;
  rm = mr_of(c, remote_mh);
  lm = mr_of(c, local_mh);
  if (rank >= (uint32_t)c->nranks || context < 0 || rm == NULL || lm == NULL) {
    GDR_WARN("GIN iget: bad arguments (rank %u of %d, context %d, windows %p %p)", rank, c->nranks, context, remote_mh,
             local_mh);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&c->lock);
  if (local_off > lm->size || size > lm->size - local_off || remote_off > rm->peer_size[rank] ||
      size > rm->peer_size[rank] - remote_off) {
    GDR_WARN("GIN iget: %zu bytes from offset %llu of rank %u's window %u to offset %llu of window %u: outside "
             "the windows",
             size, (unsigned long long)remote_off, rank, rm->id, (unsigned long long)local_off, lm->id);
    res = ncclInvalidArgument;
    goto out;
  }
  op.kind = GIN_K_GET;
  op.rm = rm, op.roff = remote_off, op.lm = lm, op.loff = local_off, op.size = size;
  GDR_CHECK(admit(c, context, depth, rank, &op, &r, &via));
  if (r == NULL) goto out;
  GIN_COUNT(c, gets, 1);
  GIN_COUNT(c, bytes, size);
  issue(c, via, r, &op);
  *request = r;
out:
  pthread_mutex_unlock(&c->lock);
  return res;
}

ncclResult_t gdr_gin_iflush(void *target, int context, void *mh, uint32_t rank, void **request) {
  ncclResult_t res = ncclSuccess;
  int depth;
  struct gin_comm *c = op_begin(target, request, &depth, "iflush", &res);
  struct gin_req *r = NULL;
  const struct gin_path *via = NULL;
  struct gin_op op;
  (void)mh; /* a flush covers every window: the target acknowledges once all that came before is applied */
  memset(&op, 0, sizeof(op));
  op.kind = GIN_K_FLUSH;
  if (c == NULL) return res;
  if (rank >= (uint32_t)c->nranks || context < 0) {
    GDR_WARN("GIN iflush: bad arguments (rank %u of %d, context %d)", rank, c->nranks, context);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&c->lock);
  GDR_CHECK(admit(c, context, depth, rank, &op, &r, &via));
  if (r == NULL) {
    /* NCCL reads a NULL flush request as done: never answer "try again" here */
    GDR_WARN("GIN iflush: the queue towards rank %u is full", rank);
    res = ncclInternalError;
    goto out;
  }
  issue(c, via, r, &op);
  *request = r;
out:
  pthread_mutex_unlock(&c->lock);
  return res;
}

ncclResult_t gdr_gin_test(void *coll_comm, void *request, int *done) {
  ncclResult_t res = ncclSuccess;
  struct gin_comm *c = coll_comm;
  struct gin_req *r = request;
  if (done == NULL) return ncclInternalError;
  *done = 0;
  if (c != NULL && ((struct gin_ctx *)coll_comm)->magic == GDR_GIN_CTX_MAGIC) c = ((struct gin_ctx *)coll_comm)->comm;
  if (c == NULL || c->magic != GDR_GIN_COMM_MAGIC || r == NULL || r->magic != GDR_GIN_REQ_MAGIC || r < c->pool ||
      r >= c->pool + c->npool) {
    GDR_WARN("GIN test: %p is not a request of GIN comm %p", request, coll_comm);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&c->lock);
  if (!r->done) (void)progress(c);
  if (r->done) {
    *done = 1;
    res = r->err;
    gin_req_put(c, r);
  } else if (c->error != ncclSuccess) {
    res = c->error;
    *done = 1;
    gin_req_put(c, r);
  }
  pthread_mutex_unlock(&c->lock);
  return res;
}

ncclResult_t gdr_gin_progress(void *target) {
  ncclResult_t res;
  int ncontexts, depth;
  struct gin_comm *c = resolve(target, &ncontexts, &depth, "progress");
  if (c == NULL) return ncclInvalidArgument;
  if (pthread_mutex_trylock(&c->lock) != 0) /* another thread is progressing it */
    return __atomic_load_n(&c->error, __ATOMIC_RELAXED);
  res = progress(c);
  pthread_mutex_unlock(&c->lock);
  return res;
}

ncclResult_t gdr_gin_query_last_error(void *target, bool *has_error) {
  int ncontexts, depth;
  struct gin_comm *c = resolve(target, &ncontexts, &depth, "queryLastError");
  if (has_error == NULL) return ncclInternalError;
  if (c == NULL) return ncclInvalidArgument;
  pthread_mutex_lock(&c->lock);
  *has_error = c->error != ncclSuccess;
  pthread_mutex_unlock(&c->lock);
  return ncclSuccess;
}
