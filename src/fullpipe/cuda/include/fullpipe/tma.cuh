// TMA (sm_90): the Tensor Memory Accelerator copies boxes of a tensor between global
// and shared memory with no thread involved beyond the one that issues the copy.
//
// The tensor (global address, sizes, strides, box, swizzle, out-of-bounds fill) is
// described by a 128-byte tensor map built on the host (cuTensorMapEncodeTiled, see
// fullpipe/kernels/hopper_gemm.py) and passed to the kernel as a
// `const __grid_constant__ TensorMap` parameter: the copy engine reads it from the
// parameter space, so no fence is needed (a map copied to global memory would need a
// tensormap acquire fence).
//
//   load_2d            global -> shared, completion counted in bytes on an mbarrier
//                      (mbarrier::complete_tx): arm it with fp_mbar::mbar_arrive_expect_tx
//   load_2d_multicast  the same box into the same shared offset of every block of the
//                      cluster named in a 16-bit mask, signalling each block's mbarrier
//                      at the same offset
//   store_2d           shared -> global, tracked by bulk groups (commit / wait)
// Boxes that hang over the tensor's edge are zero-filled on load and clipped on store,
// but a load whose box hangs far past the last row is slow (measured on an H200, session
// 40: a 128-row box holding 2 rows cost a 128 x 128 GEMM 1.6x its time, a skinny GEMM's
// 64-row box holding 33 rows 1.7x): EdgeMaps holds the same tensor in boxes of 64, 32, 16
// and 8 rows, for loading only the rows inside it.
//
//   elect_one          the one lane of a converged warp that issues for it
#pragma once

namespace fp_tma {

// The CUtensorMap of the driver API: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

// The same tensor in boxes of 64 >> i rows (i = 0..3), as the host encodes them
// (hopper_gemm.EDGE_BOX_ROWS): boxes of 8 rows or more of 128-byte rows are whole 1 KiB
// swizzle atoms, so each lands in shared memory as those rows of a taller box would.
constexpr int EDGE_BOXES = 4;
struct EdgeMaps {
    TensorMap box[EDGE_BOXES];
};

// One lane of the converged warp: the one that issues for it. A loop run by one thread
// (under threadIdx.x == 0) keeps its coordinates in per-thread registers, and the compiler
// wraps each TMA instruction in a loop that elects a lane to move them to uniform ones;
// run by the whole warp, with one elected lane issuing, each load is a straight move to
// uniform registers and the copy.
__device__ __forceinline__ bool elect_one() {
    unsigned elected;
    asm volatile("{\n\t.reg .pred p;\n\telect.sync _|p, 0xffffffff;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(elected));
    return elected != 0;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ unsigned long long map_addr(const TensorMap* map) {
    return reinterpret_cast<unsigned long long>(map);
}

// Fetch the tensor map into the TMA unit's cache ahead of the first copy.
__device__ __forceinline__ void prefetch_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(map_addr(map)) : "memory");
}

// Coordinates are in elements, innermost dimension first: {column, row}.
__device__ __forceinline__ void load_2d(void* dst, const TensorMap* map, unsigned long long* bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        ::"r"(smem_addr(dst)), "l"(map_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
        : "memory");
}

__device__ __forceinline__ void load_2d_multicast(void* dst, const TensorMap* map, unsigned long long* bar, int c0,
                                                  int c1, unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%4, %5}], [%2], %3;"
        ::"r"(smem_addr(dst)), "l"(map_addr(map)), "r"(smem_addr(bar)), "h"(cta_mask), "r"(c0), "r"(c1)
        : "memory");
}

// The shared source must have been written before: ordinary stores need
// fp_mbar::fence_proxy_async_shared() in each writing thread, then a barrier.
__device__ __forceinline__ void store_2d(const TensorMap* map, const void* src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 ::"l"(map_addr(map)), "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Until at most N store groups still read their shared source (the buffer may be reused).
template <int N>
__device__ __forceinline__ void store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Until at most N store groups are incomplete (their writes done).
template <int N>
__device__ __forceinline__ void store_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// ------------------------------------------------------------------ clusters
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// The u32 at `p`'s offset in the shared memory of block `cta` of the cluster (valid once
// every block of the cluster has started: after a cluster_sync).
__device__ __forceinline__ unsigned load_cluster_u32(const unsigned* p, unsigned cta) {
    unsigned value;
    asm volatile(
        "{\n .reg .b32 remote;\n"
        " mapa.shared::cluster.u32 remote, %1, %2;\n"
        " ld.shared::cluster.u32 %0, [remote];\n}"
        : "=r"(value) : "r"(smem_addr(p)), "r"(cta) : "memory");
    return value;
}
// The float4 at `p`'s offset in the shared memory of block `cta` of the cluster (as above).
__device__ __forceinline__ float4 load_cluster_f32x4(const float4* p, unsigned cta) {
    float4 v;
    asm volatile(
        "{\n .reg .b32 remote;\n"
        " mapa.shared::cluster.u32 remote, %4, %5;\n"
        " ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [remote];\n}"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(smem_addr(p)), "r"(cta) : "memory");
    return v;
}
// Every thread of every block of the cluster arrives, then waits for all the others.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// ------------------------------------------------------------------ named barriers
// bar.sync on barrier `id` (1..15; 0 is __syncthreads) for `threads` threads (a
// multiple of 32): synchronizes one role without stopping the others.
__device__ __forceinline__ void named_barrier_sync(unsigned id, unsigned threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// bar.arrive: count this warp's threads towards barrier `id` without waiting (the
// signalling half of a producer/consumer hand-off; the waiter calls named_barrier_sync).
__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fp_tma
