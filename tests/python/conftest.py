"""The tests import the conv3d_dx built in this build tree (ctest sets CONV3D_DX_PYTHON_PATH), never a stale
installed copy."""

import os
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import conv3d_dx

# TensorFlow and triton (which torch._dynamo imports, and torch.library operators import torch._dynamo on
# their first call) each register LLVM's command-line options: triton loaded after TensorFlow aborts the
# process. ctest runs the TensorFlow tests in a process of their own; where one pytest run collects both,
# torch._dynamo is loaded first, here.
if "tensorflow" not in sys.modules:
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:
        pass

_expected = os.environ.get("CONV3D_DX_PYTHON_PATH")
if _expected and Path(_expected).resolve() not in Path(conv3d_dx.__file__).resolve().parents:
    raise RuntimeError(f"conv3d_dx was imported from {conv3d_dx.__file__}, not from the build tree {_expected}")


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's name, so every test is reproducible on its own."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))
