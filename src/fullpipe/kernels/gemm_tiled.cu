// Tiled fp32 GEMM, the baseline: C[M,N] = A[M,K] @ B[K,N], all row-major fp32.
//
// Technique: shared-memory tiles + register blocking, and nothing else. Every warp
// LOADS (global -> registers -> shared), the block waits (__syncthreads), every warp
// COMPUTES from shared memory, the block waits again. While the loads are in
// flight the FMA units of this block are idle: that is what the pipelined kernels
// (gemm_double_buffer.cu, gemm_warp_specialized.cu) remove.
//
// Tile math (cuda/include/fullpipe/gemm_fp32_tile.cuh, shared with the pipelined fp32
// kernels, so that they differ from this one in the pipeline only):
//   block tile 128 x 128 of C, K-slices of BK = 16 (FP32_BK), 256 threads = 8 warps (2 x 4),
//   warp tile 64 x 32, thread tile 8 x 8 (rows tm + 8*i, columns tn*4 + {0..3} and
//   16 + tn*4 + {0..3}), read from shared memory as float4.
//   Shared memory: As[128][BK + 4] (A as stored, row-major, padded so that the eight
//   rows a warp reads at once fall in different banks), Bs[BK][128].
//
// Edges: any M, N, K. The VEC variant loads 16-byte float4 chunks and needs K % 4 == 0,
// N % 4 == 0 and 16-byte aligned pointers (the Python wrapper picks it then);
// the SCALAR variant loads element by element. Out-of-range elements read as 0.

#include <fullpipe/gemm_fp32_tile.cuh>

#define THREADS 256
#define CHUNKS (SLICE_CHUNKS / THREADS)  // 16-byte chunks of A (and of B) per thread per slice

namespace {

using namespace fp_fp32_tile;

// Global -> registers for one K-slice: each thread holds CHUNKS chunks of A and CHUNKS
// of B (4 floats each; 2 + 2 at BK = 16). Out-of-range elements become 0.
template <bool VEC>
__device__ __forceinline__ void fetch_slice(const float* __restrict__ A, const float* __restrict__ B, int M, int N,
                                            int K, int bm, int bn, int k0, float4 ra[CHUNKS], float4 rb[CHUNKS]) {
#pragma unroll
    for (int r = 0; r < CHUNKS; ++r) {
        const int c = threadIdx.x + THREADS * r;
        // A chunk: row c / A_CHUNKS_PER_ROW of the tile, k = (c % A_CHUNKS_PER_ROW) * 4 .. +3
        const int gr = bm + c / A_CHUNKS_PER_ROW, gk = k0 + (c % A_CHUNKS_PER_ROW) * 4;
        float v[4];
        if (VEC) {
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (gr < M && gk < K) x = *reinterpret_cast<const float4*>(&A[(size_t)gr * K + gk]);
            ra[r] = x;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = (gr < M && gk + e < K) ? A[(size_t)gr * K + gk + e] : 0.f;
            ra[r] = make_float4(v[0], v[1], v[2], v[3]);
        }
        // B chunk: row c/32 of the slice, columns (c%32)*4 .. +3
        const int bk = k0 + c / 32, gc = bn + (c % 32) * 4;
        if (VEC) {
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (bk < K && gc < N) x = *reinterpret_cast<const float4*>(&B[(size_t)bk * N + gc]);
            rb[r] = x;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = (bk < K && gc + e < N) ? B[(size_t)bk * N + gc + e] : 0.f;
            rb[r] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }
}

template <bool VEC>
__device__ __forceinline__ void gemm_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[TILE_M * A_STRIDE];
    __shared__ __align__(16) float Bs[TILE_K * TILE_N];
    const int bm = blockIdx.y * TILE_M, bn = blockIdx.x * TILE_N;
    const ThreadTile t;
    float acc[8][8];
    zero_acc(acc);

    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        // Phase 1: everybody loads (global -> registers -> shared).
        float4 ra[CHUNKS], rb[CHUNKS];
        fetch_slice<VEC>(A, B, M, N, K, bm, bn, k0, ra, rb);
#pragma unroll
        for (int r = 0; r < CHUNKS; ++r) {
            const int c = threadIdx.x + THREADS * r;
            *reinterpret_cast<float4*>(&As[(c / A_CHUNKS_PER_ROW) * A_STRIDE + (c % A_CHUNKS_PER_ROW) * 4]) = ra[r];
            *reinterpret_cast<float4*>(&Bs[(c / 32) * TILE_N + (c % 32) * 4]) = rb[r];
        }
        __syncthreads();  // the slice is in shared memory
        // Phase 2: everybody computes.
        compute_slice(As, Bs, t, acc);
        __syncthreads();  // nobody overwrites the slice while others still read it
    }
    store_tile<VEC>(C, M, N, bm, bn, t, acc);
}

}  // namespace

// grid = (ceil(N/128), ceil(M/128)), block = 256, no dynamic shared memory.
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
