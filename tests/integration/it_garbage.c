/* Garbage on the listen port. The listening socket is found from /proc (the sockets this process
 * gained in listen()), and its port is located in the 128-byte handle. Then raw TCP clients: connect
 * and close; random bytes; 4 KiB of random bytes; 128 zero bytes; the plugin's own handshake bytes
 * carrying another listener's nonce (captured by pointing a real connect at a silent proxy); and one
 * silent connection kept open. Throughout, accept() must return ncclSuccess with no comm, and each
 * rejected socket must be closed by the plugin within a bound. Then a real connect (from the other
 * process) must still be accepted, with the silent client still pending, and carry data both ways.
 *
 * Then (TCP only) an older plugin as the sender: this process speaks the version-1 wire protocol itself on
 * raw sockets (HELLOs whose transport data is zero, as plugins before the TCP protocol version 2 sent
 * them) to a fresh listener of the plugin, which must accept it and speak the receiver-driven CTS protocol
 * to it: the first control message it sends is the CTS of the posted receive -- not a GRANT, which a
 * version-1 sender does not know -- and an INLINE message after that CTS lands in the receive. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "it.h"

typedef struct {
  int family;
  unsigned char addr[16];
  int port;
} lport_t;

static int socket_inodes(unsigned long *out, int max) {
  DIR *d = opendir("/proc/self/fd");
  IT_CHECK(d != NULL, "opendir /proc/self/fd: %s", strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    char p[300], l[128];
    snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(p, l, sizeof l - 1);
    if (k <= 0) continue;
    l[k] = '\0';
    unsigned long ino;
    if (sscanf(l, "socket:[%lu]", &ino) == 1) out[n++] = ino;
  }
  closedir(d);
  return n;
}

/* LISTEN sockets among `inodes` (IPv4 and IPv6). */
static int listening(const unsigned long *inodes, int ni, lport_t *out, int max) {
  int n = 0;
  for (int v6 = 0; v6 <= 1; v6++) {
    FILE *f = fopen(v6 ? "/proc/self/net/tcp6" : "/proc/self/net/tcp", "r");
    if (f == NULL) continue;
    char line[512];
    if (fgets(line, sizeof line, f) == NULL) {
      fclose(f);
      continue;
    }
    while (fgets(line, sizeof line, f) != NULL && n < max) {
      char local[64], rem[64];
      unsigned st, port;
      unsigned long ino;
      if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %63[0-9A-Fa-f]:%*x %x %*s %*s %*s %*u %*u %lu", local, &port, rem, &st,
                 &ino) != 5)
        continue;
      if (st != 0x0A) continue;
      int mine = 0;
      for (int i = 0; i < ni; i++) mine |= inodes[i] == ino;
      if (!mine) continue;
      lport_t *lp = &out[n++];
      memset(lp, 0, sizeof *lp);
      lp->family = v6 ? AF_INET6 : AF_INET;
      lp->port = (int)port;
      for (int w = 0; w < (v6 ? 4 : 1); w++) {
        char word[9];
        memcpy(word, local + 8 * w, 8);
        word[8] = '\0';
        uint32_t x = (uint32_t)strtoul(word, NULL, 16); /* host order words, as the kernel prints them */
        memcpy(lp->addr + 4 * w, &x, 4);
      }
    }
    fclose(f);
  }
  return n;
}

/* listen() and the listening socket(s) it created. */
static void *listen_and_find(it_plugin_t *ip, char *handle, lport_t *lp) {
  unsigned long before[256], after[256];
  int nb = socket_inodes(before, 256);
  void *lc = NULL;
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  IT_OK(ip->net->listen(0, handle, &lc));
  IT_CHECK(lc != NULL, "NULL listenComm");
  int na = socket_inodes(after, 256);
  unsigned long fresh[256];
  int nf = 0;
  for (int i = 0; i < na; i++) {
    int old = 0;
    for (int j = 0; j < nb; j++) old |= after[i] == before[j];
    if (!old) fresh[nf++] = after[i];
  }
  lport_t found[8];
  int n = listening(fresh, nf, found, 8);
  IT_CHECK(n >= 1, "listen() created no listening TCP socket that /proc/self/net shows (%d new sockets)", nf);
  *lp = found[0];
  return lc;
}

static int find_port_in_handle(const char *h, int port) {
  for (int o = 0; o + 1 < NCCL_NET_HANDLE_MAXSIZE; o++)
    if ((unsigned char)h[o] == ((port >> 8) & 0xff) && (unsigned char)h[o + 1] == (port & 0xff)) return o;
  return -1;
}

static int raw_connect(const lport_t *lp) {
  int fd;
  if (lp->family == AF_INET) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)lp->port);
    memcpy(&a.sin_addr, lp->addr, 4);
    if (a.sin_addr.s_addr == htonl(INADDR_ANY)) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    IT_CHECK(fd >= 0, "socket");
    IT_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "raw connect to port %d: %s", lp->port,
             strerror(errno));
  } else {
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    a.sin6_port = htons((uint16_t)lp->port);
    memcpy(&a.sin6_addr, lp->addr, 16);
    if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) a.sin6_addr = in6addr_loopback;
    fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    IT_CHECK(fd >= 0, "socket");
    IT_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "raw connect to port %d: %s", lp->port,
             strerror(errno));
  }
  return fd;
}

/* Calls accept (must give nothing) until the plugin closed our socket. */
static void expect_rejected(it_plugin_t *ip, void *lc, int fd, const char *what) {
  double bound = it_env_double("GNIT_REJECT_BOUND_S", 15);
  uint64_t dl = gn_deadline_ns(bound);
  it_step("garbage '%s': waiting for the plugin to drop it", what);
  for (;;) {
    void *rc = NULL;
    ncclNetDeviceHandle_v8_t *dh = NULL;
    ncclResult_t r = ip->net->accept(lc, &rc, &dh);
    IT_CHECK(r == ncclSuccess, "garbage '%s': accept returned %s (it must reject the stranger and keep going)", what,
             gn_result_str(r));
    IT_CHECK(rc == NULL, "garbage '%s': accept returned a comm for it", what);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) > 0) {
      char buf[4096];
      ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) break; /* EOF or reset: dropped */
    }
    IT_CHECK(!gn_expired(dl), "garbage '%s': the plugin kept the connection open for %.0f s", what, bound);
    sched_yield();
  }
  close(fd);
  it_log("garbage '%s': rejected", what);
}

static void send_garbage(it_plugin_t *ip, void *lc, const lport_t *lp, const void *bytes, size_t len,
                         const char *what) {
  int fd = raw_connect(lp);
  if (len > 0) IT_CHECK(gn_boot_send(fd, bytes, len) == 0, "writing garbage: %s", strerror(errno));
  IT_CHECK(shutdown(fd, SHUT_WR) == 0, "shutdown");
  expect_rejected(ip, lc, fd, what);
}

/* Capture process: its own listener L2, a handle pointing at a silent proxy; a real connect on it
 * sends the plugin's handshake (with L2's nonce) to the proxy; the bytes go to the parent. */
static int capture_main(int fd, void *arg) {
  (void)arg;
  it_plugin_t ip;
  it_load(&ip);
  char h2[NCCL_NET_HANDLE_MAXSIZE];
  lport_t lp2;
  void *lc2 = listen_and_find(&ip, h2, &lp2);
  (void)lc2; /* deliberately left open: this process ends with _exit */
  int off = find_port_in_handle(h2, lp2.port);
  uint32_t n = 0;
  static char cap[65536];
  IT_CHECK(off >= 0, "capture: listener port %d is not in the 128-byte handle", lp2.port);
  {
    int pport = 0;
    int pl = gn_boot_tcp_listen(lp2.family == AF_INET6 ? "::" : "0.0.0.0", 0, &pport);
    IT_CHECK(pl >= 0, "proxy listen: %s", strerror(errno));
    h2[off] = (char)((pport >> 8) & 0xff);
    h2[off + 1] = (char)(pport & 0xff);
    IT_CHECK(fcntl(pl, F_SETFL, O_NONBLOCK) == 0, "fcntl");
    int pc = -1;
    void *sc = NULL;
    uint64_t dl = gn_deadline_ns(5), quiet = 0;
    while (!gn_expired(dl) && n < sizeof cap) {
      if (sc == NULL) {
        ncclNetDeviceHandle_v8_t *dh = NULL;
        if (ip.net->connect(0, h2, &sc, &dh) != ncclSuccess) break;
      }
      if (pc < 0) pc = accept4(pl, NULL, NULL, SOCK_CLOEXEC);
      if (pc >= 0) {
        ssize_t k = recv(pc, cap + n, sizeof cap - n, MSG_DONTWAIT);
        if (k > 0) {
          n += (uint32_t)k;
          quiet = gn_deadline_ns(0.3);
        } else if (k == 0) {
          break;
        }
      }
      if (n > 0 && gn_expired(quiet)) break; /* the connector waits for an answer that never comes */
      sched_yield();
    }
  }
  /* what was captured is the plugin's HELLO (64 bytes) presenting L2's nonce (handle and HELLO both carry it
   * at byte 8, plugin/sock.h) */
  IT_CHECK(n >= 64, "capture: the plugin's connect sent %u bytes to the proxy within 5 s (a HELLO is 64)", n);
  IT_CHECK(memcmp(cap + 8, h2 + 8, 8) == 0, "capture: the bytes sent do not present the listener's nonce");
  IT_CHECK(gn_boot_send(fd, &n, sizeof n) == 0 && gn_boot_send(fd, cap, n) == 0 && gn_boot_send(fd, h2, sizeof h2) == 0,
           "bootstrap");
  return 0;
}

/* The wire formats of TCP protocol version 1 (plugin/sock.h, plugin/tcp/tcp.h), written out here on purpose:
 * an older plugin sends exactly these bytes, whatever the current headers say. */
enum { V1_HELLO = 64, V1_ACK = 16, V1_HDR = 24, V1_CTS = 1, V1_INLINE = 2, V1_GRANT = 5 };

static void put16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static void old_sender_case(it_plugin_t *ip) {
  char h[NCCL_NET_HANDLE_MAXSIZE];
  lport_t lp;
  void *lc = listen_and_find(ip, h, &lp);
  const unsigned char *hu = (const unsigned char *)h;
  uint16_t nstreams;
  memcpy(&nstreams, hu + 44, 2);
  if (hu[6] != 1 /* GDR_TP_TCP */) {
    it_log("SKIP older sender: the listener is not the TCP transport");
    IT_OK(ip->net->closeListen(lc));
    return;
  }
  IT_CHECK(nstreams >= 1 && nstreams <= 64, "handle: %u data streams", nstreams);
  it_step("older (version-1) sender: %u data streams, HELLOs with zero transport data", nstreams);
  int fds[1 + 64];
  uint64_t conn_id = gn_pattern_seed(3, (uint64_t)getpid(), 5);
  for (int i = 0; i <= nstreams; i++) {
    unsigned char hello[V1_HELLO];
    memset(hello, 0, sizeof hello);
    put32(hello + 0, 0x48524447u); /* "GDRH" */
    memcpy(hello + 4, hu + 4, 2);  /* the handle's version */
    hello[6] = hu[6];              /* transport */
    hello[7] = i == 0 ? 0 : 1;     /* control, data */
    memcpy(hello + 8, hu + 8, 8);  /* the listener's nonce */
    put64(hello + 16, conn_id);
    put16(hello + 24, (uint16_t)i);
    put16(hello + 26, nstreams);
    put32(hello + 28, 0x1u); /* GDR_CAP_TCP; tp_data (32..63) stays zero */
    fds[i] = raw_connect(&lp);
    IT_CHECK(gn_boot_send(fds[i], hello, sizeof hello) == 0, "HELLO %d: %s", i, strerror(errno));
  }
  void *rc = NULL;
  uint64_t dl = gn_deadline_ns(30);
  while (rc == NULL) {
    ncclNetDeviceHandle_v8_t *dh = NULL;
    IT_OK(ip->net->accept(lc, &rc, &dh));
    IT_CHECK(rc != NULL || !gn_expired(dl), "the plugin did not accept a version-1 sender within 30 s");
    if (rc == NULL) sched_yield();
  }
  for (int i = 0; i <= nstreams; i++) {
    unsigned char ack[V1_ACK];
    IT_CHECK(gn_boot_recv(fds[i], ack, sizeof ack, 10) == 0, "no ACK on stream %d", i);
    IT_CHECK(get32(ack) == 0x41524447u && ack[6] == 0 && ack[7] == 0, "stream %d: not an OK ACK", i);
  }
  static unsigned char rbuf[4096], payload[60];
  void *mh = NULL, *req = NULL;
  IT_OK(ip->net->regMr(rc, rbuf, sizeof rbuf, NCCL_PTR_HOST, &mh));
  memset(rbuf, IT_CANARY, sizeof rbuf);
  {
    void *d[1] = {rbuf}, *m[1] = {mh};
    int sz[1] = {100}, tag[1] = {0};
    dl = gn_deadline_ns(10);
    while (req == NULL) {
      IT_OK(ip->net->irecv(rc, 1, d, sz, tag, m, &req));
      IT_CHECK(req != NULL || !gn_expired(dl), "irecv kept returning NULL");
    }
  }
  it_step("older sender: waiting for the receiver's first control message");
  unsigned char hdr[V1_HDR];
  IT_CHECK(gn_boot_recv(fds[0], hdr, sizeof hdr, 10) == 0, "no control message from the receiver within 10 s");
  IT_CHECK(get32(hdr) != V1_GRANT, "the receiver sent a GRANT (eager credits) to a version-1 sender, which does not "
                                   "know that message");
  IT_CHECK(get32(hdr) == V1_CTS && get64(hdr + 8) == 0 && get64(hdr + 16) == 100,
           "expected CTS{seq 0, 100 bytes}, got type %u seq %llu size %llu", get32(hdr),
           (unsigned long long)get64(hdr + 8), (unsigned long long)get64(hdr + 16));
  gn_pattern_fill(payload, sizeof payload, gn_pattern_seed(60, 0, 41));
  memset(hdr, 0, sizeof hdr);
  put32(hdr, V1_INLINE);
  put64(hdr + 16, sizeof payload);
  IT_CHECK(gn_boot_send(fds[0], hdr, sizeof hdr) == 0 && gn_boot_send(fds[0], payload, sizeof payload) == 0,
           "INLINE message: %s", strerror(errno));
  int done = 0, got = -1;
  dl = gn_deadline_ns(10);
  while (!done) {
    IT_OK(ip->net->test(req, &done, &got));
    IT_CHECK(done || !gn_expired(dl), "the INLINE message of a version-1 sender did not complete its receive");
    if (!done) sched_yield();
  }
  it_verify(rbuf, (int)sizeof rbuf, got, (int)sizeof payload, 0, 41, "receive from a version-1 sender");
  for (int i = 0; i <= nstreams; i++) close(fds[i]);
  IT_OK(ip->net->deregMr(rc, mh));
  IT_OK(ip->net->closeRecv(rc));
  IT_OK(ip->net->closeListen(lc));
  it_log("older (version-1) sender: CTS protocol, message received");
}

/* The real peer: waits for "go", connects with the genuine handle, exchanges data. */
static int peer_main(int fd, void *arg) {
  (void)arg;
  it_plugin_t ip;
  it_load(&ip);
  char h[NCCL_NET_HANDLE_MAXSIZE];
  IT_CHECK(gn_boot_recv(fd, h, sizeof h, 60) == 0, "no handle");
  uint64_t go = 0;
  IT_CHECK(gn_boot_recv_u64(fd, &go, 100) == 0, "no go");
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, 60);
  void *sc = NULL;
  it_step("real connect after the garbage");
  IT_GN(&ctx, gn_connect(&ctx, 0, h, &sc));
  static unsigned char buf[1 << 20];
  void *mh = NULL;
  IT_OK(ip.net->regMr(sc, buf, sizeof buf, NCCL_PTR_HOST, &mh));
  for (int i = 0; i < 4; i++) {
    int sz = i == 3 ? (int)sizeof buf : 1000 * i;
    gn_pattern_fill(buf, (size_t)sz, gn_pattern_seed((uint64_t)sz, (uint64_t)i, 77));
    IT_GN(&ctx, gn_send_sync(&ctx, sc, buf, sz, 0, mh));
  }
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  IT_OK(ip.net->deregMr(sc, mh));
  IT_OK(ip.net->closeSend(sc));
  it_unload(&ip);
  return 0;
}

int main(void) {
  it_init("garbage", 150);
  it_child_t peer, capt;
  it_fork(&peer, peer_main, NULL);
  it_fork(&capt, capture_main, NULL);
  /* the capture process's bytes first (it never talks to our listener) */
  uint32_t n = 0;
  static char cap[65536];
  char h2[NCCL_NET_HANDLE_MAXSIZE];
  IT_CHECK(gn_boot_recv(capt.fd, &n, sizeof n, 60) == 0 && n <= sizeof cap, "no capture");
  IT_CHECK(gn_boot_recv(capt.fd, cap, n, 60) == 0 && gn_boot_recv(capt.fd, h2, sizeof h2, 60) == 0, "capture bytes");
  it_join(&capt, 30);

  it_plugin_t ip;
  it_load(&ip);
  char h[NCCL_NET_HANDLE_MAXSIZE];
  lport_t lp;
  void *lc = listen_and_find(&ip, h, &lp);
  int off = find_port_in_handle(h, lp.port);
  it_log("listening on port %d (family %s); the port is %s the handle", lp.port, lp.family == AF_INET ? "IPv4" : "IPv6",
         off >= 0 ? "in" : "NOT in");
  IT_CHECK(off >= 0, "listener port %d is not in the 128-byte handle", lp.port);
  IT_CHECK(memcmp(h + 8, h2 + 8, 8) != 0, "two listens drew the same nonce");
  IT_CHECK(gn_boot_send(peer.fd, h, sizeof h) == 0, "bootstrap");

  unsigned char rnd[4096];
  uint64_t seed = gn_pattern_seed(1, (uint64_t)getpid(), 99);
  gn_pattern_fill(rnd, sizeof rnd, seed);
  unsigned char zeros[128];
  memset(zeros, 0, sizeof zeros);

  it_step("garbage: connect and close");
  {
    int fd = raw_connect(&lp);
    close(fd);
  }
  send_garbage(&ip, lc, &lp, NULL, 0, "nothing, then EOF");
  send_garbage(&ip, lc, &lp, rnd, 37, "37 random bytes");
  send_garbage(&ip, lc, &lp, rnd, sizeof rnd, "4 KiB of random bytes");
  send_garbage(&ip, lc, &lp, zeros, sizeof zeros, "128 zero bytes");
  send_garbage(&ip, lc, &lp, h, sizeof h, "our own 128-byte handle");
  send_garbage(&ip, lc, &lp, cap, n, "a real handshake with another listener's nonce");
  /* a silent stranger stays connected while the real peer connects */
  int silent = raw_connect(&lp);

  it_step("real accept after the garbage");
  IT_CHECK(gn_boot_send_u64(peer.fd, 1) == 0, "go");
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, 60);
  void *rc = NULL;
  IT_GN(&ctx, gn_accept(&ctx, lc, &rc));
  IT_OK(ip.net->closeListen(lc));
  static unsigned char buf[1 << 20];
  void *mh = NULL;
  IT_OK(ip.net->regMr(rc, buf, sizeof buf, NCCL_PTR_HOST, &mh));
  for (int i = 0; i < 4; i++) {
    int sz = i == 3 ? (int)sizeof buf : 1000 * i;
    memset(buf, IT_CANARY, sizeof buf);
    int got = -1;
    IT_GN(&ctx, gn_recv_sync(&ctx, rc, buf, (int)sizeof buf, 0, mh, &got));
    it_verify(buf, (int)sizeof buf, got, sz, (uint64_t)i, 77, "receive after the garbage");
  }
  IT_CHECK(gn_boot_barrier(peer.fd, 60) == 0, "barrier");
  close(silent);
  IT_OK(ip.net->deregMr(rc, mh));
  IT_OK(ip.net->closeRecv(rc));
  it_join(&peer, 30);
  old_sender_case(&ip);
  it_unload(&ip);
  it_log("PASS");
  return 0;
}
