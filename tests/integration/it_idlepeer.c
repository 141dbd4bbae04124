/* A peer whose NCCL calls nothing must still answer a recovery (docs/HARDENING.md 8, contract seed 350792092).
 *
 * The child receives one message of SZ bytes, tests it to completion, checks it, and then calls nothing on the
 * plugin: it waits on the bootstrap socket for the parent's verdict, as NCCL's proxy does once every request of a
 * connection is done. Its NIC goes dark (the emulator's peer_loss) right after the message's last byte arrived:
 * the bytes are placed and the receive completes, but no ACK leaves. The parent, the sender, sees RETRY_EXC on
 * its WRITE_WITH_IMM, recovers, and asks the receiver over the control channel (alive) for its state. The isend
 * must complete with success within a few seconds: the receiver's plugin answers although its NCCL is idle.
 * Before the idle-peer service (plugin/rdma/service.c) the sender waited GDRNET_RECOVERY_TIMEOUT_MS for the
 * recovery, as long again for the move to TCP, and failed the connection (ncclRemoteError from test).
 *
 * RDMA only: one QP (the message rides in one WRITE_WITH_IMM), no failback; the receiver's emulator counts its
 * payload bytes both ways: the clear-to-send entry it writes (64 bytes) and the message (SZ). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define SZ (1 << 20)
#define CTS_BYTES 64
#define BOUND_S 6.0

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_conn_t c;
  gn_ctx_t ctx;
  if (!parent) { /* the receiver: dark after the message */
    char rule[96];
    snprintf(rule, sizeof rule, "peer_loss:after_bytes=%d", SZ + CTS_BYTES);
    setenv("VEMU_FAULTS", rule, 1);
  } else {
    unsetenv("VEMU_FAULTS");
  }
  it_load(&ip);
  it_conn_open(&ip, ip.dev, fd, SZ, &c);
  gn_ctx_init(&ctx, ip.net, 60);
  uint64_t verdict = 0;
  if (!parent) {
    it_step("receiving the message, then idle");
    it_recv_pattern(&ctx, &c, 0, SZ, SZ, 1, 7);
    it_step("idle (no call into the plugin) until the sender's verdict");
    IT_CHECK(gn_boot_recv_u64(fd, &verdict, 30) == 0, "the sender's verdict never came");
    IT_CHECK(verdict == 1, "the sender's isend failed (see its output)");
    char *log = gn_log_captured();
    IT_CHECK(strstr(log, "answered by the idle-peer service") != NULL,
             "the receiver's plugin did not answer the sender while idle");
    free(log);
  } else {
    const ncclNet_v8_t *net = ip.net;
    void *req = NULL;
    uint64_t t0 = gn_now_ns(), dl = gn_deadline_ns(BOUND_S);
    gn_pattern_fill(c.sbuf, SZ, gn_pattern_seed(SZ, 1, 7)); /* it_send_pattern's, posted by hand: test's result */
    it_step("isend of %d bytes", SZ);
    while (req == NULL) {
      IT_OK(net->isend(c.s, c.sbuf, SZ, 0, c.smh, &req));
      IT_CHECK(!gn_expired(dl), "isend stayed NULL for %.0f s", BOUND_S);
    }
    int done = 0;
    ncclResult_t r = ncclSuccess;
    while (!done && r == ncclSuccess && !gn_expired(dl)) r = net->test(req, &done, NULL);
    double took = (double)(gn_now_ns() - t0) / 1e9;
    char *log = gn_log_captured();
    int faulted = strstr(log, "retry counter exceeded") != NULL;
    free(log);
    verdict = r == ncclSuccess && done;
    (void)gn_boot_send(fd, &verdict, sizeof verdict);
    IT_CHECK(r == ncclSuccess, "test of the isend returned %s after %.2f s: the idle receiver did not answer",
             gn_result_str(r), took);
    IT_CHECK(done, "the isend was not done after %.0f s", BOUND_S);
    IT_CHECK(faulted, "no RETRY_EXC on the sender: the receiver's NIC went dark too late (the test proves nothing)");
    it_log("sender: the isend completed %.2f s after it was posted, through the recovery", took);
  }
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
  free(c.sbuf);
  free(c.rbuf);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("idlepeer", 60, side, 40); }
