"""Mixed precision: a float32 model with a bfloat16 layer is compared at bfloat16's tolerance (its
float32 gradients went through bfloat16 arithmetic, so a faithful migration differs from Linen by a
few bfloat16 ulps), and a ``dtype=`` the migration dropped is still a failure: the precision check
compares each module's dot operand dtypes, which the numbers at that tolerance no longer could."""

import jax.numpy as jnp
import numpy as np
import optax

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate import migrate_source
from linen2nnx.spec import LinenSide, ModelPair, import_file

SOURCE = """\
import jax.numpy as jnp
from flax import linen as nn


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(16, dtype=jnp.bfloat16)(x)
        x = nn.LayerNorm()(x)
        return nn.Dense(4)(x)
"""


def _migrated_pair(tmp_path, source: str, cls: str, x, change=lambda s: s, **side):
    """Linen ``source`` and its migration, changed by ``change`` (a slip to catch), as a pair on the
    example batch ``x`` (the NNX class built for its width): (migration result, pair, perturbed
    init variables)."""
    result = migrate_source(source, f"{cls.lower()}.py", module_name=cls.lower())
    nnx_source = change(result.output)
    nnx_file = tmp_path / (
        "nnx_changed.py" if nnx_source != result.output else "nnx_src.py"
    )  # import_file caches by path
    (tmp_path / "linen_src.py").write_text(source)
    nnx_file.write_text(nnx_source)
    linen_mod, nnx_mod = import_file(tmp_path / "linen_src.py"), import_file(nnx_file)
    side = {"loss": lambda out, batch: jnp.mean(out**2), "train_kwargs": {}, "eval_kwargs": {}, **side}
    linen = LinenSide(model=getattr(linen_mod, cls)(), batch={"x": x}, **side)
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    nnx_cls = getattr(nnx_mod, cls)
    pair = ModelPair(
        linen=linen, nnx_factory=lambda rngs: nnx_cls(in_features=x.shape[-1], rngs=rngs), name_map=map_path
    )
    return result, pair, perturbed(linen.init_variables())


def _pair(tmp_path, nnx_source: str):
    x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    change = (lambda s: nnx_source) if nnx_source else (lambda s: s)
    return _migrated_pair(tmp_path, SOURCE, "Net", x, change, optimizer=optax.adam(1e-2))


def test_a_faithful_mixed_precision_migration_passes_at_bfloat16_tolerance(tmp_path):
    result, pair, variables = _pair(tmp_path, "")
    assert "dtype=jnp.bfloat16" in result.output
    parity = check(pair, variables, steps=2)
    assert parity.tolerances.compute_dtype == "bfloat16"
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]


def test_a_dropped_bfloat16_dtype_still_fails(tmp_path):
    result, _, _ = _pair(tmp_path, "")
    dropped = result.output.replace(", dtype=jnp.bfloat16", "")
    assert dropped != result.output
    _, pair, variables = _pair(tmp_path, dropped)
    parity = check(pair, variables)
    assert not parity.passed
    failed = {(lf.check, lf.path) for lf in parity.failures}
    assert ("precision", "dense_0") in failed, failed


TWO_HEADS = """\
import jax.numpy as jnp
from flax import linen as nn


class Heads(nn.Module):
    @nn.compact
    def __call__(self, x):
        main = nn.Dense(4)(nn.gelu(nn.Dense(8)(x), approximate=False))
        aux = nn.Dense(2, dtype=jnp.bfloat16)(x)
        return main, aux.astype(jnp.float32)
"""


def test_a_bfloat16_head_does_not_loosen_a_float32_one(tmp_path):
    """The float32 head beside a bfloat16 one keeps float32's tolerance: its gelu made approximate
    (2e-4 off) fails forward/*:out[0], where the bfloat16 base (2e-2) let it pass before."""
    from linen2nnx.equivalence.precision import linen_compute_dtype

    def approximate(source):
        changed = source.replace("approximate=False", "approximate=True")
        assert changed != source
        return changed

    x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    loss = lambda out, b: jnp.mean(out[0] ** 2)  # noqa: E731
    _, pair, variables = _migrated_pair(tmp_path, TWO_HEADS, "Heads", x, approximate, loss=loss)
    assert linen_compute_dtype(pair, variables) == ("bfloat16", {"out[0]"})
    parity = check(pair, variables)
    failed = {(lf.check.split("@")[0], lf.path) for lf in parity.failures}
    assert ("forward/eval", "out[0]") in failed and ("forward/eval", "out[1]") not in failed


SOWN_AUX = """\
import jax
import jax.numpy as jnp
from flax import linen as nn


class Experts(nn.Module):
    @nn.compact
    def __call__(self, x):
        probs = jax.nn.softmax(nn.Dense(3)(x))
        self.sow("intermediates", "aux", jnp.sum(jnp.mean(probs, axis=0) ** 2))
        return nn.Dense(4, dtype=jnp.bfloat16)(x).astype(jnp.float32) * probs[:, :1]
"""


def _sown_pair(tmp_path, change=lambda s: s):
    x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    return _migrated_pair(tmp_path, SOWN_AUX, "Experts", x, change)[1:]


def test_a_float32_sown_loss_beside_bfloat16_layers_keeps_float32_tolerance(tmp_path):
    """An auxiliary loss computed in float32 is judged at float32 though the experts compute in
    bfloat16: 2% off passes at bfloat16's base (2e-2 x (1 + |aux|)), and must fail."""
    pair, variables = _sown_pair(tmp_path)
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    assert parity.tolerances.compute_dtype == "bfloat16"
    assert parity.tolerances.exact_outputs == {"aux/0"}  # the output went through bfloat16

    def scaled(source):
        changed = source.replace("** 2))", "** 2) * 1.02)")
        assert changed != source
        return changed

    pair, variables = _sown_pair(tmp_path, scaled)
    failed = {(lf.check.split("@")[0], lf.path) for lf in check(pair, variables).failures}
    assert ("intermediates", "aux/0") in failed, failed


PRECISE = """\
import jax
import jax.numpy as jnp
from flax import linen as nn

HIGHEST = jax.lax.Precision.HIGHEST


class Mix(nn.Module):
    @nn.compact
    def __call__(self, x):
        w = self.param("w", nn.initializers.normal(), (x.shape[-1], 4))
        v = self.param("v", nn.initializers.normal(), (4, 4))
        h = jnp.einsum("bd,df->bf", x, w, precision=HIGHEST)
        h = jnp.einsum("bf,fg->bg", h, v, precision=HIGHEST)
        return jnp.einsum("bg,gh->bh", h, v)
"""


def test_one_of_two_highest_precision_dots_dropped_fails(tmp_path):
    """The module still runs a HIGHEST and a DEFAULT dot after the slip, so the sets agree; as many
    dots run on both sides, so their multisets are compared and differ."""

    def dropped(source):
        changed = source.replace("h, v, precision=HIGHEST)", "h, v)", 1)
        assert changed != source
        return changed

    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    verdicts = {}
    for name, change in (("nnx_src.py", lambda s: s), ("nnx_dropped.py", dropped)):
        _, pair, variables = _migrated_pair(tmp_path, PRECISE, "Mix", x, change)
        verdicts[name] = {(lf.check.split("@")[0], lf.path) for lf in check(pair, variables).failures}
    assert verdicts["nnx_src.py"] == set()
    assert ("precision", "") in verdicts["nnx_dropped.py"], verdicts


def test_a_scan_is_followed_inside_output_by_output():
    """A bfloat16 operation in a scan's body makes only the outputs it feeds coarse: the carry and a
    float32 per-step value computed beside it stay exact (a sown auxiliary loss in a scanned layer)."""
    import jax

    from linen2nnx.equivalence.precision import _coarse_outputs

    def body(c, x):
        aux = jnp.sum(c * x)  # float32 all along
        head = (c.astype(jnp.bfloat16) * 2).astype(jnp.float32)  # through bfloat16
        return c * 2.0, (aux, head)

    closed = jax.make_jaxpr(lambda c, xs: jax.lax.scan(body, c, xs))(jnp.ones(3), jnp.ones((4, 3)))
    jx = closed.jaxpr
    assert _coarse_outputs(jx, [False, False]) == [False, False, True]  # carry, aux, head
    assert _coarse_outputs(jx, [True, False]) == [True, True, True]  # a coarse start taints all
    jitted = jax.make_jaxpr(jax.jit(lambda c, xs: jax.lax.scan(body, c, xs)))(jnp.ones(3), jnp.ones((4, 3)))
    assert _coarse_outputs(jitted.jaxpr, [False, False]) == [False, False, True]


BY_HAND_APPLY = """\
import jax.numpy as jnp
from flax import linen as nn


class WeightNormConv(nn.Module):
    def setup(self):
        self.conv = nn.Conv(8, (3,), padding="VALID")
        self.weight_v = self.param("weight_v", nn.initializers.normal(), (8, 4, 3))
        self.weight_g = self.param("weight_g", nn.initializers.ones, (1, 1, 3))

    def __call__(self, x):
        v = self.weight_v
        kernel = v / jnp.linalg.norm(v, axis=(0, 1))[None, None, :] * self.weight_g
        return self.conv.apply({"params": {"kernel": kernel.T, "bias": jnp.zeros(8)}}, x)


class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(5)(WeightNormConv()(x))
"""


def test_a_submodule_applied_by_hand_keeps_its_dots_in_the_module_that_applies_it(tmp_path):
    """``self.conv.apply({...}, x)`` runs an unbound clone whose Linen path is the root's: its conv was
    counted at the root, where NNX (which runs the merged copy inside the block) has no dot of its own,
    so the root met the whole NNX model's dots and failed (HF wav2vec2's weight-normed conv). A dropped
    ``precision=`` there still fails, at the block."""
    x = np.random.default_rng(0).normal(size=(2, 10, 4)).astype(np.float32)
    _, pair, variables = _migrated_pair(tmp_path, BY_HAND_APPLY, "Model", x)
    parity = check(pair, variables)
    assert parity.passed, parity.failure_table()
    leaves = {lf.path for lf in parity.leaves if lf.check == "precision"}
    assert "weight_norm_conv_0" in leaves and "" not in leaves

    def highest(source: str) -> str:
        changed = source.replace('padding="VALID",', 'padding="VALID", precision=jax.lax.Precision.HIGHEST,')
        assert changed != source
        return changed.replace("import jax.numpy", "import jax\nimport jax.numpy")

    _, pair, variables = _migrated_pair(tmp_path, BY_HAND_APPLY, "Model", x, highest)
    failed = {lf.path for lf in check(pair, variables).failures if lf.check == "precision"}
    assert failed == {"weight_norm_conv_0"}
