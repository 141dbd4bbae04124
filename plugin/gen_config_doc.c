/* Prints docs/configuration.md from the parameter table (params.def) and the TCP threads section below, and the
 * fault classification of docs/recovery.md from the plugin's own tables (health.c, rdma/classify.c).
 *   build/plugin/gdrnet-gen-config-doc > docs/configuration.md
 *   build/plugin/gdrnet-gen-config-doc --table      only the knob table, every knob
 *   build/plugin/gdrnet-gen-config-doc --readme     the README's table: the knobs a user actually sets (readme_knobs)
 *   build/plugin/gdrnet-gen-config-doc --faults     the fault table (between the markers of docs/recovery.md) */
#include <stdio.h>
#include <string.h>

#include "health.h"
#include "param.h"
#ifdef GDRNET_HAVE_RDMA
#include "rdma/rdma.h"
#endif

static const char *res_name(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "-";
  case ncclSystemError: return "SystemError";
  case ncclInternalError: return "InternalError";
  case ncclRemoteError: return "RemoteError";
  case ncclInvalidUsage: return "InvalidUsage";
  default: return "?";
  }
}

static int print_rows(const char *what, const struct gdr_fault_class *rows, int n) {
  for (int i = 0; i < n; i++)
    if (printf("| %s | `%s` | %s | %s | %s |\n", what, rows[i].name, gdr_fault_action_str(rows[i].action),
               res_name(rows[i].res), rows[i].hint) < 0)
      return -1;
  return 0;
}

static int print_faults(void) {
  int n = 0;
  const struct gdr_fault_class *rows;
  if (printf("| kind | code | decision | NCCL gets when it gives up | hint in the WARN line |\n"
             "|---|---|---|---|---|\n") < 0)
    return -1;
#ifdef GDRNET_HAVE_RDMA
  rows = gdr_rdma_fault_wc_table(&n);
  if (print_rows("work completion", rows, n) != 0) return -1;
  rows = gdr_rdma_fault_event_table(&n);
  if (print_rows("async event", rows, n) != 0) return -1;
#endif
  rows = gdr_fault_errno_table(&n);
  return print_rows("socket", rows, n);
}

/* docs/configuration.md's last section: how the TCP transport's thread and polling knobs combine (plugin/tcp/
 * tcp_init.c resolves them, tcp_pool.c runs them). */
static const char tcp_threads_doc[] =
    "\n"
    "## TCP: how the thread and polling knobs combine\n\n"
    "A process moves the data streams of all its TCP connections with one pool of `GDRNET_TCP_IO_THREADS` I/O\n"
    "threads (`gdr-tcp-io/N`); each connection cuts its large messages into chunks spread over\n"
    "`GDRNET_TCP_NTHREADS` send lanes, and the lanes and receive streams are shared out over the pool, the least\n"
    "loaded thread first. Every `auto` among these knobs follows one figure, the cores this rank may use (its CPU\n"
    "affinity, or the host's cores divided by the ranks on the host that `OMPI_COMM_WORLD_LOCAL_SIZE`,\n"
    "`MPI_LOCALNRANKS`, `LOCAL_WORLD_SIZE` or `SLURM_NTASKS_PER_NODE` names when the rank is not bound). With at\n"
    "least 8, the pool has one thread per core left after NCCL's two busy threads (at most 16) and they poll: a\n"
    "thread that made progress keeps polling for `GDRNET_TCP_SPIN_US` (auto 200 µs), or `GDRNET_TCP_SPIN_MAX_US`\n"
    "(auto 1000 µs) while one of its connections expects traffic, then sleeps in epoll_wait; `GDRNET_TCP_PROGRESS`\n"
    "says whether it polls for that window after every progress (`fixed`, what auto means) or only while a\n"
    "connection it serves has a request outstanding and progress keeps coming (`adaptive`); and at most\n"
    "`GDRNET_TCP_SPIN_THREADS` threads poll at once (auto: 1 when fixed, the rank's cores less 2 when adaptive),\n"
    "the others sleeping until the kernel wakes them. With fewer than 8 cores the pool is 16 threads that never\n"
    "poll (`GDRNET_TCP_SPIN_US` auto is 0, so the spin, progress and spin-thread knobs do nothing). Either way\n"
    "NCCL's proxy thread, which spins anyway, helps (`GDRNET_TCP_PROXY_IO`, auto on): a test() whose request waits\n"
    "for chunks runs one bounded pass of the idle I/O threads of its connection (the polling one is at work and\n"
    "skipped), `GDRNET_TCP_HELP_BYTES` per stream. Where the threads poll it helps only the late ones, once the\n"
    "connection's streams have moved nothing for `GDRNET_TCP_HELP_AFTER_US` (auto 50 µs), in 128 KiB passes so that\n"
    "NCCL's next steps wait less, and at once while half of the recent wake-ups of sleeping threads take longer\n"
    "than that (the pool's INFO lines at its stop count them and, on a VM whose host held its CPUs back for 1 %\n"
    "or more of the time, name that steal); where they sleep, at once and 512 KiB a pass. An idle I/O thread reads\n"
    "/proc/stat once a quarter second, and the stop's line counts the windows with 3 % steal or more; with\n"
    "`GDRNET_TCP_STEAL_CHUNK` set (off by default), sends are cut into chunks of at least that while the host steals\n"
    "(until two seconds under 1 %): fewer hand-overs wake fewer of the vCPUs that the hypervisor holds back.\n"
    "`GDRNET_TCP_SPIN_US=0` turns every kind of polling off. A knob set by hand replaces its own auto; the autos\n"
    "that depend on it follow the value set (`GDRNET_TCP_SPIN_MAX_US`, `GDRNET_TCP_HELP_BYTES` and\n"
    "`GDRNET_TCP_HELP_AFTER_US` on `GDRNET_TCP_SPIN_US`, `GDRNET_TCP_SPIN_THREADS` on `GDRNET_TCP_PROGRESS`). The\n"
    "TCP transport's INFO(NET) lines at init name the values in force and why.\n";

/* The README's knobs (between its knobs markers, checked by tests/readme/check_readme_table.cmake): the few a user
 * sets; docs/configuration.md has every knob. A name that leaves params.def makes --readme fail. */
static const char *const readme_knobs[] = {"GDRNET_TRANSPORT",  "GDRNET_SOCKET_IFNAME", "GDRNET_HCA", "GDRNET_FALLBACK",
                                           "GDRNET_STATS_FILE", "GDRNET_STALL_WARN_MS", NULL};

int main(int argc, char **argv) {
  int table = argc > 1 && strcmp(argv[1], "--table") == 0;
  int readme = argc > 1 && strcmp(argv[1], "--readme") == 0;
  int faults = argc > 1 && strcmp(argv[1], "--faults") == 0;
  int rc;
  if (argc > 2 || (argc == 2 && !table && !readme && !faults)) {
    fprintf(stderr, "usage: %s [--table | --readme | --faults]\n", argv[0]);
    return 2;
  }
  if (faults)
    rc = print_faults();
  else if (readme)
    rc = gdr_params_markdown_table_of(stdout, readme_knobs);
  else if (table)
    rc = gdr_params_markdown_table(stdout);
  else if ((rc = gdr_params_markdown(stdout)) == 0 && fputs(tcp_threads_doc, stdout) < 0)
    rc = -1;
  if (rc != 0 || fflush(stdout) != 0) {
    fprintf(stderr, "gdrnet-gen-config-doc: the text could not be written (or a knob list names no knob)\n");
    return 1;
  }
  return 0;
}
