// fullpipe-requires: sm_90 (mbarrier.try_wait.parity)
// Rung 3 of the fp32 ladder: warp-specialized GEMM, C[M,N] = A[M,K] @ B[K,N], row-major fp32.
//
// Technique: permanent roles inside one block, joined by mbarriers (mbarrier.cuh: the
// "full" / "empty" pair of each ring buffer, a producer/consumer handshake in shared
// memory). Each role is a device function below; gemm_warp_specialized() picks one
// by warp index:
//
//   warp 0       loader()   for each K-slice: wait empty[b], start the async copies
//                           into ring buffer b, and once they have landed arrive on
//                           full[b]                                             ----+
//                                                                                   | load ring
//   warps 1..8   compute()  wait full[b], do the 8 x 8-per-thread math,         <---+ (STAGES buffers)
//                           arrive on empty[b]; at the end of a tile: wait
//                           c_empty, write the 128 x 128 C tile to a shared
//                           epilogue buffer, arrive on c_full                   ----+
//                                                                                   | store hand-off
//   warp 9       storer()   wait c_full, write the tile to global memory,       <---+ (1 buffer)
//                           arrive on c_empty
//
// The block is persistent (grid = number of SMs) and walks the C tiles
// blockIdx.x, blockIdx.x + gridDim.x, ...: so the loader already fetches the next
// tile's first slices while the compute warps finish this one, and the storer
// writes tile t while the compute warps work on tile t+1.
//
// Phases: slice number `it` (counted over all tiles of the block) lives in buffer
// b = it % STAGES; it is the (it / STAGES)-th use of that buffer, so waiters wait on
// parity (it / STAGES) & 1 of full[b] / empty[b]. The loader tracks its own copies
// with a thread-scope cuda::pipeline (cp.async commit groups) and signals slice
// it - LAG (LAG = STAGES - 2) after issuing slice it and waiting for that older group:
// up to LAG + 1 slices are in flight per lane, and the compute warps always find the
// next slice signalled while they work on the current one. A plain mbarrier arrive
// (release) after cp.async.wait_group publishes the copies (and the zero-filled edge
// chunks) to the compute warps' acquiring wait. Every thread arrives at most once per
// phase, and every arrival is waited for by its consumer before the block exits (the
// drains at the end of each role), so nothing is pending at exit.
//
// Tile math: fp32_tile.cuh (tiled's). The loader's copies are double_buffer's, made by
// one warp (SliceCopier<32>: 64 A elements and 16 B chunks per lane per slice).
// Kernels gemm_warp_specialized_s{2,3,4}[_scalar]. Edges as in gemm_double_buffer.cu.
#include <cuda/pipeline>
#include <fullpipe/fp32_slice_copier.cuh>
#include <fullpipe/fp32_tile.cuh>
#include <fullpipe/mbarrier.cuh>

namespace {

using namespace fp32_tile;
using namespace fp_mbar;

constexpr int LOADER_WARP = 0;
constexpr int FIRST_COMPUTE_WARP = 1;
constexpr int COMPUTE_THREADS = MATH_THREADS;  // 8 compute warps
constexpr int STORER_WARP = FIRST_COMPUTE_WARP + COMPUTE_THREADS / 32;
constexpr int THREADS = 32 * (STORER_WARP + 1);  // 320
constexpr int C_PITCH = TILE_N + 4;              // floats per row of the epilogue buffer Cs

// Dynamic shared memory: the load ring, then the C tile handed to the storer,
// Cs[r * C_PITCH + c]. The kernel addresses it as floats (ring = smem,
// Cs = smem + STAGES * SLICE_FLOATS).
template <int STAGES>
struct SharedTiles {
    Slice ring[STAGES];
    float Cs[TILE_M * C_PITCH];
};

// The C tiles of this block: tile = blockIdx.x, blockIdx.x + gridDim.x, ... < tiles,
// at (tile / tiles_n, tile % tiles_n); `slices` K-slices each.
struct TileWalk {
    int tiles_n, tiles, slices;
};

// LOADER (one warp): every K-slice of every tile of the block into the ring.
template <int STAGES, bool VEC>
__device__ __forceinline__ void loader(unsigned long long* full, unsigned long long* empty, float* ring,
                                       const float* __restrict__ A, const float* __restrict__ B, int M, int N, int K,
                                       const TileWalk& w, int lane) {
    constexpr int LAG = STAGES - 2;  // slices issued but not yet signalled
    const int tiles_n = w.tiles_n, tiles = w.tiles, slices = w.slices;
    cuda::pipeline<cuda::thread_scope_thread> copies = cuda::make_pipeline();  // this lane's cp.async groups
    SliceCopier<32> copier(A, B, M, N, K, lane);
    int it = 0;  // slices issued so far (over all tiles)
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        copier.start_tile((tile / tiles_n) * TILE_M, (tile % tiles_n) * TILE_N);
        for (int s = 0; s < slices; ++s, ++it) {
            const int b = it % STAGES;
            if (it >= STAGES) mbar_wait(&empty[b], ((it / STAGES) - 1) & 1);  // buffer released
            float* buf = ring + b * SLICE_FLOATS;
            copies.producer_acquire();
            copier.copy_next<VEC>(buf, buf + A_FLOATS, copies);
            copies.producer_commit();
            if (it >= LAG) {  // slice it - LAG has landed (my part of it): signal it
                cuda::pipeline_consumer_wait_prior<LAG>(copies);
                mbar_arrive(&full[(it - LAG) % STAGES]);
            }
        }
    }
    cuda::pipeline_consumer_wait_prior<0>(copies);  // the last LAG slices
    for (int g = it > LAG ? it - LAG : 0; g < it; ++g) mbar_arrive(&full[g % STAGES]);
    // Drain: wait until the compute warps have released the last buffers, so that
    // every arrival on empty[] is observed before the block exits.
    for (int g = it > STAGES ? it - STAGES : 0; g < it; ++g) mbar_wait(&empty[g % STAGES], (g / STAGES) & 1);
}

// COMPUTE (COMPUTE_THREADS threads, t_index = 0 ..): the math of every slice, then each
// C tile to the storer through Cs.
template <int STAGES>
__device__ __forceinline__ void compute(unsigned long long* full, unsigned long long* empty,
                                        unsigned long long* c_full, unsigned long long* c_empty, const float* ring,
                                        float* Cs, const TileWalk& w, int t_index) {
    const int tiles = w.tiles, slices = w.slices;
    const ThreadTile t(t_index);
    int it = 0;  // slices consumed so far
    int j = 0;   // C tiles handed to the storer
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++j) {
        float acc[8][8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) acc[i][jj] = 0.f;
        for (int s = 0; s < slices; ++s, ++it) {
            const int b = it % STAGES;
            const float* buf = ring + b * SLICE_FLOATS;
            mbar_wait(&full[b], (it / STAGES) & 1);  // the loader's copies of this slice have landed
            compute_slice(buf, buf + A_FLOATS, t, acc);
            mbar_arrive(&empty[b]);  // the loader may refill the buffer
        }
        // Hand the tile to the storer through shared memory.
        if (j > 0) mbar_wait(c_empty, (j - 1) & 1);  // the storer has finished the previous tile
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                *reinterpret_cast<float4*>(&Cs[t.row(i) * C_PITCH + t.col0 + 16 * h]) =
                    make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
        mbar_arrive(c_full);
    }
    // Drain: the storer's last arrival is observed before the block exits.
    if (j > 0) mbar_wait(c_empty, (j - 1) & 1);
}

// The 128 x 128 tile from the epilogue buffer to C, one row per step, lane l writing
// columns 4l .. 4l+3 (coalesced 512-byte rows).
template <bool VEC>
__device__ __forceinline__ void store_c_tile(const float* Cs, float* __restrict__ C, int M, int N, int bm, int bn,
                                             int lane) {
    const int col = bn + lane * 4;
    for (int r = 0; r < TILE_M && bm + r < M; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(&Cs[r * C_PITCH + lane * 4]);
        float* dst = &C[(size_t)(bm + r) * N + col];
        if (VEC) {
            if (col < N) *reinterpret_cast<float4*>(dst) = v;
        } else {
            if (col < N) dst[0] = v.x;
            if (col + 1 < N) dst[1] = v.y;
            if (col + 2 < N) dst[2] = v.z;
            if (col + 3 < N) dst[3] = v.w;
        }
    }
}

// STORER (one warp): wait for each C tile, store it, release the epilogue buffer.
template <bool VEC>
__device__ __forceinline__ void storer(unsigned long long* c_full, unsigned long long* c_empty, const float* Cs,
                                       float* __restrict__ C, int M, int N, const TileWalk& w, int lane) {
    const int tiles_n = w.tiles_n, tiles = w.tiles;
    int j = 0;  // C tiles stored so far
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++j) {
        const int bm = (tile / tiles_n) * TILE_M, bn = (tile % tiles_n) * TILE_N;
        mbar_wait(c_full, j & 1);  // the compute warps have written the C tile
        store_c_tile<VEC>(Cs, C, M, N, bm, bn, lane);
        mbar_arrive(c_empty);  // they may write the next one
    }
}

template <int STAGES, bool VEC>
__device__ __forceinline__ void gemm_warp_specialized(const float* __restrict__ A, const float* __restrict__ B,
                                                      float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float smem[];  // a SharedTiles<STAGES>
    float* ring = smem;                        // STAGES slices
    float* Cs = smem + STAGES * SLICE_FLOATS;  // epilogue buffer [TILE_M][C_PITCH]
    __shared__ unsigned long long full[STAGES];   // loader -> compute: slice landed    (32 arrivals)
    __shared__ unsigned long long empty[STAGES];  // compute -> loader: slice consumed  (256 arrivals)
    __shared__ unsigned long long c_full;         // compute -> storer: C tile written  (256 arrivals)
    __shared__ unsigned long long c_empty;        // storer -> compute: C tile stored   (32 arrivals)
    if (threadIdx.x == 0) {
        for (int b = 0; b < STAGES; ++b) {
            mbar_init(&full[b], 32);
            mbar_init(&empty[b], COMPUTE_THREADS);
        }
        mbar_init(&c_full, COMPUTE_THREADS);
        mbar_init(&c_empty, 32);
    }
    __syncthreads();  // the barriers are initialized before any role uses them

    TileWalk w;
    w.tiles_n = (N + TILE_N - 1) / TILE_N;
    w.tiles = w.tiles_n * ((M + TILE_M - 1) / TILE_M);
    w.slices = (K + TILE_K - 1) / TILE_K;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == LOADER_WARP) loader<STAGES, VEC>(full, empty, ring, A, B, M, N, K, w, lane);
    else if (warp == STORER_WARP) storer<VEC>(&c_full, &c_empty, Cs, C, M, N, w, lane);
    else compute<STAGES>(full, empty, &c_full, &c_empty, ring, Cs, w, threadIdx.x - 32 * FIRST_COMPUTE_WARP);
}

}  // namespace

// Launch: kernels/gemm.py plans it (grid min(tiles, SMs), THREADS threads, dynamic
// shared memory sizeof(SharedTiles<S>), exported here for the tests to compare).
#define WS_KERNEL(S)                                                                                       \
    extern "C" __device__ const unsigned fp_dynamic_smem_gemm_warp_specialized_s##S =                     \
        sizeof(SharedTiles<S>);                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS, 1)                                              \
        gemm_warp_specialized_s##S(const float* __restrict__ A, const float* __restrict__ B,              \
                                   float* __restrict__ C, int M, int N, int K) {                          \
        gemm_warp_specialized<S, true>(A, B, C, M, N, K);                                                 \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, 1)                                              \
        gemm_warp_specialized_s##S##_scalar(const float* __restrict__ A, const float* __restrict__ B,     \
                                            float* __restrict__ C, int M, int N, int K) {                 \
        gemm_warp_specialized<S, false>(A, B, C, M, N, K);                                                \
    }

WS_KERNEL(2)
WS_KERNEL(3)
WS_KERNEL(4)
