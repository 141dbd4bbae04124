/* One failure vocabulary for every connection, whatever its transport.
 *
 * A connection's health is one of four named states:
 *   OK          traffic flows; every request completes or waits for its peer
 *   RECOVERING  a fault was seen; the connection is being brought back (RDMA: new QPs, replay). Requests wait
 *               (test says done = 0, isend/irecv say "try again"); nothing fails while the bound lasts
 *   ON_TCP      the connection moved to TCP after RDMA could not be recovered (the fallback); NCCL does not notice
 *   FAILED      given up: the first reason is kept, WARNed once, and every pending request ends with its result
 * and the decision for each fault comes from one classification: what a completion status, an async event, an
 * errno of the control channel or the peer's EOF means (recover on the same device, recover with fresh keys, the
 * device is gone, the peer is gone, a bug), the ncclResult_t NCCL gets when the connection gives up, and a hint
 * for the user. The RDMA rows (work completion statuses, async events) are in rdma/classify.c; the socket rows
 * (errno, EOF) in health.c. docs/recovery.md shows the same table (a unit test compares them). */
#ifndef GDRNET_HEALTH_H
#define GDRNET_HEALTH_H

#include <stdatomic.h>
#include <stddef.h>

#include "gdrnet/net_v8.h"

enum gdr_health_state { GDR_HEALTH_OK = 0, GDR_HEALTH_RECOVERING = 1, GDR_HEALTH_ON_TCP = 2, GDR_HEALTH_FAILED = 3 };
const char *gdr_health_state_str(int state);

/* What a fault means for the connection it hit. */
enum gdr_fault_action {
  GDR_FAULT_NONE = 0,    /* informational (logged, nothing to do) */
  GDR_FAULT_RECOVER = 1, /* recoverable on the same device: new QPs, agree on what was delivered, replay the rest */
  GDR_FAULT_REKEY = 2,   /* as RECOVER, with fresh registrations of the connection's own buffers and new keys */
  GDR_FAULT_DEVICE = 3,  /* the device (or its port, for good) is gone: no recovery on it (fallback to TCP) */
  GDR_FAULT_PEER = 4,    /* the peer is gone or closed: nothing to recover with */
  GDR_FAULT_BUG = 5,     /* a local misuse or protocol violation: give up at once */
};
const char *gdr_fault_action_str(int action);

/* One row of the classification. */
struct gdr_fault_class {
  const char *name; /* "IBV_WC_RETRY_EXC_ERR", "ECONNRESET", "EOF" */
  int code;         /* the status, event type or errno */
  int action;       /* enum gdr_fault_action */
  ncclResult_t res; /* what NCCL gets if the connection gives up on it */
  const char *hint; /* what to check, for the WARN line */
};

/* Socket-side rows: an errno of the control channel or of a TCP stream (0 = the peer's EOF). Never NULL (an errno
 * without a row gets a generic one). */
const struct gdr_fault_class *gdr_fault_errno(int err);
/* The socket-side table itself (docs and tests). */
const struct gdr_fault_class *gdr_fault_errno_table(int *n);

/* A connection's health. The state changes only on the thread that drives the connection (NCCL's progress
 * thread); gdr_health_fail may be called from any thread (async event thread, TCP helper threads): the first
 * reason wins. */
struct gdr_health {
  _Atomic int state;   /* enum gdr_health_state */
  _Atomic int failing; /* 0 healthy, 2 a reason is being written, 1 failed with res/why complete */
  ncclResult_t res;
  int warned;
  char why[448];
};

void gdr_health_init(struct gdr_health *h);
/* Moves to FAILED with this result and reason, unless it failed already (then nothing changes). */
void gdr_health_fail(struct gdr_health *h, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int gdr_health_failed(struct gdr_health *h) {
  return atomic_load_explicit(&h->failing, memory_order_acquire) != 0;
}
/* ncclSuccess while not failed; else the result, after one WARN "<conn> failed: <why>" (conn names the connection:
 * "RDMA send connection to 10.0.0.2:5000 (mlx5_0 port 1)"). Call on the driving thread. */
ncclResult_t gdr_health_error(struct gdr_health *h, const char *conn);
/* The reason (after gdr_health_failed). */
const char *gdr_health_why(struct gdr_health *h);
static inline int gdr_health_state(struct gdr_health *h) {
  return atomic_load_explicit(&h->state, memory_order_relaxed);
}
void gdr_health_set_state(struct gdr_health *h, int state); /* OK, RECOVERING or ON_TCP (not FAILED: use fail) */

#endif /* GDRNET_HEALTH_H */
