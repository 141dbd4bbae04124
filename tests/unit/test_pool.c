/* The request pool: exhaustion at capacity, reuse, foreign and double puts refused. */
#include "pool.h"
#include "unit_common.h"

static void test_exhaustion_and_reuse(void **state) {
  struct gdr_pool p;
  void *o[NCCL_NET_MAX_REQUESTS];
  (void)state;
  assert_int_equal(gdr_pool_init(&p, 40, NCCL_NET_MAX_REQUESTS), 0);
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    o[i] = gdr_pool_get(&p);
    assert_non_null(o[i]);
    assert_int_equal(gdr_pool_index(&p, o[i]), i);
    for (int j = 0; j < i; j++) assert_ptr_not_equal(o[i], o[j]);
    memset(o[i], 0xff, 40);
  }
  assert_int_equal(gdr_pool_in_use(&p), NCCL_NET_MAX_REQUESTS);
  assert_null(gdr_pool_get(&p)); /* the 33rd */
  assert_int_equal(gdr_pool_put(&p, o[5]), 0);
  assert_int_equal(gdr_pool_in_use(&p), NCCL_NET_MAX_REQUESTS - 1);
  void *again = gdr_pool_get(&p);
  assert_ptr_equal(again, o[5]); /* reused, and zeroed */
  for (int k = 0; k < 40; k++) assert_int_equal(((unsigned char *)again)[k], 0);
  assert_null(gdr_pool_get(&p));
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) assert_int_equal(gdr_pool_put(&p, o[i]), 0);
  assert_int_equal(gdr_pool_in_use(&p), 0);
  gdr_pool_fini(&p);
}

static void test_bad_puts(void **state) {
  struct gdr_pool p;
  int x;
  (void)state;
  assert_int_equal(gdr_pool_init(&p, 24, 4), 0);
  void *a = gdr_pool_get(&p);
  assert_int_equal(gdr_pool_put(&p, &x), -1);                /* foreign */
  assert_int_equal(gdr_pool_put(&p, (char *)a + 1), -1);     /* inside an object */
  assert_int_equal(gdr_pool_put(&p, a), 0);
  assert_int_equal(gdr_pool_put(&p, a), -1);                 /* double */
  assert_int_equal(gdr_pool_index(&p, NULL), -1);
  gdr_pool_fini(&p);
  assert_int_equal(gdr_pool_init(&p, 0, 4), -1);
  assert_int_equal(gdr_pool_init(&p, 8, 0), -1);
}

static void test_churn(void **state) {
  struct gdr_pool p;
  void *live[8] = {0};
  unsigned x = 1;
  (void)state;
  assert_int_equal(gdr_pool_init(&p, 16, 8), 0);
  for (int i = 0; i < 100000; i++) {
    int k;
    x = x * 1103515245u + 12345u;
    k = (int)((x >> 16) % 8);
    if (live[k]) {
      assert_int_equal(gdr_pool_put(&p, live[k]), 0);
      live[k] = NULL;
    } else {
      live[k] = gdr_pool_get(&p);
      assert_non_null(live[k]);
    }
  }
  gdr_pool_fini(&p);
}

/* The data path's variant: get by index (not zeroed), put by index, cheap ownership check. */
static void test_idx_fast_path(void **state) {
  struct gdr_pool p;
  void *o[4];
  int idx[4];
  int x;
  (void)state;
  assert_int_equal(gdr_pool_init(&p, 24, 4), 0);
  for (int i = 0; i < 4; i++) {
    o[i] = gdr_pool_get_idx(&p, &idx[i]);
    assert_non_null(o[i]);
    assert_int_equal(idx[i], i);
    assert_int_equal(gdr_pool_index(&p, o[i]), idx[i]);
    assert_true(gdr_pool_is(&p, o[i], idx[i]));
    memset(o[i], 0x5a, 24);
  }
  assert_null(gdr_pool_get_idx(&p, &x)); /* exhausted */
  assert_false(gdr_pool_is(&p, o[1], idx[2])); /* wrong index */
  assert_false(gdr_pool_is(&p, &x, 0));        /* foreign */
  assert_false(gdr_pool_is(&p, o[0], -1));
  assert_false(gdr_pool_is(&p, o[0], 4));
  assert_int_equal(gdr_pool_put_idx(&p, idx[2]), 0);
  assert_false(gdr_pool_is(&p, o[2], idx[2])); /* no longer outstanding */
  assert_int_equal(gdr_pool_put_idx(&p, idx[2]), -1); /* double */
  assert_int_equal(gdr_pool_put_idx(&p, 7), -1);      /* out of range */
  assert_int_equal(gdr_pool_put_idx(&p, -1), -1);
  assert_int_equal(gdr_pool_in_use(&p), 3);
  void *again = gdr_pool_get_idx(&p, &x);
  assert_ptr_equal(again, o[2]);
  assert_int_equal(x, idx[2]);
  assert_int_equal(((unsigned char *)again)[0], 0x5a); /* not zeroed: the caller sets every field */
  for (int i = 0; i < 4; i++) assert_int_equal(gdr_pool_put(&p, o[i]), 0); /* both put flavours mix */
  assert_int_equal(gdr_pool_in_use(&p), 0);
  gdr_pool_fini(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exhaustion_and_reuse),
      cmocka_unit_test(test_bad_puts),
      cmocka_unit_test(test_churn),
      cmocka_unit_test(test_idx_fast_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
