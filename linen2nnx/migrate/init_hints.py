"""The hint of an unconverted ``self.is_initializing()`` / ``self.is_mutable_collection('params')``, by
what the question decides.

Both are True only in Linen's ``init``. Where the branch they guard only makes dummy inputs, the
codemod reads them as False (:mod:`~linen2nnx.migrate.init_guards`); elsewhere a person decides, and
what to do depends on the use. Three uses recur (MaxText's decoder and pipeline write all three):

- the test of a branch that only calls methods of the module (``_ = self.apply_output_head(...)``),
  run so that ``init`` creates what they build: NNX's ``__init__`` builds it instead;
- a setting of a Linen lifted transform (``split_rngs={'params': self.is_initializing()}``, an
  ``'is_initializing'`` entry of ``metadata_params``): NNX builds the stacked layers once in
  ``__init__`` and the call-time transform neither splits parameter keys nor adds the axis;
- the choice of ``nn.scan``'s parameter axis (``axis if initializing else ScanIn(axis)``), which has
  its own finding (``init_guards.scan_spec_choice``, ``api_findings.PARAMS_SCAN_SPEC``).

Anything else gets the general hint of :mod:`~linen2nnx.migrate.api_findings`.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.api_findings import self_api_finding, string_args
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import self_attr
from linen2nnx.migrate.init_guards import dropped_value
from linen2nnx.migrate.rules import API_002

_XFORMS = "docs/nnx_facts.md#lifted-transforms"
_TRANSFORM_SETTINGS = frozenset({"split_rngs", "metadata_params"})


def report_self_api(ctx: FileContext, api: cst.Attribute, call: cst.Call) -> None:
    """The finding of ``call``, an unconverted ``self.<api>(...)``, located at ``api``."""
    ctx.report(API_002, api, *self_api_hint(ctx, call, api.attr.value, *string_args(call)))


def self_api_hint(
    ctx: FileContext, call: cst.Call, api: str, first_arg: str | None, second_arg: str | None = None
) -> tuple[str, str]:
    """(message, hint) of ``call``, an unconverted ``self.<api>(...)`` (``first_arg`` / ``second_arg``:
    its arguments' string literals, where they are); the two init questions get the hint of their use
    (the choice of a scan's parameter axis has its own finding: init_guards.scan_spec_choice)."""
    what, hint = self_api_finding(api, first_arg, second_arg)
    if api != "is_initializing" and (api, first_arg) != ("is_mutable_collection", "params"):
        return what, hint
    setting = _transform_setting(ctx, call)
    if setting is not None:
        return what, (
            f"it sets {setting} of a Linen lifted transform for init; NNX builds the transformed layers "
            "once in __init__ (nnx.vmap of the constructor over rngs.fork(split=n), with "
            "transform_metadata={nnx.PARTITION_NAME: name}) and the call-time transform splits no "
            f"parameter keys and adds no axis, so the setting goes (see {_XFORMS})"
        )
    methods = _guarded_methods(ctx, call)
    if methods:
        return what, (
            f"the branch runs {', '.join(methods)} only so that Linen's init creates the variables it "
            "builds; build them in __init__ (an NNX __init__ builds every layer the class declares), "
            "then the test reads False at call time, as in Linen's apply"
            + (" (--unsafe-fixes reads it as False here)" if api == "is_initializing" else "")
        )
    return what, hint


def _transform_setting(ctx: FileContext, call: cst.Call) -> str | None:
    """``split_rngs=`` / ``metadata_params=`` (or an ``'is_initializing'`` entry of a dict) that
    ``call`` is a value in."""
    node: cst.CSTNode = call
    parent = ctx.parent_of(node)
    if isinstance(parent, cst.DictElement) and parent.value is node:
        key = parent.key
        if isinstance(key, cst.SimpleString) and key.evaluated_value == "is_initializing":
            return "the 'is_initializing' metadata entry"
        dict_node = ctx.parent_of(parent)
        arg = ctx.parent_of(dict_node) if isinstance(dict_node, cst.Dict) else None
        if isinstance(arg, cst.Arg) and arg.keyword is not None and arg.keyword.value in _TRANSFORM_SETTINGS:
            return f"{arg.keyword.value}="
    return None


def _guarded_methods(ctx: FileContext, call: cst.Call) -> list[str]:
    """``self.m(...)`` of each statement of the ``if`` that ``call`` (through ``and``) tests, when the
    branch has no ``else`` and holds nothing but such calls (their results unused or bound to ``_``)."""
    node: cst.CSTNode = call
    parent = ctx.parent_of(node)
    while isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.And):
        node, parent = parent, ctx.parent_of(parent)
    if not (isinstance(parent, cst.If) and parent.test is node and parent.orelse is None):
        return []
    if not isinstance(parent.body, cst.IndentedBlock):
        return []
    found: list[str] = []
    for statement in parent.body.body:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return []
        value = dropped_value(statement.body[0])
        method = self_attr(value.func) if isinstance(value, cst.Call) else None
        if method is None:
            return []
        found.append(f"self.{method}(...)")
    return found
