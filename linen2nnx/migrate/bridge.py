"""The fallback for a class the codemod cannot rewrite: keep it Linen and run it through ``nnx.bridge``.

A half-rewritten class (an ``nnx.Module`` that still calls ``self.scope`` or ``nn.scan``) would not
even construct. Instead the Linen original is kept verbatim as ``<Name>Linen`` and ``<Name>``
becomes a small NNX module around ``nnx.bridge.ToNNX``, so the file runs and every caller keeps
working while the ``manual`` findings are fixed by hand::

    class Block(nnx.Module):
        def __init__(self, features: int, *, rngs: nnx.Rngs):
            self.linen = nnx.bridge.ToNNX(BlockLinen(features=features), rngs=rngs)

        def __call__(self, *args, **kwargs):
            return self.linen(*args, **kwargs)

Its variables appear on the first call (``nnx.bridge.lazy_init(model, *inputs)``, which the written
pair spec does), under ``linen/<Linen path>`` (docs/nnx_facts.md#the-bridge): the name map records the prefix, so
checkpoints still convert by name.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.annotation_names import qualified_default
from linen2nnx.migrate.cst_utils import names_in, parse_expression, parse_statement, self_attr, single_assign
from linen2nnx.migrate.kw_only import init_fields
from linen2nnx.migrate.sites import ClassPlan, Field

BRIDGE_ATTR = "linen"


LINEN_CLASS_ATTR = "linen_class"
"""Class attribute of a wrapper naming its Linen class: a kept-Linen caller handed the wrapper
(``partial(ResNet, block_cls=ResNetBlock)`` with both bridged) builds the Linen class instead."""

_CLASS_HINTS = ("Module", "ModuleDef", "Callable", "Any", "type", "Type")


def linen_name(name: str) -> str:
    return f"{name}Linen"


def _may_hold_class(annotation: str | None) -> bool:
    """A field that may be handed a module class (``block_cls: ModuleDef``), not a plain size or flag."""
    return not annotation or any(hint in annotation for hint in _CLASS_HINTS)


def _linen_value(name: str) -> str:
    return f"getattr({name}, {LINEN_CLASS_ATTR!r}, {name})"


def bridge_wrapper(
    plan: ClassPlan,
    collections: list[str],
    markers: list[cst.EmptyLine],
    methods: tuple[tuple[str, str], ...] = (),
    packed: frozenset[str] = frozenset(),
) -> cst.ClassDef:
    """``class <Name>(nnx.Module)`` holding ``ToNNX(<Name>Linen(<fields>))``; arguments other
    classes were told the migrated class takes (new input sizes) are accepted and unused. The
    fields' ``markers`` go on its ``__init__``, where a second run would put them. Each of the Linen
    class's other public ``methods`` (:func:`forwarded_methods`: ``model.encode(x)``) is forwarded
    to the Linen method of that name; those ``packed`` (:func:`packed_methods`) with their
    arguments packed."""
    params = ["self"]
    keyword_only = False
    for f, star in init_fields(plan.fields):
        if star:
            params.append("*")
            keyword_only = True
        params.append(
            f"{f.name}: {f.annotation}" + (f" = {_default(plan, f)}" if f.default is not None else "")
        )
    if not keyword_only:
        params.append("*")
    params += [f"{arg}: object = None" for arg in plan.new_args]
    rngs = "nnx_rngs" if "rngs" in plan.field_names else "rngs"  # a Linen field named rngs keeps its name
    params.append(f"{rngs}: nnx.Rngs")
    fields = ", ".join(
        f"{f.name}={_linen_value(f.name)}" if _may_hold_class(f.annotation) else f"{f.name}={f.name}"
        for f in plan.fields
        if f.init and not f.added  # accepted like the new sizes, unused: the Linen class has no such field
    )
    mutable = f", mutable={collections!r}" if collections else ""
    forwards = "".join(_forward(plan, name, kind, mutable, name in packed) for name, kind in methods)
    call = (
        f"self.{BRIDGE_ATTR}(args, kwargs, method={_PACKED_CALL}{mutable})"
        if "__call__" in packed
        else f"self.{BRIDGE_ATTR}(*args{mutable}, **kwargs)"
    )
    source = (
        f"class {plan.name}(nnx.Module):\n"
        f'    """{plan.name} still runs as Linen ({linen_name(plan.name)}) through nnx.bridge.ToNNX; see the '
        'TODO(linen2nnx) markers."""\n\n'
        f"    {LINEN_CLASS_ATTR} = {linen_name(plan.name)}\n\n"
        f"    def __init__({', '.join(params)}):\n"
        f"        self.{BRIDGE_ATTR} = nnx.bridge.ToNNX({linen_name(plan.name)}({fields}), rngs={rngs})\n\n"
        "    def __call__(self, *args, **kwargs):\n"
        f"        return {call}" + ("  # updated in place\n" if collections else "\n") + forwards
    )
    node = parse_statement(source)
    assert isinstance(node, cst.ClassDef)
    body = list(node.body.body)
    init = body[2]
    assert isinstance(init, cst.FunctionDef)
    body[2] = init.with_changes(leading_lines=[*init.leading_lines, *markers])
    return node.with_changes(body=node.body.with_changes(body=body))


def _default(plan: ClassPlan, field: Field) -> str | None:
    """The wrapper's default for ``field``: the field's own, except one the rewrite made NNX (a layer
    class ``nnx.Linear``, a partial of one, ``nnx.with_partitioning``, a ``VariableMetadata`` maker),
    which the Linen class cannot use: the Linen class's own default (``<Name>Linen.<field>``, which the
    dataclass keeps as a class attribute; a factory's is not kept, so that one stays)."""
    default = field.default
    if default is not None and ("nnx." in default or "with_partitioning(" in default):
        if not default.endswith(")()"):  # `(lambda: ...)()` of a default_factory
            return f"{linen_name(plan.name)}.{field.name}"
    if default is not None and field.class_names:  # `out: int = features`: a name of the class body,
        # which the wrapper's signature cannot see: the Linen class keeps it as a class attribute
        others = frozenset(names_in(parse_expression(default)) - field.class_names)
        return qualified_default(default, others, linen_name(plan.name))
    return default


#: Names the wrapper keeps (its own, and Linen's ``setup``). A Linen method named like ``nnx.Module``'s
#: API (``train(self, x)``) is forwarded: the converted callers call it the Linen way.
_NOT_FORWARDED = frozenset({"setup", BRIDGE_ATTR, LINEN_CLASS_ATTR})


def forwarded_methods(cls: cst.ClassDef) -> tuple[tuple[str, str], ...]:
    """The public methods of a Linen class a caller may call on the module, each with how the wrapper
    reaches it: ``"method"`` (a plain or ``@nn.compact`` ``def``, applied through the bridge),
    ``"staticmethod"`` / ``"classmethod"`` (the Linen class's own), ``"property"`` (read on the wrapped
    Linen module, unbound: fields and what they compute)."""
    found = []
    for stmt in cls.body.body:
        if not isinstance(stmt, cst.FunctionDef) or stmt.name.value.startswith("_"):
            continue
        decorators = {_decorator_name(d.decorator) for d in stmt.decorators}
        kind = (
            "method"
            if decorators <= {"compact"}
            else next((k for k in ("staticmethod", "classmethod", "property") if {k} == decorators), None)
        )
        if stmt.name.value not in _NOT_FORWARDED and kind is not None:
            found.append((stmt.name.value, kind))
    return tuple(found)


#: The keyword arguments ``ToNNX.__call__`` takes for itself: a Linen method with a parameter of one of
#: these names would never receive it (``mutable=True`` would make the bridge return ``(out, updates)``).
_BRIDGE_KEYWORDS = frozenset({"rngs", "method", "mutable"})

#: The method the bridge applies for a packed call: the Linen method's arguments travel as two values.
_PACKED_CALL = "lambda module, args, kwargs: module(*args, **kwargs)"


def packed_methods(cls: cst.ClassDef) -> frozenset[str]:
    """The methods of a Linen class (``__call__`` and public ones) with a parameter named like a keyword
    ``ToNNX.__call__`` keeps (``def __call__(self, x, mutable=False)``), or ``**kwargs`` that may hold
    one: the wrapper hands their arguments to the bridge packed, as ``(args, kwargs)``, and applies a
    function that unpacks them."""
    return frozenset(
        stmt.name.value
        for stmt in cls.body.body
        if isinstance(stmt, cst.FunctionDef)
        and (
            isinstance(stmt.params.star_kwarg, cst.Param)  # `**kwargs` may carry one of them
            or {
                p.name.value
                for p in (*stmt.params.posonly_params, *stmt.params.params, *stmt.params.kwonly_params)
            }
            & _BRIDGE_KEYWORDS
        )
    )


def _forward(plan: ClassPlan, name: str, kind: str, mutable: str, packed: bool = False) -> str:
    """The wrapper's line(s) reaching the Linen class's ``name`` (see :func:`forwarded_methods`)."""
    if kind == "method" and packed:
        unpack = f"lambda module, args, kwargs: module.{name}(*args, **kwargs)"
        return (
            f"\n    def {name}(self, *args, **kwargs):\n"
            f"        return self.{BRIDGE_ATTR}(args, kwargs, method={unpack}{mutable})\n"
        )
    if kind == "method":
        return (
            f"\n    def {name}(self, *args, **kwargs):\n"
            f"        return self.{BRIDGE_ATTR}(*args, method={name!r}{mutable}, **kwargs)\n"
        )
    if kind == "property":
        return f"\n    @property\n    def {name}(self):\n        return self.{BRIDGE_ATTR}.to_nnx__module.{name}\n"
    if kind == "staticmethod":
        return f"\n    {name} = staticmethod({linen_name(plan.name)}.{name})\n"
    return f"\n    {name} = {linen_name(plan.name)}.{name}  # bound to the Linen class, as Linen's is\n"


def _decorator_name(node: cst.BaseExpression) -> str:
    while isinstance(node, cst.Call):
        node = node.func
    return node.attr.value if isinstance(node, cst.Attribute) else getattr(node, "value", "")


def is_bridge_wrapper(cls: cst.ClassDef) -> bool:
    """Whether ``cls`` is the NNX wrapper :func:`bridge_wrapper` writes (its body binds ``linen_class``)."""
    return any(
        (bound := single_assign(s)) is not None and bound[0] == LINEN_CLASS_ATTR for s in cls.body.body
    )


def builds_bridge_wrapper(cls: cst.ClassDef, module: cst.Module) -> bool:
    """An NNX class that names a wrapper of ``module`` (``Block(4, norm, rngs=rngs)``): an earlier run's
    output, handing the class kept as Linen the Linen layers it takes (``partial(nn.BatchNorm, ...)``),
    which that run left on purpose."""
    wrappers = {c.name.value for c in module.body if isinstance(c, cst.ClassDef) and is_bridge_wrapper(c)}
    return bool(wrappers) and bool(names_in(cls.body) & wrappers)


def linen_class_name(name: str, prefix: str = "") -> cst.BaseStatement:
    """``<Name>Linen.__name__ = "<Name>"``: Linen auto-names a submodule after its class
    (``Block_0``), so the kept class must keep its name or every checkpoint path under it moves; a class
    a lifted transform decorates keeps the transform's ``prefix`` too (``CheckpointBlock_0``)."""
    line = parse_statement(
        f'{linen_name(name)}.__name__ = "{prefix}{name}"  # keeps Linen\'s auto-names ({prefix}{name}_0, ...)\n'
    )
    return line.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2)


def can_bridge(plan: ClassPlan, has_user_base: bool) -> bool:
    """A class whose Linen body uses other classes of the run cannot stay Linen: those are NNX now."""
    return not has_user_base and not any(s.kind == "module" for s in plan.sites.values())


def mutable_collections(cls: cst.ClassDef, uses_batch_norm: bool) -> list[str]:
    """Collections the Linen class writes at call time (``self.variable('counters', ...)``,
    BatchNorm statistics): the wrapper applies it with them mutable, as NNX updates state in place."""
    found = {"batch_stats"} if uses_batch_norm else set()

    class V(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if (
                self_attr(node.func) == "variable"
                and node.args
                and isinstance(node.args[0].value, cst.SimpleString)
            ):
                found.add(node.args[0].value.evaluated_value)

    cls.visit(V())
    found.discard("params")
    return sorted(found)
