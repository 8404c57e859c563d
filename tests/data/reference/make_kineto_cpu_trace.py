"""Regenerate pytorch_kineto_cpu_record_function.trace.json (needs torch).

A small CNN run 3 times under torch.profiler on the CPU, each layer inside its own
record_function range, exported as a Chrome trace. Run from this folder.
"""

import torch
from torch.profiler import ProfilerActivity, profile, record_function

torch.manual_seed(0)
conv = torch.nn.Conv2d(3, 8, 3, padding=1)
fc = torch.nn.Linear(8 * 8 * 8, 10)
x = torch.randn(2, 3, 16, 16)


def step() -> torch.Tensor:
    with record_function("conv1"):
        y = conv(x)
    with record_function("relu1"):
        y = torch.relu(y)
    with record_function("pool1"):
        y = torch.nn.functional.max_pool2d(y, 2)
    with record_function("flatten"):
        y = y.flatten(1)
    with record_function("fc"):
        y = fc(y)
    with record_function("softmax"):
        return torch.softmax(y, -1)


if __name__ == "__main__":
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
            prof.step()
    prof.export_chrome_trace("pytorch_kineto_cpu_record_function.trace.json")
