"""libcst's code generation for the most common node types, written as plain functions.

libcst generates a node's code through ``node._codegen(state)``: two calls on the state around
each node, and for every expression a generator-based context manager for its parentheses (half a
million a run). :func:`emit` gives the same tokens for the node types that make up most of a
migrated file (names, attributes, calls, assignments, statements, blocks, whitespace) by reading
their fields directly, and hands any other node to libcst's own ``_codegen`` (its subtree is then
generated the usual way): :func:`~linen2nnx.migrate.cst_meta.code_of`. :func:`record` does the same
for a ``StartRecorder`` (finding positions), handing the wanted nodes to libcst where their start is
not plain. Each function mirrors the ``_codegen_impl`` of its node type in libcst; the tests check
the code of every node, and the starts against ``PositionProvider``, on the stand-in test sources.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst._nodes.op import _BaseOneTokenOp

_DEFAULT = cst.MaybeSentinel.DEFAULT
Emit = Callable[[cst.CSTNode, CodegenState], None]


def emit(node: cst.CSTNode, state: CodegenState) -> None:
    """Append the code of ``node`` to ``state.tokens``, as ``node._codegen(state)`` does."""
    fn = _tables.node.get(type(node))
    if fn is None:
        node._codegen(state)
    else:
        fn(node, state)


def _value(node: cst.CSTNode, state: CodegenState) -> None:  # whitespace, comments
    state.tokens.append(node.value)  # type: ignore[attr-defined]


def _atom(node: cst.CSTNode, state: CodegenState) -> None:  # a name, a number, a string
    for paren in node.lpar:  # type: ignore[attr-defined]
        emit(paren, state)
    state.tokens.append(node.value)  # type: ignore[attr-defined]
    for paren in node.rpar:  # type: ignore[attr-defined]
        emit(paren, state)


def _one_token(node: cst.CSTNode, state: CodegenState) -> None:  # `,`, `.`, `=`, `:`, `+`, ...
    emit(node.whitespace_before, state)  # type: ignore[attr-defined]
    state.tokens.append(node._get_token())  # type: ignore[attr-defined]
    emit(node.whitespace_after, state)  # type: ignore[attr-defined]


def _left_paren(node: cst.LeftParen, state: CodegenState) -> None:
    state.tokens.append("(")
    emit(node.whitespace_after, state)


def _right_paren(node: cst.RightParen, state: CodegenState) -> None:
    emit(node.whitespace_before, state)
    state.tokens.append(")")


def _newline(node: cst.Newline, state: CodegenState) -> None:
    value = node.value
    state.tokens.append(state.default_newline if value is None else value)


def _trailing_whitespace(node: cst.TrailingWhitespace, state: CodegenState) -> None:
    emit(node.whitespace, state)
    if node.comment is not None:
        emit(node.comment, state)
    emit(node.newline, state)


def _empty_line(node: cst.EmptyLine, state: CodegenState) -> None:
    if node.indent:
        state.tokens.extend(state.indent_tokens)
    emit(node.whitespace, state)
    if node.comment is not None:
        emit(node.comment, state)
    emit(node.newline, state)


def _parenthesized_whitespace(node: cst.ParenthesizedWhitespace, state: CodegenState) -> None:
    emit(node.first_line, state)
    for line in node.empty_lines:
        emit(line, state)
    if node.indent:
        state.tokens.extend(state.indent_tokens)
    emit(node.last_line, state)


def _attribute(node: cst.Attribute, state: CodegenState) -> None:
    for paren in node.lpar:
        emit(paren, state)
    emit(node.value, state)
    emit(node.dot, state)
    emit(node.attr, state)
    for paren in node.rpar:
        emit(paren, state)


def _binary(node: cst.BinaryOperation, state: CodegenState) -> None:
    for paren in node.lpar:
        emit(paren, state)
    emit(node.left, state)
    emit(node.operator, state)
    emit(node.right, state)
    for paren in node.rpar:
        emit(paren, state)


def _call(node: cst.Call, state: CodegenState) -> None:
    for paren in node.lpar:
        emit(paren, state)
    emit(node.func, state)
    emit(node.whitespace_after_func, state)
    state.tokens.append("(")
    emit(node.whitespace_before_args, state)
    last, emit_arg = len(node.args) - 1, _tables.node[cst.Arg]
    for i, arg in enumerate(node.args):
        emit_arg(arg, state, i != last)  # type: ignore[call-arg]
    state.tokens.append(")")
    for paren in node.rpar:
        emit(paren, state)


def _arg(node: cst.Arg, state: CodegenState, default_comma: bool = False) -> None:
    if type(node) is not cst.Arg:
        node._codegen(state, default_comma=default_comma)
        return
    tokens = state.tokens
    tokens.append(node.star)
    emit(node.whitespace_after_star, state)
    if node.keyword is not None:
        emit(node.keyword, state)
    equal = node.equal
    if equal is _DEFAULT and node.keyword is not None:
        tokens.append(" = ")
    elif type(equal) is cst.AssignEqual:
        emit(equal, state)
    emit(node.value, state)
    comma = node.comma
    if comma is _DEFAULT and default_comma:
        tokens.append(", ")
    elif type(comma) is cst.Comma:
        emit(comma, state)
    emit(node.whitespace_after_arg, state)


def _unary(node: cst.UnaryOperation, state: CodegenState) -> None:
    for paren in node.lpar:
        emit(paren, state)
    emit(node.operator, state)
    emit(node.expression, state)
    for paren in node.rpar:
        emit(paren, state)


def _unary_op(node: cst.BaseUnaryOp, state: CodegenState) -> None:  # `-`, `~`, `not`
    state.tokens.append(node._get_token())  # type: ignore[attr-defined]
    emit(node.whitespace_after, state)


def _parameters(node: cst.Parameters, state: CodegenState) -> None:
    """Parameters without ``/`` or ``*args`` (``*`` alone is fine); others as libcst does."""
    star = node.star_arg
    if (
        node.posonly_params
        or not isinstance(node.posonly_ind, cst.MaybeSentinel)
        or isinstance(star, cst.Param)
    ):
        node._codegen_impl(state)
        return
    emit_param, kwonly, star_kwarg = _tables.node[cst.Param], node.kwonly_params, node.star_kwarg
    has_star = bool(kwonly) if isinstance(star, cst.MaybeSentinel) else isinstance(star, cst.ParamStar)
    last, more = len(node.params) - 1, has_star or bool(kwonly) or star_kwarg is not None
    for i, param in enumerate(node.params):
        emit_param(param, state, "", i < last or more)  # type: ignore[call-arg]
    if isinstance(star, cst.MaybeSentinel):
        if has_star:
            state.tokens.append("*, ")
    elif isinstance(star, cst.ParamStar):
        emit(star, state)
    last, more = len(kwonly) - 1, star_kwarg is not None
    for i, param in enumerate(kwonly):
        emit_param(param, state, "", i < last or more)  # type: ignore[call-arg]
    if star_kwarg is not None:
        emit_param(star_kwarg, state, "**", False)  # type: ignore[call-arg]


def _param(
    node: cst.Param, state: CodegenState, default_star: str | None = None, default_comma: bool = False
) -> None:
    star = node.star
    if isinstance(star, cst.MaybeSentinel):
        if default_star is None:  # libcst's error
            node._codegen(state, default_star=default_star, default_comma=default_comma)
            return
        star = default_star
    tokens = state.tokens
    if isinstance(star, str):
        tokens.append(star)
    emit(node.whitespace_after_star, state)
    emit(node.name, state)
    if node.annotation is not None:
        _tables.node[cst.Annotation](node.annotation, state, ":")  # type: ignore[call-arg]
    equal = node.equal
    if equal is _DEFAULT and node.default is not None:
        tokens.append(" = ")
    elif type(equal) is cst.AssignEqual:
        emit(equal, state)
    if node.default is not None:
        emit(node.default, state)
    comma = node.comma
    if comma is _DEFAULT and default_comma:
        tokens.append(", ")
    elif type(comma) is cst.Comma:
        emit(comma, state)
    emit(node.whitespace_after_param, state)


def _annotation(node: cst.Annotation, state: CodegenState, default_indicator: str | None = None) -> None:
    before = node.whitespace_before_indicator
    if default_indicator is None or not isinstance(
        before, (cst.BaseParenthesizableWhitespace, cst.MaybeSentinel)
    ):
        node._codegen(state, default_indicator=default_indicator)  # libcst's error
        return
    if isinstance(before, cst.MaybeSentinel):
        if default_indicator == "->":
            state.tokens.append(" ")
    else:
        emit(before, state)
    state.tokens.append(default_indicator)
    emit(node.whitespace_after_indicator, state)
    emit(node.annotation, state)


def _semicolon(node: cst.BaseSmallStatement, state: CodegenState, default_semicolon: bool) -> None:
    semicolon = node.semicolon
    if isinstance(semicolon, cst.MaybeSentinel):
        if default_semicolon:
            state.tokens.append("; ")
    elif isinstance(semicolon, cst.Semicolon):
        emit(semicolon, state)


def _expr(node: cst.Expr, state: CodegenState, default_semicolon: bool = False) -> None:
    emit(node.value, state)
    _semicolon(node, state, default_semicolon)


def _assign(node: cst.Assign, state: CodegenState, default_semicolon: bool = False) -> None:
    for target in node.targets:
        emit(target, state)
    emit(node.value, state)
    _semicolon(node, state, default_semicolon)


def _assign_target(node: cst.AssignTarget, state: CodegenState) -> None:
    emit(node.target, state)
    emit(node.whitespace_before_equal, state)
    state.tokens.append("=")
    emit(node.whitespace_after_equal, state)


def _return(node: cst.Return, state: CodegenState, default_semicolon: bool = False) -> None:
    state.tokens.append("return")
    after, value = node.whitespace_after_return, node.value
    if isinstance(after, cst.MaybeSentinel):
        if value is not None:
            state.tokens.append(" ")
    else:
        emit(after, state)
    if value is not None:
        emit(value, state)
    _semicolon(node, state, default_semicolon)


_SMALL: dict[type, Callable[[cst.CSTNode, CodegenState, bool], None]] = {
    cst.Expr: _expr,  # type: ignore[dict-item]
    cst.Assign: _assign,  # type: ignore[dict-item]
    cst.Return: _return,  # type: ignore[dict-item]
}


def _simple_statement_line(node: cst.SimpleStatementLine, state: CodegenState) -> None:
    for line in node.leading_lines:
        emit(line, state)
    state.tokens.extend(state.indent_tokens)
    body = node.body
    if body:
        last = len(body) - 1
        for i, stmt in enumerate(body):
            fn = _tables.small.get(type(stmt))
            if fn is None:
                stmt._codegen(state, default_semicolon=i != last)
            else:
                fn(stmt, state, i != last)
    else:
        state.tokens.append("pass")
    emit(node.trailing_whitespace, state)


def _indented_block(node: cst.IndentedBlock, state: CodegenState) -> None:
    emit(node.header, state)
    state.increase_indent(state.default_indent if node.indent is None else node.indent)
    if node.body:
        for stmt in node.body:
            emit(stmt, state)
    else:
        state.tokens.extend(state.indent_tokens)
        state.tokens.append("pass")
        state.tokens.append(state.default_newline)
    for line in node.footer:
        emit(line, state)
    state.decrease_indent()


def _decorated(
    node: cst.FunctionDef | cst.ClassDef, state: CodegenState
) -> None:  # what comes before `def` / `class`
    for line in node.leading_lines:
        emit(line, state)
    for decorator in node.decorators:
        emit(decorator, state)
    for line in node.lines_after_decorators:
        emit(line, state)
    state.tokens.extend(state.indent_tokens)
    if id(node) in getattr(state, "wanted_ids", ()):  # recording: its syntactic start is `def` / `class`
        state.syntactic.setdefault(node, len(state.tokens))  # type: ignore[attr-defined]


def _function_def(node: cst.FunctionDef, state: CodegenState) -> None:
    _decorated(node, state)
    if node.asynchronous is not None:
        emit(node.asynchronous, state)
    state.tokens.append("def")
    emit(node.whitespace_after_def, state)
    emit(node.name, state)
    emit(node.whitespace_after_name, state)
    if node.type_parameters is not None:
        emit(node.type_parameters, state)
    emit(node.whitespace_after_type_parameters, state)
    state.tokens.append("(")
    emit(node.whitespace_before_params, state)
    emit(node.params, state)
    state.tokens.append(")")
    if node.returns is not None:
        _tables.node[cst.Annotation](node.returns, state, "->")  # type: ignore[call-arg]
    emit(node.whitespace_before_colon, state)
    state.tokens.append(":")
    emit(node.body, state)


def _class_def(node: cst.ClassDef, state: CodegenState) -> None:
    _decorated(node, state)
    tokens = state.tokens
    tokens.append("class")
    emit(node.whitespace_after_class, state)
    emit(node.name, state)
    emit(node.whitespace_after_name, state)
    if node.type_parameters is not None:
        emit(node.type_parameters, state)
    emit(node.whitespace_after_type_parameters, state)
    has_args = bool(node.bases or node.keywords)
    if isinstance(node.lpar, cst.MaybeSentinel):
        if has_args:
            tokens.append("(")
    elif isinstance(node.lpar, cst.LeftParen):
        emit(node.lpar, state)
    args = [*node.bases, *node.keywords]
    last, emit_arg = len(args) - 1, _tables.node[cst.Arg]
    for i, arg in enumerate(args):
        emit_arg(arg, state, i != last)  # type: ignore[call-arg]
    if isinstance(node.rpar, cst.MaybeSentinel):
        if has_args:
            tokens.append(")")
    elif isinstance(node.rpar, cst.RightParen):
        emit(node.rpar, state)
    emit(node.whitespace_before_colon, state)
    tokens.append(":")
    emit(node.body, state)


def _decorator(node: cst.Decorator, state: CodegenState) -> None:
    for line in node.leading_lines:
        emit(line, state)
    state.tokens.extend(state.indent_tokens)
    state.tokens.append("@")
    emit(node.whitespace_after_at, state)
    emit(node.decorator, state)
    emit(node.trailing_whitespace, state)


def _module(node: cst.Module, state: CodegenState) -> None:
    for line in node.header:
        emit(line, state)
    for stmt in node.body:
        emit(stmt, state)
    for line in node.footer:
        emit(line, state)
    if node.has_trailing_newline:
        if not state.tokens:
            state.tokens.append(state.default_newline)
    else:
        state.pop_trailing_newline()


def _one_token_types() -> dict[type, Emit]:
    """Every one-token operator libcst generates as whitespace, token, whitespace."""
    found: dict[type, Emit] = {}
    for value in vars(cst).values():
        if (
            isinstance(value, type)
            and issubclass(value, _BaseOneTokenOp)
            and value._codegen_impl is _BaseOneTokenOp._codegen_impl
        ):
            found[value] = _one_token
    return found


_EMIT: dict[type, Emit] = {
    **_one_token_types(),
    cst.SimpleWhitespace: _value,
    cst.Comment: _value,
    cst.Newline: _newline,  # type: ignore[dict-item]
    cst.TrailingWhitespace: _trailing_whitespace,  # type: ignore[dict-item]
    cst.EmptyLine: _empty_line,  # type: ignore[dict-item]
    cst.ParenthesizedWhitespace: _parenthesized_whitespace,  # type: ignore[dict-item]
    cst.LeftParen: _left_paren,  # type: ignore[dict-item]
    cst.RightParen: _right_paren,  # type: ignore[dict-item]
    cst.Name: _atom,
    cst.Integer: _atom,
    cst.Float: _atom,
    cst.SimpleString: _atom,
    cst.Attribute: _attribute,  # type: ignore[dict-item]
    cst.BinaryOperation: _binary,  # type: ignore[dict-item]
    cst.Call: _call,  # type: ignore[dict-item]
    cst.Arg: _arg,  # type: ignore[dict-item]
    cst.UnaryOperation: _unary,  # type: ignore[dict-item]
    cst.Minus: _unary_op,  # type: ignore[dict-item]
    cst.Plus: _unary_op,  # type: ignore[dict-item]
    cst.BitInvert: _unary_op,  # type: ignore[dict-item]
    cst.Not: _unary_op,  # type: ignore[dict-item]
    cst.Parameters: _parameters,  # type: ignore[dict-item]
    cst.Param: _param,  # type: ignore[dict-item]
    cst.Annotation: _annotation,  # type: ignore[dict-item]
    cst.AssignTarget: _assign_target,  # type: ignore[dict-item]
    cst.SimpleStatementLine: _simple_statement_line,  # type: ignore[dict-item]
    cst.IndentedBlock: _indented_block,  # type: ignore[dict-item]
    cst.FunctionDef: _function_def,  # type: ignore[dict-item]
    cst.ClassDef: _class_def,  # type: ignore[dict-item]
    cst.Decorator: _decorator,  # type: ignore[dict-item]
    cst.Module: _module,  # type: ignore[dict-item]
}


# ---- recording starts ------------------------------------------------------------------------------
# For a StartRecorder (cst_meta): a wanted node gets libcst's own code generation, which notes its
# start (and that of the wanted nodes under it); a def or class only notes its start and goes on
# (see _decorated); every other node is generated as above.


def _recorded(fn: Emit) -> Emit:
    def run(node: cst.CSTNode, state: CodegenState) -> None:
        if id(node) in state.wanted_ids:  # type: ignore[attr-defined]
            node._codegen(state)
        else:
            fn(node, state)

    return run


def _recorded_def(fn: Emit) -> Emit:
    def run(node: cst.CSTNode, state: CodegenState) -> None:
        state.before_codegen(node)
        fn(node, state)
        state.after_codegen(node)

    return run


def _recorded_expression(fn: Emit) -> Emit:
    """An expression without parentheses starts (syntactically too) where its code does."""

    def run(node: cst.CSTNode, state: CodegenState) -> None:
        if id(node) not in state.wanted_ids:  # type: ignore[attr-defined]
            fn(node, state)
        elif node.lpar:  # type: ignore[attr-defined]
            node._codegen(state)
        else:
            state.before_codegen(node)
            state.syntactic.setdefault(node, len(state.tokens))  # type: ignore[attr-defined]
            fn(node, state)
            state.after_codegen(node)

    return run


_EXPRESSIONS = (
    cst.Name,
    cst.Integer,
    cst.Float,
    cst.SimpleString,
    cst.Attribute,
    cst.BinaryOperation,
    cst.Call,
)


def _recorded_arg(node: cst.Arg, state: CodegenState, default_comma: bool = False) -> None:
    if id(node) in state.wanted_ids:  # type: ignore[attr-defined]
        node._codegen(state, default_comma=default_comma)
    else:
        _arg(node, state, default_comma)


def _recorded_param(
    node: cst.Param, state: CodegenState, default_star: str | None = None, default_comma: bool = False
) -> None:
    if id(node) in state.wanted_ids:  # type: ignore[attr-defined]
        node._codegen(state, default_star=default_star, default_comma=default_comma)
    else:
        _param(node, state, default_star, default_comma)


def _recorded_annotation(
    node: cst.Annotation, state: CodegenState, default_indicator: str | None = None
) -> None:
    if id(node) in state.wanted_ids:  # type: ignore[attr-defined]
        node._codegen(state, default_indicator=default_indicator)
    else:
        _annotation(node, state, default_indicator)


def _recorded_small(
    fn: Callable[[cst.CSTNode, CodegenState, bool], None],
) -> Callable[[cst.CSTNode, CodegenState, bool], None]:
    def run(node: cst.CSTNode, state: CodegenState, default_semicolon: bool) -> None:
        if id(node) in state.wanted_ids:  # type: ignore[attr-defined]
            node._codegen(state, default_semicolon=default_semicolon)
        else:
            fn(node, state, default_semicolon)

    return run


_RECORDING: dict[type, Emit] = {
    kind: _recorded_def(fn)
    if kind in (cst.FunctionDef, cst.ClassDef)
    else _recorded_expression(fn)
    if kind in _EXPRESSIONS
    else _recorded(fn)
    for kind, fn in _EMIT.items()
}
_RECORDING[cst.Arg] = _recorded_arg  # type: ignore[assignment]
_RECORDING[cst.Param] = _recorded_param  # type: ignore[assignment]
_RECORDING[cst.Annotation] = _recorded_annotation  # type: ignore[assignment]
_RECORDING_SMALL = {kind: _recorded_small(fn) for kind, fn in _SMALL.items()}


class _Tables(threading.local):
    """The emitters in use, per thread: :func:`record` swaps in the recording ones for its call only,
    so another thread's code generation meanwhile keeps the plain ones."""

    node: dict[type, Emit] = _EMIT
    small: dict[type, Callable[..., None]] = _SMALL


_tables = _Tables()


def record(node: cst.CSTNode, state: CodegenState) -> None:
    """:func:`emit` for a ``StartRecorder`` (``state.wanted_ids``, ``state.syntactic``): the same
    tokens, and the same starts noted as libcst's code generation of ``node`` notes."""
    saved = _tables.node, _tables.small
    _tables.node, _tables.small = _RECORDING, _RECORDING_SMALL
    try:
        emit(node, state)
    finally:
        _tables.node, _tables.small = saved
