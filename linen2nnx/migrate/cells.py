"""Custom RNN cells: a subclass of ``nn.RNNCellBase`` becomes a subclass of ``nnx.RNNCellBase``.

``nnx.RNN`` asks its cell for a carry with ``cell.initialize_carry(input_shape, rngs)``; a Linen
cell defines ``initialize_carry(self, rng, input_shape)``. The parameters are reordered when the
body never reads the key (a zeros carry, or a fixed key of its own); a body that draws from it
needs a person, since NNX hands the method an ``nnx.Rngs`` (or nothing), not a key.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import names_in

CARRY_METHOD = "initialize_carry"


def nnx_initialize_carry(fn: cst.FunctionDef) -> cst.FunctionDef | None:
    """``initialize_carry(self, rng, input_shape)`` -> ``initialize_carry(self, input_shape, rngs=None)``;
    None when the body uses ``rng`` (or the signature is not that one)."""
    params = list(fn.params.params)
    if (
        len(params) != 3
        or fn.params.kwonly_params
        or fn.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT)
        or fn.params.star_kwarg is not None
        or any(p.default is not None for p in params)
    ):
        return None
    self_param, rng, shape = params
    if rng.name.value in names_in(fn.body):
        return None
    rngs = cst.Param(
        cst.Name("rngs"),
        default=cst.Name("None"),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    return fn.with_changes(
        params=fn.params.with_changes(
            params=[
                self_param,
                shape.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                rngs,
            ]
        )
    )
