"""poisoned_allocations: every tensor a checked call takes uninitialised holds the poison, on
any allocator, the moment it is handed out; nothing outside the block is touched."""

from __future__ import annotations

import pytest
import torch

from opbench.measure.poison import call_poisoned, poison_, poisoned_allocations, unwritten

SHAPE = (3, 37, 41)


def fresh_tensors() -> dict[str, torch.Tensor]:
    x = torch.randn(SHAPE).half()
    return {
        "empty": torch.empty(SHAPE, dtype=torch.float16),
        "empty_like": torch.empty_like(x),
        "empty_strided": torch.empty_strided((37, 41), (1, 37), dtype=torch.float16),
        "new_empty": x.new_empty(SHAPE),
        "new_empty_strided": x.new_empty_strided((37, 41), (41, 1)),
        "legacy new": x.new(*SHAPE),
        "channels_last": torch.empty((2, 3, 5, 7), memory_format=torch.channels_last),
    }


def test_every_uninitialised_allocation_holds_the_poison() -> None:
    with poisoned_allocations():
        made = fresh_tensors()
    for how, t in made.items():
        assert unwritten(t) == t.numel(), how


def test_memory_that_held_the_answer_is_poisoned_when_handed_back() -> None:
    """The false pass: freed memory holding the answer, handed back by malloc as the output."""
    x = torch.randn(SHAPE).half()
    answer = torch.relu(x)
    where = answer.data_ptr()
    del answer
    with poisoned_allocations():
        out = torch.empty_like(x)
    # Whether malloc handed the same chunk back or not, nothing of the answer is left.
    assert unwritten(out) == out.numel(), f"reused the answer's memory: {out.data_ptr() == where}"


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int8, torch.bool, torch.complex64]
)
def test_every_dtype_gets_its_own_poison(dtype: torch.dtype) -> None:
    with poisoned_allocations():
        t = torch.empty(17, dtype=dtype)
    assert unwritten(t) == 17


def test_inference_tensors_and_grad_mode_are_handled() -> None:
    with poisoned_allocations():
        with torch.inference_mode():
            a = torch.empty(9)
        b = torch.empty(9, requires_grad=True)
    assert unwritten(a) == 9 and a.is_inference()
    assert unwritten(b) == 9 and b.requires_grad and b.grad_fn is None


def test_resize_poisons_only_what_it_adds() -> None:
    with poisoned_allocations():
        t = torch.arange(6, dtype=torch.float32)
        t.resize_(20)
        u = torch.empty(0, dtype=torch.int64)
        u.resize_(4, 5)
    assert torch.equal(t[:6], torch.arange(6, dtype=torch.float32)), "kept data stays"
    assert unwritten(t) == 14
    assert unwritten(u) == 20


def test_written_outputs_and_work_outside_the_block_are_untouched() -> None:
    x = torch.randn(SHAPE)
    with poisoned_allocations():
        y = torch.relu(x)  # allocated and written by the op itself
        z = torch.zeros(5)
    assert torch.equal(y, torch.relu(x)) and unwritten(y) == 0
    assert torch.equal(z, torch.zeros(5))
    outside = torch.empty(1000)
    assert unwritten(outside) < outside.numel(), "outside the block nothing is poisoned"


def test_compiled_code_runs_compiled_inside_the_block() -> None:
    """A dispatch mode Dynamo does not ignore makes it run the function eagerly: the check would
    then run other code than is timed."""
    ran: list[str] = []

    def backend(gm, example_inputs):
        def compiled(*args):
            ran.append("compiled")
            return gm.forward(*args)

        return compiled

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2

    fn = torch.compile(f, backend=backend, dynamic=False)
    x = torch.randn(7, 5)
    expected = fn(x)
    ran.clear()
    with poisoned_allocations():
        got = fn(x)
    assert ran == ["compiled"]
    assert torch.equal(got, expected)


def test_overlapping_strides_and_out_overloads() -> None:
    keep = torch.arange(10, dtype=torch.float32)
    with poisoned_allocations():
        overlapping = torch.empty_strided((3, 4), (0, 1))  # every row is the same memory
        grown = torch.empty(0)
        torch.empty((2, 6), out=grown)
        torch.empty((4,), out=keep[:4])  # resizes nothing: another tensor's data, left alone
    assert unwritten(overlapping) == 12
    assert unwritten(grown) == 12
    assert torch.equal(keep, torch.arange(10, dtype=torch.float32))


def test_an_inference_tensor_allocated_outside_inference_mode_code() -> None:
    with torch.inference_mode(), poisoned_allocations():
        t = torch.empty_strided((5, 3), (1, 5), dtype=torch.float16)
    assert t.is_inference() and unwritten(t) == 15


def test_higher_order_ops_run_as_they_are() -> None:
    x = torch.randn(4, 3)
    with poisoned_allocations():
        got = torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))
    assert torch.equal(got, x.sin() if x.sum() > 0 else x.cos())


def test_a_call_torch_refuses_under_the_mode_runs_again_without_it() -> None:
    """torch cannot build a Tensor subclass (CausalBias) over a tensor a dispatch mode has seen:
    the call runs again without the mode, after what it wrote is poisoned again."""
    from torch.nn.attention.bias import causal_lower_right

    buffer = torch.zeros(6)
    prepared: list[int] = []

    def prepare() -> None:
        prepared.append(1)
        poison_(buffer)

    def call() -> torch.Tensor:
        if len(prepared) == 1:
            buffer.fill_(1.0)  # written before the refusal: must not pass for the retry's
        mask = causal_lower_right(4, 6)
        return mask._materialize()

    out = call_poisoned(call, prepare)
    assert len(prepared) == 2 and out.shape == (4, 6)
    assert unwritten(buffer) == 6, "the retry wrote nothing"


def test_any_other_error_of_the_call_is_its_own() -> None:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise RuntimeError("a kernel's own failure")

    with pytest.raises(RuntimeError, match="own failure"):
        call_poisoned(call, lambda: None)
    assert calls == [1]
