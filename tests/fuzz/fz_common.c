/* Shared pieces of the fuzz targets (fz.h). */
#include "fz.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "param.h"
#include "tcp/tcp.h"

unsigned long fz_nwarn;

void fz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fz: invariant broken: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

void fz_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  static int verbose = -1;
  (void)flags;
  if (level == NCCL_LOG_WARN) __atomic_add_fetch(&fz_nwarn, 1, __ATOMIC_RELAXED);
  if (__atomic_load_n(&verbose, __ATOMIC_RELAXED) < 0)
    __atomic_store_n(&verbose, getenv("FZ_VERBOSE") != NULL, __ATOMIC_RELAXED);
  if (__atomic_load_n(&verbose, __ATOMIC_RELAXED)) {
    va_list ap;
    char msg[1024];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[%s] %s (%s:%d)\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", msg, file, line);
  }
}

void fz_quiet_log(void) { gdr_log_init(fz_logger); }

double fz_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fz_connect_ms;

void fz_core_init_tcp(int connect_ms) {
  static const char *const knobs[][2] = {
      {"GDRNET_TRANSPORT", "tcp"},       {"GDRNET_SOCKET_IFNAME", "lo"},   {"GDRNET_SOCKET_FAMILY", "AF_INET"},
      {"GDRNET_TCP_NSOCKS", "2"},        {"GDRNET_TCP_NTHREADS", "1"},     {"GDRNET_TCP_INLINE", "4096"},
      {"GDRNET_TCP_EAGER_CREDITS", "4"}, {"GDRNET_TCP_MIN_CHUNK", "4096"}, {"GDRNET_TCP_MAX_CHUNK", "16384"},
      {"GDRNET_TCP_TIMEOUT_MS", "5000"},
  };
  char ms[32];
  int ndev = 0;
  for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) setenv(knobs[i][0], knobs[i][1], 0);
  snprintf(ms, sizeof(ms), "%d", connect_ms);
  setenv("GDRNET_CONNECT_TIMEOUT_MS", ms, 0);
  fz_connect_ms = atoi(getenv("GDRNET_CONNECT_TIMEOUT_MS"));
  if (gdr_core_init(fz_logger) != ncclSuccess || gdr_core_devices(&ndev) != ncclSuccess || ndev < 1)
    fz_fail("the plugin does not initialise over TCP on lo (%d devices)", ndev);
  if (atexit(gdr_core_fini) != 0) fz_fail("atexit failed"); /* what the library's unload does, for LeakSanitizer */
}

/* ------------------------------------------------------------------------------------------- sockets -- */

/* Closes with a reset (SO_LINGER 0): thousands of connections a second would otherwise leave as many in TIME-WAIT
 * and use up the loopback's ephemeral ports within a CI run ("cannot listen on 127.0.0.1"). A listening socket or
 * a non-socket ignores the option. */
void fz_close(int *fd) {
  if (*fd >= 0) {
    struct linger lg = {1, 0};
    (void)setsockopt(*fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(*fd);
  }
  *fd = -1;
}

int fz_socket_connect(const union gdr_sockaddr *to) {
  int fd = socket(to->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, &to->sa, gdr_sockaddr_len(to)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

int fz_socket_listen(union gdr_sockaddr *bound) {
  socklen_t len = sizeof(*bound);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  memset(bound, 0, sizeof(*bound));
  bound->sin.sin_family = AF_INET;
  bound->sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, &bound->sa, sizeof(bound->sin)) != 0 || listen(fd, 64) != 0 || getsockname(fd, &bound->sa, &len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

size_t fz_write(int fd, const void *buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(fd, (const char *)buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += (size_t)n;
  }
  return off;
}

int fz_write_all(int fd, const void *buf, size_t len, double timeout_s) {
  size_t off = 0;
  double end = fz_now() + timeout_s;
  while (off < len) {
    struct pollfd p = {fd, POLLOUT, 0};
    off += fz_write(fd, (const char *)buf + off, len - off);
    if (off == len) break;
    if (fz_now() > end) return -1;
    if (poll(&p, 1, 10) < 0 && errno != EINTR) return -1;
    if (p.revents & (POLLERR | POLLHUP)) return -1;
  }
  return 0;
}

int fz_drain(int fd) {
  char buf[65536];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) return 1;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
  }
}

int fz_read_all(int fd, void *buf, size_t len, double timeout_s) {
  size_t off = 0;
  double end = fz_now() + timeout_s;
  while (off < len) {
    struct pollfd p = {fd, POLLIN, 0};
    ssize_t n = recv(fd, (char *)buf + off, len - off, MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n == 0) return -1;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (fz_now() > end) return -1;
    if (poll(&p, 1, 10) < 0 && errno != EINTR) return -1;
  }
  return 0;
}

void fz_tcp_handle(struct gdr_handle *h, const union gdr_sockaddr *me, uint64_t nonce, int nstreams, int eager) {
  memset(h, 0, sizeof(*h));
  h->magic = GDR_HANDLE_MAGIC;
  h->version = GDR_HANDLE_VERSION;
  h->transport = GDR_TP_TCP;
  h->caps = GDR_CAP_TCP;
  h->nonce = nonce;
  h->addr.family = AF_INET;
  h->addr.port = me->sin.sin_port;
  memcpy(h->addr.addr, &me->sin.sin_addr, 4);
  h->nstreams = (uint16_t)nstreams;
  h->nthreads = 1;
  if (eager) {
    struct tcp_proto tp;
    gdr_tcp_proto_local(&tp);
    memcpy(h->tp_data, &tp, sizeof(tp));
  }
}

size_t fz_msg_size(struct fz_in *in) {
  uint8_t k = fz_u8(in);
  if (k & 0x80) return fz_u32(in) % (192u << 10); /* chunked: above GDRNET_TCP_INLINE=4096 */
  return fz_u16(in) % 8192;                       /* eager/inline and just above */
}

void fz_op_raw(struct fz_in *in, int fd) {
  uint8_t buf[256];
  size_t k = fz_bytes(in, buf, fz_u8(in));
  (void)fz_write(fd, buf, k);
}

void fz_op_ctrl(struct fz_in *in, int fd) {
  uint8_t buf[sizeof(struct tcp_ctrl_hdr) + 256];
  struct tcp_ctrl_hdr h;
  size_t k;
  memset(&h, 0, sizeof(h));
  h.type = fz_u8(in) % 10;
  h.aux = fz_u8(in) & 1 ? fz_u32(in) : fz_u8(in);
  h.seq = fz_u8(in) & 1 ? fz_u64(in) : fz_u8(in) % 48;
  h.size = fz_u8(in) & 1 ? fz_u64(in) : fz_msg_size(in);
  h.id = fz_u8(in) & 1 ? fz_u64(in) : fz_u8(in) % 48;
  memcpy(buf, &h, sizeof(h));
  k = fz_bytes(in, buf + sizeof(h), fz_u8(in));
  (void)fz_write(fd, buf, sizeof(h) + k);
}

/* --------------------------------------------------------------------------- a TCP comm with a fuzzed peer -- */

static void peer_init(struct fz_tcp_peer *p) {
  memset(p, 0, sizeof(*p));
  p->ctrl = -1;
  for (int i = 0; i < FZ_MAX_STREAMS; i++) p->data[i] = -1;
}

void fz_tcp_peer_hangup(struct fz_tcp_peer *p) {
  fz_close(&p->ctrl);
  for (int i = 0; i < FZ_MAX_STREAMS; i++) fz_close(&p->data[i]);
}

void fz_tcp_recv_comm(struct fz_tcp_peer *p, int eager_sender) {
  char hbuf[NCCL_NET_HANDLE_MAXSIZE];
  struct gdr_handle h;
  union gdr_sockaddr to;
  void *l = NULL;
  double end = fz_now() + 20.0;

  peer_init(p);
  if (gdr_core_listen(NULL, 0, hbuf, &l) != ncclSuccess) fz_fail("listen failed");
  memcpy(&h, hbuf, sizeof(h));
  if (gdr_handle_check(&h, &to) != ncclSuccess) fz_fail("the listener's own handle does not check");
  p->nsocks = h.nstreams;
  if (p->nsocks < 1 || p->nsocks > FZ_MAX_STREAMS) fz_fail("the listener wants %d data streams", p->nsocks);
  for (int i = 0; i <= p->nsocks; i++) {
    struct gdr_hello hello;
    int *fd = i == 0 ? &p->ctrl : &p->data[i - 1];
    memset(&hello, 0, sizeof(hello));
    hello.magic = GDR_HELLO_MAGIC;
    hello.version = GDR_HANDLE_VERSION;
    hello.transport = GDR_TP_TCP;
    hello.kind = i == 0 ? GDR_STREAM_CTRL : GDR_STREAM_DATA;
    hello.nonce = h.nonce;
    hello.conn_id = 0x465a46465a46465aull;
    hello.stream = (uint16_t)i;
    hello.nstreams = (uint16_t)p->nsocks;
    hello.caps = GDR_CAP_TCP;
    if (eager_sender) {
      struct tcp_proto me;
      gdr_tcp_proto_local(&me);
      memcpy(hello.tp_data, &me, sizeof(me));
    }
    *fd = fz_socket_connect(&to);
    if (*fd < 0 || fz_write_all(*fd, &hello, sizeof(hello), 20.0) != 0) fz_fail("cannot say HELLO to the listener");
  }
  while (p->comm == NULL) {
    if (gdr_core_accept(l, &p->comm) != ncclSuccess) fz_fail("accept of a well-formed sender failed");
    if (fz_now() > end) fz_fail("accept of a well-formed sender did not complete within 20 s");
  }
  for (int i = 0; i <= p->nsocks; i++) {
    struct gdr_hello_ack ack;
    if (fz_read_all(i == 0 ? p->ctrl : p->data[i - 1], &ack, sizeof(ack), 20.0) != 0 || ack.magic != GDR_ACK_MAGIC)
      fz_fail("no ACK for stream %d", i);
  }
  if (gdr_core_close_listen(l) != ncclSuccess) fz_fail("closeListen failed");
}

void fz_tcp_send_comm(struct fz_tcp_peer *p, int eager_receiver) {
  char hbuf[NCCL_NET_HANDLE_MAXSIZE];
  struct gdr_handle h;
  union gdr_sockaddr me;
  struct {
    int fd;
    size_t got;
    struct gdr_hello hello;
  } pend[1 + FZ_MAX_STREAMS];
  int npend = 0, lfd;
  double end = fz_now() + 20.0;

  peer_init(p);
  p->nsocks = 2;
  lfd = fz_socket_listen(&me);
  if (lfd < 0) fz_fail("cannot listen on 127.0.0.1");
  fz_tcp_handle(&h, &me, 0x5a46465a5a46465aull, p->nsocks, eager_receiver);
  memcpy(hbuf, &h, sizeof(h));
  while (p->comm == NULL) {
    if (gdr_core_connect(NULL, 0, -1, hbuf, &p->comm) != ncclSuccess)
      fz_fail("connect to a well-formed listener failed");
    if (fz_now() > end) fz_fail("connect to a well-formed listener did not complete within 20 s");
    while (npend < 1 + p->nsocks) {
      int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      pend[npend].fd = fd;
      pend[npend].got = 0;
      npend++;
    }
    for (int i = 0; i < npend; i++) {
      ssize_t n;
      struct gdr_hello_ack ack = {GDR_ACK_MAGIC, GDR_HANDLE_VERSION, 0, GDR_CAP_TCP, 0};
      int s;
      if (pend[i].fd < 0) continue;
      n = recv(pend[i].fd, (char *)&pend[i].hello + pend[i].got, sizeof(pend[i].hello) - pend[i].got, MSG_DONTWAIT);
      if (n > 0) pend[i].got += (size_t)n;
      if (pend[i].got < sizeof(pend[i].hello)) continue;
      s = pend[i].hello.stream;
      if (s > p->nsocks || (s == 0 ? p->ctrl : p->data[s - 1]) >= 0)
        fz_fail("the plugin sent a bad HELLO (stream %d)", s);
      if (fz_write_all(pend[i].fd, &ack, sizeof(ack), 20.0) != 0) fz_fail("cannot ACK stream %d", s);
      if (s == 0)
        p->ctrl = pend[i].fd;
      else
        p->data[s - 1] = pend[i].fd;
      pend[i].fd = -1;
    }
  }
  for (int i = 0; i < npend; i++) fz_close(&pend[i].fd);
  close(lfd);
}

/* ------------------------------------------------------------------------------------------- requests -- */

void fz_req_free(struct fz_req *r) {
  for (int i = 0; i < r->n; i++) {
    free(r->buf[i]);
    r->buf[i] = NULL;
  }
}

int fz_req_test(struct fz_req *r) {
  size_t sizes[GDR_MAX_RECVS] = {0};
  int done = 0, n = 0;
  if (gdr_core_test(r->req, &done, sizes, &n) != ncclSuccess) {
    r->req = NULL; /* failed: the comm's error; close frees it */
    return 1;
  }
  if (!done) return 0;
  if (n != r->n) fz_fail("a %s of %d buffers completed with %d", r->is_send ? "send" : "receive", r->n, n);
  for (int i = 0; i < n; i++)
    if (r->is_send ? sizes[i] != r->size[i] : sizes[i] > r->size[i])
      fz_fail("buffer %d of a %s of %zu bytes completed with %zu bytes", i, r->is_send ? "send" : "receive", r->size[i],
              sizes[i]);
  fz_req_free(r);
  r->req = NULL;
  return 1;
}

void fz_reqs_finish(struct fz_req *r, int n) {
  double end = fz_now() + 10.0;
  for (int left = 1; left;) {
    left = 0;
    for (int i = 0; i < n; i++)
      if (r[i].req != NULL && !fz_req_test(&r[i])) left = 1;
    if (left && fz_now() > end) fz_fail("requests neither completed nor failed within 10 s of the peer's hangup");
  }
}
