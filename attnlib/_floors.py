"""The oldest torch attnlib runs on, checked when attnlib is imported.

pyproject.toml declares the same floor (``torch>=2.5``) and tests/test_floors.py checks, against
torch 2.5.0's own sources, every torch function and keyword that attnlib and the chapters use.
pip keeps an installed torch that satisfies an older floor, so without this check an old torch
would fail later, inside a chapter, with a ``TypeError`` about a keyword.
"""

from __future__ import annotations

import re

import torch

TORCH_FLOOR = (2, 5)  # F.scaled_dot_product_attention(enable_gqa=...), torch.nn.attention.flex_attention


def check_torch(version: str = torch.__version__) -> None:
    """Raise an ``ImportError`` that says what to do when ``version`` is older than :data:`TORCH_FLOOR`."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found and tuple(int(part) for part in found.groups()) < TORCH_FLOOR:
        floor = ".".join(map(str, TORCH_FLOOR))
        raise ImportError(
            f"attnlib needs torch {floor} or newer; this environment has torch {version}. attnlib passes "
            f"enable_gqa= to F.scaled_dot_product_attention and chapter 16 imports "
            f"torch.nn.attention.flex_attention, both new in torch 2.5. Upgrade torch (pip install -U "
            f'"torch>={floor}"; the course\'s environment pins torch==2.13.0 in requirements.txt), then '
            f"restart the kernel."
        )


check_torch()  # at import, before any attnlib module uses what torch 2.5 added
