/* Unit tests: config-space parsing and PCIe distance classification (pcicfg.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "fixture.h"
#include "pcicfg.h"

static uint8_t cfg[4096];

static void acs_found(void **s) {
  (void)s;
  uint16_t ctrl = 0;
  size_t off = 0;
  fx_cfg(cfg, 0x10b5, true, 0, DR_ACS_SV | DR_ACS_RR | DR_ACS_CR | DR_ACS_UF);
  assert_int_equal(dr_pci_acs_ctrl(cfg, sizeof cfg, &ctrl, &off), DR_CFG_FOUND);
  assert_int_equal(off, 0x148);
  assert_int_equal(ctrl, 0x001d);
  assert_true(ctrl & DR_ACS_P2P_BLOCKING);
  char bits[128];
  dr_acs_bits_str(ctrl, bits, sizeof bits);
  assert_string_equal(bits, "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+");
  fx_cfg(cfg, 0x10b5, true, 0, 0);
  assert_int_equal(dr_pci_acs_ctrl(cfg, sizeof cfg, &ctrl, NULL), DR_CFG_FOUND);
  assert_int_equal(ctrl, 0);
  dr_acs_bits_str(ctrl, bits, sizeof bits);
  assert_string_equal(bits, "none");
}

static void acs_absent_short_malformed(void **s) {
  (void)s;
  uint16_t ctrl;
  fx_cfg(cfg, 0x10b5, true, 0, -1);
  assert_int_equal(dr_pci_acs_ctrl(cfg, sizeof cfg, &ctrl, NULL), DR_CFG_ABSENT);
  /* unprivileged reads stop at 64 or 256 bytes: cannot tell */
  assert_int_equal(dr_pci_acs_ctrl(cfg, 256, &ctrl, NULL), DR_CFG_SHORT);
  assert_int_equal(dr_pci_acs_ctrl(cfg, 64, &ctrl, NULL), DR_CFG_SHORT);
  /* ACS header readable but its control word cut off */
  fx_cfg(cfg, 0x10b5, true, 0, 0x1d);
  assert_int_equal(dr_pci_acs_ctrl(cfg, 0x14c, &ctrl, NULL), DR_CFG_SHORT);
  /* a loop in the extended list */
  cfg[0x148 + 2] = 0;
  cfg[0x148 + 3] = 0x10; /* next = 0x100 */
  cfg[0x148] = 0x01;     /* not ACS any more */
  assert_int_equal(dr_pci_acs_ctrl(cfg, sizeof cfg, &ctrl, NULL), DR_CFG_MALFORMED);
  /* all ones: device gone */
  memset(cfg, 0xff, sizeof cfg);
  assert_int_equal(dr_pci_acs_ctrl(cfg, sizeof cfg, &ctrl, NULL), DR_CFG_MALFORMED);
  /* no extended capabilities */
  memset(cfg, 0, sizeof cfg);
  assert_int_equal(dr_pci_acs_ctrl(cfg, sizeof cfg, &ctrl, NULL), DR_CFG_ABSENT);
  assert_int_equal(dr_pci_acs_ctrl(NULL, 0, &ctrl, NULL), DR_CFG_SHORT);
}

static void devctl_relaxed_ordering(void **s) {
  (void)s;
  uint16_t dc = 0;
  size_t off = 0;
  fx_cfg(cfg, 0x15b3, false, 0x2810 | DR_DEVCTL_RELAXED_ORDERING, -1);
  assert_int_equal(dr_pci_devctl(cfg, sizeof cfg, &dc, &off), DR_CFG_FOUND);
  assert_int_equal(off, 0x60);
  assert_true(dc & DR_DEVCTL_RELAXED_ORDERING);
  fx_cfg(cfg, 0x15b3, false, 0x2800, -1);
  assert_int_equal(dr_pci_devctl(cfg, 256, &dc, NULL), DR_CFG_FOUND);
  assert_false(dc & DR_DEVCTL_RELAXED_ORDERING);
  assert_int_equal(dr_pci_devctl(cfg, 64, &dc, NULL), DR_CFG_SHORT);
  assert_int_equal(dr_pci_devctl(cfg, 16, &dc, NULL), DR_CFG_SHORT);
  fx_cfg(cfg, 0x15b3, false, -1, -1);
  assert_int_equal(dr_pci_devctl(cfg, sizeof cfg, &dc, NULL), DR_CFG_ABSENT);
  /* no capabilities bit in Status */
  fx_cfg(cfg, 0x15b3, false, 0x2810, -1);
  cfg[6] = 0;
  assert_int_equal(dr_pci_devctl(cfg, sizeof cfg, &dc, NULL), DR_CFG_ABSENT);
  /* standard list pointing into the header */
  fx_cfg(cfg, 0x15b3, false, 0x2810, -1);
  cfg[0x34] = 0x10;
  assert_int_equal(dr_pci_devctl(cfg, sizeof cfg, &dc, NULL), DR_CFG_MALFORMED);
  /* standard list loop */
  fx_cfg(cfg, 0x15b3, false, -1, -1);
  cfg[0x41] = 0x40;
  assert_int_equal(dr_pci_devctl(cfg, sizeof cfg, &dc, NULL), DR_CFG_MALFORMED);
}

static enum dr_dist dist(const char *a, const char *b, int na, int nb) {
  struct dr_pcipath pa, pb;
  assert_int_equal(dr_pcipath_parse(a, &pa), 0);
  assert_int_equal(dr_pcipath_parse(b, &pb), 0);
  return dr_pci_distance(&pa, &pb, na, nb, NULL);
}

#define RP "/sys/devices/pci0000:00/0000:00:01.0"
static void distances(void **s) {
  (void)s;
  /* same switch */
  assert_int_equal(
      dist(RP "/0000:01:00.0/0000:02:00.0/0000:03:00.0", RP "/0000:01:00.0/0000:02:01.0/0000:04:00.0", 0, 0),
      DR_DIST_PIX);
  /* cascaded switches */
  assert_int_equal(dist(RP "/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0",
                        RP "/0000:01:00.0/0000:02:01.0/0000:06:00.0", 0, 0),
                   DR_DIST_PXB);
  /* two functions of one device behind a root port */
  assert_int_equal(dist(RP "/0000:01:00.0", RP "/0000:01:00.1", 0, 0), DR_DIST_PIX);
  /* different root ports of one host bridge */
  assert_int_equal(dist(RP "/0000:01:00.0", "/sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0", 0, 0), DR_DIST_PHB);
  /* different host bridges, same NUMA node / unknown NUMA / different nodes */
  assert_int_equal(dist(RP "/0000:01:00.0", "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0", 0, 0), DR_DIST_NODE);
  assert_int_equal(dist(RP "/0000:01:00.0", "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0", -1, 1), DR_DIST_NODE);
  assert_int_equal(dist(RP "/0000:01:00.0", "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", 0, 1), DR_DIST_SYS);
  assert_string_equal(dr_dist_name(DR_DIST_PXB), "PXB");
}

static void path_parse(void **s) {
  (void)s;
  struct dr_pcipath p;
  assert_int_equal(dr_pcipath_parse("/tmp/fx/sys/devices/pci0000:00/0000:00:01.0/0000:04:00.0/infiniband/mlx5_0", &p),
                   0);
  assert_string_equal(p.host, "pci0000:00");
  assert_int_equal(p.n, 2);
  assert_string_equal(p.comp[1], "0000:04:00.0");
  assert_int_equal(dr_pcipath_parse("/sys/devices/virtual/infiniband/rxe0", &p), -1);
  assert_int_equal(dr_pcipath_parse("/sys/devices/pci0000:00", &p), -1);
  assert_int_equal(dr_pcipath_parse("/nowhere", &p), -1);
  assert_true(dr_is_bdf("0000:3b:00.1"));
  assert_false(dr_is_bdf("0000:3b:00"));
  assert_false(dr_is_bdf("0000:3g:00.1"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(acs_found),
      cmocka_unit_test(acs_absent_short_malformed),
      cmocka_unit_test(devctl_relaxed_ordering),
      cmocka_unit_test(distances),
      cmocka_unit_test(path_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
