// fullpipe-requires: sm_90a (wgmma, TMA, mbarrier transaction counts)
// Hopper GEMM, rung 3: warp specialization — a TMA producer and two wgmma consumers.
//
// Technique: permanent roles in one block of 3 warpgroups, joined by a full/empty
// mbarrier pair per ring slot; no block-wide barrier in the main loop.
//
//   warpgroup 0   PRODUCER  (gives registers back: setmaxnreg.dec to 40)
//                 one thread: for slice kt: wait empty[s] -> arm full[s] with 48 KiB
//                 -> TMA A box + 4 B boxes into slot s                 ----+
//                                                                          | ring of STAGES
//   warpgroups    CONSUMERS (take registers: setmaxnreg.inc to 232)    <---+ slots
//   1 and 2       wait full[s] -> wgmma x4 (64 x 256 each) -> commit -> wait until
//                 <= 1 group runs -> one thread arrives on empty[] of the slice
//                 before (its wgmma is retired); epilogue from registers
//
// Phases: slice kt lives in slot s = kt % STAGES and is that slot's u = kt / STAGES-th
// use. Consumers wait full[s] on parity u & 1; the producer waits empty[s] on parity
// (u & 1) ^ 1, which a fresh barrier satisfies at once (its "previous" phase counts as
// complete), so the first STAGES slices go out unhindered. empty[s] expects one
// arrival per consumer warpgroup.
//
// Registers: __launch_bounds__(384, 1) caps every thread at 168 at entry; the producer
// warpgroup drops to 40 and the consumers rise to 232 (40*128 + 2*232*128 <= 64K), so
// the 128 fp32 accumulators and the descriptors fit without spills (USETMAXREG in SASS).
//
// Kernels gemm_hopper_ws_{bf16,f16}: grid = tiles (grouped order), 384 threads,
// dynamic shared memory STAGES * 48 KiB + 1 KiB. Tensor maps as in gemm_hopper_tma.cu.
//
// Build option ROLE_STAMPS (off by default; hopper_gemm.gemm_hopper_role_stamps): the
// first ROLE_STAMP_BLOCKS blocks write %globaltimer stamps of what each role does, to
// draw the roles' activity over time. One extra kernel parameter, ``stamps``; per block
// (ROLE_STAMP_WORDS(slices) words): [0] block start, [1] block end, [2] %smid; then the
// producer's (wait for a free slot, TMA issued) per slice; then per consumer warpgroup
// (wait for the slice, slice landed, its wgmma retired) per slice and (epilogue start,
// end). A stamp costs a few cycles; the roles' work is unchanged.
#include <fullpipe/gemm_hopper_tile.cuh>
#include <fullpipe/mbarrier.cuh>
#include <fullpipe/tma.cuh>

static_assert(!B_K_MAJOR, "this rung reads a row-major B only (B given as w.T: the persistent rung)");

#ifdef ROLE_STAMPS
#include <fullpipe/timer.cuh>
#ifndef ROLE_STAMP_BLOCKS
#define ROLE_STAMP_BLOCKS 4
#endif
#define ROLE_STAMP_WORDS(slices) (3 + 2 * (slices) + CONSUMERS * (3 * (slices) + 2))
#define STAMP(ptr, i) do { if (ptr) (ptr)[i] = fp_globaltimer_ns(); } while (0)
#else
#define STAMP(ptr, i) do { } while (0)
#endif

#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif

namespace {

using namespace fp_hopper;
using fp_tma::TensorMap;

constexpr int THREADS = (1 + CONSUMERS) * 128;
constexpr int PRODUCER_REGS = 40;
constexpr int CONSUMER_REGS = 232;

struct SharedStorage {
    Slice ring[STAGES];
    unsigned long long full[STAGES];    // producer -> consumers: slice landed (tx bytes)
    unsigned long long empty[STAGES];   // consumers -> producer: slot read by both warpgroups
};

struct Problem {
    int M, N, K;
    int m0, n0;
    int slices;
};

// stamps: this role's stamps in the block's record, or null (not a stamped block or build)
__device__ __forceinline__ void producer(SharedStorage& smem, const TensorMap* map_a, const TensorMap* map_b,
                                         const Problem& p, unsigned long long* stamps) {
    for (int kt = 0; kt < p.slices; ++kt) {
        const int slot = kt % STAGES;
        const unsigned use = kt / STAGES;
        STAMP(stamps, 2 * kt);
        fp_mbar::mbar_wait(&smem.empty[slot], (use & 1) ^ 1);
        Slice& s = smem.ring[slot];
        unsigned long long* full = &smem.full[slot];
        fp_mbar::mbar_arrive_expect_tx(full, SLICE_BYTES);
        fp_tma::load_2d(s.a, map_a, full, kt * BK, p.m0);
#pragma unroll
        for (int c = 0; c < BN / CHUNK_N; ++c)
            fp_tma::load_2d(s.b + c * B_CHUNK_BYTES, map_b, full, p.n0 + c * CHUNK_N, kt * BK);
        STAMP(stamps, 2 * kt + 1);
    }
}

template <bool BF16>
__device__ __forceinline__ void consumer(SharedStorage& smem, int wg, unsigned short* C, const Problem& p,
                                         unsigned long long* stamps) {
    const bool signals = threadIdx.x % 128 == 0;   // one arrival per warpgroup on empty[]
    float acc[ACC];
    zero(acc);
    for (int kt = 0; kt < p.slices; ++kt) {
        const int slot = kt % STAGES;
        STAMP(stamps, 3 * kt);
        fp_mbar::mbar_wait(&smem.full[slot], (kt / STAGES) & 1);
        STAMP(stamps, 3 * kt + 1);
        fp_wgmma::fence();
        mma_slice<BF16>(acc, smem.ring[slot], wg);
        fp_wgmma::commit();
        fp_wgmma::wait<1>();                       // slice kt-1's wgmma retired
        fp_wgmma::fence_accumulators(acc);
        if (kt > 0) STAMP(stamps, 3 * (kt - 1) + 2);
        if (signals && kt > 0) fp_mbar::mbar_arrive(&smem.empty[(kt - 1) % STAGES]);
    }
    fp_wgmma::wait<0>();
    fp_wgmma::fence_accumulators(acc);
    STAMP(stamps, 3 * (p.slices - 1) + 2);
    STAMP(stamps, 3 * p.slices);
    store_accumulators<BF16>(C, acc, p.M, p.N, p.m0 + wg * WG_M, p.n0);
    STAMP(stamps, 3 * p.slices + 1);
}

template <bool BF16>
__device__ __forceinline__ void gemm_ws(const TensorMap* map_a, const TensorMap* map_b, unsigned short* C, int M,
                                        int N, int K, unsigned long long* stamps) {
    extern __shared__ unsigned char smem_raw[];
    SharedStorage& smem = *reinterpret_cast<SharedStorage*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const TileCoord tile = grouped_tile(blockIdx.x, tiles_m, tiles_n, GROUP_M);
    const Problem p{M, N, K, tile.m * BM, tile.n * BN, (K + BK - 1) / BK};
    const int wg = threadIdx.x / 128;
    unsigned long long* mine = nullptr;  // this block's stamp record (stamped builds, first blocks)
#ifdef ROLE_STAMPS
    if (stamps && blockIdx.x < ROLE_STAMP_BLOCKS) {
        mine = stamps + static_cast<long long>(blockIdx.x) * ROLE_STAMP_WORDS(p.slices);
        if (threadIdx.x == 0) {
            STAMP(mine, 0);
            unsigned smid;
            asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
            mine[2] = smid;
        }
    }
#endif

    if (threadIdx.x == 0) {
        fp_tma::prefetch_map(map_a);
        fp_tma::prefetch_map(map_b);
        for (int s = 0; s < STAGES; ++s) {
            fp_mbar::mbar_init(&smem.full[s], 1);
            fp_mbar::mbar_init(&smem.empty[s], CONSUMERS);
        }
        fp_mbar::fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {
        fp_wgmma::release_registers<PRODUCER_REGS>();
        if (threadIdx.x == 0) producer(smem, map_a, map_b, p, mine ? mine + 3 : nullptr);
    } else {
        fp_wgmma::claim_registers<CONSUMER_REGS>();
        const bool stamper = mine && threadIdx.x % 128 == 0;
        consumer<BF16>(smem, wg - 1, C, p,
                       stamper ? mine + 3 + 2 * p.slices + (wg - 1) * (3 * p.slices + 2) : nullptr);
    }
#ifdef ROLE_STAMPS
    if (mine) {
        __syncthreads();
        if (threadIdx.x == 0) STAMP(mine, 1);
    }
#endif
}

}  // namespace

#ifdef ROLE_STAMPS
#define STAMPS_PARAM , unsigned long long* stamps
#define STAMPS_ARG stamps
#else
#define STAMPS_PARAM
#define STAMPS_ARG nullptr
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_ws_bf16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                    unsigned short* C, int M, int N, int K STAMPS_PARAM) {
    gemm_ws<true>(&map_a, &map_b, C, M, N, K, STAMPS_ARG);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_ws_f16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                   unsigned short* C, int M, int N, int K STAMPS_PARAM) {
    gemm_ws<false>(&map_a, &map_b, C, M, N, K, STAMPS_ARG);
}
