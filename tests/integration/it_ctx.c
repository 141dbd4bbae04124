/* v11/v12 per-communicator contexts, as NCCL >= 2.28 drives them: two processes, each with two communicators at
 * once -- A (commId 0xA, trafficClass 104) and B (0xB, trafficClass undefined) -- through ncclNetPlugin_v11 (or
 * v12: GDRNET_TEST_ABI), each context with its own pair of connections.
 *   1. Both stream; B keeps streaming (parent -> child, a helper thread on each side, every byte checked) while A
 *      closes its comms and is finalized on both sides, and then until 16 more messages went through B (both sides
 *      count the same number of B messages).
 *   2. A's finalize also closes a listen comm A left open (the abort path), and says so.
 *   3. The traffic class reaches A's connections and not B's: TCP sockets of A carry IP_TOS 104 (its receive
 *      side's gone once A is finalized, every one once the last context is); RDMA QPs in the emulator's trace (VEMU_TRACE) have tc=104 for A's and the default for B's, as
 *      many of each -- unless GDRNET_IB_TC/NCCL_IB_TC is set, which wins for every QP (NCCL's precedence).
 *   4. B's setNetAttr hints (1 flow per peer on the receive side) give its TCP connections one data stream.
 *   5. After B's finalize (the last context) the process has exactly the threads it had before the first init. */
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gdrnet/net.h"
#include "it.h"

#define TC_A 104
#define MSG (256u << 10)
#define AFTER 16

static const ncclNet_v11_t *g_net; /* v12's table is v11's (only the properties differ) */

typedef struct {
  void *ctx;
  void *s, *r, *smh, *rmh;
  unsigned char *sbuf, *rbuf;
} comm_pair_t;

static void test_until(void *req, int *sizes, const char *what) {
  int done = 0;
  uint64_t dl = gn_deadline_ns(60);
  while (!done) {
    IT_OK(g_net->test(req, &done, sizes));
    IT_CHECK(!gn_expired(dl), "%s: not done after 60 s", what);
    if (!done) sched_yield();
  }
}

/* Both directions for one context over the bootstrap fd: listen, swap handles, connect/accept interleaved. */
static void pair_open(comm_pair_t *p, int fd) {
  char mine[NCCL_NET_HANDLE_MAXSIZE], peer[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  memset(mine, 0, sizeof mine);
  IT_OK(g_net->listen(p->ctx, 0, mine, &lc));
  IT_CHECK(gn_boot_send(fd, mine, sizeof mine) == 0 && gn_boot_recv(fd, peer, sizeof peer, 60) == 0, "bootstrap");
  uint64_t dl = gn_deadline_ns(60);
  p->s = p->r = NULL;
  while (p->s == NULL || p->r == NULL) {
    ncclNetDeviceHandle_v11_t *dh = NULL;
    if (p->s == NULL) IT_OK(g_net->connect(p->ctx, 0, peer, &p->s, &dh));
    if (p->r == NULL) {
      IT_OK(g_net->accept(lc, &p->r, &dh));
      if (p->r != NULL) IT_OK(g_net->closeListen(lc));
    }
    IT_CHECK(!gn_expired(dl), "connections not up after 60 s");
    sched_yield();
  }
  IT_CHECK(posix_memalign((void **)&p->sbuf, 4096, MSG) == 0 && posix_memalign((void **)&p->rbuf, 4096, MSG) == 0,
           "oom");
  IT_OK(g_net->regMr(p->s, p->sbuf, MSG, NCCL_PTR_HOST, &p->smh));
  IT_OK(g_net->regMr(p->r, p->rbuf, MSG, NCCL_PTR_HOST, &p->rmh));
}

static void pair_close(comm_pair_t *p) {
  IT_OK(g_net->deregMr(p->s, p->smh));
  IT_OK(g_net->deregMr(p->r, p->rmh));
  IT_OK(g_net->closeSend(p->s));
  IT_OK(g_net->closeRecv(p->r));
  free(p->sbuf);
  free(p->rbuf);
}

static void send_msg(comm_pair_t *p, size_t size, uint64_t i, uint64_t salt) {
  void *req = NULL;
  uint64_t dl = gn_deadline_ns(60);
  gn_pattern_fill(p->sbuf, size, gn_pattern_seed(size, i, salt));
  while (req == NULL) {
    IT_OK(g_net->isend(p->s, p->sbuf, size, 0, p->smh, NULL, &req));
    IT_CHECK(!gn_expired(dl), "isend NULL for 60 s");
    if (req == NULL) sched_yield();
  }
  test_until(req, NULL, "send");
}

/* Receives message i; returns its size. */
static int recv_msg(comm_pair_t *p, uint64_t i, uint64_t salt) {
  void *req = NULL, *d[1] = {p->rbuf}, *mh[1] = {p->rmh};
  size_t sz[1] = {MSG};
  int tag[1] = {0}, got[1] = {-1};
  uint64_t dl = gn_deadline_ns(60);
  memset(p->rbuf, IT_CANARY, MSG);
  while (req == NULL) {
    IT_OK(g_net->irecv(p->r, 1, d, sz, tag, mh, NULL, &req));
    IT_CHECK(!gn_expired(dl), "irecv NULL for 60 s");
    if (req == NULL) sched_yield();
  }
  test_until(req, got, "receive");
  if (got[0] > 0) it_verify(p->rbuf, (int)MSG, got[0], got[0], i, salt, "receive");
  return got[0];
}

/* ---- B streams in a thread: the parent sends until A is finalized and AFTER more went through, then a 0-byte
 * message ends it; the child receives until that one. */
static comm_pair_t g_b;
static atomic_int g_a_finalized;
static atomic_long g_b_msgs, g_b_after;
static int g_parent;

static size_t b_size(uint64_t i) { return 1 + (size_t)((i * 7919) % MSG); }

static void *b_stream(void *arg) {
  (void)arg;
  for (uint64_t i = 0;; i++) {
    if (g_parent) {
      int last = atomic_load(&g_a_finalized) && atomic_load(&g_b_after) >= AFTER;
      send_msg(&g_b, last ? 0 : b_size(i), i, 0xb);
      if (last) break;
    } else {
      int got = recv_msg(&g_b, i, 0xb);
      if (got == 0) break;
      IT_CHECK((size_t)got == b_size(i), "B message %llu: %d bytes, sent %zu", (unsigned long long)i, got, b_size(i));
    }
    atomic_fetch_add(&g_b_msgs, 1);
    if (atomic_load(&g_a_finalized)) atomic_fetch_add(&g_b_after, 1);
  }
  return NULL;
}

static int tos_is(int fd, void *arg) {
  int tos = -1;
  socklen_t len = sizeof tos;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) return 0;
  if (ss.ss_family == AF_INET6) {
    if (getsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, &len) != 0) return 0;
  } else if (getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &len) != 0) {
    return 0;
  }
  return tos == *(int *)arg;
}

static ncclResult_t prof(void **eh, int type, void *ph, int64_t id, void *ext) {
  (void)eh, (void)type, (void)ph, (void)id, (void)ext;
  return ncclSuccess;
}

static int side(int fd, int parent) {
  int tcp = strcmp(getenv("GDRNET_TRANSPORT") ? getenv("GDRNET_TRANSPORT") : "tcp", "tcp") == 0;
  int v = (int)it_env_double("GDRNET_TEST_ABI", 11);
  char sym[32];
  g_parent = parent;
  it_settle_verbs_threads();
  int baseline = gn_thread_count();
  snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
  IT_CHECK(v == 11 || v == 12, "GDRNET_TEST_ABI=%d: contexts are v11/v12", v);
  void *dl = dlopen(it_plugin_path(), RTLD_NOW | RTLD_LOCAL);
  IT_CHECK(dl != NULL, "dlopen: %s", dlerror());
  g_net = dlsym(dl, sym);
  IT_CHECK(g_net != NULL, "%s not exported", sym);

  comm_pair_t a;
  memset(&a, 0, sizeof a);
  ncclNetCommConfig_v11_t ca = {TC_A}, cb = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  gn_log_capture(1);
  it_step("init of two communicators");
  IT_OK(g_net->init(&a.ctx, 0xa, &ca, gn_logger, prof));
  IT_OK(g_net->init(&g_b.ctx, 0xb, &cb, gn_logger, NULL));
  it_step("connections of A and of B");
  {
    /* B's hints: one flow per peer on the receive side (TCP: its accepted connections get one data stream) */
    ncclNetAttr_v11_t at;
    memset(&at, 0xff, sizeof at);
    at.recvCommAttr.maxFlowsPerPeer = 1;
    at.recvCommAttr.minFlowsPerPeer = 1;
    IT_OK(g_net->setNetAttr(g_b.ctx, &at));
  }
  pair_open(&a, fd);
  gn_log_capture(1);
  pair_open(&g_b, fd);
  if (tcp) {
    char *log = gn_log_captured();
    IT_CHECK(strstr(log, "TCP: accepted") != NULL && strstr(log, "with 1 data stream(s)") != NULL,
             "B's connection (setNetAttr: 1 flow per peer) did not get exactly 1 data stream");
    free(log);
  }
  void *a_listen = NULL;
  char h[NCCL_NET_HANDLE_MAXSIZE];
  IT_OK(g_net->listen(a.ctx, 0, h, &a_listen)); /* never accepted: A's finalize closes it */
  int with_both = gn_thread_count(), tos_open = 0;
  if (tcp) {
    int tc = TC_A;
    tos_open = it_count_sockets(tos_is, &tc);
    it_log("TCP sockets with TOS %d while A and B are open: %d", TC_A, tos_open);
    IT_CHECK(tos_open >= 4,
             "A's connections have %d sockets with IP_TOS %d (control + data streams of both "
             "directions expected)",
             tos_open, TC_A);
  }

  it_step("A and B stream");
  pthread_t bt;
  IT_CHECK(pthread_create(&bt, NULL, b_stream, NULL) == 0, "pthread_create");
  for (uint64_t i = 0; i < 32; i++) {
    size_t size = (size_t)(i * 4099) % MSG;
    if (parent) {
      send_msg(&a, size, i, 0xa);
      IT_CHECK(recv_msg(&a, i, 0xa1) == (int)size, "A message %llu", (unsigned long long)i);
    } else {
      IT_CHECK(recv_msg(&a, i, 0xa) == (int)size, "A message %llu", (unsigned long long)i);
      send_msg(&a, size, i, 0xa1);
    }
  }
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_step("A closes and is finalized while B streams");
  long b_before = atomic_load(&g_b_msgs);
  pair_close(&a);
  gn_log_capture(1);
  IT_OK(g_net->finalize(a.ctx));
  /* both sides finalized A (B's helper threads keep streaming meanwhile): the sender now sends AFTER more */
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  atomic_store(&g_a_finalized, 1);
  {
    char *log = gn_log_captured();
    IT_CHECK(strstr(log, "finalize of communicator 0xa closes the 1 comm(s) it left open") != NULL,
             "A's finalize did not say it closed the listen comm A left open");
    IT_CHECK(strstr(log, "every thread stopped") == NULL, "A's finalize (B still open) stopped every thread");
    free(log);
  }
  /* NCCL 2.28 finalizes the NULL context of an init that failed: success, no WARN */
  gn_log_capture(1);
  IT_OK(g_net->finalize(NULL));
  {
    char *log = gn_log_captured();
    IT_CHECK(strstr(log, "WARN") == NULL, "finalize(NULL) warned: %s", log);
    free(log);
  }
  if (tcp) {
    /* A's receive side is closed now; its send side's streams may linger until the peer acknowledged their last
     * bytes (they are gone after the last finalize, below) */
    int tc = TC_A, n = it_count_sockets(tos_is, &tc);
    it_log("TCP sockets with TOS %d after A's finalize: %d (send streams lingering)", TC_A, n);
    IT_CHECK(n <= tos_open - 2,
             "%d sockets with IP_TOS %d after A's finalize, %d before: its receive side's are not "
             "all closed",
             n, TC_A, tos_open);
  }
  IT_CHECK(pthread_join(bt, NULL) == 0, "pthread_join");
  it_log("B: %ld messages before A closed, %ld in all, %ld after A's finalize", b_before, (long)atomic_load(&g_b_msgs),
         (long)atomic_load(&g_b_after));
  if (parent)
    IT_CHECK(atomic_load(&g_b_after) >= AFTER, "B moved %ld messages after A's finalize",
             (long)atomic_load(&g_b_after));
  {
    uint64_t mine = (uint64_t)atomic_load(&g_b_msgs), theirs = 0;
    IT_CHECK(gn_boot_send_u64(fd, mine) == 0 && gn_boot_recv_u64(fd, &theirs, 60) == 0, "bootstrap");
    IT_CHECK(mine == theirs, "B: %llu messages on this side, %llu on the other", (unsigned long long)mine,
             (unsigned long long)theirs);
  }

  it_step("B closes and is finalized (the last context)");
  pair_close(&g_b);
  gn_log_capture(1);
  IT_OK(g_net->finalize(g_b.ctx));
  {
    char *log = gn_log_captured();
    IT_CHECK(strstr(log, "0 context(s) left: every thread stopped") != NULL,
             "the last finalize did not say it stopped every thread");
    free(log);
  }
  if (tcp) {
    int tc = TC_A;
    IT_CHECK(it_count_sockets(tos_is, &tc) == 0, "sockets with IP_TOS %d left after the last finalize", TC_A);
  }
  /* a joined thread can still be listed in /proc/self/task for a moment (its exit is not reaped yet): poll for
   * the count, bounded (a thread left running never goes) */
  int after = gn_thread_count();
  for (uint64_t dl = gn_deadline_ns(5); after != baseline && !gn_expired(dl); after = gn_thread_count()) sched_yield();
  it_log("threads: %d before init, %d with both communicators, %d after the last finalize", baseline, with_both, after);
  IT_CHECK(after == baseline, "%d threads after the last finalize, %d before the first init", after, baseline);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  IT_CHECK(dlclose(dl) == 0, "dlclose");

  if (!tcp && parent && getenv("VEMU_TRACE") != NULL) {
    /* both processes are done with their QPs: count the traffic classes of the RTR transitions */
    FILE *f = fopen(getenv("VEMU_TRACE"), "r");
    char line[1024];
    int n_a = 0, n_def = 0, n_other = 0;
    int knob = getenv("GDRNET_IB_TC") || getenv("NCCL_IB_TC");
    int def = (int)it_env_double("GDRNET_IB_TC", it_env_double("NCCL_IB_TC", 0));
    char want_a[32], want_def[32];
    IT_CHECK(f != NULL, "VEMU_TRACE %s", getenv("VEMU_TRACE"));
    snprintf(want_a, sizeof want_a, " tc=%d\n", TC_A);
    snprintf(want_def, sizeof want_def, " tc=%d\n", def);
    while (fgets(line, sizeof line, f)) {
      if (!strstr(line, "qp state") || !strstr(line, " 1->2 ")) continue;
      if (strstr(line, want_a))
        n_a++;
      else if (strstr(line, want_def))
        n_def++;
      else
        n_other++;
    }
    fclose(f);
    it_log("QPs to RTR: %d with tc=%d, %d with tc=%d, %d other (GDRNET_IB_TC/NCCL_IB_TC %s)", n_a, TC_A, n_def, def,
           n_other, knob ? "set" : "unset");
    IT_CHECK(n_other == 0, "%d QPs with an unexpected traffic class", n_other);
    if (knob) {
      IT_CHECK(n_a == 0 && n_def >= 4, "with the knob set every QP must have tc=%d: %d have %d, %d have %d", def, n_a,
               TC_A, n_def, def);
    } else {
      IT_CHECK(n_a >= 4 && n_a == n_def, "A's QPs (tc=%d): %d, B's (tc=%d): %d -- expected as many, at least 4", TC_A,
               n_a, def, n_def);
    }
  }
  return 0;
}

int main(void) {
  const char *tr = getenv("VEMU_TRACE");
  if (tr != NULL && *tr != '\0') (void)unlink(tr); /* this run's QPs only */
  return it_two_sides("ctx", 120, side, 60);
}
