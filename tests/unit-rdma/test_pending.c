/* The async hand-over (async.c): faults the devices' async threads hand to a connection's progress thread. Every
 * event is kept in arrival order; a full queue folds into its newest entry with the worse action winning, so a
 * DEVICE_FATAL behind an older unread event is never lost (it used to be: the first event waiting won, and the
 * connection waited out the whole recovery timeout on a dead device). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "rdma/rdma.h"

static void test_device_fatal_behind_unread_event(void **state) {
  (void)state;
  struct gdr_rdma_pending p;
  struct gdr_rdma_pending_ev ev;
  gdr_rdma_pending_init(&p);
  assert_int_equal(gdr_rdma_pending_pop(&p, &ev), 0);
  gdr_rdma_pending_push(&p, GDR_FAULT_RECOVER, 3, "PORT_ERR");
  gdr_rdma_pending_push(&p, GDR_FAULT_DEVICE, 3, "DEVICE_FATAL");
  assert_int_equal(gdr_rdma_pending_pop(&p, &ev), 1);
  assert_int_equal(ev.action, GDR_FAULT_RECOVER);
  assert_int_equal(ev.gen, 3);
  assert_string_equal(ev.why, "PORT_ERR");
  assert_int_equal(gdr_rdma_pending_pop(&p, &ev), 1); /* the old hand-over dropped this one */
  assert_int_equal(ev.action, GDR_FAULT_DEVICE);
  assert_string_equal(ev.why, "DEVICE_FATAL");
  assert_int_equal(gdr_rdma_pending_pop(&p, &ev), 0);
  gdr_rdma_pending_destroy(&p);
}

static void test_full_queue_folds_worse_wins(void **state) {
  (void)state;
  struct gdr_rdma_pending p;
  struct gdr_rdma_pending_ev ev;
  char why[32];
  gdr_rdma_pending_init(&p);
  for (int i = 0; i < GDR_RDMA_PENDING_MAX; i++) {
    snprintf(why, sizeof(why), "qp %d", i);
    gdr_rdma_pending_push(&p, GDR_FAULT_RECOVER, 1, why);
  }
  gdr_rdma_pending_push(&p, GDR_FAULT_DEVICE, 1, "DEVICE_FATAL"); /* full: replaces the newest (worse) */
  gdr_rdma_pending_push(&p, GDR_FAULT_RECOVER, 2, "later qp");    /* full: not worse, folded (newer gen kept) */
  assert_int_equal(p.folded, 2);
  for (int i = 0; i < GDR_RDMA_PENDING_MAX - 1; i++) {
    assert_int_equal(gdr_rdma_pending_pop(&p, &ev), 1);
    snprintf(why, sizeof(why), "qp %d", i);
    assert_string_equal(ev.why, why);
  }
  assert_int_equal(gdr_rdma_pending_pop(&p, &ev), 1);
  assert_int_equal(ev.action, GDR_FAULT_DEVICE);
  assert_int_equal(ev.gen, 2);
  assert_int_equal(gdr_rdma_pending_pop(&p, &ev), 0);
  /* empty again: the ring wraps */
  gdr_rdma_pending_push(&p, GDR_FAULT_REKEY, 5, "again");
  assert_int_equal(gdr_rdma_pending_pop(&p, &ev), 1);
  assert_int_equal(ev.action, GDR_FAULT_REKEY);
  gdr_rdma_pending_destroy(&p);
}

/* Several async threads (a fused connection: one per device) push while the progress thread pops: every event is
 * either taken or counted as folded, each thread's last event (a DEVICE_FATAL) survives a fold. */
#define PUSHERS 4
#define PER_PUSHER 5000
struct pusher {
  struct gdr_rdma_pending *p;
  int id;
};

static void *push_main(void *arg) {
  struct pusher *w = arg;
  char why[32];
  for (int i = 0; i < PER_PUSHER; i++) {
    snprintf(why, sizeof(why), "t%d e%d", w->id, i);
    gdr_rdma_pending_push(w->p, i == PER_PUSHER - 1 ? GDR_FAULT_DEVICE : GDR_FAULT_RECOVER, (unsigned)i, why);
  }
  return NULL;
}

static void test_concurrent_none_lost(void **state) {
  (void)state;
  struct gdr_rdma_pending p;
  struct gdr_rdma_pending_ev ev;
  pthread_t t[PUSHERS];
  struct pusher w[PUSHERS];
  long popped = 0, devices = 0;
  gdr_rdma_pending_init(&p);
  for (int i = 0; i < PUSHERS; i++) {
    w[i].p = &p;
    w[i].id = i;
    assert_int_equal(pthread_create(&t[i], NULL, push_main, &w[i]), 0);
  }
  for (int i = 0; i < PUSHERS * PER_PUSHER / 2; i++)
    if (gdr_rdma_pending_pop(&p, &ev)) {
      popped++;
      devices += ev.action == GDR_FAULT_DEVICE;
    }
  for (int i = 0; i < PUSHERS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  while (gdr_rdma_pending_pop(&p, &ev)) {
    popped++;
    devices += ev.action == GDR_FAULT_DEVICE;
  }
  assert_int_equal(popped + (long)p.folded, PUSHERS * PER_PUSHER);
  assert_true(devices >= 1); /* a DEVICE_FATAL is folded only into another DEVICE_FATAL */
  gdr_rdma_pending_destroy(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_fatal_behind_unread_event),
      cmocka_unit_test(test_full_queue_folds_worse_wins),
      cmocka_unit_test(test_concurrent_none_lost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
