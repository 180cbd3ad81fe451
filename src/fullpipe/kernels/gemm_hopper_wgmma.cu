// fullpipe-requires: sm_90a (wgmma, TMA, mbarrier transaction counts)
// Hopper GEMM, rung 1: wgmma fed by a multistage cp.async ring.
//
// Technique: the tensor cores read both operands straight from shared memory
// (wgmma.mma_async, HGMMA in SASS) and run asynchronously from the issuing warps.
// Shared memory is filled the Ampere way: every thread copies 16-byte chunks with
// cp.async (LDGSTS) into a ring of STAGES slices, placing each chunk where the
// 128-byte swizzle wants it (swizzled_offset), so the layout is the one TMA writes in
// the next rungs and the wgmma descriptors are the same.
//
//   all 256 threads (2 warpgroups), for slice kt:
//     cp.async.wait_group  ->  fence.proxy.async  ->  __syncthreads    slice kt landed;
//                                                                      wgmma of kt-2 done
//     copy slice kt+LEAD into ring slot (kt+LEAD) % STAGES             (cp.async, 24 chunks/thread)
//     wgmma x4 on slot kt % STAGES; commit; wait until <= 1 group runs (kt-1 may still run)
//
// The proxy fence: cp.async writes through the generic proxy, wgmma reads through the
// async proxy, so each writer fences before the barrier. LEAD = STAGES - 2 slices are
// prefetched: the slot written at kt was last read by wgmma kt-2, which every
// warpgroup has retired (wait<1> at kt-1) before the barrier of kt.
//
// Kernels gemm_hopper_wgmma_{bf16,f16}: grid = tiles (grouped order), 256 threads,
// dynamic shared memory STAGES * 48 KiB (+1 KiB for alignment). K and N multiples of 8
// (whole 16-byte chunks; chunks past M, N or K are zero-filled).
#include <fullpipe/cp_async.cuh>
#include <fullpipe/gemm_hopper_tile.cuh>
#include <fullpipe/mbarrier.cuh>

static_assert(!B_K_MAJOR, "this rung reads a row-major B only (B given as w.T: the persistent rung)");

#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif

namespace {

using namespace fp_hopper;

constexpr int THREADS = CONSUMERS * 128;
constexpr int LEAD = STAGES - 2;

struct SharedStorage {
    Slice ring[STAGES];
};

// All threads copy one slice: A[128 x 64] = 1024 chunks, B[64 x 256] = 2048 chunks.
__device__ __forceinline__ void copy_slice(Slice& s, const unsigned short* A, const unsigned short* B, int M, int N,
                                           int K, int m0, int n0, int k0) {
#pragma unroll
    for (int i = 0; i < A_SLICE_BYTES / 16 / THREADS; ++i) {
        const int q = threadIdx.x + i * THREADS;
        const int r = q / 8, c = q % 8;
        const bool ok = m0 + r < M && k0 + 8 * c < K;
        const unsigned short* src = ok ? A + static_cast<long long>(m0 + r) * K + k0 + 8 * c : A;
        cp_async_16(s.a + swizzled_offset(r, c), src, ok);
    }
#pragma unroll
    for (int i = 0; i < B_SLICE_BYTES / 16 / THREADS; ++i) {
        const int q = threadIdx.x + i * THREADS;
        const int kr = q / 32, cc = q % 32;   // K row, 16-byte chunk along N (0..31)
        const bool ok = k0 + kr < K && n0 + 8 * cc < N;
        const unsigned short* src = ok ? B + static_cast<long long>(k0 + kr) * N + n0 + 8 * cc : B;
        cp_async_16(s.b + (cc / 8) * B_CHUNK_BYTES + swizzled_offset(kr, cc % 8), src, ok);
    }
}

template <bool BF16>
__device__ __forceinline__ void gemm_wgmma(const unsigned short* A, const unsigned short* B, unsigned short* C, int M,
                                           int N, int K) {
    extern __shared__ unsigned char smem_raw[];
    SharedStorage& smem = *reinterpret_cast<SharedStorage*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const TileCoord tile = grouped_tile(blockIdx.x, tiles_m, tiles_n, GROUP_M);
    const int m0 = tile.m * BM, n0 = tile.n * BN;
    const int wg = threadIdx.x / 128;
    const int slices = (K + BK - 1) / BK;

    float acc[ACC];
    zero(acc);

#pragma unroll
    for (int s = 0; s < LEAD; ++s) {
        if (s < slices) copy_slice(smem.ring[s], A, B, M, N, K, m0, n0, s * BK);
        cp_async_commit();
    }
    for (int kt = 0; kt < slices; ++kt) {
        cp_async_wait<LEAD - 1>();
        fp_mbar::fence_proxy_async_shared();
        __syncthreads();
        const int next = kt + LEAD;
        if (next < slices) copy_slice(smem.ring[next % STAGES], A, B, M, N, K, m0, n0, next * BK);
        cp_async_commit();

        fp_wgmma::fence();
        mma_slice<BF16>(acc, smem.ring[kt % STAGES], wg);
        fp_wgmma::commit();
        fp_wgmma::wait<1>();
        fp_wgmma::fence_accumulators(acc);
    }
    fp_wgmma::wait<0>();
    fp_wgmma::fence_accumulators(acc);
    store_accumulators<BF16>(C, acc, M, N, m0 + wg * WG_M, n0);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_wgmma_bf16(const unsigned short* A, const unsigned short* B, unsigned short* C, int M, int N, int K) {
    gemm_wgmma<true>(A, B, C, M, N, K);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_wgmma_f16(const unsigned short* A, const unsigned short* B, unsigned short* C, int M, int N, int K) {
    gemm_wgmma<false>(A, B, C, M, N, K);
}
