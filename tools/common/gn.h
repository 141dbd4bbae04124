/* gdrnet tools/common: what the perf tool and the integration tests share.
 *
 * Everything here talks to the plugin only through the ncclNet v8 ABI's shape, loaded the way NCCL loads it
 * (dlopen RTLD_NOW|RTLD_LOCAL, dlsym "ncclNetPlugin_v8", or any other table version through gn_compat's v8-shaped
 * driver), and drives it the way NCCL 2.28 does:
 * connect/accept re-entered while they return a NULL comm, isend/irecv re-posted while the request
 * is NULL, test() polled until done. */
#ifndef GDRNET_TOOLS_GN_H
#define GDRNET_TOOLS_GN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "gdrnet/net_v8.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GN_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ---- time ---- */
uint64_t gn_now_ns(void);                 /* CLOCK_MONOTONIC */
uint64_t gn_deadline_ns(double seconds);  /* now + seconds */
int gn_expired(uint64_t deadline_ns);     /* 1 once now >= deadline */

/* ---- results ---- */
const char *gn_result_str(ncclResult_t r); /* "ncclInvalidUsage(5)" style, static storage */

/* ---- logger (NCCL style) ----
 * Lines look like NCCL's: "host:pid:tid [dev] NCCL INFO msg", WARN adds file:line.
 * The printed level comes from NCCL_DEBUG (VERSION|WARN|INFO|ABORT|TRACE, default WARN) and the
 * subsystems from NCCL_DEBUG_SUBSYS (comma list, leading ^ inverts), unless gn_log_set_level()
 * overrides the level. Lines go to stderr (so they never mix with a tool's table on stdout).
 * While capture is on, every line of every level is also appended to an in-memory buffer. */
void gn_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...)
    GN_PRINTF(5, 6);
void gn_log_set_level(int level);      /* -1: back to NCCL_DEBUG */
int gn_log_level(void);
void gn_log_set_prefix(const char *p); /* optional tag after "[dev]", e.g. "rank1" */
void gn_log_capture(int on);           /* on: clears the buffer and starts capturing */
char *gn_log_captured(void);           /* malloc'd copy of the captured text ("" if none); caller frees */
/* The tool itself set the environment variable name (for the plugin, before loading it): the plugin's
 * "<name> set by environment to V" INFO line then reads "<name> set by <tool> to V", since the user set nothing.
 * Up to 4 names. */
void gn_log_tool_env(const char *name, const char *tool);
/* The transport the plugin chose at init, from its INFO line "NET/GDR : using the <name> transport (<reason>); ..."
 * (plugin/core_init.c), seen by gn_logger whatever the log level: name ("tcp", "rdma") and the reason.
 * 0 once that line was logged, -1 before. */
int gn_log_transport(char *name, size_t namelen, char *reason, size_t reasonlen);

/* ---- plugin loading ---- */
typedef struct {
  void *dl;
  ncclNet_v8_t *net; /* the v8 table, or gn_compat's v8-shaped driver of the version opened */
  int version;       /* the table opened: ncclNetPlugin_v<version> */
  char path[4096];
} gn_plugin_t;

/* Resolve the plugin path the way gdrnet-perf documents: explicit (--plugin), else $GDRNET_PLUGIN,
 * else <dir of /proc/self/exe>/../lib/libnccl-net-gdr.so (build tree) or ../<CMAKE_INSTALL_LIBDIR>/
 * (install tree) if it exists, else the bare soname "libnccl-net-gdr.so" (the loader's search path). */
void gn_plugin_resolve(const char *explicit_path, char *out, size_t outlen);
/* dlopen(path, RTLD_NOW|RTLD_LOCAL) + dlsym("ncclNetPlugin_v8") + sanity of the table.
 * Returns 0, or -1 with a reason in err. */
int gn_plugin_open(gn_plugin_t *p, const char *path, char *err, size_t errlen);
/* The same for table ncclNetPlugin_v<version> (6..12): any version but 8 is driven through gn_compat (below), so
 * p->net has the v8 shape whatever the version. traffic_class: the v10 connect config's / v11+ init config's
 * (-1 undefined). */
int gn_plugin_open_version(gn_plugin_t *p, const char *path, int version, int traffic_class, char *err,
                           size_t errlen);
/* finalize (v11+: the shim's context) then dlclose; returns -1 if either failed. */
int gn_plugin_close(gn_plugin_t *p);

/* ---- gn_compat: the v8 shape over any other table version (gn_compat.c) ----
 * One table at a time per process. v10+: isend/irecv get phandles and init a profiler callback that checks the
 * plugin's use of it (start with one of the shim's phandles and a NULL-initialised eHandle, stop with the eHandle
 * start set); the counts: */
typedef struct {
  long starts, stops; /* events started and stopped */
  long bad;           /* calls that broke the rules above */
} gn_prof_stats_t;
ncclNet_v8_t *gn_compat_open(const void *table, int version, int traffic_class, char *err, size_t errlen);
int gn_compat_close(void); /* v11+: finalize of the shim's context; -1 if it failed */
int gn_compat_version(void); /* the version driven now (8 when none) */
void gn_compat_prof_stats(gn_prof_stats_t *s);
/* One-line summary of a device's properties, as the tools print it. */
void gn_props_summary(int dev, const ncclNetProperties_v8_t *pr, char *out, size_t outlen);
const char *gn_ptr_support_str(int ptrSupport); /* "HOST|CUDA|DMABUF", static storage */

/* ---- two-process bootstrap ----
 * A plain byte stream (socketpair for forked peers, TCP across hosts) carrying handles and small
 * control messages. All calls are blocking with a timeout; they return 0 or -1 (errno set,
 * ETIMEDOUT on timeout, EPIPE on a closed peer). */
int gn_boot_socketpair(int sv[2]);
int gn_boot_tcp_listen(const char *bind_host, int port, int *bound_port); /* returns listen fd or -1 */
int gn_boot_tcp_accept(int lfd, double timeout_s);                          /* returns fd or -1 */
/* Retries (the server may start later) until timeout_s; -1 with the reason in err: a host that does not resolve
 * fails at once ("cannot resolve host"), a refused connection says to start the server. */
int gn_boot_tcp_connect(const char *host, int port, double timeout_s, char *err, size_t errlen);
int gn_boot_send(int fd, const void *buf, size_t len);
int gn_boot_recv(int fd, void *buf, size_t len, double timeout_s);
int gn_boot_send_u64(int fd, uint64_t v);
int gn_boot_recv_u64(int fd, uint64_t *v, double timeout_s);
int gn_boot_barrier(int fd, double timeout_s); /* both sides call it; returns when both arrived */

/* ---- driving the plugin like NCCL ----
 * All helpers poll (with sched_yield between fruitless polls, never a sleep) until success, an
 * error from the plugin (returned as is), or the deadline (returns ncclSystemError with
 * *timed_out = 1 when timed_out is non-NULL). err/errlen (may be NULL) receive a human reason. */
typedef struct {
  const ncclNet_v8_t *net;
  uint64_t deadline_ns;
  int timed_out;
  char err[512];
} gn_ctx_t;

void gn_ctx_init(gn_ctx_t *c, const ncclNet_v8_t *net, double timeout_s);
ncclResult_t gn_fail(gn_ctx_t *c, ncclResult_t r, const char *fmt, ...) GN_PRINTF(3, 4);

/* connect re-entered while *sendComm stays NULL (same handle buffer each time). */
ncclResult_t gn_connect(gn_ctx_t *c, int dev, void *handle, void **sendComm);
/* accept re-entered while *recvComm stays NULL; closeListen is NOT called here. */
ncclResult_t gn_accept(gn_ctx_t *c, void *listenComm, void **recvComm);
/* Both directions at once between two processes joined by bootfd: listen, swap handles over the
 * bootstrap, then interleave connect and accept until both comms exist; closeListen right after
 * accept. Either comm pointer may be NULL to set up only one direction (then the peer must ask for
 * the opposite one). */
ncclResult_t gn_establish(gn_ctx_t *c, int dev, int bootfd, void **sendComm, void **recvComm);
/* isend/irecv re-posted while the request comes back NULL. */
ncclResult_t gn_isend(gn_ctx_t *c, void *comm, void *data, int size, int tag, void *mh, void **req);
ncclResult_t gn_irecv(gn_ctx_t *c, void *comm, int n, void **data, int *sizes, int *tags, void **mhs, void **req);
/* test() until done; sizes may be NULL. */
ncclResult_t gn_wait(gn_ctx_t *c, void *req, int *sizes);
/* One test() call; *done set. A convenience that records the failure text. */
ncclResult_t gn_test(gn_ctx_t *c, void *req, int *done, int *sizes);
/* iflush when needed (n buffers); a NULL request means nothing to wait for. */
ncclResult_t gn_flush(gn_ctx_t *c, void *comm, int n, void **data, int *sizes, void **mhs);
/* Blocking one-shot send/recv of one message (for control and small tests). */
ncclResult_t gn_send_sync(gn_ctx_t *c, void *comm, void *data, int size, int tag, void *mh);
ncclResult_t gn_recv_sync(gn_ctx_t *c, void *comm, void *data, int size, int tag, void *mh, int *got);

/* ---- data patterns ----
 * A message's bytes depend on (seed, offset in the message); the seed is made from (size,
 * iteration, salt). Any corrupted, shifted, stale or swapped byte is caught. */
uint64_t gn_pattern_seed(uint64_t size, uint64_t iter, uint64_t salt);
void gn_pattern_fill(void *buf, size_t len, uint64_t seed);
/* Returns len when every byte matches, else the offset of the first wrong byte. */
size_t gn_pattern_check(const void *buf, size_t len, uint64_t seed);
uint8_t gn_pattern_byte(uint64_t seed, size_t off); /* the expected byte at off */

/* ---- misc ---- */
/* Parses a size with optional suffix K/M/G (binary) or KB/MB/GB/KiB/MiB/GiB; -1 on error. */
int gn_parse_size(const char *s, uint64_t *out);
/* "8", "1K", "64M", ... (exact binary units when divisible) */
void gn_fmt_size(uint64_t v, char *out, size_t outlen);
/* Number of entries in /proc/self/task, or -1. */
int gn_thread_count(void);

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_TOOLS_GN_H */
