/* pingpong: small-message latency of the plugin's TCP transport against the floor that plain sockets set.
 *
 * Two processes (fork) on this host. Process A sends, B answers; A records each round trip; the result is
 * half of it (one-way latency), p50 / average / p99 over --iters after --warmup.
 *
 *   --mode raw-block  one TCP connection over loopback (TCP_NODELAY), blocking write() / read(): 1 system call
 *                     per message per side, the calling thread sleeps in read() (a wake-up per message).
 *   --mode raw-busypoll  raw-block with SO_BUSY_POLL (--busy-poll US, default 50) on both sockets: the kernel
 *                     spins on the device queue in read() before it sleeps, where the socket has a NAPI id (a NIC
 *                     driver's; loopback and veth give none, so there it should equal raw-block).
 *   --mode raw-spin   the same as raw-block, but the reader spins on recv(MSG_DONTWAIT) as NCCL's proxy thread spins on
 *                     test(): the lower bound for a plugin whose test() reads the socket (1 write + 1 read per
 *                     message, plus the empty reads while waiting).
 *   --mode raw-nap    raw-spin, but an empty read is followed by ppoll() with a short timeout (--nap-us, default 50):
 *                     the thread sleeps, but never for long, which might keep its core out of deep idle states
 *                     and make the wake-up by the data cheaper than raw-block's.
 *   --mode raw-spin2  raw-spin over two connections, one per direction, as the plugin (and NCCL's Socket
 *                     transport) use them: the receiving socket of each never sends data, so the kernel sends a
 *                     pure ACK per message from inside the reader's recv() instead of piggybacking it.
 *   --mode plugin     the plugin (--plugin SO, ncclNet v8) as NCCL's proxy thread drives it: a send comm and a
 *                     receive comm each way, receives posted ahead with --recv-size bytes (NCCL posts whole
 *                     steps: 65536 for LL; default: --size), isend, then test() in a loop until done.
 *
 * A benchmark helper (bench/latency builds and runs it), not a test.
 * usage: pingpong --mode raw-block|raw-busypoll|raw-spin|raw-nap|raw-spin2|plugin [--plugin SO] [--size S]
 *                 [--recv-size R] [--iters N] [--warmup W] [--busy-poll US] [--nap-us US]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gdrnet/net_v8.h"
#define BENCH_PROG "pingpong"
#include "bench_common.h"

static ncclNet_v8_t *net;

static int nap_us = 50; /* raw-nap: the reader's ppoll timeout between empty reads (set to 0, spins, in other modes) */

static void recv_spin(int fd, void *buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = recv(fd, (char *)buf + off, len - off, MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n == 0) die("recv: EOF");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("recv: %s", strerror(errno));
    if (nap_us > 0) {
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      struct timespec ts = {.tv_sec = nap_us / 1000000, .tv_nsec = (long)(nap_us % 1000000) * 1000};
      if (ppoll(&pf, 1, &ts, NULL) < 0 && errno != EINTR) die("ppoll: %s", strerror(errno));
    }
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------------------------------------- raw sockets -- */

static int busy_poll_us = 50; /* raw-busypoll: SO_BUSY_POLL's value */

static void raw_pair(int ctl, int *fd, int busy) {
  if (role == 'B') {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0)
      die("listen: %s", strerror(errno));
    xfer_all(ctl, &a.sin_port, sizeof a.sin_port, 1);
    *fd = accept(l, NULL, NULL);
    if (*fd < 0) die("accept: %s", strerror(errno));
    close(l);
  } else {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    xfer_all(ctl, &a.sin_port, sizeof a.sin_port, 0);
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    if (*fd < 0 || connect(*fd, (struct sockaddr *)&a, sizeof a) != 0) die("connect: %s", strerror(errno));
  }
  int one = 1;
  if (setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY: %s", strerror(errno));
  if (busy && setsockopt(*fd, SOL_SOCKET, SO_BUSY_POLL, &busy_poll_us, sizeof busy_poll_us) != 0)
    die("SO_BUSY_POLL %d: %s", busy_poll_us, strerror(errno));
}

/* ------------------------------------------------------------------------------------------------ plugin -- */

static void plugin_open(const char *so, int ctl, size_t size, size_t rsize, struct pconn *p) {
  void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!dl) die("dlopen: %s", dlerror());
  net = (ncclNet_v8_t *)dlsym(dl, "ncclNetPlugin_v8");
  if (!net) die("no ncclNetPlugin_v8 in %s", so);
  if (net->init(logger) != ncclSuccess) die("init failed");
  pconn_open(net, ctl, size, rsize, p);
}

static void plugin_close(struct pconn *p) {
  if (net->deregMr(p->s, p->smh) != ncclSuccess || net->deregMr(p->r, p->rmh) != ncclSuccess ||
      net->closeSend(p->s) != ncclSuccess || net->closeRecv(p->r) != ncclSuccess ||
      net->closeListen(p->l) != ncclSuccess)
    die("close failed");
  free(p->sbuf);
  free(p->rbuf);
}

static void *post_recv(struct pconn *p, int rsize) {
  void *req = NULL, *d = p->rbuf, *mh = p->rmh;
  int tag = 0;
  while (req == NULL)
    if (net->irecv(p->r, 1, &d, &rsize, &tag, &mh, &req) != ncclSuccess) die("irecv failed");
  return req;
}

static void wait_req(void *req, int *size) {
  int done = 0;
  while (!done)
    if (net->test(req, &done, size) != ncclSuccess) die("test failed");
}

static void send_msg(struct pconn *p, int size) {
  void *req = NULL;
  while (req == NULL)
    if (net->isend(p->s, p->sbuf, size, 0, p->smh, &req) != ncclSuccess) die("isend failed");
  wait_req(req, NULL);
}

/* ---------------------------------------------------------------------------------------------------- main -- */

int main(int argc, char **argv) {
  const char *mode = NULL, *plugin = NULL;
  long size = 8, rsize = -1, iters = 20000, warmup = 1000;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) die("%s needs a value", a);
    if (!strcmp(a, "--mode"))
      mode = v;
    else if (!strcmp(a, "--plugin"))
      plugin = v;
    else if (!strcmp(a, "--size"))
      size = atol(v);
    else if (!strcmp(a, "--recv-size"))
      rsize = atol(v);
    else if (!strcmp(a, "--iters"))
      iters = atol(v);
    else if (!strcmp(a, "--warmup"))
      warmup = atol(v);
    else if (!strcmp(a, "--busy-poll"))
      busy_poll_us = atoi(v);
    else if (!strcmp(a, "--nap-us"))
      nap_us = atoi(v);
    else
      die("unknown option %s", a);
    i++;
  }
  if (rsize < 0) rsize = size;
  if (!mode ||
      (strcmp(mode, "raw-block") && strcmp(mode, "raw-busypoll") && strcmp(mode, "raw-spin") &&
       strcmp(mode, "raw-nap") && strcmp(mode, "raw-spin2") && strcmp(mode, "plugin")) ||
      (!strcmp(mode, "plugin") && !plugin) || size < 0 || size > (1 << 24) || rsize < size || rsize > (1 << 24) ||
      iters < 1 || warmup < 0 || busy_poll_us < 1 || nap_us < 1)
    die("usage: pingpong --mode raw-block|raw-busypoll|raw-spin|raw-nap|raw-spin2|plugin [--plugin SO] [--size S] "
        "[--recv-size R >= S] [--iters N] [--warmup W] [--busy-poll US >= 1] [--nap-us US >= 1]");
  int is_plugin = !strcmp(mode, "plugin"), two = !strcmp(mode, "raw-spin2");
  int nap = !strcmp(mode, "raw-nap"), spin = two || nap || !strcmp(mode, "raw-spin");
  int busy = !strcmp(mode, "raw-busypoll");
  if (!nap) nap_us = 0;

  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) die("socketpair: %s", strerror(errno));
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) die("fork: %s", strerror(errno));
  role = child == 0 ? 'B' : 'A';
  int ctl = child == 0 ? sp[1] : sp[0];
  close(child == 0 ? sp[0] : sp[1]);

  uint64_t *rtt = calloc((size_t)iters, sizeof *rtt);
  char *buf = malloc((size_t)(size ? size : 1));
  if (!rtt || !buf) die("out of memory");
  memset(buf, role, (size_t)(size ? size : 1));
  int fd = -1, ofd = -1; /* raw: read fd, write fd (the same but in raw-spin2) */
  struct pconn p;
  if (is_plugin) {
    plugin_open(plugin, ctl, (size_t)size, (size_t)rsize, &p);
  } else {
    raw_pair(ctl, &fd, busy);
    ofd = fd;
    if (two) { /* a second connection, listened for by A: A writes on the first, B on the second */
      role = role == 'A' ? 'B' : 'A';
      raw_pair(ctl, &ofd, busy);
      role = role == 'A' ? 'B' : 'A';
      if (role == 'A') {
        int t = fd;
        fd = ofd;
        ofd = t;
      }
    }
  }
  char go = 'g';
  if (role == 'A')
    xfer_all(ctl, &go, 1, 0);
  else
    xfer_all(ctl, &go, 1, 1);

  void *rreq = is_plugin ? post_recv(&p, (int)rsize) : NULL; /* posted ahead, as NCCL does */
  for (long i = 0; i < warmup + iters; i++) {
    uint64_t t0 = now_ns();
    if (role == 'A') {
      if (is_plugin) {
        int got = -1;
        send_msg(&p, (int)size);
        wait_req(rreq, &got);
        if (got != size) die("received %d bytes, expected %ld", got, size);
        rreq = post_recv(&p, (int)rsize);
      } else {
        xfer_all(ofd, buf, (size_t)size, 1);
        if (spin)
          recv_spin(fd, buf, (size_t)size);
        else
          xfer_all(fd, buf, (size_t)size, 0);
      }
      if (i >= warmup) rtt[i - warmup] = now_ns() - t0;
    } else {
      if (is_plugin) {
        int got = -1;
        wait_req(rreq, &got);
        if (got != size) die("received %d bytes, expected %ld", got, size);
        rreq = post_recv(&p, (int)rsize);
        send_msg(&p, (int)size);
      } else {
        if (spin)
          recv_spin(fd, buf, (size_t)size);
        else
          xfer_all(fd, buf, (size_t)size, 0);
        xfer_all(ofd, buf, (size_t)size, 1);
      }
    }
  }
  /* the last posted receive: A answers it with one more message so that B's last post completes */
  if (is_plugin) {
    if (role == 'A') {
      send_msg(&p, (int)size);
      xfer_all(ctl, &go, 1, 0); /* B has it; A's own last receive is left posted at close */
    } else {
      wait_req(rreq, NULL);
      xfer_all(ctl, &go, 1, 1);
    }
    plugin_close(&p);
  } else {
    close(fd);
    if (ofd != fd) close(ofd);
  }
  if (role == 'B') _exit(0);
  int st = 0;
  if (waitpid(child, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) die("process B failed");
  qsort(rtt, (size_t)iters, sizeof *rtt, cmp_u64);
  double sum = 0;
  for (long i = 0; i < iters; i++) sum += (double)rtt[i];
  long i99 = (long)((double)iters * 0.99);
  printf("pingpong mode=%s size=%ld recv_size=%ld iters=%ld p50_us=%.2f avg_us=%.2f p99_us=%.2f\n", mode, size, rsize,
         iters, (double)rtt[(iters - 1) / 2] / 2e3, sum / (double)iters / 2e3,
         (double)rtt[i99 > 0 ? i99 - 1 : 0] / 2e3);
  free(rtt);
  free(buf);
  return 0;
}
