// fullpipe's calibrated test workload (pipeline/workload.py), the per-batch compute of the
// pipeline, its experiments and the tracer's tests: an element-wise integer mix whose
// arithmetic intensity is set by `rounds`. Memory traffic is fixed (4 bytes read,
// 4 written per element); the time grows linearly with `rounds`, so an experiment
// can make compute as long as a copy (balanced), much shorter (copy-bound) or
// longer (compute-bound), measured in the same run. Integer arithmetic wraps
// mod 2^32, so NumPy reproduces every bit (fullpipe.pipeline.workload.reference).

__device__ __forceinline__ unsigned int mix_round(unsigned int v) {
    v = v * 1664525u + 1013904223u;  // LCG step (IMAD)
    v ^= v >> 13;                     // xorshift (SHF + LOP3)
    return v;
}

// y[i] = mix^rounds(x[i]) for i < n. Grid-stride; four independent chains per
// thread (one uint4) keep the integer pipes busy. x and y must be 16-byte aligned
// (pool allocations are 256-byte aligned); a scalar loop handles the n % 4 tail.
extern "C" __global__ void workload_mix(const unsigned int* __restrict__ x, unsigned int* __restrict__ y,
                                        unsigned long long n, int rounds) {
    const unsigned long long n4 = n / 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    uint4* y4 = reinterpret_cast<uint4*>(y);
    for (unsigned long long i = first; i < n4; i += stride) {
        uint4 v = x4[i];
        for (int r = 0; r < rounds; ++r) {
            v.x = mix_round(v.x);
            v.y = mix_round(v.y);
            v.z = mix_round(v.z);
            v.w = mix_round(v.w);
        }
        y4[i] = v;
    }
    for (unsigned long long i = n4 * 4 + first; i < n; i += stride) {
        unsigned int v = x[i];
        for (int r = 0; r < rounds; ++r) v = mix_round(v);
        y[i] = v;
    }
}
