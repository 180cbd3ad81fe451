// The ceiling of the fp32 tile math: gemm_double_buffer.cu with its copies taken out.
//
// Each block runs the same slices, the same __syncthreads per slice and the same ring
// rotation over STAGES buffers, on the same math (fp32_tile.cuh), but nobody
// loads anything: the ring holds the zeros written once at the start. The time it
// takes is what ANY pipeline feeding this math could reach at this occupancy (two
// blocks per SM) if its loads were free. So the benchmark reads:
//   double_buffer / ceiling   the share of the load time the ring already hides
//   ceiling / tiled           the most any pipeline could buy over tiled
// C receives zeros: a timing kernel, never a GEMM. Read it in gemm_fp32_ceiling().
#include <fullpipe/fp32_tile.cuh>

namespace {

using namespace fp32_tile;

constexpr int THREADS = MATH_THREADS;

template <int STAGES>
__device__ __forceinline__ void gemm_fp32_ceiling(float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float ring[];
    for (int i = threadIdx.x; i < STAGES * SLICE_FLOATS; i += THREADS) ring[i] = 0.f;
    const ThreadTile t;
    float acc[8][8];
    zero_acc(acc);
    const int slices = (K + TILE_K - 1) / TILE_K;
    int read = 0;
    for (int s = 0; s < slices; ++s) {
        __syncthreads();  // where double_buffer waits for its copies and frees a buffer
        const float* buf = ring + read * SLICE_FLOATS;
        compute_slice(buf, buf + A_FLOATS, t, acc);
        read = read + 1 == STAGES ? 0 : read + 1;
    }
    store_tile<true>(C, M, N, blockIdx.y * TILE_M, blockIdx.x * TILE_N, t, acc);
}

}  // namespace

// Launch: double_buffer's (kernels/gemm.py plan_fp32_ceiling). A and B are unused; the
// signature is the GEMM kernels' so that one launcher serves all.
#define CEILING_KERNEL(S)                                                                                  \
    extern "C" __device__ const unsigned fp_dynamic_smem_gemm_fp32_ceiling_s##S =                         \
        sizeof(fp32_tile::Ring<S>);                                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS, 2)                                              \
        gemm_fp32_ceiling_s##S(const float* __restrict__ A, const float* __restrict__ B,                  \
                               float* __restrict__ C, int M, int N, int K) {                              \
        gemm_fp32_ceiling<S>(C, M, N, K);                                                                 \
    }

CEILING_KERNEL(2)
CEILING_KERNEL(3)
CEILING_KERNEL(4)
