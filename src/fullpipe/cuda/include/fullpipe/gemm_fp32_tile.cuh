// The fp32 tile math shared by gemm_tiled.cu, gemm_double_buffer.cu and
// gemm_warp_specialized.cu: the three kernels differ in how the K-slices reach
// shared memory (the pipeline), never in the math done on them.
//
//   block tile 128 x 128 of C, K-slices of TILE_K = 16, 256 math threads = 8 warps
//   (2 x 4), warp tile 64 x 32, thread tile 8 x 8 (rows row0 + 8*i, columns col0 +
//   {0..3} and col0 + 16 + {0..3}), read from shared memory as float4.
//   Shared memory per K-slice: As[128][TILE_K + 4] (A as stored, row-major, padded so
//   that the eight rows a warp reads at once fall in different banks), Bs[TILE_K][128].
#pragma once
#include <cuda/pipeline>

#define TILE_M 128
#define TILE_N 128
#ifndef FP32_BK
#define FP32_BK 16  // K-slice depth; 8, 16 or 32 with -DFP32_BK (scripts/fp32-sweep)
#endif
#define TILE_K FP32_BK
#define A_STRIDE (TILE_K + 4)  // floats per As row: keeps float4 alignment, rows in distinct banks
#define A_CHUNKS_PER_ROW (TILE_K / 4)
#define SLICE_CHUNKS (TILE_M * TILE_K / 4)  // 16-byte chunks of A's slice (and of B's: TILE_K x 128)
static_assert(TILE_K == 8 || TILE_K == 16 || TILE_K == 32, "FP32_BK must be 8, 16 or 32");

namespace fp_fp32_tile {

// C tile of this thread: rows warp_m*64 + tm + 8*i, columns warp_n*32 + h*16 + tn*4 + j.
struct ThreadTile {
    int row0, col0;  // first row / column inside the block tile
    // Every thread of the block does math (tiled, double_buffer).
    __device__ ThreadTile() {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        row0 = (warp / 4) * 64 + lane / 4;
        col0 = (warp % 4) * 32 + (lane % 4) * 4;
    }
    // t: the thread's index among the 256 math threads (warp_specialized).
    __device__ explicit ThreadTile(int t) {
        const int warp = t / 32, lane = t % 32;
        row0 = (warp / 4) * 64 + lane / 4;
        col0 = (warp % 4) * 32 + (lane % 4) * 4;
    }
};

__device__ __forceinline__ void zero_acc(float acc[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
}

// Async copy of 16-byte chunk c (0 .. SLICE_CHUNKS-1) of A's slice and of B's slice into
// As / Bs (cp.async, tracked by this thread's pipeline; the pipelined kernels hand out the
// chunks to their copying threads). A chunk c: row c / A_CHUNKS_PER_ROW, columns
// 4 (c % A_CHUNKS_PER_ROW) ..; B chunk c: row c / 32, columns 4 (c % 32) ... Outside the matrices: zeros, written
// with ordinary stores. VEC copies whole chunks (needs K % 4 == 0, N % 4 == 0 and
// 16-byte aligned pointers); otherwise element by element.
template <bool VEC>
__device__ __forceinline__ void copy_chunk_async(float* As, float* Bs, const float* __restrict__ A,
                                                 const float* __restrict__ B, int M, int N, int K, int bm, int bn,
                                                 int k0, int c, cuda::pipeline<cuda::thread_scope_thread>& pipe) {
    const int gr = bm + c / A_CHUNKS_PER_ROW, gk = k0 + (c % A_CHUNKS_PER_ROW) * 4;
    float* da = &As[(c / A_CHUNKS_PER_ROW) * A_STRIDE + (c % A_CHUNKS_PER_ROW) * 4];
    const float* sa = &A[(size_t)gr * K + gk];
    const int bk = k0 + c / 32, gc = bn + (c % 32) * 4;
    float* db = &Bs[(c / 32) * TILE_N + (c % 32) * 4];
    const float* sb = &B[(size_t)bk * N + gc];
    if (VEC) {
        if (gr < M && gk < K) cuda::memcpy_async(da, sa, cuda::aligned_size_t<16>(16), pipe);
        else *reinterpret_cast<float4*>(da) = make_float4(0.f, 0.f, 0.f, 0.f);
        if (bk < K && gc < N) cuda::memcpy_async(db, sb, cuda::aligned_size_t<16>(16), pipe);
        else *reinterpret_cast<float4*>(db) = make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if (gr < M && gk + e < K) cuda::memcpy_async(da + e, sa + e, cuda::aligned_size_t<4>(4), pipe);
            else da[e] = 0.f;
            if (bk < K && gc + e < N) cuda::memcpy_async(db + e, sb + e, cuda::aligned_size_t<4>(4), pipe);
            else db[e] = 0.f;
        }
    }
}

// One K-slice of math: acc += As(rows of this thread) x Bs(columns of this thread).
__device__ __forceinline__ void compute_slice(const float* __restrict__ As, const float* __restrict__ Bs,
                                              const ThreadTile& t, float acc[8][8]) {
#pragma unroll
    for (int kk = 0; kk < TILE_K; kk += 4) {
        float4 a[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) a[i] = *reinterpret_cast<const float4*>(&As[(t.row0 + 8 * i) * A_STRIDE + kk]);
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4) {
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[(kk + k4) * TILE_N + t.col0]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[(kk + k4) * TILE_N + t.col0 + 16]);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float av = k4 == 0 ? a[i].x : k4 == 1 ? a[i].y : k4 == 2 ? a[i].z : a[i].w;
                acc[i][0] = fmaf(av, b0.x, acc[i][0]);
                acc[i][1] = fmaf(av, b0.y, acc[i][1]);
                acc[i][2] = fmaf(av, b0.z, acc[i][2]);
                acc[i][3] = fmaf(av, b0.w, acc[i][3]);
                acc[i][4] = fmaf(av, b1.x, acc[i][4]);
                acc[i][5] = fmaf(av, b1.y, acc[i][5]);
                acc[i][6] = fmaf(av, b1.z, acc[i][6]);
                acc[i][7] = fmaf(av, b1.w, acc[i][7]);
            }
        }
    }
}

template <bool VEC>
__device__ __forceinline__ void store_tile(float* __restrict__ C, int M, int N, int bm, int bn, const ThreadTile& t,
                                           float acc[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = bm + t.row0 + 8 * i;
        if (row >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = bn + t.col0 + 16 * h;
            float* dst = &C[(size_t)row * N + col];
            if (VEC) {
                if (col < N)
                    *reinterpret_cast<float4*>(dst) =
                        make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (col + e < N) dst[e] = acc[i][4 * h + e];
            }
        }
    }
}

}  // namespace fp_fp32_tile
