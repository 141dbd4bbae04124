/* gdrnet-doctor: will GPUDirect RDMA work on this host, and if not, why and how to fix it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "doctor.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: gdrnet-doctor [--json] [--quiet] [--sysfs-root DIR] [--no-verbs] [--no-cuda] [--probe-libs] "
          "[--version] [--help]\n"
          "\n"
          "Checks whether GPUDirect RDMA can work on this host for libnccl-net-gdr and says what to fix:\n"
          "rdma-core, RDMA devices/ports/RoCE GIDs, RLIMIT_MEMLOCK, CAP_IPC_LOCK, /dev/infiniband,\n"
          "nvidia-peermem, DMA-BUF, IOMMU, GPU<->NIC PCIe distance, ACS, relaxed ordering, NCCL_* variables.\n"
          "\n"
          "  --json            one JSON object (findings with id, status, title, evidence, fix; verdict, outcome)\n"
          "  --quiet           problems only: the WARN and FAIL findings, then the verdict and the outcome\n"
          "  --sysfs-root DIR  read DIR/sys, DIR/proc, DIR/dev instead of the live host (tests, or a copy\n"
          "                    taken elsewhere); implies --no-verbs --no-cuda unless --probe-libs\n"
          "  --no-verbs        do not dlopen libibverbs.so.1 ($GDRNET_IBVERBS_LIB)\n"
          "  --no-cuda         do not dlopen libcuda.so.1\n"
          "  --probe-libs      load libibverbs and libcuda even with --sysfs-root\n"
          "  --version         print the version and exit\n"
          "  --help            this text\n"
          "\n"
          "Each finding is OK, INFO, WARN (works, but slower or fragile) or FAIL (GPUDirect RDMA will not work).\n"
          "The last line is the outcome: what NCCL would load and run over, and whether GPUDirect RDMA is on, e.g.\n"
          "\"NCCL would load GDR v11 and run over TCP on eth0, GDR off: no RDMA device\".\n"
          "Exit status: 0 ready (no FAIL), 1 not ready, 2 usage error.\n");
}

int main(int argc, char **argv) {
  bool json = false, quiet = false, no_verbs = false, no_cuda = false, probe_libs = false;
  const char *root = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
      quiet = true;
    } else if (strcmp(a, "--no-verbs") == 0) {
      no_verbs = true;
    } else if (strcmp(a, "--no-cuda") == 0) {
      no_cuda = true;
    } else if (strcmp(a, "--probe-libs") == 0) {
      probe_libs = true;
    } else if (strcmp(a, "--version") == 0) {
      printf("gdrnet-doctor %s\n", DR_VERSION);
      return 0;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--sysfs-root") == 0 || strncmp(a, "--sysfs-root=", 13) == 0) {
      if (a[12] == '=') {
        root = a + 13;
      } else if (i + 1 < argc) {
        root = argv[++i];
      } else {
        fprintf(stderr, "gdrnet-doctor: option --sysfs-root needs a directory\n");
        usage(stderr);
        return 2;
      }
      if (*root == '\0') {
        fprintf(stderr, "gdrnet-doctor: --sysfs-root: empty directory name\n");
        return 2;
      }
    } else {
      fprintf(stderr, "gdrnet-doctor: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }

  struct dr_report rep;
  dr_report_init(&rep);
  struct dr_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.rep = &rep;
  ctx.quiet = quiet;
  if (root) {
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
      fprintf(stderr, "gdrnet-doctor: --sysfs-root %s: %s\n", root, errno ? strerror(errno) : "not a directory");
      return 2;
    }
    size_t l = strlen(root);
    while (l > 1 && root[l - 1] == '/') l--;
    if (l >= sizeof ctx.root) {
      fprintf(stderr, "gdrnet-doctor: --sysfs-root: path too long\n");
      return 2;
    }
    if (!(l == 1 && root[0] == '/')) {
      memcpy(ctx.root, root, l);
      ctx.root[l] = '\0';
      ctx.fabricated = true;
    }
  }
  ctx.probe_verbs = !no_verbs && (!ctx.fabricated || probe_libs);
  ctx.probe_cuda = !no_cuda && (!ctx.fabricated || probe_libs);

  dr_run_all(&ctx);
  int rc = json ? dr_print_json(&rep, &ctx, stdout) : dr_print_human(&rep, &ctx, stdout);
  if (fflush(stdout) != 0) rc = -1;
  int ready = dr_count(&rep, DR_FAIL) == 0 && !rep.oom;
  dr_ctx_free(&ctx);
  dr_report_free(&rep);
  if (rc < 0) {
    fprintf(stderr, "gdrnet-doctor: writing the report failed: %s\n", strerror(errno));
    return 1;
  }
  return ready ? 0 : 1;
}
