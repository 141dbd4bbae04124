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
