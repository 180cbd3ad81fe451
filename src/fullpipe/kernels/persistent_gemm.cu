// Persistent kernel with an atomic work queue vs one block per tile, on a GEMM cut
// into many small tiles: C[M,N] = A[M,K] @ B[K,N], fp32 row-major, 64 x 64 tiles.
//
//   gemm_small_tiles_per_tile   grid = number of tiles: the hardware hands each block
//                               one tile; every block pays its own launch, pipeline
//                               fill (first loads) and drain.
//   gemm_small_tiles_persistent grid = SMs x resident blocks per SM: each block pulls
//                               tile after tile from an atomic counter until the
//                               queue is empty. The cp.async ring runs across tile
//                               boundaries: the first slice of the next tile is
//                               fetched while the last slice of this one is computed.
//
// Both run the same code (run_tiles); they differ only in where the next tile comes
// from (next_tile). queue[0] is the queue head, queue[1] counts finished blocks; the
// last block to finish resets both to 0, so the counters are ready for the next
// launch (allocate them zeroed once).
//
// Tile math: 64 x 64 C tile, BK = 16, 256 threads as 16 x 16, thread tile 4 x 4
// (rows ty + 16*i, columns tx*4 .. +3). 2-stage cp.async ring (16-byte copies, zero
// fill outside the matrices): needs K % 4 == 0, N % 4 == 0, 16-byte aligned pointers.
#include <fullpipe/cp_async.cuh>

#define T_M 64
#define T_N 64
#define T_K 16
#define A_PITCH (T_K + 4)  // floats per row (one m) of As, [T_M][A_PITCH]
#define A_ELEMS (T_M * A_PITCH)
#define STAGE_ELEMS (A_ELEMS + T_K * T_N)
#define THREADS 256
#define NO_TILE 0x7fffffff

namespace {

struct Problem {
    const float* A;
    const float* B;
    float* C;
    int M, N, K, tiles_n, tiles, slices;
};

// A slice: 64 rows x 4 chunks = 256 chunks; B slice: 16 rows x 16 chunks = 256 chunks.
__device__ __forceinline__ void load_slice(float* buf, const Problem& p, int tile, int s) {
    const int bm = (tile / p.tiles_n) * T_M, bn = (tile % p.tiles_n) * T_N, k0 = s * T_K;
    const int c = threadIdx.x;
    const int ar = c / 4, ak = (c % 4) * 4;
    const bool aok = bm + ar < p.M && k0 + ak < p.K;
    cp_async_16(&buf[ar * A_PITCH + ak], aok ? &p.A[(size_t)(bm + ar) * p.K + k0 + ak] : p.A, aok);
    const int br = c / 16, bc = (c % 16) * 4;
    const bool bok = k0 + br < p.K && bn + bc < p.N;
    cp_async_16(&buf[A_ELEMS + br * T_N + bc], bok ? &p.B[(size_t)(k0 + br) * p.N + bn + bc] : p.B, bok);
}

__device__ __forceinline__ void compute_slice(const float* buf, float acc[4][4]) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
    for (int k = 0; k < T_K; ++k) {
        const float4 b = *reinterpret_cast<const float4*>(&buf[A_ELEMS + k * T_N + tx * 4]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float a = buf[(ty + 16 * i) * A_PITCH + k];
            acc[i][0] = fmaf(a, b.x, acc[i][0]);
            acc[i][1] = fmaf(a, b.y, acc[i][1]);
            acc[i][2] = fmaf(a, b.z, acc[i][2]);
            acc[i][3] = fmaf(a, b.w, acc[i][3]);
        }
    }
}

__device__ __forceinline__ void store_tile(const Problem& p, int tile, float acc[4][4]) {
    const int bm = (tile / p.tiles_n) * T_M, bn = (tile % p.tiles_n) * T_N;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int col = bn + tx * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = bm + ty + 16 * i;
        if (row < p.M && col < p.N)
            *reinterpret_cast<float4*>(&p.C[(size_t)row * p.N + col]) =
                make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    }
}

// The one difference between the two kernels: where the next tile comes from.
template <bool PERSISTENT>
__device__ __forceinline__ int next_tile(unsigned* queue, int claimed_so_far) {
    if (PERSISTENT) return static_cast<int>(atomicAdd(&queue[0], 1u));
    return claimed_so_far == 0 ? static_cast<int>(blockIdx.x) : NO_TILE;
}

// Walk this block's tiles as one stream of K-slices through a 2-stage ring.
// ids[j % 4] holds the j-th tile this block claimed; thread 0 claims one tile ahead,
// and the __syncthreads at the top of every slice step publishes it.
template <bool PERSISTENT>
__device__ __forceinline__ void run_tiles(const Problem& p, unsigned* queue) {
    __shared__ __align__(16) float ring[2 * STAGE_ELEMS];
    __shared__ int ids[4];
    if (threadIdx.x == 0) {
        ids[0] = next_tile<PERSISTENT>(queue, 0);
        ids[1] = next_tile<PERSISTENT>(queue, 1);
    }
    __syncthreads();
    int j = 0, s = 0, tile = ids[0];
    if (tile < p.tiles) load_slice(ring, p, tile, 0);
    cp_async_commit();
    float acc[4][4] = {};
    for (int g = 0; tile < p.tiles; ++g) {
        cp_async_wait_all();  // slice g has landed (my copies) ...
        __syncthreads();      // ... and everybody's; slice g-1's buffer is free
        // The slice after this one: same tile, or slice 0 of the next claimed tile.
        int tile_after = tile, s_after = s + 1;
        if (s_after == p.slices) {
            tile_after = ids[(j + 1) % 4];
            s_after = 0;
            if (threadIdx.x == 0) ids[(j + 2) % 4] = next_tile<PERSISTENT>(queue, j + 2);
        }
        if (tile_after < p.tiles) load_slice(ring + ((g + 1) % 2) * STAGE_ELEMS, p, tile_after, s_after);
        cp_async_commit();
        compute_slice(ring + (g % 2) * STAGE_ELEMS, acc);
        if (++s == p.slices) {  // tile done: write it, move on
            store_tile(p, tile, acc);
            tile = tile_after;
            s = 0;
            ++j;
        }
    }
    cp_async_wait_all();
    if (PERSISTENT) {  // the last block out resets the queue for the next launch
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            if (atomicAdd(&queue[1], 1u) == gridDim.x - 1) {
                queue[0] = 0;
                queue[1] = 0;
                __threadfence();
            }
        }
    }
}

__device__ __forceinline__ Problem make_problem(const float* A, const float* B, float* C, int M, int N, int K) {
    Problem p{A, B, C, M, N, K, 0, 0, 0};
    p.tiles_n = (N + T_N - 1) / T_N;
    p.tiles = p.tiles_n * ((M + T_M - 1) / T_M);
    p.slices = (K + T_K - 1) / T_K;
    return p;
}

}  // namespace

// Launch: kernels/persistent.py (one block per 64 x 64 tile, THREADS threads). `queue`
// is unused (same signature).
extern "C" __global__ void __launch_bounds__(THREADS) gemm_small_tiles_per_tile(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K,
    unsigned* queue) {
    run_tiles<false>(make_problem(A, B, C, M, N, K), queue);
}

// Launch: kernels/persistent.py (SMs x resident blocks per SM, THREADS threads); queue =
// 2 zeroed unsigned ints.
extern "C" __global__ void __launch_bounds__(THREADS) gemm_small_tiles_persistent(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K,
    unsigned* queue) {
    run_tiles<true>(make_problem(A, B, C, M, N, K), queue);
}
