/* What both one-sided paths (tcp_os.c, rdma_os.c) and core.c share, below all three: the comm's request pool, the
 * window lookup, a signal's application, the comm's failure and a peer's clean close. It calls no other file of
 * plugin/gin: what a path must do on a failure or a close it registered as a hook in its struct gin_path
 * (gin_int.h), which core.c put in the comm. Everything here runs under the comm's lock. */
#include <string.h>

#include "cuda.h"
#include "gin/gin_int.h"
#include "log.h"

/* ------------------------------------------------------------------------------------------------ requests -- */

struct gin_req *gin_req_get(struct gin_comm *c) {
  struct gin_req *r = c->free_list;
  if (r == NULL) return NULL;
  c->free_list = r->next_free;
  r->next_free = NULL;
  r->magic = GDR_GIN_REQ_MAGIC;
  r->kind = GIN_RQ_USER;
  r->gen++;
  r->pending = 0;
  r->done = 0;
  r->await = 0;
  r->err = ncclSuccess;
  return r;
}

void gin_req_put(struct gin_comm *c, struct gin_req *r) {
  c->peers[r->peer].inflight[r->context % GDR_GIN_MAX_CONTEXTS]--; /* the slot is NCCL's until test frees it */
  r->magic = 0;
  r->kind = GIN_RQ_FREE;
  r->next_free = c->free_list;
  c->free_list = r;
}

void gin_req_finish(struct gin_comm *c, struct gin_req *r) {
  (void)c;
  r->done = 1;
}

struct gin_req *gin_req_by_cookie(struct gin_comm *c, uint64_t cookie) {
  uint32_t idx = (uint32_t)cookie, gen = (uint32_t)(cookie >> 32);
  if (idx >= c->npool || c->pool[idx].kind != GIN_RQ_USER || c->pool[idx].gen != gen || c->pool[idx].done) return NULL;
  return &c->pool[idx];
}

/* ------------------------------------------------------------------------------------------ windows, signals -- */

struct gin_mr *gin_mr_find(struct gin_comm *c, uint32_t id) {
  for (struct gin_mr *m = c->mrs; m != NULL; m = m->next)
    if (m->id == id) return m;
  return NULL;
}

ncclResult_t gin_apply_signal(struct gin_comm *c, int peer, uint32_t id, uint64_t off, uint64_t val) {
  ncclResult_t res = ncclSuccess;
  struct gin_mr *m = gin_mr_find(c, id);
  if (m == NULL || off % 8 != 0 || off > m->size || m->size - off < 8) {
    GDR_WARN("GIN rank %d: a signal from rank %d names window %u offset %llu: %s", c->rank, peer, id,
             (unsigned long long)off, m == NULL ? "no such window" : "not an aligned word inside it");
    res = ncclRemoteError;
    goto out;
  }
  if (m->type == NCCL_PTR_CUDA) {
    uint64_t v = 0;
    GDR_CHECK(gdr_cuda_copy(m->cuda_ctx, &v, m->base + off, 8, 0));
    v += val;
    GDR_CHECK(gdr_cuda_copy(m->cuda_ctx, m->base + off, &v, 8, 1));
  } else {
    __atomic_fetch_add((uint64_t *)(void *)(m->base + off), val, __ATOMIC_SEQ_CST);
  }
out:
  return res;
}

/* ------------------------------------------------------------------------------------- failure, clean close -- */

void gin_fail(struct gin_comm *c, ncclResult_t res, const char *what, int peer) {
  if (c->error != ncclSuccess) return;
  GDR_WARN("GIN rank %d: %s (rank %d): %s; the connection is failed, every operation on it reports the error", c->rank,
           what, peer, res == ncclRemoteError ? "remote error" : "error");
  __atomic_store_n(&c->error, res, __ATOMIC_RELAXED); /* gdr_gin_progress reads it without the lock */
  GIN_COUNT(c, errors, 1);
  for (int k = 0; k < GIN_NPATHS; k++)
    if (c->path[k] != NULL && c->path[k]->on_fail != NULL) c->path[k]->on_fail(c);
}

void gin_peer_bye(struct gin_comm *c, int peer) {
  int failed = 0;
  if (c->peers[peer].gone) return;
  c->peers[peer].gone = 1;
  for (int k = 0; k < GIN_NPATHS; k++) /* no path keeps anything that names a request towards it */
    if (c->path[k] != NULL && c->path[k]->on_peer_gone != NULL) c->path[k]->on_peer_gone(c, peer);
  for (uint32_t i = 0; i < c->npool; i++) {
    struct gin_req *r = &c->pool[i];
    if (r->kind == GIN_RQ_USER && r->peer == peer && !r->done) {
      r->err = ncclRemoteError;
      r->done = 1;
      failed++;
    }
  }
  GDR_INFO(NCCL_NET, "GIN rank %d: rank %d closed its comm; %d operation(s) towards it failed, later ones fail too",
           c->rank, peer, failed);
}
