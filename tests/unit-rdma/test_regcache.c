/* Registration cache: refcount, containment/overlap, page alignment, access superset, kinds,
 * errors, concurrent use. The registration itself is a fake that records what it was asked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "regcache.h"

#define PAGE 4096
#define ACC_LW 0x1
#define ACC_RW 0x2
#define ACC_RR 0x4

struct fake {
  pthread_mutex_t lock;
  int live, regs, deregs;
  int fail_next; /* errno for the next reg */
  uintptr_t last_base;
  size_t last_len;
  uint32_t next_key;
};

struct fake_mr {
  uintptr_t base;
  size_t len;
};

static void *fake_reg(void *ctx, uintptr_t base, size_t len, const struct gdr_reg_req *req, uint32_t *lkey,
                      uint32_t *rkey, int *err) {
  (void)req;
  struct fake *f = ctx;
  pthread_mutex_lock(&f->lock);
  if (f->fail_next) {
    *err = f->fail_next;
    f->fail_next = 0;
    pthread_mutex_unlock(&f->lock);
    return NULL;
  }
  struct fake_mr *mr = malloc(sizeof(*mr));
  mr->base = base;
  mr->len = len;
  f->live++;
  f->regs++;
  f->last_base = base;
  f->last_len = len;
  *lkey = ++f->next_key;
  *rkey = 0x1000 + f->next_key;
  pthread_mutex_unlock(&f->lock);
  return mr;
}

static int fake_dereg(void *ctx, void *mr) {
  struct fake *f = ctx;
  pthread_mutex_lock(&f->lock);
  f->live--;
  f->deregs++;
  pthread_mutex_unlock(&f->lock);
  free(mr);
  return 0;
}

static const struct gdr_regcache_ops ops = {fake_reg, fake_dereg};

static struct gdr_reg_req req(uintptr_t addr, size_t len, int access, int kind) {
  struct gdr_reg_req r = {addr, len, access, kind, -1, 0};
  return r;
}

static int setup(void **state) {
  struct fake *f = calloc(1, sizeof(*f));
  pthread_mutex_init(&f->lock, NULL);
  struct gdr_regcache *c = calloc(1, sizeof(*c));
  gdr_regcache_init(c, &ops, f, PAGE);
  void **pair = calloc(2, sizeof(void *));
  pair[0] = c;
  pair[1] = f;
  *state = pair;
  return 0;
}

static int teardown(void **state) {
  void **pair = *state;
  struct gdr_regcache *c = pair[0];
  struct fake *f = pair[1];
  gdr_regcache_fini(c);
  pthread_mutex_destroy(&f->lock);
  free(c);
  free(f);
  free(pair);
  return 0;
}

#define C ((struct gdr_regcache *)((void **)*state)[0])
#define F ((struct fake *)((void **)*state)[1])

static void test_align(void **state) {
  (void)state;
  uintptr_t b;
  size_t l;
  gdr_regcache_align(0x10010, 0x20, PAGE, &b, &l);
  assert_int_equal(b, 0x10000);
  assert_int_equal(l, PAGE);
  gdr_regcache_align(0x10ff0, 0x20, PAGE, &b, &l); /* straddles a page boundary */
  assert_int_equal(b, 0x10000);
  assert_int_equal(l, 2 * PAGE);
  gdr_regcache_align(0x10000, PAGE, PAGE, &b, &l);
  assert_int_equal(b, 0x10000);
  assert_int_equal(l, PAGE);
  gdr_regcache_align(0x10000, 0, PAGE, &b, &l);
  assert_int_equal(l, PAGE);
}

static void test_refcount(void **state) {
  struct gdr_reg_entry *a, *b;
  struct gdr_reg_req r = req(0x100010, 100, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &a), 0);
  assert_int_equal(F->regs, 1);
  assert_int_equal(F->last_base, 0x100000);
  assert_int_equal(F->last_len, PAGE);
  assert_int_equal(a->refs, 1);
  assert_int_equal(gdr_regcache_get(C, &r, &b), 0);
  assert_ptr_equal(a, b);
  assert_int_equal(a->refs, 2);
  assert_int_equal(F->regs, 1);
  assert_int_equal(gdr_regcache_put(a), 0);
  assert_int_equal(F->live, 1);
  assert_int_equal(gdr_regcache_put(b), 0);
  assert_int_equal(F->live, 0);
  assert_int_equal(F->deregs, 1);
  assert_int_equal(C->nentries, 0);
  assert_int_equal(gdr_regcache_put(NULL), EINVAL);
}

static void test_contained_and_overlap(void **state) {
  struct gdr_reg_entry *big, *inner, *over, *same_page;
  struct gdr_reg_req r = req(0x200000, 16 * PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &big), 0);
  /* a sub-range is served by the big entry */
  r = req(0x200000 + 3 * PAGE + 17, 2 * PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &inner), 0);
  assert_ptr_equal(inner, big);
  /* an unaligned range inside the last page of the big entry still fits once aligned */
  r = req(0x200000 + 16 * PAGE - 10, 10, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &same_page), 0);
  assert_ptr_equal(same_page, big);
  assert_int_equal(F->regs, 1);
  /* partial overlap: a new registration */
  r = req(0x200000 + 15 * PAGE, 4 * PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &over), 0);
  assert_ptr_not_equal(over, big);
  assert_int_equal(F->regs, 2);
  assert_int_equal(over->base, 0x200000 + 15 * PAGE);
  assert_int_equal(C->nentries, 2);
  /* drop the big one's refs: the overlapping one survives */
  gdr_regcache_put(big);
  gdr_regcache_put(inner);
  gdr_regcache_put(same_page);
  assert_int_equal(F->live, 1);
  /* now the sub-range is served by nobody: re-registered */
  struct gdr_reg_entry *again;
  r = req(0x200000 + 3 * PAGE, PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &again), 0);
  assert_int_equal(F->regs, 3);
  gdr_regcache_put(again);
  gdr_regcache_put(over);
  assert_int_equal(F->live, 0);
}

static void test_access_and_kind(void **state) {
  struct gdr_reg_entry *rw, *lw, *rr, *cuda;
  struct gdr_reg_req r = req(0x300000, PAGE, ACC_LW | ACC_RW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &rw), 0);
  /* less access: served by the wider registration */
  r = req(0x300000, PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &lw), 0);
  assert_ptr_equal(lw, rw);
  /* more access: a new registration (least privilege: never widen an existing one) */
  r = req(0x300000, PAGE, ACC_LW | ACC_RR, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &rr), 0);
  assert_ptr_not_equal(rr, rw);
  assert_int_equal(rr->access, ACC_LW | ACC_RR);
  /* same range, other kind: separate */
  r = req(0x300000, PAGE, ACC_LW, GDR_REG_CUDA);
  assert_int_equal(gdr_regcache_get(C, &r, &cuda), 0);
  assert_ptr_not_equal(cuda, rw);
  assert_ptr_not_equal(cuda, rr);
  assert_int_equal(F->regs, 3);
  gdr_regcache_put(rw);
  gdr_regcache_put(lw);
  gdr_regcache_put(rr);
  gdr_regcache_put(cuda);
  assert_int_equal(F->live, 0);
}

static void test_dmabuf_not_widened(void **state) {
  struct gdr_reg_entry *e;
  struct gdr_reg_req r = req(0x400100, 1000, ACC_LW, GDR_REG_DMABUF);
  r.dmabuf_fd = 9;
  assert_int_equal(gdr_regcache_get(C, &r, &e), 0);
  assert_int_equal(F->last_base, 0x400100);
  assert_int_equal(F->last_len, 1000);
  gdr_regcache_put(e);
}

static void test_errors(void **state) {
  struct gdr_reg_entry *e = (void *)1;
  F->fail_next = ENOMEM;
  struct gdr_reg_req r = req(0x500000, PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &e), ENOMEM);
  assert_null(e);
  assert_int_equal(C->nentries, 0);
  r = req(0, 10, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &e), EINVAL);
  r = req(UINTPTR_MAX - 10, 100, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &e), EINVAL);
  /* the cache still works after a failure */
  r = req(0x500000, PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &e), 0);
  gdr_regcache_put(e);
}

/* A lost device (release_all): the entries NCCL still holds keep no registration; a request for the same range
 * after the device came back (a new context) must get a new registration with new keys, never the released one
 * (its keys belong to the dead context: LOC_PROT/REM_ACCESS, or on hardware an alias of a new MR). The held entry
 * is still put back cleanly, without a second deregistration. */
static void test_released_not_reused(void **state) {
  struct gdr_reg_entry *held, *fresh, *again;
  struct gdr_reg_req r = req(0x300000, 3 * PAGE, ACC_LW | ACC_RW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &held), 0);
  uint32_t old_lkey = held->lkey, old_rkey = held->rkey;
  assert_int_equal(gdr_regcache_release_all(C), 1);
  assert_int_equal(F->live, 0);
  assert_null(held->mr);
  /* the device is back: the same range (and a range inside it) registers again */
  assert_int_equal(gdr_regcache_get(C, &r, &fresh), 0);
  assert_ptr_not_equal(fresh, held);
  assert_non_null(fresh->mr);
  assert_int_not_equal(fresh->lkey, old_lkey);
  assert_int_not_equal(fresh->rkey, old_rkey);
  assert_int_equal(F->regs, 2);
  struct gdr_reg_req inner = req(0x301000, 100, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &inner, &again), 0);
  assert_ptr_equal(again, fresh); /* the live entry serves, the released one never */
  assert_int_equal(F->regs, 2);
  assert_int_equal(gdr_regcache_put(again), 0);
  assert_int_equal(gdr_regcache_put(held), 0); /* released: nothing to deregister */
  assert_int_equal(F->deregs, 1);
  assert_int_equal(gdr_regcache_put(fresh), 0);
  assert_int_equal(F->live, 0);
  assert_int_equal(F->deregs, 2);
  assert_int_equal(C->nentries, 0);
}

static void test_fini_cleans_leaks(void **state) {
  struct gdr_reg_entry *e;
  struct gdr_reg_req r = req(0x600000, PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &e), 0);
  r = req(0x700000, PAGE, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(C, &r, &e), 0);
  /* teardown's fini deregisters both; check here with a private cache */
  struct gdr_regcache c2;
  gdr_regcache_init(&c2, &ops, F, 0);
  assert_true(c2.page >= 4096);
  r = req(0x800000, 1, ACC_LW, GDR_REG_HOST);
  assert_int_equal(gdr_regcache_get(&c2, &r, &e), 0);
  int live = F->live;
  assert_int_equal(gdr_regcache_fini(&c2), 1);
  assert_int_equal(F->live, live - 1);
}

/* Concurrent get/put of overlapping ranges from several threads: no double registration of one
 * range while it is live, no leak, refcounts right. */
struct worker_arg {
  struct gdr_regcache *c;
  int id;
  int errors;
};

static void *worker(void *p) {
  struct worker_arg *a = p;
  struct gdr_reg_entry *held[16];
  unsigned seed = (unsigned)a->id * 7919u + 1;
  for (int it = 0; it < 2000; it++) {
    int n = 1 + (int)(rand_r(&seed) % 16);
    for (int i = 0; i < n; i++) {
      uintptr_t addr = 0x1000000 + (uintptr_t)(rand_r(&seed) % 64) * PAGE + (rand_r(&seed) % PAGE);
      struct gdr_reg_req r = req(addr, 1 + rand_r(&seed) % (3 * PAGE), ACC_LW, GDR_REG_HOST);
      if (gdr_regcache_get(a->c, &r, &held[i]) != 0) {
        a->errors++;
        held[i] = NULL;
        continue;
      }
      if (held[i]->base > addr || held[i]->base + held[i]->len < addr + r.len) a->errors++;
    }
    for (int i = 0; i < n; i++)
      if (held[i]) gdr_regcache_put(held[i]);
  }
  return NULL;
}

static void test_concurrent(void **state) {
  enum { NT = 8 };
  pthread_t t[NT];
  struct worker_arg args[NT];
  for (int i = 0; i < NT; i++) {
    args[i].c = C;
    args[i].id = i;
    args[i].errors = 0;
    assert_int_equal(pthread_create(&t[i], NULL, worker, &args[i]), 0);
  }
  for (int i = 0; i < NT; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(args[i].errors, 0);
  }
  assert_int_equal(C->nentries, 0);
  assert_int_equal(F->live, 0);
  assert_int_equal(F->regs, F->deregs);
  assert_true(C->hits > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_align),
      cmocka_unit_test_setup_teardown(test_refcount, setup, teardown),
      cmocka_unit_test_setup_teardown(test_contained_and_overlap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_access_and_kind, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dmabuf_not_widened, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_released_not_reused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fini_cleans_leaks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
