/* GPU machine only (not built by CMake: NCCL >= 2.28.7 with its device API, CUDA and MPI come from the GPU machine).
 * NCCL's device API through the plugin's GIN table (ncclGinPlugin_v11 on NCCL 2.28.9, docs/abi.md): two ranks (one GPU
 * each, or both on one GPU with MPS as two hosts) with a symmetric window; per round, in both directions at once,
 * one thread of a CTA puts a patterned message of the round's size to the peer with ncclGin_SignalInc, waits for the
 * peer's signal, and then the whole CTA checks every byte it received right there in the kernel (a signal seen
 * before its data fails here); then an 8-byte put with ncclGin_SignalAdd{value}, the added sum checked. The host
 * checks every byte again after the kernel. Prints "PASS rounds=R bytes=B" and exits 0 only if nothing was wrong;
 * otherwise "FAIL ..." with the first bad byte.
 *
 * Build (GPU machine; NCCL = the 2.28.9 wheel's nvidia/nccl directory, which has include/nccl_device.h):
 *   nvcc -O2 -std=c++17 -arch=sm_90 -ccbin mpicxx -o gin_putsignal tests/gpu/gin_putsignal.cu \
 *        -I$NCCL/include -L$NCCL/lib -l:libnccl.so.2 -Xlinker -rpath=$NCCL/lib
 * Run (two ranks as two hosts on one GPU, MPS started; over the plugin's TCP or its emulated RDMA):
 *   mpirun -np 1 env NCCL_HOSTID=hostA NCCL_NET_PLUGIN=$PWD/build/lib/libnccl-net-gdr.so NCCL_NET=GDR \
 *          NCCL_GIN_ENABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET GDRNET_TRANSPORT=tcp ./gin_putsignal : \
 *          -np 1 env NCCL_HOSTID=hostB ...the same... ./gin_putsignal
 *   (GDRNET_TRANSPORT=rdma with the emulator's GDRNET_IBVERBS_LIB/LD_LIBRARY_PATH/VEMU_DIR/VEMU_DEVICES for RDMA.)
 * NCCL's log must say "NET/Plugin: Loaded gin plugin GDR (v11)" and the plugin's "GIN/RMA table v11: proxy backend". */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#define MAXB ((size_t)16 << 20)
static const size_t k_sizes[] = {1, 7, 8, 255, 4096, 65537, (1 << 20) + 3, (size_t)4 << 20, MAXB};
#define NSIZES (int)(sizeof k_sizes / sizeof k_sizes[0])
#define ADD_OFF (2 * MAXB)  /* the SignalAdd puts' 8 bytes */
#define WIN_BYTES (2 * MAXB + 4096)

static int rank = -1;
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

__host__ __device__ static inline uint8_t pat(int from, int round, size_t k) {
  return (uint8_t)(from * 59 + round * 17 + k * 13 + (k >> 9));
}

__global__ void fill(uint8_t *p, size_t n, int from, int round) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x)
    p[k] = pat(from, round, k);
}

/* One CTA: thread 0 puts and waits; every thread then checks what arrived. */
__global__ void put_signal(ncclDevComm devComm, ncclWindow_t win, const uint8_t *recv, size_t bytes, int peer,
                           int round, uint64_t inc_want, uint64_t add_val, uint64_t add_want,
                           unsigned long long *bad) {
  ncclGin gin{devComm, 0};
  if (threadIdx.x == 0) {
    /* send region [0, MAXB) -> the peer's receive region [MAXB, 2 MAXB) */
    gin.put(ncclTeamWorld(devComm), peer, win, MAXB, win, 0, bytes, ncclGin_SignalInc{0});
    gin.waitSignal(ncclCoopThread(), 0, inc_want);
  }
  __syncthreads();
  for (size_t k = threadIdx.x; k < bytes; k += blockDim.x)
    if (recv[k] != pat(peer, round, k)) atomicAdd(bad, 1ull);
  __syncthreads();
  if (threadIdx.x == 0) {
    gin.put(ncclTeamWorld(devComm), peer, win, ADD_OFF, win, 0, 8, ncclGin_SignalAdd{1, add_val});
    gin.waitSignal(ncclCoopThread(), 1, add_want);
    if (gin.readSignal(1) != add_want) atomicAdd(bad, 1ull << 32);
    gin.flush(ncclCoopThread());
  }
}

int main(int argc, char **argv) {
  int nranks = 0, peer, fails = 0;
  ncclUniqueId id;
  ncclComm_t comm;
  ncclWindow_t win;
  ncclDevComm devComm;
  ncclDevCommRequirements reqs;
  uint8_t *buf = NULL, *host = NULL;
  unsigned long long *bad = NULL, hbad = 0;
  uint64_t add_sum = 0, total = 0;
  cudaStream_t st;
  (void)argc, (void)argv;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks != 2) {
    fprintf(stderr, "needs 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  peer = 1 - rank;
  CU(cudaSetDevice(0));
  if (rank == 0) NC(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NC(ncclCommInitRank(&comm, nranks, id, rank));
  CU(cudaStreamCreate(&st));
  NC(ncclMemAlloc((void **)&buf, WIN_BYTES));
  CU(cudaMemset(buf, 0, WIN_BYTES));
  NC(ncclCommWindowRegister(comm, buf, WIN_BYTES, &win, NCCL_WIN_COLL_SYMMETRIC));
  memset(&reqs, 0, sizeof(reqs));
  reqs.ginSignalCount = 2;
  reqs.ginForceEnable = true; /* 2.28: GIN even where LSA would do (two hosts: it is the only way) */
  NC(ncclDevCommCreate(comm, &reqs, &devComm));
  CU(cudaMalloc((void **)&bad, sizeof(*bad)));
  host = (uint8_t *)malloc(MAXB);
  if (host == NULL) MPI_Abort(MPI_COMM_WORLD, 4);
  for (int round = 0; round < NSIZES; round++) {
    size_t n = k_sizes[round];
    uint64_t add_val = (uint64_t)round * 1000 + 7;
    add_sum += add_val;
    CU(cudaMemset(bad, 0, sizeof(*bad)));
    fill<<<64, 256, 0, st>>>(buf, n, rank, round);
    CU(cudaStreamSynchronize(st));
    MPI_Barrier(MPI_COMM_WORLD); /* both sources ready; both receive regions checked by the last round */
    put_signal<<<1, 512, 0, st>>>(devComm, win, buf + MAXB, n, peer, round, (uint64_t)round + 1, add_val, add_sum,
                                  bad);
    CU(cudaStreamSynchronize(st));
    CU(cudaMemcpy(&hbad, bad, sizeof(hbad), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(host, buf + MAXB, n, cudaMemcpyDeviceToHost));
    if (hbad != 0) {
      printf("FAIL rank=%d round=%d bytes=%zu: %llu bytes wrong when the signal was seen, %llu bad add signals\n", rank,
             round, n, hbad & 0xffffffffull, hbad >> 32);
      fails++;
    }
    for (size_t k = 0; k < n; k++)
      if (host[k] != pat(peer, round, k)) {
        printf("FAIL rank=%d round=%d bytes=%zu: byte %zu is %u, not %u\n", rank, round, n, k, host[k],
               pat(peer, round, k));
        fails++;
        break;
      }
    total += n;
    MPI_Barrier(MPI_COMM_WORLD);
  }
  NC(ncclDevCommDestroy(comm, &devComm));
  NC(ncclCommWindowDeregister(comm, win));
  NC(ncclMemFree(buf));
  NC(ncclCommDestroy(comm));
  MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (fails == 0) printf("PASS rank=%d rounds=%d bytes=%llu (each direction)\n", rank, NSIZES, (unsigned long long)total);
  MPI_Finalize();
  free(host);
  return fails == 0 ? 0 : 1;
}
