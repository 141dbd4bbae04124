/* The unload cycle NCCL >= 2.28 performs: dlopen, init, listen/connect/accept, regMr, transfer,
 * deregMr, close, dlclose -- several times in one process. After each dlclose the process must have
 * exactly the threads it had before the first dlopen (a helper thread left running would execute
 * unmapped code), and the next cycle must work again. Both ends live in this one process (as NCCL's
 * ranks of one process do), so /proc/self/task sees every thread the plugin started. Over RDMA the verbs
 * library's own threads (the emulator's NIC agent) are started before the baseline.
 *
 * Then the unload of an abort that skipped the closes (left_open): a dlclose with comms open must leave the
 * library loaded under the threads that serve them, which run on, and the next load must work. */
#include <dirent.h>
#include <dlfcn.h>
#include <sched.h>
#include <sys/socket.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define CYCLES 4
#define LEN (1u << 20)

static void *volatile g_left[6]; /* what left_open leaves open, to the end of the process (volatile: kept) */

/* baseline < 0: comms of an earlier load are still open (left_open): their threads stay, and so does the library */
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
  if (baseline == INT_MIN) { /* left_open: an abort that never closes them (kept reachable: not a leak report) */
    g_left[0] = sc;
    g_left[1] = rc;
    g_left[2] = smh;
    g_left[3] = rmh;
    g_left[4] = sb;
    g_left[5] = rb;
    it_step("cycle %d: dlclose with the comms open", k);
    it_unload(&ip);
    return;
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
  for (uint64_t dl = gn_deadline_ns(5); baseline >= 0 && after != baseline && !gn_expired(dl); after = gn_thread_count())
    sched_yield();
  void *still = dlopen(it_plugin_path(), RTLD_NOW | RTLD_NOLOAD);
  it_log("cycle %d: threads: %d before dlopen, %d with comms open, %d after close, %d after dlclose; library %s",
         k, baseline, with_plugin, after_close, after, still ? "still loaded" : "unloaded");
  if (still) dlclose(still);
  if (baseline < 0) {
    IT_CHECK(still != NULL, "cycle %d: the comms of an earlier load are open, yet the library was unloaded", k);
    return;
  }
  IT_CHECK(after == baseline, "cycle %d: %d threads after dlclose, %d before dlopen: the plugin left helper threads", k,
           after, baseline);
}

/* Context switches, summed, of the plugin's named threads ("gdr-..."); *n: how many there are. */
static long long plugin_switches(int *n) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  long long sum = 0;
  *n = 0;
  IT_CHECK(d != NULL, "cannot list /proc/self/task");
  while ((e = readdir(d)) != NULL) {
    char path[300], line[128] = "";
    FILE *f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if ((f = fopen(path, "r")) == NULL) continue; /* a thread that just ended */
    if (fgets(line, sizeof line, f) == NULL) line[0] = '\0';
    fclose(f);
    if (strncmp(line, "gdr-", 4) != 0) continue;
    (*n)++;
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    if ((f = fopen(path, "r")) == NULL) continue;
    while (fgets(line, sizeof line, f) != NULL) {
      long long v;
      if (sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1 ||
          sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1)
        sum += v;
    }
    fclose(f);
  }
  closedir(d);
  return sum;
}

static int shut_down(int fd, void *arg) {
  (void)arg;
  return shutdown(fd, SHUT_RDWR) == 0;
}

/* NCCL dlcloses the plugin after its last communicator, also after an abort that skipped the closes; a v6..v10
 * table gets no finalize. The threads that serve the comms left open (the TCP I/O threads; over RDMA the idle-peer
 * service and async event threads) keep the library loaded. Woken (every TCP socket of the process shut down) they
 * run on in its code, and the next load finds the same library and works. A v11+ table's finalize releases what the
 * context left open: then the library goes. Before: the library was unmapped under the threads (SIGSEGV when one
 * woke). The comms stay open to the end of the process: the last step. */
static void left_open(int k) {
  int v = it_abi(), n0 = 0, n1 = 0;
  const char *tr = getenv("GDRNET_TRANSPORT");
  int tcp = tr == NULL || strcmp(tr, "rdma") != 0;
  long long before;
  cycle(k, INT_MIN);
  before = plugin_switches(&n0);
  void *still = dlopen(it_plugin_path(), RTLD_NOW | RTLD_NOLOAD);
  it_log("cycle %d: dlclose with comms open: library %s, %d plugin thread(s) running", k,
         still ? "still loaded" : "unloaded", n0);
  if (v >= 11) {
    IT_CHECK(still == NULL, "ncclNetPlugin_v%d: finalize left the library loaded (%d plugin threads)", v, n0);
    return;
  }
  IT_CHECK(still != NULL, "dlclose with comms open unloaded the library under its %d thread(s)", n0);
  dlclose(still);
  IT_CHECK(n0 >= 1, "no plugin thread serves the comms left open");
  int nsock = it_count_sockets(shut_down, NULL);
  it_step("cycle %d: %d TCP socket(s) shut down: the threads wake in the plugin's code", k, nsock);
  if (tcp) { /* every data stream ended: the I/O threads serving them woke, and went to sleep again */
    for (uint64_t dl = gn_deadline_ns(30); plugin_switches(&n1) == before; sched_yield())
      IT_CHECK(!gn_expired(dl), "no I/O thread woke in 30 s on its shut-down streams");
    IT_CHECK(n1 == n0, "%d plugin thread(s) before the wake-up, %d after", n0, n1);
  }
  cycle(k + 1, -1);
}

int main(void) {
  it_init("unload", 150);
  it_settle_verbs_threads();
  int baseline = gn_thread_count();
  IT_CHECK(baseline >= 1, "cannot count /proc/self/task");
  for (int k = 0; k < CYCLES; k++) cycle(k, baseline);
  left_open(CYCLES);
  it_log("PASS");
  return 0;
}
