"""Which module-level statements the module pass may leave unvisited (``NameResolver.plain_statements``)."""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.engine import migrate_source
from linen2nnx.migrate.names import NameResolver

SOURCE = '''"""Doc."""
import jax.numpy as jnp
import flax.linen as nn

SCALE = 2.0


def plain(x):
    return jnp.tanh(x) / 3


def calls_plain(x):
    return plain(x) + 1


def reads_linen(x):
    return nn.relu(x)


def calls_linen(x):
    return reads_linen(x)


def reads_constant(x):
    return x * SCALE


def local_import(x):
    from flax import linen

    return linen.relu(x)


class Block(nn.Module):
    def __call__(self, x):
        return plain(x)


def builds_block():
    return Block()
'''


def _plain_names(source: str, also_read: tuple[str, ...] = ()) -> set[str]:
    module = cst.parse_module(source)
    plain = NameResolver(module).plain_statements(lambda q: q.startswith("flax"), also_read)
    names = set()
    for stmt in module.body:
        if stmt in plain:
            names.add(
                stmt.name.value if isinstance(stmt, cst.FunctionDef) else cst.Module([stmt]).code.strip()
            )
    return names


def test_plain_statements_are_those_without_a_linen_name() -> None:
    assert _plain_names(SOURCE) == {'"""Doc."""', "SCALE = 2.0", "plain", "calls_plain"}


def test_a_name_counted_as_linen_keeps_its_readers() -> None:
    assert _plain_names(SOURCE, also_read=("plain",)) == {'"""Doc."""', "SCALE = 2.0", "plain"}


def test_a_module_level_relu_is_still_repointed() -> None:
    source = SOURCE + "\n\nact = nn.relu\n"
    result = migrate_source(source, "m.py")
    assert "act = nnx.relu" in result.output
    assert "return jnp.tanh(x) / 3" in result.output
