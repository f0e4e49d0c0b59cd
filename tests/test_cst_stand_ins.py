"""The codemod's cheap stand-ins for libcst metadata give libcst's answers.

``names.NameResolver`` against ``QualifiedNameProvider``, ``cst_meta.parent_map`` against
``ParentNodeProvider``, ``cst_meta.start_positions`` and ``positions.source_positions`` against
``PositionProvider``, ``cst_meta.FastVisitor`` against ``cst.CSTVisitor`` and ``cst_meta.code_of``
(``codegen.emit``) against ``Module.code`` / ``code_for_node``: on every node of the
migration fixtures' inputs, of a few of this package's modules, of a snippet written to hit libcst's
scoping rules (also with ``\r\n`` line ends) and of one with repeated statements (also without a
final line end).
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst._nodes.base import CSTCodegenError
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, QualifiedNameProvider

from linen2nnx.migrate.cst_meta import (
    FastVisitor,
    code_of,
    parent_map,
    parse_module,
    start_positions,
    syntax_parent_map,
)
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.positions import source_positions

ROOT = Path(__file__).resolve().parents[1]

SCOPING = """
import flax.linen
import jax.numpy as jnp, numpy as np
from flax import linen as nn, struct
from functools import partial
from . import sibling
from ..pkg.blocks import Block as B

nn_alias = nn
Dense = nn.Dense


class Model(nn.Module):
    act = nn.relu
    partial = None

    @nn.compact
    def __call__(self, x, nn=None, act=act):
        y = flax.linen.Dense(3)(x)
        f = partial(jnp.sum, axis=0)
        z = [nn.relu(v) for v in x if v]
        try:
            pass
        except ValueError as err:
            raise RuntimeError() from err
        if (w := np.ones(3)) is not None:
            print(w)
        g = lambda q, nn=nn: nn.gelu(q)
        return B(y, f, z, g, sibling.thing, Dense, nn_alias.Dense, act, self.act, super().__init__)


def outer():
    global Dense
    Dense = 1
    shadow = partial
    partial = 2
    jnp = jnp

    def inner():
        nonlocal shadow
        shadow = nn.Dense
        return shadow

    return inner, {k: v for k, v in enumerate(Dense)}, (x[0].y for x in range(3))


x = nn.Dense if True else nn.Conv
del x
for i, (a, *b) in enumerate([]):
    a.b[i] = b
with open("f") as (fh, gh):
    print(fh.read(), gh)
"""

# identical statements, so that finding a statement's text in the source is ambiguous
REPEATED = """# header comment

def helper(x):
    return x


class A(nn.Module):
    def __call__(self, x):
        return nn.relu(x)


def helper(x):
    return x


class A(nn.Module):
    def __call__(self, x):
        return nn.relu(x)
"""


# every kind of block a statement can sit in, decorators, f-strings and non-ASCII names
BLOCKS = """import a.b.c as d
from x.y import (z)


@dec.one
@dec.two(f(1)(2), k=g.h)
class C(Base, metaclass=m.M):
    x = y.z; w = v.u(t.s)
    if a.b(1): c.d()
    elif e.f(2):
        g.h(3)
    elif i.j:
        pass
    else:
        k.l(4)
    for m in n.o(5):
        p.q()
    else:
        r.s()
    while t.u:
        break
    else:
        v.w()
    try:
        x.y()
    except (E.F, G) as err:
        err.z()
    except H.I:
        pass
    else:
        j.k()
    finally:
        l.m()
    with n.o() as p, q.r(s.t):
        u.v(f"{w.x(1)} {y.z}")
    match a.b:
        case c.D(e=f.g):
            h.i()
        case [j.k, *rest] if rest.l():
            m.n()

    async def f(self, a=b.c(), *, d: e.F = g.h) -> i.J:
        return (k.l)(m.n)((o).p, q=lambda r: r.s(t.u))

    def g(self): return self.x.y(é.ü(1), "ß".join(z.w))
"""


def _sources() -> list[tuple[str, str]]:
    files = [
        *sorted((ROOT / "tests" / "fixtures" / "migrate").glob("*/*_in.py")),
        *(ROOT / "linen2nnx" / "migrate" / name for name in ("module_rewrite.py", "planning.py", "names.py")),
    ]
    return [
        ("SCOPING", SCOPING),
        ("CRLF", SCOPING.replace("\n", "\r\n")),
        ("REPEATED", REPEATED),
        ("BLOCKS", BLOCKS),
        ("NO_FINAL_NEWLINE", REPEATED.rstrip()),
    ] + [(str(f.relative_to(ROOT)), f.read_text()) for f in files]


SOURCES = _sources()


@pytest.fixture(params=SOURCES, ids=[name for name, _ in SOURCES], scope="module")
def wrapper(request: pytest.FixtureRequest) -> MetadataWrapper:
    return MetadataWrapper(cst.parse_module(request.param[1]), unsafe_skip_copy=True)


def test_qualified_names(wrapper: MetadataWrapper) -> None:
    resolver = NameResolver(wrapper.module)
    for node, names in wrapper.resolve(QualifiedNameProvider).items():
        if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
            continue  # string annotations: not parsed (see names.py)
        names = names() if callable(names) else names
        assert resolver.qualnames(node) == {q.name for q in names}, cst.Module([]).code_for_node(node)


def test_parents(wrapper: MetadataWrapper) -> None:
    expected = wrapper.resolve(ParentNodeProvider)
    parents = parent_map(wrapper.module)
    assert parents.keys() == expected.keys()
    assert all(parents[node] is parent for node, parent in expected.items())


def test_start_positions(wrapper: MetadataWrapper) -> None:
    expected = wrapper.resolve(PositionProvider)
    nodes = list(expected)
    for wanted in (nodes, nodes[::37]):
        starts = start_positions(wrapper.module, wanted)
        assert starts == {node: (expected[node].start.line, expected[node].start.column) for node in wanted}
    assert start_positions(wrapper.module, [cst.Name("elsewhere")]) == {}


def test_source_positions(wrapper: MetadataWrapper) -> None:
    """From the code of the module-level statements that hold the nodes: the same starts, for every
    node, for a sparse few (statements skipped between them) and for one repeated statement's nodes."""
    expected = wrapper.resolve(PositionProvider)
    module = wrapper.module
    source = module.code
    parents = syntax_parent_map(module)
    nodes = [node for node in expected if node in parents]
    for wanted in (nodes, nodes[::37], nodes[-5:], [n for n in nodes if isinstance(n, cst.Call)]):
        assert source_positions(module, source, wanted, parents) == {
            node: (expected[node].start.line, expected[node].start.column) for node in wanted
        }
    assert source_positions(module, source, [cst.Name("elsewhere")], parents) == {}


def test_code_of(wrapper: MetadataWrapper) -> None:
    """The code of the module and of every node, with the module's indent and line end, as libcst's."""
    module = wrapper.module
    assert code_of(module) == module.code
    for node in parent_map(module):
        try:
            expected = module.code_for_node(node)
        except CSTCodegenError:  # a node whose code its parent decides (an annotation's `:`)
            continue
        assert code_of(node, module) == expected


def test_parse_module(wrapper: MetadataWrapper) -> None:
    """The parse without libcst's node checks builds the same tree, and the checks are back after."""
    assert parse_module(wrapper.module.code).deep_equals(wrapper.module)
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")


def test_fast_visitor_order(wrapper: MetadataWrapper) -> None:
    events: list[tuple[str, cst.CSTNode]] = []

    class Libcst(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            events.append(("visit", node))
            return True

        def on_leave(self, node: cst.CSTNode) -> None:
            events.append(("leave", node))

    class Fast(FastVisitor):
        def walk(self, node: cst.CSTNode) -> None:
            fast.append(("visit", node))
            super().walk(node)
            fast.append(("leave", node))

    fast: list[tuple[str, cst.CSTNode]] = []
    wrapper.module.visit(Libcst())
    Fast().walk(wrapper.module)
    seen = {id(node) for _, node in fast}
    assert [(e, id(n)) for e, n in events if id(n) in seen] == [(e, id(n)) for e, n in fast]
    skipped = {type(n).__name__ for _, n in events if id(n) not in seen}
    assert not skipped & {"Name", "Attribute", "Call", "Arg", "Param", "SimpleStatementLine", "Expr"}
