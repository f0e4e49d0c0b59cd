"""Rank guards read by the dataflow (rank_guards.py): which tests state a rank, and which do not."""

import libcst as cst
import pytest

from linen2nnx.migrate.rank_guards import asserted_rank, raised_unless_rank, unpacked_rank


@pytest.mark.parametrize(
    ("test", "expected"),
    [
        ("x.ndim == 3", ("x", 3)),
        ("3 == x.ndim", ("x", 3)),
        ("len(x.shape) == 4", ("x", 4)),
        ("x.ndim >= 3", None),  # a bound, not a rank
        ("x.ndim == n", None),  # not a literal
        ("x.ndim == 3 == y.ndim", None),  # chained: left alone
        ("self.x.ndim == 3", None),  # only a local or parameter
        ("x.ndim == 0", None),
    ],
)
def test_asserted_rank(test, expected):
    assert asserted_rank(cst.parse_expression(test)) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("if x.ndim != 4:\n    raise ValueError('4D')\n", ("x", 4)),
        ("if x.ndim != 4:\n    log('odd')\n    raise ValueError('4D')\n", ("x", 4)),
        ("if x.ndim != 4:\n    x = x[None]\n", None),  # handled, not refused: any rank may follow
        ("if x.ndim != 4:\n    raise ValueError('4D')\nelse:\n    pass\n", None),
        ("if x.ndim == 4:\n    raise ValueError('not 4D')\n", None),
    ],
)
def test_raised_unless_rank(source, expected):
    node = cst.parse_statement(source)
    assert isinstance(node, cst.If)
    assert raised_unless_rank(node) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("n, h, w, c = x.shape", ("x", 4)),
        ("[b, l] = x.shape", ("x", 2)),
        ("n, *rest = x.shape", None),  # starred: any rank of at least one
        ("x, c = x.shape", None),  # x bound anew by the unpacking
        ("n, c = self.x.shape", None),  # only a local or parameter
        ("s = x.shape", None),
        ("a = b = x.shape", None),
        ("n, c = x.shape[:2]", None),  # a slice of the shape: no rank
    ],
)
def test_unpacked_rank(source, expected):
    line = cst.parse_statement(source)
    assert isinstance(line, cst.SimpleStatementLine)
    assert unpacked_rank(line.body[0]) == expected
