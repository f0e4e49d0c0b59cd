"""Bindings no statement reads before the name is bound again (rebound_locals.dead_bindings)."""

import libcst as cst

from linen2nnx.migrate.cst_utils import assigned_names
from linen2nnx.migrate.rebound_locals import dead_bindings


def _dead(src: str) -> tuple[dict[str, int], list[tuple[str, int]]]:
    fn = cst.parse_module(src).body[0]
    assert isinstance(fn, cst.FunctionDef)
    counts, dead = dead_bindings(fn, assigned_names(fn))
    lines = {id(stmt): i for i, stmt in enumerate(fn.body.body)}
    return counts, sorted((name, lines[stmt]) for name, stmt in dead)


def test_an_unread_unpacking_is_dead_and_left_out_of_the_count():
    counts, dead = _dead(
        "def f(self, x):\n"
        "    n, h, w, c = x.shape\n"
        "    g = h // 2\n"
        "    x = conv(x)\n"
        "    n, h, w, c = x.shape\n"
        "    return param((1, 1, c)), g\n"
    )
    assert dead == [("c", 0)]  # only the unpacking's last name is what a replay binds
    assert counts["c"] == 1


def test_a_binding_read_before_the_next_one_stays():
    counts, dead = _dead(
        "def f(self, x):\n"
        "    c = x.shape[-1]\n"
        "    x = dense(c)(x)\n"
        "    c = x.shape[-1]\n"
        "    return param((c,))\n"
    )
    assert dead == []
    assert counts["c"] == 2


def test_a_rebinding_that_reads_the_name_keeps_the_earlier_one():
    _, dead = _dead("def f(self, x):\n    c = self.n\n    c = c * 2\n    return c\n")
    assert dead == []


def test_a_binding_inside_a_block_is_not_followed():
    counts, dead = _dead(
        "def f(self, x):\n"
        "    c = x.shape[-1]\n"
        "    if self.wide:\n"
        "        c = 2 * self.n\n"
        "    c = self.n\n"
        "    return c\n"
    )
    assert dead == []
    assert counts["c"] == 3


def test_a_binding_of_config_nothing_reads_is_dead_too():
    """``c = self.a`` unread before ``c = self.b``: dead, and the static-locals pass is told, so
    ``__init__`` replays ``c = self.b`` only (fixture L2N-SHAPE-002/rebound_shape_unpack, ConfigFirst)."""
    counts, dead = _dead("def f(self, x):\n    c = self.a\n    x = dense(x)\n    c = self.b\n    return c\n")
    assert dead == [("c", 0)]
    assert counts["c"] == 1


def test_a_binding_every_branch_of_the_next_if_binds_again_is_dead():
    counts, dead = _dead(
        "def f(self, x):\n"
        "    n, h, w, c = x.shape\n"
        "    x = conv(x)\n"
        "    if self.tokens:\n"
        "        n, h, w, c = x.shape\n"
        "        x = x + param((1, 1, c))\n"
        "    else:\n"
        "        x = x.mean(1)\n"
        "    return x\n"
    )
    assert dead == [("c", 0)]
    assert counts["c"] == 1


def test_a_binding_read_after_the_if_stays():
    counts, dead = _dead(
        "def f(self, x):\n"
        "    n, h, w, c = x.shape\n"
        "    x = conv(x)\n"
        "    if self.tokens:\n"
        "        n, h, w, c = x.shape\n"
        "    return param((c,))\n"  # either binding reaches this read
    )
    assert dead == []
    assert counts["c"] == 2


def test_a_binding_a_branch_reads_before_binding_again_stays():
    counts, dead = _dead(
        "def f(self, x):\n"
        "    n, h, w, c = x.shape\n"
        "    x = conv(x)\n"
        "    if self.tokens:\n"
        "        y = param((c,))\n"
        "        n, h, w, c = x.shape\n"
        "    return x\n"
    )
    assert dead == []
    assert counts["c"] == 2


def test_a_binding_read_in_the_if_test_stays():
    counts, dead = _dead(
        "def f(self, x):\n"
        "    c = x.shape[-1]\n"
        "    if c > 4:\n"
        "        c = x.shape[-1]\n"
        "        y = param((c,))\n"
        "    return x\n"
    )
    assert dead == []
    assert counts["c"] == 2


def test_a_last_binding_nothing_reads_after_is_dead():
    """ViT: the class token's width ``c`` comes from the patch embedding; ``n, l, c = x.shape`` after
    the token is read only for ``n``: the earlier ``c`` is the one binding (fixture
    L2N-SHAPE-002/rebound_shape_unpack, ClassToken)."""
    counts, dead = _dead(
        "def f(self, x):\n"
        "    n, h, w, c = x.shape\n"
        "    y = param((1, 1, c))\n"
        "    n, l, c = x.shape\n"
        "    return y * n\n"
    )
    assert dead == [("c", 2)]
    assert counts["c"] == 1


def test_a_last_binding_a_function_defined_before_may_read_stays():
    counts, dead = _dead(
        "def f(self, x):\n    c = self.a\n    scale = lambda v: v * c\n    c = self.b\n    return scale(x)\n"
    )
    assert dead == []
    assert counts["c"] == 2
