/* gdrnet-perf: measure the plugin through its own ABI between two processes, like perftest.
 *
 *   gdrnet-perf --local [options]             two processes forked on this host
 *   gdrnet-perf --server [--port P] [options] one end; waits for a client
 *   gdrnet-perf --client HOST [--port P] ...  the other end; its options (sizes, iterations, ...) rule
 *
 * Process A (--local parent, or the client) drives the run and prints the table; process B (the
 * --local child, or the server) follows the commands A sends over the bootstrap socket. Both load the
 * plugin after the fork, exactly as NCCL ranks do, and drive it as NCCL 2.28 does (docs/design.md §2,
 * docs/abi.md): init, devices, getProperties, listen → handle over the bootstrap → connect / accept
 * re-entered while NULL, closeListen after accept, regMr per buffer, isend/irecv on sub-ranges with up
 * to --inflight outstanding, test() until done, iflush for GPUDirect receives, deregMr, close. */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gn.h"
#include "perf_cuda.h"

#ifndef GDRNET_VERSION
#define GDRNET_VERSION "0.0.0"
#endif

#define MAX_INFLIGHT 32
#define PERF_STR_(x) #x
#define PERF_STR(x) PERF_STR_(x)
#define DEFAULT_PORT 18515
#define BUF_CAP (128ull << 20) /* data buffer cap per direction: slots shrink for big messages */
#define CTRL_BYTES 4096        /* a control region after the data slots (acks) */
#define SALT_A2B 0xa2bull
#define SALT_B2A 0xb2aull

/* OP_ROW (client to server only): A's result row for the size just measured follows as a row_t, so that the server
 * prints the same table as the client. */
enum { OP_RUN = 1, OP_DONE = 2, OP_ROW = 3 };

/* What A tells B: the run parameters (once) and then one command per measurement. */
typedef struct {
  uint64_t magic;
  uint64_t max_size;
  uint32_t inflight;
  uint32_t check;
  uint32_t bidir;
  uint32_t reps; /* the client's --reps: the server's table header says what its rows are */
} params_t;

typedef struct {
  uint32_t op;
  uint32_t pad;
  uint64_t size;
  uint64_t lat_iters;
  uint64_t bw_iters;
  uint64_t iter_base;
} cmd_t;

typedef struct {
  uint32_t status; /* 0 ok */
  uint32_t pad;
  uint64_t bw_ns;
  uint64_t mismatches;
  char msg[256];
} result_t;

#define PARAMS_MAGIC 0x6764726e70657232ull /* "gdrnper2": with OP_ROW */

typedef struct {
  /* command line */
  int mode; /* 'l' local, 's' server, 'c' client */
  const char *host;
  int port;
  const char *transport;
  uint64_t min_size, max_size;
  uint64_t factor;
  uint64_t iters;  /* 0: automatic */
  double duration; /* 0: none */
  int inflight;
  int qps;
  int cuda_dev; /* -1: host memory */
  int check;
  int bidir;
  const char *json, *csv;
  const char *plugin;
  int verbose;
  int dev;
  double timeout;
  int reps; /* measurements per size; the row shows their median and spread */
} opts_t;

/* One size's result: with --reps N, the median of N measurements (gbps, avg/p50/p99, msgs) and their range. */
typedef struct {
  uint64_t size, lat_iters, bw_iters;
  double gbps, avg_us, p50_us, p99_us, msgs;
  uint64_t reps;
  double gbps_min, gbps_max, p50_min, p50_max;
} row_t;

typedef struct {
  opts_t o;
  int role; /* 'A' or 'B' */
  int bootfd;
  gn_plugin_t plug;
  const ncclNet_v8_t *net;
  ncclNetProperties_v8_t props;
  void *scomm, *rcomm;
  void *smh, *rmh;
  char *sbuf, *rbuf; /* host or device pointers */
  char *stage;       /* host staging for --check with device buffers */
  size_t data_bytes, buf_bytes;
  int cuda;       /* buffers are device memory */
  int need_flush; /* GPUDirect receives: iflush after each non-empty receive */
  int use_dmabuf;
  gn_ctx_t ctx;
  /* per command */
  uint64_t mismatches;
  char first_err[256];
  int fatal;
  int setup_ok; /* both ends loaded the plugin and connected: the counters are worth a line even when zero */
  int json_fd;  /* --json -: the JSON goes to the original stdout (fd), the human lines to stderr */
  char fatal_msg[512];
  uint64_t polls;
  /* progress */
  int tty;
  uint64_t cmd_start_ns, last_progress_ns;
  int progress_shown;
  int rep; /* the repetition running (1-based), for the progress line */
} perf_t;

static perf_t P;
static pid_t g_child = -1;

/* ------------------------------------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(f,
          "usage: gdrnet-perf --local  [options]\n"
          "       gdrnet-perf --server [--port P] [options]\n"
          "       gdrnet-perf --client HOST [--port P] [options]\n"
          "\n"
          "Measures the libnccl-net-gdr plugin through its ncclNet v8 ABI between two processes, driving it\n"
          "exactly as NCCL does. Latency comes from a ping-pong phase (half round trip), bandwidth from a\n"
          "streaming phase (one direction, or both with --bidir).\n"
          "\n"
          "  --local              fork both ends on this host (over the verbs emulator: a private VEMU_DIR under\n"
          "                       TMPDIR, removed at the end, unless VEMU_DIR is set)\n"
          "  --server             wait for a client (bootstrap on TCP port P)\n"
          "  --client HOST        connect to a server; the client's run options are used by both ends\n"
          "  --port P             bootstrap TCP port (default %d; --server --port 0 picks a free one and prints it)\n"
          "                       (the server prints the client, the transport and the client's table too)\n"
          "  --transport T        rdma|tcp|auto: sets GDRNET_TRANSPORT for the plugin\n"
          "  --sizes MIN:MAX[:F]  message sizes MIN, MIN*F, ... and MAX (default 8:64M:4; K/M/G suffixes)\n"
          "  --iters N            messages per size in each phase (default: 1000, fewer for large sizes)\n"
          "  --duration S         instead of --iters: about S seconds per size and phase\n"
          "  --reps N             measure each size N times (1..1000, default 1): the row shows the median, and\n"
          "                       the spread ((max - min) / median, %%) of GB/s and p50 in two more columns\n"
          "  --inflight N         requests in flight per direction, 1..%d (default 8)\n"
          "  --qps N              QPs per connection: sets GDRNET_QPS_PER_CONN\n"
          "  --cuda DEV           CUDA device memory on GPU DEV (needs libcuda.so.1 and a GDR-capable plugin)\n"
          "  --check              fill every message with a pattern of (size, iteration, offset) and verify\n"
          "                       every byte and every reported size on the receiver\n"
          "  --bidir              stream both directions at once in the bandwidth phase\n"
          "  --dev N              plugin device (default 0)\n"
          "  --json FILE          also write the rows as JSON (-: to stdout, the table then goes to stderr), with\n"
          "                       each process's counters and connections (transport, state, p50/p99, stalls,\n"
          "                       recoveries, moves to TCP) once the plugin is unloaded\n"
          "  --csv FILE           also write the rows as CSV (-: to stdout, likewise)\n"
          "  --plugin PATH        plugin to load (default: $GDRNET_PLUGIN, else <bindir>/../lib/libnccl-net-gdr.so,\n"
          "                       else libnccl-net-gdr.so from the loader's path)\n"
          "  --timeout S          give up on any single phase (and --client on reaching the server) after S seconds\n"
          "                       (default 120)\n"
          "  -v, --verbose        print the plugin's INFO lines (NCCL_DEBUG=INFO does the same)\n"
          "  --version            print the version and exit\n"
          "  -h, --help           this text\n"
          "\n"
          "Exit status: 0 on success, 1 on any error or data mismatch (the reason is printed), 2 on usage errors.\n",
          DEFAULT_PORT, MAX_INFLIGHT);
}

static void usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "gdrnet-perf: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(try gdrnet-perf --help)\n");
  exit(2);
}

static void perr(const char *fmt, ...) GN_PRINTF(1, 2);
static void perr(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (P.tty && P.progress_shown) {
    fputs("\r\033[K", stdout);
    fflush(stdout);
    P.progress_shown = 0;
  }
  fprintf(stderr, "gdrnet-perf%s: error: %s\n", P.role == 'B' ? " (peer B)" : "", buf);
}

static int parse_int(const char *s, long lo, long hi, const char *what) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
    char msg[128];
    snprintf(msg, sizeof msg, "bad %s '%%s' (expected %ld..%ld)", what, lo, hi);
    usage_error(msg, s);
  }
  return (int)v;
}

#define SIZES_ACCEPTED                                                                                                 \
  "MIN:MAX[:FACTOR]: byte counts with optional K/M/G suffix (binary: 64K = 65536), MIN <= MAX <= 1G, FACTOR 2..1024"

static void parse_sizes(const char *s, opts_t *o) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  char *parts[3] = {NULL, NULL, NULL};
  int n = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ":", &save); t != NULL && n < 3; t = strtok_r(NULL, ":", &save)) parts[n++] = t;
  if (n < 1 || strtok_r(NULL, ":", &save) != NULL) usage_error("bad --sizes '%s' (expected " SIZES_ACCEPTED ")", s);
  if (gn_parse_size(parts[0], &o->min_size) != 0)
    usage_error("bad --sizes '%s': MIN is not a size (expected " SIZES_ACCEPTED ")", s);
  o->max_size = o->min_size;
  if (n >= 2 && gn_parse_size(parts[1], &o->max_size) != 0)
    usage_error("bad --sizes '%s': MAX is not a size (expected " SIZES_ACCEPTED ")", s);
  if (n == 3) {
    char *end = NULL;
    errno = 0;
    unsigned long long f = strtoull(parts[2], &end, 10);
    if (errno || end == parts[2] || *end != '\0' || f < 2 || f > 1024)
      usage_error("bad --sizes '%s': FACTOR must be an integer in 2..1024", s);
    o->factor = f;
  }
  if (o->max_size < o->min_size) usage_error("bad --sizes '%s': MAX < MIN (expected " SIZES_ACCEPTED ")", s);
  if (o->max_size > (1ull << 30)) usage_error("bad --sizes '%s': at most 1G per message (the v8 ABI's int size)", s);
}

/* Seconds in (0, max]; a usage error naming the option and the range otherwise. */
static double parse_seconds(const char *s, const char *opt, double max) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !(v > 0) || v > max) {
    char msg[160];
    snprintf(msg, sizeof msg, "bad %s '%%s' (expected seconds, more than 0 and at most %.0f, e.g. 30 or 0.5)", opt,
             max);
    usage_error(msg, s);
  }
  return v;
}

/* --json/--csv FILE: checked before the run (which may take minutes), so a path that cannot be written is a usage
 * error at once. "-" is stdout. */
static void check_output_path(const char *opt, const char *path) {
  char dir[4096], msg[4096 + 256];
  struct stat st;
  if (path == NULL || strcmp(path, "-") == 0) return;
  if (path[0] == '\0') {
    snprintf(msg, sizeof msg, "%s '': empty file name (give a file, or - for stdout)", opt);
    usage_error("%s", msg);
  }
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      snprintf(msg, sizeof msg, "%s '%s': is a directory (give a file name in it, or - for stdout)", opt, path);
      usage_error("%s", msg);
    }
    if (access(path, W_OK) != 0) {
      snprintf(msg, sizeof msg, "%s '%s': cannot be written (%s); choose another file, or - for stdout", opt, path,
               strerror(errno));
      usage_error("%s", msg);
    }
    return;
  }
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = '\0';
  else
    *slash = '\0';
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(msg, sizeof msg, "%s '%s': the directory %s %s (create it first, or write to - for stdout)", opt, path,
             dir, stat(dir, &st) != 0 ? "does not exist" : "is not a directory");
    usage_error("%s", msg);
  }
  if (access(dir, W_OK) != 0) {
    snprintf(msg, sizeof msg, "%s '%s': the directory %s is not writable (%s); choose another, or - for stdout", opt,
             path, dir, strerror(errno));
    usage_error("%s", msg);
  }
}

/* Long options' codes (past any character). */
enum {
  O_LOCAL = 256,
  O_SERVER,
  O_CLIENT,
  O_PORT,
  O_TRANSPORT,
  O_SIZES,
  O_ITERS,
  O_DURATION,
  O_INFLIGHT,
  O_QPS,
  O_CUDA,
  O_CHECK,
  O_BIDIR,
  O_JSON,
  O_CSV,
  O_PLUGIN,
  O_DEV,
  O_TIMEOUT,
  O_REPS,
  O_VERSION
};

/* What an option's value must be, for "option --X needs a value: ..." (the ranges parse_args checks). */
static const char *value_hint(int opt) {
  switch (opt) {
  case O_CLIENT: return "the server's host name or address (gdrnet-perf --client HOST [--port P])";
  case O_PORT: return "a TCP port, 0..65535";
  case O_TRANSPORT: return "rdma, tcp or auto";
  case O_SIZES: return SIZES_ACCEPTED;
  case O_ITERS: return "an integer in 1..100000000";
  case O_DURATION: return "seconds, more than 0 and at most 3600";
  case O_INFLIGHT: return "an integer in 1.." PERF_STR(MAX_INFLIGHT);
  case O_QPS: return "an integer in 1..16";
  case O_CUDA: return "a CUDA device ordinal, 0..1023";
  case O_JSON:
  case O_CSV: return "a file name";
  case O_PLUGIN: return "the path of the plugin's .so";
  case O_DEV: return "a plugin device index, 0..1023";
  case O_TIMEOUT: return "seconds, more than 0 and at most 86400";
  case O_REPS: return "an integer in 1..1000";
  default: return "see --help";
  }
}

static void parse_args(int argc, char **argv, opts_t *o) {
  memset(o, 0, sizeof *o);
  o->port = DEFAULT_PORT;
  o->min_size = 8;
  o->max_size = 64ull << 20;
  o->factor = 4;
  o->inflight = 8;
  o->cuda_dev = -1;
  o->timeout = 120;
  o->reps = 1;
  static const struct option lo[] = {{"local", no_argument, NULL, O_LOCAL},
                                     {"server", no_argument, NULL, O_SERVER},
                                     {"client", required_argument, NULL, O_CLIENT},
                                     {"port", required_argument, NULL, O_PORT},
                                     {"transport", required_argument, NULL, O_TRANSPORT},
                                     {"sizes", required_argument, NULL, O_SIZES},
                                     {"iters", required_argument, NULL, O_ITERS},
                                     {"duration", required_argument, NULL, O_DURATION},
                                     {"inflight", required_argument, NULL, O_INFLIGHT},
                                     {"qps", required_argument, NULL, O_QPS},
                                     {"cuda", required_argument, NULL, O_CUDA},
                                     {"check", no_argument, NULL, O_CHECK},
                                     {"bidir", no_argument, NULL, O_BIDIR},
                                     {"json", required_argument, NULL, O_JSON},
                                     {"csv", required_argument, NULL, O_CSV},
                                     {"plugin", required_argument, NULL, O_PLUGIN},
                                     {"dev", required_argument, NULL, O_DEV},
                                     {"timeout", required_argument, NULL, O_TIMEOUT},
                                     {"reps", required_argument, NULL, O_REPS},
                                     {"version", no_argument, NULL, O_VERSION},
                                     {"verbose", no_argument, NULL, 'v'},
                                     {"help", no_argument, NULL, 'h'},
                                     {NULL, 0, NULL, 0}};
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":vh", lo, NULL)) != -1) {
    switch (c) {
    case O_LOCAL:
    case O_SERVER:
    case O_CLIENT:
      if (o->mode != 0) usage_error("%s", "choose one of --local, --server, --client");
      o->mode = c == O_LOCAL ? 'l' : c == O_SERVER ? 's' : 'c';
      if (c == O_CLIENT) o->host = optarg;
      break;
    case O_PORT: o->port = parse_int(optarg, 0, 65535, "--port"); break;
    case O_TRANSPORT:
      if (strcmp(optarg, "rdma") != 0 && strcmp(optarg, "tcp") != 0 && strcmp(optarg, "auto") != 0)
        usage_error("bad --transport '%s' (expected rdma, tcp or auto)", optarg);
      o->transport = optarg;
      break;
    case O_SIZES: parse_sizes(optarg, o); break;
    case O_ITERS: o->iters = (uint64_t)parse_int(optarg, 1, 100000000, "--iters"); break;
    case O_DURATION: o->duration = parse_seconds(optarg, "--duration", 3600); break;
    case O_INFLIGHT: o->inflight = parse_int(optarg, 1, MAX_INFLIGHT, "--inflight"); break;
    case O_QPS: o->qps = parse_int(optarg, 1, 16, "--qps"); break;
    case O_CUDA: o->cuda_dev = parse_int(optarg, 0, 1023, "--cuda"); break;
    case O_CHECK: o->check = 1; break;
    case O_BIDIR: o->bidir = 1; break;
    case O_JSON: o->json = optarg; break;
    case O_CSV: o->csv = optarg; break;
    case O_PLUGIN: o->plugin = optarg; break;
    case O_DEV: o->dev = parse_int(optarg, 0, 1023, "--dev"); break;
    case O_TIMEOUT: o->timeout = parse_seconds(optarg, "--timeout", 86400); break;
    case O_REPS: o->reps = parse_int(optarg, 1, 1000, "--reps"); break;
    case O_VERSION: printf("gdrnet-perf %s\n", GDRNET_VERSION); exit(0);
    case 'v': o->verbose = 1; break;
    case 'h': usage(stdout); exit(0);
    case ':': /* a known option without its value: name it and what it takes */
      for (size_t i = 0; lo[i].name != NULL; i++)
        if (lo[i].val == optopt) {
          char msg[256];
          snprintf(msg, sizeof msg, "option --%s needs a value: %s", lo[i].name, value_hint(lo[i].val));
          usage_error("%s", msg);
        }
      usage_error("option '%s' needs a value", argv[optind - 1]);
      break;
    case '?':
    default:
      if (optopt != 0 && optopt < 256) {
        char o1[3] = {'-', (char)optopt, 0};
        usage_error("unknown option '%s'", o1);
      }
      usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) usage_error("unexpected argument '%s'", argv[optind]);
  if (o->mode == 0) usage_error("%s", "one of --local, --server or --client HOST is required");
  if (o->iters && o->duration > 0) usage_error("%s", "--iters and --duration exclude each other");
  if (o->mode == 'c' && o->port == 0) usage_error("%s", "--client needs the server's --port (0 is for --server only)");
  if (o->json && o->csv && strcmp(o->json, "-") == 0 && strcmp(o->csv, "-") == 0)
    usage_error("%s", "--json - and --csv - both name stdout: write one of them to a file");
  check_output_path("--json", o->json);
  check_output_path("--csv", o->csv);
}

/* ------------------------------------------------------------------------------------------ */
/* Progress, peer liveness, waits. */

static void progress(const char *phase, uint64_t size, uint64_t done, uint64_t total) {
  if (!P.tty || P.role != 'A') return;
  uint64_t now = gn_now_ns();
  if (now - P.cmd_start_ns < 1000000000ull || now - P.last_progress_ns < 250000000ull) return;
  P.last_progress_ns = now;
  char sz[32];
  gn_fmt_size(size, sz, sizeof sz);
  char rp[48] = "";
  if (P.o.reps > 1) snprintf(rp, sizeof rp, " (rep %d/%d)", P.rep, P.o.reps);
  printf("\r\033[K  ... %s B: %s %" PRIu64 "/%" PRIu64 "%s", sz, phase, done, total, rp);
  fflush(stdout);
  P.progress_shown = 1;
}

static void progress_clear(void) {
  if (P.progress_shown) {
    fputs("\r\033[K", stdout);
    fflush(stdout);
    P.progress_shown = 0;
  }
}

/* A peer that fails reports on the bootstrap socket and exits, closing it: once the socket is shut
 * down from the other side, stop rather than wait for the deadline. (Data alone proves nothing: the
 * peer may simply be ahead of us, already in the next barrier.) Checked every thousand polls. */
static int peer_gone(void) {
  if ((++P.polls & 1023) != 0) return 0;
  struct pollfd pf = {.fd = P.bootfd, .events = POLLRDHUP};
  int r = poll(&pf, 1, 0);
  return r > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static int fatal(const char *fmt, ...) GN_PRINTF(1, 2);
static int fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(P.fatal_msg, sizeof P.fatal_msg, fmt, ap);
  va_end(ap);
  P.fatal = 1;
  return -1;
}

/* test() until done, watching the peer and the deadline. */
static int wait_req(void *req, int *sizes, const char *what) {
  for (;;) {
    int done = 0;
    ncclResult_t r = P.net->test(req, &done, sizes);
    if (r != ncclSuccess) return fatal("%s: test() returned %s", what, gn_result_str(r));
    if (done) return 0;
    if (gn_expired(P.ctx.deadline_ns)) return fatal("%s: no completion within --timeout %.0f s", what, P.o.timeout);
    if (peer_gone()) return fatal("%s: the peer process went away (see its message)", what);
    sched_yield();
  }
}

static int post_send(size_t off, int size, void **req) {
  *req = NULL;
  ncclResult_t r = P.net->isend(P.scomm, P.sbuf + off, size, 0, P.smh, req);
  if (r != ncclSuccess) return fatal("isend(size %d) returned %s", size, gn_result_str(r));
  return 0;
}

static int post_recv(size_t off, int size, void **req) {
  *req = NULL;
  void *data[1] = {P.rbuf + off}, *mh[1] = {P.rmh};
  int sizes[1] = {size}, tags[1] = {0};
  ncclResult_t r = P.net->irecv(P.rcomm, 1, data, sizes, tags, mh, req);
  if (r != ncclSuccess) return fatal("irecv(size %d) returned %s", size, gn_result_str(r));
  return 0;
}

/* Re-posts while the plugin answers with a NULL request ("try again later"). */
static int send_blocking_post(size_t off, int size, void **req, const char *what) {
  for (;;) {
    if (post_send(off, size, req) != 0) return -1;
    if (*req != NULL) return 0;
    if (gn_expired(P.ctx.deadline_ns)) return fatal("%s: isend kept returning a NULL request", what);
    if (peer_gone()) return fatal("%s: the peer process went away", what);
    sched_yield();
  }
}

static int recv_blocking_post(size_t off, int size, void **req, const char *what) {
  for (;;) {
    if (post_recv(off, size, req) != 0) return -1;
    if (*req != NULL) return 0;
    if (gn_expired(P.ctx.deadline_ns)) return fatal("%s: irecv kept returning a NULL request", what);
    if (peer_gone()) return fatal("%s: the peer process went away", what);
    sched_yield();
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Buffers and patterns. */

static int fill_send(size_t off, uint64_t size, uint64_t seed) {
  if (!P.cuda) {
    gn_pattern_fill(P.sbuf + off, size, seed);
    return 0;
  }
  gn_pattern_fill(P.stage, size, seed);
  if (pc_htod(P.sbuf + off, P.stage, size) != 0) return fatal("cuMemcpyHtoD failed");
  return 0;
}

static void mismatch(const char *fmt, ...) GN_PRINTF(1, 2);
static void mismatch(const char *fmt, ...) {
  if (P.mismatches++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P.first_err, sizeof P.first_err, fmt, ap);
    va_end(ap);
  }
}

/* Verifies a received message: the reported size and, with --check, every byte. */
static int verify_recv(size_t off, uint64_t size, int got, uint64_t seed, uint64_t iter, const char *phase) {
  if ((uint64_t)(int64_t)got != size) {
    mismatch("%s: size %" PRIu64 " iteration %" PRIu64 ": test() reported %d bytes received, %" PRIu64 " were sent",
             phase, size, iter, got, size);
    return 0;
  }
  if (!P.o.check || size == 0) return 0;
  const char *p = P.rbuf + off;
  if (P.cuda) {
    if (pc_dtoh(P.stage, P.rbuf + off, size) != 0) return fatal("cuMemcpyDtoH failed");
    p = P.stage;
  }
  size_t bad = gn_pattern_check(p, size, seed);
  if (bad != size)
    mismatch("%s: size %" PRIu64 " iteration %" PRIu64 ": byte %zu is 0x%02x, expected 0x%02x", phase, size, iter, bad,
             (unsigned char)p[bad], gn_pattern_byte(seed, bad));
  return 0;
}

static int flush_recv(size_t off, int got) {
  if (!P.need_flush || got <= 0) return 0;
  void *data[1] = {P.rbuf + off}, *mh[1] = {P.rmh};
  int sizes[1] = {got};
  void *req = NULL;
  ncclResult_t r = P.net->iflush(P.rcomm, 1, data, sizes, mh, &req);
  if (r != ncclSuccess) return fatal("iflush returned %s", gn_result_str(r));
  if (req == NULL) return 0; /* nothing to wait for */
  return wait_req(req, NULL, "iflush");
}

static int alloc_buffers(uint64_t max_size, int inflight) {
  uint64_t data = max_size * (uint64_t)inflight;
  if (data > BUF_CAP) data = BUF_CAP;
  if (data < max_size) data = max_size;
  if (data < 4096) data = 4096;
  data = (data + 4095) & ~4095ull;
  P.data_bytes = data;
  P.buf_bytes = data + CTRL_BYTES;
  if (P.cuda) P.buf_bytes = (P.buf_bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
  char err[256];
  if (P.cuda) {
    if ((P.sbuf = pc_alloc(P.buf_bytes, err, sizeof err)) == NULL) return fatal("%s", err);
    if ((P.rbuf = pc_alloc(P.buf_bytes, err, sizeof err)) == NULL) return fatal("%s", err);
    if ((P.stage = malloc(max_size ? max_size : 1)) == NULL) return fatal("out of memory");
  } else {
    if (posix_memalign((void **)&P.sbuf, 4096, P.buf_bytes) != 0 ||
        posix_memalign((void **)&P.rbuf, 4096, P.buf_bytes) != 0)
      return fatal("out of memory allocating 2 x %zu bytes", P.buf_bytes);
    memset(P.sbuf, 0, P.buf_bytes);
    memset(P.rbuf, 0, P.buf_bytes);
  }
  return 0;
}

static int reg_one(void *comm, void *buf, void **mh, const char *which) {
  ncclResult_t r;
  *mh = NULL;
  if (!P.cuda) {
    r = P.net->regMr(comm, buf, P.buf_bytes, NCCL_PTR_HOST, mh);
  } else if (P.use_dmabuf) {
    int fd = -1;
    char err[256];
    if (pc_dmabuf_fd(buf, P.buf_bytes, &fd, err, sizeof err) != 0) return fatal("%s", err);
    r = P.net->regMrDmaBuf(comm, buf, P.buf_bytes, NCCL_PTR_CUDA, 0, fd, mh);
    close(fd); /* NCCL closes the fd right after registering */
  } else {
    r = P.net->regMr(comm, buf, P.buf_bytes, NCCL_PTR_CUDA, mh);
  }
  if (r != ncclSuccess)
    return fatal("registering the %s buffer (%zu bytes) returned %s", which, P.buf_bytes, gn_result_str(r));
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The two phases. */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Ping-pong: A sends, B answers; per iteration A records the half round trip. */
static int phase_latency(const cmd_t *c, double *lat_us) {
  const uint64_t size = c->size;
  const int isz = (int)size;
  const uint64_t seed_base = c->iter_base;
  if (P.role == 'A') {
    for (uint64_t i = 0; i < c->lat_iters; i++) {
      uint64_t it = seed_base + i;
      if (P.o.check && fill_send(0, size, gn_pattern_seed(size, it, SALT_A2B)) != 0) return -1;
      void *rreq = NULL, *sreq = NULL;
      uint64_t t0 = gn_now_ns();
      if (recv_blocking_post(0, isz, &rreq, "latency") != 0) return -1;
      if (send_blocking_post(0, isz, &sreq, "latency") != 0) return -1;
      if (wait_req(sreq, NULL, "latency send") != 0) return -1;
      int got = -1;
      if (wait_req(rreq, &got, "latency receive") != 0) return -1;
      if (flush_recv(0, got) != 0) return -1;
      uint64_t t1 = gn_now_ns();
      if (lat_us) lat_us[i] = (double)(t1 - t0) / 2e3;
      if (verify_recv(0, size, got, gn_pattern_seed(size, it, SALT_B2A), it, "latency (B->A)") != 0) return -1;
      progress("latency", size, i + 1, c->lat_iters);
    }
  } else {
    if (c->lat_iters > 0 && P.o.check && fill_send(0, size, gn_pattern_seed(size, seed_base, SALT_B2A)) != 0) return -1;
    for (uint64_t i = 0; i < c->lat_iters; i++) {
      uint64_t it = seed_base + i;
      void *rreq = NULL, *sreq = NULL;
      if (recv_blocking_post(0, isz, &rreq, "latency") != 0) return -1;
      int got = -1;
      if (wait_req(rreq, &got, "latency receive") != 0) return -1;
      if (flush_recv(0, got) != 0) return -1;
      if (send_blocking_post(0, isz, &sreq, "latency") != 0) return -1;
      if (wait_req(sreq, NULL, "latency send") != 0) return -1;
      if (verify_recv(0, size, got, gn_pattern_seed(size, it, SALT_A2B), it, "latency (A->B)") != 0) return -1;
      if (i + 1 < c->lat_iters && P.o.check && fill_send(0, size, gn_pattern_seed(size, it + 1, SALT_B2A)) != 0)
        return -1;
    }
  }
  return 0;
}

/* Streaming: the sender keeps up to `depth` isends in flight over distinct sub-ranges (slots), the
 * receiver keeps `depth` irecvs posted; requests are tested oldest first, as NCCL's proxy does. When
 * the receiver has everything it sends a zero-byte ack back; the sender's clock stops at the ack. */
static int phase_bw(const cmd_t *c, uint64_t *ns_out) {
  const uint64_t size = c->size, n = c->bw_iters;
  const int isz = (int)size;
  const int sending = P.role == 'A' || P.o.bidir;
  const int receiving = P.role == 'B' || P.o.bidir;
  uint64_t nslots = size ? P.data_bytes / size : (uint64_t)P.o.inflight;
  uint64_t depth = (uint64_t)P.o.inflight < nslots ? (uint64_t)P.o.inflight : nslots;
  if (depth < 1) depth = 1;
  const uint64_t sbase = c->iter_base + c->lat_iters;
  const uint64_t ssalt = P.role == 'A' ? SALT_A2B : SALT_B2A, rsalt = P.role == 'A' ? SALT_B2A : SALT_A2B;
  void *sreq[MAX_INFLIGHT] = {0}, *rreq[MAX_INFLIGHT] = {0};
  uint64_t sp = 0, sc = 0, rp = 0, rc = 0;
  void *ack_s = NULL, *ack_r = NULL;
  int ack_s_posted = 0, ack_s_done = !receiving, ack_r_posted = 0, ack_r_done = !sending;
  const size_t ctrl = P.data_bytes;

  if (gn_boot_barrier(P.bootfd, P.o.timeout) != 0) return fatal("bootstrap barrier failed: %s", strerror(errno));
  uint64_t t0 = gn_now_ns(), t_end = 0;
  for (;;) {
    int progressed = 0;
    /* sends */
    while (sending && sp < n && sp - sc < depth) {
      size_t off = (size_t)(sp % depth) * size;
      if (P.o.check && fill_send(off, size, gn_pattern_seed(size, sbase + sp, ssalt)) != 0) return -1;
      if (post_send(off, isz, &sreq[sp % depth]) != 0) return -1;
      if (sreq[sp % depth] == NULL) break; /* try again later */
      sp++;
      progressed = 1;
    }
    while (sending && sc < sp) {
      int done = 0;
      ncclResult_t r = P.net->test(sreq[sc % depth], &done, NULL);
      if (r != ncclSuccess) return fatal("bandwidth send: test() returned %s", gn_result_str(r));
      if (!done) break;
      sc++;
      progressed = 1;
    }
    /* receives */
    while (receiving && rp < n && rp - rc < depth) {
      size_t off = (size_t)(rp % depth) * size;
      if (post_recv(off, isz, &rreq[rp % depth]) != 0) return -1;
      if (rreq[rp % depth] == NULL) break;
      rp++;
      progressed = 1;
    }
    while (receiving && rc < rp) {
      int done = 0, got = -1;
      ncclResult_t r = P.net->test(rreq[rc % depth], &done, &got);
      if (r != ncclSuccess) return fatal("bandwidth receive: test() returned %s", gn_result_str(r));
      if (!done) break;
      size_t off = (size_t)(rc % depth) * size;
      if (flush_recv(off, got) != 0) return -1;
      if (verify_recv(off, size, got, gn_pattern_seed(size, sbase + rc, rsalt), sbase + rc,
                      P.role == 'A' ? "bandwidth (B->A)" : "bandwidth (A->B)") != 0)
        return -1;
      rc++;
      progressed = 1;
    }
    /* the ack, after every data send of ours was posted (messages match in post order) */
    if (receiving && rc == n && !ack_s_posted && (!sending || sp == n)) {
      if (post_send(ctrl, 0, &ack_s) != 0) return -1;
      if (ack_s != NULL) ack_s_posted = 1;
    }
    if (ack_s_posted && !ack_s_done) {
      int done = 0;
      ncclResult_t r = P.net->test(ack_s, &done, NULL);
      if (r != ncclSuccess) return fatal("ack send: test() returned %s", gn_result_str(r));
      if (done) ack_s_done = 1;
    }
    if (sending && sp == n && !ack_r_posted && (!receiving || rp == n)) {
      if (post_recv(ctrl, 8, &ack_r) != 0) return -1;
      if (ack_r != NULL) ack_r_posted = 1;
    }
    if (ack_r_posted && !ack_r_done) {
      int done = 0, got = -1;
      ncclResult_t r = P.net->test(ack_r, &done, &got);
      if (r != ncclSuccess) return fatal("ack receive: test() returned %s", gn_result_str(r));
      if (done) {
        if (got != 0) mismatch("bandwidth ack: test() reported %d bytes for a zero-byte message", got);
        ack_r_done = 1;
        t_end = gn_now_ns();
      }
    }
    if (sc == (sending ? n : 0) && rc == (receiving ? n : 0) && ack_s_done && ack_r_done) break;
    if (!progressed) {
      if (gn_expired(P.ctx.deadline_ns))
        return fatal("bandwidth phase, size %" PRIu64 ": stuck at %" PRIu64 "/%" PRIu64 " sent, %" PRIu64 "/%" PRIu64
                     " received after --timeout %.0f s",
                     size, sc, sending ? n : 0, rc, receiving ? n : 0, P.o.timeout);
      if (peer_gone()) return fatal("bandwidth phase: the peer process went away");
      sched_yield();
    }
    progress("bandwidth", size, sending ? sc : rc, n);
  }
  if (!sending) t_end = gn_now_ns();
  *ns_out = t_end - t0;
  return 0;
}

/* Runs one command on this process; fills the result for the bootstrap. */
static int run_cmd(const cmd_t *c, double *lat_us, uint64_t *bw_ns) {
  P.mismatches = 0;
  P.first_err[0] = '\0';
  gn_ctx_init(&P.ctx, P.net, P.o.timeout);
  P.cmd_start_ns = gn_now_ns();
  if (gn_boot_barrier(P.bootfd, P.o.timeout) != 0) return fatal("bootstrap barrier failed: %s", strerror(errno));
  if (phase_latency(c, lat_us) != 0) return -1;
  gn_ctx_init(&P.ctx, P.net, P.o.timeout);
  if (phase_bw(c, bw_ns) != 0) return -1;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */

/* The plugin's counters (GDRNET_STATS_FILE, written when it is unloaded): unless the user names a file, each process
 * of the run writes its own in TMPDIR, read and removed at the end ("# counters" lines). */
static char g_stats_pattern[512];
static int g_stats_own; /* 1: the pattern is ours (the files are removed once read) */
/* --json: the document up to its rows (write_outputs, before the unload), then each process's counters and
 * connections as its counters file is read (print_counters), written out by finish_json at the very end. */
static char *g_json_body;
static size_t g_json_len;
static FILE *g_json_procs; /* an open_memstream over g_json_procs_text */
static char *g_json_procs_text;
static size_t g_json_procs_len;
static int g_json_nprocs;

static void setup_stats_env(void) {
  const char *user = getenv("GDRNET_STATS_FILE");
  if (user != NULL && user[0] != '\0') {
    snprintf(g_stats_pattern, sizeof g_stats_pattern, "%s", user);
    return;
  }
  const char *tmp = getenv("TMPDIR");
  const char *dir = getenv("GDRNET_STATS_DIR"); /* the user's collector directory: the files go there (gdrnet-top) */
  if (dir != NULL && dir[0] != '\0')
    snprintf(g_stats_pattern, sizeof g_stats_pattern, "%s/gdrnet-%%h-%%p.prom", dir);
  else
    snprintf(g_stats_pattern, sizeof g_stats_pattern, "%s/gdrnet-perf-stats-%%p.prom", tmp && *tmp ? tmp : "/tmp");
  if (setenv("GDRNET_STATS_FILE", g_stats_pattern, 1) != 0) {
    g_stats_pattern[0] = '\0';
    return;
  }
  g_stats_own = 1;
  gn_log_tool_env("GDRNET_STATS_FILE", "gdrnet-perf");
  if (getenv("GDRNET_STATS_INTERVAL_S") == NULL) {
    if (setenv("GDRNET_STATS_INTERVAL_S", "0", 1) != 0)
      perr("setenv GDRNET_STATS_INTERVAL_S: %s", strerror(errno));
    else
      gn_log_tool_env("GDRNET_STATS_INTERVAL_S", "gdrnet-perf");
  }
}

/* The file of process pid: the pattern with %p replaced (%h too, by this host's name). */
static void stats_path(pid_t pid, char *out, size_t len) {
  size_t o = 0;
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
  for (const char *c = g_stats_pattern; *c && o + 1 < len; c++) {
    int n = 0;
    if (c[0] == '%' && c[1] == 'p') {
      n = snprintf(out + o, len - o, "%d", (int)pid);
      c++;
    } else if (c[0] == '%' && c[1] == 'h') {
      n = snprintf(out + o, len - o, "%s", host);
      c++;
    } else {
      out[o] = *c;
      n = 1;
    }
    if (n < 0 || (size_t)n >= len - o) break;
    o += (size_t)n;
  }
  out[o < len ? o : len - 1] = '\0';
}

/* Sums the samples of one metric (every label set) in a Prometheus text file's contents. */
static double stats_sum(const char *text, const char *metric) {
  double sum = 0;
  size_t ml = strlen(metric);
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, metric, ml) != 0 || (l[ml] != '{' && l[ml] != ' ')) continue;
    const char *v = l[ml] == '{' ? strchr(l, '}') : l + ml;
    if (v == NULL) continue;
    sum += strtod(v + 1, NULL);
  }
  return sum;
}

/* The value of label key in a Prometheus sample line (up to its '}'), into out; 0, or -1 if absent. */
static int label_of(const char *line, const char *key, char *out, size_t len) {
  const char *end = strchr(line, '}');
  size_t kl = strlen(key);
  for (const char *p = strchr(line, '{'); p != NULL && end != NULL && p < end; p = strchr(p + 1, ',')) {
    const char *k = p + 1;
    if (strncmp(k, key, kl) != 0 || k[kl] != '=' || k[kl + 1] != '"') continue;
    const char *v = k + kl + 2;
    size_t o = 0;
    for (; *v && *v != '"' && o + 1 < len; v++) {
      if (*v == '\\' && v[1]) v++;
      out[o++] = *v;
    }
    out[o] = '\0';
    return 0;
  }
  return -1;
}

/* The value of metric's sample whose conn label is conn, or -1 when there is none. */
static double conn_value(const char *text, const char *metric, const char *conn) {
  size_t ml = strlen(metric);
  char c[32];
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, metric, ml) != 0 || l[ml] != '{') continue;
    if (label_of(l, "conn", c, sizeof c) != 0 || strcmp(c, conn) != 0) continue;
    const char *v = strchr(l, '}');
    return v != NULL ? strtod(v + 1, NULL) : -1;
  }
  return -1;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

/* --json: one process's counters and the connections it closed (gdrnet_closed_conn_* of its last counters file). */
static void json_process(pid_t pid, const char *who, const char *text, const char *const *metrics, const double *v,
                         size_t nm) {
  static const char *const cm[] = {"requests", "bytes", "stalls", "recoveries", "moves"};
  if (!P.o.json) return;
  if (g_json_procs == NULL && (g_json_procs = open_memstream(&g_json_procs_text, &g_json_procs_len)) == NULL) return;
  FILE *f = g_json_procs;
  fprintf(f, "%s    {\"process\": ", g_json_nprocs++ ? ",\n" : "");
  json_str(f, who);
  fprintf(f, ", \"pid\": %d, \"counters\": {", (int)pid);
  for (size_t i = 0; i < nm; i++) fprintf(f, "%s\"%s\": %.0f", i ? ", " : "", metrics[i] + 7 /* "gdrnet_" */, v[i]);
  fprintf(f, "},\n     \"connections\": [");
  int nc = 0;
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    char conn[32], dir[8], peer[128], tp[16], state[32], path_[160];
    if (strncmp(l, "gdrnet_closed_conn_info{", 24) != 0) continue;
    if (label_of(l, "conn", conn, sizeof conn) || label_of(l, "dir", dir, sizeof dir) ||
        label_of(l, "peer", peer, sizeof peer) || label_of(l, "transport", tp, sizeof tp) ||
        label_of(l, "state", state, sizeof state) || label_of(l, "path", path_, sizeof path_))
      continue;
    fprintf(f, "%s\n       {\"conn\": %s, \"dir\": \"%s\", \"peer\": ", nc++ ? "," : "", conn, dir);
    json_str(f, peer);
    fprintf(f, ", \"transport\": \"%s\", \"state\": \"%s\", \"path\": ", tp, state);
    json_str(f, path_);
    for (size_t i = 0; i < sizeof cm / sizeof cm[0]; i++) {
      char m[64];
      snprintf(m, sizeof m, "gdrnet_closed_conn_%s_total", cm[i]);
      double x = conn_value(text, m, conn);
      if (x >= 0) fprintf(f, ", \"%s\": %.0f", cm[i], x);
    }
    fprintf(f, ", \"p50_us\": %.3f, \"p99_us\": %.3f}",
            1e6 * conn_value(text, "gdrnet_closed_conn_latency_p50_seconds", conn),
            1e6 * conn_value(text, "gdrnet_closed_conn_latency_p99_seconds", conn));
  }
  fprintf(f, "%s]}", nc ? "\n     " : "");
}

/* --json: the rows (write_outputs), then the processes' counters and connections; written once every counters file
 * was read (the plugins were unloaded). 0, or -1 with the reason printed. */
static int finish_json(void) {
  int rc = 0;
  if (g_json_body == NULL) return 0;
  if (g_json_procs != NULL && fclose(g_json_procs) != 0) g_json_procs_text = NULL;
  g_json_procs = NULL;
  FILE *f = strcmp(P.o.json, "-") == 0 ? fdopen(P.json_fd, "w") : fopen(P.o.json, "w");
  if (f == NULL) {
    perr("--json %s: %s", P.o.json, strerror(errno));
    rc = -1;
    goto out;
  }
  fwrite(g_json_body, 1, g_json_len, f);
  fprintf(f, ",\n  \"processes\": [\n%s\n  ]\n}\n", g_json_procs_text ? g_json_procs_text : "");
  if (fclose(f) != 0) {
    perr("--json %s: %s", P.o.json, strerror(errno));
    rc = -1;
  }
out:
  free(g_json_body);
  free(g_json_procs_text);
  g_json_body = g_json_procs_text = NULL;
  return rc;
}

/* One "# counters" line for process pid (after its plugin was unloaded): faults, recoveries, fallbacks and returns.
 * show = 0 (a usage or setup error: the run never started) prints the line only when something was counted, so that
 * the error stands alone; a file of ours is removed either way, so no run leaves one behind. */
static void print_counters(pid_t pid, const char *who, int show) {
  char path[600];
  if (g_stats_pattern[0] == '\0') return;
  stats_path(pid, path, sizeof path);
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    if (show && P.o.verbose)
      printf("# counters (%s): none (%s not written: a plugin without GDRNET_STATS_FILE?)\n", who, path);
    return;
  }
  char *text = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      char *t = realloc(text, cap = cap * 2 + 8192);
      if (t == NULL) break;
      text = t;
    }
    size_t got = fread(text + n, 1, cap - n - 1, f);
    if (got == 0) break;
    n += got;
  }
  (void)fclose(f);
  if (text == NULL) return;
  text[n] = '\0';
  static const char *const metrics[] = {"gdrnet_faults_total",
                                        "gdrnet_recoveries_total",
                                        "gdrnet_recovery_replayed_messages_total",
                                        "gdrnet_fallbacks_total",
                                        "gdrnet_returns_total",
                                        "gdrnet_tcp_seconds_total",
                                        "gdrnet_tcp_only_connections_total",
                                        "gdrnet_device_lost",
                                        "gdrnet_failed_connections_total",
                                        "gdrnet_failed_requests_total"};
  double v[sizeof metrics / sizeof metrics[0]];
  int any = 0;
  for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++) {
    v[i] = stats_sum(text, metrics[i]);
    if (v[i] != 0) any = 1;
  }
  if (show || any) {
    printf("# counters (%s): %.0f fault(s), %.0f recovery(ies) (%.0f message(s) replayed), %.0f fallback(s) to TCP, "
           "%.0f return(s) to RDMA (%.2f s on TCP), %.0f TCP-only connection(s), %.0f device(s) lost, %.0f failed "
           "connection(s), %.0f failed request(s)%s%s\n",
           who, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], g_stats_own ? "" : "; in ",
           g_stats_own ? "" : path);
    fflush(stdout);
  }
  json_process(pid, who, text, metrics, v, sizeof metrics / sizeof metrics[0]);
  free(text);
  if (g_stats_own && unlink(path) != 0 && errno != ENOENT) perr("removing %s: %s", path, strerror(errno));
}

static void setup_env(void) {
  setup_stats_env();
  if (P.o.transport) setenv("GDRNET_TRANSPORT", P.o.transport, 1);
  if (P.o.qps) {
    char v[16];
    snprintf(v, sizeof v, "%d", P.o.qps);
    setenv("GDRNET_QPS_PER_CONN", v, 1);
  }
  if (P.o.verbose) gn_log_set_level(NCCL_LOG_INFO);
}

/* Loads the plugin and opens the device. */
static int setup_plugin(void) {
  char path[4096], err[1024];
  gn_plugin_resolve(P.o.plugin, path, sizeof path);
  if (gn_plugin_open(&P.plug, path, err, sizeof err) != 0) return fatal("%s", err);
  P.net = P.plug.net;
  ncclResult_t r = P.net->init(gn_logger);
  if (r != ncclSuccess)
    return fatal("plugin %s: init() returned %s (its WARN lines above say why)", P.net->name, gn_result_str(r));
  int ndev = 0;
  r = P.net->devices(&ndev);
  if (r != ncclSuccess) return fatal("devices() returned %s", gn_result_str(r));
  if (ndev < 1) return fatal("the plugin reports no devices");
  if (P.o.dev >= ndev) return fatal("--dev %d: the plugin has %d device(s)", P.o.dev, ndev);
  memset(&P.props, 0, sizeof P.props);
  r = P.net->getProperties(P.o.dev, &P.props);
  if (r != ncclSuccess) return fatal("getProperties(%d) returned %s", P.o.dev, gn_result_str(r));
  if (P.o.cuda_dev >= 0) {
    if ((P.props.ptrSupport & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) == 0)
      return fatal("--cuda: device %s supports only %s buffers (no GPUDirect RDMA: NCCL would stage through host "
                   "memory)",
                   P.props.name ? P.props.name : "?", gn_ptr_support_str(P.props.ptrSupport));
    if (pc_open(P.o.cuda_dev, err, sizeof err) != 0) return fatal("%s", err);
    P.cuda = 1;
    P.use_dmabuf = (P.props.ptrSupport & NCCL_PTR_DMABUF) && P.net->regMrDmaBuf != NULL && pc_dmabuf_supported();
    if (!P.use_dmabuf && !(P.props.ptrSupport & NCCL_PTR_CUDA))
      return fatal("--cuda: the plugin offers only DMA-BUF, which this GPU/driver does not support");
    P.need_flush = 1;
  }
  return 0;
}

/* Connects both directions and registers the buffers. */
static int setup_comms(uint64_t max_size, int inflight) {
  gn_ctx_init(&P.ctx, P.net, P.o.timeout);
  ncclResult_t r = gn_establish(&P.ctx, P.o.dev, P.bootfd, &P.scomm, &P.rcomm);
  if (r != ncclSuccess) return fatal("connection setup: %s", P.ctx.err);
  if (alloc_buffers(max_size, inflight) != 0) return -1;
  if (reg_one(P.scomm, P.sbuf, &P.smh, "send") != 0) return -1;
  if (reg_one(P.rcomm, P.rbuf, &P.rmh, "receive") != 0) return -1;
  return 0;
}

static int teardown(void) {
  int rc = 0;
  ncclResult_t r;
  if (P.smh && (r = P.net->deregMr(P.scomm, P.smh)) != ncclSuccess)
    rc = fatal("deregMr(send) returned %s", gn_result_str(r));
  if (P.rmh && (r = P.net->deregMr(P.rcomm, P.rmh)) != ncclSuccess)
    rc = fatal("deregMr(recv) returned %s", gn_result_str(r));
  P.smh = P.rmh = NULL;
  if (P.scomm && (r = P.net->closeSend(P.scomm)) != ncclSuccess) rc = fatal("closeSend returned %s", gn_result_str(r));
  if (P.rcomm && (r = P.net->closeRecv(P.rcomm)) != ncclSuccess) rc = fatal("closeRecv returned %s", gn_result_str(r));
  P.scomm = P.rcomm = NULL;
  if (P.cuda) {
    pc_free(P.sbuf);
    pc_free(P.rbuf);
    free(P.stage);
    pc_close();
  } else {
    free(P.sbuf);
    free(P.rbuf);
  }
  P.sbuf = P.rbuf = P.stage = NULL;
  gn_plugin_close(&P.plug);
  return rc;
}

/* Both sides tell each other whether their last step worked; returns 0 when both did, else -1 with
 * the reason printed (ours, or the peer's). */
static int sync_status(int ok_local) {
  result_t mine, peer;
  memset(&mine, 0, sizeof mine);
  if (!ok_local) {
    mine.status = 1;
    snprintf(mine.msg, sizeof mine.msg, "%.255s", P.fatal_msg);
  }
  if (gn_boot_send(P.bootfd, &mine, sizeof mine) != 0 || gn_boot_recv(P.bootfd, &peer, sizeof peer, P.o.timeout) != 0) {
    int err = errno;
    if (!ok_local)
      perr("%s", P.fatal_msg);
    else if (P.o.mode == 'c' && err == ETIMEDOUT)
      perr("bootstrap: the server %s:%d sent nothing for %g s (--timeout) during setup: is a gdrnet-perf --server of "
           "this version listening on that port, not another program? (its own output says why it stopped)",
           P.o.host, P.o.port, P.o.timeout);
    else if (P.o.mode == 'c')
      perr("bootstrap: the server %s:%d closed the connection during setup (%s): is a gdrnet-perf --server of this "
           "version listening on that port, not another program? (its own output says why it stopped)",
           P.o.host, P.o.port, strerror(err));
    else
      perr("bootstrap: lost the peer during setup: %s", strerror(err));
    return -1;
  }
  if (!ok_local) {
    /* With --local, A prints B's reason (once) unless A failed the same way. */
    if (P.role == 'A' || P.o.mode != 'l') perr("%s", P.fatal_msg);
    if (P.role == 'A' && peer.status != 0 && strcmp(peer.msg, mine.msg) != 0) perr("peer B: %s", peer.msg);
    return -1;
  }
  if (peer.status != 0) {
    if (P.role == 'A') perr("peer B: %s", peer.msg);
    return -1;
  }
  return 0;
}

static int setup_all(uint64_t max_size, int inflight) {
  if (sync_status(setup_plugin() == 0) != 0) return -1;
  if (sync_status(setup_comms(max_size, inflight) == 0) != 0) return -1;
  P.setup_ok = 1;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Role B: follow A's commands. */

static int write_outputs(const row_t *rows, int nrows);
static void print_header(void);
static void print_row(const row_t *r);

/* The server's copy of the client's table (OP_ROW): printed as it comes, written to its own --json/--csv at the end. */
static int b_row(row_t **rows, int *nrows, int *cap) {
  row_t r;
  if (gn_boot_recv(P.bootfd, &r, sizeof r, P.o.timeout) != 0) {
    perr("bootstrap: no row from the client: %s", strerror(errno));
    return -1;
  }
  if (*nrows >= 128) { /* the client sends one row per size, at most 128 sizes */
    perr("protocol: the client sent more than 128 rows");
    return -1;
  }
  if (*nrows == *cap) {
    int ncap = *cap ? 2 * *cap : 16;
    row_t *n = realloc(*rows, (size_t)ncap * sizeof *n);
    if (n == NULL) {
      perr("out of memory");
      return -1;
    }
    *rows = n;
    *cap = ncap;
  }
  (*rows)[(*nrows)++] = r;
  print_row(&r);
  return 0;
}

static int run_b(void) {
  params_t prm;
  row_t *rows = NULL;
  int nrows = 0, cap = 0, rc = 1;
  if (gn_boot_recv(P.bootfd, &prm, sizeof prm, P.o.timeout) != 0 || prm.magic != PARAMS_MAGIC) {
    perr("did not get the run parameters from the client (a gdrnet-perf --client of this version?): %s",
         strerror(errno ? errno : EPROTO));
    return 1;
  }
  P.o.inflight = (int)prm.inflight;
  P.o.check = (int)prm.check;
  P.o.bidir = (int)prm.bidir;
  P.o.max_size = prm.max_size;
  P.o.reps = prm.reps >= 1 && prm.reps <= 1000 ? (int)prm.reps : 1; /* the rows come summarised: for the header */
  if (setup_all(prm.max_size, (int)prm.inflight) != 0) {
    (void)teardown(); /* unloads the plugin: its last counters file is written now, not at exit */
    return 1;
  }
  if (P.o.mode == 's') print_header();
  for (;;) {
    cmd_t c;
    if (gn_boot_recv(P.bootfd, &c, sizeof c, 3600) != 0) {
      perr("lost the bootstrap connection to A: %s", strerror(errno));
      goto out;
    }
    if (c.op == OP_DONE) break;
    if (c.op == OP_ROW) {
      if (b_row(&rows, &nrows, &cap) != 0) goto out;
      continue;
    }
    result_t res;
    memset(&res, 0, sizeof res);
    if (run_cmd(&c, NULL, &res.bw_ns) != 0) {
      res.status = 1;
      snprintf(res.msg, sizeof res.msg, "%.255s", P.fatal_msg);
      perr("%s", P.fatal_msg);
      (void)gn_boot_send(P.bootfd, &res, sizeof res);
      goto out;
    }
    res.mismatches = P.mismatches;
    snprintf(res.msg, sizeof res.msg, "%s", P.first_err);
    if (gn_boot_send(P.bootfd, &res, sizeof res) != 0) goto out;
  }
  if (P.o.mode == 's' && write_outputs(rows, nrows) != 0) {
    perr("%s", P.fatal_msg);
    goto out;
  }
  rc = 0;
out:
  free(rows);
  if (teardown() != 0) {
    if (rc == 0) perr("%s", P.fatal_msg);
    rc = 1;
  }
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Role A: drive, measure, print. */

static uint64_t auto_lat_iters(uint64_t size) {
  uint64_t budget = 32ull << 20; /* bytes per direction */
  uint64_t n = size ? budget / size : 1000;
  if (n > 1000) n = 1000;
  if (n < 4) n = 4;
  return n;
}

static uint64_t auto_bw_iters(uint64_t size) {
  uint64_t budget = 128ull << 20;
  uint64_t n = size ? budget / size : 1000;
  if (n > 1000) n = 1000;
  if (n < 8) n = 8;
  return n;
}

static int a_exchange(const cmd_t *c, double *lat, uint64_t *bw_ns, result_t *peer) {
  if (gn_boot_send(P.bootfd, c, sizeof *c) != 0) return fatal("bootstrap: sending a command: %s", strerror(errno));
  int rc = run_cmd(c, lat, bw_ns);
  if (rc != 0) {
    /* Prefer the peer's reason when it failed first. */
    result_t pr;
    if (gn_boot_recv(P.bootfd, &pr, sizeof pr, 2) == 0 && pr.status != 0)
      snprintf(P.fatal_msg + strlen(P.fatal_msg), sizeof P.fatal_msg - strlen(P.fatal_msg), "; peer B: %s", pr.msg);
    return -1;
  }
  if (gn_boot_recv(P.bootfd, peer, sizeof *peer, P.o.timeout) != 0)
    return fatal("bootstrap: no result from the peer: %s", strerror(errno));
  if (peer->status != 0) return fatal("peer B: %s", peer->msg);
  return 0;
}

static void print_header(void) {
  char sum[1024];
  gn_props_summary(P.o.dev, &P.props, sum, sizeof sum);
  const char *tr = getenv("GDRNET_TRANSPORT");
  char chosen[16], why[512];
  if (gn_log_transport(chosen, sizeof chosen, why, sizeof why) != 0) {
    snprintf(chosen, sizeof chosen, "unknown");
    snprintf(why, sizeof why, "the plugin did not log its choice");
  }
  printf("# gdrnet-perf %s: plugin \"%s\" from %s\n", GDRNET_VERSION, P.net->name, P.plug.path);
  printf("# %s\n", sum);
  printf("# transport %s, chosen by the plugin: %s\n", chosen, why);
  printf("# requested GDRNET_TRANSPORT=%s%s%s  buffers %s%s  inflight %d  check %s  %s\n", tr ? tr : "unset (auto)",
         P.o.qps ? "  qps/conn " : "", P.o.qps ? getenv("GDRNET_QPS_PER_CONN") : "", P.cuda ? "cuda" : "host",
         P.cuda ? (P.use_dmabuf ? " (dmabuf)" : " (peermem)") : "", P.o.inflight, P.o.check ? "on (every byte)" : "off",
         P.o.mode == 'l' ? "2 processes on this host" : "2 hosts");
  printf("# latency: ping-pong, half round trip per message; bandwidth: %s streaming, up to %d in flight, "
         "timed to the receiver's ack\n",
         P.o.bidir ? "bidirectional (sum of both directions)" : "one-way", P.o.inflight);
  if (P.o.reps > 1) printf("# each row: the median of %d measurements; spread = (max - min) / median\n", P.o.reps);
  printf("# %10s %8s %10s %10s %10s %10s %12s%s\n", "bytes", "iters", "GB/s", "avg_us", "p50_us", "p99_us", "msgs/s",
         P.o.reps > 1 ? "  GB/s_spread%  p50_spread%" : "");
  fflush(stdout);
}

static void print_row(const row_t *r) {
  progress_clear();
  printf("  %10" PRIu64 " %8" PRIu64 " %10.3f %10.2f %10.2f %10.2f %12.0f", r->size, r->bw_iters, r->gbps, r->avg_us,
         r->p50_us, r->p99_us, r->msgs);
  if (r->reps > 1)
    printf("  %12.1f %12.1f", r->gbps > 0 ? 100 * (r->gbps_max - r->gbps_min) / r->gbps : 0,
           r->p50_us > 0 ? 100 * (r->p50_max - r->p50_min) / r->p50_us : 0);
  printf("\n");
  fflush(stdout);
}

static int write_outputs(const row_t *rows, int nrows) {
  const char *tr = getenv("GDRNET_TRANSPORT");
  if (P.o.json) {
    FILE *f = open_memstream(&g_json_body, &g_json_len); /* written by finish_json, once the counters are read */
    if (f == NULL) return fatal("--json: %s", strerror(errno));
    fprintf(f, "{\n  \"tool\": \"gdrnet-perf\",\n  \"version\": \"%s\",\n  \"plugin\": \"%s\",\n  \"name\": \"%s\",\n",
            GDRNET_VERSION, P.plug.path, P.net->name);
    fprintf(f,
            "  \"device\": {\"index\": %d, \"name\": \"%s\", \"speed_mbps\": %d, \"ptr_support\": \"%s\", "
            "\"max_recvs\": %d},\n",
            P.o.dev, P.props.name ? P.props.name : "", P.props.speed, gn_ptr_support_str(P.props.ptrSupport),
            P.props.maxRecvs);
    char chosen[16];
    if (gn_log_transport(chosen, sizeof chosen, NULL, 0) != 0) snprintf(chosen, sizeof chosen, "unknown");
    fprintf(f,
            "  \"transport\": \"%s\",\n  \"transport_requested\": \"%s\",\n  \"buffers\": \"%s\",\n"
            "  \"inflight\": %d,\n  \"check\": %s,\n  \"bidir\": %s,\n  \"rows\": [\n",
            chosen, tr ? tr : "auto", P.cuda ? "cuda" : "host", P.o.inflight, P.o.check ? "true" : "false",
            P.o.bidir ? "true" : "false");
    for (int i = 0; i < nrows; i++)
      fprintf(f,
              "    {\"bytes\": %" PRIu64 ", \"iters\": %" PRIu64 ", \"lat_iters\": %" PRIu64
              ", \"gbps\": %.6f, \"avg_us\": %.3f, \"p50_us\": %.3f, \"p99_us\": %.3f, \"msgs_per_s\": %.1f, "
              "\"reps\": %" PRIu64 ", \"gbps_min\": %.6f, \"gbps_max\": %.6f, \"p50_us_min\": %.3f, "
              "\"p50_us_max\": %.3f}%s\n",
              rows[i].size, rows[i].bw_iters, rows[i].lat_iters, rows[i].gbps, rows[i].avg_us, rows[i].p50_us,
              rows[i].p99_us, rows[i].msgs, rows[i].reps, rows[i].gbps_min, rows[i].gbps_max, rows[i].p50_min,
              rows[i].p50_max, i + 1 < nrows ? "," : "");
    fprintf(f, "  ]");
    if (fclose(f) != 0) return fatal("--json: %s", strerror(errno));
  }
  if (P.o.csv) {
    FILE *f = strcmp(P.o.csv, "-") == 0 ? fdopen(P.json_fd, "w") : fopen(P.o.csv, "w");
    if (f == NULL) return fatal("--csv %s: %s", P.o.csv, strerror(errno));
    fprintf(f, "bytes,iters,lat_iters,gbps,avg_us,p50_us,p99_us,msgs_per_s\n");
    for (int i = 0; i < nrows; i++)
      fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.6f,%.3f,%.3f,%.3f,%.1f\n", rows[i].size, rows[i].bw_iters,
              rows[i].lat_iters, rows[i].gbps, rows[i].avg_us, rows[i].p50_us, rows[i].p99_us, rows[i].msgs);
    if (fclose(f) != 0) return fatal("--csv %s: %s", P.o.csv, strerror(errno));
  }
  return 0;
}

/* One measurement of a size: the latency and bandwidth phases on both ends, summarised into r (reps = 1). Prints the
 * error and returns -1 on failure. */
static int measure_once(uint64_t size, uint64_t lat_n, uint64_t bw_n, uint64_t iter_base, row_t *r) {
  cmd_t c = {.op = OP_RUN, .size = size, .lat_iters = lat_n, .bw_iters = bw_n, .iter_base = iter_base};
  result_t pr;
  double *lat = calloc(lat_n ? lat_n : 1, sizeof *lat);
  if (lat == NULL) {
    perr("out of memory");
    return -1;
  }
  uint64_t bw_ns = 0;
  if (a_exchange(&c, lat, &bw_ns, &pr) != 0) {
    perr("size %" PRIu64 ": %s", size, P.fatal_msg);
    free(lat);
    return -1;
  }
  if (P.mismatches || pr.mismatches) {
    perr("size %" PRIu64 ": data check failed: %" PRIu64 " bad message(s) seen by A, %" PRIu64 " by B; first: %s", size,
         P.mismatches, pr.mismatches, P.mismatches ? P.first_err : pr.msg);
    free(lat);
    return -1;
  }
  memset(r, 0, sizeof *r);
  r->size = size;
  r->lat_iters = lat_n;
  r->bw_iters = bw_n;
  r->reps = 1;
  double sum = 0;
  for (uint64_t i = 0; i < lat_n; i++) sum += lat[i];
  r->avg_us = sum / (double)lat_n;
  qsort(lat, lat_n, sizeof *lat, cmp_double);
  r->p50_us = lat[(lat_n - 1) / 2];
  uint64_t i99 = (uint64_t)ceil(0.99 * (double)lat_n);
  r->p99_us = lat[i99 ? i99 - 1 : 0];
  free(lat);
  double secs = (double)bw_ns / 1e9;
  double msgs = (double)bw_n;
  if (P.o.bidir) {
    double peer_s = (double)pr.bw_ns / 1e9;
    if (peer_s > secs) secs = peer_s;
    msgs *= 2;
  }
  if (secs <= 0) secs = 1e-9;
  r->gbps = msgs * (double)size / secs / 1e9;
  r->msgs = msgs / secs;
  r->gbps_min = r->gbps_max = r->gbps;
  r->p50_min = r->p50_max = r->p50_us;
  return 0;
}

/* The median of n values (sorts them). */
static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* --reps N measurements of one size; r gets the median of each column and the range of GB/s and p50. */
static int measure_reps(uint64_t size, uint64_t lat_n, uint64_t bw_n, uint64_t *iter_base, row_t *r) {
  int n = P.o.reps, rc = 0;
  row_t *s = calloc((size_t)n, sizeof *s);
  double *v = calloc((size_t)n, sizeof *v);
  if (s == NULL || v == NULL) {
    perr("out of memory");
    rc = -1;
    goto out;
  }
  for (int k = 0; k < n; k++) {
    P.rep = k + 1;
    if (measure_once(size, lat_n, bw_n, *iter_base, &s[k]) != 0) {
      rc = -1;
      goto out;
    }
    *iter_base += lat_n + bw_n;
  }
  *r = s[0];
  r->reps = (uint64_t)n;
  for (int k = 0; k < n; k++) {
    if (s[k].gbps < r->gbps_min) r->gbps_min = s[k].gbps;
    if (s[k].gbps > r->gbps_max) r->gbps_max = s[k].gbps;
    if (s[k].p50_us < r->p50_min) r->p50_min = s[k].p50_us;
    if (s[k].p50_us > r->p50_max) r->p50_max = s[k].p50_us;
  }
#define MEDIAN(field)                                                                                                  \
  do {                                                                                                                 \
    for (int k = 0; k < n; k++) v[k] = s[k].field;                                                                     \
    r->field = median_of(v, n);                                                                                        \
  } while (0)
  MEDIAN(gbps);
  MEDIAN(avg_us);
  MEDIAN(p50_us);
  MEDIAN(p99_us);
  MEDIAN(msgs);
#undef MEDIAN
out:
  free(s);
  free(v);
  return rc;
}

static int run_a(void) {
  params_t prm = {.magic = PARAMS_MAGIC,
                  .max_size = P.o.max_size,
                  .inflight = (uint32_t)P.o.inflight,
                  .check = (uint32_t)P.o.check,
                  .bidir = (uint32_t)P.o.bidir,
                  .reps = (uint32_t)P.o.reps};
  if (gn_boot_send(P.bootfd, &prm, sizeof prm) != 0) {
    perr("bootstrap: %s", strerror(errno));
    return 1;
  }
  if (setup_all(P.o.max_size, P.o.inflight) != 0) {
    (void)teardown(); /* unloads the plugin: its last counters file is written now, not at exit */
    return 1;
  }
  print_header();

  /* sizes */
  uint64_t sizes[128];
  int ns = 0;
  for (uint64_t s = P.o.min_size; ns < 127; s = s ? s * P.o.factor : 1) {
    if (s > P.o.max_size) break;
    sizes[ns++] = s;
    if (s == P.o.max_size) break;
    if (s > P.o.max_size / P.o.factor) break;
  }
  if (ns == 0 || sizes[ns - 1] != P.o.max_size) sizes[ns++] = P.o.max_size;

  row_t *rows = calloc((size_t)ns, sizeof *rows);
  if (rows == NULL) {
    perr("out of memory");
    return 1;
  }
  int nrows = 0, status = 0;
  uint64_t iter_base = 0;
  for (int k = 0; k < ns && status == 0; k++) {
    uint64_t size = sizes[k];
    uint64_t lat_n = P.o.iters ? P.o.iters : auto_lat_iters(size);
    uint64_t bw_n = P.o.iters ? P.o.iters : auto_bw_iters(size);
    /* warm-up (also the calibration for --duration) */
    P.rep = 1;
    cmd_t w = {.op = OP_RUN,
               .size = size,
               .lat_iters = lat_n < 4 ? lat_n : 4,
               .bw_iters = bw_n < (uint64_t)P.o.inflight ? bw_n : (uint64_t)P.o.inflight,
               .iter_base = iter_base};
    if (P.o.duration > 0) {
      w.lat_iters = 16;
      w.bw_iters = 2 * (uint64_t)P.o.inflight;
    }
    double wl[32];
    uint64_t wbw = 0;
    result_t pr;
    if (a_exchange(&w, wl, &wbw, &pr) != 0) {
      perr("size %" PRIu64 " (warm-up): %s", size, P.fatal_msg);
      status = 1;
      break;
    }
    iter_base += w.lat_iters + w.bw_iters;
    if (P.mismatches || pr.mismatches) {
      perr("size %" PRIu64 " (warm-up): data check failed: %s", size, P.mismatches ? P.first_err : pr.msg);
      status = 1;
      break;
    }
    if (P.o.duration > 0) {
      double half = P.o.duration / 2;
      double rtt_s = 0;
      for (uint64_t i = 0; i < w.lat_iters; i++) rtt_s += 2 * wl[i] / 1e6;
      rtt_s /= (double)w.lat_iters;
      lat_n = (uint64_t)(half / (rtt_s > 1e-7 ? rtt_s : 1e-7));
      double per_msg = (double)wbw / 1e9 / (double)w.bw_iters;
      bw_n = (uint64_t)(half / (per_msg > 1e-7 ? per_msg : 1e-7));
      if (lat_n < 1) lat_n = 1;
      if (bw_n < 1) bw_n = 1;
      if (lat_n > 10000000) lat_n = 10000000;
      if (bw_n > 10000000) bw_n = 10000000;
    }
    row_t *r = &rows[nrows];
    if (measure_reps(size, lat_n, bw_n, &iter_base, r) != 0) {
      status = 1;
      break;
    }
    nrows++;
    print_row(r);
    if (P.o.mode == 'c') { /* the server prints the table too */
      cmd_t rc = {.op = OP_ROW};
      if (gn_boot_send(P.bootfd, &rc, sizeof rc) != 0 || gn_boot_send(P.bootfd, r, sizeof *r) != 0) {
        perr("bootstrap: sending the row to the server: %s", strerror(errno));
        status = 1;
        break;
      }
    }
  }
  cmd_t done = {.op = OP_DONE};
  if (gn_boot_send(P.bootfd, &done, sizeof done) != 0 && status == 0) {
    perr("bootstrap: %s", strerror(errno));
    status = 1;
  }
  if (status == 0 && write_outputs(rows, nrows) != 0) {
    perr("%s", P.fatal_msg);
    status = 1;
  }
  free(rows);
  if (teardown() != 0) {
    perr("%s", P.fatal_msg);
    status = 1;
  }
  return status;
}

/* ------------------------------------------------------------------------------------------ */
/* --local and the verbs emulator: both processes of the run meet in VEMU_DIR. Unless the user set it, the run gets a
 * private one under TMPDIR, removed at the end, so that no --local run leaves the emulator's sockets and fake sysfs
 * in /tmp/vemu-<uid> (its default, shared by every run of the user). Harmless with a real libibverbs. */
static char g_vemu_dir[600];

static void setup_vemu_dir(void) {
  const char *user = getenv("VEMU_DIR"), *tmp = getenv("TMPDIR");
  if (user != NULL && user[0] != '\0') return;
  snprintf(g_vemu_dir, sizeof g_vemu_dir, "%s/gdrnet-perf-vemu.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(g_vemu_dir) == NULL || setenv("VEMU_DIR", g_vemu_dir, 1) != 0) {
    perr("creating a VEMU_DIR for the run (%s): %s", g_vemu_dir, strerror(errno));
    (void)rmdir(g_vemu_dir);
    g_vemu_dir[0] = '\0';
    return;
  }
  if (P.o.verbose)
    printf("# VEMU_DIR=%s (the verbs emulator's rendezvous for this run, removed at the end)\n", g_vemu_dir);
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT)
    perr("removing %s: %s", path, strerror(errno));
  return 0;
}

static void remove_vemu_dir(void) {
  if (g_vemu_dir[0] == '\0') return;
  (void)nftw(g_vemu_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  g_vemu_dir[0] = '\0';
}

static int run_local(void) {
  int sv[2];
  if (gn_boot_socketpair(sv) != 0) {
    perror("gdrnet-perf: socketpair");
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("gdrnet-perf: fork");
    return 1;
  }
  if (pid == 0) {
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(sv[0]);
    P.role = 'B';
    P.bootfd = sv[1];
    P.tty = 0;
    g_vemu_dir[0] = '\0'; /* A removes it */
    gn_log_set_prefix("1");
    int rc = run_b();
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  g_child = pid;
  close(sv[1]);
  P.role = 'A';
  P.bootfd = sv[0];
  gn_log_set_prefix("0");
  int rc = run_a();
  close(P.bootfd);
  int st = 0;
  if (waitpid(pid, &st, 0) < 0) {
    perror("gdrnet-perf: waitpid");
    return 1;
  }
  g_child = -1;
  if (WIFSIGNALED(st)) {
    fprintf(stderr, "gdrnet-perf: error: peer process B died of signal %d\n", WTERMSIG(st));
    return 1;
  }
  print_counters(getpid(), "process A", P.setup_ok);
  print_counters(pid, "process B", P.setup_ok);
  if (finish_json() != 0 && rc == 0) rc = 1;
  if (WEXITSTATUS(st) != 0) {
    if (rc == 0) fprintf(stderr, "gdrnet-perf: error: peer process B exited with status %d\n", WEXITSTATUS(st));
    return 1;
  }
  return rc;
}

int main(int argc, char **argv) {
  memset(&P, 0, sizeof P);
  parse_args(argc, argv, &P.o);
  P.json_fd = -1;
  if ((P.o.json && strcmp(P.o.json, "-") == 0) || (P.o.csv && strcmp(P.o.csv, "-") == 0)) {
    /* stdout carries the JSON (or CSV) alone, for a pipe; the table and the messages go to stderr */
    fflush(stdout);
    P.json_fd = dup(STDOUT_FILENO);
    if (P.json_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      perror("gdrnet-perf: --json -/--csv -: dup");
      return 1;
    }
  }
  setup_env();
  P.tty = isatty(STDOUT_FILENO);
  signal(SIGPIPE, SIG_IGN);

  if (P.o.mode == 'l') {
    setup_vemu_dir();
    int rc = run_local();
    remove_vemu_dir();
    return rc;
  }
  if (P.o.mode == 's') {
    int port = 0;
    int lfd = gn_boot_tcp_listen(NULL, P.o.port, &port);
    if (lfd < 0) {
      fprintf(stderr, "gdrnet-perf: error: cannot listen on port %d: %s\n", P.o.port, strerror(errno));
      return 1;
    }
    printf("# gdrnet-perf server: waiting for a client on port %d\n", port);
    fflush(stdout);
    P.bootfd = gn_boot_tcp_accept(lfd, 3600);
    close(lfd);
    if (P.bootfd < 0) {
      fprintf(stderr, "gdrnet-perf: error: accepting the client: %s\n", strerror(errno));
      return 1;
    }
    P.role = 'B';
    union {
      struct sockaddr sa;
      struct sockaddr_storage ss;
    } peer;
    socklen_t plen = sizeof peer;
    char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
    if (getpeername(P.bootfd, &peer.sa, &plen) != 0 ||
        getnameinfo(&peer.sa, plen, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      snprintf(host, sizeof host, "(unknown: %s)", strerror(errno));
    printf("# gdrnet-perf server: client %s port %s connected\n",
           strncmp(host, "::ffff:", 7) == 0 && strchr(host, '.') ? host + 7 : host, serv);
    fflush(stdout);
    int rc = run_b();
    close(P.bootfd);
    print_counters(getpid(), "this server", P.setup_ok);
    if (finish_json() != 0 && rc == 0) rc = 1;
    if (rc == 0) printf("# gdrnet-perf server: run complete\n");
    return rc;
  }
  char cerr[512];
  P.bootfd = gn_boot_tcp_connect(P.o.host, P.o.port, P.o.timeout, cerr, sizeof cerr);
  if (P.bootfd < 0) {
    fprintf(stderr, "gdrnet-perf: error: cannot reach the server: %s\n", cerr);
    return 1;
  }
  P.role = 'A';
  int rc = run_a();
  close(P.bootfd);
  print_counters(getpid(), "this client", P.setup_ok);
  if (finish_json() != 0 && rc == 0) rc = 1;
  return rc;
}
