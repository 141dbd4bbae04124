/* Time, result names, size parsing, thread counting. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gn.h"

uint64_t gn_now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t gn_deadline_ns(double seconds) {
  if (seconds <= 0) return gn_now_ns();
  return gn_now_ns() + (uint64_t)(seconds * 1e9);
}

int gn_expired(uint64_t deadline_ns) { return gn_now_ns() >= deadline_ns; }

const char *gn_result_str(ncclResult_t r) {
  switch ((int)r) {
  case ncclSuccess: return "ncclSuccess(0)";
  case ncclUnhandledCudaError: return "ncclUnhandledCudaError(1)";
  case ncclSystemError: return "ncclSystemError(2)";
  case ncclInternalError: return "ncclInternalError(3)";
  case ncclInvalidArgument: return "ncclInvalidArgument(4)";
  case ncclInvalidUsage: return "ncclInvalidUsage(5)";
  case ncclRemoteError: return "ncclRemoteError(6)";
  case 7: return "ncclInProgress(7) (a plugin must never return this)";
  default: return "unknown ncclResult_t";
  }
}

int gn_parse_size(const char *s, uint64_t *out) {
  if (s == NULL || *s == '\0') return -1;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || s[0] == '-') return -1;
  uint64_t mul = 1;
  if (*end != '\0') {
    char u = *end++;
    switch (u) {
    case 'k':
    case 'K': mul = 1ull << 10; break;
    case 'm':
    case 'M': mul = 1ull << 20; break;
    case 'g':
    case 'G': mul = 1ull << 30; break;
    case 'b':
    case 'B':
      mul = 1;
      if (*end != '\0') return -1;
      break;
    default: return -1;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0') return -1;
  }
  if (mul > 1 && v > UINT64_MAX / mul) return -1;
  *out = (uint64_t)v * mul;
  return 0;
}

void gn_fmt_size(uint64_t v, char *out, size_t outlen) {
  if (v >= (1ull << 30) && v % (1ull << 30) == 0)
    snprintf(out, outlen, "%" PRIu64 "G", v >> 30);
  else if (v >= (1ull << 20) && v % (1ull << 20) == 0)
    snprintf(out, outlen, "%" PRIu64 "M", v >> 20);
  else if (v >= (1ull << 10) && v % (1ull << 10) == 0)
    snprintf(out, outlen, "%" PRIu64 "K", v >> 10);
  else
    snprintf(out, outlen, "%" PRIu64, v);
}

int gn_thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] != '.') n++;
  }
  closedir(d);
  return n;
}
