"""The rotary embedding's cos/sin tables of a file read back into the rope's theta, and
tables that are not the suite's rope (scaled, shifted) refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest

from opbench.importers.onnx.handlers import Refused
from opbench.importers.onnx.handlers_transformer import rope_theta


def _tables(theta: float, seq: int, d: int, start: int = 0, scale: float = 1.0):
    """As Hugging Face's LlamaRotaryEmbedding computes them, in float32."""
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float32) / d)
    t = np.arange(start, start + seq, dtype=np.float32)[:, None]
    emb = np.concatenate([t * inv_freq, t * inv_freq], axis=1).astype(np.float32)
    return np.cos(emb) * scale, np.sin(emb) * scale


@pytest.mark.parametrize("theta", [10000.0, 500000.0, 1000000.0])
def test_theta_is_read_back(theta: float):
    cos, sin = _tables(theta, seq=37, d=64)
    assert rope_theta(cos.astype(np.float64), sin.astype(np.float64)) == theta


@pytest.mark.parametrize(
    "change", [{"start": 5}, {"scale": 1.2}], ids=["positions shifted", "attention scaling"]
)
def test_other_tables_are_refused(change: dict):
    cos, sin = _tables(10000.0, seq=37, d=64, **change)
    with pytest.raises(Refused, match="not cos/sin"):
        rope_theta(cos.astype(np.float64), sin.astype(np.float64))
