"""The arguments of ``self.param`` / ``self.variable`` in one canonical form.

Linen's signatures are ``param(name, init_fn, *init_args, unbox=True, **init_kwargs)`` and
``variable(col, name, init_fn=None, *init_args, unbox=True, **init_kwargs)``, so
``self.param(name='weight', init_fn=lambda *_: w)`` is the same call as ``self.param('weight',
lambda *_: w)``. The planner and the emitter both read the canonical form (the planner on the
original call, the emitter on the rewritten one): the named slots positional, ``unbox=True`` (the
default) dropped, the remaining keywords last (they are the init function's keyword arguments).
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

SLOTS = {"param": ("name", "init_fn"), "variable": ("col", "name", "init_fn")}


def canonical_variable_call(call: cst.Call, kind: str) -> cst.Call | str:
    """``call`` with its named slots positional and ``unbox=True`` dropped; or, when that cannot be
    done, the reason (a splat, ``unbox=`` other than ``True``, a missing or repeated slot; a
    ``variable`` without an init function only reads an existing variable)."""
    slots = SLOTS[kind]
    if any(a.star for a in call.args):
        return "*args / **kwargs splats"
    positional = [a for a in call.args if a.keyword is None]
    by_slot: dict[str, cst.Arg] = {}
    init_kwargs: list[cst.Arg] = []
    for a in call.args:
        if a.keyword is None:
            continue
        key = a.keyword.value
        if key == "unbox":
            if not (isinstance(a.value, cst.Name) and a.value.value == "True"):
                return "unbox= other than True (the boxed metadata has no NNX counterpart here)"
        elif key in slots:
            if slots.index(key) < len(positional) or key in by_slot:
                return f"{key} given twice"
            by_slot[key] = a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
        else:
            init_kwargs.append(a)
    named = [by_slot[s] for s in slots[len(positional) :] if s in by_slot]
    if len(positional) + len(named) < len(slots):
        return "no init function" if kind == "variable" else "a missing name or init function"
    args = [*positional, *named, *init_kwargs]
    init = args[len(slots) - 1].value
    if init_kwargs and _partition_wrapped(init):
        return WRAPPED_KEYWORDS
    return call.with_changes(args=args)


WRAPPED_KEYWORDS = (
    "keyword init arguments to a partitioning-wrapped init function (NNX's with_partitioning "
    "wrapper takes positional arguments only)"
)


def wrapped_field_keywords(canonical: cst.Call, kind: str, defaults: Mapping[str, str | None]) -> str | None:
    """Why a canonical call does not convert when its init function is a field (``self.kernel_init``)
    whose default is a partitioning wrapper and it passes keyword init arguments (``dtype=``): the
    wrapper the field's default becomes in NNX takes none. None for any other call."""
    slots = SLOTS[kind]
    init = canonical.args[len(slots) - 1].value
    field = (
        init.attr.value
        if isinstance(init, cst.Attribute) and isinstance(init.value, cst.Name) and init.value.value == "self"
        else None
    )
    default = defaults.get(field) if field is not None else None
    if default is None or not any(a.keyword is not None for a in canonical.args[len(slots) :]):
        return None
    try:
        wrapped = _partition_wrapped(cst.parse_expression(default))
    except cst.ParserSyntaxError:
        return None
    return f"{WRAPPED_KEYWORDS}: the default of the field {field}" if wrapped else None


PARTITION_WRAPPERS = frozenset({"with_partitioning", "with_logical_partitioning"})


def _partition_wrapped(init: cst.BaseExpression) -> bool:
    """``init`` is a call of ``with_partitioning`` / ``with_logical_partitioning`` (any spelling):
    ``nnx.with_partitioning(init, names)`` returns a ``wrapper(*args)``, so ``init``'s keyword
    arguments (``dtype=``) raise a TypeError there."""
    if not isinstance(init, cst.Call):
        return False
    func = init.func
    last = (
        func.value
        if isinstance(func, cst.Name)
        else func.attr.value
        if isinstance(func, cst.Attribute)
        else ""
    )
    return last in PARTITION_WRAPPERS
