"""The YAML boundary: pydantic models of a suite file as written (before resolution).

Only the loader uses these; everything after it works with opbench.spec.model.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NAME_PATTERN = r"^[A-Za-z0-9_-]+$"
Dtype = Literal["float32", "float16", "bfloat16"]


# strict=True: a quoted number, `true` for an integer or `1` for a boolean is a mistake in a
# suite, not something to coerce silently (ints are still accepted where a float is expected).


class TimingModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    warmup_ms: float | None = Field(default=None, ge=0)
    rep_ms: float | None = Field(default=None, gt=0)
    rounds: int | None = Field(default=None, ge=1, le=1000)
    flush_l2: bool | None = None
    cuda_graph: bool | None = None
    target_ci: float | None = Field(default=None, gt=0, lt=1)
    min_ms: float | None = Field(default=None, ge=0)
    max_ms: float | None = Field(default=None, gt=0)


class CommonSettings(BaseModel):
    """Settings that defaults, models and layers may each set; the nearest wins."""

    dtype: Dtype | None = None
    backends: list[str] | None = Field(default=None, min_length=1)
    target_speedup: float | None = Field(default=None, gt=0)
    tolerance: float | None = Field(default=None, gt=0)
    timing: TimingModel | None = None
    regression_threshold: float | None = Field(default=None, gt=0)


class DefaultsModel(CommonSettings):
    model_config = ConfigDict(extra="forbid", strict=True)


class LayerModel(CommonSettings):
    """A layer: common settings, name, op, and the op's own parameters as extra keys."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: str = Field(pattern=r"^[^\s/]+$")
    op: str
    reference_name: str | None = None
    # Fresh data of this shape (without the batch): the layer starts a piece of its own.
    input: list[int] | None = Field(default=None, min_length=1)
    # The values the layer reads: earlier layers' names or model inputs' (default: the layer
    # before it; the first layer reads the model input).
    inputs: list[str] | None = Field(default=None, min_length=1)
    # Per layer only: a tolerance above spec.model.LOOSE_TOLERANCE_LIMIT needs it.
    allow_loose_tolerance: bool = False

    @field_validator("input")
    @classmethod
    def _positive_dims(cls, dims: list[int] | None) -> list[int] | None:
        if dims is not None and any(d < 1 for d in dims):
            raise ValueError("every dimension must be at least 1")
        return dims

    def op_params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class InputModel(BaseModel):
    """A model input written as a mapping: its shape and how its data is drawn. Float data
    (the default) is random normal in the reading layer's dtype; `dtype: int64` draws integer
    ids uniformly in [0, high) (high defaults to what the reading op takes: an embedding's
    num_embeddings), or, with `padding_mask: true`, a padding mask: 1 on a prefix of each
    row (its length drawn in [1, the row's length]) and 0 after."""

    model_config = ConfigDict(extra="forbid", strict=True)

    shape: list[int] = Field(min_length=1)
    dtype: Literal["int64"] | None = None
    high: int | None = Field(default=None, ge=1)
    padding_mask: bool = False


class ModelModel(CommonSettings):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=NAME_PATTERN)
    batch: int | list[int] = 1
    # One model input, named `input` ...
    input: list[int] | None = Field(default=None, min_length=1)
    # ... or several, by name (exactly one of the two; resolve.py says so when both or none).
    # A value is the shape, or an InputModel ({shape, dtype: int64, high, padding_mask}).
    inputs: dict[str, list[int] | InputModel] | None = Field(default=None, min_length=1)
    fuse: bool = False
    layers: list[LayerModel] = Field(min_length=1)

    @field_validator("batch")
    @classmethod
    def _positive_batch(cls, batch: int | list[int]) -> int | list[int]:
        values = batch if isinstance(batch, list) else [batch]
        if not values:
            raise ValueError("a batch sweep needs at least one value")
        if any(b < 1 for b in values):
            raise ValueError("batch must be at least 1")
        if len(set(values)) != len(values):
            raise ValueError("batch sweep values must be distinct")
        return batch

    @field_validator("input")
    @classmethod
    def _positive_dims(cls, dims: list[int] | None) -> list[int] | None:
        if dims is not None and any(d < 1 for d in dims):
            raise ValueError("every dimension must be at least 1")
        return dims

    @field_validator("inputs")
    @classmethod
    def _named_inputs(cls, inputs: dict[str, Any] | None) -> dict[str, Any] | None:
        for name, value in (inputs or {}).items():
            dims = value.shape if isinstance(value, InputModel) else value
            if isinstance(value, InputModel) and (value.high or value.padding_mask):
                if value.dtype != "int64":
                    raise ValueError(f"input {name!r}: high and padding_mask need dtype: int64")
            if not re.match(NAME_PATTERN, name):
                raise ValueError(
                    f"input name {name!r}: use letters, digits, '_' or '-' (a name layers can read)"
                )
            if not dims:
                raise ValueError(f"input {name!r} needs at least one dimension")
            if any(d < 1 for d in dims):
                raise ValueError(f"input {name!r}: every dimension must be at least 1")
        return inputs


class SuiteModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    # Plugin files or modules to load before the suite's ops and backends are resolved.
    plugins: list[str] | None = None
    defaults: DefaultsModel | None = None
    models: list[ModelModel] = Field(min_length=1)
