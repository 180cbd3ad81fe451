// The tracer's test workload: a kernel whose running time is set by `iters`, so that
// a batch's compute can be made as long as its copies (a balanced pipeline).
//
// Each element goes through `iters` steps of x = 0.999 x + 0.001, which has the
// closed form x_k = 1 + (x_0 - 1) * 0.999^k: the host checks samples of the output
// against it. Grid-stride loop: launch a few blocks per SM, whatever n is.
extern "C" __global__ void fp_trace_work(const float* __restrict__ in, float* __restrict__ out,
                                         long long n, int iters) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = in[i];
        for (int k = 0; k < iters; ++k) {
            x = fmaf(x, 0.999f, 0.001f);
        }
        out[i] = x;
    }
}
