// The fp32 tile math shared by gemm_tiled.cu, gemm_double_buffer.cu and
// gemm_warp_specialized.cu: the three kernels differ in how the K-slices reach
// shared memory (the pipeline), never in the math done on them.
//
//   block tile 128 x 128 of C, K-slices of TILE_K = 16, 256 math threads = 8 warps
//   (2 x 4), warp tile 64 x 32, thread tile 8 x 8: rows row0 + {0..3} and
//   row0 + 32 + {0..3}, columns col0 + {0..3} and col0 + 16 + {0..3}.
//
//   Shared memory per K-slice, both operands k-major:
//     As[TILE_K][128 + 4]  A transposed (the copies write it one element at a time;
//                          +4 keeps rows 16-byte aligned and the copies conflict-free)
//     Bs[TILE_K][128]      B as stored
//   Step k of the math needs 8 values of A and 8 of B: two float4 each, a FRAGMENT.
//   The fragment of step k+1 is read while the 64 FMAs of step k run (a two-deep
//   register pipeline under the shared-memory one), in 128 registers or fewer, so
//   two blocks fit an SM.
//
// How a slice gets into shared memory is the kernels' business; SliceCopier below is
// the asynchronous way (cp.async) the pipelined kernels share.
#pragma once
#include <cuda/pipeline>

#define TILE_M 128
#define TILE_N 128
#ifndef FP32_BK
#define FP32_BK 16  // K-slice depth; 8, 16 or 32 with -DFP32_BK (scripts/fp32-sweep)
#endif
#define TILE_K FP32_BK
#define AS_STRIDE (TILE_M + 4)             // floats per As row (one k)
#define A_FLOATS (TILE_K * AS_STRIDE)      // As of one slice
#define B_FLOATS (TILE_K * TILE_N)         // Bs of one slice
#define STAGE_FLOATS (A_FLOATS + B_FLOATS)  // one ring buffer: As then Bs
static_assert(TILE_K == 8 || TILE_K == 16 || TILE_K == 32, "FP32_BK must be 8, 16 or 32");

namespace fp_fp32_tile {

// C tile of one math thread: rows row(0..7), columns col0 + {0..3}, col0 + 16 + {0..3}.
struct ThreadTile {
    int row0, col0;  // inside the block tile
    // t: the thread's index among the 256 math threads.
    __device__ explicit ThreadTile(int t) {
        const int warp = t / 32, lane = t % 32;
        row0 = (warp / 4) * 64 + (lane / 4) * 4;
        col0 = (warp % 4) * 32 + (lane % 4) * 4;
    }
    // Every thread of the block does math (tiled, double_buffer).
    __device__ ThreadTile() : ThreadTile(threadIdx.x) {}
    __device__ int row(int i) const { return row0 + (i / 4) * 32 + i % 4; }
};

__device__ __forceinline__ void zero_acc(float acc[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
}

// The operands of one step k: A rows row0 + {0..3} (a0), row0 + 32 + {0..3} (a1);
// B columns col0 + {0..3} (b0), col0 + 16 + {0..3} (b1). A warp's A reads cover 8
// consecutive float4 and its B reads 4: no bank conflicts.
struct Fragment {
    float4 a0, a1, b0, b1;
};

__device__ __forceinline__ void load_fragment(Fragment& f, const float* As, const float* Bs, const ThreadTile& t,
                                              int k) {
    f.a0 = *reinterpret_cast<const float4*>(&As[k * AS_STRIDE + t.row0]);
    f.a1 = *reinterpret_cast<const float4*>(&As[k * AS_STRIDE + t.row0 + 32]);
    f.b0 = *reinterpret_cast<const float4*>(&Bs[k * TILE_N + t.col0]);
    f.b1 = *reinterpret_cast<const float4*>(&Bs[k * TILE_N + t.col0 + 16]);
}

// acc += a (x) b: 64 FMAs.
__device__ __forceinline__ void outer_product(const Fragment& f, float acc[8][8]) {
    const float a[8] = {f.a0.x, f.a0.y, f.a0.z, f.a0.w, f.a1.x, f.a1.y, f.a1.z, f.a1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        acc[i][0] = fmaf(a[i], f.b0.x, acc[i][0]);
        acc[i][1] = fmaf(a[i], f.b0.y, acc[i][1]);
        acc[i][2] = fmaf(a[i], f.b0.z, acc[i][2]);
        acc[i][3] = fmaf(a[i], f.b0.w, acc[i][3]);
        acc[i][4] = fmaf(a[i], f.b1.x, acc[i][4]);
        acc[i][5] = fmaf(a[i], f.b1.y, acc[i][5]);
        acc[i][6] = fmaf(a[i], f.b1.z, acc[i][6]);
        acc[i][7] = fmaf(a[i], f.b1.w, acc[i][7]);
    }
}

// One K-slice of math: acc += As x Bs over the thread's rows and columns; the
// fragment of step k+1 is read during step k.
__device__ __forceinline__ void compute_slice(const float* __restrict__ As, const float* __restrict__ Bs,
                                              const ThreadTile& t, float acc[8][8]) {
    Fragment f[2];
    load_fragment(f[0], As, Bs, t, 0);
#pragma unroll
    for (int k = 0; k < TILE_K; ++k) {
        if (k + 1 < TILE_K) load_fragment(f[(k + 1) & 1], As, Bs, t, k + 1);
        outer_product(f[k & 1], acc);
    }
}

// LANES threads (lane = 0 .. LANES-1) copy the K-slices of one block tile into ring
// buffers, one slice per copy_next(), with cuda::memcpy_async (cp.async, LDGSTS),
// tracked by each lane's thread-scope pipeline.
//   A, transposed into As: one 4-byte element per copy. Lane l copies k = l % 8 + 8 kj
//     of rows l / 8 + (LANES / 8) mj: a warp reads 4 rows x 32 contiguous bytes (a
//     sector each) and writes As banks 4k + m, all different.
//   B, as stored: 16-byte chunks (VEC: N % 4 == 0 and B 16-byte aligned) or their 4
//     elements one by one; lane l copies chunk l % 32 of rows l / 32 + (LANES / 32) r.
// Elements outside the matrices are written as zeros with ordinary stores (the
// consumer's wait orders them like the copies). Blocks and slices that lie inside the
// matrices, all but the edges, take the unchecked path: no tests at all.
template <int LANES>
struct SliceCopier {
    static_assert(LANES % 32 == 0 && TILE_K * 32 % LANES == 0, "LANES: whole warps, whole B rows");
    static constexpr int A_ROW_STEP = LANES / 8;             // rows between a lane's A elements
    static constexpr int A_ROW_GROUPS = TILE_M / A_ROW_STEP;  // 4 for 256 lanes, 32 for one warp
    static constexpr int B_ROW_STEP = LANES / 32;             // rows between a lane's B chunks
    static constexpr int B_CHUNKS = TILE_K * 32 / LANES;      // B chunks per lane per slice

    const float* A;
    const float* B;
    int M, N, K;
    int a_row, a_k, b_row, b_col;  // the lane's first element / chunk inside a slice
    // Set by start_tile:
    int bm, bn, k0;       // tile origin; first k of the next slice
    bool interior;        // the whole 128 x 128 tile lies inside C
    const float* a_next;  // the lane's first A element of the next slice
    const float* b_next;  // the lane's first B chunk of the next slice

    __device__ SliceCopier(const float* A_, const float* B_, int M_, int N_, int K_, int lane)
        : A(A_), B(B_), M(M_), N(N_), K(K_) {
        a_row = lane / 8;
        a_k = lane % 8;
        b_row = lane / 32;
        b_col = (lane % 32) * 4;
    }

    __device__ __forceinline__ void start_tile(int bm_, int bn_) {
        bm = bm_;
        bn = bn_;
        k0 = 0;
        interior = bm + TILE_M <= M && bn + TILE_N <= N;
        a_next = A + (size_t)(bm + a_row) * K + a_k;
        b_next = B + (size_t)b_row * N + bn + b_col;
    }

    // Start the copies of the next slice into As / Bs (one ring buffer).
    template <bool VEC>
    __device__ __forceinline__ void copy_next(float* As, float* Bs, cuda::pipeline<cuda::thread_scope_thread>& pipe) {
        if (interior && k0 + TILE_K <= K) copy<VEC, false>(As, Bs, pipe);
        else copy<VEC, true>(As, Bs, pipe);
        a_next += TILE_K;
        b_next += (size_t)TILE_K * N;
        k0 += TILE_K;
    }

    template <bool VEC, bool CHECKED>
    __device__ __forceinline__ void copy(float* As, float* Bs, cuda::pipeline<cuda::thread_scope_thread>& pipe) const {
        // Running source pointers; one warp (32 lanes) has 32 row groups, so its loops
        // are unrolled 4 deep only (fully unrolled they would hold 32 pointers).
        const size_t a_rows = (size_t)A_ROW_STEP * K;
        const float* a_src = a_next;
#pragma unroll(A_ROW_GROUPS < 4 ? A_ROW_GROUPS : 4)
        for (int mj = 0; mj < A_ROW_GROUPS; ++mj, a_src += a_rows) {
#pragma unroll
            for (int kj = 0; kj < TILE_K / 8; ++kj) {
                const int m = a_row + A_ROW_STEP * mj, k = a_k + 8 * kj;
                float* dst = &As[k * AS_STRIDE + m];
                if (!CHECKED || (bm + m < M && k0 + k < K))
                    cuda::memcpy_async(dst, a_src + 8 * kj, cuda::aligned_size_t<4>(4), pipe);
                else
                    *dst = 0.f;
            }
        }
        const size_t b_rows = (size_t)B_ROW_STEP * N;
        const float* b_src = b_next;
#pragma unroll(B_CHUNKS < 4 ? B_CHUNKS : 4)
        for (int r = 0; r < B_CHUNKS; ++r, b_src += b_rows) {
            const int k = b_row + B_ROW_STEP * r;
            float* dst = &Bs[k * TILE_N + b_col];
            if (VEC) {
                if (!CHECKED || (k0 + k < K && bn + b_col < N))
                    cuda::memcpy_async(dst, b_src, cuda::aligned_size_t<16>(16), pipe);
                else
                    *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (!CHECKED || (k0 + k < K && bn + b_col + e < N))
                        cuda::memcpy_async(dst + e, b_src + e, cuda::aligned_size_t<4>(4), pipe);
                    else
                        dst[e] = 0.f;
                }
            }
        }
    }
};

template <bool VEC>
__device__ __forceinline__ void store_tile(float* __restrict__ C, int M, int N, int bm, int bn, const ThreadTile& t,
                                           float acc[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = bm + t.row(i);
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
