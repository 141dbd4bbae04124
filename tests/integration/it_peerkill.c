/* A peer killed mid-stream (SIGKILL, no goodbye): the survivor's isend/irecv/test must return an
 * error within a bound (GNIT_PEER_DEATH_BOUND_S, default 15 s) rather than hang, and its comms
 * must still close. Both ways: the survivor receiving, and the survivor sending. */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "it.h"

#define SLOT (1u << 20)
#define DEPTH 8
#define BEFORE_KILL 20

/* The victim streams (or receives) until it is killed; it never returns on its own. */
static int victim(int fd, void *arg) {
  int victim_sends = *(int *)arg;
  it_plugin_t ip;
  it_load(&ip);
  it_conn_t c;
  it_conn_open(&ip, 0, fd, (size_t)DEPTH * SLOT, &c);
  const ncclNet_v8_t *net = ip.net;
  void *req[DEPTH] = {0};
  uint64_t posted = 0, done = 0;
  for (;;) {
    while (posted - done < DEPTH) {
      int slot = (int)(posted % DEPTH);
      ncclResult_t r;
      if (victim_sends) {
        gn_pattern_fill(c.sbuf + (size_t)slot * SLOT, SLOT, gn_pattern_seed(SLOT, posted, 1));
        r = net->isend(c.s, c.sbuf + (size_t)slot * SLOT, (int)SLOT, 0, c.smh, &req[slot]);
      } else {
        int szs[1] = {(int)SLOT}, tags[1] = {0};
        void *d[1] = {c.rbuf + (size_t)slot * SLOT}, *mh[1] = {c.rmh};
        r = net->irecv(c.r, 1, d, szs, tags, mh, &req[slot]);
      }
      if (r != ncclSuccess) _exit(0); /* the survivor already reacted: fine */
      if (req[slot] == NULL) break;
      posted++;
    }
    if (done < posted) {
      int d = 0;
      if (net->test(req[done % DEPTH], &d, NULL) != ncclSuccess) _exit(0);
      if (d) done++;
    }
    sched_yield();
  }
}

static void survive(int victim_sends) {
  it_log("case: the survivor %s, the victim is killed mid-stream", victim_sends ? "receives" : "sends");
  it_child_t ch;
  int arg = victim_sends;
  it_fork(&ch, victim, &arg);
  it_plugin_t ip;
  it_load(&ip);
  it_conn_t c;
  it_conn_open(&ip, 0, ch.fd, (size_t)DEPTH * SLOT, &c);
  const ncclNet_v8_t *net = ip.net;
  double bound = it_env_double("GNIT_PEER_DEATH_BOUND_S", 15);
  void *req[DEPTH] = {0};
  uint64_t posted = 0, done = 0;
  uint64_t t_kill = 0;
  ncclResult_t err = ncclSuccess;
  const char *where = "";
  uint64_t dl = gn_deadline_ns(120);
  it_step("streaming before the kill");
  while (err == ncclSuccess) {
    while (posted - done < DEPTH) {
      int slot = (int)(posted % DEPTH);
      if (!victim_sends) {
        gn_pattern_fill(c.sbuf + (size_t)slot * SLOT, SLOT, gn_pattern_seed(SLOT, posted, 2));
        err = net->isend(c.s, c.sbuf + (size_t)slot * SLOT, (int)SLOT, 0, c.smh, &req[slot]);
        where = "isend";
      } else {
        int szs[1] = {(int)SLOT}, tags[1] = {0};
        void *d[1] = {c.rbuf + (size_t)slot * SLOT}, *mh[1] = {c.rmh};
        err = net->irecv(c.r, 1, d, szs, tags, mh, &req[slot]);
        where = "irecv";
      }
      if (err != ncclSuccess || req[slot] == NULL) break;
      posted++;
    }
    if (err != ncclSuccess) break;
    if (done < posted) {
      int d = 0, got = -1;
      err = net->test(req[done % DEPTH], &d, victim_sends ? &got : NULL);
      where = "test";
      if (err != ncclSuccess) break;
      if (d) {
        if (victim_sends && t_kill == 0) {
          it_verify(c.rbuf + (size_t)(done % DEPTH) * SLOT, (int)SLOT, got, (int)SLOT, done, 1, "before the kill");
        }
        done++;
      }
    }
    if (t_kill == 0 && done >= BEFORE_KILL) {
      it_step("killing the peer after %llu messages", (unsigned long long)done);
      IT_CHECK(kill(ch.pid, SIGKILL) == 0, "kill");
      int st = it_reap(&ch, 10);
      IT_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the victim was not killed by SIGKILL");
      t_kill = gn_now_ns();
      it_step("waiting for an error after the peer's death");
    }
    if (t_kill != 0)
      IT_CHECK(gn_now_ns() - t_kill < (uint64_t)(bound * 1e9),
               "no error from isend/irecv/test %.0f s after the peer was killed (%llu completed, %llu posted)", bound,
               (unsigned long long)done, (unsigned long long)posted);
    IT_CHECK(!gn_expired(dl), "the stream never reached %d messages before the kill", BEFORE_KILL);
    sched_yield();
  }
  IT_CHECK(t_kill != 0, "%s returned %s before the peer was killed", where, gn_result_str(err));
  double took = (double)(gn_now_ns() - t_kill) / 1e9;
  it_log("%s returned %s %.3f s after the kill (bound %.0f s)", where, gn_result_str(err), took, bound);
  IT_CHECK(took < bound, "error after %.1f s, bound %.0f s", took, bound);
  /* the comms still close (NCCL tears the communicator down after the error) */
  it_step("closing after the peer's death");
  uint64_t t0 = gn_now_ns();
  ip.net->deregMr(c.s, c.smh);
  ip.net->deregMr(c.r, c.rmh);
  ip.net->closeSend(c.s);
  ip.net->closeRecv(c.r);
  IT_CHECK(gn_now_ns() - t0 < (uint64_t)(bound * 1e9), "closing took %.1f s", (double)(gn_now_ns() - t0) / 1e9);
  free(c.sbuf);
  free(c.rbuf);
  it_unload(&ip);
}

/* Each case runs in a fresh process pair (the survivor forks the victim before either loads the plugin). */
static int survivor_main(int fd, void *arg) {
  (void)fd;
  survive(*(int *)arg);
  return 0;
}

int main(void) {
  it_init("peerkill", 150);
  for (int victim_sends = 1; victim_sends >= 0; victim_sends--) {
    it_child_t s;
    it_fork(&s, survivor_main, &victim_sends);
    it_join(&s, 140);
  }
  it_log("PASS");
  return 0;
}
