/* Logging for libnccl-net-gdr: printf-checked macros over NCCL's logger.
 *
 *   GDR_WARN(fmt, ...)            always shown by NCCL (level WARN, all subsystems)
 *   GDR_INFO(flags, fmt, ...)     NCCL_DEBUG=INFO, filtered by NCCL_DEBUG_SUBSYS via flags (NCCL_NET, NCCL_INIT...)
 *   GDR_TRACE(flags, fmt, ...)    compiled in only with -DGDRNET_TRACE (the data path stays free of it otherwise);
 *                                 the format is still checked in every build.
 *
 * Every line is prefixed "NET/GDR : " and carries the caller's __FILE__/__LINE__ (NCCL prints them at TRACE).
 * Safe before init and after the plugin lost its logger: WARN lines then go to stderr, INFO/TRACE are dropped.
 * Thread-safe: the logger pointer is an atomic, set by gdr_log_init() from ncclNet.init(). */
#ifndef GDRNET_LOG_H
#define GDRNET_LOG_H

#include "gdrnet/net_v8.h"

/* Installs NCCL's logger (NULL uninstalls it). Called by the core's init. */
void gdr_log_init(ncclDebugLogger_t logger);

/* The one entry point; use the macros. */
void gdr_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Never called: lets the compiler check a TRACE format in builds where TRACE is compiled out. */
static inline void gdr_log_check_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void gdr_log_check_format(const char *fmt, ...) { (void)fmt; }

#define GDR_WARN(...) gdr_log(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define GDR_INFO(flags, ...) gdr_log(NCCL_LOG_INFO, (flags), __FILE__, __LINE__, __VA_ARGS__)
#ifdef GDRNET_TRACE
#define GDR_TRACE(flags, ...) gdr_log(NCCL_LOG_TRACE, (flags), __FILE__, __LINE__, __VA_ARGS__)
#else
#define GDR_TRACE(flags, ...)                                                                                          \
  do {                                                                                                                 \
    if (0) {                                                                                                           \
      (void)(flags);                                                                                                   \
      gdr_log_check_format(__VA_ARGS__);                                                                               \
    }                                                                                                                  \
  } while (0)
#endif

/* Small honest error macros (one unwind label per function, conventionally "out"):
 *   GDR_CHECK(call)            ncclResult_t call; on failure store it in `res` and goto out
 *   GDR_SYSCHECK(call, what)   POSIX call returning -1 and errno; WARN with strerror, res = ncclSystemError
 * Both expect `ncclResult_t res` and a label `out` in the calling function. */
#define GDR_CHECK(call)                                                                                                \
  do {                                                                                                                 \
    ncclResult_t gdr_check_res_ = (call);                                                                              \
    if (gdr_check_res_ != ncclSuccess) {                                                                               \
      res = gdr_check_res_;                                                                                            \
      goto out;                                                                                                        \
    }                                                                                                                  \
  } while (0)

#define GDR_SYSCHECK(call, what)                                                                                       \
  do {                                                                                                                 \
    if ((call) == -1) {                                                                                                \
      GDR_WARN("%s failed: %s", (what), strerror(errno));                                                              \
      res = ncclSystemError;                                                                                           \
      goto out;                                                                                                        \
    }                                                                                                                  \
  } while (0)

#endif /* GDRNET_LOG_H */
