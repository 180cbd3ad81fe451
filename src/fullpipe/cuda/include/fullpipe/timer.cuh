// Device-side clocks shared by fullpipe's kernels.
#pragma once

// Nanoseconds on the GPU's global timer: comparable across SMs and kernels of one
// device (it ticks in steps of about 1 us on some parts, 32 ns on Hopper).
__device__ __forceinline__ unsigned long long fp_globaltimer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Busy-wait for at least `ns` nanoseconds; returns the start stamp.
__device__ __forceinline__ unsigned long long fp_spin_ns(unsigned long long ns) {
    unsigned long long t0 = fp_globaltimer_ns();
    while (fp_globaltimer_ns() - t0 < ns) {
    }
    return t0;
}
