/* RDMA transport: a connection answers its peer while NCCL calls nothing on it (docs/HARDENING.md 8, seed
 * 350792092).
 *
 * The resiliency runs on the thread that drives the connection, from its test() (transport.c). A side whose
 * requests are all done calls no test until it has a request again, though, and its peer may need it then:
 * a receiver whose NIC went dark just after the last WRITE_WITH_IMM arrived has every receive complete, while the
 * sender, its ACKs lost (RETRY_EXC), recovers or moves to TCP and waits for the receiver's state. A real NIC does
 * this too (a link that goes down between the data and its ACK). So the plugin answers by itself:
 *
 *   one thread per process (started with the first connection, joined with the last) sleeps on the connections'
 *   control channels (epoll, one shot per arrival, and nothing else: an idle process has no timer, no wake-up);
 *   a connection that got a record (or its channel's EOF) is looked at every SVC_TICK_MS while the record is unread
 *   or a recovery or a move to TCP runs on it; if its owner made no test() call for a whole tick, the service runs
 *   gdr_rdma_progress on it, as test() would (the record is read, the recovery or move steps), under the
 *   connection's lock. Only test drives the resiliency (transport.c): an owner that only posts (a sender spinning on
 *   isend for a clear-to-send) is answered for by the service too.
 *
 * The lock (c->svc_mu) is taken by every entry of the transport's table for that connection (transport.c); the
 * service only ever tries it (an owner in test() reads the channel itself, every 1 ms). Lock order: the list's,
 * then a connection's (tried, never waited for); a pass runs under the list's lock (an attach or detach meanwhile
 * waits for it: a recovery's drain may take up to 1 s); detach takes the list's, then (after) the connection's,
 * to wait for a pass on it. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "rdma.h"

#define SVC_TICK_MS 2

static struct {
  pthread_mutex_t mu; /* the list, the thread's lifetime, every comm's svc_watch/svc_fresh */
  struct gdr_rdma_comm **comms;
  int n, cap;
  uint64_t next_id;
  int ep, stop_fd; /* the running thread's (-1: none) */
  pthread_t thread;
  int running;
} g_svc = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 1, -1, -1, 0, 0};

static void arm(int ep, struct gdr_rdma_comm *c, int op) {
  struct epoll_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = c->svc_id;
  (void)epoll_ctl(ep, op, c->fd, &ev);
}

static struct gdr_rdma_comm *find_locked(uint64_t id) {
  for (int i = 0; i < g_svc.n; i++)
    if (g_svc.comms[i]->svc_id == id) return g_svc.comms[i];
  return NULL;
}

/* Still to be looked at: the record is not read yet, or a recovery or move waits for this side. */
static int wanted(struct gdr_rdma_comm *c) {
  int unread = 0;
  if (gdr_health_failed(&c->health) || c->peer_gone) return 0;
  if (c->rec.phase != GDR_REC_IDLE || c->fb.path == GDR_PATH_MOVING || c->svc_hup) return 1;
  return ioctl(c->fd, FIONREAD, &unread) == 0 && unread > 0;
}

/* One look at a watched connection; the list lock held. 1 while it stays watched. */
static int look(struct gdr_rdma_comm *c) {
  if (pthread_mutex_trylock(&c->svc_mu) != 0) return 1; /* its owner is in a call */
  if (c->svc_fresh) {
    c->svc_fresh = 0; /* its owner gets one tick */
  } else if (c->svc_calls == c->svc_seen) {
    int busy = 0;
    if (!c->svc_acted)
      GDR_INFO(NCCL_NET,
               "%s: the peer wrote on the control channel and NCCL calls nothing here: answered by the "
               "idle-peer service",
               c->desc);
    c->svc_acted = 1;
    (void)gdr_rdma_progress(c, &busy); /* an error is the comm's: its owner gets it from its next call */
  }
  c->svc_seen = c->svc_calls;
  int keep = wanted(c), gone = gdr_health_failed(&c->health) || c->peer_gone;
  pthread_mutex_unlock(&c->svc_mu);
  if (!keep) {
    c->svc_watch = c->svc_acted = 0;
    if (!gone) arm(g_svc.ep, c, EPOLL_CTL_MOD); /* (an EOF'd or failed channel is not watched again) */
  }
  return keep;
}

static void *svc_main(void *arg) {
  int ep = (int)(intptr_t)arg; /* its own: once the list's differs, this thread was told to stop */
  int watching = 0;
  for (;;) {
    struct epoll_event evs[32];
    int n = epoll_wait(ep, evs, 32, watching ? SVC_TICK_MS : -1);
    if (n < 0 && errno != EINTR) {
      GDR_WARN("RDMA idle-peer service: epoll_wait failed: %s; idle connections answer their peer late",
               strerror(errno));
      break;
    }
    pthread_mutex_lock(&g_svc.mu);
    if (g_svc.ep != ep) { /* stopped (a new thread may already serve a new list) */
      pthread_mutex_unlock(&g_svc.mu);
      return NULL;
    }
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u64 == 0) { /* stop */
        pthread_mutex_unlock(&g_svc.mu);
        return NULL;
      }
      struct gdr_rdma_comm *c = find_locked(evs[i].data.u64);
      if (c && (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) c->svc_hup = 1; /* (no byte says it) */
      if (c && !c->svc_watch) {
        c->svc_watch = 1;
        c->svc_fresh = 1;
      }
    }
    watching = 0;
    for (int i = 0; i < g_svc.n; i++)
      if (g_svc.comms[i]->svc_watch) watching |= look(g_svc.comms[i]);
    pthread_mutex_unlock(&g_svc.mu);
  }
  return NULL;
}

/* The list lock held: the thread for the first connection. */
static ncclResult_t start_locked(void) {
  struct epoll_event ev;
  g_svc.ep = epoll_create1(EPOLL_CLOEXEC);
  g_svc.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (g_svc.ep < 0 || g_svc.stop_fd < 0 || epoll_ctl(g_svc.ep, EPOLL_CTL_ADD, g_svc.stop_fd, &ev) != 0) {
    GDR_WARN("RDMA idle-peer service: epoll/eventfd failed: %s", strerror(errno));
    goto fail;
  }
  gdr_core_pin(); /* the library stays mapped while the thread runs (transport.h) */
  int rc = pthread_create(&g_svc.thread, NULL, svc_main, (void *)(intptr_t)g_svc.ep);
  if (rc) {
    gdr_core_unpin();
    GDR_WARN("RDMA idle-peer service: cannot start its thread: %s", strerror(rc));
    goto fail;
  }
  /* named by its creator (what top -H and /proc show); a name is a convenience: no failure to report */
  (void)pthread_setname_np(g_svc.thread, "gdr-rdma-svc");
  g_svc.running = 1;
  return ncclSuccess;
fail:
  if (g_svc.ep >= 0) close(g_svc.ep);
  if (g_svc.stop_fd >= 0) close(g_svc.stop_fd);
  g_svc.ep = g_svc.stop_fd = -1;
  return ncclSystemError;
}

ncclResult_t gdr_rdma_svc_attach(struct gdr_rdma_comm *c) {
  ncclResult_t res = ncclSuccess;
  if (c == NULL || c->fd < 0) return ncclSuccess;
  pthread_mutex_lock(&g_svc.mu);
  if (g_svc.n == g_svc.cap) {
    int cap = g_svc.cap ? 2 * g_svc.cap : 16;
    struct gdr_rdma_comm **p = realloc(g_svc.comms, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      res = ncclSystemError;
      goto out;
    }
    g_svc.comms = p;
    g_svc.cap = cap;
  }
  if (!g_svc.running && (res = start_locked()) != ncclSuccess) goto out;
  c->svc_id = g_svc.next_id++;
  c->svc_watch = c->svc_fresh = 0;
  g_svc.comms[g_svc.n++] = c;
  arm(g_svc.ep, c, EPOLL_CTL_ADD);
out:
  pthread_mutex_unlock(&g_svc.mu);
  return res;
}

void gdr_rdma_svc_detach(struct gdr_rdma_comm *c) {
  pthread_t t;
  int ep = -1, stop_fd = -1, last = 0;
  if (c == NULL) return;
  pthread_mutex_lock(&g_svc.mu);
  if (c->svc_id == 0) { /* never attached (its channel failed, or the service could not start) */
    pthread_mutex_unlock(&g_svc.mu);
    return;
  }
  for (int i = 0; i < g_svc.n; i++)
    if (g_svc.comms[i] == c) {
      g_svc.comms[i] = g_svc.comms[--g_svc.n];
      break;
    }
  (void)epoll_ctl(g_svc.ep, EPOLL_CTL_DEL, c->fd, NULL);
  c->svc_id = 0;
  if (g_svc.n == 0 && g_svc.running) {
    uint64_t one = 1;
    ssize_t w = write(g_svc.stop_fd, &one, sizeof(one));
    (void)w;
    t = g_svc.thread;
    ep = g_svc.ep;
    stop_fd = g_svc.stop_fd;
    g_svc.ep = g_svc.stop_fd = -1;
    g_svc.running = 0;
    last = 1;
  }
  if (g_svc.n == 0) { /* (nothing of the service outlives its connections: NCCL may dlclose the plugin next) */
    free(g_svc.comms);
    g_svc.comms = NULL;
    g_svc.cap = 0;
  }
  pthread_mutex_unlock(&g_svc.mu);
  /* a pass of the service on c finished (it tried c's lock under the list's, before c left the list) */
  pthread_mutex_lock(&c->svc_mu);
  pthread_mutex_unlock(&c->svc_mu);
  if (last) {
    pthread_join(t, NULL);
    close(ep);
    close(stop_fd);
    gdr_core_unpin();
  }
}
