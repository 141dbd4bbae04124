/* Grouped receives whatever order the sender posts and tests its parts in: the receiver
 * posts one irecv of n = 2..8 buffers (distinct tags, eager-sized and large parts, empty ones too); the sender
 * posts the n isends in a permutation of the tags and, per mode:
 *   0  posts all, then tests all in post order
 *   1  posts one and tests it to done before posting the next (a part must progress on its own: over RDMA the
 *      first part used to wait for the last, and both ranks waited for ever)
 *   2  posts all, then tests them last to first
 *   3  posts part k, then tests part k-1 to done (interleaved)
 * n = 2..4: every permutation in every mode; n = 5..8: three permutations per mode. Every byte and every reported
 * size is checked, and the receive sizes are larger than the sends. Both directions, one after the other. The
 * device must announce maxRecvs 8 (both transports take NCCL's grouped receives). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define MAXN 8
#define BUF (1u << 20) /* each part's buffer */

static int part_size(int group, int tag_idx) {
  static const int pool[] = {0, 8, 4096, 65536, 65537, 200000, 1 << 20, 1000};
  return pool[(group * 3 + tag_idx * 5) % 8];
}

/* permutation p of 0..n-1, number `which` in lexicographic order (n <= 8) */
static void nth_perm(int n, int which, int *p) {
  int pool[MAXN], fact[MAXN + 1];
  fact[0] = 1;
  for (int i = 1; i <= n; i++) fact[i] = fact[i - 1] * i;
  for (int i = 0; i < n; i++) pool[i] = i;
  which %= fact[n];
  for (int i = 0; i < n; i++) {
    int f = fact[n - 1 - i], k = which / f;
    which %= f;
    p[i] = pool[k];
    for (int j = k; j < n - 1 - i; j++) pool[j] = pool[j + 1];
  }
}

struct plan {
  int n, mode, perm[MAXN], tags[MAXN];
};

/* The g-th group of the schedule; 0 when past the end. */
static int plan_of(int g, struct plan *pl) {
  static const int perms[] = {2, 6, 24}; /* n = 2..4: all */
  int idx = g;
  for (int n = 2; n <= MAXN; n++) {
    int count = (n <= 4 ? perms[n - 2] : 3) * 4;
    if (idx < count) {
      pl->n = n;
      pl->mode = idx % 4;
      nth_perm(n, n <= 4 ? idx / 4 : (idx / 4) * 7919 + n, pl->perm);
      for (int i = 0; i < n; i++) pl->tags[i] = 100 * g + 11 * i + 1;
      return 1;
    }
    idx -= count;
  }
  return 0;
}

static void wait_send(const ncclNet_v8_t *net, void *req, uint64_t dl, int g, int k) {
  int d = 0, sz = -1;
  while (!d) {
    IT_OK(net->test(req, &d, &sz));
    IT_CHECK(!gn_expired(dl), "group %d: send of part %d never completed", g, k);
  }
}

static void send_group(it_plugin_t *ip, it_conn_t *c, int g, const struct plan *pl, uint64_t dl) {
  const ncclNet_v8_t *net = ip->net;
  void *req[MAXN] = {0};
  for (int k = 0; k < pl->n; k++) {
    int i = pl->perm[k], sz = part_size(g, i);
    unsigned char *b = c->sbuf + (size_t)i * BUF;
    gn_pattern_fill(b, (size_t)sz, gn_pattern_seed((uint64_t)sz, (uint64_t)g, (uint64_t)pl->tags[i]));
    it_step("group %d (n %d, mode %d): isend part %d = tag %d, %d bytes", g, pl->n, pl->mode, k, pl->tags[i], sz);
    while (req[k] == NULL) {
      IT_OK(net->isend(c->s, b, sz, pl->tags[i], c->smh, &req[k]));
      IT_CHECK(!gn_expired(dl), "group %d: isend of part %d stayed NULL", g, k);
      if (req[k] == NULL) sched_yield();
    }
    if (pl->mode == 1) wait_send(net, req[k], dl, g, k);
    if (pl->mode == 3 && k > 0) wait_send(net, req[k - 1], dl, g, k - 1);
  }
  if (pl->mode == 0)
    for (int k = 0; k < pl->n; k++) wait_send(net, req[k], dl, g, k);
  if (pl->mode == 2)
    for (int k = pl->n - 1; k >= 0; k--) wait_send(net, req[k], dl, g, k);
  if (pl->mode == 3) wait_send(net, req[pl->n - 1], dl, g, pl->n - 1);
}

static void recv_group(it_plugin_t *ip, it_conn_t *c, int g, const struct plan *pl, uint64_t dl) {
  const ncclNet_v8_t *net = ip->net;
  void *data[MAXN], *mhs[MAXN], *req = NULL;
  int sizes[MAXN], got[MAXN], d = 0;
  for (int i = 0; i < pl->n; i++) {
    data[i] = c->rbuf + (size_t)i * BUF;
    mhs[i] = c->rmh;
    sizes[i] = part_size(g, i) + 512 > (int)BUF ? (int)BUF : part_size(g, i) + 512;
    got[i] = -1;
    memset(data[i], IT_CANARY, (size_t)sizes[i]);
  }
  it_step("group %d (n %d, mode %d): grouped irecv", g, pl->n, pl->mode);
  while (req == NULL) {
    IT_OK(net->irecv(c->r, pl->n, data, sizes, (int *)pl->tags, mhs, &req));
    IT_CHECK(!gn_expired(dl), "group %d: irecv stayed NULL", g);
  }
  while (!d) {
    IT_OK(net->test(req, &d, got));
    IT_CHECK(!gn_expired(dl), "group %d (n %d, mode %d): the grouped receive never completed", g, pl->n, pl->mode);
  }
  for (int i = 0; i < pl->n; i++) {
    char what[96];
    snprintf(what, sizeof what, "group %d (n %d, mode %d) buffer %d (tag %d)", g, pl->n, pl->mode, i, pl->tags[i]);
    it_verify(data[i], sizes[i], got[i], part_size(g, i), (uint64_t)g, (uint64_t)pl->tags[i], what);
  }
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_conn_t c;
  struct plan pl;
  int groups = 0;
  it_load(&ip);
  IT_CHECK(ip.props[0].maxRecvs == MAXN, "device 0 announces maxRecvs %d; both transports take groups of %d",
           ip.props[0].maxRecvs, MAXN);
  it_conn_open(&ip, 0, fd, (size_t)MAXN * BUF, &c);
  uint64_t dl = gn_deadline_ns(it_env_double("GNIT_PHASE_S", 150));
  for (int pass = 0; pass < 2; pass++) {
    int sending = (pass == 0) == (parent == 0);
    for (int g = 0; plan_of(g, &pl); g++) {
      if (sending)
        send_group(&ip, &c, g, &pl, dl);
      else
        recv_group(&ip, &c, g, &pl, dl);
      groups++;
    }
  }
  it_log("%d grouped messages, every order and testing mode", groups);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("grouporder", 200, side, 60); }
