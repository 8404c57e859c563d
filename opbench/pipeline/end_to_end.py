"""A whole model's forward, timed on one backend, from the layers that backend built."""

from __future__ import annotations

import os

from opbench.backends.base import Built, torch_dtype
from opbench.measure.timer import time_callable
from opbench.pipeline.data import ModelData
from opbench.pipeline.measure import error_message, recover, timing_for
from opbench.pipeline.options import RunOptions
from opbench.results.model import EndToEnd, Status
from opbench.spec.model import ModelSpec


def time_end_to_end(
    model: ModelSpec,
    backend: str,
    built: dict[tuple[int, ...], Built],
    data: ModelData,
    options: RunOptions,
) -> EndToEnd:
    """The whole forward, layer to layer. Layers that start a new chain take their own input."""
    interpreted = backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1"
    groups = sorted(built)
    covered = [i for g in groups for i in g]
    if covered != list(range(len(model.layers))):
        return EndToEnd(
            model.name,
            backend,
            Status.UNSUPPORTED,
            message="not every layer was built on this backend",
        )
    try:
        chain_inputs = {g: data.input(g[0]) for g in groups if model.layers[g[0]].starts_chain}

        dtypes = {g: torch_dtype(model.layers[g[0]].dtype) for g in groups}

        def forward():
            x = None
            for g in groups:
                if g in chain_inputs:
                    x = chain_inputs[g]
                    if built[g].prepare_input is not None:
                        x = built[g].prepare_input(x)
                elif x.dtype != dtypes[g]:
                    # The suite changes dtype here; a real model would cast at this point too.
                    x = x.to(dtypes[g])
                x = built[g].fn(x)
            return x

        timing = timing_for(model.layers[0], options, interpreted)
        with options.timing_guard():
            measurement = time_callable(forward, timing, options.device, hold=False)
    except Exception as exc:
        recover(options.device)
        return EndToEnd(
            model.name, backend, Status.ERROR, message=error_message(exc), interpreted=interpreted
        )
    return EndToEnd(
        model.name, backend, Status.OK, measurement.rounds, measurement.timer, interpreted
    )
