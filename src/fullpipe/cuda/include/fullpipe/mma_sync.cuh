// Warp-level tensor-core math with mma.sync.m16n8k16 (sm_80+): fragment types, ldmatrix
// loads from an XOR-swizzled shared-memory tile, and fp16/bf16 packing.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"); lane = 4 * group + quad:
//   A 16x16 (row-major), 4 registers of two 16-bit values:
//     a[0] = A[group    ][2*quad .. +1]    a[2] = A[group    ][2*quad + 8 .. +9]
//     a[1] = A[group + 8][2*quad .. +1]    a[3] = A[group + 8][2*quad + 8 .. +9]
//   B 16x8 ("col": B[k][n] read down k), 2 registers:
//     b[0] = B[2*quad .. +1][group]        b[1] = B[2*quad + 8 .. +9][group]
//   C/D 16x8 fp32, 4 floats:
//     c[0..1] = C[group][2*quad .. +1]     c[2..3] = C[group + 8][2*quad .. +1]
// ldmatrix.x4 loads four 8x8 matrices of 16-bit values; lanes 8i .. 8i+7 give the row
// addresses of matrix i, and register i of every lane receives matrix i's row lane/4,
// columns 2*(lane%4) .. +1 (.trans: the transposed matrix, i.e. column lane/4, rows
// 2*(lane%4) .. +1). So an x4 over a row-major 16x16 block gives an A fragment, and an
// x4 over rows of K (keys x dims) or, transposed, of V gives two B fragments at once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace fullpipe {

using uint32_t = unsigned int;  // NVRTC has no <stdint.h>

struct FragA {  // 16x16 operand A: 8 values per lane
    uint32_t r[4];
};
struct FragB {  // 16x8 operand B: 4 values per lane
    uint32_t r[2];
};
struct FragC {  // 16x8 fp32 accumulator: 4 floats per lane
    float r[4];
};

// A row-major tile of ROWS x COLS 16-bit elements in shared memory, stored in 16-byte
// chunks of 8 elements with the chunk index XORed with (row % 8). ldmatrix reads one
// chunk from each of 8 consecutive rows at a time; without the swizzle those 8 chunks
// would sit in the same banks (rows are 128 or 256 bytes apart), with it they cover all
// 32 banks. cp.async writes whole chunks, so the swizzle costs nothing on the way in.
template <int ROWS, int COLS>
struct SwizzledTile {
    static_assert(COLS % 64 == 0, "rows must be whole multiples of 8 chunks (128 bytes) for the XOR swizzle");
    static constexpr int N_ROWS = ROWS;
    static constexpr int N_COLS = COLS;
    static constexpr int CHUNKS_PER_ROW = COLS / 8;
    static constexpr int ROW_BYTES = COLS * 2;
    static constexpr int ELEMS = ROWS * COLS;
    static constexpr int BYTES = ELEMS * 2;

    // Element offset of chunk `chunk` (8 elements) of row `row`.
    __device__ __forceinline__ static int offset(int row, int chunk) {
        return row * COLS + ((chunk ^ (row & 7)) << 3);
    }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One lane's ldmatrix addresses in a SwizzledTile, with the swizzle worked out once.
// An x4 load of a 16x16 block reads, per lane, row `row0 + lane_row` and chunk
// `2c + lane_chunk` (chunk pair c; lane_chunk 0 or 1 picks its left or right half).
// With row0 a multiple of 8 the XOR term is the lane's own x = lane_chunk ^ (lane_row % 8),
// and the swizzled chunk (2c + lane_chunk) ^ (row % 8) = 2c ^ x splits into a part that
// depends on c alone, 8 * (c / 4), and one of four per-lane values, (2 * (c % 4)) ^ x.
// So the four base addresses below turn every (row0, c) of an unrolled loop into a
// base register plus an immediate offset, instead of recomputing the XOR per load.
template <class Tile>
struct LdmatrixCursor {
    uint32_t base[4];  // shared-space byte address of (lane_row, chunk pair j) for j = 0 .. 3

    __device__ __forceinline__ LdmatrixCursor(const void* tile, int lane_row, int lane_chunk) {
        const uint32_t row_addr = smem_addr(tile) + lane_row * Tile::ROW_BYTES;
        const int x = lane_chunk ^ (lane_row & 7);
#pragma unroll
        for (int j = 0; j < 4; ++j) base[j] = row_addr + (((2 * j) ^ x) << 4);
    }
    // The same lanes' addresses in a tile `bytes` further on (the other ring stage).
    __device__ __forceinline__ LdmatrixCursor shifted(uint32_t bytes) const {
        LdmatrixCursor c = *this;
#pragma unroll
        for (int j = 0; j < 4; ++j) c.base[j] += bytes;
        return c;
    }
    // Address for rows row0 .. row0 + 15 (row0 % 8 == 0) and chunk pair c, both compile-time in the loops.
    __device__ __forceinline__ uint32_t at(int row0, int c) const {
        return base[c & 3] + row0 * Tile::ROW_BYTES + ((c >> 2) << 7);
    }
};

// `addr`: this lane's row address in the shared state space (smem_addr / LdmatrixCursor).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// d += a * b with fp32 accumulation; T is __half or __nv_bfloat16.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(FragC& d, const FragA& a, const FragB& b);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(FragC& d, const FragA& a, const FragB& b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(FragC& d, const FragA& a, const FragB& b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

// Two floats -> one register of two 16-bit values (lo in the low half), rounded to nearest.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

}  // namespace fullpipe
