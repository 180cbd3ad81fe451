// fullpipe-requires: sm_90 (%cluster_ctarank, %clusterid)
// Probe kernels: small kernels whose only job is to show when and where they ran.
// The runtime tests and the level-1 experiments use them to measure concurrency
// (globaltimer stamps) instead of guessing it from total times.
#include <fullpipe/timer.cuh>

// Each block spins for `ns` nanoseconds and records [start, end] in stamps[2*block].
extern "C" __global__ void spin_stamp(unsigned long long ns, unsigned long long* stamps) {
    unsigned long long t0 = fp_spin_ns(ns);
    __syncthreads();
    if (threadIdx.x == 0) {
        stamps[2 * blockIdx.x] = t0;
        stamps[2 * blockIdx.x + 1] = fp_globaltimer_ns();
    }
}

// Writes value + index into out[i] for i < n: the smallest real kernel, for launch tests.
extern "C" __global__ void iota_add(float* out, float value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value + static_cast<float>(i);
}

// Launched with a cluster: each block writes (cluster id, rank in cluster, cluster size).
extern "C" __global__ void cluster_probe(int* out) {
    unsigned int rank, nrank, cid;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nrank));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
    if (threadIdx.x == 0) {
        out[3 * blockIdx.x + 0] = static_cast<int>(cid);
        out[3 * blockIdx.x + 1] = static_cast<int>(rank);
        out[3 * blockIdx.x + 2] = static_cast<int>(nrank);
    }
}

// Uses all the dynamic shared memory it was launched with (more than the 48 KiB a
// block gets without opt-in): every thread writes its words, then the block sums
// them back, so a launch that did not really get the memory gives a wrong sum.
extern "C" __global__ void dynamic_smem_sum(unsigned int* out) {
    extern __shared__ unsigned int smem[];
    unsigned int bytes;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    const unsigned int words = bytes / 4;
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) smem[i] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int sum = 0;
        for (unsigned int i = 0; i < words; ++i) sum += smem[i];
        out[0] = sum;
        out[1] = bytes;
    }
}
