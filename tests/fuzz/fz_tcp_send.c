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

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_core_init_tcp(10000);
  return 0;
}

static void drain_all(struct fz_tcp_peer *p) {
  (void)fz_drain(p->ctrl);
  for (int i = 0; i < p->nsocks; i++) (void)fz_drain(p->data[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  struct fz_tcp_peer p;
  struct fz_req sq[NREQ];
  struct fz_req pend; /* an isend the comm said "later" to */
  int nsq = 0, ops = 0;

  memset(sq, 0, sizeof(sq));
  memset(&pend, 0, sizeof(pend));
  fz_tcp_send_comm(&p, fz_u8(&in) & 1);
  while (fz_left(&in) && ops++ < MAXOPS) {
    int op = fz_u8(&in) % 5;
    if (op == 0 && pend.n == 0 && nsq < NREQ) {
      pend.is_send = 1;
      pend.n = 1;
      pend.size[0] = fz_msg_size(&in);
      pend.buf[0] = calloc(1, pend.size[0] ? pend.size[0] : 1);
      if (pend.buf[0] == NULL) fz_fail("out of memory");
    }
    if ((op == 0 || op == 3) && pend.n == 1) {
      if (gdr_core_isend(p.comm, pend.buf[0], pend.size[0], 0, NULL, NULL, &pend.req) != ncclSuccess) pend.req = NULL;
      if (pend.req != NULL) {
        sq[nsq++] = pend;
        memset(&pend, 0, sizeof(pend));
      }
    }
    switch (op) {
    case 1: fz_op_raw(&in, p.ctrl); break;
    case 2: fz_op_ctrl(&in, p.ctrl); break;
    case 3:
      for (int i = 0; i < nsq; i++)
        if (sq[i].req != NULL) (void)fz_req_test(&sq[i]);
      break;
    case 4: drain_all(&p); break;
    default: break;
    }
  }
  /* the receiver goes away: outstanding sends complete or fail in bounded time */
  drain_all(&p);
  fz_tcp_peer_hangup(&p);
  fz_reqs_finish(sq, nsq);
  if (gdr_core_close_send(p.comm) != ncclSuccess) fz_fail("closeSend failed");
  for (int i = 0; i < nsq; i++) fz_req_free(&sq[i]);
  fz_req_free(&pend);
  return 0;
}
