"""Which tests for a Linen metadata box stay as exact API-005 notes (they only take values out of the
box) and which keep their manual finding (linen2nnx/migrate/box_tests.py)."""

import pytest

from linen2nnx.migrate import migrate_source

HEAD = "import flax.linen as nn\nimport jax\n\n\n"

KEPT = {
    "predicate": """def unbox(tree):
    def is_box(x):
        return isinstance(x, nn.spmd.LogicallyPartitioned)

    def value_of(x):
        return x.value if is_box(x) else x

    return jax.tree.map(value_of, tree, is_leaf=is_box)
""",
    "lambdas": """def unbox(tree, scale):
    return scale * jax.tree_util.tree_map(
        lambda x: x.unbox() if isinstance(x, nn.Partitioned) else x,
        tree,
        is_leaf=lambda x: isinstance(x, nn.Partitioned),
    )
""",
}

MANUAL = {
    "predicate read elsewhere": """def names(tree):
    def is_box(x):
        return isinstance(x, nn.LogicallyPartitioned)

    return [is_box(x) for x in jax.tree.leaves(tree, is_leaf=is_box)]
""",
    "map reads the names": """def names(tree):
    return jax.tree.map(lambda x: x.names, tree, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
""",
    "else branch is another value": """def values(x):
    return x.value if isinstance(x, nn.LogicallyPartitioned) else x * 2
""",
    "function bound twice": """from helpers import strip


def values(tree):
    return jax.tree.map(strip, tree, is_leaf=lambda v: isinstance(v, nn.LogicallyPartitioned))


def strip(x):
    return x.value if isinstance(x, nn.LogicallyPartitioned) else x
""",
}


def _box_findings(body: str) -> list[tuple[int, str]]:
    result = migrate_source(HEAD + body, "boxes.py")
    return [(f.line, f.rule) for f in result.findings if "Partitioned" in f.message]


@pytest.mark.parametrize("case", sorted(KEPT))
def test_tests_that_only_unbox_stay_as_exact_notes(case):
    found = _box_findings(KEPT[case])
    assert found and all(rule == "L2N-API-005" for _, rule in found), found


@pytest.mark.parametrize("case", sorted(MANUAL))
def test_tests_that_decide_more_keep_their_finding(case):
    found = _box_findings(MANUAL[case])
    assert any(rule == "L2N-API-002" for _, rule in found), found


def test_only_a_tree_map_that_unboxes_is_an_unbox_helper():
    """A one-argument function of a tree map of unbox-or-identity is removed at its calls (PART-004);
    one that also reads the box's names is not, and keeps its finding."""
    exact = """def strip(tree):
    return jax.tree_util.tree_map(
        lambda x: x.unbox() if isinstance(x, nn.spmd.LogicallyPartitioned) else x,
        tree,
        is_leaf=lambda k: isinstance(k, nn.spmd.LogicallyPartitioned),
    )


def use(tree):
    return strip(tree)
"""
    result = migrate_source(HEAD + exact, "boxes.py")
    assert "return tree\n" in result.output
    assert [f.rule for f in result.findings if f.severity.value == "manual"] == []
    loose = exact.replace("x.unbox() if isinstance", "x.names if isinstance").replace(
        "else x,", "else x.unbox(),"
    )
    result = migrate_source(HEAD + loose, "boxes.py")
    assert "return strip(tree)" in result.output
    assert "L2N-API-002" in {f.rule for f in result.findings}
