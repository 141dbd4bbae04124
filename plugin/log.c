#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

/* NCCL's logger. Global because NCCL hands it to init once per load and every thread logs through it;
 * an atomic so that helper threads can read it without a lock. */
static _Atomic(ncclDebugLogger_t) g_logger;

void gdr_log_init(ncclDebugLogger_t logger) { atomic_store_explicit(&g_logger, logger, memory_order_release); }

void gdr_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  ncclDebugLogger_t logger = atomic_load_explicit(&g_logger, memory_order_acquire);
  char msg[1024];
  va_list ap;

  if (logger == NULL && level != NCCL_LOG_WARN) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (logger != NULL) {
    logger(level, flags, file, line, "NET/GDR : %s", msg);
  } else {
    fprintf(stderr, "NET/GDR WARN %s (%s:%d)\n", msg, file, line);
  }
}
