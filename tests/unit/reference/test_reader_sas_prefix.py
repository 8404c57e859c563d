"""The `sas-prefix` reader: cumulative times of truncated models -> per-layer differences."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from opbench.errors import InputError
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.model import RefStatus, TimeKind
from opbench.reference.sas_prefix import READER

DATA = Path(__file__).parents[2] / "data" / "reference"


def read(path: Path, **options: object):
    return READER.read(path, ReaderOptions(**options))  # type: ignore[arg-type]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prefix.csv"
    path.write_text(text)
    return path


def test_differences_noise_and_flags_with_a_spread_column():
    profile = read(DATA / "sas_prefix_spread.csv")
    assert profile.format == "sas-prefix"
    layers = {layer.name: layer for layer in profile.layers}
    assert list(layers) == ["data", "conv1", "bn1", "pool1", "fc1", "outputlayer"]
    assert all(layer.time_kind == TimeKind.DERIVED for layer in profile.layers)
    assert layers["data"].status == RefStatus.INPUT
    assert layers["data"].time_ms == pytest.approx(0.010)
    conv = layers["conv1"]
    assert conv.time_ms == pytest.approx(0.075)
    assert conv.noise_ms == pytest.approx(math.hypot(0.004, 0.002))
    assert conv.flags == () and conv.members == ("conv", "relu")
    assert layers["bn1"].time_ms == pytest.approx(0.019)
    pool = layers["pool1"]  # the prefix got faster by adding pool1
    assert pool.time_ms == pytest.approx(-0.001)
    assert Flag.NEGATIVE in pool.flags and Flag.BELOW_NOISE in pool.flags
    output = layers["outputlayer"]  # 0.008 ms, below sqrt(0.006² + 0.007²) = 0.0092 ms
    assert output.time_ms == pytest.approx(0.008)
    assert output.noise_ms == pytest.approx(math.hypot(0.006, 0.007))
    assert output.flags == (Flag.BELOW_NOISE,)
    assert layers["fc1"].flags == ()
    assert profile.total_ms == pytest.approx(0.270)
    assert any("2 layer(s) flagged" in note for note in profile.notes)


def test_without_spread_two_percent_rule():
    layers = {layer.name: layer for layer in read(DATA / "sas_prefix_no_spread.csv").layers}
    assert [round(layer.time_ms, 6) for layer in layers.values()] == [1.0, 0.5, 0.01, 0.99]
    assert layers["relu2"].flags == (Flag.BELOW_NOISE,)  # 0.01 < 2% of 1.51
    assert layers["conv2"].flags == ()
    assert all(layer.noise_ms is None for layer in layers.values())


def _round_se(samples: list[float]) -> float:
    """The standard error of the median of n rounds, widened by Student's t (n - 1 df)."""
    import statistics

    t = {2: 4.303, 8: 2.306}[len(samples) - 1]
    sd = statistics.stdev(samples)
    return math.sqrt(math.pi / 2) * sd / math.sqrt(len(samples)) * t / 1.96


def test_prefix_samples_in_runs_give_the_standard_error_of_the_median(tmp_path):
    rows = ["layer,run,prefix_ms"]
    for run, (a, b) in enumerate([(9.0, 15.0), (1.0, 2.0), (1.2, 2.1), (1.1, 2.3)]):
        rows += [f"conv,{run},{a}", f"fc,{run},{b}"]
    profile = read(write(tmp_path, "\n".join(rows) + "\n"))  # run 0 is warm-up
    conv, fc = profile.layers
    assert conv.count == 3 and conv.time_ms == pytest.approx(1.1)
    assert fc.time_ms == pytest.approx(2.1 - 1.1)
    # Each run times the prefix afresh: the noise of its median over 3 runs is the standard
    # error, √(π/2)·s/√3, widened by t(2 df) / 1.96 because s comes from 3 values only
    # (0.159 ms here, above the per-run spread s = 0.1 ms itself).
    assert conv.noise_ms == pytest.approx(_round_se([1.0, 1.2, 1.1]))
    assert conv.noise_ms > 0.1
    assert fc.noise_ms == pytest.approx(math.hypot(conv.noise_ms, _round_se([2.0, 2.1, 2.3])))


def test_more_rounds_give_a_smaller_noise(tmp_path):
    """The same spread between rounds from 9 rounds instead of 3: the noise of the median
    shrinks (what repeating the SAS script is for)."""
    few = ["layer,run,prefix_ms"] + [f"conv,{r},{v}" for r, v in enumerate([5, 1.0, 1.2, 1.1])]
    values = [9.0] + [1.0, 1.2, 1.1] * 3
    many = ["layer,run,prefix_ms"] + [f"conv,{r},{v}" for r, v in enumerate(values)]
    (three,) = read(write(tmp_path, "\n".join(few) + "\n")).layers
    (nine,) = read(write(tmp_path, "\n".join(many) + "\n")).layers
    assert nine.noise_ms == pytest.approx(_round_se(values[1:]))
    assert nine.noise_ms < three.noise_ms / 2


def test_mean_column_gives_mean_differences(tmp_path):
    path = write(tmp_path, "layer,prefix mean (us),prefix std (us)\nconv,100,5\nfc,180,6\n")
    conv, fc = read(path).layers
    assert fc.mean_ms == pytest.approx(0.08) and fc.median_ms is None
    assert fc.noise_ms == pytest.approx(math.hypot(0.005, 0.006))


def test_per_layer_time_column_is_refused_with_a_hint(tmp_path):
    path = write(tmp_path, "layer,Time (ms)\nconv,1\n")
    with pytest.raises(InputError, match="looks like a per-layer time: use --format sas"):
        read(path)


def test_time_column_option_names_the_cumulative_column(tmp_path):
    path = write(tmp_path, "layer,t_model (ms)\nconv,1\nfc,3\n")
    conv, fc = read(path, time_column="t_model (ms)").layers
    assert fc.time_ms == pytest.approx(2.0)


def test_sniff():
    assert READER.sniff((DATA / "sas_prefix_spread.csv").read_text()) == pytest.approx(0.85)
    assert READER.sniff("layer,time_ms\nconv,1\n") == 0.0
