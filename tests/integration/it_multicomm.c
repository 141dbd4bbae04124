/* Many comms at once: 8 connections in each direction between the two processes, set up in parallel
 * (8 listens, then every connect and accept re-entered round-robin, as NCCL's service thread does for
 * several peers/channels), spread over every device; then traffic on all 16 comms interleaved from one
 * thread, each comm with its own pattern (any cross-talk shows), then 4 threads per process each
 * driving its own comms at the same time (the plugin is shared by NCCL's per-GPU proxy threads), then
 * new connections set up, used and closed on the main thread while 2 threads stream on the others (NCCL's
 * service thread and progress threads). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define NC 8
#define MSGS 200
#define BUFSZ (1u << 20)

typedef struct {
  it_plugin_t *ip;
  void *s[NC], *r[NC];
  void *smh[NC], *rmh[NC];
  unsigned char *sbuf[NC], *rbuf[NC];
  int parent;
} mc_t;

static int msg_size(int comm, int i) { return ((comm + 1) * 7919 * (i + 1)) % 200000; }

static void setup(mc_t *m, int fd) {
  it_plugin_t *ip = m->ip;
  char mine[NC][NCCL_NET_HANDLE_MAXSIZE], peer[NC][NCCL_NET_HANDLE_MAXSIZE];
  void *lc[NC];
  for (int i = 0; i < NC; i++) {
    memset(mine[i], 0, sizeof mine[i]);
    it_step("listen %d", i);
    IT_OK(ip->net->listen(i % ip->ndev, mine[i], &lc[i]));
    IT_CHECK(lc[i] != NULL, "listen %d: NULL listenComm", i);
  }
  IT_CHECK(gn_boot_send(fd, mine, sizeof mine) == 0, "bootstrap send");
  IT_CHECK(gn_boot_recv(fd, peer, sizeof peer, 60) == 0, "bootstrap recv");
  int left = 2 * NC;
  uint64_t dl = gn_deadline_ns(60);
  memset(m->s, 0, sizeof m->s);
  memset(m->r, 0, sizeof m->r);
  while (left > 0) {
    for (int i = 0; i < NC; i++) {
      ncclNetDeviceHandle_v8_t *dh = NULL;
      if (m->s[i] == NULL) {
        it_step("connect %d", i);
        IT_OK(ip->net->connect(i % ip->ndev, peer[i], &m->s[i], &dh));
        if (m->s[i] != NULL) left--;
      }
      if (m->r[i] == NULL) {
        it_step("accept %d", i);
        IT_OK(ip->net->accept(lc[i], &m->r[i], &dh));
        if (m->r[i] != NULL) {
          left--;
          IT_OK(ip->net->closeListen(lc[i]));
        }
      }
    }
    IT_CHECK(!gn_expired(dl), "%d of %d connects/accepts still pending after 60 s", left, 2 * NC);
  }
  for (int i = 0; i < NC; i++) {
    IT_CHECK(posix_memalign((void **)&m->sbuf[i], 4096, BUFSZ) == 0, "oom");
    IT_CHECK(posix_memalign((void **)&m->rbuf[i], 4096, BUFSZ) == 0, "oom");
    IT_OK(ip->net->regMr(m->s[i], m->sbuf[i], BUFSZ, NCCL_PTR_HOST, &m->smh[i]));
    IT_OK(ip->net->regMr(m->r[i], m->rbuf[i], BUFSZ, NCCL_PTR_HOST, &m->rmh[i]));
  }
}

/* Drives comms [lo, hi): sends MSGS on each send comm and receives MSGS on each recv comm, all at
 * once, one request in flight per comm and direction. */
static void drive(mc_t *m, int lo, int hi, uint64_t base) {
  const ncclNet_v8_t *net = m->ip->net;
  void *sreq[NC] = {0}, *rreq[NC] = {0};
  int sent[NC] = {0}, rcvd[NC] = {0};
  int left = 2 * (hi - lo);
  uint64_t my = m->parent ? 100 : 200, peer = m->parent ? 200 : 100;
  uint64_t dl = gn_deadline_ns(it_env_double("GNIT_PHASE_S", 120));
  while (left > 0) {
    for (int i = lo; i < hi; i++) {
      if (sent[i] < MSGS) {
        if (sreq[i] == NULL) {
          int sz = msg_size(i, sent[i]);
          gn_pattern_fill(m->sbuf[i], (size_t)sz, gn_pattern_seed((uint64_t)sz, base + (uint64_t)sent[i], my + (uint64_t)i));
          IT_OK(net->isend(m->s[i], m->sbuf[i], sz, 0, m->smh[i], &sreq[i]));
        }
        if (sreq[i] != NULL) {
          int d = 0;
          IT_OK(net->test(sreq[i], &d, NULL));
          if (d) {
            sreq[i] = NULL;
            if (++sent[i] == MSGS) left--;
          }
        }
      }
      if (rcvd[i] < MSGS) {
        if (rreq[i] == NULL) {
          memset(m->rbuf[i], IT_CANARY, 200000);
          int szs[1] = {200000}, tags[1] = {0};
          void *d[1] = {m->rbuf[i]}, *mh[1] = {m->rmh[i]};
          IT_OK(net->irecv(m->r[i], 1, d, szs, tags, mh, &rreq[i]));
        }
        if (rreq[i] != NULL) {
          int d = 0, got = -1;
          IT_OK(net->test(rreq[i], &d, &got));
          if (d) {
            rreq[i] = NULL;
            char what[64];
            snprintf(what, sizeof what, "comm %d receive", i);
            it_verify(m->rbuf[i], 200000, got, msg_size(i, rcvd[i]), base + (uint64_t)rcvd[i], peer + (uint64_t)i, what);
            if (++rcvd[i] == MSGS) left--;
          }
        }
      }
    }
    IT_CHECK(!gn_expired(dl), "comms %d..%d: traffic incomplete after the deadline", lo, hi - 1);
  }
}

typedef struct {
  mc_t *m;
  int lo, hi;
} th_arg_t;

static void *thread_main(void *a) {
  th_arg_t *t = a;
  drive(t->m, t->lo, t->hi, 50000);
  return NULL;
}

static void *thread_main_b(void *a) {
  th_arg_t *t = a;
  drive(t->m, t->lo, t->hi, 90000);
  return NULL;
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_load(&ip);
  mc_t m;
  memset(&m, 0, sizeof m);
  m.ip = &ip;
  m.parent = parent;
  setup(&m, fd);
  it_step("all comms from one thread");
  drive(&m, 0, NC, 0);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_step("4 threads, 2 comms each");
  pthread_t th[4];
  th_arg_t ta[4];
  for (int t = 0; t < 4; t++) {
    ta[t] = (th_arg_t){&m, 2 * t, 2 * t + 2};
    IT_CHECK(pthread_create(&th[t], NULL, thread_main, &ta[t]) == 0, "pthread_create");
  }
  for (int t = 0; t < 4; t++) IT_CHECK(pthread_join(th[t], NULL) == 0, "pthread_join");
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  /* NCCL's service thread sets connections up (listen/connect/accept/regMr/close) while its progress
   * threads move data on others: new comms come and go here while two threads stream on comms 0..3. */
  it_step("set-up and teardown on the main thread while 2 threads stream");
  pthread_t tb[2];
  th_arg_t tba[2];
  for (int t = 0; t < 2; t++) {
    tba[t] = (th_arg_t){&m, 2 * t, 2 * t + 2};
    IT_CHECK(pthread_create(&tb[t], NULL, thread_main_b, &tba[t]) == 0, "pthread_create");
  }
  for (int k = 0; k < 3; k++) {
    it_conn_t extra;
    it_conn_open(&ip, k % ip.ndev, fd, 1 << 16, &extra);
    gn_ctx_t ctx;
    gn_ctx_init(&ctx, ip.net, 60);
    if (parent) {
      it_send_pattern(&ctx, &extra, 0, 60000, (uint64_t)k, 300);
      it_recv_pattern(&ctx, &extra, 0, 1 << 16, 60000, (uint64_t)k, 301);
    } else {
      it_recv_pattern(&ctx, &extra, 0, 1 << 16, 60000, (uint64_t)k, 300);
      it_send_pattern(&ctx, &extra, 0, 60000, (uint64_t)k, 301);
    }
    it_conn_close(&extra);
  }
  for (int t = 0; t < 2; t++) IT_CHECK(pthread_join(tb[t], NULL) == 0, "pthread_join");
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_step("closing");
  for (int i = 0; i < NC; i++) {
    IT_OK(ip.net->deregMr(m.s[i], m.smh[i]));
    IT_OK(ip.net->deregMr(m.r[i], m.rmh[i]));
    IT_OK(ip.net->closeSend(m.s[i]));
    IT_OK(ip.net->closeRecv(m.r[i]));
    free(m.sbuf[i]);
    free(m.rbuf[i]);
  }
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("multicomm", 150, side, 60); }
