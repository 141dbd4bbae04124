/* TCP transport: the knobs resolved (stream, lane and I/O thread counts, polling windows and modes, inline sizes)
 * and the chunk arithmetic. The lowest layer of tcp/: it reads knobs, the environment and the CPU affinity, and
 * calls nothing else of the transport. */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "tcp.h"

void gdr_tcp_plan_chunks(size_t size, int nthreads, size_t min_chunk, size_t max_chunk, struct gdr_tcp_plan *plan) {
  size_t c;
  if (nthreads < 1) nthreads = 1;
  if (min_chunk == 0) min_chunk = 1;
  if (max_chunk < min_chunk) max_chunk = min_chunk;
  c = size / (size_t)nthreads + (size % (size_t)nthreads != 0);
  c = (c + 4095) & ~(size_t)4095;
  if (c < min_chunk) c = min_chunk;
  if (c > max_chunk) c = max_chunk;
  plan->chunk = c;
  plan->nchunks = (uint32_t)(size / c + (size % c != 0));
}

static int env_int(const char *name, int *v) {
  const char *s = getenv(name);
  char *end = NULL;
  long x;
  if (s == NULL || *s == '\0') return -1;
  x = strtol(s, &end, 10);
  if (*end != '\0' || x < 0 || x > 1024) return -1;
  *v = (int)x;
  return 0;
}

void gdr_tcp_resolve_streams(int *nsocks, int *nthreads) {
  int ns = (int)gdr_param_int(GDR_PARAM_TCP_NSOCKS);
  int nt = (int)gdr_param_int(GDR_PARAM_TCP_NTHREADS);
  if (ns == GDR_PARAM_AUTO) {
    int nthr = 0, per = 0;
    if (env_int("NCCL_SOCKET_NTHREADS", &nthr) == 0 && env_int("NCCL_NSOCKS_PERTHREAD", &per) == 0 && nthr > 0 &&
        per > 0) {
      ns = nthr * per; /* NCCL Socket's total stream count */
    } else {
      /* One loopback stream carries ~4 GB/s and scales about linearly to 16: a quarter of the cores,
       * 2..8, leaves room for several comms at once. */
      long cores = sysconf(_SC_NPROCESSORS_ONLN);
      ns = cores > 0 ? (int)(cores / 4) : 2;
      if (ns < 2) ns = 2;
      if (ns > 8) ns = 8;
    }
  }
  if (ns < 1) ns = 1;
  if (ns > TCP_MAX_STREAMS) ns = TCP_MAX_STREAMS;
  if (nt == GDR_PARAM_AUTO || nt > ns) nt = ns;
  if (nt < 1) nt = 1;
  *nsocks = ns;
  *nthreads = nt;
}

void gdr_tcp_streams_for(const struct gdr_conn_opts *o, int *nsocks, int *nthreads) {
  int nt_knob = (int)gdr_param_int(GDR_PARAM_TCP_NTHREADS);
  int n = o->ndevs > 1 ? o->ndevs : 1;
  int ns, nt;
  gdr_tcp_resolve_streams(&ns, &nt);
  if (o->max_flows > 0 && ns > o->max_flows) ns = o->max_flows;
  if (o->min_flows > 0 && ns < o->min_flows) ns = o->min_flows;
  if (ns < n) ns = n;
  ns = (ns + n - 1) / n * n;
  if (ns > TCP_MAX_STREAMS) ns = TCP_MAX_STREAMS - TCP_MAX_STREAMS % n;
  if (nt_knob == GDR_PARAM_AUTO || nt_knob > ns)
    nt = ns;
  else
    nt = nt_knob < 1 ? 1 : nt_knob;
  *nsocks = ns;
  *nthreads = nt;
}

uint64_t gdr_tcp_resolve_spin_ns(void) {
  int64_t us = gdr_param_int(GDR_PARAM_TCP_SPIN_US);
  if (us == GDR_PARAM_AUTO) us = gdr_tcp_rank_cores(NULL) >= TCP_SPIN_AUTO_CORES ? TCP_SPIN_AUTO_US : 0;
  return us > 0 ? (uint64_t)us * 1000u : 0;
}

/* ------------------------------------------------------------------------------------------- pool size -- */

static int env_pos(const char *name) {
  const char *s = getenv(name);
  char *end = NULL;
  long v;
  if (s == NULL || *s == '\0') return 0;
  v = strtol(s, &end, 10);
  return (*end == '\0' && v > 0 && v < 100000) ? (int)v : 0;
}

int gdr_tcp_rank_cores(const char **from) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  int cores, local = 0;
  if (from) *from = NULL;
  if (online < 1) online = 1;
  cores = (int)online;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) cores = CPU_COUNT(&set);
  /* A rank bound to its own cores sees them in its affinity; an unbound one shares the host with the other ranks
   * of the host, which the launchers name */
  if (cores >= online) {
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE",
                                        "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && local == 0; i++)
      if ((local = env_pos(names[i])) > 0 && from) *from = names[i];
  }
  if (local > 1) cores /= local;
  return cores > 0 ? cores : 1;
}

int gdr_tcp_pool_size(char *why, size_t whylen) {
  int64_t knob = gdr_param_int(GDR_PARAM_TCP_IO_THREADS);
  const char *from = NULL;
  int cores, n;
  if (knob != GDR_PARAM_AUTO) {
    n = (int)knob;
    if (why) snprintf(why, whylen, "GDRNET_TCP_IO_THREADS=%d", n);
    return n;
  }
  cores = gdr_tcp_rank_cores(&from);
  if (cores >= TCP_SPIN_AUTO_CORES) {
    /* cores of its own: one thread per core NCCL's two busy threads leave (they poll, GDRNET_TCP_SPIN_US) */
    n = cores - TCP_IO_NCCL_THREADS;
    if (n > TCP_IO_MAX_AUTO) n = TCP_IO_MAX_AUTO;
  } else {
    /* Few cores, shared with NCCL's busy threads: the threads block (no polling) and the scheduler shares a core
     * per runnable thread, so more of them get the bytes more of it (8 ranks on the 16-core GPU machine, 128 MB
     * all_reduce: 2 threads 2.09 GB/s, 4 2.82, 8 2.69, 16 3.31; docs/archive/PERFORMANCE-log.md section 9) */
    n = TCP_IO_MAX_AUTO;
  }
  if (why && cores >= TCP_SPIN_AUTO_CORES)
    snprintf(why, whylen, "auto: %d core(s) for this rank%s%s%s, 2 for NCCL's threads, one polling thread per other",
             cores, from ? " (per " : "", from ? from : "", from ? ")" : "");
  else if (why)
    snprintf(why, whylen,
             "auto: %d core(s) for this rank%s%s%s, fewer than 8: the most, as blocking threads sharing cores get more "
             "CPU time (GDRNET_TCP_IO_THREADS)",
             cores, from ? " (per " : "", from ? from : "", from ? ")" : "");
  return n;
}

size_t gdr_tcp_resolve_steal_chunk(void) {
  const size_t sc = (size_t)gdr_param_int(GDR_PARAM_TCP_STEAL_CHUNK);
  return sc > (size_t)gdr_param_int(GDR_PARAM_TCP_MIN_CHUNK) ? sc : 0;
}
