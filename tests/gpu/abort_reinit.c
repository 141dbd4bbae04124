/* GPU machine only (not built by CMake: NCCL, CUDA and MPI come from the GPU machine). The GPU-reset order of
 * docs/recovery.md through real NCCL: two ranks (MPI, one GPU each or both on one GPU with MPS) build a communicator,
 * run checked all_reduces, then abort it with all_reduces still in flight (ncclCommAbort), free the buffers, and
 * build a new communicator that must work again; ROUNDS times. Each abort prints
 *   ABORTED rank=R pid=P round=K t_ns=<CLOCK_MONOTONIC>
 * so that the verbs emulator's trace (VEMU_TRACE, the same clock) can be checked for QPs and MRs of this process
 * still alive at that moment (there must be none: a GPU could be reset there). Exit 0 only if every round's result
 * was right.
 *
 * Build (GPU machine): mpicc -O2 -o abort_reinit tests/gpu/abort_reinit.c -I$CUDA/include -I$NCCL/include \
 *                        -L$CUDA/lib64 -lcudart -L$NCCL/lib -l:libnccl.so.2
 * Run: mpirun -np 1 env NCCL_HOSTID=hostA ... ./abort_reinit : -np 1 env NCCL_HOSTID=hostB ... ./abort_reinit */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#define ROUNDS 3
#define N (16u << 20) /* bytes per all_reduce */
#define CHECKED 10    /* all_reduces tested before the abort */
#define INFLIGHT 8    /* all_reduces launched and never waited for */

#define CU(x)                                                                                                          \
  do {                                                                                                                 \
    cudaError_t e_ = (x);                                                                                              \
    if (e_ != cudaSuccess) {                                                                                           \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_));                                          \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                                                    \
    }                                                                                                                  \
  } while (0)
#define NC(x)                                                                                                          \
  do {                                                                                                                 \
    ncclResult_t r_ = (x);                                                                                             \
    if (r_ != ncclSuccess) {                                                                                           \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #x, ncclGetErrorString(r_));                                          \
      MPI_Abort(MPI_COMM_WORLD, 3);                                                                                    \
    }                                                                                                                  \
  } while (0)

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
  int rank = 0, size = 0, bad = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int dev = getenv("NCCL_TESTS_DEVICE") ? atoi(getenv("NCCL_TESTS_DEVICE")) : rank;
  CU(cudaSetDevice(dev));
  unsigned char *host = malloc(N);
  if (host == NULL) MPI_Abort(MPI_COMM_WORLD, 4);
  for (int round = 0; round < ROUNDS; round++) {
    ncclUniqueId id;
    ncclComm_t comm;
    cudaStream_t s;
    void *sbuf, *rbuf;
    if (rank == 0) NC(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    uint64_t t0 = now_ns();
    NC(ncclCommInitRank(&comm, size, id, rank));
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaMalloc(&sbuf, N));
    CU(cudaMalloc(&rbuf, N));
    CU(cudaMemset(sbuf, rank + 1, N));
    for (int i = 0; i < CHECKED; i++) {
      CU(cudaMemset(rbuf, 0, N));
      NC(ncclAllReduce(sbuf, rbuf, N, ncclUint8, ncclSum, comm, s));
      CU(cudaStreamSynchronize(s));
      CU(cudaMemcpy(host, rbuf, N, cudaMemcpyDeviceToHost));
      unsigned char want = (unsigned char)(size * (size + 1) / 2);
      for (size_t k = 0; k < N; k++)
        if (host[k] != want) {
          fprintf(stderr, "rank %d round %d all_reduce %d: byte %zu is %u, want %u\n", rank, round, i, k, host[k],
                  want);
          bad = 1;
          break;
        }
    }
    /* in flight: launched, never waited for; then the abort */
    for (int i = 0; i < INFLIGHT; i++) NC(ncclAllReduce(sbuf, rbuf, N, ncclUint8, ncclSum, comm, s));
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t ta = now_ns();
    NC(ncclCommAbort(comm));
    uint64_t tb = now_ns();
    (void)cudaStreamSynchronize(s); /* the aborted kernels end */
    CU(cudaFree(sbuf));
    CU(cudaFree(rbuf));
    CU(cudaStreamDestroy(s));
    printf("ABORTED rank=%d pid=%d round=%d t_ns=%llu init_ms=%.1f abort_ms=%.1f result=%s\n", rank, (int)getpid(),
           round, (unsigned long long)tb, (double)(ta - t0) / 1e6, (double)(tb - ta) / 1e6, bad ? "WRONG" : "ok");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  free(host);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("abort_reinit: %d rounds, %s\n", ROUNDS, any ? "WRONG RESULTS" : "every result right");
  MPI_Finalize();
  return any ? 1 : 0;
}
