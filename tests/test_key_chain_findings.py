"""Split chains of PRNG keys whose keys a compact method hands to its builds, where ``__init__`` cannot
replay the chain: each build reading such a key keeps L2N-MOD-004, and the finding says why (the
chains it replays: test_key_replay.py).
"""

import pytest
from fixture_parity import build

from linen2nnx.migrate import migrate_source

REFUSED = {
    "Noisy": "key is read otherwise than as a constructor argument",
    "Gated": "split or read inside an `if` block",
    "Early": "the loop around it may `break` or `continue`",
    "Configured": "split or read inside an `if` block",
}


def test_chains_init_cannot_replay_keep_the_finding_with_the_reason(tmp_path):
    """A key also drawn on at call time, a split under a call-time test, a loop that may break before
    a split, a split under a config test: each build reading such a key keeps L2N-MOD-004, naming why."""
    _, _, result, _ = build("key_split_chain", tmp_path)
    source = result.source.splitlines()
    for cls, why in REFUSED.items():
        start = next(i for i, line in enumerate(source) if line.startswith(f"class {cls}("))
        end = next(
            (i for i, line in enumerate(source) if i > start and line.startswith("class ")), len(source)
        )
        found = [
            f.message
            for f in result.findings
            if f.rule == "L2N-MOD-004" and start < f.line <= end and "split chain" in f.message
        ]
        assert found and all(why in m for m in found), (cls, found)


def test_a_key_a_build_init_does_not_make_cannot_take_is_reported():
    """A chain whose key reaches a build __init__ does not make (Scaled built in nested loops after
    another loop of Scaleds is not hoisted): that build is reported and the call keeps the chain, never
    a build reading the chain's last key in __init__."""
    src = """
import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import random


class Scaled(nn.Module):
    features: int
    key: jax.Array = None

    @nn.compact
    def __call__(self, x):
        w0 = random.normal(self.key, (x.shape[-1], self.features))
        return x @ self.param("w", lambda *_: w0)


class Tower(nn.Module):
    seed: int = 0

    @nn.compact
    def __call__(self, x):
        rng = random.PRNGKey(self.seed)
        for i in range(2):
            rng, key = random.split(rng)
            x = Scaled(3, key=key)(x)
        for s in range(2):
            for j in range(2):
                rng, key = random.split(rng)
                x = x + Scaled(3, key=key)(x)
        return x
"""
    result = migrate_source(src, "tower.py")
    taken = [f for f in result.findings if "read where the build cannot take it" in f.message]
    assert [f.line for f in taken] == [30]
    call = result.output.split("def __call__")[-1]
    assert "rng, key = random.split(rng)" in call


_LAYER = """
import contextlib
import functools
from typing import Any

from flax import linen as nn
from jax import random


class S(nn.Module):
    key: Any = None

    @nn.compact
    def __call__(self, x):
        w0 = random.normal(self.key, (3, 3))
        return x @ self.param("w", lambda *_: w0)


class Net(nn.Module):
    key: Any = None
"""

_BODIES = {
    "is an argument of __call__, a call-time value": (
        "    @nn.compact\n    def __call__(self, x, rng):\n"
        "        for i in range(2):\n            rng, k = random.split(rng)\n            x = S(key=k)(x)\n"
    ),
    "calls self.make_rng, not a jax.random key function": (
        "    @nn.compact\n    def __call__(self, x):\n        rng = self.make_rng('params')\n"
        "        for i in range(2):\n            rng, k = random.split(rng)\n            x = S(key=k)(x)\n"
    ),
    "bound otherwise than by a plain assignment": (
        "    @nn.compact\n    def __call__(self, x):\n        rng = self.key\n"
        "        for i in range(2):\n            rng, k = random.split(rng)\n            x = S(key=k)(x)\n"
        "        if (rng := random.split(rng)[0]) is not None:\n            x = x + 1\n"
    ),
    "split or read inside a `with` block": (
        "    @nn.compact\n    def __call__(self, x):\n        rng = self.key\n"
        "        for i in range(2):\n            rng, k = random.split(rng)\n"
        "            with contextlib.nullcontext():\n                x = S(key=k)(x)\n"
    ),
    "split or read inside a `def` block": (
        "    @nn.compact\n    def __call__(self, x):\n        rng = self.key\n"
        "        def noise(y):\n            return y + random.normal(rng, y.shape)\n"
        "        for i in range(2):\n            rng, k = random.split(rng)\n            x = S(key=k)(x)\n"
        "        return noise(x)\n"
    ),
    "its method is lifted": (
        "    @functools.partial(nn.remat)\n    @nn.compact\n    def __call__(self, x):\n        rng = self.key\n"
        "        for i in range(2):\n            rng, k = random.split(rng)\n            x = S(key=k)(x)\n"
    ),
}


@pytest.mark.parametrize("why", sorted(_BODIES))
def test_a_chain_init_cannot_replay_says_why(why):
    """A chain that starts from a call argument or ``make_rng``, is bound by a walrus too, is read under
    a ``with`` or in a nested function, or runs in a lifted method: the build keeps L2N-MOD-004, with
    the reason, and the call keeps the chain."""
    result = migrate_source(_LAYER + _BODIES[why] + "        return x\n", "net.py")
    found = [f.message for f in result.findings if f.rule == "L2N-MOD-004" and "split chain" in f.message]
    assert found and all(why in m for m in found), result.findings
    assert "random.split(rng)" in result.output.split("class Net")[-1].split("def __call__")[-1]
