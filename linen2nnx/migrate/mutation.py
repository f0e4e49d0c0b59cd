"""Which locals of a method may be changed in place, so that what a list or object held is no longer
what it was built with.

The size dataflow (:mod:`~linen2nnx.migrate.tuple_flow`) keeps one size per element of a list display
or per field of an output object. That is only right while nothing changes the value in place:
``outs[0] = h``, ``outs.append(h)``, ``del outs[0]``, ``out.h = h``, or a call that receives it and may
do any of these. The rule is deliberately simple: a name the method (nested functions and lambdas
included) ever stores into, deletes from, calls a method on, or passes to a function that is not known
to leave its arguments alone, loses its per-element knowledge for the whole method. The constructor
of a plain data class of the run (a ``ModelOutput``: ``Output(vision_model_output=vision_outputs)``)
is known to: it holds what it is given, as a tuple display does, and a change made through the object
later is a change of the object's name, which the rule follows to what it was built from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import libcst as cst

from linen2nnx.migrate import mapping_flow
from linen2nnx.migrate.cst_meta import TUPLE_OR_LIST, FastVisitor, nodes_of
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.tuple_flow import COMPOUND, SIZED

_SUBSCRIPT_OR_ATTRIBUTE = frozenset({cst.Subscript, cst.Attribute})  # exact types: no ABC check

PURE_PREFIXES = ("jax.", "einops.", "math.")
"""Library functions that never change a list or object passed to them (they may return new ones); not
NumPy, whose ``random.shuffle`` and ``copyto`` change what they receive."""
PURE_BUILTINS = frozenset(
    {
        "len", "tuple", "list", "sorted", "reversed", "enumerate", "zip", "sum", "min", "max", "isinstance",
        "print", "range", "any", "all", "str", "repr", "int", "float", "bool", "type", "id", "hash",
    }
)  # fmt: skip
"""Builtins that never change their arguments (when the file does not rebind the name)."""


def chain_root(node: cst.BaseExpression) -> str | None:
    """``outs`` of ``outs``, ``outs[0]``, ``outs[0].h``, ``out.h.at[1]``: the local a chain starts at,
    through subscripts too (``cst_utils.root_name`` follows attributes only and returns the node)."""
    while type(node) in _SUBSCRIPT_OR_ATTRIBUTE:
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def method_changes(
    body: Sequence[cst.CSTNode], qualnames: Callable[[cst.CSTNode], set[str]], records: Collection[str] = ()
) -> InPlace:
    """What ``body`` may change in place (see the module docstring; over-approximate on purpose), read in
    one walk: the names it may change, and whether it stores items only into dicts it builds itself.
    ``records``: the plain data classes the method may build (tuple_flow.RecordClass: no method of
    their own), whose construction only holds what it is given, as a tuple display does
    (``Output(vision_model_output=vision_outputs)``)."""
    collector = _Mutations(qualnames, frozenset(records))
    for stmt in body:
        collector.walk(stmt)
    names = collector.names
    changed = True
    while changed:  # a comprehension's or walrus's target changed: so is what it was bound from
        changed = False
        for targets, sources in collector.bound_outside_flow:
            if targets & names and not sources <= names:
                names |= sources
                changed = True
    return InPlace(names - {"self"}, collector.items_only_into_own_dicts())


class _Mutations(FastVisitor):
    """A call that receives only a part of a local (``f(outs[0])``, ``outs[0].append(h)``) changes that
    local only when the part is itself a list or object: the dataflow decides that where the call runs
    (:meth:`InPlace.called`). Inside a nested function or lambda it may run anywhere: the local is marked."""

    def __init__(self, qualnames: Callable[[cst.CSTNode], set[str]], records: frozenset[str]) -> None:
        self.qualnames = qualnames
        self.records = records
        self.names: set[str] = set()
        self.nested = 0
        self.bound_outside_flow: list[tuple[set[str], set[str]]] = []
        """``(targets, what they are bound from)`` of the bindings the dataflow does not follow:
        comprehension targets (``for o in outs``) and walrus targets (``(o := outs[0])``)."""
        self.item_roots: set[str] = set()  # the names an item is stored into or deleted from
        self.bindings: dict[str, list[cst.BaseExpression]] = {}  # name -> every value bound to it
        self.other_items = False  # an item stored or deleted through something other than a plain name

    def items_only_into_own_dicts(self) -> bool:
        """Whether every item the method stores or deletes (``name[key] = v``) goes into a dict it
        builds itself, every binding of that name a dict display: then no entry of an input (or of
        another name for it) is replaced, and ``batch['image']`` still reads the input's own leaf."""
        return not self.other_items and all(
            self.bindings.get(root) and all(isinstance(v, cst.Dict) for v in self.bindings[root])
            for root in self.item_roots
        )

    def _item(self, target: cst.BaseExpression) -> None:
        if type(target) in TUPLE_OR_LIST:
            for el in target.elements:
                self._item(el.value)
        elif isinstance(target, cst.StarredElement):
            self._item(target.value)
        elif isinstance(target, cst.Subscript):
            if isinstance(target.value, cst.Name):
                self.item_roots.add(target.value.value)
            else:
                self.other_items = True

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.bound_outside_flow.append((_names(node.target, bases=True), _names(node.iter, bases=True)))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.bound_outside_flow.append((_names(node.target, bases=True), _names(node.value, bases=True)))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.nested += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.nested -= 1

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.nested += 1

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.nested -= 1

    def _store(self, target: cst.BaseExpression) -> None:
        if type(target) in TUPLE_OR_LIST:
            for el in target.elements:
                self._store(el.value)
        elif isinstance(target, cst.StarredElement):
            self._store(target.value)
        elif isinstance(target, (cst.Subscript, cst.Attribute)):
            name = chain_root(target)
            if name is not None:
                self.names.add(name)

    def _escapes(self, value: cst.BaseExpression | None) -> None:
        """Every local ``value`` mentions: it ends up where this method no longer sees it."""
        if value is not None:
            self.names |= _names(value, bases=bool(self.nested))

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._item(t.target)
            if isinstance(t.target, cst.Name):
                self.bindings.setdefault(t.target.value, []).append(node.value)
            if self.nested or not keyed_store(t.target):  # out["k"] = x: the dataflow follows it
                self._store(t.target)
            if not isinstance(t.target, (cst.Name, cst.Tuple, cst.List)):  # self.x = outs, d[k] = outs
                self._escapes(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._store(node.target)
        if not isinstance(node.target, cst.Name):
            self._escapes(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._item(node.target)
        self._store(node.target)  # outs += [h] on a name: the dataflow follows it (see augmented)
        if not isinstance(node.target, cst.Name):
            self._escapes(node.value)

    def visit_Del(self, node: cst.Del) -> None:
        self._item(node.target)
        self._store(node.target)

    def visit_Global(self, node: cst.Global) -> None:
        self.names |= {n.name.value for n in node.names}

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.names |= {n.name.value for n in node.names}

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute):  # outs.append(h), out.update(), outs[0].extend(...)
            receiver = node.func.value
            name = chain_root(receiver)
            if name is not None and (isinstance(receiver, cst.Name) or self.nested):
                self.names.add(name)
        record = type(node.func) is cst.Name and node.func.value in self.records
        if not record and not pure_call(node.func, self.qualnames):
            for arg in node.args:
                self._escapes(arg.value)


MUTATING_METHODS = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "setdefault",
     "popitem", "add", "discard"}
)  # fmt: skip
"""Methods of Python's lists, dicts and sets that change the object they are called on."""


def mutated_locals(fn: cst.FunctionDef) -> set[str]:
    """The names ``fn`` changes in place as Python containers: ``widths.pop()``, ``widths.append(w)``,
    ``widths[0] = w``, ``del widths[0]``, ``next(it)`` (``widths += [w]`` binds the name again: a
    second binding, which keeps it from being replayed as one value). Such a local is no value
    ``__init__`` can replay from its binding alone (``widths = list(self.widths)`` holds one element fewer once
    ``last = widths.pop()`` ran), nor may the method drop the line that changes it."""
    changed: set[str] = set()
    for node in nodes_of(fn.body, (cst.Call, cst.Assign, cst.AugAssign, cst.Del)):
        if isinstance(node, cst.Call):
            func, args = node.func, node.args
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                if func.attr.value in MUTATING_METHODS:
                    changed.add(func.value.value)
            elif (
                isinstance(func, cst.Name)
                and func.value == "next"
                and args
                and isinstance(args[0].value, cst.Name)
            ):
                changed.add(args[0].value.value)  # an iterator advanced
            continue
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]  # type: ignore[attr-defined]
        for target in targets:
            if type(target) in _SUBSCRIPT_OR_ATTRIBUTE and isinstance(target.value, cst.Name):  # type: ignore[attr-defined]
                changed.add(target.value.value)  # type: ignore[attr-defined]
    return changed - {"self"}


def keyed_store(target: cst.BaseExpression) -> bool:
    """``name[key] = value`` with a string key on a local: a dict's entry, which the dataflow follows
    in order (:func:`~linen2nnx.migrate.mapping_flow.stored`)."""
    return (
        isinstance(target, cst.Subscript)
        and isinstance(target.value, cst.Name)
        and len(target.slice) == 1
        and isinstance(target.slice[0].slice, cst.Index)
        and mapping_flow.string_key(target.slice[0].slice.value)
    )


def pure_call(func: cst.BaseExpression, qualnames: Callable[[cst.CSTNode], set[str]]) -> bool:
    """Whether calling ``func`` is known to leave the lists and objects passed to it unchanged."""
    if type(func) is cst.Name and func.value in PURE_BUILTINS:
        return True
    return any(q.startswith(PURE_PREFIXES) for q in qualnames(func))


def _names(node: cst.CSTNode, bases: bool) -> set[str]:
    """The locals a value expression mentions (attribute names and keywords aside); with ``bases``
    false, not those only read through (``outs`` of ``outs[0]``, ``o`` of ``o.h``)."""
    found = _Names(bases)
    found.walk(node)
    return found.out


class _Names(FastVisitor):
    def __init__(self, bases: bool) -> None:
        self.bases = bases
        self.out: set[str] = set()

    def visit_Name(self, n: cst.Name) -> None:
        self.out.add(n.value)

    def visit_Attribute(self, n: cst.Attribute) -> bool:
        if self.bases or not isinstance(n.value, cst.Name):
            self.walk(n.value)
        return False

    def visit_Subscript(self, n: cst.Subscript) -> bool:
        if self.bases or not isinstance(n.value, cst.Name):
            self.walk(n.value)
        for el in n.slice:
            self.walk(el)
        return False

    def visit_Arg(self, n: cst.Arg) -> bool:
        self.walk(n.value)
        return False


class InPlace:
    """What the dataflow needs to honour in-place changes: the names a method changes (see
    :func:`method_changes`), and, for each local holding a list or object, the locals it may share that
    value with (``b = outs``, ``a = outs[0]``), so that changing one forgets the others too."""

    def __init__(self, names: set[str], own_dict_items_only: bool = False) -> None:
        self.names = names
        self.own_dict_items_only = own_dict_items_only  # see _Mutations.items_only_into_own_dicts
        self.sources: dict[str, set[str]] = {}

    def bound(self, env: dict[str, Feat], name: str, value: Feat, rhs: cst.CSTNode | None) -> Feat:
        """What ``name = rhs`` holds: ``value``, or unknown when it is a list or object changed in
        place. Binding a changed name to another local's list or object (``b = outs``, ``d = {'k':
        outs}``), or to a part of it that holds one (``inner = outs[0]``), forgets that local's
        elements too: they are the same objects."""
        if value.kind in SIZED:  # an array: no list or object shared, nothing to forget
            return value
        compound = value.kind in COMPOUND
        if not any(v.kind in COMPOUND for v in env.values()):  # no local holds a list or object to share
            return (
                Feat.unknown(f"{name}, a list or object changed in place")
                if compound and name in self.names
                else value
            )
        whole = _names(rhs, bases=False) if rhs is not None else set()
        shared = {
            n
            for n in whole | (_bases(rhs) if rhs is not None else set())
            if n != name and env.get(n, _NONE).kind in COMPOUND
        }
        sized = value.kind in SIZED  # an array: no list or object shared
        if name in self.names and not sized:
            for n in shared:
                if compound or n in whole or _holds_compound(env[n]):
                    self._forget(env, n, set())
        if not sized:
            self.sources.setdefault(name, set()).update(shared)
        if compound and name in self.names:
            return Feat.unknown(f"{name}, a list or object changed in place")
        return value

    def called(
        self,
        env: dict[str, Feat],
        node: cst.Call,
        qualnames: Callable[[cst.CSTNode], set[str]],
        arg_values: Sequence[Feat] = (),
    ) -> None:
        """A call receiving a part of a local (``f(outs[0])``, ``outs[0].append(h)``): when that local
        holds a list or object among its elements, the call may change it, and its elements are
        forgotten from here on. An argument the flow knows to be an array (``arg_values``, of a sized
        kind: ``layer(out['h'])``) hands the call no list or object."""
        parts = (
            [
                a.value
                for a, v in zip(node.args, [*arg_values, *[_NONE] * len(node.args)])
                if v.kind not in SIZED
            ]
            if not pure_call(node.func, qualnames)
            else []
        )
        if isinstance(node.func, cst.Attribute):
            parts.append(node.func.value)
        for part in parts:
            for base in _bases(part):
                if base != "self" and (_holds_compound(env.get(base, _NONE)) or self.sources.get(base)):
                    self._forget(env, base, set())

    def _forget(self, env: dict[str, Feat], name: str, seen: set[str]) -> None:
        if name in seen:
            return
        seen.add(name)
        if env.get(name, _NONE).kind in COMPOUND:
            env[name] = Feat.unknown(f"{name}, whose list or object another name changes in place")
        for n in self.sources.get(name, ()):
            self._forget(env, n, seen)


_NONE = Feat.unknown("unbound")


def _holds_compound(value: Feat) -> bool:
    return any(e.kind in COMPOUND or _holds_compound(e) for e in value.elements if e.kind != "choice")


def augmented(in_place: InPlace, env: dict[str, Feat], name: str) -> None:
    """``name += value`` extends a list in place: every other local sharing it forgets its elements."""
    sharing = set(in_place.sources.get(name, ())) | {n for n, s in in_place.sources.items() if name in s}
    for n in sharing - {name}:
        in_place._forget(env, n, {name})


def _bases(node: cst.CSTNode) -> set[str]:
    """The locals ``node`` reads a part of: ``outs`` of ``outs[0]`` and of ``[o.h, x]``."""
    found = _Bases()
    found.walk(node)
    return found.out


class _Bases(FastVisitor):
    def __init__(self) -> None:
        self.out: set[str] = set()

    def visit_Attribute(self, n: cst.Attribute) -> None:
        name = chain_root(n)
        if name is not None:
            self.out.add(name)

    def visit_Subscript(self, n: cst.Subscript) -> None:
        name = chain_root(n)
        if name is not None:
            self.out.add(name)
