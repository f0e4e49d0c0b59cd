"""Small libcst helpers shared by the codemod (no Linen knowledge here)."""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Collection, Sequence

import libcst as cst

from linen2nnx.migrate.cst_meta import CHILDREN_MEMO, FastVisitor, code_of, file_memo, syntax_children
from linen2nnx.migrate.traverse import copy_node

_EMPTY = cst.Module([])
NOT_LOCAL = frozenset({"self", "True", "False", "None"})


def code(node: cst.CSTNode) -> str:
    """``node``'s source text. An expression that spans lines only by the brackets around it in the
    file (`nn.Conv(2 * z\n    if double else z, ...)`'s first argument) is parenthesised, so that
    the text is an expression wherever it is put."""
    text = code_of(node, _EMPTY)
    if "\n" in text and isinstance(node, cst.BaseExpression) and not _is_expression(text):
        return f"({text})"
    return text


def _is_expression(text: str) -> bool:
    try:
        _parsed_expression(text)
    except cst.ParserSyntaxError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _parsed_expression(source: str) -> cst.BaseExpression:
    return cst.parse_expression(source)


@functools.lru_cache(maxsize=1024)
def _parsed_statement(source: str) -> cst.BaseStatement:
    return cst.parse_statement(source)


def parse_expression(source: str) -> cst.BaseExpression:
    """``cst.parse_expression``, memoised: the codemod builds the same snippets (``nnx.Linear``,
    ``self.dense_0``) over and over. The same node may then sit at several places of the output tree,
    which is safe because libcst nodes are immutable and the codemod's identity-keyed maps only hold
    nodes of the original tree; a pass that keys metadata by node on the output must re-parse it (the
    training pass does)."""
    return _parsed_expression(source)


def parse_statement(source: str) -> cst.BaseStatement:
    """``cst.parse_statement``, memoised as :func:`parse_expression`."""
    return _parsed_statement(source)


def snake_case(name: str) -> str:
    """``BatchNorm_0`` -> ``batch_norm_0``; ``Dense_1`` -> ``dense_1``; ``MLPBlock`` -> ``mlp_block``."""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


def attribute_for(linen_name: str, class_name: str) -> str:
    """A valid Python attribute for a module Linen names ``linen_name`` (``name=`` may be any string).

    An identifier is kept as it is (``head``, ``Dense_0``); other names are snake-cased and their other
    characters become ``_`` (``norm-pre-head`` -> ``norm_pre_head``, ``bbox_pred.0`` -> ``bbox_pred_0``);
    one that starts with a digit (``0``, ``1_bottleneck``: PyTorch-style numbered children) is prefixed
    with the module's class (``dense_0``); a keyword gets a trailing ``_`` (``if`` -> ``if_``). The
    Linen name itself stays in the name map, so checkpoints keep their keys.
    """
    attr = linen_name if linen_name.isidentifier() else snake_case(linen_name)
    if not (attr.isidentifier() and attr.isascii()):  # ASCII: Python folds some Unicode names into others
        attr = re.sub(r"[^0-9A-Za-z_]+", "_", attr).strip("_") or "module"
        if not attr.isidentifier():
            attr = f"{snake_case(class_name)}_{attr}"
    return f"{attr}_" if keyword.iskeyword(attr) else attr


def numbered_name(base: str, taken: set[str]) -> str:
    """``base``, else ``base_1``, ``base_2``, ...: the first not in ``taken``."""
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def names_in(node: cst.CSTNode) -> set[str]:
    """Free-looking names used in ``node`` (attribute names and keywords excluded)."""
    return set(name_counts(node))


def bracketed(source: str) -> str:
    """``source`` as an operand of a conditional expression: in brackets when it is itself a
    conditional expression, a lambda or an assignment expression without them (``a if b else c`` as
    the then-side of another choice reads ``x if t else (...)`` otherwise)."""
    node = parse_expression(source)
    loose = isinstance(node, (cst.IfExp, cst.Lambda, cst.NamedExpr)) and not node.lpar
    return f"({source})" if loose else source


def subscriptable(source: str) -> str:
    """``source`` as the value of a subscript: ``(self.a + self.b)[i]``, not ``self.a + self.b[i]``."""
    node = parse_expression(source)
    atom = isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Tuple, cst.List))
    return source if atom or node.lpar else f"({source})"


def config_test(test: cst.BaseExpression) -> str | None:
    """The source of ``test`` when it reads the config alone (``self`` and the constants ``None``,
    ``True``, ``False``): a test ``__init__`` decides too; else None."""
    return code(test) if names_in(test) - NOT_LOCAL <= {"self"} else None


def negated(test: str) -> str:
    """The source of the test that holds where ``test`` fails: ``x`` of ``not x`` (``not (not x)``
    reads badly in ``__init__``), else ``not (test)``."""
    node = parse_expression(test)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not) and not node.lpar:
        return code(node.expression.with_changes(lpar=[], rpar=[]))
    return f"not ({test})"


def opposite(a: str, b: str) -> bool:
    """Whether tests ``a`` and ``b`` read as each other's negation (:func:`negated`)."""
    return b == negated(a) or a == negated(b)


def reads_only(node: cst.CSTNode, local_names: Collection[str], names: Collection[str]) -> bool:
    """Does ``node`` read locals (of ``local_names``), all of them among ``names``?"""
    read = (names_in(node) - NOT_LOCAL) & set(local_names)
    return bool(read) and read <= set(names)


def name_counts(node: cst.CSTNode) -> dict[str, int]:
    """How often each name of :func:`names_in` occurs in ``node``."""
    counts: dict[str, int] = {}
    stack = [node]
    memo_get = CHILDREN_MEMO.get
    name, attribute, arg = cst.Name, cst.Attribute, cst.Arg
    while stack:
        n = stack.pop()
        kind = type(n)
        if kind is name:
            counts[n.value] = counts.get(n.value, 0) + 1  # type: ignore[attr-defined]
        elif kind is attribute or kind is arg:
            stack.append(n.value)  # type: ignore[attr-defined]
        else:
            entry = memo_get(id(n))  # syntax_children(n), its memo read inline
            stack.extend(entry[1] if entry is not None and entry[0] is n else syntax_children(n))
    return counts


_ASSIGNED = file_memo()


def assigned_names(fn: cst.FunctionDef) -> dict[str, int]:
    """How many times each local name of ``fn`` is bound (parameters count once; assignment, loop and
    ``with ... as`` targets, nested functions and classes count each time); remembered for the
    file (the planners ask about the same method once for each layer in it)."""
    entry = _ASSIGNED.get(id(fn))
    if entry is not None and entry[0] is fn:
        return dict(entry[1])
    counts = _assigned_names(fn)
    if len(_ASSIGNED) >= 10_000:  # a caller that never forgets stays bounded
        _ASSIGNED.clear()
    _ASSIGNED[id(fn)] = (fn, counts)
    return dict(counts)


def _assigned_names(fn: cst.FunctionDef) -> dict[str, int]:
    """:func:`assigned_names`, worked out."""
    counts: dict[str, int] = {}
    for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params):
        counts[p.name.value] = counts.get(p.name.value, 0) + 1
    for star in (fn.params.star_arg, fn.params.star_kwarg):
        if isinstance(star, cst.Param):
            counts[star.name.value] = counts.get(star.name.value, 0) + 1

    bound = _TARGET_HOLDERS
    stack: list[cst.CSTNode] = [fn]
    memo_get = CHILDREN_MEMO.get
    while stack:  # in source order, as a visitor meets them: the first child on top of the stack
        node = stack.pop()
        kind = type(node)
        if kind in bound:
            for n in names_in(node.target):  # type: ignore[attr-defined]
                counts[n] = counts.get(n, 0) + 1
        elif kind is cst.WithItem and node.asname is not None:  # type: ignore[attr-defined]
            for n in names_in(node.asname.name):  # type: ignore[attr-defined]
                counts[n] = counts.get(n, 0) + 1
        elif kind is cst.ClassDef:
            counts[node.name.value] = counts.get(node.name.value, 0) + 1  # type: ignore[attr-defined]
        elif kind is cst.FunctionDef:
            counts[node.name.value] = counts.get(node.name.value, 0) + 1  # type: ignore[attr-defined]
            if node is not fn:  # a nested function's locals are its own
                continue
        entry = memo_get(id(node))  # syntax_children(node), its memo read inline
        kids = entry[1] if entry is not None and entry[0] is node else syntax_children(node)
        if kids:
            stack.extend(reversed(kids))
    counts.pop("self", None)
    return counts


def rebound_names(node: cst.CSTNode) -> set[str]:
    """The names a statement under ``node`` binds anew (``w = ...``, ``w += ...``, ``for w in ...``,
    ``(w := ...)``, ``with ... as w``); a name read in a target (``out[i] = ...``) is not bound, as it is
    for :func:`assigned_in`."""
    found: set[str] = set()
    stack = [node]
    while stack:
        cur = stack.pop()
        targets = [t.target for t in cur.targets] if isinstance(cur, cst.Assign) else []
        if isinstance(cur, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            targets.append(cur.target)
        if isinstance(cur, cst.AsName):
            targets.append(cur.name)
        found.update(n for t in targets for n in _plain_names(t))
        stack.extend(syntax_children(cur))
    return found


def _plain_names(target: cst.BaseExpression) -> set[str]:
    """The names a target binds itself: ``w``, or those of ``a, *b`` / ``[a, b]``."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, cst.StarredElement):
        return _plain_names(target.value)
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for e in target.elements for n in _plain_names(e.value)}
    return set()


def is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.SimpleString)
    )


def root_name(node: cst.BaseExpression) -> cst.Name | None:
    while type(node) is cst.Attribute:
        node = node.value
    return node if isinstance(node, cst.Name) else None


def callee_name(call: cst.Call) -> str:
    """The last name of what ``call`` calls (``Block`` of ``pkg.Block(...)``); empty for anything else."""
    func = call.func
    return (
        func.attr.value
        if isinstance(func, cst.Attribute)
        else func.value
        if isinstance(func, cst.Name)
        else ""
    )


def kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(
        value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )


def keyword_arg(call: cst.Call, name: str) -> cst.Arg | None:
    """``call``'s argument passed as ``name=...``, if any (``name=`` itself: a Linen module's name)."""
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def literal_name(call: cst.Call) -> str | None:
    """The string literal a module is built with as ``name=``; None without one or for any other value."""
    arg = keyword_arg(call, "name")
    value = arg.value.evaluated_value if arg is not None and isinstance(arg.value, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def strip_commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """``args`` without their separators (the code generation writes the default ``, ``)."""
    return [copy_node(a, {"comma": cst.MaybeSentinel.DEFAULT}) for a in args]  # type: ignore[misc]


def with_args(call: cst.Call, kept: list[cst.Arg], added: list[cst.Arg]) -> cst.Call:
    """``call`` with the arguments ``kept`` (its own, some maybe dropped) then ``added``, laid out as
    the call was (see :func:`laid_out_as`)."""
    return call.with_changes(args=laid_out_as(call.args, [*kept, *added]))


def laid_out_as(template: Sequence[cst.Arg], args: list[cst.Arg]) -> list[cst.Arg]:
    """``args`` separated as ``template`` (the arguments of the call they replace) was: a call written
    one argument per line (every separator ends a line) stays so, its new arguments on lines of their
    own, its closing parenthesis where it was; any other call gets plain ``, `` (``strip_commas`` alone
    would put a multi-line call on one long line)."""
    commas = [a.comma for a in template[:-1]]
    one_per_line = bool(commas) and all(
        isinstance(c, cst.Comma) and isinstance(c.whitespace_after, cst.ParenthesizedWhitespace)
        for c in commas
    )
    separator = commas[0] if one_per_line else None
    if not args:
        return []
    if separator is None:  # what followed the last argument (a newline before `)`) would split new ones
        return [  # separators only: no check of an Arg reads them, so no constructor's validation
            copy_node(
                a, {"comma": cst.MaybeSentinel.DEFAULT, "whitespace_after_arg": cst.SimpleWhitespace("")}
            )
            for a in args
        ]  # type: ignore[misc]
    closing = {"comma": template[-1].comma, "whitespace_after_arg": template[-1].whitespace_after_arg}
    out = [
        copy_node(a, {"comma": separator, "whitespace_after_arg": cst.SimpleWhitespace("")})
        for a in args[:-1]
    ]
    return [*out, copy_node(args[-1], closing)]  # type: ignore[list-item]


def self_attr(node: cst.CSTNode) -> str | None:
    """``self.x`` -> ``"x"``."""
    if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
        return node.attr.value
    return None


BINDERS = frozenset({cst.AnnAssign, cst.AugAssign, cst.For})  # one target; cst.Assign has several


def self_targets(node: cst.CSTNode) -> list[tuple[cst.Attribute, str]]:
    """The ``self.X`` an assignment, augmented or annotated assignment or ``for`` binds (through
    tuple / list unpacking), each with its name; [] for any other node."""
    kind = type(node)
    targets = (
        [t.target for t in node.targets]  # type: ignore[attr-defined]
        if kind is cst.Assign
        else [node.target]  # type: ignore[attr-defined]
        if kind in BINDERS
        else []
    )
    found: list[tuple[cst.Attribute, str]] = []
    while targets:
        target = targets.pop()
        if type(target) in (cst.Tuple, cst.List):
            targets += [e.value for e in target.elements]  # type: ignore[attr-defined]
        elif (attr := self_attr(target)) is not None:
            found.append((target, attr))  # type: ignore[arg-type]
    return found


def is_super_call(node: cst.CSTNode) -> bool:
    """``super()`` (or ``super(Cls, self)``)."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "super"


def needs_parens(expr: cst.BaseExpression) -> bool:
    return isinstance(
        expr,
        (
            cst.BinaryOperation,
            cst.BooleanOperation,
            cst.UnaryOperation,
            cst.IfExp,
            cst.Lambda,
            cst.Comparison,
        ),
    )


def substitute_self_fields(expr_src: str, fields: dict[str, str], others_kept: bool = False) -> str | None:
    """Rewrite ``self.<field>`` in ``expr_src`` with the caller's argument text; None if the expression uses
    anything of the callee's ``self`` that is not a given field (``others_kept``: those stay as they are)."""
    tree = parse_expression(expr_src)
    missing = False

    class Sub(cst.CSTTransformer):
        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
            nonlocal missing
            name = self_attr(original)
            if name is None:
                return updated
            if name not in fields:
                missing = missing or not others_kept
                return updated
            value = parse_expression(fields[name])
            if needs_parens(value):
                value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return value

    out = tree.visit(Sub())
    return None if missing else code(out)


def replace_name(expr_src: str, name: str, replacement: str) -> str:
    """``widths[i]`` with ``i`` -> ``(i - 1)`` gives ``widths[(i - 1)]`` (names only, not attributes)."""
    if name not in names_in(parse_expression(expr_src)):
        return expr_src

    class T(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            return parse_expression(replacement) if original.value == name else updated

        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
            return updated.with_changes(attr=original.attr)  # `cfg.i` keeps its attribute name

    return code(parse_expression(expr_src).visit(T()))


def comprehension_names(node: cst.CSTNode) -> set[str]:
    """Names bound by comprehensions inside ``node`` (``ax`` in ``tuple(x.shape[ax] for ax in axes)``)."""
    return _targets_in(node, (cst.CompFor,))


# the nodes whose ``target`` binds names: an assignment's target, an annotated or augmented one, a loop's
_TARGET_HOLDERS = (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor)


def assigned_in(node: cst.CSTNode) -> set[str]:
    """Names an assignment-like statement (or any block) binds."""
    return _targets_in(node, _TARGET_HOLDERS[:4])


def _targets_in(node: cst.CSTNode, holders: tuple[type, ...]) -> set[str]:
    """The names in the ``target`` of every node of a type of ``holders`` under ``node``."""
    found: set[str] = set()
    stack = [node]
    memo_get = CHILDREN_MEMO.get
    while stack:
        cur = stack.pop()
        if type(cur) in holders:
            found.update(names_in(cur.target))  # type: ignore[attr-defined]
        entry = memo_get(id(cur))  # syntax_children(cur), its memo read inline
        stack.extend(entry[1] if entry is not None and entry[0] is cur else syntax_children(cur))
    return found


def only_shape_uses(node: cst.CSTNode, name: str) -> bool:
    """``name`` appears in ``node`` only as ``name.shape`` or ``name.ndim``."""
    ok = True

    class V(FastVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> bool:
            if isinstance(n.value, cst.Name) and n.value.value == name:
                nonlocal ok
                ok = ok and n.attr.value in ("shape", "ndim")
                return False
            return True

        def visit_Name(self, n: cst.Name) -> None:
            nonlocal ok
            if n.value == name:
                ok = False

    V().walk(node)
    return ok


def absolute_qualname(qualname: str, module_name: str) -> str:
    """``.blocks.Block`` (a relative import) -> ``pkg.blocks.Block`` for a file of package ``pkg``."""
    if not qualname.startswith("."):
        return qualname
    dots = len(qualname) - len(qualname.lstrip("."))
    package = module_name.split(".")[:-dots] if module_name else []
    return ".".join([*package, qualname.lstrip(".")])


def without_dead_locals(fn: cst.FunctionDef, candidates: set[str]) -> cst.FunctionDef:
    """``fn`` without the ``name = value`` lines of ``candidates`` (locals bound once, with no side
    effects, that moved into ``__init__``) that nothing in ``fn`` reads any more; a line that is the
    only one of its block stays."""
    while candidates:
        counts = name_counts(fn.body)
        dead = {name for name in candidates if counts.get(name, 0) == 1}  # the assignment's own target
        if not dead:
            return fn

        class Drop(cst.CSTTransformer):
            def __init__(self, dead: set[str]) -> None:
                super().__init__()
                self.dead = dead

            def leave_IndentedBlock(
                self, original: cst.IndentedBlock, updated: cst.IndentedBlock
            ) -> cst.IndentedBlock:
                kept: list[cst.BaseStatement] = []
                comments: list[cst.EmptyLine] = []  # a dropped line's comments go to the next line
                dropped = False
                for stmt in updated.body:
                    assigned = single_assign(stmt)
                    if assigned is not None and assigned[0] in self.dead and len(updated.body) > 1:
                        comments += [line for line in stmt.leading_lines if line.comment is not None]  # type: ignore[attr-defined]
                        dropped = True
                        continue
                    lines = list(stmt.leading_lines)  # type: ignore[attr-defined]
                    if dropped and not kept:  # now the block's first line: no blank line above it
                        lines = [line for line in lines if line.comment is not None]
                    if comments or lines != list(stmt.leading_lines):  # type: ignore[attr-defined]
                        stmt = stmt.with_changes(leading_lines=[*comments, *lines])  # type: ignore[attr-defined]
                        comments = []
                    kept.append(stmt)
                return updated.with_changes(body=kept) if kept else updated

        fn = fn.visit(Drop(dead))  # type: ignore[assignment]
        candidates = candidates - dead
    return fn


def single_assign(stmt: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """``name = value`` on a line of its own -> ``(name, value)``; None for any other statement."""
    if (
        type(stmt) is cst.SimpleStatementLine
        and len(stmt.body) == 1
        and type(stmt.body[0]) is cst.Assign
        and len(stmt.body[0].targets) == 1
        and isinstance(stmt.body[0].targets[0].target, cst.Name)
    ):
        return stmt.body[0].targets[0].target.value, stmt.body[0].value
    return None


def without_keywords(call: cst.Call, names: set[str]) -> cst.Call:
    """``call`` without its keyword arguments ``names``, every other argument laid out as written (the
    last one kept takes the dropped last one's comma, so a trailing comma and its newline stay)."""
    args = list(call.args)
    kept = [a for a in args if a.keyword is None or a.keyword.value not in names]
    if len(kept) == len(args):
        return call
    if kept and args[-1] is not kept[-1]:
        kept[-1] = kept[-1].with_changes(comma=args[-1].comma)
    return call.with_changes(args=kept)


def bind_args(
    order: tuple[str, ...] | list[str], call: cst.Call
) -> tuple[dict[str, cst.Arg], cst.Arg | None]:
    """A call's arguments by parameter name (positional ones named after ``order``), and its ``name=``
    argument apart: Linen's auto-name, which NNX has no parameter for."""
    bound: dict[str, cst.Arg] = {}
    name_arg = None
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for i, arg in enumerate(positional):
        if i < len(order):
            bound[order[i]] = arg
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword.value == "name":
                name_arg = arg
            else:
                bound[arg.keyword.value] = arg
    return bound, name_arg


def name_reads(node: cst.CSTNode, name: str) -> list[cst.Name]:
    """Every ``Name`` node spelling ``name`` under ``node`` (``x.name`` is not a read of ``name``)."""
    found: list[cst.Name] = []

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            if n.value == name:
                found.append(n)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

    node.visit(V())
    return found


def leaves_function(
    suite: cst.BaseSuite | cst.BaseStatement | None, exits: tuple[type, ...] = (cst.Return, cst.Raise)
) -> bool:
    """Whether a branch ends in ``return`` or ``raise`` (``exits``): the code after its ``if`` sees only
    the other branches' values (a ``break`` / ``continue`` does not count: its values reach the loop's
    next turn). An ``elif`` is no branch that ends so."""
    if isinstance(suite, cst.Else):
        suite = suite.body
    if isinstance(suite, cst.IndentedBlock):  # `if c: return x` on one line is a statement suite
        suite = suite.body[-1] if suite.body else None  # type: ignore[assignment]
    small = suite.body if isinstance(suite, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else ()
    return bool(small) and isinstance(small[-1], exits)


def defaults_to_none(fn: cst.FunctionDef | None, name: str) -> bool:
    """``fn``'s parameter ``name`` defaults to ``None``: an input its callers may leave out."""
    if fn is None:
        return False
    params = (*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params)
    return any(
        p.name.value == name and isinstance(p.default, cst.Name) and p.default.value == "None" for p in params
    )
