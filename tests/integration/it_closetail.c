/* Closing right after the last send: the sender posts 32 isends of 1 MiB on one comm, tests
 * them all to done, deregisters and calls closeSend at once; the receiver posts 32 receives and tests them. Every
 * byte the sender was told is sent must arrive, even though the sender closed before the receiver read it: a
 * receiver that is slow to test (GNIT_CLOSETAIL_LAG_MS, default 200, in one round in four) still gets all 32. The
 * same with 32 x 64 KiB (over TCP: eager messages on the control stream, whose credits come back to a closed socket).
 * Repeated GNIT_CLOSETAIL_ROUNDS times (default 200; 64 over RDMA), each round a fresh connection, alternating which process
 * sends. GNIT_LOAD=N forks N busy processes for the duration (CPU contention widens every race window). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it.h"

#define N 32
#define SZ (1u << 20)
#define EAGER_SZ (64u << 10) /* the TCP transport's default eager size: these go on the control stream */

static void one_round(it_plugin_t *ip, int fd, int sending, int round, size_t sz, int lag_ms) {
  const ncclNet_v8_t *net = ip->net;
  gn_ctx_t ctx;
  void *comm = NULL, *mh = NULL, *req[N];
  unsigned char *buf = NULL;
  gn_ctx_init(&ctx, net, it_env_double("GNIT_PHASE_S", 60));
  it_step("round %d: connecting (%s)", round, sending ? "sender" : "receiver");
  IT_GN(&ctx, gn_establish(&ctx, 0, fd, sending ? &comm : NULL, sending ? NULL : &comm));
  IT_CHECK(posix_memalign((void **)&buf, 4096, (size_t)N * SZ) == 0, "out of memory");
  IT_OK(net->regMr(comm, buf, (size_t)N * SZ, NCCL_PTR_HOST, &mh));
  if (sending) {
    for (int i = 0; i < N; i++) {
      unsigned char *b = buf + (size_t)i * SZ;
      gn_pattern_fill(b, sz, gn_pattern_seed(sz, (uint64_t)(round * N + i), 17));
      it_step("round %d: isend %d (%zu bytes)", round, i, sz);
      IT_GN(&ctx, gn_isend(&ctx, comm, b, (int)sz, 0, mh, &req[i]));
    }
    for (int i = 0; i < N; i++) {
      it_step("round %d: testing send %d", round, i);
      IT_GN(&ctx, gn_wait(&ctx, req[i], NULL));
    }
    /* at once: no barrier, no drain */
    it_step("round %d: deregMr + closeSend right after the last send completed", round);
    IT_OK(net->deregMr(comm, mh));
    IT_OK(net->closeSend(comm));
  } else {
    memset(buf, IT_CANARY, (size_t)N * SZ);
    for (int i = 0; i < N; i++) {
      int cap = (int)sz, tag = 0;
      void *d = buf + (size_t)i * SZ;
      it_step("round %d: irecv %d", round, i);
      IT_GN(&ctx, gn_irecv(&ctx, comm, 1, &d, &cap, &tag, &mh, &req[i]));
    }
    if (lag_ms > 0) (void)poll(NULL, 0, lag_ms); /* a slow receiver: the sender has long closed (not a sync) */
    for (int i = 0; i < N; i++) {
      int got = -1;
      it_step("round %d: testing receive %d of %d", round, i, N);
      IT_GN(&ctx, gn_wait(&ctx, req[i], &got));
      it_verify(buf + (size_t)i * SZ, (int)sz, got, (int)sz, (uint64_t)(round * N + i), 17, "tail receive");
    }
    IT_OK(net->deregMr(comm, mh));
    IT_OK(net->closeRecv(comm));
  }
  free(buf);
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  const char *tp = getenv("GDRNET_TRANSPORT");
  /* the emulator moves ~2 GB/s on CI's two cores: fewer rounds over RDMA keep the test under a minute */
  int rounds = (int)it_env_double("GNIT_CLOSETAIL_ROUNDS", tp && strcmp(tp, "rdma") == 0 ? 64 : 200);
  int lag = (int)it_env_double("GNIT_CLOSETAIL_LAG_MS", 200);
  it_load(&ip);
  for (int r = 0; r < rounds; r++) {
    /* each process sends every other round; 1 MiB (data streams) and 64 KiB (eager, on the control stream)
     * messages alternate every two rounds; one round in four of each kind has a receiver that tests only
     * lag_ms after posting (the sender has long closed; its credits/acks then arrive at a closed socket) */
    int sending = (r % 2 == 0) == (parent == 0);
    size_t sz = (r / 2) % 2 ? EAGER_SZ : SZ;
    int lag_ms = (r / 4) % 4 == 3 ? lag : 0;
    one_round(&ip, fd, sending, r, sz, lag_ms);
    /* the next round's listen handle travels over fd, which also orders the rounds */
  }
  it_unload(&ip);
  return 0;
}

int main(void) {
  int nload = (int)it_env_double("GNIT_LOAD", 0);
  pid_t load[8];
  int rc;
  if (nload > 8) nload = 8;
  for (int i = 0; i < nload; i++) {
    load[i] = fork();
    if (load[i] == 0) {
      (void)prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with the test, whatever way it ends */
      alarm(600);
      for (volatile unsigned long x = 0;; x++) {
      }
    }
  }
  rc = it_two_sides("closetail", 400, side, 300);
  for (int i = 0; i < nload; i++)
    if (load[i] > 0) {
      kill(load[i], SIGKILL);
      waitpid(load[i], NULL, 0);
    }
  return rc;
}
