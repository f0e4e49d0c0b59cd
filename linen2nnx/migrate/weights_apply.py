"""A built-in layer applied with weights other than its own: ``self.lm_head.apply({'params': {'kernel':
w.T}}, h)`` -> ``nnx.merge(nnx.graphdef(self.lm_head), nnx.State({'kernel': nnx.Param(w.T)}))(h)``.

Tied heads do this in Linen: the output projection multiplies by the embedding table, so the layer's
own parameters are never created. The NNX form runs the same layer (its dtype, precision, dot_general:
the graphdef) on the given arrays, and gradients reach them as they do in Linen. Only a plain site of a
built-in layer whose NNX parameters are the Linen ones by name (``variable_reads.SAME_PARAMS``) and a
literal ``{'params': {...}}`` (weights_dict.py) of exactly the parameters the layer creates (a bias
given to a ``use_bias=False`` Dense is ignored by Linen and refused by ``nnx.merge``) are converted;
``rngs=`` / ``method=`` / ``mutable=``, a class of the run, another collection or a computed dict stay
the verifier's ``L2N-VERIFY-003``.

The NNX layer still holds parameters of its own, which Linen never creates when it is only applied
this way: the name map marks the layer (``other_weights``), and ``convert`` keeps them from init and
says so (docs/convert.md).
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import code, parse_expression, self_attr
from linen2nnx.migrate.rules import VAR_006
from linen2nnx.migrate.sites import Site
from linen2nnx.migrate.variable_reads import SAME_PARAMS, child_site
from linen2nnx.migrate.weights_dict import applied_weights

OPTIONAL_PARAMS = {"bias": "use_bias", "scale": "use_scale"}  # created unless the flag is False


def _created_params(site: Site) -> set[str] | None:
    """The parameters the site's layer creates, from its constructor's flags; None when a flag that
    decides one is not a literal (or the layer's NNX parameters are not Linen's by name)."""
    assert site.rule is not None
    names = set(SAME_PARAMS.get(site.rule.linen, set()))
    for name, flag in OPTIONAL_PARAMS.items():
        arg = site.args.get(flag)
        if name not in names or arg is None:
            continue
        value = arg.value
        if not (isinstance(value, cst.Name) and value.value in ("True", "False")):
            return None
        if value.value == "False":
            names.discard(name)
    return names


def weights_apply(ctx: FileContext, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
    """The NNX form of ``original`` (``updated`` is it with its parts rewritten), or None."""
    plan = ctx.current_plan()
    if plan is None or applied_weights(original) is None:
        return None
    func = original.func
    assert isinstance(func, cst.Attribute)
    child = self_attr(func.value)
    site = child_site(ctx, plan, child) if child is not None else None
    if site is None or site.kind != "layer" or site.rule is None or site.nested:
        return None
    weights = applied_weights(updated)
    if weights is None or set(weights) != _created_params(site):
        return None  # a weight the layer does not create (Linen ignores it, merge fails) or one missing
    plan.other_weights.add(site.attr)
    state = ", ".join(f"{name!r}: nnx.Param({value})" for name, value in weights.items())
    rest = ", ".join(code(a) for a in updated.args[1:])
    nnx_call = f"nnx.merge(nnx.graphdef(self.{site.attr}), nnx.State({{{state}}}))({rest})"
    ctx.state.uses_nnx = True
    ctx.report(VAR_006, original, f"{code(func)}(...) with {', '.join(weights)} -> nnx.merge of its graphdef")
    return parse_expression(nnx_call)
