// fullpipe-requires: sm_90a (wgmma, setmaxnreg, TMA)
// Flash attention forward on Hopper (the FlashAttention-3 structure): the same function
// and layouts as flash_attention.cu (O = softmax(scale * Q K^T [+ causal mask]) V, token-
// major [tokens, heads, D], dense or packed variable-length, grouped K/V heads), with the
// tiles moved by TMA and the products run by wgmma in warp-specialized roles.
//
// A block owns BM = 64 x C query rows of one head of one sequence, as 1 + C warpgroups
// (C = 2 consumers, or 3: -D FA3_D64_CONSUMERS / FA3_D128_CONSUMERS):
//
//   warpgroup 0   PRODUCER (setmaxnreg.dec to 24): one thread issues every copy
//                 Q tile once -> q_full;  K tile t: wait k_empty[s] -> TMA -> k_full[s];
//                 V tile t: wait v_empty[s] -> TMA -> v_full[s]   (s = t % STAGES: rings of
//                 STAGES K and V tiles, loaded in the order the consumers use them)
//   warpgroups    CONSUMERS (setmaxnreg.inc to 240 with 2 of them, 160 with 3), each
//   1 .. C        owning 64 query rows:
//                   S = Q K^T     wgmma SS, Q and K both K-major from 128B-swizzled smem
//                   online softmax on the fp32 accumulator fragment (fullpipe/online_softmax.cuh)
//                   P -> 16-bit A fragments in registers (two n8 accumulator blocks = one k16 slice)
//                   O += P V      wgmma RS, V [keys, D] as the MN-major (transposed) B operand
//                   release K slot s (k_empty[s]) once Q K^T has retired, V slot s
//                   (v_empty[s]) once P V has: the next K tile loads during softmax and P V
//                 epilogue: O / l -> 16-bit -> the warpgroup's rows of a swizzled stage -> TMA
//                 stores (-D FA3_D*_TMA_STORE=1; rows that all exist) or 16-byte stores of the
//                 rows that exist in the sequence
//
// Three schedules of the consumers' loop (-D FA3_D64_SCHEDULE / FA3_D128_SCHEDULE), each
// adding one idea:
//   0 serial     per tile: S = Q K^T, wait; softmax; O += P V, wait.
//   1 overlap    (intra-warpgroup pipelining) per tile t: issue S_t = Q K_t^T and
//                O += P_{t-1} V_{t-1} back to back, wait for S_t only, and run the softmax of
//                S_t while P V still runs on the tensor cores.
//   2 pingpong   1, and the consumer warpgroups take turns issuing their MMAs, round robin
//                (named barriers 1 .. C, bar.sync / bar.arrive): one warpgroup's softmax
//                runs while another's products occupy the tensor cores.
//
// A third consumer warpgroup (FA3's 192-row tile at head dim 64) gives the tensor cores a
// third independent stream of products to hide each warpgroup's softmax behind, at the
// cost of registers (160 per consumer thread instead of 240).
//
// Ring phases as in gemm_hopper_ws.cu: tile t is slot s's u = t / STAGES-th use; consumers
// wait k_full/v_full[s] on parity u & 1, the producer waits k_empty/v_empty[s] on
// (u & 1) ^ 1. The empty barriers expect one arrival per consumer warpgroup (C).
//
// Shared-memory tiles are 64-column (128-byte) swizzled chunks, exactly what TMA writes for
// a box of 64 columns x rows with CU_TENSOR_MAP_SWIZZLE_128B (fullpipe/wgmma.cuh): a Q tile
// [BM, D] is D / 64 chunks of BM rows, a K or V tile [BN, D] D / 64 chunks of BN rows.
// Tensor maps (flash_attention_hopper.py): q as a [tokens, Hq * D] matrix, k and v as
// [tokens, Hkv * D]; boxes (64, BM) and (64, BN). Rows past a sequence's end are loaded
// (the next sequence's, or zeros past the tensor) but masked (keys) or never stored (queries).
//
// Query tiles: q_tiles = ceil(max_seqlen / BM) per head and sequence, numbered heads first,
// or query tiles first with -D FA3_Q_TILES_FIRST=1 (then the blocks running at once are
// mostly the tiles of a few heads, which read the same K and V: from HBM about once, then
// from L2). A 1-D grid: one block per tile, or (-D FA3_PERSISTENT=1) one per SM walking
// tiles blockIdx.x, + gridDim.x, ...: the producer loads the next tile's Q and K/V while
// the consumers finish this one (the output has its own staging buffer then).
// 128 (1 + C) threads, dynamic shared memory sizeof(SharedStorage) + 1024 (alignment of
// the swizzled tiles).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fullpipe/gemm_hopper_tile.cuh>
#include <fullpipe/mbarrier.cuh>
#include <fullpipe/online_softmax.cuh>
#include <fullpipe/tma.cuh>
#include <fullpipe/wgmma.cuh>

#ifndef FA3_D64_SCHEDULE
#define FA3_D64_SCHEDULE 0
#endif
#ifndef FA3_D128_SCHEDULE
#define FA3_D128_SCHEDULE 2
#endif
#ifndef FA3_D64_STAGES
#define FA3_D64_STAGES 4
#endif
#ifndef FA3_D128_STAGES
#define FA3_D128_STAGES 2
#endif
#ifndef FA3_D64_KEYS
#define FA3_D64_KEYS 128
#endif
#ifndef FA3_D128_KEYS
#define FA3_D128_KEYS 128
#endif
#ifndef FA3_Q_TILES_FIRST
#define FA3_Q_TILES_FIRST 0
#endif
#ifndef FA3_PERSISTENT
#define FA3_PERSISTENT 0
#endif
#ifndef FA3_D64_TMA_STORE
#define FA3_D64_TMA_STORE 0
#endif
#ifndef FA3_D128_TMA_STORE
#define FA3_D128_TMA_STORE 0
#endif
#ifndef FA3_D64_CONSUMERS
#define FA3_D64_CONSUMERS 2
#endif
#ifndef FA3_D128_CONSUMERS
#define FA3_D128_CONSUMERS 2
#endif

namespace {

using fp_tma::TensorMap;

constexpr int SERIAL = 0, OVERLAP = 1, PINGPONG = 2;
constexpr int PRODUCER_REGS = 24;
// Named barriers: 0 is __syncthreads; 1 + w: "consumer w may issue its MMAs" (ping-pong);
// 1 + CONSUMERS + w: consumer w's own rows of the Q tile are free for the output.
constexpr unsigned TURN_BARRIER = 1;

template <int D_, int STAGES_, int SCHEDULE_, int CONSUMERS_, int KEYS_, bool PERSISTENT_, bool TMA_STORE_>
struct Geometry {
    static constexpr int D = D_;
    static constexpr int STAGES = STAGES_;
    static constexpr int SCHEDULE = SCHEDULE_;    // SERIAL, OVERLAP or PINGPONG
    static constexpr int CONSUMERS = CONSUMERS_;  // consumer warpgroups: 2 or 3
    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    // The register file (64K) split: 24 per producer thread, the rest to the consumers
    // (setmaxnreg takes multiples of 8): 24 * 128 + 2 * 240 * 128 or 3 * 160 * 128 <= 64K.
    static constexpr int CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;
    static constexpr unsigned EPILOGUE_BARRIER = 1 + CONSUMERS;
    static constexpr int BM = 64 * CONSUMERS;     // query rows per block
    static constexpr int BN = KEYS_;              // keys per K/V tile: 128, or 176 (FA3's at d128)
    static constexpr int WG_ROWS = 64;            // query rows per consumer warpgroup
    static constexpr int CHUNKS = D / 64;         // 64-column swizzled chunks per row
    static constexpr int Q_CHUNK_BYTES = BM * 128;
    static constexpr int KV_CHUNK_BYTES = BN * 128;
    static constexpr int Q_BYTES = BM * D * 2;
    static constexpr int KV_BYTES = BN * D * 2;
    static constexpr int D_STEPS = D / 16;        // k16 steps of Q K^T
    static constexpr int KEY_STEPS = BN / 16;     // k16 steps of P V
    static constexpr int S_REGS = BN / 2;         // m64nBN accumulator floats per thread
    static constexpr int O_REGS = D / 2;          // m64nD accumulator floats per thread
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    static_assert(CONSUMERS == 2 || CONSUMERS == 3, "2 or 3 consumer warpgroups");
    static_assert(BN == 128 || BN == 176, "key tiles of 128 or 176");
    // Persistent: a block walks several query tiles; the output is staged in its own buffer
    // so that the next tile's Q can land while this tile's output is written.
    static constexpr bool PERSISTENT = PERSISTENT_;
    static constexpr bool TMA_STORE = TMA_STORE_;  // the epilogue's TMA stores (see store_output)
};

// Where the output is staged (swizzled like Q) before its 16-byte stores: its own buffer in a
// persistent block, else the Q tile (read for the last time by then).
template <class G, bool OWN = G::PERSISTENT>
struct OutputStage {
    alignas(1024) unsigned char o[G::Q_BYTES];
    __device__ unsigned char* buffer(unsigned char*) { return o; }
};
template <class G>
struct OutputStage<G, false> {
    __device__ unsigned char* buffer(unsigned char* q) { return q; }
};

template <class G>
struct SharedStorage {
    alignas(1024) unsigned char q[G::Q_BYTES];
    alignas(1024) unsigned char k[G::STAGES][G::KV_BYTES];
    alignas(1024) unsigned char v[G::STAGES][G::KV_BYTES];
    OutputStage<G> out;
    unsigned long long q_full;
    unsigned long long q_empty;            // consumers -> producer: the Q tile was read
    unsigned long long k_full[G::STAGES];  // producer -> consumers (transaction bytes)
    unsigned long long v_full[G::STAGES];
    unsigned long long k_empty[G::STAGES];  // consumers -> producer: K of the slot read
    unsigned long long v_empty[G::STAGES];  // consumers -> producer: V of the slot read
};

struct Sequence {
    int start;  // first token (token counts < 2^31, checked on the host)
    int len;
};

__device__ __forceinline__ Sequence sequence_of(int b, const int* cu_seqlens, int seq_len) {
    if (cu_seqlens == nullptr) return {b * seq_len, seq_len};
    const int begin = cu_seqlens[b];
    return {begin, cu_seqlens[b + 1] - begin};
}

// ------------------------------------------------------------------ the tile walk
// The query tiles of the grid, numbered 0 .. q_tiles * Hq * B - 1 (query tiles first, or
// heads first), longest causal tiles first. A block takes tiles blockIdx.x, + gridDim.x, ...
// (one tile per block unless the launch is persistent). Producer and consumers walk the
// same tiles; skipped tiles (past a shorter sequence of a varlen batch) are skipped by all.
struct QueryTile {
    int head, kv_head;
    Sequence seq;
    int q0;        // first query row inside the sequence
    int kv_tiles;  // K/V tiles it reads
};

template <class G, bool CAUSAL>
__device__ __forceinline__ bool query_tile(int index, int q_tiles, const int* cu_seqlens, int seq_len, int heads_q,
                                           int heads_kv, QueryTile& t) {
#if FA3_Q_TILES_FIRST
    const int tile = index % q_tiles, head = (index / q_tiles) % heads_q, batch = index / (q_tiles * heads_q);
#else
    const int head = index % heads_q, tile = (index / heads_q) % q_tiles, batch = index / (heads_q * q_tiles);
#endif
    t.head = head;
    t.kv_head = head / (heads_q / heads_kv);
    t.seq = sequence_of(batch, cu_seqlens, seq_len);
    t.q0 = (q_tiles - 1 - tile) * G::BM;  // longest causal tiles first
    if (t.q0 >= t.seq.len) return false;  // a shorter sequence of a varlen batch
    const int kv_end = CAUSAL ? min(t.seq.len, t.q0 + G::BM) : t.seq.len;
    t.kv_tiles = (kv_end + G::BN - 1) / G::BN;
    return true;
}

// ------------------------------------------------------------------ producer
// Every copy of the block's tiles, one thread: per query tile, Q once it is free, then the
// K and V tiles through the rings. `g` numbers K/V tiles over the whole walk (ring slot
// g % STAGES, its use g / STAGES), exactly as the consumers count them.
template <class G, bool CAUSAL>
__device__ __forceinline__ void producer(SharedStorage<G>& smem, const TensorMap* map_q, const TensorMap* map_k,
                                         const TensorMap* map_v, const int* cu_seqlens, int seq_len, int heads_q,
                                         int heads_kv, int q_tiles, int total_tiles) {
    // One tile of K or V into its ring slot, once the consumers have released the slot.
    auto load = [&](unsigned char (*tiles)[G::KV_BYTES], unsigned long long* full, unsigned long long* empty,
                    const TensorMap* map, int g, int col, int row) {
        const int slot = g % G::STAGES;
        const unsigned use = g / G::STAGES;
        fp_mbar::mbar_wait(&empty[slot], (use & 1) ^ 1);
        fp_mbar::mbar_arrive_expect_tx(&full[slot], G::KV_BYTES);
#pragma unroll
        for (int c = 0; c < G::CHUNKS; ++c)
            fp_tma::load_2d(tiles[slot] + c * G::KV_CHUNK_BYTES, map, &full[slot], col + 64 * c, row);
    };
    int g0 = 0;   // K/V tiles of the tiles before this one
    int uses = 0;  // query tiles loaded so far (the Q buffer's uses)
    for (int index = blockIdx.x; index < total_tiles; index += gridDim.x) {
        QueryTile t;
        if (!query_tile<G, CAUSAL>(index, q_tiles, cu_seqlens, seq_len, heads_q, heads_kv, t)) continue;
        fp_mbar::mbar_wait(&smem.q_empty, (uses & 1) ^ 1);  // the last tile's Q was read
        ++uses;
        fp_mbar::mbar_arrive_expect_tx(&smem.q_full, G::Q_BYTES);
#pragma unroll
        for (int c = 0; c < G::CHUNKS; ++c)
            fp_tma::load_2d(smem.q + c * G::Q_CHUNK_BYTES, map_q, &smem.q_full, t.head * G::D + 64 * c,
                            t.seq.start + t.q0);
        const int kv_col = t.kv_head * G::D;
        auto load_k = [&](int kt) {
            load(smem.k, smem.k_full, smem.k_empty, map_k, g0 + kt, kv_col, t.seq.start + kt * G::BN);
        };
        auto load_v = [&](int kt) {
            load(smem.v, smem.v_full, smem.v_empty, map_v, g0 + kt, kv_col, t.seq.start + kt * G::BN);
        };
        // In the order the consumers use them: serial K_t, V_t; overlapped K_t, V_{t-1}.
        if (G::SCHEDULE == SERIAL) {
            for (int kt = 0; kt < t.kv_tiles; ++kt) {
                load_k(kt);
                load_v(kt);
            }
        } else {
            load_k(0);
            for (int kt = 1; kt < t.kv_tiles; ++kt) {
                load_k(kt);
                load_v(kt - 1);
            }
            load_v(t.kv_tiles - 1);
        }
        g0 += t.kv_tiles;
    }
}

// ------------------------------------------------------------------ consumer pieces
// S (64 x BN) = Q K^T for warpgroup wg's rows: D / 16 wgmma (m64nBNk16), the first overwriting S.
template <bool BF16, class G>
__device__ __forceinline__ void issue_qk(float (&s)[G::S_REGS], const SharedStorage<G>& smem, int wg, int slot) {
#pragma unroll
    for (int kk = 0; kk < G::D_STEPS; ++kk) {
        const int chunk = kk / 4, within = (kk % 4) * 32;  // 16 elements = 32 bytes along the row
        const auto da = fp_wgmma::desc_k_major(smem.q + chunk * G::Q_CHUNK_BYTES + wg * G::WG_ROWS * 128 + within);
        const auto db = fp_wgmma::desc_k_major(smem.k[slot] + chunk * G::KV_CHUNK_BYTES + within);
        fp_wgmma::mma_ss_kk<BF16>(s, da, db, kk > 0);
    }
}

// O (64 x D) += P V: BN / 16 wgmma with P from registers, V MN-major (D / 64 chunks of
// 128 bytes per key row; a k16 step is 16 key rows = 2048 bytes further).
template <bool BF16, class G>
__device__ __forceinline__ void issue_pv(float (&o)[G::O_REGS], const unsigned (&p)[G::KEY_STEPS][4],
                                         const SharedStorage<G>& smem, int slot) {
#pragma unroll
    for (int ks = 0; ks < G::KEY_STEPS; ++ks) {
        const auto db = fp_wgmma::desc_mn_major(smem.v[slot] + ks * 16 * 128, G::KV_CHUNK_BYTES);
        fp_wgmma::mma_rs_mn<BF16>(o, p[ks], db, 1);
    }
}

// Scores of keys past the sequence's end, or (causal) after the query, become -inf.
// row0: the sequence position of this thread's first row (the second is row0 + 8).
template <class G, bool CAUSAL>
__device__ __forceinline__ void mask_scores(float (&s)[G::S_REGS], int key0, int row0, int wg_row0, int seq_len) {
    if (!(key0 + G::BN > seq_len || (CAUSAL && key0 + G::BN - 1 > wg_row0))) return;
    const int quad = threadIdx.x % 4;
#pragma unroll
    for (int j = 0; j < G::BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int key = key0 + 8 * j + 2 * quad + (e & 1);
            const int row = row0 + 8 * (e >> 1);
            if (key >= seq_len || (CAUSAL && key > row)) s[4 * j + e] = fullpipe::neg_inf();
        }
    }
}

// P (fp32 accumulator layout) -> the A fragments of P V (fullpipe/wgmma.cuh).
template <bool BF16, class G>
__device__ __forceinline__ void to_a_fragments(unsigned (&p)[G::KEY_STEPS][4], const float (&s)[G::S_REGS]) {
#pragma unroll
    for (int ks = 0; ks < G::KEY_STEPS; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) p[ks][i] = fp_hopper::pack2<BF16>(s[8 * ks + 2 * i], s[8 * ks + 2 * i + 1]);
}

template <class G>
__device__ __forceinline__ void rescale(float (&o)[G::O_REGS], const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < G::O_REGS; ++i) o[i] *= alpha[(i / 2) % 2];
}

// O / l -> 16-bit -> the warpgroup's rows of the output stage (the Q tile, or its own buffer
// when persistent; swizzled like Q) -> 16-byte stores of the rows that exist.
// With G::TMA_STORE (-D FA3_D64_TMA_STORE / FA3_D128_TMA_STORE), a warpgroup whose 64 rows
// all exist writes them with TMA stores (one 64 x 64 box per chunk, from the swizzled stage,
// which is TMA's 128-byte swizzle);
// the rows of a tile that runs past its sequence's end go by 16-byte stores (a TMA box
// would write into the next sequence's rows).
template <bool BF16, class G>
__device__ __forceinline__ void store_output(unsigned short* out, long long stride, int o_col, int o_row,
                                             int valid_rows, const float (&o)[G::O_REGS], const float (&inv_l)[2],
                                             SharedStorage<G>& smem, int wg, const TensorMap* map_o) {
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    unsigned char* stage = smem.out.buffer(smem.q);
    // Every warp of the warpgroup is past its last wgmma (which read these Q rows).
    fp_tma::named_barrier_sync(G::EPILOGUE_BARRIER + wg, 128);
#pragma unroll
    for (int j = 0; j < G::D / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = wg * G::WG_ROWS + warp * 16 + lane / 4 + 8 * h;
            unsigned char* at = stage + (j / 8) * G::Q_CHUNK_BYTES + fp_hopper::swizzled_offset(row, j % 8) +
                                (lane % 4) * 4;
            *reinterpret_cast<unsigned*>(at) =
                fp_hopper::pack2<BF16>(o[4 * j + 2 * h] * inv_l[h], o[4 * j + 2 * h + 1] * inv_l[h]);
        }
    }
    if (G::TMA_STORE && valid_rows >= (wg + 1) * G::WG_ROWS) {
        fp_mbar::fence_proxy_async_shared();  // my stores to the stage, visible to the TMA unit
        fp_tma::named_barrier_sync(G::EPILOGUE_BARRIER + wg, 128);  // everybody's
        if (t == 0) {
#pragma unroll
            for (int c = 0; c < G::CHUNKS; ++c)
                fp_tma::store_2d(map_o, stage + c * G::Q_CHUNK_BYTES + wg * G::WG_ROWS * 128, o_col + 64 * c,
                                 o_row + wg * G::WG_ROWS);
            fp_tma::store_commit();
            fp_tma::store_wait_read<0>();  // the stage may be written again (the next tile's output)
        }
        return;
    }
    __syncwarp();
    unsigned short* o_dst = out + static_cast<long long>(o_row) * stride + o_col;
    constexpr int CPR = G::D / 8;  // 16-byte chunks per row
#pragma unroll
    for (int it = 0; it < 16 * CPR / 32; ++it) {  // the warp's 16 rows
        const int i = lane + 32 * it;
        const int row = wg * G::WG_ROWS + warp * 16 + i / CPR, c = i % CPR;
        if (row < valid_rows)
            *reinterpret_cast<uint4*>(o_dst + row * stride + c * 8) = *reinterpret_cast<const uint4*>(
                stage + (c / 8) * G::Q_CHUNK_BYTES + fp_hopper::swizzled_offset(row, c % 8));
    }
}

// ------------------------------------------------------------------ consumer
// One query tile. g0: the K/V tiles of the walk before it (ring slot of K/V tile kt is
// (g0 + kt) % STAGES); q_use: the query tiles before it (the Q buffer's use); first / last:
// whether it is the block's first / last tile (where the ping-pong turns start and end).
template <bool BF16, class G, bool CAUSAL, int SCHEDULE>
__device__ __forceinline__ void consumer(SharedStorage<G>& smem, int wg, int q0, int seq_len, int kv_tiles, int g0,
                                         int q_use, bool first, bool last, float scale_log2, unsigned short* out,
                                         long long o_stride, const TensorMap* map_o, int o_col, int o_row) {
    static_assert(SCHEDULE == SERIAL || SCHEDULE == OVERLAP || SCHEDULE == PINGPONG, "schedule 0, 1 or 2");
    const int t = threadIdx.x % 128;
    const int wg_row0 = q0 + wg * G::WG_ROWS;            // sequence position of the warpgroup's first row
    const int row0 = wg_row0 + (t / 32) * 16 + (t % 32) / 4;  // this thread's first row
    const bool signals = t == 0;                         // one arrival per warpgroup on *_empty[]
    auto release_k = [&](int slot) {
        if (signals) fp_mbar::mbar_arrive(&smem.k_empty[slot]);
    };
    auto release_v = [&](int slot) {
        if (signals) fp_mbar::mbar_arrive(&smem.v_empty[slot]);
    };
    // Ping-pong turns, round robin over the block's whole walk: warpgroup 0's first turn
    // needs no go; each turn ends by letting the next warpgroup go, except the last
    // warpgroup's last turn of the last tile. Every warpgroup takes kv_tiles + 1 turns per
    // tile, so the syncs and arrivals on each barrier balance and alternate.
    const int turns = kv_tiles + 1;
    auto begin_turn = [&](int turn) {
        if (SCHEDULE == PINGPONG && !(wg == 0 && first && turn == 0))
            fp_tma::named_barrier_sync(TURN_BARRIER + wg, 256);
    };
    auto end_turn = [&](int turn) {
        if (SCHEDULE == PINGPONG && !(wg == G::CONSUMERS - 1 && last && turn == turns - 1))
            fp_tma::named_barrier_arrive(TURN_BARRIER + (wg + 1) % G::CONSUMERS, 256);
    };
    // The ring slot and phase of K/V tile kt of this query tile.
    auto slot_of = [&](int kt) { return (g0 + kt) % G::STAGES; };
    auto parity_of = [&](int kt) { return static_cast<unsigned>((g0 + kt) / G::STAGES) & 1u; };

    float o[G::O_REGS];
#pragma unroll
    for (int i = 0; i < G::O_REGS; ++i) o[i] = 0.0f;
    float s[G::S_REGS];
    unsigned p[G::KEY_STEPS][4];
    fullpipe::OnlineSoftmax<G::BN / 8> softmax;
    float alpha[2];

    fp_mbar::mbar_wait(&smem.q_full, q_use & 1);

    if constexpr (SCHEDULE == SERIAL) {
        for (int kt = 0; kt < kv_tiles; ++kt) {
            const int slot = slot_of(kt);
            const unsigned parity = parity_of(kt);
            fp_mbar::mbar_wait(&smem.k_full[slot], parity);
            fp_wgmma::fence();
            issue_qk<BF16>(s, smem, wg, slot);
            fp_wgmma::commit();
            fp_wgmma::wait<0>();
            fp_wgmma::fence_operands(s);
            release_k(slot);
            mask_scores<G, CAUSAL>(s, kt * G::BN, row0, wg_row0, seq_len);
            softmax.update(s, scale_log2, alpha);
            rescale<G>(o, alpha);
            to_a_fragments<BF16, G>(p, s);
            fp_mbar::mbar_wait(&smem.v_full[slot], parity);
            fp_wgmma::fence();
            issue_pv<BF16>(o, p, smem, slot);
            fp_wgmma::commit();
            fp_wgmma::wait<0>();
            fp_wgmma::fence_operands(o);
            fp_wgmma::fence_operands(p);
            release_v(slot);
        }
    } else {
        // Tile 0: S_0 alone (O is zero: nothing to rescale).
        fp_mbar::mbar_wait(&smem.k_full[slot_of(0)], parity_of(0));
        begin_turn(0);
        fp_wgmma::fence();
        issue_qk<BF16>(s, smem, wg, slot_of(0));
        fp_wgmma::commit();
        end_turn(0);
        fp_wgmma::wait<0>();
        fp_wgmma::fence_operands(s);
        release_k(slot_of(0));
        mask_scores<G, CAUSAL>(s, 0, row0, wg_row0, seq_len);
        softmax.update(s, scale_log2, alpha);
        to_a_fragments<BF16, G>(p, s);
        for (int kt = 1; kt < kv_tiles; ++kt) {
            const int slot = slot_of(kt), prev = slot_of(kt - 1);
            fp_mbar::mbar_wait(&smem.k_full[slot], parity_of(kt));
            fp_mbar::mbar_wait(&smem.v_full[prev], parity_of(kt - 1));
            // Issue S_t = Q K_t^T, then O += P_{t-1} V_{t-1}: two groups, back to back.
            begin_turn(kt);
            fp_wgmma::fence();
            issue_qk<BF16>(s, smem, wg, slot);
            fp_wgmma::commit();
            issue_pv<BF16>(o, p, smem, prev);
            fp_wgmma::commit();
            end_turn(kt);
            // The softmax of S_t while P V still runs.
            fp_wgmma::wait<1>();
            fp_wgmma::fence_operands(s);
            release_k(slot);
            mask_scores<G, CAUSAL>(s, kt * G::BN, row0, wg_row0, seq_len);
            softmax.update(s, scale_log2, alpha);
            fp_wgmma::wait<0>();
            fp_wgmma::fence_operands(o);
            fp_wgmma::fence_operands(p);
            release_v(prev);
            rescale<G>(o, alpha);
            to_a_fragments<BF16, G>(p, s);
        }
        const int final_slot = slot_of(kv_tiles - 1);
        fp_mbar::mbar_wait(&smem.v_full[final_slot], parity_of(kv_tiles - 1));
        begin_turn(turns - 1);
        fp_wgmma::fence();
        issue_pv<BF16>(o, p, smem, final_slot);
        fp_wgmma::commit();
        end_turn(turns - 1);
        fp_wgmma::wait<0>();
        fp_wgmma::fence_operands(o);
        fp_wgmma::fence_operands(p);
        release_v(final_slot);
    }

    // Every product of this tile has retired: with its own output stage, the next tile's Q
    // may land now, while this tile's output is written; else once the stage is read.
    if (G::PERSISTENT && signals) fp_mbar::mbar_arrive(&smem.q_empty);
    float inv_l[2];
    softmax.inverse_sums(inv_l);
    store_output<BF16, G>(out, o_stride, o_col, o_row, seq_len - q0, o, inv_l, smem, wg, map_o);
    if (!G::PERSISTENT) {
        fp_tma::named_barrier_sync(G::EPILOGUE_BARRIER + wg, 128);  // the warpgroup's stage rows were read
        if (signals) fp_mbar::mbar_arrive(&smem.q_empty);
    }
}

// ------------------------------------------------------------------ the kernel body
template <bool BF16, class G, bool CAUSAL>
__device__ __forceinline__ void attention_hopper(const TensorMap* map_q, const TensorMap* map_k,
                                                 const TensorMap* map_v, const TensorMap* map_o, unsigned short* o,
                                                 const int* cu_seqlens, int seq_len, int heads_q, int heads_kv,
                                                 int q_tiles, int batch, float scale_log2) {
    extern __shared__ unsigned char smem_raw[];
    SharedStorage<G>& smem = *reinterpret_cast<SharedStorage<G>*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);

    if (threadIdx.x == 0) {
        fp_tma::prefetch_map(map_q);
        fp_tma::prefetch_map(map_k);
        fp_tma::prefetch_map(map_v);
        if (G::TMA_STORE) fp_tma::prefetch_map(map_o);
        fp_mbar::mbar_init(&smem.q_full, 1);
        fp_mbar::mbar_init(&smem.q_empty, G::CONSUMERS);
        for (int s = 0; s < G::STAGES; ++s) {
            fp_mbar::mbar_init(&smem.k_full[s], 1);
            fp_mbar::mbar_init(&smem.v_full[s], 1);
            fp_mbar::mbar_init(&smem.k_empty[s], G::CONSUMERS);
            fp_mbar::mbar_init(&smem.v_empty[s], G::CONSUMERS);
        }
        fp_mbar::fence_barrier_init();
    }
    __syncthreads();

    const int total_tiles = q_tiles * heads_q * batch;
    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        fp_wgmma::release_registers<PRODUCER_REGS>();
        if (threadIdx.x == 0)
            producer<G, CAUSAL>(smem, map_q, map_k, map_v, cu_seqlens, seq_len, heads_q, heads_kv, q_tiles,
                                total_tiles);
    } else {
        fp_wgmma::claim_registers<G::CONSUMER_REGS>();
        const long long stride = static_cast<long long>(heads_q) * G::D;
        // The block's tiles, each known one step ahead (is this the last one?).
        auto next_tile = [&](int& index, QueryTile& t) {
            for (; index < total_tiles; index += gridDim.x)
                if (query_tile<G, CAUSAL>(index, q_tiles, cu_seqlens, seq_len, heads_q, heads_kv, t)) return true;
            return false;
        };
        int index = blockIdx.x, g0 = 0, q_use = 0;
        QueryTile t;
        bool have = next_tile(index, t);
        while (have) {
            int next_index = index + gridDim.x;
            QueryTile next;
            const bool more = next_tile(next_index, next);
            consumer<BF16, G, CAUSAL, G::SCHEDULE>(smem, wg - 1, t.q0, t.seq.len, t.kv_tiles, g0, q_use, q_use == 0,
                                                   !more, scale_log2, o, stride, map_o, t.head * G::D,
                                                   t.seq.start + t.q0);
            g0 += t.kv_tiles;
            ++q_use;
            index = next_index;
            t = next;
            have = more;
        }
        if (G::TMA_STORE && threadIdx.x % 128 == 0) fp_tma::store_wait<0>();  // the last stores have landed
    }
}

}  // namespace

using G64 = Geometry<64, FA3_D64_STAGES, FA3_D64_SCHEDULE, FA3_D64_CONSUMERS, FA3_D64_KEYS, FA3_PERSISTENT,
                     FA3_D64_TMA_STORE>;
using G128 = Geometry<128, FA3_D128_STAGES, FA3_D128_SCHEDULE, FA3_D128_CONSUMERS, FA3_D128_KEYS, FA3_PERSISTENT,
                      FA3_D128_TMA_STORE>;

#define ATTENTION_HOPPER_KERNEL(NAME, BF16, G, CAUSAL)                                                              \
    extern "C" __global__ void __launch_bounds__(G::THREADS, 1)                                                    \
        NAME(const __grid_constant__ TensorMap map_q, const __grid_constant__ TensorMap map_k,                     \
             const __grid_constant__ TensorMap map_v, const __grid_constant__ TensorMap map_o, unsigned short* o, \
             const int* __restrict__ cu_seqlens, int seq_len, int heads_q, int heads_kv, int q_tiles, int batch,  \
             float scale_log2) {                                                                                  \
        attention_hopper<BF16, G, CAUSAL>(&map_q, &map_k, &map_v, &map_o, o, cu_seqlens, seq_len, heads_q,        \
                                          heads_kv, q_tiles, batch, scale_log2);                                   \
    }

ATTENTION_HOPPER_KERNEL(flash_attention_hopper_d64_f16, false, G64, false)
ATTENTION_HOPPER_KERNEL(flash_attention_hopper_d64_f16_causal, false, G64, true)
ATTENTION_HOPPER_KERNEL(flash_attention_hopper_d64_bf16, true, G64, false)
ATTENTION_HOPPER_KERNEL(flash_attention_hopper_d64_bf16_causal, true, G64, true)
ATTENTION_HOPPER_KERNEL(flash_attention_hopper_d128_f16, false, G128, false)
ATTENTION_HOPPER_KERNEL(flash_attention_hopper_d128_f16_causal, false, G128, true)
ATTENTION_HOPPER_KERNEL(flash_attention_hopper_d128_bf16, true, G128, false)
ATTENTION_HOPPER_KERNEL(flash_attention_hopper_d128_bf16_causal, true, G128, true)
