// mbarrier (sm_90): a barrier object in shared memory that counts arrivals, and on
// Hopper also bytes delivered by the copy engines (TMA) — the handshake between the
// roles of a warp-specialized kernel ("full" / "empty" pairs of a ring buffer).
//
// A phase completes when `count` threads have arrived and, if a thread announced bytes
// with mbar_arrive_expect_tx, when that many bytes have landed. A waiter names the
// parity of the phase it waits for: the k-th use of a ring slot waits on parity k & 1.
// Arrive has release semantics and a completed wait acquire semantics, at CTA scope.
#pragma once

namespace fp_mbar {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// One thread initializes; then fence_barrier_init() and a __syncthreads() (or a cluster
// barrier) before any other thread or the copy engine touches the barrier.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Makes initialized barriers visible to the async proxy (TMA) and to the cluster.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Release: the calling thread's earlier writes are visible to whoever completes a wait.
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Arrive on the barrier at the same shared offset in block `cta` of the cluster, with
// the default (CTA-scope) release. A cluster-scope release would cost a MEMBAR.ALL.GPU
// per arrival in SASS; a consumer that only read a slot through wgmma or TMA (retired
// before it arrives) has nothing of its own to publish, which is what a multicast
// ring's "slot free" signal needs.
__device__ __forceinline__ void mbar_arrive_cluster(unsigned long long* bar, unsigned cta) {
    asm volatile(
        "{\n .reg .b32 remote;\n"
        " mapa.shared::cluster.u32 remote, %0, %1;\n"
        " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}"
        ::"r"(smem_addr(bar)), "r"(cta) : "memory");
}

// Arrive and announce `bytes` that copies (TMA) will deliver to this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

// Acquire: spin until the phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred done;\n"
        "WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n @!done bra WAIT_%=;\n}"
        ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}

// Ordinary shared-memory writes (st.shared, stmatrix) that the async proxy (TMA store,
// wgmma operands) reads next need this fence in each writing thread before the barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace fp_mbar
