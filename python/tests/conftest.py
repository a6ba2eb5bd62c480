import sys
import os

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # problems.py


@pytest.fixture
def cuda():
    """The GPU tests' device; skips (saying why) where there is none."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU tests run on a GPU machine (scripts/torch_test.sh there)")
    return torch.device("cuda")
