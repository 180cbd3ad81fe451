// Warp-specialized fp32 GEMM: C[M,N] = A[M,K] @ B[K,N], row-major fp32.
//
// Technique: permanent roles inside one block, joined by two cuda::pipelines.
//
//   warp 0       LOADER   issues the async copies (cuda::memcpy_async) of each K-slice
//                         into a ring of STAGES shared buffers          ----+
//                                                                           | load pipeline
//   warps 1..8   COMPUTE  wait for a slice, do the 8 x 8-per-thread math,   <---+ (STAGES stages)
//                         release the slice; at the end of a tile write
//                         the 128 x 128 C tile to a shared epilogue buffer ----+
//                                                                              | store pipeline
//   warp 9       STORER   wait for the C tile, write it to global memory,  <---+ (1 stage)
//                         release the buffer
//
// The block is persistent (grid = number of SMs) and walks the C tiles
// blockIdx.x, blockIdx.x + gridDim.x, ...: so the loader already fetches the next
// tile's first slices while the compute warps finish this one, and the storer
// writes tile t while the compute warps work on tile t+1. Loader and storer never
// wait for each other: each talks to the compute warps through its own pipeline.
//
// Each pipeline is made over the warps that use it (a "warp range" group with its
// own named barrier), and each thread takes its role with cuda::pipeline_role:
//   load pipeline : loader = producer, compute = consumer   (threads 0..287)
//   store pipeline: compute = producer, storer = consumer   (threads 32..319)
//
// Tile math: gemm_tiled.cu's (128 x 128 tile, BK = 16, thread tile 8 x 8).
// Kernels gemm_warp_specialized_s{2,3,4}[_scalar]: 320 threads, dynamic shared memory
// STAGES * 18432 + 67584 bytes. Edges as in gemm_double_buffer.cu.
#include <cuda/pipeline>
#include <fullpipe/gemm_fp32_tile.cuh>

#define A_FLOATS (TILE_M * A_STRIDE)
#define STAGE_FLOATS (A_FLOATS + TILE_K * TILE_N)
#define C_STRIDE (TILE_N + 4)  // epilogue buffer row: 132 floats
#define LOADER_WARP 0
#define FIRST_COMPUTE_WARP 1
#define COMPUTE_WARPS 8
#define STORER_WARP 9
#define THREADS 320
#define COMPUTE_THREADS (COMPUTE_WARPS * 32)

namespace {

using namespace fp_fp32_tile;

// A group of consecutive warps with its own named barrier: what cuda::make_pipeline
// needs (size, thread_rank, sync) for a pipeline that only some warps share.
struct WarpRange {
    unsigned first_thread, threads, barrier_id;
    __device__ unsigned size() const { return threads; }
    __device__ unsigned thread_rank() const { return threadIdx.x - first_thread; }
    __device__ void sync() const { asm volatile("bar.sync %0, %1;" ::"r"(barrier_id), "r"(threads) : "memory"); }
};

// LOADER: copy one K-slice (A 128 x 16, B 16 x 128 = 1024 float4 chunks) into a ring
// buffer; 32 lanes, 32 chunks each. Outside the matrices: zeros.
template <bool VEC>
__device__ __forceinline__ void load_slice(float* As, float* Bs, const float* __restrict__ A,
                                           const float* __restrict__ B, int M, int N, int K, int bm, int bn, int k0,
                                           int lane, cuda::pipeline<cuda::thread_scope_block>& pipe) {
#pragma unroll 4
    for (int c = lane; c < 512; c += 32) {
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

// STORER: the 128 x 128 tile from the epilogue buffer to C, one row per step,
// lane l writing columns 4l .. 4l+3 (coalesced 512-byte rows).
template <bool VEC>
__device__ __forceinline__ void store_c_tile(const float* Cs, float* __restrict__ C, int M, int N, int bm, int bn,
                                             int lane) {
    const int col = bn + lane * 4;
    for (int r = 0; r < TILE_M && bm + r < M; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(&Cs[r * C_STRIDE + lane * 4]);
        float* dst = &C[(size_t)(bm + r) * N + col];
        if (VEC) {
            if (col < N) *reinterpret_cast<float4*>(dst) = v;
        } else {
            if (col < N) dst[0] = v.x;
            if (col + 1 < N) dst[1] = v.y;
            if (col + 2 < N) dst[2] = v.z;
            if (col + 3 < N) dst[3] = v.w;
        }
    }
}

template <int STAGES, bool VEC>
__device__ __forceinline__ void gemm_warp_specialized(const float* __restrict__ A, const float* __restrict__ B,
                                                      float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float smem[];
    float* ring = smem;                          // STAGES x (As[128][20], Bs[16][128])
    float* Cs = smem + STAGES * STAGE_FLOATS;    // epilogue buffer [128][132]
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> load_state;
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 1> store_state;

    const WarpRange load_group{0, 32 * (1 + COMPUTE_WARPS), 1};             // loader + compute
    const WarpRange store_group{32 * FIRST_COMPUTE_WARP, 32 * (COMPUTE_WARPS + 1), 2};  // compute + storer

    const int tiles_n = (N + TILE_N - 1) / TILE_N;
    const int tiles = tiles_n * ((M + TILE_M - 1) / TILE_M);
    const int slices = (K + TILE_K - 1) / TILE_K;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (warp == LOADER_WARP) {
        auto load = cuda::make_pipeline(load_group, &load_state, cuda::pipeline_role::producer);
        int it = 0;  // slices produced so far: the ring buffer is it % STAGES
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int bm = (tile / tiles_n) * TILE_M, bn = (tile % tiles_n) * TILE_N;
            for (int s = 0; s < slices; ++s, ++it) {
                float* buf = ring + (it % STAGES) * STAGE_FLOATS;
                load.producer_acquire();  // the compute warps have released this buffer
                load_slice<VEC>(buf, buf + A_FLOATS, A, B, M, N, K, bm, bn, s * TILE_K, lane, load);
                load.producer_commit();   // complete once these copies land
            }
        }
    } else if (warp == STORER_WARP) {
        auto store = cuda::make_pipeline(store_group, &store_state, cuda::pipeline_role::consumer);
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int bm = (tile / tiles_n) * TILE_M, bn = (tile % tiles_n) * TILE_N;
            store.consumer_wait();     // the compute warps have written the C tile
            store_c_tile<VEC>(Cs, C, M, N, bm, bn, lane);
            store.consumer_release();  // they may write the next one
        }
    } else {
        auto load = cuda::make_pipeline(load_group, &load_state, cuda::pipeline_role::consumer);
        auto store = cuda::make_pipeline(store_group, &store_state, cuda::pipeline_role::producer);
        const ThreadTile t(threadIdx.x - 32 * FIRST_COMPUTE_WARP);
        int it = 0;  // slices consumed so far
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            float acc[8][8];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
            for (int s = 0; s < slices; ++s, ++it) {
                const float* buf = ring + (it % STAGES) * STAGE_FLOATS;
                load.consumer_wait();     // the loader's copies of this slice have landed
                compute_slice(buf, buf + A_FLOATS, t, acc);
                load.consumer_release();  // the loader may refill the buffer
            }
            // Hand the tile to the storer through shared memory.
            store.producer_acquire();  // the storer has finished the previous tile
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    *reinterpret_cast<float4*>(&Cs[(t.row0 + 8 * i) * C_STRIDE + t.col0 + 16 * h]) =
                        make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            store.producer_commit();
        }
    }
}

}  // namespace

#define WS_KERNEL(S)                                                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS, 1)                                              \
        gemm_warp_specialized_s##S(const float* __restrict__ A, const float* __restrict__ B,              \
                                   float* __restrict__ C, int M, int N, int K) {                          \
        gemm_warp_specialized<S, true>(A, B, C, M, N, K);                                                 \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, 1)                                              \
        gemm_warp_specialized_s##S##_scalar(const float* __restrict__ A, const float* __restrict__ B,     \
                                            float* __restrict__ C, int M, int N, int K) {                 \
        gemm_warp_specialized<S, false>(A, B, C, M, N, K);                                                \
    }

WS_KERNEL(2)
WS_KERNEL(3)
WS_KERNEL(4)
