#include "pool.h"

#include <stdlib.h>
#include <string.h>

int gdr_pool_init(struct gdr_pool *p, size_t objsize, int cap) {
  memset(p, 0, sizeof(*p));
  if (objsize == 0 || cap <= 0) return -1;
  objsize = (objsize + 15) & ~(size_t)15;
  p->mem = calloc((size_t)cap, objsize);
  p->freelist = calloc((size_t)cap, sizeof(int));
  p->used = calloc((size_t)cap, 1);
  if (p->mem == NULL || p->freelist == NULL || p->used == NULL) {
    gdr_pool_fini(p);
    return -1;
  }
  p->objsize = objsize;
  p->cap = cap;
  /* lowest index on top: get() hands out 0, 1, 2... */
  for (int i = 0; i < cap; i++) p->freelist[i] = cap - 1 - i;
  p->nfree = cap;
  return 0;
}

void gdr_pool_fini(struct gdr_pool *p) {
  free(p->mem);
  free(p->freelist);
  free(p->used);
  memset(p, 0, sizeof(*p));
}

void *gdr_pool_get(struct gdr_pool *p) {
  int i;
  void *o;
  if (p->nfree == 0) return NULL;
  i = p->freelist[--p->nfree];
  p->used[i] = 1;
  o = p->mem + (size_t)i * p->objsize;
  memset(o, 0, p->objsize);
  return o;
}

int gdr_pool_index(const struct gdr_pool *p, const void *o) {
  const char *c = o;
  size_t off;
  if (p->mem == NULL || c < p->mem || c >= p->mem + (size_t)p->cap * p->objsize) return -1;
  off = (size_t)(c - p->mem);
  if (off % p->objsize != 0) return -1;
  return (int)(off / p->objsize);
}

int gdr_pool_put(struct gdr_pool *p, void *o) {
  int i = gdr_pool_index(p, o);
  if (i < 0 || !p->used[i]) return -1;
  p->used[i] = 0;
  p->freelist[p->nfree++] = i;
  return 0;
}

int gdr_pool_in_use(const struct gdr_pool *p) { return p->cap - p->nfree; }
