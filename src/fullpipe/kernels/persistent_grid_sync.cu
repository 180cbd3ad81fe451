// A whole-grid barrier where one is really needed: y = x / sum(x).
//
// Every element of y needs the sum of ALL of x, so no block can start writing y
// before every block has contributed its partial sum. Without a grid-wide barrier
// this takes two kernel launches (partials, then scale); with a cooperative launch
// one persistent grid does both phases around cooperative_groups' grid.sync().
//
//   phase 1  each block sums a grid-stride share of x into partials[blockIdx.x]
//   grid.sync()   every partial is written and visible to every block
//   phase 2  each block adds up the partials (all blocks get the same total) and
//            writes its share of y = x / total
//
// Launch cooperatively (launch(..., cooperative=True)) with a grid no larger than
// the blocks that can be resident at once; block = 256; partials holds gridDim.x floats.
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

namespace {

__device__ float block_sum(float v) {
    __shared__ float warp_sums[32];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // warp_sums may still be read by a previous call
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;  // every thread gets the block's sum
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256) normalize_grid_sync(const float* __restrict__ x, float* __restrict__ y,
                                                                      float* __restrict__ partials, int n) {
    cg::grid_group grid = cg::this_grid();
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;

    float s = 0.f;
    for (long long i = first; i < n; i += stride) s += x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;

    grid.sync();  // the whole grid waits here: all partials are in

    float t = 0.f;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) t += partials[b];
    const float total = block_sum(t);
    const float inv = 1.f / total;
    for (long long i = first; i < n; i += stride) y[i] = x[i] * inv;
}

// The same computation without a grid barrier: two launches on one stream.
extern "C" __global__ void __launch_bounds__(256) normalize_partials(const float* __restrict__ x,
                                                                     float* __restrict__ partials, int n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    float s = 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) s += x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(256) normalize_scale(const float* __restrict__ x, float* __restrict__ y,
                                                                  const float* __restrict__ partials, int parts, int n) {
    float t = 0.f;
    for (int b = threadIdx.x; b < parts; b += blockDim.x) t += partials[b];
    const float inv = 1.f / block_sum(t);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = x[i] * inv;
}
