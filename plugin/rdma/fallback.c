/* RDMA transport: a connection that RDMA cannot carry moves to TCP, and back. Protocol and what each side
 * keeps: plugin/rdma/README.md, "Fallback to TCP and back".
 *
 * The RDMA transport owns the move (the core never swaps a connection's transport). The connection stays the same
 * object for NCCL (comm, requests, memory handles): once moved, its isend/irecv/test hand the work to a TCP comm of
 * the TCP transport nested in it (through fb_tcp.h, the one seam to plugin/tcp), set up over the connection's control
 * channel (the receiver opens a TCP listener and announces its handle: NCCL's listen comm may be long closed). GPU buffers are
 * staged through pinned host buffers by the TCP transport (tcp_cuda.c).
 *
 * Moving (epoch e; both sides count fallbacks alike):
 *   either side stops RDMA (QPs to ERR, CQ drained: what completed counts, the QP set destroyed)
 *   sender:   FB_REQ{e}                                  -> waits for the receiver's state
 *   receiver: TCP listener; FB_RSTATE{e: head, incomplete mask, TCP handle}
 *   sender:   messages the receiver has: complete; of the others, the parts whose writes were acknowledged are
 *             placed: FB_SSTATE{e: per message, the placed buffers and their sizes}; the parts not placed go to
 *             TCP, in message order, before any new isend; TCP connect
 *   receiver: placed buffers complete without waiting; each incomplete receive is posted on TCP with the buffers
 *             still missing (a receive with none missing completes), in order, before any new irecv; TCP accept
 * Back (probed with backoff while on TCP). One TCP connection per connection, kept until close and used again by a
 * later fallback: the TCP message numbers of both sides stay one ordered stream.
 *   receiver: its port ACTIVE: new QPs, BACK_OFFER{QPs}      sender: its port ACTIVE too: new QPs to RTS, FIFO
 *             cleared, BACK_READY{QPs} (else BACK_NOT_YET)   receiver: QPs to RTS, then a zero-length RDMA WRITE on
 *   each (the probe: the path carries traffic both ways, not just the ports are up); failed, or not done within
 *   PROBE_WAIT: BACK_NOT_YET, later again. Done: the switch point is per tag (TCP matches the k-th isend with tag
 *   t to the k-th buffer with tag t; with PXN's order and eager messages accepted for later slots the per-tag
 *   counts differ): BACK_SWITCH{R: its TCP buffers per tag}, and no new receive until
 *   sender: BACK_AT{S: its TCP isends per tag, accepted or announced}; until BACK_FINAL an isend with tag t goes
 *             over TCP while its count is below R_t, else NULL
 *   receiver: receives over TCP until they cover S (BACK_SWITCH again when its counts grew: the sender may fill
 *             those buffers over TCP), then BACK_FINAL{F} and RDMA (numbered from 0)
 *   sender:   an isend with tag t over TCP while its count is below F_t, else over RDMA.
 *   A fault before BACK_SWITCH abandons the way back; after it, it is a new fallback (what was given to RDMA goes
 *   over TCP after the rest). A connection that falls back more than GDRNET_FAILBACK_FLAPS
 *   times within GDRNET_FAILBACK_WINDOW_S stays on TCP (one WARN). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fb_tcp.h"
#include "rdma.h"

#define PROBE_MIN_NS 100000000ull   /* the way back is first probed 100 ms after the move, */
#define PROBE_MAX_NS 10000000000ull /* then with backoff up to every 10 s */
#define PROBE_WAIT_NS 2000000000ull /* a probe WRITE not acknowledged within 2 s: the path is not back */

static int is_sender(const struct gdr_rdma_comm *c) { return c->kind == GDR_RCOMM_SEND; }

/* the device's counters (GDRNET_STATS_FILE) */
#define DEV_ADD(c, field, v) atomic_fetch_add_explicit(&(c)->dev->ctr.field, (v), memory_order_relaxed)

static uint64_t ms_ns(int64_t ms) { return (uint64_t)ms * 1000000ull; }

int gdr_rdma_fb_allowed(const struct gdr_rdma_comm *c) {
  return gdr_fallback_allowed() && (c->remote.caps & GDR_RDMA_CAP_FALLBACK) && c->fd >= 0 && !c->peer_gone;
}

static void fail(struct gdr_rdma_comm *c, ncclResult_t res, const char *why) {
  if (gdr_health_failed(&c->health)) return;
  gdr_rdma_comm_fail(c, res, "%s", why);
  atomic_fetch_add_explicit(&c->dev->ctr.failed, 1, memory_order_relaxed);
  (void)gdr_rdma_ctrl_send(c, GDR_CTRL_REC_FAIL, c->fb.epoch, (uint64_t)res, 0, why, strlen(why));
}

/* ------------------------------------------------------------------------------------ per-tag counts -- */
/* The way back splits the stream per tag (TCP matches the k-th isend with tag t to the k-th buffer with tag t): each
 * tag's first F_t messages over TCP, the rest over RDMA. Counts are of the whole connection (one TCP connection per
 * connection, kept across fallbacks). */

static int tags_add(struct gdr_rdma_back_tag *v, int *n, int tag, uint64_t k) {
  for (int i = 0; i < *n; i++)
    if (v[i].tag == tag) {
      v[i].n += k;
      return 0;
    }
  if (*n == GDR_RDMA_BACK_MAX_TAGS) return -1;
  v[*n].tag = tag;
  v[*n].rsvd = 0;
  v[(*n)++].n = k;
  return 0;
}

static uint64_t tags_of(const struct gdr_rdma_back_tag *v, int n, int tag) {
  for (int i = 0; i < n; i++)
    if (v[i].tag == tag) return v[i].n;
  return 0;
}

static uint64_t tags_sum(const struct gdr_rdma_back_tag *v, int n) {
  uint64_t s = 0;
  for (int i = 0; i < n; i++) s += v[i].n;
  return s;
}

/* This side's TCP messages per tag once the requests still queued for TCP (a move's hand-over, TCP full) are handed
 * over: a sender's isends (accepted, or announced by an RTS: NCCL's retry must come to TCP), a receiver's buffers.
 * The number of entries in v, -1 with more tags than a BACK_* record carries. */
static int tag_counts(const struct gdr_rdma_comm *c, struct gdr_rdma_back_tag *v) {
  const struct gdr_rdma_fb *fb = &c->fb;
  int tags[GDR_RDMA_BACK_MAX_TAGS], n = 0;
  uint64_t cnt[GDR_RDMA_BACK_MAX_TAGS];
  int k = gdr_fb_tcp_tag_counts(fb->tcp, tags, cnt, GDR_RDMA_BACK_MAX_TAGS);
  if (k > GDR_RDMA_BACK_MAX_TAGS) return -1;
  for (int i = 0; i < k; i++) (void)tags_add(v, &n, tags[i], gdr_fb_tcp_tag_count(fb->tcp, tags[i]));
  for (int i = fb->qhead; i != fb->qtail; i++) {
    const struct gdr_rdma_req *q = fb->queue[i % GDR_FB_QUEUE];
    if (is_sender(c)) {
      if (tags_add(v, &n, q->tag, 1) != 0) return -1;
      continue;
    }
    for (int j = 0; j < q->tn; j++)
      if (tags_add(v, &n, (int)c->cts_src[q->slot].e[q->tmap[j]].tag, 1) != 0) return -1;
  }
  /* a sender's announced message (an RTS) is the next of its tag: counted unless it is a queued one */
  for (int i = 0; i < k && is_sender(c); i++)
    if (tags_of(v, n, tags[i]) < cnt[i]) (void)tags_add(v, &n, tags[i], cnt[i] - tags_of(v, n, tags[i]));
  return n;
}

/* The counts as a BACK_SWITCH/AT/FINAL record (b = their sum). */
static ncclResult_t send_counts(struct gdr_rdma_comm *c, int type, const struct gdr_rdma_back_tag *v, int n) {
  return gdr_rdma_ctrl_send(c, type, c->fb.epoch, c->fb.offer, tags_sum(v, n), v, (size_t)n * sizeof(v[0]));
}

/* Sender: messages with this tag still owed to TCP (below the bound the receiver named). */
static int tcp_owed(const struct gdr_rdma_comm *c, int tag) {
  return gdr_fb_tcp_tag_count(c->fb.tcp, tag) < tags_of(c->fb.bound, c->fb.nbound, tag);
}

/* ---------------------------------------------------------------------------------------------- moving -- */

static void enqueue(struct gdr_rdma_comm *c, struct gdr_rdma_req *r) {
  r->on_tcp = 1;
  r->treq = NULL;
  c->fb.queue[c->fb.qtail++ % GDR_FB_QUEUE] = r;
}

static ncclResult_t open_listener(struct gdr_rdma_comm *c) {
  struct gdr_conn_opts to = gdr_conn_opts_one(c->fb.tcp_dev);
  to.traffic_class = c->tc;
  memset(&c->fb.tcp_handle, 0, sizeof(c->fb.tcp_handle));
  return gdr_fb_tcp_listen(c->fb.tcp_dev, &to, &c->fb.tcp_handle, &c->fb.tcp_listen);
}

static ncclResult_t send_rstate(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb_rstate st;
  memset(&st, 0, sizeof(st));
  st.head = c->head;
  for (int i = 0; i < GDR_RDMA_FIFO_SLOTS && (uint64_t)i < c->head; i++) {
    uint64_t seq = c->head - 1 - (uint64_t)i;
    struct gdr_rdma_req *q = c->recv_slot[seq % GDR_RDMA_FIFO_SLOTS];
    if (q && q->seq == seq && q->events > 0) st.incomplete |= 1u << i;
  }
  if (c->fb.tcp)
    st.flags |= GDR_RDMA_FB_REUSE;
  else
    memcpy(st.tcp_handle, &c->fb.tcp_handle, sizeof(st.tcp_handle));
  return gdr_rdma_ctrl_send(c, GDR_CTRL_FB_RSTATE, c->fb.epoch, 0, 0, &st, sizeof(st));
}

void gdr_rdma_fb_begin(struct gdr_rdma_comm *c, const char *why) {
  struct gdr_rdma_fb *fb = &c->fb;
  char lg[64], rg[64];
  if (gdr_health_failed(&c->health) || fb->path == GDR_PATH_MOVING) return;
  if (!gdr_rdma_fb_allowed(c)) {
    char full[sizeof(c->health.why)];
    snprintf(full, sizeof(full), "%.380s; no fallback to TCP (%s)", why,
             !gdr_fallback_allowed()                     ? gdr_fallback_off_reason()
             : !(c->remote.caps & GDR_RDMA_CAP_FALLBACK) ? "the peer cannot (an older plugin)"
                                                         : "the control channel is gone");
    fail(c, ncclRemoteError, full);
    return;
  }
  gdr_rdma_addr_str(c, 0, lg, sizeof(lg));
  gdr_rdma_addr_str(c, 1, rg, sizeof(rg));
  /* the decision in one short WARN (its reason up to the first fault's detail); the whole reason at INFO(NET) */
  const char *ff = strstr(why, "; first fault: ");
  int head = ff ? (int)(ff - why) : (int)strlen(why);
  GDR_WARN("%s moves to TCP: %.*s%s", c->desc, head < 120 ? head : 117, why, head < 120 ? "" : "...");
  GDR_INFO(NCCL_NET, "%s (local %s, remote %s) moves to TCP: %s", c->desc, lg, rg, why);
  snprintf(fb->reason, sizeof(fb->reason), "%.255s", why);
  c->rec.phase = GDR_REC_IDLE; /* a recovery in progress is abandoned */
  gdr_health_set_state(&c->health, GDR_HEALTH_RECOVERING);
  if (c->qs.cq != NULL || c->qs.qps[0] != NULL) gdr_rdma_quiesce_qps(c);
  /* a GDR flush waiting on the quiesced flush QP: the writes it orders were made by the NIC before (its receive
   * completed); it completes now, not once the peer answers (an idle peer, its sends all done, may answer late) */
  if (!is_sender(c))
    for (int i = 0; i < c->nreqs_pool; i++)
      if (c->reqs[i].type == GDR_RREQ_FLUSH && c->reqs[i].events > 0) c->reqs[i].events = 0;
  if (gdr_rdma_comm_fatal(c)) {
    gdr_rdma_dereg_own(c); /* nothing of a lost device stays registered */
    fb->pinned = 1;
  }
  fb->path = GDR_PATH_MOVING;
  fb->epoch++;
  fb->move_msgs0 = fb->replayed_msgs;
  fb->move_bytes0 = fb->replayed_bytes;
  fb->have_rstate = 0;
  fb->back = GDR_BACK_NONE;
  fb->switch_at = 0;
  fb->nbound = 0;
  fb->told = 0;
  fb->deadline_ns = gdr_time_ns() + gdr_recovery_timeout_ns();
  if (is_sender(c)) {
    fb->phase = GDR_FB_WAIT_RSTATE;
    (void)gdr_rdma_ctrl_send(c, GDR_CTRL_FB_REQ, fb->epoch, 0, 0, why, strlen(why));
    return;
  }
  fb->phase = GDR_FB_WAIT_SSTATE;
  if ((fb->tcp == NULL && open_listener(c) != ncclSuccess) || send_rstate(c) != ncclSuccess)
    fail(c, ncclSystemError, "the fallback to TCP could not open a TCP listener for the connection");
}

/* Sender, on the receiver's state: complete what it has, tell it what is placed, queue the rest for TCP. */
static void sender_apply(struct gdr_rdma_comm *c) {
  const struct gdr_rdma_fb_rstate *p = &c->fb.rstate;
  struct gdr_rdma_fb_sent sent[GDR_RDMA_FB_MAX_SENT];
  int ns = 0;
  if (!(p->flags & GDR_RDMA_FB_REUSE) != (c->fb.tcp == NULL)) {
    fail(c, ncclInternalError,
         c->fb.tcp ? "the peer opened a new TCP connection for the fallback although one is open"
                   : "the peer wants to reuse a TCP connection of an earlier fallback that this side does not have");
    return;
  }
  uint64_t low = c->head > GDR_RDMA_FIFO_SLOTS ? c->head - GDR_RDMA_FIFO_SLOTS : 0;
  memset(sent, 0, sizeof(sent));
  for (uint64_t seq = low; seq <= c->head; seq++) {
    int slot = (int)(seq % GDR_RDMA_FIFO_SLOTS);
    struct gdr_rdma_smsg *m = &c->smsg[slot];
    if (m->seq != seq || (m->matched == 0 && m->live == 0)) continue;
    int complete = seq < p->head && (p->head - seq > 32 || !(p->incomplete & (1u << (p->head - 1 - seq))));
    struct gdr_rdma_fb_sent *e = complete || ns == GDR_RDMA_FB_MAX_SENT ? NULL : &sent[ns++];
    if (e) {
      e->seq = seq;
      e->n = (uint8_t)m->n;
    }
    for (int r = 0; r < m->n; r++) {
      struct gdr_rdma_part *pt = &m->part[r];
      struct gdr_rdma_req *q = pt->req;
      /* placed: its writes were acknowledged (a lone part's WRITE_WITH_IMM too); the last part of a group also
       * waits for the immediates, so its own data is not known placed: it goes again */
      int placed = pt->posted && (q == NULL || (q->events == 0 && !(m->n > 1 && q == m->imm_req)));
      if (complete || placed) {
        if (e && placed) {
          e->placed |= (uint8_t)(1u << r);
          e->size[r] = pt->size;
        }
        if (q) {
          q->on_tcp = 1;
          q->tcp_done = 1;
          q->events = 0;
        }
      } else if (q) {
        GDR_TRACE(NCCL_NET, "%s: move %u: message #%llu part %d/%d (%zu bytes, tag %d) goes over TCP", c->desc,
                  c->fb.epoch, (unsigned long long)seq, r, m->n, pt->size, q->tag);
        q->events = 0;
        q->data[0] = pt->data;
        enqueue(c, q);
        c->fb.replayed_msgs++;
        c->fb.replayed_bytes += pt->size;
        DEV_ADD(c, handed_msgs, 1);
        DEV_ADD(c, handed_bytes, pt->size);
      }
      pt->req = NULL;
    }
    memset(m, 0, sizeof(*m)); /* the RDMA path forgets the message: TCP (or nothing) completes its requests */
  }
  GDR_INFO(NCCL_NET,
           "%s: move %u: the receiver has %llu message(s) (incomplete mask 0x%x), this side sent up to #%llu; "
           "%d partly placed; %d request(s) to TCP from TCP message %llu",
           c->desc, c->fb.epoch, (unsigned long long)p->head, p->incomplete, (unsigned long long)c->head, ns,
           c->fb.qtail - c->fb.qhead, c->fb.tcp ? (unsigned long long)gdr_fb_tcp_next_seq(c->fb.tcp) : 0ull);
  if (gdr_rdma_ctrl_send(c, GDR_CTRL_FB_SSTATE, c->fb.epoch, 0, 0, sent, (size_t)ns * sizeof(sent[0])) != ncclSuccess)
    return;
  memcpy(&c->fb.tcp_handle, p->tcp_handle, sizeof(c->fb.tcp_handle));
  c->fb.phase = GDR_FB_CONNECT;
}

/* Receiver, on the sender's state: placed buffers complete; the incomplete receives go to TCP with what is missing. */
static void receiver_apply(struct gdr_rdma_comm *c, const struct gdr_rdma_fb_sent *sent, int ns) {
  uint64_t low = c->head > GDR_RDMA_FIFO_SLOTS ? c->head - GDR_RDMA_FIFO_SLOTS : 0;
  for (uint64_t seq = low; seq < c->head; seq++) {
    struct gdr_rdma_req *q = c->recv_slot[seq % GDR_RDMA_FIFO_SLOTS];
    if (q == NULL || q->seq != seq) continue;
    c->recv_slot[seq % GDR_RDMA_FIFO_SLOTS] = NULL;
    q->on_tcp = 1;
    if (q->events == 0) { /* complete over RDMA: its sizes are in (grouped: in the sizes array) */
      if (q->row)
        for (int i = 0; i < q->nreqs; i++) q->sent[i] = (size_t)c->sizes[q->slot].size[i];
      q->tcp_done = 1;
      continue;
    }
    const struct gdr_rdma_fb_sent *e = NULL;
    for (int k = 0; k < ns && e == NULL; k++)
      if (sent[k].seq == seq && sent[k].n == q->nreqs) e = &sent[k];
    q->tn = 0;
    for (int i = 0; i < q->nreqs; i++) {
      if (e && (e->placed >> i & 1)) {
        q->sent[i] = e->size[i];
      } else {
        q->tmap[q->tn++] = (uint8_t)i;
      }
    }
    q->events = 0;
    GDR_TRACE(NCCL_NET, "%s: move %u: receive #%llu (%d buffer(s)): %d go over TCP (placed mask 0x%x)", c->desc,
              c->fb.epoch, (unsigned long long)seq, q->nreqs, q->tn, e ? e->placed : 0);
    if (q->tn == 0) {
      q->tcp_done = 1;
    } else {
      enqueue(c, q);
      c->fb.replayed_msgs++;
      DEV_ADD(c, handed_msgs, 1);
    }
  }
  GDR_INFO(NCCL_NET,
           "%s: move %u: %llu receive(s) posted over RDMA, %d partly placed by the sender; %d receive(s) to TCP "
           "from TCP message %llu",
           c->desc, c->fb.epoch, (unsigned long long)c->head, ns, c->fb.qtail - c->fb.qhead,
           c->fb.tcp ? (unsigned long long)gdr_fb_tcp_next_seq(c->fb.tcp) : 0ull);
  /* a GDR flush waiting on the destroyed flush QP: the writes it orders were made by the NIC long ago */
  for (int i = 0; i < c->nreqs_pool; i++)
    if (c->reqs[i].type == GDR_RREQ_FLUSH && c->reqs[i].events > 0) c->reqs[i].events = 0;
  c->fb.phase = GDR_FB_CONNECT;
}

/* The TCP connection: the sender connects with the receiver's handle, the receiver accepts (both non-blocking). */
static void tcp_connect_step(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  void *tc = fb->tcp;
  ncclResult_t r = ncclSuccess;
  struct gdr_conn_opts to = gdr_conn_opts_one(fb->tcp_dev);
  to.traffic_class = c->tc;
  if (tc == NULL && is_sender(c))
    r = gdr_fb_tcp_connect(fb->tcp_dev, &to, &fb->tcp_handle, &tc);
  else if (tc == NULL)
    r = gdr_fb_tcp_accept(fb->tcp_listen, &tc);
  /* else an earlier fallback's TCP connection carries on */
  if (r != ncclSuccess) {
    fail(c, r, "the fallback's TCP connection could not be set up (see the WARN above)");
    return;
  }
  if (tc == NULL) return;
  fb->tcp = tc;
  if (fb->tcp_listen) {
    gdr_fb_tcp_close_listen(fb->tcp_listen);
    fb->tcp_listen = NULL;
  }
  fb->path = GDR_PATH_TCP;
  fb->phase = GDR_FB_DONE;
  fb->fallbacks++;
  DEV_ADD(c, fallbacks, 1);
  DEV_ADD(c, on_tcp, 1);
  fb->since_ns = gdr_time_ns();
  fb->probe_backoff_ns = PROBE_MIN_NS;
  fb->probe_ns = fb->since_ns + PROBE_MIN_NS;
  if (fb->nflaps < (int)(sizeof(fb->flap_ns) / sizeof(fb->flap_ns[0]))) fb->flap_ns[fb->nflaps++] = fb->since_ns;
  gdr_health_set_state(&c->health, GDR_HEALTH_ON_TCP);
  GDR_WARN("%s now runs over TCP (fallback %llu); %llu message(s) / %llu bytes go over TCP again", c->desc,
           (unsigned long long)fb->fallbacks, (unsigned long long)(fb->replayed_msgs - fb->move_msgs0),
           (unsigned long long)(fb->replayed_bytes - fb->move_bytes0));
}

/* Hands the queued requests to TCP, in order, as far as TCP takes them. */
static void drain_queue(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  while (fb->qhead != fb->qtail) {
    struct gdr_rdma_req *q = fb->queue[fb->qhead % GDR_FB_QUEUE];
    void *treq = NULL;
    ncclResult_t r;
    if (is_sender(c)) {
      r = gdr_fb_tcp_isend(fb->tcp, q->data[0], q->size, q->tag, q->mh[0], &treq);
    } else {
      void *data[GDR_RDMA_MAX_RECVS];
      struct gdr_rdma_mh *mhs[GDR_RDMA_MAX_RECVS];
      size_t sizes[GDR_RDMA_MAX_RECVS];
      int tags[GDR_RDMA_MAX_RECVS];
      for (int k = 0; k < q->tn; k++) { /* the buffers still missing */
        int i = q->tmap[k];
        data[k] = q->data[i];
        sizes[k] = q->cap[i];
        tags[k] = (int)c->cts_src[q->slot].e[i].tag;
        mhs[k] = q->mh[i];
      }
      r = gdr_fb_tcp_irecv(fb->tcp, q->tn, data, sizes, tags, mhs, &treq);
    }
    if (r != ncclSuccess) {
      fail(c, r, "handing a request over to the fallback's TCP connection failed");
      return;
    }
    if (treq == NULL) return; /* TCP is full: later */
    q->treq = treq;
    fb->tcp_pending++;
    fb->qhead++;
  }
}

/* ------------------------------------------------------------------------------------------- way back -- */

static int flapping(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  uint64_t now = gdr_time_ns(), window = ms_ns(gdr_param_int(GDR_PARAM_FAILBACK_WINDOW_S) * 1000);
  int n = 0;
  for (int i = 0; i < fb->nflaps; i++)
    if (now - fb->flap_ns[i] < window) n++;
  if (n <= (int)gdr_param_int(GDR_PARAM_FAILBACK_FLAPS)) return 0;
  if (!fb->pinned) {
    fb->pinned = 1;
    GDR_WARN("%s fell back to TCP %d times within GDRNET_FAILBACK_WINDOW_S=%lld: it stays on TCP (GDRNET_FAILBACK_FLAPS"
             "=%lld)",
             c->desc, n, (long long)gdr_param_int(GDR_PARAM_FAILBACK_WINDOW_S),
             (long long)gdr_param_int(GDR_PARAM_FAILBACK_FLAPS));
  }
  return 1;
}

/* The way back is abandoned before the switch point is agreed: the new QPs go, the probe backs off; tell: the peer
 * is told (it may hold QPs for this offer, or wait for its switch point). */
static void back_abort(struct gdr_rdma_comm *c, int tell, const char *why) {
  struct gdr_rdma_fb *fb = &c->fb;
  GDR_INFO(NCCL_NET, "%s stays on TCP for now: %s", c->desc, why);
  if (c->qs.cq) gdr_rdma_quiesce_qps(c);
  if (tell) (void)gdr_rdma_ctrl_send(c, GDR_CTRL_BACK_NOT_YET, fb->epoch, fb->offer, 0, NULL, 0);
  fb->back = GDR_BACK_NONE;
  fb->nbound = 0;
  fb->told = 0;
  fb->probes = 0;
  fb->probe_backoff_ns = fb->probe_backoff_ns * 2 > PROBE_MAX_NS ? PROBE_MAX_NS : fb->probe_backoff_ns * 2;
  fb->probe_ns = gdr_time_ns() + fb->probe_backoff_ns;
}

/* This side's port is up and a new QP set is made: 0; else nonzero. */
static int back_prepare(struct gdr_rdma_comm *c) {
  int active = 0;
  struct gdr_rdma_qpset qs;
  if (gdr_rdma_comm_fatal(c) || gdr_rdma_comm_refresh(c, &active) != 0 || !active) return -1;
  if (gdr_rdma_qpset_create(c, &qs) != ncclSuccess) return -1;
  gdr_rdma_qs_swap(c, &qs, NULL);
  return 0;
}

/* Receiver: a zero-length RDMA WRITE on each new QP (into the sender's FIFO: nothing changes there). Each completes
 * only once the sender's NIC acknowledged it: the path works both ways, not just the two ports. */
static int post_probes(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  for (int i = 0; i < c->nqps; i++) {
    struct ibv_send_wr w, *bad = NULL;
    memset(&w, 0, sizeof(w));
    w.wr_id = gdr_wr_id(GDR_WR_PROBE, i, fb->offer);
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = c->rfifo_addr;
    w.wr.rdma.rkey = c->rfifo_rkey[i % c->remote.ndevs];
    if (gdr_ibv_post_send(c->qs.qps[i], &w, &bad) != 0) return -1;
  }
  fb->probes = c->nqps;
  return 0;
}

/* Receiver: the probes' completions. 1: all went through; -1: one failed; 0: not yet. */
static int poll_probes(struct gdr_rdma_comm *c, const char **why) {
  struct gdr_rdma_fb *fb = &c->fb;
  struct ibv_wc wcs[GDR_RDMA_CQ_BATCH];
  int n;
  while ((n = gdr_rdma_poll_cqs(&c->qs, GDR_RDMA_CQ_BATCH, wcs)) > 0) {
    for (int i = 0; i < n; i++) {
      if (wcs[i].status != IBV_WC_SUCCESS) {
        *why = gdr_ibv_wc_status_str(wcs[i].status);
        return -1;
      }
      if (gdr_wr_kind(wcs[i].wr_id) == GDR_WR_PROBE && gdr_wr_seq(wcs[i].wr_id) == (fb->offer & 0xffffffffffffull))
        fb->probes--;
    }
  }
  if (n < 0) {
    *why = "ibv_poll_cq failed";
    return -1;
  }
  return fb->probes <= 0 ? 1 : 0;
}

/* RDMA carries the new messages again (both sides number them from 0). */
static void back_on_rdma(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  c->head = 0;
  memset(c->smsg, 0, sizeof(c->smsg));
  memset(c->recv_slot, 0, sizeof(c->recv_slot));
  fb->back = GDR_BACK_SWITCHED;
  fb->returns++;
  fb->tcp_ns += gdr_time_ns() - fb->since_ns;
  DEV_ADD(c, returns, 1);
  DEV_ADD(c, tcp_ns, gdr_time_ns() - fb->since_ns);
  gdr_health_set_state(&c->health, GDR_HEALTH_OK);
  GDR_INFO(NCCL_NET, "%s is back on RDMA after %llu ms on TCP (return %llu, from TCP message %llu on)", c->desc,
           (unsigned long long)((gdr_time_ns() - fb->since_ns) / 1000000ull), (unsigned long long)fb->returns,
           (unsigned long long)fb->switch_at);
}

/* Receiver: when the port is up (and the connection is not flapping), offer the way back. */
static void back_probe(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  struct gdr_rdma_rec_state st;
  uint64_t now = gdr_time_ns();
  if (is_sender(c) || fb->back != GDR_BACK_NONE || fb->pinned || now < fb->probe_ns ||
      gdr_param_int(GDR_PARAM_FAILBACK) == 0 || c->tcp_only || !(c->remote.caps & GDR_RDMA_CAP_BACK_TAGS) ||
      flapping(c))
    return; /* (a peer without per-tag counts, an older plugin: its way back could misplace PXN's messages) */
  if (back_prepare(c) != 0) {
    fb->probe_backoff_ns = fb->probe_backoff_ns * 2 > PROBE_MAX_NS ? PROBE_MAX_NS : fb->probe_backoff_ns * 2;
    fb->probe_ns = now + fb->probe_backoff_ns;
    return;
  }
  gdr_rdma_fill_qp_state(c, &st);
  fb->offer++;
  fb->back = GDR_BACK_OFFERED;
  fb->deadline_ns = now + gdr_recovery_timeout_ns();
  (void)gdr_rdma_ctrl_send(c, GDR_CTRL_BACK_OFFER, fb->epoch, fb->offer, 0, &st, sizeof(st));
}

int gdr_rdma_fb_absorb(struct gdr_rdma_comm *c, int action, const char *why) {
  struct gdr_rdma_fb *fb = &c->fb;
  if (fb->path == GDR_PATH_RDMA) return 0;
  if (action == GDR_FAULT_DEVICE) fb->pinned = 1; /* no way back to a lost device */
  if (fb->path == GDR_PATH_TCP && fb->back >= GDR_BACK_FROZEN) {
    /* the switch point is (being) agreed: RDMA may carry messages already; they go over TCP again, after the rest */
    gdr_rdma_fb_begin(c, why);
    return 1;
  }
  if (fb->path == GDR_PATH_TCP && fb->back != GDR_BACK_NONE) back_abort(c, 1, why);
  return 1;
}

/* ------------------------------------------------------------------------------------------- messages -- */

/* One handler per record type, found through recover.c's table (gdr_rdma_resiliency); the control channel's reader
 * (conn.c) checked the header, and gives a failed connection no record. */

/* The record is about the way back now in progress. */
static int ours(const struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m) {
  return (uint32_t)m->seq == c->fb.epoch && m->a == c->fb.offer && c->fb.path == GDR_PATH_TCP;
}

/* FB_REQ or FB_RSTATE of a newer move: this side joins it. */
static ncclResult_t join_move(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  const int req = m->type == GDR_CTRL_FB_REQ;
  char why[320];
  if ((uint32_t)m->seq <= c->fb.epoch) return ncclSuccess;
  snprintf(why, sizeof(why), "the peer moves the connection to TCP%s%.*s", req ? ": " : "", req ? (int)m->len : 0,
           req ? (const char *)payload : "");
  gdr_rdma_fb_begin(c, why);
  return gdr_rdma_comm_check(c);
}

ncclResult_t gdr_rdma_fb_on_req(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  return join_move(c, m, payload);
}

ncclResult_t gdr_rdma_fb_on_rstate(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  ncclResult_t res = join_move(c, m, payload);
  if (res != ncclSuccess) return res;
  if ((uint32_t)m->seq == c->fb.epoch && c->fb.phase == GDR_FB_WAIT_RSTATE) {
    memcpy(&c->fb.rstate, payload, sizeof(c->fb.rstate));
    sender_apply(c);
  }
  return ncclSuccess;
}

ncclResult_t gdr_rdma_fb_on_sstate(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  const char *bad = gdr_rdma_fb_sstate_check(payload, m->len);
  if (bad) {
    char why[160];
    snprintf(why, sizeof(why), "malformed fallback state from the peer: %s", bad);
    fail(c, ncclRemoteError, why);
    return gdr_rdma_comm_check(c);
  }
  if ((uint32_t)m->seq == c->fb.epoch && c->fb.phase == GDR_FB_WAIT_SSTATE)
    receiver_apply(c, payload, (int)(m->len / sizeof(struct gdr_rdma_fb_sent)));
  return ncclSuccess;
}

/* Sender: the receiver's port is up again and it made new QPs: ours to RTS towards them, BACK_READY; or not now. */
ncclResult_t gdr_rdma_back_on_offer(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  struct gdr_rdma_fb *fb = &c->fb;
  struct gdr_rdma_rec_state st;
  const uint32_t e = (uint32_t)m->seq;
  const char *bad = gdr_rdma_rec_state_check(payload, m->len, GDR_RDMA_ROLE_RECV, c->nqps);
  if (fb->back == GDR_BACK_READY) back_abort(c, 0, "a new offer replaces the last");
  if (fb->back != GDR_BACK_NONE || bad || e != fb->epoch || fb->path != GDR_PATH_TCP || fb->pinned ||
      !(c->remote.caps & GDR_RDMA_CAP_BACK_TAGS)) {
    (void)gdr_rdma_ctrl_send(c, GDR_CTRL_BACK_NOT_YET, e, m->a, 0, NULL, 0);
    return ncclSuccess;
  }
  fb->offer = (uint32_t)m->a;
  if (back_prepare(c) != 0 || gdr_rdma_connect_peer(c, payload) != 0) {
    if (c->qs.cq) gdr_rdma_quiesce_qps(c);
    (void)gdr_rdma_ctrl_send(c, GDR_CTRL_BACK_NOT_YET, fb->epoch, fb->offer, 0, NULL, 0);
    return ncclSuccess;
  }
  memset(c->fifo, 0, sizeof(struct gdr_cts_slot) * GDR_RDMA_FIFO_SLOTS); /* numbering restarts at 0 */
  gdr_rdma_fill_qp_state(c, &st);
  fb->back = GDR_BACK_READY;
  return gdr_rdma_ctrl_send(c, GDR_CTRL_BACK_READY, fb->epoch, fb->offer, 0, &st, sizeof(st));
}

/* Receiver: the sender's new QPs are RTS: ours too, then the probe. */
ncclResult_t gdr_rdma_back_on_ready(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  struct gdr_rdma_fb *fb = &c->fb;
  const char *bad = gdr_rdma_rec_state_check(payload, m->len, GDR_RDMA_ROLE_SEND, c->nqps);
  if (!ours(c, m) || fb->back != GDR_BACK_OFFERED) return ncclSuccess;
  if (bad || gdr_rdma_connect_peer(c, payload) != 0 || post_probes(c) != 0) {
    back_abort(c, 1, bad ? bad : "connecting or probing the new QPs failed");
    return ncclSuccess;
  }
  fb->back = GDR_BACK_PROBING;
  fb->deadline_ns = gdr_time_ns() + PROBE_WAIT_NS;
  return ncclSuccess;
}

/* The sender answers an offer with BACK_AT or BACK_NOT_YET, never both: a frozen receiver may thaw; a receiver that
 * gave up waiting for BACK_AT (frozen too long) tells the sender, which may have sent it (AT_WAIT): until
 * BACK_FINAL neither side put anything on RDMA. */
ncclResult_t gdr_rdma_back_on_not_yet(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  const int b = c->fb.back;
  (void)payload;
  if (ours(c, m) &&
      (is_sender(c) ? b == GDR_BACK_READY || b == GDR_BACK_AT_WAIT
                    : b == GDR_BACK_OFFERED || b == GDR_BACK_PROBING || b == GDR_BACK_FROZEN || b == GDR_BACK_AT_WAIT))
    back_abort(c, 0, is_sender(c) ? "the peer's probe of the new QPs did not go through" : "the peer is not ready");
  return ncclSuccess;
}

/* BACK_SWITCH/AT/FINAL's tag counts: 1 when the record is for the way back in progress and well-formed; 0 when it is
 * ignored, or failed the connection (*res). */
static int tags_payload(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload,
                        ncclResult_t *res) {
  const char *bad = gdr_rdma_back_tags_check(payload, m->len);
  *res = ncclSuccess;
  if (!ours(c, m)) return 0;
  if (bad) {
    char why[160];
    snprintf(why, sizeof(why), "malformed tag counts from the peer on the way back to RDMA: %s", bad);
    fail(c, ncclRemoteError, why);
    *res = gdr_rdma_comm_check(c);
    return 0;
  }
  return 1;
}

/* Sender, AT_WAIT: the receiver posted more TCP receives while covering S: those buffers may be filled over TCP. */
static ncclResult_t switch_grew(struct gdr_rdma_comm *c, const struct gdr_rdma_back_tag *v, int n) {
  struct gdr_rdma_fb *fb = &c->fb;
  for (int i = 0; i < n; i++) {
    if (v[i].n <= tags_of(fb->bound, fb->nbound, v[i].tag)) continue;
    if (tags_of(fb->bound, fb->nbound, v[i].tag) == 0 && tags_add(fb->bound, &fb->nbound, v[i].tag, 0) != 0) {
      fail(c, ncclInternalError, "more tags on TCP than the way back to RDMA can carry");
      return gdr_rdma_comm_check(c);
    }
    for (int k = 0; k < fb->nbound; k++)
      if (fb->bound[k].tag == v[i].tag) fb->bound[k].n = v[i].n;
  }
  fb->deadline_ns = gdr_time_ns() + gdr_recovery_timeout_ns();
  return ncclSuccess;
}

/* The sender's reading of BACK_SWITCH and BACK_FINAL: the receiver's counts (v, n) and, once the way back stands at
 * `at`, this side's own (own, nown: tag_counts). */
struct back_counts {
  const struct gdr_rdma_back_tag *v; /* the record's payload */
  int n;
  struct gdr_rdma_back_tag own[GDR_RDMA_BACK_MAX_TAGS];
  int nown; /* -1: more tags than the way back carries */
};

/* 1: both counted; 0: the payload is well-formed (v, n) but the way back is not at `at`; -1: the record is ignored,
 * or failed the connection (*res). *res is ncclSuccess unless the connection failed. */
static int back_counts(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload, int at,
                       struct back_counts *b, ncclResult_t *res) {
  b->v = payload;
  b->n = (int)(m->len / sizeof(*b->v));
  if (!tags_payload(c, m, payload, res)) return -1;
  if (c->fb.back != at) return 0;
  memset(b->own, 0, sizeof(b->own));
  b->nown = tag_counts(c, b->own);
  return 1;
}

/* Sender: the receiver's probe went through; R = its TCP buffers per tag. */
ncclResult_t gdr_rdma_back_on_switch(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  struct gdr_rdma_fb *fb = &c->fb;
  struct back_counts b;
  ncclResult_t res;
  int got = back_counts(c, m, payload, GDR_BACK_READY, &b, &res);
  if (got < 0) return res;
  if (got == 0) return fb->back == GDR_BACK_AT_WAIT ? switch_grew(c, b.v, b.n) : ncclSuccess;
  if (b.nown < 0) {
    fb->pinned = 1;
    back_abort(c, 1, "more tags on TCP than the way back to RDMA can carry: the connection stays on TCP");
    return ncclSuccess;
  }
  memcpy(fb->bound, b.v, (size_t)b.n * sizeof(*b.v));
  fb->nbound = b.n;
  fb->switch_at = tags_sum(b.own, b.nown);
  fb->back = GDR_BACK_AT_WAIT;
  fb->deadline_ns = gdr_time_ns() + gdr_recovery_timeout_ns();
  GDR_INFO(NCCL_NET,
           "%s: the way back: the receiver has %llu TCP buffer(s) over %d tag(s), this side sent %llu "
           "message(s) over %d tag(s) over TCP",
           c->desc, (unsigned long long)tags_sum(b.v, b.n), b.n, (unsigned long long)fb->switch_at, b.nown);
  return send_counts(c, GDR_CTRL_BACK_AT, b.own, b.nown);
}

/* Receiver: S = the sender's TCP messages per tag: TCP receives until they cover S, then BACK_FINAL
 * (gdr_rdma_fb_route). */
ncclResult_t gdr_rdma_back_on_at(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  struct gdr_rdma_fb *fb = &c->fb;
  const struct gdr_rdma_back_tag *v = payload;
  const int n = (int)(m->len / sizeof(*v));
  ncclResult_t res;
  if (!tags_payload(c, m, payload, &res)) return res;
  if (fb->back != GDR_BACK_FROZEN) return ncclSuccess;
  memcpy(fb->bound, v, (size_t)n * sizeof(*v));
  fb->nbound = n;
  fb->back = GDR_BACK_AT_WAIT;
  return ncclSuccess;
}

/* Sender: F = the receiver's TCP buffers per tag once they covered S: below F_t over TCP, the rest over RDMA. */
ncclResult_t gdr_rdma_back_on_final(struct gdr_rdma_comm *c, const struct gdr_rdma_ctrl *m, const void *payload) {
  struct gdr_rdma_fb *fb = &c->fb;
  struct back_counts b;
  ncclResult_t res;
  if (back_counts(c, m, payload, GDR_BACK_AT_WAIT, &b, &res) <= 0) return res;
  for (int i = 0; i < b.nown; i++)
    if (b.own[i].n > tags_of(b.v, b.n, b.own[i].tag)) {
      char why[200];
      snprintf(why, sizeof(why),
               "the peer's switch point back to RDMA for tag %d (%llu) is below the %llu "
               "message(s) this side sent over TCP with that tag",
               b.own[i].tag, (unsigned long long)tags_of(b.v, b.n, b.own[i].tag), (unsigned long long)b.own[i].n);
      fail(c, ncclRemoteError, why);
      return gdr_rdma_comm_check(c);
    }
  memcpy(fb->bound, b.v, (size_t)b.n * sizeof(*b.v));
  fb->nbound = b.n;
  fb->switch_at = tags_sum(b.v, b.n);
  back_on_rdma(c);
  return ncclSuccess;
}

/* ------------------------------------------------------------------------------------------- progress -- */

/* Receiver, AT_WAIT: its TCP receives cover S (the sender's TCP messages) for every tag: BACK_FINAL with its counts,
 * and RDMA from its next receive on. Not yet: its counts grew since it last told the sender: BACK_SWITCH again (the
 * sender fills those buffers over TCP). 1: switched. */
static int receiver_cover(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  struct gdr_rdma_back_tag v[GDR_RDMA_BACK_MAX_TAGS];
  int n, covered = 1;
  memset(v, 0, sizeof(v));
  n = tag_counts(c, v);
  if (n < 0) {
    fail(c, ncclInternalError, "more tags on TCP than the way back to RDMA can carry");
    return 0;
  }
  for (int i = 0; i < fb->nbound && covered; i++) covered = tags_of(v, n, fb->bound[i].tag) >= fb->bound[i].n;
  if (!covered || fb->qhead != fb->qtail) {
    if (tags_sum(v, n) != fb->told && send_counts(c, GDR_CTRL_BACK_SWITCH, v, n) != ncclSuccess) {
      fail(c, ncclSystemError, "the control channel failed while switching back to RDMA");
      return 0;
    }
    fb->told = tags_sum(v, n);
    return 0;
  }
  if (send_counts(c, GDR_CTRL_BACK_FINAL, v, n) != ncclSuccess) {
    fail(c, ncclSystemError, "the control channel failed while switching back to RDMA");
    return 0;
  }
  memcpy(fb->bound, v, (size_t)n * sizeof(v[0]));
  fb->nbound = n;
  fb->switch_at = tags_sum(v, n);
  back_on_rdma(c);
  return 1;
}

int gdr_rdma_fb_route(struct gdr_rdma_comm *c, int tag) {
  struct gdr_rdma_fb *fb = &c->fb;
  if (fb->path != GDR_PATH_TCP) return GDR_ROUTE_RDMA;
  if (!is_sender(c)) {
    if (fb->back == GDR_BACK_SWITCHED) return GDR_ROUTE_RDMA;
    if (fb->back == GDR_BACK_FROZEN) return GDR_ROUTE_WAIT;
    if (fb->back == GDR_BACK_AT_WAIT && !gdr_health_failed(&c->health) && receiver_cover(c)) return GDR_ROUTE_RDMA;
    return GDR_ROUTE_TCP;
  }
  /* sender: the k-th isend with tag t over TCP while k is below the receiver's bound for t */
  if (fb->qhead != fb->qtail) return GDR_ROUTE_TCP; /* the requests handed over first */
  if (fb->back == GDR_BACK_AT_WAIT) return tcp_owed(c, tag) ? GDR_ROUTE_TCP : GDR_ROUTE_WAIT;
  if (fb->back == GDR_BACK_SWITCHED) return tcp_owed(c, tag) ? GDR_ROUTE_TCP : GDR_ROUTE_RDMA;
  return GDR_ROUTE_TCP;
}

/* Receiver, probing: all through -> BACK_SWITCH and freeze; failed or too slow -> abandon. */
static void probe_step(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  const char *why = NULL;
  int r = poll_probes(c, &why);
  if (r == 0 && gdr_time_ns() > fb->deadline_ns) {
    r = -1;
    why = "no completion within the probe's wait";
  }
  if (r < 0) {
    char msg[160];
    fb->probes_failed++;
    snprintf(msg, sizeof(msg), "the probe WRITE over the new QPs failed (%s)", why);
    back_abort(c, 1, msg);
    return;
  }
  if (r == 0) return;
  fb->back = GDR_BACK_FROZEN;
  fb->deadline_ns = gdr_time_ns() + gdr_recovery_timeout_ns();
  {
    struct gdr_rdma_back_tag v[GDR_RDMA_BACK_MAX_TAGS];
    int n;
    memset(v, 0, sizeof(v));
    n = tag_counts(c, v);
    if (n < 0) {
      fb->pinned = 1;
      back_abort(c, 1, "more tags on TCP than the way back to RDMA can carry: the connection stays on TCP");
      return;
    }
    fb->told = tags_sum(v, n);
    if (send_counts(c, GDR_CTRL_BACK_SWITCH, v, n) != ncclSuccess)
      fail(c, ncclSystemError, "the control channel failed while switching back to RDMA");
  }
}

void gdr_rdma_fb_step(struct gdr_rdma_comm *c, int *busy) {
  struct gdr_rdma_fb *fb = &c->fb;
  *busy = 0;
  if (fb->path == GDR_PATH_RDMA) return;
  if (fb->path == GDR_PATH_MOVING) {
    if (gdr_time_ns() > fb->deadline_ns) {
      char why[420];
      snprintf(why, sizeof(why),
               "the move to TCP did not finish within GDRNET_RECOVERY_TIMEOUT_MS=%lld (%s); it was "
               "for: %.255s",
               (long long)gdr_recovery_timeout_ms(),
               fb->phase == GDR_FB_CONNECT ? "the TCP connection" : "waiting for the peer", fb->reason);
      fail(c, ncclRemoteError, why);
      return;
    }
    if (fb->phase == GDR_FB_CONNECT) tcp_connect_step(c);
    *busy = fb->path == GDR_PATH_MOVING;
    if (*busy) return;
  }
  /* on TCP: the requests handed over go first */
  if (fb->qhead != fb->qtail) drain_queue(c);
  if (fb->back == GDR_BACK_OFFERED && gdr_time_ns() > fb->deadline_ns) back_abort(c, 1, "no answer from the peer");
  if (fb->back == GDR_BACK_PROBING) probe_step(c);
  /* an idle peer (its NCCL not calling in) answers late: until BACK_FINAL nothing went over RDMA, so the way back is
   * abandoned (BACK_NOT_YET: the sender, in AT_WAIT, abandons it too), never the connection; a peer that is gone
   * fails it by its control channel's EOF. The sender waits for BACK_FINAL without a bound: it depends on the
   * receiver's NCCL posting receives, as a clear-to-send does over RDMA. */
  if (fb->back == GDR_BACK_FROZEN && gdr_time_ns() > fb->deadline_ns) {
    back_abort(c, 1, "the peer did not answer BACK_SWITCH within GDRNET_RECOVERY_TIMEOUT_MS");
    return;
  }
  if (fb->back == GDR_BACK_AT_WAIT && !is_sender(c)) (void)gdr_rdma_fb_route(c, 0);
  back_probe(c);
  /* back on RDMA and nothing left on TCP: RDMA carries everything (the TCP connection stays, idle, for a next
   * fallback) */
  int owed = 0;
  for (int i = 0; i < fb->nbound && is_sender(c) && fb->back == GDR_BACK_SWITCHED && !owed; i++)
    owed = tcp_owed(c, fb->bound[i].tag);
  if (fb->back == GDR_BACK_SWITCHED && fb->qhead == fb->qtail && fb->tcp_pending == 0 && !owed) {
    DEV_ADD(c, on_tcp, -1);
    fb->path = GDR_PATH_RDMA;
    fb->back = GDR_BACK_NONE;
  }
}

/* -------------------------------------------------------------------------------------- the data path -- */

ncclResult_t gdr_rdma_fb_isend(struct gdr_rdma_comm *c, void *data, size_t size, int tag, void *mhandle,
                               void **request) {
  struct gdr_rdma_req *r;
  void *treq = NULL;
  ncclResult_t res;
  *request = NULL;
  if (c->fb.qhead != c->fb.qtail) return ncclSuccess; /* the requests handed over first */
  r = gdr_rdma_req_get(c);
  if (r == NULL) return ncclSuccess;
  res = gdr_fb_tcp_isend(c->fb.tcp, data, size, tag, mhandle, &treq);
  if (res != ncclSuccess || treq == NULL) {
    r->type = GDR_RREQ_FREE;
    if (res != ncclSuccess) fail(c, res, "the fallback's TCP connection failed an isend");
    return res;
  }
  r->type = GDR_RREQ_SEND;
  r->on_tcp = 1;
  r->treq = treq;
  r->size = size;
  r->nreqs = 1;
  r->mh[0] = mhandle;
  r->data[0] = data;
  c->fb.tcp_pending++;
  c->fb.tcp_bytes += size;
  DEV_ADD(c, tcp_bytes, size);
  *request = r;
  return ncclSuccess;
}

ncclResult_t gdr_rdma_fb_irecv(struct gdr_rdma_comm *c, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                               void **request) {
  struct gdr_rdma_req *r;
  struct gdr_rdma_mh *mhs[GDR_RDMA_MAX_RECVS];
  void *treq = NULL;
  ncclResult_t res;
  *request = NULL;
  if (c->fb.qhead != c->fb.qtail) return ncclSuccess;
  r = gdr_rdma_req_get(c);
  if (r == NULL) return ncclSuccess;
  for (int i = 0; i < n; i++) mhs[i] = mhandles ? mhandles[i] : NULL;
  res = gdr_fb_tcp_irecv(c->fb.tcp, n, data, sizes, tags, mhs, &treq);
  if (res != ncclSuccess || treq == NULL) {
    r->type = GDR_RREQ_FREE;
    if (res != ncclSuccess) fail(c, res, "the fallback's TCP connection failed an irecv");
    return res;
  }
  r->type = GDR_RREQ_RECV;
  r->on_tcp = 1;
  r->treq = treq;
  r->nreqs = n;
  r->tn = n;
  for (int i = 0; i < n; i++) {
    r->tmap[i] = (uint8_t)i;
    r->cap[i] = sizes[i];
  }
  c->fb.tcp_pending++;
  *request = r;
  return ncclSuccess;
}

ncclResult_t gdr_rdma_fb_test(struct gdr_rdma_req *r, int *done, size_t *sizes) {
  struct gdr_rdma_comm *c = r->comm;
  ncclResult_t res = ncclSuccess;
  *done = 0;
  if (!r->tcp_done) {
    size_t ts[GDR_RDMA_MAX_RECVS];
    int d = 0;
    if (r->treq == NULL) return ncclSuccess; /* not handed to TCP yet (the move, or TCP full) */
    res = gdr_fb_tcp_test(r->treq, &d, ts);
    if (res != ncclSuccess) {
      fail(c, res, "the fallback's TCP connection failed (see the WARN above)");
      goto fail;
    }
    if (!d) return ncclSuccess;
    if (r->type == GDR_RREQ_RECV)
      for (int k = 0; k < r->tn; k++) {
        r->sent[r->tmap[k]] = ts[k];
        c->fb.tcp_bytes += ts[k];
        DEV_ADD(c, tcp_bytes, ts[k]);
      }
    if (c->fb.tcp_pending > 0) c->fb.tcp_pending--;
  }
  if (sizes) {
    if (r->type == GDR_RREQ_RECV)
      for (int i = 0; i < r->nreqs; i++) sizes[i] = r->sent[i];
    else if (r->type == GDR_RREQ_SEND)
      sizes[0] = r->size;
  }
  gdr_rdma_req_release(c, r);
  *done = 1;
  return ncclSuccess;
fail:
  gdr_rdma_req_release(c, r);
  return res;
}

void gdr_rdma_fb_close(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  if (fb->tcp) {
    gdr_fb_tcp_close(fb->tcp, is_sender(c));
    fb->tcp = NULL;
  }
  if (fb->tcp_listen) {
    gdr_fb_tcp_close_listen(fb->tcp_listen);
    fb->tcp_listen = NULL;
  }
  if (fb->path == GDR_PATH_TCP) {
    DEV_ADD(c, on_tcp, -1);
    if (fb->back != GDR_BACK_SWITCHED) { /* (a switched one counted its time at the switch) */
      fb->tcp_ns += gdr_time_ns() - fb->since_ns;
      DEV_ADD(c, tcp_ns, gdr_time_ns() - fb->since_ns);
    }
  }
}

void gdr_rdma_fb_report(struct gdr_rdma_comm *c) {
  struct gdr_rdma_fb *fb = &c->fb;
  if (fb->fallbacks == 0 && fb->epoch == 0) return;
  GDR_INFO(NCCL_NET,
           "%s fallback stats: %llu move(s) to TCP, %llu return(s) to RDMA, %llu ms and %llu bytes on TCP, %llu "
           "message(s) / %llu bytes handed over; %s",
           c->desc, (unsigned long long)fb->fallbacks, (unsigned long long)fb->returns,
           (unsigned long long)(fb->tcp_ns / 1000000ull), (unsigned long long)fb->tcp_bytes,
           (unsigned long long)fb->replayed_msgs, (unsigned long long)fb->replayed_bytes,
           c->tcp_only                ? "over TCP from the start"
           : fb->pinned               ? "pinned to TCP (flapping)"
           : fb->path == GDR_PATH_TCP ? "on TCP at close"
                                      : "on RDMA at close");
}
