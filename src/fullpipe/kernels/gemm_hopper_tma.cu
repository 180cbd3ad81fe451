// fullpipe-requires: sm_90a (wgmma, TMA, mbarrier transaction counts)
// Hopper GEMM, rung 2: TMA into a multistage ring, every warp doing the same job.
//
// Technique: the slices arrive by cp.async.bulk.tensor (TMA, UTMALDG in SASS): one
// thread names a box of the tensor map and the SM's copy engine moves it, 128-byte
// swizzled, into shared memory. Completion is counted in bytes on the slot's mbarrier
// (arrive.expect_tx announces 48 KiB; the copies complete_tx them). This is double
// buffering with the copy engine: no role split, so a block-wide barrier per slice
// tells thread 0 when a slot may be refilled.
//
//   thread 0, first: for s < STAGES-1: arm full[s], TMA A box + 4 B boxes -> slot s
//   all 256 threads (2 warpgroups), for slice kt:
//     wait full[kt % STAGES] (parity (kt / STAGES) & 1)
//     wgmma x4 on that slot; commit; wait until <= 1 group runs  -> wgmma kt-1 retired
//     __syncthreads                                             -> in both warpgroups
//     thread 0: arm full, TMA slice kt+STAGES-1 -> slot (kt-1) % STAGES
//
// Tensor maps (hopper_gemm.py): A as {K, M} with box {64, 128}, B as {N, K} with box
// {64, 64}, both 128-byte swizzled, out-of-bounds boxes zero-filled; passed as
// __grid_constant__ parameters.
//
// Kernels gemm_hopper_tma_{bf16,f16}: grid = tiles (grouped order), 256 threads,
// dynamic shared memory STAGES * 48 KiB + 1 KiB (alignment and barriers).
#include <fullpipe/gemm_hopper_tile.cuh>
#include <fullpipe/mbarrier.cuh>
#include <fullpipe/tma.cuh>

static_assert(!B_K_MAJOR, "this rung reads a row-major B only (B given as w.T: the persistent rung)");

#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif

namespace {

using namespace fp_hopper;
using fp_tma::TensorMap;

constexpr int THREADS = CONSUMERS * 128;

struct SharedStorage {
    Slice ring[STAGES];
    unsigned long long full[STAGES];   // slot holds slice (tx bytes landed)
};

// Thread 0: arm the slot's barrier with the slice's bytes and start its 5 boxes.
__device__ __forceinline__ void issue_slice(SharedStorage& smem, int slot, const TensorMap* map_a,
                                            const TensorMap* map_b, int m0, int n0, int k0) {
    Slice& s = smem.ring[slot];
    unsigned long long* bar = &smem.full[slot];
    fp_mbar::mbar_arrive_expect_tx(bar, SLICE_BYTES);
    fp_tma::load_2d(s.a, map_a, bar, k0, m0);
#pragma unroll
    for (int c = 0; c < BN / CHUNK_N; ++c) fp_tma::load_2d(s.b + c * B_CHUNK_BYTES, map_b, bar, n0 + c * CHUNK_N, k0);
}

template <bool BF16>
__device__ __forceinline__ void gemm_tma(const TensorMap* map_a, const TensorMap* map_b, unsigned short* C, int M,
                                         int N, int K) {
    extern __shared__ unsigned char smem_raw[];
    SharedStorage& smem = *reinterpret_cast<SharedStorage*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const TileCoord tile = grouped_tile(blockIdx.x, tiles_m, tiles_n, GROUP_M);
    const int m0 = tile.m * BM, n0 = tile.n * BN;
    const int wg = threadIdx.x / 128;
    const int slices = (K + BK - 1) / BK;

    if (threadIdx.x == 0) {
        fp_tma::prefetch_map(map_a);
        fp_tma::prefetch_map(map_b);
        for (int s = 0; s < STAGES; ++s) fp_mbar::mbar_init(&smem.full[s], 1);
        fp_mbar::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES - 1 && s < slices; ++s) issue_slice(smem, s, map_a, map_b, m0, n0, s * BK);
    }

    float acc[ACC];
    zero(acc);
    for (int kt = 0; kt < slices; ++kt) {
        const int slot = kt % STAGES;
        fp_mbar::mbar_wait(&smem.full[slot], (kt / STAGES) & 1);
        fp_wgmma::fence();
        mma_slice<BF16>(acc, smem.ring[slot], wg);
        fp_wgmma::commit();
        fp_wgmma::wait<1>();
        fp_wgmma::fence_accumulators(acc);
        __syncthreads();
        const int next = kt + STAGES - 1;
        if (threadIdx.x == 0 && next < slices) issue_slice(smem, next % STAGES, map_a, map_b, m0, n0, next * BK);
    }
    fp_wgmma::wait<0>();
    fp_wgmma::fence_accumulators(acc);
    store_accumulators<BF16>(C, acc, M, N, m0 + wg * WG_M, n0);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_tma_bf16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                     unsigned short* C, int M, int N, int K) {
    gemm_tma<true>(&map_a, &map_b, C, M, N, K);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_tma_f16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                    unsigned short* C, int M, int N, int K) {
    gemm_tma<false>(&map_a, &map_b, C, M, N, K);
}
