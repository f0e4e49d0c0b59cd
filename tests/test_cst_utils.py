"""Small node helpers of the codemod: what they build, and how it reads."""

import libcst as cst
import pytest

from linen2nnx.migrate.cst_utils import kwarg, leaves_function, negated, opposite, subscriptable, with_args


# ---- with_args: added keywords keep the call's layout --------------------------------------------
def _added(source: str, drop: str = "") -> str:
    call = cst.parse_expression(source)
    kept = [a for a in call.args if not (a.keyword is not None and a.keyword.value == drop)]
    return cst.Module([]).code_for_node(with_args(call, kept, [kwarg("rngs", cst.Name("rngs"))]))


def test_a_call_written_one_argument_per_line_gets_its_keywords_on_lines_of_their_own():
    source = "Block(\n    width=4,\n    name='b',\n    dtype=None,\n)"
    assert _added(source, drop="name") == "Block(\n    width=4,\n    dtype=None,\n    rngs=rngs,\n)"
    no_trailing = "Block(\n    width=4,\n    dtype=None\n)"
    assert _added(no_trailing) == "Block(\n    width=4,\n    dtype=None,\n    rngs=rngs\n)"


def test_a_one_line_call_stays_on_one_line():
    assert _added("Block(4, name='b')", drop="name") == "Block(4, rngs=rngs)"
    assert _added("Block()") == "Block(rngs=rngs)"


def test_a_rebuilt_layer_call_keeps_one_argument_per_line():
    from linen2nnx.migrate import migrate_source

    src = (
        "import flax.linen as nn\n\n\nclass Head(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
        "        return nn.Dense(\n            features=3,\n            use_bias=False,\n        )(x)\n"
    )
    out = migrate_source(src, "head.py").output
    assert (
        "nnx.Linear(\n            in_features,\n            3,\n            use_bias=False,\n"
        "            rngs=rngs,\n        )" in out
    )


@pytest.mark.parametrize(
    ("test", "expected"),
    [
        ("not self.use_head", "self.use_head"),
        ("not (self.a and self.b)", "self.a and self.b"),
        ("self.small", "not (self.small)"),
        ("not self.a or self.b", "not (not self.a or self.b)"),  # the `not` is no outer operator
        ("(not self.a)", "not ((not self.a))"),  # bracketed: left as a whole
    ],
)
def test_a_negated_test_drops_an_outer_not(test, expected):
    assert negated(test) == expected
    assert opposite(test, expected) and opposite(expected, test)


def test_tests_that_are_not_each_others_negation():
    assert not opposite("self.a", "self.b")
    assert not opposite("self.a", "self.a")


@pytest.mark.parametrize(
    ("source", "leaves"),
    [
        ("if c:\n    return x\n", (True, False)),
        ("if c:\n    x = 1\nelse:\n    raise ValueError\n", (False, True)),
        ("if c: return x\n", (True, False)),  # a statement suite on one line
        ("if c:\n    x = 1\nelif d:\n    return x\n", (False, False)),  # an elif is no branch that ends so
        ("for i in y:\n    if c:\n        break\n", None),  # break / continue reach the loop's next turn
    ],
)
def test_a_branch_leaves_the_function_by_return_or_raise(source, leaves):
    stmt = cst.parse_statement(source)
    if leaves is None:
        inner = stmt.body.body[0]
        assert not leaves_function(inner.body)
        return
    assert (leaves_function(stmt.body), leaves_function(stmt.orelse)) == leaves


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("self.widths", "self.widths"),
        ("self.a + self.b", "(self.a + self.b)"),
        ("(4,) * self.depth", "((4,) * self.depth)"),
        ("(self.a + self.b)", "(self.a + self.b)"),  # bracketed already
        ("range(self.n)", "range(self.n)"),
        ("self.a if self.c else self.b", "(self.a if self.c else self.b)"),
        ("[1, 2]", "[1, 2]"),
    ],
)
def test_subscriptable(source, expected):
    assert subscriptable(source) == expected
