"""A constructor argument read from a local the loop body computes from the loop variable and config.

Part of the *analyse* step, used by :meth:`~linen2nnx.migrate.site_planning.SitePlanner._plan_args_at_call`.
Real code picks each iteration's pretrained weights in a local before building the block
(flaxmodels' ResNet: ``params = None if self.param_dict is None else self.param_dict['layer1'][f'block{i}']``,
then ``Block(..., param_dict=params)``), and repeats the pattern in each of several loops under the same
name. The local is a call-time value of the method, but within its loop it is a function of the loop
variable and config only, so the loop's ``nnx.List`` comprehension in ``__init__`` can compute it in
place: the argument becomes the local's value (``param_dict=None if ... else ...[f'block{i}']``).

Only when the local is bound exactly once in that loop's body, by a ``name = value`` line that nothing
in the body reads before (so every read sees this iteration's value), and its value reads nothing but
the loop's variables, module-level names and ``self`` attributes (no other local: ``__init__`` would
not have it), calling nothing but pure functions (no layer, no ``self`` method); and only for a class
of the run (a built-in layer's arguments are rewritten on their own). Anything else stays the
call-time finding it was.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_in,
    assigned_names,
    code,
    comprehension_names,
    names_in,
    single_assign,
)
from linen2nnx.migrate.factories import substitute
from linen2nnx.migrate.init_guards import creates_nothing
from linen2nnx.migrate.sites import Site


def loop_local_value(ctx: FileContext, site: Site, value: cst.BaseExpression, uses: set[str]) -> str | None:
    """``value`` (a constructor argument of ``site``, built in a plain loop) with each local of ``uses``
    replaced by what the loop body bound it to; None when one of them is not such a local."""
    if site.loop is None:
        return None
    loop = site.loop.node
    fn = ctx.enclosing_function(loop)
    if fn is None or not isinstance(loop, cst.For) or site.loop.var not in names_in(loop.target):
        return None
    method_locals = set(assigned_names(fn))
    targets = names_in(loop.target)
    body = list(loop.body.body)  # type: ignore[union-attr]
    values: dict[str, str] = {}
    for name in sorted(uses):
        at = [i for i, s in enumerate(body) if (a := single_assign(s)) is not None and a[0] == name]
        if len(at) != 1 or sum(name in assigned_in(s) for s in body) != 1:
            return None
        if any(name in names_in(s) for s in body[: at[0]]):
            return None  # read before it is bound: the value of the iteration before
        local = single_assign(body[at[0]])[1]  # type: ignore[index]
        free = names_in(local) - NOT_LOCAL - comprehension_names(local) - targets
        if free & method_locals or not creates_nothing(ctx, local):
            return None
        values[name] = code(local)
    return code(substitute(value, values))
