/* Graceful close of streams that may still hold unacknowledged bytes (contract in sock.h, "graceful close").
 *
 * Why not plain close(): a send is complete for NCCL once its bytes are in the kernel. If the peer's kernel then
 * delivers anything to a socket this side has closed (a credit, a CTS written before the peer saw our FIN), our
 * kernel answers with a reset and drops what it had not transmitted yet: the peer loses the tail of the stream
 * (tests/integration/it_closetail reproduces it with eager messages). A stream whose send queue is
 * empty (SIOCOUTQ = 0: everything acknowledged) cannot lose anything and is closed at once; the rest stay open
 * here until they are. */
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "sock.h"

#define LINGER_MAX 1024  /* more than this lingering at once: the oldest is closed early, with a WARN */
#define LINGER_POLL_MS 2 /* gdr_linger_drain's poll interval (it is bounded; the sweep never waits) */

struct lingering {
  int fd;
  uint64_t deadline_ns;
  char what[112];
};

/* The process's lingering streams. Every plugin thread may close a comm (NCCL's service threads; several
 * communicators): one lock. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lingering g_l[LINGER_MAX];
static int g_n;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* A fork child inherits the list: the parent's streams, which the parent still watches. The child closes its copies
 * of their fds (the parent's stay open) and forgets them: it neither reads nor waits on a socket of the parent. */
static void linger_atfork_child(void) {
  for (int i = 0; i < g_n; i++) close(g_l[i].fd);
  g_n = 0;
  pthread_mutex_init(&g_mu, NULL);
}

static void linger_atfork_register(void) {
  if (pthread_atfork(NULL, NULL, linger_atfork_child) != 0) GDR_WARN("lingering streams: pthread_atfork failed");
}

/* Bytes of fd's send queue the peer has not acknowledged, or -1 when the socket is gone (error, reset, peer
 * closed and nothing left). */
static int unacked(int fd) {
  int q = 0, err = 0;
  socklen_t len = sizeof(err);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  struct tcp_info ti;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) return -1;
  len = sizeof(ti);
  /* reset by the peer (its error already read by the transport): the send queue count is stale, nothing can go */
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_CLOSE) return -1;
  if (ioctl(fd, SIOCOUTQ, &q) != 0) return -1;
  /* read (and drop) what the peer sent: an EOF or reset means it is gone; the bytes themselves are unwanted */
  if (poll(&p, 1, 0) > 0) {
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {}
    if (n == 0 && q == 0) return -1;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
  }
  return q;
}

/* GDRNET_TCP_LINGER_MS: how long a closed stream may wait for the peer's acknowledgement; 0: not at all. */
static int64_t linger_ms(void) { return gdr_param_int(GDR_PARAM_TCP_LINGER_MS); }

/* Closes entry i (lock held); warn: its deadline passed with bytes unacknowledged. */
static void drop_locked(int i, int warn_bytes) {
  if (warn_bytes > 0)
    GDR_WARN("closing the %s with %d bytes the peer has not acknowledged after GDRNET_TCP_LINGER_MS=%lld: the peer "
             "may miss the end of what this side sent (is it still reading?)",
             g_l[i].what, warn_bytes, (long long)linger_ms());
  close(g_l[i].fd);
  g_l[i] = g_l[--g_n];
}

/* One pass over the list (lock held): closes what is done or past its deadline. Returns how many remain. */
static int sweep_locked(uint64_t now) {
  for (int i = 0; i < g_n;) {
    int q = unacked(g_l[i].fd);
    if (q <= 0) {
      drop_locked(i, 0);
    } else if (now >= g_l[i].deadline_ns) {
      drop_locked(i, q);
    } else {
      i++;
    }
  }
  return g_n;
}

void gdr_sock_close_graceful(int fd, const char *what) {
  int64_t ms = linger_ms();
  uint64_t now = gdr_time_ns();
  if (fd < 0) return;
  pthread_once(&g_once, linger_atfork_register); /* before the first entry a child could inherit */
  (void)shutdown(fd, SHUT_WR);                   /* FIN after the data; fails harmlessly on a socket already reset */
  pthread_mutex_lock(&g_mu);
  (void)sweep_locked(now);
  if (ms <= 0 || unacked(fd) <= 0) {
    close(fd);
  } else {
    if (g_n == LINGER_MAX) drop_locked(0, 1); /* bounded: the oldest goes first */
    g_l[g_n].fd = fd;
    g_l[g_n].deadline_ns = now + (uint64_t)ms * 1000000ull;
    snprintf(g_l[g_n].what, sizeof(g_l[g_n].what), "%s", what ? what : "stream");
    g_n++;
  }
  pthread_mutex_unlock(&g_mu);
}

void gdr_linger_sweep(void) {
  pthread_mutex_lock(&g_mu);
  if (g_n > 0) (void)sweep_locked(gdr_time_ns());
  pthread_mutex_unlock(&g_mu);
}

void gdr_linger_drain(void) {
  pthread_mutex_lock(&g_mu);
  while (g_n > 0 && sweep_locked(gdr_time_ns()) > 0) {
    pthread_mutex_unlock(&g_mu);
    (void)poll(NULL, 0, LINGER_POLL_MS); /* waiting for the peer's acknowledgements: bounded by each deadline */
    pthread_mutex_lock(&g_mu);
  }
  pthread_mutex_unlock(&g_mu);
}

int gdr_linger_count(void) {
  int n;
  pthread_mutex_lock(&g_mu);
  n = g_n;
  pthread_mutex_unlock(&g_mu);
  return n;
}
