"""Static dataflow of feature sizes through a ``__call__`` body.

NNX layers need their input feature size at construction; Linen infers it from the first input.
This pass follows each value through layers, shape-preserving functions and flattens to tell, for
every layer application, where its input's last axis comes from:

- ``expr``     the output size of an earlier layer, as source text (``self.hidden``);
- ``input``    a positional input of the method (becomes a constructor argument);
- ``flatten``  a reshape to ``(..., -1)`` of a known value (solved with a trace);
- ``sliced``   an indexed value (``x[:, 0]``), whose last axis may or may not survive (trace);
- ``unknown``  anything else (solved with a trace, or a manual finding).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import code, names_in, replace_name
from linen2nnx.migrate.linen_api import feature_preserving_functions


@dataclasses.dataclass(frozen=True)
class Feat:
    kind: str  # expr | input | flatten | unknown
    expr: str = ""
    input_name: str = ""
    base: Feat | None = None
    reason: str = ""
    elements: tuple[Feat, ...] = ()  # kind "tuple": one Feat per element

    @staticmethod
    def unknown(reason: str) -> Feat:
        return Feat("unknown", reason=reason)


@dataclasses.dataclass
class LayerInfo:
    """What the flow needs to know about one layer application."""

    key: str  # NNX attribute of the layer
    out_expr: str | None  # source of its output feature size; None: same as its input
    out_unknown: bool = False  # the output size cannot be told statically
    out_fn: Callable[[Feat], Feat] | None = None  # the output as a function of the first input (wins if set)


@dataclasses.dataclass
class LayerUse:
    key: str
    feat: Feat
    node: cst.CSTNode
    iteration: int = 0  # 0: first (or only) pass; 1: a later iteration of an enclosing loop
    args: tuple[Feat, ...] = ()  # every positional input (a module may size itself by its second one)


ARRAY_CONSTRUCTORS = frozenset({"jax.numpy.zeros", "jax.numpy.ones", "jax.numpy.empty", "jax.numpy.full",
                                "numpy.zeros", "numpy.ones"})
SHAPE_KEEPING_METHODS = frozenset({"astype", "clip", "squeeze"})


class FeatureFlow:
    """Abstract interpretation of one method body over :class:`Feat` values."""

    def __init__(
        self,
        params: Sequence[str],
        layer_of: Callable[[cst.Call], LayerInfo | None],
        qualnames_of: Callable[[cst.CSTNode], set[str]],
        method_of: Callable[[cst.Call, list[Feat]], Feat | None] = lambda call, args: None,
        on_assign: Callable[[cst.Assign], None] = lambda assign: None,
    ) -> None:
        self.method_of = method_of
        self.on_assign = on_assign
        self.env: dict[str, Feat] = {p: Feat("input", input_name=p) for p in params}
        self.layer_of = layer_of
        self.qualnames_of = qualnames_of
        self.uses: list[LayerUse] = []
        self.returns: list[Feat] = []
        self.iteration = 0

    # ---- statements --------------------------------------------------------------------------
    def run(self, body: Sequence[Any]) -> None:
        for stmt in body:
            self.statement(stmt)

    def statement(self, stmt: Any) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small_statement(small)
        elif isinstance(stmt, cst.If):
            before = dict(self.env)
            self.run(stmt.body.body)
            after_then = self.env
            self.env = dict(before)
            if stmt.orelse is not None:
                self.statement(stmt.orelse.body if isinstance(stmt.orelse, cst.Else) else stmt.orelse)
            self.env = _merge(after_then, self.env)
        elif isinstance(stmt, cst.IndentedBlock):
            self.run(stmt.body)
        elif isinstance(stmt, (cst.For, cst.While)):
            # Two passes: the first iteration sees the values from before the loop, later ones
            # see the previous iteration's; layers inside record both.
            self.expr_of(stmt.iter if isinstance(stmt, cst.For) else stmt.test)
            if isinstance(stmt, cst.For):
                self.bind(stmt.target, Feat.unknown("loop variable"))
            outer = self.iteration
            self.run(stmt.body.body)
            self.iteration = 1
            self.run(stmt.body.body)
            self.iteration = outer
            if isinstance(stmt, cst.For) and isinstance(stmt.target, cst.Name):
                self._leave_loop(stmt)
        elif isinstance(stmt, (cst.With, cst.Try)):
            self.run(stmt.body.body)
        # nested defs / classes do not change the method's dataflow

    def _leave_loop(self, stmt: cst.For) -> None:
        """After ``for v in seq``, a size written with ``v`` means the last element's: ``seq[-1]``."""
        var = stmt.target.value  # type: ignore[attr-defined]
        it = stmt.iter
        if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range":
            last = f"({code(it.args[-1].value)} - 1)" if len(it.args) in (1, 2) else None
        elif isinstance(it, cst.Call):
            last = None
        else:
            last = f"{code(it)}[-1]"
        for name, feat in list(self.env.items()):
            if feat.kind == "expr" and var in names_in(cst.parse_expression(feat.expr)):
                self.env[name] = Feat("expr", expr=replace_name(feat.expr, var, last)) if last else \
                    Feat.unknown(f"a size that depends on the loop variable {var}")

    def small_statement(self, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, cst.Assign):
            self.on_assign(small)
            value = self.expr_of(small.value)
            for target in small.targets:
                self.bind(target.target, value)
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            self.bind(small.target, self.expr_of(small.value))
        elif isinstance(small, cst.AugAssign):
            self.expr_of(small.value)
        elif isinstance(small, cst.Return) and small.value is not None:
            self.returns.append(self.expr_of(small.value))
        elif isinstance(small, cst.Expr):
            self.expr_of(small.value)

    def bind(self, target: cst.BaseExpression, value: Feat) -> None:
        if isinstance(target, cst.Name):
            self.env[target.value] = value
        elif isinstance(target, (cst.Tuple, cst.List)):
            parts = value.elements if value.kind == "tuple" and len(value.elements) == len(target.elements) else ()
            for i, el in enumerate(target.elements):
                self.bind(el.value, parts[i] if parts else Feat.unknown("tuple unpacking"))

    # ---- expressions -------------------------------------------------------------------------
    def expr_of(self, node: cst.BaseExpression | None) -> Feat:
        if node is None:
            return Feat.unknown("no value")
        if isinstance(node, cst.Name):
            return self.env.get(node.value, Feat.unknown(f"name {node.value!r}"))
        if isinstance(node, cst.Call):
            return self.call(node)
        if isinstance(node, cst.BinaryOperation):
            left, right = self.expr_of(node.left), self.expr_of(node.right)
            if isinstance(node.operator, cst.MatrixMultiply):  # x @ w: the last axis is w's
                return Feat.unknown("a matrix product")
            return left if left.kind != "unknown" else right  # elementwise: broadcasting keeps it
        if isinstance(node, cst.UnaryOperation):
            return self.expr_of(node.expression)
        if isinstance(node, (cst.Tuple, cst.List)):
            return Feat("tuple", elements=tuple(self.expr_of(el.value) for el in node.elements))
        if isinstance(node, cst.Subscript):  # x[:, 0] keeps the last axis unless it indexes it: the trace decides
            return Feat("sliced", base=self.expr_of(node.value))
        if isinstance(node, cst.IfExp):
            a, b = self.expr_of(node.body), self.expr_of(node.orelse)
            for tup, plain in ((a, b), (b, a)):
                # `(y, None) if scanned else y`: a layer body that serves nn.scan (carry, out) or a loop
                if tup.kind == "tuple" and tup.elements and tup.elements[0] == plain:
                    return plain
            return a if a == b else Feat.unknown("conditional expression")
        return Feat.unknown(type(node).__name__)

    def call(self, node: cst.Call) -> Feat:
        arg_feats = [self.expr_of(a.value) for a in node.args]
        if isinstance(node.func, cst.Call):  # nn.Dense(...)(x): visit the constructor's args too
            for a in node.func.args:
                self.expr_of(a.value)
        layer = self.layer_of(node)
        first = arg_feats[0] if arg_feats else Feat.unknown("no input")
        if layer is not None:
            self.uses.append(LayerUse(layer.key, first, node, self.iteration, tuple(arg_feats)))
            if layer.out_fn is not None:
                return layer.out_fn(first)
            if layer.out_unknown:
                return Feat.unknown(f"output of {layer.key}")
            return first if layer.out_expr is None else Feat("expr", expr=layer.out_expr)
        if self.qualnames_of(node.func) & feature_preserving_functions():
            return first
        through_method = self.method_of(node, arg_feats)
        if through_method is not None:
            return through_method
        if isinstance(node.func, cst.Attribute):
            method = node.func.attr.value
            receiver = self.expr_of(node.func.value)
            if method in SHAPE_KEEPING_METHODS:
                return receiver
            if method == "reshape":
                return _reshape(receiver, node)
        if (self.qualnames_of(node.func) & ARRAY_CONSTRUCTORS and node.args
                and isinstance(node.args[0].value, (cst.Tuple, cst.List)) and node.args[0].value.elements):
            last = node.args[0].value.elements[-1].value  # jnp.zeros((batch, self.hidden)): a carry
            if names_in(last) <= {"self"} and not isinstance(last, cst.Name):
                return Feat("expr", expr=code(last))
            if isinstance(last, cst.Integer):
                return Feat("expr", expr=code(last))
        if self.qualnames_of(node.func) & {"jax.numpy.reshape"} and node.args:
            return _reshape(first, cst.Call(func=node.func, args=node.args[1:]))
        return Feat.unknown("call")


def _reshape(receiver: Feat, node: cst.Call) -> Feat:
    args = node.args
    last = None
    if len(args) == 1 and isinstance(args[0].value, (cst.Tuple, cst.List)) and args[0].value.elements:
        last = args[0].value.elements[-1].value
    elif args:
        last = args[-1].value
    if isinstance(last, cst.UnaryOperation) and isinstance(last.expression, cst.Integer) and last.expression.value == "1":
        return Feat("flatten", base=receiver)
    return Feat.unknown("reshape")


def _merge(a: dict[str, Feat], b: dict[str, Feat]) -> dict[str, Feat]:
    out = {}
    for k in a.keys() | b.keys():
        va, vb = a.get(k), b.get(k)
        out[k] = va if va == vb else Feat.unknown("differs between branches")
    return out


def transfer(out: Feat, params: list[str], args: list[Feat]) -> Feat:
    """A callee's result ``out`` (in terms of its own ``params``) seen at a call with argument values ``args``."""
    if out.kind == "input":
        i = params.index(out.input_name) if out.input_name in params else -1
        return args[i] if 0 <= i < len(args) else Feat.unknown(f"argument {out.input_name}")
    if out.kind == "tuple":
        return Feat("tuple", elements=tuple(transfer(e, params, args) for e in out.elements))
    if out.kind == "expr":
        return out
    return Feat.unknown("callee result")

