// A copy done by the SMs rather than a copy engine: each thread moves 16-byte vectors
// with plain global loads and stores. With peer access enabled, one side may be another
// GPU's memory: the loads (pull) or the stores (push) then travel over NVLink/PCIe.
// kernels/peer_copy.py plans the launch (peer_copy.plan) and says which side is remote.
//
// peer_copy_w<W>: W-byte words (W = 16, 8, 4, 2, 1: the widest that both pointers share
// an alignment for; 16 whenever dst and src are equally aligned mod 16). The host splits
// the copy into a head of < W bytes (up to dst's next W-byte boundary), a body of n_words
// W-byte words and a tail of < W bytes; head and tail bytes are copied one byte each by
// the first threads of the grid, the body by every thread, grid-stride. Each thread issues
// UNROLL loads before its UNROLL stores, so that several remote accesses are in flight
// per thread: a peer access takes microseconds, and only many requests in flight at once
// fill the link.
//
// peer_copy_hold: one thread spins for `ns` nanoseconds. The experiment queues it before
// a batch of timed copies so that the host's enqueueing is not on the clock.
#include <fullpipe/timer.cuh>

#ifndef PEER_COPY_THREADS
#define PEER_COPY_THREADS 256
#endif
#ifndef PEER_COPY_UNROLL
#define PEER_COPY_UNROLL 4
#endif

extern "C" __device__ const unsigned peer_copy_threads = PEER_COPY_THREADS;
extern "C" __device__ const unsigned peer_copy_unroll = PEER_COPY_UNROLL;

template <typename Word>
__device__ __forceinline__ void copy_words(const Word* __restrict__ src, Word* __restrict__ dst,
                                           unsigned long long n_words) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long base = first; base < n_words; base += stride * PEER_COPY_UNROLL) {
        Word v[PEER_COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < PEER_COPY_UNROLL; ++u) {
            const unsigned long long i = base + u * stride;
            if (i < n_words) v[u] = src[i];
        }
#pragma unroll
        for (int u = 0; u < PEER_COPY_UNROLL; ++u) {
            const unsigned long long i = base + u * stride;
            if (i < n_words) dst[i] = v[u];
        }
    }
}

// Bytes [0, head) and [head + n_words * sizeof(Word), + tail) one byte per thread.
__device__ __forceinline__ void copy_edges(const unsigned char* src, unsigned char* dst, unsigned head,
                                           unsigned long long body_bytes, unsigned tail) {
    const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < head) dst[t] = src[t];
    if (t < tail) dst[head + body_bytes + t] = src[head + body_bytes + t];
}

#define PEER_COPY_KERNEL(W, Word)                                                                      \
    extern "C" __global__ void __launch_bounds__(PEER_COPY_THREADS)                                    \
        peer_copy_w##W(const unsigned char* src, unsigned char* dst, unsigned head,                   \
                       unsigned long long n_words, unsigned tail) {                                    \
        copy_edges(src, dst, head, n_words * W, tail);                                                  \
        copy_words<Word>(reinterpret_cast<const Word*>(src + head), reinterpret_cast<Word*>(dst + head), \
                         n_words);                                                                      \
    }

PEER_COPY_KERNEL(16, uint4)
PEER_COPY_KERNEL(8, unsigned long long)
PEER_COPY_KERNEL(4, unsigned int)
PEER_COPY_KERNEL(2, unsigned short)
PEER_COPY_KERNEL(1, unsigned char)

extern "C" __global__ void peer_copy_hold(unsigned long long ns) {
    if (threadIdx.x == 0) fp_spin_ns(ns);
}
