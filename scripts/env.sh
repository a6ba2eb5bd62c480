# Sourced by the scripts: which compilers the build uses.
#   CUDA 13 (/usr/local/cuda)             sm_75/80/90 targets, GPU tests, examples
#   Debian CUDA 11.8 + g++-11              sm_70 (and sm_80 cross-check) audit cubins
#   CUDA 12.8 NVRTC (.venv-cu128, PyPI)    sm_70 audit cubins with V100 users' compiler
export CUDACXX="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"
export PATH="/usr/local/cuda/bin:$PATH"
