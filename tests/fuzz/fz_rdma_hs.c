/* Target rdma_hs: the RDMA connection handshake as conn.c reads it from the control stream: the blob framing
 * (gdr_sock_blob_recv: {type, len} header, a payload of at most the expected size) over a real socket, the 480-byte
 * handshake of wire version 2 (gdr_rdma_hs_check, as the accepting side checks the sender's and the connecting side the receiver's),
 * then the READY word the receiver waits for. The state machines around them (gdr_rdma_connect/accept) need verbs
 * and are exercised over the emulator by the integration tests (it_garbage); these are the functions they call.
 *
 * Input: a flags byte (bit 0: expect the receiver's handshake, as the connecting side; else the sender's), then the
 * bytes the peer sends (written to a socketpair whose writer then closes). Invariants: the blob reader ends (done
 * or an error) without hanging; a blob is taken only at exactly sizeof(struct gdr_rdma_hs) bytes (as hs_recv
 * requires); an accepted handshake has everything conn.c then relies on in range (QP count 1..16, device count
 * 1..8, per device MTU 1..5, link layer IB or Ethernet, port >= 1, a terminated device name, and unless it says
 * TCP_ONLY every used QPN non-zero and 24-bit, PSNs 24-bit, FIFO address and every device's rkey set, the largest
 * work request at least 4096 bytes). */
#include "fz.h"

#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdma/proto.h"
#include "rdma/rdma.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_quiet_log();
  return 0;
}

/* one blob, as conn.c's hs_recv reads it: 1 done, 0 rejected */
static int read_blob(int fd, uint32_t type, void *buf, uint32_t len) {
  struct gdr_blob_io io;
  uint32_t got = 0;
  int done = 0;
  memset(&io, 0, sizeof(io));
  for (int i = 0; i < 1000 && !done; i++) {
    ncclResult_t r = gdr_sock_blob_recv(fd, &io, type, buf, len, &got, &done);
    if (r != ncclSuccess) return 0; /* rejected, or the writer closed before the end */
  }
  if (!done) fz_fail("the blob reader neither finished nor failed on a closed stream");
  if (got > len) fz_fail("the blob reader took %u bytes into a %u-byte buffer", got, len);
  return got == len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  int role = fz_u8(&in) & 1 ? GDR_RDMA_ROLE_RECV : GDR_RDMA_ROLE_SEND;
  struct gdr_rdma_hs hs;
  uint32_t ready = 0;
  int sv[2];
  const char *bad;

  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fz_fail("socketpair failed");
  if (fz_write_all(sv[1], in.p, in.n, 5.0) != 0) fz_fail("cannot write %zu bytes into a socketpair", in.n);
  close(sv[1]);
  memset(&hs, 0, sizeof(hs));
  if (read_blob(sv[0], GDR_RDMA_BLOB_HS, &hs, sizeof(hs))) {
    bad = gdr_rdma_hs_check(&hs, role);
    if (bad == NULL) {
      int tcp_only = (hs.caps & GDR_RDMA_CAP_TCP_ONLY) != 0; /* no QPs, no FIFO: the connection runs on TCP */
      if (hs.nqps < 1 || hs.nqps > GDR_RDMA_MAX_QPS || hs.ndevs < 1 || hs.ndevs > GDR_RDMA_MAX_CONN_DEVS ||
          hs.split > 1 || (!tcp_only && (hs.raddr == 0 || hs.max_msg < 4096)) || hs.role != role ||
          hs.version != GDR_RDMA_HS_VERSION || memchr(hs.devname, '\0', sizeof(hs.devname)) == NULL)
        fz_fail("an accepted handshake is out of range");
      for (int d = 0; d < hs.ndevs; d++)
        if (hs.dev[d].mtu < 1 || hs.dev[d].mtu > 5 || hs.dev[d].port < 1 ||
            (hs.dev[d].link_layer != 1 && hs.dev[d].link_layer != 2) || (!tcp_only && hs.dev[d].rkey == 0))
          fz_fail("accepted device %d out of range", d);
      for (int i = 0; i < hs.nqps && !tcp_only; i++)
        if (hs.qpn[i] == 0 || hs.qpn[i] > 0xffffffu || hs.psn[i] > 0xffffffu) fz_fail("accepted QP %d out of range", i);
      if (role == GDR_RDMA_ROLE_SEND) /* the accepting side then waits for READY */
        (void)read_blob(sv[0], GDR_RDMA_BLOB_READY, &ready, sizeof(ready));
    } else if (bad[0] == '\0') {
      fz_fail("a rejected handshake without a reason");
    }
  }
  close(sv[0]);
  return 0;
}
