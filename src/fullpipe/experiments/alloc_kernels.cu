// Kernels for the stream-ordered memory experiments and the pool's stress test.
//
// fill_pattern / check_pattern: every buffer gets a pattern that depends on its own
// tag and on the word's index, so a buffer whose memory was handed to someone else
// too early (a reuse not ordered after the last use) shows up as mismatches.
// scale_bias: the "compute" stage of the per-batch pipeline (a knob for its length).
// touch: writes scratch memory the way a real step would (scores, activations, KV).

// A 32-bit mix of (tag, index): cheap, and different for every word and every tag.
__device__ __forceinline__ unsigned int pattern_word(unsigned int tag, unsigned long long i) {
    unsigned int x = tag ^ static_cast<unsigned int>(i) * 0x9E3779B1u ^ static_cast<unsigned int>(i >> 32);
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

extern "C" __global__ void fill_pattern(unsigned int* buf, unsigned long long words, unsigned int tag) {
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        buf[i] = pattern_word(tag, i);
    }
}

// Adds the number of words that differ from the pattern to *mismatches.
extern "C" __global__ void check_pattern(const unsigned int* buf, unsigned long long words, unsigned int tag,
                                         unsigned long long* mismatches) {
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    unsigned long long bad = 0;
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        bad += (buf[i] != pattern_word(tag, i));
    }
    if (bad) atomicAdd(mismatches, bad);
}

// out[i] = in[i], then `iters` times x = x * a + b. With a = 0.5 every step is exact
// up to the final add, so the host can check the result bit for bit.
extern "C" __global__ void scale_bias(float* out, const float* in, unsigned long long n, float a, float b,
                                      int iters) {
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = in[i];
        for (int k = 0; k < iters; ++k) x = x * a + b;
        out[i] = x;
    }
}

// Writes `vectors` 16-byte vectors: the memory traffic of producing a scratch tensor.
extern "C" __global__ void touch(uint4* buf, unsigned long long vectors, unsigned int value) {
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride) {
        buf[i] = make_uint4(value, static_cast<unsigned int>(i), value, static_cast<unsigned int>(i >> 32));
    }
}
