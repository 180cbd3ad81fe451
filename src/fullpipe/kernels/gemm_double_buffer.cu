// Rung 2 of the fp32 ladder: multi-stage (double-buffered) GEMM, C[M,N] = A[M,K] @ B[K,N].
//
// Technique: a ring of STAGES shared-memory slices filled by asynchronous copies
// (cp.async, LDGSTS in SASS: global -> shared without passing through registers).
// While the block computes on K-slice s, the copies of slices s+1 .. s+STAGES-1 are
// already in flight. Read it in gemm_double_buffer():
//
//   prologue    start slices 0 .. STAGES-2, one commit (cp.async group) each
//   slice s     wait_prior        my copies of slice s have landed (cp.async.wait_group)
//               __syncthreads     everybody's have, AND everybody is done reading slice
//                                 s-1, whose buffer is refilled next
//               producer_commit   start slice s+STAGES-1 into that buffer
//               compute slice s   while those copies fly
//
// Each thread tracks its own copies with a thread-scope cuda::pipeline (CCCL's form of
// cp.async commit groups; the copier is fp32_slice_copier.cuh); one __syncthreads per
// slice makes all threads' copies visible and frees the previous buffer. Every thread
// copies AND computes, so a block-wide barrier is the exact hand-off: no mbarriers.
//
// Tile math: fp32_tile.cuh, exactly tiled's; only the pipeline differs. STAGES = 2, 3,
// 4 are separate kernels gemm_double_buffer_s{2,3,4}[_scalar]. Edges: any M, N, K. VEC
// kernels copy B in 16-byte chunks (N % 4 == 0, 16-byte aligned B; the front also asks
// K % 4 == 0 and aligned A and C, for tiled's sake); _scalar kernels copy 4-byte
// elements. Elements outside the matrices are written as zeros with ordinary stores;
// the __syncthreads before the slice is computed orders them like the async copies.
#include <cuda/pipeline>
#include <fullpipe/fp32_slice_copier.cuh>
#include <fullpipe/fp32_tile.cuh>

namespace {

using namespace fp32_tile;

constexpr int THREADS = MATH_THREADS;  // every thread copies and computes

template <int STAGES, bool VEC>
__device__ __forceinline__ void gemm_double_buffer(const float* __restrict__ A, const float* __restrict__ B,
                                                   float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float ring[];  // a Ring<STAGES>: slice i at ring + i * SLICE_FLOATS
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();  // this thread's copy groups
    const int bm = blockIdx.y * TILE_M, bn = blockIdx.x * TILE_N;
    SliceCopier<THREADS> copier(A, B, M, N, K, threadIdx.x);
    copier.start_tile(bm, bn);
    const ThreadTile t;
    float acc[8][8];
    zero_acc(acc);

    const int slices = (K + TILE_K - 1) / TILE_K;
    // Prologue: slices 0 .. STAGES-2 in flight. Always STAGES-1 commits (empty ones
    // when K is short), so that the wait below always means "slice s".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) {
            float* buf = ring + s * SLICE_FLOATS;
            copier.copy_next<VEC>(buf, buf + A_FLOATS, pipe);
        }
        pipe.producer_commit();
    }

    int read = 0, write = STAGES - 1;  // ring slots of slice s and of slice s + STAGES - 1
    for (int s = 0; s < slices; ++s) {
        // My copies of slice s have landed: at most the STAGES-2 newer commits are pending.
        cuda::pipeline_consumer_wait_prior<STAGES - 2>(pipe);
        __syncthreads();  // everybody's have; and nobody reads slice s-1 any more
        // Producer: slice s+STAGES-1 into the buffer slice s-1 used.
        if (s + STAGES - 1 < slices) {
            float* buf = ring + write * SLICE_FLOATS;
            copier.copy_next<VEC>(buf, buf + A_FLOATS, pipe);
        }
        pipe.producer_commit();  // an empty commit near the end keeps the count right
        // Consumer: slice s, while the copies above are in flight.
        const float* buf = ring + read * SLICE_FLOATS;
        compute_slice(buf, buf + A_FLOATS, t, acc);
        read = read + 1 == STAGES ? 0 : read + 1;
        write = write + 1 == STAGES ? 0 : write + 1;
    }
    // Only empty groups can be pending here, but never leave copies in flight.
    cuda::pipeline_consumer_wait_prior<0>(pipe);
    store_tile<VEC>(C, M, N, bm, bn, t, acc);
}

}  // namespace

// Launch: kernels/gemm.py plans it (grid over the 128 x 128 C tiles, THREADS threads,
// dynamic shared memory sizeof(Ring<S>), exported here for the tests to compare).
#define DOUBLE_BUFFER_KERNEL(S)                                                                            \
    extern "C" __device__ const unsigned fp_dynamic_smem_gemm_double_buffer_s##S =                        \
        sizeof(fp32_tile::Ring<S>);                                                                       \
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
