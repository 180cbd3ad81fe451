// Programmatic dependent launch (sm_90): two kernels on one stream overlap their edges.
//
// A kernel launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start
// before the kernel ahead of it on the stream has finished: as soon as every block of that
// kernel has called allow_next_grid() or exited. Its blocks then land on SMs the earlier
// kernel leaves free and run their setup (shared memory, barriers, tensor-map prefetch)
// while the earlier kernel drains its last tiles. Before touching global memory, every
// thread of the later kernel calls wait_for_prior_grid(): it returns once the earlier
// kernel has completed and its writes are visible. Without the launch attribute both are
// no-ops, so a kernel that uses them is correct on any stream order.
#pragma once

namespace fp_pdl {

// Blocks until the grids this one depends on have completed and their memory is visible.
// Every global load, store or atomic of the kernel comes after it.
__device__ __forceinline__ void wait_for_prior_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Lets the next kernel on the stream launch (once every block of this grid has called it
// or exited). It says nothing about memory: the next kernel still waits in
// wait_for_prior_grid() for this grid's completion.
__device__ __forceinline__ void allow_next_grid() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

}  // namespace fp_pdl
