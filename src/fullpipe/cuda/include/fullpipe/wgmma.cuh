// wgmma (sm_90a): warpgroup matrix multiply-accumulate from shared memory.
//
// A warpgroup (4 consecutive warps, the first at a warp index divisible by 4) issues
// wgmma.mma_async together; the tensor cores read A and B straight from shared memory
// through 64-bit matrix descriptors and accumulate into registers, asynchronously:
//
//   fence()                      accumulators written by ordinary code before this
//   mma_m64n256k16_*(acc, ...)   one or more MMAs, queued
//   commit()                     they form one wgmma-group
//   wait<N>()                    until at most N groups are still running
//
// Shared-memory layouts used by the Hopper GEMM ladder (all 128-byte swizzled, the
// layout TMA writes with CU_TENSOR_MAP_SWIZZLE_128B; see the swizzle note below):
//   A tile, K-major ("row-major A"): rows of 64 elements = 128 bytes; 8 rows form a
//     1024-byte swizzle atom; atoms stacked along M (stride byte offset 1024).
//   B tile, N-major ("row-major B", wgmma's transposed B): K-rows of 64 N-elements =
//     128 bytes; 8 K-rows form an atom; atoms stacked along K (stride byte offset 1024)
//     within one 64-wide N chunk; N chunks follow each other (leading byte offset =
//     bytes of one chunk).
// 128-byte swizzle: in each 1024-byte atom, the 16-byte chunk c of row r lives at chunk
// c ^ (r % 8). It is a function of the shared address bits, so atoms must be
// 1024-byte aligned.
#pragma once

namespace fp_wgmma {

// ------------------------------------------------------------------ descriptors
// Bits 0-13 start address >> 4; 16-29 leading byte offset >> 4; 32-45 stride byte
// offset >> 4; 49-51 base offset (0: atoms 1024-byte aligned); 62-63 swizzle mode
// (1 = 128-byte swizzle).
__device__ __forceinline__ unsigned long long encode(unsigned x) { return (x & 0x3FFFF) >> 4; }

__device__ __forceinline__ unsigned long long desc_sw128(const void* smem, unsigned leading_bytes,
                                                         unsigned stride_bytes) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    return encode(addr) | (encode(leading_bytes) << 16) | (encode(stride_bytes) << 32) | (1ull << 62);
}

// K-major operand (A): the leading byte offset is unused with swizzling (PTX: "assumed 1").
// A K-step of 16 elements inside the 64-element row is a start address 32 bytes further.
__device__ __forceinline__ unsigned long long desc_k_major(const void* smem) {
    return desc_sw128(smem, 16, 1024);
}

// MN-major operand (B of a row-major K x N matrix): `chunk_bytes` apart are the 64-wide
// N chunks; a K-step of 16 rows is a start address 16 * 128 bytes further.
__device__ __forceinline__ unsigned long long desc_mn_major(const void* smem, unsigned chunk_bytes) {
    return desc_sw128(smem, chunk_bytes, 1024);
}

// ------------------------------------------------------------------ ordering
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads/writes of the accumulators across an
// asynchronous MMA (the registers change behind its back until wait<>).
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ------------------------------------------------------------------ register reallocation
// setmaxnreg: a warpgroup gives registers back (producer) or takes them (consumers).
// Needs a register cap at kernel entry (__launch_bounds__(threads, 1)) and each role in
// one branch executed by whole warpgroups.
template <int REGS>
__device__ __forceinline__ void release_registers() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void claim_registers() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// ------------------------------------------------------------------ the MMAs
// D[64 x 256] (fp32, 128 registers per thread) += A[64 x 16] * B[16 x 256]; A K-major
// (imm-trans-a 0), B N-major (imm-trans-b 1). scale_d = 0 ignores the old D (D = A*B).
// Accumulator layout (thread t of the warpgroup, warp w = t / 32, lane l = t % 32):
//   d[4j + 2h + e] is row 16w + l/4 + 8h, column 8j + 2(l%4) + e   (j < 32, h, e < 2).
//
// The accumulator operands of an m64nNk16 wgmma, N / 2 of them: FP_WGMMA_R<n> is the register
// list in the PTX text and FP_WGMMA_O<n> the matching "+f" constraints of n accumulators, built
// up eight at a time (one definition for every MMA and both input types; inputs follow them).
#define FP_WGMMA_R8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FP_WGMMA_O8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define FP_WGMMA_R16 FP_WGMMA_R8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define FP_WGMMA_O16 FP_WGMMA_O8, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FP_WGMMA_R24 FP_WGMMA_R16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define FP_WGMMA_O24 FP_WGMMA_O16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define FP_WGMMA_R32 FP_WGMMA_R24 ", %24, %25, %26, %27, %28, %29, %30, %31"
#define FP_WGMMA_O32 FP_WGMMA_O24, "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FP_WGMMA_R40 FP_WGMMA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FP_WGMMA_O40 FP_WGMMA_O32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define FP_WGMMA_R48 FP_WGMMA_R40 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define FP_WGMMA_O48 FP_WGMMA_O40, "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FP_WGMMA_R56 FP_WGMMA_R48 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define FP_WGMMA_O56 FP_WGMMA_O48, "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define FP_WGMMA_R64 FP_WGMMA_R56 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define FP_WGMMA_O64 FP_WGMMA_O56, "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FP_WGMMA_R72 FP_WGMMA_R64 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define FP_WGMMA_O72 FP_WGMMA_O64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define FP_WGMMA_R80 FP_WGMMA_R72 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define FP_WGMMA_O80 FP_WGMMA_O72, "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define FP_WGMMA_R88 FP_WGMMA_R80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define FP_WGMMA_O88 FP_WGMMA_O80, "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define FP_WGMMA_R96 FP_WGMMA_R88 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define FP_WGMMA_O96 FP_WGMMA_O88, "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FP_WGMMA_R104 FP_WGMMA_R96 ", %96, %97, %98, %99, %100, %101, %102, %103"
#define FP_WGMMA_O104 FP_WGMMA_O96, "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define FP_WGMMA_R112 FP_WGMMA_R104 ", %104, %105, %106, %107, %108, %109, %110, %111"
#define FP_WGMMA_O112 FP_WGMMA_O104, "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define FP_WGMMA_R120 FP_WGMMA_R112 ", %112, %113, %114, %115, %116, %117, %118, %119"
#define FP_WGMMA_O120 FP_WGMMA_O112, "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define FP_WGMMA_R128 FP_WGMMA_R120 ", %120, %121, %122, %123, %124, %125, %126, %127"
#define FP_WGMMA_O128 FP_WGMMA_O120, "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])


#define FP_WGMMA_M64N256K16(TYPE)                                                   \
    asm volatile(                                                                   \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                              \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE "\n"           \
        "{" FP_WGMMA_R128 "},\n"                                              \
        " %128, %129, p, 1, 1, 0, 1;\n"                                            \
        "}\n"                                                                      \
        : FP_WGMMA_O128 \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// The same with B K-major (imm-trans-b 0): B given as the rows of an N x K matrix (B^T
// row-major, e.g. an nn.Linear weight), stored like A.
#define FP_WGMMA_M64N256K16_KK(TYPE)                                                \
    asm volatile(                                                                   \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                              \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE "\n"           \
        "{" FP_WGMMA_R128 "},\n"                                              \
        " %128, %129, p, 1, 1, 0, 0;\n"                                            \
        "}\n"                                                                      \
        : FP_WGMMA_O128 \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

__device__ __forceinline__ void mma_m64n256k16_bf16(float (&d)[128], unsigned long long desc_a,
                                                    unsigned long long desc_b, int scale_d) {
    FP_WGMMA_M64N256K16("bf16");
}

__device__ __forceinline__ void mma_m64n256k16_f16(float (&d)[128], unsigned long long desc_a,
                                                   unsigned long long desc_b, int scale_d) {
    FP_WGMMA_M64N256K16("f16");
}

template <bool BF16>
__device__ __forceinline__ void mma_m64n256k16(float (&d)[128], unsigned long long desc_a,
                                               unsigned long long desc_b, int scale_d) {
    if constexpr (BF16) {
        mma_m64n256k16_bf16(d, desc_a, desc_b, scale_d);
    } else {
        mma_m64n256k16_f16(d, desc_a, desc_b, scale_d);
    }
}


// ------------------------------------------------------------------ narrower MMAs (flash attention)
// The same accumulator layout for N = 64 and 128 (d has N / 2 floats): d[4j + 2h + e] is
// row 16w + l/4 + 8h, column 8j + 2(l%4) + e, j < N / 8. For 16-bit inputs the
// accumulators of two adjacent 8-column blocks j = 2s, 2s + 1 are, packed in pairs, the
// SS, both operands K-major (imm-trans-a 0, imm-trans-b 0): D[64 x 128] += A[64 x 16] * B[128 x 16]^T.
#define FP_WGMMA_SS_M64N128K16(TYPE)                                                \
    asm volatile(                                                                   \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                               \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE "\n"           \
        "{" FP_WGMMA_R64 "},\n"                                               \
        " %64, %65, p, 1, 1, 0, 0;\n"                                              \
        "}\n"                                                                      \
        : FP_WGMMA_O64 \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

template <bool BF16>
__device__ __forceinline__ void mma_m64n128k16_ss_kk(float (&d)[64], unsigned long long desc_a,
                                                     unsigned long long desc_b, int scale_d) {
    if constexpr (BF16) {
        FP_WGMMA_SS_M64N128K16("bf16");
    } else {
        FP_WGMMA_SS_M64N128K16("f16");
    }
}

// SS, K-major, N = 176 (FlashAttention-3's key tile at head dim 128): 88 accumulators.
#define FP_WGMMA_SS_M64N176K16(TYPE)                                                \
    asm volatile(                                                                   \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"                               \
        "wgmma.mma_async.sync.aligned.m64n176k16.f32." TYPE "." TYPE "\n"           \
        "{" FP_WGMMA_R88 "},\n"                                               \
        " %88, %89, p, 1, 1, 0, 0;\n"                                              \
        "}\n"                                                                      \
        : FP_WGMMA_O88 \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

template <bool BF16>
__device__ __forceinline__ void mma_m64n176k16_ss_kk(float (&d)[88], unsigned long long desc_a,
                                                     unsigned long long desc_b, int scale_d) {
    if constexpr (BF16) {
        FP_WGMMA_SS_M64N176K16("bf16");
    } else {
        FP_WGMMA_SS_M64N176K16("f16");
    }
}

// SS, A K-major, B MN-major (imm-trans-b 1), N = 128: the GEMM's narrow tile (a 64 x 128
// quarter of the persistent rung's TILE_N = 128 build; B a row-major K x N slice).
#define FP_WGMMA_SS_M64N128K16_MN(TYPE)                                             \
    asm volatile(                                                                   \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                               \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE "\n"           \
        "{" FP_WGMMA_R64 "},\n"                                               \
        " %64, %65, p, 1, 1, 0, 1;\n"                                              \
        "}\n"                                                                      \
        : FP_WGMMA_O64 \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// SS, A K-major, N = 64 (the persistent rung's TILE_N = 64 build for small products): B
// N-major (TRANS_B "1", one 64-wide chunk) or K-major ("0").
#define FP_WGMMA_SS_M64N64K16(TYPE, TRANS_B)                                        \
    asm volatile(                                                                   \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                               \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE "\n"            \
        "{" FP_WGMMA_R32 "},\n"                                               \
        " %32, %33, p, 1, 1, 0, " TRANS_B ";\n"                                    \
        "}\n"                                                                      \
        : FP_WGMMA_O32 \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// SS, any N from 64 to 256 in steps of 16 (the persistent GEMM's transposed product, its tile as
// wide as the product's rows: gemm_hopper_persistent.cu): N / 2 accumulators, the descriptors
// and scale_d operands N / 2, N / 2 + 1, N / 2 + 2; TRANS the imm-trans-a and imm-trans-b
// operands: "0, 0" both K-major, "1, 0" A MN-major, "0, 1" B MN-major.
#define FP_WGMMA_SS_N(N, TYPE, REGS, OPERANDS, DA, DB, SCALE, TRANS)               \
    asm volatile(                                                                   \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %" SCALE ", 0;\n"                        \
        "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TYPE "." TYPE "\n"        \
        "{" REGS "},\n"                                                            \
        " %" DA ", %" DB ", p, 1, 1, " TRANS ";\n"                                 \
        "}\n"                                                                      \
        : OPERANDS                                                                  \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define FP_WGMMA_SS_N_CASE(NR, N, DA, DB, SCALE, TRANS)                                                    \
    if constexpr (N_REGS == NR) {                                                                         \
        if constexpr (BF16) FP_WGMMA_SS_N(N, "bf16", FP_WGMMA_R##NR, FP_WGMMA_O##NR, DA, DB, SCALE, TRANS); \
        else FP_WGMMA_SS_N(N, "f16", FP_WGMMA_R##NR, FP_WGMMA_O##NR, DA, DB, SCALE, TRANS);                 \
    }
#define FP_WGMMA_SS_KK_CASE(NR, N, DA, DB, SCALE) else FP_WGMMA_SS_N_CASE(NR, N, DA, DB, SCALE, "0, 0")

// D[64 x N] += A[64 x 16] * B[16 x N], A K-major, B N-major, N = 256, 192, 128 or 64 by the
// accumulator count (128, 96, 64 or 32 floats).
template <bool BF16, int N_REGS>
__device__ __forceinline__ void mma_ss_k_mn(float (&d)[N_REGS], unsigned long long desc_a, unsigned long long desc_b,
                                            int scale_d) {
    static_assert(N_REGS == 128 || N_REGS == 96 || N_REGS == 64 || N_REGS == 32, "m64n256, m64n192, m64n128 or m64n64");
    if constexpr (N_REGS == 96) {
        FP_WGMMA_SS_N_CASE(96, "192", "96", "97", "98", "0, 1")
    } else if constexpr (N_REGS == 128) {
        mma_m64n256k16<BF16>(d, desc_a, desc_b, scale_d);
    } else if constexpr (N_REGS == 32) {
        if constexpr (BF16) {
            FP_WGMMA_SS_M64N64K16("bf16", "1");
        } else {
            FP_WGMMA_SS_M64N64K16("f16", "1");
        }
    } else if constexpr (BF16) {
        FP_WGMMA_SS_M64N128K16_MN("bf16");
    } else {
        FP_WGMMA_SS_M64N128K16_MN("f16");
    }
}

// D = A * B^T, both K-major, with N = 64, 128, 176, 256 or another of 80-256 in steps of 16
// by the accumulator count (N / 2).
template <bool BF16, int N_REGS>
__device__ __forceinline__ void mma_ss_kk(float (&d)[N_REGS], unsigned long long desc_a, unsigned long long desc_b,
                                          int scale_d) {
    static_assert(N_REGS == 32 || (N_REGS >= 40 && N_REGS <= 128 && N_REGS % 8 == 0), "m64n64 or m64n80 ... m64n256 in steps of 16");
    if constexpr (N_REGS == 32) {
        if constexpr (BF16) {
            FP_WGMMA_SS_M64N64K16("bf16", "0");
        } else {
            FP_WGMMA_SS_M64N64K16("f16", "0");
        }
    } else if constexpr (N_REGS == 64) {
        mma_m64n128k16_ss_kk<BF16>(d, desc_a, desc_b, scale_d);
    } else if constexpr (N_REGS == 128) {
        if constexpr (BF16) {
            FP_WGMMA_M64N256K16_KK("bf16");
        } else {
            FP_WGMMA_M64N256K16_KK("f16");
        }
    } else if constexpr (N_REGS == 88) {
        mma_m64n176k16_ss_kk<BF16>(d, desc_a, desc_b, scale_d);
    }
    FP_WGMMA_SS_KK_CASE(40, "80", "40", "41", "42")
    FP_WGMMA_SS_KK_CASE(48, "96", "48", "49", "50")
    FP_WGMMA_SS_KK_CASE(56, "112", "56", "57", "58")
    FP_WGMMA_SS_KK_CASE(72, "144", "72", "73", "74")
    FP_WGMMA_SS_KK_CASE(80, "160", "80", "81", "82")
    FP_WGMMA_SS_KK_CASE(96, "192", "96", "97", "98")
    FP_WGMMA_SS_KK_CASE(104, "208", "104", "105", "106")
    FP_WGMMA_SS_KK_CASE(112, "224", "112", "113", "114")
    FP_WGMMA_SS_KK_CASE(120, "240", "120", "121", "122")
}

// RS: A (64 x 16) from registers in the fragment layout below, B MN-major from shared
// memory (imm-trans-b 1: a K x N tile stored with N contiguous, e.g. V [keys, dims]).
// A fragment of one 16-wide K step s of a register-A (RS) wgmma:
//   a[0] = (d[8s], d[8s+1])   a[1] = (d[8s+2], d[8s+3])   rows l/4 and l/4 + 8,
//   a[2] = (d[8s+4], d[8s+5]) a[3] = (d[8s+6], d[8s+7])   columns 2(l%4) and 8 + 2(l%4)
// (the mma.m16n8k16 A layout, per warp on its 16 rows).
#define FP_WGMMA_RS(SHAPE, TYPE, REGS, OPERANDS, A_REGS, DESC, SCALE)                 \
    asm volatile(                                                                   \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %" SCALE ", 0;\n"                        \
        "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE "\n"            \
        "{" REGS "},\n"                                                            \
        " {" A_REGS "}, %" DESC ", p, 1, 1, 1;\n"                                \
        "}\n"                                                                      \
        : OPERANDS                                                                  \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

template <bool BF16>
__device__ __forceinline__ void mma_m64n64k16_rs_mn(float (&d)[32], const unsigned (&a)[4],
                                                    unsigned long long desc_b, int scale_d) {
    if constexpr (BF16) {
        FP_WGMMA_RS("m64n64k16", "bf16", FP_WGMMA_R32, FP_WGMMA_O32, "%32, %33, %34, %35", "36", "37");
    } else {
        FP_WGMMA_RS("m64n64k16", "f16", FP_WGMMA_R32, FP_WGMMA_O32, "%32, %33, %34, %35", "36", "37");
    }
}

template <bool BF16>
__device__ __forceinline__ void mma_m64n128k16_rs_mn(float (&d)[64], const unsigned (&a)[4],
                                                     unsigned long long desc_b, int scale_d) {
    if constexpr (BF16) {
        FP_WGMMA_RS("m64n128k16", "bf16", FP_WGMMA_R64, FP_WGMMA_O64, "%64, %65, %66, %67", "68", "69");
    } else {
        FP_WGMMA_RS("m64n128k16", "f16", FP_WGMMA_R64, FP_WGMMA_O64, "%64, %65, %66, %67", "68", "69");
    }
}

// D = A * B^T with N = 64 or 128 by the accumulator count; B of the RS form by its width.
template <bool BF16, int N_REGS>
__device__ __forceinline__ void mma_rs_mn(float (&d)[N_REGS], const unsigned (&a)[4], unsigned long long desc_b,
                                          int scale_d) {
    static_assert(N_REGS == 32 || N_REGS == 64, "m64n64 or m64n128");
    if constexpr (N_REGS == 32) {
        mma_m64n64k16_rs_mn<BF16>(d, a, desc_b, scale_d);
    } else {
        mma_m64n128k16_rs_mn<BF16>(d, a, desc_b, scale_d);
    }
}

// ------------------------------------------------------------------ transposed A (the skinny GEMM)
// SS with A MN-major (imm-trans-a 1) and B K-major: D[64 x N] += A[64 x 16] * B[16 x N]
// where A is a K x 64 tile stored with its 64 M elements contiguous (a row-major B
// matrix's 64-column chunk, read as the transposed operand) and B an N x 16 K-major tile
// (N rows of a row-major activation matrix). N = 8, 16, 32, 64 or 128 by the accumulator
// count (4, 8, 16, 32, 64 floats); the accumulator layout is the one above.
#define FP_WGMMA_R4 "%0, %1, %2, %3"
#define FP_WGMMA_O4 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
// mma_ss_mn_k's A is MN-major (imm-trans-a 1); mma_ss_k_k_narrow's is K-major (0): A the
// rows of an N x K matrix (B^T row-major, e.g. an nn.Linear weight: the skinny GEMM's
// weight given transposed). The same N and accumulators.
#define FP_WGMMA_SS_A_BODY                                                                      \
    static_assert(N_REGS == 4 || N_REGS == 8 || N_REGS == 16 || N_REGS == 32 || N_REGS == 64,   \
                  "m64n8, n16, n32, n64 or n128");                                              \
    FP_WGMMA_SS_N_CASE(4, "8", "4", "5", "6", FP_WGMMA_TRANS_A ", 0")                             \
    else FP_WGMMA_SS_N_CASE(8, "16", "8", "9", "10", FP_WGMMA_TRANS_A ", 0")                      \
    else FP_WGMMA_SS_N_CASE(16, "32", "16", "17", "18", FP_WGMMA_TRANS_A ", 0")                   \
    else FP_WGMMA_SS_N_CASE(32, "64", "32", "33", "34", FP_WGMMA_TRANS_A ", 0")                   \
    else FP_WGMMA_SS_N_CASE(64, "128", "64", "65", "66", FP_WGMMA_TRANS_A ", 0")

template <bool BF16, int N_REGS>
__device__ __forceinline__ void mma_ss_mn_k(float (&d)[N_REGS], unsigned long long desc_a, unsigned long long desc_b,
                                            int scale_d) {
#define FP_WGMMA_TRANS_A "1"
    FP_WGMMA_SS_A_BODY
#undef FP_WGMMA_TRANS_A
}

template <bool BF16, int N_REGS>
__device__ __forceinline__ void mma_ss_k_k_narrow(float (&d)[N_REGS], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
#define FP_WGMMA_TRANS_A "0"
    FP_WGMMA_SS_A_BODY
#undef FP_WGMMA_TRANS_A
}

// SS with A MN-major (imm-trans-a 1) and B K-major, N = 64 ... 256 in steps of 16 by the
// accumulator count (N / 2): the persistent GEMM's transposed product of a row-major b (A_MN_MAJOR,
// gemm_hopper_persistent.cu): A a K x 64 tile of b with its 64 columns contiguous, read as the
// transposed operand, B the product's rows (K-major). The accumulator layout is the one above.
template <bool BF16, int N_REGS>
__device__ __forceinline__ void mma_ss_mn_k_wide(float (&d)[N_REGS], unsigned long long desc_a,
                                                 unsigned long long desc_b, int scale_d) {
    static_assert(N_REGS >= 32 && N_REGS <= 128 && N_REGS % 8 == 0, "m64n64 ... m64n256 in steps of 16");
    FP_WGMMA_SS_N_CASE(32, "64", "32", "33", "34", "1, 0")
    FP_WGMMA_SS_N_CASE(40, "80", "40", "41", "42", "1, 0")
    FP_WGMMA_SS_N_CASE(48, "96", "48", "49", "50", "1, 0")
    FP_WGMMA_SS_N_CASE(56, "112", "56", "57", "58", "1, 0")
    FP_WGMMA_SS_N_CASE(64, "128", "64", "65", "66", "1, 0")
    FP_WGMMA_SS_N_CASE(72, "144", "72", "73", "74", "1, 0")
    FP_WGMMA_SS_N_CASE(80, "160", "80", "81", "82", "1, 0")
    FP_WGMMA_SS_N_CASE(88, "176", "88", "89", "90", "1, 0")
    FP_WGMMA_SS_N_CASE(96, "192", "96", "97", "98", "1, 0")
    FP_WGMMA_SS_N_CASE(104, "208", "104", "105", "106", "1, 0")
    FP_WGMMA_SS_N_CASE(112, "224", "112", "113", "114", "1, 0")
    FP_WGMMA_SS_N_CASE(120, "240", "120", "121", "122", "1, 0")
    FP_WGMMA_SS_N_CASE(128, "256", "128", "129", "130", "1, 0")
}

// Keeps registers an asynchronous MMA reads or writes (accumulators, register A
// operands) live and unmoved across it: call after wait<> on everything it used.
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

}  // namespace fp_wgmma
