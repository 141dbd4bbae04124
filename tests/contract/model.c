/* The reference model of the matching contract: see model.h. */
#include "model.h"

#include <stdlib.h>
#include <string.h>

void cm_init(cm_model_t *m) { memset(m, 0, sizeof *m); }

void cm_free(cm_model_t *m) {
  free(m->slot);
  memset(m, 0, sizeof *m);
}

int cm_post(cm_model_t *m, int n, const int *tags, const int *caps) {
  if (n < 1 || n > CM_MAXN) return -1;
  if (m->nslots == m->alloc) {
    int na = m->alloc ? 2 * m->alloc : 16;
    cm_slot_t *p = realloc(m->slot, (size_t)na * sizeof *p);
    if (p == NULL) return -1;
    m->slot = p;
    m->alloc = na;
  }
  cm_slot_t *s = &m->slot[m->nslots];
  memset(s, 0, sizeof *s);
  s->n = n;
  for (int i = 0; i < n; i++) {
    s->tag[i] = tags[i];
    s->cap[i] = caps[i];
  }
  return m->nslots++;
}

int cm_isend(cm_model_t *m, int tag, int size, int *slot, int *buf) {
  if (m->cur >= m->nslots) return CM_NULL; /* no receive posted that is not yet filled */
  cm_slot_t *s = &m->slot[m->cur];
  int b = -1;
  for (int i = 0; i < s->n; i++)
    if (!s->filled[i] && s->tag[i] == tag) {
      b = i;
      if (!m->wrong) break;
    }
  if (b < 0) return CM_NULL;
  *slot = m->cur;
  *buf = b;
  if (size > s->cap[b]) return CM_ERROR;
  s->filled[b] = 1;
  s->size[b] = size;
  if (++s->nfilled == s->n) m->cur++;
  return CM_PLACED;
}

int cm_slot_full(const cm_model_t *m, int slot) {
  return slot >= 0 && slot < m->nslots && m->slot[slot].nfilled == m->slot[slot].n;
}
