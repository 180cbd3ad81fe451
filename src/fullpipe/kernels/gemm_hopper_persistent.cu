// fullpipe-requires: sm_90a (wgmma, TMA, mbarrier transaction counts)
// Hopper GEMM, rung 4: persistent, clusters of 2 with TMA multicast, TMA-store epilogue.
//
// Technique: rung 3's roles (a TMA producer warpgroup, two wgmma consumer warpgroups,
// full/empty mbarriers, setmaxnreg), plus
//   * persistent blocks: the grid is as many 2-block clusters as fit on the GPU; each
//     cluster walks the cluster tiles t = cluster, cluster + clusters, ... in grouped
//     order (TileScheduler), and the producer runs ahead into the next tile while the
//     consumers finish the current one (the ring and its phases continue across tiles);
//   * a cluster of 2 blocks side by side along M computes a 256 x 256 tile: both need
//     the same B slice, so each block loads half of it (two 64-wide chunks) with
//     multicast::cluster into the same offset of both blocks' shared memory and
//     signals both blocks' full[] barrier: B is read from L2 once per cluster;
//   * the epilogue goes through shared memory: each consumer warpgroup writes its
//     64 x 256 result in 64 x 64 pieces (128-byte swizzled, two buffers) and one thread
//     stores each piece with a TMA store (UTMASTG), which clips at the matrix edges.
//
//   warpgroup 0   PRODUCER  one thread, per slice: wait empty[s] (released by all 4
//                 consumer warpgroups of the cluster) -> arm full[s] with 48 KiB ->
//                 TMA A[128 x 64] (own rows) + multicast B chunks {2r, 2r+1}
//   warpgroups    CONSUMERS wait full[s] -> wgmma x4 -> commit -> wait <= 1 ->
//   1 and 2       arrive on empty[] of the slice before in *both* blocks (mapa +
//                 remote arrive, fp_tma::arrive_remote): the peer's next multicast
//                 writes into this slot too
//
// The slot a multicast fills in the peer must be free there as well, which is why
// empty[s] counts CONSUMERS x CLUSTER arrivals. full[s] may receive the peer's bytes
// before this block's producer armed it: the phase cannot complete before that arrival,
// so the early bytes are simply counted. Both blocks sync as a cluster after the
// barriers are initialized and again before exiting (no block may leave while its peer
// can still write into its shared memory or arrive on its barriers).
//
// Kernels gemm_hopper_persistent_{bf16,f16}: grid = 2 x clusters, cluster (2, 1, 1),
// 384 threads, dynamic shared memory STAGES * 48 KiB + 32 KiB + 1 KiB.
#include <fullpipe/gemm_hopper_tile.cuh>
#include <fullpipe/mbarrier.cuh>
#include <fullpipe/tma.cuh>

#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
// MULTICAST=0 builds the comparison point: the same cluster launch, but every block
// loads all of B itself (no multicast, empty[] local), so ncu and the timings show
// what multicast saves.
#ifndef MULTICAST
#define MULTICAST 1
#endif

namespace {

using namespace fp_hopper;
using fp_tma::TensorMap;

constexpr int CLUSTER = 2;
constexpr int THREADS = (1 + CONSUMERS) * 128;
constexpr int PRODUCER_REGS = 40;
constexpr int CONSUMER_REGS = 232;
constexpr int OUT_N = 64;                             // columns per TMA store (128 bytes)
constexpr int OUT_BYTES = WG_M * OUT_N * ELEM;        // 8 KiB
constexpr int B_CHUNKS_PER_BLOCK = MULTICAST ? BN / CHUNK_N / CLUSTER : BN / CHUNK_N;
constexpr int RELEASES = MULTICAST ? CLUSTER : 1;   // blocks whose empty[] a consumer signals

struct alignas(1024) OutBuffer {
    unsigned char bytes[OUT_BYTES];                   // 64 rows x 128 bytes, swizzled
};

struct SharedStorage {
    Slice ring[STAGES];
    OutBuffer out[CONSUMERS][2];                      // double-buffered epilogue pieces
    unsigned long long full[STAGES];                  // slice landed (own A + both B halves)
    unsigned long long empty[STAGES];                 // slot free in both blocks
};

// Cluster tiles (256 x 256: two 128-row block tiles sharing B) in grouped order.
struct TileScheduler {
    int cluster_rows, tiles_n, total;
    int first, stride;
    unsigned rank;

    __device__ TileScheduler(int M, int N) {
        cluster_rows = (M + CLUSTER * BM - 1) / (CLUSTER * BM);
        tiles_n = (N + BN - 1) / BN;
        total = cluster_rows * tiles_n;
        first = blockIdx.x / CLUSTER;
        stride = gridDim.x / CLUSTER;
        rank = fp_tma::cluster_rank();
    }
    // This block's tile origin for cluster tile t.
    __device__ __forceinline__ void origin(int t, int& m0, int& n0) const {
        const TileCoord c = grouped_tile(t, cluster_rows, tiles_n, GROUP_M);
        m0 = (c.m * CLUSTER + static_cast<int>(rank)) * BM;
        n0 = c.n * BN;
    }
};

__device__ __forceinline__ void producer(SharedStorage& smem, const TensorMap* map_a, const TensorMap* map_b,
                                         const TileScheduler& sched, int slices) {
    const unsigned short both = (1u << CLUSTER) - 1;
    int it = 0;   // slices issued by this block, over all its tiles
    for (int t = sched.first; t < sched.total; t += sched.stride) {
        int m0, n0;
        sched.origin(t, m0, n0);
        for (int kt = 0; kt < slices; ++kt, ++it) {
            const int slot = it % STAGES;
            fp_mbar::mbar_wait(&smem.empty[slot], ((it / STAGES) & 1) ^ 1);
            Slice& s = smem.ring[slot];
            unsigned long long* full = &smem.full[slot];
            fp_mbar::mbar_arrive_expect_tx(full, SLICE_BYTES);
            fp_tma::load_2d(s.a, map_a, full, kt * BK, m0);
#pragma unroll
            for (int i = 0; i < B_CHUNKS_PER_BLOCK; ++i) {
                if constexpr (MULTICAST) {
                    const int c = static_cast<int>(sched.rank) * B_CHUNKS_PER_BLOCK + i;
                    fp_tma::load_2d_multicast(s.b + c * B_CHUNK_BYTES, map_b, full, n0 + c * CHUNK_N, kt * BK, both);
                } else {
                    fp_tma::load_2d(s.b + i * B_CHUNK_BYTES, map_b, full, n0 + i * CHUNK_N, kt * BK);
                }
            }
        }
    }
}

// Both blocks' empty[slot]: this warpgroup is done reading the slot.
__device__ __forceinline__ void release(SharedStorage& smem, int slot) {
    if constexpr (MULTICAST) {
#pragma unroll
        for (int cta = 0; cta < CLUSTER; ++cta) fp_tma::arrive_remote(&smem.empty[slot], cta);
    } else {
        fp_mbar::mbar_arrive(&smem.empty[slot]);
    }
}

// The warpgroup's 64 x 256 result: four 64 x 64 pieces through shared memory, each
// stored by one TMA store; a buffer is rewritten only once its previous store read it.
template <bool BF16>
__device__ __forceinline__ void epilogue(SharedStorage& smem, const TensorMap* map_c, const float (&acc)[128],
                                         int wg, int row0, int n0) {
    const int t = threadIdx.x % 128;
    const int warp = t / 32, lane = t % 32;
    const bool leader = t == 0;
    const unsigned barrier_id = 1 + wg;   // named barrier of this warpgroup
#pragma unroll
    for (int piece = 0; piece < BN / OUT_N; ++piece) {
        unsigned char* buf = smem.out[wg][piece & 1].bytes;
        if (leader) fp_tma::store_wait_read<1>();
        fp_tma::named_barrier_sync(barrier_id, 128);
#pragma unroll
        for (int j8 = 0; j8 < OUT_N / 8; ++j8) {
            const int j = piece * (OUT_N / 8) + j8;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp * 16 + lane / 4 + 8 * h;
                *reinterpret_cast<unsigned*>(buf + swizzled_offset(r, j8) + (lane % 4) * 4) =
                    pack2<BF16>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            }
        }
        fp_mbar::fence_proxy_async_shared();
        fp_tma::named_barrier_sync(barrier_id, 128);
        if (leader) {
            fp_tma::store_2d(map_c, buf, n0 + piece * OUT_N, row0);
            fp_tma::store_commit();
        }
    }
}

template <bool BF16>
__device__ __forceinline__ void consumer(SharedStorage& smem, const TensorMap* map_c, const TileScheduler& sched,
                                         int slices, int wg) {
    const bool signals = threadIdx.x % 128 == 0;
    float acc[128];
    int it = 0;   // slices consumed, over all tiles
    for (int t = sched.first; t < sched.total; t += sched.stride) {
        int m0, n0;
        sched.origin(t, m0, n0);
        zero(acc);
        for (int kt = 0; kt < slices; ++kt, ++it) {
            const int slot = it % STAGES;
            fp_mbar::mbar_wait(&smem.full[slot], (it / STAGES) & 1);
            fp_wgmma::fence();
            mma_slice<BF16>(acc, smem.ring[slot], wg);
            fp_wgmma::commit();
            fp_wgmma::wait<1>();
            fp_wgmma::fence_accumulators(acc);
            if (signals && kt > 0) release(smem, (it - 1) % STAGES);
        }
        fp_wgmma::wait<0>();
        fp_wgmma::fence_accumulators(acc);
        if (signals) release(smem, (it - 1) % STAGES);
        epilogue<BF16>(smem, map_c, acc, wg, m0 + wg * WG_M, n0);
    }
    if (threadIdx.x % 128 == 0) fp_tma::store_wait<0>();
}

template <bool BF16>
__device__ __forceinline__ void gemm_persistent(const TensorMap* map_a, const TensorMap* map_b,
                                                const TensorMap* map_c, int M, int N, int K) {
    extern __shared__ unsigned char smem_raw[];
    SharedStorage& smem = *reinterpret_cast<SharedStorage*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    const TileScheduler sched(M, N);
    const int slices = (K + BK - 1) / BK;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        fp_tma::prefetch_map(map_a);
        fp_tma::prefetch_map(map_b);
        fp_tma::prefetch_map(map_c);
        for (int s = 0; s < STAGES; ++s) {
            fp_mbar::mbar_init(&smem.full[s], 1);
            fp_mbar::mbar_init(&smem.empty[s], CONSUMERS * RELEASES);
        }
        fp_mbar::fence_barrier_init();
    }
    fp_tma::cluster_sync();   // both blocks' barriers exist before any multicast / remote arrive

    if (wg == 0) {
        fp_wgmma::release_registers<PRODUCER_REGS>();
        if (threadIdx.x == 0) producer(smem, map_a, map_b, sched, slices);
        __syncwarp();
    } else {
        fp_wgmma::claim_registers<CONSUMER_REGS>();
        consumer<BF16>(smem, map_c, sched, slices, wg - 1);
    }
    fp_tma::cluster_sync();   // the peer no longer writes here nor arrives on our barriers
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_persistent_bf16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                            const __grid_constant__ TensorMap map_c, int M, int N, int K) {
    gemm_persistent<true>(&map_a, &map_b, &map_c, M, N, K);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_hopper_persistent_f16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                           const __grid_constant__ TensorMap map_c, int M, int N, int K) {
    gemm_persistent<false>(&map_a, &map_b, &map_c, M, N, K);
}
