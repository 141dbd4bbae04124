/* die() and the plugin's logger for the benchmark programs of bench/src (each a single file built with cc by its
 * bench/ script). Define BENCH_PROG (the name printed) before including; role is the process's letter. */
#ifndef GDRNET_BENCH_COMMON_H
#define GDRNET_BENCH_COMMON_H

#include <stdarg.h>
#include <stdio.h>
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

#endif
