"""Linen's ``nn.jit`` on a method of a class the run converts -> ``nnx.jit`` on the NNX method.

``@nn.jit`` and ``@functools.partial(nn.jit, static_argnames=..., ...)`` compile a method together with
the module's variables. ``nnx.jit`` on a method of an NNX module does the same: the module is a graph
node, its Variables go in and their updates come out (a counter or running statistics the method
writes are written, as with Linen's mutable collections). Both number the method's positional
arguments from ``self`` (index 0), so ``static_argnums`` and ``donate_argnums`` keep their numbers.
Linen ignores ``self`` there (its lifted ``jit`` drops index 0, and real code lists ``'self'`` in
``static_argnames`` to quiet type checkers); in NNX ``self`` is the graph the transform splits and
cannot be static, so it is dropped from all three. ``device`` and ``backend`` mean the same to both;
``variables=True`` and ``rngs=True`` are the Linen defaults (every collection and stream), which NNX
always does. Any other setting (a collection filter, ``methods=``, a value the codemod cannot read)
keeps the decorator a located manual finding.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

LINEN_JIT = frozenset({"flax.linen.jit", "flax.linen.transforms.jit"})
_PARTIAL = frozenset({"functools.partial"})
_SAME_IN_NNX = frozenset({"static_argnums", "static_argnames", "donate_argnums", "device", "backend"})
_LINEN_DEFAULTS = frozenset({"variables", "rngs"})  # True: every collection / rng stream, as NNX does
_WITHOUT_SELF = {"static_argnames": "self", "static_argnums": 0, "donate_argnums": 0}

Qualnames = Callable[[cst.CSTNode], set[str]]


def jit_decorator(
    attr: cst.Attribute, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None], qualnames: Qualnames
) -> cst.Decorator | None:
    """The method decorator ``attr`` (an ``nn.jit``) is, bare or as ``functools.partial``'s first
    argument; None when it is used in any other way (``nn.jit(Block)``, a call inside a body)."""
    parent = parent_of(attr)
    if isinstance(parent, cst.Decorator):
        decorator = parent
    elif isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
        call = parent_of(parent)
        if not (isinstance(call, cst.Call) and call.args[0] is parent and qualnames(call.func) & _PARTIAL):
            return None
        decorator = parent_of(call)
        if not (isinstance(decorator, cst.Decorator) and decorator.decorator is call):
            return None
    else:
        return None
    return decorator if isinstance(parent_of(decorator), cst.FunctionDef) else None


def unsupported_setting(decorator: cst.Decorator) -> str | None:
    """Why the settings of a ``jit_decorator`` have no NNX spelling; None when they all have one."""
    call = decorator.decorator
    if not isinstance(call, cst.Call):
        return None  # bare @nn.jit
    for arg in call.args[1:]:
        name = arg.keyword.value if arg.keyword is not None else None
        if name is None or arg.star:
            return "a setting given by position or unpacked"
        if name in _LINEN_DEFAULTS:
            if not (isinstance(arg.value, cst.Name) and arg.value.value == "True"):
                return f"{name}= selects part of the module's {name}; nnx.jit always takes them all"
        elif name not in _SAME_IN_NNX:
            return f"{name}= has no nnx.jit counterpart"
        elif name in _WITHOUT_SELF and _literals(arg.value) is None:
            return f"{name}= is not a literal the codemod can read"
    return None


def nnx_jit_decorator(updated: cst.Decorator) -> cst.Decorator:
    """``updated`` (its ``nn.jit`` already ``nnx.jit``) with ``self`` / index 0 dropped from the static
    and donated arguments and the Linen defaults dropped; ``functools.partial(nnx.jit)`` left with
    nothing to fix becomes ``nnx.jit``."""
    call = updated.decorator
    if not isinstance(call, cst.Call):
        return updated
    args = [call.args[0]]
    for arg in call.args[1:]:
        name = arg.keyword.value if arg.keyword is not None else ""
        if name in _LINEN_DEFAULTS:
            continue
        if name in _WITHOUT_SELF:
            value = _without(arg.value, _WITHOUT_SELF[name])
            if value is None:
                continue
            arg = arg.with_changes(value=value)
        args.append(arg)
    if len(args) == 1:
        return updated.with_changes(decorator=args[0].value)
    args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(decorator=call.with_changes(args=args))


def _literals(node: cst.BaseExpression) -> list[str | int] | None:
    """The strings / integers of a literal (one, or a tuple or list of them); None for anything else."""
    items = [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List)) else [node]
    values: list[str | int] = []
    for item in items:
        if isinstance(item, cst.SimpleString) and isinstance(item.evaluated_value, str):
            values.append(item.evaluated_value)
        elif isinstance(item, cst.Integer):
            values.append(int(item.value, 0))
        else:
            return None
    return values


def _without(node: cst.BaseExpression, dropped: str | int) -> cst.BaseExpression | None:
    """The literal ``node`` (read by :func:`_literals`) without ``dropped``, written as it was; None
    when nothing is left."""
    if not isinstance(node, (cst.Tuple, cst.List)):
        return None if _literals(node) == [dropped] else node
    kept = [e for e in node.elements if _literals(e.value) != [dropped]]
    if len(kept) == len(node.elements):
        return node
    if not kept:
        return None
    last = kept[-1].comma
    if isinstance(node, cst.Tuple) and len(kept) == 1:
        last = cst.Comma()  # ("x",): still a tuple
    elif isinstance(last, cst.Comma) and node.elements[-1].comma is cst.MaybeSentinel.DEFAULT:
        last = cst.MaybeSentinel.DEFAULT
    return node.with_changes(elements=[*kept[:-1], kept[-1].with_changes(comma=last)])
