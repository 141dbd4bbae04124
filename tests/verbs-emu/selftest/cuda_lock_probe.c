/* A diagnostic for the GPU machine, not a test (built, never run by CTest): which CUDA driver calls block while
 * (a) a kernel spins on the legacy default stream, and (b) also another thread sits in a synchronous cuMemcpyDtoH
 * (pageable, or pinned) behind it -- PyTorch's .item()/.cpu() right after a collective. One child process per
 * variant; a 4 s watchdog names the step that blocked. Results on the H200 machine (driver 580.159.04,
 * 2026-11-30), recorded in tests/verbs-emu/README.md: with (a) only a synchronous copy blocks; with (b) every
 * enqueue into the application's context blocks (async copies on any stream, kernel launches, cuMemHostRegister),
 * also from a second context when the memory belongs to the first (cuMemAlloc); a second context copying into
 * its own memory or into cuMem* (VMM) memory does not block. CUDA_DEVICE_MAX_CONNECTIONS=32 changes nothing.
 * Run: vemu_cuda_lock_probe (needs libcuda.so.1 and a GPU). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
typedef int CUresult; typedef unsigned long long CUdeviceptr; typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;
static struct {
  CUresult (*cuInit)(unsigned); CUresult (*cuDeviceGet)(int *, int); CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
  CUresult (*cuCtxSetCurrent)(CUcontext); CUresult (*cuCtxPushCurrent)(CUcontext); CUresult (*cuCtxPopCurrent)(CUcontext *);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t); CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned); CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *); CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
  CUresult (*cuStreamCreate)(CUstream *, unsigned); CUresult (*cuStreamSynchronize)(CUstream); CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream); CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuEventCreate)(CUevent *, unsigned); CUresult (*cuEventRecord)(CUevent, CUstream); CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr); CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
  CUresult (*cuCtxCreate)(CUcontext *, unsigned, int);
  CUresult (*cuIpcGetMemHandle)(void *, CUdeviceptr); CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, void *, unsigned);
  CUresult (*cuMemCreate)(unsigned long long *, size_t, const void *, unsigned long long); CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long); CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const void *, size_t);
} cu;
#define CU(x) do { CUresult _r = (x); if (_r) { printf("  %s failed %d\n", #x, _r); fflush(stdout); _exit(3); } } while (0)
static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
 ".visible .entry spin(.param .u64 flag)\n{\n .reg .u64 %rd<3>;\n .reg .u32 %r<2>;\n .reg .pred %p<2>;\n"
 " ld.param.u64 %rd1, [flag];\n cvta.to.global.u64 %rd2, %rd1;\nLOOP:\n ld.volatile.global.u32 %r1, [%rd2];\n"
 " setp.eq.u32 %p1, %r1, 0;\n @%p1 bra LOOP;\n ret;\n}\n"
 ".visible .entry copy8(.param .u64 dst, .param .u64 src, .param .u64 n)\n{\n .reg .u64 %rd<10>;\n .reg .pred %p<2>;\n"
 " ld.param.u64 %rd1, [dst];\n ld.param.u64 %rd2, [src];\n ld.param.u64 %rd3, [n];\n mov.u64 %rd4, 0;\n"
 "L2:\n setp.ge.u64 %p1, %rd4, %rd3;\n @%p1 bra DONE;\n add.u64 %rd5, %rd2, %rd4;\n add.u64 %rd6, %rd1, %rd4;\n"
 " ld.u64 %rd7, [%rd5];\n st.u64 [%rd6], %rd7;\n add.u64 %rd4, %rd4, 8;\n bra L2;\nDONE:\n ret;\n}\n";
static volatile const char *step = "start";
static int variant; static const char *vname;
static void on_segv(int s) { (void)s; printf("V%d %-44s CRASHED at: %s\n", variant, vname, step); fflush(stdout); _exit(1); }
static void on_alarm(int s) { (void)s; printf("V%d %-44s BLOCKED at: %s\n", variant, vname, step); fflush(stdout); _exit(1); }
static CUcontext ctx; static CUdeviceptr dsrc; static char *pg; static void *pinned_dst; static int copier_pinned;
static void *copier(void *a) { (void)a; cu.cuCtxSetCurrent(ctx); cu.cuMemcpyDtoH(copier_pinned ? pinned_dst : pg, dsrc, 1 << 20); return NULL; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void body(int v, int with_copier) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW); if (!h) { printf("no libcuda\n"); _exit(2); }
#define S(n) *(void **)&cu.n = dlsym(h, #n)
#define S2(n, s) *(void **)&cu.n = dlsym(h, s)
  S(cuInit); S(cuDeviceGet); S(cuDevicePrimaryCtxRetain); S(cuCtxSetCurrent); S2(cuCtxPushCurrent, "cuCtxPushCurrent_v2"); S2(cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  S2(cuMemAlloc, "cuMemAlloc_v2"); S2(cuMemcpyDtoH, "cuMemcpyDtoH_v2"); S2(cuMemcpyHtoD, "cuMemcpyHtoD_v2"); S(cuMemHostAlloc); S2(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
  S(cuModuleLoadData); S(cuModuleGetFunction); S(cuLaunchKernel); S(cuStreamCreate); S(cuStreamSynchronize); S(cuStreamQuery);
  S2(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"); S2(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"); S2(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  S(cuEventCreate); S(cuEventRecord); S(cuEventQuery); S(cuPointerGetAttribute); S2(cuMemHostRegister, "cuMemHostRegister_v2"); S2(cuCtxCreate, "cuCtxCreate_v2"); S(cuIpcGetMemHandle); S2(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2"); S(cuMemCreate); S(cuMemAddressReserve); S(cuMemMap); S(cuMemSetAccess);
  signal(SIGSEGV, on_segv); signal(SIGBUS, on_segv); int dev; step = "setup"; CU(cu.cuInit(0)); CU(cu.cuDeviceGet(&dev, 0)); CU(cu.cuDevicePrimaryCtxRetain(&ctx, dev)); CU(cu.cuCtxSetCurrent(ctx));
  CUdeviceptr dbuf; CU(cu.cuMemAlloc(&dbuf, 4 << 20)); CU(cu.cuMemAlloc(&dsrc, 4 << 20));
  void *pin; CU(cu.cuMemHostAlloc(&pin, 4 << 20, 1)); CU(cu.cuMemHostAlloc(&pinned_dst, 4 << 20, 1)); memset(pin, 7, 4 << 20);
  pg = malloc(4 << 20); memset(pg, 1, 4 << 20);
  CUmodule mod; CUfunction spin, copy8; CU(cu.cuModuleLoadData(&mod, ptx)); CU(cu.cuModuleGetFunction(&spin, mod, "spin")); CU(cu.cuModuleGetFunction(&copy8, mod, "copy8"));
  step = "vmm setup"; CUdeviceptr vmm = 0; if (v == 12) { struct { int type, htype; struct { int type, id; } loc; void *win; unsigned char rest[64]; } prop; memset(&prop, 0, sizeof prop);
      prop.type = 1; prop.loc.type = 1; prop.loc.id = 0; unsigned long long hnd; CU(cu.cuMemCreate(&hnd, 2 << 20, &prop, 0)); CU(cu.cuMemAddressReserve(&vmm, 2 << 20, 0, 0, 0));
      CU(cu.cuMemMap(vmm, 2 << 20, 0, hnd, 0)); struct { struct { int type, id; } loc; int flags; } ad = { { 1, 0 }, 3 }; CU(cu.cuMemSetAccess(vmm, 2 << 20, &ad, 1)); }
  CUcontext ctx2 = NULL; CUstream s2 = NULL; CUdeviceptr d2 = 0; void *pin2 = NULL;
  if (v >= 10 && v <= 12) { CU(cu.cuCtxCreate(&ctx2, 0, dev)); CU(cu.cuMemAlloc(&d2, 4 << 20)); CU(cu.cuStreamCreate(&s2, 1)); CU(cu.cuMemHostAlloc(&pin2, 4 << 20, 1)); CU(cu.cuCtxPopCurrent(NULL)); CU(cu.cuCtxSetCurrent(ctx)); }
  CUstream s; CU(cu.cuStreamCreate(&s, 1)); CUevent ev; CU(cu.cuEventCreate(&ev, 2 /*disable timing*/));
  volatile unsigned *flag; CU(cu.cuMemHostAlloc((void **)&flag, 64, 2)); *flag = 0; CUdeviceptr dflag; CU(cu.cuMemHostGetDevicePointer(&dflag, (void *)flag, 0));
  CUdeviceptr dpin; CU(cu.cuMemHostGetDevicePointer(&dpin, pin, 0)); /* portable only; may fail if not mapped */
  void *args[] = { &dflag }; CU(cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
  pthread_t th; if (with_copier) { pthread_create(&th, NULL, copier, NULL); usleep(300000); }
  CU(cu.cuCtxSetCurrent(NULL));
  signal(SIGALRM, on_alarm); alarm(4); double t0 = now();
  step = "cuCtxPushCurrent"; CU(cu.cuCtxPushCurrent(v >= 10 && v <= 12 ? ctx2 : ctx));
  size_t n = 1 << 20; int done = 0;
  switch (v) {
  case 1: case 2: case 3: step = "cuMemcpyHtoDAsync(pinned) enqueue"; CU(cu.cuMemcpyHtoDAsync(dbuf, pin, n, s));
    if (v == 1) { step = "cuStreamSynchronize"; CU(cu.cuStreamSynchronize(s)); }
    if (v == 2) { step = "cuStreamQuery poll"; while (cu.cuStreamQuery(s)) {} }
    if (v == 3) { step = "cuEventRecord"; CU(cu.cuEventRecord(ev, s)); step = "cuEventQuery poll"; while (cu.cuEventQuery(ev)) {} }
    break;
  case 4: step = "cuMemcpyDtoHAsync(pinned) enqueue"; CU(cu.cuMemcpyDtoHAsync(pin, dbuf, n, s)); step = "cuStreamQuery poll"; while (cu.cuStreamQuery(s)) {} break;
  case 5: { step = "cuLaunchKernel copy8 (mapped pinned -> device)"; void *a[] = { &dbuf, &dpin, &n }; CU(cu.cuLaunchKernel(copy8, 1, 1, 1, 1, 1, 1, 0, s, a, NULL));
    step = "cuStreamQuery poll (kernel)"; while (cu.cuStreamQuery(s)) {} break; }
  case 6: step = "cuMemcpyHtoD(pinned) sync API"; CU(cu.cuMemcpyHtoD(dbuf, pin, n)); break;
  case 7: step = "cuPointerGetAttribute"; { CUcontext c; CU(cu.cuPointerGetAttribute(&c, 1, dbuf)); } break;
  case 8: step = "cuMemcpyDtoDAsync enqueue"; CU(cu.cuMemcpyDtoDAsync(dbuf, dsrc, n, s)); step = "cuStreamQuery poll"; while (cu.cuStreamQuery(s)) {} break;
  case 10: step = "ctx2: HtoDAsync into ctx2's own memory"; CU(cu.cuMemcpyHtoDAsync(d2, pin2, n, s2)); step = "ctx2 StreamQuery poll"; while (cu.cuStreamQuery(s2)) {} break;
  case 11: step = "ctx2: DtoDAsync ctx2 mem -> primary cuMemAlloc mem"; CU(cu.cuMemcpyDtoDAsync(dbuf, d2, n, s2)); step = "ctx2 StreamQuery poll"; while (cu.cuStreamQuery(s2)) {} break;
  case 12: step = "ctx2: HtoDAsync into primary's VMM memory"; CU(cu.cuMemcpyHtoDAsync(vmm, pin2, n, s2)); step = "ctx2 StreamQuery poll"; while (cu.cuStreamQuery(s2)) {} break;
  case 9: { step = "cuMemHostRegister(new pageable)"; void *p = aligned_alloc(4096, n); CU(cu.cuMemHostRegister(p, n, 1)); break; }
  }
  done = 1; CU(cu.cuCtxPopCurrent(NULL)); alarm(0);
  printf("V%d %-44s ok in %.1f ms\n", v, vname, (now() - t0) * 1e3); fflush(stdout);
  *flag = 1; (void)done; _exit(0);
}
int main(void) {
  static const char *names[] = { "", "HtoDAsync pinned + StreamSynchronize", "HtoDAsync pinned + StreamQuery poll", "HtoDAsync pinned + EventQuery poll",
    "DtoHAsync pinned + StreamQuery poll", "copy kernel launch on non-blocking stream", "HtoD sync API, pinned", "cuPointerGetAttribute", "DtoDAsync + StreamQuery",
    "cuMemHostRegister", "2nd context, own memory", "2nd context, DtoD into primary mem", "2nd context, HtoD into primary VMM mem" };
  for (int mode = 0; mode < 3; mode++) {
    const char *m = mode == 0 ? "spin only" : mode == 1 ? "spin + pageable sync DtoH in another thread" : "spin + PINNED sync DtoH in another thread";
    printf("== %s\n", m); fflush(stdout);
    for (int v = mode ? 7 : 1; v <= 12; v++) {
      pid_t p = fork();
      if (p == 0) { variant = v; vname = names[v]; copier_pinned = mode == 2; body(v, mode > 0); }
      int st; waitpid(p, &st, 0); if (!WIFEXITED(st) || WEXITSTATUS(st) > 1) printf("  (V%d ended with status 0x%x)\n", v, st); 
    }
  }
  return 0;
}
