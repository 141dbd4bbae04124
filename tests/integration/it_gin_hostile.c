/* A hostile GIN peer. Rank 0 (the parent) is the plugin's GIN comm (ncclGinPlugin_v11) in a mesh of two; rank 1 (the
 * child) plays the other rank with the plugin's ncclNet table: it joins the mesh as the GIN core does (connect,
 * accept, a 16-byte introduction), then sends GIN messages of its own making. Each case is a fresh mesh; the
 * hostile messages come at the connect (GNIT_HOSTILE=qp: the one-sided RDMA path's QP exchange), during the first
 * window's registration (REG cases) or after it. For every case rank 0 must get ncclRemoteError from the call that
 * runs into it (connect, regMrSym or ginProgress) within a bound well below GDRNET_CONNECT_TIMEOUT_MS, report it
 * through queryLastError, WARN naming rank 1, and close cleanly: never a crash, a hang or memory kept without bound.
 * GNIT_HOSTILE=messages (default): the message path (TCP, or the RDMA transport with GDRNET_GIN_PATH=messages);
 * qp: the RDMA transport with the one-sided path, whose QP exchange is attacked. GNIT_HOSTILE_CASE=N runs case N
 * alone. The wire format is written out here
 * (struct hdr) as the peer sees it: a change of it shows up here too. */
#include <dlfcn.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gdrnet/gin.h"
#include "gin_wire.h"
#include "it.h"

#define WIN 4096
#define BOUND_NS (15ull * 1000000000ull) /* the error must come within this (the connect timeout is 30 s) */

enum { PH_WINDOW = 0, PH_REG, PH_QP };
typedef struct {
  const char *name;
  int phase;
  int (*build)(unsigned char *out, int k); /* the k-th hostile message into out (its length), or 0: no more */
} hcase_t;

static struct hdr H(uint16_t op, uint16_t flags, uint32_t mr, uint64_t off, uint64_t size) {
  struct hdr h;
  memset(&h, 0, sizeof(h));
  h.magic = WIRE_MAGIC, h.op = op, h.flags = flags, h.mr = mr, h.off = off, h.size = size;
  return h;
} static int put(unsigned char *o, struct hdr h, size_t extra) {
  memcpy(o, &h, sizeof(h));
  memset(o + sizeof(h), 0x5a, extra);
  return (int)(sizeof(h) + extra);
}
#define ONE(expr) return k == 0 ? (expr) : 0
static int b_put0_inline_nowin(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, F_INLINE, 77, 0, 0), 0)); }
static int b_put0_data_nowin(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, F_DATA, 77, 0, 0), 0)); }
static int b_put0_nowin(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, 0, 77, 0, 0), 0)); }
static int b_put_nowin(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, F_INLINE, 77, 0, 8), 8)); }
static int b_put_off_wrap(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, F_INLINE, 0, UINT64_MAX - 3, 8), 8)); }
static int b_put_data_past(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, F_DATA, 0, WIN - 100, 4096), 0)); }
static int b_put_sig(unsigned char *o, int k, uint32_t mr, uint64_t off) {
  struct hdr h = H(OP_PUT, F_SIGNAL, MR_NONE, 0, 0);
  h.sig_mr = mr, h.sig_off = off, h.sig_val = 1;
  ONE(put(o, h, 0));
}
static int b_put_sig_nowin(unsigned char *o, int k) { return b_put_sig(o, k, 77, 0); }
static int b_put_sig_wrap(unsigned char *o, int k) { return b_put_sig(o, k, 0, UINT64_MAX - 7); }
static int b_put_sig_unaligned(unsigned char *o, int k) { return b_put_sig(o, k, 0, 4); }
static int b_put_flags(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, 0x80, MR_NONE, 0, 0), 0)); }
static int b_put_inline_len(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, F_INLINE, 0, 0, 16), 8)); }
static int b_put_both(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, F_INLINE | F_DATA, 0, 0, 8), 8)); }
static int b_get_nowin(unsigned char *o, int k) { ONE(put(o, H(OP_GET, 0, 77, 0, 8), 0)); }
static int b_get_wrap(unsigned char *o, int k) { ONE(put(o, H(OP_GET, 0, 0, UINT64_MAX - 7, 16), 0)); }
static int b_reply_stray(unsigned char *o, int k) {
  struct hdr h = H(OP_GET_REPLY, 0, 0, 0, 0);
  h.cookie = 5;
  ONE(put(o, h, 0));
}
static int b_flushack_stray(unsigned char *o, int k) {
  struct hdr h = H(OP_FLUSH_ACK, 0, 0, 0, 0);
  h.cookie = 1ull << 32;
  ONE(put(o, h, 0));
}
static int b_flush_size(unsigned char *o, int k) { ONE(put(o, H(OP_FLUSH, 0, 0, 0, 5), 0)); }
static int b_op_unknown(unsigned char *o, int k) { ONE(put(o, H(99, 0, 0, 0, 0), 0)); }
static int b_short(unsigned char *o, int k) { ONE(put(o, H(OP_PUT, 0, MR_NONE, 0, 0), 0) - 62); }
static int b_magic(unsigned char *o, int k) {
  struct hdr h = H(OP_PUT, 0, MR_NONE, 0, 0);
  h.magic = 0x12345678;
  ONE(put(o, h, 0));
}
static int b_move_size(unsigned char *o, int k) { ONE(put(o, H(OP_MOVE, 0, 0, 0, 5), 0)); }
static int b_reg(unsigned char *o, uint32_t id) {
  struct hdr h = H(OP_REG, 0, id, 0, WIN);
  h.aux = 0x10000;
  return put(o, h, 0);
}
static int b_reg_dup(unsigned char *o, int k) { ONE(b_reg(o, 0)); }
static int b_reg_flood(unsigned char *o, int k) { return k < 100 ? b_reg(o, 1 + (uint32_t)k) : 0; }
static int b_reg_far(unsigned char *o, int k) { ONE(b_reg(o, 1000000)); }
static int b_reg_early_dup(unsigned char *o, int k) { return k < 2 ? b_reg(o, 1) : 0; }
static int b_qp(unsigned char *o, int k, uint16_t flags, uint64_t size, size_t extra, uint32_t qpn) {
  unsigned char q[56];
  int n;
  memset(q, 0, sizeof(q));
  memcpy(q, &qpn, 4); /* qpn; psn, lid, mtu (0: not 1..5), link layer 0 */
  n = put(o, H(OP_QP, flags, 0, 0, size), 0);
  memcpy(o + n, q, extra);
  ONE(n + (int)extra);
}
static int b_qp_size(unsigned char *o, int k) { return b_qp(o, k, F_INLINE, 8, 8, 0x100); }
static int b_qp_noinline(unsigned char *o, int k) { return b_qp(o, k, 0, 56, 0, 0x100); }
static int b_qp_fields(unsigned char *o, int k) { return b_qp(o, k, F_INLINE, 56, 56, 0x100); }
/* a recovery's QP address (a valid one) or a move, each saying the peer applied 2^40 of this rank's signal records,
 * of which none was sent */
static int b_qp_recover_count(unsigned char *o, int k) {
  unsigned char q[56];
  struct hdr h = H(OP_QP, F_INLINE | F_RECOVER, 0, 0, 56);
  uint32_t qpn = 0x100, psn = 0x10;
  memset(q, 0, sizeof(q));
  memcpy(q, &qpn, 4);
  memcpy(q + 4, &psn, 4);
  q[10] = 5, q[11] = 2; /* MTU 4096, Ethernet */
  h.cookie = 1, h.aux = 1ull << 40;
  memcpy(o + put(o, h, 0), q, sizeof(q));
  ONE((int)(sizeof(h) + sizeof(q)));
}
static int b_move_count(unsigned char *o, int k) {
  struct hdr h = H(OP_MOVE, 0, 0, 0, 0);
  h.aux = 1ull << 40;
  ONE(put(o, h, 0));
}

static const hcase_t k_msg_cases[] = {
    {"0-byte inline put, no such window", PH_WINDOW, b_put0_inline_nowin},
    {"0-byte data put, no such window", PH_WINDOW, b_put0_data_nowin},
    {"0-byte put, no such window", PH_WINDOW, b_put0_nowin},
    {"put, no such window", PH_WINDOW, b_put_nowin},
    {"put, offset wraps", PH_WINDOW, b_put_off_wrap},
    {"data put past the window", PH_WINDOW, b_put_data_past},
    {"signal, no such window", PH_WINDOW, b_put_sig_nowin},
    {"signal offset wraps", PH_WINDOW, b_put_sig_wrap},
    {"signal offset unaligned", PH_WINDOW, b_put_sig_unaligned},
    {"put, unknown flag", PH_WINDOW, b_put_flags},
    {"inline put, short payload", PH_WINDOW, b_put_inline_len},
    {"put, inline and data", PH_WINDOW, b_put_both},
    {"get, no such window", PH_WINDOW, b_get_nowin},
    {"get, offset wraps", PH_WINDOW, b_get_wrap},
    {"get reply, no get", PH_WINDOW, b_reply_stray},
    {"flush ack, no flush", PH_WINDOW, b_flushack_stray},
    {"flush with a size", PH_WINDOW, b_flush_size},
    {"unknown operation", PH_WINDOW, b_op_unknown},
    {"10-byte message", PH_WINDOW, b_short},
    {"bad magic", PH_WINDOW, b_magic},
    {"move with a size", PH_WINDOW, b_move_size},
    {"window registered twice", PH_WINDOW, b_reg_dup},
    {"100 registrations ahead", PH_REG, b_reg_flood},
    {"a registration far ahead", PH_REG, b_reg_far},
    {"an early registration twice", PH_REG, b_reg_early_dup},
};
static const hcase_t k_qp_cases[] = {
    {"QP address of 8 bytes", PH_QP, b_qp_size},
    {"QP address not inline", PH_QP, b_qp_noinline},
    {"QP address out of range", PH_QP, b_qp_fields},
    {"recovery claiming records never sent", PH_QP, b_qp_recover_count},
    {"move claiming records never sent", PH_QP, b_move_count},
};

static const ncclGin_v11_t *G;
static int g_warned; /* a WARN of the plugin named rank 1 */

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  (void)flags;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN && strstr(msg, "from rank 1") != NULL) __atomic_store_n(&g_warned, 1, __ATOMIC_RELAXED);
  if (level == NCCL_LOG_WARN || getenv("GNIT_GIN_VERBOSE") != NULL)
    fprintf(stderr, "[plugin] %s:%d %s\n", file, line, msg);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- rank 0: the plugin's GIN comm ---- */
static void victim_case(int fd, const hcase_t *hc) {
  char h0[NCCL_NET_HANDLE_MAXSIZE], h1[NCCL_NET_HANDLE_MAXSIZE];
  void *handles[2] = {h0, h1};
  void *inst = NULL, *lc = NULL, *cc = NULL, *mh = NULL, *gh = NULL;
  static unsigned char win[WIN];
  ncclResult_t res = ncclSuccess;
  bool err = false;
  uint64_t t0;
  it_step("case \"%s\": connecting", hc->name);
  g_warned = 0;
  memset(h0, 0, sizeof(h0));
  IT_OK(G->init(&inst, 0x4857, logger));
  IT_OK(G->listen(inst, 0, h0, &lc));
  IT_CHECK(gn_boot_send(fd, h0, sizeof(h0)) == 0 && gn_boot_recv(fd, h1, sizeof(h1), 60) == 0, "handles");
  t0 = now_ns();
  res = G->connect(inst, handles, 2, 0, lc, &cc);
  IT_OK(G->closeListen(lc));
  if (hc->phase == PH_QP) {
    IT_CHECK(res == ncclRemoteError && cc == NULL, "case \"%s\": connect returned %s", hc->name, gn_result_str(res));
  } else {
    IT_OK(res);
    it_step("case \"%s\": registering", hc->name);
    res = G->regMrSym(cc, win, WIN, NCCL_PTR_HOST, 0, &mh, &gh);
    if (hc->phase == PH_REG) {
      IT_CHECK(res == ncclRemoteError && mh == NULL, "case \"%s\": regMrSym returned %s", hc->name, gn_result_str(res));
    } else if (res != ncclRemoteError) { /* the message may come while regMrSym still progresses: its error then */
      IT_OK(res);
      it_step("case \"%s\": progress until the error", hc->name);
      while ((res = G->ginProgress(cc)) == ncclSuccess) {
        IT_CHECK(now_ns() - t0 < BOUND_NS, "case \"%s\": no error within %llu s", hc->name, BOUND_NS / 1000000000ull);
        sched_yield();
      }
      IT_CHECK(res == ncclRemoteError, "case \"%s\": progress returned %s", hc->name, gn_result_str(res));
    }
    IT_OK(G->queryLastError(cc, &err));
    IT_CHECK(err, "case \"%s\": queryLastError reports no error", hc->name);
    if (mh != NULL) IT_OK(G->deregMrSym(cc, mh));
    IT_OK(G->closeColl(cc));
  }
  IT_CHECK(now_ns() - t0 < BOUND_NS, "case \"%s\": the error took %.1f s", hc->name, (now_ns() - t0) / 1e9);
  IT_CHECK(__atomic_load_n(&g_warned, __ATOMIC_RELAXED), "case \"%s\": no WARN names rank 1", hc->name);
  IT_OK(G->finalize(inst));
  IT_CHECK(gn_boot_send(fd, "d", 1) == 0, "done to rank 1");
}

/* ---- rank 1: the hostile peer, with the plugin's ncclNet table ---- */
typedef struct {
  it_plugin_t ip;
  int fd;
  void *s, *r, *smh, *rmh;
  unsigned char *sbuf, *rbuf;
} hostile_t;

static int victim_done(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

/* sends len bytes of sbuf on the send comm; 0 once sent, -1 when rank 0 is done with the case (or its comm is gone) */
static int hsend(hostile_t *x, int len) {
  void *req = NULL;
  int done = 0, size = 0;
  uint64_t t0 = now_ns();
  while (req == NULL) {
    if (x->ip.net->isend(x->s, x->sbuf, len, 0, x->smh, &req) != ncclSuccess || victim_done(x->fd)) return -1;
    IT_CHECK(now_ns() - t0 < 3 * BOUND_NS, "isend never took the message");
  }
  while (!done) {
    if (x->ip.net->test(req, &done, &size) != ncclSuccess || (!done && victim_done(x->fd))) return -1;
    IT_CHECK(now_ns() - t0 < 3 * BOUND_NS, "a send never completed");
  }
  return 0;
}

static void hostile_case(hostile_t *x, const hcase_t *hc) {
  char h0[NCCL_NET_HANDLE_MAXSIZE], h1[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL, *sreq = NULL, *rreq = NULL;
  struct ident me = {WIRE_MAGIC, 1, 2, 0};
  int sdone = 0, rdone = 0, sz = 0, n;
  uint64_t t0 = now_ns();
  char done;
  it_step("case \"%s\": joining the mesh", hc->name);
  memset(h1, 0, sizeof(h1));
  IT_OK(x->ip.net->listen(x->ip.dev, h1, &lc));
  IT_CHECK(gn_boot_recv(x->fd, h0, sizeof(h0), 60) == 0 && gn_boot_send(x->fd, h1, sizeof(h1)) == 0, "handles");
  x->s = x->r = NULL;
  while (x->s == NULL || x->r == NULL) {
    ncclNetDeviceHandle_v8_t *dh = NULL;
    if (x->s == NULL) IT_OK(x->ip.net->connect(x->ip.dev, h0, &x->s, &dh));
    if (x->r == NULL) IT_OK(x->ip.net->accept(lc, &x->r, &dh));
    IT_CHECK(now_ns() - t0 < 3 * BOUND_NS, "no connection to rank 0");
  }
  IT_OK(x->ip.net->regMr(x->s, x->sbuf, 4096, NCCL_PTR_HOST, &x->smh));
  IT_OK(x->ip.net->regMr(x->r, x->rbuf, 4096, NCCL_PTR_HOST, &x->rmh));
  memcpy(x->sbuf, &me, sizeof(me));
  while (!sdone || !rdone) {
    if (sreq == NULL && !sdone) IT_OK(x->ip.net->isend(x->s, x->sbuf, (int)sizeof(me), 0, x->smh, &sreq));
    if (rreq == NULL && !rdone) {
      void *d = x->rbuf;
      int size = (int)sizeof(me), tag = 0;
      IT_OK(x->ip.net->irecv(x->r, 1, &d, &size, &tag, &x->rmh, &rreq));
    }
    if (sreq != NULL) {
      IT_OK(x->ip.net->test(sreq, &sdone, &sz));
      if (sdone) sreq = NULL;
    }
    if (rreq != NULL) {
      IT_OK(x->ip.net->test(rreq, &rdone, &sz));
      if (rdone) rreq = NULL;
    }
    IT_CHECK(now_ns() - t0 < 3 * BOUND_NS, "no introduction");
  }
  it_step("case \"%s\": sending", hc->name);
  if (hc->phase == PH_WINDOW) (void)(hsend(x, b_reg(x->sbuf, 0)));
  for (int k = 0; (n = hc->build(x->sbuf, k)) > 0; k++)
    if (hsend(x, n) != 0) break;
  if (hc->phase == PH_REG) (void)hsend(x, b_reg(x->sbuf, 0));
  IT_CHECK(gn_boot_recv(x->fd, &done, 1, 60) == 0, "rank 0 never finished case \"%s\"", hc->name);
  IT_OK(x->ip.net->deregMr(x->s, x->smh));
  IT_OK(x->ip.net->deregMr(x->r, x->rmh));
  IT_OK(x->ip.net->closeSend(x->s));
  IT_OK(x->ip.net->closeRecv(x->r));
  IT_OK(x->ip.net->closeListen(lc));
}

static void cases(const hcase_t **list, int *n) {
  const char *m = getenv("GNIT_HOSTILE");
  if (m != NULL && !strcmp(m, "qp")) {
    *list = k_qp_cases, *n = (int)(sizeof(k_qp_cases) / sizeof(k_qp_cases[0]));
  } else {
    IT_CHECK(m == NULL || !strcmp(m, "messages"), "GNIT_HOSTILE=%s: messages or qp", m);
    *list = k_msg_cases, *n = (int)(sizeof(k_msg_cases) / sizeof(k_msg_cases[0]));
  }
  if (getenv("GNIT_HOSTILE_CASE") != NULL) { /* one case alone (by its index) */
    int k = atoi(getenv("GNIT_HOSTILE_CASE"));
    IT_CHECK(k >= 0 && k < *n, "GNIT_HOSTILE_CASE=%d: 0..%d", k, *n - 1);
    *list += k, *n = 1;
  }
}

static int side(int fd, int parent) {
  const hcase_t *list;
  int n;
  cases(&list, &n);
  if (parent) {
    void *lib = dlopen(it_plugin_path(), RTLD_NOW | RTLD_LOCAL);
    IT_CHECK(lib != NULL, "dlopen %s: %s", it_plugin_path(), dlerror());
    G = dlsym(lib, "ncclGinPlugin_v11");
    IT_CHECK(G != NULL, "ncclGinPlugin_v11 not exported");
    for (int i = 0; i < n; i++) victim_case(fd, &list[i]);
    it_log("%d hostile cases refused, each with ncclRemoteError and a WARN naming the peer", n);
    (void)dlerror();
    IT_CHECK(dlclose(lib) == 0, "dlclose: %s", dlerror());
  } else {
    hostile_t x;
    memset(&x, 0, sizeof(x));
    it_load(&x.ip);
    x.fd = fd;
    x.sbuf = calloc(1, 4096);
    x.rbuf = calloc(1, 4096);
    IT_CHECK(x.sbuf != NULL && x.rbuf != NULL, "oom");
    for (int i = 0; i < n; i++) hostile_case(&x, &list[i]);
    free(x.sbuf);
    free(x.rbuf);
    it_unload(&x.ip);
  }
  return 0;
}

int main(void) { return it_two_sides("gin-hostile", 200, side, 60); }
