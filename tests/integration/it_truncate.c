/* A send larger than the posted receive: the receiver's test() returns ncclInvalidUsage and the
 * sender's isend/test an error (ncclInvalidUsage as well), both within a bound, never a hang; the
 * good messages before it complete normally and both sides can still close. Also a zero-capacity
 * receive given one byte.
 *
 * An eager send (TCP, GDRNET_TCP_EAGER_CREDITS > 0, the default) leaves before the receiver can say
 * that its receive is too small, so the oversized send itself may complete; the receiver detects the
 * mismatch and tells the sender, whose *next* isend/test must then fail. The sender keeps posting
 * one-byte follow-up messages (never received) and testing them until an error comes: the error must
 * still arrive within the bound, and an oversized send that completes with no error ever following
 * fails the test. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

typedef struct {
  int cap, send;
} case_t;
static const case_t k_cases[] = {{1000, 4096}, {0, 1}, {65536, 65537}, {4096, 8 << 20}};
#define NCASES (int)(sizeof k_cases / sizeof k_cases[0])

/* Drives one request to completion or error; returns the error (ncclSuccess if it completed). */
static ncclResult_t settle(const ncclNet_v8_t *net, void *req, int *sizes, double bound_s, double *took) {
  uint64_t t0 = gn_now_ns(), dl = gn_deadline_ns(bound_s);
  for (;;) {
    int d = 0;
    ncclResult_t r = net->test(req, &d, sizes);
    if (r != ncclSuccess || d) {
      *took = (double)(gn_now_ns() - t0) / 1e9;
      return r;
    }
    IT_CHECK(!gn_expired(dl), "no completion and no error within %.0f s (a hang)", bound_s);
    sched_yield();
  }
}

typedef struct {
  int32_t result;
  double took;
} report_t;

static int run_case(int fd, const case_t *k, int sender, report_t *rep) {
  it_plugin_t ip;
  it_load(&ip);
  it_conn_t c;
  it_conn_open(&ip, 0, fd, (size_t)k->send + 65536, &c);
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, 60);
  double bound = it_env_double("GNIT_ERROR_BOUND_S", 20);
  /* a good message first */
  it_step("good message");
  if (sender) it_send_pattern(&ctx, &c, 0, 100, 0, 1);
  else it_recv_pattern(&ctx, &c, 0, 100, 100, 0, 1);
  it_step("%d bytes sent into a %d-byte receive", k->send, k->cap);
  gn_log_capture(1);
  ncclResult_t r;
  double took = 0;
  if (sender) {
    gn_pattern_fill(c.sbuf, (size_t)k->send, 7);
    void *req = NULL;
    uint64_t t0 = gn_now_ns(), dl = gn_deadline_ns(bound);
    for (;;) {
      r = ip.net->isend(c.s, c.sbuf, k->send, 0, c.smh, &req);
      if (r != ncclSuccess || req != NULL) break;
      IT_CHECK(!gn_expired(dl), "isend returned NULL requests for %.0f s", bound);
      sched_yield();
    }
    if (r == ncclSuccess) {
      double t2 = 0;
      r = settle(ip.net, req, NULL, bound, &t2);
    }
    if (r == ncclSuccess) {
      /* it went out eagerly: the error comes with a later call (bounded, as the oversized send's own) */
      int follow = 0;
      it_log("sender: the %d-byte send completed (eager); expecting the error on a later isend/test", k->send);
      while (r == ncclSuccess) {
        IT_CHECK(!gn_expired(dl), "the %d-byte send into a %d-byte receive completed and no error followed within "
                 "%.0f s (%d follow-up calls)", k->send, k->cap, bound, follow);
        req = NULL;
        r = ip.net->isend(c.s, c.sbuf, 1, 0, c.smh, &req);
        follow++;
        if (r == ncclSuccess && req != NULL) {
          double t2 = 0;
          r = settle(ip.net, req, NULL, bound, &t2);
        } else if (r == ncclSuccess) {
          sched_yield();
        }
      }
      it_log("sender: error after %d follow-up isend/test rounds", follow);
    }
    took = (double)(gn_now_ns() - t0) / 1e9;
  } else {
    void *req = NULL;
    int szs[1] = {k->cap}, tags[1] = {0}, got[1] = {-1};
    void *d[1] = {c.rbuf}, *mh[1] = {c.rmh};
    IT_GN(&ctx, gn_irecv(&ctx, c.r, 1, d, szs, tags, mh, &req));
    r = settle(ip.net, req, got, bound, &took);
  }
  char *log = gn_log_captured();
  it_log("%s side: %s after %.3f s", sender ? "sender" : "receiver", gn_result_str(r), took);
  rep->result = (int32_t)r;
  rep->took = took;
  if (r != ncclSuccess)
    IT_CHECK(strstr(log, "WARN") != NULL, "%s side failed with %s but logged no WARN", sender ? "sender" : "receiver",
             gn_result_str(r));
  free(log);
  /* both sides can still close (NCCL aborts the communicator after an error) */
  IT_CHECK(gn_boot_barrier(fd, bound + 30) == 0, "barrier");
  it_step("closing after the error");
  ip.net->deregMr(c.s, c.smh);
  ip.net->deregMr(c.r, c.rmh);
  ip.net->closeSend(c.s);
  ip.net->closeRecv(c.r);
  free(c.sbuf);
  free(c.rbuf);
  it_unload(&ip);
  return 0;
}

static int child(int fd, void *arg) {
  const case_t *k = arg;
  report_t rep;
  run_case(fd, k, 1, &rep);
  IT_CHECK(gn_boot_send(fd, &rep, sizeof rep) == 0, "bootstrap");
  return 0;
}

/* One case in a fresh process pair: this process receives, its child sends. */
static int case_main(int fd, void *arg) {
  (void)fd;
  const case_t *k = arg;
  {
    it_child_t c;
    it_fork(&c, child, (void *)k);
    report_t mine, peer;
    run_case(c.fd, k, 0, &mine);
    IT_CHECK(gn_boot_recv(c.fd, &peer, sizeof peer, 60) == 0, "no report from the sender");
    it_join(&c, 30);
    IT_CHECK(mine.result == ncclInvalidUsage, "%d bytes into %d: the receiver got %s, expected ncclInvalidUsage",
             k->send, k->cap, gn_result_str((ncclResult_t)mine.result));
    IT_CHECK(peer.result != ncclSuccess, "%d bytes into %d: the sender saw success", k->send, k->cap);
    IT_CHECK(peer.result == ncclInvalidUsage, "%d bytes into %d: the sender got %s, expected ncclInvalidUsage",
             k->send, k->cap, gn_result_str((ncclResult_t)peer.result));
  }
  return 0;
}

int main(void) {
  it_init("truncate", 150);
  for (int i = 0; i < NCASES; i++) {
    it_log("case: %d-byte send into a %d-byte receive", k_cases[i].send, k_cases[i].cap);
    it_child_t c;
    it_fork(&c, case_main, (void *)&k_cases[i]);
    it_join(&c, 140);
  }
  it_log("PASS");
  return 0;
}
