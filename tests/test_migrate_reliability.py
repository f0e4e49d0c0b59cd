"""The reliability floor of migrate on real-world shapes of code: whatever it cannot convert, its
output parses, a second run changes nothing, and it never fails (exit 2) on a file Python can parse."""

import ast
import textwrap

from linen2nnx.migrate import Severity, migrate_source
from linen2nnx.migrate.sites import MARKER

MULTI_LINE = textwrap.dedent(
    '''
    import flax.linen as nn


    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            y = nn.scan(
                nn.map_variables(
                    nn.Dense,
                    "params",
                    lambda v: v,
                ),
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=2,
            )(4)(x)
            return y
    '''
)


def _errors(result) -> list:
    return [f for f in result.findings if f.severity is Severity.ERROR]


def test_a_multi_line_expression_in_a_marker_becomes_one_comment_line():
    result = migrate_source(MULTI_LINE, "stack.py")
    assert not _errors(result)
    ast.parse(result.output)
    markers = [line for line in result.output.splitlines() if MARKER in line]
    scan = [m for m in markers if "XFORM-002 nn.scan" in m]
    assert scan and 'nn.scan(nn.map_variables( nn.Dense, "params", lambda v: v, ), ...)' in scan[0]
    assert migrate_source(result.output, "stack.py").output == result.output
