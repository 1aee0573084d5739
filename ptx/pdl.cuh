// Programmatic dependent launch (PDL, sm_90): the two grid-dependency-control instructions.
//
// With dgx.set_pdl(True) the host launches every kernel with the programmatic-stream-serialization attribute, so a
// kernel may start while the previous kernel on its stream is still running. Each kernel then runs its prologue
// (shared-memory carve-up, barrier init, prefetch of the tensor maps, which are kernel parameters and not a
// predecessor's data), calls griddepcontrol_wait() in every thread before that thread's first global read or write
// (TMA loads, scale loads, the scheduler's reads of m_indices / masked_m / ks, the MQA schedule and lengths, every
// store), and then griddepcontrol_launch_dependents(). A kernel opts in by calling them: one whose code has no
// griddepcontrol.wait is launched without the attribute (dgx.runtime.waits_for_predecessor, checked at load).
//
// PTX ISA, "Parallel Synchronization and Communication Instructions: griddepcontrol":
// - .wait "causes the executing thread to wait until all prerequisite grids in flight have completed and all the
//   memory operations from the prerequisite grids are performed and made visible to the current grid". A grid
//   launched without the attribute (PDL off) starts only after its predecessors completed, so none is in flight
//   and the wait returns at once: the kernels call it unconditionally.
// - .launch_dependents lets the dependent grids "be scheduled as soon as all other CTAs in the grid issue the same
//   instruction or have completed"; repeated invocations in a CTA have no effect past the first. It only lets the
//   dependent *launch* (run its prologue): the dependent's own .wait still waits for this grid's completion and
//   memory flush, so signalling early is always safe. Without it the dependent launches when this grid has exited.
#pragma once
#include "common.cuh"

namespace dgx {

DGX_DEVICE void griddepcontrol_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

DGX_DEVICE void griddepcontrol_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

}  // namespace dgx
