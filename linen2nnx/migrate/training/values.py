"""What the values of Linen training code are, found statically: the data the training codemod keys on.

Linen training code passes four kinds of values around, and each one changes meaning in NNX:

- ``module``: a Linen module instance built outside any module (``model = MLP(hidden=32)``). It is only
  configuration until ``init``; in NNX it becomes ``functools.partial(MLP, hidden=32)``, a constructor
  that still waits for its ``rngs`` (and the input sizes ``init`` knows).
- ``vars``: what ``model.init(...)`` returns. In NNX, constructing the module *is* its initialisation,
  so this value becomes the NNX module itself.
- ``coll``: ``variables['params']`` (or another collection) of such a value: ``nnx.state(model, Type)``.
- ``ts``: a ``flax.training.train_state.TrainState`` (or a subclass): in NNX the split pair
  ``nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))``.

``model.init`` is also passed around as a function, MaxText style: ``jax.eval_shape(functools.partial(
model.init, decode=True), key, tokens)`` gives the abstract variables (shapes only, for partition specs or
an empty decode cache). Such an ``eval_shape`` is a ``vars`` value too: in NNX, the abstract model.

Names are followed through libcst's scope analysis (closures included), calls through the functions of
the file that return such values (``make_model``, ``create_train_state``, a jitted ``init``). The
analysis is flow-insensitive and conservative: a name bound to values of different kinds has none.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any

import libcst as cst
from libcst.metadata import Access, Assignment, ScopeProvider

from linen2nnx.migrate.cst_meta import FastVisitor, syntax_children, unchecked
from linen2nnx.migrate.cst_utils import absolute_qualname
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.sites import ClassSummary

TRAIN_STATE = frozenset({"flax.training.train_state.TrainState"})
TRAIN_STATE_FIELDS = frozenset({"step", "params", "tx", "opt_state", "batch_stats"})
"""Fields a flax TrainState has, and the batch statistics its usual subclass adds."""
JIT = frozenset({"jax.jit", "jax.api.jit", "jax._src.api.jit"})
EVAL_SHAPE = frozenset({"jax.eval_shape", "jax.api.eval_shape", "jax._src.api.eval_shape"})
PARTIAL = frozenset({"functools.partial"})
MODULE_BASES = frozenset(
    {"flax.linen.Module", "flax.linen.module.Module", "flax.nnx.Module", "flax.nnx.module.Module"}
)
# the node types the planning dispatches on (exact types: none has subclasses)
_PLANNED = frozenset({cst.Call, cst.Subscript, cst.Attribute, cst.Name})
# train-state attributes whose use marks an unannotated function parameter as a TrainState
STATE_METHODS = frozenset({"apply_fn", "apply_gradients"})


@dataclasses.dataclass(frozen=True)
class InitFunction:
    """``model.init`` or ``functools.partial(model.init, k=v, ...)`` used as a function value."""

    attr: cst.Attribute  # the ``model.init`` attribute
    partial: cst.Call | None  # the ``functools.partial(...)`` call around it, if any
    summary: ClassSummary | None


@dataclasses.dataclass(frozen=True)
class Val:
    kind: str  # module | vars | coll | ts
    summary: ClassSummary | None = None  # module / vars / coll: the migrated class
    holder: Assignment | None = None  # coll: the binding of the name that holds the model
    collection: str = ""  # coll: the Linen collection


class ValueAnalysis:
    """Answers "what is this expression?" for the training codemod (see the module docstring)."""

    def __init__(
        self,
        wrapper: cst.MetadataWrapper,
        local: Mapping[str, ClassSummary],
        external: Mapping[str, ClassSummary],
        module_name: str,
    ):
        self.module = wrapper.module
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}  # of the syntax nodes (= ParentNodeProvider's)
        self.nodes: list[cst.CSTNode] = []  # the calls, subscripts, attributes and names, in visit order
        self._index()
        self.names = NameResolver(wrapper.module)  # the module pass's resolver: libcst's qualified names
        self.scopes = unchecked(wrapper.resolve, ScopeProvider)  # = wrapper.resolve(ScopeProvider), cheaper
        self.module_name = module_name
        self.classes = dict(external)
        self.local_classes = {s.name: s for s in local.values()}  # this file's classes, by name
        self.access: dict[cst.CSTNode, Access] = {}
        for scope in {s for s in self.scopes.values() if s is not None}:
            for access in scope.accesses:
                self.access[access.node] = access
        self.ts_classes: dict[str, list[str]] = {}  # local TrainState class / alias -> its extra fields
        self._find_train_state_classes()
        self._memo: dict[cst.CSTNode, Val | None] = {}
        self._name_order: dict[cst.CSTNode, int] | None = None
        self._busy: set[cst.CSTNode] = set()

    # ---- names -------------------------------------------------------------------------------
    def qualnames(self, node: cst.CSTNode) -> set[str]:
        """What ``node`` may name (``nn.Dense`` -> ``flax.linen.Dense``); the caller must not change it."""
        return self.names.qualnames(node)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def absolute(self, qualname: str) -> str:
        return absolute_qualname(qualname, self.module_name)

    def user_class(self, node: cst.BaseExpression) -> ClassSummary | None:
        """The migrated Linen class ``node`` names (this file's, or one another file of the run defines)."""
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        for q in self.qualnames(node):
            if q in self.local_classes:
                return self.local_classes[q]
            summary = self.classes.get(self.absolute(q))
            if summary is not None:
                return summary
        return None

    def is_ts_class(self, node: cst.BaseExpression) -> bool:
        return bool(self.qualnames(node) & (TRAIN_STATE | set(self.ts_classes)))

    def ts_fields(self, node: cst.BaseExpression) -> list[str]:
        return next((self.ts_classes[q] for q in self.qualnames(node) if q in self.ts_classes), [])

    def _find_train_state_classes(self) -> None:
        """``class TrainState(train_state.TrainState): batch_stats: Any`` and ``TS = train_state.TrainState``."""
        changed = True
        while changed:  # a subclass of a subclass
            changed = False
            for stmt in self.module.body:
                if isinstance(stmt, cst.ClassDef) and stmt.name.value not in self.ts_classes:
                    base = next((b.value for b in stmt.bases if self.is_ts_class(b.value)), None)
                    if base is not None:
                        fields = [
                            s.target.value
                            for line in stmt.body.body
                            if isinstance(line, cst.SimpleStatementLine)
                            for s in line.body
                            if isinstance(s, cst.AnnAssign) and isinstance(s.target, cst.Name)
                        ]
                        self.ts_classes[stmt.name.value] = [*self.ts_fields(base), *fields]
                        changed = True
                elif isinstance(stmt, cst.SimpleStatementLine):
                    for small in stmt.body:
                        if (
                            isinstance(small, cst.Assign)
                            and len(small.targets) == 1
                            and isinstance(small.targets[0].target, cst.Name)
                            and small.targets[0].target.value not in self.ts_classes
                            and self.is_ts_class(small.value)
                        ):
                            self.ts_classes[small.targets[0].target.value] = self.ts_fields(small.value)
                            changed = True

    def in_module_class(self, node: cst.CSTNode) -> bool:
        """Inside a (migrated) module class: that code belongs to the module codemod."""
        cur = self.parent(node)
        while cur is not None:
            if isinstance(cur, cst.ClassDef):
                if cur.name.value in self.local_classes or any(
                    self.qualnames(b.value) & MODULE_BASES for b in cur.bases
                ):
                    return True
            cur = self.parent(cur)
        return False

    # ---- bindings ----------------------------------------------------------------------------
    def referents(self, name: cst.Name) -> list[Assignment]:
        """The bindings a read of ``name`` may see: libcst's (those before it), and, for a read inside a
        loop, every binding of the name in that loop, since a later iteration reads what a binding
        after the read left (``y = apply(params)`` then ``params = update(params)``)."""
        access = self.access.get(name)
        if access is None:
            return []
        found = [r for r in access.referents if isinstance(r, Assignment)]
        others = [a for a in self.bindings(access.scope, name.value) if a not in found]
        loops = self._loops_around(name) if others else set()
        return found + [a for a in others if loops and self._inside(a.node, loops)]

    def _loops_around(self, node: cst.CSTNode) -> set[cst.CSTNode]:
        """The ``for`` / ``while`` statements around ``node`` within its function (or module)."""
        loops: set[cst.CSTNode] = set()
        cur = self.parent(node)
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            if isinstance(cur, (cst.For, cst.While)):
                loops.add(cur)
            cur = self.parent(cur)
        return loops

    def _inside(self, node: cst.CSTNode, loops: set[cst.CSTNode]) -> bool:
        cur = self.parent(node)
        while cur is not None:
            if cur in loops:
                return True
            cur = self.parent(cur)
        return False

    def binding_value(self, assignment: Assignment) -> cst.BaseExpression | None:
        """The expression a ``name = value`` / ``name: T = value`` binding assigns (None for other bindings)."""
        node = assignment.node
        target_parent = self.parent(node)
        if isinstance(target_parent, cst.AssignTarget):
            stmt = self.parent(target_parent)
            if isinstance(stmt, cst.Assign) and any(t.target is node for t in stmt.targets):
                return stmt.value  # `init_state = state = create_train_state(x)`: each name holds it
        if isinstance(target_parent, cst.AnnAssign) and target_parent.target is node:
            return target_parent.value
        return None

    def another_model(self, holder: Assignment | None, receiver: cst.BaseExpression) -> bool:
        """Whether ``receiver`` (the module of an ``.apply``) may be another instance than the one whose
        ``init`` bound ``holder``: NNX calls the model ``init`` built, so another instance's constructor
        arguments (``Model(train=True).apply(variables, x)``) would be lost. Only the same name with the
        same bindings is the same model; a holder bound otherwise (a function's result) is not told."""
        init = self.binding_value(holder) if holder is not None else None
        if not (
            isinstance(init, cst.Call)
            and isinstance(init.func, cst.Attribute)
            and init.func.attr.value == "init"
        ):
            return False
        built = init.func.value
        if not (
            isinstance(built, cst.Name) and isinstance(receiver, cst.Name) and built.value == receiver.value
        ):
            return True
        return set(self.referents(built)) != set(self.referents(receiver))

    def function_of(self, func: cst.BaseExpression) -> cst.FunctionDef | None:
        """The file's function a call target names, through ``jax.jit(f, ...)``."""
        if (
            isinstance(func, cst.Call)
            and self.qualnames(func.func) & JIT
            and func.args
            and func.args[0].keyword is None
            and not func.args[0].star
        ):
            return self.function_of(func.args[0].value)
        if not isinstance(func, cst.Name):
            return None
        found = [r.node for r in self.referents(func)]
        if len(found) == 1 and isinstance(found[0], cst.FunctionDef):
            return found[0]
        return None

    def init_function(self, node: cst.BaseExpression) -> InitFunction | None:
        """``model.init`` / ``functools.partial(model.init, ...)`` of a Linen module value (no other form)."""
        partial = None
        if (
            isinstance(node, cst.Call)
            and self.qualnames(node.func) & PARTIAL
            and node.args
            and node.args[0].keyword is None
            and not node.args[0].star
        ):
            partial, node = node, node.args[0].value
        if not (isinstance(node, cst.Attribute) and node.attr.value == "init"):
            return None
        receiver = self.value_of(node.value)
        if receiver is None or receiver.kind != "module":
            return None
        return InitFunction(node, partial, receiver.summary)

    def eval_shape_init(self, node: cst.CSTNode) -> InitFunction | None:
        """``jax.eval_shape(<init function>, rng, *inputs)`` -> that init function."""
        if not (
            isinstance(node, cst.Call)
            and self.qualnames(node.func) & EVAL_SHAPE
            and node.args
            and node.args[0].keyword is None
            and not node.args[0].star
        ):
            return None
        return self.init_function(node.args[0].value)

    def assignment_of(self, target: cst.Name) -> Assignment | None:
        """The binding a ``name = ...`` target creates."""
        scope = self.scopes.get(target)
        if scope is None:
            return None
        return next(
            (a for a in scope.assignments[target.value] if isinstance(a, Assignment) and a.node is target),
            None,
        )

    def returns(self, fn: cst.FunctionDef) -> Iterator[cst.Return]:
        """``fn``'s own return statements (not those of nested functions, lambdas or classes)."""
        found: list[cst.Return] = []

        class V(FastVisitor):
            def visit_Return(self, node: cst.Return) -> None:
                found.append(node)

            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return node is fn

            def visit_ClassDef(self, node: cst.ClassDef) -> bool:
                return False

            def visit_Lambda(self, node: cst.Lambda) -> bool:
                return False

        V().walk(fn)
        return iter(found)

    # ---- values ------------------------------------------------------------------------------
    def value_of(self, node: cst.BaseExpression | None) -> Val | None:
        if node is None:
            return None
        if node in self._memo:
            return self._memo[node]
        if node in self._busy:
            return None  # recursion through a cycle of bindings: no kind
        self._busy.add(node)
        try:
            value = self._value_of(node)
        finally:
            self._busy.discard(node)
        self._memo[node] = value
        return value

    def _value_of(self, node: cst.BaseExpression) -> Val | None:
        if isinstance(node, cst.Call):
            summary = self.user_class(node.func)
            if summary is not None:
                return Val("module", summary)
            if isinstance(node.func, cst.Attribute):
                if node.func.attr.value == "init":
                    receiver = self.value_of(node.func.value)
                    if receiver is not None and receiver.kind == "module":
                        return Val("vars", receiver.summary)
                if node.func.attr.value == "create" and self.is_ts_class(node.func.value):
                    return Val("ts")
            init = self.eval_shape_init(node)
            if init is not None:
                return Val("vars", init.summary)
            fn = self.function_of(node.func)
            return self.returned(fn) if fn is not None else None
        if isinstance(node, cst.Name):
            values = [self.bound(a) for a in self.referents(node)]
            if values and all(v is not None and v == values[0] for v in values):
                return values[0]
            return None
        if isinstance(node, cst.Subscript):
            key = string_index(node)
            base = self.value_of(node.value)
            if key is None or base is None or base.kind != "vars":
                return None
            holder = self.referents(node.value) if isinstance(node.value, cst.Name) else []
            return Val("coll", base.summary, holder[0] if len(holder) == 1 else None, key)
        if isinstance(node, cst.BooleanOperation):  # ``model or make_model(config)``
            sides = [v for v in (self.value_of(node.left), self.value_of(node.right)) if v is not None]
            return sides[0] if sides and all(v == sides[0] for v in sides) else None
        return None

    def returned(self, fn: cst.FunctionDef) -> Val | None:
        values = [self.value_of(r.value) for r in self.returns(fn)]
        if values and all(v is not None and v == values[0] for v in values):
            return values[0]
        return None

    def bound(self, assignment: Assignment) -> Val | None:
        node = assignment.node
        if isinstance(node, cst.Param):
            return self.param_value(node, assignment)
        unpacked = self._unpacked(node)
        if unpacked is not None:  # `state, rng = create(x)`: what that element holds
            return self.element_of(*unpacked)
        return self.value_of(self.binding_value(assignment))

    def _unpacked(self, node: cst.CSTNode) -> tuple[cst.BaseExpression, int, int] | None:
        """``a, b = value`` (no starred target) -> (value, the index of ``node`` among the targets, their
        number); None for any other binding."""
        element = self.parent(node)
        targets = self.parent(element) if element is not None else None
        target = self.parent(targets) if targets is not None else None
        stmt = self.parent(target) if target is not None else None
        if not (
            isinstance(element, cst.Element)
            and element.value is node
            and isinstance(targets, (cst.Tuple, cst.List))
            and isinstance(target, cst.AssignTarget)
            and target.target is targets
            and isinstance(stmt, cst.Assign)
            and all(type(e) is cst.Element for e in targets.elements)
        ):
            return None
        return stmt.value, list(targets.elements).index(element), len(targets.elements)

    def element_of(self, node: cst.BaseExpression | None, index: int, length: int) -> Val | None:
        """What element ``index`` of ``node`` unpacked into ``length`` names is: an element of a tuple
        display, or of the tuple displays every return of a function of the file gives (a train state
        its creator returns with a key: ``return state, rng``). Returns that disagree give no kind."""
        if isinstance(node, (cst.Tuple, cst.List)):
            elements = node.elements
            if len(elements) != length or any(type(e) is not cst.Element for e in elements):
                return None
            return self.value_of(elements[index].value)
        fn = self.function_of(node.func) if isinstance(node, cst.Call) else None
        if fn is None or fn in self._busy:
            return None
        self._busy.add(fn)
        try:
            values = [self.element_of(r.value, index, length) for r in self.returns(fn)]
        finally:
            self._busy.discard(fn)
        return values[0] if values and all(v is not None and v == values[0] for v in values) else None

    def param_value(self, param: cst.Param, assignment: Assignment) -> Val | None:
        """A parameter annotated with a migrated Linen class or a TrainState class, or one the function
        uses as a TrainState (``state.apply_fn``, ``state.apply_gradients``)."""
        if param.annotation is not None:
            for part in annotation_parts(param.annotation.annotation):
                summary = self.user_class(part)
                if summary is not None:
                    return Val("module", summary)
                if self.is_ts_class(part):
                    return Val("ts")
        for access in assignment.references:
            attr = self.parent(access.node)
            if (
                isinstance(attr, cst.Attribute)
                and attr.value is access.node
                and attr.attr.value in STATE_METHODS
            ):
                return Val("ts")
            if self._replaces_state_field(attr, access.node):
                return Val("ts")
        return None

    def _replaces_state_field(self, attr: cst.CSTNode | None, name: cst.CSTNode) -> bool:
        """``state.replace(batch_stats=...)``: a train state's own way to change a field (a flax struct
        with the fields a TrainState has, or one of the file's TrainState classes adds)."""
        if not (isinstance(attr, cst.Attribute) and attr.value is name and attr.attr.value == "replace"):
            return False
        call = self.parent(attr)
        if not (isinstance(call, cst.Call) and call.func is attr and call.args):
            return False
        if isinstance(name, cst.Name) and name.value == "self":
            return False  # a struct's own method
        if not self.uses_flax_train_state:
            return False  # another library's train state (its own fields and methods)
        fields = TRAIN_STATE_FIELDS | {f for extra in self.ts_classes.values() for f in extra}
        # `state.replace(**new_vars)`: a train state's too, whose fields the rewrite cannot tell (a finding)
        return all(a.star == "**" or (a.keyword is not None and a.keyword.value in fields) for a in call.args)

    @functools.cached_property
    def uses_flax_train_state(self) -> bool:
        """The file names flax's TrainState (or a class of its own built on it)."""
        return bool(self.ts_classes) or any(
            isinstance(n, (cst.Name, cst.Attribute)) and self.qualnames(n) & TRAIN_STATE for n in self.nodes
        )

    def uses(self, assignment: Assignment) -> list[cst.Name]:
        """The reads of ``assignment`` in source order (libcst keeps them in a set, whose order changes
        from run to run: findings placed by the first read would move)."""
        names = [a.node for a in assignment.references if isinstance(a.node, cst.Name)]
        order = self._order()
        return sorted(names, key=lambda n: order.get(n, len(order)))

    def bindings(self, scope: Any, name: str) -> list[Assignment]:
        """The bindings of ``name`` in ``scope`` in source order (libcst's set, like the reads': which
        rebinding a finding names must not change from run to run)."""
        order = self._order()
        found = [a for a in scope.assignments[name] if isinstance(a, Assignment)]
        return sorted(found, key=lambda a: order.get(a.node, len(order)))

    def _order(self) -> dict[cst.CSTNode, int]:
        if self._name_order is None:
            self._name_order = {n: i for i, n in enumerate(n for n in self.nodes if type(n) is cst.Name)}
        return self._name_order

    def _index(self) -> None:
        """One walk over the file's syntax nodes (libcst's visit order: pre-order) for the parent map and
        the nodes the planning looks at; the order of the names in it sorts the reads of a binding."""
        parents, nodes, kinds = self.parents, self.nodes, _PLANNED
        stack: list[cst.CSTNode] = [self.module]
        while stack:
            node = stack.pop()
            if type(node) in kinds:
                nodes.append(node)
            children = syntax_children(node)
            for child in children:
                parents[child] = node
            stack.extend(reversed(children))


def string_index(node: cst.Subscript) -> str | None:
    """``x['params']`` -> ``'params'``."""
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        value = node.slice[0].slice.value
        if isinstance(value, cst.SimpleString):
            evaluated = value.evaluated_value
            return evaluated if isinstance(evaluated, str) else None
    return None


def annotation_parts(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``Model | None`` / ``Optional[Model]`` / ``Model`` -> the candidate class references."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return [*annotation_parts(node.left), *annotation_parts(node.right)]
    if (
        isinstance(node, cst.Subscript)
        and isinstance(node.value, (cst.Name, cst.Attribute))
        and getattr(node.value, "attr", node.value).value in ("Optional", "Union")
    ):  # type: ignore[union-attr]
        return [
            p for e in node.slice if isinstance(e.slice, cst.Index) for p in annotation_parts(e.slice.value)
        ]
    return [node]
