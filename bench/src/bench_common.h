/* die(), now_ns(), xfer_all() and the plugin's logger for the benchmark programs of bench/src (each a single file built with cc by its
 * bench/ script). Define BENCH_PROG (the name printed) before including; role is the process's letter. */
#ifndef GDRNET_BENCH_COMMON_H
#define GDRNET_BENCH_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gdrnet/net_v8.h"

static char role = '?';

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, BENCH_PROG "[%c %d]: ", role, (int)getpid());
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  _exit(1);
}

/* the plugin's WARNs go to stderr, the rest is dropped */
static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level > NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, BENCH_PROG "[%c] plugin: ", role);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The whole buffer over a blocking fd (the processes' socketpair, or a raw TCP stream), or die. */
static inline void xfer_all(int fd, void *buf, size_t len, int is_write) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = is_write ? write(fd, (char *)buf + off, len - off) : read(fd, (char *)buf + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("%s: %s", is_write ? "write" : "read", n == 0 ? "EOF" : strerror(errno));
    off += (size_t)n;
  }
}

/* One connection each way between the two processes through the plugin (listen, handles over ctl, connect and
 * accept until both exist), with a registered send buffer of size bytes (filled with role) and receive buffer of
 * rsize bytes (0: one byte). */
struct pconn {
  void *s, *r, *l, *smh, *rmh;
  char *sbuf, *rbuf;
};

static inline void pconn_open(ncclNet_v8_t *net, int ctl, size_t size, size_t rsize, struct pconn *p) {
  char mine[NCCL_NET_HANDLE_MAXSIZE], peer[NCCL_NET_HANDLE_MAXSIZE];
  ncclNetDeviceHandle_v8_t *dh = NULL;
  if (size == 0) size = 1;
  if (rsize == 0) rsize = 1;
  memset(p, 0, sizeof *p);
  if (net->listen(0, mine, &p->l) != ncclSuccess) die("listen failed");
  xfer_all(ctl, mine, sizeof mine, 1);
  xfer_all(ctl, peer, sizeof peer, 0);
  while (p->s == NULL || p->r == NULL) {
    if (p->s == NULL && net->connect(0, peer, &p->s, &dh) != ncclSuccess) die("connect failed");
    if (p->r == NULL && net->accept(p->l, &p->r, &dh) != ncclSuccess) die("accept failed");
  }
  if (posix_memalign((void **)&p->sbuf, 4096, size) != 0 || posix_memalign((void **)&p->rbuf, 4096, rsize) != 0)
    die("out of memory");
  memset(p->sbuf, role, size);
  if (net->regMr(p->s, p->sbuf, size, NCCL_PTR_HOST, &p->smh) != ncclSuccess ||
      net->regMr(p->r, p->rbuf, rsize, NCCL_PTR_HOST, &p->rmh) != ncclSuccess)
    die("regMr failed");
}

#endif
