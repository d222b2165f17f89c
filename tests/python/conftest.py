"""The tests import the conv3d_dx built in this build tree (ctest sets CONV3D_DX_PYTHON_PATH), never a stale
installed copy."""

import os
import zlib
from pathlib import Path

import numpy as np
import pytest

import conv3d_dx

_expected = os.environ.get("CONV3D_DX_PYTHON_PATH")
if _expected and Path(_expected).resolve() not in Path(conv3d_dx.__file__).resolve().parents:
    raise RuntimeError(f"conv3d_dx was imported from {conv3d_dx.__file__}, not from the build tree {_expected}")


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's name, so every test is reproducible on its own."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))
