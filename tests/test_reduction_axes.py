"""Reductions whose axes are counted from the reduced value's rank (last_axis_ops.reduced): which keep
the last (feature) axis, with what rank, and which are left unknown."""

import libcst as cst
import pytest

from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.last_axis_ops import reduced, squeezed

HIDDEN = Feat("expr", expr="self.hidden")


def _reduce(call: str, rank: int) -> Feat:
    node = cst.parse_expression(call)
    assert isinstance(node, cst.Call)
    operand, *rest = [a for a in node.args if a.keyword is None]
    return reduced(Feat("expr", expr="self.hidden", rank=rank), rest, node.args, operand.value)


@pytest.mark.parametrize(
    ("call", "rank", "expected_rank"),
    [
        ("mean(x, axis=list(range(1, x.ndim - 1)))", 4, 2),  # (n, h, w, c) -> (n, c)
        ("mean(x, axis=list(range(1, x.ndim - 1)))", 0, 0),  # unknown rank: still the features
        ("mean(x, axis=tuple(range(x.ndim - 1)))", 3, 1),
        ("mean(x, axis=range(1, len(x.shape) - 1))", 5, 2),
        ("mean(x, list(range(1, x.ndim - 1)), keepdims=True)", 4, 4),
        ("mean(x, axis=range(1, x.ndim - 2))", 2, 2),  # an empty range reduces nothing
        ("mean(x, axis=tuple(range(1, 3)))", 4, 2),  # literal bounds: axes 1 and 2
        ("mean(x, axis=tuple(range(1, x.ndim - 1)), keepdims=self.keep)", 4, 0),  # rank not known
        ("mean(x, tuple(range(1, x.ndim - 1)), None, None, True)", 4, 0),  # positional keepdims
        ("mean(x, axis=(1, 2), keepdims=self.keep)", 4, 0),
        ("mean(x, axis=(1, 2), keepdims=False)", 4, 2),
        ("mean(x, (1, 2), None, None, True)", 4, 0),
    ],
)
def test_range_of_axes_keeps_the_features(call, rank, expected_rank):
    assert _reduce(call, rank) == Feat("expr", expr="self.hidden", rank=expected_rank)


@pytest.mark.parametrize(
    ("call", "why"),
    [
        ("mean(x, axis=tuple(range(1, x.ndim)))", "a reduction over the last axis"),
        ("mean(x, axis=range(1, y.ndim - 1))", "a reduction over axes the source does not spell out"),
        ("mean(x, axis=range(1, x.ndim - k))", "a reduction over axes the source does not spell out"),
        ("mean(x, axis=range(0, x.ndim, 2))", "a reduction over axes the source does not spell out"),
        ("mean(x, axis=tuple(range(1, 4)))", "a reduction over the last axis"),  # rank 4: axis 3 is last
    ],
)
def test_range_of_axes_left_unknown(call, why):
    result = _reduce(call, 4)
    assert result.kind == "unknown"
    assert result.reason == why


@pytest.mark.parametrize(
    ("call", "rank", "expected"),
    [
        ("x.squeeze(-2)", 0, 0),  # any rank: the last axis stays, its rank unknown
        ("x.squeeze(axis=(-3, -2))", 5, 3),
        ("x.squeeze(1)", 3, 2),  # from the front of a value of known rank
        ("x.squeeze(1)", 0, None),  # rank unknown: axis 1 may be the last
        ("x.squeeze(-1)", 4, None),  # the last axis itself
        ("x.squeeze()", 4, None),  # every axis of size 1: the shape decides
        ("x.squeeze(self.axis)", 4, None),
    ],
)
def test_squeezed_keeps_the_last_axis_only_when_its_axes_are_others(call, rank, expected):
    node = cst.parse_expression(call)
    assert isinstance(node, cst.Call)
    out = squeezed(Feat("expr", expr="self.hidden", rank=rank), node)
    if expected is None:
        assert out is None
    else:
        assert out == Feat("expr", expr="self.hidden", rank=expected)
