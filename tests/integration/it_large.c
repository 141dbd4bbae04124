/* A message larger than 2 GiB through a v9+ table (size_t isend/irecv sizes; ncclNetPlugin_v11 unless
 * GDRNET_TEST_ABI says 9, 10 or 12), as NCCL >= 2.24 may send one with maxP2pBytes above 2 GiB:
 *   - above the device's maxP2pBytes (1 TiB on both transports) isend and irecv are refused with
 *     ncclInvalidArgument and a WARN naming the limit, and the connection keeps working;
 *   - 2 GiB + 4099 bytes move in one isend into one irecv of 4 KiB more, every byte checked, nothing written past
 *     the message; test() reports INT_MAX (its sizes are int in every version: the most it can say). Over RDMA the
 *     message is three WRITEs of at most the emulated port's max_msg_sz (1 GiB) and its size rides in the
 *     receiver's sizes row (the imm carries 31 bits): with VEMU_TRACE set the sender reads its own work requests of
 *     the message back from the emulator's trace (its data in WRITEs of at most the port's max_msg_sz adding up to
 *     the message, one sizes WRITE_WITH_IMM per QP). No WARN may come while it moves (no fault, recovery or move
 *     to TCP carried it instead).
 * Buffers: ~2 GiB per process, mapped and touched only on the large path. */
#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gdrnet/net.h"
#include "it.h"

#define BIG (((size_t)2 << 30) + 4099)
#define SLACK 4096
#define SMALL 4096

static const ncclNet_v10_t *g_net; /* isend..closeListen sit at the same places with the same types in v9..v12 */
static int g_v;

static void test_until(void *req, int *sizes, double secs, const char *what) {
  int done = 0;
  uint64_t dl = gn_deadline_ns(secs);
  while (!done) {
    IT_OK(g_net->test(req, &done, sizes));
    IT_CHECK(!gn_expired(dl), "%s: not done after %.0f s", what, secs);
    if (!done) sched_yield();
  }
}

static size_t max_p2p(int dev) {
  if (g_v == 12) {
    ncclNetProperties_v12_t p;
    IT_OK(((const ncclNet_v12_t *)g_net)->getProperties(dev, &p));
    return p.maxP2pBytes;
  }
  if (g_v == 11) {
    ncclNetProperties_v11_t p;
    IT_OK(((const ncclNet_v11_t *)g_net)->getProperties(dev, &p));
    return p.maxP2pBytes;
  }
  ncclNetProperties_v10_t p; /* v9's layout */
  IT_OK(g_net->getProperties(dev, &p));
  return p.maxP2pBytes;
}

static void connect_pair(void *ctx, int fd, void **s, void **r) {
  char mine[NCCL_NET_HANDLE_MAXSIZE], peer[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  const ncclNet_v11_t *n11 = (const ncclNet_v11_t *)g_net;
  memset(mine, 0, sizeof mine);
  IT_OK(g_v >= 11 ? n11->listen(ctx, 0, mine, &lc) : g_net->listen(0, mine, &lc));
  IT_CHECK(gn_boot_send(fd, mine, sizeof mine) == 0 && gn_boot_recv(fd, peer, sizeof peer, 60) == 0, "bootstrap");
  uint64_t dl = gn_deadline_ns(60);
  *s = *r = NULL;
  while (*s == NULL || *r == NULL) {
    ncclNetDeviceHandle_v10_t *dh = NULL;
    if (*s == NULL) {
      if (g_v >= 11)
        IT_OK(n11->connect(ctx, 0, peer, s, &dh));
      else if (g_v == 10)
        IT_OK(g_net->connect(0, NULL, peer, s, &dh));
      else
        IT_OK(((const ncclNet_v9_t *)g_net)->connect(0, peer, s, &dh));
    }
    if (*r == NULL) {
      IT_OK(g_net->accept(lc, r, &dh));
      if (*r != NULL) IT_OK(g_net->closeListen(lc));
    }
    IT_CHECK(!gn_expired(dl), "connections not up after 60 s");
    sched_yield();
  }
}

static void *post_send(void *s, void *buf, size_t size, void *mh) {
  void *req = NULL;
  uint64_t dl = gn_deadline_ns(120);
  while (req == NULL) {
    IT_OK(g_v == 9 ? ((const ncclNet_v9_t *)g_net)->isend(s, buf, size, 0, mh, &req)
                   : g_net->isend(s, buf, size, 0, mh, NULL, &req));
    IT_CHECK(!gn_expired(dl), "isend NULL for 120 s");
    if (req == NULL) sched_yield();
  }
  return req;
}

static void *post_recv(void *r, void *buf, size_t size, void *mh) {
  void *req = NULL, *d[1] = {buf}, *m[1] = {mh};
  size_t sz[1] = {size};
  int tag[1] = {0};
  uint64_t dl = gn_deadline_ns(120);
  while (req == NULL) {
    IT_OK(g_v == 9 ? ((const ncclNet_v9_t *)g_net)->irecv(r, 1, d, sz, tag, m, &req)
                   : g_net->irecv(r, 1, d, sz, tag, m, NULL, &req));
    IT_CHECK(!gn_expired(dl), "irecv NULL for 120 s");
    if (req == NULL) sched_yield();
  }
  return req;
}

static ncclResult_t isend_once(void *s, void *buf, size_t size, void *mh, void **req) {
  *req = NULL;
  return g_v == 9 ? ((const ncclNet_v9_t *)g_net)->isend(s, buf, size, 0, mh, req)
                  : g_net->isend(s, buf, size, 0, mh, NULL, req);
}

static ncclResult_t irecv_once(void *r, void *buf, size_t size, void *mh, void **req) {
  void *d[1] = {buf}, *m[1] = {mh};
  size_t sz[1] = {size};
  int tag[1] = {0};
  *req = NULL;
  return g_v == 9 ? ((const ncclNet_v9_t *)g_net)->irecv(r, 1, d, sz, tag, m, req)
                  : g_net->irecv(r, 1, d, sz, tag, m, NULL, req);
}

/* The sender's work requests posted after offset `from` of the emulator's trace: data WRITEs (count, bytes, the
 * longest) and WRITE_WITH_IMMs (count, bytes). */
struct wrs {
  unsigned long long writes, write_bytes, longest, imms, imm_bytes;
};
static struct wrs trace_wrs(const char *path, long from) {
  struct wrs w = {0, 0, 0, 0, 0};
  char line[1024], me[32];
  FILE *f = fopen(path, "r");
  IT_CHECK(f != NULL, "VEMU_TRACE %s", path);
  IT_CHECK(fseek(f, from, SEEK_SET) == 0, "fseek");
  snprintf(me, sizeof me, "pid=%d ", (int)getpid());
  while (fgets(line, sizeof line, f)) {
    const char *len = strstr(line, " len=");
    unsigned long long n;
    if (strstr(line, me) == NULL || strstr(line, " post ") == NULL || len == NULL) continue;
    n = strtoull(len + 5, NULL, 10);
    if (strstr(line, " op=WRITE_IMM ")) {
      w.imms++;
      w.imm_bytes += n;
    } else if (strstr(line, " op=WRITE ")) {
      w.writes++;
      w.write_bytes += n;
      if (n > w.longest) w.longest = n;
    }
  }
  fclose(f);
  return w;
}

static long trace_size(const char *path) {
  FILE *f = fopen(path, "r");
  long n;
  IT_CHECK(f != NULL, "VEMU_TRACE %s", path);
  IT_CHECK(fseek(f, 0, SEEK_END) == 0, "fseek");
  n = ftell(f);
  fclose(f);
  return n;
}

static ncclResult_t prof(void **eh, int type, void *ph, int64_t id, void *ext) {
  (void)eh, (void)type, (void)ph, (void)id, (void)ext;
  return ncclSuccess;
}

static int side(int fd, int parent) {
  char sym[32];
  void *ctx = NULL, *s = NULL, *r = NULL, *smh = NULL, *rmh = NULL;
  g_v = (int)it_env_double("GDRNET_TEST_ABI", 11);
  IT_CHECK(g_v >= 9 && g_v <= 12, "GDRNET_TEST_ABI=%d: size_t sizes need v9+", g_v);
  snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", g_v);
  void *dl = dlopen(it_plugin_path(), RTLD_NOW | RTLD_LOCAL);
  IT_CHECK(dl != NULL, "dlopen: %s", dlerror());
  g_net = dlsym(dl, sym);
  IT_CHECK(g_net != NULL, "%s not exported", sym);
  gn_log_capture(1);
  if (g_v >= 11) {
    ncclNetCommConfig_v11_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
    IT_OK(((const ncclNet_v11_t *)g_net)->init(&ctx, 0x1a, &cfg, gn_logger, prof));
  } else if (g_v == 10) {
    IT_OK(g_net->init(gn_logger, prof));
  } else {
    IT_OK(((const ncclNet_v9_t *)g_net)->init(gn_logger));
  }
  size_t lim = max_p2p(0);
  IT_CHECK(lim == (size_t)1 << 40, "maxP2pBytes %zu, expected 1 TiB (NCCL's largest network message)", lim);
  it_step("connecting");
  connect_pair(ctx, fd, &s, &r);
  {
    /* above the limit: refused, with the limit named (never truncated), and the connection still works */
    unsigned char *buf = malloc(SMALL);
    void *req = NULL;
    IT_CHECK(buf != NULL, "oom");
    IT_OK(g_net->regMr(parent ? s : r, buf, SMALL, NCCL_PTR_HOST, parent ? &smh : &rmh));
    it_log("maxP2pBytes %zu: a message of %zu bytes must be refused", lim, lim + 1);
    gn_log_capture(1);
    if (parent) {
      IT_CHECK(isend_once(s, buf, lim + 1, smh, &req) == ncclInvalidArgument && req == NULL,
               "isend of %zu bytes was not refused with ncclInvalidArgument (maxP2pBytes %zu)", lim + 1, lim);
    } else {
      IT_CHECK(irecv_once(r, buf, lim + 1, rmh, &req) == ncclInvalidArgument && req == NULL,
               "irecv of %zu bytes was not refused with ncclInvalidArgument (maxP2pBytes %zu)", lim + 1, lim);
    }
    char *log = gn_log_captured(), want[64];
    snprintf(want, sizeof want, "at most %zu bytes per message", lim);
    IT_CHECK(strstr(log, want) != NULL, "no WARN naming the limit (\"%s\")", want);
    free(log);
    it_step("a message after the refusal");
    if (parent) {
      gn_pattern_fill(buf, SMALL, gn_pattern_seed(SMALL, 1, 7));
      test_until(post_send(s, buf, SMALL, smh), NULL, 60, "send after the refusal");
    } else {
      int got[1] = {-1};
      memset(buf, IT_CANARY, SMALL);
      test_until(post_recv(r, buf, SMALL, rmh), got, 60, "receive after the refusal");
      it_verify(buf, SMALL, got[0], SMALL, 1, 7, "receive after the refusal");
    }
    IT_OK(g_net->deregMr(parent ? s : r, parent ? smh : rmh));
    free(buf);
  }
  {
    size_t len = parent ? BIG : BIG + SLACK;
    unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t seed = gn_pattern_seed(BIG, 0, 3);
    uint64_t t0;
    IT_CHECK(buf != MAP_FAILED, "mmap of %zu bytes failed", len);
    IT_OK(g_net->regMr(parent ? s : r, buf, len, NCCL_PTR_HOST, parent ? &smh : &rmh));
    const char *trace = getenv("VEMU_TRACE");
    long tpos = 0;
    if (parent) {
      it_step("filling %zu bytes", BIG);
      gn_pattern_fill(buf, BIG, seed);
      IT_CHECK(gn_boot_barrier(fd, 120) == 0, "barrier");
      it_step("sending %zu bytes in one isend", BIG);
      if (trace && *trace) tpos = trace_size(trace);
      gn_log_capture(1);
      t0 = gn_now_ns();
      test_until(post_send(s, buf, BIG, smh), NULL, 240, "the large send");
      it_log("sent %zu bytes in %.2f s", BIG, (double)(gn_now_ns() - t0) / 1e9);
      if (trace && *trace) {
        /* (vemu's default max_msg_sz: 1 GiB, as ConnectX) */
        struct wrs w = trace_wrs(trace, tpos);
        int qps = (int)it_env_double("GDRNET_QPS_PER_CONN", 1);
        it_log("the message in the trace: %llu WRITE(s), %llu bytes, the longest %llu; %llu WRITE_WITH_IMM(s) of %llu "
               "bytes",
               w.writes, w.write_bytes, w.longest, w.imms, w.imm_bytes);
        IT_CHECK(w.write_bytes == BIG && w.longest <= (1ull << 30) && w.writes >= 3,
                 "the %zu-byte message went out as %llu WRITE(s) of %llu bytes, the longest %llu (expected WRITEs of "
                 "at most 1 GiB adding up to the message)",
                 BIG, w.writes, w.write_bytes, w.longest);
        IT_CHECK(w.imms == (unsigned long long)qps && w.imm_bytes == 8ull * (unsigned long long)qps,
                 "%llu WRITE_WITH_IMM(s) of %llu bytes: expected one per QP (%d) carrying the 8-byte size", w.imms,
                 w.imm_bytes, qps);
      }
    } else {
      int got[1] = {-1};
      memset(buf + BIG, IT_CANARY, SLACK);
      IT_CHECK(gn_boot_barrier(fd, 120) == 0, "barrier");
      it_step("receiving %zu bytes into a receive of %zu", BIG, len);
      gn_log_capture(1);
      void *req = post_recv(r, buf, len, rmh);
      t0 = gn_now_ns();
      test_until(req, got, 240, "the large receive");
      it_log("received in %.2f s; test() reported %d", (double)(gn_now_ns() - t0) / 1e9, got[0]);
      IT_CHECK(got[0] == INT_MAX, "test() reported %d bytes for a %zu-byte message (an int: INT_MAX)", got[0], BIG);
      it_step("checking %zu bytes", BIG);
      size_t bad = gn_pattern_check(buf, BIG, seed);
      IT_CHECK(bad == BIG, "byte %zu of the %zu-byte message is 0x%02x, expected 0x%02x", bad, BIG, buf[bad],
               gn_pattern_byte(seed, bad));
      for (size_t i = BIG; i < len; i++)
        IT_CHECK(buf[i] == IT_CANARY, "byte %zu past the %zu-byte message was written", i, BIG);
    }
    {
      char *log = gn_log_captured();
      char *w = strstr(log, " NCCL WARN ");
      if (w) {
        char *eol = strchr(w, '\n');
        if (eol) *eol = '\0';
      }
      IT_CHECK(w == NULL, "a WARN while the large message moved (it must move as it is, no fault):%s", w ? w : "");
      free(log);
    }
    IT_OK(g_net->deregMr(parent ? s : r, parent ? smh : rmh));
    IT_CHECK(munmap(buf, len) == 0, "munmap");
  }
  IT_CHECK(gn_boot_barrier(fd, 120) == 0, "barrier");
  IT_OK(g_net->closeSend(s));
  IT_OK(g_net->closeRecv(r));
  if (g_v >= 11) IT_OK(((const ncclNet_v11_t *)g_net)->finalize(ctx));
  IT_CHECK(dlclose(dl) == 0, "dlclose");
  return 0;
}

int main(void) {
  const char *tr = getenv("VEMU_TRACE");
  if (tr != NULL && *tr != '\0') (void)unlink(tr); /* this run's work requests only */
  return it_two_sides("large", 300, side, 120);
}
