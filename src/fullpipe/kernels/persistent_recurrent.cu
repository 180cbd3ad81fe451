// A chain of small dependent steps, where persistent kernels genuinely win: a
// recurrence whose weights stay in shared memory (the "persistent RNN" idea).
//
//   H_{t+1} = tanh(H_t W + X_t),  t = 0 .. T-1
//   H_0 = h0 [B, N], W [N, N], X [T, B, N], out [T, B, N] = H_1 .. H_T   (fp32, row-major)
//
// Step t needs ALL of H_t, so no block may start step t+1 before every block has
// finished step t: a whole-grid dependency per step. Work of one step: N/16 column
// tiles (16 columns of W and of H_{t+1} each); for small B one tile is a few
// microseconds of work at most: many small tiles, where launch and tail effects
// dominate.
//
//   recurrent_step        one launch per step, one block per tile (grid = N/16): every
//                         step pays a kernel launch and the drain of the previous one,
//                         and every block copies its 16 columns of W (N x 16 floats)
//                         from L2/global memory into shared memory again, step after
//                         step (all copies issued at once, math on the first rows while
//                         the last ones land).
//   recurrent_persistent  ONE cooperative launch for all T steps, grid = the blocks that
//                         fit on the GPU at once; block g owns tiles g, g + G, ... for
//                         the whole run and keeps their W columns in shared memory
//                         (copied once); the steps are separated by grid.sync().
//
// Both run the same tile code (accumulate + finish_tile) on H_t staged in shared
// memory with cp.async (L2 only, so rows written by other blocks are never read from
// a stale L1) and W columns in shared memory. They differ in how often W is copied
// (every step vs once) and in what separates two steps (the end of one kernel and the
// start of the next vs grid.sync).
//
// Tile math: 256 threads; thread t owns column quad cq = t % 4 (columns 4cq .. 4cq+3 of
// the tile) and rows k = t/4, t/4 + 64, ... of W; B x 4 partial sums per thread, summed
// over the 8 lanes of a warp with the same cq (shuffles), then over the 8 warps
// (shared memory). Needs N % 16 == 0, 1 <= B <= 8, 16-byte aligned arrays.
#include <cooperative_groups.h>
#include <fullpipe/cp_async.cuh>

namespace cg = cooperative_groups;

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int COLS = 16;                       // columns per tile
constexpr int MAX_B = 8;                       // batch rows
constexpr int KGROUPS = THREADS / (COLS / 4);  // 64 threads share a column quad, each takes every 64th row

namespace {

// Copy n floats (n % 4 == 0) global -> shared with 16-byte cp.async (L2 only).
__device__ __forceinline__ void copy_async(float* dst, const float* __restrict__ src, int n) {
    for (int c = threadIdx.x; c < n / 4; c += THREADS) cp_async_16(&dst[4 * c], &src[4 * c], true);
}
// Rows k0 .. k1-1 of the tile's W columns (c0 .. c0+15) into Ws[k][16].
__device__ __forceinline__ void copy_w_rows_async(float* Ws, const float* __restrict__ W, int N, int c0, int k0,
                                                  int k1) {
    for (int c = threadIdx.x + k0 * (COLS / 4); c < k1 * (COLS / 4); c += THREADS) {
        const int k = c / (COLS / 4), q = (c % (COLS / 4)) * 4;
        cp_async_16(&Ws[k * COLS + q], &W[(size_t)k * N + c0 + q], true);
    }
}
// Wait until at most `left` (0 .. 3, a compile-time constant after unrolling) of this
// thread's cp.async groups are still in flight.
__device__ __forceinline__ void cp_async_wait_leaving(int left) {
    if (left >= 3) cp_async_wait<3>();
    else if (left == 2) cp_async_wait<2>();
    else if (left == 1) cp_async_wait<1>();
    else cp_async_wait<0>();
}

// acc += Hs[:, k] * Ws[k, :] for this thread's rows k in [k0, k1) (k = kg mod 64) and
// column quad cq. Hs: H_t in shared memory [nb][N]; Ws: the tile's W columns [N][16].
__device__ __forceinline__ void accumulate(const float* Ws, const float* Hs, int nb, int N, int k0, int k1,
                                           float acc[MAX_B][4]) {
    const int cq = threadIdx.x % (COLS / 4), kg = threadIdx.x / (COLS / 4);
#pragma unroll 4
    for (int k = k0 + (kg - k0 % KGROUPS + KGROUPS) % KGROUPS; k < k1; k += KGROUPS) {
        const float4 wv = *reinterpret_cast<const float4*>(&Ws[k * COLS + cq * 4]);
#pragma unroll
        for (int b = 0; b < MAX_B; ++b) {
            if (b < nb) {
                const float h = Hs[b * N + k];
                acc[b][0] = fmaf(h, wv.x, acc[b][0]);
                acc[b][1] = fmaf(h, wv.y, acc[b][1]);
                acc[b][2] = fmaf(h, wv.z, acc[b][2]);
                acc[b][3] = fmaf(h, wv.w, acc[b][3]);
            }
        }
    }
}

// X_t[b, c0 + c] for output (b, c) = (t / 16, t % 16) of thread t < nb * 16, loaded before
// the math so that its latency is hidden.
__device__ __forceinline__ float load_x(const float* __restrict__ Xt, int nb, int N, int c0) {
    return threadIdx.x < nb * COLS ? Xt[(size_t)(threadIdx.x / COLS) * N + c0 + threadIdx.x % COLS] : 0.f;
}

// Hout[:, c0 .. c0+15] = tanh(sum over the block of acc + xv).
__device__ __forceinline__ void finish_tile(float acc[MAX_B][4], float xv, float* __restrict__ Hout, int nb, int N,
                                            int c0, float* red) {
    // Sum over the 8 lanes of the warp with the same cq (lanes cq, cq+4, ..., cq+28) ...
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int b = 0; b < MAX_B; ++b) {
        if (b < nb) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float v = acc[b][j];
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                if (lane < COLS / 4) red[(warp * MAX_B + b) * COLS + lane * 4 + j] = v;
            }
        }
    }
    __syncthreads();
    // ... then over the 8 warps; one thread per output.
    if (threadIdx.x < nb * COLS) {
        const int b = threadIdx.x / COLS, c = threadIdx.x % COLS;
        float s = 0.f;
#pragma unroll
        for (int wi = 0; wi < WARPS; ++wi) s += red[(wi * MAX_B + b) * COLS + c];
        Hout[(size_t)b * N + c0 + c] = tanhf(s + xv);
    }
    __syncthreads();  // red is reused by the next tile
}

__device__ __forceinline__ void zero(float acc[MAX_B][4]) {
#pragma unroll
    for (int b = 0; b < MAX_B; ++b) acc[b][0] = acc[b][1] = acc[b][2] = acc[b][3] = 0.f;
}

}  // namespace

// One step, one block per tile (launch: kernels/persistent.py recurrent_plan: N / COLS
// blocks of THREADS, dynamic shared memory Ws[N][COLS] + Hs[nb][N]). The block copies H_t and its W columns with cp.async,
// all issued at once (W in W_CHUNKS groups of rows), and multiplies chunk c while
// chunks c+1 .. are still landing: the load is as deep as the memory system allows
// and overlaps the math, the strongest one-block-per-tile form of this step.
constexpr int W_CHUNKS = 4;
static_assert(W_CHUNKS == 4, "cp_async_wait_leaving covers 0 .. 3 groups in flight");
extern "C" __global__ void __launch_bounds__(THREADS)
    recurrent_step(const float* __restrict__ Hin, const float* __restrict__ W, const float* __restrict__ Xt,
                   float* __restrict__ Hout, int nb, int N) {
    extern __shared__ __align__(16) float smem[];
    float* Ws = smem;                    // [N][16]
    float* Hs = smem + (size_t)N * COLS;  // [nb][N]
    __shared__ float red[WARPS * MAX_B * COLS];
    const int c0 = blockIdx.x * COLS;
    const int rows = (N + W_CHUNKS - 1) / W_CHUNKS;
    copy_async(Hs, Hin, nb * N);  // H_t joins the first group
#pragma unroll
    for (int c = 0; c < W_CHUNKS; ++c) {
        const int k0 = min(N, c * rows), k1 = min(N, k0 + rows);
        copy_w_rows_async(Ws, W, N, c0, k0, k1);
        cp_async_commit();
    }
    const float xv = load_x(Xt, nb, N, c0);
    float acc[MAX_B][4];
    zero(acc);
#pragma unroll
    for (int c = 0; c < W_CHUNKS; ++c) {
        const int k0 = min(N, c * rows), k1 = min(N, k0 + rows);
        cp_async_wait_leaving(W_CHUNKS - 1 - c);  // my copies of chunk c (and of H_t) landed ...
        __syncthreads();                          // ... and everybody's
        accumulate(Ws, Hs, nb, N, k0, k1, acc);
    }
    finish_tile(acc, xv, Hout, nb, N, c0, red);
}

// All T steps in one cooperative launch (launch: kernels/persistent.py recurrent_plan:
// G <= co-resident blocks of THREADS, dynamic shared memory Ws[tiles_per_block][N][COLS]
// + Hs[nb][N], tiles_per_block = ceil((N / COLS) / G)). Block g owns tiles g, g + G, ...
extern "C" __global__ void __launch_bounds__(THREADS)
    recurrent_persistent(const float* __restrict__ h0, const float* __restrict__ W, const float* __restrict__ X,
                         float* __restrict__ out, int nb, int N, int T, int tiles_per_block) {
    extern __shared__ __align__(16) float smem[];
    float* Ws = smem;                                       // [tiles_per_block][N][16], loaded once
    float* Hs = smem + (size_t)tiles_per_block * N * COLS;  // [nb][N], H_t of the current step
    __shared__ float red[WARPS * MAX_B * COLS];
    cg::grid_group grid = cg::this_grid();
    const int tiles = N / COLS;

    for (int i = 0; i < tiles_per_block; ++i) {  // this block's W columns, once for all T steps
        const int tile = blockIdx.x + i * gridDim.x;
        if (tile < tiles) copy_w_rows_async(Ws + (size_t)i * N * COLS, W, N, tile * COLS, 0, N);
    }
    for (int t = 0; t < T; ++t) {
        const float* Hin = t == 0 ? h0 : out + (size_t)(t - 1) * nb * N;  // written by all blocks at step t-1
        copy_async(Hs, Hin, nb * N);
        cp_async_commit();
        const float* Xt = X + (size_t)t * nb * N;
        const float xv0 = blockIdx.x < tiles ? load_x(Xt, nb, N, blockIdx.x * COLS) : 0.f;  // while H_t lands
        cp_async_wait<0>();  // (at t = 0 also the W columns)
        __syncthreads();
        for (int i = 0; i < tiles_per_block; ++i) {
            const int tile = blockIdx.x + i * gridDim.x;
            if (tile < tiles) {
                const float xv = i == 0 ? xv0 : load_x(Xt, nb, N, tile * COLS);
                float acc[MAX_B][4];
                zero(acc);
                accumulate(Ws + (size_t)i * N * COLS, Hs, nb, N, 0, N, acc);
                finish_tile(acc, xv, out + (size_t)t * nb * N, nb, N, tile * COLS, red);
            }
        }
        // H_{t+1} is complete only when every block has written its tiles: the whole
        // grid waits here (grid.sync also orders this step's reads of Hs before the
        // next step's copies into it).
        if (t + 1 < T) grid.sync();
    }
}
