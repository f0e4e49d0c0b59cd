"""Functions a method defines for itself, for the feature-size dataflow.

A method may wrap a library call it repeats in a small local function::

    def wlc(f):
        return nn.with_logical_constraint(f, ("act_batch", "act_len", "act_emb"))

    x = wlc(nn.LayerNorm()(targets))

A call of such a function gives what its body makes of the arguments: the body is followed with its
parameters bound to the call's values, as a pure function of them -- it may apply no layer and call no
helper of the class (those are unknown there), and a name it reads from the enclosing method is unknown
too. Only a ``def`` that is the one binding of its name, without decorators, ``yield`` or special
parameters, called with plain positional arguments, counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

from linen2nnx.migrate.cst_meta import contains
from linen2nnx.migrate.dataflow import FeatureFlow, LayerInfo
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.tuple_flow import agreed_return


def local_function_out(
    call: cst.Call,
    args: Sequence[Feat],
    binding_of: Callable[[cst.Name], cst.CSTNode | None],
    qualnames_of: Callable[[cst.CSTNode], set[str]],
) -> Feat | None:
    """What ``call`` of a local function gives (see the module docstring); None for any other call."""
    if type(call.func) is not cst.Name or any(a.keyword is not None or a.star for a in call.args):
        return None
    fn = binding_of(call.func)  # a `def` binds its name as the FunctionDef itself
    if type(fn) is not cst.FunctionDef or not _plain(fn):
        return None
    params = [p.name.value for p in fn.params.params]
    if len(args) != len(params):
        return None
    flow = FeatureFlow(params, _no_layer, qualnames_of)
    flow.env.update(zip(params, args))
    flow.run(fn.body.body)
    out = agreed_return(flow.returns)
    return Feat.unknown("a local function") if out is None else out  # already in the caller's values


def _no_layer(call: cst.Call) -> LayerInfo | None:
    return None


def _plain(fn: cst.FunctionDef) -> bool:
    """A function that runs its body once when called, on plain positional parameters."""
    p = fn.params
    return (
        not fn.decorators
        and fn.asynchronous is None
        and not p.posonly_params
        and not p.kwonly_params
        and not isinstance(p.star_arg, cst.Param)
        and p.star_kwarg is None
        and all(q.default is None for q in p.params)
        and not contains(fn.body, (cst.Yield,))
    )
