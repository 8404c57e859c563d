"""The ONNX exports of issue 27, made on the CPU from seeded random weights (no downloads).

    python tests/data/onnx_models.py OUT_DIR [NAME ...]     # all of them, or the ones named
    python tests/data/onnx_models.py --list

What a user gets from `torch.onnx.export(model, args, f)` in torch 2.13: the dynamo exporter at
its default opset (20), and the variants the issue names (opset 18 and 23, the older
TorchScript exporter with `dynamo=False`). Each model is put in eval mode with weights drawn
from a seed of its own, so the same name gives the same file on every machine. The files are
test material: they are generated into a temporary folder per test session and never committed.

torchvision: the wheel on the package index is the CUDA build; on a CPU torch its import fails
with "operator torchvision::nms does not exist" because its C extension does not load and its
fake-kernel registrations need the ops declared. `_import_torchvision` declares
`torchvision::nms` and `torchvision::qnms` with torch.library first (their schemas as
torchvision's C++ declares them); nothing here calls them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

_TORCHVISION_LIBRARY: Any = None  # kept alive: the declarations last as long as this object


def _import_torchvision() -> Any:
    global _TORCHVISION_LIBRARY
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    if _TORCHVISION_LIBRARY is None and not hasattr(torch.ops.torchvision, "nms"):
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor")
        _TORCHVISION_LIBRARY = lib
    import torchvision

    return torchvision


# ---- the small models ---------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """RMS norm as LLaMA's reference code writes it (the TorchScript exporter has no
    `aten::rms_norm`, so a model exported with dynamo=False carries its own)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaBlock(nn.Module):
    """One LLaMA-style decoder block: RMSNorm, q/k/v/o projections without bias, causal SDPA,
    residual adds, and a SwiGLU feed-forward (w2(silu(w1 x) · w3 x))."""

    def __init__(
        self, dim: int = 128, heads: int = 4, hidden: int = 344, own_norm: bool = False
    ) -> None:
        super().__init__()
        self.heads = heads
        norm = RMSNorm if own_norm else nn.RMSNorm
        self.attention_norm = norm(dim, eps=1e-5)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.ffn_norm = norm(dim, eps=1e-5)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, s, e = t.shape
        return t.view(b, s, self.heads, e // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, e = x.shape
        h = self.attention_norm(x)
        q, k, v = self._heads(self.wq(h)), self._heads(self.wk(h)), self._heads(self.wv(h))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, e))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def _encoder(batch_first: bool) -> nn.Module:
    return nn.TransformerEncoderLayer(
        d_model=128, nhead=4, dim_feedforward=256, dropout=0.1, batch_first=batch_first
    )


@dataclass(frozen=True)
class Export:
    """One ONNX file: which model, its example input (batch included), how it is exported.

    batch_axis: where the batch is in the input (what the importer must find by itself).
    """

    name: str
    make: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    dynamo: bool = True
    opset: int | None = None  # None: the exporter's default
    batch_axis: int = 0
    seed: int = 0


class ResNetBlocks(nn.Module):
    """ResNet-50's structure at a tenth of its width: a 3×3 stem conv + BN + ReLU, max pool, two
    of torchvision's Bottleneck blocks (the first with its downsample path, the second with an
    identity residual), global average pool and a linear head (issue 39's round trip)."""

    def __init__(self) -> None:
        super().__init__()
        bottleneck = _import_torchvision().models.resnet.Bottleneck
        self.conv1 = nn.Conv2d(3, 16, 3, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        down = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32))
        self.layer1 = nn.Sequential(bottleneck(16, 8, downsample=down), bottleneck(32, 8))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(self.layer1(x)), 1))


def _mobilenet_v2_blocks() -> nn.Module:
    """MobileNetV2's structure with three inverted residual blocks: the expansion-1 block, a
    strided 24-channel block and a 24-channel block with its residual add (24 channels: ONNX
    Runtime's NCHWc kernels pad them to 32 on AVX-512), ReLU6 throughout."""
    models = _import_torchvision().models
    return models.MobileNetV2(
        num_classes=10, inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2]]
    )


def _tv(name: str) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        return getattr(_import_torchvision().models, name)(weights=None)

    return make


def _vit_tiny() -> nn.Module:
    """torchvision's VisionTransformer at test sizes: 16x16 images in 8x8 patches (4 tokens
    and the class token), one encoder block of width 16 with 2 heads, MLP 32, 5 classes."""
    vision_transformer = _import_torchvision().models.vision_transformer
    return vision_transformer.VisionTransformer(
        image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=5,
    )  # fmt: skip


# The eight exports of issue 27, then the variants it also names. `EIGHT` is what the tests
# import; every entry of `EXPORTS` can be generated.
EXPORTS: dict[str, Export] = {
    e.name: e
    for e in (
        Export("resnet50", _tv("resnet50"), (1, 3, 224, 224), seed=1),
        Export("mobilenet_v2", _tv("mobilenet_v2"), (1, 3, 224, 224), seed=2),
        Export("vit_b_16", _tv("vit_b_16"), (1, 3, 224, 224), seed=3),
        Export("encoder_seq_first", lambda: _encoder(False), (24, 2, 128), batch_axis=1, seed=4),
        Export("encoder_batch_first", lambda: _encoder(True), (2, 24, 128), seed=5),
        Export("llama_block", LlamaBlock, (2, 32, 128), seed=6),
        Export("llama_block_opset23", LlamaBlock, (2, 32, 128), opset=23, seed=6),
        Export("resnet50_legacy", _tv("resnet50"), (1, 3, 224, 224), dynamo=False, seed=1),
        # the other variants the issue tried
        Export("vit_b_16_opset18", _tv("vit_b_16"), (1, 3, 224, 224), opset=18, seed=3),
        Export("vit_b_16_opset23", _tv("vit_b_16"), (1, 3, 224, 224), opset=23, seed=3),
        Export("mobilenet_v2_legacy", _tv("mobilenet_v2"), (1, 3, 224, 224), dynamo=False, seed=2),
        # (nn.TransformerEncoderLayer does not export with dynamo=False in torch 2.13: the
        # TorchScript tracer hands SDPA a tensor for `is_causal`, a TypeError inside torch.)
        Export("llama_block_opset18", LlamaBlock, (2, 32, 128), opset=18, seed=6),
        Export("vit_tiny", _vit_tiny, (1, 3, 16, 16), seed=7),  # the SAS layer-API tests
        # ResNet-50's and MobileNetV2's block structure, small enough for a quick round trip
        Export("resnet_blocks", ResNetBlocks, (1, 3, 32, 32), seed=7),
        Export("mobilenet_v2_blocks", _mobilenet_v2_blocks, (1, 3, 32, 32), seed=8),
        Export(
            "llama_block_legacy",
            lambda: LlamaBlock(own_norm=True),
            (2, 32, 128),
            dynamo=False,
            seed=6,
        ),
    )
}
EIGHT: tuple[str, ...] = tuple(list(EXPORTS)[:8])


@torch.no_grad()
def _no_constant_tensors(model: nn.Module, generator: torch.Generator) -> None:
    """Redraw every parameter or buffer that holds one value everywhere.

    Default initialisations leave norm weights at 1, biases (attention's, ViT's head) and the
    head's weight at 0, batch-norm statistics at 0 and 1: the exporters then drop zero biases
    and share identical tensors between layers, and a zero head makes the whole model's output
    zero, which any wrong kernel matches. Random values keep every layer honest."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if not tensor.is_floating_point() or tensor.numel() < 2:
            continue
        flat = tensor.reshape(-1)
        if not bool((flat == flat[0]).all()):
            continue
        noise = torch.randn(tensor.shape, generator=generator)
        if name.endswith("running_var"):
            tensor.copy_(0.5 + torch.rand(tensor.shape, generator=generator))
        elif float(flat[0]) == 1.0:
            tensor.copy_(1.0 + 0.1 * noise)
        else:
            fan_in = tensor.shape[-1] if tensor.dim() > 1 else 1
            tensor.copy_(noise * (0.1 if tensor.dim() == 1 else fan_in**-0.5))


def model_and_input(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The seeded model in eval mode and its seeded example input."""
    spec = EXPORTS[name]
    torch.manual_seed(spec.seed)
    model = spec.make().eval()
    generator = torch.Generator().manual_seed(1000 + spec.seed)
    _no_constant_tensors(model, generator)
    return model, torch.randn(spec.input_shape, generator=generator)


def export(name: str, out_dir: Path) -> Path:
    """Write OUT_DIR/NAME.onnx (one file, weights inside) and return its path."""
    spec = EXPORTS[name]
    model, x = model_and_input(name)
    path = Path(out_dir) / f"{name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"dynamo": spec.dynamo}
    if spec.opset is not None:
        kwargs["opset_version"] = spec.opset
    if spec.dynamo:
        kwargs["external_data"] = False
    with quiet():
        torch.onnx.export(model, (x,), str(path), **kwargs)
    return path


@contextlib.contextmanager
def quiet():
    """No grad, and none of the progress and warnings the exporters print for a user."""
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        torch.no_grad(),
    ):
        warnings.simplefilter("ignore")
        yield


def write_exports(out: Path, names: Iterable[str], known, export_one) -> int:
    """Export each name into OUT (exit status 2 for a name not in `known`), saying how long."""
    names = list(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown export(s): {', '.join(unknown)} (--list shows them)", file=sys.stderr)
        return 2
    for name in names:
        started = time.perf_counter()
        path = export_one(name, out)
        took = time.perf_counter() - started
        print(f"{path}  {path.stat().st_size / 1e6:.1f} MB  {took:.1f} s")
    return 0


def export_all(out_dir: Path, names: Iterable[str] = EIGHT) -> dict[str, Path]:
    return {name: export(name, out_dir) for name in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="folder to write NAME.onnx into")
    parser.add_argument("names", nargs="*", help="which exports (default: the eight)")
    parser.add_argument("--list", action="store_true", help="list the exports and stop")
    args = parser.parse_args(argv)
    if args.list or args.out is None:
        for spec in EXPORTS.values():
            how = "dynamo" if spec.dynamo else "dynamo=False"
            opset = spec.opset or "default"
            mark = "*" if spec.name in EIGHT else " "
            print(
                f"{mark} {spec.name:26} {how:12} opset {opset!s:8} input {list(spec.input_shape)}"
            )
        return 0
    return write_exports(args.out, args.names or EIGHT, EXPORTS, export)


if __name__ == "__main__":
    raise SystemExit(main())
