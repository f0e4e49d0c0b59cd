"""Numeric parity of @nn.compact loops whose modules carry computed names (``f'Stage{i}'``,
``f'unit{j + 1}'`` over ``range(1, n)``) and of class-holding locals (``block = nn.remat(Block, ...)
if self.remat else Block``).

The NNX side is the golden output of the fixture; the Linen weights are perturbed and reach the NNX
model through the name map only, so an element mapped to the wrong list index fails the check.
"""

import numpy as np
import pytest
from fixture_parity import assert_parity, build, grad_paths


def _modes(deterministic: bool) -> dict:
    """The same call keyword in train and eval mode, so a dropout stack is compared as asked."""
    return {"train_kwargs": {"deterministic": deterministic}, "eval_kwargs": {"deterministic": deterministic}}


@pytest.mark.parametrize("stages", [1, 3])
def test_loop_name_patterns(tmp_path, stages):
    linen_mod, nnx_mod, result, map_path = build("compact_loop_name_patterns", tmp_path)
    children = result.name_map.classes["compact_loop_name_patterns.Stage"].children
    assert children["unit{i+2}"].attr == "unit" and children["unit1"].attr == "unit1"
    tower = result.name_map.classes["compact_loop_name_patterns.Tower"].children
    assert set(tower) == {"stem", "Stage{i}", "layer_{i+2}"}
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    grads = grad_paths(
        assert_parity(
            linen_mod.Tower(stages=stages, top=5),
            lambda rngs: nnx_mod.Tower(stages=stages, top=5, in_features=5, rngs=rngs),
            x,
            map_path,
        )
    )
    assert "layer/2/kernel" in grads and "stage/0/unit1/dense_0/kernel" in grads
    assert ("stage/2/unit/2/dense_1/kernel" in grads) == (stages == 3)  # Stage2's unit4


def test_zero_padded_loop_names(tmp_path):
    linen_mod, nnx_mod, result, map_path = build("compact_loop_name_patterns", tmp_path)
    children = result.name_map.classes["compact_loop_name_patterns.Padded"].children
    assert children["unit{i+2:02d}"].attr == "unit"
    x = np.random.default_rng(4).normal(size=(2, 4)).astype(np.float32)
    grads = grad_paths(
        assert_parity(linen_mod.Padded(), lambda rngs: nnx_mod.Padded(in_features=4, rngs=rngs), x, map_path)
    )
    assert "unit/10/dense_0/kernel" in grads and "unit01/dense_1/bias" in grads  # Linen's unit12


@pytest.mark.parametrize("remat", [True, False])
@pytest.mark.parametrize("deterministic", [True, False])
def test_class_held_by_a_local(tmp_path, remat, deterministic):
    linen_mod, nnx_mod, result, map_path = build("compact_remat_alias", tmp_path)
    assert "        block = " not in result.output and "        layer = " not in result.output
    x = np.random.default_rng(1).normal(size=(2, 5)).astype(np.float32)
    assert_parity(
        linen_mod.Encoder(remat=remat),
        lambda rngs: nnx_mod.Encoder(remat=remat, in_features=5, rngs=rngs),
        x,
        map_path,
        **_modes(deterministic),
    )
    assert_parity(
        linen_mod.Decoder(plain=not remat),
        lambda rngs: nnx_mod.Decoder(plain=not remat, in_features=5, rngs=rngs),
        x,
        map_path,
        **_modes(deterministic),
    )
    assert_parity(
        linen_mod.Stages(remat=remat),
        lambda rngs: nnx_mod.Stages(remat=remat, in_features=5, rngs=rngs),
        x,
        map_path,
        **_modes(deterministic),
    )
    assert_parity(
        linen_mod.Plain(),
        lambda rngs: nnx_mod.Plain(in_features=5, rngs=rngs),
        x,
        map_path,
        **_modes(deterministic),
    )


@pytest.mark.parametrize("depth", [2, 3])
def test_names_counted_by_enumerate(tmp_path, depth):
    linen_mod, nnx_mod, result, map_path = build("compact_enumerate_names", tmp_path)
    net = result.name_map.classes["compact_enumerate_names.Net"].children
    assert net["block{i+2}"].attr == "block" and net["proj{i}"].attr == "proj"
    x = np.random.default_rng(2).normal(size=(2, 5)).astype(np.float32)
    grads = grad_paths(
        assert_parity(
            linen_mod.Net(depth=depth),
            lambda rngs: nnx_mod.Net(depth=depth, in_features=5, rngs=rngs),
            x,
            map_path,
        )
    )
    assert "proj/1/kernel" in grads and "block1/unit/0/kernel" in grads
    assert ("block/1/unit/1/kernel" in grads) == (depth == 3)  # Linen's block3: two units


@pytest.mark.parametrize("scan", [True, False])
@pytest.mark.parametrize("deterministic", [True, False])
def test_lift_alias_bound_in_a_branch(tmp_path, scan, deterministic):
    linen_mod, nnx_mod, result, map_path = build("branch_scan_remat_alias", tmp_path)
    assert "block = nn.remat(" not in result.output.split("class Block")[1]
    x = np.random.default_rng(3).normal(size=(2, 5)).astype(np.float32)
    grads = grad_paths(
        assert_parity(
            linen_mod.Encoder(scan=scan),
            lambda rngs: nnx_mod.Encoder(scan=scan, in_features=5, rngs=rngs),
            x,
            map_path,
            **_modes(deterministic),
        )
    )
    assert ("encoderblock/dense_0/kernel" if scan else "encoderblock/2/dense_0/kernel") in grads


def test_name_map_reads_element_patterns_exactly():
    from linen2nnx.namemap import Child, ClassEntry, NameMap

    dense = "flax.linen.Dense"
    children = {
        "unit01": Child("unit01", dense),
        "unit{i+2:02d}": Child("unit", dense, container="list"),
        "Stage{i+1}": Child("stage", dense, container="list"),
    }
    name_map = NameMap({"m.A": ClassEntry("m.A", children=children)})
    assert name_map.to_nnx_path("m.A", "params", ("unit01", "kernel")) == ("unit01", "kernel")
    assert name_map.to_nnx_path("m.A", "params", ("unit03", "kernel")) == ("unit", 1, "kernel")
    assert name_map.to_nnx_path("m.A", "params", ("Stage1", "bias")) == ("stage", 0, "bias")
    for unknown in ("unit3", "Stage0"):  # not padded as Linen names them; below the first element
        with pytest.raises(KeyError):
            name_map.to_nnx_path("m.A", "params", (unknown, "kernel"))
