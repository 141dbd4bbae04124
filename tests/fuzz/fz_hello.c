/* Target hello: the stream handshake of sock.c, both ways.
 *   mode 0, the listener reads HELLOs: up to 4 raw connections to a real listen comm of the core (TCP), each
 *     sending fuzzed bytes (optionally patched with the right magic/version/transport, nonce, TCP protocol data),
 *     driven through the real accept(): gdr_listener_poll's HELLO checks, then the TCP transport's grouping of
 *     streams by connection id and its protocol-data check. Oracle: a HELLO that is well-formed by the rules of
 *     sock.h (magic, version, nonce, transport, kind, stream <= nstreams) is ACKed, one with the right magic,
 *     version and nonce but the RDMA transport is a peer that cannot meet this one (sock.h, mixed pairs): answered
 *     GDR_ACK_MISMATCH or closed, and that accept() call fails (ncclInvalidUsage; the only accept error allowed);
 *     any other is closed unACKed; every connection is answered or closed within 5 s.
 *   mode 1, the connector reads the ACK: the real connect() towards a raw listener of the harness, which answers
 *     each stream's HELLO with fuzzed ACK bytes. Oracle: connect succeeds if and only if every stream got a whole
 *     ACK with the right magic and status 0; it ends either way within 5 s.
 * Nothing may be left open. */
#include "fz.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"
#include "tcp/tcp.h"

#define NCONN 4

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_core_init_tcp(100);
  return 0;
}

/* the rules of gdr_hello_verify (sock.h), as the oracle */
static int hello_ok(const struct gdr_hello *h, size_t len, uint64_t nonce) {
  return len >= sizeof(*h) && h->magic == GDR_HELLO_MAGIC && h->version == GDR_HANDLE_VERSION && h->nonce == nonce &&
         h->transport == GDR_TP_TCP && (h->kind == GDR_STREAM_CTRL || h->kind == GDR_STREAM_DATA) &&
         h->stream <= h->nstreams;
}

/* a listener of this transport (TCP) refuses it and fails its accept */
static int hello_mismatch(const struct gdr_hello *h, size_t len, uint64_t nonce) {
  return len >= sizeof(*h) && h->magic == GDR_HELLO_MAGIC && h->version == GDR_HANDLE_VERSION && h->nonce == nonce &&
         h->transport == GDR_TP_RDMA;
}

static void listener_side(struct fz_in *in) {
  char hbuf[NCCL_NET_HANDLE_MAXSIZE];
  struct gdr_handle lh;
  union gdr_sockaddr to;
  void *l = NULL;
  int fd[NCONN], expect_ack[NCONN], expect_mm[NCONN], state[NCONN]; /* state: 0 waiting, 1 ACKed, 2 closed,
                                                                        * 3 refused (GDR_ACK_MISMATCH) */
  int mismatches = 0, accept_errors = 0;
  size_t got[NCONN];
  int n = 1 + fz_u8(in) % NCONN, pending = n;
  double end;

  if (gdr_core_listen(NULL, 0, hbuf, &l) != ncclSuccess) fz_fail("listen failed");
  memcpy(&lh, hbuf, sizeof(lh));
  if (gdr_handle_check(&lh, &to) != ncclSuccess) fz_fail("the listener's own handle does not check");
  for (int i = 0; i < n; i++) {
    uint8_t flags = fz_u8(in);
    size_t len = fz_u8(in) % (sizeof(struct gdr_hello) + 17);
    uint8_t buf[sizeof(struct gdr_hello) + 16];
    struct gdr_hello h;
    fz_bytes(in, buf, len);
    memcpy(&h, buf, sizeof(h));
    if (flags & 1) {
      h.magic = GDR_HELLO_MAGIC;
      h.version = GDR_HANDLE_VERSION;
      h.transport = GDR_TP_TCP;
    }
    if (flags & 2) h.nonce = lh.nonce;
    if (flags & 4) {
      struct tcp_proto me;
      gdr_tcp_proto_local(&me);
      memcpy(h.tp_data, &me, sizeof(me));
    }
    if (flags & 7) {
      memcpy(buf, &h, sizeof(h));
      if (len < sizeof(h)) len = sizeof(h);
    }
    expect_ack[i] = hello_ok(&h, len, lh.nonce);
    expect_mm[i] = hello_mismatch(&h, len, lh.nonce);
    mismatches += expect_mm[i];
    state[i] = 0;
    got[i] = 0;
    fd[i] = fz_socket_connect(&to);
    if (fd[i] < 0) fz_fail("cannot connect to the listener");
    if (fz_write_all(fd[i], buf, len, 5.0) != 0) fz_fail("cannot write to the listener");
    if (!(flags & 8)) shutdown(fd[i], SHUT_WR); /* else the listener must time the silence out */
  }
  end = fz_now() + 5.0;
  while (pending > 0) {
    void *r = NULL;
    ncclResult_t ar = gdr_core_accept(l, &r);
    if (ar != ncclSuccess && (ar != ncclInvalidUsage || ++accept_errors > mismatches))
      fz_fail("accept failed on a working listener (%d error(s), %d mismatched HELLO(s))", accept_errors, mismatches);
    if (r != NULL && gdr_core_close_recv(r) != ncclSuccess) fz_fail("closeRecv failed");
    for (int i = 0; i < n; i++) {
      struct gdr_hello_ack ack;
      ssize_t k;
      if (state[i] != 0) continue;
      k = recv(fd[i], (char *)&ack + got[i], sizeof(ack) - got[i], MSG_DONTWAIT);
      if (k > 0) got[i] += (size_t)k;
      if (got[i] == sizeof(ack)) {
        if (ack.magic == GDR_ACK_MAGIC && ack.status == GDR_ACK_MISMATCH && expect_mm[i])
          state[i] = 3;
        else if (ack.magic != GDR_ACK_MAGIC || ack.status != 0)
          fz_fail("connection %d: a malformed ACK", i);
        else
          state[i] = 1;
      } else if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        state[i] = 2;
      }
      if (state[i] != 0) {
        pending--;
        if (expect_mm[i] && state[i] == 1) fz_fail("connection %d: a HELLO of the other transport was ACKed", i);
        if (!expect_mm[i] && (state[i] == 1) != expect_ack[i])
          fz_fail("connection %d: a HELLO the rules %s was %s", i, expect_ack[i] ? "accept" : "reject",
                  state[i] == 1 ? "ACKed" : "closed unACKed");
      }
    }
    if (fz_now() > end) fz_fail("the listener neither answered nor closed %d connection(s) within 5 s", pending);
  }
  if (gdr_core_close_listen(l) != ncclSuccess) fz_fail("closeListen failed");
  for (int i = 0; i < n; i++) fz_close(&fd[i]);
}

static void connector_side(struct fz_in *in) {
  char hbuf[NCCL_NET_HANDLE_MAXSIZE];
  struct gdr_handle h;
  union gdr_sockaddr me;
  int lfd, fd[2] = {-1, -1}, answered[2] = {0, 0}, ok = 1, failed = 0;
  size_t hgot[2] = {0, 0};
  uint8_t ackb[2][sizeof(struct gdr_hello_ack) + 8];
  size_t acklen[2];
  uint8_t shut[2];
  void *s = NULL;
  double start, end;

  for (int i = 0; i < 2; i++) {
    uint8_t flags = fz_u8(in);
    struct gdr_hello_ack a;
    acklen[i] = fz_u8(in) % (sizeof(ackb[i]) + 1);
    fz_bytes(in, ackb[i], acklen[i]);
    memcpy(&a, ackb[i], sizeof(a));
    if (flags & 1) a.magic = GDR_ACK_MAGIC;
    if (flags & 2) a.status = 0;
    if (flags & 3) {
      memcpy(ackb[i], &a, sizeof(a));
      if (acklen[i] < sizeof(a)) acklen[i] = sizeof(a);
    }
    shut[i] = flags & 4;
    if (acklen[i] < sizeof(a) || a.magic != GDR_ACK_MAGIC || a.status != 0) ok = 0;
  }
  lfd = fz_socket_listen(&me);
  if (lfd < 0) fz_fail("cannot listen on 127.0.0.1");
  fz_tcp_handle(&h, &me, 77, 1, 1);
  memcpy(hbuf, &h, sizeof(h));
  start = fz_now();
  end = start + 5.0;
  while (s == NULL && !failed) {
    if (gdr_core_connect(NULL, 0, -1, hbuf, &s) != ncclSuccess) failed = 1;
    for (int i = 0; i < 2; i++) {
      struct gdr_hello hello;
      if (fd[i] < 0) fd[i] = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd[i] < 0 || answered[i]) continue;
      if (hgot[i] < sizeof(hello)) {
        ssize_t k = recv(fd[i], &hello, sizeof(hello) - hgot[i], MSG_DONTWAIT);
        if (k > 0) hgot[i] += (size_t)k;
        if (hgot[i] < sizeof(hello)) continue;
      }
      (void)fz_write(fd[i], ackb[i], acklen[i]);
      if (shut[i]) shutdown(fd[i], SHUT_WR);
      answered[i] = 1;
    }
    if (fz_now() > end) fz_fail("connect neither completed nor failed within 5 s");
  }
  /* (a connect that failed only after GDRNET_CONNECT_TIMEOUT_MS may have timed out on a loaded machine: no verdict) */
  if (s == NULL ? ok && fz_now() - start < fz_connect_ms / 1000.0 : !ok)
    fz_fail("connect %s although the ACKs were %s", s ? "succeeded" : "failed", ok ? "well-formed" : "not");
  if (s != NULL && gdr_core_close_send(s) != ncclSuccess) fz_fail("closeSend failed");
  for (int i = 0; i < 2; i++) fz_close(&fd[i]);
  close(lfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  if (fz_u8(&in) & 1)
    connector_side(&in);
  else
    listener_side(&in);
  return 0;
}
