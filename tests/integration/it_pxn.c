/* NCCL's matching rule under PXN's traffic pattern: tag = the source rank, and the proxy posts each sub's
 * isend on its own, so tag 1 of message m+1 can come before tag 2 of message m. The receiver (the child) posts
 * grouped receives of NTAGS buffers, tags 1..NTAGS, in order, up to WINDOW at a time; the sender (the parent) runs
 * one sub per tag, each retrying the isend of its next message (NULL: "not now"), sub t trying message m only once
 * sub t-1 has tried message m+1 (the lead sub a message ahead, by the rule's order, not by luck). The sizes of a
 * message's parts cross the eager and clear-to-send thresholds. Every buffer must hold exactly its (message, tag)
 * part, with that part's size: a buffer that got another part's data names which one it got. A send answered with
 * an error fails the test (NCCL's rule: NULL, never an error).
 *   GNIT_MSGS              messages (default 300)
 *   GNIT_FAULTS_PARENT/CHILD  VEMU_FAULTS of each process ('+' between rules), as it_faults
 *   GNIT_EXPECT            "clean" (default: no move to TCP), or "fallback": at least one connection end moved to
 *                          TCP while messages were partly placed
 *   GNIT_EXPECT_BACK       returns to RDMA the two ends must have made together (default 0: not checked); the
 *                          traffic then runs in rounds of GNIT_MSGS until they have, at most GNIT_MAX_ROUNDS (40)
 *   GNIT_PHASE_S           the longest wait for the next completion before the test calls the traffic stuck
 *                          (default 150): a slow build (ASan, TSan) moves fewer messages a second, not none */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define NTAGS 2
#define WINDOW 4 /* receives (and messages per sub) in flight */
#define PART (256 * 1024)
#define PAD 512

static int part_size(int m, int t) {
  static const int pool[] = {200000, 1000, 65536, 200000, 8, 131072, 70000, 0, 4096, 200000, 65537};
  return pool[(m * 7 + t * 3) % (int)(sizeof(pool) / sizeof(pool[0]))];
}
static int tag_of(int t) { return t + 1; }
static size_t slot_off(int m, int t) { return ((size_t)(m % WINDOW) * NTAGS + (size_t)t) * (PART + PAD); }

static int count_in_log(const char *needle) {
  char *log = gn_log_captured();
  int n = 0;
  for (const char *p = log; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  free(log);
  return n;
}

/* the sender: one sub per tag */
static void run_send(const ncclNet_v8_t *net, it_conn_t *c, int msgs, double stall_s) {
  uint64_t dl = gn_deadline_ns(stall_s);
  void *req[NTAGS][WINDOW] = {{0}};
  int next[NTAGS] = {0}, done[NTAGS] = {0}, tried[NTAGS] = {0}; /* tried: highest message tried + 1 */
  int left = msgs * NTAGS;
  while (left > 0) {
    for (int t = 0; t < NTAGS; t++) {
      int m = next[t];
      if (m >= msgs || m - done[t] >= WINDOW) continue;
      if (t > 0 && tried[t - 1] < m + 2 && next[t - 1] < msgs) continue; /* the lead sub tries m+1 first */
      void **r = &req[t][m % WINDOW];
      unsigned char *b = c->sbuf + slot_off(m, t);
      int sz = part_size(m, t);
      if (tried[t] <= m) {
        gn_pattern_fill(b, (size_t)sz, gn_pattern_seed((uint64_t)sz, (uint64_t)m, (uint64_t)tag_of(t)));
        tried[t] = m + 1;
      }
      it_step("isend of message %d tag %d (%d bytes)", m, tag_of(t), sz);
      IT_OK(net->isend(c->s, b, sz, tag_of(t), c->smh, r));
      if (*r != NULL) next[t]++;
    }
    for (int t = 0; t < NTAGS; t++) {
      while (done[t] < next[t]) {
        int d = 0, sz = -1, m = done[t];
        it_step("test of the send of message %d tag %d", m, tag_of(t));
        IT_OK(net->test(req[t][m % WINDOW], &d, &sz));
        if (!d) break;
        IT_CHECK(sz == part_size(m, t), "send of message %d tag %d reports %d bytes, sent %d", m, tag_of(t), sz,
                 part_size(m, t));
        req[t][m % WINDOW] = NULL;
        done[t]++;
        left--;
        dl = gn_deadline_ns(stall_s); /* progress: the stall clock starts again */
      }
    }
    IT_CHECK(!gn_expired(dl), "sends stuck: tag 1 at %d/%d (done %d), tag 2 at %d/%d (done %d)", next[0], msgs, done[0],
             next[1], msgs, done[1]);
    sched_yield();
  }
}

/* which (message, tag) part a buffer holds instead of its own, for the failure message (-1: none nearby) */
static void whose(const unsigned char *buf, int got, int m, int *wm, int *wt) {
  *wm = *wt = -1;
  for (int k = m - WINDOW; k <= m + WINDOW; k++)
    for (int t = 0; t < NTAGS && k >= 0; t++) {
      int sz = part_size(k, t);
      if (sz != got || sz == 0) continue;
      unsigned char *ex = malloc((size_t)sz);
      IT_CHECK(ex != NULL, "out of memory");
      gn_pattern_fill(ex, (size_t)sz, gn_pattern_seed((uint64_t)sz, (uint64_t)k, (uint64_t)tag_of(t)));
      int same = memcmp(ex, buf, (size_t)sz) == 0;
      free(ex);
      if (same) {
        *wm = k;
        *wt = t;
        return;
      }
    }
}

static void run_recv(const ncclNet_v8_t *net, it_conn_t *c, int msgs, double stall_s) {
  uint64_t dl = gn_deadline_ns(stall_s);
  void *req[WINDOW] = {0};
  int posted = 0, done = 0;
  while (done < msgs) {
    while (posted < msgs && posted - done < WINDOW) {
      void *data[NTAGS], *mhs[NTAGS];
      int sizes[NTAGS], tags[NTAGS];
      for (int t = 0; t < NTAGS; t++) {
        data[t] = c->rbuf + slot_off(posted, t);
        mhs[t] = c->rmh;
        sizes[t] = part_size(posted, t) + PAD;
        tags[t] = tag_of(t);
        memset(data[t], IT_CANARY, (size_t)sizes[t]);
      }
      it_step("irecv of message %d", posted);
      IT_OK(net->irecv(c->r, NTAGS, data, sizes, tags, mhs, &req[posted % WINDOW]));
      if (req[posted % WINDOW] == NULL) break;
      posted++;
    }
    while (done < posted) {
      int d = 0, got[NTAGS] = {-1, -1};
      it_step("test of the receive of message %d", done);
      IT_OK(net->test(req[done % WINDOW], &d, got));
      if (!d) break;
      for (int t = 0; t < NTAGS; t++) {
        const unsigned char *b = c->rbuf + slot_off(done, t);
        int sz = part_size(done, t), wm, wt;
        char what[160];
        if (got[t] >= 0 && got[t] <= sz + PAD) {
          unsigned char *ex = malloc((size_t)sz + 1);
          IT_CHECK(ex != NULL, "out of memory");
          gn_pattern_fill(ex, (size_t)sz, gn_pattern_seed((uint64_t)sz, (uint64_t)done, (uint64_t)tag_of(t)));
          int ok = got[t] == sz && memcmp(ex, b, (size_t)sz) == 0;
          free(ex);
          if (!ok) {
            whose(b, got[t], done, &wm, &wt);
            IT_CHECK(0,
                     "message %d buffer %d (tag %d): complete, %d bytes, data of %s (message %d, tag %d); it "
                     "should hold its own %d bytes",
                     done, t, tag_of(t), got[t], wm >= 0 ? "another part" : "no part", wm, wm >= 0 ? tag_of(wt) : -1,
                     sz);
          }
        }
        snprintf(what, sizeof what, "message %d buffer %d (tag %d)", done, t, tag_of(t));
        it_verify(b, sz + PAD, got[t], sz, (uint64_t)done, (uint64_t)tag_of(t), what);
      }
      req[done % WINDOW] = NULL;
      done++;
      dl = gn_deadline_ns(stall_s); /* progress: the stall clock starts again */
    }
    IT_CHECK(!gn_expired(dl), "receives stuck: posted %d, completed %d of %d", posted, done, msgs);
    sched_yield();
  }
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_conn_t c;
  const char *faults = getenv(parent ? "GNIT_FAULTS_PARENT" : "GNIT_FAULTS_CHILD");
  const char *expect = getenv("GNIT_EXPECT") ? getenv("GNIT_EXPECT") : "clean";
  int msgs = (int)it_env_double("GNIT_MSGS", 300), mine = 0, peer = 0, back[2] = {0, 0};
  int want_back = (int)it_env_double("GNIT_EXPECT_BACK", 0);
  if (faults && *faults) {
    char rules[1024];
    snprintf(rules, sizeof rules, "%s", faults);
    for (char *p = rules; *p; p++)
      if (*p == '+') *p = ';';
    setenv("VEMU_FAULTS", rules, 1);
  } else {
    unsetenv("VEMU_FAULTS");
  }
  it_load(&ip);
  IT_CHECK(ip.props[0].maxRecvs >= NTAGS, "device 0 announces maxRecvs %d", ip.props[0].maxRecvs);
  it_conn_open(&ip, 0, fd, (size_t)WINDOW * NTAGS * (PART + PAD), &c);
  double stall_s = it_env_double("GNIT_PHASE_S", 150); /* the longest wait without a completion */
  it_log("%d messages of %d parts (tags = source ranks), the tag-1 sub a message ahead; faults \"%s\", expect %s", msgs,
         NTAGS, faults ? faults : "", expect);
  /* rounds of msgs messages: one round unless the test wants the way back, then more rounds (the same decision on
   * both sides, from the counts they exchange) until the ends have made it, so the traffic outlasts the fault on a
   * fast build and a slow one alike */
  int rounds = 0, max_rounds = want_back > 0 ? (int)it_env_double("GNIT_MAX_ROUNDS", 40) : 1;
  for (;;) {
    if (parent)
      run_send(ip.net, &c, msgs, stall_s);
    else
      run_recv(ip.net, &c, msgs, stall_s);
    rounds++;
    IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
    back[0] = count_in_log(" is back on RDMA after");
    IT_CHECK(gn_boot_send(fd, &back[0], sizeof back[0]) == 0 && gn_boot_recv(fd, &back[1], sizeof back[1], 60) == 0,
             "bootstrap");
    if (want_back <= 0 || back[0] + back[1] >= want_back || rounds >= max_rounds) break;
  }
  mine = count_in_log(" now runs over TCP");
  IT_CHECK(gn_boot_send(fd, &mine, sizeof mine) == 0 && gn_boot_recv(fd, &peer, sizeof peer, 60) == 0, "bootstrap");
  if (parent && want_back > 0)
    IT_CHECK(back[0] + back[1] >= want_back, "%d return(s) to RDMA, %d expected: the test did not take the way back",
             back[0] + back[1], want_back);
  if (parent) {
    if (strcmp(expect, "fallback") == 0)
      IT_CHECK(mine + peer >= 1, "no connection end moved to TCP: the test did not take the path it names");
    else
      IT_CHECK(mine + peer == 0, "%d move(s) to TCP where none was expected", mine + peer);
  }
  if (!parent) { /* what the move found (the plugin's INFO line): the test's point is a partly placed group */
    char *log = gn_log_captured();
    const char *p = strstr(log, " partly placed by the sender");
    const char *q = p;
    while (q != NULL && q > log && q[-1] >= '0' && q[-1] <= '9') q--;
    if (p != NULL) it_log("the move found %.*s grouped receive(s) partly placed", (int)(p - q), q);
    free(log);
  }
  it_log("%d round(s) of %d messages, every part in its buffer; %d move(s) to TCP here, %d at the peer, %d return(s)",
         rounds, msgs, mine, peer, back[0] + back[1]);
  it_conn_close(&c);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("pxn", 200, side, 60); }
