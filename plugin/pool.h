/* A fixed-capacity object pool: O(1) get/put by index, no allocation after init, detects double puts and
 * claimed indices that are not the object's. Not thread-safe on its own: one pool per comm, used by the thread
 * that drives that comm's data path. */
#ifndef GDRNET_POOL_H
#define GDRNET_POOL_H

#include <stddef.h>
#include <stdint.h>

struct gdr_pool {
  char *mem;
  size_t objsize;
  int cap;
  int nfree;
  int *freelist; /* stack of free indices */
  uint8_t *used;
};

int gdr_pool_init(struct gdr_pool *p, size_t objsize, int cap); /* 0, or -1 (ENOMEM, bad args) */
void gdr_pool_fini(struct gdr_pool *p);

/* get/put for a caller that keeps the object's index (the core's requests): no zeroing (the caller sets every
 * field), no division to find the index. get: NULL when all cap objects are out. */
static inline void *gdr_pool_get_idx(struct gdr_pool *p, int *idx) {
  int i;
  if (p->nfree == 0) return NULL;
  i = p->freelist[--p->nfree];
  p->used[i] = 1;
  *idx = i;
  return p->mem + (size_t)i * p->objsize;
}
static inline int gdr_pool_put_idx(struct gdr_pool *p, int i) { /* 0, or -1 if i is not outstanding */
  if ((unsigned)i >= (unsigned)p->cap || !p->used[i]) return -1;
  p->used[i] = 0;
  p->freelist[p->nfree++] = i;
  return 0;
}
/* 1 if o is the outstanding object number i of p (a cheap check that o is p's, for a claimed index) */
static inline int gdr_pool_is(const struct gdr_pool *p, const void *o, int i) {
  return (unsigned)i < (unsigned)p->cap && p->used[i] && (const void *)(p->mem + (size_t)i * p->objsize) == o;
}

#endif /* GDRNET_POOL_H */
