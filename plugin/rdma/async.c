/* RDMA transport: one thread per device reading verbs async events.
 *
 * The thread polls the context's async_fd (made non-blocking) together with an eventfd that stops
 * it, so it never sits inside ibv_get_async_event when asked to stop.  It runs while the device has
 * comms (started by the first, joined by the last: NCCL >= 2.28 dlcloses the plugin after its last
 * communicator and a v8 plugin gets no finalize).  An event that hits a connection is handed to its
 * progress thread (c->pending), which recovers it or gives up (recover.c, classify.c says which). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rdma.h"

static int comm_has_qp(const struct gdr_rdma_comm *c, const struct ibv_qp *qp) {
  for (int i = 0; i < c->nqps; i++)
    if (c->qs.qps[i] == qp) return 1;
  for (int k = 0; k < GDR_RDMA_MAX_CONN_DEVS; k++)
    if (c->qs.flush_qp[k] == qp) return 1;
  return 0;
}

static int comm_has_cq(const struct gdr_rdma_comm *c, const struct ibv_cq *cq) {
  for (int k = 0; k < c->qs.ncq; k++)
    if (c->qs.cqs[k] == cq) return 1;
  return 0;
}

/* How bad an action is: a worse one wins a fold (a full queue). */
static int action_rank(int action) {
  switch (action) {
  case GDR_FAULT_BUG: return 5;
  case GDR_FAULT_DEVICE: return 4;
  case GDR_FAULT_PEER: return 3;
  case GDR_FAULT_REKEY: return 2;
  case GDR_FAULT_RECOVER: return 1;
  default: return 0;
  }
}

void gdr_rdma_pending_init(struct gdr_rdma_pending *p) {
  memset(p, 0, sizeof(*p));
  pthread_mutex_init(&p->lock, NULL);
  atomic_init(&p->n, 0);
}

void gdr_rdma_pending_destroy(struct gdr_rdma_pending *p) { pthread_mutex_destroy(&p->lock); }

void gdr_rdma_pending_push(struct gdr_rdma_pending *p, int action, unsigned gen, const char *why) {
  pthread_mutex_lock(&p->lock);
  int n = atomic_load_explicit(&p->n, memory_order_relaxed);
  struct gdr_rdma_pending_ev *e;
  if (n < GDR_RDMA_PENDING_MAX) {
    e = &p->ev[(p->head + n) % GDR_RDMA_PENDING_MAX];
    atomic_store_explicit(&p->n, n + 1, memory_order_release);
  } else {
    /* full: the newest entry stands for both; the worse action (and its line) wins, the newer generation stays */
    e = &p->ev[(p->head + n - 1) % GDR_RDMA_PENDING_MAX];
    p->folded++;
    if (action_rank(action) <= action_rank(e->action)) {
      if (gen > e->gen) e->gen = gen;
      goto out;
    }
  }
  e->action = action;
  e->gen = gen;
  snprintf(e->why, sizeof(e->why), "%s", why);
out:
  pthread_mutex_unlock(&p->lock);
}

int gdr_rdma_pending_pop(struct gdr_rdma_pending *p, struct gdr_rdma_pending_ev *out) {
  int got = 0;
  if (atomic_load_explicit(&p->n, memory_order_acquire) == 0) return 0;
  pthread_mutex_lock(&p->lock);
  int n = atomic_load_explicit(&p->n, memory_order_relaxed);
  if (n > 0) {
    *out = p->ev[p->head];
    p->head = (p->head + 1) % GDR_RDMA_PENDING_MAX;
    atomic_store_explicit(&p->n, n - 1, memory_order_release);
    got = 1;
  }
  pthread_mutex_unlock(&p->lock);
  return got;
}

/* Hands a fault to the connection's progress thread (recover.c takes them at its next call, oldest first; none
 * is lost). Called with d->lock held (the comm's QP set cannot change meanwhile). */
static void hand_over(struct gdr_rdma_comm *c, int action, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void hand_over(struct gdr_rdma_comm *c, int action, const char *fmt, ...) {
  char why[sizeof(((struct gdr_rdma_pending_ev *)0)->why)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  gdr_rdma_pending_push(&c->pending, action, c->qs_gen, why);
}

static void handle_event(struct gdr_rdma_dev *d, struct ibv_async_event *ev) {
  const char *what = gdr_ibv_event_str(ev->event_type);
  const struct gdr_fault_class *f = gdr_rdma_fault_event(ev->event_type);
  pthread_mutex_lock(&d->lock);
  switch (ev->event_type) {
  case IBV_EVENT_QP_FATAL:
  case IBV_EVENT_QP_REQ_ERR:
  case IBV_EVENT_QP_ACCESS_ERR:
  case IBV_EVENT_PATH_MIG_ERR: {
    int found = 0;
    for (struct gdr_rdma_link *l = d->comms; l; l = l->next) {
      struct gdr_rdma_comm *c = l->c;
      if (!comm_has_qp(c, ev->element.qp)) continue;
      found = 1;
      hand_over(c, f->action, "async event %s on %s port %d, QP 0x%x, peer %s: %s", what, d->name, d->port,
                ev->element.qp->qp_num, c->peer, f->hint);
    }
    if (!found) GDR_INFO(NCCL_NET, "%s: async event %s on a QP of no open connection", d->name, what);
    break;
  }
  case IBV_EVENT_CQ_ERR: {
    for (struct gdr_rdma_link *l = d->comms; l; l = l->next)
      if (comm_has_cq(l->c, ev->element.cq))
        hand_over(l->c, f->action, "async event %s (CQ overrun) on %s port %d, peer %s: %s", what, d->name, d->port,
                  l->c->peer, f->hint);
    break;
  }
  case IBV_EVENT_PORT_ERR:
    if (ev->element.port_num != d->port) break;
    GDR_WARN("%s port %d: %s (link down): its %d connection(s) recover once it is active again (within "
             "GDRNET_RECOVERY_TIMEOUT_MS=%lld)",
             d->name, d->port, what, d->ncomms, (long long)gdr_recovery_timeout_ms());
    for (struct gdr_rdma_link *l = d->comms; l; l = l->next) {
      struct gdr_rdma_comm *c = l->c;
      char qps[64] = "";
      for (int i = 0; i < c->nqps && qps[0] == '\0'; i++) /* the first of its QPs on this device */
        if (c->qs.qps[i] && c->m[i % c->ndevs].dev == d)
          snprintf(qps, sizeof(qps), ", QP 0x%x%s", c->qs.qps[i]->qp_num, c->nqps > 1 ? "..." : "");
      hand_over(c, f->action, "async event %s on %s port %d%s, peer %s: %s", what, d->name, d->port, qps, c->peer,
                f->hint);
    }
    break;
  case IBV_EVENT_DEVICE_FATAL: {
    d->fatal = 1;
    atomic_store_explicit(&d->ctr.lost, 1, memory_order_relaxed);
    for (struct gdr_rdma_link *l = d->comms; l; l = l->next)
      hand_over(l->c, f->action, "async event %s on %s port %d, peer %s: %s", what, d->name, d->port, l->c->peer,
                f->hint);
    /* nothing of a dead NIC may keep memory pinned (a GPU reset needs it all gone): its registrations go now, its
     * connections' QPs and own buffers when they move to TCP; new connections on it run over TCP */
    int n = gdr_regcache_release_all(&d->cache);
    GDR_WARN("%s: %s: its %d connection(s) move to TCP (GDRNET_FALLBACK) or fail; %d memory registration(s) "
             "released; new connections on it run over TCP (%s)",
             d->name, what, d->ncomms, n, f->hint);
    break;
  }
  case IBV_EVENT_PORT_ACTIVE:
    if (ev->element.port_num == d->port) GDR_INFO(NCCL_NET, "%s port %d: %s", d->name, d->port, what);
    break;
  default: GDR_INFO(NCCL_NET, "%s: async event %s (%d): %s", d->name, what, (int)ev->event_type, f->hint); break;
  }
  pthread_mutex_unlock(&d->lock);
}

/* The thread's own copy of its stop fd: the stopper hands d->stop_fd over (sets it to -1) before the
 * thread may even have run its first instruction, so the thread must never read it from d. */
struct async_arg {
  struct gdr_rdma_dev *d;
  int stop_fd;
};

static void *async_main(void *argp) {
  struct async_arg arg = *(struct async_arg *)argp;
  free(argp);
  struct gdr_rdma_dev *d = arg.d;
  struct pollfd pfd[2] = {{d->ctx->async_fd, POLLIN, 0}, {arg.stop_fd, POLLIN, 0}};
  for (;;) {
    int n = poll(pfd, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      GDR_WARN("%s: async event thread: poll failed: %s", d->name, strerror(errno));
      break;
    }
    if (pfd[1].revents) break;
    if (pfd[0].revents & (POLLERR | POLLNVAL)) {
      GDR_WARN("%s: async event fd failed; async events are no longer watched", d->name);
      break;
    }
    if (pfd[0].revents & (POLLIN | POLLHUP)) {
      struct ibv_async_event ev;
      if (gdr_ibv.get_async_event(d->ctx, &ev) != 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        if (pfd[0].revents & POLLHUP) break; /* context closed */
        continue;
      }
      handle_event(d, &ev);
      gdr_ibv.ack_async_event(&ev);
    }
  }
  return NULL;
}

/* d->lock held: the running thread (if any) is told to stop and handed to the caller, who joins it with
 * join_thread outside the lock; a concurrent attach starts a fresh thread with a fresh fd. 1 if there was one. */
static int hand_thread_over_locked(struct gdr_rdma_dev *d, pthread_t *t, int *stop_fd) {
  if (!d->thread_running) return 0;
  uint64_t one = 1;
  ssize_t w = write(d->stop_fd, &one, sizeof(one));
  (void)w;
  *t = d->thread;
  *stop_fd = d->stop_fd;
  d->stop_fd = -1;
  d->thread_running = 0;
  return 1;
}

static void join_thread(pthread_t t, int stop_fd) {
  pthread_join(t, NULL);
  close(stop_fd);
  gdr_core_unpin(); /* taken by start_thread_locked */
}

/* d->lock held: the thread that reads d->ctx's events */
static ncclResult_t start_thread_locked(struct gdr_rdma_dev *d) {
  ncclResult_t res = ncclSuccess;
  int fl = fcntl(d->ctx->async_fd, F_GETFL);
  if (fl >= 0) fcntl(d->ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
  d->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (d->stop_fd < 0) {
    GDR_WARN("%s: eventfd failed: %s", d->name, strerror(errno));
    res = ncclSystemError;
    goto out;
  }
  struct async_arg *arg = malloc(sizeof(*arg));
  int rc = arg ? 0 : ENOMEM;
  if (arg) {
    arg->d = d;
    arg->stop_fd = d->stop_fd;
    gdr_core_pin(); /* the library stays mapped while the thread runs (transport.h); join_thread gives it back */
    rc = pthread_create(&d->thread, NULL, async_main, arg);
    if (rc) {
      gdr_core_unpin();
      free(arg);
    }
  }
  if (rc) {
    GDR_WARN("%s: cannot start the async event thread: %s", d->name, strerror(rc));
    close(d->stop_fd);
    d->stop_fd = -1;
    res = ncclSystemError;
    goto out;
  }
  d->thread_running = 1;
out:
  return res;
}

/* A lost device back (dev.c): the thread stops reading the old context, the device takes the new context and PD,
 * and the thread starts again on it if any comm is attached. */
ncclResult_t gdr_rdma_async_swap_ctx(struct gdr_rdma_dev *d, struct ibv_context *ctx, struct ibv_pd *pd) {
  pthread_t t = 0;
  int stop_fd = -1;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&d->lock);
  int running = hand_thread_over_locked(d, &t, &stop_fd);
  pthread_mutex_unlock(&d->lock);
  if (running) join_thread(t, stop_fd);
  pthread_mutex_lock(&d->lock);
  d->ctx = ctx;
  d->pd = pd;
  if (d->ncomms > 0 && !d->thread_running) res = start_thread_locked(d);
  pthread_mutex_unlock(&d->lock);
  return res;
}

/* One device's list: the first comm starts its thread. */
static ncclResult_t attach_one(struct gdr_rdma_comm *c, struct gdr_rdma_member *m, const struct gdr_rdma_dev **lost) {
  struct gdr_rdma_dev *d = m->dev;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&d->lock);
  if (!d->thread_running && (res = start_thread_locked(d)) != ncclSuccess) goto out;
  m->link.c = c;
  m->link.next = d->comms;
  d->comms = &m->link;
  d->ncomms++;
  m->link.attached = 1;
  if (d->fatal && *lost == NULL) *lost = d; /* (seen under the lock: no DEVICE_FATAL falls between) */
out:
  pthread_mutex_unlock(&d->lock);
  return res;
}

/* Off one device's list: the last comm stops (and joins) its thread. */
static void detach_one(struct gdr_rdma_member *m) {
  struct gdr_rdma_dev *d = m->dev;
  pthread_t t = 0;
  int join = 0, stop_fd = -1;
  pthread_mutex_lock(&d->lock);
  if (!m->link.attached) { /* (async_stop forgot it) */
    pthread_mutex_unlock(&d->lock);
    return;
  }
  for (struct gdr_rdma_link **pp = &d->comms; *pp; pp = &(*pp)->next)
    if (*pp == &m->link) {
      *pp = m->link.next;
      break;
    }
  m->link.attached = 0;
  if (--d->ncomms == 0) join = hand_thread_over_locked(d, &t, &stop_fd);
  pthread_mutex_unlock(&d->lock);
  if (join) join_thread(t, stop_fd);
}

ncclResult_t gdr_rdma_async_attach(struct gdr_rdma_comm *c, const struct gdr_rdma_dev **lost) {
  *lost = NULL;
  for (int i = 0; i < c->ndevs; i++) {
    ncclResult_t res = attach_one(c, &c->m[i], lost);
    if (res != ncclSuccess) return res; /* (comm_free detaches what was attached) */
  }
  return ncclSuccess;
}

void gdr_rdma_async_detach(struct gdr_rdma_comm *c) {
  for (int i = 0; i < c->ndevs; i++) detach_one(&c->m[i]);
}

void gdr_rdma_async_stop(struct gdr_rdma_dev *d) {
  pthread_t t = 0;
  int stop_fd = -1;
  pthread_mutex_lock(&d->lock);
  int running = hand_thread_over_locked(d, &t, &stop_fd);
  /* comms still attached were leaked by the user: forget them (their verbs objects die with the context) */
  for (struct gdr_rdma_link *l = d->comms; l; l = l->next) l->attached = 0;
  d->comms = NULL;
  d->ncomms = 0;
  pthread_mutex_unlock(&d->lock);
  if (running) join_thread(t, stop_fd);
}
