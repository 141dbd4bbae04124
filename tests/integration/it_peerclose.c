/* A peer that closes while this side is still posting sends. The receiver takes K messages,
 * then closes its comm; the sender keeps posting (32 in flight, as NCCL may). The one documented behaviour, the same
 * on both transports: isend never returns an error itself (it returns a request, or NULL for "try again"); the
 * error comes from test() of a request, ncclRemoteError, within GDRNET_TCP_TIMEOUT_MS of the close (here: within
 * a few seconds, the peer's EOF is seen at once). The same for irecv: a receiver whose sender closed gets its error
 * from test, never from irecv. Every message before the close arrives intact. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define K 40
#define SZ 100000
#define BOUND_S 8.0

/* Keeps posting until test() of some request fails; asserts how. */
static void post_until_error(it_conn_t *c, int sending) {
  const ncclNet_v8_t *net = c->net;
  void *req[32] = {0};
  int posted = 0, tested = 0;
  uint64_t t0 = gn_now_ns(), dl = gn_deadline_ns(BOUND_S);
  for (;;) {
    IT_CHECK(!gn_expired(dl), "no error within %.0f s of the peer's close (%d posted, %d completed)", BOUND_S, posted,
             tested);
    if (posted - tested < 32) {
      void *r = NULL;
      ncclResult_t res;
      if (sending) {
        res = net->isend(c->s, c->sbuf, SZ, 0, c->smh, &r);
      } else {
        int sz = SZ, tag = 0;
        void *d = c->rbuf, *mh = c->rmh;
        res = net->irecv(c->r, 1, &d, &sz, &tag, &mh, &r);
      }
      IT_CHECK(res == ncclSuccess, "%s returned %s after the peer closed; the error must come from test()",
               sending ? "isend" : "irecv", gn_result_str(res));
      if (r) req[posted++ % 32] = r;
    }
    if (tested < posted) {
      int d = 0;
      ncclResult_t res = net->test(req[tested % 32], &d, NULL);
      if (res != ncclSuccess) {
        IT_CHECK(res == ncclRemoteError, "test returned %s; a closed peer is ncclRemoteError", gn_result_str(res));
        it_log("%s: test of request %d failed with ncclRemoteError %.2f s after the peer's close (%d posted)",
               sending ? "sender" : "receiver", tested, (double)(gn_now_ns() - t0) / 1e9, posted);
        return;
      }
      if (d) tested++;
    } else {
      sched_yield();
    }
  }
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_conn_t c;
  gn_ctx_t ctx;
  it_load(&ip);
  it_conn_open(&ip, 0, fd, SZ, &c);
  gn_ctx_init(&ctx, ip.net, 60);
  /* round 0, child -> parent: the parent receives K and closes its receive comm while the child keeps sending;
   * round 1, parent -> child: the parent sends K and closes its send comm while the child keeps receiving */
  for (int round = 0; round < 2; round++) {
    int parent_sends = round == 1;
    it_step("round %d: K messages %s", round, parent_sends ? "parent -> child" : "child -> parent");
    for (int i = 0; i < K; i++) {
      if (parent_sends == (parent == 1))
        it_send_pattern(&ctx, &c, 0, SZ, (uint64_t)(round * K + i), 5);
      else
        it_recv_pattern(&ctx, &c, 0, SZ, SZ, (uint64_t)(round * K + i), 5);
    }
    IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
    if (parent && round == 0) {
      IT_OK(ip.net->deregMr(c.r, c.rmh));
      IT_OK(ip.net->closeRecv(c.r));
      c.r = NULL;
    } else if (parent) {
      IT_OK(ip.net->deregMr(c.s, c.smh));
      IT_OK(ip.net->closeSend(c.s));
      c.s = NULL;
    } else {
      it_step("round %d: posting %s until an error", round, round == 0 ? "sends" : "receives");
      post_until_error(&c, round == 0);
    }
    IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  }
  /* what is left open: the comm whose peer closed (its close must still work and free everything) */
  if (c.s) {
    IT_OK(ip.net->deregMr(c.s, c.smh));
    IT_OK(ip.net->closeSend(c.s));
  }
  if (c.r) {
    IT_OK(ip.net->deregMr(c.r, c.rmh));
    IT_OK(ip.net->closeRecv(c.r));
  }
  free(c.sbuf);
  free(c.rbuf);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("peerclose", 120, side, 60); }
