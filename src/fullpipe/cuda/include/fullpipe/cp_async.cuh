// cp.async (sm_80+): 16-byte global -> shared copies that bypass the registers,
// grouped and waited for with commit_group / wait_group: THE cp.async dialect of the
// kernels that issue the PTX themselves (gemm_wmma.cu, cluster_gemm.cu,
// persistent_gemm.cu, persistent_recurrent.cu). The fp32 ladder uses CCCL's
// cuda::memcpy_async / cuda::pipeline instead (fp32_slice_copier.cuh): the same
// instructions through the library's API.
#pragma once

// Copy 16 bytes; when `valid` is false, write 16 zero bytes instead (src-size 0),
// which is how the kernels zero-fill tiles that hang over the matrix edges.
// `smem_addr`: the destination as a shared-window address (__cvta_generic_to_shared),
// for kernels that compute their ring addresses in that space (gemm_wmma.cu).
__device__ __forceinline__ void cp_async_16(unsigned smem_addr, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
// Wait until at most N of this thread's cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
