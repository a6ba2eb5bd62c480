"""Builds vxqa_torch._C with torch's own extension tooling (docs/torch.md says why).

TORCH_CUDA_ARCH_LIST picks the GPU architectures (e.g. "9.0"; unset: the local GPU's);
MAX_JOBS the parallel compiles (ninja). Package metadata is in pyproject.toml.
"""
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

csrc = os.path.join("python", "csrc")
sources = sorted(glob.glob(os.path.join(csrc, "*.cpp")) + glob.glob(os.path.join(csrc, "*.cu")))

setup(
    ext_modules=[
        CUDAExtension(
            "vxqa_torch._C",
            sources=sources,
            include_dirs=[os.path.abspath("include")],
            extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O3"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    # Out of CMake's build/ (scripts/test.sh's).
    options={"build": {"build_base": "build-torch"}},
)
