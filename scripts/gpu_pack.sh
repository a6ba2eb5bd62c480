#!/usr/bin/env bash
# Builds the GPU binaries here, off the GPU machine, and packs them for it: a device call then
# spends its minutes running, not compiling (the suites take ~25 minutes to build on 2 cores).
#   bash scripts/gpu_pack.sh [ARCHIVE]     (default .carry/gpu-bins.tar.xz; .carry/ is git-ignored)
# On the GPU machine, with the archive carried:
#   VXQA_PREBUILT=.carry/gpu-bins.tar.xz VXQA_STEPS="build suite+sweep_fixed ..." bash scripts/gpu_all.sh
# VXQA_GPU_ARCH: the target (default 90a, the H100/H200 of the device tool); VXQA_TARGETS: what
# to build (default: what gpu_all.sh's steps run, but the prototypes' benchmarks).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/env.sh
archive="${1:-.carry/gpu-bins.tar.xz}"
targets="${VXQA_TARGETS:-vxqa_gpu_tests vxqa_gpu_tests_sm70 vxqa_sweep vxqa_decode_bench vxqa_cta_timeline \
vxqa_host_cost vxqa_demo vxqa_custom_config}"
# gpu_all.sh's own build step (its configure, its CATCH2_PREFIX), for this target list.
log="$(mktemp -d)"
OUT="$log" VXQA_STEPS=build VXQA_GPU_ARCH="${VXQA_GPU_ARCH:-90a}" VXQA_TARGETS="$targets" \
  bash scripts/gpu_all.sh >/dev/null ||
  { echo "gpu_pack: the build failed; its logs: $log/logs.tar.gz" >&2; exit 1; }
# Each target's executable, by name, wherever CMake put it under build-gpu.
files=()
for t in $targets; do
  f="$(find build-gpu -type f -name "$t" -perm -u+x -not -path '*/CMakeFiles/*' | head -1)"
  [ -n "$f" ] || { echo "gpu_pack: no executable for target $t under build-gpu" >&2; exit 1; }
  files+=("$f")
done
mkdir -p "$(dirname "$archive")"
tar cf - "${files[@]}" | xz -T0 -6 >"$archive"
echo "gpu_pack: $archive ($(du -h "$archive" | cut -f1)), commit $(git rev-parse --short HEAD):"
printf '  %s\n' "${files[@]}"
