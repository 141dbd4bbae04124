/* RDMA transport: recovery of a connection on its own device. Protocol and what each side keeps:
 * plugin/rdma/README.md, "Recovery".
 *
 * Everything runs on the thread that drives the connection (NCCL's progress thread), as a non-blocking state
 * machine stepped from test (gdr_rdma_progress; and by the idle-peer service for an owner that calls no test); the
 * async-event thread only hands faults over (c->pending), the data path reports its own through
 * gdr_rdma_resiliency.fault.
 *
 *   fault (failed completion, failed post, async event, or the peer's REC_REQ/REC_STATE for a newer attempt)
 *     -> attempt k: the QPs go to ERR, the CQ is drained (its successes still count), the QP set is destroyed;
 *        backoff; wait until the port is ACTIVE (the GID is chosen again); new keys for the own buffers after a
 *        key fault; a new QP set (INIT)
 *     sender:   REC_STATE{k: QPNs, PSNs, address, FIFO key}                    -> wait for the receiver's
 *     receiver: REC_REQ{k} unless the sender's REC_STATE{k} is there already   -> wait for it; then: QPs to RTS,
 *               every incomplete receive's receive WRs posted again, REC_STATE{k: QPNs..., head, incomplete}
 *     sender:   QPs to RTS; each message it has in flight is complete (the receiver says so) or is replayed (the
 *               parts not acknowledged, and the immediates); REC_GO{k}; done
 *     receiver: on REC_GO{k}: the clear-to-send of every incomplete receive written again, pending flushes
 *               posted again; done
 *   A newer attempt named by the peer abandons the current one. Bounds: GDRNET_RECOVERY_ATTEMPTS attempts per
 *   episode, all within GDRNET_RECOVERY_TIMEOUT_MS of its first fault; then the connection fails (REC_FAIL tells
 *   the peer) and every pending request ends with the error. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "rdma.h"

#define CTRL_CHECK_NS 1000000ull    /* the control channel is read at most every 1 ms (every call while recovering) */
#define PORT_CHECK_NS 10000000ull   /* a down port is queried every 10 ms */
#define BACKOFF_BASE_NS 10000000ull /* attempt n >= 2 waits 10 ms x 2^(n-2), at most 1 s */
#define BACKOFF_MAX_NS 1000000000ull

static int is_sender(const struct gdr_rdma_comm *c) { return c->kind == GDR_RCOMM_SEND; }

/* --------------------------------------------------------------------------------------- giving up -- */

static void give_up(struct gdr_rdma_comm *c, ncclResult_t res, int tell_peer, const char *why) {
  if (gdr_health_failed(&c->health)) return;
  if (res != ncclInternalError && !c->peer_gone && gdr_rdma_fb_allowed(c)) {
    /* RDMA cannot carry the connection: TCP does (GDRNET_FALLBACK=1) */
    c->rec.phase = GDR_REC_IDLE;
    gdr_rdma_fb_begin(c, why);
    return;
  }
  gdr_rdma_comm_fail(c, res, "%s", why);
  atomic_fetch_add_explicit(&c->dev->ctr.failed, 1, memory_order_relaxed);
  if (tell_peer) (void)gdr_rdma_ctrl_send(c, GDR_CTRL_REC_FAIL, c->rec.attempt, (uint64_t)res, 0, why, strlen(why));
  c->rec.phase = GDR_REC_IDLE;
}

/* -------------------------------------------------------------------------------------------- attempts -- */

#define REKEY_BOTH (GDR_REKEY_SEND | GDR_REKEY_RECV)

/* This side's bit in a rekey mask. */
static unsigned my_rekey_bit(const struct gdr_rdma_comm *c) { return gdr_rekey_role_bit(c->kind); }

static void start_attempt(struct gdr_rdma_comm *c, uint32_t k, int action, unsigned rekey) {
  struct gdr_rdma_rec *rc = &c->rec;
  uint64_t now = gdr_time_ns();
  int max = gdr_recovery_attempts();
  if (rc->episode_attempts >= max || now > rc->deadline_ns) {
    char why[sizeof(c->health.why)];
    snprintf(why, sizeof(why),
             "recovery gave up after %d attempt(s) in %llu ms (GDRNET_RECOVERY_ATTEMPTS=%d, "
             "GDRNET_RECOVERY_TIMEOUT_MS=%lld); first fault: %s",
             rc->episode_attempts, (unsigned long long)((now - rc->episode_start_ns) / 1000000ull), max,
             (long long)gdr_recovery_timeout_ms(), rc->first_fault);
    give_up(c, ncclRemoteError, 1, why);
    return;
  }
  if (rc->phase == GDR_REC_IDLE || k > rc->attempt) rc->have_peer = 0;
  rc->episode_attempts++;
  rc->attempts++;
  rc->attempt = k;
  if (action == GDR_FAULT_REKEY || rc->phase == GDR_REC_IDLE) rc->action = action;
  /* whose keys: what the fault names (a key fault that does not say: both sides), added to what this episode's
   * earlier attempts asked (their new keys may not have reached the peer) */
  if (action == GDR_FAULT_REKEY && (rekey & REKEY_BOTH) == 0) rekey = REKEY_BOTH;
  /* (a plain RECOVER carries only what a peer asked of its own side: it asks nothing of ours) */
  if (action != GDR_FAULT_REKEY) rekey &= ~my_rekey_bit(c);
  rc->rekey = (rc->phase == GDR_REC_IDLE ? 0 : rc->rekey) | (rekey & REKEY_BOTH);
  rc->rekeyed = 0;
  rc->healthy = 0;
  gdr_health_set_state(&c->health, GDR_HEALTH_RECOVERING);
  gdr_rdma_quiesce_qps(c);
  uint64_t backoff = 0;
  if (rc->episode_attempts >= 2) {
    backoff = BACKOFF_BASE_NS << (rc->episode_attempts - 2 < 20 ? rc->episode_attempts - 2 : 20);
    if (backoff > BACKOFF_MAX_NS) backoff = BACKOFF_MAX_NS;
  }
  rc->retry_ns = now + backoff;
  rc->port_check_ns = 0;
  rc->phase = GDR_REC_WAIT_PORT;
}

/* A fault hit the connection (a failed completion or post, reported by the data path through
 * gdr_rdma_resiliency.fault; an async event; the peer's request): records it (counters, the first reason) and starts
 * (or restarts) a recovery, moves the connection to TCP, or fails it. rekey: GDR_REKEY_SEND/RECV for a key fault that
 * names whose buffers need new keys (0: both). why: one line for the WARN. */
static void fault(struct gdr_rdma_comm *c, int action, unsigned rekey, ncclResult_t res, const char *why) {
  struct gdr_rdma_rec *rc = &c->rec;
  uint64_t now = gdr_time_ns();
  if (gdr_health_failed(&c->health) || action == GDR_FAULT_NONE) return;
  if (gdr_rdma_fb_absorb(c, action, why)) return; /* the connection is (moving) on TCP: no RDMA to recover */
  rc->faults++;
  if (action >= 0 && action < (int)(sizeof(rc->faults_by_action) / sizeof(rc->faults_by_action[0])))
    rc->faults_by_action[action]++;
  atomic_fetch_add_explicit(&c->dev->ctr.faults, 1, memory_order_relaxed);
  int recover = (action == GDR_FAULT_RECOVER || action == GDR_FAULT_REKEY) &&
                (c->remote.caps & GDR_RDMA_CAP_RECOVERY) && gdr_recovery_attempts() > 0;
  if (rc->phase == GDR_REC_IDLE) {
    /* a new episode only once a completion succeeded after the last recovery: a fault that comes later than the
     * timeout (a retry-exceeded takes GDRNET_IB_TIMEOUT x GDRNET_IB_RETRY_CNT, 30 s by default) without anything
     * having got through is the same episode, past its deadline, and not a fresh start (a peer that is gone
     * would otherwise be recovered again and again, each time "1 of at most N") */
    if (rc->episode_attempts == 0 || rc->healthy) {
      rc->episode_attempts = 0;
      rc->episode_start_ns = now;
      rc->deadline_ns = now + gdr_recovery_timeout_ns();
      snprintf(rc->first_fault, sizeof(rc->first_fault), "%.255s", why);
    }
  }
  if (!recover) {
    const char *reason = !(c->remote.caps & GDR_RDMA_CAP_RECOVERY) ? "the peer cannot recover (older plugin)"
                         : gdr_recovery_attempts() == 0            ? gdr_recovery_off_reason()
                                                                   : gdr_fault_action_str(action);
    char full[sizeof(c->health.why)];
    snprintf(full, sizeof(full), "%.360s; decision: give up (%.60s)", why, reason);
    give_up(c, res, 1, full);
    return;
  }
  uint32_t k = rc->attempt + 1;
  if (rc->episode_attempts >= gdr_recovery_attempts() || now > rc->deadline_ns) {
    start_attempt(c, k, action, rekey); /* gives up (or moves to TCP) with its own line */
    return;
  }
  if (action == GDR_FAULT_REKEY && (rekey & REKEY_BOTH) == 0) rekey = REKEY_BOTH;
  GDR_WARN("%s: %s; decision: %s%s, attempt %u (%d of at most %lld in this episode, %llu ms left)", c->desc, why,
           gdr_fault_action_str(action),
           action != GDR_FAULT_REKEY            ? ""
           : (rekey & REKEY_BOTH) == REKEY_BOTH ? " (both sides' own buffers)"
           : (rekey & GDR_REKEY_SEND)           ? " (the sender's own buffers)"
                                                : " (the receiver's own buffers)",
           k, rc->episode_attempts + 1, (long long)gdr_recovery_attempts(),
           (unsigned long long)(now < rc->deadline_ns ? (rc->deadline_ns - now) / 1000000ull : 0));
  start_attempt(c, k, action, rekey);
}

/* ------------------------------------------------------------------------------------------------ state -- */

static void fill_state(struct gdr_rdma_comm *c, struct gdr_rdma_rec_state *st) {
  gdr_rdma_fill_qp_state(c, st);
  if (is_sender(c)) return;
  st->head = c->head;
  for (int i = 0; i < GDR_RDMA_FIFO_SLOTS && (uint64_t)i < c->head; i++) {
    uint64_t seq = c->head - 1 - (uint64_t)i;
    struct gdr_rdma_req *q = c->recv_slot[seq % GDR_RDMA_FIFO_SLOTS];
    if (q && q->seq == seq && q->events > 0) st->incomplete |= 1u << i;
  }
}

static ncclResult_t send_state(struct gdr_rdma_comm *c) {
  struct gdr_rdma_rec_state st;
  fill_state(c, &st);
  return gdr_rdma_ctrl_send(c, GDR_CTRL_REC_STATE, c->rec.attempt, c->rec.rekey, 0, &st, sizeof(st));
}

/* The peer's QPs: ours to RTS towards them; its address as it is now (a port flap can move the GID). */
static int connect_to_peer(struct gdr_rdma_comm *c) {
  if (gdr_rdma_connect_peer(c, &c->rec.peer) != 0) {
    fault(c, GDR_FAULT_RECOVER, 0, ncclSystemError, "connecting the new QPs to the peer's failed");
    return -1;
  }
  return 0;
}

static void recovered(struct gdr_rdma_comm *c, uint64_t msgs, uint64_t bytes) {
  struct gdr_rdma_rec *rc = &c->rec;
  uint64_t ns = gdr_time_ns() - rc->episode_start_ns;
  char lg[64], rg[64];
  rc->phase = GDR_REC_IDLE;
  rc->rekey = 0;
  rc->rekeyed = 0;
  rc->recoveries++;
  rc->replayed_msgs += msgs;
  rc->replayed_bytes += bytes;
  rc->recover_ns += ns;
  /* (the deadline stays the episode's: from its first fault) */
  atomic_fetch_add_explicit(&c->dev->ctr.recoveries, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->dev->ctr.replayed_msgs, msgs, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->dev->ctr.replayed_bytes, bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->dev->ctr.recover_ns, ns, memory_order_relaxed);
  gdr_health_set_state(&c->health, GDR_HEALTH_OK);
  gdr_rdma_addr_str(c, 0, lg, sizeof(lg));
  gdr_rdma_addr_str(c, 1, rg, sizeof(rg));
  GDR_INFO(NCCL_NET,
           "%s recovered: attempt %u, %d attempt(s) in %llu ms, new QP 0x%x (local %s) <-> 0x%x (remote %s), "
           "%llu message(s) / %llu bytes replayed",
           c->desc, rc->attempt, rc->episode_attempts, (unsigned long long)(ns / 1000000ull), c->qs.qps[0]->qp_num, lg,
           rc->peer.qpn[0], rg, (unsigned long long)msgs, (unsigned long long)bytes);
}

/* Receiver, once its new QPs and the sender's REC_STATE are there. */
static void receiver_connect(struct gdr_rdma_comm *c) {
  if (connect_to_peer(c) != 0) return;
  /* receive WRs again for every incomplete receive, in message order (each QP consumes them in order) */
  uint64_t low = c->head > GDR_RDMA_FIFO_SLOTS ? c->head - GDR_RDMA_FIFO_SLOTS : 0;
  unsigned gen = c->qs_gen;
  for (uint64_t seq = low; seq < c->head; seq++) {
    struct gdr_rdma_req *q = c->recv_slot[seq % GDR_RDMA_FIFO_SLOTS];
    if (q == NULL || q->seq != seq || q->events == 0) continue;
    q->events = c->nparts;
    (void)gdr_rdma_post_recv_wrs(c, q);
    if (c->qs_gen != gen || gdr_health_failed(&c->health)) return; /* that post started another attempt */
  }
  if (send_state(c) != ncclSuccess) return;
  c->rec.phase = GDR_REC_WAIT_GO;
}

/* Receiver, on REC_GO: the sender's QPs are RTS. */
static void receiver_finish(struct gdr_rdma_comm *c) {
  uint64_t low = c->head > GDR_RDMA_FIFO_SLOTS ? c->head - GDR_RDMA_FIFO_SLOTS : 0;
  unsigned gen = c->qs_gen;
  uint64_t n = 0;
  c->rec.phase = GDR_REC_IDLE; /* posts below may fault again: that starts the next attempt */
  gdr_health_set_state(&c->health, GDR_HEALTH_OK);
  for (uint64_t seq = low; seq < c->head; seq++) {
    struct gdr_rdma_req *q = c->recv_slot[seq % GDR_RDMA_FIFO_SLOTS];
    if (q == NULL || q->seq != seq || q->events == 0) continue;
    (void)gdr_rdma_post_cts(c, q);
    n++;
    if (c->qs_gen != gen || gdr_health_failed(&c->health)) return;
  }
  for (int i = 0; i < c->nreqs_pool; i++) {
    struct gdr_rdma_req *q = &c->reqs[i];
    if (q->type != GDR_RREQ_FLUSH || q->events == 0) continue;
    (void)gdr_rdma_post_flush(c, q);
    if (c->qs_gen != gen || gdr_health_failed(&c->health)) return;
  }
  recovered(c, n, 0);
}

/* Sender, on the receiver's REC_STATE: its QPs to RTS, then every message in flight completed or replayed. */
static void sender_finish(struct gdr_rdma_comm *c) {
  const struct gdr_rdma_rec_state *p = &c->rec.peer;
  uint64_t msgs = 0, bytes = 0;
  unsigned gen;
  if (connect_to_peer(c) != 0) return;
  gen = c->qs_gen;
  c->rec.phase = GDR_REC_IDLE;
  gdr_health_set_state(&c->health, GDR_HEALTH_OK);
  if (gdr_rdma_ctrl_send(c, GDR_CTRL_REC_GO, c->rec.attempt, 0, 0, NULL, 0) != ncclSuccess) return;
  uint64_t low = c->head > GDR_RDMA_FIFO_SLOTS ? c->head - GDR_RDMA_FIFO_SLOTS : 0;
  for (uint64_t seq = low; seq <= c->head; seq++) {
    int slot = (int)(seq % GDR_RDMA_FIFO_SLOTS);
    struct gdr_rdma_smsg *m = &c->smsg[slot];
    if (m->seq != seq || (m->matched == 0 && m->live == 0)) continue;
    int complete = seq < p->head && (p->head - seq > 32 || !(p->incomplete & (1u << (p->head - 1 - seq))));
    if (complete) { /* the receiver has it whole: every part is placed, acknowledged or not */
      for (int r = 0; r < m->n; r++)
        if (m->part[r].req) m->part[r].req->events = 0;
      continue;
    }
    for (int r = 0; r < m->n; r++) {
      struct gdr_rdma_part *pt = &m->part[r];
      if (!pt->posted) continue;
      int carries_imm = m->n == 1 || (pt->req != NULL && pt->req == m->imm_req);
      if (pt->req == NULL && m->n == 1) {
        give_up(c, ncclInternalError, 1,
                "recovery: the receiver lacks a message whose send completed here (the two sides disagree)");
        return;
      }
      if (pt->req == NULL || (pt->req->events == 0 && !carries_imm)) continue; /* acknowledged: placed */
      pt->req->events = 0;
      (void)gdr_rdma_post_part(c, slot, r);
      bytes += pt->size;
      if (c->qs_gen != gen || gdr_health_failed(&c->health)) return;
    }
    if (m->row && m->imm_posted) {
      if (m->imm_req == NULL) {
        give_up(c, ncclInternalError, 1, "recovery: a grouped message lost the request of its last part");
        return;
      }
      (void)gdr_rdma_post_imm(c, slot);
      if (c->qs_gen != gen || gdr_health_failed(&c->health)) return;
    }
    msgs++;
  }
  recovered(c, msgs, bytes);
}

/* One step of an attempt in progress. */
static void step(struct gdr_rdma_comm *c) {
  struct gdr_rdma_rec *rc = &c->rec;
  uint64_t now = gdr_time_ns();
  if (now > rc->deadline_ns) {
    char why[sizeof(c->health.why)];
    snprintf(why, sizeof(why),
             "recovery did not finish within GDRNET_RECOVERY_TIMEOUT_MS=%lld (attempt %u, %s); first fault: %s",
             (long long)gdr_recovery_timeout_ms(), rc->attempt,
             rc->phase == GDR_REC_WAIT_PORT ? "the port is still down" : "waiting for the peer", rc->first_fault);
    give_up(c, ncclRemoteError, 1, why);
    return;
  }
  if (rc->phase != GDR_REC_WAIT_PORT || now < rc->retry_ns || now < rc->port_check_ns) return;
  int active = 0;
  if (gdr_rdma_comm_refresh(c, &active) != 0 || !active) {
    rc->port_check_ns = now + PORT_CHECK_NS;
    return;
  }
  if ((rc->rekey & my_rekey_bit(c)) && !rc->rekeyed) {
    rc->rekeyed = 1;
    if (gdr_rdma_rekey(c) != ncclSuccess) {
      give_up(c, ncclSystemError, 1, "recovery: registering the connection's own buffers again failed");
      return;
    }
  }
  struct gdr_rdma_qpset qs;
  if (gdr_rdma_qpset_create(c, &qs) != ncclSuccess) {
    rc->retry_ns = now + BACKOFF_BASE_NS; /* within the deadline: resources may come back */
    return;
  }
  gdr_rdma_qs_swap(c, &qs, NULL);
  rc->phase = GDR_REC_WAIT_PEER;
  if (is_sender(c)) {
    if (send_state(c) != ncclSuccess) return;
    if (rc->have_peer) sender_finish(c);
  } else if (rc->have_peer) {
    receiver_connect(c);
  } else {
    (void)gdr_rdma_ctrl_send(c, GDR_CTRL_REC_REQ, rc->attempt, rc->rekey, 0, NULL, 0);
  }
}

/* One handler per record type (the table, gdr_rdma_resiliency, is at the end of this file). */

/* The peer gave up on the connection: no fallback of our own. */
static ncclResult_t on_rec_fail(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  gdr_rdma_comm_fail(c, m->a >= 1 && m->a <= 6 ? (ncclResult_t)m->a : ncclRemoteError,
                     "the peer gave up on the connection (%.*s)", (int)(m->len < 400 ? m->len : 400),
                     (const char *)payload);
  c->rec.phase = GDR_REC_IDLE;
  return gdr_rdma_comm_check(c);
}

/* REC_REQ/STATE/GO name attempt k: a stale one is ignored (0); a newer one makes this side join it, with new keys
 * for its own buffers if the peer says so; in the same attempt, keys the peer asks that this side has not planned
 * are added. 1: the record is for the attempt this side is in (*res on a failure: 0). */
static int rec_join(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, ncclResult_t *res) {
  struct gdr_rdma_rec *rc = &c->rec;
  const uint32_t k = (uint32_t)m->seq;
  *res = ncclSuccess;
  if (!(c->remote.caps & GDR_RDMA_CAP_RECOVERY) || k < rc->attempt || (k == rc->attempt && rc->phase == GDR_REC_IDLE))
    return 0; /* stale: an attempt both sides are past */
  /* REC_REQ/REC_STATE: a = whose own buffers get new keys in attempt k (0 from a peer that does not say) */
  unsigned rekey = (m->type == GDR_CTRL_REC_REQ || m->type == GDR_CTRL_REC_STATE) ? (unsigned)(m->a & REKEY_BOTH) : 0;
  int action = (rekey & my_rekey_bit(c)) ? GDR_FAULT_REKEY : GDR_FAULT_RECOVER;
  if (k > rc->attempt) {
    /* the peer saw a fault (or gave up an attempt): join it, with new keys for this side if it says so */
    if (rc->phase == GDR_REC_IDLE)
      gdr_rdma_fault(c, action, rekey, ncclRemoteError, "the peer asks to recover (attempt %u%s)", k,
                     action == GDR_FAULT_REKEY ? ", new keys for this side's own buffers" : "");
    else
      start_attempt(c, k, action, rekey);
    if (gdr_health_failed(&c->health)) {
      *res = gdr_rdma_comm_check(c);
      return 0;
    }
    rc->attempt = k;
  } else if ((rekey & ~rc->rekey) != 0) {
    /* the same attempt, and the peer (which saw a fault of its own) wants keys this side has not planned */
    unsigned want = rc->rekey | rekey;
    if (!(rekey & my_rekey_bit(c)) || !rc->rekeyed) {
      rc->rekey = want; /* (the peer's own, or ours before our QPs exist: step registers them) */
      if (rc->phase != GDR_REC_WAIT_PORT && (rekey & my_rekey_bit(c))) {
        /* our QPs and state went out with the old keys: a new attempt, with the new keys */
        gdr_rdma_fault(c, GDR_FAULT_REKEY, want, ncclRemoteError,
                       "the peer asks for new keys of this side's own buffers (attempt %u)", k);
        *res = gdr_rdma_comm_check(c);
        return 0;
      }
    }
  }
  return 1;
}

/* (sender) its REC_STATE for k goes out once its QPs exist */
static ncclResult_t on_rec_req(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  ncclResult_t res;
  (void)payload;
  (void)rec_join(c, m, &res);
  return res;
}

static ncclResult_t on_rec_state(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  struct gdr_rdma_rec *rc = &c->rec;
  ncclResult_t res;
  if (!rec_join(c, m, &res)) return res;
  const char *bad =
      gdr_rdma_rec_state_check(payload, m->len, is_sender(c) ? GDR_RDMA_ROLE_RECV : GDR_RDMA_ROLE_SEND, c->nqps);
  if (bad) {
    char why[sizeof(c->health.why)];
    snprintf(why, sizeof(why), "malformed recovery state from the peer (attempt %u): %s", (uint32_t)m->seq, bad);
    give_up(c, ncclRemoteError, 1, why);
    return gdr_rdma_comm_check(c);
  }
  memcpy(&rc->peer, payload, sizeof(rc->peer));
  rc->have_peer = 1;
  if (rc->phase == GDR_REC_WAIT_PEER) {
    if (is_sender(c))
      sender_finish(c);
    else
      receiver_connect(c);
  }
  return ncclSuccess;
}

static ncclResult_t on_rec_go(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  ncclResult_t res;
  (void)payload;
  if (!rec_join(c, m, &res)) return res;
  if (c->rec.phase == GDR_REC_WAIT_GO) receiver_finish(c);
  return ncclSuccess;
}

/* ------------------------------------------------------------------------------------------- progress -- */

/* The faults the async threads saw, oldest first. One about QPs a recovery already replaced is stale (the first
 * one taken may start that recovery: the rest of its generation then are); a lost device never is. */
static void take_pending(struct gdr_rdma_comm *c) {
  struct gdr_rdma_pending_ev ev;
  while (gdr_rdma_pending_pop(&c->pending, &ev)) {
    if (gdr_health_failed(&c->health)) continue; /* (drained: nothing is left for a failed connection) */
    if (ev.gen != c->qs_gen && ev.action != GDR_FAULT_DEVICE) continue;
    fault(c, ev.action, 0, ev.action == GDR_FAULT_DEVICE ? ncclSystemError : ncclRemoteError, ev.why);
  }
}

ncclResult_t gdr_rdma_progress(struct gdr_rdma_comm *c, int *busy) {
  struct gdr_rdma_rec *rc = &c->rec;
  uint64_t now;
  *busy = 0;
  if (gdr_health_failed(&c->health)) return gdr_rdma_comm_check(c);
  take_pending(c);
  now = gdr_time_ns();
  if (rc->phase != GDR_REC_IDLE || now >= c->ctrl_next_check_ns) {
    c->ctrl_next_check_ns = now + CTRL_CHECK_NS;
    (void)gdr_rdma_ctrl_poll(c);
  }
  if (rc->phase != GDR_REC_IDLE && !gdr_health_failed(&c->health)) step(c);
  if (c->fb.path != GDR_PATH_RDMA && !gdr_health_failed(&c->health)) {
    int fbusy = 0;
    gdr_rdma_fb_step(c, &fbusy);
    if (fbusy) {
      *busy = 1;
      return gdr_rdma_comm_check(c);
    }
  }
  if (c->peer_gone && !gdr_health_failed(&c->health)) {
    if (rc->phase != GDR_REC_IDLE) {
      give_up(c, ncclRemoteError, 0, "the peer closed the connection (control channel EOF) during recovery");
    } else {
      (void)gdr_rdma_ctrl_eof(c); /* past the grace: fails the connection */
    }
  }
  if (gdr_health_failed(&c->health)) return gdr_rdma_comm_check(c);
  *busy = rc->phase != GDR_REC_IDLE;
  return ncclSuccess;
}

void gdr_rdma_rec_report(struct gdr_rdma_comm *c) {
  struct gdr_rdma_rec *rc = &c->rec;
  if (rc->faults == 0) return;
  GDR_INFO(NCCL_NET,
           "%s stats: %llu fault(s) (%llu recoverable, %llu key, %llu device, %llu peer, %llu fatal), %llu "
           "recovery(ies) in %llu attempt(s), %llu ms recovering, %llu message(s) / %llu bytes replayed, %llu "
           "flushed completion(s) ignored; state %s",
           c->desc, (unsigned long long)rc->faults, (unsigned long long)rc->faults_by_action[GDR_FAULT_RECOVER],
           (unsigned long long)rc->faults_by_action[GDR_FAULT_REKEY],
           (unsigned long long)rc->faults_by_action[GDR_FAULT_DEVICE],
           (unsigned long long)rc->faults_by_action[GDR_FAULT_PEER],
           (unsigned long long)rc->faults_by_action[GDR_FAULT_BUG], (unsigned long long)rc->recoveries,
           (unsigned long long)rc->attempts, (unsigned long long)(rc->recover_ns / 1000000ull),
           (unsigned long long)rc->replayed_msgs, (unsigned long long)rc->replayed_bytes,
           (unsigned long long)rc->ignored_wcs, gdr_health_state_str(gdr_health_state(&c->health)));
}

/* ------------------------------------------------------------------------------------- the layer's face -- */

/* What the layers below hand up to this one (rdma.h, struct gdr_rdma_up): the faults the data path finds and every
 * control record of recovery, fallback and the way back, one handler per type. */
const struct gdr_rdma_up gdr_rdma_resiliency = {
    .fault = fault,
    .record =
        {
            [GDR_CTRL_REC_REQ] = on_rec_req,
            [GDR_CTRL_REC_STATE] = on_rec_state,
            [GDR_CTRL_REC_GO] = on_rec_go,
            [GDR_CTRL_REC_FAIL] = on_rec_fail,
            [GDR_CTRL_FB_REQ] = gdr_rdma_fb_on_req,
            [GDR_CTRL_FB_RSTATE] = gdr_rdma_fb_on_rstate,
            [GDR_CTRL_FB_SSTATE] = gdr_rdma_fb_on_sstate,
            [GDR_CTRL_BACK_OFFER] = gdr_rdma_back_on_offer,
            [GDR_CTRL_BACK_READY] = gdr_rdma_back_on_ready,
            [GDR_CTRL_BACK_NOT_YET] = gdr_rdma_back_on_not_yet,
            [GDR_CTRL_BACK_SWITCH] = gdr_rdma_back_on_switch,
            [GDR_CTRL_BACK_AT] = gdr_rdma_back_on_at,
            [GDR_CTRL_BACK_FINAL] = gdr_rdma_back_on_final,
        },
};

void gdr_rdma_resil_close(struct gdr_rdma_comm *c) {
  if (c == NULL) return;
  gdr_rdma_fb_close(c);
  if (c->stage != 0) return; /* (a connection that never came up has nothing to report) */
  gdr_rdma_rec_report(c);
  gdr_rdma_fb_report(c);
}
