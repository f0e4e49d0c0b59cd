"""The zoo decoder (nn.scan + nn.remat, factory methods, KV cache, N-d DenseGeneral) and rnn (a cell
scanned over time) migrate with no manual finding and reach parity, for every decoder layout.

One traced migration per model serves every config: the migrated source is config-independent
(``scan_layers`` / ``remat_policy`` stay runtime switches), only the pair is rebuilt per config.
"""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from linen2nnx import zoo
from linen2nnx.equivalence import build_sides, check
from linen2nnx.migrate import Severity
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.migrate.trace import trace_linen
from linen2nnx.spec import ModelPair, import_file, linen_ctor_kwargs, load_linen_side

LAYOUTS = [(True, "full"), (True, "minimal"), (False, "full"), (False, "minimal")]


def _migrate(name, tmp_path_factory):
    root = tmp_path_factory.mktemp(name)
    ref = zoo.spec_ref(name)
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    result = migrate_paths([zoo.model_source(name)], Mode.OUT_DIR, out_dir=root, trace=trace)
    manual = [f.format_text() for f in result.findings if f.severity is not Severity.CONVERTED]
    map_path = root / "linen2nnx-map.json"
    return name, import_file(root / "model.py"), map_path, manual


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    return _migrate("decoder", tmp_path_factory)


@pytest.fixture(scope="module")
def rnn(tmp_path_factory):
    return _migrate("rnn", tmp_path_factory)


def pair_for(name, module, map_path, **config_changes):
    side = load_linen_side(zoo.spec_ref(name))
    if config_changes:
        cfg = dataclasses.replace(side.model.config, **config_changes)
        side.model = type(side.model)(cfg)
    nnx_class = getattr(module, type(side.model).__name__)
    kwargs = linen_ctor_kwargs(side.model)
    extra = {"in_features": side.batch["x"].shape[-1]} if name == "rnn" else {}
    return ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_class(**kwargs, **extra, rngs=rngs), name_map=map_path
    )


@pytest.mark.parametrize("model", ["decoder", "rnn"])
def test_zoo_model_migrates_with_no_manual_finding(model, request):
    _, _, _, manual = request.getfixturevalue(model)
    assert manual == []


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: f"scan={lay[0]}-remat={lay[1]}")
def test_decoder_layouts_have_parity(decoder, layout):
    name, module, map_path, _ = decoder
    scan_layers, policy = layout
    result = check(pair_for(name, module, map_path, scan_layers=scan_layers, remat_policy=policy))
    assert result.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in result.failures]
    grads = result.by_check()["grad"]
    assert len(grads) == (12 if scan_layers else 21)  # stacked leaves vs layers_0 / layers_1


def test_rnn_has_parity(rnn):
    name, module, map_path, _ = rnn
    result = check(pair_for(name, module, map_path))
    assert result.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in result.failures]


@pytest.mark.parametrize("scan_layers", [True, False])
def test_decoder_kv_cache_decoding_matches_linen(decoder, scan_layers):
    """Token-by-token decoding through the migrated cache (created on the first decode call, stacked
    under nnx.scan) equals Linen's decoding through its ``cache`` collection."""
    name, module, map_path, _ = decoder
    pair = pair_for(name, module, map_path, scan_layers=scan_layers, dropout_rate=0.0)
    sides = build_sides(pair)
    linen_model, model = pair.linen.model, sides.nnx_model
    tokens = jnp.asarray(pair.linen.batch["inputs"])[:2, :6]
    cache = jax.tree.map(jnp.zeros_like, linen_model.init(jax.random.key(0), tokens, decode=True)["cache"])
    want = []
    for t in range(tokens.shape[1]):
        out, mutated = linen_model.apply(
            {"params": sides.linen_variables["params"], "cache": cache},
            tokens[:, t : t + 1],
            decode=True,
            mutable=["cache"],
        )
        cache = mutated["cache"]
        want.append(out)
    model(tokens, decode=True)  # Linen's init call with decode=True: creates the cache
    for _, var in nnx.to_flat_state(nnx.state(model, nnx.Cache)):
        var[...] = jnp.zeros_like(var[...])
    got = [model(tokens[:, t : t + 1], decode=True) for t in range(tokens.shape[1])]
    assert jnp.abs(jnp.concatenate(got, 1) - jnp.concatenate(want, 1)).max() <= 1e-5
    stacked = nnx.state(model, nnx.Cache)
    key = (
        stacked["layers"]["self_attention"]["cached_key"]
        if scan_layers
        else stacked["layers"][0]["self_attention"]["cached_key"]
    )
    assert key.shape == ((2, 2, 6, 2, 16) if scan_layers else (2, 6, 2, 16))


@pytest.mark.parametrize("model", ["decoder", "rnn"])
def test_twenty_training_steps_match(model, request):
    """Linen and the migrated model trained side by side from the same converted weights: losses,
    params and optimizer state agree step by step (fp32, loss rel <= 1e-5)."""
    name, module, map_path, _ = request.getfixturevalue(model)
    result = check(pair_for(name, module, map_path), steps=20, divergence=False, long_batch=False)
    training = result.training
    assert training is not None and training.steps == 20 and training.passed, result.failure_table()
    assert max(abs(a - b) / abs(a) for a, b in zip(training.linen_loss, training.nnx_loss)) <= 1e-5
