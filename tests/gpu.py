"""The one definition of "on a GPU" and "on Hopper" for the tests that need real hardware.

A test that runs compiled kernels on a GPU carries `@pytest.mark.gpu` (any CUDA GPU of compute
capability 8.0+, or `@pytest.mark.gpu(capability=(8, 9))` for a newer floor) or
`@pytest.mark.hopper` (an sm_90 GPU: the Gluon warp-specialised kernels). tests/conftest.py
skips them here, where Triton's interpreter is on, and selects them on the GPU machine with
`TRITON_INTERPRET=0 python3 -m pytest -m gpu tests/` (a Hopper test is a GPU test too).
"""

from __future__ import annotations

from opbench.kernels.host import INTERPRET  # tests/conftest.py sets it unless it is given

# The floor of `@pytest.mark.gpu`: Ampere, the oldest card the Triton kernels are tuned for.
GPU_FLOOR = (8, 0)


def capability() -> tuple[int, int] | None:
    """The compute capability of the GPU the tests would run on; None where they cannot run
    compiled kernels (the interpreter is on, or no CUDA GPU is visible)."""
    if INTERPRET:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()


def on_gpu(floor: tuple[int, int] = GPU_FLOOR) -> bool:
    """Whether compiled kernels run here on a GPU of compute capability `floor` or newer."""
    found = capability()
    return found is not None and found >= floor


def on_hopper() -> bool:
    """Whether compiled kernels run here on an sm_90 GPU (H100, H200)."""
    found = capability()
    return found is not None and found[0] == 9


def why_not(floor: tuple[int, int] | None) -> str | None:
    """Why a GPU test (floor) or a Hopper test (None) is skipped here; None when it runs."""
    if INTERPRET:
        return "a GPU test: Triton's interpreter is on (run it with TRITON_INTERPRET=0 -m gpu)"
    found = capability()
    if found is None:
        return "a GPU test: no CUDA GPU is visible"
    if floor is None and found[0] != 9:
        return f"a Hopper test: this GPU is sm_{found[0]}{found[1]}, not sm_90"
    if floor is not None and found < floor:
        return f"a GPU test for sm_{floor[0]}{floor[1]}+: this GPU is sm_{found[0]}{found[1]}"
    return None
