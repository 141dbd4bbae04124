/* Grouped receives: one irecv of n = 1..props.maxRecvs buffers, each with its own tag and size; the
 * sender posts n isends with those tags in a shuffled order (some zero-byte, some smaller than the
 * posted buffer); test() must report each buffer's received size at its index and every byte lands
 * in the buffer of its tag. On a transport with maxRecvs 1 this is the n = 1 case with tags. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define MAXN 8
#define BUFSZ (256u << 10)
#define ROUNDS 40

static int sent_size(int round, int i) {
  if ((round + i) % 5 == 0) return 0;
  return (int)(((uint64_t)(round + 1) * 2654435761u * (uint64_t)(i + 3)) % BUFSZ);
}
static int posted_size(int round, int i) {
  int s = sent_size(round, i);
  return (round % 2) ? (int)BUFSZ : s; /* odd rounds: larger than the send */
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_load(&ip);
  int maxr = ip.props[0].maxRecvs;
  if (maxr > MAXN) maxr = MAXN;
  it_conn_t c;
  it_conn_open(&ip, 0, fd, (size_t)MAXN * BUFSZ, &c);
  it_log("maxRecvs %d", ip.props[0].maxRecvs);
  uint64_t dl = gn_deadline_ns(it_env_double("GNIT_PHASE_S", 120));
  for (int round = 0; round < ROUNDS; round++) {
    int n = 1 + round % maxr;
    int tags[MAXN];
    for (int i = 0; i < n; i++) tags[i] = 1000 * round + 17 * i + 3;
    if (!parent) {
      /* sender: shuffled order */
      int order[MAXN];
      for (int i = 0; i < n; i++) order[i] = i;
      for (int i = n - 1; i > 0; i--) {
        int j = (int)(gn_pattern_seed((uint64_t)round, (uint64_t)i, 5) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
      void *req[MAXN];
      for (int k = 0; k < n; k++) {
        int i = order[k];
        int sz = sent_size(round, i);
        unsigned char *b = c.sbuf + (size_t)i * BUFSZ;
        gn_pattern_fill(b, (size_t)sz, gn_pattern_seed((uint64_t)sz, (uint64_t)round, (uint64_t)tags[i]));
        it_step("round %d: isend tag %d (%d bytes)", round, tags[i], sz);
        req[k] = NULL;
        while (req[k] == NULL) {
          IT_OK(ip.net->isend(c.s, b, sz, tags[i], c.smh, &req[k]));
          IT_CHECK(!gn_expired(dl), "isend NULL for too long");
          /* progress the ones already posted (a sender may need the receiver's CTS first) */
          if (req[k] == NULL) sched_yield();
        }
      }
      for (int k = 0; k < n; k++) {
        int d = 0;
        while (!d) {
          IT_OK(ip.net->test(req[k], &d, NULL));
          IT_CHECK(!gn_expired(dl), "round %d: send %d never completed", round, k);
        }
      }
    } else {
      void *data[MAXN], *mhs[MAXN], *req = NULL;
      int sizes[MAXN], got[MAXN];
      for (int i = 0; i < n; i++) {
        data[i] = c.rbuf + (size_t)i * BUFSZ;
        mhs[i] = c.rmh;
        sizes[i] = posted_size(round, i);
        got[i] = -1;
        memset(data[i], IT_CANARY, (size_t)sizes[i]);
      }
      it_step("round %d: grouped irecv n=%d", round, n);
      while (req == NULL) {
        IT_OK(ip.net->irecv(c.r, n, data, sizes, tags, mhs, &req));
        IT_CHECK(!gn_expired(dl), "irecv NULL for too long");
      }
      int d = 0;
      while (!d) {
        IT_OK(ip.net->test(req, &d, got));
        IT_CHECK(!gn_expired(dl), "round %d: grouped receive never completed", round);
      }
      for (int i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "round %d buffer %d (tag %d)", round, i, tags[i]);
        it_verify(data[i], sizes[i], got[i], sent_size(round, i), (uint64_t)round, (uint64_t)tags[i], what);
      }
    }
  }
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("grouped", 120, side, 60); }
