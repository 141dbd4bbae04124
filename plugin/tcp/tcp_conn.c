/* TCP transport: listen, connect, accept (non-blocking state machines over sock.h), comm set-up and teardown,
 * their data streams handed to the I/O thread pool (tcp_pool.c) and taken back. A handle of an RDMA listener
 * (a peer with RDMA, sock.h's mixed pairs) is connected to through its TCP door, or refused on both sides. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "connstat.h"
#include "log.h"
#include "param.h"
#include "tcp.h"

#define TCP_MAX_GROUPS 8

struct tcp_group { /* streams of one incoming connection, gathered by conn_id */
  int used;
  uint64_t conn_id;
  uint64_t deadline_ns;
  union gdr_sockaddr peer;
  int ctrl_fd;
  unsigned peer_version; /* from the control stream's HELLO */
  uint32_t peer_features;
  uint32_t peer_caps; /* GDR_CAP_* of the control stream's HELLO */
  int addrs_pending;  /* fused listener: its addresses still to be sent on ctrl_fd */
  struct gdr_blob_io addrs_io;
  int nfds;
  int fds[TCP_MAX_STREAMS];
};

struct tcp_listen {
  int nl;                 /* addresses listened on: 1, or the fused device's members */
  struct gdr_listener *l; /* nl of them, one nonce */
  struct gdr_wire_addr addrs[GDR_MAX_FUSED];
  int dev;
  uint32_t caps; /* GDR_CAP_* announced */
  int tc;        /* traffic class of the accepted comms' sockets, -1 none */
  int nsocks, nthreads;
  struct tcp_group groups[TCP_MAX_GROUPS];
};

struct tcp_connecting { /* lives in the handle's state while connect() is re-entered */
  uint64_t conn_id;
  unsigned peer_version; /* from the handle */
  uint32_t peer_features;
  uint32_t caps; /* GDR_CAP_* announced in the HELLOs */
  int nsocks, nthreads;
  int naddrs;       /* fused listener: its addresses, read from the control stream before the data streams */
  int data_started; /* the data stream connectors are started */
  uint64_t deadline_ns;
  struct gdr_blob_io addrs_io;
  struct gdr_wire_addr addrs[GDR_MAX_FUSED];
  int ndone;
  int done[1 + TCP_MAX_STREAMS];
  struct gdr_connector conn[1 + TCP_MAX_STREAMS];
};

static void group_init(struct tcp_group *g) {
  memset(g, 0, sizeof(*g));
  g->ctrl_fd = -1;
  for (int i = 0; i < TCP_MAX_STREAMS; i++) g->fds[i] = -1;
}

static void group_clear(struct tcp_group *g) {
  if (g->ctrl_fd >= 0) close(g->ctrl_fd);
  for (int i = 0; i < TCP_MAX_STREAMS; i++)
    if (g->fds[i] >= 0) close(g->fds[i]);
  memset(g, 0, sizeof(*g));
  g->ctrl_fd = -1;
  for (int i = 0; i < TCP_MAX_STREAMS; i++) g->fds[i] = -1;
}

/* Frees a comm whose threads are not running (or were joined). */
static void comm_free(struct tcp_comm *c) {
  if (c == NULL) return;
  gdr_tcp_pool_detach(c); /* if still attached (a failed start) */
  if (c->threads != NULL) {
    for (int t = 0; t < c->nsync; t++) pthread_mutex_destroy(&c->threads[t].mu);
    free(c->threads);
  }
  free(c->streams);
  for (int s = 0; s < c->nsocks; s++)
    if (c->fds[s] >= 0) close(c->fds[s]);
  if (c->ctrl_fd >= 0) close(c->ctrl_fd);
  if (c->fail_mu_ok) pthread_mutex_destroy(&c->fail_mu);
  gdr_tcp_eager_free(c);
  gdr_tcp_stage_free(c);
  free(c->rx);
  free(c);
}

/* Builds a comm from established streams; takes ownership of the fds (closed on failure). */
/* The communicator's traffic class as the IP TOS / IPv6 traffic class of a socket (tc < 0: leave it). */
static ncclResult_t set_tclass(int fd, int family, int tc) {
  ncclResult_t res = ncclSuccess;
  if (tc < 0) goto out;
  if (family == AF_INET6) {
    GDR_SYSCHECK(setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tc, sizeof(tc)), "setsockopt(IPV6_TCLASS)");
  } else {
    GDR_SYSCHECK(setsockopt(fd, IPPROTO_IP, IP_TOS, &tc, sizeof(tc)), "setsockopt(IP_TOS)");
  }
out:
  return res;
}

static ncclResult_t comm_create(int is_send, int dev, int ctrl_fd, const int *fds, int nsocks, int nthreads,
                                const union gdr_sockaddr *peer, unsigned peer_version, uint32_t peer_features, int tc,
                                struct tcp_comm **out) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = calloc(1, sizeof(*c));
  int timeout = (int)gdr_param_int(GDR_PARAM_TCP_TIMEOUT_MS);
  size_t sockbuf = (size_t)gdr_param_int(GDR_PARAM_TCP_SOCKBUF);

  *out = NULL;
  if (c == NULL) {
    GDR_WARN("TCP: out of memory for a comm");
    close(ctrl_fd);
    for (int s = 0; s < nsocks; s++) close(fds[s]);
    return ncclSystemError;
  }
  c->is_send = is_send;
  c->dev = dev;
  c->ctrl_fd = ctrl_fd;
  c->nsocks = nsocks;
  c->nthreads = nthreads;
  for (int s = 0; s < TCP_MAX_STREAMS; s++) c->fds[s] = s < nsocks ? fds[s] : -1;
  c->peer = *peer;
  c->peer_version = peer_version;
  c->peer_features = peer_features;
  gdr_sockaddr_str(peer, c->peer_str, sizeof(c->peer_str));
  c->inline_max = (size_t)gdr_param_int(GDR_PARAM_TCP_INLINE);
  c->cts_inline_max = gdr_tcp_resolve_cts_inline(c->inline_max);
  c->min_chunk = (size_t)gdr_param_int(GDR_PARAM_TCP_MIN_CHUNK);
  c->max_chunk = (size_t)gdr_param_int(GDR_PARAM_TCP_MAX_CHUNK);
  c->steal_chunk = gdr_tcp_resolve_steal_chunk();
  c->spin_ns = gdr_tcp_resolve_spin_ns();
  c->spin_max_ns = gdr_tcp_resolve_spin_max_ns();
  c->proxy_io = gdr_tcp_resolve_proxy_io();
  c->help_after_ns = gdr_tcp_resolve_help_after_ns();
  atomic_init(&c->stopping, 0);
  atomic_init(&c->rx_expect, 0);
  atomic_init(&c->tx_expect, 0);
  for (int i = 0; i < TCP_NREQ; i++) {
    c->req[i].comm = c;
    atomic_init(&c->req[i].armed, 0);
    atomic_init(&c->req[i].claim, TCP_CLAIM_NONE);
    atomic_init(&c->req[i].reserved, 0);
    atomic_init(&c->req[i].done, 0);
    atomic_init(&c->req[i].total, SIZE_MAX);
  }
  c->rx = malloc(TCP_RXBUF);
  if (is_send)
    c->threads = calloc((size_t)nthreads, sizeof(*c->threads));
  else
    c->streams = calloc((size_t)nsocks, sizeof(*c->streams));
  if (c->rx == NULL || (is_send ? (void *)c->threads : (void *)c->streams) == NULL) {
    GDR_WARN("TCP: out of memory for a comm");
    res = ncclSystemError;
    goto out;
  }
  if (pthread_mutex_init(&c->fail_mu, NULL) != 0) {
    GDR_WARN("TCP: pthread_mutex_init failed");
    res = ncclSystemError;
    goto out;
  }
  c->fail_mu_ok = 1;
  for (int t = 0; is_send && t < nthreads; t++) { /* send lanes: lane t owns the streams s with s % nthreads == t */
    struct tcp_thread *th = &c->threads[t];
    th->comm = c;
    th->idx = t;
    if (pthread_mutex_init(&th->mu, NULL) != 0) {
      GDR_WARN("TCP: pthread_mutex_init failed");
      res = ncclSystemError;
      goto out;
    }
    c->nsync++;
    for (int s = t; s < nsocks; s += nthreads) th->fds[th->nfds++] = fds[s];
  }
  for (int s = 0; !is_send && s < nsocks; s++) {
    c->streams[s].comm = c;
    c->streams[s].idx = s;
    c->streams[s].fd = fds[s];
  }
  GDR_CHECK(gdr_sock_set_nonblocking(ctrl_fd, 1));
  GDR_CHECK(gdr_sock_tune(ctrl_fd, 1, 0, timeout));
  GDR_CHECK(set_tclass(ctrl_fd, peer->sa.sa_family, tc));
  for (int s = 0; s < nsocks; s++) {
    GDR_CHECK(gdr_sock_set_nonblocking(fds[s], 1)); /* the I/O threads never block on a stream */
    GDR_CHECK(gdr_sock_tune(fds[s], 1, sockbuf, timeout));
    GDR_CHECK(set_tclass(fds[s], peer->sa.sa_family, tc));
  }
  GDR_CHECK(gdr_tcp_eager_setup(c));
  GDR_CHECK(gdr_tcp_comm_start(c));
  *out = c;
  c = NULL;
out:
  if (c != NULL) comm_free(c);
  return res;
}

/* Takes the comm's data streams back from the I/O pool: once it returns, no I/O thread touches the comm. */
static void comm_stop_threads(struct tcp_comm *c) {
  if (gdr_tcp_comm_inherited(c)) {
    /* the parent's, before a fork: no thread here serves it, and its sockets are the parent's too (a shutdown would
     * end the parent's connection): the pool forgets it, then only this process's fds are closed */
    gdr_tcp_pool_detach(c);
    return;
  }
  atomic_store(&c->stopping, 1); /* an I/O thread's error from here on is not reported */
  for (int t = 0; c->is_send && t < c->nthreads; t++) {
    struct tcp_thread *th = &c->threads[t];
    pthread_mutex_lock(&th->mu);
    th->stop = 1;
    pthread_mutex_unlock(&th->mu);
  }
  gdr_tcp_pool_detach(c);
  /* Data already queued in the kernel is still delivered (FIN follows it). A sender shuts only its write sides and
   * leaves the read side to the graceful close. */
  for (int s = 0; s < c->nsocks; s++)
    if (c->fds[s] >= 0) shutdown(c->fds[s], c->is_send ? SHUT_WR : SHUT_RDWR);
}

ncclResult_t gdr_tcp_comm_start(struct tcp_comm *c) { return gdr_tcp_pool_attach(c); }

/* ------------------------------------------------------------------------------------------------ listen -- */

static void listen_free(struct tcp_listen *lc) {
  if (lc->l != NULL)
    for (int i = 0; i < lc->nl; i++) gdr_listener_close(&lc->l[i]);
  for (int g = 0; g < TCP_MAX_GROUPS; g++) group_clear(&lc->groups[g]);
  free(lc->l);
  free(lc);
}

ncclResult_t gdr_tcp_listen(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **listen_comm) {
  ncclResult_t res = ncclSuccess;
  struct tcp_listen *lc = calloc(1, sizeof(*lc));
  int n = opts->ndevs > 1 ? opts->ndevs : 1;

  *listen_comm = NULL;
  if (lc == NULL || (lc->l = calloc((size_t)n, sizeof(*lc->l))) == NULL) {
    GDR_WARN("TCP listen: out of memory");
    free(lc);
    return ncclSystemError;
  }
  for (int g = 0; g < TCP_MAX_GROUPS; g++) group_init(&lc->groups[g]);
  lc->dev = dev;
  lc->caps = opts->caps ? opts->caps : gdr_caps_local(GDR_TP_TCP, 0);
  lc->tc = opts->traffic_class;
  gdr_tcp_streams_for(opts, &lc->nsocks, &lc->nthreads);
  /* one listening socket per address; the others take the first one's nonce (the handle carries one) */
  for (; lc->nl < n; lc->nl++) {
    union gdr_sockaddr addr;
    struct gdr_handle h;
    GDR_CHECK(gdr_tcp_dev_addr(opts->devs[lc->nl], &addr));
    GDR_CHECK(gdr_listener_open(&lc->l[lc->nl], &addr, GDR_TP_TCP, lc->caps));
    if (lc->nl > 0) lc->l[lc->nl].nonce = lc->l[0].nonce;
    gdr_listener_handle(&lc->l[lc->nl], (uint32_t)dev, &h);
    lc->addrs[lc->nl] = h.addr;
  }
  gdr_listener_handle(&lc->l[0], (uint32_t)dev, handle);
  {
    struct tcp_proto p;
    gdr_tcp_proto_local(&p);
    p.ndevs = (uint8_t)n;
    memcpy(handle->tp_data, &p, sizeof(p));
  }
  handle->nstreams = (uint16_t)lc->nsocks;
  handle->nthreads = (uint16_t)lc->nthreads;
  if (n > 1)
    GDR_INFO(NCCL_NET, "TCP: listening on %d addresses of fused device %d, %d data stream(s) spread over them", n, dev,
             lc->nsocks);
  *listen_comm = lc;
  lc = NULL;
out:
  if (lc != NULL) listen_free(lc);
  return res;
}

ncclResult_t gdr_tcp_close_listen(void *listen_comm) {
  struct tcp_listen *lc = listen_comm;
  if (lc == NULL) return ncclSuccess;
  listen_free(lc);
  return ncclSuccess;
}

/* ----------------------------------------------------------------------------------------------- connect -- */

static void connecting_free(struct tcp_connecting *st) {
  for (int i = 0; i <= st->nsocks; i++) {
    if (st->done[i]) {
      if (st->conn[i].fd >= 0) close(st->conn[i].fd);
    } else {
      gdr_connector_abort(&st->conn[i]);
    }
  }
  free(st);
}

/* Starts the data stream connectors: stream s (1..nsocks) to the listener's address (s - 1) % naddrs (the
 * handle's only one unless the listener sent its fused addresses). */
static ncclResult_t start_data(struct tcp_connecting *st, const struct gdr_handle *handle) {
  ncclResult_t res = ncclSuccess;
  struct tcp_proto me;
  gdr_tcp_proto_local(&me);
  for (int i = 1; i <= st->nsocks; i++) {
    struct gdr_handle h = *handle;
    if (st->naddrs > 1) h.addr = st->addrs[(i - 1) % st->naddrs];
    GDR_CHECK(gdr_connector_start(&st->conn[i], &h, GDR_STREAM_DATA, (uint16_t)i, (uint16_t)st->nsocks, st->conn_id,
                                  st->caps, &me));
  }
  st->data_started = 1;
out:
  return res;
}

/* A fused listener's addresses, read from the control stream once it is up (non-blocking). *done when read. */
static ncclResult_t read_addrs(struct tcp_connecting *st, int n, int *done) {
  ncclResult_t res = ncclSuccess;
  uint32_t len = 0;
  char a[GDR_ADDR_STRLEN];
  *done = 0;
  res = gdr_sock_blob_recv(st->conn[0].fd, &st->addrs_io, TCP_BLOB_ADDRS, st->addrs, sizeof(st->addrs), &len, done);
  if (res != ncclSuccess) goto out;
  if (!*done) {
    if (gdr_time_ns() > st->deadline_ns) {
      GDR_WARN("TCP connect to %s: the listener's fused addresses did not come within GDRNET_CONNECT_TIMEOUT_MS=%lld",
               gdr_sockaddr_str(&st->conn[0].peer, a, sizeof(a)), (long long)gdr_connect_timeout_ms());
      res = ncclRemoteError;
    }
    goto out;
  }
  if (len != (uint32_t)n * sizeof(struct gdr_wire_addr)) {
    GDR_WARN("TCP connect to %s: the listener sent %u bytes of addresses for its %d addresses",
             gdr_sockaddr_str(&st->conn[0].peer, a, sizeof(a)), len, n);
    res = ncclRemoteError;
    goto out;
  }
  st->naddrs = n;
out:
  return res;
}

static ncclResult_t tcp_connect(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **send_comm);

/* A peer that listens with RDMA: through its TCP door if it has one (its process may use TCP), else the pair cannot
 * meet (it forces RDMA, or has no TCP transport) and both sides are told at once. */
static ncclResult_t connect_rdma_peer(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle,
                                      void **send_comm) {
  ncclResult_t res = ncclSuccess;
  uint32_t caps = opts->caps ? opts->caps : gdr_caps_local(GDR_TP_TCP, 0);
  struct gdr_handle door;
  if (gdr_handle_door_get(handle, &door) != 0) return gdr_connect_refuse(handle, GDR_TP_TCP, caps);
  res = tcp_connect(dev, opts, &door, send_comm);
  memcpy(handle->state, door.state, sizeof(handle->state)); /* the progress of a connect in progress */
  if (res == ncclSuccess && *send_comm != NULL) {
    struct tcp_comm *c = *send_comm;
    char m[200];
    c->peer_caps = handle->caps;
    GDR_INFO(NCCL_NET, "TCP connection to %s (an RDMA listener's TCP door): %s: TCP from the start", c->peer_str,
             gdr_mixed_str(caps, handle->caps, m, sizeof(m)));
  }
  return res;
}

ncclResult_t gdr_tcp_connect(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **send_comm) {
  *send_comm = NULL;
  if (handle->magic == GDR_HANDLE_MAGIC && handle->version == GDR_HANDLE_VERSION && handle->transport == GDR_TP_RDMA)
    return connect_rdma_peer(dev, opts, handle, send_comm);
  return tcp_connect(dev, opts, handle, send_comm);
}

/* The first call of a connect: the handle checked, the connection's state made and stored in the handle, the control
 * stream's connector started (and the data streams' unless the listener is fused: they wait for its addresses). */
static ncclResult_t connect_begin(const struct gdr_conn_opts *opts, struct gdr_handle *handle, int naddrs,
                                  struct tcp_connecting **out_st) {
  ncclResult_t res = ncclSuccess;
  struct tcp_connecting *st = NULL;
  union gdr_sockaddr peer;
  struct tcp_proto me;
  unsigned pver = 0;
  uint32_t pfeat = 0;
  char why[160];
  *out_st = NULL;
  GDR_CHECK(gdr_handle_check(handle, &peer));
  if (handle->transport != GDR_TP_TCP) {
    GDR_WARN("connect: the peer's handle names transport %u (neither TCP nor RDMA): is it this plugin's?",
             handle->transport);
    res = ncclInvalidUsage;
    goto out;
  }
  if (handle->nstreams < 1 || handle->nstreams > TCP_MAX_STREAMS || handle->nthreads < 1 ||
      handle->nthreads > handle->nstreams) {
    GDR_WARN("connect: the handle asks for %u streams and %u threads (1..%d, threads <= streams)", handle->nstreams,
             handle->nthreads, TCP_MAX_STREAMS);
    res = ncclInvalidUsage;
    goto out;
  }
  if (gdr_tcp_proto_peer(handle->tp_data, &pver, &pfeat, why, sizeof(why)) != 0) {
    char a[GDR_ADDR_STRLEN];
    GDR_WARN("connect: the listener at %s cannot be spoken to: %s; use the same plugin version on every rank",
             gdr_sockaddr_str(&peer, a, sizeof(a)), why);
    res = ncclInvalidUsage;
    goto out;
  }
  st = calloc(1, sizeof(*st));
  if (st == NULL) {
    GDR_WARN("TCP connect: out of memory");
    res = ncclSystemError;
    goto out;
  }
  st->peer_version = pver;
  st->peer_features = pfeat;
  st->caps = opts->caps ? opts->caps : gdr_caps_local(GDR_TP_TCP, 0);
  gdr_tcp_proto_local(&me);
  st->nsocks = handle->nstreams;
  st->nthreads = handle->nthreads;
  for (int i = 0; i <= st->nsocks; i++) st->conn[i].fd = -1;
  st->deadline_ns = gdr_time_ns() + gdr_connect_timeout_ns();
  res = gdr_random_bytes(&st->conn_id, sizeof(st->conn_id));
  if (res == ncclSuccess)
    res =
        gdr_connector_start(&st->conn[0], handle, GDR_STREAM_CTRL, 0, (uint16_t)st->nsocks, st->conn_id, st->caps, &me);
  if (res == ncclSuccess && naddrs == 1) res = start_data(st, handle);
  if (res == ncclSuccess) res = gdr_handle_state_set(handle, st);
  if (res != ncclSuccess) {
    connecting_free(st);
    goto out;
  }
  *out_st = st;
out:
  return res;
}

/* Every stream connected: the comm is made (it owns the fds from here, whatever happens); st is freed. */
static ncclResult_t connect_finish(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle,
                                   struct tcp_connecting *st, int naddrs, void **send_comm) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = NULL;
  int fds[TCP_MAX_STREAMS];
  union gdr_sockaddr peer = st->conn[0].peer;
  int ctrl = st->conn[0].fd;
  int ns = st->nsocks, nt = st->nthreads;
  unsigned pver = st->peer_version;
  uint32_t pfeat = st->peer_features;
  for (int i = 0; i < ns; i++) fds[i] = st->conn[1 + i].fd;
  for (int i = 0; i <= ns; i++) st->conn[i].fd = -1;
  free(st);
  gdr_handle_state_set(handle, NULL);
  GDR_CHECK(comm_create(1, dev, ctrl, fds, ns, nt, &peer, pver, pfeat, opts->traffic_class, &c));
  c->peer_caps = handle->caps;
  GDR_INFO(NCCL_NET, "TCP: connected to %s with %d data stream(s)%s in %d send lane(s)%s", c->peer_str, ns,
           naddrs > 1 ? " over the listener's fused addresses" : "", nt,
           opts->traffic_class >= 0 ? ", traffic class set" : "");
  *send_comm = c;
out:
  return res;
}

static ncclResult_t tcp_connect(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle,
                                void **send_comm) {
  ncclResult_t res = ncclSuccess;
  struct tcp_connecting *st = gdr_handle_state_get(handle);
  int naddrs = gdr_tcp_proto_ndevs(handle->tp_data);

  *send_comm = NULL;
  if (st == NULL) {
    GDR_CHECK(connect_begin(opts, handle, naddrs, &st));
  }
  for (int i = 0; i <= (st->data_started ? st->nsocks : 0); i++) {
    int done = 0;
    if (st->done[i]) continue;
    res = gdr_connector_poll(&st->conn[i], &done);
    if (res != ncclSuccess) goto fail;
    if (done) {
      st->done[i] = 1;
      st->ndone++;
    }
  }
  if (!st->data_started) {
    int done = 0;
    if (!st->done[0]) goto out;
    res = read_addrs(st, naddrs, &done);
    if (res != ncclSuccess) goto fail;
    if (!done) goto out;
    res = start_data(st, handle);
    if (res != ncclSuccess) goto fail;
    goto out; /* the data streams progress from the next call */
  }
  if (st->ndone <= st->nsocks) goto out; /* not yet: NCCL calls again */
  res = connect_finish(dev, opts, handle, st, naddrs, send_comm);
  goto out;
fail:
  connecting_free(st);
  gdr_handle_state_set(handle, NULL);
out:
  return res;
}

void gdr_tcp_connect_abort(struct gdr_handle *handle) {
  struct tcp_connecting *st = gdr_handle_state_get(handle);
  if (st == NULL) return;
  gdr_handle_state_set(handle, NULL);
  connecting_free(st);
}

/* ------------------------------------------------------------------------------------------------ accept -- */

static void group_reject(struct tcp_listen *lc, struct gdr_stream *s, const char *why) {
  char a[GDR_ADDR_STRLEN];
  GDR_WARN("TCP accept: dropped a stream from %s: %s", gdr_sockaddr_str(&s->peer, a, sizeof(a)), why);
  close(s->fd);
  (void)lc;
}

/* A fused listener's addresses to the connector of group g (a few hundred bytes into a fresh socket: sent at once
 * in practice, finished by a later accept otherwise). -1 when the group was dropped. */
static int send_addrs(struct tcp_listen *lc, struct tcp_group *g) {
  int done = 0;
  ncclResult_t r = gdr_sock_blob_send(g->ctrl_fd, &g->addrs_io, TCP_BLOB_ADDRS, lc->addrs,
                                      (uint32_t)((size_t)lc->nl * sizeof(lc->addrs[0])), &done);
  if (r != ncclSuccess) {
    char a[GDR_ADDR_STRLEN];
    GDR_WARN("TCP accept: sending the fused addresses to %s failed; connection dropped",
             gdr_sockaddr_str(&g->peer, a, sizeof(a)));
    group_clear(g);
    return -1;
  }
  if (done) g->addrs_pending = 0;
  return 0;
}

/* The group of stream s: the one of its connection, or a free one (the deadline of its connection starts); NULL when
 * every group is taken. */
static struct tcp_group *group_for(struct tcp_listen *lc, const struct gdr_stream *s, uint64_t now) {
  for (int i = 0; i < TCP_MAX_GROUPS; i++)
    if (lc->groups[i].used && lc->groups[i].conn_id == s->hello.conn_id) return &lc->groups[i];
  for (int i = 0; i < TCP_MAX_GROUPS; i++) {
    struct tcp_group *g = &lc->groups[i];
    if (g->used) continue;
    g->used = 1;
    g->conn_id = s->hello.conn_id;
    g->peer = s->peer;
    g->deadline_ns = now + gdr_connect_timeout_ns();
    return g;
  }
  return NULL;
}

/* Stream s into its place in group g: the control stream (its protocol checked) or data stream k. -1 when it was
 * rejected (and closed). */
static int group_add(struct tcp_listen *lc, struct tcp_group *g, struct gdr_stream *s) {
  if (s->hello.kind == GDR_STREAM_CTRL && s->hello.stream == 0 && g->ctrl_fd < 0) {
    char why[160], msg[sizeof(why) + 64];
    if (gdr_tcp_proto_peer(s->hello.tp_data, &g->peer_version, &g->peer_features, why, sizeof(why)) != 0) {
      snprintf(msg, sizeof(msg), "%s; use the same plugin version on every rank", why);
      group_reject(lc, s, msg);
      return -1;
    }
    g->ctrl_fd = s->fd;
    g->peer = s->peer;
    g->peer_caps = s->hello.caps;
    g->addrs_pending = lc->nl > 1 && (g->peer_features & TCP_FEAT_FUSED);
  } else if (s->hello.kind == GDR_STREAM_DATA && s->hello.stream >= 1 && g->fds[s->hello.stream - 1] < 0) {
    g->fds[s->hello.stream - 1] = s->fd;
    g->nfds++;
  } else {
    group_reject(lc, s, "duplicate or inconsistent stream");
    return -1;
  }
  return 0;
}

/* Group g has every stream: its comm is made (it owns the fds from here, whatever happens) and the group is free. */
static ncclResult_t group_accept(struct tcp_listen *lc, struct tcp_group *g, void **recv_comm) {
  ncclResult_t res = ncclSuccess;
  struct tcp_comm *c = NULL;
  int ctrl = g->ctrl_fd;
  int fds[TCP_MAX_STREAMS];
  union gdr_sockaddr peer = g->peer;
  unsigned pver = g->peer_version;
  uint32_t pfeat = g->peer_features;
  uint32_t pcaps = g->peer_caps;
  for (int i = 0; i < lc->nsocks; i++) {
    fds[i] = g->fds[i];
    g->fds[i] = -1;
  }
  g->ctrl_fd = -1;
  group_clear(g);
  GDR_CHECK(comm_create(0, lc->dev, ctrl, fds, lc->nsocks, lc->nthreads, &peer, pver, pfeat, lc->tc, &c));
  c->peer_caps = pcaps;
  GDR_INFO(NCCL_NET, "TCP: accepted %s with %d data stream(s), %d lane(s)", c->peer_str, lc->nsocks, lc->nthreads);
  if ((pcaps & GDR_CAP_RDMA) && !(lc->caps & GDR_CAP_RDMA)) {
    char m[200];
    GDR_INFO(NCCL_NET, "TCP connection from %s: %s: TCP from the start", c->peer_str,
             gdr_mixed_str(lc->caps, pcaps, m, sizeof(m)));
  }
  *recv_comm = c;
out:
  return res;
}

/* Connections still incomplete at their deadline are dropped, with a WARN naming what was missing. */
static void groups_expire(struct tcp_listen *lc, uint64_t now) {
  for (int i = 0; i < TCP_MAX_GROUPS; i++) {
    struct tcp_group *g = &lc->groups[i];
    if (g->used && now > g->deadline_ns) {
      char a[GDR_ADDR_STRLEN];
      GDR_WARN("TCP accept: connection from %s incomplete after %lld ms (%d of %d data streams%s); dropped",
               gdr_sockaddr_str(&g->peer, a, sizeof(a)), (long long)gdr_connect_timeout_ms(), g->nfds, lc->nsocks,
               g->ctrl_fd >= 0 ? "" : ", no control stream");
      group_clear(g);
    }
  }
}

ncclResult_t gdr_tcp_accept(void *listen_comm, void **recv_comm) {
  ncclResult_t res = ncclSuccess;
  struct tcp_listen *lc = listen_comm;
  uint64_t now = gdr_time_ns();

  *recv_comm = NULL;
  for (int i = 0; i < TCP_MAX_GROUPS; i++)
    if (lc->groups[i].used && lc->groups[i].addrs_pending) (void)send_addrs(lc, &lc->groups[i]);
  for (int li = 0; li < lc->nl; li++) {
    struct gdr_stream s;
    struct tcp_group *g;
    int got = 0;
    GDR_CHECK(gdr_listener_poll(&lc->l[li], &s, &got));
    if (!got) continue;
    li = -1; /* something came: poll every listener again */
    if (s.hello.nstreams != lc->nsocks) {
      group_reject(lc, &s, "its connection has a different stream count than this listener offered");
      continue;
    }
    g = group_for(lc, &s, now);
    if (g == NULL) {
      group_reject(lc, &s, "too many connections being set up on one listener");
      continue;
    }
    if (group_add(lc, g, &s) != 0) continue;
    if (g->addrs_pending && send_addrs(lc, g) != 0) continue;
    if (g->ctrl_fd >= 0 && !g->addrs_pending && g->nfds == lc->nsocks) {
      res = group_accept(lc, g, recv_comm);
      goto out;
    }
  }
  groups_expire(lc, now);
out:
  return res;
}

/* ------------------------------------------------------------------------------------------------- close -- */

static ncclResult_t close_comm(struct tcp_comm *c) {
  if (c == NULL) return ncclSuccess;
  comm_stop_threads(c);
  if (c->is_send && !gdr_tcp_comm_inherited(c)) {
    /* Every send NCCL saw complete is in a send queue here but maybe not at the peer yet: shut the write sides
     * (FIN after the data) and keep a stream the peer has not acknowledged open until it has (linger.c); a plain
     * close() would answer the receiver's next credit or CTS with a reset that drops that tail. */
    char what[GDR_ADDR_STRLEN + 40];
    snprintf(what, sizeof(what), "TCP control stream to %s", c->peer_str);
    gdr_sock_close_graceful(c->ctrl_fd, what);
    c->ctrl_fd = -1;
    for (int s = 0; s < c->nsocks; s++) {
      snprintf(what, sizeof(what), "TCP data stream %d to %s", s, c->peer_str);
      gdr_sock_close_graceful(c->fds[s], what);
      c->fds[s] = -1;
    }
  }
  comm_free(c);
  return ncclSuccess;
}

ncclResult_t gdr_tcp_close_send(void *send_comm) { return close_comm(send_comm); }
ncclResult_t gdr_tcp_close_recv(void *recv_comm) { return close_comm(recv_comm); }

/* ---------------------------------------------------------------------------------------------- describe -- */

/* transport.h describe: what connect/accept set (the peer, the streams, the sockets) and the kernel's view of the
 * sockets; any thread, while the comm is open (its fds stay valid until close). */
int gdr_tcp_describe(void *comm, struct gdr_conn_desc *out) {
  struct tcp_comm *c = comm;
  if (c == NULL) return -1;
  snprintf(out->peer, sizeof(out->peer), "%s", c->peer_str);
  snprintf(out->path, sizeof(out->path), "%d stream%s", c->nsocks, c->nsocks == 1 ? "" : "s");
  out->state = atomic_load_explicit(&c->failed, memory_order_acquire) ? GDR_CONN_FAILED : GDR_CONN_TCP;
  gdr_connstat_sock_facts(c->ctrl_fd, out);
  if (c->is_send)
    for (int s = 0; s < c->nsocks; s++) {
      int64_t silent = out->peer_silent_ms; /* the control stream's: data streams carry nothing back */
      gdr_connstat_sock_facts(c->fds[s], out);
      out->peer_silent_ms = silent;
    }
  return 0;
}

/* transport.h moved: what the I/O threads wrote or read on the comm's data streams so far. */
uint64_t gdr_tcp_moved(void *comm) {
  const struct tcp_comm *c = comm;
  return c ? atomic_load_explicit(&c->moved, memory_order_relaxed) : 0;
}
