"""Expression helpers of the training rewrite: reading Linen call arguments and spelling NNX ones.

Pure functions of libcst nodes (no file context), shared by the construct handlers.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import code, needs_parens


def argument(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    """Argument ``index`` / ``keyword=`` of ``call`` (None where a ``*args`` hides it)."""
    for i, arg in enumerate(call.args):
        if arg.star:
            return None
        if (arg.keyword is None and i == index) or (arg.keyword is not None and arg.keyword.value == keyword):
            return arg.value
    return None


def dict_items(node: cst.Dict) -> list[tuple[str | None, cst.BaseExpression]]:
    """``{'params': p, **x}`` -> ``[('params', p), (None, x)]``."""
    out: list[tuple[str | None, cst.BaseExpression]] = []
    for element in node.elements:
        if isinstance(element, cst.DictElement):
            key = element.key.evaluated_value if isinstance(element.key, cst.SimpleString) else None
            out.append((key if isinstance(key, str) else None, element.value))
        else:
            out.append((None, element.value))
    return out


def mutable_kwarg_collections(node: cst.BaseExpression) -> list[str] | None:
    """The collections an apply's ``mutable=`` argument names: ``['batch_stats']`` -> ``['batch_stats']``;
    ``False`` -> ``[]``; anything else -> None. (Not :func:`linen2nnx.migrate.bridge.mutable_collections`,
    the collections a Linen class writes at call time.)"""
    if isinstance(node, cst.Name) and node.value == "False":
        return []
    if isinstance(node, (cst.List, cst.Tuple)):
        out = []
        for element in node.elements:
            if not isinstance(element.value, cst.SimpleString):
                return None
            out.append(str(element.value.evaluated_value))
        return out
    if isinstance(node, cst.SimpleString):
        return [str(node.evaluated_value)]
    return None


def method_name(node: cst.BaseExpression) -> str | None:
    """``method='encode'`` / ``method=Model.encode`` -> ``'encode'``."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) and value.isidentifier() else None
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def input_index(how: str) -> int:
    """The positional input a new constructor argument comes from (``input:0``, ``input_shape:0``); -1
    for one no input gives."""
    return int(how.split(":")[1]) if how.startswith(("input:", "input_shape:")) else -1


def input_size(node: cst.BaseExpression, how: str) -> cst.BaseExpression:
    """What a new constructor argument takes from the input ``node``: its shape, or its last axis."""
    if not how.startswith("input_shape:"):
        return last_axis(node)
    if needs_parens(node) or isinstance(node, (cst.Await, cst.Yield, cst.NamedExpr)):
        node = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.parse_expression(f"{code(node)}.shape")


def last_axis(node: cst.BaseExpression) -> cst.BaseExpression:
    """``x`` -> ``x.shape[-1]`` (parenthesised where needed)."""
    if needs_parens(node) or isinstance(node, (cst.Await, cst.Yield, cst.NamedExpr)):
        node = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.parse_expression(f"{code(node)}.shape[-1]")


def pure(node: cst.BaseExpression) -> bool:
    """Safe to evaluate twice: a name, an attribute / subscript chain, or jax.random.key(...) of those."""
    if isinstance(node, cst.Name):
        return True
    if isinstance(node, cst.Attribute):
        return pure(node.value)
    if isinstance(node, cst.Subscript):
        return pure(node.value) and all(
            isinstance(e.slice, cst.Index) and pure_or_literal(e.slice.value) for e in node.slice
        )
    if isinstance(node, cst.Call) and code(node.func) in (
        "jax.random.key",
        "jax.random.PRNGKey",
        "random.key",
        "random.PRNGKey",
    ):
        return all(a.keyword is None and not a.star and pure_or_literal(a.value) for a in node.args)
    return False


def bare(arg: cst.Arg) -> cst.Arg:
    """``arg`` without its comma and trailing whitespace (to be spelled on its own)."""
    return arg.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=cst.SimpleWhitespace(""))


def pure_or_literal(node: cst.BaseExpression) -> bool:
    """:func:`pure`, a number or string literal, or a binary operation of those."""
    return (
        isinstance(node, (cst.Integer, cst.SimpleString))
        or pure(node)
        or (
            isinstance(node, cst.BinaryOperation)
            and pure_or_literal(node.left)
            and pure_or_literal(node.right)
        )
    )


def rngs_expr(node: cst.BaseExpression, streams: list[str]) -> cst.BaseExpression:
    """Linen init rngs -> ``nnx.Rngs``: a key seeds the default stream (Linen's ``params``); each stream
    the apply calls reseed is named too, so that ``nnx.reseed`` finds it (a placeholder seed, replaced
    before any train-mode call)."""
    if isinstance(node, cst.Dict):
        items = [(k, v) for k, v in dict_items(node) if k is not None]
        given = {k for k, _ in items}
        base = next((v for k, v in items if k == "params"), items[0][1] if items else None)
        seed = code(base) if base is not None and pure(base) else "0"
        parts = [f"{k}={code(v)}" for k, v in items] + [f"{s}={seed}" for s in streams if s not in given]
        return cst.parse_expression(f"nnx.Rngs({', '.join(parts)})")
    seed = code(node) if pure(node) else "0"
    parts = [code(node)] + [f"{s}={seed}" for s in streams]
    return cst.parse_expression(f"nnx.Rngs({', '.join(parts)})")


def with_args(call: cst.Call, args: list[cst.Arg], func: cst.BaseExpression | None = None) -> cst.Call:
    """``call`` with ``args`` (a subset or extension of its own), keeping its layout: a comma after every
    argument but the last, which takes the old last argument's comma and trailing whitespace."""
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    old_last = call.args[-1] if call.args else None
    out = []
    for i, arg in enumerate(args):
        if i < len(args) - 1:
            if not isinstance(arg.comma, cst.Comma) or arg is old_last:
                arg = arg.with_changes(comma=comma, whitespace_after_arg=cst.SimpleWhitespace(""))
        elif old_last is not None:
            arg = arg.with_changes(comma=old_last.comma, whitespace_after_arg=old_last.whitespace_after_arg)
        else:
            arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        out.append(arg)
    return call.with_changes(func=func if func is not None else call.func, args=out)
