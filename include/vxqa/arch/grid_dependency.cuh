// vxqa/arch/grid_dependency.cuh — programmatic dependent launch (sm_90 and newer): a kernel
// launched with the programmatic-serialisation attribute may start while the kernel before
// it on the stream finishes; it waits for that kernel's results with grid_dependency_wait.
// Elsewhere both are no-ops (the launch is then an ordinary serialised one).
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {
namespace arch {

#if VXQA_IS_CUDA_COMPILER
// Lets the next kernel on the stream launch once every CTA of this one has called this or
// exited. The dependent kernel still waits for this one's memory in grid_dependency_wait.
VXQA_DEVICE void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Waits until the kernel this one depends on has completed and its writes are visible.
VXQA_DEVICE void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
#endif

}  // namespace arch
}  // namespace vxqa
