/* 32 requests in flight on one comm (NCCL_NET_MAX_REQUESTS): the sender posts 32 isends and the
 * receiver 32 irecvs before testing any, over distinct sub-ranges with mixed sizes (0 B .. 1 MiB);
 * then a sliding window keeping 32 in flight over a few thousand messages (request reuse), tested
 * oldest-first as NCCL's proxy does, and a round where every outstanding request is polled each sweep.
 * Every byte and every reported size is checked; messages match in post order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define N 32
#define SLOT (1u << 20)

static int size_of(uint64_t msg) {
  static const int pool[] = {0, 1, 8, 100, 4096, 8191, 65536, 100000, 1 << 20};
  return pool[(msg * 7 + msg / 5) % (sizeof pool / sizeof pool[0])];
}

/* Burst: post all N, then test. order 0: oldest first; order 1: poll all each sweep. */
static void burst(gn_ctx_t *ctx, it_conn_t *c, int sending, uint64_t base, int order, uint64_t salt) {
  void *req[N];
  int done[N] = {0};
  for (int i = 0; i < N; i++) {
    uint64_t m = base + (uint64_t)i;
    int sz = size_of(m);
    size_t off = (size_t)i * SLOT;
    if (sending) {
      gn_pattern_fill(c->sbuf + off, (size_t)sz, gn_pattern_seed((uint64_t)sz, m, salt));
      it_step("posting isend %d of %d (%d bytes)", i + 1, N, sz);
      IT_GN(ctx, gn_isend(ctx, c->s, c->sbuf + off, sz, 0, c->smh, &req[i]));
    } else {
      memset(c->rbuf + off, IT_CANARY, SLOT);
      int szs[1] = {(int)SLOT}, tags[1] = {0};
      void *d[1] = {c->rbuf + off}, *mh[1] = {c->rmh};
      it_step("posting irecv %d of %d", i + 1, N);
      IT_GN(ctx, gn_irecv(ctx, c->r, 1, d, szs, tags, mh, &req[i]));
    }
  }
  int left = N;
  while (left > 0) {
    for (int i = 0; i < N; i++) {
      if (done[i]) continue;
      int d = 0, got = -1;
      it_step("testing request %d (%s)", i, sending ? "send" : "recv");
      IT_GN(ctx, gn_test(ctx, req[i], &d, sending ? NULL : &got));
      if (!d) {
        IT_CHECK(!gn_expired(ctx->deadline_ns), "request %d never completed", i);
        if (order == 0) break; /* oldest first */
        continue;
      }
      done[i] = 1;
      left--;
      if (!sending) {
        uint64_t m = base + (uint64_t)i;
        it_verify(c->rbuf + (size_t)i * SLOT, (int)SLOT, got, size_of(m), m, salt, "in-flight receive");
      }
    }
  }
}

/* Sliding window of N over `total` messages. */
static void window(gn_ctx_t *ctx, it_conn_t *c, int sending, uint64_t base, int total, uint64_t salt) {
  void *req[N];
  int posted = 0, completed = 0;
  while (completed < total) {
    while (posted < total && posted - completed < N) {
      int slot = posted % N;
      uint64_t m = base + (uint64_t)posted;
      int sz = size_of(m) > 65536 ? 65536 : size_of(m);
      size_t off = (size_t)slot * SLOT;
      if (sending) {
        gn_pattern_fill(c->sbuf + off, (size_t)sz, gn_pattern_seed((uint64_t)sz, m, salt));
        IT_GN(ctx, gn_isend(ctx, c->s, c->sbuf + off, sz, 0, c->smh, &req[slot]));
      } else {
        memset(c->rbuf + off, IT_CANARY, 65536);
        int szs[1] = {65536}, tags[1] = {0};
        void *d[1] = {c->rbuf + off}, *mh[1] = {c->rmh};
        IT_GN(ctx, gn_irecv(ctx, c->r, 1, d, szs, tags, mh, &req[slot]));
      }
      posted++;
    }
    int slot = completed % N, d = 0, got = -1;
    it_step("window: message %d of %d", completed, total);
    IT_GN(ctx, gn_test(ctx, req[slot], &d, sending ? NULL : &got));
    if (!d) {
      IT_CHECK(!gn_expired(ctx->deadline_ns), "window stuck at %d/%d", completed, total);
      continue;
    }
    if (!sending) {
      uint64_t m = base + (uint64_t)completed;
      int sz = size_of(m) > 65536 ? 65536 : size_of(m);
      it_verify(c->rbuf + (size_t)slot * SLOT, 65536, got, sz, m, salt, "window receive");
    }
    completed++;
  }
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_load(&ip);
  it_conn_t c;
  it_conn_open(&ip, 0, fd, (size_t)N * SLOT, &c);
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, it_env_double("GNIT_PHASE_S", 120));
  for (int round = 0; round < 4; round++) {
    int parent_sends = round % 2 == 0;
    burst(&ctx, &c, parent == parent_sends, (uint64_t)round * N, round / 2, 7);
  }
  window(&ctx, &c, parent, 1000, 3000, 8);
  window(&ctx, &c, !parent, 10000, 3000, 9);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("inflight", 150, side, 60); }
