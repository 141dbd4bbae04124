/* Target handle: the 128-byte connect handle, which reaches this process from the peer (through NCCL's
 * bootstrap), given to the real connect() of the core over TCP: gdr_handle_check (magic, version, address family),
 * the transport's checks (transport, stream and thread counts, the TCP protocol data) and the connect state kept
 * in the handle's last 32 bytes. A handle whose address is IPv4 or IPv6 is pointed at a real listener of this
 * process (the rest stays fuzzed, the nonce included), so the connection, the listener's HELLO checks and accept
 * run too; nothing leaves the host.
 *
 * Input: 128 handle bytes, then an options byte: bit 0 takes the listener's real nonce, bit 1 its real TCP
 * protocol data. Invariants: connect completes or fails within 10 s (GDRNET_CONNECT_TIMEOUT_MS=100), never
 * crashes, and leaves nothing open. */
#include "fz.h"

#include <sys/socket.h>

#include "core.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_core_init_tcp(100);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  char lbuf[NCCL_NET_HANDLE_MAXSIZE], hbuf[NCCL_NET_HANDLE_MAXSIZE];
  struct gdr_handle lh, h;
  void *l = NULL, *s = NULL, *r = NULL;
  uint8_t opt;
  int failed = 0;
  double end;

  fz_bytes(&in, &h, sizeof(h));
  opt = fz_u8(&in);
  if (gdr_core_listen(NULL, 0, lbuf, &l) != ncclSuccess) fz_fail("listen failed");
  memcpy(&lh, lbuf, sizeof(lh));
  if (h.addr.family == AF_INET || h.addr.family == AF_INET6) h.addr = lh.addr;
  if (opt & 1) h.nonce = lh.nonce;
  if (opt & 2) memcpy(h.tp_data, lh.tp_data, sizeof(h.tp_data));
  memcpy(hbuf, &h, sizeof(h));
  end = fz_now() + 10.0;
  while (s == NULL && !failed) {
    if (gdr_core_connect(NULL, 0, -1, hbuf, &s) != ncclSuccess) failed = 1;
    if (r == NULL && gdr_core_accept(l, &r) != ncclSuccess) fz_fail("accept failed on a working listener");
    if (fz_now() > end) fz_fail("connect with this handle neither completed nor failed within 10 s");
  }
  if (r == NULL && gdr_core_accept(l, &r) != ncclSuccess) fz_fail("accept failed on a working listener");
  if (s != NULL && gdr_core_close_send(s) != ncclSuccess) fz_fail("closeSend failed");
  if (r != NULL && gdr_core_close_recv(r) != ncclSuccess) fz_fail("closeRecv failed");
  if (gdr_core_close_listen(l) != ncclSuccess) fz_fail("closeListen failed");
  return 0;
}
