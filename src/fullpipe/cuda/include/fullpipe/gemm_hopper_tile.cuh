// The tile every rung of the Hopper GEMM ladder shares (gemm_hopper_*.cu): what is the
// same in all of them, so that each kernel shows only how its tiles arrive.
//
//   C[M,N] = A[M,K] @ B[K,N], A and B row-major bf16 or fp16, fp32 accumulation,
//   C row-major in the input type.
//
// A block computes a 128 x 256 tile of C with two consumer warpgroups, each one a
// 64 x 256 half (wgmma m64n256k16, 128 fp32 accumulators per thread). K advances in
// slices of 64: one Slice holds A[128 x 64] (K-major) and B[64 x 256] (N-major, four
// 64-wide chunks), 128-byte swizzled, exactly what TMA writes for boxes of 64 x rows
// (fullpipe/wgmma.cuh describes the layout).
//
// TILE_N (-D, the persistent rung only; default 256): 128 builds 128 x 128 tiles
// (m64n128k16, 64 accumulators, two B chunks a slice), twice as many tiles for products
// that 128 x 256 tiles spread over too few SMs; 64 builds 128 x 64 tiles (m64n64k16, 32
// accumulators, one B chunk a slice) for products that even 128 x 128 tiles leave half
// the SMs without; 192 builds 128 x 192 tiles (m64n192k16, 96 accumulators, three B chunks
// a slice) for products whose 256-wide tiles leave a wave a quarter or a third empty where
// 192-wide ones fill it (512 x 6144: 96 tiles of 128 x 256 on 132 SMs, 128 of 128 x 192).
//
// TILE_M (-D, the persistent rung only; default 128): 64 builds tiles of 64 rows for one
// consumer warpgroup, twice as many tiles again for products too small to fill the GPU
// with 128-row ones.
//
// B_K_MAJOR (-D, the persistent rung only; default 0): 1 takes B as the transpose of a
// row-major N x K matrix W (an nn.Linear weight: C = A @ W^T) with no copy. B's chunk is
// then 64 rows of W by 64 of K, one TMA box as for A, and the slice's B is K-major like A
// (imm-trans-b 0): BN rows of 128 bytes, 8-row atoms 1 KiB apart. With B K-major, TILE_N
// may also be any of 80 ... 240 in steps of 16 (m64n80k16 ... m64n240k16): the persistent
// rung's transposed product (SWAP_AB), its tile as wide as the product's rows.
#pragma once

#include <fullpipe/wgmma.cuh>

namespace fp_hopper {

#ifndef TILE_M
#define TILE_M 128
#endif
static_assert(TILE_M == 128 || TILE_M == 64, "C tiles of 128 rows (two consumer warpgroups) or 64 (one)");
constexpr int BM = TILE_M;      // C tile rows per block
#ifndef TILE_N
#define TILE_N 256
#endif
#ifndef B_K_MAJOR
#define B_K_MAJOR 0
#endif
// A_MN_MAJOR (-D, the persistent rung's transposed product only; default 0): the kernel's A
// is a row-major K x N matrix b read as its transpose (the product x @ b of a row-major b,
// b's columns on wgmma's M): A's slice then arrives as BM / 64 chunks of 64 K-rows by 64 of
// b's columns, laid out as a row-major B's chunks, and is read MN-major (imm-trans-a 1).
#ifndef A_MN_MAJOR
#define A_MN_MAJOR 0
#endif
static_assert(!A_MN_MAJOR || B_K_MAJOR, "a row-major b's transposed product: the activations are K-major");
static_assert(TILE_N == 256 || TILE_N == 192 || TILE_N == 128 || TILE_N == 64 ||
                  (B_K_MAJOR && TILE_N % 16 == 0 && TILE_N >= 80 && TILE_N <= 256),
              "C tiles of TILE_M x 256, x 192, x 128 or x 64; with B K-major also x 80 ... x 240 in steps of 16");
constexpr int BN = TILE_N;      // C tile columns per block
constexpr int BK = 64;          // K per slice: 64 elements = one 128-byte swizzled row
constexpr int WG_M = 64;        // rows of C per consumer warpgroup
constexpr int CONSUMERS = BM / WG_M;   // consumer warpgroups per block (2, or 1 at TILE_M 64)
constexpr int CHUNK_N = 64;     // B columns per swizzled chunk (128 bytes)
constexpr int ELEM = 2;         // bytes per bf16 / fp16 element
constexpr int A_SLICE_BYTES = BM * BK * ELEM;        // 16 KiB (8 at TILE_M 64)
constexpr int B_CHUNK_BYTES = BK * CHUNK_N * ELEM;   //  8 KiB
constexpr int A_CHUNK_BYTES = BK * WG_M * ELEM;      //  8 KiB: a consumer warpgroup's A, MN-major (A_MN_MAJOR)
constexpr int B_SLICE_BYTES = BN * BK * ELEM;        // 32 KiB (16 at TILE_N 128, 8 at 64)
constexpr int SLICE_BYTES = A_SLICE_BYTES + B_SLICE_BYTES;
constexpr int MMA_K = 16;       // K per wgmma
constexpr int ACC = WG_M * BN / 128;   // fp32 accumulators per consumer thread (128, 64 or 32)

// One K slice of the ring: A then B, each 1024-byte aligned (swizzle atoms).
struct alignas(1024) Slice {
    unsigned char a[A_SLICE_BYTES];   // BM rows x 128 bytes (A_MN_MAJOR: BM / 64 chunks of 64 K-rows x 128 bytes)
    unsigned char b[B_SLICE_BYTES];   // BN / 64 chunks x (64 K-rows x 128 bytes)
};
static_assert(sizeof(Slice) == SLICE_BYTES, "Slice must be exactly A + B");

// Where a 16-byte chunk lands under the 128-byte swizzle: row r of 128 bytes, chunk c.
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
    return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// The TMA box coordinates (innermost first) of B's 64-column chunk at column n and the
// K slice at k: (n, k) in a row-major K x N B, (k, n) in W = B^T (B_K_MAJOR).
struct BoxAt {
    int x, y;
};
__device__ __forceinline__ BoxAt b_chunk_at(int n, int k) {
    return B_K_MAJOR ? BoxAt{k, n} : BoxAt{n, k};
}

// Warpgroup `wg` multiplies its 64 rows of A by all of B for one slice: 4 wgmma K-steps.
template <bool BF16>
__device__ __forceinline__ void mma_slice(float (&acc)[ACC], const Slice& s, int wg) {
#pragma unroll
    for (int kk = 0; kk < BK / MMA_K; ++kk) {
        if constexpr (A_MN_MAJOR) {   // (the warpgroup's 64 rows of A: one chunk, 16 of its K-rows a step)
            const unsigned long long da = fp_wgmma::desc_mn_major(s.a + wg * A_CHUNK_BYTES + kk * MMA_K * 128,
                                                                  A_CHUNK_BYTES);
            const unsigned long long db = fp_wgmma::desc_k_major(s.b + kk * MMA_K * ELEM);
            fp_wgmma::mma_ss_mn_k_wide<BF16>(acc, da, db, 1);
        } else {
            const unsigned long long da = fp_wgmma::desc_k_major(s.a + wg * WG_M * 128 + kk * MMA_K * ELEM);
            if constexpr (B_K_MAJOR) {
                const unsigned long long db = fp_wgmma::desc_k_major(s.b + kk * MMA_K * ELEM);
                fp_wgmma::mma_ss_kk<BF16>(acc, da, db, 1);
            } else {
                const unsigned long long db = fp_wgmma::desc_mn_major(s.b + kk * MMA_K * 128, B_CHUNK_BYTES);
                fp_wgmma::mma_ss_k_mn<BF16>(acc, da, db, 1);
            }
        }
    }
}

__device__ __forceinline__ void zero(float (&acc)[ACC]) {
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;
}

// Two fp32 -> one bf16x2 / f16x2 word, `lo` in the low half (the lower column).
template <bool BF16>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    if constexpr (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// Grouped tile order: walk `group` tile rows together, column by column, so that the
// blocks running at one time share A rows and B columns in L2.
struct TileCoord {
    int m, n;
};
__device__ __forceinline__ TileCoord grouped_tile(int t, int tiles_m, int tiles_n, int group) {
    const int per_group = group * tiles_n;
    const int first = (t / per_group) * group;
    const int rows = min(group, tiles_m - first);
    const int in_group = t % per_group;
    return {first + in_group % rows, in_group / rows};
}

// Hilbert-curve order on a side x side square (side a power of two): the d-th cell of
// the curve. Consecutive cells are neighbours, so tiles that run at the same time and
// one after the other share A rows and B columns in L2 along the whole walk.
__device__ __forceinline__ TileCoord hilbert_tile(int d, int side) {
    int m = 0, n = 0;
    for (int s = 1; s < side; s *= 2) {
        const int rm = 1 & (d / 2);
        const int rn = 1 & (d ^ rm);
        if (rn == 0) {   // rotate the quadrant
            if (rm == 1) {
                m = s - 1 - m;
                n = s - 1 - n;
            }
            const int t = m;
            m = n;
            n = t;
        }
        m += s * rm;
        n += s * rn;
        d /= 4;
    }
    return {m, n};
}

// stmatrix: a warp writes four 8 x 8 matrices of 16-bit elements to shared memory.
// Lane l holds, in each register r_i, the pair (row l / 4, columns 2 (l % 4) + {0, 1})
// of matrix i (the mma accumulator fragment) and gives the address of row l % 8 of
// matrix l / 8.
__device__ __forceinline__ void store_matrix_x4(void* row_addr, unsigned r0, unsigned r1, unsigned r2,
                                                unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(row_addr))), "r"(r0), "r"(r1), "r"(r2),
                 "r"(r3)
                 : "memory");
}

// The same, each matrix stored transposed (.trans): lane l's registers hold (row l / 4,
// columns 2 (l % 4) + {0, 1}) as above, and the address lane l gives is that of row
// l % 8 of the transposed matrix l / 8, i.e. column l % 8 of the one in the registers.
__device__ __forceinline__ void store_matrix_x4_trans(void* row_addr, unsigned r0, unsigned r1, unsigned r2,
                                                      unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(row_addr))), "r"(r0), "r"(r1), "r"(r2),
                 "r"(r3)
                 : "memory");
}

// Epilogue straight from the accumulators (rungs 1-3): each thread stores bf16x2 /
// f16x2 pairs of its rows; rows >= M and columns >= N are skipped (N is even).
template <bool BF16>
__device__ __forceinline__ void store_accumulators(unsigned short* C, const float (&acc)[ACC], int M, int N,
                                                   int row0, int col0) {
    const int t = threadIdx.x % 128;
    const int warp = t / 32, lane = t % 32;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row0 + warp * 16 + lane / 4 + 8 * h;
        if (row >= M) continue;
        unsigned short* crow = C + static_cast<long long>(row) * N;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = col0 + 8 * j + 2 * (lane % 4);
            if (col < N) *reinterpret_cast<unsigned*>(crow + col) = pack2<BF16>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
    }
}

}  // namespace fp_hopper
