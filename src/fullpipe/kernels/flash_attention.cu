// Flash attention forward (FlashAttention-2 structure) on mma.sync tensor cores:
// O = softmax(scale * Q K^T [+ causal mask]) V without ever writing the S x S scores
// to memory.
//
// Technique: a block of WARPS warps owns BM = WARP_ROWS * WARPS query rows of one head
// of one sequence and walks the sequence's keys in tiles of BN. Each warp owns WARP_ROWS
// query rows, as M_BLOCKS = WARP_ROWS / 16 row blocks of 16 (the m of mma.m16n8k16);
// per row block the 16 x BN scores and the 16 x D output accumulator stay in registers
// for the whole walk. With two row blocks, every K or V fragment that ldmatrix loads
// feeds the mma of both: half the shared-memory reads per mma. The warp's Q fragments
// either stay in registers (loaded once) or, where two row blocks' worth would not fit
// beside the accumulators, are re-read from the Q tile with ldmatrix at every k-step
// (Q_IN_SMEM; FlashAttention-2's choice at head dim 128). K and V tiles come through two
// cp.async rings of STAGES (2, or 1: one buffer each) in XOR-swizzled shared memory
// (fullpipe/mma_sync.cuh),
// ldmatrix turns them into fragments, mma.sync m16n8k16 (fp16/bf16 in, fp32 accumulate)
// computes Q K^T and P V, and the online softmax (fullpipe/online_softmax.cuh) folds
// each score tile into a running max and sum, so the output is divided once, at the end.
//
//   global --cp.async (LDGSTS)--> Q tile, K ring[2], V ring[2] --ldmatrix (LDSM)--> fragments
//                                                                                      |
//        Q fragments (registers or Q tile) --HMMA--> S --online softmax--> P --HMMA--> O <-+
//
// Two copy schedules over the same rings (ONE_BARRIER). Split, two barriers per tile t:
//   1. start copying V[t]                        (lands while Q K^T[t] runs)
//   2. wait for K[t], barrier;   S = Q K[t]^T;   mask;   online softmax -> P, alpha
//   3. start copying K[t+1]                      (lands while P V[t] runs)
//   4. wait for V[t], barrier;   O = alpha * O + P V[t]
// Copy groups are committed in the order Q, K0, V0, K1, V1, K2, ... so "wait for K[t]"
// is cp.async.wait_group 1 (only V[t] may still be in flight) and "wait for V[t]" is
// wait_group 1 too (only K[t+1]), or 0 on the last tile. The barrier after each wait
// also tells every warp that the buffer about to be refilled next is free: K[t+1] goes
// to the buffer K[t-1] used, which every warp finished before barrier 2 of tile t.
// With one buffer each (STAGES = 1, split schedule only; FlashAttention-2's schedule and
// the fewest registers: the ring stage is no longer a runtime offset), a buffer may be
// refilled only after a barrier that follows every warp's last read of it:
//   1. wait for K[t], barrier (every warp is done with V[t-1]); start copying V[t]
//   2. S = Q K[t]^T; mask; online softmax -> P, alpha
//   3. wait for V[t], barrier (every warp is done with K[t]); start copying K[t+1]
//   4. O = alpha * O + P V[t]
// One barrier per tile, each copy a whole tile ahead:
//   1. wait for K[t] and V[t], barrier           (also: every warp is done with tile t-1)
//   2. start copying K[t+1] and V[t+1]           (into tile t-1's buffers; they land
//                                                 while all of tile t runs)
//   3. S = Q K[t]^T; mask; online softmax; O = alpha * O + P V[t]
//
// Block order (GROUP_BY_HEAD): the grid is (Hq, B, query tiles), so that blocks launched
// side by side are other heads and sequences of the same query tile, or (query tiles, B,
// Hq), so that they are the query tiles of one head and sequence and read the same K/V
// tiles at about the same time: one read from memory, the others from L2
// (FlashAttention-2's order).
//
// Causal: tiles entirely above the diagonal are never loaded (the walk ends at the
// block's last query row); only tiles that cross the diagonal (or the end of the
// sequence) are masked, and a warp skips the math of a tile that is masked for all its
// rows. Blocks are numbered so that the longest causal query tiles start first.
//
// Layout (chosen by fullpipe/kernels/flash_attention.py): token-major, q [tokens, Hq, D],
// k and v [tokens, Hkv, D], o like q, tokens packed sequence after sequence. A sequence
// b is tokens cu_seqlens[b] .. cu_seqlens[b+1]; with cu_seqlens == nullptr every
// sequence has seq_len tokens (dense [B, S, H, D]). Grouped K/V heads: query head h
// reads K/V head h / (Hq / Hkv). Self-attention only: keys are the query's own sequence.
//
// Grid: (Hq, B, ceil(max_seqlen / BM)), or (ceil(max_seqlen / BM), B, Hq) with
// GROUP_BY_HEAD; block 32 * WARPS, dynamic shared memory
// sizeof(SharedStorage) = (BM + 2 * STAGES * BN) * D * 2 bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fullpipe/cp_async.cuh>
#include <fullpipe/mma_sync.cuh>
#include <fullpipe/online_softmax.cuh>

using namespace fullpipe;

// ------------------------------------------------------------------ tiling (-D macros)
// One tiling per head dim, for the non-causal and the causal kernels, as the template
// arguments of Geometry after the head dim: warps, keys per K/V tile, query rows per warp
// (16 or 32), Q fragments re-read from shared memory, one barrier per tile, block order,
// buffers per K/V ring (1 or 2).
// fullpipe/kernels/flash_attention.py (DEFAULT_TILINGS) always sets all four; these
// fallbacks serve builds without it (`fullpipe compile`).
#ifndef ATTN_D64_TILING
#define ATTN_D64_TILING 4, 64, 32, false, false, true, 1
#endif
#ifndef ATTN_D64_CAUSAL_TILING
#define ATTN_D64_CAUSAL_TILING 4, 64, 32, false, false, false, 1
#endif
#ifndef ATTN_D128_TILING
#define ATTN_D128_TILING 4, 32, 32, true, true, true, 2
#endif
#ifndef ATTN_D128_CAUSAL_TILING
#define ATTN_D128_CAUSAL_TILING 4, 32, 32, true, true, false, 2
#endif

namespace {

template <int D_, int WARPS_, int BN_, int WARP_ROWS_, bool Q_IN_SMEM_, bool ONE_BARRIER_, bool GROUP_BY_HEAD_,
          int STAGES_>
struct Geometry {
    static constexpr int D = D_;                     // head dim
    static constexpr int WARPS = WARPS_;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int WARP_ROWS = WARP_ROWS_;     // query rows per warp
    static constexpr int M_BLOCKS = WARP_ROWS / 16;  // 16-row blocks per warp, sharing every K/V fragment
    static constexpr int BM = WARP_ROWS * WARPS;     // query rows per block
    static constexpr int BN = BN_;                   // keys per K/V tile
    static constexpr bool Q_IN_SMEM = Q_IN_SMEM_;    // Q fragments re-read per k-step, not held in registers
    static constexpr bool ONE_BARRIER = ONE_BARRIER_;  // copy schedule: one barrier per tile, or split
    static constexpr bool GROUP_BY_HEAD = GROUP_BY_HEAD_;  // grid x = query tiles (blocks sharing K/V adjacent)
    static constexpr int STAGES = STAGES_;           // depth of the K ring and of the V ring
    static constexpr int D_STEPS = D / 16;           // k-steps of Q K^T (over the head dim)
    static constexpr int KEY_STEPS = BN / 16;        // k-steps of P V (over the keys)
    static constexpr int S_FRAGS = BN / 8;           // 16x8 score fragments per row block and tile
    static constexpr int O_FRAGS = D / 8;            // 16x8 output fragments per row block
    using QTile = SwizzledTile<BM, D>;
    using KVTile = SwizzledTile<BN, D>;
    static_assert(D % 64 == 0 && BN % 16 == 0, "head dim a multiple of 64, key tile of 16");
    static_assert(WARP_ROWS == 16 || WARP_ROWS == 32, "one or two 16-row blocks per warp");
    static_assert(STAGES == 2 || (STAGES == 1 && !ONE_BARRIER), "one barrier per tile needs two buffers");
};

template <typename T, class G>
struct SharedStorage {
    T q[G::QTile::ELEMS];  // the block's queries; reused to stage the output
    T k[G::STAGES][G::KVTile::ELEMS];
    T v[G::STAGES][G::KVTile::ELEMS];
};

struct Sequence {
    long long start;  // first token
    int len;
};

__device__ __forceinline__ Sequence sequence_of(int b, const int* cu_seqlens, int seq_len) {
    if (cu_seqlens == nullptr) return {static_cast<long long>(b) * seq_len, seq_len};
    const int begin = cu_seqlens[b];
    return {begin, cu_seqlens[b + 1] - begin};
}

// ------------------------------------------------------------------ producer: copies
// Rows 0 .. ROWS-1 of a [tokens, heads, D] slice (row stride `stride` elements) into a
// swizzled tile; rows >= `valid` are zero-filled (and read nothing).
// Thread i copies chunk i % CPR of rows i / CPR + p * ROWS_PER_PASS: one row address and
// one swizzled offset per thread (ROWS_PER_PASS is a multiple of 8, so row % 8 and the
// swizzle stay the same from pass to pass).
template <class Tile, int THREADS, typename T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* src, long long stride, int valid) {
    constexpr int CPR = Tile::CHUNKS_PER_ROW;
    constexpr int ROWS_PER_PASS = THREADS / CPR;
    static_assert(THREADS % CPR == 0 && ROWS_PER_PASS % 8 == 0 && Tile::N_ROWS % ROWS_PER_PASS == 0,
                  "the block copies whole rows, 8 at a time");
    constexpr int PASSES = Tile::N_ROWS / ROWS_PER_PASS;
    const int row = threadIdx.x / CPR, chunk = threadIdx.x % CPR;
    T* dst = tile + Tile::offset(row, chunk);
    const T* from = src + row * stride + chunk * 8;
    const long long step = ROWS_PER_PASS * stride;
    if (valid >= Tile::N_ROWS) {  // a whole tile: no row checks
#pragma unroll
        for (int pass = 0; pass < PASSES; ++pass)
            cp_async_16(dst + pass * ROWS_PER_PASS * Tile::N_COLS, from + pass * step, true);
    } else {  // the sequence ends inside the tile: zero-fill the rows past it
#pragma unroll
        for (int pass = 0; pass < PASSES; ++pass) {
            const bool ok = row + pass * ROWS_PER_PASS < valid;
            cp_async_16(dst + pass * ROWS_PER_PASS * Tile::N_COLS, ok ? from + pass * step : src, ok);
        }
    }
}

// ------------------------------------------------------------------ consumers: warp math
// The lanes' ldmatrix addresses in the Q tile, in the warp's rows: matrices 0-3 of an x4
// are (rows +0, dims +0), (rows +8, dims +0), (rows +0, dims +8), (rows +8, dims +8),
// the A fragment of one 16-row block and one 16-dim step.
template <class G>
__device__ __forceinline__ LdmatrixCursor<typename G::QTile> q_cursor(const void* q_tile, int warp, int lane) {
    return LdmatrixCursor<typename G::QTile>(q_tile, warp * G::WARP_ROWS + (lane & 15), lane >> 4);
}

// The warp's Q fragments, held in registers for the whole walk (loaded once, after the Q
// tile has landed).
template <class G>
struct QInRegisters {
    FragA f[G::M_BLOCKS][G::D_STEPS];

    __device__ __forceinline__ QInRegisters(const void* q_tile, int warp, int lane) {
        const auto cursor = q_cursor<G>(q_tile, warp, lane);
#pragma unroll
        for (int mb = 0; mb < G::M_BLOCKS; ++mb)
#pragma unroll
            for (int ks = 0; ks < G::D_STEPS; ++ks) ldmatrix_x4(f[mb][ks].r, cursor.at(16 * mb, ks));
    }
    __device__ __forceinline__ FragA fragment(int mb, int ks) const { return f[mb][ks]; }
};

// The warp's Q fragments re-read from the Q tile at every k-step, for tilings whose Q
// fragments would not fit in registers beside the scores and the accumulators: one
// ldmatrix per row block and k-step, shared by the BN / 8 mma of that step.
template <class G>
struct QInShared {
    LdmatrixCursor<typename G::QTile> cursor;

    __device__ __forceinline__ QInShared(const void* q_tile, int warp, int lane)
        : cursor(q_cursor<G>(q_tile, warp, lane)) {}
    __device__ __forceinline__ FragA fragment(int mb, int ks) const {
        FragA a;
        ldmatrix_x4(a.r, cursor.at(16 * mb, ks));
        return a;
    }
};

template <bool COND, class A, class B>
struct Pick {
    using type = A;
};
template <class A, class B>
struct Pick<false, A, B> {
    using type = B;
};
template <class G>
using QFragments = typename Pick<G::Q_IN_SMEM, QInShared<G>, QInRegisters<G>>::type;

// The lanes' ldmatrix addresses in a K tile: matrices 0-3 of an x4 are (keys +0, dims +0),
// (keys +0, dims +8), (keys +8, dims +0), (keys +8, dims +8): the B fragments of two
// 8-key score fragments for one 16-dim step.
template <class G>
__device__ __forceinline__ LdmatrixCursor<typename G::KVTile> k_cursor(const void* k_tile, int lane) {
    return LdmatrixCursor<typename G::KVTile>(k_tile, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
}

// In a V tile, transposed: matrices 0-3 are (keys +0, dims +0), (keys +8, dims +0),
// (keys +0, dims +8), (keys +8, dims +8): the B fragments of two 8-dim output fragments
// for one 16-key step.
template <class G>
__device__ __forceinline__ LdmatrixCursor<typename G::KVTile> v_cursor(const void* v_tile, int lane) {
    return LdmatrixCursor<typename G::KVTile>(v_tile, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
}

// S (WARP_ROWS x BN) = Q K^T. K is stored keys x dims, which is already B's "col" layout.
// Each K load (two 8-key B fragments) feeds the mma of every row block.
template <class G, typename T, class Q>
__device__ __forceinline__ void scores_qkt(FragC (&s)[G::M_BLOCKS][G::S_FRAGS], const Q& q,
                                           const LdmatrixCursor<typename G::KVTile>& k_tile) {
#pragma unroll
    for (int mb = 0; mb < G::M_BLOCKS; ++mb)
#pragma unroll
        for (int j = 0; j < G::S_FRAGS; ++j) s[mb][j].r[0] = s[mb][j].r[1] = s[mb][j].r[2] = s[mb][j].r[3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < G::D_STEPS; ++ks) {
        FragA a[G::M_BLOCKS];
#pragma unroll
        for (int mb = 0; mb < G::M_BLOCKS; ++mb) a[mb] = q.fragment(mb, ks);
#pragma unroll
        for (int kp = 0; kp < G::S_FRAGS / 2; ++kp) {
            uint32_t b[4];
            ldmatrix_x4(b, k_tile.at(16 * kp, ks));
#pragma unroll
            for (int mb = 0; mb < G::M_BLOCKS; ++mb) {
                mma_m16n8k16<T>(s[mb][2 * kp], a[mb], FragB{{b[0], b[1]}});
                mma_m16n8k16<T>(s[mb][2 * kp + 1], a[mb], FragB{{b[2], b[3]}});
            }
        }
    }
}

// Scores of keys past the sequence's end, or (causal) after the query, become -inf
// (one 16-row block whose first row is at position row0).
template <class G, bool CAUSAL>
__device__ __forceinline__ void mask_scores(FragC (&s)[G::S_FRAGS], int key0, int row0, int seq_len, int lane) {
    const int quad = lane & 3, group = lane >> 2;
#pragma unroll
    for (int j = 0; j < G::S_FRAGS; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int key = key0 + 8 * j + 2 * quad + (e & 1);
            const int row = row0 + group + 8 * (e >> 1);
            if (key >= seq_len || (CAUSAL && key > row)) s[j].r[e] = neg_inf();
        }
    }
}

// P (fp32 accumulator layout) -> A fragments of P V: fragments 2ks and 2ks+1 are the
// left and right 8 keys of key step ks.
template <class G, typename T>
__device__ __forceinline__ void p_fragments(FragA (&p)[G::KEY_STEPS], const FragC (&s)[G::S_FRAGS]) {
#pragma unroll
    for (int ks = 0; ks < G::KEY_STEPS; ++ks) {
        p[ks].r[0] = pack2<T>(s[2 * ks].r[0], s[2 * ks].r[1]);
        p[ks].r[1] = pack2<T>(s[2 * ks].r[2], s[2 * ks].r[3]);
        p[ks].r[2] = pack2<T>(s[2 * ks + 1].r[0], s[2 * ks + 1].r[1]);
        p[ks].r[3] = pack2<T>(s[2 * ks + 1].r[2], s[2 * ks + 1].r[3]);
    }
}

template <class G>
__device__ __forceinline__ void rescale(FragC (&o)[G::O_FRAGS], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < G::O_FRAGS; ++j) {
        o[j].r[0] *= alpha[0];
        o[j].r[1] *= alpha[0];
        o[j].r[2] *= alpha[1];
        o[j].r[3] *= alpha[1];
    }
}

// One K tile's scores through the online softmax, row block by row block: P as the A
// fragments of P V, and O rescaled for the new running max.
template <class G, typename T, bool CAUSAL, class Q>
__device__ __forceinline__ void probabilities(FragA (&p)[G::M_BLOCKS][G::KEY_STEPS],
                                              FragC (&acc)[G::M_BLOCKS][G::O_FRAGS],
                                              OnlineSoftmax<G::S_FRAGS> (&softmax)[G::M_BLOCKS], const Q& q,
                                              const LdmatrixCursor<typename G::KVTile>& k_tile,
                                              float scale_log2, int key0, int warp_row0, int seq_len, int lane) {
    FragC s[G::M_BLOCKS][G::S_FRAGS];
    scores_qkt<G, T>(s, q, k_tile);
#pragma unroll
    for (int mb = 0; mb < G::M_BLOCKS; ++mb) {
        const int row0 = warp_row0 + 16 * mb;
        if (key0 + G::BN > seq_len || (CAUSAL && key0 + G::BN - 1 > row0))
            mask_scores<G, CAUSAL>(s[mb], key0, row0, seq_len, lane);
        float alpha[2];
        softmax[mb].update(s[mb], scale_log2, alpha);
        rescale<G>(acc[mb], alpha);
        p_fragments<G, T>(p[mb], s[mb]);
    }
}

// O (WARP_ROWS x D) += P V. V is stored keys x dims; B needs (key pairs, dim) values,
// which the transposing ldmatrix delivers. Each V load feeds the mma of every row block.
template <class G, typename T>
__device__ __forceinline__ void accumulate_pv(FragC (&o)[G::M_BLOCKS][G::O_FRAGS],
                                              const FragA (&p)[G::M_BLOCKS][G::KEY_STEPS],
                                              const LdmatrixCursor<typename G::KVTile>& v_tile) {
#pragma unroll
    for (int ks = 0; ks < G::KEY_STEPS; ++ks) {
#pragma unroll
        for (int dp = 0; dp < G::O_FRAGS / 2; ++dp) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_tile.at(16 * ks, dp));
#pragma unroll
            for (int mb = 0; mb < G::M_BLOCKS; ++mb) {
                mma_m16n8k16<T>(o[mb][2 * dp], p[mb][ks], FragB{{b[0], b[1]}});
                mma_m16n8k16<T>(o[mb][2 * dp + 1], p[mb][ks], FragB{{b[2], b[3]}});
            }
        }
    }
}

// O / l -> the warp's rows of the (now idle) Q tile -> 16-byte stores of the rows that
// exist. Each warp touches (and, with Q_IN_SMEM, has read) only its own rows, so warp
// barriers are enough.
template <class G, typename T>
__device__ __forceinline__ void store_output(T* o_dst, long long stride, int valid_rows,
                                             FragC (&o)[G::M_BLOCKS][G::O_FRAGS],
                                             const float (&inv_l)[G::M_BLOCKS][2], T* stage, int warp, int lane) {
    const int quad = lane & 3, group = lane >> 2;
    __syncwarp();  // the warp's last reads of its Q rows are done
#pragma unroll
    for (int mb = 0; mb < G::M_BLOCKS; ++mb) {
#pragma unroll
        for (int j = 0; j < G::O_FRAGS; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = warp * G::WARP_ROWS + 16 * mb + group + 8 * h;
                *reinterpret_cast<uint32_t*>(stage + G::QTile::offset(row, j) + 2 * quad) =
                    pack2<T>(o[mb][j].r[2 * h] * inv_l[mb][h], o[mb][j].r[2 * h + 1] * inv_l[mb][h]);
            }
        }
    }
    __syncwarp();
    constexpr int CPR = G::QTile::CHUNKS_PER_ROW;
#pragma unroll
    for (int it = 0; it < G::WARP_ROWS * CPR / 32; ++it) {  // WARP_ROWS rows x CPR chunks over 32 lanes
        const int i = lane + 32 * it;
        const int row = warp * G::WARP_ROWS + i / CPR, chunk = i % CPR;
        if (row < valid_rows)
            *reinterpret_cast<uint4*>(o_dst + row * stride + chunk * 8) =
                *reinterpret_cast<const uint4*>(stage + G::QTile::offset(row, chunk));
    }
}

// ------------------------------------------------------------------ the kernel body
template <typename T, class G, bool CAUSAL>
__device__ __forceinline__ void flash_attention_forward(const T* __restrict__ q, const T* __restrict__ k,
                                                        const T* __restrict__ v, T* __restrict__ o,
                                                        const int* __restrict__ cu_seqlens, int seq_len, int heads_q,
                                                        int heads_kv, float scale_log2) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    auto& smem = *reinterpret_cast<SharedStorage<T, G>*>(smem_raw);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int head = G::GROUP_BY_HEAD ? blockIdx.z : blockIdx.x;
    const Sequence seq = sequence_of(blockIdx.y, cu_seqlens, seq_len);
    const int tiles = G::GROUP_BY_HEAD ? gridDim.x : gridDim.z, tile = G::GROUP_BY_HEAD ? blockIdx.x : blockIdx.z;
    const int q0 = (tiles - 1 - tile) * G::BM;  // longest causal tiles first
    if (q0 >= seq.len) return;                            // a shorter sequence of a varlen batch

    const long long q_stride = static_cast<long long>(heads_q) * G::D;
    const long long kv_stride = static_cast<long long>(heads_kv) * G::D;
    const int kv_head = head / (heads_q / heads_kv);
    const T* q_src = q + (seq.start + q0) * q_stride + head * G::D;
    const T* k_src = k + seq.start * kv_stride + kv_head * G::D;
    const T* v_src = v + seq.start * kv_stride + kv_head * G::D;
    const int kv_end = CAUSAL ? min(seq.len, q0 + G::BM) : seq.len;  // keys this block needs
    const int kv_tiles = (kv_end + G::BN - 1) / G::BN;
    const int warp_row0 = q0 + warp * G::WARP_ROWS;  // position of the warp's first query row
    auto load_k = [&](int stage, int key0) {
        load_tile_async<typename G::KVTile, G::THREADS>(smem.k[stage], k_src + key0 * kv_stride, kv_stride,
                                                        seq.len - key0);
    };
    auto load_v = [&](int stage, int key0) {
        load_tile_async<typename G::KVTile, G::THREADS>(smem.v[stage], v_src + key0 * kv_stride, kv_stride,
                                                        seq.len - key0);
    };

    // Prologue: Q and K[0] (and, one barrier per tile, V[0]) in flight. Q fragments held
    // in registers are read as soon as Q lands; re-read ones wait for the loop's barrier.
    load_tile_async<typename G::QTile, G::THREADS>(smem.q, q_src, q_stride, seq.len - q0);
    cp_async_commit();
    load_k(0, 0);
    cp_async_commit();
    if constexpr (G::ONE_BARRIER) {
        load_v(0, 0);
        cp_async_commit();
    }
    if constexpr (!G::Q_IN_SMEM) {
        cp_async_wait<G::ONE_BARRIER ? 2 : 1>();
        __syncthreads();
    }
    const QFragments<G> qf(smem.q, warp, lane);

    const auto k_stage0 = k_cursor<G>(smem.k[0], lane);
    const auto v_stage0 = v_cursor<G>(smem.v[0], lane);
    OnlineSoftmax<G::S_FRAGS> softmax[G::M_BLOCKS];
    FragC acc[G::M_BLOCKS][G::O_FRAGS] = {};  // O, zero

    for (int t = 0; t < kv_tiles; ++t) {
        const int stage = G::STAGES == 1 ? 0 : t % G::STAGES;
        const int key0 = t * G::BN;
        const bool warp_has_keys = !CAUSAL || key0 <= warp_row0 + G::WARP_ROWS - 1;
        const auto k_tile = k_stage0.shifted(stage * G::KVTile::BYTES);
        const auto v_tile = v_stage0.shifted(stage * G::KVTile::BYTES);
        FragA p[G::M_BLOCKS][G::KEY_STEPS];
        if constexpr (G::ONE_BARRIER) {
            // 1. K[t] and V[t] have landed for every thread; every warp is done with tile t-1.
            cp_async_wait<0>();
            __syncthreads();
            // 2. K[t+1] and V[t+1] start landing, into tile t-1's buffers, while tile t runs.
            if (t + 1 < kv_tiles) {
                load_k(stage ^ 1, key0 + G::BN);
                load_v(stage ^ 1, key0 + G::BN);
                cp_async_commit();
            }
            // 3. S = Q K^T, mask, online softmax, O = alpha * O + P V.
            if (warp_has_keys) {
                probabilities<G, T, CAUSAL>(p, acc, softmax, qf, k_tile, scale_log2, key0, warp_row0, seq.len, lane);
                accumulate_pv<G, T>(acc, p, v_tile);
            }
        } else if constexpr (G::STAGES == 2) {
            // 1. V[t] starts landing while the scores are computed.
            load_v(stage, key0);
            cp_async_commit();
            // 2. K[t] has landed for every thread: S = Q K^T, mask, online softmax.
            cp_async_wait<1>();
            __syncthreads();
            if (warp_has_keys)
                probabilities<G, T, CAUSAL>(p, acc, softmax, qf, k_tile, scale_log2, key0, warp_row0, seq.len, lane);
            // 3. K[t+1] starts landing (into the buffer K[t-1] used) while P V runs.
            if (t + 1 < kv_tiles) {
                load_k(stage ^ 1, key0 + G::BN);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            // 4. V[t] has landed for every thread: O = alpha * O + P V.
            __syncthreads();
            if (warp_has_keys) accumulate_pv<G, T>(acc, p, v_tile);
        } else {
            // 1. K[t] has landed for every thread and every warp is done with V[t-1]:
            //    V[t] starts landing (into the one V buffer) while the scores are computed.
            cp_async_wait<0>();
            __syncthreads();
            load_v(0, key0);
            cp_async_commit();
            // 2. S = Q K^T, mask, online softmax.
            if (warp_has_keys)
                probabilities<G, T, CAUSAL>(p, acc, softmax, qf, k_tile, scale_log2, key0, warp_row0, seq.len, lane);
            // 3. V[t] has landed for every thread and every warp is done with K[t]: K[t+1]
            //    starts landing (into the one K buffer) while P V runs.
            cp_async_wait<0>();
            __syncthreads();
            if (t + 1 < kv_tiles) {
                load_k(0, key0 + G::BN);
                cp_async_commit();
            }
            // 4. O = alpha * O + P V.
            if (warp_has_keys) accumulate_pv<G, T>(acc, p, v_tile);
        }
    }

    // Epilogue: the one division, through the Q tile (each warp reuses its own rows).
    float inv_l[G::M_BLOCKS][2];
#pragma unroll
    for (int mb = 0; mb < G::M_BLOCKS; ++mb) softmax[mb].inverse_sums(inv_l[mb]);
    store_output<G, T>(o + (seq.start + q0) * q_stride + head * G::D, q_stride, seq.len - q0, acc, inv_l, smem.q,
                       warp, lane);
}

}  // namespace

using G64 = Geometry<64, ATTN_D64_TILING>;
using G128 = Geometry<128, ATTN_D128_TILING>;
using G64C = Geometry<64, ATTN_D64_CAUSAL_TILING>;
using G128C = Geometry<128, ATTN_D128_CAUSAL_TILING>;

#define ATTENTION_KERNEL(NAME, T, G, CAUSAL)                                                                        \
    extern "C" __global__ void __launch_bounds__(G::THREADS, 1)                                                      \
        NAME(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,          \
             const int* __restrict__ cu_seqlens, int seq_len, int heads_q, int heads_kv, float scale_log2) {       \
        flash_attention_forward<T, G, CAUSAL>(q, k, v, o, cu_seqlens, seq_len, heads_q, heads_kv, scale_log2);    \
    }

ATTENTION_KERNEL(flash_attention_d64_f16, __half, G64, false)
ATTENTION_KERNEL(flash_attention_d64_f16_causal, __half, G64C, true)
ATTENTION_KERNEL(flash_attention_d64_bf16, __nv_bfloat16, G64, false)
ATTENTION_KERNEL(flash_attention_d64_bf16_causal, __nv_bfloat16, G64C, true)
ATTENTION_KERNEL(flash_attention_d128_f16, __half, G128, false)
ATTENTION_KERNEL(flash_attention_d128_f16_causal, __half, G128C, true)
ATTENTION_KERNEL(flash_attention_d128_bf16, __nv_bfloat16, G128, false)
ATTENTION_KERNEL(flash_attention_d128_bf16_causal, __nv_bfloat16, G128C, true)
