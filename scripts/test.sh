#!/usr/bin/env bash
# Builds every target and runs every test (CPU tests, header checks, consumer projects,
# sm_70 SASS audits; GPU tests skip without a GPU), then the torch package (scripts/torch_test.sh:
# its build, CPU tests and skips). Installs what is missing first.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
source scripts/env.sh
build="${VXQA_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DVXQA_SM70_AUDIT=ON
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
bash scripts/torch_test.sh
