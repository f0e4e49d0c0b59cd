"""First-divergence localisation and sown values, on a tiny Linen model with a scan over layers and
hand-written NNX twins that are faithful or broken in one known place."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from linen2nnx.equivalence import check
from linen2nnx.equivalence.modmap import ModuleMap
from linen2nnx.equivalence.perturb import perturbed_init
from linen2nnx.namemap import Child, ClassEntry, NameMap
from linen2nnx.spec import LinenSide, ModelPair

D, LAYERS = 4, 3


class LAct(nn.Module):
    def __call__(self, x):
        return jnp.tanh(x)


class LBlock(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        h = LAct(name="act")(nn.Dense(D, name="up")(x))
        self.sow("intermediates", "h_mean", jnp.mean(h))
        return nn.Dense(D, name="down")(h) + x, None


class LStack(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(D, name="embed")(x)
        blocks = nn.scan(
            LBlock,
            variable_axes={"params": 0, "intermediates": 0},
            split_rngs={"params": True},
            length=LAYERS,
        )
        x, _ = blocks(name="blocks")(x, None)
        return nn.Dense(2, name="head")(x)


class Act(nnx.Module):
    def __init__(self, fn=jnp.tanh):
        self.fn = fn

    def __call__(self, x):
        return self.fn(x)


class Block(nnx.Module):
    def __init__(self, rngs, *, act=jnp.tanh, residual=True, sow=True):
        self.up = nnx.Linear(D, D, rngs=rngs)
        self.act = Act(act)
        self.down = nnx.Linear(D, D, rngs=rngs)
        self.residual, self.do_sow = residual, sow

    def __call__(self, x):
        h = self.act(self.up(x))
        if self.do_sow:
            self.sow(nnx.Intermediate, "h_mean", jnp.mean(h))
        return self.down(h) + (x if self.residual else 0.0)


class RaisingHead(nnx.Linear):
    def __call__(self, x):
        raise ValueError("head exploded")


class Stack(nnx.Module):
    def __init__(self, rngs, head=nnx.Linear, reverse=False, **block):
        self.embed = nnx.Linear(3, D, rngs=rngs)
        self.blocks = nnx.vmap(lambda r: Block(r, **block))(rngs.split(LAYERS))
        self.head = head(D, 2, rngs=rngs)
        self.reverse = reverse

    def __call__(self, x, train: bool = False):
        x = self.embed(x)
        x = nnx.scan(lambda c, blk: blk(c), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry, reverse=self.reverse)(
            x, self.blocks
        )
        return self.head(x)


def _pair(**twin) -> ModelPair:
    kx, ky = jax.random.split(jax.random.key(7))
    batch = {"x": jax.random.normal(kx, (5, 3)), "y": jax.random.randint(ky, (5,), 0, 2)}
    linen = LinenSide(
        model=LStack(),
        batch=batch,
        name="stack",
        loss=lambda out, b: optax.softmax_cross_entropy_with_integer_labels(out, b["y"]).mean(),
    )
    return ModelPair(linen=linen, nnx_factory=lambda rngs: Stack(rngs, **twin))


@pytest.fixture(scope="module")
def weights():
    return perturbed_init(_pair())


def _check(weights, **twin):
    return check(_pair(**twin), weights, jit=False)


def test_faithful_twin_passes_with_sown_values_through_the_scan(weights):
    r = _check(weights)
    assert r.passed, r.failure_table()
    sown = {lf.path: lf for lf in r.leaves if lf.check == "intermediates@eager"}
    assert set(sown) == {"blocks/h_mean/0"} and sown["blocks/h_mean/0"].shape == (LAYERS,)
    assert r.divergence is None


def test_wrong_activation_inside_the_scan_is_the_culprit(weights):
    r = _check(weights, act=jax.nn.relu)
    assert not r.passed
    c = r.divergence.culprit
    assert (c.linen_path, c.nnx_path, c.kind) == ("blocks/act", "blocks/act", "LAct")
    assert c.inputs_agree and c.first_bad_call == 0 and c.calls == LAYERS
    assert all(lf.passed for lf in c.inputs) and not all(lf.passed for lf in c.outputs)
    order = [m.nnx_path for m in r.divergence.modules]
    assert order[:3] == ["embed", "blocks/up", "blocks/act"] and order[-1] == ""  # post-order: root last
    up = r.divergence.modules[1]  # every layer is compared: layer 1's input is layer 0's wrong output
    assert up.calls == LAYERS and up.first_bad_call == 1 and not up.inputs_agree


def test_bug_in_a_parent_s_own_code_names_the_parent(weights):
    r = _check(weights, residual=False)
    c = r.divergence.culprit
    assert c.nnx_path == "blocks" and c.inputs_agree
    up, down = (
        next(m for m in r.divergence.modules if m.nnx_path == p) for p in ("blocks/up", "blocks/down")
    )
    assert (
        up.first_bad_call == down.first_bad_call == 1
    )  # layer 0's children agree: the residual is the block's


def test_a_stack_scanned_in_reverse_is_blamed_on_the_stack_not_its_first_layer(weights):
    """Linen scans forward; NNX ``reverse=True`` runs layer 2 first. Layer 0's ``up`` sees the same
    input on both sides but reads another weight slice: the weights count among its inputs, so it
    is not the culprit; the stack, whose inputs (and weights: none of its own) agree, is."""
    r = _check(weights, reverse=True)
    assert not r.passed
    c = r.divergence.culprit
    assert (c.nnx_path, c.inputs_agree, c.first_bad_call) == ("blocks", True, 0)
    assert "read another layer's weights" in c.note and "reverse=" in c.note
    up = next(m for m in r.divergence.modules if m.nnx_path == "blocks/up")
    weights_in = next(lf for lf in up.inputs if lf.path == "weights")
    assert not up.inputs_agree and up.first_bad_call == 0 and not weights_in.passed
    assert "NNX invocation 0 reads the weights of Linen invocation 2" in weights_in.note
    assert all(lf.passed for lf in up.inputs if lf.path != "weights")  # the activation going in agrees


def test_weights_agree_however_they_are_laid_out():
    """The weights a call reads are compared as sorted values: a transposed kernel still agrees."""
    from linen2nnx.equivalence.capture import Call
    from linen2nnx.equivalence.divergence import compare_weights
    from linen2nnx.equivalence.tolerances import Tolerances

    k = jax.random.normal(jax.random.key(0), (3, 4))
    lin, nx = Call(("d",), "Dense", 0), Call(("d",), "Linear", 0)
    lin.add([], [], [k, jnp.ones(4)])
    nx.add([], [], [jnp.ones(4), k.T])
    (leaf,), note = compare_weights(lin, nx, 0, Tolerances.coerce(None), 0)
    assert leaf.passed and note == ""
    nx.weights[0] = nx.weights[0] * 2
    (leaf,), note = compare_weights(lin, nx, 0, Tolerances.coerce(None), 0)
    assert not leaf.passed and note == "" and leaf.note == "the module reads other weights"


def test_dropped_sow_fails_only_the_sown_values_and_names_the_module(weights):
    r = _check(weights, sow=False)
    assert {lf.check for lf in r.failures} == {"intermediates@eager", "intermediates/train@eager"}
    assert {lf.note for lf in r.failures} == {"missing on the NNX side"}
    assert (r.divergence.culprit.nnx_path, r.divergence.culprit.check) == ("blocks", "intermediates@eager")


class LRouter(nn.Module):
    """A load-balancing loss sown in train mode only, as MoE layers do."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        probs = jax.nn.softmax(nn.Dense(D, name="gate")(x))
        if train:
            self.sow("intermediates", "aux_loss", jnp.mean(probs.mean(0) ** 2) * D)
        return nn.Dense(2, name="head")(probs)


class Router(nnx.Module):
    def __init__(self, rngs, *, aux_scale=float(D)):
        self.gate = nnx.Linear(3, D, rngs=rngs)
        self.head = nnx.Linear(D, 2, rngs=rngs)
        self.aux_scale = aux_scale

    def __call__(self, x, train: bool = False):
        probs = jax.nn.softmax(self.gate(x))
        if train and self.aux_scale:
            self.sow(nnx.Intermediate, "aux_loss", jnp.mean(probs.mean(0) ** 2) * self.aux_scale)
        return self.head(probs)


@pytest.mark.parametrize("mutable", [(), ("intermediates",)])
@pytest.mark.parametrize("aux_scale, note", [(float(D), None), (0.0, "missing on the NNX side"), (1.0, "")])
def test_values_sown_in_train_mode_only_are_compared(aux_scale, note, mutable):
    """An aux loss sown under ``if train:`` never reaches the eval forward: dropped or mis-scaled, it
    passed before (the train forward's sown values were thrown away). A spec that lists
    ``intermediates`` among its mutable collections gets the same leaves: the sown values are compared
    as such, never again as a collection of variables (there, nothing on the NNX side matched them)."""
    batch = {"x": jax.random.normal(jax.random.key(1), (6, 3))}
    side = LinenSide(model=LRouter(), batch=batch, loss=lambda out, b: jnp.mean(out**2), mutable=mutable)
    r = check(ModelPair(linen=side, nnx_factory=lambda rngs: Router(rngs, aux_scale=aux_scale)), jit=False)
    sown = [lf for lf in r.leaves if lf.check.startswith("intermediates/train")]
    assert [lf.path for lf in sown] == ["aux_loss/0"]
    if note is None:
        assert r.passed, r.failure_table()
    else:
        assert {lf.check.split("@")[0] for lf in r.failures} == {"intermediates/train"} and r.failures[
            0
        ].note == note


def test_a_twin_that_raises_is_a_failed_leaf_and_the_raising_module_is_named(weights):
    r = _check(weights, head=RaisingHead)
    assert not r.passed
    notes = {lf.check: lf.note for lf in r.failures}
    assert "head exploded" in notes["forward/eval@eager"]
    c = r.divergence.culprit
    assert c.nnx_path == "head" and "head exploded" in c.note and c.inputs_agree


def test_module_map_sources():
    table = {
        ("pooler", "kernel"): ("classifier", "layers", 0, "kernel"),
        ("Dense_0", "bias"): ("dense_0", "bias"),
        ("LSTMCell_0", "if", "kernel"): ("lstm", "cell", "if_", "kernel"),
    }
    modules = [
        (),
        ("classifier",),
        ("classifier", "layers", 0),
        ("dense_0",),
        ("lstm",),
        ("lstm", "cell"),
        ("lstm", "cell", "if_"),
        ("rotary",),
        ("norm_a",),
        ("norm_b",),
    ]
    m = ModuleMap(table, modules)
    assert m(("pooler",)) == ("classifier", "layers", "0")  # from the converter's leaf table
    assert m(("Dense_0",)) == ("dense_0",)
    assert m(("LSTMCell_0", "if")) == ("lstm", "cell", "if_")
    assert m(("Rotary",)) == ("rotary",)  # no variables: the normal form
    assert m(("unknown",)) is None and m(()) == ()
    assert m.owner(("LSTMCell_0", "if", "sown_name")) == ("lstm", "cell", "if_")
    nmap = NameMap(classes={"Root": ClassEntry("Root", children={"RoPE_0": Child("rotary", "RoPE")})})
    assert ModuleMap({}, modules, nmap, "Root")(("RoPE_0",)) == ("rotary",)  # the name map wins


def test_weights_that_differ_where_the_activations_agree_name_that_module(weights):
    """A wrong checkpoint: the embedding's input agrees, the kernel it reads does not. It is the
    culprit, saying so; before, every module reading other weights counted as 'inputs differ' and the
    root (no weights of its own) was blamed for computing differently."""
    from linen2nnx.equivalence.build import build_sides
    from linen2nnx.equivalence.compare import missing
    from linen2nnx.equivalence.comparisons import make_module_map
    from linen2nnx.equivalence.divergence import localise

    pair = _pair()
    sides = build_sides(pair, weights)
    sides.nnx_model.embed.kernel[...] = sides.nnx_model.embed.kernel[...] * 1.5
    div = localise(pair, sides, [missing("forward/eval", "out", (), "")], make_module_map(pair, sides))
    c = div.culprit
    assert (c.nnx_path, c.reads_other_weights, c.inputs_agree) == ("embed", True, False)
    assert "the weights it reads differ from Linen's" in c.note
