"""Which live CUDA allocations a planned whole-model Triton forward holds, grouped by the
opbench frames that allocated them (a CUDA memory snapshot with Python stacks).

    PYTHONPATH=. python3 bench/memory_snapshot_gpu.py suites/cnn.yaml 'resnet50[batch=32]'

Written for issue 26's memory target: on an H100 the planned ResNet-50 b32 forward measured
306.6 MiB where its arena, scratch and inputs are 153 MiB, and the same forward on the CPU
(launches skipped) holds only those. Not yet run on a GPU (no device time was left)."""

import collections
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

from opbench.backends.registry import all_backends
from opbench.pipeline.data import ModelData
from opbench.pipeline.forward import eager_forward
from opbench.pipeline.options import prepare_device
from opbench.spec.load import load_suite

t0 = time.time()
prepare_device("cuda")
suite = load_suite(sys.argv[1])
model = suite.model(sys.argv[2])
data = ModelData(suite, model, "cuda")
backend = all_backends()["triton"]
built = {}
for group in backend.plan(model):
    built[tuple(group)] = backend.build(
        [model.layers[i] for i in group], [data.weights(i) for i in group], "cuda"
    )
torch.cuda.synchronize()
print(f"built {len(built)} groups in {time.time() - t0:.1f} s", flush=True)
torch.cuda.memory._record_memory_history(max_entries=200000)
before = torch.cuda.memory_allocated()
fwd = eager_forward(model, built, data)
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
fwd.call()
torch.cuda.synchronize()
peak = torch.cuda.max_memory_allocated() - before
now = torch.cuda.memory_allocated() - before
print(
    f"forward set up in {time.time() - t0:.1f} s; peak over one call {peak / 2**20:.1f} MiB, held {now / 2**20:.1f} MiB",
    flush=True,
)
m = fwd.memory
print(
    "arena MiB",
    None if m.arena is None else m.arena.numel() / 2**20,
    "scratch MiB",
    m.scratch.nbytes / 2**20,
    flush=True,
)
snap = torch.cuda.memory._snapshot()


def where(frames) -> str:
    ours = [
        f
        for f in frames or []
        if "opbench" in f["filename"] and "site-packages" not in f["filename"]
    ]
    return (
        " < ".join(f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in ours[:3])
        or "?"
    )


def table(title: str, blocks) -> None:
    by = collections.Counter()
    count = collections.Counter()
    for size, frames in blocks:
        by[where(frames)] += size
        count[where(frames)] += 1
    print(
        f"-- {title}: {sum(by.values()) / 2**20:.1f} MiB in {sum(count.values())} blocks",
        flush=True,
    )
    for key, size in by.most_common(25):
        print(f"{size / 2**20:9.2f} MiB  x{count[key]:3d}  {key}", flush=True)


table(
    "live after the call",
    [
        (b["size"], b.get("frames"))
        for seg in snap["segments"]
        for b in seg["blocks"]
        if b["state"] == "active_allocated"
    ],
)
# The trace replayed: which blocks were live when the most memory was (the peak the run reports
# may be made of blocks freed before the snapshot).
live: dict[int, tuple[int, list]] = {}
total = best = 0
at_best: list = []
for trace in snap.get("device_traces", []):
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], event.get("frames"))
            total += event["size"]
            if total > best:
                best, at_best = total, list(live.values())
        elif event["action"] == "free_completed" and event["addr"] in live:
            total -= live.pop(event["addr"])[0]
table("at the traced peak (blocks allocated since recording began)", at_best)
