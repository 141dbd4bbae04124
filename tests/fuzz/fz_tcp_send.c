/* Target tcp_send: what a TCP send comm reads from its receiver. A real send comm of the plugin (connect through
 * the core, fz_tcp_send_comm) whose receiver is the fuzzer: it writes raw or structured control messages (CTS,
 * GRANT, CREDIT, ERR_RECV, anything else) on the control stream while the plugin's own isend/test run, and reads
 * (discards) what the plugin sends. The parser is the plugin's (tcp_p2p.c rx_message_send, reached from isend and
 * test).
 *
 * Input: a flags byte (bit 0: the receiver's handle announces the eager feature), then ops:
 *   0 isend of a fuzzed size (retried while isend says "later")   1 raw control bytes
 *   2 a control header {type, aux, seq, size} and up to 255 payload bytes   3 test() of every outstanding send
 *   4 read what the plugin sent on every stream
 * then the receiver hangs up. Invariants: a send completes with its own size; after the hangup every outstanding
 * send completes or fails within 10 s; a completed send's buffer is free()d at once (ASan: nothing reads it
 * afterwards); close leaves nothing open or running. */
#include "fz.h"

#include <stdlib.h>

#include "core.h"
#include "transport.h"
#include "tcp/tcp.h"

#define NREQ 40
#define MAXOPS 96

struct sq {
  void *req;
  uint8_t *buf;
  size_t size;
};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_core_init_tcp(10000);
  return 0;
}

static size_t fuzz_size(struct fz_in *in) {
  uint8_t k = fz_u8(in);
  if (k & 0x80) return fz_u32(in) % (192u << 10);
  return fz_u16(in) % 8192;
}

static int test_one(struct sq *s) {
  size_t sizes[GDR_MAX_RECVS] = {0};
  int done = 0, n = 0;
  if (gdr_core_test(s->req, &done, sizes, &n) != ncclSuccess) {
    s->req = NULL;
    return 1;
  }
  if (!done) return 0;
  if (n != 1 || sizes[0] != s->size) fz_fail("a send of %zu bytes completed with %zu bytes (n %d)", s->size, sizes[0], n);
  free(s->buf);
  s->buf = NULL;
  s->req = NULL;
  return 1;
}

static void drain_all(struct fz_tcp_peer *p) {
  (void)fz_drain(p->ctrl);
  for (int i = 0; i < p->nsocks; i++) (void)fz_drain(p->data[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  struct fz_tcp_peer p;
  struct sq sq[NREQ];
  struct sq pend = {NULL, NULL, 0}; /* an isend the comm said "later" to */
  int nsq = 0, ops = 0;
  double end;

  memset(sq, 0, sizeof(sq));
  fz_tcp_send_comm(&p, fz_u8(&in) & 1);
  while (fz_left(&in) && ops++ < MAXOPS) {
    uint8_t buf[32 + 256]; /* a chunk or control header and up to 255 payload bytes */
    size_t k;
    int op = fz_u8(&in) % 5;
    if (op == 0 && pend.buf == NULL && nsq < NREQ) {
      pend.size = fuzz_size(&in);
      pend.buf = calloc(1, pend.size ? pend.size : 1);
      if (pend.buf == NULL) fz_fail("out of memory");
    }
    if ((op == 0 || op == 3) && pend.buf != NULL) {
      if (gdr_core_isend(p.comm, pend.buf, pend.size, 0, NULL, &pend.req) != ncclSuccess) pend.req = NULL;
      if (pend.req != NULL) {
        sq[nsq++] = pend;
        pend.buf = NULL;
        pend.req = NULL;
      }
    }
    switch (op) {
    case 1:
      k = fz_bytes(&in, buf, fz_u8(&in));
      (void)fz_write(p.ctrl, buf, k);
      break;
    case 2: {
      struct tcp_ctrl_hdr h;
      h.type = fz_u8(&in) % 10;
      h.aux = fz_u8(&in) & 1 ? fz_u32(&in) : fz_u8(&in);
      h.seq = fz_u8(&in) & 1 ? fz_u64(&in) : fz_u8(&in) % 48;
      h.size = fz_u8(&in) & 1 ? fz_u64(&in) : fuzz_size(&in);
      memcpy(buf, &h, sizeof(h));
      k = fz_bytes(&in, buf + sizeof(h), fz_u8(&in));
      (void)fz_write(p.ctrl, buf, sizeof(h) + k);
      break;
    }
    case 3:
      for (int i = 0; i < nsq; i++)
        if (sq[i].req != NULL) (void)test_one(&sq[i]);
      break;
    case 4:
      drain_all(&p);
      break;
    default:
      break;
    }
  }
  /* the receiver goes away: outstanding sends complete or fail in bounded time */
  drain_all(&p);
  fz_tcp_peer_hangup(&p);
  end = fz_now() + 10.0;
  for (int left = 1; left;) {
    left = 0;
    for (int i = 0; i < nsq; i++)
      if (sq[i].req != NULL && !test_one(&sq[i])) left = 1;
    if (left && fz_now() > end) fz_fail("sends neither completed nor failed within 10 s of the receiver's hangup");
  }
  if (gdr_core_close_send(p.comm) != ncclSuccess) fz_fail("closeSend failed");
  for (int i = 0; i < nsq; i++) free(sq[i].buf);
  free(pend.buf);
  return 0;
}
