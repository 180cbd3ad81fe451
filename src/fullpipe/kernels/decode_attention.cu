// Decode attention over a paged KV cache: one query token per sequence against every
// cached token of its sequence (flash-decoding: the cached tokens are cut into splits,
// each split's softmax is computed on its own, then the splits are combined).
//
//   kv_write_<t>_d<D>           K and V of new tokens into their pages
//   decode_split_<t>_d<D>       one block per (split, K/V head, sequence): partial softmax
//                               (max m, sum l, unnormalized output o) of every query head of
//                               the group over the split's tokens, fp32
//   decode_combine_<t>_d<D>     one block per (query head, sequence): the splits merged into out
//
// The cache (models/kv_cache.py): a page holds P token slots of every layer's K and V,
// laid out [layers][2 (K, V)][kv_heads][P][D]; page_table[b * max_pages + j] is the page
// of sequence b holding its slots j*P .. j*P+P-1. seq_lens[b] counts the cached tokens,
// the current one included. Lengths and pages are read from memory, never from the
// launch: the same launch is replayed in a CUDA graph while the sequences grow, and a
// split past a sequence's end does nothing.
//
// Memory-bound: a step reads each cached K and V byte once per layer. A group of D/8
// lanes reads one token's row with 16-byte loads (8 elements per lane); a warp holds
// 256/D rows at once; UNROLL tokens per group are loaded before any is used, and the
// next UNROLL are asked for before those are used (DECODE_DOUBLE), so each lane has up
// to 4 * UNROLL 16-byte loads in flight; the first rows are asked for before the queries
// are staged. Every query head of the group (GQA) is computed from the same loaded row.
// Sweep on an H200 (split + combine, 70 MB of K/V, 8 sequences x 16 heads of 128): 26 us
// = 0.64x the copy rate with DECODE_DOUBLE, 34 us without; 8 tokens in flight without it
// 41-47 us (registers: fewer blocks).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

constexpr int VEC = 8;        // elements per 16-byte vector
constexpr int WARPS = 4;      // warps per split block
#ifndef DECODE_UNROLL
#define DECODE_UNROLL 4
#endif
#ifndef DECODE_DOUBLE  // the next rows' loads issued before this iteration's math (0: after it)
#define DECODE_DOUBLE 1
#endif
constexpr int UNROLL = DECODE_UNROLL;  // tokens a lane group loads before it computes (a build option)

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }  // NVRTC has no INFINITY

template <typename T>
__device__ __forceinline__ void unpack(const uint4 v, float (&f)[VEC]) {
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = to_float(e[i]);
}

// Element offset of token slot ``slot`` of K (kv = 0) or V (kv = 1), head ``h``, layer
// ``layer`` inside a page.
__device__ __forceinline__ long long slot_offset(int layer, int kv, int kv_heads, int h, int page_tokens, int slot,
                                                 int D) {
    return ((static_cast<long long>(layer * 2 + kv) * kv_heads + h) * page_tokens + slot) * D;
}

// ---------------------------------------------------------------------------- kv_write
// One thread per 16-byte vector of one token's K (and the same vector of its V).
template <typename T, int D>
__device__ void kv_write(const T* __restrict__ k, const T* __restrict__ v, const unsigned long long* __restrict__ page_table,
                         const int* __restrict__ seq_ids, const int* __restrict__ positions, int tokens, int kv_heads,
                         int max_pages, int page_tokens, int layer) {
    constexpr int PER_ROW = D / VEC;
    const long long items = static_cast<long long>(tokens) * kv_heads * PER_ROW;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < items;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = static_cast<int>(i / (kv_heads * PER_ROW));
        const int rest = static_cast<int>(i % (kv_heads * PER_ROW));
        const int h = rest / PER_ROW, c = rest % PER_ROW;
        const int b = seq_ids[t], pos = positions[t];
        T* page = reinterpret_cast<T*>(page_table[static_cast<long long>(b) * max_pages + pos / page_tokens]);
        const int slot = pos % page_tokens;
        const long long src = (static_cast<long long>(t) * kv_heads + h) * D + c * VEC;
        *reinterpret_cast<uint4*>(page + slot_offset(layer, 0, kv_heads, h, page_tokens, slot, D) + c * VEC) =
            *reinterpret_cast<const uint4*>(k + src);
        *reinterpret_cast<uint4*>(page + slot_offset(layer, 1, kv_heads, h, page_tokens, slot, D) + c * VEC) =
            *reinterpret_cast<const uint4*>(v + src);
    }
}

// ---------------------------------------------------------------------------- split
// The running softmax of one lane group for one query head: m (max score, log2 units),
// l (sum of 2^(s - m)), o (this lane's VEC output dims, unnormalized).
struct Running {
    float m, l, o[VEC];
};

// Shared memory of a split block: the group's query heads (fp32, pre-scaled), and each
// lane group's running state for the merge at the end.
// G: the query heads per K/V head this build holds (1, 2, 4, 8); a group of fewer heads
// (3, 5 ...) runs on the next build up, the extra heads skipped.
template <int D, int G>
struct SplitSmem {
    static constexpr int GROUPS = WARPS * 32 / (D / VEC);  // lane groups per block
    float q[G][D];
    float m[GROUPS][G];
    float l[GROUPS][G];
    float o[GROUPS][G][D];
};

template <typename T, int D, int G>
__device__ void decode_split(const T* __restrict__ q, const unsigned long long* __restrict__ page_table,
                             const int* __restrict__ seq_lens, float* __restrict__ part_o, float* __restrict__ part_ml,
                             int heads, int kv_heads, int max_pages, int page_tokens, int layer, int split_tokens,
                             int max_splits, float scale_log2) {
    constexpr int PER_ROW = D / VEC;             // lanes per token row
    constexpr int GROUPS = SplitSmem<D, G>::GROUPS;  // token rows in flight per block (times UNROLL)
    __shared__ SplitSmem<D, G> sm;
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int group_size = heads / kv_heads;
    const int len = seq_lens[b];
    const int start = split * split_tokens;
    if (start >= len) return;  // the combine reads only the splits that hold tokens
    const int end = min(start + split_tokens, len);

    const int lane_group = threadIdx.x / PER_ROW;  // which token row this lane reads
    const int col = (threadIdx.x % PER_ROW) * VEC;  // its 8 dims of that row
    const unsigned long long* pages = page_table + static_cast<long long>(b) * max_pages;
    constexpr int STEP = GROUPS * UNROLL;  // tokens the block walks per iteration

    // UNROLL rows of K and V for this lane group, from token t0 on (rows past the split's end skipped)
    auto load_rows = [&](int t0, uint4 (&kraw)[UNROLL], uint4 (&vraw)[UNROLL]) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int t = t0 + u * GROUPS;
            if (t < end) {
                const T* page = reinterpret_cast<const T*>(pages[t / page_tokens]);
                const int slot = t % page_tokens;
                // __ldg: a global, read-only load (a pointer read from memory is a generic one otherwise)
                kraw[u] = __ldg(reinterpret_cast<const uint4*>(page + slot_offset(layer, 0, kv_heads, kvh, page_tokens, slot, D) + col));
                vraw[u] = __ldg(reinterpret_cast<const uint4*>(page + slot_offset(layer, 1, kv_heads, kvh, page_tokens, slot, D) + col));
            }
        }
    };
    // The first rows are asked for before the queries are staged: their latency overlaps it.
    uint4 kraw[UNROLL], vraw[UNROLL];
    load_rows(start + lane_group, kraw, vraw);

    // the group's queries, scaled so that exp2 of a score is the softmax's exp
    for (int i = threadIdx.x; i < group_size * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        sm.q[g][d] = to_float(q[(static_cast<long long>(b) * heads + kvh * group_size + g) * D + d]) * scale_log2;
    }
    __syncthreads();

    // The lane groups of a warp run different numbers of tokens: a shuffle names only
    // the lanes of its own group (a full-warp mask would wait for lanes that left the loop).
    const unsigned group_mask = (0xffffffffu >> (32 - PER_ROW)) << ((threadIdx.x % 32) & ~(PER_ROW - 1));
    float qr[G][VEC];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int i = 0; i < VEC; ++i) qr[g][i] = g < group_size ? sm.q[g][col + i] : 0.f;
    Running run[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        run[g].m = neg_inf();
        run[g].l = 0.f;
#pragma unroll
        for (int i = 0; i < VEC; ++i) run[g].o[i] = 0.f;
    }

    // fold UNROLL loaded rows into the running softmax of every query head of the group
    auto consume = [&](int t0, const uint4 (&kraw)[UNROLL], const uint4 (&vraw)[UNROLL]) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int t = t0 + u * GROUPS;
            if (t >= end) break;  // the same for every lane of the group (t depends on the group only)
            float kf[VEC], vf[VEC];
            unpack<T>(kraw[u], kf);
            unpack<T>(vraw[u], vf);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (g >= group_size) continue;  // (a guard, not a break: run[] stays in registers)
                float s = 0.f;
#pragma unroll
                for (int i = 0; i < VEC; ++i) s = fmaf(qr[g][i], kf[i], s);
#pragma unroll
                for (int o = PER_ROW / 2; o > 0; o >>= 1) s += __shfl_xor_sync(group_mask, s, o, PER_ROW);
                const float m_new = fmaxf(run[g].m, s);
                const float alpha = exp2f(run[g].m - m_new);  // 0 on the first token (m = -inf)
                const float p = exp2f(s - m_new);
                run[g].l = run[g].l * alpha + p;
#pragma unroll
                for (int i = 0; i < VEC; ++i) run[g].o[i] = fmaf(run[g].o[i], alpha, p * vf[i]);
                run[g].m = m_new;
            }
        }
    };

    for (int t0 = start + lane_group; t0 < end; t0 += STEP) {
#if DECODE_DOUBLE
        // the next rows are asked for before these are used: two sets of registers in flight
        uint4 knext[UNROLL], vnext[UNROLL];
        load_rows(t0 + STEP, knext, vnext);
        consume(t0, kraw, vraw);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            kraw[u] = knext[u];
            vraw[u] = vnext[u];
        }
#else
        consume(t0, kraw, vraw);
        load_rows(t0 + STEP, kraw, vraw);
#endif
    }

    // merge the lane groups: each writes its state, then the block folds them per head and dim
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (g >= group_size) continue;
        if (threadIdx.x % PER_ROW == 0) {
            sm.m[lane_group][g] = run[g].m;
            sm.l[lane_group][g] = run[g].l;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) sm.o[lane_group][g][col + i] = run[g].o[i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group_size * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        float m = neg_inf();
        for (int r = 0; r < GROUPS; ++r) m = fmaxf(m, sm.m[r][g]);
        float l = 0.f, o = 0.f;
        for (int r = 0; r < GROUPS; ++r) {
            const float w = sm.m[r][g] == neg_inf() ? 0.f : exp2f(sm.m[r][g] - m);  // a group with no token
            l = fmaf(sm.l[r][g], w, l);
            o = fmaf(sm.o[r][g][d], w, o);
        }
        const long long row = (static_cast<long long>(b) * heads + kvh * group_size + g) * max_splits + split;
        part_o[row * D + d] = o;
        if (d == 0) {
            part_ml[row * 2] = m;
            part_ml[row * 2 + 1] = l;
        }
    }
}

// ---------------------------------------------------------------------------- combine
// One block of D threads per (query head, sequence): thread d folds dim d of every split.
template <typename T, int D>
__device__ void decode_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                               const int* __restrict__ seq_lens, T* __restrict__ out, int heads, int split_tokens,
                               int max_splits) {
    const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
    const int splits = min((seq_lens[b] + split_tokens - 1) / split_tokens, max_splits);
    const long long row0 = (static_cast<long long>(b) * heads + h) * max_splits;
    float m = neg_inf();
    for (int s = 0; s < splits; ++s) m = fmaxf(m, part_ml[(row0 + s) * 2]);
    float l = 0.f, o = 0.f;
    for (int s = 0; s < splits; ++s) {
        const float w = exp2f(part_ml[(row0 + s) * 2] - m);
        l = fmaf(part_ml[(row0 + s) * 2 + 1], w, l);
        o = fmaf(part_o[(row0 + s) * D + d], w, o);
    }
    out[(static_cast<long long>(b) * heads + h) * D + d] = from_float<T>(splits ? o / l : 0.f);
}

}  // namespace

#define SPLIT_KERNEL(T, TAG, D, G)                                                                                    \
    extern "C" __global__ void __launch_bounds__(WARPS * 32) decode_split_##TAG##_d##D##_g##G(                        \
        const T* q, const unsigned long long* page_table, const int* seq_lens, float* part_o, float* part_ml,         \
        int heads, int kv_heads, int max_pages, int page_tokens, int layer, int split_tokens, int max_splits,         \
        float scale_log2) {                                                                                           \
        decode_split<T, D, G>(q, page_table, seq_lens, part_o, part_ml, heads, kv_heads, max_pages, page_tokens,      \
                              layer, split_tokens, max_splits, scale_log2);                                           \
    }

#define DECODE_KERNELS(T, TAG, D)                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) kv_write_##TAG##_d##D(                                          \
        const T* k, const T* v, const unsigned long long* page_table, const int* seq_ids, const int* positions,       \
        int tokens, int kv_heads, int max_pages, int page_tokens, int layer) {                                        \
        kv_write<T, D>(k, v, page_table, seq_ids, positions, tokens, kv_heads, max_pages, page_tokens, layer);        \
    }                                                                                                                 \
    SPLIT_KERNEL(T, TAG, D, 1)                                                                                        \
    SPLIT_KERNEL(T, TAG, D, 2)                                                                                        \
    SPLIT_KERNEL(T, TAG, D, 4)                                                                                        \
    SPLIT_KERNEL(T, TAG, D, 8)                                                                                        \
    extern "C" __global__ void __launch_bounds__(D) decode_combine_##TAG##_d##D(                                      \
        const float* part_o, const float* part_ml, const int* seq_lens, T* out, int heads, int split_tokens,          \
        int max_splits) {                                                                                             \
        decode_combine<T, D>(part_o, part_ml, seq_lens, out, heads, split_tokens, max_splits);                        \
    }

DECODE_KERNELS(__nv_bfloat16, bf16, 64)
DECODE_KERNELS(__nv_bfloat16, bf16, 128)
DECODE_KERNELS(__half, f16, 64)
DECODE_KERNELS(__half, f16, 128)
