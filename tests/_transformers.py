"""transformers' two spellings of a config's RoPE, for tests that run under both lines of transformers.

transformers 5 reads RoPE from ``rope_parameters``; 4 (Colab's 4.57) from ``rope_theta`` and
``rope_scaling``, and keeps a ``rope_parameters=`` keyword as a plain attribute that its models never
read. A test that builds a model with a given RoPE therefore spells it the installed version's way."""

from __future__ import annotations

import transformers

V5 = int(transformers.__version__.split(".")[0]) >= 5


def rope(theta: float = 10000.0, rope_type: str = "default", **scaling) -> dict:
    """A config's RoPE keywords as the installed transformers reads them: ``theta`` and, for a
    ``rope_type`` other than ``"default"``, its ``scaling`` parameters (``factor``, ...)."""
    if V5:
        return {"rope_parameters": {"rope_type": rope_type, "rope_theta": theta, **scaling}}
    return {
        "rope_theta": theta,
        "rope_scaling": None if rope_type == "default" else {"rope_type": rope_type, **scaling},
    }
