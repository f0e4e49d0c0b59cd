"""Module names spelled other than as an f-string (``linen2nnx/migrate/name_strings.py``): each read as
the f-string it equals, or left as it is when its value is not certain."""

import libcst as cst
import pytest

from linen2nnx.migrate.name_strings import as_fstring


def _read(source: str) -> str:
    node = as_fstring(cst.parse_expression(source))
    return cst.Module(body=[]).code_for_node(node)


@pytest.mark.parametrize(
    "source, fstring",
    [
        ("str(i)", 'f"{i}"'),
        ("'encoderblock_' + str(i)", 'f"encoderblock_{i}"'),
        ("str(i + 1) + '_norm'", 'f"{i + 1}_norm"'),
        ("'EncoderBlock_{:d}'.format(ll)", 'f"EncoderBlock_{ll}"'),
        ("'block{:02d}'.format(i)", 'f"block{i:02d}"'),
        ("'stage{0}_unit'.format(j)", 'f"stage{j}_unit"'),
        ("'a_' + f'{i}'", 'f"a_{i}"'),
    ],
)
def test_spellings_of_a_counter_name_read_as_their_fstring(source, fstring):
    assert _read(source) == fstring
    assert eval(_read(source), {"i": 3, "ll": 3, "j": 3}) == eval(source, {"i": 3, "ll": 3, "j": 3})


@pytest.mark.parametrize(
    "source",
    [
        "'block'",  # no counter: a literal stays a literal
        "'b_{!r}'.format(i)",  # a conversion
        "'b_{}{}'.format(i, i)",  # two arguments
        "'b_{x}'.format(x=i)",  # a keyword field
        "'b_{:>3}'.format(i)",  # another spec
        "'{{b}}_{}'.format(i)",  # an escaped brace
        "str(i, 'utf-8')",  # not the one-argument str
        "prefix + str(i)",  # a name whose value is unknown
        "'b_' * i",
    ],
)
def test_other_spellings_are_left_as_they_are(source):
    assert _read(source) == source
