/* Shared helpers of the unit tests: a logger that records WARN lines, and set-up of a connected pair. */
#ifndef GDRNET_UNIT_COMMON_H
#define GDRNET_UNIT_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gdrnet/net_v8.h"

/* Every WARN since the last ut_warn_reset(), newline separated. */
static char ut_warns[65536];
static size_t ut_warns_len;
static int ut_nwarn;

static inline void ut_warn_reset(void) {
  ut_warns[0] = '\0';
  ut_warns_len = 0;
  ut_nwarn = 0;
}

static inline void ut_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  (void)flags;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (getenv("GDRNET_TEST_VERBOSE") || level == NCCL_LOG_WARN)
    fprintf(stderr, "[%s] %s (%s:%d)\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", msg, file, line);
  if (level == NCCL_LOG_WARN) {
    ut_nwarn++;
    if (ut_warns_len + strlen(msg) + 2 < sizeof(ut_warns)) {
      ut_warns_len += (size_t)snprintf(ut_warns + ut_warns_len, sizeof(ut_warns) - ut_warns_len, "%s\n", msg);
    }
  }
}

static inline int ut_warned(const char *needle) { return strstr(ut_warns, needle) != NULL; }

/* n pseudo-random bytes of stream seed: what a message of a test carries, checked on arrival */
static inline void ut_fill(unsigned char *b, size_t n, unsigned seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    b[i] = (unsigned char)(x >> 16);
  }
}

static inline double ut_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
