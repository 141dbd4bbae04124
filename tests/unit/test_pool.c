/* The request pool as the core uses it (get/put by index, gdr_pool_is): exhaustion at capacity, reuse, double
 * and out-of-range puts refused, foreign objects and wrong indices recognised. */
#include "pool.h"
#include "unit_common.h"

static void test_exhaustion_and_reuse(void **state) {
  struct gdr_pool p;
  void *o[NCCL_NET_MAX_REQUESTS];
  int idx[NCCL_NET_MAX_REQUESTS], x = -1;
  (void)state;
  assert_int_equal(gdr_pool_init(&p, 40, NCCL_NET_MAX_REQUESTS), 0);
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    o[i] = gdr_pool_get_idx(&p, &idx[i]);
    assert_non_null(o[i]);
    assert_int_equal(idx[i], i); /* lowest index first */
    assert_true(gdr_pool_is(&p, o[i], idx[i]));
    for (int j = 0; j < i; j++) assert_ptr_not_equal(o[i], o[j]);
    memset(o[i], 0xff, 40); /* objects do not overlap: each owns its 40 bytes */
  }
  assert_null(gdr_pool_get_idx(&p, &x)); /* the 33rd */
  assert_int_equal(gdr_pool_put_idx(&p, idx[5]), 0);
  void *again = gdr_pool_get_idx(&p, &x);
  assert_ptr_equal(again, o[5]);
  assert_int_equal(x, idx[5]);
  assert_null(gdr_pool_get_idx(&p, &x));
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) assert_int_equal(gdr_pool_put_idx(&p, idx[i]), 0);
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) assert_false(gdr_pool_is(&p, o[i], idx[i]));
  gdr_pool_fini(&p);
}

static void test_bad_args(void **state) {
  struct gdr_pool p;
  (void)state;
  assert_int_equal(gdr_pool_init(&p, 0, 4), -1);
  assert_int_equal(gdr_pool_init(&p, 8, 0), -1);
  assert_int_equal(gdr_pool_init(&p, 8, -3), -1);
}

static void test_churn(void **state) {
  struct gdr_pool p;
  void *live[8] = {0};
  int idx[8];
  unsigned x = 1;
  (void)state;
  assert_int_equal(gdr_pool_init(&p, 16, 8), 0);
  for (int i = 0; i < 100000; i++) {
    int k;
    x = x * 1103515245u + 12345u;
    k = (int)((x >> 16) % 8);
    if (live[k]) {
      assert_true(gdr_pool_is(&p, live[k], idx[k]));
      assert_int_equal(gdr_pool_put_idx(&p, idx[k]), 0);
      live[k] = NULL;
    } else {
      live[k] = gdr_pool_get_idx(&p, &idx[k]);
      assert_non_null(live[k]);
      for (int j = 0; j < 8; j++)
        if (j != k && live[j]) assert_int_not_equal(idx[j], idx[k]); /* never handed out twice */
    }
  }
  gdr_pool_fini(&p);
}

/* Not zeroed on get (the caller sets every field); double, out-of-range puts and foreign objects refused. */
static void test_idx_checks(void **state) {
  struct gdr_pool p;
  void *o[4];
  int idx[4];
  int x;
  (void)state;
  assert_int_equal(gdr_pool_init(&p, 24, 4), 0);
  for (int i = 0; i < 4; i++) {
    o[i] = gdr_pool_get_idx(&p, &idx[i]);
    assert_non_null(o[i]);
    memset(o[i], 0x5a, 24);
  }
  assert_null(gdr_pool_get_idx(&p, &x));                   /* exhausted */
  assert_false(gdr_pool_is(&p, o[1], idx[2]));             /* wrong index */
  assert_false(gdr_pool_is(&p, &x, 0));                    /* foreign */
  assert_false(gdr_pool_is(&p, (char *)o[0] + 1, idx[0])); /* inside an object */
  assert_false(gdr_pool_is(&p, o[0], -1));
  assert_false(gdr_pool_is(&p, o[0], 4));
  assert_int_equal(gdr_pool_put_idx(&p, idx[2]), 0);
  assert_false(gdr_pool_is(&p, o[2], idx[2]));        /* no longer outstanding */
  assert_int_equal(gdr_pool_put_idx(&p, idx[2]), -1); /* double */
  assert_int_equal(gdr_pool_put_idx(&p, 7), -1);      /* out of range */
  assert_int_equal(gdr_pool_put_idx(&p, -1), -1);
  void *again = gdr_pool_get_idx(&p, &x);
  assert_ptr_equal(again, o[2]);
  assert_int_equal(x, idx[2]);
  assert_int_equal(((unsigned char *)again)[0], 0x5a); /* not zeroed */
  for (int i = 0; i < 4; i++) assert_int_equal(gdr_pool_put_idx(&p, idx[i]), 0);
  gdr_pool_fini(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exhaustion_and_reuse),
      cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_churn),
      cmocka_unit_test(test_idx_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
