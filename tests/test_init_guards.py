"""``self.is_initializing()`` reads False only where Linen's init can create nothing through it
(linen2nnx/migrate/init_guards.py); every other use stays a located manual finding."""

import textwrap

import pytest

from linen2nnx.migrate import migrate_source

HEADER = """\
import jax.numpy as jnp
from flax import linen as nn


class Head(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x)


class M(nn.Module):
    def setup(self):
        self.head = Head()

"""


def _rules(body: str, method: str = "__call__") -> set[str]:
    src = HEADER + textwrap.indent(
        f"def {method}(self, x, t=None):\n" + textwrap.indent(body, "    "), "    "
    )
    if method != "__call__":
        src += "\n    def __call__(self, x):\n        return self.head(x)\n"
    findings = migrate_source(src, "m.py", module_name="m").findings
    return {f.rule for f in findings if "is_initializing" in f.message}


@pytest.mark.parametrize(
    "body",
    [
        "if self.is_initializing():\n    t = jnp.ones(x.shape)\nreturn self.head(x) * t\n",
        "if len(x.shape) > 1 and self.is_initializing():\n    if t is None:\n        a, t = 1, jnp.zeros(3)\n"
        "return self.head(x)\n",
        "if self.is_initializing():\n    pass\nreturn self.head(x)\n",
        "if not self.is_initializing():\n    t = 1\nreturn self.head(x)\n",  # runs at apply only, as in NNX
        # applied only so that init creates the head's params, which NNX's __init__ builds anyway
        "if self.is_initializing():\n    _ = self.head(x)\nreturn x\n",
        "if self.is_initializing() and t is None:\n    self.head(x)\nreturn x\n",
    ],
)
def test_a_branch_that_creates_nothing_reads_false(body):
    assert _rules(body) == {"L2N-API-007"}


@pytest.mark.parametrize(
    "body",
    [
        "if self.is_initializing():\n    _ = nn.Dense(3)(x)\nreturn x\n",  # a layer no __init__ builds
        "if self.is_initializing():\n    _ = self.param('w', nn.initializers.ones, (3,))\nreturn x\n",
        "if self.is_initializing():\n    y = self.head(x)\nreturn x\n",  # its result is kept
        "if self.is_initializing():\n    self.head(make(x))\nreturn x\n",  # an input that may create
        "if self.is_initializing():\n    t = 1\nelse:\n    t = 2\nreturn self.head(x) * t\n",  # an else
        "if not self.is_initializing():\n    t = self.head(x)\nreturn x\n",  # applies a submodule
        "if self.is_initializing() or t is None:\n    t = 1\nreturn self.head(x)\n",  # or
        "flag = self.is_initializing()\nreturn self.head(x)\n",  # a value
        "def make():\n    return self.head(x)\nif self.is_initializing():\n    t = make()\nreturn x\n",  # closure
        "if self.is_initializing():\n    t = nn.Dense(3)(x)\nreturn x\n",  # a Linen layer
        "if self.is_initializing():\n    self.t = 1\nreturn self.head(x)\n",  # an attribute store
        "if self.is_initializing():\n    return x\nreturn self.head(x)\n",  # init stops early
    ],
)
def test_anything_else_stays_manual(body):
    assert _rules(body) == {"L2N-API-002"}


def test_setup_is_the_initialisation():
    rules = _rules("if self.is_initializing():\n    t = 1\n", method="extra")
    assert rules == {"L2N-API-007"}
    src = HEADER.replace(
        "        self.head = Head()\n",
        "        self.head = Head()\n        if self.is_initializing():\n            self.n = 1\n",
    )
    src += "    def __call__(self, x):\n        return self.head(x)\n"
    findings = migrate_source(src, "m.py", module_name="m").findings
    assert {f.rule for f in findings if "is_initializing" in f.message} == {"L2N-API-002"}
