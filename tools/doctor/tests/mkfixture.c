/* doctor_mkfixture DIR [broken]: write the tests' healthy fabricated host into DIR (for trying the
 * doctor by hand and for the examples in docs/doctor.md); "broken" adds ACS redirect on the GPU's
 * switch port, a translating IOMMU, memlock 8 MiB without CAP_IPC_LOCK and no nvidia-peermem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [broken]\n", argv[0]);
    return 2;
  }
  struct fx f;
  snprintf(f.root, sizeof f.root, "%s", argv[1]);
  int r = fx_healthy_host(&f);
  if (r == 0 && argc > 2 && strcmp(argv[2], "broken") == 0) {
    r |= fx_bridge(&f, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", 0, 0x001d);
    r |= fx_mkdir(&f, "sys/class/iommu/dmar0");
    r |= fx_write(&f, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro intel_iommu=on\n");
    r |= fx_memlock(&f, "8388608", "8388608");
    r |= fx_status(&f, 4242, 4242, 0);
    r |= fx_unlink(&f, "sys/module/nvidia_peermem/version");
    char p[600];
    snprintf(p, sizeof p, "%s/sys/module/nvidia_peermem", f.root);
    r |= rmdir(p);
    r |= fx_write(&f, "proc/driver/nvidia/version",
                  "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n");
    r |= fx_write(&f, "sys/module/nvidia/version", "535.183.01\n");
  }
  if (r != 0) {
    perror("doctor_mkfixture");
    return 1;
  }
  return 0;
}
