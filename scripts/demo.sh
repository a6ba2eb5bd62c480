#!/usr/bin/env bash
# The main job: builds and runs the demo on random data (GPU parts skip without a GPU).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
source scripts/env.sh
build="${VXQA_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)" --target vxqa_demo
"$build/examples/vxqa_demo" "$@"
