/* Teardown with requests still in flight, as after ncclCommAbort or an error: NCCL stops testing and
 * deregisters/closes. Each side closes with requests it never tested: six isends and their six irecvs
 * (data possibly still moving), and four irecvs no send will ever match. Every deregMr/close must return
 * ncclSuccess within a bound (no hang, no crash), and in the sanitizer build nothing may leak (requests
 * belong to the plugin until test() reports them done, so close must free them). Then a fresh
 * connection between the same processes still works.
 *
 * GNIT_RESET_CHECK=1 (RDMA over the emulator, with VEMU_TRACE): the GPU-reset order (docs/recovery.md): the receive
 * buffers are registered as DMA-BUF ("device" memory) and, after deregMr/close with requests in flight, this
 * process must hold no QP and no MR at all: every `qp create` of its trace has its `qp destroy`, every `mr reg` its
 * `mr dereg` (a GPU could be reset now); then the fresh connection works. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "it.h"

#define LEN (1u << 20) /* 6 x 128 KiB never-tested messages + 4 x 4 KiB unmatched receives fit */

static void timed_ok(ncclResult_t r, uint64_t t0, double bound, const char *what) {
  double took = (double)(gn_now_ns() - t0) / 1e9;
  IT_CHECK(r == ncclSuccess, "%s with requests in flight returned %s", what, gn_result_str(r));
  IT_CHECK(took < bound, "%s with requests in flight took %.1f s (bound %.0f s)", what, took, bound);
}

/* This process's QPs and MRs still alive per the emulator's trace (VEMU_TRACE): creations without their destroy. */
static void live_resources(int *qps, int *mrs) {
  const char *path = getenv("VEMU_TRACE");
  char pfx[64], line[1024];
  uint32_t qp[4096], mr[4096];
  int nq = 0, nm = 0;
  IT_CHECK(path != NULL, "GNIT_RESET_CHECK needs VEMU_TRACE");
  FILE *f = fopen(path, "r");
  IT_CHECK(f != NULL, "open %s", path);
  snprintf(pfx, sizeof pfx, "vemu pid=%d ", (int)getpid());
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, pfx, strlen(pfx)) != 0) continue;
    const char *e = strchr(line + strlen(pfx), ' '); /* past t=... */
    unsigned v = 0;
    if (e == NULL) continue;
    e++;
    if (sscanf(e, "qp create qp=0x%x", &v) == 1) {
      IT_CHECK(nq < 4096, "test bug: too many QPs");
      qp[nq++] = v;
    } else if (sscanf(e, "qp destroy qp=0x%x", &v) == 1) {
      for (int i = 0; i < nq; i++)
        if (qp[i] == v) {
          qp[i] = qp[--nq];
          break;
        }
    } else if (sscanf(e, "mr reg call=%*s key=0x%x", &v) == 1) {
      IT_CHECK(nm < 4096, "test bug: too many MRs");
      mr[nm++] = v;
    } else if (sscanf(e, "mr dereg key=0x%x", &v) == 1) {
      for (int i = 0; i < nm; i++)
        if (mr[i] == v) {
          mr[i] = mr[--nm];
          break;
        }
    }
  }
  fclose(f);
  for (int i = 0; i < nq && i < 4; i++) it_log("still alive: QP 0x%x", qp[i]);
  for (int i = 0; i < nm && i < 4; i++) it_log("still registered: MR key 0x%x", mr[i]);
  *qps = nq;
  *mrs = nm;
}

static int side(int fd, int sender) {
  it_plugin_t ip;
  it_load(&ip);
  double bound = it_env_double("GNIT_ERROR_BOUND_S", 20);
  int reset = it_env_double("GNIT_RESET_CHECK", 0) != 0;
  for (int round = 0; round < 2; round++) {
    it_conn_t c;
    it_conn_open(&ip, 0, fd, LEN, &c);
    if (reset) { /* the receive buffers as "device" memory (DMA-BUF), as NCCL registers GPU buffers */
      int dfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      IT_CHECK(dfd >= 0, "open /dev/null");
      IT_OK(ip.net->deregMr(c.r, c.rmh));
      IT_OK(ip.net->regMrDmaBuf(c.r, c.rbuf, LEN, NCCL_PTR_CUDA, 0, dfd, &c.rmh));
      close(dfd);
    }
    gn_ctx_t ctx;
    gn_ctx_init(&ctx, ip.net, 60);
    /* two messages tested to completion, then six posted on both sides but never tested */
    const int big = 128 * 1024;
    if (sender) {
      for (int i = 0; i < 2; i++) {
        it_step("round %d: message %d", round, i);
        it_send_pattern(&ctx, &c, 0, 1000 * (i + 1), (uint64_t)i, 3);
      }
      for (int i = 0; i < 6; i++) {
        void *r = NULL;
        it_step("round %d: isend %d, never tested", round, i);
        IT_GN(&ctx, gn_isend(&ctx, c.s, c.sbuf + (size_t)i * (size_t)big, big, 0, c.smh, &r));
      }
      it_log("round %d: closing with 6 isends never tested and 4 irecvs never matched", round);
    } else {
      for (int i = 0; i < 2; i++) {
        it_step("round %d: message %d", round, i);
        it_recv_pattern(&ctx, &c, 0, 4096, 1000 * (i + 1), (uint64_t)i, 3);
      }
      for (int i = 0; i < 6; i++) {
        void *r = NULL;
        int szs[1] = {big}, tags[1] = {0};
        void *d[1] = {c.rbuf + (size_t)i * (size_t)big}, *mh[1] = {c.rmh};
        it_step("round %d: irecv %d, never tested", round, i);
        IT_GN(&ctx, gn_irecv(&ctx, c.r, 1, d, szs, tags, mh, &r));
      }
    }
    /* both sides: irecvs that no send will match (the peer's sends above went the other way) */
    for (int i = 0; i < 4; i++) {
      void *r = NULL;
      int szs[1] = {4096}, tags[1] = {0};
      void *d[1] = {c.rbuf + (768u << 10) + (size_t)i * 4096}, *mh[1] = {c.rmh};
      IT_OK(ip.net->irecv(c.r, 1, d, szs, tags, mh, &r));
    }
    /* Both sides have posted everything: only then tear down (a close must not make the peer's
     * requests above complete or fail before they were posted). */
    IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
    if (reset) { /* the trace shows this process's resources while they exist (else the check below proves nothing) */
      int qps = 0, mrs = 0;
      live_resources(&qps, &mrs);
      IT_CHECK(qps > 0 && mrs > 0, "round %d: the trace shows %d QP(s) and %d MR(s) of an open connection", round, qps,
               mrs);
    }
    it_step("round %d: deregMr/close with requests in flight", round);
    uint64_t t0 = gn_now_ns();
    timed_ok(ip.net->deregMr(c.s, c.smh), t0, bound, "deregMr(send)");
    t0 = gn_now_ns();
    timed_ok(ip.net->deregMr(c.r, c.rmh), t0, bound, "deregMr(recv)");
    t0 = gn_now_ns();
    timed_ok(ip.net->closeSend(c.s), t0, bound, "closeSend");
    t0 = gn_now_ns();
    timed_ok(ip.net->closeRecv(c.r), t0, bound, "closeRecv");
    /* as NCCL does: the buffers go right after deregMr/close (the emulator, like an HCA, has stopped all access to
     * an MR when ibv_dereg_mr returns; a use-after-free here shows in the sanitizer build) */
    free(c.sbuf);
    free(c.rbuf);
    if (reset) {
      int qps = 0, mrs = 0;
      live_resources(&qps, &mrs);
      IT_CHECK(qps == 0 && mrs == 0,
               "round %d: after deregMr/close %d QP(s) and %d MR(s) of this process are still alive: the GPU could "
               "not be reset",
               round, qps, mrs);
      it_log("round %d: no QP and no MR left after the close (GPU reset possible)", round);
    }
    IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  }
  /* and the plugin still works */
  it_conn_t c;
  it_conn_open(&ip, 0, fd, LEN, &c);
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, 60);
  it_step("a fresh connection after the aborted ones");
  if (sender) it_send_pattern(&ctx, &c, 0, 65536, 1, 9);
  else it_recv_pattern(&ctx, &c, 0, 65536, 65536, 1, 9);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
  it_unload(&ip);
  return 0;
}

static int child(int fd, void *arg) {
  (void)arg;
  return side(fd, 1);
}

int main(void) {
  it_init("abort", 120);
  if (it_env_double("GNIT_RESET_CHECK", 0) != 0 && getenv("VEMU_TRACE")) { /* this run's trace only */
    FILE *f = fopen(getenv("VEMU_TRACE"), "w");
    IT_CHECK(f != NULL || errno == ENOENT, "truncate %s", getenv("VEMU_TRACE")); /* ENOENT: a first run */
    if (f) fclose(f);
  }
  it_child_t c;
  it_fork(&c, child, NULL);
  side(c.fd, 0);
  it_join(&c, 60);
  it_log("PASS");
  return 0;
}
