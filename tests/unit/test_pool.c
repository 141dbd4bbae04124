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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exhaustion_and_reuse),
      cmocka_unit_test(test_bad_puts),
      cmocka_unit_test(test_churn),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
