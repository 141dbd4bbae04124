/* RoCE GID selection on fabricated GID tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "gid.h"

#define T_V1 GDR_GID_TYPE_V1
#define T_V2 GDR_GID_TYPE_V2
#define T_UNK GDR_GID_TYPE_UNKNOWN

static struct gdr_gid_entry ll(int type) { /* fe80::1234 */
  struct gdr_gid_entry e = {{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x12, 0x34}, type, 1};
  return e;
}
static struct gdr_gid_entry v4(int type, uint8_t last) { /* ::ffff:10.0.0.last */
  struct gdr_gid_entry e = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last}, type, 1};
  return e;
}
static struct gdr_gid_entry v6(int type) { /* fd00::5 (ULA, routable) */
  struct gdr_gid_entry e = {{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, type, 1};
  return e;
}
static struct gdr_gid_entry zero(void) {
  struct gdr_gid_entry e = {{0}, T_UNK, 1};
  return e;
}

static void test_classifiers(void **state) {
  (void)state;
  struct gdr_gid_entry e = ll(T_V1);
  assert_true(gdr_gid_is_link_local(e.raw));
  assert_false(gdr_gid_is_routable(e.raw));
  e = v4(T_V2, 7);
  assert_true(gdr_gid_is_ipv4_mapped(e.raw));
  assert_true(gdr_gid_is_routable(e.raw));
  e = v4(T_V2, 0);
  e.raw[12] = 0; /* ::ffff:0.0.0.0 */
  assert_false(gdr_gid_is_routable(e.raw));
  e = zero();
  assert_true(gdr_gid_is_zero(e.raw));
  assert_false(gdr_gid_is_routable(e.raw));
  e = v6(T_V2);
  assert_false(gdr_gid_is_ipv4_mapped(e.raw));
  assert_true(gdr_gid_is_routable(e.raw));
  /* fe80::/10 includes febf:: but not fec0:: */
  e.raw[0] = 0xfe;
  e.raw[1] = 0xbf;
  assert_true(gdr_gid_is_link_local(e.raw));
  e.raw[1] = 0xc0;
  assert_false(gdr_gid_is_link_local(e.raw));
}

static void test_type_parse(void **state) {
  (void)state;
  assert_int_equal(gdr_gid_type_parse("IB/RoCE v1\n"), T_V1);
  assert_int_equal(gdr_gid_type_parse("RoCE v1"), T_V1);
  assert_int_equal(gdr_gid_type_parse("RoCE v2\n"), T_V2);
  assert_int_equal(gdr_gid_type_parse(""), T_UNK);
  assert_int_equal(gdr_gid_type_parse(NULL), T_UNK);
  assert_int_equal(gdr_gid_type_parse("garbage"), T_UNK);
}

/* The usual mlx5 RoCE table: link-local v1/v2, then IPv4 v1/v2, then IPv6 v1/v2. */
static void test_typical_table(void **state) {
  (void)state;
  struct gdr_gid_entry t[] = {ll(T_V1), ll(T_V2), v4(T_V1, 1), v4(T_V2, 1), v6(T_V1), v6(T_V2)};
  assert_int_equal(gdr_gid_select(t, 6, GDR_GID_FAMILY_IPV4, 2), 3);
  assert_int_equal(gdr_gid_select(t, 6, GDR_GID_FAMILY_IPV4, 1), 2);
  assert_int_equal(gdr_gid_select(t, 6, GDR_GID_FAMILY_IPV6, 2), 5);
  assert_int_equal(gdr_gid_select(t, 6, GDR_GID_FAMILY_IPV6, 1), 4);
  /* no preference at all: first routable */
  assert_int_equal(gdr_gid_select(t, 6, GDR_GID_FAMILY_ANY, 0), 2);
}

static void test_ipv4_before_ipv6_whatever_the_order(void **state) {
  (void)state;
  struct gdr_gid_entry t[] = {v6(T_V2), v4(T_V2, 9)};
  assert_int_equal(gdr_gid_select(t, 2, GDR_GID_FAMILY_IPV4, 2), 1);
  /* the family outranks the version: an IPv4 v1 beats an IPv6 v2 */
  struct gdr_gid_entry t2[] = {v6(T_V2), v4(T_V1, 9)};
  assert_int_equal(gdr_gid_select(t2, 2, GDR_GID_FAMILY_IPV4, 2), 1);
  /* only IPv6 configured: take it */
  struct gdr_gid_entry t3[] = {ll(T_V1), ll(T_V2), v6(T_V1), v6(T_V2)};
  assert_int_equal(gdr_gid_select(t3, 4, GDR_GID_FAMILY_IPV4, 2), 3);
}

static void test_link_local_and_zero_skipped(void **state) {
  (void)state;
  struct gdr_gid_entry t[] = {ll(T_V2), zero(), ll(T_V1)};
  assert_int_equal(gdr_gid_select(t, 3, GDR_GID_FAMILY_IPV4, 2), -1);
  struct gdr_gid_entry t2[] = {zero(), ll(T_V2), v4(T_V1, 3)};
  assert_int_equal(gdr_gid_select(t2, 3, GDR_GID_FAMILY_IPV4, 2), 2);
  assert_int_equal(gdr_gid_select(t2, 0, GDR_GID_FAMILY_IPV4, 2), -1);
}

static void test_invalid_query_skipped(void **state) {
  (void)state;
  struct gdr_gid_entry t[] = {v4(T_V2, 1), v4(T_V1, 2)};
  t[0].valid = 0;
  assert_int_equal(gdr_gid_select(t, 2, GDR_GID_FAMILY_IPV4, 2), 1);
}

/* Containers without gid_attrs/types: every type unknown. */
static void test_missing_types(void **state) {
  (void)state;
  /* the v2 twin of a repeated address is taken (the later index of the pair) */
  struct gdr_gid_entry t[] = {ll(T_UNK), ll(T_UNK), v4(T_UNK, 1), v4(T_UNK, 1), v6(T_UNK), v6(T_UNK)};
  assert_int_equal(gdr_gid_select(t, 6, GDR_GID_FAMILY_IPV4, 2), 3);
  assert_int_equal(gdr_gid_select(t, 6, GDR_GID_FAMILY_IPV4, 1), 2);
  assert_int_equal(gdr_gid_select(t, 6, GDR_GID_FAMILY_IPV6, 2), 5);
  /* a single unknown entry is still usable */
  struct gdr_gid_entry t2[] = {ll(T_UNK), v4(T_UNK, 4)};
  assert_int_equal(gdr_gid_select(t2, 2, GDR_GID_FAMILY_IPV4, 2), 1);
  /* a known v2 beats a guess */
  struct gdr_gid_entry t3[] = {v4(T_UNK, 1), v4(T_UNK, 1), v4(T_V2, 2)};
  assert_int_equal(gdr_gid_select(t3, 3, GDR_GID_FAMILY_IPV4, 2), 2);
  /* partially readable types: known v1 is not preferred over unknown when v2 is wanted */
  struct gdr_gid_entry t4[] = {v4(T_V1, 1), v4(T_UNK, 2)};
  assert_int_equal(gdr_gid_select(t4, 2, GDR_GID_FAMILY_IPV4, 2), 1);
}

static void test_format(void **state) {
  (void)state;
  char buf[64];
  struct gdr_gid_entry e = v4(T_V2, 42);
  gdr_gid_format(e.raw, buf, sizeof(buf));
  assert_string_equal(buf, "::ffff:10.0.0.42");
  e = v6(T_V2);
  gdr_gid_format(e.raw, buf, sizeof(buf));
  assert_string_equal(buf, "fd00::5");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_classifiers),
      cmocka_unit_test(test_type_parse),
      cmocka_unit_test(test_typical_table),
      cmocka_unit_test(test_ipv4_before_ipv6_whatever_the_order),
      cmocka_unit_test(test_link_local_and_zero_skipped),
      cmocka_unit_test(test_invalid_query_skipped),
      cmocka_unit_test(test_missing_types),
      cmocka_unit_test(test_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
