#!/usr/bin/env bash
# Installs what vxqa's build and tests need on a fresh Debian 12 machine. Idempotent:
# each step checks first and does nothing when its tool is already there.
#   - Debian's CUDA 11.8 (non-free) + g++-11: the only nvcc that targets sm_70
#   - Catch2 v2 (Debian), CMake
#   - CUDA 12.8 NVRTC + headers from PyPI, in .venv-cu128/ (sm_70 builds with 12.8's compiler)
#   - torch (CUDA 13.0 wheels, as nvcc), pytest, ninja from PyPI, in .venv-torch/ (the torch
#     package's build and CPU tests, scripts/torch_test.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export DEBIAN_FRONTEND=noninteractive

sudo_if() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
[ -x /usr/lib/nvidia-cuda-toolkit/bin/nvcc ] || need_apt+=(nvidia-cuda-toolkit)
command -v g++-11 >/dev/null || need_apt+=(g++-11)
[ -f /usr/include/catch2/catch.hpp ] || need_apt+=(catch2)
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ctest >/dev/null || need_apt+=(cmake)

if [ ${#need_apt[@]} -gt 0 ]; then
  # nvidia-cuda-toolkit lives in non-free: enable it in the deb822 sources (or the legacy list).
  src=/etc/apt/sources.list.d/debian.sources
  if [ -f "$src" ] && ! grep -q 'non-free' "$src"; then
    sudo_if sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "$src"
  elif [ ! -f "$src" ] && ! grep -qs 'non-free' /etc/apt/sources.list; then
    echo 'deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware' |
      sudo_if tee /etc/apt/sources.list.d/vxqa-non-free.list >/dev/null
  fi
  sudo_if apt-get update -q
  sudo_if apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

venv="$root/.venv-cu128"
if [ ! -f "$venv/.ok" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    'nvidia-cuda-nvrtc-cu12==12.8.*' 'nvidia-cuda-runtime-cu12==12.8.*' 'nvidia-cuda-cccl-cu12==12.8.*'
  touch "$venv/.ok"
fi
torch_venv="$root/.venv-torch"
if [ ! -f "$torch_venv/.ok" ]; then
  python3 -m venv "$torch_venv"
  "$torch_venv/bin/pip" install -q --disable-pip-version-check 'torch==2.11.0' numpy pytest ninja setuptools wheel
  touch "$torch_venv/.ok"
fi
echo "setup: done"
