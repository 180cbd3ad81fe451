// Tensor-core GEMM with nvcuda::wmma: C[M,N] (fp32) = A[M,K] @ B[K,N], A and B fp16 or
// bf16, row-major, accumulation in fp32.
//
// Technique: tensor cores (wmma 16x16x16 fragments -> HMMA.16816 in SASS) fed from a
// STAGES-deep cp.async ring in shared memory, with the fragments of the next K-step
// loaded into registers while the tensor cores work on the current one.
//
//   global --cp.async (LDGSTS)--> shared ring[STAGES] --ldmatrix (LDSM)--> fragments[2]
//                                                                            |
//                                                     HMMA (acc in registers) <-+
//
// Main loop (WMMA_PREFETCH=1, the default; the same shape as CUTLASS's sm80 multistage):
//   prologue   copies of K-slices 0 .. STAGES-2 in flight (one commit group each);
//              wait for slice 0, __syncthreads, fragments of slice 0 step 0 -> frag[0]
//   slice kt, K-step ks (BK/16 steps):
//     ks == 0       start the copies of slice kt+STAGES-1 into the ring buffer that slice
//                   kt-1 used (everybody finished reading it before the last barrier)
//     ks <  last    load the fragments of step ks+1 -> frag[(ks+1)&1]
//     ks == last    wait for slice kt+1 (cp.async.wait_group STAGES-2), __syncthreads,
//                   load the fragments of slice kt+1 step 0 -> frag[0]
//     always        mma on frag[ks&1]
// So the barrier and the wait sit between two batches of MMAs whose operands are
// already in registers: the tensor pipe keeps draining queued HMMAs across them, and
// the ldmatrix latency of the next step is hidden behind this step's MMAs.
// WMMA_PREFETCH=0 builds the plain loop (barrier, then load + compute each slice): it
// needs no second set of fragment registers, which lets 16-warp tilings stay within
// 128 registers (latency hidden by more warps instead of by prefetching).
//
// Tiles (compile-time, -D macros set by fullpipe/kernels/gemm.py, one cubin per tiling;
// its WMMA_CONFIGS / WMMA_DEFAULT list the candidates, swept in docs/notes/kernels-history.md):
//   block BM x BN, K-slice BK, warps (BM/WM) x (BN/WN), warp tile WM x WN =
//   (WM/16) x (WN/16) accumulator fragments. Without -D (e.g. `fullpipe compile`):
//   128 x 256 x 32, 8 warps of 64 x 64. WMMA_MIN_BLOCKS goes to __launch_bounds__.
// Shared layout per ring buffer: As[BM][BK+8], Bs[BK][BN+8] (16-bit elements). The
// 8-element (16-byte) skew puts the 8 rows of each 8x8 ldmatrix sub-matrix in 8
// different 4-bank groups (row pitch = 4 banks mod 32), so fragment loads are
// conflict-free. (wmma takes a pointer and a row pitch, so a skew, not an XOR swizzle.)
// Block order: GROUP_M tile rows are visited together so that the A and B panels in
// use at the same time stay in L2.
//
// Constraints (checked by the Python wrapper): K % 8 == 0 and N % 8 == 0, 16-byte
// aligned pointers (16-byte cp.async chunks). Any M. Chunks outside A or B are
// zero-filled by cp.async itself (src-size 0).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fullpipe/cp_async.cuh>
#include <mma.h>

using namespace nvcuda;

// ------------------------------------------------------------------ configuration
#ifndef WMMA_BM
#define WMMA_BM 128
#endif
#ifndef WMMA_BN
#define WMMA_BN 256
#endif
#ifndef WMMA_BK
#define WMMA_BK 32
#endif
#ifndef WMMA_WM
#define WMMA_WM 64
#endif
#ifndef WMMA_WN
#define WMMA_WN 64
#endif
#ifndef WMMA_MIN_BLOCKS  // __launch_bounds__ minimum blocks per SM (caps the registers)
#define WMMA_MIN_BLOCKS 1
#endif
#ifndef WMMA_PREFETCH  // 1: fragments of the next K-step loaded during this one's MMAs
#define WMMA_PREFETCH 1
#endif

constexpr int BM = WMMA_BM, BN = WMMA_BN, BK = WMMA_BK, WM = WMMA_WM, WN = WMMA_WN;
constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int FM = WM / 16, FN = WN / 16;  // accumulator fragments down / across a warp tile
constexpr int KSTEPS = BK / 16;            // wmma K-steps per slice
constexpr int SKEW = 8;                    // elements (16 bytes) of padding per shared row
constexpr int A_LD = BK + SKEW, B_LD = BN + SKEW;
constexpr int A_ELEMS = BM * A_LD;
constexpr int STAGE_ELEMS = A_ELEMS + BK * B_LD;  // one ring buffer: As then Bs
constexpr int C_LD = WN + 4;                      // floats per row of a warp's epilogue strip
constexpr int GROUP_M = 8;
// The copies: 16-byte chunks of 8 elements, spread evenly over the threads.
constexpr int A_CHUNK_COLS = BK / 8, B_CHUNK_COLS = BN / 8;
constexpr int A_CHUNKS = BM * A_CHUNK_COLS / THREADS, B_CHUNKS = BK * B_CHUNK_COLS / THREADS;  // per thread
constexpr int A_ROW_STEP = THREADS / A_CHUNK_COLS, B_ROW_STEP = THREADS / B_CHUNK_COLS;         // rows between them

static_assert(BM % WM == 0 && BN % WN == 0, "the block tile must be a whole number of warp tiles");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles are made of 16 x 16 fragments");
static_assert(BK % 32 == 0, "BK must be a multiple of 32 (two wmma K-steps, so a slice has a last and a first step)");
static_assert(THREADS <= 1024, "too many warps for one block");
static_assert(THREADS % A_CHUNK_COLS == 0 && (BM * A_CHUNK_COLS) % THREADS == 0, "A slice does not split evenly");
static_assert(THREADS % B_CHUNK_COLS == 0 && (BK * B_CHUNK_COLS) % THREADS == 0, "B slice does not split evenly");
static_assert(KSTEPS % 2 == 0, "the fragment double buffer alternates: a slice has an even number of K-steps");
static_assert(WARPS_M * WARPS_N * 16 * C_LD * sizeof(float) <= 2 * STAGE_ELEMS * 2,
              "the epilogue strips must fit in a ring of 2 buffers");

namespace {

// Fragment loads from shared memory. For fp16, wmma::load_matrix_sync becomes
// ldmatrix (LDSM) once the compiler knows the pointer is shared (__isShared below).
// The bf16 overloads are not address-space inferred by NVRTC 13 and would become
// generic 32-bit loads, so for bf16 we issue the same PTX instruction the library
// would (wmma.load ... .bf16) with the .shared state space spelled out.
template <typename Frag, typename T>
__device__ __forceinline__ void load_fragment(Frag& f, const T* p, unsigned ldm) {
    wmma::load_matrix_sync(f, p, ldm);
}
__device__ __forceinline__ void load_fragment(
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>& f, const __nv_bfloat16* p,
    unsigned ldm) {
    unsigned* r = reinterpret_cast<unsigned*>(f.x);  // 8 bf16 = 4 registers
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr), "r"(ldm)
                 : "memory");
}
__device__ __forceinline__ void load_fragment(
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>& f, const __nv_bfloat16* p,
    unsigned ldm) {
    unsigned* r = reinterpret_cast<unsigned*>(f.x);
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr), "r"(ldm)
                 : "memory");
}

// ------------------------------------------------------------------ producer side
// The copies of one thread, set up once. Its A chunks share one K column and lie
// A_ROW_STEP rows apart; its B chunks share one N column and lie B_ROW_STEP rows
// apart. So one source pointer per matrix, plus a bit per chunk for "row inside A"
// (A) and a flag for "columns inside B" (B) is all that is kept in registers.
template <typename T>
struct SliceCopier {
    const T* a_src;     // chunk 0 of A for k0 = 0 (row clamped to 0 when outside A)
    const T* b_src;     // chunk 0 of B for k0 = 0
    size_t a_step;      // elements between two A chunks (A_ROW_STEP rows)
    size_t b_step;      // elements between two B chunks (B_ROW_STEP rows)
    unsigned a_rows_ok;  // bit r: A chunk r's row < M
    int a_k, b_k;       // K index of chunk 0 within a slice
    bool b_cols_ok;     // B chunks' columns < N
    unsigned a_dst, b_dst;  // byte offsets of chunk 0 inside a ring buffer
    int K;

    __device__ SliceCopier(const T* A, const T* B, int M, int N, int K_, int bm, int bn) : K(K_) {
        const int ar = threadIdx.x / A_CHUNK_COLS, ak = (threadIdx.x % A_CHUNK_COLS) * 8;
        a_rows_ok = 0;
#pragma unroll
        for (int r = 0; r < A_CHUNKS; ++r) a_rows_ok |= (bm + ar + r * A_ROW_STEP < M ? 1u : 0u) << r;
        a_k = ak;
        a_src = A + (size_t)(bm + ar < M ? bm + ar : 0) * K + ak;
        a_step = (size_t)A_ROW_STEP * K;
        a_dst = (ar * A_LD + ak) * sizeof(T);

        const int br = threadIdx.x / B_CHUNK_COLS, bc = (threadIdx.x % B_CHUNK_COLS) * 8;
        b_cols_ok = bn + bc < N;
        b_k = br;
        b_src = B + (size_t)br * N + (b_cols_ok ? bn + bc : 0);
        b_step = (size_t)B_ROW_STEP * N;
        b_dst = (A_ELEMS + br * B_LD + bc) * sizeof(T);
    }

    // Start the copies of K-slice k0 .. k0+BK into the ring buffer at shared address `buf`.
    // A chunk outside the matrices is zero-filled (src-size 0, source address unused).
    __device__ __forceinline__ void start(unsigned buf, int k0, const T* A, const T* B, int N) const {
        const bool a_k_ok = k0 + a_k < K;
#pragma unroll
        for (int r = 0; r < A_CHUNKS; ++r) {
            const bool ok = a_k_ok && ((a_rows_ok >> r) & 1u);
            const T* src = a_src + k0 + r * a_step;
            cp_async_16(buf + a_dst + r * A_ROW_STEP * A_LD * (int)sizeof(T), ok ? src : A, ok);
        }
#pragma unroll
        for (int r = 0; r < B_CHUNKS; ++r) {
            const bool ok = b_cols_ok && k0 + b_k + r * B_ROW_STEP < K;
            const T* src = b_src + (size_t)k0 * N + r * b_step;
            cp_async_16(buf + b_dst + r * B_ROW_STEP * B_LD * (int)sizeof(T), ok ? src : B, ok);
        }
    }
};

// ------------------------------------------------------------------ consumer side
template <typename T>
struct WarpFragments {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[FM];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b[FN];

    // Fragments of K-step kk (0, 16, ...) of this warp's tile, from one ring buffer.
    __device__ __forceinline__ void load(const T* As, const T* Bs, int wm, int wn, int kk) {
        __builtin_assume(__isShared(As));  // lets the fragment loads become ldmatrix, not generic loads
        __builtin_assume(__isShared(Bs));
#pragma unroll
        for (int i = 0; i < FM; ++i) load_fragment(a[i], As + (wm + 16 * i) * A_LD + kk, A_LD);
#pragma unroll
        for (int j = 0; j < FN; ++j) load_fragment(b[j], Bs + kk * B_LD + wn + 16 * j, B_LD);
    }
};

template <typename T>
__device__ __forceinline__ void mma_step(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[FM][FN],
                                         const WarpFragments<T>& f) {
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], f.a[i], f.b[j], acc[i][j]);
}

// ------------------------------------------------------------------ the kernel body
template <typename T, int STAGES>
__device__ __forceinline__ void gemm_wmma(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C,
                                          int M, int N, int K) {
    static_assert(STAGES >= 2, "a ring needs at least 2 buffers");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* ring = reinterpret_cast<T*>(smem_raw);  // STAGES x (As[BM][A_LD], Bs[BK][B_LD])

    // Grouped block order: GROUP_M tile rows share the B panels in L2.
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * tiles_n;
    const int first_m = (pid / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    const int tile_m = first_m + (pid % per_group) % group_rows;
    const int tile_n = (pid % per_group) / group_rows;
    const int bm = tile_m * BM, bn = tile_n * BN;

    const int warp = threadIdx.x / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    const SliceCopier<T> copier(A, B, M, N, K, bm, bn);
    const unsigned ring_addr = static_cast<unsigned>(__cvta_generic_to_shared(ring));
    constexpr unsigned STAGE_BYTES = STAGE_ELEMS * sizeof(T);
    const int slices = (K + BK - 1) / BK;

    // Prologue: slices 0 .. STAGES-2 in flight (always STAGES-1 commit groups, some
    // possibly empty, so that the wait counts below hold for any K).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) copier.start(ring_addr + s * STAGE_BYTES, s * BK, A, B, N);
        cp_async_commit();
    }

#if WMMA_PREFETCH
    // Invariant at the top of slice kt: slice kt has landed and is visible to all
    // threads, frag[0] holds its step 0, and the ring buffer of slice kt-1 is free.
    int read_stage = 0;             // ring buffer of slice kt
    int write_stage = STAGES - 1;   // ring buffer of slice kt + STAGES - 1 (= that of kt - 1)
    WarpFragments<T> frag[2];
    cp_async_wait<STAGES - 2>();  // my copies of slice 0 have landed
    __syncthreads();              // everybody's have
    frag[0].load(ring, ring + A_ELEMS, wm, wn, 0);

    for (int kt = 0; kt < slices; ++kt) {
        const T* As = ring + read_stage * STAGE_ELEMS;
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            if (ks + 1 < KSTEPS) {
                frag[(ks + 1) & 1].load(As, As + A_ELEMS, wm, wn, 16 * (ks + 1));
            } else if (kt + 1 < slices) {  // uniform over the block: the barrier is safe
                read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
                cp_async_wait<STAGES - 2>();  // groups 0 .. kt+1 done: slice kt+1 landed (mine)
                __syncthreads();              // everybody's; and nobody reads slice kt's buffer any more
                const T* next_As = ring + read_stage * STAGE_ELEMS;
                frag[0].load(next_As, next_As + A_ELEMS, wm, wn, 0);
            }
            if (ks == 0) {
                // Producer: refill the buffer slice kt-1 used. Every thread passed the
                // barrier above (in slice kt-1) after its last fragment load from it.
                const int next = kt + STAGES - 1;
                if (next < slices) copier.start(ring_addr + write_stage * STAGE_BYTES, next * BK, A, B, N);
                cp_async_commit();  // an empty group near the end keeps the wait count right
                write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
            }
            mma_step(acc, frag[ks & 1]);
        }
    }
#else
    // Plain loop: wait, barrier, refill the previous buffer, then load and compute.
    for (int kt = 0; kt < slices; ++kt) {
        cp_async_wait<STAGES - 2>();  // my copies of slice kt have landed
        __syncthreads();              // everybody's have; slice kt-1 is no longer read
        const int next = kt + STAGES - 1;
        if (next < slices) copier.start(ring_addr + (next % STAGES) * STAGE_BYTES, next * BK, A, B, N);
        cp_async_commit();
        const T* As = ring + (kt % STAGES) * STAGE_ELEMS;
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            WarpFragments<T> f;
            f.load(As, As + A_ELEMS, wm, wn, 16 * ks);
            mma_step(acc, f);
        }
    }
#endif
    cp_async_wait<0>();  // only empty groups are left, but never exit with copies in flight
    __syncthreads();     // the ring is reused below for the epilogue: all fragment loads done

    // Epilogue: each warp writes one 16 x WN strip of its tile at a time through its
    // own shared buffer, then to global memory as coalesced, bounds-checked float4s.
    float* strip = reinterpret_cast<float*>(smem_raw) + warp * 16 * C_LD;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::store_matrix_sync(strip + 16 * j, acc[i][j], C_LD, wmma::mem_row_major);
        __syncwarp();
#pragma unroll
        for (int q = 0; q < (16 * WN / 4) / 32; ++q) {
            const int e = lane + 32 * q;
            const int r = e / (WN / 4), c = (e % (WN / 4)) * 4;
            const int row = bm + wm + 16 * i + r, col = bn + wn + c;
            if (row < M && col < N)
                *reinterpret_cast<float4*>(&C[(size_t)row * N + col]) = *reinterpret_cast<const float4*>(&strip[r * C_LD + c]);
        }
        __syncwarp();
    }
}

}  // namespace

// grid = ceil(M/BM) * ceil(N/BN) blocks (1-D), block = THREADS,
// dynamic shared memory = STAGES * STAGE_ELEMS * 2 bytes (computed by gemm.py).
#define WMMA_KERNEL(NAME, T, S)                                                                              \
    extern "C" __global__ void __launch_bounds__(THREADS, WMMA_MIN_BLOCKS)                                  \
        NAME(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C, int M, int N, int K) { \
        gemm_wmma<T, S>(A, B, C, M, N, K);                                                                  \
    }

WMMA_KERNEL(gemm_wmma_f16_s2, __half, 2)
WMMA_KERNEL(gemm_wmma_f16_s3, __half, 3)
WMMA_KERNEL(gemm_wmma_f16_s4, __half, 4)
WMMA_KERNEL(gemm_wmma_f16_s5, __half, 5)
WMMA_KERNEL(gemm_wmma_bf16_s2, __nv_bfloat16, 2)
WMMA_KERNEL(gemm_wmma_bf16_s3, __nv_bfloat16, 3)
WMMA_KERNEL(gemm_wmma_bf16_s4, __nv_bfloat16, 4)
WMMA_KERNEL(gemm_wmma_bf16_s5, __nv_bfloat16, 5)
