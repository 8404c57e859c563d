"""Matching reference rows to suite layers: each source, each normalisation, model selection."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from opbench.errors import InputError
from opbench.match.links import MatchSource, match_model
from opbench.match.namemap import check_name_map, read_name_map
from opbench.match.names import members_of, path_of
from opbench.match.select import closest_pairs, match_reference
from opbench.match.suite_layers import SuiteLayer, SuiteModel, suite_models
from opbench.reference.model import ReferenceTiming, RefStatus
from opbench.results.model import LayerResult


def row(
    name: str,
    index: int = 0,
    *,
    raw_type: str | None = None,
    status: str = RefStatus.TIMED,
    members: tuple[str, ...] = (),
    shape: tuple[int, ...] | None = None,
    ms: float = 1.0,
) -> ReferenceTiming:
    return ReferenceTiming(
        engine="test",
        source="ref.json",
        index=index,
        name=name,
        raw_type=raw_type,
        members=members,
        status=status,
        median_ms=ms,
        output_shape=shape,
    )


def model(name: str, *layers: tuple, base: str | None = None) -> SuiteModel:
    """layers: (name, op, output_shape[, reference_name])."""
    return SuiteModel(
        name=name,
        base_name=base or name.split("[")[0],
        layers=tuple(
            SuiteLayer(
                name=spec[0],
                index=i,
                op=spec[1],
                output_shape=spec[2],
                reference_name=spec[3] if len(spec) > 3 else None,
            )
            for i, spec in enumerate(layers)
        ),
    )


MLP = model(
    "mlp",
    ("ln", "layernorm", (4, 64, 256)),
    ("fc1", "linear", (4, 64, 1024)),
    ("act", "gelu", (4, 64, 1024)),
    ("fc2", "linear", (4, 64, 256)),
    ("sm", "softmax", (4, 64, 256)),
)


def links(match) -> set[tuple[int, str, str]]:
    return {(link.row, link.layer, link.source) for link in match.links}


def test_names_from_onnx_paths_and_fused_members():
    assert path_of("/fc1/MatMul/MatMulAddFusion_kernel_time") == (
        "fc1",
        "MatMul",
        "MatMulAddFusion",
    )
    assert members_of(row("Conv_0 + Relu_1")) == ("Conv_0", "Relu_1")
    assert members_of(row("a + b", members=("a", "b"))) == ("a", "b")
    assert members_of(row("PWN(a, b)", members=("a", "b"))) == ("a", "b")
    assert members_of(row("x", members=("Conv", "Relu"))) == ("x",)  # op kinds, not names


def test_onnxruntime_names_match_by_path_and_case():
    rows = [
        row("/LN/LayerNormalization", 0, raw_type="LayerNormalization"),
        row("gemm_input_reshape", 1, raw_type="Reshape", status=RefStatus.OVERHEAD),
        row("/fc1/MatMul/MatMulAddFusion", 2, raw_type="Gemm"),
        row("/act/Gelu", 3, raw_type="Gelu"),
        row("/FC2/MatMul", 4, raw_type="MatMul"),
        row("/FC2/Add", 5, raw_type="Add"),  # the same layer's bias, a second node
        row("/sm/Softmax", 6, raw_type="Softmax"),
    ]
    found = links(match_model(MLP, rows))
    assert found == {
        (0, "ln", MatchSource.NAME),
        (2, "fc1", MatchSource.NAME),
        (3, "act", MatchSource.NAME),
        (4, "fc2", MatchSource.NAME),
        (5, "fc2", MatchSource.NAME),
        (6, "sm", MatchSource.NAME),
    }


def test_a_name_that_fits_two_layers_covers_both_and_is_ambiguous():
    m = model("m", ("ffn_up", "linear", None), ("fc_1", "linear", None), ("fc1", "linear", None))
    rows = [row("FFN-Up", 0), row("FC-1", 1)]
    matched = match_model(m, rows)
    # ffn_up is the only layer that squashes to "ffnup"; "fc_1" and "fc1" both squash to "fc1":
    # the row is grouped with both (never one picked) and the cover is marked ambiguous
    assert links(matched) == {
        (0, "ffn_up", MatchSource.NAME),
        (1, "fc_1", MatchSource.NAME),
        (1, "fc1", MatchSource.NAME),
    }
    assert matched.ambiguities == ((1, "reference row 'FC-1' fits layers fc_1 and fc1"),)


def test_sas_lower_case_names():
    m = model("net", ("Conv1", "conv2d", None), ("Pool1", "maxpool2d", None))
    found = links(match_model(m, [row("conv1", 0), row("pool1", 1)]))
    assert found == {(0, "Conv1", MatchSource.NAME), (1, "Pool1", MatchSource.NAME)}


def test_tensorrt_fused_row_covers_several_layers():
    m = model(
        "cnn", ("conv1", "conv2d", None), ("relu1", "relu", None), ("pool1", "maxpool2d", None)
    )
    rows = [row("conv1 + relu1", 0), row("pool1", 1)]
    found = links(match_model(m, rows))
    assert found == {
        (0, "conv1", MatchSource.NAME),
        (0, "relu1", MatchSource.NAME),
        (1, "pool1", MatchSource.NAME),
    }


def test_reference_name_and_own_name_both_cover_the_row():
    m = model("m", ("up", "linear", None, "dense_7"), ("dense_7", "linear", None))
    rows = [row("/dense_7/MatMul", 0), row("/dense_7/Add", 1)]
    found = links(match_model(m, rows))
    # `up` says it is dense_7 in the engine, and a layer is named dense_7: the rows cover both
    # (groups, never picks); a layer that sets a reference_name is never matched by its own name
    assert found == {
        (0, "up", MatchSource.REFERENCE_NAME),
        (1, "up", MatchSource.REFERENCE_NAME),
        (0, "dense_7", MatchSource.NAME),
        (1, "dense_7", MatchSource.NAME),
    }


def test_a_layer_renamed_by_reference_name_is_not_matched_by_its_own_name():
    m = model("m", ("dense_7", "linear", None, "dense_8"), ("other", "linear", None))
    found = links(match_model(m, [row("dense_7", 0), row("dense_8", 1)]))
    assert found == {(1, "dense_7", MatchSource.REFERENCE_NAME)}


def test_map_file(tmp_path: Path):
    path = tmp_path / "map.yaml"
    path.write_text(
        "# engine name: suite layer\n"
        "dense_in: fc1\n"
        "block: [act, fc2]\n"
        "noise: null\n"
        "Other/Thing: mlp/sm\n"
    )
    name_map = read_name_map(path)
    check_name_map(name_map, [MLP])
    rows = [
        row("dense_in", 0),
        row("block", 1),
        row("noise", 2),
        row("Other/Thing", 3),
        row("ln", 4),
    ]
    mm = match_model(MLP, rows, name_map=name_map)
    assert links(mm) == {
        (0, "fc1", MatchSource.MAP),
        (1, "act", MatchSource.MAP),
        (1, "fc2", MatchSource.MAP),
        (3, "sm", MatchSource.MAP),
        (4, "ln", MatchSource.NAME),
    }
    assert mm.ignored == (2,)


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("a: fc1\na: fc2\n", "duplicate", 2),
        ("a: {x: 1}\n", "map to a suite layer", 1),
        ("- a\n", "is a mapping", 1),
        ("a: [fc1\n", "not closed before the file ends", 1),  # the [ at 1:4
        ("a: nope\n", "maps to layer 'nope'", 1),
        ("a: other/fc1\n", "model 'other'", 1),
    ],
)
def test_bad_map_files_name_the_line(tmp_path: Path, text: str, message: str, line: int):
    path = tmp_path / "map.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        check_name_map(read_name_map(path), [MLP])
    assert message in str(info.value)
    assert info.value.location.file == str(path)
    assert info.value.location.line == line


def test_missing_map_file(tmp_path: Path):
    with pytest.raises(InputError, match="no such map file"):
        read_name_map(tmp_path / "absent.yaml")


def test_order_and_signature_fallback():
    m = model(
        "cnn",
        ("c1", "conv2d", (2, 8, 16, 16)),
        ("p1", "maxpool2d", (2, 8, 8, 8)),
        ("c2", "conv2d", (2, 16, 8, 8)),
        ("sm", "softmax", (2, 10)),
    )
    rows = [
        row("node_17", 0, raw_type="Conv", shape=(2, 8, 16, 16)),
        row("node_18", 1, raw_type="MaxPool", shape=(2, 8, 8, 8)),
        row("node_19", 2, raw_type="Conv", shape=(2, 16, 8, 8)),
        row("node_20", 3, raw_type="Conv", shape=(2, 99)),  # no layer has this shape
        row("sm", 4, raw_type="Softmax"),
    ]
    found = links(match_model(m, rows))
    assert found == {
        (0, "c1", MatchSource.SIGNATURE),
        (1, "p1", MatchSource.SIGNATURE),
        (2, "c2", MatchSource.SIGNATURE),
        (4, "sm", MatchSource.NAME),
    }


def test_signature_allows_flattened_leading_dims_but_not_other_shapes():
    m = model("m", ("fc", "linear", (4, 64, 1024)))
    assert links(match_model(m, [row("n1", 0, raw_type="Gemm", shape=(256, 1024))])) == {
        (0, "fc", MatchSource.SIGNATURE)
    }
    assert not links(match_model(m, [row("n1", 0, raw_type="Gemm", shape=(1024, 256))]))


def test_overhead_and_not_run_rows_are_never_matched_by_signature():
    m = model("m", ("t", "transpose", (4, 8)))
    rows = [
        row("reformat", 0, raw_type="Transpose", status=RefStatus.OVERHEAD, shape=(4, 8)),
        row("gone", 1, raw_type="Transpose", status=RefStatus.NOT_RUN, shape=(4, 8)),
    ]
    assert not match_model(m, rows).links


def test_model_qualified_names_split_between_models():
    a = model("mlp[batch=8]", ("fc1", "linear", None), ("attn", "attention", None))
    b = model("attn", ("qkv", "linear", None), ("attn", "attention", None))
    rows = [
        row("/mlp[batch=8]/fc1/MatMul", 0),
        row("/mlp[batch=8]/attn/Attention", 1),
        row("/attn/qkv/MatMul", 2),
        row("/attn/attn/Attention", 3),
        row("gemm_input_reshape", 4, status=RefStatus.OVERHEAD),
    ]
    result = match_reference([a, b], rows)
    assert result.how == "qualified names"
    by_model = {mm.model: links(mm) for mm in result.matches}
    assert by_model["mlp[batch=8]"] == {(0, "fc1", MatchSource.NAME), (1, "attn", MatchSource.NAME)}
    assert by_model["attn"] == {(2, "qkv", MatchSource.NAME), (3, "attn", MatchSource.NAME)}


def test_a_layer_named_like_a_model_still_matches():
    # one-model reference "/attn/Attention" for model attn whose layer is also called attn
    m = model("attn", ("qkv", "linear", None), ("attn", "attention", None))
    result = match_reference([m], [row("/qkv/MatMul", 0), row("/attn/Attention", 1)])
    assert links(result.matches[0]) == {(0, "qkv", MatchSource.NAME), (1, "attn", MatchSource.NAME)}


def test_best_model_is_chosen_and_named():
    a = model("mlp", ("fc1", "linear", None), ("fc2", "linear", None))
    b = model("cnn", ("conv1", "conv2d", None), ("fc2", "linear", None))
    result = match_reference([a, b], [row("conv1", 0), row("fc2", 1)])
    assert result.how == "best match"
    assert [mm.model for mm in result.matches] == ["cnn"]
    assert "cnn" in result.notes[0]


def test_tied_models_need_model_option():
    a = model("mlp[batch=1]", ("fc1", "linear", None), base="mlp")
    b = model("mlp[batch=8]", ("fc1", "linear", None), base="mlp")
    with pytest.raises(InputError, match="equally well"):
        match_reference([a, b], [row("fc1", 0)])
    chosen = match_reference([a, b], [row("fc1", 0)], model="mlp[batch=8]")
    assert [mm.model for mm in chosen.matches] == ["mlp[batch=8]"]
    with pytest.raises(InputError, match="several instances"):
        match_reference([a, b], [row("fc1", 0)], model="mlp")
    with pytest.raises(InputError, match="not in the run"):
        match_reference([a, b], [row("fc1", 0)], model="vit")


def test_suite_models_from_spec_and_fused_results():
    spec = {
        "models": [
            {
                "name": "cnn",
                "base_name": "cnn",
                "layers": [
                    {
                        "name": "conv",
                        "op": "conv2d",
                        "output_shape": [2, 8, 4, 4],
                        "reference_name": None,
                    },
                    {"name": "bn", "op": "batchnorm2d", "output_shape": [2, 8, 4, 4]},
                    {
                        "name": "relu",
                        "op": "relu",
                        "output_shape": [2, 8, 4, 4],
                        "reference_name": "Relu_3",
                    },
                ],
            },
            {"name": "not_run", "layers": [{"name": "x", "op": "relu"}]},
        ]
    }
    fused = LayerResult(
        model="cnn",
        layer="conv",
        op="conv2d",
        backend="triton",
        status="ok",
        dtype="float16",
        input_shape=(2, 3, 4, 4),
        output_shape=(2, 8, 4, 4),
        covers=("conv", "bn", "relu"),
    )
    (cnn,) = suite_models(spec, [fused])
    assert [layer.name for layer in cnn.layers] == ["conv", "bn", "relu"]
    assert cnn.layers[1].op == "batchnorm2d"
    assert cnn.layers[2].reference_name == "Relu_3"
    # without a suite spec the fused result still names its members
    (alone,) = suite_models({}, [fused])
    assert [layer.name for layer in alone.layers] == ["conv", "bn", "relu"]
    assert alone.layers[1].op is None


def test_onnxruntime_op_kind_members_are_not_names():
    # the ORT reader lists op kinds as members; "Add" must not match a layer called "add"
    m = model("m", ("fc1", "linear", None), ("add", "relu", None))
    rows = [row("/fc1/MatMul/MatMulAddFusion", 0, raw_type="Gemm", members=("MatMul", "Add"))]
    assert links(match_model(m, rows)) == {(0, "fc1", MatchSource.NAME)}


def test_fused_kinds_take_the_following_layers():
    m = model(
        "cnn",
        ("conv1", "conv2d", None),
        ("relu1", "relu", None),
        ("pool1", "maxpool2d", None),
        ("fc", "linear", None),
        ("probs", "softmax", None),
    )
    rows = [
        row("/conv1/Conv", 0, raw_type="FusedConv", members=("Conv", "Relu")),
        row("/pool1/MaxPool", 1, raw_type="MaxPool"),
        row("fc", 2, raw_type="output", members=("fc", "softmax")),  # SAS output layer
    ]
    assert links(match_model(m, rows)) == {
        (0, "conv1", MatchSource.NAME),
        (0, "relu1", MatchSource.FUSION),
        (1, "pool1", MatchSource.NAME),
        (2, "fc", MatchSource.NAME),
        (2, "probs", MatchSource.FUSION),
    }


def test_a_sum_fused_conv_covers_the_add_and_the_activation_after_it():
    """ONNX Runtime's NCHWc conv adds a residual and applies the ReLU in one node (ResNet's
    conv3 + Add + Relu); its kind of activation is not in the profile. Layers of other branches
    in between (the downsample conv) are not on the fused path."""
    m = model(
        "rn",
        ("conv3", "conv2d", (1, 8, 4, 4)),
        ("down", "conv2d", (1, 8, 4, 4)),
        ("add", "add", (1, 8, 4, 4)),
        ("relu", "relu", (1, 8, 4, 4)),
        ("next", "conv2d", (1, 8, 4, 4)),
    )
    m = replace(
        m,
        layers=tuple(
            replace(layer, inputs=reads)
            for layer, reads in zip(
                m.layers, [("x",), ("x",), ("conv3", "down"), ("add",), ("relu",)], strict=True
            )
        ),
    )
    rows = [
        row("/rn/down/Conv_output_0_nchwc", 0, raw_type="Conv", shape=(1, 8, 4, 4)),
        row(
            "/rn/conv3/Conv_output_0_nchwc",
            1,
            raw_type="Conv",
            shape=(1, 8, 4, 4),
            members=("Conv", "Add", "Activation?"),  # as the reader writes an NCHWc Conv + Z
        ),  # fmt: skip
        row("/rn/next/Conv_output_0_nchwc", 2, raw_type="Conv", shape=(1, 8, 4, 4)),
    ]
    assert links(match_model(m, rows)) == {
        (0, "down", MatchSource.NAME),
        (1, "conv3", MatchSource.NAME),
        (1, "add", MatchSource.FUSION),
        (1, "relu", MatchSource.FUSION),
        (2, "next", MatchSource.NAME),
    }
    # no activation after the add (MobileNetV2's residuals): the add alone, and no doubt
    plain = replace(m, layers=m.layers[:3])
    result = match_model(plain, rows[:2])
    assert (1, "add", MatchSource.FUSION) in links(result) and not result.ambiguities


def test_rows_of_opbench_own_export_name_layers_that_have_a_reference_name():
    """An imported suite keeps the model file's node names as reference_name; the profile of
    the suite's own export (`opbench reference onnxruntime`) names nodes after the layers,
    qualified with the model's name: those rows find the layers by their own names."""
    m = model(
        "rn",
        ("layer1.0.conv1", "conv2d", (1, 8), "node_Conv_757"),
        ("fc", "linear", (1, 8), "node_Gemm_1"),
    )
    rows = [
        row("/rn/layer1.0.conv1/Conv", 0, raw_type="Conv"),
        row("node_Gemm_1", 1, raw_type="Gemm"),
    ]
    assert links(match_model(m, rows)) == {
        (0, "layer1.0.conv1", MatchSource.NAME),
        (1, "fc", MatchSource.REFERENCE_NAME),
    }


def test_a_file_that_uses_the_layers_own_names_matches_them():
    """The SAS script of an imported suite writes the layers' own names: when the file names
    more rows by the layers' own names than by their reference_names, own names are looked up
    (issue 39); while the reference_names are the file's names, they win."""
    m = model(
        "rn",
        ("layer1.0.conv1", "conv2d", (1, 8), "node_Conv_757"),
        ("layer1.0.conv2", "conv2d", (1, 8), "node_Conv_759"),
        ("fc", "linear", (1, 8), "node_Gemm_1"),
    )
    own = [row("layer1.0.conv1", 0), row("layer1.0.conv2", 1), row("fc", 2)]
    assert links(match_model(m, own)) == {
        (0, "layer1.0.conv1", MatchSource.NAME),
        (1, "layer1.0.conv2", MatchSource.NAME),
        (2, "fc", MatchSource.NAME),
    }
    # two rows by reference_name, one by an own name: the file uses the reference_names
    mixed = [row("node_Conv_757", 0), row("node_Conv_759", 1), row("fc", 2)]
    assert links(match_model(m, mixed)) == {
        (0, "layer1.0.conv1", MatchSource.REFERENCE_NAME),
        (1, "layer1.0.conv2", MatchSource.REFERENCE_NAME),
    }


def test_the_closest_pairs_hint_never_lists_equal_names():
    pairs = closest_pairs(["conv1", "conv2", "fc"], ["conv1", "Conv2", "conv_3"])
    assert pairs and all(a.casefold() != b.casefold() for a, b in pairs)


def test_tensorrt_pointwise_names():
    m = model("m", ("add_6", "relu", None), ("relu_7", "relu", None))
    rows = [row("PWN(Add_6, Relu_7)", 0, members=("Add_6", "Relu_7"))]
    assert links(match_model(m, rows)) == {
        (0, "add_6", MatchSource.NAME),
        (0, "relu_7", MatchSource.NAME),
    }


# ---- a path prefix proves itself or links nothing (match/prefix.py) ----------------------------

NET = model(
    "net",
    ("conv1", "conv2d", (1, 8, 16, 16)),
    ("relu1", "relu", (1, 8, 16, 16)),
    ("pool1", "maxpool2d", (1, 8, 8, 8)),
    ("attn", "attention", (1, 4, 8)),
)


def linked(rows) -> set[tuple[str, str]]:
    """(row, layer) linked by a name: whole or a proven prefix (rule 5's guesses by op type
    and position are another rule)."""
    return {
        (rows[link.row].name, link.layer)
        for link in match_model(NET, rows).links
        if link.source != MatchSource.SIGNATURE
    }


def test_a_node_in_a_layers_module_scope_is_that_layers_unless_it_is_another_kind():
    rows = [
        row("/conv1/Conv", 0, raw_type="Conv"),
        row("/conv1/Relu", 1, raw_type="Relu"),  # a relu is no part of a conv
        row("/attn/Reshape", 2, raw_type="Reshape"),  # glue of the attention
        row("/attn/MatMul_1", 3, raw_type="MatMul"),
        row("/attn/Softmax", 4, raw_type="Softmax"),
    ]
    assert linked(rows) == {
        ("/conv1/Conv", "conv1"),
        ("/attn/Reshape", "attn"),
        ("/attn/MatMul_1", "attn"),
        ("/attn/Softmax", "attn"),
    }


def test_a_descriptive_prefix_needs_kind_and_shape_or_order():
    # Caffe-style names: "3x3_s2" and "norm1" say nothing of the kind
    bare = [row("pool1/3x3_s2", 0), row("pool1/norm1", 1)]
    assert linked(bare) == set()
    typed = [row("pool1/3x3_s2", 0, raw_type="Pooling", shape=(1, 8, 8, 8))]
    assert linked(typed) == {("pool1/3x3_s2", "pool1")}  # kind and shape agree
    other = [row("pool1/3x3_s2", 0, raw_type="Pooling", shape=(1, 64, 56, 56))]
    assert linked(other) == set()  # the kind agrees, the shape does not
    lrn = [row("pool1/norm1", 0, raw_type="LRN", shape=(1, 8, 8, 8))]
    assert linked(lrn) == set()  # the shape agrees, the kind does not
    # no shape: its place among rows linked by whole names decides
    in_order = [row("conv1", 0), row("pool1/3x3_s2", 1, raw_type="Pooling")]
    assert linked(in_order) == {("conv1", "conv1"), ("pool1/3x3_s2", "pool1")}
    crossed = [row("pool1/3x3_s2", 0, raw_type="Pooling"), row("attn", 1), row("conv1", 2)]
    assert ("pool1/3x3_s2", "pool1") not in linked(crossed)
    alone = [row("pool1/3x3_s2", 0, raw_type="Pooling")]
    assert linked(alone) == set()  # nothing to keep order with: no proof


def test_a_fused_row_is_not_judged_against_one_of_its_layers_by_prefix():
    rows = [
        row("conv1/7x7_s2 + conv1/relu_7x7", 0, raw_type="CaskConvolution", shape=(1, 8, 16, 16))
    ]
    # the conv member names no kind of its own, the relu member is no conv: no name links;
    # rule 5 may still pair the conv row with the conv layer, and the row holds a relu: never
    # a certain cover
    assert linked(rows) == set()
    guessed = match_model(NET, rows)
    assert {link.source for link in guessed.links} == {MatchSource.SIGNATURE}
    assert "also holds conv1/7x7_s2, conv1/relu_7x7" in dict(guessed.ambiguities)[0]
    joined = [row("conv1 + relu9", 0)]  # whole names: conv1 links, relu9 is no layer
    matched = match_model(NET, joined)
    assert {link.layer for link in matched.links} == {"conv1"}
    assert "also holds relu9" in dict(matched.ambiguities)[0]
