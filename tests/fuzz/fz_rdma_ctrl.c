/* Target rdma_ctrl: the RDMA transport's control records (struct gdr_rdma_ctrl: SIZE_ERR, BYE, and whatever
 * recovery/fallback adds to gdr_rdma_ctrl_poll), as a connection reads them from its TCP control stream after the
 * handshake. The real gdr_rdma_ctrl_poll() and gdr_rdma_comm_check() run on a comm that has what they touch (the
 * stream, the receive slots, the device's name); it needs no verbs.
 *
 * Input: a flags byte (bit 0: a send comm, else a receive comm; bit 1: every receive slot holds a posted receive
 * of message slot + 32 * (bits 2..3)), then the bytes the peer sends (the writer then closes). Invariants: polling
 * ends (the peer's EOF or BYE is seen, or the comm is failed for garbage) within a bounded number of calls; a
 * SIZE_ERR marks only the receive it names. */
#include "fz.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdma/rdma.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_quiet_log();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  static struct gdr_rdma_dev dev;
  struct gdr_rdma_req reqs[GDR_RDMA_FIFO_SLOTS];
  struct gdr_rdma_comm *c = calloc(1, sizeof(*c));
  uint8_t flags = fz_u8(&in);
  uint64_t base = 32ull * ((flags >> 2) & 3);
  int sv[2], calls = 0;

  if (c == NULL) fz_fail("out of memory");
  snprintf(dev.name, sizeof(dev.name), "fz0");
  dev.port = 1;
  c->kind = flags & 1 ? GDR_RCOMM_SEND : GDR_RCOMM_RECV;
  c->dev = &dev;
  atomic_init(&c->fatal, 0);
  snprintf(c->peer, sizeof(c->peer), "fuzzer");
  memset(reqs, 0, sizeof(reqs));
  if (flags & 2)
    for (int i = 0; i < GDR_RDMA_FIFO_SLOTS; i++) {
      reqs[i].type = GDR_RREQ_RECV;
      reqs[i].seq = base + (uint64_t)i;
      reqs[i].comm = c;
      c->recv_slot[i] = &reqs[i];
    }
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fz_fail("socketpair failed");
  if (gdr_sock_set_nonblocking(sv[0], 1) != ncclSuccess) fz_fail("cannot make the stream non-blocking");
  c->fd = sv[0];
  if (fz_write_all(sv[1], in.p, in.n, 5.0) != 0) fz_fail("cannot write %zu bytes into a socketpair", in.n);
  close(sv[1]);
  while (c->eof_ns == 0 && atomic_load(&c->fatal) == 0) {
    if (gdr_rdma_ctrl_poll(c) != ncclSuccess) fz_fail("gdr_rdma_ctrl_poll returned an error");
    if (++calls > 10000) fz_fail("the control channel neither ended nor failed after %d polls", calls);
  }
  (void)gdr_rdma_comm_check(c);
  for (int i = 0; i < GDR_RDMA_FIFO_SLOTS; i++)
    if (reqs[i].error != ncclSuccess && (!(flags & 2) || reqs[i].error != ncclInvalidUsage || c->kind != GDR_RCOMM_RECV))
      fz_fail("receive %d got error %d", i, (int)reqs[i].error);
  close(sv[0]);
  free(c);
  return 0;
}
