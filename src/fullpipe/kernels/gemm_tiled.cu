// Rung 1 of the fp32 ladder: tiled GEMM, C[M,N] = A[M,K] @ B[K,N], row-major fp32.
//
// Technique: shared-memory tiles + register blocking, and nothing else. Per K-slice,
// every thread LOADS (fetch_slice: global -> registers, store_slice: registers ->
// shared), the block waits (__syncthreads), every thread COMPUTES from shared memory
// (fp32_tile::compute_slice), the block waits again. While the loads are in flight the
// FMA units of this block are idle: that is what the next rungs remove. Read it in
// gemm_tiled(): its loop body is the whole technique.
//
// Tile math: fp32_tile.cuh, shared with the other fp32 rungs so that they differ from
// this one in the pipeline only. Edges: any M, N, K. The VEC kernel loads 16-byte
// float4 chunks and needs K % 4 == 0, N % 4 == 0 and 16-byte aligned pointers (the
// Python front picks it then); the _scalar kernel loads element by element.
// Out-of-range elements read as 0.

#include <fullpipe/fp32_tile.cuh>

namespace {

using namespace fp32_tile;

constexpr int THREADS = MATH_THREADS;                    // every thread loads and computes
constexpr int A_CHUNKS = TILE_M * TILE_K / 4 / THREADS;  // float4 of A per thread per slice (2 at BK = 16)
constexpr int B_CHUNKS = TILE_K * TILE_N / 4 / THREADS;  // float4 of B per thread per slice (2 at BK = 16)
// Global -> registers for one K-slice. A chunk r of thread t: row (t + 256 r) % 128,
// k = 4 ((t + 256 r) / 128) .. +3, so that a warp's transposing stores into As hit 32
// consecutive rows (no bank conflict); B chunk r: row t / 32 + 8 r, columns 4 (t % 32).
// Out-of-range elements become 0; CHECKED false (tiles and slices inside the matrices)
// tests nothing.
template <bool VEC, bool CHECKED>
__device__ __forceinline__ void fetch_slice(const float* __restrict__ A, const float* __restrict__ B, int M, int N,
                                            int K, int bm, int bn, int k0, float4 ra[A_CHUNKS], float4 rb[B_CHUNKS]) {
#pragma unroll
    for (int r = 0; r < A_CHUNKS; ++r) {
        const int c = threadIdx.x + THREADS * r;
        const int gr = bm + c % TILE_M, gk = k0 + (c / TILE_M) * 4;
        const float* src = &A[(size_t)gr * K + gk];
        if (VEC && !CHECKED) {
            ra[r] = *reinterpret_cast<const float4*>(src);
        } else if (VEC) {
            ra[r] = (gr < M && gk < K) ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = (!CHECKED || (gr < M && gk + e < K)) ? src[e] : 0.f;
            ra[r] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }
#pragma unroll
    for (int r = 0; r < B_CHUNKS; ++r) {
        const int bk = k0 + threadIdx.x / 32 + 8 * r, gc = bn + (threadIdx.x % 32) * 4;
        const float* src = &B[(size_t)bk * N + gc];
        if (VEC && !CHECKED) {
            rb[r] = *reinterpret_cast<const float4*>(src);
        } else if (VEC) {
            rb[r] = (bk < K && gc < N) ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = (!CHECKED || (bk < K && gc + e < N)) ? src[e] : 0.f;
            rb[r] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }
}

// Registers -> shared memory: A transposed (four scalar stores per chunk), B as is.
__device__ __forceinline__ void store_slice(float* As, float* Bs, const float4 ra[A_CHUNKS],
                                            const float4 rb[B_CHUNKS]) {
#pragma unroll
    for (int r = 0; r < A_CHUNKS; ++r) {
        const int c = threadIdx.x + THREADS * r, m = c % TILE_M, k = (c / TILE_M) * 4;
        As[(k + 0) * A_PITCH + m] = ra[r].x;
        As[(k + 1) * A_PITCH + m] = ra[r].y;
        As[(k + 2) * A_PITCH + m] = ra[r].z;
        As[(k + 3) * A_PITCH + m] = ra[r].w;
    }
#pragma unroll
    for (int r = 0; r < B_CHUNKS; ++r)
        *reinterpret_cast<float4*>(&Bs[(threadIdx.x / 32 + 8 * r) * TILE_N + (threadIdx.x % 32) * 4]) = rb[r];
}

template <bool VEC>
__device__ __forceinline__ void gemm_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K) {
    // One K-slice (the layout of a fp32_tile::Slice) as two arrays: the only shared memory.
    __shared__ __align__(16) float As[A_FLOATS];
    __shared__ __align__(16) float Bs[B_FLOATS];
    const int bm = blockIdx.y * TILE_M, bn = blockIdx.x * TILE_N;
    const bool interior = bm + TILE_M <= M && bn + TILE_N <= N;
    const ThreadTile t;
    float acc[8][8];
    zero_acc(acc);

    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        // Phase 1: everybody loads (global -> registers -> shared).
        float4 ra[A_CHUNKS], rb[B_CHUNKS];
        if (interior && k0 + TILE_K <= K) fetch_slice<VEC, false>(A, B, M, N, K, bm, bn, k0, ra, rb);
        else fetch_slice<VEC, true>(A, B, M, N, K, bm, bn, k0, ra, rb);
        store_slice(As, Bs, ra, rb);
        __syncthreads();  // the slice is in shared memory
        // Phase 2: everybody computes.
        compute_slice(As, Bs, t, acc);
        __syncthreads();  // nobody overwrites the slice while others still read it
    }
    store_tile<VEC>(C, M, N, bm, bn, t, acc);
}

}  // namespace

// Launch: kernels/gemm.py plans it (grid over the 128 x 128 C tiles, THREADS threads,
// no dynamic shared memory).
extern "C" __global__ void __launch_bounds__(THREADS, 2)
    gemm_tiled_f32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    gemm_tiled<true>(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(THREADS, 2) gemm_tiled_f32_scalar(const float* __restrict__ A,
                                                                               const float* __restrict__ B,
                                                                               float* __restrict__ C, int M, int N,
                                                                               int K) {
    gemm_tiled<false>(A, B, C, M, N, K);
}
