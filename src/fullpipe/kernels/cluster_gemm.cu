// Thread-block clusters: a tile that every block of the cluster needs is read from
// global memory ONCE per cluster and shared through distributed shared memory.
//
// C[M,N] = A[M,K] @ B[K,N], fp32 row-major, 64 x 64 tiles. A cluster is CLUSTER
// blocks side by side along N: they compute C tiles (bm, bn_0 .. bn_{CLUSTER-1}) and
// therefore all need the same A slice (64 rows x BK) at every K step.
//
//   cluster_gemm_own_a     every block copies that A slice from global memory itself
//                          (CLUSTER copies of the same bytes per cluster)
//   cluster_gemm_shared_a  block rank 0 copies the A slice into ITS shared memory;
//                          after cluster.sync() every block reads it from rank 0
//                          through cluster.map_shared_rank(As, 0) (DSMEM) into its
//                          own working copy (one global copy per cluster)
//
// Both: each block copies its own B slice; a 2-stage cp.async ring; one
// cluster.sync() per K step (it also tells rank 0 that nobody still reads the
// buffer it refills next). They differ only in where A comes from.
// Launch with cluster = (CLUSTER, 1, 1) (given at launch time, not compiled in), grid = (ceil(N/64) rounded up to a multiple
// of CLUSTER, ceil(M/64)), block = 256. Needs K % 4 == 0, N % 4 == 0, 16-byte aligned pointers.
#include <cooperative_groups.h>
#include <fullpipe/cp_async.cuh>

namespace cg = cooperative_groups;

#define CLUSTER 4
#define T_M 64
#define T_N 64
#define T_K 16
#define AS_STRIDE (T_K + 4)
#define A_ELEMS (T_M * AS_STRIDE)
#define B_ELEMS (T_K * T_N)
#define THREADS 256

namespace {

// 64 x 16 A slice: 256 chunks, one per thread.
__device__ __forceinline__ void load_a(float* As, const float* __restrict__ A, int M, int K, int bm, int k0) {
    const int r = threadIdx.x / 4, kc = (threadIdx.x % 4) * 4;
    const bool ok = bm + r < M && k0 + kc < K;
    cp_async_16(&As[r * AS_STRIDE + kc], ok ? &A[(size_t)(bm + r) * K + k0 + kc] : A, ok);
}
// 16 x 64 B slice: 256 chunks, one per thread.
__device__ __forceinline__ void load_b(float* Bs, const float* __restrict__ B, int N, int K, int bn, int k0) {
    const int r = threadIdx.x / 16, c = (threadIdx.x % 16) * 4;
    const bool ok = k0 + r < K && bn + c < N;
    cp_async_16(&Bs[r * T_N + c], ok ? &B[(size_t)(k0 + r) * N + bn + c] : B, ok);
}

template <bool SHARE_A>
__device__ __forceinline__ void cluster_gemm(const float* __restrict__ A, const float* __restrict__ B,
                                             float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[2][A_ELEMS];  // rank 0's copy is the cluster's when SHARE_A
    __shared__ __align__(16) float Bs[2][B_ELEMS];
    __shared__ __align__(16) float Awork[A_ELEMS];  // SHARE_A: this block's copy of rank 0's slice
    cg::cluster_group cluster = cg::this_cluster();
    const bool loads_a = !SHARE_A || cluster.block_rank() == 0;

    const int bm = blockIdx.y * T_M, bn = blockIdx.x * T_N;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const int slices = (K + T_K - 1) / T_K;
    float acc[4][4] = {};

    if (loads_a) load_a(As[0], A, M, K, bm, 0);
    load_b(Bs[0], B, N, K, bn, 0);
    cp_async_commit();
    for (int s = 0; s < slices; ++s) {
        const int cur = s % 2;
        cp_async_wait_all();
        cluster.sync();  // slice s is in every block (A: in rank 0); slice s-1 is no longer read anywhere
        if (s + 1 < slices) {
            if (loads_a) load_a(As[1 - cur], A, M, K, bm, (s + 1) * T_K);
            load_b(Bs[1 - cur], B, N, K, bn, (s + 1) * T_K);
        }
        cp_async_commit();
        const float* a_slice = As[cur];
        if (SHARE_A) {
            // Distributed shared memory: read rank 0's A slice (one float4 per thread).
            const float* remote = cluster.map_shared_rank(As[cur], 0);
            const int r = threadIdx.x / 4, kc = (threadIdx.x % 4) * 4;
            *reinterpret_cast<float4*>(&Awork[r * AS_STRIDE + kc]) =
                *reinterpret_cast<const float4*>(&remote[r * AS_STRIDE + kc]);
            __syncthreads();
            a_slice = Awork;
        }
#pragma unroll
        for (int k = 0; k < T_K; ++k) {
            const float4 b = *reinterpret_cast<const float4*>(&Bs[cur][k * T_N + tx * 4]);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float a = a_slice[(ty + 16 * i) * AS_STRIDE + k];
                acc[i][0] = fmaf(a, b.x, acc[i][0]);
                acc[i][1] = fmaf(a, b.y, acc[i][1]);
                acc[i][2] = fmaf(a, b.z, acc[i][2]);
                acc[i][3] = fmaf(a, b.w, acc[i][3]);
            }
        }
        if (SHARE_A) __syncthreads();  // Awork is rewritten at the next step
    }
    cp_async_wait_all();
    cluster.sync();  // rank 0's shared memory must outlive every remote read of it

    const int col = bn + tx * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = bm + ty + 16 * i;
        if (row < M && col < N)
            *reinterpret_cast<float4*>(&C[(size_t)row * N + col]) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
    cluster_gemm_own_a(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N,
                       int K) {
    cluster_gemm<false>(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(THREADS)
    cluster_gemm_shared_a(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
                          int N, int K) {
    cluster_gemm<true>(A, B, C, M, N, K);
}
