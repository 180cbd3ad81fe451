// Double-buffered (multi-stage) fp32 GEMM: C[M,N] = A[M,K] @ B[K,N], row-major fp32.
//
// Technique: a ring of STAGES shared-memory buffers filled by cuda::memcpy_async
// (cp.async, LDGSTS in SASS: global -> shared without passing through registers)
// through a block-scoped cuda::pipeline. While the block computes on K-slice k, the
// copies of slices k+1 .. k+STAGES-1 are already in flight:
//
//   producer_acquire()  wait until every thread has released the buffer (slot free)
//   memcpy_async(...)   start the copies of one K-slice into that buffer
//   producer_commit()   the buffer is "produced" once these copies have landed
//   consumer_wait()     wait for the oldest buffer to be complete (all threads' copies)
//   ...compute...
//   consumer_release()  this thread is done reading the buffer
//
// The tile math is exactly gemm_tiled.cu's (128 x 128 block tile, BK = 16, 256
// threads, 8 x 8 thread tiles, float4 shared reads); only the pipeline differs.
// STAGES = 2, 3, 4 are separate kernels: gemm_double_buffer_s{2,3,4}[_scalar].
// Dynamic shared memory: STAGES * 18432 bytes (> 48 KiB from 3 stages on).
//
// Edges: any M, N, K. VEC kernels copy 16-byte chunks (need K % 4 == 0, N % 4 == 0,
// 16-byte aligned pointers); _scalar kernels copy 4-byte elements. Elements outside
// the matrices are written as zeros with ordinary stores; the arrive in
// producer_commit() orders them before the consumers' wait like the async copies.
#include <cooperative_groups.h>
#include <cuda/pipeline>
#include <fullpipe/gemm_fp32_tile.cuh>

#define THREADS 256
#define A_FLOATS (TILE_M * A_STRIDE)
#define STAGE_FLOATS (A_FLOATS + TILE_K * TILE_N)  // one ring buffer: As then Bs

namespace cg = cooperative_groups;

namespace {

using namespace fp_fp32_tile;

template <bool VEC>
__device__ __forceinline__ void copy_slice_async(float* As, float* Bs, const float* __restrict__ A,
                                                 const float* __restrict__ B, int M, int N, int K, int bm, int bn,
                                                 int k0, cuda::pipeline<cuda::thread_scope_block>& pipe) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int c = threadIdx.x + THREADS * r;
        const int gr = bm + c / 4, gk = k0 + (c % 4) * 4;
        float* da = &As[(c / 4) * A_STRIDE + (c % 4) * 4];
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
}

template <int STAGES, bool VEC>
__device__ __forceinline__ void gemm_double_buffer(const float* __restrict__ A, const float* __restrict__ B,
                                                   float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float ring[];  // STAGES x (As[128][20], Bs[16][128])
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> pipe_state;
    auto pipe = cuda::make_pipeline(cg::this_thread_block(), &pipe_state);

    const int bm = blockIdx.y * TILE_M, bn = blockIdx.x * TILE_N;
    const ThreadTile t;
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    const int slices = (K + TILE_K - 1) / TILE_K;
    int fetched = 0;  // K-slices whose copies have been started
    for (int s = 0; s < slices; ++s) {
        // Producer: keep up to STAGES slices in flight ahead of the one computed now.
        for (; fetched < slices && fetched < s + STAGES; ++fetched) {
            float* buf = ring + (fetched % STAGES) * STAGE_FLOATS;
            pipe.producer_acquire();
            copy_slice_async<VEC>(buf, buf + A_FLOATS, A, B, M, N, K, bm, bn, fetched * TILE_K, pipe);
            pipe.producer_commit();
        }
        // Consumer: the oldest slice.
        const float* buf = ring + (s % STAGES) * STAGE_FLOATS;
        pipe.consumer_wait();
        compute_slice(buf, buf + A_FLOATS, t, acc);
        pipe.consumer_release();
    }
    store_tile<VEC>(C, M, N, bm, bn, t, acc);
}

}  // namespace

// grid = (ceil(N/128), ceil(M/128)), block = 256, dynamic shared memory = STAGES * 18432.
#define DOUBLE_BUFFER_KERNEL(S)                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS, 2)                                              \
        gemm_double_buffer_s##S(const float* __restrict__ A, const float* __restrict__ B,                 \
                                float* __restrict__ C, int M, int N, int K) {                             \
        gemm_double_buffer<S, true>(A, B, C, M, N, K);                                                    \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, 2)                                              \
        gemm_double_buffer_s##S##_scalar(const float* __restrict__ A, const float* __restrict__ B,        \
                                         float* __restrict__ C, int M, int N, int K) {                    \
        gemm_double_buffer<S, false>(A, B, C, M, N, K);                                                   \
    }

DOUBLE_BUFFER_KERNEL(2)
DOUBLE_BUFFER_KERNEL(3)
DOUBLE_BUFFER_KERNEL(4)
