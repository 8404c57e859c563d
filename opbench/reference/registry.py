"""Every reference format, by name; format detection; the one entry point to read a file.

    profile = read_reference(Path("ort_profile.json"))            # --format auto
    profile = read_reference(path, "sas", ReaderOptions(unit="ms"))

Detection (`--format auto`): each reader scores the first 64 KiB of the file's text
(after gzip and BOM handling) with `sniff`, from 0 (not mine) to 1 (certainly mine); the
highest score wins if it reaches MIN_CONFIDENCE, ties going to the earlier entry in READERS.
The chosen name is stored in `ReferenceProfile.format`.

To add a format: write one reader module with a `READER` instance and add it to READERS.
"""

from __future__ import annotations

from pathlib import Path

from opbench.errors import InputError, Location
from opbench.reference import onnxruntime, openvino, sas, sas_prefix, tensorrt, torch_profiler
from opbench.reference.interface import Reader, ReaderOptions
from opbench.reference.model import ReferenceProfile
from opbench.reference.textio import check_file, fail, read_head

READERS: tuple[Reader, ...] = (
    sas_prefix.READER,
    sas.READER,
    onnxruntime.READER,
    tensorrt.READER,
    openvino.READER,
    torch_profiler.READER,
)
FORMATS: dict[str, Reader] = {reader.name: reader for reader in READERS}
ALIASES: dict[str, str] = {
    "dlpy": "sas",
    "csv": "sas",
    "prefix": "sas-prefix",
    "ort": "onnxruntime",
    "trt": "tensorrt",
    "trtexec": "tensorrt",
    "ov": "openvino",
    "kineto": "torch-profiler",
    "pytorch": "torch-profiler",
}
AUTO = "auto"
MIN_CONFIDENCE = 0.25


def format_names() -> list[str]:
    """Names accepted by --format, 'auto' first."""
    return [AUTO, *FORMATS]


def resolve_format(name: str) -> str:
    """A format name or alias (any case) -> its canonical name; InputError if unknown."""
    key = name.strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    if key != AUTO and key not in FORMATS:
        raise InputError(
            f"unknown format {name!r}; known: {', '.join(format_names())}",
            Location(field="--format"),
        )
    return key


def sniff_scores(head: str) -> list[tuple[str, float]]:
    """Every reader's confidence for this head, best first (stable for ties)."""
    scores = [(reader.name, float(reader.sniff(head))) for reader in READERS]
    return sorted(scores, key=lambda item: -item[1])


def detect(path: Path) -> str:
    """The format name of the file at `path`; InputError when no reader recognises it."""
    check_file(path)
    head = read_head(path)
    if not head.strip():
        raise fail(path, "the file holds only whitespace")
    best, score = sniff_scores(head)[0]
    if score < MIN_CONFIDENCE and '"Layers"' in head and '"Bindings"' in head:
        raise fail(
            path,
            "this is a TensorRT layer-information file (--exportLayerInfo), which holds no times; "
            "pass the --exportProfile file (its types and shapes are used when it lies beside it "
            "as X.graph.json)",
            1,
        )
    if score < MIN_CONFIDENCE:
        first = next((line.strip() for line in head.splitlines() if line.strip()), "")[:80]
        raise fail(
            path,
            f"cannot tell the format (first line: {first!r}); pass --format with one of "
            f"{', '.join(FORMATS)} (reference_timings/README.md describes each)",
            1,
        )
    return best


def read_reference(
    path: Path | str, format: str = AUTO, options: ReaderOptions | None = None
) -> ReferenceProfile:
    """Read one reference timing file into a ReferenceProfile (format detected when 'auto')."""
    path = Path(path)
    options = options or ReaderOptions()
    name = resolve_format(format)
    check_file(path)
    if name == AUTO:
        name = detect(path)
    return FORMATS[name].read(path, options)
