/* What a connection that ends half-way leaves behind, counted in sockets of this process: both
 * ends of a connection in one process over the verbs emulator, driven call by call (connect, accept, isend, irecv,
 * test) so each case stops the peer at the point it names. One case per process (the emulator reads its faults at
 * init): test_rdma_leaks CASE, CASE one of
 *   listen           closeListen while the accept waits for the fallback's TCP connection (a connection that runs
 *                    over TCP from the start): its TCP listener must be closed with it (no listening socket left)
 *   connect_timeout  the connect's last stage, the TCP connection, past GDRNET_CONNECT_TIMEOUT_MS (the receiver
 *                    stopped accepting): connect fails, and its comm, control socket and TCP connect in flight go
 *   move             a move to TCP that fails (GDRNET_RECOVERY_TIMEOUT_MS) with the sender's TCP connect in flight
 *                    (the receiver stopped: its thread stuck in a call, the comm's lock held): closeSend releases
 *                    every socket of it, the TCP connect's too
 * Every case ends with the TCP socket count where it was before the first listen. XT_SOCKETS=1 lists the sockets
 * at each count, XT_VERBOSE=1 prints the plugin's INFO lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "sock.h"
#include "transport.h"
#include "rdma/rdma.h"

#ifndef XT_VEMU_LIB
#error "XT_VEMU_LIB (path of the emulator's libibverbs.so.1) must be defined"
#endif

static const struct gdr_transport *T = &gdr_transport_rdma;
static const char *which;
static char vdir[64];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* TCP sockets of this process, less those a graceful close keeps until the peer acknowledged them (linger.c: closed
 * once acknowledged, or at their deadline); *listening: how many of them listen. */
static int sockets(int *listening) {
  int n = 0, l = 0;
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    struct stat st;
    int fd = atoi(e->d_name), acc = 0;
    socklen_t len = sizeof(acc);
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    /* TCP only (the emulator's agent talks to its peer over Unix sockets of its own) */
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) != 0 || (sa.ss_family != AF_INET && sa.ss_family != AF_INET6))
      continue;
    n++;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) == 0 && acc) l++;
  }
  closedir(d);
  n -= gdr_linger_count();
  if (listening) *listening = l;
  if (getenv("XT_SOCKETS")) {
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd | grep socket; ss -tanp | grep 'pid=%d,'; ss -xp | grep 'pid=%d,' ",
             (int)getpid(), (int)getpid(), (int)getpid());
    if (system(cmd) != 0) fprintf(stderr, "(no listing)\n");
    fprintf(stderr, "%d socket(s) lingering\n", gdr_linger_count());
  }
  return n;
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level > NCCL_LOG_WARN && !getenv("XT_VERBOSE")) return;
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[%s] %s %s\n", which, level == NCCL_LOG_WARN ? "WARN" : "INFO", msg);
}

static void setup(const char *faults) {
  snprintf(vdir, sizeof(vdir), "/tmp/gdr-xt-leaks-XXXXXX");
  assert_non_null(mkdtemp(vdir));
  setenv("VEMU_DIR", vdir, 1);
  setenv("GDRNET_IBVERBS_LIB", XT_VEMU_LIB, 1);
  setenv("GDRNET_SOCKET_IFNAME", "lo", 1);
  setenv("VEMU_DEVICES", "vemu0:roce", 1);
  setenv("VEMU_TIME_SCALE", "0.01", 1);
  if (faults) setenv("VEMU_FAULTS", faults, 1);
  gdr_log_init(logger);
  gdr_params_reset();
  assert_int_equal(gdr_params_load(), ncclSuccess);
  int ndev = 0;
  char why[512] = "";
  assert_int_equal(T->init(&ndev, why, sizeof(why)), ncclSuccess);
  assert_true(ndev >= 1);
}

static void teardown(void) {
  char cmd[128];
  T->quiesce();
  T->fini();
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", vdir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", vdir);
}

/* Connect and accept, one call each in turn, until the pending accept holds the fallback's TCP listener (the
 * connection runs over TCP from the start: the first create_qp fails). The sender then waits for its handle. */
static void until_tcp_accept(void *lc, struct gdr_handle *h, void **sc) {
  struct gdr_rdma_listen *l = lc;
  void *rc = NULL;
  double dl = now_s() + 20;
  *sc = NULL;
  while (!(l->pending && l->pending->fb.tcp_listen)) {
    struct gdr_conn_opts o = gdr_conn_opts_one(0);
    if (*sc == NULL) assert_int_equal(T->connect(0, &o, h, sc), ncclSuccess);
    assert_null(*sc); /* (it cannot finish before the accept took its TCP connection) */
    assert_int_equal(T->accept(lc, &rc), ncclSuccess);
    assert_null(rc);
    assert_true(now_s() < dl);
  }
}

static void case_listen(void) {
  int l0, l1, l2;
  void *lc = NULL, *sc = NULL;
  struct gdr_handle h;
  setenv("GDRNET_CONNECT_TIMEOUT_MS", "400", 1);
  setup("fail:call=create_cq:nth=1:errno=ENOMEM");
  int s0 = sockets(&l0);
  memset(&h, 0, sizeof(h));
  struct gdr_conn_opts o = gdr_conn_opts_one(0);
  assert_int_equal(T->listen(0, &o, &h, &lc), ncclSuccess);
  until_tcp_accept(lc, &h, &sc);
  sockets(&l1);
  assert_int_equal(l1, l0 + 3); /* the RDMA listener, its TCP door (sock.h) and the pending accept's TCP listener */
  assert_int_equal(T->close_listen(lc), ncclSuccess);
  sockets(&l2);
  if (l2 != l0) fprintf(stderr, "[listen] %d listening socket(s) left after closeListen, %d before listen\n", l2, l0);
  assert_int_equal(l2, l0);
  /* the sender learns it (its control stream's EOF, or a TCP connect refused until its deadline) */
  double dl = now_s() + 20;
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && sc == NULL) {
    r = T->connect(0, &o, &h, &sc);
    assert_true(now_s() < dl);
  }
  assert_int_not_equal(r, ncclSuccess);
  assert_int_equal(sockets(NULL), s0);
  teardown();
}

static void case_connect_timeout(void) {
  void *lc = NULL, *sc = NULL;
  struct gdr_handle h;
  setenv("GDRNET_CONNECT_TIMEOUT_MS", "400", 1);
  setup("fail:call=create_cq:nth=1:errno=ENOMEM");
  int s0 = sockets(NULL);
  memset(&h, 0, sizeof(h));
  struct gdr_conn_opts o = gdr_conn_opts_one(0);
  assert_int_equal(T->listen(0, &o, &h, &lc), ncclSuccess);
  until_tcp_accept(lc, &h, &sc);
  int s1 = sockets(NULL); /* the sender has its control socket only */
  /* the receiver accepts no more: the sender's TCP connection cannot finish */
  double dl = now_s() + 20;
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && sc == NULL) {
    r = T->connect(0, &o, &h, &sc);
    assert_true(now_s() < dl);
  }
  assert_int_equal(r, ncclRemoteError);
  assert_null(sc);
  int s2 = sockets(NULL);
  if (s2 != s1 - 1)
    fprintf(stderr,
            "[connect_timeout] %d socket(s) after the failed connect, %d before its last stage (expected "
            "one fewer: its control socket; the TCP connect's must be gone)\n",
            s2, s1);
  assert_int_equal(s2, s1 - 1);
  assert_int_equal(T->close_listen(lc), ncclSuccess);
  assert_int_equal(sockets(NULL), s0);
  teardown();
}

static void case_move(void) {
  void *lc = NULL, *sc = NULL, *rc = NULL, *smh = NULL, *rmh = NULL, *sq = NULL, *rq = NULL;
  struct gdr_handle h;
  static char sbuf[4096], rbuf[4096];
  setenv("GDRNET_RECOVERY_ATTEMPTS", "0", 1);
  setenv("GDRNET_RECOVERY_TIMEOUT_MS", "400", 1);
  setenv("GDRNET_FAILBACK", "0", 1);
  setup("wc:op=write_imm:nth=1:status=retry_exc");
  int s0 = sockets(NULL);
  memset(&h, 0, sizeof(h));
  struct gdr_conn_opts o = gdr_conn_opts_one(0);
  assert_int_equal(T->listen(0, &o, &h, &lc), ncclSuccess);
  double dl = now_s() + 20;
  while (sc == NULL || rc == NULL) {
    if (sc == NULL) assert_int_equal(T->connect(0, &o, &h, &sc), ncclSuccess);
    if (rc == NULL) assert_int_equal(T->accept(lc, &rc), ncclSuccess);
    assert_true(now_s() < dl);
  }
  assert_int_equal(T->close_listen(lc), ncclSuccess);
  assert_int_equal(T->reg_mr(sc, sbuf, sizeof(sbuf), NCCL_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(T->reg_mr(rc, rbuf, sizeof(rbuf), NCCL_PTR_HOST, &rmh), ncclSuccess);
  void *data[1] = {rbuf}, *mhs[1] = {rmh};
  size_t sizes[1] = {sizeof(rbuf)};
  int tags[1] = {7}, done = 0;
  size_t got[1] = {0};
  assert_int_equal(T->irecv(rc, 1, data, sizes, tags, mhs, &rq), ncclSuccess);
  assert_non_null(rq);
  /* the send's WRITE_WITH_IMM fails (no recovery): the sender moves to TCP and asks the receiver; the receiver
   * answers with its TCP listener, then stops */
  struct gdr_rdma_comm *r = rc;
  while (!r->fb.tcp_listen) {
    if (sq == NULL) assert_int_equal(T->isend(sc, sbuf, 100, 7, smh, &sq), ncclSuccess);
    if (sq) assert_int_equal(T->test(sq, &done, got), ncclSuccess);
    assert_int_equal(T->test(rq, &done, got), ncclSuccess);
    assert_true(now_s() < dl);
  }
  /* the receiver stops: its thread is stuck in a call (holding the comm's lock, so the idle-peer service,
   * service.c, cannot answer for it either) */
  pthread_mutex_lock(&r->svc_mu);
  int s1 = sockets(NULL);
  /* the sender's move: its TCP connect starts and cannot finish; the move's bound fails the connection */
  ncclResult_t res = ncclSuccess;
  done = 0;
  while (res == ncclSuccess && !done) {
    if (sq == NULL) {
      res = T->isend(sc, sbuf, 100, 7, smh, &sq);
      continue;
    }
    res = T->test(sq, &done, got);
    assert_true(now_s() < dl);
  }
  assert_int_equal(res, ncclRemoteError);
  assert_int_equal(T->dereg_mr(sc, smh), ncclSuccess);
  assert_int_equal(T->close_send(sc), ncclSuccess);
  int s2 = sockets(NULL);
  if (s2 != s1 - 1)
    fprintf(stderr,
            "[move] %d socket(s) after closeSend, %d before the move's TCP connect (expected one fewer: the "
            "control socket)\n",
            s2, s1);
  assert_int_equal(s2, s1 - 1);
  pthread_mutex_unlock(&r->svc_mu);
  assert_int_equal(T->dereg_mr(rc, rmh), ncclSuccess);
  assert_int_equal(T->close_recv(rc), ncclSuccess);
  assert_int_equal(sockets(NULL), s0);
  teardown();
}

static void run(void **state) {
  (void)state;
  if (strcmp(which, "listen") == 0)
    case_listen();
  else if (strcmp(which, "connect_timeout") == 0)
    case_connect_timeout();
  else if (strcmp(which, "move") == 0)
    case_move();
  else
    fail_msg("unknown case %s (listen, connect_timeout, move)", which);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s listen|connect_timeout|move\n", argv[0]);
    return 2;
  }
  which = argv[1];
  const struct CMUnitTest tests[] = {cmocka_unit_test(run)};
  return cmocka_run_group_tests_name(which, tests, NULL, NULL);
}
