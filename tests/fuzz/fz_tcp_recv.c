/* Target tcp_recv: what a TCP receive comm reads from its sender. A real receive comm of the plugin (listen and
 * accept through the core, fz_tcp_recv_comm) whose sender is the fuzzer: it writes raw or structured control
 * messages (INLINE, EAGER with payload, RTS, ERR_SIZE, anything else) on the control stream and raw or structured
 * chunks (CHNK headers) on the data streams, while the plugin's own irecv/test run. The parsers are the plugin's:
 * the control stream in test() (tcp_p2p.c rx_consume), the chunk headers in the helper thread.
 *
 * Input: a flags byte (bit 0: the sender announces the eager feature, else it is a version-1 peer), then ops:
 *   0 irecv of one buffer or of a group of up to 8, fuzzed sizes (exactly that much heap: ASan sees any overflow)
 *   1 raw control bytes       2 a control header {type, aux, seq, size} and up to 255 payload bytes
 *   3 raw bytes on a data stream   4 a chunk header {magic, len, seq, off, total} and up to 255 payload bytes
 *   5 test() of every outstanding receive   6 read what the plugin sent (CTS, GRANT, CREDIT, ERR_RECV)
 * then the sender hangs up. Invariants: a receive completes with its buffer count and at most each buffer's posted
 * size; after the hangup every
 * outstanding receive completes or fails within 10 s; the buffer of a completed receive is free()d at once (as
 * NCCL reuses it): nothing may write into it afterwards (ASan); close leaves nothing open or running. */
#include "fz.h"

#include <stdlib.h>

#include "core.h"
#include "transport.h"
#include "tcp/tcp.h"

#define NREQ 40 /* more than the 32 the comm takes: irecv must refuse the rest */
#define MAXOPS 96

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_core_init_tcp(10000);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  struct fz_tcp_peer p;
  struct fz_req rq[NREQ];
  int nrq = 0, ops = 0;

  memset(rq, 0, sizeof(rq));
  fz_tcp_recv_comm(&p, fz_u8(&in) & 1);
  while (fz_left(&in) && ops++ < MAXOPS) {
    switch (fz_u8(&in) % 7) {
    case 0: { /* irecv of 1 buffer, or of a group of up to 8 (tags 0..n-1) */
      struct fz_req *r = nrq < NREQ ? &rq[nrq] : NULL;
      void *dp[TCP_MAX_RECVS];
      size_t sz[TCP_MAX_RECVS];
      int tags[TCP_MAX_RECVS];
      if (r == NULL) break;
      r->n = fz_u8(&in) % 4 == 0 ? 1 + fz_u8(&in) % TCP_MAX_RECVS : 1;
      for (int i = 0; i < r->n; i++) {
        r->size[i] = fz_msg_size(&in);
        r->buf[i] = malloc(r->size[i] ? r->size[i] : 1);
        if (r->buf[i] == NULL) fz_fail("out of memory");
        dp[i] = r->buf[i];
        sz[i] = r->size[i];
        tags[i] = i;
      }
      if (gdr_core_irecv(p.comm, r->n, dp, sz, tags, NULL, NULL, &r->req) != ncclSuccess) r->req = NULL;
      if (r->req == NULL)
        fz_req_free(r);
      else
        nrq++;
      break;
    }
    case 1: fz_op_raw(&in, p.ctrl); break;
    case 2: fz_op_ctrl(&in, p.ctrl); break;
    case 3: fz_op_raw(&in, p.data[fz_u8(&in) % p.nsocks]); break;
    case 4: {
      uint8_t buf[sizeof(struct tcp_chunk_hdr) + 256];
      struct tcp_chunk_hdr h;
      size_t k;
      int s = fz_u8(&in) % p.nsocks;
      h.magic = fz_u8(&in) & 1 ? fz_u32(&in) : TCP_CHUNK_MAGIC;
      h.len = fz_u8(&in) & 1 ? fz_u32(&in) : fz_u16(&in);
      h.seq = fz_u8(&in) % 48;
      h.off = fz_u8(&in) & 1 ? fz_u64(&in) : fz_u16(&in);
      h.total = fz_u8(&in) & 1 ? fz_u64(&in) : fz_msg_size(&in);
      memcpy(buf, &h, sizeof(h));
      k = fz_bytes(&in, buf + sizeof(h), fz_u8(&in));
      (void)fz_write(p.data[s], buf, sizeof(h) + k);
      break;
    }
    case 5:
      for (int i = 0; i < nrq; i++)
        if (rq[i].req != NULL) (void)fz_req_test(&rq[i]);
      break;
    default: (void)fz_drain(p.ctrl); break;
    }
  }
  /* the sender goes away: whatever is outstanding must complete or fail, in bounded time */
  fz_tcp_peer_hangup(&p);
  fz_reqs_finish(rq, nrq);
  if (gdr_core_close_recv(p.comm) != ncclSuccess) fz_fail("closeRecv failed");
  for (int i = 0; i < nrq; i++) fz_req_free(&rq[i]);
  return 0;
}
