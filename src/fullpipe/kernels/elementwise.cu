// The decoder stack's elementwise pieces, fused: one launch each, bf16/fp16 in and
// out, fp32 math in the same order as the PyTorch functions of models/elementwise.py
// (the reference), 16-byte global loads and stores.
//
//   rms_norm_<t>          out = x / sqrt(mean(x^2) + eps) * w          (a warp per row)
//   residual_rms_norm_<t> x += proj (rounded to t), then out = rms_norm(x)
//   rope_qkv_<t>          q, k rotated ("rotate half"), v copied, from the fused QKV output
//   swiglu_<t>            out = silu(gate) * up, gate columns first
//
// Every pointer must be 16-byte aligned and every row a whole number of 16-byte
// vectors (8 elements); the Python front (elementwise.py) checks it.
//
// Matching the reference: PyTorch computes each elementwise op as its own fp32 kernel,
// so every product and sum is rounded separately; the __f*_rn intrinsics keep the
// compiler from contracting them into FMAs, which would round differently.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

constexpr int VEC = 8;  // elements per 16-byte vector

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// 8 elements of T <-> 8 floats, through one 16-byte register vector.
template <typename T>
__device__ __forceinline__ void unpack(const uint4 v, float (&f)[VEC]) {  // by value: one 16-byte load
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = to_float(e[i]);
}

template <typename T>
__device__ __forceinline__ uint4 pack(const float (&f)[VEC]) {
    uint4 v;
    T* e = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) e[i] = from_float<T>(f[i]);
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---------------------------------------------------------------------------- RMSNorm
constexpr int NORM_WARPS = 4;  // rows per block, one warp each

// One warp per row of ``width`` = vectors * 8 elements; each lane holds up to V
// vectors of the row in registers (the front picks the smallest V with
// 32 * V * 8 >= width). RESIDUAL: the row is x + proj rounded to T, written back to x
// (what x.add_(proj) stores) and normalized from that rounded value.
template <typename T, int V, bool RESIDUAL>
__device__ __forceinline__ void rms_norm_row(T* x, const T* proj, const T* __restrict__ weight,
                                             T* __restrict__ out, int rows, int vectors, float eps) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const size_t base = static_cast<size_t>(row) * vectors;
    const uint4* xv = reinterpret_cast<const uint4*>(x) + base;
    // Every load of the row first: x and proj may alias (no __restrict__), so a load
    // placed after a store to x would wait for it, one memory round trip per vector.
    // With a few rows (a decode step's) those round trips were the kernel's whole time.
    // The weight too (it does not depend on the row, so its round trip overlaps the
    // others), up to rows of 2048: the 4096-wide build has no registers left for it.
    constexpr bool EARLY_WEIGHT = V <= 8;
    const uint4* wv = reinterpret_cast<const uint4*>(weight);
    uint4 held[V], added[V], wheld[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const int c = i * 32 + lane;
        if (c < vectors) {
            held[i] = xv[c];
            if (RESIDUAL) added[i] = reinterpret_cast<const uint4*>(proj)[base + c];
            if (EARLY_WEIGHT) wheld[i] = wv[c];
        }
    }
    float sumsq = 0.f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const int c = i * 32 + lane;
        if (c < vectors) {
            float f[VEC];
            unpack<T>(held[i], f);
            if (RESIDUAL) {
                float p[VEC];
                unpack<T>(added[i], p);
#pragma unroll
                for (int e = 0; e < VEC; ++e) f[e] = __fadd_rn(f[e], p[e]);
                held[i] = pack<T>(f);
                reinterpret_cast<uint4*>(x)[base + c] = held[i];
                unpack<T>(held[i], f);  // the rounded sum, as the reference reads it back
            }
#pragma unroll
            for (int e = 0; e < VEC; ++e) sumsq = __fadd_rn(sumsq, __fmul_rn(f[e], f[e]));
        }
    }
    sumsq = warp_sum(sumsq);
    // torch: mean = sum * (1 / n), then rsqrt(mean + eps), then (x * r) * w.
    const float mean = __fmul_rn(sumsq, __fdiv_rn(1.f, static_cast<float>(vectors * VEC)));
    const float r = rsqrtf(__fadd_rn(mean, eps));
    uint4* ov = reinterpret_cast<uint4*>(out) + base;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const int c = i * 32 + lane;
        if (c < vectors) {
            float f[VEC], w[VEC];
            unpack<T>(held[i], f);
            unpack<T>(EARLY_WEIGHT ? wheld[i] : wv[c], w);
#pragma unroll
            for (int e = 0; e < VEC; ++e) f[e] = __fmul_rn(__fmul_rn(f[e], r), w[e]);
            ov[c] = pack<T>(f);
        }
    }
}

// ---------------------------------------------------------------------------- RoPE
// Work items per token: (heads + kv_heads) * half/8 rotations of 8 pairs (i, i + half),
// then kv_heads * d/8 vector copies of v.
template <typename T>
__device__ __forceinline__ void rope_qkv_items(const T* __restrict__ qkv, const int* __restrict__ positions,
                                               T* __restrict__ q, T* __restrict__ k, T* __restrict__ v,
                                               int tokens, int heads, int kv_heads, int head_dim, float base) {
    __shared__ float inv_freq[64];  // head_dim <= 128
    const int half = head_dim / 2;
    // torch: inv_freq = base ** (-arange(half) / half), in fp32.
    for (int i = threadIdx.x; i < half; i += blockDim.x)
        inv_freq[i] = powf(base, __fdiv_rn(-static_cast<float>(i), static_cast<float>(half)));
    __syncthreads();

    const int h8 = half / VEC;
    const int rot_items = (heads + kv_heads) * h8;
    const int items = rot_items + kv_heads * (head_dim / VEC);
    const long long total = static_cast<long long>(tokens) * items;
    const int ld = (heads + 2 * kv_heads) * head_dim;
    for (long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; g < total;
         g += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = static_cast<int>(g / items);
        const int j = static_cast<int>(g - static_cast<long long>(t) * items);
        const T* row = qkv + static_cast<size_t>(t) * ld;
        if (j < rot_items) {
            const int head = j / h8, chunk = j - head * h8;
            const T* src = row + head * head_dim + chunk * VEC;
            float x1[VEC], x2[VEC], y1[VEC], y2[VEC];
            unpack<T>(*reinterpret_cast<const uint4*>(src), x1);
            unpack<T>(*reinterpret_cast<const uint4*>(src + half), x2);
            const float pos = static_cast<float>(positions[t]);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                float s, c;
                sincosf(__fmul_rn(pos, inv_freq[chunk * VEC + e]), &s, &c);
                y1[e] = __fsub_rn(__fmul_rn(x1[e], c), __fmul_rn(x2[e], s));
                y2[e] = __fadd_rn(__fmul_rn(x2[e], c), __fmul_rn(x1[e], s));
            }
            T* dst = head < heads ? q + (static_cast<size_t>(t) * heads + head) * head_dim
                                  : k + (static_cast<size_t>(t) * kv_heads + (head - heads)) * head_dim;
            *reinterpret_cast<uint4*>(dst + chunk * VEC) = pack<T>(y1);
            *reinterpret_cast<uint4*>(dst + half + chunk * VEC) = pack<T>(y2);
        } else {
            const int c = j - rot_items;  // vector of this token's v row
            const uint4 val = *reinterpret_cast<const uint4*>(row + (heads + kv_heads) * head_dim + c * VEC);
            *reinterpret_cast<uint4*>(v + static_cast<size_t>(t) * kv_heads * head_dim + c * VEC) = val;
        }
    }
}

// ---------------------------------------------------------------------------- SwiGLU
template <typename T>
__device__ __forceinline__ void swiglu_items(const T* __restrict__ gate_up, T* __restrict__ out, int tokens,
                                             int ffn) {
    const int cols = ffn / VEC;  // vectors per output row
    const long long total = static_cast<long long>(tokens) * cols;
    for (long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; g < total;
         g += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = static_cast<int>(g / cols);
        const int c = static_cast<int>(g - static_cast<long long>(t) * cols);
        const uint4* in = reinterpret_cast<const uint4*>(gate_up + static_cast<size_t>(t) * 2 * ffn);
        float gf[VEC], uf[VEC];
        unpack<T>(in[c], gf);
        unpack<T>(in[cols + c], uf);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            // torch's silu: x / (1 + exp(-x)), then * up
            const float s = __fdiv_rn(gf[e], __fadd_rn(1.f, expf(-gf[e])));
            gf[e] = __fmul_rn(s, uf[e]);
        }
        reinterpret_cast<uint4*>(out)[g] = pack<T>(gf);
    }
}

}  // namespace

// ---------------------------------------------------------------------------- entry points
#define FP_NORM(T, tag, V)                                                                               \
    extern "C" __global__ void __launch_bounds__(NORM_WARPS * 32)                                       \
        rms_norm_##tag##_v##V(const T* x, const T* __restrict__ w, T* __restrict__ out, int rows,       \
                              int vectors, float eps) {                                                   \
        rms_norm_row<T, V, false>(const_cast<T*>(x), nullptr, w, out, rows, vectors, eps);             \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(NORM_WARPS * 32)                                       \
        residual_rms_norm_##tag##_v##V(T* x, const T* proj, const T* __restrict__ w, T* __restrict__ out, \
                                       int rows, int vectors, float eps) {                               \
        rms_norm_row<T, V, true>(x, proj, w, out, rows, vectors, eps);                                   \
    }

#define FP_ALL_NORMS(T, tag) FP_NORM(T, tag, 1) FP_NORM(T, tag, 2) FP_NORM(T, tag, 4) FP_NORM(T, tag, 8) \
    FP_NORM(T, tag, 16)

FP_ALL_NORMS(__nv_bfloat16, bf16)
FP_ALL_NORMS(__half, f16)

#define FP_POINTWISE(T, tag)                                                                                \
    extern "C" __global__ void __launch_bounds__(256)                                                      \
        rope_qkv_##tag(const T* __restrict__ qkv, const int* __restrict__ positions, T* __restrict__ q,      \
                       T* __restrict__ k, T* __restrict__ v, int tokens, int heads, int kv_heads, int head_dim, \
                       float base) {                                                                        \
        rope_qkv_items<T>(qkv, positions, q, k, v, tokens, heads, kv_heads, head_dim, base);               \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                                      \
        swiglu_##tag(const T* __restrict__ gate_up, T* __restrict__ out, int tokens, int ffn) {             \
        swiglu_items<T>(gate_up, out, tokens, ffn);                                                         \
    }

FP_POINTWISE(__nv_bfloat16, bf16)
FP_POINTWISE(__half, f16)
