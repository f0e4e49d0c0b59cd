"""Module-factory fields: ``conv: ModuleDef``, then ``self.conv(features, (3, 3))(x)`` in @nn.compact.

The imagenet / big_vision style hands a block the *class* (or a ``functools.partial`` of it) that
builds its submodules. NNX can keep that style (``self.conv_0 = conv(in_features, features, (3, 3),
rngs=rngs)``) only when the codemod knows what the factory builds: the input size goes in front for
``nnx.Conv``, after ``rngs`` nowhere for a class of the run, and Linen names the child after the
built class (``Conv_0``). This pre-pass finds, for every field of every Linen class of the file,
the constructors callers bind to it:

- the field's default (``conv: ModuleDef = nn.Conv``);
- a subclass's default of it (``class WideNet(Net): block_cls: Any = WideBlock``), which runs the
  base's build with that class;
- arguments of calls that build the class, directly, through ``functools.partial`` (``ResNet18 =
  partial(ResNet, block_cls=ResNetBlock)``), through a module-level alias of such a partial, or
  through another factory field bound to the class (``self.block_cls(..., conv=conv)``);
- followed through ``partial(...)``, locals assigned once, and the caller's own factory fields
  (``conv = partial(self.conv, use_bias=False)``).

A field is convertible when every binding is the same built-in layer, or classes of the file, or one
class another file of the run defines (``conv_block_cls: ModuleDef = ConvBlock`` after ``from .common
import ConvBlock``: what it builds is that class's own constructor, as if written there). A
binding that is a Linen layer with no NNX counterpart (``nn.ConvLocal``) is reported where it is
written and does not decide anything; anything the pass cannot follow leaves the field manual.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping

import libcst as cst

from linen2nnx.layers import LayerRule, dtype_kwargs, nnx_ctor_params
from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import code, kwarg, parse_expression, single_assign
from linen2nnx.migrate.factories import PartialLocal
from linen2nnx.migrate.linen_api import feature_preserving_functions


@dataclasses.dataclass(frozen=True)
class Base:
    """What a binding builds: ``rule`` (a built-in layer), ``user`` (a class of the file), ``imported`` (a
    class of the run another file defines), ``linen``
    (a Linen layer with no rule: reported at its own site), ``activation`` (a function that keeps
    the last axis, ``nn.relu``), or ``unknown``."""

    kind: str
    name: str = ""  # layer's Linen name / class name / qualified name
    node: cst.BaseExpression | None = dataclasses.field(
        default=None, compare=False
    )  # an original node naming it
    keywords: frozenset[str] = (
        frozenset()
    )  # given by the partials on the way (``partial(nn.Conv, strides=2)``)


@dataclasses.dataclass
class FieldFactory:
    """A factory field whose bindings resolve: each ``self.<name>(...)`` call builds one submodule."""

    name: str
    rule: LayerRule | None  # all bindings are this built-in layer
    classes: tuple[str, ...]  # ... or these classes of the run (in binding order)
    base: cst.BaseExpression  # an original node naming the (first) built class
    values: tuple[cst.BaseExpression, ...] = ()  # every node naming a built-in layer bound to it
    partial_keywords: frozenset[str] = frozenset()  # what the bindings' partials already give

    @property
    def linen_names(self) -> tuple[str, ...]:
        """The class names Linen auto-names the built child after."""
        return (self.rule.linen,) if self.rule is not None else self.classes

    def merged(self, call: cst.Call, ctor: cst.Call | None = None) -> cst.Call:
        """The constructor ``self.<name>(args)`` stands for, as if the built class were written there."""
        return cst.Call(func=self.base, args=list(call.args))


@dataclasses.dataclass
class FieldPartial(FieldFactory):
    """``conv = partial(self.conv, use_bias=False)`` in @nn.compact, then ``conv(...)(x)``: each use
    builds one submodule through the field, with the partial's arguments first (as functools.partial)."""

    local: PartialLocal | None = None

    def merged(self, call: cst.Call, ctor: cst.Call | None = None) -> cst.Call:
        assert self.local is not None
        return super().merged(self.local.merged(call, ctor))


@dataclasses.dataclass
class _Binding:
    value: cst.BaseExpression
    owner: str | None  # the class whose method holds the value (None: module level)
    function: cst.FunctionDef | None


class FieldBindings:
    """Bindings of every (class, field) of one file (see the module docstring)."""

    def __init__(
        self,
        tree: cst.Module,
        is_linen_class: Callable[[cst.ClassDef], bool],
        qualnames: Callable[[cst.CSTNode], set[str]],
        layer_rule_of: Callable[[cst.BaseExpression], LayerRule | None],
        other_file_class: Callable[[cst.BaseExpression], str | None] = lambda node: None,
    ) -> None:
        self._qualnames = qualnames
        self._rule_of = layer_rule_of
        self._other_file_class = other_file_class  # the name of a class of the run another file defines
        self.fields: dict[str, list[str]] = {}
        self._defaults: dict[tuple[str, str], cst.BaseExpression] = {}
        self._subclasses: dict[str, list[str]] = {}  # a class of the file -> its subclasses of the file
        classes: list[cst.ClassDef] = []
        for cls in (s for s in tree.body if isinstance(s, cst.ClassDef)):
            # a subclass of a class of the file counts though that base is not planned yet
            if not is_linen_class(cls) and not any(
                isinstance(b.value, cst.Name) and b.value.value in self.fields for b in cls.bases
            ):
                continue
            classes.append(cls)
            names: list[str] = []
            for base in cls.bases:  # a base class of the file contributes its fields first
                if isinstance(base.value, cst.Name) and base.value.value in self.fields:
                    names.extend(self.fields[base.value.value])
                    self._subclasses.setdefault(base.value.value, []).append(cls.name.value)
            for stmt in cls.body.body:
                for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        name = small.target.value
                        names = [n for n in names if n != name] + [name]
                        if small.value is not None:
                            self._defaults[(cls.name.value, name)] = small.value
            self.fields[cls.name.value] = names
        self._aliases: dict[
            str, tuple[str, cst.Call]
        ] = {}  # `ResNet18 = partial(ResNet, ...)` -> (class, call)
        for stmt in tree.body:
            assign = single_assign(stmt)
            if assign is not None and isinstance(assign[1], cst.Call) and self._is_partial(assign[1].func):
                target = self._class_named(assign[1].args[0].value) if assign[1].args else None
                if target is not None:
                    self._aliases[assign[0]] = (target, assign[1])
        self._bindings: dict[tuple[str, str], list[_Binding]] = {}
        self._collect(tree, classes)
        self._resolving: set[tuple[str, str]] = set()
        self._memo: dict[tuple[str, str], tuple[Base, ...]] = {}

    # ---- collection -------------------------------------------------------------------------------
    def _collect(self, tree: cst.Module, classes: list[cst.ClassDef]) -> None:
        owner_of: dict[int, tuple[str, cst.FunctionDef]] = {}
        for cls in classes:
            for stmt in cls.body.body:
                if isinstance(stmt, cst.FunctionDef):
                    owner_of[id(stmt)] = (cls.name.value, stmt)
        pending: list[tuple[cst.Call, str | None, cst.FunctionDef | None]] = []

        class Calls(FastVisitor):
            def __init__(self) -> None:
                self.stack: list[tuple[str, cst.FunctionDef]] = []
                self.classes: list[str] = []

            def visit_ClassDef(self, node: cst.ClassDef) -> bool:
                self.classes.append(node.name.value)
                return True

            def leave_ClassDef(self, node: cst.ClassDef) -> None:
                self.classes.pop()

            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                if id(node) in owner_of:
                    self.stack.append(owner_of[id(node)])
                return True

            def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
                if id(node) in owner_of:
                    self.stack.pop()

            def visit_Call(self, node: cst.Call) -> None:
                owner, fn = self.stack[-1] if self.stack else (None, None)
                if (
                    self.classes
                    and isinstance(node.func, cst.Name)
                    and node.func.value == f"{self.classes[-1]}Linen"
                ):
                    return  # the bridge wrapper of a class kept as Linen hands its own arguments on
                pending.append((node, owner, fn))

        Calls().walk(tree)
        self._calls = pending

    def _targets(self, call: cst.Call, owner: str | None) -> Iterator[tuple[str, list[cst.Arg], int]]:
        """(class, the arguments that bind its fields, the field index of the first positional one)
        for a call that builds a class of the file."""
        func = call.func
        if self._is_partial(func) and call.args:
            target = self._class_named(call.args[0].value)
            if target is not None:
                yield target, list(call.args[1:]), 0
            return
        target = self._class_named(func)
        if target is not None:
            yield target, list(call.args), 0
            return
        if isinstance(func, cst.Name) and func.value in self._aliases:
            target, partial_call = self._aliases[func.value]
            given = sum(1 for a in partial_call.args[1:] if a.keyword is None)
            yield target, list(call.args), given  # positions after the partial's
            return
        field = _self_attr(func)
        if owner is not None and field is not None and field in self.fields.get(owner, ()):
            for base in self.bases(owner, field):
                if base.kind == "user":
                    yield base.name, list(call.args), 0

    def _bindings_of(self, cls: str, field: str) -> list[_Binding]:
        found = []
        default = self._defaults.get((cls, field))
        if default is not None:
            found.append(_Binding(default, cls, None))
        for sub in self._subclasses.get(cls, ()):
            # `class WideNet(Net): block_cls = WideBlock` runs Net's build with its own default: a
            # binding of Net's field, as a caller's `Net(block_cls=WideBlock)` is
            found.extend(self._bindings_of(sub, field))
        order = self.fields.get(cls, [])
        for call, owner, fn in self._calls:
            for target, args, offset in self._targets(call, owner):
                if target != cls:
                    continue
                positional = [a for a in args if a.keyword is None and not a.star]
                for index, arg in enumerate(positional, start=offset):
                    if index < len(order) and order[index] == field:
                        found.append(_Binding(arg.value, owner, fn))
                found.extend(
                    _Binding(a.value, owner, fn)
                    for a in args
                    if a.keyword is not None and a.keyword.value == field
                )
        return found

    # ---- resolution -------------------------------------------------------------------------------
    def bases(self, cls: str, field: str) -> tuple[Base, ...]:
        """What the bindings of ``cls.field`` build, one entry per binding node (``unknown`` included
        when one cannot be followed)."""
        key = (cls, field)
        if key in self._memo:
            return self._memo[key]
        if key in self._resolving:  # a cycle: what the other bindings say
            return ()
        self._resolving.add(key)
        out: list[Base] = []
        for binding in self._bindings_of(cls, field):
            out.extend(self._resolve(binding.value, binding.owner, binding.function, 0))
        self._resolving.discard(key)
        self._memo[key] = tuple(out)
        return self._memo[key]

    def _resolve(
        self, value: cst.BaseExpression, owner: str | None, fn: cst.FunctionDef | None, depth: int
    ) -> list[Base]:
        if depth > 8:
            return [Base("unknown")]
        rule = self._rule_of(value)
        if rule is not None:
            return [Base("rule", rule.linen, value)]
        target = self._class_named(value)
        if target is not None:
            return [Base("user", target, value)]
        imported = self._other_file_class(value) if type(value) in (cst.Name, cst.Attribute) else None
        if imported is not None:
            return [Base("imported", imported, value)]
        qualnames = self._qualnames(value)
        if qualnames & feature_preserving_functions():
            return [Base("activation", sorted(qualnames)[0], value)]
        linen = sorted(q for q in qualnames if q.startswith("flax.linen."))
        if linen:
            return [Base("linen", linen[0], value)]
        if isinstance(value, cst.Call) and self._is_partial(value.func) and value.args:
            given = frozenset(a.keyword.value for a in value.args if a.keyword is not None)
            bases = self._resolve(value.args[0].value, owner, fn, depth + 1)
            if any(b.kind == "rule" and not _kept_as_written(self._rule_of(b.node), value) for b in bases):
                return [Base("unknown")]
            return [dataclasses.replace(b, keywords=b.keywords | given) for b in bases]
        if isinstance(value, cst.Name) and fn is not None:
            assigned = [v for name, v in _assignments(fn) if name == value.value]
            if len(assigned) == 1:
                return self._resolve(assigned[0], owner, fn, depth + 1)
        field = _self_attr(value)
        if owner is not None and field is not None and field in self.fields.get(owner, ()):
            return list(self.bases(owner, field))
        return [Base("unknown")]

    def preserves_features(self, cls: str, field: str) -> bool:
        """Is every binding of ``cls.field`` an activation (``act: Callable``, bound to ``nn.relu``)?"""
        bases = self.bases(cls, field)
        return bool(bases) and all(b.kind == "activation" for b in bases)

    def factory(self, cls: str, field: str) -> FieldFactory | None:
        """``cls.field`` as a :class:`FieldFactory`, or None when its bindings do not agree."""
        bases = [b for b in self.bases(cls, field) if b.kind != "linen"]
        if not bases or any(b.kind in ("unknown", "activation") for b in bases):
            return None
        kinds = {b.kind for b in bases}
        given = frozenset().union(*(b.keywords for b in bases))
        if kinds == {"rule"} and len({b.name for b in bases}) == 1:
            return FieldFactory(
                field,
                self._rule_of(bases[0].node),
                (),
                bases[0].node,  # type: ignore[arg-type]
                tuple(b.node for b in bases if b.kind == "rule"),
                given,
            )
        if kinds == {"imported"} and len({b.name for b in bases}) == 1:  # planned as its constructor call
            return FieldFactory(field, None, (bases[0].name,), bases[0].node, partial_keywords=given)  # type: ignore[arg-type]
        if kinds == {"user"}:
            return FieldFactory(
                field,
                None,
                tuple(dict.fromkeys(b.name for b in bases)),
                bases[0].node,
                partial_keywords=given,
            )  # type: ignore[arg-type]
        return None

    # ---- small helpers ----------------------------------------------------------------------------
    def _is_partial(self, func: cst.BaseExpression) -> bool:
        return bool(self._qualnames(func) & {"functools.partial"})

    def _class_named(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Name) and node.value in self.fields:
            return node.value
        if isinstance(node, cst.Name) and f"{node.value}Linen" in self.fields:
            return f"{node.value}Linen"  # the NNX wrapper of a class an earlier run kept as Linen
        return None


def _self_attr(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def _assignments(fn: cst.FunctionDef) -> Iterator[tuple[str, cst.BaseExpression]]:
    """``name = value`` statements anywhere in ``fn`` (one target)."""
    found: list[tuple[str, cst.BaseExpression]] = []

    class Assigns(FastVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    found.append((target.target.value, node.value))

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is fn

    Assigns().walk(fn)
    return iter(found)


def _kept_as_written(rule: LayerRule | None, partial: cst.Call) -> bool:
    """``partial(nn.Dense, use_bias=False)`` bound to a field stays as written with the NNX class in it,
    which is right only where every argument means the same there: keywords NNX takes under the same
    name, with no value the layer table restricts, and nothing positional (NNX puts the input size
    first: ``partial(nn.DenseGeneral, (2, 4))`` would hand (2, 4) to ``in_features``)."""
    if rule is None:
        return False
    for arg in partial.args[1:]:
        if arg.keyword is None or arg.star:
            return False
        name = arg.keyword.value
        if name in rule.rename_args or name in rule.unsupported_args or name in rule.only_values:
            return False
        if name in rule.function_args or name not in nnx_ctor_params(rule.nnx):
            return False
    return True


def bound_partial_dtypes(
    qualnames: Callable[[cst.CSTNode], set[str]],
    bindings: Mapping[cst.CSTNode, tuple[LayerRule, object]],
    original: cst.Call,
    updated: cst.Call,
) -> cst.Call | None:
    """``partial(nn.LayerNorm, dtype=...)`` bound to a converted factory field: the norm the field builds
    takes its ``dtype`` as a directly built one does, with the promote that keeps the values as they are
    (``layers.kept_promote``), or NNX casts them before the statistics; ``partial(nn.Embed, ...)`` gets
    the promote whose ``attend`` computes as Linen's, an attention the norms' promote and the attention
    that compute as Linen's (``layers.dtype_kwargs``). None for any other call."""
    bound = bindings.get(original.args[0].value) if original.args and bindings else None
    if bound is None or "functools.partial" not in qualnames(original.func):
        return None  # (the dict lookup first: this runs for every call of the file)
    given = {a.keyword.value: code(a.value) for a in original.args if a.keyword is not None}
    added = [kwarg(k, parse_expression(v)) for k, v in dtype_kwargs(bound[0], given, given)]
    return updated.with_changes(args=[*updated.args, *added]) if added else None
