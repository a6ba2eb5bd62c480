#!/usr/bin/env bash
# The torch package (docs/torch.md): builds vxqa_torch against the Python's installed torch
# (offline: no build isolation, no dependencies fetched), installs it there, runs its pytest
# suite and examples/torch_gqa_layer.py. Without a GPU the GPU tests and the example skip,
# saying so. scripts/test.sh runs it in CI; on a GPU machine run it alone or as
# gpu_all.sh's step "torch".
#   PYTHON                the interpreter (default: .venv-torch/bin/python from setup.sh, else python3)
#   TORCH_CUDA_ARCH_LIST  the GPU architectures built (default 9.0: one, to keep it fast)
#   MAX_JOBS              parallel compiles (default: the cores)
#   OUT                   where torch-build.log, torch-pytest.log, torch-example.log (and, after a
#                         crash, torch-backtrace.log) go (default: build-torch/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv-torch/bin/python" ]; then python="$root/.venv-torch/bin/python"; else python=python3; fi
fi
logs="${OUT:-$root/build-torch}"
mkdir -p "$logs"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" MAX_JOBS="${MAX_JOBS:-$(nproc)}"

start=$SECONDS
if ! "$python" -m pip install --no-build-isolation --no-deps --no-index -v . >"$logs/torch-build.log" 2>&1; then
  grep -E "error|Error" "$logs/torch-build.log" | head -30
  echo "torch: the build failed (log: $logs/torch-build.log)"
  exit 1
fi
echo "torch: built and installed for sm ${TORCH_CUDA_ARCH_LIST} in $((SECONDS - start)) s"

# Out of the source tree, so that the installed package is the one imported. The tests
# that need no GPU run first, in a process of their own, verbose: a crash there (seen on the
# H200, docs/torch.md) then names its test and does not hide the GPU tests' results.
rc=0
tests="$root/python/tests"
(cd "$logs" && "$python" -m pytest -v -rs -p no:cacheprovider "$tests/test_ops.py") >"$logs/torch-pytest.log" 2>&1 || rc=$?
# A crash (a signal, not a test failure): rerun to the first one under cuda-gdb (the only
# debugger on the GPU machine's image) for the native backtrace.
if [ $rc -gt 128 ] && command -v cuda-gdb >/dev/null; then
  (cd "$logs" && timeout 300 cuda-gdb -batch -ex run -ex bt --args "$python" -m pytest -x -q -p no:cacheprovider \
    "$tests/test_ops.py") >"$logs/torch-backtrace.log" 2>&1 || true
  echo "torch: test_ops.py crashed (rc $rc); native backtrace ($logs/torch-backtrace.log):"
  grep -E "^#[0-9]+ " "$logs/torch-backtrace.log" | head -25 | cut -c1-240 || true
fi
(cd "$logs" && "$python" -m pytest -v -rs -p no:cacheprovider "$tests" --ignore="$tests/test_ops.py") \
  >>"$logs/torch-pytest.log" 2>&1 || rc=$?
grep -E "^SKIPPED" "$logs/torch-pytest.log" | head -3 || true
grep -E "^=+ .*(passed|failed|skipped|error)" "$logs/torch-pytest.log" || true  # one line a run
# The example runs whatever pytest said, so that one run of the GPU machine reports both.
example_rc=0
"$python" examples/torch_gqa_layer.py >"$logs/torch-example.log" 2>&1 || example_rc=$?
grep "^torch_gqa_layer" "$logs/torch-example.log" || true
if [ $rc -ne 0 ]; then
  grep -E "^(FAILED|ERROR)|Fatal Python error" "$logs/torch-pytest.log" | head -30 || true
  echo "torch: pytest failed (rc $rc; log: $logs/torch-pytest.log)"
fi
[ $example_rc -eq 0 ] || echo "torch: the example failed (rc $example_rc; log: $logs/torch-example.log)"
[ $rc -eq 0 ] && [ $example_rc -eq 0 ] || exit 1
echo "torch: done in $((SECONDS - start)) s"
