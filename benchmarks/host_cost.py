"""Host cost of the torch peer's whole-model eager forward against a PyTorch user's
nn.Module of the same ops (issue 43: within 10%).

Three forwards of each model, called back to back in interleaved rounds, median of the
rounds' time per call in µs of this thread's CPU time (`time.thread_time`: the time other
processes of a loaded machine take is not counted):
- `suite steps`: the forward the torch backend ran before it built a module: each layer's
  Built (torch.no_grad around op.forward over a dict of weights) issued by a Python step
  over a table of values (pipeline/forward.py's eager_forward);
- `suite module`: the forward it runs now: the model as one fx GraphModule, weights its
  parameters (backends/torch_model.py);
- `user module`: an nn.Module written by hand as a user writes it (quickstart), or
  torchvision's ResNet-50, carrying the suite's weights (their outputs are checked equal).

On the CPU, one thread, at shapes that compute next to nothing (the quickstart's; ResNet-50's
175 layers at width 4, 32x32, batch 1): the figure is mostly the host's (Python, the
dispatcher), which is what an eager forward at batch 1 on a GPU costs. (The meta device would
compute nothing at all, but its Python shape functions cost more than the ops' CPU kernels.)

    PYTHONPATH=. python3 benchmarks/host_cost.py               # ~1 minute
    PYTHONPATH=. python3 benchmarks/host_cost.py --device cuda # the issuing thread's time on a GPU
                                                          # host, and ResNet-50 b1 fp16 too
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from peer_models import load_suite_weights, resnet_blocks, resnet_names  # noqa: E402
from torch import nn  # noqa: E402

from opbench.backends.registry import get_backend  # noqa: E402
from opbench.pipeline.data import ModelData  # noqa: E402
from opbench.pipeline.forward import eager_forward  # noqa: E402
from opbench.pipeline.torch_forward import module_forward  # noqa: E402
from opbench.spec.load import load_suite, load_suite_text  # noqa: E402


class QuickMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln, self.fc1 = nn.LayerNorm(24), nn.Linear(24, 40)
        self.fc2, self.rms = nn.Linear(40, 24).half(), nn.RMSNorm(24, eps=1e-5)
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        x = F.silu(F.gelu(self.fc1(self.ln(x))))
        x = self.rms(self.fc2(x.half()).float())
        return (torch.softmax(F.relu(self.head(x)), -1),)


class QuickCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
        return (F.gelu(x.permute(0, 2, 3, 1).contiguous().flatten(1)),)


class QuickAttn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192).half()

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 32).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return (out.transpose(1, 2).reshape(b, s, 64).transpose(1, 2).contiguous(),)


class Bottleneck(nn.Module):
    """torchvision's Bottleneck (v1.5), as a user writes it, at any width."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, 4 * width, 1, bias=False)
        self.bn3, self.relu = nn.BatchNorm2d(4 * width), nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != 4 * width:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, 4 * width, 1, stride, bias=False), nn.BatchNorm2d(4 * width)
            )

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        skip = x if self.downsample is None else self.downsample(x)
        return self.relu(out + skip)


class UserResNet(nn.Module):
    """torchvision's ResNet forward, as a user writes it, at any width (ResNet-50's structure
    at width 4 computes next to nothing on a CPU: its time is the host's)."""

    def __init__(self, blocks: list[int], width: int, classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1, self.relu = nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        self.maxpool, cin = nn.MaxPool2d(3, 2, 1), width
        for stage, count in enumerate(blocks, start=1):
            w = width * 2 ** (stage - 1)
            layers = []
            for b in range(count):
                layers.append(Bottleneck(cin, w, 2 if b == 0 and stage > 1 else 1))
                cin = 4 * w
            setattr(self, f"layer{stage}", nn.Sequential(*layers))
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return (self.fc(torch.flatten(self.avgpool(x), 1)),)


def narrow_resnet50():
    """ResNet-50's 175 layers at width 4, 32x32, batch 1 (suites/networks.py's builder)."""
    spec = importlib.util.spec_from_file_location("networks", ROOT / "suites" / "networks.py")
    n = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(n)
    text = n.model_text("resnet50", {"batch": 1, "input": [3, 32, 32]},
                        n.resnet50(width=4, image=32, classes=10))  # fmt: skip
    defaults = {"dtype": "float32"}
    return load_suite_text(n.suite_text("", "host", "host", defaults, [text]), "host.yaml")


USER = {"mlp": QuickMLP, "cnn": QuickCNN, "attn": QuickAttn}


def user_module(model, data):
    """The hand-written module with the suite's weights, float32 CPU."""
    if model.base_name == "resnet50":
        width = model.layers[0].params["out_channels"]
        classes = model.layers[-1].params["out_features"]
        module = UserResNet(resnet_blocks(model), width, classes)
        return load_suite_weights(module, model, data, resnet_names(model))
    module = USER[model.base_name]()
    names = {layer.name: layer.name for layer in model.layers if hasattr(module, layer.name)}
    return load_suite_weights(module, model, data, names)


def forwards(suite, model, device: str) -> dict:
    """name -> a zero-argument call on `device`, their outputs checked equal."""
    data = ModelData(suite, model, device)
    torch_backend = get_backend("torch")
    built = {(i,): torch_backend.build([layer], [data.weights(i)], device)
             for i, layer in enumerate(model.layers)}  # fmt: skip
    steps = eager_forward(model, built, data).call
    module = module_forward(model, data, device).call
    x = data.model_inputs()["input"]
    user = user_module(model, data).to(device)
    if model.base_name == "resnet50":
        user = user.to(x.dtype)  # the quickstart modules carry their layers' own dtypes
    tolerance = 1e-4 if device == "cpu" else 2e-2  # TF32 and fp16 kernels differ on a GPU
    with torch.no_grad():
        torch.testing.assert_close(user(x)[-1], module()[-1], rtol=tolerance, atol=tolerance)

    def user_call():
        with torch.no_grad():
            return user(x)

    return {"suite steps": steps, "suite module": module, "user module": user_call}


def host_us(calls: dict, per_round: int, rounds: int, device: str) -> dict[str, float]:
    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()  # outside the timed loop: the issue alone is timed

    for call in calls.values():
        for _ in range(5):
            call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            sync()
            start = time.thread_time()
            for _ in range(per_round):
                call()
            samples[name].append((time.thread_time() - start) / per_round * 1e6)
    return {name: statistics.median(s) for name, s in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--device", default="cpu", help="cuda: also ResNet-50 b1 fp16 itself")
    parser.add_argument("--tiny", action="store_true", help="CPU check: the mlp, a few calls")
    args = parser.parse_args(argv)
    if args.tiny:
        args.rounds, args.calls, args.device = 2, 2, "cpu"
    torch.set_num_threads(1)  # host cost is one thread's; no OpenMP spinning on a loaded machine
    quick = load_suite(ROOT / "suites/quickstart.yaml")
    cases = [(quick, m) for m in quick.models]
    if args.tiny:
        cases = cases[:1]
    else:
        narrow = narrow_resnet50()
        cases += [(narrow, m) for m in narrow.models]
    if args.device.startswith("cuda"):
        cnn = load_suite(ROOT / "suites/cnn.yaml")
        cases.append((cnn, cnn.model("resnet50[batch=1]")))
    print("| model | suite steps µs | suite module µs | user module µs | module / user |")
    print("|---|---|---|---|---|")
    for suite, model in cases:
        us = host_us(forwards(suite, model, args.device), args.calls, args.rounds, args.device)
        ratio = us["suite module"] / us["user module"]
        print(f"| {model.name} | {us['suite steps']:.1f} | {us['suite module']:.1f} | "
              f"{us['user module']:.1f} | {ratio:.2f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
