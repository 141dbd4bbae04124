/* Both directions at once: each process streams to the other while receiving, 8 requests in flight
 * each way, sizes 0 B .. 2 MiB, every byte checked; first from one thread (as NCCL's proxy progresses
 * sends and receives together), then with the send and receive sides on two threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define DEPTH 8
#define SLOT (2u << 20)
#define MSGS 300

static int size_of(int i) {
  static const int pool[] = {0, 1, 1000, 65536, 65537, 1 << 20, 2 << 20, 12345, 300000};
  return pool[i % (int)(sizeof pool / sizeof pool[0])];
}

typedef struct {
  it_conn_t *c;
  int parent;
  int do_send, do_recv;
  uint64_t base;
} dir_t;

static void stream(dir_t *a) {
  it_conn_t *c = a->c;
  const ncclNet_v8_t *net = c->net;
  void *sreq[DEPTH], *rreq[DEPTH];
  int sp = 0, sc = 0, rp = 0, rc = 0;
  int sn = a->do_send ? MSGS : 0, rn = a->do_recv ? MSGS : 0;
  uint64_t my = a->parent ? 1 : 2, peer = a->parent ? 2 : 1;
  uint64_t dl = gn_deadline_ns(it_env_double("GNIT_PHASE_S", 120));
  while (sc < sn || rc < rn) {
    while (sp < sn && sp - sc < DEPTH) {
      int slot = sp % DEPTH, sz = size_of(sp);
      gn_pattern_fill(c->sbuf + (size_t)slot * SLOT, (size_t)sz, gn_pattern_seed((uint64_t)sz, a->base + (uint64_t)sp, my));
      IT_OK(net->isend(c->s, c->sbuf + (size_t)slot * SLOT, sz, 0, c->smh, &sreq[slot]));
      if (sreq[slot] == NULL) break;
      sp++;
    }
    while (rp < rn && rp - rc < DEPTH) {
      int slot = rp % DEPTH;
      memset(c->rbuf + (size_t)slot * SLOT, IT_CANARY, SLOT);
      int szs[1] = {(int)SLOT}, tags[1] = {0};
      void *d[1] = {c->rbuf + (size_t)slot * SLOT}, *mh[1] = {c->rmh};
      IT_OK(net->irecv(c->r, 1, d, szs, tags, mh, &rreq[slot]));
      if (rreq[slot] == NULL) break;
      rp++;
    }
    if (sc < sp) {
      int d = 0;
      IT_OK(net->test(sreq[sc % DEPTH], &d, NULL));
      if (d) sc++;
    }
    if (rc < rp) {
      int d = 0, got = -1;
      IT_OK(net->test(rreq[rc % DEPTH], &d, &got));
      if (d) {
        it_verify(c->rbuf + (size_t)(rc % DEPTH) * SLOT, (int)SLOT, got, size_of(rc), a->base + (uint64_t)rc, peer,
                  "bidirectional receive");
        rc++;
      }
    }
    IT_CHECK(!gn_expired(dl), "stuck: sent %d/%d received %d/%d", sc, sn, rc, rn);
  }
}

static void *thread_main(void *p) {
  stream(p);
  return NULL;
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_load(&ip);
  it_conn_t c;
  it_conn_open(&ip, 0, fd, (size_t)DEPTH * SLOT, &c);
  it_step("both directions, one thread");
  dir_t both = {&c, parent, 1, 1, 0};
  stream(&both);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_step("both directions, a sender thread and a receiver thread");
  dir_t s = {&c, parent, 1, 0, 100000}, r = {&c, parent, 0, 1, 100000};
  pthread_t ts, tr;
  IT_CHECK(pthread_create(&ts, NULL, thread_main, &s) == 0, "pthread_create");
  IT_CHECK(pthread_create(&tr, NULL, thread_main, &r) == 0, "pthread_create");
  IT_CHECK(pthread_join(ts, NULL) == 0 && pthread_join(tr, NULL) == 0, "pthread_join");
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("bidir", 150, side, 60); }
