// Concurrency probes for the level-1 experiments: each block spins for a set time
// and writes where and when it ran, so concurrency is counted from the GPU's own
// clock instead of being guessed from total times.
#include <fullpipe/timer.cuh>

// Block b of this grid writes out[4*b .. 4*b+3] = {start ns, end ns, SM id, tag}.
// `tag` names the launch (e.g. its stream index) so that blocks of different grids
// can be told apart after all of them wrote into one buffer.
extern "C" __global__ void spin_stamp_sm(unsigned long long ns, unsigned long long* out, unsigned long long tag) {
    unsigned long long t0 = fp_spin_ns(ns);
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        out[4 * blockIdx.x + 0] = t0;
        out[4 * blockIdx.x + 1] = fp_globaltimer_ns();
        out[4 * blockIdx.x + 2] = smid;
        out[4 * blockIdx.x + 3] = tag;
    }
}
