"""Hugging Face `transformers` models as a user exports them, made on the CPU from seeded
random weights (no downloads), for the import tests of issue 41.

    python tests/data/hf_models.py OUT_DIR [NAME ...]     # all of them, or the ones named
    python tests/data/hf_models.py --list

Each model is built from a small config (2 layers, hidden 64, sequence 8) with random weights and exported
with a plain `torch.onnx.export(model, (input_ids,), f)`: the dynamo exporter at its default
opset. LLaMA and Qwen2 set `use_cache=False` (the KV cache object is no tensor the exporter can
return). Text models take int64 token ids [batch, seq]; ViT takes pixels [batch, 3, 14, 14]
(2 x 2 patches of 7: Triton's conv kernel takes sizes up to 7). transformers imports torchvision,
whose import on a CPU torch onnx_models.py mends. The files are test material, generated into
a temporary folder per test session, never committed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_models import (  # noqa: E402
    _import_torchvision,
    _no_constant_tensors,
    quiet,
    write_exports,
)

BATCH, SEQ, VOCAB = 2, 8, 512


def _hf(kind: str, without_pooler: bool = False, **config: Any) -> Callable[[], nn.Module]:
    """A maker of transformers' `<kind>Model` from `<kind>Config(**config)`."""

    def make() -> nn.Module:
        import transformers

        made = getattr(transformers, f"{kind}Config")(**config)
        extra = {"add_pooling_layer": False} if without_pooler else {}
        return getattr(transformers, f"{kind}Model")(made, **extra)

    return make


# 2 layers, hidden 64, MLP 128 each (small: the triton runs go through the interpreter); LLaMA
# and Qwen2 with 4 query heads sharing 2 kv heads.
_TEXT = {"vocab_size": VOCAB, "max_position_embeddings": 64}
_ENCODER = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4}  # fmt: skip
_DECODER = {**_TEXT, **_ENCODER, "num_attention_heads": 4, "num_key_value_heads": 2,
            "use_cache": False}  # fmt: skip
_llama = _hf("Llama", **_DECODER)
_qwen2 = _hf("Qwen2", **_DECODER)
_bert = _hf("Bert", True, **_TEXT, **_ENCODER)
_distilbert = _hf("DistilBert", **_TEXT, dim=64, hidden_dim=128, n_layers=2, n_heads=4)
_vit = _hf("ViT", True, **_ENCODER, image_size=14, patch_size=7)


@dataclass(frozen=True)
class HFExport:
    """One ONNX file: the model, its example input shape, whether that input is token ids."""

    name: str
    make: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    token_ids: bool
    seed: int
    # Also an `attention_mask` input [batch, seq] (int64 0/1); exported with padding in the
    # second sequence, so that the exporter keeps the mask (all ones lets HF skip it).
    with_mask: bool = False


EXPORTS: dict[str, HFExport] = {
    e.name: e
    for e in (
        HFExport("hf_llama", _llama, (BATCH, SEQ), True, seed=11),
        HFExport("hf_qwen2", _qwen2, (BATCH, SEQ), True, seed=12),
        HFExport("hf_bert", _bert, (BATCH, SEQ), True, seed=13),
        HFExport("hf_distilbert", _distilbert, (BATCH, SEQ), True, seed=14),
        HFExport("hf_llama_mask", _llama, (BATCH, SEQ), True, seed=11, with_mask=True),
        HFExport("hf_bert_mask", _bert, (BATCH, SEQ), True, seed=13, with_mask=True),
        HFExport("hf_vit", _vit, (BATCH, 3, 14, 14), False, seed=15),
    )
}


def model_and_input(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The seeded model in eval mode and its seeded input."""
    spec = EXPORTS[name]
    _import_torchvision()  # transformers imports it; on a CPU torch it needs nms declared first
    torch.manual_seed(spec.seed)
    model = spec.make().eval()
    generator = torch.Generator().manual_seed(2000 + spec.seed)
    _no_constant_tensors(model, generator)
    if spec.token_ids:
        x = torch.randint(0, VOCAB, spec.input_shape, generator=generator)
    else:
        x = torch.randn(spec.input_shape, generator=generator)
    return model, x


def _mask(name: str, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if not EXPORTS[name].with_mask:
        return ()
    mask = torch.ones_like(ids)
    mask[1, ids.shape[1] * 2 // 3 :] = 0
    return (mask,)


def export(name: str, out_dir: Path) -> Path:
    """Write OUT_DIR/NAME.onnx (one file, weights inside) and return its path."""
    model, x = model_and_input(name)
    path = Path(out_dir) / f"{name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    with quiet():
        torch.onnx.export(model, (x, *_mask(name, x)), str(path), external_data=False)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="folder to write NAME.onnx into")
    parser.add_argument("names", nargs="*", help="which exports (default: all)")
    parser.add_argument("--list", action="store_true", help="list the exports and stop")
    args = parser.parse_args(argv)
    if args.list or args.out is None:
        for spec in EXPORTS.values():
            print(f"{spec.name:16} input {list(spec.input_shape)}")
        return 0
    return write_exports(args.out, args.names or EXPORTS, EXPORTS, export)


if __name__ == "__main__":
    raise SystemExit(main())
