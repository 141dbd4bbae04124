/* The unload cycle NCCL >= 2.28 performs: dlopen, init, listen/connect/accept, regMr, transfer,
 * deregMr, close, dlclose -- several times in one process. After each dlclose the process must have
 * exactly the threads it had before the first dlopen (a helper thread left running would execute
 * unmapped code), and the next cycle must work again. Both ends live in this one process (as NCCL's
 * ranks of one process do), so /proc/self/task sees every thread the plugin started. Over RDMA the verbs
 * library's own threads (the emulator's NIC agent) are started before the baseline. */
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define CYCLES 4
#define LEN (1u << 20)

static void cycle(int k, int baseline) {
  it_plugin_t ip;
  it_load(&ip);
  int with_plugin = gn_thread_count();
  char h[NCCL_NET_HANDLE_MAXSIZE];
  memset(h, 0, sizeof h);
  void *lc = NULL, *sc = NULL, *rc = NULL;
  it_step("cycle %d: listen/connect/accept in one process", k);
  IT_OK(ip.net->listen(0, h, &lc));
  IT_CHECK(lc != NULL, "NULL listenComm");
  uint64_t dl = gn_deadline_ns(60);
  while (sc == NULL || rc == NULL) {
    ncclNetDeviceHandle_v8_t *dh = NULL;
    if (sc == NULL) IT_OK(ip.net->connect(0, h, &sc, &dh));
    if (rc == NULL) {
      IT_OK(ip.net->accept(lc, &rc, &dh));
      if (rc != NULL) IT_OK(ip.net->closeListen(lc));
    }
    IT_CHECK(!gn_expired(dl), "cycle %d: connection not established after 60 s", k);
    sched_yield();
  }
  unsigned char *sb = malloc(LEN), *rb = malloc(LEN);
  IT_CHECK(sb && rb, "oom");
  void *smh = NULL, *rmh = NULL;
  IT_OK(ip.net->regMr(sc, sb, LEN, NCCL_PTR_HOST, &smh));
  IT_OK(ip.net->regMr(rc, rb, LEN, NCCL_PTR_HOST, &rmh));
  const int sizes[] = {0, 5, 70000, (int)LEN};
  for (int i = 0; i < 4; i++) {
    it_step("cycle %d: message %d (%d bytes)", k, i, sizes[i]);
    gn_pattern_fill(sb, (size_t)sizes[i], gn_pattern_seed((uint64_t)sizes[i], (uint64_t)i, (uint64_t)k));
    memset(rb, IT_CANARY, LEN);
    void *sreq = NULL, *rreq = NULL;
    int sz[1] = {(int)LEN}, tag[1] = {0}, got[1] = {-1};
    void *d[1] = {rb}, *mh[1] = {rmh};
    dl = gn_deadline_ns(60);
    /* both requests of one process progress together (a blocking send would deadlock here) */
    while (rreq == NULL) {
      IT_OK(ip.net->irecv(rc, 1, d, sz, tag, mh, &rreq));
      IT_CHECK(!gn_expired(dl), "irecv kept returning NULL");
    }
    while (sreq == NULL) {
      IT_OK(ip.net->isend(sc, sb, sizes[i], 0, smh, &sreq));
      IT_CHECK(!gn_expired(dl), "isend kept returning NULL");
    }
    int sdone = 0, rdone = 0;
    while (!sdone || !rdone) {
      if (!sdone) IT_OK(ip.net->test(sreq, &sdone, NULL));
      if (!rdone) IT_OK(ip.net->test(rreq, &rdone, got));
      IT_CHECK(!gn_expired(dl), "cycle %d: message %d incomplete after 60 s", k, i);
      if (!sdone || !rdone) sched_yield();
    }
    it_verify(rb, (int)LEN, got[0], sizes[i], (uint64_t)i, (uint64_t)k, "in-process receive");
  }
  IT_OK(ip.net->deregMr(sc, smh));
  IT_OK(ip.net->deregMr(rc, rmh));
  IT_OK(ip.net->closeSend(sc));
  IT_OK(ip.net->closeRecv(rc));
  free(sb);
  free(rb);
  int after_close = gn_thread_count();
  it_step("cycle %d: dlclose", k);
  it_unload(&ip);
  /* a joined thread can still be listed in /proc/self/task for a moment (its exit is not reaped yet): poll for
   * the count, bounded (a helper thread left running never goes) */
  int after = gn_thread_count();
  for (uint64_t dl = gn_deadline_ns(5); after != baseline && !gn_expired(dl); after = gn_thread_count()) sched_yield();
  void *still = dlopen(it_plugin_path(), RTLD_NOW | RTLD_NOLOAD);
  it_log("cycle %d: threads: %d before dlopen, %d with comms open, %d after close, %d after dlclose; library %s",
         k, baseline, with_plugin, after_close, after, still ? "still mapped (nodelete)" : "unloaded");
  if (still) dlclose(still);
  IT_CHECK(after == baseline, "cycle %d: %d threads after dlclose, %d before dlopen: the plugin left helper threads", k,
           after, baseline);
}

int main(void) {
  it_init("unload", 150);
  it_settle_verbs_threads();
  int baseline = gn_thread_count();
  IT_CHECK(baseline >= 1, "cannot count /proc/self/task");
  for (int k = 0; k < CYCLES; k++) cycle(k, baseline);
  it_log("PASS");
  return 0;
}
