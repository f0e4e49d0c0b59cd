"""The hint of an unconverted ``self.is_initializing()`` / ``self.is_mutable_collection('params')``
names what its use needs in NNX (see linen2nnx/migrate/init_hints.py); the findings stay."""

from linen2nnx.migrate import migrate_source

SOURCE = """
import flax.linen as nn
from flax.linen import partitioning as nn_partitioning


class Head(nn.Module):
    @nn.compact
    def out(self, x):
        return nn.Dense(3, name="out")(x)

    @nn.compact
    def __call__(self, x, tiled: bool = False):
        y = nn.Dense(4)(x)
        if self.is_initializing() and tiled:
            _ = self.out(dummy(y))
        return y


class Stack(nn.Module):
    @nn.compact
    def __call__(self, x):
        initializing = self.is_mutable_collection("params")
        spec = 0 if initializing else nn_partitioning.ScanIn(0)
        f = nn.vmap(
            nn.Dense,
            variable_axes={"params": spec},
            split_rngs={"params": self.is_initializing()},
            metadata_params={"is_initializing": self.is_initializing()},
        )
        return f(4)(x)


class Other(nn.Module):
    @nn.compact
    def __call__(self, x):
        if self.is_initializing():
            x = nn.Dense(2)(x)
        return x


def dummy(y):
    return y
"""


def _hints() -> dict[int, str]:
    result = migrate_source(SOURCE, "hints.py")
    return {
        f.line: f.hint
        for f in result.findings
        if f.rule == "L2N-API-002"
        and ("is_initializing" in f.message or "is_mutable_collection" in f.message)
    }


def test_each_use_gets_its_hint_and_stays_a_finding():
    hints = _hints()
    assert hints[14].startswith("the branch runs self.out(...) only so that Linen's init creates")
    assert "--unsafe-fixes" in hints[14]
    assert hints[22].startswith("create the stacked layers in __init__ with nnx.vmap")  # PARAMS_SCAN_SPEC
    assert hints[27].startswith("it sets split_rngs= of a Linen lifted transform")
    assert hints[28].startswith("it sets the 'is_initializing' metadata entry")
    assert hints[36].startswith("build in __init__ what the init-only branch creates")
    assert len(hints) == 5


def test_a_branch_applying_only_what_the_class_builds_converts():
    """Without the helper call (which may create anything), the branch applies only the class's own
    method on a local: NNX's __init__ builds what it reaches, so the test reads False."""
    result = migrate_source(SOURCE.replace("self.out(dummy(y))", "self.out(y)"), "hints.py")
    assert [(f.line, f.rule) for f in result.findings if f.line == 14 and f.rule.startswith("L2N-API")] == [
        (14, "L2N-API-007")
    ]
