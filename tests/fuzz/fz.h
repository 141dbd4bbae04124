/* Shared pieces of the fuzz targets (tests/fuzz/README.md).
 *
 * Every target is one fz_<name>.c defining LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize where it sets the
 * plugin up once). Each drives the plugin's real parsing code on bytes a peer could send: through real comms and
 * sockets (the TCP transport, the listener), or, where a parser needs verbs, on a comm whose NIC is a fake in this
 * directory (fz_rdma_cts.c) -- never a copy of the parser. An input must leave nothing behind (fds, memory,
 * threads): LeakSanitizer runs after every input.
 *
 * Built two ways (CMakeLists.txt): with libFuzzer in the fuzz build (-DGDRNET_FUZZ=ON, clang), and in every other
 * build with replay_main.c, which runs the inputs of tests/fuzz/corpus/<name>/ once (CTest fuzz_replay.<name>), so
 * that each regression input kept there is a test of every build. */
#ifndef GDRNET_FZ_H
#define GDRNET_FZ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gdrnet/net_v8.h"
#include "sock.h"
#include "transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ------------------------------------------------------------------------------------------- the input -- */

struct fz_in {
  const uint8_t *p;
  size_t n;
};

static inline int fz_left(const struct fz_in *in) { return in->n > 0; }

static inline uint8_t fz_u8(struct fz_in *in) {
  uint8_t v = 0;
  if (in->n > 0) {
    v = in->p[0];
    in->p++;
    in->n--;
  }
  return v;
}

static inline uint16_t fz_u16(struct fz_in *in) { return (uint16_t)(fz_u8(in) | (unsigned)fz_u8(in) << 8); }

static inline uint32_t fz_u32(struct fz_in *in) { return (uint32_t)fz_u16(in) | (uint32_t)fz_u16(in) << 16; }

static inline uint64_t fz_u64(struct fz_in *in) { return (uint64_t)fz_u32(in) | (uint64_t)fz_u32(in) << 32; }

/* Up to max bytes into out (the rest zero); returns how many came from the input. */
static inline size_t fz_bytes(struct fz_in *in, void *out, size_t max) {
  size_t k = in->n < max ? in->n : max;
  memcpy(out, in->p, k);
  memset((char *)out + k, 0, max - k);
  in->p += k;
  in->n -= k;
  return k;
}

/* ------------------------------------------------------------------------------------------- helpers -- */

/* An invariant of the plugin does not hold: prints why and aborts (libFuzzer keeps the input as a crash). */
void fz_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* The plugin's logger for the targets: WARN and INFO lines are dropped (a rejected input WARNs, by design) unless
 * FZ_VERBOSE is set; counts WARNs. */
void fz_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...);
extern unsigned long fz_nwarn;

/* Sets the knobs the targets run with (where the environment has not set them: GDRNET_TRANSPORT=tcp,
 * GDRNET_SOCKET_IFNAME=lo, GDRNET_CONNECT_TIMEOUT_MS=connect_ms, 2 TCP streams and 1 helper thread, small eager and
 * chunk sizes) and initialises the core once, over TCP. A target whose inputs may leave a connect waiting for its
 * timeout uses a short one (100, the least); one that only sets up well-formed connections a long one (a loaded
 * machine must not fail them). */
void fz_core_init_tcp(int connect_ms);
extern int fz_connect_ms; /* the GDRNET_CONNECT_TIMEOUT_MS in force */
/* Only installs fz_logger (for targets that call transport functions without the core). */
void fz_quiet_log(void);

double fz_now(void); /* CLOCK_MONOTONIC, seconds */

/* Sockets of the harness (the fuzzed peer): non-blocking, CLOEXEC. */
int fz_socket_connect(const union gdr_sockaddr *to); /* -1 on failure */
int fz_socket_listen(union gdr_sockaddr *bound);     /* 127.0.0.1, ephemeral port; -1 on failure */
/* Writes what the socket takes now (non-blocking); returns bytes written (0 if full or broken). */
size_t fz_write(int fd, const void *buf, size_t len);
/* Writes all of buf, waiting up to timeout_s for room; 0 ok, -1 broken or timed out. */
int fz_write_all(int fd, const void *buf, size_t len, double timeout_s);
/* Reads and discards what is readable now; returns 1 if the peer closed (EOF or reset), else 0. */
int fz_drain(int fd);
/* Reads exactly len bytes within timeout_s; 0 ok, -1 EOF/error/timeout. */
int fz_read_all(int fd, void *buf, size_t len, double timeout_s);
void fz_close(int *fd); /* closes and sets -1 (nothing if already -1) */

/* A handle for a raw listener of the harness at me (TCP, the given stream count, 1 helper thread; the TCP protocol
 * data of a current plugin if eager, else zeros as from a version-1 plugin). */
void fz_tcp_handle(struct gdr_handle *h, const union gdr_sockaddr *me, uint64_t nonce, int nstreams, int eager);

/* The ops tcp_recv and tcp_send share: a fuzzed message size (small, eager/inline-sized, or up to 192 KiB chunked),
 * raw bytes, and a control header {type, aux, seq, size} with up to 255 payload bytes, written to fd. */
size_t fz_msg_size(struct fz_in *in);
void fz_op_raw(struct fz_in *in, int fd);
void fz_op_ctrl(struct fz_in *in, int fd);

/* --------------------------------------------------------------------------- a TCP comm with a fuzzed peer -- */

#define FZ_MAX_STREAMS 8

/* The plugin's end (a core comm: send or recv) and the harness's raw ends of its streams. */
struct fz_tcp_peer {
  void *comm;
  int ctrl;
  int data[FZ_MAX_STREAMS];
  int nsocks;
};

/* A real receive comm of the plugin (listen + accept), whose sender is the harness: it connects the control and
 * data streams with well-formed HELLOs (TCP protocol data of a current plugin if eager_sender, else of a version-1
 * plugin: zeros) and reads the ACKs. The plugin failing to accept a well-formed peer is an fz_fail. */
void fz_tcp_recv_comm(struct fz_tcp_peer *p, int eager_sender);
/* A real send comm of the plugin (connect), whose receiver is the harness: it listens, hands the plugin a handle
 * (TCP protocol data of a current plugin if eager_receiver, else zeros), accepts the streams and ACKs them. */
void fz_tcp_send_comm(struct fz_tcp_peer *p, int eager_receiver);
/* Closes the harness's ends (the plugin sees EOF), then nothing else. */
void fz_tcp_peer_hangup(struct fz_tcp_peer *p);

/* An outstanding request of the core (a send: n = 1) with its buffers, exactly as large as posted. */
struct fz_req {
  void *req; /* NULL once finished */
  int is_send, n;
  uint8_t *buf[GDR_MAX_RECVS];
  size_t size[GDR_MAX_RECVS];
};
/* One test() of r; 1 when it is finished: failed (the comm's error), or completed with n buffers, a send with its
 * size and a receive with at most each buffer's posted size (else fz_fail), and its buffers freed at once (as NCCL
 * reuses them: nothing may touch them afterwards). */
int fz_req_test(struct fz_req *r);
void fz_req_free(struct fz_req *r); /* its buffers */
/* After the peer hung up: tests every outstanding request until it is finished; fz_fail after 10 s. */
void fz_reqs_finish(struct fz_req *r, int n);

#endif /* GDRNET_FZ_H */
