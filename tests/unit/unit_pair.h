/* A connected send/receive pair through the core, in one process, as NCCL makes one: listen, then connect and accept
 * (each may need several calls) until both ends exist. For the unit tests of the transports. */
#ifndef GDRNET_UNIT_PAIR_H
#define GDRNET_UNIT_PAIR_H

#include "core.h"
#include "unit_common.h"

struct pair {
  void *l, *s, *r;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
};

static inline void pair_open(struct pair *p) {
  double t0 = ut_now();
  char h[NCCL_NET_HANDLE_MAXSIZE];
  memset(p, 0, sizeof(*p));
  assert_int_equal(gdr_core_listen(NULL, 0, p->handle, &p->l), ncclSuccess);
  assert_non_null(p->l);
  memcpy(h, p->handle, sizeof(h)); /* what NCCL ships to the peer */
  while (p->s == NULL || p->r == NULL) {
    if (p->s == NULL) assert_int_equal(gdr_core_connect(NULL, 0, -1, h, &p->s), ncclSuccess);
    if (p->r == NULL) assert_int_equal(gdr_core_accept(p->l, &p->r), ncclSuccess);
    assert_true(ut_now() - t0 < 20.0);
  }
  assert_int_equal(gdr_core_close_listen(p->l), ncclSuccess);
  p->l = NULL;
}

/* Closes what exists of the pair (either end may be gone already). */
static inline void pair_close(struct pair *p) {
  if (p->s) assert_int_equal(gdr_core_close_send(p->s), ncclSuccess);
  if (p->r) assert_int_equal(gdr_core_close_recv(p->r), ncclSuccess);
  memset(p, 0, sizeof(*p));
}

#endif
