/* die(), now_ns(), xfer_all() and the plugin's logger for the benchmark programs of bench/src (each a single file built with cc by its
 * bench/ script). Define BENCH_PROG (the name printed) before including; role is the process's letter. */
#ifndef GDRNET_BENCH_COMMON_H
#define GDRNET_BENCH_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
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

#endif
