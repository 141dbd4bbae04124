/* Prints docs/configuration.md from the parameter table (params.def), and the fault classification of
 * docs/recovery.md from the plugin's own tables (health.c, rdma/classify.c).
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

/* The README's knobs (between its knobs markers, checked by tests/readme/check_readme_table.cmake): the few a user
 * sets; docs/configuration.md has every knob. A name that leaves params.def makes --readme fail. */
static const char *const readme_knobs[] = {"GDRNET_TRANSPORT", "GDRNET_SOCKET_IFNAME", "GDRNET_HCA",
                                           "GDRNET_FALLBACK",  "GDRNET_STATS_FILE",    "GDRNET_STALL_WARN_MS",
                                           NULL};

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
  else
    rc = gdr_params_markdown(stdout);
  if (rc != 0 || fflush(stdout) != 0) {
    fprintf(stderr, "gdrnet-gen-config-doc: the text could not be written (or a knob list names no knob)\n");
    return 1;
  }
  return 0;
}
