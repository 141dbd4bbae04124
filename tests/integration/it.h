/* The integration tests' small harness: two processes (fork; the child always leaves with _exit),
 * assertions that can fail with a reason, and the plugin loaded through its ABI exactly as NCCL
 * does. Plugin path: $GDRNET_TEST_PLUGIN, else the build tree's lib/libnccl-net-gdr.so. */
#ifndef GDRNET_IT_H
#define GDRNET_IT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gn.h"

#define IT_MAX_DEVS 16

/* Assertions: print "FAIL <test> [role pid] file:line: <cond>: <message>" and end the test (the
 * parent kills its children first; a child leaves with _exit(1)). */
#define IT_CHECK(cond, ...)                                                  \
  do {                                                                       \
    if (!(cond)) it_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);            \
  } while (0)
/* An ncclResult_t call that must succeed. */
#define IT_OK(call)                                                          \
  do {                                                                       \
    ncclResult_t it_r_ = (call);                                             \
    if (it_r_ != ncclSuccess) it_fail(__FILE__, __LINE__, #call, "returned %s", gn_result_str(it_r_)); \
  } while (0)
/* A gn_* helper (gn_ctx_t *c) that must succeed: prints the helper's reason. */
#define IT_GN(ctx, call)                                                     \
  do {                                                                       \
    ncclResult_t it_r_ = (call);                                             \
    if (it_r_ != ncclSuccess) it_fail(__FILE__, __LINE__, #call, "%s", (ctx)->err); \
  } while (0)

void it_fail(const char *file, int line, const char *cond, const char *fmt, ...) __attribute__((noreturn))
    GN_PRINTF(4, 5);
void it_log(const char *fmt, ...) GN_PRINTF(1, 2); /* "[test role pid] message" on stderr */

/* Call first: names the test, arms a watchdog (SIGALRM after timeout_s: the test fails, naming what it
 * was doing), creates $VEMU_DIR when set. */
void it_init(const char *name, int timeout_s);
void it_step(const char *fmt, ...) GN_PRINTF(1, 2); /* records what we are doing (printed on failure) */
double it_env_double(const char *name, double dflt);
const char *it_plugin_path(void);
int it_is_child(void);

/* Two processes. fn runs in the child with the child's end of a socketpair; its return value is the
 * child's exit status. */
typedef struct {
  pid_t pid;
  int fd; /* the parent's end */
} it_child_t;
void it_fork(it_child_t *c, int (*fn)(int fd, void *arg), void *arg);
/* Waits for the child's exit (bounded); fails the test unless it exited with status 0. */
void it_join(it_child_t *c, double timeout_s);
/* Waits for the child to end (bounded) and returns the raw wait status. */
int it_reap(it_child_t *c, double timeout_s);
/* The usual test body: it_init(name, timeout_s), side(fd, 0) in a forked child and side(fd, 1) here on the two
 * ends of a socketpair, it_join(child, join_s), then "PASS". Returns main's exit status. */
int it_two_sides(const char *name, int timeout_s, int (*side)(int fd, int parent), double join_s);

/* The table the tests drive: ncclNetPlugin_v$GDRNET_TEST_ABI (6..12, default 8), through gn_compat's v8 shape for
 * every version but 8 (the tests are written against v8). */
int it_abi(void);

/* The plugin, loaded and initialised with the NCCL-style logger (its output captured). it_unload checks, for v10+,
 * that the profiler events the plugin started were all stopped by the rules, then finalizes (v11+) and dlcloses. */
typedef struct {
  gn_plugin_t p;
  ncclNet_v8_t *net;
  int ndev;
  ncclNetProperties_v8_t props[IT_MAX_DEVS];
  int dev; /* the device a test connects on: 0, or with GNIT_FUSE=N (v9+ tables) a fused device of the first N */
} it_plugin_t;
/* dlopen + dlsym + init + devices + getProperties; all asserted. GNIT_FUSE=N: makeVDevice over devices 0..N-1, whose
 * index becomes ip->dev (the tests that honour it connect there). */
void it_load(it_plugin_t *ip);
void it_unload(it_plugin_t *ip); /* dlclose */

/* A pair of comms between two processes (a send comm to the peer and a recv comm from it) with one
 * registered host buffer each. */
typedef struct {
  const ncclNet_v8_t *net;
  void *s, *r;
  void *smh, *rmh;
  unsigned char *sbuf, *rbuf;
  size_t len;
} it_conn_t;
/* Both processes call it (same dev, same len): listen/handles over fd/connect+accept, regMr. */
void it_conn_open(it_plugin_t *ip, int dev, int fd, size_t len, it_conn_t *c);
void it_conn_close(it_conn_t *c); /* deregMr, closeSend, closeRecv: all asserted */

/* Sends one message of `size` bytes from sbuf+off filled with pattern (size, iter, salt). */
void it_send_pattern(gn_ctx_t *ctx, it_conn_t *c, size_t off, int size, uint64_t iter, uint64_t salt);
/* Receives into rbuf+off with capacity cap; asserts the reported size == expect and every byte, and
 * that nothing past the received bytes (up to cap) was written (a canary). */
void it_recv_pattern(gn_ctx_t *ctx, it_conn_t *c, size_t off, int cap, int expect, uint64_t iter, uint64_t salt);
/* Verifies a completed receive (sizes, bytes, canary) without driving anything. */
void it_verify(const unsigned char *buf, int cap, int got, int expect, uint64_t iter, uint64_t salt, const char *what);
#define IT_CANARY 0xa5

/* Before a thread-count baseline: starts the threads that are not the plugin's and stay for good: a sanitizer
 * runtime's (TSan's background thread, at the first pthread_create) and, over the RDMA transport, the verbs
 * library's (the emulator's NIC agent), by opening every device once through the library the plugin will load. */
void it_settle_verbs_threads(void);
/* TCP sockets (IPv4/IPv6 streams) of this process -- the plugin's included -- for which pred is true. */
int it_count_sockets(int (*pred)(int fd, void *arg), void *arg);

#endif
