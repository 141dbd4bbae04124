/* Connection health and the socket-side fault rows (health.h). */
#include "health.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>

#include "log.h"

const char *gdr_health_state_str(int state) {
  switch (state) {
  case GDR_HEALTH_OK: return "ok";
  case GDR_HEALTH_RECOVERING: return "recovering";
  case GDR_HEALTH_ON_TCP: return "on TCP";
  case GDR_HEALTH_FAILED: return "failed";
  default: return "?";
  }
}

const char *gdr_fault_action_str(int action) {
  switch (action) {
  case GDR_FAULT_NONE: return "none";
  case GDR_FAULT_RECOVER: return "recover";
  case GDR_FAULT_REKEY: return "recover with new keys";
  case GDR_FAULT_DEVICE: return "device lost";
  case GDR_FAULT_PEER: return "peer lost";
  case GDR_FAULT_BUG: return "give up";
  default: return "?";
  }
}

#define ROW(e, act, res, hint)                                                                                         \
  { #e, e, act, res, hint }
static const struct gdr_fault_class errno_rows[] = {
    {"EOF", 0, GDR_FAULT_PEER, ncclRemoteError,
     "the peer closed the connection: it finished, aborted or its process ended (see the peer's log)"},
    ROW(ECONNRESET, GDR_FAULT_PEER, ncclRemoteError,
        "the peer reset the connection: its process died or closed with data unread (see the peer's log)"),
    ROW(EPIPE, GDR_FAULT_PEER, ncclRemoteError, "the peer closed the connection while this side was still sending"),
    ROW(ETIMEDOUT, GDR_FAULT_PEER, ncclRemoteError,
        "no answer from the peer within GDRNET_TCP_TIMEOUT_MS: its host is down, hung, or the network is partitioned"),
    ROW(EHOSTUNREACH, GDR_FAULT_PEER, ncclRemoteError, "no route to the peer: check the interface and routing"),
    ROW(ENETUNREACH, GDR_FAULT_PEER, ncclRemoteError, "the network is unreachable: check GDRNET_SOCKET_IFNAME"),
    ROW(ENETDOWN, GDR_FAULT_PEER, ncclRemoteError, "the local interface went down"),
    ROW(ECONNREFUSED, GDR_FAULT_PEER, ncclRemoteError, "the peer refused the connection: nothing listens there"),
    ROW(ENOMEM, GDR_FAULT_BUG, ncclSystemError, "out of memory"),
    ROW(ENOBUFS, GDR_FAULT_BUG, ncclSystemError, "the kernel is out of socket buffers"),
};
#undef ROW

const struct gdr_fault_class *gdr_fault_errno_table(int *n) {
  *n = (int)(sizeof(errno_rows) / sizeof(errno_rows[0]));
  return errno_rows;
}

const struct gdr_fault_class *gdr_fault_errno(int err) {
  static const struct gdr_fault_class other = {"other errno", -1, GDR_FAULT_PEER, ncclSystemError,
                                               "an unexpected socket error (see its text)"};
  for (size_t i = 0; i < sizeof(errno_rows) / sizeof(errno_rows[0]); i++)
    if (errno_rows[i].code == err) return &errno_rows[i];
  return &other;
}

void gdr_health_init(struct gdr_health *h) {
  atomic_init(&h->state, GDR_HEALTH_OK);
  atomic_init(&h->failing, 0);
  h->res = ncclSuccess;
  h->warned = 0;
  h->why[0] = '\0';
}

void gdr_health_fail(struct gdr_health *h, ncclResult_t res, const char *fmt, ...) {
  int expect = 0;
  va_list ap;
  if (!atomic_compare_exchange_strong_explicit(&h->failing, &expect, 2, memory_order_acq_rel, memory_order_acquire))
    return; /* the first reason wins */
  va_start(ap, fmt);
  vsnprintf(h->why, sizeof(h->why), fmt, ap);
  va_end(ap);
  h->res = res == ncclSuccess ? ncclInternalError : res;
  atomic_store_explicit(&h->state, GDR_HEALTH_FAILED, memory_order_relaxed);
  atomic_store_explicit(&h->failing, 1, memory_order_release);
}

/* Waits out a reason being written by another thread (a snprintf away). */
static void wait_written(struct gdr_health *h) {
  for (int i = 0; atomic_load_explicit(&h->failing, memory_order_acquire) == 2 && i < 1000000; i++) sched_yield();
}

ncclResult_t gdr_health_error(struct gdr_health *h, const char *conn) {
  if (!gdr_health_failed(h)) return ncclSuccess;
  wait_written(h);
  if (!h->warned) {
    h->warned = 1;
    GDR_WARN("%s failed: %s", conn, h->why);
  }
  return h->res;
}

const char *gdr_health_why(struct gdr_health *h) {
  wait_written(h);
  return h->why;
}

void gdr_health_set_state(struct gdr_health *h, int state) {
  if (gdr_health_failed(h)) return;
  atomic_store_explicit(&h->state, state, memory_order_relaxed);
}
