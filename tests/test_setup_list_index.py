"""Which setup() comprehensions have an element index (``setup_lists.comprehension_index``): the index
names the elements (``name=f'layer_{i}'``) and the name map reads it as the list position, so only a
variable that counts the elements from 0 qualifies."""

import libcst as cst
import pytest

from linen2nnx.migrate.setup_lists import comprehension_index


def _index(comprehension: str) -> str | None:
    comp = cst.parse_expression(comprehension)
    assert isinstance(comp, cst.ListComp)
    return comprehension_index(comp)


@pytest.mark.parametrize(
    "comprehension, index",
    [
        ("[Block(name=f'layer_{i}') for i in range(n)]", "i"),
        ("[Block(kind=k, name=f'layer_{i}') for i, k in enumerate(kinds)]", "i"),
        # Gemma: the blocks and their attention types, the zip stopping at the shorter
        ("[Block(kind=k, name=f'layer_{i}') for i, k in zip(range(n), kinds)]", "i"),
        ("[Block(a=a, b=b) for i, a, b in zip(range(n), xs, ys)]", "i"),
    ],
)
def test_counting_variables_are_indices(comprehension, index):
    assert _index(comprehension) == index


@pytest.mark.parametrize(
    "comprehension",
    [
        "[Block(name=f'layer_{i}') for i in range(1, n)]",  # layer_1 is element 0
        "[Block(kind=k, name=f'layer_{i}') for i, k in zip(range(1, n), kinds)]",  # the same, zipped
        "[Block(kind=k, name=f'layer_{i}') for k, i in zip(kinds, range(n))]",  # the count second
        "[Block(kind=k) for i, k in zip(range(n), *groups)]",  # a splat: the elements unknown
        "[Block(kind=k) for i, k in zip(range(n))]",  # one iterable: no tuple of two
        "[Block(name=f'layer_{i}') for i in range(n) if i % 2]",  # a filter: positions skip
    ],
)
def test_other_variables_are_not(comprehension):
    assert _index(comprehension) is None
