// Experimental fp32 GEMM variants for scripts/fp32-variants: how far can a pipeline
// take the shared 128 x 128 tile math past the tiled baseline, and what is the ceiling?
// A research copy of the tile math with switches, kept apart from the package's
// kernels so that those stay plain; the package's own ceiling is gemm_fp32_ceiling.cu.
//
// Build macros (NVRTC -D):
//   BK          K-slice depth (8, 16, 32)
//   KMAJOR      1: A is stored k-major in shared memory (As[k][m], copied with 4-byte
//                  cp.async), a thread's 8 rows are two runs of 4 (one float4 each per k),
//                  and the fragments of step k+1 are read while step k is computed: the
//                  math the package adopted (gemm_fp32_tile.cuh) after this experiment;
//               0: the math it replaced (As[m][k], rows strided by 8, float4 over k).
//   STAGES      ring depth of the pipelined kernel (v_db) and of the ceiling v_ceil_db
//   FRAG_FIRST  1: v_db reads the first fragments of slice s before it issues the copies
//                  of slice s + STAGES - 1 (hides the shared-load latency behind them)
//   MINB        blocks per SM for __launch_bounds__ (2: 128 registers, 1: 255)
//
// Kernels (grid = (N/128, M/128), 256 threads, dynamic shared memory):
//   v_tiled      load (global -> registers -> shared), sync, compute, sync
//   v_db         STAGES-deep cp.async ring, one __syncthreads per slice
//   v_ceil_tiled v_tiled without the global loads: the same syncs and math on whatever
//                is in shared memory (the tiled structure's ceiling)
//   v_ceil_db    v_db without the copies: one sync per slice over a rotating ring
//                (the ceiling of ANY pipeline feeding this math at this occupancy)
// The ceilings compute garbage; they are timed, never checked.
#include <cuda/pipeline>

#ifndef BK
#define BK 16
#endif
#ifndef KMAJOR
#define KMAJOR 1
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef FRAG_FIRST
#define FRAG_FIRST 1
#endif
#ifndef MINB
#define MINB 2
#endif

#define BM 128
#define BN 128
#define THREADS 256

#if KMAJOR
#define AS_STRIDE (BM + 4)  // As[k][m]; +4 keeps float4 rows aligned
#define A_FLOATS (BK * AS_STRIDE)
#else
#define AS_STRIDE (BK + 4)  // As[m][k]
#define A_FLOATS (BM * AS_STRIDE)
#endif
#define B_FLOATS (BK * BN)
#define STAGE_FLOATS (A_FLOATS + B_FLOATS)

namespace {

struct Tile {
    int row0, col0;
    __device__ Tile() {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#if KMAJOR
        row0 = (warp / 4) * 64 + (lane / 4) * 4;  // rows row0 + {0..3}, row0 + 32 + {0..3}
#else
        row0 = (warp / 4) * 64 + lane / 4;        // rows row0 + 8 i
#endif
        col0 = (warp % 4) * 32 + (lane % 4) * 4;  // columns col0 + {0..3}, col0 + 16 + {0..3}
    }
    __device__ int row(int i) const {
#if KMAJOR
        return row0 + (i / 4) * 32 + i % 4;
#else
        return row0 + 8 * i;
#endif
    }
};

__device__ __forceinline__ void outer(float acc[8][8], const float a[8], const float4 b0, const float4 b1) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        acc[i][0] = fmaf(a[i], b0.x, acc[i][0]);
        acc[i][1] = fmaf(a[i], b0.y, acc[i][1]);
        acc[i][2] = fmaf(a[i], b0.z, acc[i][2]);
        acc[i][3] = fmaf(a[i], b0.w, acc[i][3]);
        acc[i][4] = fmaf(a[i], b1.x, acc[i][4]);
        acc[i][5] = fmaf(a[i], b1.y, acc[i][5]);
        acc[i][6] = fmaf(a[i], b1.z, acc[i][6]);
        acc[i][7] = fmaf(a[i], b1.w, acc[i][7]);
    }
}

#if KMAJOR
// Fragments of step k: 8 A values (two float4) and 8 B values (two float4).
struct Frag {
    float4 a0, a1, b0, b1;
};
__device__ __forceinline__ void load_frag(Frag& f, const float* As, const float* Bs, const Tile& t, int k) {
    f.a0 = *reinterpret_cast<const float4*>(&As[k * AS_STRIDE + t.row0]);
    f.a1 = *reinterpret_cast<const float4*>(&As[k * AS_STRIDE + t.row0 + 32]);
    f.b0 = *reinterpret_cast<const float4*>(&Bs[k * BN + t.col0]);
    f.b1 = *reinterpret_cast<const float4*>(&Bs[k * BN + t.col0 + 16]);
}
__device__ __forceinline__ void fma_frag(float acc[8][8], const Frag& f) {
    const float a[8] = {f.a0.x, f.a0.y, f.a0.z, f.a0.w, f.a1.x, f.a1.y, f.a1.z, f.a1.w};
    outer(acc, a, f.b0, f.b1);
}
// One slice whose step-0 fragments are already in f0; step k+1 is read during step k.
__device__ __forceinline__ void compute_slice(const float* As, const float* Bs, const Tile& t, float acc[8][8],
                                              const Frag& f0) {
    Frag f[2];
    f[0] = f0;
#pragma unroll
    for (int k = 0; k < BK; ++k) {
        if (k + 1 < BK) load_frag(f[(k + 1) & 1], As, Bs, t, k + 1);
        fma_frag(acc, f[k & 1]);
    }
}
#else
struct Frag {
    float4 a[8];  // rows row0 + 8 i, k = 0..3 of the first group
};
__device__ __forceinline__ void load_frag(Frag& f, const float* As, const float* Bs, const Tile& t, int kk) {
#pragma unroll
    for (int i = 0; i < 8; ++i) f.a[i] = *reinterpret_cast<const float4*>(&As[(t.row0 + 8 * i) * AS_STRIDE + kk]);
}
__device__ __forceinline__ void compute_slice(const float* As, const float* Bs, const Tile& t, float acc[8][8],
                                              const Frag& f0) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 4) {
        Frag g;
        if (kk == 0) g = f0;
        else load_frag(g, As, Bs, t, kk);
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4) {
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[(kk + k4) * BN + t.col0]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[(kk + k4) * BN + t.col0 + 16]);
            float a[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) a[i] = k4 == 0 ? g.a[i].x : k4 == 1 ? g.a[i].y : k4 == 2 ? g.a[i].z : g.a[i].w;
            outer(acc, a, b0, b1);
        }
    }
}
#endif

// ---- copies of one slice into a stage --------------------------------------------------
// B: 16-byte chunks, rows t/32 + 8 r of the slice, columns 4 (t % 32).
// A (KMAJOR): 4-byte elements; thread t copies k = t % 8 + 8 kj of rows t / 8 + 32 mj, so
//   a warp reads 4 rows x 32 bytes (one sector each) and writes banks 4k + m: no conflict.
// A (row-major): 16-byte chunks as in the package.
// The copier keeps running pointers (advanced one slice per copy) so that the main loop
// does no index arithmetic; CHECKED copies test every element against M, N, K (edge
// blocks and the last, partial slice), unchecked ones test nothing.
struct Copier {
    const float* a;  // this thread's first A element of the next slice
    const float* b;  // this thread's first B chunk of the next slice
    size_t a_step;   // A elements between the thread's row groups (32 or BM/(rows per thread) rows)
    size_t b_step;   // B elements between the thread's row groups (8 rows)
    int a_row, a_k, b_k, b_n;  // for CHECKED copies: coordinates inside the slice
    int k0;
    __device__ Copier(const float* A, const float* B, int N, int K, int bm, int bn) {
        const int t = threadIdx.x;
#if KMAJOR
        a_row = t / 8;
        a_k = t % 8;
        a_step = (size_t)32 * K;
#else
        a_row = t / (BK / 4);
        a_k = (t % (BK / 4)) * 4;
        a_step = (size_t)(THREADS / (BK / 4)) * K;
#endif
        b_k = t / 32;
        b_n = (t % 32) * 4;
        b_step = (size_t)8 * N;
        a = A + (size_t)(bm + a_row) * K + a_k;
        b = B + (size_t)b_k * N + bn + b_n;
        k0 = 0;
    }
    template <bool CHECKED>
    __device__ __forceinline__ void copy(float* As, float* Bs, int M, int N, int K, int bm, int bn,
                                         cuda::pipeline<cuda::thread_scope_thread>& pipe) {
#if KMAJOR
#pragma unroll
        for (int mj = 0; mj < 4; ++mj)
#pragma unroll
            for (int kj = 0; kj < BK / 8; ++kj) {
                float* d = &As[(a_k + 8 * kj) * AS_STRIDE + a_row + 32 * mj];
                const float* s = a + mj * a_step + 8 * kj;
                if (!CHECKED || (bm + a_row + 32 * mj < M && k0 + a_k + 8 * kj < K))
                    cuda::memcpy_async(d, s, cuda::aligned_size_t<4>(4), pipe);
                else *d = 0.f;
            }
#else
#pragma unroll
        for (int r = 0; r < BM * BK / 4 / THREADS; ++r) {
            float* d = &As[(a_row + r * (THREADS / (BK / 4))) * AS_STRIDE + a_k];
            const float* s = a + r * a_step;
            if (!CHECKED || (bm + a_row + r * (THREADS / (BK / 4)) < M && k0 + a_k < K))
                cuda::memcpy_async(d, s, cuda::aligned_size_t<16>(16), pipe);
            else *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
        }
#endif
#pragma unroll
        for (int r = 0; r < BK / 8; ++r) {
            float* d = &Bs[(b_k + 8 * r) * BN + b_n];
            if (!CHECKED || (k0 + b_k + 8 * r < K && bn + b_n < N))
                cuda::memcpy_async(d, b + r * b_step, cuda::aligned_size_t<16>(16), pipe);
            else *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        a += BK;
        b += BK * b_step / 8;
        k0 += BK;
    }
};

// The same slice through registers (tiled): A as float4 along k, stored k-major with
// four scalar stores when KMAJOR; thread t loads rows (t + 256 r) % 128 so that a warp's
// stores hit 32 consecutive m (no bank conflict).
template <bool CHECKED>
__device__ __forceinline__ void load_slice_sync(float* As, float* Bs, const float* __restrict__ A,
                                                const float* __restrict__ B, int M, int N, int K, int bm, int bn,
                                                int k0) {
    const int t = threadIdx.x;
    constexpr int RA = BM * BK / 4 / THREADS, RB = BK / 8;
    float4 ra[RA], rb[RB];
#pragma unroll
    for (int r = 0; r < RA; ++r) {
#if KMAJOR
        const int c = t + THREADS * r, m = c % BM, k = (c / BM) * 4;
#else
        const int c = t + THREADS * r, m = c / (BK / 4), k = (c % (BK / 4)) * 4;
#endif
        ra[r] = (!CHECKED || (bm + m < M && k0 + k < K)) ? *reinterpret_cast<const float4*>(&A[(size_t)(bm + m) * K + k0 + k])
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        const int k = t / 32 + 8 * r, n = (t % 32) * 4;
        rb[r] = (!CHECKED || (k0 + k < K && bn + n < N)) ? *reinterpret_cast<const float4*>(&B[(size_t)(k0 + k) * N + bn + n])
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int r = 0; r < RA; ++r) {
#if KMAJOR
        const int c = t + THREADS * r, m = c % BM, k = (c / BM) * 4;
        As[(k + 0) * AS_STRIDE + m] = ra[r].x;
        As[(k + 1) * AS_STRIDE + m] = ra[r].y;
        As[(k + 2) * AS_STRIDE + m] = ra[r].z;
        As[(k + 3) * AS_STRIDE + m] = ra[r].w;
#else
        const int c = t + THREADS * r, m = c / (BK / 4), k = (c % (BK / 4)) * 4;
        *reinterpret_cast<float4*>(&As[m * AS_STRIDE + k]) = ra[r];
#endif
    }
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        const int k = t / 32 + 8 * r, n = (t % 32) * 4;
        *reinterpret_cast<float4*>(&Bs[k * BN + n]) = rb[r];
    }
}

__device__ __forceinline__ void store_c(float* C, int M, int N, int bm, int bn, const Tile& t, float acc[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = bm + t.row(i);
        if (row >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = bn + t.col0 + 16 * h;
            if (col < N)
                *reinterpret_cast<float4*>(&C[(size_t)row * N + col]) =
                    make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
        }
    }
}

__device__ __forceinline__ void zero(float acc[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    v_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float smem[];
    float *As = smem, *Bs = smem + A_FLOATS;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const Tile t;
    float acc[8][8];
    zero(acc);
    const bool interior = bm + BM <= M && bn + BN <= N;
    for (int k0 = 0; k0 < K; k0 += BK) {
        if (interior && k0 + BK <= K) load_slice_sync<false>(As, Bs, A, B, M, N, K, bm, bn, k0);
        else load_slice_sync<true>(As, Bs, A, B, M, N, K, bm, bn, k0);
        __syncthreads();
        Frag f0;
        load_frag(f0, As, Bs, t, 0);
        compute_slice(As, Bs, t, acc, f0);
        __syncthreads();
    }
    store_c(C, M, N, bm, bn, t, acc);
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    v_db(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float ring[];
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const bool interior = bm + BM <= M && bn + BN <= N;
    Copier cp(A, B, N, K, bm, bn);
    // Start the next slice's copies into ring slot `slot` (unchecked inside the matrices).
    auto issue = [&](int slot) {
        float* st = ring + slot * STAGE_FLOATS;
        if (interior && cp.k0 + BK <= K) cp.copy<false>(st, st + A_FLOATS, M, N, K, bm, bn, pipe);
        else cp.copy<true>(st, st + A_FLOATS, M, N, K, bm, bn, pipe);
    };
    const Tile t;
    float acc[8][8];
    zero(acc);
    const int slices = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) issue(s);
        pipe.producer_commit();
    }
    int read = 0, write = STAGES - 1;  // ring slots of slice s and of slice s + STAGES - 1
    for (int s = 0; s < slices; ++s) {
        cuda::pipeline_consumer_wait_prior<STAGES - 2>(pipe);
        __syncthreads();
        const float* rA = ring + read * STAGE_FLOATS;
        Frag f0;
#if FRAG_FIRST
        load_frag(f0, rA, rA + A_FLOATS, t, 0);
#endif
        if (s + STAGES - 1 < slices) issue(write);
        pipe.producer_commit();
#if !FRAG_FIRST
        load_frag(f0, rA, rA + A_FLOATS, t, 0);
#endif
        compute_slice(rA, rA + A_FLOATS, t, acc, f0);
        read = read + 1 == STAGES ? 0 : read + 1;
        write = write + 1 == STAGES ? 0 : write + 1;
    }
    cuda::pipeline_consumer_wait_prior<0>(pipe);
    store_c(C, M, N, bm, bn, t, acc);
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    v_ceil_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float smem[];
    for (int i = threadIdx.x; i < STAGE_FLOATS; i += THREADS) smem[i] = 0.f;
    float *As = smem, *Bs = smem + A_FLOATS;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const Tile t;
    float acc[8][8];
    zero(acc);
    for (int k0 = 0; k0 < K; k0 += BK) {
        __syncthreads();
        Frag f0;
        load_frag(f0, As, Bs, t, 0);
        compute_slice(As, Bs, t, acc, f0);
        __syncthreads();
    }
    store_c(C, M, N, bm, bn, t, acc);
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    v_ceil_db(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) float ring[];
    for (int i = threadIdx.x; i < STAGES * STAGE_FLOATS; i += THREADS) ring[i] = 0.f;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const Tile t;
    float acc[8][8];
    zero(acc);
    const int slices = (K + BK - 1) / BK;
    int read = 0;
    for (int s = 0; s < slices; ++s) {
        __syncthreads();
        const float* rA = ring + read * STAGE_FLOATS;
        Frag f0;
        load_frag(f0, rA, rA + A_FLOATS, t, 0);
        compute_slice(rA, rA + A_FLOATS, t, acc, f0);
        read = read + 1 == STAGES ? 0 : read + 1;
    }
    store_c(C, M, N, bm, bn, t, acc);
}
