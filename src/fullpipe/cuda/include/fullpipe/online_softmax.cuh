// Online softmax over score tiles held in mma.sync accumulator fragments.
//
// Softmax of a row without ever holding the whole row: walk it tile by tile and keep
// the running maximum m and the running sum l of exp2(score - m). When a tile raises
// the maximum, what was summed so far (and the output accumulated with it) is scaled
// down by alpha = exp2(m_old - m_new). Per tile, per row:
//
//     m_new = max(m, rowmax(S))
//     P     = exp2(S - m_new),            alpha = exp2(m - m_new)
//     l     = alpha * l + rowsum(P),      O     = alpha * O + P V
//
// and at the end O / l. Scores are used in log2 units (the 1/sqrt(d) scale is
// pre-multiplied by log2(e)), so each exponential is one FFMA and one MUFU.EX2.
// fullpipe.kernels.flash_attention.online_softmax_reference is this recurrence in NumPy.
//
// Fragment view: each lane holds two rows of a warp's 16-row tile (rows group and
// group + 8; FragC r[0..1] and r[2..3]) and, of each row, 2 columns per 8-column
// fragment. The four lanes of a quad share a row: the row maximum is reduced across the
// quad every tile (everyone must subtract the same m); the row sum l stays per lane and
// is reduced once at the end (alpha is the same for the four lanes, so partial sums
// rescale correctly).
#pragma once

#include <fullpipe/mma_sync.cuh>

namespace fullpipe {

// -infinity (NVRTC has no <math.h> INFINITY)
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ float fast_exp2(float x) {  // MUFU.EX2; exp2(-inf) = 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int N_FRAGS>  // 16x8 score fragments per tile row-block (tile width / 8)
struct OnlineSoftmax {
    float m[2];  // running max of the scaled scores, rows group and group + 8
    float l[2];  // running sum of exp2(score - m) over this lane's columns

    __device__ OnlineSoftmax() {
        m[0] = m[1] = neg_inf();
        l[0] = l[1] = 0.0f;
    }

    // Fold one tile of raw scores, scaled by scale_log2 (softmax scale * log2(e), > 0),
    // into the state. On return `s` holds P (fp32) and alpha[h] the factor by which the
    // caller must rescale its output rows.
    __device__ __forceinline__ void update(FragC (&s)[N_FRAGS], float scale_log2, float (&alpha)[2]) {
        update_with(scale_log2, alpha, [&](int j, int e) -> float& { return s[j].r[e]; });
    }

    // The same on a wgmma m64nNk16 accumulator (N = 8 * N_FRAGS), whose 8-column block j
    // holds in each lane the same rows and columns as FragC j: d[4j + e] is FragC j's r[e].
    __device__ __forceinline__ void update(float (&d)[4 * N_FRAGS], float scale_log2, float (&alpha)[2]) {
        update_with(scale_log2, alpha, [&](int j, int e) -> float& { return d[4 * j + e]; });
    }

    template <class At>  // at(j, e): element e of 8-column block j (e = 2h + column % 2)
    __device__ __forceinline__ void update_with(float scale_log2, float (&alpha)[2], At at) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float tile_max = neg_inf();
#pragma unroll
            for (int j = 0; j < N_FRAGS; ++j) tile_max = fmaxf(tile_max, fmaxf(at(j, 2 * h), at(j, 2 * h + 1)));
            const float m_new = fmaxf(m[h], quad_max(tile_max) * scale_log2);
            // A row whose keys have all been masked so far has m_new = -inf: subtract 0
            // instead, so that P = exp2(-inf) = 0 and alpha = 0 rather than NaN.
            const float m_sub = m_new == neg_inf() ? 0.0f : m_new;
            alpha[h] = fast_exp2(m[h] - m_sub);
            float row_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < N_FRAGS; ++j) {
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    at(j, e) = fast_exp2(fmaf(at(j, e), scale_log2, -m_sub));
                    row_sum += at(j, e);
                }
            }
            l[h] = alpha[h] * l[h] + row_sum;
            m[h] = m_new;
        }
    }

    // 1 / l per row (0 for a row that saw no key, which then writes zeros).
    __device__ __forceinline__ void inverse_sums(float (&inv)[2]) const {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float total = quad_sum(l[h]);
            inv[h] = total > 0.0f ? 1.0f / total : 0.0f;
        }
    }
};

}  // namespace fullpipe
