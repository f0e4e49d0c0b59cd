"""Static dataflow of feature sizes through a ``__call__`` body.

NNX layers need their input feature size at construction; Linen infers it from the first input.
This pass follows each value through layers, shape-preserving functions and flattens to tell, for
every layer application, where its input's last axis comes from:

- ``expr``     the output size of an earlier layer, as source text (``self.hidden``);
- ``input``    a positional input of the method (becomes a constructor argument);
- ``flatten``  a reshape to ``(..., -1)`` of a known value (solved with a trace);
- ``sliced``   an indexed value (``x[:, 0]``), whose last axis may or may not survive (trace);
- ``unknown``  anything else (solved with a trace, or a manual finding).

A parameter the class creates with a literal shape (``self.param('w', init, (d, self.features))``)
also carries its rank, so a contraction against it (``x @ w``, ``jnp.dot(x, w)``,
``lax.dot_general(x, w, dims)``) knows its result's last axis: ``w``'s last free axis. A right-hand
side of unknown rank leaves the result unknown (a vector contracts the last axis away).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import libcst as cst

from linen2nnx.migrate import (
    axis_order,
    axis_sizes,
    last_axis_ops,
    mapping_flow,
    mutation,
    output_values,
    rank_guards,
    tuple_flow,
    unfollowed,
)
from linen2nnx.migrate.array_functions import (
    ARRAY_CONSTRUCTORS,
    CONCATENATE_FUNCTIONS,
    DOT_GENERAL_FUNCTIONS,
    EINOPS_FUNCTIONS,
    LIKE_FUNCTIONS,
    MATMUL_FUNCTIONS,
    ONE_HOT_FUNCTIONS,
    REDUCTIONS,
    SHAPE_KEEPING_FUNCTIONS,
    SHAPE_KEEPING_METHODS,
    numpy_reduction,
    one_hot_size,
)
from linen2nnx.migrate.call_inputs import input_fed
from linen2nnx.migrate.cst_meta import TUPLE_OR_LIST
from linen2nnx.migrate.cst_utils import code, config_test, names_in, parse_expression, replace_name
from linen2nnx.migrate.dataflow_types import Feat, LayerInfo
from linen2nnx.migrate.handed_modules import handed_output
from linen2nnx.migrate.last_axis_ops import is_number as numeric
from linen2nnx.migrate.linen_api import feature_preserving_functions
from linen2nnx.migrate.loop_runs import last_values
from linen2nnx.migrate.weights_dict import applied_weights


@dataclasses.dataclass
class LayerUse:
    key: str
    feat: Feat
    node: cst.CSTNode
    iteration: int = 0  # 0: first (or only) pass; 1: a later iteration of an enclosing loop
    args: tuple[Feat, ...] = ()  # every positional input (a module may size itself by its second one)
    path: tuple = ()  # the branches and loops it sits in, outermost first (see FeatureFlow.path)


KEPT_BY_INDEXING = ("expr", "input", "flatten", "choice", "sliced")
"""Kinds of an array value whose last axis an index that leaves it untouched keeps."""


class FeatureFlow:
    """Abstract interpretation of one method body over :class:`Feat` values."""

    def __init__(
        self,
        params: Sequence[str],
        layer_of: Callable[[cst.Call], LayerInfo | None],
        qualnames_of: Callable[[cst.CSTNode], set[str]],
        method_of: Callable[[cst.Call, list[Feat]], Feat | None] = lambda call, args: None,
        on_assign: Callable[[cst.Assign], None] = lambda assign: None,
        value_of: Callable[[cst.BaseExpression, dict[str, Feat]], Feat | None] = lambda node, env: None,
        after_loop: Callable[[cst.For, dict[str, Feat], dict[str, Feat]], None] = lambda *_: None,
        records: Mapping[str, tuple_flow.RecordClass] | None = None,
        size_fields: frozenset[str] = frozenset(),
        dims: axis_sizes.AxisSizes | None = None,
    ) -> None:
        # sizes held in locals (`n, l, d = x.shape`): shared with the flows of inlined helpers
        self.dims = dims if dims is not None else axis_sizes.AxisSizes()
        self.size_fields = size_fields  # the class's dataclass fields: sizes __init__ can read
        self.records = records or {}  # the file's plain data classes (see tuple_flow.record_classes)
        self.after_loop = after_loop  # (loop, values before it, values after it): may rewrite the latter
        self.method_of = method_of
        self.value_of = value_of  # a parameter of the class (its creation, or its setup() attribute)
        self.on_assign = on_assign
        self.env: dict[str, Feat] = {p: Feat("input", input_name=p) for p in params}
        self.layer_of = layer_of
        self.qualnames_of = qualnames_of
        self.uses: list[LayerUse] = []
        self.returns: list[Feat] = []
        self.iteration = 0
        self.at_if: dict[cst.If, dict[str, Feat]] = {}  # the values each `if` test sees (first pass)
        self.in_place: mutation.InPlace | None = None  # lists and objects changed in place (first run)
        self.unsure_of: cst.FunctionDef | None = None  # the function walked (unfollowed.absence_unsure)
        self._unsure: frozenset[str] | None = None
        # `dict` is the builtin (the file binds no such name): dict(k=x) is a display
        self.builtin_dict = False
        self.path: tuple = ()
        """The branches (an ``if`` body or ``else``, a conditional expression's side) and loop bodies the
        statement being read sits in, outermost first: what may not run when the code around it does."""

    # ---- statements --------------------------------------------------------------------------
    def run(self, body: Sequence[Any]) -> None:
        if self.in_place is None:  # the first run is over the method's whole body
            self.in_place = mutation.method_changes(body, self.qualnames_of, self.records)
        for stmt in body:
            self.statement(stmt)

    def statement(self, stmt: Any) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small_statement(small)
        elif isinstance(stmt, cst.If):
            unfollowed.forget_test_bindings(self.env, stmt.test)
            before = dict(self.env)
            self.at_if.setdefault(stmt, before)  # what the test sees (a shape test is decided from it)
            with self._within(stmt, 0):
                self.run(stmt.body.body)
            after_then = self.env
            self.env = dict(before)
            if stmt.orelse is not None:
                with self._within(stmt, 1):
                    self.statement(stmt.orelse.body if isinstance(stmt.orelse, cst.Else) else stmt.orelse)
            self.env = tuple_flow.after_if(stmt, after_then, self.env, self.unsure)
            rank_guards.ranked(self.env, rank_guards.raised_unless_rank(stmt))
        elif isinstance(stmt, cst.IndentedBlock):
            self.run(stmt.body)
        elif isinstance(stmt, (cst.For, cst.While)):
            # Two or three passes: the first iteration sees the values from before the loop, later
            # ones see the previous iteration's; layers inside record each. When the second pass
            # changed a size, a third one shows whether it settled: a size the third pass still
            # changes (a width that grows with every iteration: x = concat([x, f(x)])) is none that
            # holds for every later iteration: the sizing refuses it, and after the loop it is unknown.
            self.expr_of(stmt.iter if isinstance(stmt, cst.For) else stmt.test)
            before = dict(self.env)
            if isinstance(stmt, cst.For):
                self.bind(stmt.target, Feat.unknown("loop variable"), stmt.iter)
            outer = self.iteration
            self._run_within(stmt)
            first = dict(self.env)
            self.iteration = 1
            self._run_within(stmt)
            if self.env != first:  # the second pass changed a size: would a third change it again?
                second = dict(self.env)
                self.iteration = 2
                start = len(self.uses)
                self._run_within(stmt)
                unsettled = Feat.unknown("a size that changes with every iteration of a loop")
                for name, feat in list(self.env.items()):
                    if second.get(name) != feat:
                        self.env[name] = unsettled
                if any(self.env[name] is unsettled for name in self.env):
                    # a later iteration may read the size still changing: no use of the loop holds
                    for use in self.uses[start:]:
                        use.feat = unsettled
            self.iteration = outer
            for name, feat in list(self.env.items()):  # the loop may not run: a rank it changes is unsure
                if feat.rank and name in before and before[name].rank != feat.rank:
                    self.env[name] = feat.rankless()
            if isinstance(stmt, cst.For):  # the loop variable's last value, then the hook's (loop_runs.py)
                self._leave_loop(stmt, before)
                self.after_loop(stmt, before, self.env)
            unfollowed.forget_unfollowed(self.env, stmt)  # its `else:`
        elif isinstance(stmt, (cst.With, cst.Try, cst.TryStar, cst.Match)):
            self.run([] if isinstance(stmt, cst.Match) else stmt.body.body)
            unfollowed.forget_unfollowed(self.env, stmt)  # except / else / finally, the cases of a match
        # nested defs / classes do not change the method's dataflow

    def unsure(self) -> frozenset[str] | None:
        """What the walked function may bind unseen (unfollowed.absence_unsure), once needed; None: any."""
        if self._unsure is None and self.unsure_of is not None:
            self._unsure = unfollowed.absence_unsure(self.unsure_of)
        return self._unsure

    @contextlib.contextmanager
    def _within(self, node: cst.CSTNode, side: int) -> Iterator[None]:
        """Read what follows inside branch ``side`` of ``node`` (an ``if``'s body 0 or ``else`` 1, a loop's body)."""
        outer = self.path
        self.path = (*outer, (id(node), side))
        try:
            yield
        finally:
            self.path = outer

    def _run_within(self, loop: cst.For | cst.While) -> None:
        with self._within(loop, 0):
            self.run(loop.body.body)

    def _leave_loop(self, stmt: cst.For, before: dict[str, Feat]) -> None:
        """After ``for v in seq``, a size written with ``v`` means the last element's: ``seq[-1]`` -- or,
        when the loop may not run, the size from before it (kind ``choice``: ``elements`` are the
        two, ``expr`` the test that the loop ran). A size written with a loop name the source does
        not pin down after the loop (``zip``) is unknown."""
        lasts, ran = last_values(stmt)
        targets = names_in(stmt.target)
        for name, feat in list(self.env.items()):
            read = names_in(parse_expression(feat.expr)) & targets if feat.kind == "expr" else set()
            if not read:
                continue
            if not read <= set(lasts):
                self.env[name] = Feat.unknown(f"a size that depends on the loop variable {min(read)}")
                continue
            expr = feat.expr
            for var in sorted(read):
                expr = replace_name(expr, var, lasts[var])
            after, previous = Feat("expr", expr=expr), before.get(name)
            if previous is None or previous == after:
                self.env[name] = after  # only bound by the loop: used after it, the loop ran
            else:
                self.env[name] = Feat(
                    "choice",
                    expr=ran,
                    elements=(after, previous),
                    reason=f"a size that depends on whether the loop over {min(read)} ran",
                )

    def small_statement(self, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, cst.Assign):
            self.on_assign(small)
            self.dims.note(small, self.env)
            rank_guards.ranked(self.env, rank_guards.unpacked_rank(small))
            value = self.expr_of(small.value)
            for target in small.targets:
                self.bind(target.target, value, small.value)
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            self.bind(small.target, self.expr_of(small.value), small.value)
        elif isinstance(small, cst.AugAssign):
            value = self.expr_of(small.value)
            held = self.env.get(small.target.value) if isinstance(small.target, cst.Name) else None
            if held is not None and held.kind in tuple_flow.SEQUENCES:  # outputs += (attn,)
                mutation.augmented(self.in_place, self.env, small.target.value)  # type: ignore[arg-type, union-attr]
                adds = isinstance(small.operator, cst.AddAssign)
                self.env[small.target.value] = (  # type: ignore[union-attr]
                    tuple_flow.joined(held, value) if adds else Feat.unknown("an augmented tuple")
                )
            elif held is not None:  # x += y: x + y
                self.env[small.target.value] = unfollowed.augmented_value(held, value, small)  # type: ignore[union-attr]
        elif isinstance(small, cst.Return) and small.value is not None:
            self.returns.append(self.expr_of(small.value))
        elif isinstance(small, cst.Expr):
            self.expr_of(small.value)
        elif isinstance(small, cst.Assert):
            rank_guards.ranked(self.env, rank_guards.asserted_rank(small.test))

    def bind(self, target: cst.BaseExpression, value: Feat, rhs: cst.BaseExpression | None = None) -> None:
        if isinstance(target, cst.Name):  # a list or object changed in place: no element known
            self.env[target.value] = self.in_place.bound(self.env, target.value, value, rhs)  # type: ignore[union-attr]
        elif isinstance(target, (cst.Tuple, cst.List)):
            for part, feat in tuple_flow.unpacked(target, value):
                self.bind(part, feat, rhs)
        elif mutation.keyed_store(target):  # out['logits'] = x: the dict's entry, in order
            self._store_entry(target, value)  # type: ignore[arg-type]

    def _leaf_kept(self, name: str) -> bool:
        """Whether a leaf of the input ``name`` is still the input's own: the method changes no item of
        anything but its own dicts, and does not hand the input to a call that may change it."""
        in_place = self.in_place
        return in_place is not None and in_place.own_dict_items_only and name not in in_place.names

    def _store_entry(self, target: cst.Subscript, value: Feat) -> None:
        """``name[key] = value`` with a string key: a dict's entry replaced or added; any other list or
        object it is stored into (an output object's item) is no longer known. Every other local
        sharing it forgets its elements too."""
        name = target.value.value  # type: ignore[attr-defined]
        held = self.env.get(name)
        if held is None or held.kind not in tuple_flow.COMPOUND:
            return
        mutation.augmented(self.in_place, self.env, name)  # type: ignore[arg-type]
        key = target.slice[0].slice.value  # type: ignore[attr-defined]
        self.env[name] = (
            mapping_flow.stored(held, key, value)
            if held.kind == mapping_flow.KIND
            else Feat.unknown(f"{name}, changed in place")
        )

    def axis_size(self, node: cst.BaseExpression) -> Feat | None:
        """The size an axis written as ``node`` has, as a size the flow follows: an integer or a field
        (see last_axis_ops), ``v.shape[-1]`` of a value of known size, or a local holding one."""
        return self.dims.size(node, self.env, self.size_fields)

    # ---- expressions -------------------------------------------------------------------------
    def expr_of(self, node: cst.BaseExpression | None) -> Feat:
        if node is None:
            return Feat.unknown("no value")
        if type(node) is cst.Name:
            return self.env.get(node.value, Feat.unknown(f"name {node.value!r}"))
        if type(node) is cst.Call:
            return self.call(node)
        if type(node) is cst.BinaryOperation:
            left, right = self.expr_of(node.left), self.expr_of(node.right)
            if isinstance(node.operator, cst.MatrixMultiply):  # x @ w: the last axis is w's
                return last_axis_ops.contracted(right, -2)
            if left.kind in tuple_flow.COMPOUND and right.kind in tuple_flow.COMPOUND:
                if isinstance(node.operator, cst.Add):  # (h,) + outputs[1:], decoder_out + encoder_out
                    left, right = output_values.summand(left), output_values.summand(right)
                    return tuple_flow.joined(tuple_flow.as_sequence(left), tuple_flow.as_sequence(right))
                return Feat.unknown("an operation on tuples")
            if left.kind in tuple_flow.COMPOUND:  # (h,) + array broadcasts: no tuple, nor a size
                return Feat.unknown("a tuple and an array")
            # elementwise: broadcasting keeps it (x / 255.0 with x unknown: x's reason, not the literal's)
            gated = isinstance(node.operator, cst.Multiply)
            return last_axis_ops.broadcast(
                left, right, (numeric(node.left), numeric(node.right)), gated=gated
            )
        if isinstance(node, cst.UnaryOperation):
            return self.expr_of(node.expression)
        if type(node) in TUPLE_OR_LIST:  # (h, *rest): rest's elements spliced in
            return tuple_flow.displayed(
                [(isinstance(el, cst.StarredElement), self.expr_of(el.value)) for el in node.elements]
            )
        if isinstance(node, cst.Attribute):
            known = self.value_of(node, self.env)
            if known is None and not (isinstance(node.value, cst.Name) and node.value.value == "self"):
                known = tuple_flow.field_of(self.expr_of(node.value), node.attr.value)  # out.hidden
            return known if known is not None else Feat.unknown("Attribute")
        if isinstance(node, cst.Dict):  # {'last_hidden_state': x, ...}
            return mapping_flow.displayed(node, self.expr_of)
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        if isinstance(node, cst.IfExp):
            with self._within(node, 0):
                a = self.expr_of(node.body)
            with self._within(node, 1):
                b = self.expr_of(node.orelse)
            for tup, plain in ((a, b), (b, a)):
                # `(y, None) if scanned else y`: a layer body that serves nn.scan (carry, out) or a loop
                if tup.kind == "tuple" and tup.elements and tup.elements[0] == plain:
                    return plain
            both = tuple_flow.merged(a, b, tuple_flow.merge_value)  # (h, w) if flag else (h,): both hold
            test = config_test(node.test)  # sides sized differently: a choice on it, as after an `if`
            if a != b and both is None and test is not None and {a.kind, b.kind} <= set(tuple_flow.SIZED):
                return Feat("choice", expr=test, elements=(a, b))
            if a == b or both is not None:
                return a if a == b else both
            return Feat.unknown("conditional expression" + (tuple_flow.ONE_SIDE if test is not None else ""))
        return Feat.unknown(type(node).__name__)

    def _subscript(self, node: cst.Subscript) -> Feat:
        """``batch['image']``, ``outputs[0]``, ``x[:, 0]``: an input's entry, a tuple's element, or an
        array indexed over its leading axes."""
        base = self.expr_of(node.value)
        if base.kind in ("input", "leaf") and self._leaf_kept(base.input_name):  # batch['image']
            key = mapping_flow.subscript_key(node)
            if key is not None and key.isidentifier():
                return Feat("leaf", input_name=base.input_name, expr=f"{base.expr}[{key!r}]")
        element = tuple_flow.indexed(base, node)  # outputs[0], outputs[1:]
        if element is not None:
            return element
        if base.kind in KEPT_BY_INDEXING and last_axis_ops.index_keeps_last(node):
            # x[:, 0, :], x[..., :]: the last axis is untouched, the rank may not be
            return dataclasses.replace(base, rank=last_axis_ops.rank_after_index(base, node))
        kept = last_axis_ops.indexed_leading_axes(base, node) if base.kind in KEPT_BY_INDEXING else None
        if kept is not None:
            return kept  # x[:, 0] of a value of rank 3: the index stops before the last axis
        # x[:, 0] keeps the last axis unless it indexes it (a value of rank 2): the trace decides
        return Feat("sliced", base=base)

    def call(self, node: cst.Call) -> Feat:
        """What a call gives: a layer's output (its use recorded), a helper method's result, or what a
        library function makes of its arguments' sizes."""
        arg_feats = [self.expr_of(a.value) for a in node.args]
        self.in_place.called(self.env, node, self.qualnames_of, arg_feats)  # type: ignore[union-attr]
        if isinstance(node.func, cst.Call):  # nn.Dense(...)(x): visit the constructor's args too
            for a in node.func.args:
                self.expr_of(a.value)
        layer = self.layer_of(node)
        first = arg_feats[0] if arg_feats else Feat.unknown("no input")
        if layer is None and applied_weights(node) is not None:  # X.apply({'params': ...}, *inputs)
            assert isinstance(node.func, cst.Attribute)
            inner = cst.Call(func=node.func.value, args=node.args[1:])
            layer = self.layer_of(inner)
            if layer is not None:
                inputs = arg_feats[1:]
                return self._layer_applied(
                    layer, node, inputs, input_fed(inner, inputs, 0, layer.input_names), fed=inner
                )
        if layer is not None:
            return self._layer_applied(
                layer, node, arg_feats, input_fed(node, arg_feats, 0, layer.input_names)
            )
        known = self.value_of(node, self.env)
        if known is not None:
            return known
        filtered = output_values.filtered_source(node, self.qualnames_of(node.func))
        if filtered is not None:  # tuple(v for v in outputs if v is not None)
            return output_values.filtered(self.expr_of(filtered))
        if self.builtin_dict and mapping_flow.is_dict_call(node, self.qualnames_of(node.func)):  # dict(k=x)
            return mapping_flow.called(node, arg_feats)
        record = self.records.get(node.func.value) if isinstance(node.func, cst.Name) else None
        if record is not None and node.func.value not in self.env:  # type: ignore[attr-defined]
            built = tuple_flow.built_record(node, record, arg_feats, node.func.value)  # type: ignore[attr-defined]
            if built is not None:
                return built
        qualnames = self.qualnames_of(node.func)
        positional = [a for a in node.args if a.keyword is None and not a.star]
        contracted = self._kept_or_contracted(node, qualnames, arg_feats, positional, first)
        if contracted is not None:
            return contracted
        ordered = axis_order.reordered(node, qualnames, arg_feats)  # einsum, transpose, swapaxes
        if ordered is not None:
            return ordered
        through_method = self.method_of(node, arg_feats)
        if through_method is not None:
            return through_method
        return self._reshaped_or_built(node, qualnames, positional, first)

    def _layer_applied(
        self,
        layer: LayerInfo,
        node: cst.Call,
        arg_feats: list[Feat],
        first: Feat,
        fed: cst.Call | None = None,
    ) -> Feat:
        """A layer applied: its use is recorded with the size it reads; its output as the layer says.
        ``fed``: the call whose arguments are the layer's inputs, when ``node`` passes weights first."""
        read = input_fed(fed or node, arg_feats, layer.input_index, layer.input_names)
        self.uses.append(LayerUse(layer.key, read, node, self.iteration, tuple(arg_feats), self.path))
        return layer.output(first)

    def _kept_or_contracted(
        self,
        node: cst.Call,
        qualnames: set[str],
        arg_feats: list[Feat],
        positional: list[cst.Arg],
        first: Feat,
    ) -> Feat | None:
        """Functions that keep the feature size, contract it (``x @ w``, ``lax.dot_general``) or
        reduce axes (``jnp.mean(x, axis=...)``); None for any other call."""
        broadcast = last_axis_ops.broadcast_call(node, qualnames, arg_feats)
        if broadcast is not None:
            return broadcast
        if qualnames & feature_preserving_functions() or qualnames & SHAPE_KEEPING_FUNCTIONS:
            return first
        like = next((LIKE_FUNCTIONS[q] for q in qualnames if q in LIKE_FUNCTIONS), None)
        if (
            like is not None
            and len(positional) <= like
            and all(a.keyword is None or a.keyword.value != "shape" for a in node.args)
        ):
            return first  # jnp.ones_like(x): x's shape, unless a shape is given
        if qualnames & EINOPS_FUNCTIONS and len(positional) >= 2 and first.kind != "tuple":
            pattern = positional[1].value
            if isinstance(pattern, cst.SimpleString) and last_axis_ops.einops_keeps_last(
                pattern.evaluated_value
            ):
                return first.rankless()  # 'b h w c -> b (h w) c': another rank
        if qualnames & MATMUL_FUNCTIONS and len(positional) == 2 == len(node.args):
            return last_axis_ops.contracted(arg_feats[1], -2)
        if qualnames & DOT_GENERAL_FUNCTIONS and len(arg_feats) >= 2:
            dims = (
                positional[2].value
                if len(positional) > 2
                else next(
                    (
                        a.value
                        for a in node.args
                        if a.keyword is not None and a.keyword.value == "dimension_numbers"
                    ),
                    None,
                )
            )
            return last_axis_ops.contracted(arg_feats[1], *last_axis_ops.rhs_axes(dims))
        reduced = next(filter(None, map(numpy_reduction, qualnames)), None)
        if reduced is not None and positional:
            return last_axis_ops.reduced(first, positional[1:], node.args, positional[0].value)
        if (
            isinstance(node.func, cst.Attribute)
            and node.func.attr.value in REDUCTIONS
            and value_method(node.func, qualnames)
        ):
            return last_axis_ops.reduced(
                self.expr_of(node.func.value), positional, node.args, node.func.value
            )
        return None

    def _array_method(self, node: cst.Call, func: cst.Attribute, qualnames: set[str]) -> Feat | None:
        """``x.astype(...)``, ``x.transpose(...)``, ``x.reshape(...)``, ``x.squeeze()``: what the method
        makes of its receiver; None for any other method (the receiver is visited either way)."""
        method = func.attr.value
        receiver = self.expr_of(func.value)
        if method in SHAPE_KEEPING_METHODS:
            return receiver
        if method in axis_order.REORDERING_METHODS and value_method(func, qualnames):
            ordered = axis_order.method_reordered(node, receiver)
            if ordered is not None:
                return ordered
        if method == "reshape":
            return last_axis_ops.reshaped(receiver, node, func.value, self.size_fields, self.axis_size)
        if method == "squeeze":  # keeps the last axis or drops it, by the shape: only a trace tells
            kept = last_axis_ops.squeezed(receiver, node)  # ... unless its literal axes are others
            if kept is not None:
                return kept
            known = receiver if receiver.kind in ("input", "expr") else receiver.candidate
            return Feat("unknown", reason="a squeeze", candidate=known)
        return None

    def _reshaped_or_built(
        self, node: cst.Call, qualnames: set[str], positional: list[cst.Arg], first: Feat
    ) -> Feat:
        """Reshapes, shape-keeping methods, arrays built from a config shape (a carry), ``one_hot`` and
        concatenations; unknown for any other call."""
        if (
            qualnames & {"jax.numpy.broadcast_to", "numpy.broadcast_to"} and len(node.args) == 2
        ):  # broadcast_to(x[:, None], (t, e, x.shape[-1])): the last axis is the one written there
            written = last_axis_ops.reshaped(
                first,
                cst.Call(func=node.func, args=node.args[1:]),
                node.args[0].value,
                self.size_fields,
                self.axis_size,
            )
            return written if written.kind in ("expr", "input") else Feat.unknown("broadcast_to")
        if qualnames & {"jax.numpy.reshape", "numpy.reshape"} and node.args:  # a function, not x.reshape
            return last_axis_ops.reshaped(
                first,
                cst.Call(func=node.func, args=node.args[1:]),
                node.args[0].value,
                self.size_fields,
                self.axis_size,
            )
        if isinstance(node.func, cst.Attribute):
            method = self._array_method(node, node.func, qualnames)
            if method is not None:
                return method
        if (
            self.qualnames_of(node.func) & ARRAY_CONSTRUCTORS
            and node.args
            and isinstance(node.args[0].value, (cst.Tuple, cst.List))
            and node.args[0].value.elements
        ):
            element = node.args[0].value.elements[-1]  # jnp.zeros((batch, self.hidden)): a carry
            last, starred = element.value, isinstance(element, cst.StarredElement)  # (b, *self.shape)
            if names_in(last) <= {"self"} and not isinstance(last, cst.Name):
                return Feat("expr", expr=f"{code(last)}[-1]" if starred else code(last))
            if isinstance(last, cst.Integer):
                return Feat("expr", expr=code(last))
        hot = one_hot_size(node, positional) if qualnames & ONE_HOT_FUNCTIONS else None
        if hot is not None:
            return hot
        placed = axis_sizes.placed(node, qualnames, first, self.axis_size, self.dims.literal)
        if placed is not None:  # tile / pad / resize
            return placed
        if qualnames & CONCATENATE_FUNCTIONS and positional:
            axis = (
                positional[1].value
                if len(positional) > 1
                else next(
                    (a.value for a in node.args if a.keyword is not None and a.keyword.value == "axis"), None
                )
            )
            return last_axis_ops.concatenated(first, axis)
        return handed_output(node, self.size_fields) or Feat.unknown("call")


def value_method(func: cst.Attribute, qualnames: set[str]) -> bool:
    """Whether ``func`` is a method of a value (``x.sum``, ``jnp.einsum(...).sum``), not a function of
    a library module (``jnp.sum``)."""
    if type(func.value) in (cst.Call, cst.Subscript):  # the method of a call's or an index's result
        return True
    return not any(q.startswith(("jax.", "numpy.", "flax.")) for q in qualnames)


def transfer(out: Feat, params: list[str], args: list[Feat]) -> Feat:
    """A callee's result ``out`` (in terms of its own ``params``) seen at a call with argument values ``args``."""
    if out.kind == "input":  # the argument's size; not its rank, which the callee may change
        i = params.index(out.input_name) if out.input_name in params else -1
        if not 0 <= i < len(args):
            return Feat.unknown(f"argument {out.input_name}")
        return args[i].rankless()
    if out.kind in tuple_flow.COMPOUND:
        return tuple_flow.mapped(out, lambda e: transfer(e, params, args))
    if out.kind == "expr":
        return out
    return Feat.unknown("callee result")
