// Tensor-core GEMM with nvcuda::wmma: C[M,N] (fp32) = A[M,K] @ B[K,N], A and B fp16 or
// bf16, row-major, accumulation in fp32.
//
// Technique: tensor cores (wmma 16x16x16 fragments -> HMMA in SASS) fed from a
// multi-stage cp.async ring in shared memory:
//
//   prologue   start the copies of K-slices 0 .. STAGES-2 (one commit group each)
//   loop kt    wait until slice kt has landed (cp.async.wait_group STAGES-2),
//              __syncthreads (everybody's copies landed AND everybody is done with
//              slice kt-1, whose buffer is refilled next),
//              start the copies of slice kt+STAGES-1 into that buffer, commit,
//              compute slice kt on the tensor cores while those copies fly.
//
// Tiles: block 128 x 256, BK = 32, 8 warps (2 x 4), each warp 64 x 64 = 4 x 4
// accumulator fragments. Shared rows are skewed by 8 elements (16 bytes): the rows
// of a 16x16 fragment then start in different banks, so the fragment loads
// (ldmatrix) are conflict-free. Blocks are visited in groups of GROUP_M tile rows,
// so that the A and B panels in use at the same time stay in L2.
//
// Constraints (checked by the Python wrapper): K % 8 == 0 and N % 8 == 0, 16-byte
// aligned pointers (16-byte cp.async chunks). Any M. Chunks outside A or B are
// zero-filled by cp.async itself (src-size 0).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

#define BM 128
#define BN 256
#define BK 32
#define WM 64
#define WN 64
#define WARPS_N (BN / WN)            // 4
#define THREADS 256                   // (BM / WM) * (BN / WN) warps
#define FM (WM / 16)                  // 4 fragments down
#define FN (WN / 16)                  // 4 fragments across
#define A_LD (BK + 8)                 // elements per As row (skew 8 = 16 bytes)
#define B_LD (BN + 8)                 // elements per Bs row
#define A_ELEMS (BM * A_LD)
#define STAGE_ELEMS (A_ELEMS + BK * B_LD)
#define C_LD (WN + 4)                 // floats per row of a warp's epilogue strip
#define GROUP_M 8

namespace {

__device__ __forceinline__ void cp_async_16(unsigned dst, const void* gmem, bool valid) {
    const int src_bytes = valid ? 16 : 0;  // 0: nothing is read, 16 zero bytes are written
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Fragment loads from shared memory. For fp16, wmma::load_matrix_sync becomes
// ldmatrix (LDSM) once the compiler knows the pointer is shared (__isShared below).
// The bf16 overloads are not address-space inferred by NVRTC 13.0 and would become
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

// The copies of one thread, set up once: which chunks it moves and where they go.
// A slice: 128 rows x 4 chunks (8 elements, 16 bytes each) = 512 chunks, 2 per thread;
// B slice: 32 rows x 32 chunks = 1024 chunks, 4 per thread. Per slice only the K
// offset changes, so the main loop does little address arithmetic.
template <typename T>
struct SliceCopier {
    const T* a_src[2];
    const T* b_src[4];
    int a_k[2], b_k[4];          // K index of the chunk within the slice (+ k0)
    bool a_ok[2], b_ok[4];       // row of A < M, columns of B < N
    unsigned a_dst[2], b_dst[4];  // byte offsets inside a ring buffer
    const T* A;
    const T* B;
    int N, K;

    __device__ SliceCopier(const T* A_, const T* B_, int M, int N_, int K_, int bm, int bn) : A(A_), B(B_), N(N_), K(K_) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int c = threadIdx.x + THREADS * r;
            const int row = c / 4, kc = (c % 4) * 8;
            a_ok[r] = bm + row < M;
            a_k[r] = kc;
            a_src[r] = A + (size_t)(a_ok[r] ? bm + row : 0) * K + kc;
            a_dst[r] = (row * A_LD + kc) * sizeof(T);
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int c = threadIdx.x + THREADS * r;
            const int row = c / 32, nc = (c % 32) * 8;
            b_ok[r] = bn + nc < N;
            b_k[r] = row;
            b_src[r] = B + (size_t)row * N + (b_ok[r] ? bn + nc : 0);
            b_dst[r] = (A_ELEMS + row * B_LD + nc) * sizeof(T);
        }
    }

    // Start the copies of K-slice k0 .. k0+BK into the ring buffer at shared address `buf`.
    __device__ __forceinline__ void start(unsigned buf, int k0) const {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const bool ok = a_ok[r] && k0 + a_k[r] < K;
            cp_async_16(buf + a_dst[r], ok ? a_src[r] + k0 : A, ok);
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const bool ok = b_ok[r] && k0 + b_k[r] < K;
            cp_async_16(buf + b_dst[r], ok ? b_src[r] + (size_t)k0 * N : B, ok);
        }
    }
};

template <typename T, int STAGES>
__device__ __forceinline__ void gemm_wmma(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C,
                                          int M, int N, int K) {
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
    // Prologue: slices 0 .. STAGES-2 in flight (always STAGES-1 commit groups).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) copier.start(ring_addr + s * STAGE_BYTES, s * BK);
        cp_async_commit();
    }

    for (int kt = 0; kt < slices; ++kt) {
        cp_async_wait<STAGES - 2>();  // my copies of slice kt have landed
        __syncthreads();              // everybody's have; slice kt-1 is no longer read
        const int next = kt + STAGES - 1;
        if (next < slices) copier.start(ring_addr + (next % STAGES) * STAGE_BYTES, next * BK);
        cp_async_commit();  // an empty group near the end keeps the wait count right

        const T* As = ring + (kt % STAGES) * STAGE_ELEMS;
        const T* Bs = As + A_ELEMS;
        __builtin_assume(__isShared(As));  // lets the fragment loads become ldmatrix, not generic loads
        __builtin_assume(__isShared(Bs));
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[FM];
#pragma unroll
            for (int i = 0; i < FM; ++i) load_fragment(a[i], As + (wm + 16 * i) * A_LD + kk, A_LD);
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
                load_fragment(b, Bs + kk * B_LD + wn + 16 * j, B_LD);
#pragma unroll
                for (int i = 0; i < FM; ++i) wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is reused below for the epilogue

    // Epilogue: each warp writes one 16 x 64 strip of its tile at a time through its
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

// grid = ceil(M/128) * ceil(N/256) blocks (1-D), block = 256,
// dynamic shared memory = STAGES * STAGE_ELEMS * 2 bytes (3: 81408, 4: 108544).
#define WMMA_KERNEL(NAME, T, S)                                                                              \
    extern "C" __global__ void __launch_bounds__(THREADS, 1)                                                \
        NAME(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C, int M, int N, int K) { \
        gemm_wmma<T, S>(A, B, C, M, N, K);                                                                  \
    }

WMMA_KERNEL(gemm_wmma_f16_s3, __half, 3)
WMMA_KERNEL(gemm_wmma_f16_s4, __half, 4)
WMMA_KERNEL(gemm_wmma_bf16_s3, __nv_bfloat16, 3)
WMMA_KERNEL(gemm_wmma_bf16_s4, __nv_bfloat16, 4)
