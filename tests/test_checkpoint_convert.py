"""checkpoint_convert: Linen TrainState checkpoints -> validated, atomic NNX checkpoints.

The Linen checkpoints are tiny TrainStates trained for two steps (fixtures/twins/zoo_twins.py), so
params, batch statistics and adam moments all differ from any init.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx, serialization
from flax.training import train_state

from linen2nnx.checkpoint_convert import (
    REPORT_FILENAME,
    convert,
    convert_state,
    convert_tree,
    load_nnx_checkpoint,
    load_optimizer_state,
    read_linen_checkpoint,
    restore_optimizer,
)
from linen2nnx.checkpoint_convert.mapping import normalise
from linen2nnx.checkpoint_convert.optimizer import abstract_optimizer
from linen2nnx.checkpoint_convert.to_linen import convert_to_linen
from linen2nnx.errors import ConversionError, L2NError
from linen2nnx.namemap import Child, ClassEntry, NameMap
from linen2nnx.spec import LinenSide, ModelPair, import_file, load_pair

TWINS_FILE = Path(__file__).parent / "fixtures" / "twins" / "zoo_twins.py"
twins = import_file(TWINS_FILE)


def tol(ref) -> float:
    return 1e-5 * (1.0 + float(np.max(np.abs(ref))))


def assert_close(ref, got, what=""):
    ref, got = np.asarray(ref), np.asarray(got)
    assert ref.shape == got.shape, what
    assert np.max(np.abs(ref - got)) <= tol(ref), what


def flat(tree) -> dict[str, np.ndarray]:
    from flax.traverse_util import flatten_dict

    return {"/".join(map(str, k)): np.asarray(v) for k, v in flatten_dict(tree).items()}


def nnx_flat(model, filt=...) -> dict[str, np.ndarray]:
    return {
        "/".join(map(str, p)): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model, filt))
    }


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("linen")
    return {kind: twins.save_orbax(twins.trained_state(kind), root / kind) for kind in ("mlp", "cnn")}


@pytest.fixture(scope="module")
def cnn_converted(ckpts, tmp_path_factory):
    dst = tmp_path_factory.mktemp("nnx") / "cnn"
    report = convert(ckpts["cnn"], dst, twins.cnn_pair(), twins.cnn_name_map())
    return dst, report


# ---- the happy path ----------------------------------------------------------------------------
def test_cnn_checkpoint_restores_with_standard_recipe_and_gives_forward_parity(cnn_converted):
    dst, report = cnn_converted
    pair = twins.cnn_pair()
    state = twins.trained_state("cnn")
    # the plain NNX recipe, no linen2nnx code involved
    graphdef, abstract = nnx.split(nnx.eval_shape(pair.make_nnx))
    with ocp.StandardCheckpointer() as ckptr:
        model = nnx.merge(graphdef, ckptr.restore(dst, abstract))
    args, kwargs = pair.linen.call_args(train=False)
    ref = pair.linen.model.apply({"params": state.params, "batch_stats": state.batch_stats}, *args, **kwargs)
    assert_close(ref, model(*args, **kwargs), "eval forward")
    # trained values, not an init: BatchNorm statistics moved away from (0, 1)
    got = nnx_flat(model, nnx.BatchStat)
    for lpath, arr in flat(state.batch_stats).items():
        nnx_path = lpath.replace("BatchNorm_", "batch_norm_")
        np.testing.assert_array_equal(got[nnx_path], arr)
    assert not np.allclose(got["batch_norm_0/mean"], 0.0)
    assert report.strategy == "name map (root CNN)"
    assert {m.how for m in report.mapped} == {"name map"}
    assert len(report.mapped) == 16 and report.step == 2


def test_converted_checkpoint_layout_and_report(cnn_converted):
    dst, _ = cnn_converted
    assert (dst / "_METADATA").exists() and (dst / REPORT_FILENAME).exists()
    assert sorted(p.name for p in dst.parent.iterdir()) == ["cnn"]  # no temp siblings left
    data = json.loads((dst / REPORT_FILENAME).read_text())
    assert data["schema"] == "linen2nnx-conversion/1"
    rows = {r["linen"]: r for r in data["mapped"]}
    assert rows["params/Conv_0/kernel"]["nnx"] == "conv_0/kernel"
    assert rows["params/Conv_0/kernel"]["shape"] == [3, 3, 1, 4]
    assert rows["batch_stats/BatchNorm_1/var"] == {
        "linen": "batch_stats/BatchNorm_1/var",
        "nnx": "batch_norm_1/var",
        "type": "BatchStat",
        "shape": [8],
        "dtype": "float32",
        "how": "name map",
    }
    kept = {r["nnx"]: r["type"] for r in data["kept_from_init"]}
    assert kept == {"dropout_0/rngs/count": "RngCount", "dropout_0/rngs/key": "RngKey"}
    assert data["ignored"] == {}
    # the optimizer state travelled too, because the pair has an optimizer
    assert (dst / "optimizer" / "_METADATA").exists()
    assert any(r["nnx"] == "opt_state/0/mu/dense_0/kernel" for r in data["optimizer"])


def test_load_nnx_checkpoint_round_trip(cnn_converted):
    dst, _ = cnn_converted
    pair = twins.cnn_pair()
    model = load_nnx_checkpoint(dst, pair)
    again, _ = convert_state(twins.trained_state("cnn"), pair, twins.cnn_name_map())
    a, b = (
        nnx_flat(model, nnx.Any(nnx.Param, nnx.BatchStat)),
        nnx_flat(again, nnx.Any(nnx.Param, nnx.BatchStat)),
    )
    assert a.keys() == b.keys() and len(a) == 16
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    # RNG state kept from a fresh init of the same pair: dropout still works after loading
    fresh = pair.make_nnx()
    np.testing.assert_array_equal(
        jax.random.key_data(model.dropout_0.rngs.key[...]), jax.random.key_data(fresh.dropout_0.rngs.key[...])
    )


def test_an_opt_state_saved_without_its_step_is_refused_with_the_reason():
    """``{'params', 'opt_state'}`` with no TrainState ``step``: the NNX optimizer's counter has no source,
    and the problem says so (it read 'no Linen optimizer leaf maps to it'); the parameters alone convert."""
    state = twins.trained_state("mlp")
    tree = {"params": state.params, "opt_state": state.opt_state}
    with pytest.raises(
        ConversionError, match=r"not filled: NNX step: the checkpoint has no top-level 'step'"
    ):
        convert_tree(tree, twins.mlp_pair(), twins.mlp_name_map(), optimizer=True)
    converted = convert_tree(tree, twins.mlp_pair(), twins.mlp_name_map(), optimizer=False)
    assert converted.report.optimizer == [] or not converted.report.optimizer


def test_optimizer_state_converts_and_next_step_matches_linen(ckpts, tmp_path):
    pair = twins.mlp_pair()
    state = twins.trained_state("mlp")
    report = convert(ckpts["mlp"], tmp_path / "mlp", pair, twins.mlp_name_map())
    assert report.optimizer and report.step == 2
    model = load_nnx_checkpoint(tmp_path / "mlp", pair)
    _, abstract = abstract_optimizer(pair.make_nnx, pair.linen.optimizer)
    opt = restore_optimizer(model, pair.linen.optimizer, load_optimizer_state(tmp_path / "mlp", abstract))
    assert int(opt.step[...]) == 2 and opt.step[...].dtype == jnp.uint32
    np.testing.assert_array_equal(
        opt.opt_state[0].mu["dense1"]["kernel"][...], state.opt_state[0].mu["dense1"]["kernel"]
    )
    # one more (eval-mode) step on both sides gives the same params
    args, kwargs = pair.linen.call_args(train=False)
    loss = pair.linen.loss

    @jax.jit
    def linen_step(st):
        grads = jax.grad(
            lambda p: loss(pair.linen.model.apply({"params": p}, *args, **kwargs), pair.linen.batch)
        )
        return st.apply_gradients(grads=grads(st.params)).params

    @nnx.jit
    def nnx_step(model, opt):
        opt.update(model, nnx.grad(lambda m: loss(m(*args, **kwargs), pair.linen.batch))(model))

    lnext = linen_step(state)
    nnx_step(model, opt)
    for path, ref in flat(lnext).items():
        assert_close(ref, nnx_flat(model, nnx.Param)[path], path)


# ---- sources -----------------------------------------------------------------------------------
def test_msgpack_and_in_memory_sources_agree_with_orbax(ckpts, tmp_path):
    state = twins.trained_state("cnn")
    msgpack = tmp_path / "cnn.msgpack"
    msgpack.write_bytes(serialization.to_bytes(state))
    from_disk = read_linen_checkpoint(ckpts["cnn"])
    from_msgpack = read_linen_checkpoint(msgpack)
    from_object = read_linen_checkpoint(state)
    assert (from_disk.format, from_msgpack.format) == ("orbax", "msgpack")
    assert from_disk.step == from_msgpack.step == from_object.step == 2
    for other in (from_msgpack, from_object):
        a, b = flat(from_disk.collections), flat(other.collections)
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    _, report = convert_state(msgpack, twins.cnn_pair(), twins.cnn_name_map())
    assert report.source_format == "msgpack" and len(report.mapped) == 16


def test_bare_variables_with_partitioning_boxes_are_unboxed():
    pair = twins.mlp_pair()
    variables = pair.linen.init_variables()
    params = jax.tree.map(lambda x: x, variables["params"])
    params["dense1"]["kernel"] = nn.LogicallyPartitioned(params["dense1"]["kernel"], ("embed", "mlp"))
    params["head"]["kernel"] = {"value": params["head"]["kernel"]}  # how Orbax/msgpack restore a box
    model, report = convert_state({"params": params}, pair, twins.mlp_name_map())
    assert sorted(report.unboxed) == ["params/dense1/kernel", "params/head/kernel"]
    np.testing.assert_array_equal(model.head.kernel[...], variables["params"]["head"]["kernel"])
    np.testing.assert_array_equal(model.dense1.kernel[...], variables["params"]["dense1"]["kernel"])


VALUE_PARAM = """
import flax.linen as nn


class Scale(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x * self.param("value", nn.initializers.normal(1.0), (3,))


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return Scale()(x) + Scale()(x)
"""


@pytest.mark.parametrize("root", ["Scale", "Net"])
def test_a_parameter_named_value_is_not_read_as_a_partitioning_box(root, tmp_path):
    """``{'params': {'value': w}}`` (a model whose one parameter is named ``value``) and
    ``{'Scale_0': {'value': w}}`` below it look like restored boxes; the collection is never one, and
    the name map puts an unboxed leaf back under ``value`` (convert used to crash on the first)."""
    from linen2nnx.migrate import migrate_source

    result = migrate_source(VALUE_PARAM, "value_param.py", "value_param_nnx")
    (tmp_path / "value_param_nnx.py").write_text(result.output)
    result.name_map.save(tmp_path / "map.json")
    linen_mod = import_file(_write(tmp_path / "value_param.py", VALUE_PARAM))
    nnx_mod = import_file(tmp_path / "value_param_nnx.py")
    x = jnp.ones((2, 3))
    side = LinenSide(getattr(linen_mod, root)(), {"x": x}, jnp.sum, train_kwargs={}, eval_kwargs={})
    pair = ModelPair(linen=side, nnx_factory=lambda rngs: getattr(nnx_mod, root)(rngs=rngs))
    variables = serialization.msgpack_restore(serialization.to_bytes(side.init_variables()))
    model, _ = convert_state(variables, pair, tmp_path / "map.json")
    np.testing.assert_allclose(model(x), side.model.apply(variables, x), rtol=1e-6)
    # the optimizer's moments of a parameter named value are no boxes either
    tx = optax.adam(1e-2)
    state = train_state.TrainState.create(apply_fn=side.model.apply, params=variables["params"], tx=tx)
    state = state.apply_gradients(grads=jax.tree.map(jnp.ones_like, state.params))
    tree = serialization.msgpack_restore(serialization.to_bytes(state))
    side = dataclasses.replace(side, optimizer=tx)
    converted = convert_tree(
        tree, dataclasses.replace(pair, linen=side), tmp_path / "map.json", optimizer=True
    )
    mu = [m for m in converted.report.optimizer if "mu" in map(str, m.linen_path)]
    assert len(mu) == 2 if root == "Net" else len(mu) == 1
    # and back: `--to linen` puts the leaf convert read under its module's path back under `value`
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "linen", variables)
    convert(tmp_path / "linen", tmp_path / "nnx", pair, tmp_path / "map.json")
    convert_to_linen(tmp_path / "nnx", tmp_path / "back", pair)
    with ocp.StandardCheckpointer() as ckptr:
        back = ckptr.restore(tmp_path / "back")
    assert jax.tree.structure(back) == jax.tree.structure(variables)
    for got, want in zip(jax.tree.leaves(back), jax.tree.leaves(variables)):
        np.testing.assert_array_equal(got, want)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_missing_or_unreadable_checkpoint_is_a_named_l2n_error(tmp_path):
    pair = twins.mlp_pair()
    missing = tmp_path / "nope"
    with pytest.raises(L2NError, match=r"nope: checkpoint not found"):
        convert(missing, tmp_path / "out", pair)
    (tmp_path / "empty").mkdir()
    with pytest.raises(L2NError, match=r"empty: not an Orbax checkpoint directory"):
        convert_state(tmp_path / "empty", pair)
    (tmp_path / "junk.msgpack").write_bytes(b"\x00not msgpack at all")
    with pytest.raises(L2NError, match=r"junk.msgpack"):
        convert_state(tmp_path / "junk.msgpack", pair)
    with pytest.raises(L2NError, match=r"expected a top-level 'params'"):
        convert_state({"weights": {}}, pair)
    assert not (tmp_path / "out").exists()


# ---- refusing bad targets ----------------------------------------------------------------------
def test_mismatched_target_names_every_path_and_writes_nothing(ckpts, tmp_path):
    dst = tmp_path / "wide"
    with pytest.raises(ConversionError) as err:
        convert(ckpts["mlp"], dst, twins.mlp_wide_pair(), twins.mlp_name_map())
    msg = str(err.value)
    for linen, nnx_path, want, got in [
        ("params/dense1/kernel", "dense1/kernel", (4, 16), (4, 8)),
        ("params/dense1/bias", "dense1/bias", (16,), (8,)),
        ("params/dense2/kernel", "dense2/kernel", (16, 16), (8, 8)),
        ("params/dense2/bias", "dense2/bias", (16,), (8,)),
        ("params/head/kernel", "head/kernel", (16, 3), (8, 3)),
    ]:
        assert (
            f"shape mismatch: Linen {linen} -> NNX {nnx_path}: expected {want} float32, got {got} float32"
            in msg
        )
    assert "5 problem(s), nothing written" in msg
    assert "head/bias" not in msg  # (3,) fits
    assert not dst.exists() and list(tmp_path.iterdir()) == []


def test_missing_bias_in_target_is_refused(ckpts, tmp_path):
    with pytest.raises(ConversionError, match=r"no NNX home: Linen params/head/bias -> NNX head/bias"):
        convert(ckpts["mlp"], tmp_path / "nobias", twins.mlp_no_head_bias_pair(), twins.mlp_name_map())
    assert not (tmp_path / "nobias").exists()


def test_existing_destination_needs_force(ckpts, tmp_path):
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "keep.txt").write_text("old")
    with pytest.raises(L2NError, match="already exists"):
        convert(ckpts["mlp"], dst, twins.mlp_pair())
    assert (dst / "keep.txt").exists()
    report = convert(ckpts["mlp"], dst, twins.mlp_pair(), force=True)
    assert not (dst / "keep.txt").exists() and (dst / "_METADATA").exists()
    assert report.destination == str(dst.absolute())
    with pytest.raises(L2NError, match="must not contain or be inside the source"):
        convert(ckpts["mlp"], ckpts["mlp"], twins.mlp_pair(), force=True)


# ---- structural matching (no name map) ---------------------------------------------------------
def test_structural_matching_mlp_identical_names():
    pair = twins.mlp_pair()
    model, report = convert_state(twins.trained_state("mlp"), pair)
    assert report.strategy == "structural"
    assert {m.how for m in report.mapped} == {"identical"} and len(report.mapped) == 6
    args, kwargs = pair.linen.call_args(False)
    ref = pair.linen.model.apply({"params": twins.trained_state("mlp").params}, *args, **kwargs)
    assert_close(ref, model(*args, **kwargs))


def test_structural_matching_cnn_normalised_names():
    converted = convert_tree(twins.trained_state("cnn"), twins.cnn_pair(), optimizer=False)
    how = {m.linen: (m.nnx, m.how) for m in converted.report.mapped}
    assert how["params/BatchNorm_0/scale"] == ("batch_norm_0/scale", "normalised")
    assert how["batch_stats/BatchNorm_1/mean"] == ("batch_norm_1/mean", "normalised")
    assert how["params/Dense_1/kernel"] == ("dense_1/kernel", "normalised")


class LinenStack(nn.Module):
    def setup(self):
        self.layers = [nn.Dense(3), nn.Dense(2)]

    def __call__(self, x):
        return self.layers[1](nn.relu(self.layers[0](x)))


class NNXStack(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(2, 3, rngs=rngs), nnx.Linear(3, 2, rngs=rngs)])

    def __call__(self, x):
        return self.layers[1](nnx.relu(self.layers[0](x)))


def _pair(linen_model, factory) -> ModelPair:
    side = LinenSide(
        model=linen_model,
        batch={"x": jnp.ones((2, 2))},
        loss=lambda out, b: out.sum(),
        train_kwargs={},
        eval_kwargs={},
    )
    return ModelPair(linen=side, nnx_factory=factory)


def test_structural_setup_list_becomes_int_keys():
    pair = _pair(LinenStack(), lambda rngs: NNXStack(rngs=rngs))
    variables = pair.linen.init_variables()
    model, report = convert_state(variables, pair)
    assert {m.linen: m.nnx_path for m in report.mapped}["params/layers_1/kernel"] == ("layers", 1, "kernel")
    assert_close(pair.linen.model.apply(variables, jnp.ones((2, 2))), model(jnp.ones((2, 2))))


class TwoDense(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x) + nn.Dense(2, name="dense_0")(x)  # auto-name Dense_0 + explicit dense_0


class NNXTwoDense(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.dense_0 = nnx.Linear(2, 2, rngs=rngs)
        self.dense_1 = nnx.Linear(2, 2, rngs=rngs)


class OneDense(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x)


class NNXTwoHomes(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.Dense_0 = nnx.Linear(2, 2, rngs=rngs)
        self.dense_0 = nnx.Linear(2, 2, rngs=rngs)


def test_structural_matching_refuses_ambiguity():
    # two Linen leaves (Dense_0, dense_0) fit one NNX slot
    pair = _pair(TwoDense(), lambda rngs: NNXTwoDense(rngs=rngs))
    with pytest.raises(
        ConversionError, match=r"ambiguous: Linen params/Dense_0/kernel, params/dense_0/kernel"
    ):
        convert_state(pair.linen.init_variables(), pair)
    # one Linen leaf (Dense_0) fits two NNX slots (Dense_0, dense_0)
    pair = _pair(OneDense(), lambda rngs: NNXTwoHomes(rngs=rngs))
    with pytest.raises(
        ConversionError, match=r"ambiguous: Linen params/Dense_0/kernel -> NNX Dense_0/kernel, dense_0/kernel"
    ):
        convert_state(pair.linen.init_variables(), pair)


def test_normalise():
    assert normalise(("Dense_0", "kernel")) == normalise(("dense_0", "kernel")) == ("dense", "0", "kernel")
    assert normalise(("layers_3",)) == normalise(("layers", 3)) == ("layers", "3")
    assert normalise(("nested_1_0",)) == ("nested", "1", "0")
    assert normalise(("BatchNorm_2",)) == normalise(("batch_norm_2",))
    assert normalise(("_0",)) == ("0",)


def test_pair_spec_file_loads():
    pair = load_pair(f"{TWINS_FILE}:cnn_pair")
    assert isinstance(pair, ModelPair) and type(pair.make_nnx()).__name__ == "CNN"


def test_target_that_cannot_be_built_is_a_named_l2n_error():
    def broken(rngs):
        raise TypeError("MLP.__init__() missing 1 required keyword-only argument: 'in_features'")

    pair = ModelPair(linen=twins.mlp_linen(), nnx_factory=broken)
    with pytest.raises(L2NError, match=r"cannot build the target NNX model: TypeError: .*in_features"):
        convert_state(twins.trained_state("mlp"), pair)


class _Holder(nnx.Module):
    def __init__(self, inner: nnx.Module):
        self.inner = inner


class NNXSharedDense(nnx.Module):
    """One Linear held at `shared` and inside `a_user` (listed first by nnx.state)."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.shared = nnx.Linear(2, 2, rngs=rngs)
        self.a_user = _Holder(self.shared)


def test_a_shared_variable_is_filled_through_any_of_its_paths():
    from linen2nnx.checkpoint_convert.mapping import Leaf, Match
    from linen2nnx.checkpoint_convert.validate import abstract_target, validate

    target = abstract_target(lambda: NNXSharedDense(rngs=nnx.Rngs(0)))
    assert set(target.slots) == {("a_user", "inner", "kernel"), ("a_user", "inner", "bias")}
    assert target.aliases == {
        ("shared", "kernel"): ("a_user", "inner", "kernel"),
        ("shared", "bias"): ("a_user", "inner", "bias"),
    }
    leaves = [Leaf("params", ("shared", n), s, np.float32) for n, s in (("kernel", (2, 2)), ("bias", (2,)))]
    matches = [Match(leaf, leaf.path, "name map") for leaf in leaves]
    good, kept, problems = validate(leaves, matches, [], target, ["params"])
    assert problems == [] and kept == []
    assert {m.nnx_path for m in good} == set(target.slots)


class _Ema(nnx.Variable):
    """A custom collection's Variable type (what migrate generates for ``self.variable('ema', ...)``)."""


class _NEma(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.dense = nnx.Linear(2, 2, rngs=rngs)
        self.ema = _Ema(jnp.zeros((2,)))
        self.cache = nnx.Cache(jnp.zeros((2,)))


def test_a_custom_collection_the_checkpoint_lacks_is_a_problem_not_an_init_value():
    """A custom collection holds trained state (an EMA): a checkpoint without it would leave the init
    value, computing something else, so the slot is "not filled". A decode cache is made at run
    time: kept from init."""
    from linen2nnx.checkpoint_convert.mapping import Leaf, Match
    from linen2nnx.checkpoint_convert.validate import abstract_target, validate

    target = abstract_target(lambda: _NEma(rngs=nnx.Rngs(0)))
    leaves = [Leaf("params", ("dense", n), s, np.float32) for n, s in (("kernel", (2, 2)), ("bias", (2,)))]
    matches = [Match(leaf, leaf.path, "name map") for leaf in leaves]
    _, kept, problems = validate(leaves, matches, [], target, ["params"])
    assert [s.path for s in kept] == [("cache",)]
    assert [(p.kind, p.nnx) for p in problems] == [("not filled", "ema")]


class _LStats(nn.Module):
    """Running statistics in a collection of its own name (``self.variable('running', ...)``)."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.Dense(2)(x)
        mean = self.variable("running", "mean", lambda: jnp.zeros((2,)))
        if train:
            mean.value = 0.9 * mean.value + 0.1 * h.mean(0)
        return h - mean.value


class _NStats(nnx.Module):
    """Its NNX twin, written with ``nnx.BatchStat``: no Variable type is registered for ``running``."""

    def __init__(self, rngs: nnx.Rngs):
        self.dense_0 = nnx.Linear(3, 2, rngs=rngs)
        self.mean = nnx.BatchStat(jnp.zeros((2,)))

    def __call__(self, x, train: bool = False):
        return self.dense_0(x) - self.mean[...]


@pytest.mark.parametrize("mapped", [True, False], ids=["name map", "structural"])
def test_a_collection_of_an_unregistered_name_is_never_left_at_its_init_value(mapped):
    """The checkpoint's ``running/mean`` was ignored (no Variable type is registered for ``running``)
    and, through a name map, the NNX ``mean`` it belongs to was kept at its init value (zeros for
    [1, 2]), exit 0, with the reason that Linen's own init never creates it, which it does: the
    Linen init's leaves of such a collection were not counted. Now a "not filled" problem that names
    the checkpoint's leaf and the registration it lacks."""
    batch = {"x": jnp.ones((2, 3)), "y": jnp.zeros((2,), jnp.int32)}
    side = LinenSide(model=_LStats(), batch=batch, loss=lambda o, b: o.sum(), mutable=("running",))
    pair = ModelPair(side, lambda rngs: _NStats(rngs))
    variables = side.init_variables()
    tree = {"params": variables["params"], "running": {"mean": jnp.asarray([1.0, 2.0])}}
    name_map = NameMap(
        classes={
            "_LStats": ClassEntry(
                name="_LStats",
                module=__name__,
                children={"Dense_0": Child(attr="dense_0", linen_class="flax.linen.Dense")},
                variables={"running": {"mean": "mean"}},
            )
        }
    )
    with pytest.raises(ConversionError) as err:
        convert_tree(tree, pair, name_map if mapped else None)
    assert "not filled: Linen running/mean -> NNX mean" in str(err.value)
    assert "nnx.register_variable_name('running', ...)" in str(err.value)


class _LScaled(nn.Module):
    """A collection of the model's own (``spectral``), and a sown value (``losses``)."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.Dense(2)(x)
        self.sow("losses", "l2", (h**2).mean())
        return h / self.variable("spectral", "sigma", lambda: jnp.ones((2,))).value


class _NScaled(nnx.Module):
    """An NNX twin without the ``spectral`` state (and no Variable type registered for it)."""

    def __init__(self, rngs: nnx.Rngs):
        self.dense_0 = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x, train: bool = False):
        return self.dense_0(x)


def test_a_collection_the_linen_model_creates_is_never_dropped_as_a_train_state_field(tmp_path):
    """``spectral/sigma = [3, 5]``, a collection the Linen model's own init creates, converted with exit
    0 into a twin that has no place for it: the entry was ignored as "not a registered variable
    collection (TrainState field?)" and the NNX model computed h instead of h / [3, 5] (-1.22 against
    -0.41). A "no NNX home" problem now, nothing written; a sown collection (``losses``) and a
    TrainState field (``ema_params``) are still ignored with their reasons."""
    batch = {"x": jnp.ones((2, 3)), "y": jnp.zeros((2,), jnp.int32)}
    pair = ModelPair(LinenSide(model=_LScaled(), batch=batch, loss=lambda o, b: o.sum()), _NScaled)
    params = pair.linen.init_variables()["params"]
    tree = {"params": params, "spectral": {"sigma": jnp.asarray([3.0, 5.0])}, "ema_params": params}
    tree["losses"] = {"l2": (jnp.asarray(0.5),)}
    with pytest.raises(
        ConversionError, match=r"no NNX home: Linen spectral/sigma: the Linen model's own init"
    ):
        convert(tree, tmp_path / "nnx", pair)
    assert not (tmp_path / "nnx").exists()
    del tree["spectral"]
    report = convert(tree, tmp_path / "nnx", pair)
    assert set(report.ignored) == {"losses", "ema_params"}


class _LFlat(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2, name="classifier")(nn.Dense(3)(x))  # Linen sorts Dense_0 first


class _NFlat(nnx.Module):
    def __init__(self, rngs):
        self.dense_0 = nnx.Linear(4, 3, rngs=rngs)  # NNX sorts classifier first
        self.classifier = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x):
        return self.classifier(self.dense_0(x))


def _flat_pair_and_state(tx):
    """The Dense_0 / classifier pair (whose two trees order the parameters differently) with ``tx``, and
    a Linen TrainState of it."""
    from flax.training.train_state import TrainState

    side = LinenSide(
        model=_LFlat(),
        batch={"x": jnp.ones((2, 4))},
        loss=lambda out, b: jnp.mean(out**2),
        optimizer=tx,
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(linen=side, nnx_factory=lambda rngs: _NFlat(rngs))
    return pair, TrainState.create(apply_fn=None, params=side.init_variables()["params"], tx=tx)


def _kernels_only(params):
    return jax.tree_util.tree_map(lambda p: p.ndim > 1, params)


def _flattened(kind: str):
    import optax

    inner = optax.sgd(0.1, momentum=0.9)
    if kind == "all":
        return optax.flatten(inner)
    if kind == "masked":
        return optax.chain(optax.masked(optax.flatten(inner), _kernels_only), optax.sgd(0.1))

    def labels(params):
        return jax.tree_util.tree_map(lambda p: "flat" if p.ndim > 1 else "plain", params)

    return optax.multi_transform({"flat": optax.flatten(inner), "plain": optax.sgd(0.1)}, labels)


@pytest.mark.parametrize("kind", ["all", "masked", "multi_transform"])
def test_a_flattened_optimizer_state_in_another_parameter_order_is_refused(kind):
    """optax.flatten keeps one vector of every parameter value, in path order: Linen puts Dense_0
    before classifier, NNX dense_0 after it, so the vector copied as is gave each moment to another
    parameter (exit 0, a diverging run). It is a problem now, the only one reported; also for the
    shorter vector of a flatten under a mask or a multi_transform label (the kernels only)."""
    pair, state = _flat_pair_and_state(_flattened(kind))
    with pytest.raises(ConversionError) as err:
        convert_tree(state, pair, optimizer=True)
    assert "parameter order differs" in str(err.value) and "1 problem" in str(err.value)


@pytest.mark.parametrize("where", ["convert", "train_state"])
def test_an_optimizer_written_for_linen_names_is_a_spec_error(where):
    """Labels written for Linen's parameter dict (``path_aware_map`` over ``Dense_0`` / ``classifier``)
    fail on NNX's nnx.State: a SpecError that names the cause, never an AssertionError traceback."""
    import optax
    from flax.traverse_util import path_aware_map

    from linen2nnx.errors import SpecError
    from linen2nnx.train.state import abstract_state

    def labels(params):
        return path_aware_map(lambda path, _: "head" if path[0] == "classifier" else "body", params)

    tx = optax.multi_transform({"head": optax.sgd(0.1), "body": optax.adam(0.1)}, labels)
    pair, state = _flat_pair_and_state(tx)
    with pytest.raises(SpecError, match="written for Linen's parameter tree"):
        if where == "convert":
            convert_tree(state, pair, optimizer=True)
        else:
            abstract_state(pair, tx)


def _decay_named(names: str, warmup: str):
    """adamw whose weight-decay mask reads the parameter paths for ``names``. ``warmup``: ``"short"``, a
    learning rate rising from 0 in 10 steps (the first update is zero); ``"long"``, over 4000 steps, whose
    first steps move a parameter by far less than any tolerance; ``"every_4"``, ``MultiSteps`` updating
    every 4th step; ``"sized"``, the mask also reads each parameter's size (``x.size >= 8``: the 4 x 3 kernel); else none."""
    import optax

    def mask(params):
        def decayed(path, x):
            return any(names in str(k) for k in path) and (x.size >= 8 if warmup == "sized" else True)

        return jax.tree_util.tree_map_with_path(decayed, params)

    lr = {"short": optax.linear_schedule(0.0, 0.1, 10), "long": optax.linear_schedule(0.0, 0.01, 4000)}
    tx = optax.adamw(lr.get(warmup, 0.1), weight_decay=0.5, mask=mask)
    return optax.MultiSteps(tx, every_k_schedule=4) if warmup == "every_4" else tx


@pytest.mark.parametrize(
    "names, problem, warmup",
    [
        ("Dense", True, ""),
        ("Dense", True, "short"),
        ("Dense", True, "long"),
        ("Dense", True, "every_4"),
        ("Dense", True, "sized"),
        ("kernel", False, ""),
        ("kernel", False, "every_4"),
    ],
)
def test_a_mask_that_reads_linen_module_names_is_a_problem(names, problem, warmup):
    """A weight-decay mask on Linen's module names (``Dense_0``) runs on NNX's tree too, where it finds
    ``dense_0``: NNX decayed other parameters than Linen, the state converted leaf for leaf, and training
    drifted with exit 0. Probe updates on both trees now tell: each step's updates are compared (under a
    long warmup from 0 the parameters barely move), the probe steps until parameters move (MultiSteps
    updates every k-th step only), on stand-ins of the parameters' own shapes (a mask that reads a size);
    a mask on the parameters' own names, which both sides share (``kernel``), converts."""

    tx = _decay_named(names, warmup)
    pair, state = _flat_pair_and_state(tx)
    if not problem:
        convert_tree(state, pair, optimizer=True)
        return
    with pytest.raises(ConversionError) as err:
        convert_tree(state, pair, optimizer=True)
    assert "optimizer differs on NNX names" in str(err.value) and "Dense_0/kernel" in str(err.value)


def test_a_fixed_length_optimizer_buffer_is_no_flattened_vector():
    """``contrib.mechanize`` keeps six betas' statistics in vectors of length 6, on no parameter's path:
    their length does not follow the parameters' sizes, so they convert even where Linen and NNX order
    the parameters differently (they were refused as 'parameter order differs')."""
    import optax

    tx = optax.contrib.mechanize(optax.adam(0.1))
    pair, state = _flat_pair_and_state(tx)
    convert_tree(state, pair, optimizer=True)
