// Thread-block clusters: a tile that every block of the cluster needs is read from
// global memory ONCE per cluster and shared through distributed shared memory (DSMEM).
//
// C[M,N] = A[M,K] @ B[K,N], fp32 row-major, 64 x 64 C tile per block, K in slices of
// T_K = 32 (16 with -DT_K=16). A cluster is CLUSTER = 4 blocks side by side along N:
// they compute the C tiles (bm, bn_0 .. bn_3) and therefore all need the same A slice
// (64 rows x T_K) at every K step. Both kernels: 256 threads as 16 x 16, thread tile
// 4 x 4; every block copies its own B slice; a STAGES-deep cp.async ring in dynamic
// shared memory; same math, same launch (grid = (ceil(N/64) rounded up to a multiple
// of 4, ceil(M/64)), cluster = (4,1,1), block = 256, 3 blocks per SM for both).
// Needs K % 4 == 0, N % 4 == 0, 16-byte aligned pointers.
//
//   cluster_gemm_own_a     every block copies the whole 64 x T_K A slice itself: 4 copies
//                          of the same bytes per cluster (the baseline). Block-local
//                          ring, one __syncthreads per K step, no cluster barrier in
//                          the loop.
//   cluster_gemm_shared_a  each block copies ONE QUARTER of the A slice (rows
//                          16*rank .. 16*rank+15) into its shared memory, and every block
//                          gathers the whole slice from the four quarters (3 remote + 1
//                          local) through cluster.map_shared_rank into its own working
//                          copy, which its math then reads at local shared memory speed.
//                          One global copy of A per cluster, spread evenly over the 4
//                          blocks (no hot rank: the first version had rank 0 copy the
//                          whole slice and the 3 others read all of it from rank 0), and
//                          the cluster barrier is split (arrive early, wait late).
//
// shared_a: who waits for whom (one split cluster barrier per K step)
// ---------------------------------------------------------------------
// A cluster barrier phase P is `barrier.cluster.arrive.release` by every thread of the
// cluster, then `barrier.cluster.wait.acquire`. Everything a thread did before its
// arrive (its completed cp.async copies, its DSMEM reads) happens-before everything any
// thread of the cluster does after its wait. Step s (s = 0 .. S-1) of every block:
//
//   wait(P_s)          P_s was arrived at by all 4 blocks at the end of step s-1, so:
//                        - every rank's quarter of slice s+1 has landed (RAW for the gather)
//                        - every rank has finished gathering slice s, so the quarter
//                          stage of slice s is free in every rank (WAR for the refill)
//   v = DSMEM loads     my T_K/16 float4s of slice s+1 from their quarter owners' shared
//                      memory (each thread's arrive releases its own copies; every
//                      thread arrives, so every copy of the quarter is released)
//   compute(s)         from Awork[s % 2] (local copy) and Bs[s % STAGES]; v is in flight
//   Awork[(s+1)%2] = v
//   cp.async.wait      my copies of slice s+2 have landed
//   __syncthreads      ... and everybody's in this block (the block-level completion
//                      that racecheck models); Awork[(s+1)%2] is complete; compute(s)
//                      is done, so Bs[s % STAGES] is free
//   arrive(P_{s+1})    publishes: my quarter of slice s+2 is in; my reads of slice s+1
//                      (v, already consumed above) are done
//   cp.async slice s+STAGES into stage s % STAGES (quarter of A + B), commit
//
// Entry: wait for my slice 0, __syncthreads, arrive + wait (P_entry: all four blocks
// are running, so their shared memory exists, and slice 0 is in every rank), gather
// slice 0, wait for slice 1, __syncthreads, arrive(P_0).
// Exit: wait(P_S): every block has passed its last arrive, so nobody reads my shared
// memory any more and I may exit (a block's shared memory ends with the block).
// The arrive/wait calls alternate in every thread: S + 2 arrives, S + 2 waits.
#include <cooperative_groups.h>
#include <fullpipe/cp_async.cuh>

namespace cg = cooperative_groups;

#define CLUSTER 4
#define T_M 64
#define T_N 64
#ifndef T_K
#define T_K 32  // K slice per pipeline step (16 or 32); one cluster barrier per slice in shared_a
#endif
#ifndef STAGES
#define STAGES 4  // cp.async ring depth (>= 3: shared_a has slices s+1 .. s+3 in flight at step s)
#endif
#define THREADS 256
#define Q_M (T_M / CLUSTER)   // rows of the A slice each block copies in shared_a
#define KC (T_K / 4)          // 16-byte chunks per row of an A slice
#define AS_STRIDE (T_K + 4)   // padded row of a working A slice (float4 aligned, fewer bank conflicts)
#define A_ELEMS (T_M * AS_STRIDE)
#define Q_ELEMS (Q_M * T_K)   // a quarter is only copied in and read out by rows: no padding
#define B_ELEMS (T_K * T_N)
// Dynamic shared memory per block (the Python front passes the same numbers).
#define OWN_A_SMEM_BYTES (STAGES * (A_ELEMS + B_ELEMS) * 4)
#define SHARED_A_SMEM_BYTES ((STAGES * (Q_ELEMS + B_ELEMS) + 2 * A_ELEMS) * 4)

static_assert(T_K == 16 || T_K == 32, "T_K must be 16 or 32");
static_assert(STAGES >= 3, "shared_a publishes slice s+2 at the end of step s");
static_assert((T_M * KC) % THREADS == 0 && (T_K * T_N / 4) % THREADS == 0 && Q_M * KC <= THREADS,
              "the copy loops hand every thread the same number of 16-byte chunks");

namespace {

// Split cluster barrier with explicit memory semantics (PTX ISA 8.0, sm_90). On sm_90
// the release arrive is MEMBAR.ALL.GPU + UCGABAR_ARV and the acquire wait is
// UCGABAR_WAIT + CCTL.IVALL: a real cost per phase, which is why a phase covers a whole
// T_K = 32 slice and why the wait is issued as late as possible.
// CLUSTER_FULL_BARRIERS=1 (a diagnostic build for the race checker, see
// `python -m fullpipe.kernels.cluster --selftest --full-barriers`): every arrive is
// followed at once by its wait, so every phase is an ordinary cluster.sync(); this
// only synchronizes earlier than the split form, never later.
#ifndef CLUSTER_FULL_BARRIERS
#define CLUSTER_FULL_BARRIERS 0
#endif
__device__ __forceinline__ void cluster_arrive_release() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    if (CLUSTER_FULL_BARRIERS) asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
    if (!CLUSTER_FULL_BARRIERS) asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Wait until at most N of this thread's cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Rows [r0, r0 + ROWS) of the T_M x T_K A slice at K offset k0 into dst (row stride
// `stride`): ROWS * KC chunks of 16 bytes, chunk c = threadIdx.x + i * THREADS.
template <int ROWS>
__device__ __forceinline__ void load_a_rows(float* dst, int stride, const float* __restrict__ A, int M, int K, int bm,
                                            int r0, int k0) {
#pragma unroll
    for (int c = threadIdx.x; c < ROWS * KC; c += THREADS) {
        const int r = c / KC, kc = (c % KC) * 4;
        const bool ok = bm + r0 + r < M && k0 + kc < K;
        cp_async_16(&dst[r * stride + kc], ok ? &A[(size_t)(bm + r0 + r) * K + k0 + kc] : A, ok);
    }
}
// T_K x 64 B slice.
__device__ __forceinline__ void load_b(float* Bs, const float* __restrict__ B, int N, int K, int bn, int k0) {
#pragma unroll
    for (int c = threadIdx.x; c < T_K * T_N / 4; c += THREADS) {
        const int r = c / (T_N / 4), col = (c % (T_N / 4)) * 4;
        const bool ok = k0 + r < K && bn + col < N;
        cp_async_16(&Bs[r * T_N + col], ok ? &B[(size_t)(k0 + r) * N + bn + col] : B, ok);
    }
}

// acc += A slice (T_M x T_K, stride AS_STRIDE) x B slice (T_K x 64) for this thread's
// 4 x 4 (rows ty + 16 i, columns 4 tx .. 4 tx + 3).
__device__ __forceinline__ void compute_slice(const float* a_slice, const float* b_slice, float acc[4][4]) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
    for (int k = 0; k < T_K; ++k) {
        const float4 b = *reinterpret_cast<const float4*>(&b_slice[k * T_N + tx * 4]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float a = a_slice[(ty + 16 * i) * AS_STRIDE + k];
            acc[i][0] = fmaf(a, b.x, acc[i][0]);
            acc[i][1] = fmaf(a, b.y, acc[i][1]);
            acc[i][2] = fmaf(a, b.z, acc[i][2]);
            acc[i][3] = fmaf(a, b.w, acc[i][3]);
        }
    }
}

__device__ __forceinline__ void store_c(float* __restrict__ C, int M, int N, int bm, int bn, float acc[4][4]) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int col = bn + tx * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = bm + ty + 16 * i;
        if (row < M && col < N)
            *reinterpret_cast<float4*>(&C[(size_t)row * N + col]) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
}

// ---------------------------------------------------------------- baseline: own A
__device__ __forceinline__ void gemm_own_a(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float smem[];
    float* As = smem;                     // [STAGES][A_ELEMS]
    float* Bs = smem + STAGES * A_ELEMS;  // [STAGES][B_ELEMS]
    const int bm = blockIdx.y * T_M, bn = blockIdx.x * T_N;
    const int slices = (K + T_K - 1) / T_K;
    float acc[4][4] = {};
    auto issue = [&](int slice) {  // the whole A slice and my B slice; past the last slice an empty group
        const int st = slice % STAGES;
        if (slice < slices) {
            load_a_rows<T_M>(As + st * A_ELEMS, AS_STRIDE, A, M, K, bm, 0, slice * T_K);
            load_b(Bs + st * B_ELEMS, B, N, K, bn, slice * T_K);
        }
        cp_async_commit();
    };

    // The same entry and exit barrier as shared_a (once per block, not per K step), so
    // that the two kernels differ only in where A comes from. Nothing else in this
    // kernel needs the cluster.
    cluster_arrive_release();
    cluster_wait_acquire();
#pragma unroll
    for (int p = 0; p < STAGES - 1; ++p) issue(p);  // slices 0 .. STAGES-2 in flight
    for (int s = 0; s < slices; ++s) {
        cp_async_wait<STAGES - 2>();  // my copies of slice s have landed ...
        __syncthreads();              // ... and everybody's; stage (s-1) % STAGES is no longer read
        issue(s + STAGES - 1);        // into stage (s-1) % STAGES (an empty group near the end)
        compute_slice(As + (s % STAGES) * A_ELEMS, Bs + (s % STAGES) * B_ELEMS, acc);
    }
    cp_async_wait<0>();
    cluster_arrive_release();
    cluster_wait_acquire();
    store_c(C, M, N, bm, bn, acc);
}

// ---------------------------------------------------------------- shared A via DSMEM
__device__ __forceinline__ void gemm_shared_a(const float* __restrict__ A, const float* __restrict__ B,
                                              float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float smem[];
    float* Aq = smem;                         // [STAGES][Q_ELEMS]  MY quarter of the A slice
    float* Bs = Aq + STAGES * Q_ELEMS;        // [STAGES][B_ELEMS]  my B slice
    float* Awork = Bs + STAGES * B_ELEMS;     // [2][A_ELEMS]       the whole A slice, gathered
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = static_cast<int>(cluster.block_rank());
    const int bm = blockIdx.y * T_M, bn = blockIdx.x * T_N;
    const int slices = (K + T_K - 1) / T_K;
    float acc[4][4] = {};

    // The gather: chunk c = threadIdx.x + i * THREADS of the slice is row r = c / KC,
    // columns kc .. kc+3; row r lives in the quarter of rank r / Q_M (one rank per warp).
    constexpr int G = T_M * KC / THREADS;  // chunks per thread
    auto gather = [&](int slice, int i) {  // chunk i of `slice` from its owner's quarter (DSMEM)
        const int c = threadIdx.x + i * THREADS, r = c / KC, kc = (c % KC) * 4;
        const float* q = cluster.map_shared_rank(Aq + (slice % STAGES) * Q_ELEMS, static_cast<unsigned>(r / Q_M));
        return *reinterpret_cast<const float4*>(&q[(r % Q_M) * T_K + kc]);  // generic LD.E.128 to a peer
    };
    auto work_at = [&](int buf, int i) {  // where chunk i goes in Awork[buf]
        const int c = threadIdx.x + i * THREADS;
        return reinterpret_cast<float4*>(&Awork[buf * A_ELEMS + (c / KC) * AS_STRIDE + (c % KC) * 4]);
    };
    auto issue = [&](int slice) {  // my quarter of A and my B; past the last slice an empty group
        const int st = slice % STAGES;
        if (slice < slices) {
            load_a_rows<Q_M>(Aq + st * Q_ELEMS, T_K, A, M, K, bm, rank * Q_M, slice * T_K);
            load_b(Bs + st * B_ELEMS, B, N, K, bn, slice * T_K);
        }
        cp_async_commit();
    };

    // Entry.
#pragma unroll
    for (int p = 0; p < STAGES; ++p) issue(p);
    cp_async_wait<STAGES - 1>();  // slice 0 has landed (my copies) ...
    __syncthreads();              // ... and the whole block's quarter of it
    cluster_arrive_release();     // P_entry
    cluster_wait_acquire();       // all 4 blocks run and hold their quarter of slice 0
    if (slices > 0) {
#pragma unroll
        for (int i = 0; i < G; ++i) *work_at(0, i) = gather(0, i);
    }
    cp_async_wait<STAGES - 2>();  // slice 1 has landed (my copies)
    __syncthreads();              // Awork[0] is complete; the block's quarter of slice 1 is in
    cluster_arrive_release();     // P_0

    for (int s = 0; s < slices; ++s) {
        cluster_wait_acquire();  // P_s: quarters of slice s+1 are in every rank; slice s gathered everywhere
        const bool more = s + 1 < slices;
        float4 v[G];
        if (more) {  // DSMEM loads of slice s+1, in flight during (the end of) compute(s): ptxas places
                     // them late to save registers; the SM's other resident warps cover their latency
#pragma unroll
            for (int i = 0; i < G; ++i) v[i] = gather(s + 1, i);
        }
        compute_slice(Awork + (s % 2) * A_ELEMS, Bs + (s % STAGES) * B_ELEMS, acc);
        if (more) {
#pragma unroll
            for (int i = 0; i < G; ++i) *work_at((s + 1) % 2, i) = v[i];
        }
        cp_async_wait<STAGES - 3>();  // slice s+2 has landed (my copies)
        __syncthreads();              // block-wide; Awork[(s+1)%2] complete; Bs[s%STAGES] free
        cluster_arrive_release();     // P_{s+1}
        issue(s + STAGES);            // into stage s % STAGES: freed by P_s (quarter) and the __syncthreads (B)
    }
    cluster_wait_acquire();  // P_S: no block reads my shared memory any more, so I may exit
    cp_async_wait<0>();      // (nothing is left in flight: the last groups are empty)
    store_c(C, M, N, bm, bn, acc);
}

}  // namespace

// grid = (ceil(N/64) rounded up to a multiple of 4, ceil(M/64)), cluster = (4, 1, 1),
// block = 256, dynamic shared memory = OWN_A_SMEM_BYTES / SHARED_A_SMEM_BYTES.
extern "C" __global__ void __launch_bounds__(THREADS)
    cluster_gemm_own_a(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N,
                       int K) {
    gemm_own_a(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(THREADS)
    cluster_gemm_shared_a(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
                          int N, int K) {
    gemm_shared_a(A, B, C, M, N, K);
}
