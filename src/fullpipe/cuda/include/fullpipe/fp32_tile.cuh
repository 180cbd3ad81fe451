// The fp32 tile math of the fp32 GEMM ladder (gemm_tiled.cu, gemm_double_buffer.cu,
// gemm_warp_specialized.cu, gemm_fp32_ceiling.cu): the kernels differ in how the
// K-slices reach shared memory (their pipeline), never in the math done on them.
//
//   block tile TILE_M x TILE_N = 128 x 128 of C, K-slices of TILE_K = 16 (-DFP32_BK:
//   8, 16 or 32), MATH_THREADS = 256 = 8 warps (2 x 4), warp tile 64 x 32, thread tile
//   8 x 8: rows row0 + {0..3} and row0 + 32 + {0..3}, columns col0 + {0..3} and
//   col0 + 16 + {0..3}.
//
// Step k of the math needs 8 values of A and 8 of B: two float4 each, a Fragment. The
// fragment of step k+1 is read while the 64 FMAs of step k run (a two-deep register
// pipeline under the shared-memory one), in 128 registers or fewer, so two blocks fit
// an SM. How a slice gets into shared memory is each kernel's business;
// fp32_slice_copier.cuh is the asynchronous way the pipelined kernels share.
#pragma once

#ifndef FP32_BK
#define FP32_BK 16  // the K-slice depth, a compile-time tunable: 8, 16 or 32
#endif

namespace fp32_tile {

constexpr int TILE_M = 128;
constexpr int TILE_N = 128;
constexpr int TILE_K = FP32_BK;
constexpr int MATH_THREADS = 256;  // threads that share one C tile's math: 8 warps (2 x 4)
constexpr int A_PITCH = TILE_M + 4;  // floats per k-row of As (A transposed)
constexpr int A_FLOATS = TILE_K * A_PITCH;  // As of one slice
constexpr int B_FLOATS = TILE_K * TILE_N;   // Bs of one slice
static_assert(TILE_K == 8 || TILE_K == 16 || TILE_K == 32, "FP32_BK must be 8, 16 or 32");

// One K-slice of the block tile in shared memory: both operands k-major.
//   As[k * A_PITCH + m]  A transposed; the copies write it one element at a time, and the
//                        4 floats of padding per k-row keep rows 16-byte aligned and the
//                        transposing writes conflict-free
//   Bs[k * TILE_N + n]   B as stored
// The kernels address a slice as a float pointer `buf` (As = buf, Bs = buf + A_FLOATS)
// and a ring of them as buf = ring + i * SLICE_FLOATS: flat int arithmetic, which is
// what their register budgets (at most 128 per thread) were measured with.
struct Slice {
    float As[A_FLOATS];
    float Bs[B_FLOATS];
};
constexpr int SLICE_FLOATS = A_FLOATS + B_FLOATS;
static_assert(sizeof(Slice) == SLICE_FLOATS * sizeof(float), "a Slice is As then Bs, unpadded");

// A ring of STAGES slices (the pipelined kernels' dynamic shared memory).
template <int STAGES>
struct Ring {
    Slice slice[STAGES];
};

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
    f.a0 = *reinterpret_cast<const float4*>(&As[k * A_PITCH + t.row0]);
    f.a1 = *reinterpret_cast<const float4*>(&As[k * A_PITCH + t.row0 + 32]);
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

// COMPUTE, one K-slice: acc += As x Bs over the thread's rows and columns; the
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

// STORE: the thread's 8 x 8 of C to global memory (float4 stores when VEC), clipped to M x N.
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

}  // namespace fp32_tile
