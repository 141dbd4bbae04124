/* Unit tests: RoCE GID selection (gid_select.c), rules as in plugin/rdma/gid.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gid_select.h"

static struct dr_gid_entry E(int idx, const char *gid, enum dr_gid_type t, enum dr_gid_ndev nd) {
  struct dr_gid_entry e;
  memset(&e, 0, sizeof e);
  e.index = idx;
  assert_int_equal(dr_gid_parse(gid, e.gid), 0);
  e.type = t;
  e.ndev = nd;
  return e;
}
#define LL "fe80:0000:0000:0000:0e42:a1ff:fe00:0001"
#define V4 "0000:0000:0000:0000:0000:ffff:0a00:0005"
#define V4B "0000:0000:0000:0000:0000:ffff:0a00:0007"
#define V4ZERO "0000:0000:0000:0000:0000:ffff:0000:0000"
#define V6 "2001:0db8:0000:0000:0000:0000:0000:0005"
#define ZERO "0000:0000:0000:0000:0000:0000:0000:0000"
#define P DR_GID_NDEV_PRESENT
#define U DR_GID_TYPE_UNKNOWN
#define V1 DR_GID_TYPE_V1
#define V2 DR_GID_TYPE_V2
#define FAM4 DR_GID_FAMILY_IPV4

static void
ipv4_before_ipv6(void **s) {
  (void)s;
  struct dr_gid_entry t[] = {E(0, LL, V2, P), E(1, V6, V2, P), E(2, V4, V2, P)};
  char why[128];
  assert_int_equal(dr_gid_select(t, 3, FAM4, 2, why, sizeof why), 2);
  assert_string_equal(why, "IPv4-mapped RoCE v2 GID");
  /* NCCL_IB_ADDR_FAMILY=AF_INET6 turns it round */
  assert_int_equal(dr_gid_select(t, 3, DR_GID_FAMILY_IPV6, 2, why, sizeof why), 1);
  /* no preference: table order */
  assert_int_equal(dr_gid_select(t, 3, DR_GID_FAMILY_ANY, 0, NULL, 0), 1);
}

static void ipv6_when_no_ipv4(void **s) {
  (void)s;
  struct dr_gid_entry t[] = {E(0, LL, V1, P), E(1, LL, V2, P), E(2, V6, V1, P), E(3, V6, V2, P)};
  char why[128];
  assert_int_equal(dr_gid_select(t, 4, FAM4, 2, why, sizeof why), 3);
  assert_string_equal(why, "IPv6 RoCE v2 GID");
}

static void link_local_and_zero_skipped(void **s) {
  (void)s;
  struct dr_gid_entry t[] = {E(0, LL, V1, P), E(1, LL, V2, P), E(2, ZERO, U, DR_GID_NDEV_UNKNOWN), E(3, V4ZERO, V2, P)};
  char why[160];
  assert_int_equal(dr_gid_select(t, 4, FAM4, 2, why, sizeof why), -1);
  assert_string_equal(why, "no usable GID among 4 entries (2 all-zero, 2 link-local fe80::/10)");
  /* fe80::/10 covers fe80..febf; fec0 (old site-local) is not link-local */
  uint8_t g[16];
  assert_int_equal(dr_gid_parse("febf:0000:0000:0000:0000:0000:0000:0001", g), 0);
  assert_int_equal(dr_gid_classify(g), DR_GID_LINK_LOCAL);
  assert_int_equal(dr_gid_parse("fec0:0000:0000:0000:0000:0000:0000:0001", g), 0);
  assert_int_equal(dr_gid_classify(g), DR_GID_IPV6);
}

static void v2_preferred(void **s) {
  (void)s;
  struct dr_gid_entry t[] = {E(2, V4, V1, P), E(3, V4, V2, P)};
  assert_int_equal(dr_gid_select(t, 2, FAM4, 2, NULL, 0), 3);
  /* NCCL_IB_ROCE_VERSION_NUM=1 */
  assert_int_equal(dr_gid_select(t, 2, FAM4, 1, NULL, 0), 2);
  /* family outranks version: IPv4 v1 beats IPv6 v2 */
  struct dr_gid_entry u[] = {E(1, V6, V2, P), E(2, V4, V1, P)};
  assert_int_equal(dr_gid_select(u, 2, FAM4, 2, NULL, 0), 2);
}

static void missing_type_files(void **s) {
  (void)s;
  char why[128];
  /* containers: gid_attrs/types unreadable -> unknown; the repeat of an earlier GID is taken as its v2 twin */
  struct dr_gid_entry t[] = {E(0, LL, U, DR_GID_NDEV_UNKNOWN), E(1, LL, U, DR_GID_NDEV_UNKNOWN),
                             E(2, V4, U, DR_GID_NDEV_UNKNOWN), E(3, V4, U, DR_GID_NDEV_UNKNOWN)};
  assert_int_equal(dr_gid_select(t, 4, FAM4, 2, why, sizeof why), 3);
  assert_non_null(strstr(why, "type unknown GID (repeats an earlier entry"));
  /* a single unknown entry: taken */
  assert_int_equal(dr_gid_select(t, 3, FAM4, 2, why, sizeof why), 2);
  assert_string_equal(why, "IPv4-mapped type unknown GID");
  /* unknown beats a known v1, loses to a known v2 */
  struct dr_gid_entry u[] = {E(4, V4, V1, P), E(5, V4B, U, DR_GID_NDEV_UNKNOWN)};
  assert_int_equal(dr_gid_select(u, 2, FAM4, 2, NULL, 0), 5);
  struct dr_gid_entry w[] = {E(4, V4, U, DR_GID_NDEV_UNKNOWN), E(5, V4B, V2, P)};
  assert_int_equal(dr_gid_select(w, 2, FAM4, 2, NULL, 0), 5);
  /* a twin guess still loses to a known v2 */
  struct dr_gid_entry x[] = {E(0, V4, U, P), E(1, V4, U, P), E(2, V4B, V2, P)};
  assert_int_equal(dr_gid_select(x, 3, FAM4, 2, NULL, 0), 2);
}

static void order_tiebreak_ndev_not_ranked(void **s) {
  (void)s;
  struct dr_gid_entry t[] = {E(7, V4, V2, DR_GID_NDEV_NONE), E(9, V4B, V2, P), E(8, V4B, V2, P)};
  /* ties keep the earlier entry; the netdev is reported, not ranked (as in the plugin) */
  assert_int_equal(dr_gid_select(t, 3, FAM4, 2, NULL, 0), 7);
}

static void empty_table(void **s) {
  (void)s;
  char why[128];
  assert_int_equal(dr_gid_select(NULL, 0, FAM4, 2, why, sizeof why), -1);
  assert_non_null(strstr(why, "0 entries"));
}

static void parse_and_format(void **s) {
  (void)s;
  uint8_t g[16];
  char buf[64];
  assert_int_equal(dr_gid_parse(V4 "\n", g), 0);
  dr_gid_format(g, buf, sizeof buf);
  assert_string_equal(buf, "::ffff:10.0.0.5");
  assert_int_equal(dr_gid_parse(LL, g), 0);
  dr_gid_format(g, buf, sizeof buf);
  assert_string_equal(buf, LL);
  assert_int_equal(dr_gid_parse("fe80::1", g), -1);
  assert_int_equal(dr_gid_parse("fe80:0000:0000:0000:0e42:a1ff:fe00", g), -1);
  assert_int_equal(dr_gid_parse("fe80:0000:0000:0000:0e42:a1ff:fe00:00001", g), -1);
  assert_int_equal(dr_gid_parse("fe80:0000:0000:0000:0e42:a1ff:fe00:0001 junk", g), -1);
  assert_int_equal(dr_gid_parse("", g), -1);
  assert_int_equal(dr_gid_parse(NULL, g), -1);
  assert_string_equal(dr_gid_type_name(V2), "RoCE v2");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ipv4_before_ipv6),
      cmocka_unit_test(ipv6_when_no_ipv4),
      cmocka_unit_test(link_local_and_zero_skipped),
      cmocka_unit_test(v2_preferred),
      cmocka_unit_test(missing_type_files),
      cmocka_unit_test(order_tiebreak_ndev_not_ranked),
      cmocka_unit_test(empty_table),
      cmocka_unit_test(parse_and_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
