"""A ``self.param`` whose initializer returns several arrays (a tuple, a list, a dict of them).

Linen's ``self.param('wb', two, shapes)`` stores whatever the initializer returns, a pytree included
(``w, b = self.param('wb', two, ((d, 3), (3,)))``, ``p = self.param('lin', mk, d, f)`` then
``p['kernel']``). An ``nnx.Param`` holds one array: wrapped as one, the value is read as
``self.wb[...]`` (a TypeError on a tuple) and the checkpoint's leaves ``wb/0`` / ``wb/1`` have no NNX
home. The initializer is a function of the file or of the method; when one of its ``return``
statements returns a tuple, list or dict display, the parameter is a finding.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_meta import returned_values

_DISPLAYS = (cst.Tuple, cst.List, cst.Dict)


def pytree_init(module: cst.Module, method: cst.FunctionDef | None, init: cst.BaseExpression) -> str | None:
    """What the initializer named by ``init`` returns (``'a tuple'``...) when it is a function defined
    at the top level of ``method`` or of ``module`` returning a display of several values; else None."""
    if not isinstance(init, cst.Name):
        return None
    scopes = [method.body.body if method is not None else [], module.body]
    fn = next(
        (s for body in scopes for s in body if isinstance(s, cst.FunctionDef) and s.name.value == init.value),
        None,
    )
    if fn is None:
        return None
    for value in returned_values(fn.body):
        if isinstance(value, _DISPLAYS):
            return {cst.Tuple: "a tuple", cst.List: "a list", cst.Dict: "a dict"}[type(value)]
    return None
