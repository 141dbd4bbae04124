/* fake_verbs.c - a stand-in libibverbs.so.1 for the doctor's tests: just enough for its rdma-core
 * check (device list, names) and its DMA-BUF probe. FAKEVERBS_NDEV (default 1) devices named fakeN;
 * FAKEVERBS_DMABUF=0 makes ibv_reg_dmabuf_mr fail with EOPNOTSUPP (else EBADF, i.e. supported). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fake_dev {
  char name[16];
};
static struct fake_dev devs[4];
static int ctx_token, pd_token;

void **ibv_get_device_list(int *num) {
  const char *e = getenv("FAKEVERBS_NDEV");
  int n = e ? atoi(e) : 1;
  if (n < 0) n = 0;
  if (n > 4) n = 4;
  void **l = calloc((size_t)n + 1, sizeof *l);
  if (l == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    snprintf(devs[i].name, sizeof devs[i].name, "fake%d", i);
    l[i] = &devs[i];
  }
  if (num) *num = n;
  if (n == 0) errno = ENOSYS;
  return l;
}
void ibv_free_device_list(void **l) { free(l); }
const char *ibv_get_device_name(void *d) { return ((struct fake_dev *)d)->name; }
void *ibv_open_device(void *d) {
  (void)d;
  return &ctx_token;
}
int ibv_close_device(void *c) {
  (void)c;
  return 0;
}
void *ibv_alloc_pd(void *c) {
  (void)c;
  return &pd_token;
}
int ibv_dealloc_pd(void *pd) {
  (void)pd;
  return 0;
}
int ibv_dereg_mr(void *mr) {
  (void)mr;
  return 0;
}
void *ibv_reg_dmabuf_mr(void *pd, uint64_t off, size_t len, uint64_t iova, int fd, int access) {
  (void)pd, (void)off, (void)len, (void)iova, (void)access;
  const char *e = getenv("FAKEVERBS_DMABUF");
  errno = (e && strcmp(e, "0") == 0) ? EOPNOTSUPP : (fd < 0 ? EBADF : 0);
  return NULL;
}
