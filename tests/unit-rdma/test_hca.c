/* HCA filter: NCCL_IB_HCA syntax parsing and matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "hca.h"

static void test_empty_matches_all(void **state) {
  (void)state;
  struct gdr_hca_filter f;
  assert_int_equal(gdr_hca_filter_parse(NULL, &f), 0);
  assert_int_equal(f.n, 0);
  assert_true(gdr_hca_filter_match(&f, "mlx5_0", 1));
  assert_int_equal(gdr_hca_filter_parse("", &f), 0);
  assert_true(gdr_hca_filter_match(&f, "anything", 7));
  assert_int_equal(gdr_hca_filter_parse("^", &f), 0);
  assert_true(gdr_hca_filter_match(&f, "mlx5_0", 1));
}

static void test_prefix_list(void **state) {
  (void)state;
  struct gdr_hca_filter f;
  assert_int_equal(gdr_hca_filter_parse("mlx5_0,mlx5_1", &f), 0);
  assert_int_equal(f.n, 2);
  assert_false(f.exclude);
  assert_false(f.exact);
  assert_true(gdr_hca_filter_match(&f, "mlx5_0", 1));
  assert_true(gdr_hca_filter_match(&f, "mlx5_1", 2));
  assert_true(gdr_hca_filter_match(&f, "mlx5_10", 1)); /* prefix, as NCCL */
  assert_false(gdr_hca_filter_match(&f, "mlx5_2", 1));
  assert_false(gdr_hca_filter_match(&f, "mlx4_0", 1));
}

static void test_exact(void **state) {
  (void)state;
  struct gdr_hca_filter f;
  assert_int_equal(gdr_hca_filter_parse("=mlx5_1", &f), 0);
  assert_true(f.exact);
  assert_true(gdr_hca_filter_match(&f, "mlx5_1", 1));
  assert_false(gdr_hca_filter_match(&f, "mlx5_10", 1));
  assert_false(gdr_hca_filter_match(&f, "mlx5_", 1));
}

static void test_ports(void **state) {
  (void)state;
  struct gdr_hca_filter f;
  assert_int_equal(gdr_hca_filter_parse("mlx5_0:1,mlx5_1", &f), 0);
  assert_int_equal(f.e[0].port, 1);
  assert_int_equal(f.e[1].port, -1);
  assert_true(gdr_hca_filter_match(&f, "mlx5_0", 1));
  assert_false(gdr_hca_filter_match(&f, "mlx5_0", 2));
  assert_true(gdr_hca_filter_match(&f, "mlx5_1", 2));
}

static void test_exclude(void **state) {
  (void)state;
  struct gdr_hca_filter f;
  assert_int_equal(gdr_hca_filter_parse("^mlx5_3", &f), 0);
  assert_true(f.exclude);
  assert_false(gdr_hca_filter_match(&f, "mlx5_3", 1));
  assert_false(gdr_hca_filter_match(&f, "mlx5_30", 1)); /* prefix */
  assert_true(gdr_hca_filter_match(&f, "mlx5_0", 1));

  assert_int_equal(gdr_hca_filter_parse("^=mlx5_3:2", &f), 0);
  assert_true(f.exclude);
  assert_true(f.exact);
  assert_false(gdr_hca_filter_match(&f, "mlx5_3", 2));
  assert_true(gdr_hca_filter_match(&f, "mlx5_3", 1));
  assert_true(gdr_hca_filter_match(&f, "mlx5_30", 2));

  /* the other order of the prefixes */
  assert_int_equal(gdr_hca_filter_parse("=^vemu1", &f), 0);
  assert_true(f.exclude && f.exact);
  assert_false(gdr_hca_filter_match(&f, "vemu1", 1));
  assert_true(gdr_hca_filter_match(&f, "vemu0", 1));
}

static void test_whitespace_and_empty_items(void **state) {
  (void)state;
  struct gdr_hca_filter f;
  assert_int_equal(gdr_hca_filter_parse(" mlx5_0 , ,mlx5_2:1 ,", &f), 0);
  assert_int_equal(f.n, 2);
  assert_string_equal(f.e[0].name, "mlx5_0");
  assert_string_equal(f.e[1].name, "mlx5_2");
  assert_int_equal(f.e[1].port, 1);
}

static void test_malformed(void **state) {
  (void)state;
  struct gdr_hca_filter f;
  /* bad ports and empty names are ignored and counted, the rest still applies */
  assert_int_equal(gdr_hca_filter_parse("mlx5_0:x,mlx5_1:,:1,mlx5_2:999,mlx5_3", &f), 4);
  assert_int_equal(f.n, 1);
  assert_true(gdr_hca_filter_match(&f, "mlx5_3", 1));
  assert_false(gdr_hca_filter_match(&f, "mlx5_0", 1));
  /* too long a name */
  char longname[200];
  for (int i = 0; i < 199; i++) longname[i] = 'a';
  longname[199] = '\0';
  assert_int_equal(gdr_hca_filter_parse(longname, &f), 1);
  assert_int_equal(f.n, 0);
  /* too many entries */
  char many[1024] = "";
  for (int i = 0; i < 40; i++) {
    char one[16];
    snprintf(one, sizeof(one), "d%d,", i);
    strcat(many, one);
  }
  assert_int_equal(gdr_hca_filter_parse(many, &f), 40 - GDR_HCA_MAX_ENTRIES);
  assert_int_equal(f.n, GDR_HCA_MAX_ENTRIES);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_empty_matches_all), cmocka_unit_test(test_prefix_list),
    cmocka_unit_test(test_exact),             cmocka_unit_test(test_ports),
    cmocka_unit_test(test_exclude),           cmocka_unit_test(test_whitespace_and_empty_items),
    cmocka_unit_test(test_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
