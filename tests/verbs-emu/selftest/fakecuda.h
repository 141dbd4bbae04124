/* The fake CUDA driver's counters (fakecuda.c, loaded as libcuda.so.1): its tests read them with
 * fakecu_get_stats(). One definition for the fake and every test that loads it. */
#ifndef VEMU_FAKECUDA_H
#define VEMU_FAKECUDA_H

struct fakecu_stats {
	int htod, dtoh, dtod, syncs, streams, pushes, pops, bad, pageable, pinned_allocs, private_ctxs, private_copies;
};

#endif
