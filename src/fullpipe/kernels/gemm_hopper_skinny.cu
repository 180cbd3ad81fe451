// fullpipe-requires: sm_90a (wgmma, TMA, mbarrier transaction counts)
// Skinny Hopper GEMM: C[M, N] = A[M, K] @ B[K, N] for a few rows (M <= 128: a decode
// step's requests times a weight matrix). Such a product reads all of B for little
// arithmetic, so what counts is B streaming from memory on every SM at once.
//
// Technique: the product computed transposed, C^T = B^T A^T, so that B's wide side is
// wgmma's M and the few rows are its N (m64nROWSk16): no tensor-core work is spent on
// rows that do not exist (128-row tiles of the square kernels compute 120 of 128 rows
// on zeros at M = 8). A B slice arrives by TMA as the square kernels load it (64 x 64
// boxes, 128-byte swizzle) and is read as the transposed A operand (imm-trans-a 1); the
// activations' slice is the K-major B operand.
//
//   warp 4      PRODUCER  the warp, one lane issuing (fp_tma::elect_one), per K slice:
//                         wait empty[s] -> arm full[s] with its bytes -> TMA B[64 x TILE_N]
//                         (TILE_N / 64 chunks) + A's rows (a_rows_loaded: ROWS, or M
//                         rounded up to 8 where a ROWS box would hang far past M)
//   warps 0-3   CONSUMER  one warpgroup: wait full[s] -> TILE_N / 64 x 4 wgmma (each 64
//                         columns of C x ROWS rows) -> commit -> wait <= 1 -> free the
//                         slot before
//
// Split-K in a cluster: a tile's K is cut into `runs` equal runs (2..8) so that enough
// blocks stream B at once (8 x 4096 x 4096 has 64 tiles of 64 columns: 2 runs each on
// 132 SMs), and the runs of one tile are one cluster of blocks. Block rank r of cluster x
// takes columns [TILE_N x, TILE_N (x + 1)) and run r. After the main loop each block leaves its
// fp32 sums in its own shared memory (the ring, read out by then); rank 0 reads them over
// DSMEM in rank order, adds them to its own and stores C. No global workspace, no
// counters to zero, and the same bits on every run.
//
// B_K_MAJOR=1 builds take B as the transpose of a row-major N x K matrix (an nn.Linear
// weight W, the product x @ W^T): map_b then reads W in 64 x 64 boxes (64 of its rows,
// 64 along K), which land exactly as the K-major A operand wants them (imm-trans-a 0),
// with no copy of W.
//
// A's rows: M rounded up to 8, loaded as boxes of 64, 32, 16 and 8 rows (a_edges, one for
// each bit of it) where a ROWS-row box would hang more than 16 rows past M: on an
// H200 (session 40, p278) 33 x 4096 x 4096 ran 14.9 us with its 64-row box, 8.8 with A's
// map over 64 allocated rows. The slot's rows past those keep what an earlier slice left:
// they reach only rows of C past M, which store_c skips (and the cluster's sums add them
// only to the same places).
//
// Kernels gemm_hopper_skinny_{bf16,f16}(map_a, map_b, a_edges, C, M, N, K, slices_per_run):
// grid tiles x runs (tiles = ceil(N / TILE_N)), cluster (runs, 1, 1), 160 threads,
// dynamic shared memory STAGES * (TILE_N + ROWS) * 128 B + 1 KiB; tensor maps: A boxes
// of ROWS x 64, B boxes of 64 x 64, both 128-byte swizzled. Builds: ROWS, TILE_N (128 or
// 64) and STAGES (skinny_gemm.columns_build picks 64 columns and 8 slices where 64-column
// tiles fit one wave).
#include <fullpipe/mbarrier.cuh>
#include <fullpipe/tma.cuh>
#include <fullpipe/wgmma.cuh>

#ifndef ROWS
#define ROWS 8   // M rounded up: wgmma's N, 8, 16, 32, 64 or 128
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef TILE_N
#define TILE_N 128   // columns of C per block: 128 (two 64-wide wgmma blocks) or 64
#endif
#ifndef B_K_MAJOR
#define B_K_MAJOR 0  // 1: B is W^T for a row-major N x K matrix W (map_b over W)
#endif

namespace {

using fp_tma::TensorMap;

static_assert(ROWS == 8 || ROWS == 16 || ROWS == 32 || ROWS == 64 || ROWS == 128, "ROWS: 8, 16, 32, 64 or 128");
static_assert(TILE_N == 128 || TILE_N == 64, "TILE_N: 128 or 64");
constexpr int BK = 64;                              // K per slice (one 128-byte swizzled row)
constexpr int CHUNK_N = 64;                         // B columns per TMA box
constexpr int CHUNKS = TILE_N / CHUNK_N;
constexpr int MMA_K = 16;
constexpr int B_CHUNK_BYTES = BK * CHUNK_N * 2;     // 8 KiB
constexpr int A_BYTES = ROWS * BK * 2;              // ROWS x 128 bytes (>= one 1 KiB swizzle atom)
constexpr int B_SLICE_BYTES = CHUNKS * B_CHUNK_BYTES;
constexpr int ACC = ROWS / 2;                       // fp32 accumulators per thread and 64-column block
constexpr int CONSUMER_THREADS = 128;
constexpr int THREADS = CONSUMER_THREADS + 32;

// One K slice: B[64 x TILE_N] as 64-column chunks (K-rows of 128 bytes), then A[ROWS x
// 64] (rows of 128 bytes); every part a whole number of 1 KiB swizzle atoms.
struct alignas(1024) Slice {
    unsigned char b[CHUNKS][B_CHUNK_BYTES];
    unsigned char a[A_BYTES];
};

struct SharedStorage {
    Slice ring[STAGES];                 // after the main loop: this block's sums (add_cluster_sums)
    unsigned long long full[STAGES];    // producer -> consumer: the slice landed
    unsigned long long empty[STAGES];   // consumer -> producer: the slot was read
};

// A block's fp32 sums in its shared memory for rank 0 of its cluster: chunk by chunk,
// its ACC accumulators per thread as float4, thread-minor (conflict-free, and read by the
// thread of the same place in rank 0).
constexpr int VEC = ACC / 4;   // float4 per thread and chunk
static_assert(CHUNKS * VEC * 16 * CONSUMER_THREADS <= STAGES * static_cast<int>(sizeof(Slice)),
              "the sums fit in the ring");

struct Run {
    int n0;            // first column of C
    int k_begin;       // first K slice
    int slices;        // K slices in this run
};

// A's rows the producer loads per slice: all ROWS (one box) where M leaves at most 16 of them
// empty, else M rounded up to 8. (Cut into 2-4 boxes, 120 x 4096 x 4096 ran 0.87x, 24 x
// 8192 x 2048 0.92x and 48 x 2048 x 8192 0.91x the time of one box hanging 8, 8 and 16 rows;
// 33 x 4096 x 4096 1.51x, 72 x 4096 x 4096 1.67x faster than one hanging 31 and 56: p279.)
// Only the 64- and 128-row builds ever cut (M > ROWS / 2 in every build).
constexpr int EDGE_HANG = 16;
constexpr bool CUTS_A = ROWS - EDGE_HANG > ROWS / 2;
__device__ __forceinline__ int a_rows_loaded(int M) {
    return !CUTS_A || M >= ROWS - EDGE_HANG ? ROWS : (M + 7) / 8 * 8;
}

__device__ __forceinline__ void producer(SharedStorage& smem, const TensorMap* map_a, const TensorMap* map_b,
                                         const fp_tma::EdgeMaps* a_edges, const Run& r, int M) {
    const int a_rows = a_rows_loaded(M);
    const int bytes = B_SLICE_BYTES + a_rows * 128;
#pragma unroll 1
    for (int i = 0; i < r.slices; ++i) {
        const int slot = i % STAGES;
        fp_mbar::mbar_wait(&smem.empty[slot], ((i / STAGES) & 1) ^ 1);
        if (!fp_tma::elect_one()) continue;
        Slice& s = smem.ring[slot];
        unsigned long long* full = &smem.full[slot];
        const int k = (r.k_begin + i) * BK;
        fp_mbar::mbar_arrive_expect_tx(full, bytes);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            if constexpr (B_K_MAJOR) {
                fp_tma::load_2d(s.b[c], map_b, full, k, r.n0 + c * CHUNK_N);   // W's rows n0 + 64c ..
            } else {
                fp_tma::load_2d(s.b[c], map_b, full, r.n0 + c * CHUNK_N, k);   // B's K-rows k ..
            }
        }
        if (!CUTS_A || a_rows == ROWS) {
            fp_tma::load_2d(s.a, map_a, full, k, 0);
        } else {
#pragma unroll
            for (int e = 0; e < fp_tma::EDGE_BOXES; ++e) {   // a box of 64 >> e rows for each bit of a_rows
                const int n = 64 >> e;
                const int row = a_rows & -(2 * n);   // the rows of the larger boxes before it
                if (n < ROWS && (a_rows & n)) fp_tma::load_2d(s.a + row * 128, &a_edges->box[e], full, k, row);
            }
        }
    }
}

// One slice: for each 64-column chunk of B, D[64 columns x ROWS] += B^T[64 x 16] A^T[16 x ROWS]
// over the slice's 4 K-steps. B^T is the chunk read MN-major (its 64 columns contiguous,
// 8-row swizzle atoms 1 KiB apart along K), or with B_K_MAJOR W's 64 rows read K-major
// (atoms 1 KiB apart along N, a K-step 32 bytes on); A^T the activations' rows read K-major.
template <bool BF16>
__device__ __forceinline__ void mma_slice(float (&acc)[CHUNKS][ACC], const Slice& s) {
#pragma unroll
    for (int kk = 0; kk < BK / MMA_K; ++kk) {
        const unsigned long long da_rows = fp_wgmma::desc_k_major(s.a + kk * MMA_K * 2);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            if constexpr (B_K_MAJOR) {
                const unsigned long long dw_rows = fp_wgmma::desc_k_major(s.b[c] + kk * MMA_K * 2);
                fp_wgmma::mma_ss_k_k_narrow<BF16>(acc[c], dw_rows, da_rows, 1);
            } else {
                const unsigned long long db_cols = fp_wgmma::desc_mn_major(s.b[c] + kk * MMA_K * 128, B_CHUNK_BYTES);
                fp_wgmma::mma_ss_mn_k<BF16>(acc[c], db_cols, da_rows, 1);
            }
        }
    }
}

template <bool BF16>
__device__ __forceinline__ unsigned short to_half(float x) {
    unsigned short h;
    if constexpr (BF16) {
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    } else {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    }
    return h;
}

// C from the (transposed) accumulators: thread (warp w, lane l) holds, for chunk c and
// place 4j + 2h + e, column n0 + 64c + 16w + l/4 + 8h of row 8j + 2(l%4) + e.
template <bool BF16>
__device__ __forceinline__ void store_c(unsigned short* C, const float (&acc)[CHUNKS][ACC], int M, int N, int n0) {
    const int t = threadIdx.x;
    const int warp = t / 32, lane = t % 32;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
        for (int j = 0; j < ROWS / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = n0 + c * CHUNK_N + 16 * warp + lane / 4 + 8 * h;
                    const int m = 8 * j + 2 * (lane % 4) + e;
                    if (m < M && n < N) C[static_cast<long long>(m) * N + n] = to_half<BF16>(acc[c][4 * j + 2 * h + e]);
                }
}

// Accumulators 4i .. 4i + 3 of chunk c as a float4, and back (c, i constants after
// unrolling: the accumulators stay in registers).
__device__ __forceinline__ float4 get4(const float (&acc)[CHUNKS][ACC], int c, int i) {
    return make_float4(acc[c][4 * i], acc[c][4 * i + 1], acc[c][4 * i + 2], acc[c][4 * i + 3]);
}
__device__ __forceinline__ void add4(float (&acc)[CHUNKS][ACC], int c, int i, float4 v) {
    acc[c][4 * i] += v.x;
    acc[c][4 * i + 1] += v.y;
    acc[c][4 * i + 2] += v.z;
    acc[c][4 * i + 3] += v.w;
}

// Split-K: every block leaves its sums in its ring; rank 0 adds its peers' over DSMEM,
// chunk by chunk, in rank order (GROUP ranks' loads in flight at once, 16 per thread),
// then releases them. Every thread of the cluster's blocks comes here (the cluster
// barriers count them all).
__device__ __forceinline__ void add_cluster_sums(SharedStorage& smem, float (&acc)[CHUNKS][ACC], bool consumer,
                                                 unsigned rank, unsigned runs) {
    float4* mine = reinterpret_cast<float4*>(smem.ring) + threadIdx.x;
    if (consumer && rank > 0) {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
            for (int i = 0; i < VEC; ++i) mine[(c * VEC + i) * CONSUMER_THREADS] = get4(acc, c, i);
    }
    fp_tma::cluster_sync();                 // every block's sums are in place
    if (consumer && rank == 0) {
        constexpr int GROUP = VEC >= 16 ? 1 : 16 / VEC;
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll 1
            for (unsigned r0 = 1; r0 < runs; r0 += GROUP) {
                float4 p[GROUP][VEC];
#pragma unroll
                for (int g = 0; g < GROUP; ++g)
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        p[g][i] = r0 + g < runs
                                      ? fp_tma::load_cluster_f32x4(mine + (c * VEC + i) * CONSUMER_THREADS, r0 + g)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                for (int g = 0; g < GROUP; ++g)
#pragma unroll
                    for (int i = 0; i < VEC; ++i) add4(acc, c, i, p[g][i]);
            }
        }
    }
    fp_tma::cluster_sync();                 // rank 0 has read them: the peers may exit
}

template <bool BF16>
__device__ __forceinline__ void consumer(SharedStorage& smem, float (&acc)[CHUNKS][ACC], const Run& r) {
    const bool signals = threadIdx.x == 0;
    for (int i = 0; i < r.slices; ++i) {
        const int slot = i % STAGES;
        fp_mbar::mbar_wait(&smem.full[slot], (i / STAGES) & 1);
        fp_wgmma::fence();
        mma_slice<BF16>(acc, smem.ring[slot]);
        fp_wgmma::commit();
        fp_wgmma::wait<1>();
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) fp_wgmma::fence_accumulators(acc[c]);
        if (signals && i > 0) fp_mbar::mbar_arrive(&smem.empty[(i - 1) % STAGES]);
    }
    fp_wgmma::wait<0>();
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) fp_wgmma::fence_accumulators(acc[c]);
}

template <bool BF16>
__device__ __forceinline__ void gemm_skinny(const TensorMap* map_a, const TensorMap* map_b,
                                            const fp_tma::EdgeMaps* a_edges, unsigned short* C, int M, int N, int K,
                                            int slices_per_run) {
    extern __shared__ unsigned char smem_raw[];
    SharedStorage& smem = *reinterpret_cast<SharedStorage*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    const int slices = (K + BK - 1) / BK;
    const unsigned runs = (slices + slices_per_run - 1) / slices_per_run;   // the cluster's size (host-checked)
    const unsigned rank = runs > 1 ? fp_tma::cluster_rank() : 0;
    const int k_begin = static_cast<int>(rank) * slices_per_run;
    const Run r{static_cast<int>(blockIdx.x / runs) * TILE_N, k_begin, min(slices, k_begin + slices_per_run) - k_begin};

    if (threadIdx.x == 0) {
        fp_tma::prefetch_map(map_a);
        fp_tma::prefetch_map(map_b);
        for (int s = 0; s < STAGES; ++s) {
            fp_mbar::mbar_init(&smem.full[s], 1);
            fp_mbar::mbar_init(&smem.empty[s], 1);
        }
        fp_mbar::fence_barrier_init();
    }
    __syncthreads();
    const bool consumer_thread = threadIdx.x < CONSUMER_THREADS;
    float acc[CHUNKS][ACC];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[c][i] = 0.0f;
    if (consumer_thread) {
        consumer<BF16>(smem, acc, r);
    } else {
        producer(smem, map_a, map_b, a_edges, r, M);   // (the producer's warp)
    }
    if (runs > 1) add_cluster_sums(smem, acc, consumer_thread, rank, runs);   // (the producer warp too)
    if (consumer_thread && rank == 0) store_c<BF16>(C, acc, M, N, r.n0);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
gemm_hopper_skinny_bf16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                        const __grid_constant__ fp_tma::EdgeMaps a_edges, unsigned short* C, int M, int N, int K,
                        int slices_per_run) {
    gemm_skinny<true>(&map_a, &map_b, &a_edges, C, M, N, K, slices_per_run);
}
extern "C" __global__ void __launch_bounds__(THREADS)
gemm_hopper_skinny_f16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                       const __grid_constant__ fp_tma::EdgeMaps a_edges, unsigned short* C, int M, int N, int K,
                       int slices_per_run) {
    gemm_skinny<false>(&map_a, &map_b, &a_edges, C, M, N, K, slices_per_run);
}
