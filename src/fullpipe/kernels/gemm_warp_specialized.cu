// Warp-specialized fp32 GEMM: C[M,N] = A[M,K] @ B[K,N], row-major fp32.
//
// Technique: permanent roles inside one block, joined by mbarriers (the "full" /
// "empty" pair of each ring buffer: a producer/consumer handshake in shared memory).
//
//   warp 0       LOADER   for each K-slice: wait empty[b], start the async copies
//                         (cuda::memcpy_async) into ring buffer b, and once they have
//                         landed arrive on full[b]                          ----+
//                                                                               | load ring
//   warps 1..8   COMPUTE  wait full[b], do the 8 x 8-per-thread math,       <---+ (STAGES buffers)
//                         arrive on empty[b]; at the end of a tile: wait
//                         c_empty, write the 128 x 128 C tile to a shared
//                         epilogue buffer, arrive on c_full                 ----+
//                                                                               | store hand-off
//   warp 9       STORER   wait c_full, write the tile to global memory,     <---+ (1 buffer)
//                         arrive on c_empty
//
// The block is persistent (grid = number of SMs) and walks the C tiles
// blockIdx.x, blockIdx.x + gridDim.x, ...: so the loader already fetches the next
// tile's first slices while the compute warps finish this one, and the storer
// writes tile t while the compute warps work on tile t+1.
//
// Phases: slice number `it` (counted over all tiles of the block) lives in buffer
// b = it % STAGES; it is the (it / STAGES)-th use of that buffer, so waiters wait on
// parity (it / STAGES) & 1 of full[b] / empty[b]. The loader tracks its own copies
// with a thread-scope cuda::pipeline (cp.async commit groups) and signals slice
// it - LAG (LAG = STAGES - 2) after issuing slice it and waiting for that older group:
// up to LAG + 1 slices are in flight per lane, and the compute warps always find the
// next slice signalled while they work on the current one. A plain mbarrier arrive
// (release) after cp.async.wait_group publishes the copies (and the zero-filled edge
// chunks) to the compute warps' acquiring wait.
//
// Why no cuda::pipeline between the roles (the previous version): its producer_commit()
// makes the barrier track the copies with cp.async.mbarrier.arrive and then arrives
// again, two arrive operations by one thread on one phase, which compute-sanitizer
// synccheck reports as "Missing wait" (seen on gemm_double_buffer). Here every thread
// arrives at most once per phase, and every arrival is waited for by its consumer
// before the block exits (the drains at the end), so nothing is pending at exit.
//
// Tile math: gemm_tiled.cu's (gemm_fp32_tile.cuh: 128 x 128 tile, BK = 16, thread
// tile 8 x 8, k-major As / Bs). The loader's copies are double_buffer's, made by one
// warp (SliceCopier<32>: 64 A elements and 16 B chunks per lane per slice).
// Kernels gemm_warp_specialized_s{2,3,4}[_scalar]: 320 threads, dynamic shared memory
// STAGES * 16640 + 67584 bytes. Edges as in gemm_double_buffer.cu.
#include <cuda/pipeline>
#include <fullpipe/gemm_fp32_tile.cuh>

#define C_STRIDE (TILE_N + 4)  // epilogue buffer row: 132 floats
#define LOADER_WARP 0
#define FIRST_COMPUTE_WARP 1
#define COMPUTE_WARPS 8
#define STORER_WARP 9
#define THREADS 320
#define COMPUTE_THREADS (COMPUTE_WARPS * 32)

namespace {

using namespace fp_fp32_tile;

// mbarrier helpers (PTX, sm_90). A phase completes when `count` threads have arrived;
// waiting names the parity of the phase to wait for (the current or the previous one).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {  // release: my writes before it are published
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {  // acquire
    asm volatile(
        "{\n .reg .pred done;\n"
        "WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n @!done bra WAIT_%=;\n}"
        ::"r"(smem_addr(bar)), "r"(parity) : "memory");
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
    constexpr int LAG = STAGES - 2;  // loader: slices issued but not yet signalled
    extern __shared__ __align__(16) float smem[];
    float* ring = smem;                        // STAGES x (As[16][132], Bs[16][128])
    float* Cs = smem + STAGES * STAGE_FLOATS;  // epilogue buffer [128][132]
    __shared__ unsigned long long full[STAGES];   // loader -> compute: slice landed    (32 arrivals)
    __shared__ unsigned long long empty[STAGES];  // compute -> loader: slice consumed  (256 arrivals)
    __shared__ unsigned long long c_full;         // compute -> storer: C tile written  (256 arrivals)
    __shared__ unsigned long long c_empty;        // storer -> compute: C tile stored   (32 arrivals)
    if (threadIdx.x == 0) {
        for (int b = 0; b < STAGES; ++b) {
            mbar_init(&full[b], 32);
            mbar_init(&empty[b], COMPUTE_THREADS);
        }
        mbar_init(&c_full, COMPUTE_THREADS);
        mbar_init(&c_empty, 32);
    }
    __syncthreads();  // the barriers are initialized before any role uses them

    const int tiles_n = (N + TILE_N - 1) / TILE_N;
    const int tiles = tiles_n * ((M + TILE_M - 1) / TILE_M);
    const int slices = (K + TILE_K - 1) / TILE_K;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (warp == LOADER_WARP) {
        cuda::pipeline<cuda::thread_scope_thread> copies = cuda::make_pipeline();  // this lane's cp.async groups
        SliceCopier<32> copier(A, B, M, N, K, lane);
        int it = 0;  // slices issued so far (over all tiles)
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            copier.start_tile((tile / tiles_n) * TILE_M, (tile % tiles_n) * TILE_N);
            for (int s = 0; s < slices; ++s, ++it) {
                const int b = it % STAGES;
                if (it >= STAGES) mbar_wait(&empty[b], ((it / STAGES) - 1) & 1);  // buffer released
                float* buf = ring + b * STAGE_FLOATS;
                copies.producer_acquire();
                copier.copy_next<VEC>(buf, buf + A_FLOATS, copies);
                copies.producer_commit();
                if (it >= LAG) {  // slice it - LAG has landed (my part of it): signal it
                    cuda::pipeline_consumer_wait_prior<LAG>(copies);
                    mbar_arrive(&full[(it - LAG) % STAGES]);
                }
            }
        }
        cuda::pipeline_consumer_wait_prior<0>(copies);  // the last LAG slices
        for (int g = it > LAG ? it - LAG : 0; g < it; ++g) mbar_arrive(&full[g % STAGES]);
        // Drain: wait until the compute warps have released the last buffers, so that
        // every arrival on empty[] is observed before the block exits.
        for (int g = it > STAGES ? it - STAGES : 0; g < it; ++g) mbar_wait(&empty[g % STAGES], (g / STAGES) & 1);
    } else if (warp == STORER_WARP) {
        int j = 0;  // C tiles stored so far
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++j) {
            const int bm = (tile / tiles_n) * TILE_M, bn = (tile % tiles_n) * TILE_N;
            mbar_wait(&c_full, j & 1);  // the compute warps have written the C tile
            store_c_tile<VEC>(Cs, C, M, N, bm, bn, lane);
            mbar_arrive(&c_empty);  // they may write the next one
        }
    } else {
        const ThreadTile t(threadIdx.x - 32 * FIRST_COMPUTE_WARP);
        int it = 0;  // slices consumed so far
        int j = 0;   // C tiles handed to the storer
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++j) {
            float acc[8][8];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int jj = 0; jj < 8; ++jj) acc[i][jj] = 0.f;
            for (int s = 0; s < slices; ++s, ++it) {
                const int b = it % STAGES;
                const float* buf = ring + b * STAGE_FLOATS;
                mbar_wait(&full[b], (it / STAGES) & 1);  // the loader's copies of this slice have landed
                compute_slice(buf, buf + A_FLOATS, t, acc);
                mbar_arrive(&empty[b]);  // the loader may refill the buffer
            }
            // Hand the tile to the storer through shared memory.
            if (j > 0) mbar_wait(&c_empty, (j - 1) & 1);  // the storer has finished the previous tile
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    *reinterpret_cast<float4*>(&Cs[t.row(i) * C_STRIDE + t.col0 + 16 * h]) =
                        make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            mbar_arrive(&c_full);
        }
        // Drain: the storer's last arrival is observed before the block exits.
        if (j > 0) mbar_wait(&c_empty, (j - 1) & 1);
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
