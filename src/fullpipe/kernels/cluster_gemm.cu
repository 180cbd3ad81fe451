// fullpipe-requires: sm_90 (thread-block clusters, distributed shared memory)
// Thread-block clusters: a tile that every block of the cluster needs is read from
// global memory ONCE per cluster and shared through distributed shared memory (DSMEM).
//
// C[M,N] = A[M,K] @ B[K,N], fp32 row-major, 64 x 64 C tile per block, K in slices of
// T_K = 32 (16 with -DT_K=16). A cluster is CLUSTER = 4 blocks side by side along N:
// they compute the C tiles (bm, bn_0 .. bn_3) and therefore all need the same A slice
// (64 rows x T_K) at every K step. Both kernels: 256 threads as 16 x 16, thread tile
// 4 x 4; every block copies its own B slice through a STAGES-deep cp.async ring in
// dynamic shared memory; same math, same launch (grid = (ceil(N/64) rounded up to a
// multiple of 4, ceil(M/64)), cluster = (4,1,1), block = 256, 3 blocks per SM for both).
// Needs K % 4 == 0, N % 4 == 0, 16-byte aligned pointers.
//
//   cluster_gemm_own_a     every block copies the whole 64 x T_K A slice itself with
//                          cp.async (same ring stages and commit groups as its B): 4
//                          copies of the same bytes per cluster (the baseline).
//                          Block-local ring, one __syncthreads per K step, no cluster
//                          barrier in the loop.
//   cluster_gemm_shared_a  each block loads ONE QUARTER of the A slice (rows
//                          16*rank .. 16*rank+15) from global memory into registers
//                          (one 16-byte load, LDG.E.128, per thread of the first T_K/8
//                          warps) and stores it into its shared memory; every block
//                          gathers the whole slice from the four quarters (3 remote + 1
//                          local) through cluster.map_shared_rank into its own working
//                          copy, which its math then reads at local shared memory speed.
//                          One global load of A per cluster, spread evenly over the 4
//                          blocks, and the cluster barrier is split (arrive early, wait
//                          late). B comes through the cp.async ring as in own_a.
// Read the technique in gemm_shared_a() against gemm_own_a().
//
// shared_a's quarter is loaded with plain loads, not cp.async: compute-sanitizer
// racecheck does not follow a cp.async copy's completion to readers in OTHER blocks, and
// plain loads keep the kernel checkable by all three tools (docs/notes/kernels-history.md).
// own_a keeps cp.async for A: its A slice is read only by the block that copied it.
//
// shared_a: who waits for whom (one split cluster barrier per K step)
// ---------------------------------------------------------------------
// A cluster barrier phase P is `barrier.cluster.arrive.release` by every thread of the
// cluster, then `barrier.cluster.wait.acquire`. Everything a thread did before its
// arrive (its shared memory stores, its DSMEM reads) happens-before everything any
// thread of the cluster does after its wait; every thread arrives, so all stores of a
// quarter are released. Quarter ring Aq: slice q in stage q % STAGES (two stages are
// live at a time: the slice the peers read, the slice being stored). Step s
// (s = 0 .. S-1) of every block:
//
//   wait(P_s)          P_s was arrived at by all 4 blocks at the end of step s-1, so:
//                        - every rank's quarter of slice s+1 is in its shared memory
//                          (RAW for the gather)
//                        - every rank has finished gathering slices 0 .. s, so the stage
//                          of slice s+2 (it last held slice s+2-STAGES <= s-1) is free in
//                          every rank (WAR for the store below)
//   v = DSMEM loads    my T_K/16 float4s of slice s+1 from their quarter owners' shared
//                      memory
//   compute(s)         from Awork[s % 2] (local copy) and Bs[s % STAGES]; v is in flight
//                      (ptxas issues the loads late in compute(s) to save registers;
//                      the SM's other resident warps cover their latency)
//   Awork[(s+1)%2] = v
//   q = LDG            my chunk of my quarter of slice s+2, global -> registers (warps
//                      0 .. T_K/8-1; the others branch around it) ...
//   Aq[(s+2)%STAGES] = q   ... -> my shared memory (STS.128). The load comes after
//                      compute(s) in the source because that is where ptxas puts it anyway
//                      (late, to save registers), and written here it needs fewer
//                      registers. Its latency, like the gather's, is covered by the other
//                      resident warps.
//   cp.async.wait      my B copies of slice s+2 have landed (compute(s+1) needs only
//                      slice s+1; waiting for s+2 is the ring schedule as sanitized)
//   __syncthreads      ... and everybody's; Awork[(s+1)%2] is complete; compute(s) is
//                      done, so Bs[s % STAGES] is free
//   arrive(P_{s+1})    publishes: my quarter of slice s+2 is in; my reads of slice s+1
//                      (v, already consumed above) are done
//   cp.async B slice s+STAGES into stage s % STAGES, commit
//
// Entry: cp.async B slices 0 .. STAGES-1; load my quarters of slices 0 and 1 and store
// them; wait for B slice 0, __syncthreads, arrive + wait (P_entry: all four blocks are
// running, so their shared memory exists, and the quarters of slices 0 and 1 are in
// every rank), gather slice 0, wait for B slice 1, __syncthreads, arrive(P_0).
// Exit: wait(P_S): every block has passed its last arrive, so nobody reads my shared
// memory any more and I may exit (a block's shared memory ends with the block).
// The arrive/wait calls alternate in every thread: S + 2 arrives, S + 2 waits.
// Global loads of A per block: T_K/8 warp-level LDG.E.128 per slice in shared_a (the
// first T_K/8 warps, 16 bytes per thread: the whole quarter), T_K/2 warp-level LDGSTS
// per slice in own_a (the whole slice): 4x fewer per cluster (kernels/cluster.py,
// loads_per_block; `fullpipe bench cluster` measures it with ncu).
#include <cooperative_groups.h>
#include <fullpipe/cp_async.cuh>

namespace cg = cooperative_groups;

#ifndef T_K
#define T_K 32  // K slice per pipeline step (16 or 32): a compile-time tunable (kernels/cluster.py)
#endif
#ifndef STAGES
#define STAGES 4  // cp.async ring depth (>= 3: shared_a waits for B slice s+2 at the end of step s)
#endif

constexpr int CLUSTER = 4;
constexpr int T_M = 64;
constexpr int T_N = 64;
constexpr int THREADS = 256;
constexpr int Q_M = T_M / CLUSTER;      // rows of the A slice each block loads in shared_a
constexpr int KC = T_K / 4;             // 16-byte chunks per row of an A slice
constexpr int A_PITCH = T_K + 4;        // floats per row (one m) of a working A slice: float4 aligned, fewer conflicts
constexpr int A_ELEMS = T_M * A_PITCH;  // a working A slice, [T_M][A_PITCH]
constexpr int Q_ELEMS = Q_M * T_K;      // a quarter, [Q_M][T_K]: only stored and read out by rows, no padding
constexpr int B_ELEMS = T_K * T_N;      // a B slice, [T_K][T_N]
// Dynamic shared memory per block: own_a [STAGES] A slices then [STAGES] B slices;
// shared_a [STAGES] quarters, [STAGES] B slices, 2 working A slices. kernels/cluster.py
// launches with the same sizes; the tests compare them with these exported values.
constexpr int OWN_A_SMEM_BYTES = STAGES * (A_ELEMS + B_ELEMS) * 4;
constexpr int SHARED_A_SMEM_BYTES = (STAGES * (Q_ELEMS + B_ELEMS) + 2 * A_ELEMS) * 4;
extern "C" __device__ const unsigned fp_dynamic_smem_cluster_gemm_own_a = OWN_A_SMEM_BYTES;
extern "C" __device__ const unsigned fp_dynamic_smem_cluster_gemm_shared_a = SHARED_A_SMEM_BYTES;

static_assert(T_K == 16 || T_K == 32, "T_K must be 16 or 32");
static_assert(STAGES >= 3, "shared_a waits for B slice s+2 and stores the quarter of slice s+2 at step s");
static_assert((T_M * KC) % THREADS == 0 && (T_K * T_N / 4) % THREADS == 0,
              "the copy loops hand every thread the same number of 16-byte chunks");
static_assert(Q_M * KC <= THREADS && (Q_M * KC) % 32 == 0,
              "shared_a loads its quarter with one 16-byte chunk per thread of whole warps");

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

// acc += A slice (T_M x T_K, stride A_PITCH) x B slice (T_K x 64) for this thread's
// 4 x 4 (rows ty + 16 i, columns 4 tx .. 4 tx + 3).
__device__ __forceinline__ void compute_slice(const float* a_slice, const float* b_slice, float acc[4][4]) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
    for (int k = 0; k < T_K; ++k) {
        const float4 b = *reinterpret_cast<const float4*>(&b_slice[k * T_N + tx * 4]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float a = a_slice[(ty + 16 * i) * A_PITCH + k];
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
            load_a_rows<T_M>(As + st * A_ELEMS, A_PITCH, A, M, K, bm, 0, slice * T_K);
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
        return reinterpret_cast<float4*>(&Awork[buf * A_ELEMS + (c / KC) * A_PITCH + (c % KC) * 4]);
    };
    auto issue = [&](int slice) {  // my B slice; past the last slice an empty group
        if (slice < slices) load_b(Bs + (slice % STAGES) * B_ELEMS, B, N, K, bn, slice * T_K);
        cp_async_commit();
    };
    // My quarter of a slice (rows bm + Q_M * rank .. + Q_M - 1): Q_M * KC chunks of 16
    // bytes, chunk t = threadIdx.x for the first QW warps (whole warps); the other warps
    // branch around the load, so a block executes QW warp-level LDGs per slice.
    constexpr int QW = Q_M * KC / 32;
    const bool quarter_warp = threadIdx.x < QW * 32;
    auto fetch_quarter = [&](int slice) {  // global -> registers (LDG.E.128); zeros past the edges of A
        const int row = bm + rank * Q_M + static_cast<int>(threadIdx.x) / KC, col = slice * T_K + (threadIdx.x % KC) * 4;
        const bool ok = row < M && col < K;
        const float4 v = *reinterpret_cast<const float4*>(ok ? &A[(size_t)row * K + col] : A);
        return ok ? v : make_float4(0.f, 0.f, 0.f, 0.f);
    };
    auto put_quarter = [&](int slice, float4 v) {  // registers -> my shared memory (STS.128)
        *reinterpret_cast<float4*>(&Aq[(slice % STAGES) * Q_ELEMS + (threadIdx.x / KC) * T_K + (threadIdx.x % KC) * 4]) = v;
    };

    // Entry.
#pragma unroll
    for (int p = 0; p < STAGES; ++p) issue(p);  // B of slices 0 .. STAGES-1
    if (quarter_warp) {
#pragma unroll 1
        for (int p = 0; p < 2 && p < slices; ++p) put_quarter(p, fetch_quarter(p));  // my quarters of slices 0, 1
    }
    cp_async_wait<STAGES - 1>();  // B of slice 0 has landed (my copies) ...
    __syncthreads();              // ... and everybody's
    cluster_arrive_release();     // P_entry: publishes my quarters of slices 0 and 1
    cluster_wait_acquire();       // all 4 blocks run and hold their quarters of slices 0 and 1
    if (slices > 0) {
#pragma unroll
        for (int i = 0; i < G; ++i) *work_at(0, i) = gather(0, i);
    }
    cp_async_wait<STAGES - 2>();  // B of slice 1 has landed (my copies)
    __syncthreads();              // Awork[0] is complete
    cluster_arrive_release();     // P_0

    for (int s = 0; s < slices; ++s) {
        cluster_wait_acquire();  // P_s: quarters of slice s+1 are in every rank; slices <= s gathered everywhere
        const bool more = s + 1 < slices;
        float4 v[G];
        if (more) {  // DSMEM loads of slice s+1
#pragma unroll
            for (int i = 0; i < G; ++i) v[i] = gather(s + 1, i);
        }
        // v is in flight during (the end of) compute(s): ptxas places the loads late to save
        // registers; the SM's other resident warps cover their latency.
        compute_slice(Awork + (s % 2) * A_ELEMS, Bs + (s % STAGES) * B_ELEMS, acc);
        if (more) {
#pragma unroll
            for (int i = 0; i < G; ++i) *work_at((s + 1) % 2, i) = v[i];
        }
        if (quarter_warp && s + 2 < slices)  // warp-uniform: my quarter of slice s+2, global -> registers ->
            put_quarter(s + 2, fetch_quarter(s + 2));  // shared; its stage was freed by P_s; published by P_{s+1}
        cp_async_wait<STAGES - 3>();  // B of slice s+2 has landed (my copies)
        __syncthreads();              // block-wide; Awork[(s+1)%2] complete; Bs[s%STAGES] free
        cluster_arrive_release();     // P_{s+1}
        issue(s + STAGES);            // B into stage s % STAGES (freed by the __syncthreads)
    }
    cluster_wait_acquire();  // P_S: no block reads my shared memory any more, so I may exit
    cp_async_wait<0>();      // (nothing is left in flight: the last groups are empty)
    store_c(C, M, N, bm, bn, acc);
}

}  // namespace

// Launch: kernels/cluster.py (grid over the 64 x 64 C tiles, N rounded up to whole
// clusters, cluster (CLUSTER, 1, 1), THREADS threads, dynamic shared memory
// OWN_A_SMEM_BYTES / SHARED_A_SMEM_BYTES).
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
