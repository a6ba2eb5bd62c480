#!/usr/bin/env bash
# The GPU suite on a machine with a GPU (used on the H200): builds the GPU tests for the
# local GPU only, runs them, and runs compute-sanitizer on a reduced set. Catch2's header and
# CMake files are taken from CATCH2_PREFIX when the machine has no catch2 package.
#   scripts/gpu_suite.sh [catch2-filter]       logs go to ${OUT:-build-gpu}/
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/build-gpu}"
mkdir -p "$out"
arch="${VXQA_GPU_ARCH:-native}"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DVXQA_SM70_AUDIT=OFF ${CATCH2_PREFIX:+-DCMAKE_PREFIX_PATH=$CATCH2_PREFIX} >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target vxqa_gpu_tests ${VXQA_EXTRA_TARGETS:-} >"$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
./build-gpu/test/vxqa_gpu_tests ${1:-} 2>&1 | tee "$out/gpu_tests.log" | tail -40
