// The asynchronous copier of the pipelined fp32 kernels (gemm_double_buffer.cu with
// 256 lanes, gemm_warp_specialized.cu's loader warp with 32): CCCL's cuda::memcpy_async
// (cp.async, LDGSTS in SASS) tracked by each lane's thread-scope cuda::pipeline. The
// caller commits the copies of a slice (producer_commit) and waits for them
// (cuda::pipeline_consumer_wait_prior<N>): CCCL's pipeline API is the library form of
// cp.async commit groups; kernels that issue the PTX themselves use cp_async.cuh. Both
// compile to the same LDGSTS / LDGDEPBAR / DEPBAR.
#pragma once
#include <cuda/pipeline>
#include <fullpipe/fp32_tile.cuh>

namespace fp32_tile {

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

    // The state is kept small on purpose: the math beside it holds 96 registers of
    // accumulators and fragments under a 128-register cap, and a fat copier made ptxas
    // spill in some of its (nondeterministic) allocations. Bounds are kept as "how many
    // are left" counts, compared against compile-time offsets.
    const float* A;
    const float* B;
    int M, N, K;
    int lane;
    // Set by start_tile, advanced by copy_next:
    const float* a_next;  // the lane's first A element of the next slice
    const float* b_next;  // the lane's first B chunk of the next slice
    int a_rows_left;      // rows of A from the lane's first row to M
    int b_cols_left;      // columns of B from the lane's first column to N
    int k_left;           // K minus the next slice's first k
    int full_slices;      // slices left that lie wholly inside A and B: copied unchecked

    __device__ SliceCopier(const float* A_, const float* B_, int M_, int N_, int K_, int lane_)
        : A(A_), B(B_), M(M_), N(N_), K(K_), lane(lane_) {}

    __device__ __forceinline__ int a_row() const { return lane / 8; }
    __device__ __forceinline__ int a_k() const { return lane % 8; }
    __device__ __forceinline__ int b_row() const { return lane / 32; }
    __device__ __forceinline__ int b_col() const { return (lane % 32) * 4; }

    __device__ __forceinline__ void start_tile(int bm, int bn) {
        a_rows_left = M - bm - a_row();
        b_cols_left = N - bn - b_col();
        k_left = K;
        const bool interior = bm + TILE_M <= M && bn + TILE_N <= N;
        full_slices = interior ? K / TILE_K : 0;
        a_next = A + (size_t)(bm + a_row()) * K + a_k();
        b_next = B + (size_t)b_row() * N + bn + b_col();
    }

    // Start the copies of the next slice into As / Bs (one ring buffer).
    template <bool VEC>
    __device__ __forceinline__ void copy_next(float* As, float* Bs, cuda::pipeline<cuda::thread_scope_thread>& pipe) {
        if (full_slices > 0) copy<VEC, false>(As, Bs, pipe);
        else copy<VEC, true>(As, Bs, pipe);
        a_next += TILE_K;
        b_next += (size_t)TILE_K * N;
        k_left -= TILE_K;
        --full_slices;
    }

    template <bool VEC, bool CHECKED>
    __device__ __forceinline__ void copy(float* As, float* Bs, cuda::pipeline<cuda::thread_scope_thread>& pipe) const {
        // Running source pointers; one warp (32 lanes) has 32 row groups, so its loops
        // are unrolled 4 deep only (fully unrolled they would hold 32 pointers).
        const size_t a_rows = (size_t)A_ROW_STEP * K;
        const float* a_src = a_next;
        float* a_dst = &As[a_k() * A_PITCH + a_row()];
#pragma unroll(A_ROW_GROUPS < 4 ? A_ROW_GROUPS : 4)
        for (int mj = 0; mj < A_ROW_GROUPS; ++mj, a_src += a_rows) {
#pragma unroll
            for (int kj = 0; kj < TILE_K / 8; ++kj) {
                float* dst = a_dst + 8 * kj * A_PITCH + A_ROW_STEP * mj;
                if (!CHECKED || (A_ROW_STEP * mj < a_rows_left && a_k() + 8 * kj < k_left))
                    cuda::memcpy_async(dst, a_src + 8 * kj, cuda::aligned_size_t<4>(4), pipe);
                else
                    *dst = 0.f;
            }
        }
        const size_t b_rows = (size_t)B_ROW_STEP * N;
        const float* b_src = b_next;
        float* b_dst = &Bs[b_row() * TILE_N + b_col()];
#pragma unroll(B_CHUNKS < 4 ? B_CHUNKS : 4)
        for (int r = 0; r < B_CHUNKS; ++r, b_src += b_rows) {
            const bool k_in = b_row() + B_ROW_STEP * r < k_left;
            float* dst = b_dst + B_ROW_STEP * r * TILE_N;
            if (VEC) {
                if (!CHECKED || (k_in && b_cols_left > 0))
                    cuda::memcpy_async(dst, b_src, cuda::aligned_size_t<16>(16), pipe);
                else
                    *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (!CHECKED || (k_in && e < b_cols_left))
                        cuda::memcpy_async(dst + e, b_src + e, cuda::aligned_size_t<4>(4), pipe);
                    else
                        dst[e] = 0.f;
                }
            }
        }
    }
};

}  // namespace fp32_tile
