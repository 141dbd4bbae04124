/* GDRNET_HCA / NCCL_IB_HCA selection as the RDMA transport uses it: the core's gdr_filter (sock.h)
 * applied to (device, port) pairs, with NCCL's HCA syntax. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "sock.h"

static struct gdr_filter parse_ok(const char *spec) {
  struct gdr_filter f;
  char why[256] = "";
  assert_int_equal(gdr_filter_parse(spec, &f, why, sizeof(why)), ncclSuccess);
  return f;
}

static void test_empty_matches_all(void **state) {
  (void)state;
  struct gdr_filter f = parse_ok("");
  assert_true(gdr_filter_match(&f, "mlx5_0", 1));
  f = parse_ok(NULL);
  assert_true(gdr_filter_match(&f, "vemu1", 2));
}

static void test_prefix_list(void **state) {
  (void)state;
  struct gdr_filter f = parse_ok("mlx5_0,mlx5_1");
  assert_true(gdr_filter_match(&f, "mlx5_0", 1));
  assert_true(gdr_filter_match(&f, "mlx5_1", 2));
  assert_true(gdr_filter_match(&f, "mlx5_10", 1)); /* prefix, as NCCL */
  assert_false(gdr_filter_match(&f, "mlx5_2", 1));
  assert_false(gdr_filter_match(&f, "mlx4_0", 1));
}

static void test_exact(void **state) {
  (void)state;
  struct gdr_filter f = parse_ok("=mlx5_1");
  assert_true(gdr_filter_match(&f, "mlx5_1", 1));
  assert_false(gdr_filter_match(&f, "mlx5_10", 1));
  assert_false(gdr_filter_match(&f, "mlx5_", 1));
}

static void test_ports(void **state) {
  (void)state;
  struct gdr_filter f = parse_ok("mlx5_0:1,mlx5_1");
  assert_true(gdr_filter_match(&f, "mlx5_0", 1));
  assert_false(gdr_filter_match(&f, "mlx5_0", 2));
  assert_true(gdr_filter_match(&f, "mlx5_1", 1));
  assert_true(gdr_filter_match(&f, "mlx5_1", 2));
}

static void test_exclude(void **state) {
  (void)state;
  struct gdr_filter f = parse_ok("^mlx5_3");
  assert_false(gdr_filter_match(&f, "mlx5_3", 1));
  assert_false(gdr_filter_match(&f, "mlx5_30", 1)); /* prefix */
  assert_true(gdr_filter_match(&f, "mlx5_0", 1));
  f = parse_ok("^=mlx5_3:2");
  assert_false(gdr_filter_match(&f, "mlx5_3", 2));
  assert_true(gdr_filter_match(&f, "mlx5_3", 1));
  assert_true(gdr_filter_match(&f, "mlx5_30", 2));
  /* the emulator's two devices */
  f = parse_ok("^vemu0");
  assert_false(gdr_filter_match(&f, "vemu0", 1));
  assert_true(gdr_filter_match(&f, "vemu1", 1));
}

static void test_whitespace(void **state) {
  (void)state;
  struct gdr_filter f = parse_ok(" mlx5_0 , mlx5_2:1");
  assert_true(gdr_filter_match(&f, "mlx5_0", 4));
  assert_true(gdr_filter_match(&f, "mlx5_2", 1));
  assert_false(gdr_filter_match(&f, "mlx5_2", 2));
}

static void test_malformed(void **state) {
  (void)state;
  struct gdr_filter f;
  char why[256];
  static const char *bad[] = {"mlx5_0:x", "mlx5_0,,mlx5_1", "^", "=", "mlx5_0:"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    why[0] = '\0';
    assert_int_not_equal(gdr_filter_parse(bad[i], &f, why, sizeof(why)), ncclSuccess);
    assert_true(why[0] != '\0'); /* says what is wrong */
  }
  char longname[200];
  memset(longname, 'a', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  assert_int_not_equal(gdr_filter_parse(longname, &f, why, sizeof(why)), ncclSuccess);
  char many[1024] = "";
  for (int i = 0; i < GDR_FILTER_MAX + 1; i++) {
    char one[16];
    snprintf(one, sizeof(one), "%sd%d", i ? "," : "", i);
    strcat(many, one);
  }
  assert_int_not_equal(gdr_filter_parse(many, &f, why, sizeof(why)), ncclSuccess);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty_matches_all),
      cmocka_unit_test(test_prefix_list),
      cmocka_unit_test(test_exact),
      cmocka_unit_test(test_ports),
      cmocka_unit_test(test_exclude),
      cmocka_unit_test(test_whitespace),
      cmocka_unit_test(test_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
