"""Submodules built in loop nests (sites.LoopNest): what is replayed in __init__ (with numeric parity),
and what stays a manual finding because Linen's names or the built modules depend on call-time values."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate import migrate_source
from linen2nnx.spec import LinenSide, ModelPair, import_file

HEADER = """
from functools import partial
from typing import Any

import jax.numpy as jnp
from flax import linen as nn
"""


def migrated(body: str):
    source = textwrap.dedent(HEADER) + textwrap.dedent(body)
    return source, migrate_source(source, "m.py", module_name="m")


def manual(body: str) -> list[str]:
    _, result = migrated(body)
    return [f"{f.rule} {f.message}" for f in result.findings if f.severity.value == "manual"]


def parity(tmp_path, body: str, cls: str, shape: tuple[int, ...], **ctor):
    """Migrate, then compare the Linen class and its NNX twin (forward, loss, every gradient)."""
    source, result = migrated(body)
    assert not [f for f in result.findings if f.severity.value == "manual"], result.findings
    (tmp_path / "linen_m.py").write_text(source)
    (tmp_path / "nnx_m.py").write_text(result.output)
    linen_cls = getattr(import_file(tmp_path / "linen_m.py"), cls)
    nnx_cls = getattr(import_file(tmp_path / "nnx_m.py"), cls)
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    side = LinenSide(
        model=linen_cls(**ctor),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_cls(**ctor, in_features=shape[-1], rngs=rngs),
        name_map=map_path,
    )
    variables = perturbed(side.init_variables())
    report = check(pair, variables)
    assert report.passed, [(lf.check, lf.path, lf.max_abs) for lf in report.failures]
    assert len(report.by_check()["grad"]) == len(jax.tree.leaves(variables["params"]))
    return result.output


def test_layers_in_nested_loops_read_the_previous_elements_size(tmp_path):
    """The width reads both loop variables: each Dense after the first is sized by the one before it
    (``self.dense[-1].out_features``), and the Dense after the loops by the last one built."""
    out = parity(
        tmp_path,
        """
        class Grid(nn.Module):
            rows: tuple = (2, 1)

            @nn.compact
            def __call__(self, x):
                for i, n in enumerate(self.rows):
                    for j in range(n):
                        x = nn.relu(nn.Dense(3 + i + j)(x))
                return nn.Dense(2)(x)
        """,
        "Grid",
        (2, 5),
    )
    assert "in_features if len(self.dense) == 0 else self.dense[-1].out_features" in out
    assert "(self.dense[-1].out_features if len(self.dense) > 0 else in_features)" in out
    assert "x = nnx.relu(next(dense_iter)(x))" in out


def test_a_loop_body_local_is_replayed(tmp_path):
    """One loop, but its body computes the width: the loop is replayed with that line in __init__, and
    the line leaves __call__, which no longer reads it."""
    out = parity(
        tmp_path,
        """
        class Widening(nn.Module):
            depth: int = 3

            @nn.compact
            def __call__(self, x):
                for i in range(self.depth):
                    width = 2 ** (i + 1)
                    x = nn.Dense(width)(x)
                return x
        """,
        "Widening",
        (2, 3),
    )
    init, call = out.split("def __call__")
    assert "width = 2 ** (i + 1)" in init and "width" not in call


@pytest.mark.parametrize(
    "body, why",
    [
        (
            """
        class Named(nn.Module):
            @nn.compact
            def __call__(self, x):
                for i in range(2):
                    for j in range(2):
                        x = nn.Dense(3, name=f"dense_{i}")(x)
                return x
     """,
            "with name=",
        ),
        (
            """
        class Conditional(nn.Module):
            @nn.compact
            def __call__(self, x):
                for i in range(2):
                    for j in range(2):
                        if x.shape[0] > i + j:  # a call-time test (one on i and j alone is replayed)
                            x = nn.Dense(3)(x)
                return x
     """,
            "under a condition",
        ),
        (
            """
        class AfterOthers(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.Dense(3)(x)
                for i in range(2):
                    for j in range(2):
                        x = nn.Dense(3)(x)
                return x
     """,
            "after other Denses",
        ),
        (
            """
        class OverInputs(nn.Module):
            @nn.compact
            def __call__(self, x):
                for row in x:
                    for j in range(2):
                        x = nn.Dense(3)(x)
                return x
     """,
            "loop over call-time values",
        ),
    ],
)
def test_what_a_nest_cannot_express_stays_manual(body, why):
    findings = manual(body)
    assert any(f.startswith("L2N-MOD-004") and why in f for f in findings), findings


def test_a_mode_partial_handed_to_a_class_with_its_own_batchnorm_stays_manual():
    """nnx.view would also set the flag of the BatchNorm the block builds by itself, which Linen fixes."""
    findings = manual("""
        class Block(nn.Module):
            norm: Any

            @nn.compact
            def __call__(self, x):
                x = self.norm()(x)
                return nn.BatchNorm(use_running_average=True)(x)


        class Net(nn.Module):
            @nn.compact
            def __call__(self, x, train: bool = True):
                norm = partial(nn.BatchNorm, use_running_average=not train)
                return Block(norm=norm)(x)
        """)
    assert any(
        f.startswith("L2N-MOD-004") and "whose class builds such layers otherwise too" in f for f in findings
    ), findings


def test_a_mode_partial_handed_to_a_class_that_may_build_none_does_not_require_one():
    """The block builds its BatchNorm only under a config test: nnx.view must not fail on a block that
    has none (Linen would simply not use the flag)."""
    _, result = migrated("""
        class Block(nn.Module):
            norm: Any
            normed: bool = True

            @nn.compact
            def __call__(self, x):
                if self.normed:
                    x = self.norm()(x)
                return x


        class Net(nn.Module):
            @nn.compact
            def __call__(self, x, train: bool = True):
                norm = partial(nn.BatchNorm, use_running_average=not train)
                return Block(norm=norm, normed=False)(x)
        """)
    assert (
        "nnx.view(self.block_0, use_running_average=not train, raise_if_not_found=False)(x)" in result.output
    )
    assert not [f for f in result.findings if f.severity.value == "manual"]


def test_two_classes_in_one_nest_share_the_replayed_loops(tmp_path):
    """A Dense then a LayerNorm per step: one replay of the loops appends to both lists in call order,
    so each LayerNorm is sized by the Dense built just before it."""
    out = parity(
        tmp_path,
        """
        class Stack(nn.Module):
            groups: tuple = (1, 2)

            @nn.compact
            def __call__(self, x):
                for g, n in enumerate(self.groups):
                    for _ in range(n):
                        x = nn.LayerNorm()(nn.Dense(4 * (g + 1))(x))
                return x
        """,
        "Stack",
        (2, 3),
    )
    init = out.split("def __call__")[0]
    assert init.count("for g, n in enumerate(self.groups):") == 1
    assert "self.layer_norm.append(nnx.LayerNorm(self.dense[-1].out_features, rngs=rngs))" in init


def test_a_partial_local_builds_inside_a_nest(tmp_path):
    """``dense = partial(nn.Dense, use_bias=False)`` used in the loops: each use is an element of the
    list, built from the partial's arguments."""
    out = parity(
        tmp_path,
        """
        class Partials(nn.Module):
            rows: tuple = (2, 1)

            @nn.compact
            def __call__(self, x):
                dense = partial(nn.Dense, use_bias=False)
                for i, n in enumerate(self.rows):
                    for j in range(n):
                        x = jnp.tanh(dense(5 - j)(x))
                return x
        """,
        "Partials",
        (2, 3),
    )
    assert "self.dense.append(nnx.Linear(" in out and "use_bias=False" in out
