"""The Linen model zoo: every model initialises, runs, differentiates, trains and checkpoints (tiny configs)."""

from __future__ import annotations

import ast
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from linen2nnx.errors import L2NError
from linen2nnx.spec import LinenSide, load_linen_side
from linen2nnx.zoo import ZOO_MODELS, load_train_module, model_source, spec_ref

TRAIN_STEPS = 30
# Test-side jits only: XLA's CPU backend optimisations double the compile time of these tiny graphs.
fast_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
ALLOWED_MODEL_IMPORTS = {"flax", "flax.linen", "jax", "jax.numpy", "dataclasses", "typing", "functools"}


def _leaves_with_paths(tree):
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def _assert_trees_equal(a, b):
    a_leaves, b_leaves = _leaves_with_paths(a), _leaves_with_paths(b)
    assert [p for p, _ in a_leaves] == [p for p, _ in b_leaves]
    for (path, x), (_, y) in zip(a_leaves, b_leaves):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=path)


# ----------------------------------------------------------------------------------------- registry
def test_registry():
    assert ZOO_MODELS == ("mlp", "cnn", "decoder", "rnn", "encoder", "pipeline")
    for name in ZOO_MODELS:
        assert model_source(name).is_file()
        assert model_source(name).parent.name == name
        assert spec_ref(name) == f"linen2nnx.zoo.{name}.train:spec"
        module = load_train_module(name)
        assert set(module.CONFIGS) >= {"tiny", "bench"}
        for fn in (
            "make_model",
            "example_batch",
            "batches",
            "loss_fn",
            "spec",
            "create_train_state",
            "train",
        ):
            assert callable(getattr(module, fn)), (name, fn)
        assert callable(module.save_checkpoint) and callable(module.load_checkpoint)


@pytest.mark.parametrize("func", [model_source, spec_ref, load_train_module])
def test_registry_unknown_name(func):
    with pytest.raises(L2NError, match="valid names: mlp, cnn, decoder, rnn, encoder, pipeline"):
        func("resnet")


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_model_source_is_plain_linen(name):
    """model.py imports only flax.linen / jax / stdlib helpers, nothing from linen2nnx."""
    tree = ast.parse(model_source(name).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported <= ALLOWED_MODEL_IMPORTS, imported - ALLOWED_MODEL_IMPORTS


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_batches_are_deterministic(name):
    module = load_train_module(name)
    a, b = module.example_batch("tiny", seed=3), module.example_batch("tiny", seed=3)
    assert a.keys() == b.keys()
    for key in a:
        assert isinstance(a[key], np.ndarray)
        np.testing.assert_array_equal(a[key], b[key])
    stream = module.batches("tiny", seed=3)
    first, second = next(stream), next(stream)
    assert any(not np.array_equal(first[k], second[k]) for k in first)
    np.testing.assert_array_equal(first[next(iter(first))], a[next(iter(a))])


# ------------------------------------------------------------------------------ forward / gradients
def _init_forward_and_grads(side: LinenSide):
    """One jitted call: ``side.init_variables()``, the eval-mode output, and the train-mode output,
    loss, param grads and updated collections (the mutable ones plus ``intermediates``)."""
    args, train_kwargs = side.call_args(train=True)
    _, eval_kwargs = side.call_args(train=False)

    @fast_jit
    def run():
        boxed = side.init_variables()
        variables = nn.unbox(boxed)
        rest = {k: v for k, v in variables.items() if k != "params"}

        def loss(p):
            out, updates = side.model.apply(
                {"params": p, **rest}, *args, **train_kwargs, rngs={"dropout": jax.random.key(1)},
                mutable=[*side.mutable, "intermediates"],
            )  # fmt: skip
            return side.loss(out, side.batch), (out, updates)

        (value, (train_out, updates)), grads = jax.value_and_grad(loss, has_aux=True)(variables["params"])
        eval_out = side.model.apply(variables, *args, **eval_kwargs)
        return dict(
            boxed=boxed, variables=variables, eval_out=eval_out, train_out=train_out, loss=value, grads=grads,
            updates=updates,
        )  # fmt: skip

    return dict(side=side, **run())


_RESULTS: dict = {}


def _spec_results(name: str, **model_overrides):
    """``_init_forward_and_grads`` of a zoo spec (optionally with model overrides), computed once."""
    key = (name, *sorted(model_overrides.items()))
    if key not in _RESULTS:
        side = load_linen_side(spec_ref(name))
        if model_overrides:
            side = dataclasses.replace(
                side, model=load_train_module(name).make_model("tiny", **model_overrides)
            )
        _RESULTS[key] = _init_forward_and_grads(side)
    return _RESULTS[key]


@pytest.fixture(scope="module", params=ZOO_MODELS)
def forward(request):
    return dict(name=request.param, **_spec_results(request.param))


def test_spec(forward):
    side = forward["side"]
    assert isinstance(side, LinenSide)
    assert side.name == forward["name"]
    assert side.train_kwargs == {"train": True} and side.eval_kwargs == {"train": False}
    assert side.optimizer is not None
    assert side.mutable == (("batch_stats",) if forward["name"] == "cnn" else ())
    assert set(forward["variables"]) == (
        {"params", "batch_stats"} if forward["name"] == "cnn" else {"params"}
    )


def test_forward_train_and_eval(forward):
    eval_out, train_out = forward["eval_out"], forward["train_out"]
    assert eval_out.shape == train_out.shape
    assert bool(jnp.all(jnp.isfinite(eval_out))) and bool(jnp.all(jnp.isfinite(train_out)))
    assert bool(jnp.isfinite(forward["loss"])) and forward["loss"].shape == ()
    # dropout (and batch statistics for the CNN) make train mode differ from eval mode
    assert not np.allclose(eval_out, train_out)
    if forward["name"] == "cnn":  # train mode updates the running statistics
        new_stats, old_stats = forward["updates"]["batch_stats"], forward["variables"]["batch_stats"]
        assert jax.tree.structure(new_stats) == jax.tree.structure(old_stats)
        assert not all(
            np.allclose(a, b) for a, b in zip(jax.tree.leaves(new_stats), jax.tree.leaves(old_stats))
        )


def test_grads_finite_and_nonzero(forward):
    grads = forward["grads"]
    params = forward["variables"]["params"]
    assert jax.tree.structure(grads) == jax.tree.structure(params)
    for path, g in _leaves_with_paths(grads):
        assert bool(jnp.all(jnp.isfinite(g))), path
        assert bool(jnp.any(g != 0)), f"zero gradient at {path}"


# ---------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module", params=ZOO_MODELS)
def trained(request):
    module = load_train_module(request.param)
    state, losses = module.train("tiny", steps=TRAIN_STEPS, seed=0)
    return request.param, module, state, losses


def test_training_reduces_loss(trained):
    name, _, state, losses = trained
    assert len(losses) == TRAIN_STEPS
    assert all(np.isfinite(losses)), losses
    assert int(state.step) == TRAIN_STEPS
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    assert last < 0.9 * first, f"{name}: loss {first:.3f} -> {last:.3f}"


def test_checkpoint_round_trip(trained, tmp_path):
    name, module, state, _ = trained
    path = tmp_path / f"{name}_ckpt"
    module.save_checkpoint(state, path)
    restored = module.load_checkpoint(path)
    _assert_trees_equal(restored["params"], state.params)
    assert int(restored["step"]) == TRAIN_STEPS
    if name == "cnn":
        _assert_trees_equal(restored["batch_stats"], state.batch_stats)


# ----------------------------------------------------------------------------------------- decoder
@pytest.fixture(scope="module")
def dec():
    return load_train_module("decoder")


DECODER_VARIANTS = [(True, "full"), (True, "minimal"), (False, "full")]


@pytest.fixture(scope="module")
def decoder_variants(dec):
    """(scan_layers, remat_policy) -> the spec's init/forward/grads with that decoder config."""
    default = dec.CONFIGS["tiny"]["model"]
    out = {}
    for scan_layers, policy in DECODER_VARIANTS:
        overrides = {}
        if (scan_layers, policy) != (default.scan_layers, default.remat_policy):
            overrides = {"scan_layers": scan_layers, "remat_policy": policy}
        result = _spec_results("decoder", **overrides)
        out[scan_layers, policy] = dict(
            result,
            model=result["side"].model,
            batch=result["side"].batch,
            params=result["variables"]["params"],
            intermediates=result["updates"]["intermediates"],
            logits=result["eval_out"],
        )
    return out


@pytest.mark.parametrize("variant", DECODER_VARIANTS, ids=lambda v: str(v))
def test_decoder_layer_layout(decoder_variants, dec, variant):
    cfg = dec.CONFIGS["tiny"]["model"]
    scan_layers, _ = variant
    params, boxed = decoder_variants[variant]["params"], decoder_variants[variant]["boxed"]
    specs = nn.get_partition_spec(boxed)["params"]
    assert specs["token_embedder"]["embedding"] == jax.sharding.PartitionSpec("vocab", "embed")
    if scan_layers:
        assert "layers" in params and "layers_0" not in params
        for path, leaf in _leaves_with_paths(params["layers"]):
            assert leaf.shape[0] == cfg.num_layers, path
        for path, spec in _leaves_with_paths(specs["layers"]):
            assert spec[0] == "layers", path
        assert specs["layers"]["mlp"]["wi_0"]["kernel"] == jax.sharding.PartitionSpec(
            "layers", "embed", "mlp"
        )
        q = params["layers"]["self_attention"]["query"]["kernel"]
        assert q.shape == (cfg.num_layers, cfg.emb_dim, cfg.num_heads, cfg.head_dim)
    else:
        assert "layers" not in params
        assert {f"layers_{i}" for i in range(cfg.num_layers)} <= set(params)
        for path, spec in _leaves_with_paths(specs):
            assert "layers" not in spec, path
        assert specs["layers_1"]["self_attention"]["out"]["kernel"] == jax.sharding.PartitionSpec(
            "heads", "kv", "embed"
        )
        q = params["layers_0"]["self_attention"]["query"]["kernel"]
        assert q.shape == (cfg.emb_dim, cfg.num_heads, cfg.head_dim)


@pytest.mark.parametrize("variant", DECODER_VARIANTS, ids=lambda v: str(v))
def test_decoder_grads_and_sown_metric(decoder_variants, dec, variant):
    cfg = dec.CONFIGS["tiny"]["model"]
    scan_layers, _ = variant
    result = decoder_variants[variant]
    assert bool(jnp.isfinite(result["loss"]))
    grads = result["grads"]
    for path, g in _leaves_with_paths(grads):
        assert bool(jnp.all(jnp.isfinite(g))), path
        assert bool(jnp.any(g != 0)), path
    inter = result["intermediates"]
    if scan_layers:
        for path, g in _leaves_with_paths(grads["layers"]):  # every stacked layer gets a gradient
            assert bool(jnp.all(jnp.any(g.reshape(cfg.num_layers, -1) != 0, axis=1))), path
        (entropy,) = inter["layers"]["self_attention"]["attention_entropy"]
        assert entropy.shape == (cfg.num_layers,)
    else:
        per_layer = [
            inter[f"layers_{i}"]["self_attention"]["attention_entropy"] for i in range(cfg.num_layers)
        ]
        assert all(len(v) == 1 and v[0].shape == () for v in per_layer)
        entropy = jnp.stack([v[0] for v in per_layer])
    # mean entropy of causal attention over seq_len positions lies in (0, log(seq_len))
    assert bool(jnp.all(entropy > 0)) and bool(jnp.all(entropy < np.log(dec.CONFIGS["tiny"]["seq_len"])))


def test_decoder_remat_policy_does_not_change_numerics(decoder_variants):
    full, minimal = decoder_variants[True, "full"], decoder_variants[True, "minimal"]
    _assert_trees_close(full["params"], minimal["params"], atol=0)
    np.testing.assert_allclose(full["loss"], minimal["loss"], rtol=1e-6)
    _assert_trees_close(full["grads"], minimal["grads"], atol=1e-6)


def test_decoder_unscanned_layers_are_slices_of_the_scanned_stack(decoder_variants, dec):
    """Unstack the scanned params into layers_0, layers_1, ...: the unscanned model computes the same."""
    cfg = dec.CONFIGS["tiny"]["model"]
    scanned, unscanned = decoder_variants[True, "full"], decoder_variants[False, "full"]
    params = dict(scanned["params"])
    stack = params.pop("layers")
    for i in range(cfg.num_layers):
        params[f"layers_{i}"] = jax.tree.map(lambda x, i=i: x[i], stack)
    assert jax.tree.structure(params) == jax.tree.structure(unscanned["params"])
    logits = fast_jit(lambda p: unscanned["model"].apply({"params": p}, scanned["batch"]["inputs"]))(params)
    np.testing.assert_allclose(logits, scanned["logits"], atol=1e-5, rtol=1e-5)


def _assert_trees_close(a, b, atol):
    a_leaves, b_leaves = _leaves_with_paths(a), _leaves_with_paths(b)
    assert [p for p, _ in a_leaves] == [p for p, _ in b_leaves]
    for (path, x), (_, y) in zip(a_leaves, b_leaves):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-5, err_msg=path)


@pytest.mark.parametrize("scan_layers", [True, False])
def test_decoder_kv_cache_decode_matches_full_forward(decoder_variants, dec, scan_layers):
    variant = decoder_variants[scan_layers, "full"]
    model, params, full = variant["model"], variant["params"], variant["logits"]
    tokens = jnp.asarray(variant["batch"]["inputs"])
    batch_size, length = tokens.shape

    cache = dec.init_cache(model, batch_size=batch_size, max_length=length)
    paths = [p for p, _ in _leaves_with_paths(cache)]
    assert any("cached_key" in p for p in paths) and any("cache_index" in p for p in paths)
    # scanned: prefill 3 tokens at once, then decode one token at a time; unscanned: one at a time
    prefill = 3 if scan_layers else 0
    steps = []
    if prefill:
        logits, cache = dec.decode_step(model, params, cache, tokens[:, :prefill])
        steps.append(logits)
    for t in range(prefill, 6):
        logits, cache = dec.decode_step(model, params, cache, tokens[:, t : t + 1])
        steps.append(logits)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full[:, :6], atol=1e-4, rtol=1e-4)
    layer = cache["layers"] if scan_layers else cache["layers_0"]
    assert np.all(np.asarray(layer["self_attention"]["cache_index"]) == 6)
    if scan_layers:
        assert layer["self_attention"]["cached_key"].shape[0] == dec.CONFIGS["tiny"]["model"].num_layers


def test_decoder_under_mesh_and_logical_rules(dec):
    """Sharded init (create_train_state) and a train-mode gradient with the activation constraints active."""
    mesh = dec.make_mesh()  # every device on 'fsdp'; a single device here
    assert mesh.axis_names == dec.MESH_AXES
    assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
    batch = dec.example_batch("tiny")
    with jax.set_mesh(mesh), nn.logical_axis_rules(dec.LOGICAL_AXIS_RULES):
        state = dec.create_train_state("tiny", seed=0)
        specs = dec.param_partition_specs("tiny")

        @fast_jit
        def loss_and_grads(params):
            def loss(p):
                logits = state.apply_fn(
                    {"params": p}, batch["inputs"], train=True, rngs={"dropout": jax.random.key(0)}
                )
                return dec.loss_fn(logits, batch)

            return jax.value_and_grad(loss)(params)

        loss, grads = loss_and_grads(state.params)
    assert bool(jnp.isfinite(loss))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
    kernel = state.params["layers"]["mlp"]["wi_0"]["kernel"]
    assert isinstance(kernel, jax.Array) and not isinstance(kernel, nn.LogicallyPartitioned)
    assert isinstance(kernel.sharding, jax.sharding.NamedSharding)
    assert kernel.sharding.mesh.axis_names == dec.MESH_AXES
    assert specs["layers"]["mlp"]["wi_0"]["kernel"] == jax.sharding.PartitionSpec("layers", "embed", "mlp")


def test_decoder_config_is_a_frozen_dataclass(dec):
    cfg = dec.CONFIGS["tiny"]["model"]
    assert dataclasses.is_dataclass(cfg)
    assert (cfg.vocab_size, cfg.emb_dim, cfg.num_heads, cfg.head_dim, cfg.mlp_dim, cfg.num_layers) == (
        64, 32, 2, 16, 64, 2,
    )  # fmt: skip
    assert dec.CONFIGS["tiny"]["seq_len"] == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_layers = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="remat_policy"):
        model = dec.make_model("tiny", remat_policy="bogus")
        model.init(jax.random.key(0), jnp.ones((1, 4), jnp.int32))
