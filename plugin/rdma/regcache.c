/* Refcounted, page-aligned, thread-safe registration cache. See regcache.h. */
#include "regcache.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

void gdr_regcache_align(uintptr_t addr, size_t len, size_t page, uintptr_t *base, size_t *alen) {
  uintptr_t b = addr & ~(uintptr_t)(page - 1);
  uintptr_t end = addr + len;
  uintptr_t e = (end + page - 1) & ~(uintptr_t)(page - 1);
  if (len == 0) e = b + page; /* a zero-length buffer still names a page (NCCL may register 0 bytes) */
  *base = b;
  *alen = (size_t)(e - b);
}

void gdr_regcache_init(struct gdr_regcache *c, const struct gdr_regcache_ops *ops, void *ctx, size_t page) {
  pthread_mutex_init(&c->lock, NULL);
  c->head = NULL;
  c->ops = *ops;
  c->ctx = ctx;
  if (page == 0) {
    long p = sysconf(_SC_PAGESIZE);
    page = p > 0 ? (size_t)p : 4096;
  }
  c->page = page;
  c->nentries = 0;
  c->hits = c->misses = 0;
}

int gdr_regcache_fini(struct gdr_regcache *c) {
  int n = 0;
  pthread_mutex_lock(&c->lock);
  struct gdr_reg_entry *e = c->head;
  while (e) {
    struct gdr_reg_entry *next = e->next;
    if (e->mr) c->ops.dereg(c->ctx, e->mr);
    free(e);
    n++;
    e = next;
  }
  c->head = NULL;
  c->nentries = 0;
  pthread_mutex_unlock(&c->lock);
  pthread_mutex_destroy(&c->lock);
  return n;
}

int gdr_regcache_get(struct gdr_regcache *c, const struct gdr_reg_req *req, struct gdr_reg_entry **out) {
  *out = NULL;
  if (req->addr == 0 && req->len != 0) return EINVAL;
  uintptr_t base;
  size_t alen;
  if (req->kind == GDR_REG_DMABUF) {
    /* the fd describes exactly [addr, addr+len): never widen past it */
    base = req->addr;
    alen = req->len ? req->len : 1;
  } else {
    gdr_regcache_align(req->addr, req->len, c->page, &base, &alen);
  }
  if (base + alen < base) return EINVAL; /* wraps */

  pthread_mutex_lock(&c->lock);
  for (struct gdr_reg_entry *e = c->head; e; e = e->next) {
    /* released with a lost device's context: its keys are dead (only NCCL's deregMr may still put it) */
    if (e->mr == NULL) continue;
    if (e->kind != req->kind) continue;
    if ((e->access & req->access) != req->access) continue;
    if (base < e->base || base + alen > e->base + e->len) continue;
    e->refs++;
    c->hits++;
    *out = e;
    pthread_mutex_unlock(&c->lock);
    return 0;
  }
  struct gdr_reg_entry *e = calloc(1, sizeof(*e));
  if (e == NULL) {
    pthread_mutex_unlock(&c->lock);
    return ENOMEM;
  }
  int err = 0;
  e->mr = c->ops.reg(c->ctx, base, alen, req, &e->lkey, &e->rkey, &err);
  if (e->mr == NULL) {
    pthread_mutex_unlock(&c->lock);
    free(e);
    return err ? err : EIO;
  }
  e->cache = c;
  e->base = base;
  e->len = alen;
  e->access = req->access;
  e->kind = req->kind;
  e->refs = 1;
  e->next = c->head;
  c->head = e;
  c->nentries++;
  c->misses++;
  pthread_mutex_unlock(&c->lock);
  *out = e;
  return 0;
}

int gdr_regcache_put(struct gdr_reg_entry *e) {
  if (e == NULL) return EINVAL;
  struct gdr_regcache *c = e->cache;
  pthread_mutex_lock(&c->lock);
  if (--e->refs > 0) {
    pthread_mutex_unlock(&c->lock);
    return 0;
  }
  struct gdr_reg_entry **pp = &c->head;
  while (*pp && *pp != e) pp = &(*pp)->next;
  if (*pp) *pp = e->next;
  c->nentries--;
  int rc = e->mr ? c->ops.dereg(c->ctx, e->mr) : 0; /* released already when the device was lost */
  pthread_mutex_unlock(&c->lock);
  free(e);
  return rc;
}

int gdr_regcache_release_all(struct gdr_regcache *c) {
  int n = 0;
  pthread_mutex_lock(&c->lock);
  for (struct gdr_reg_entry *e = c->head; e; e = e->next) {
    if (e->mr == NULL) continue;
    (void)c->ops.dereg(c->ctx, e->mr);
    e->mr = NULL;
    n++;
  }
  c->released = 1;
  pthread_mutex_unlock(&c->lock);
  return n;
}
