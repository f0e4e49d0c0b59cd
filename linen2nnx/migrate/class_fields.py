"""A Linen class's dataclass fields, and what kind of value each holds.

The fields become ``__init__``'s parameters (a base class's first, as the dataclass orders them);
an activation field (``act: Callable = nn.relu``, or one every caller binds to an activation) keeps
the feature size through ``self.act(x)``; an RNN cell is sized by its carry; a field named ``rngs``
clashes with NNX's constructor argument and is a finding.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from typing import Any

import libcst as cst

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.annotation_names import qualified_default
from linen2nnx.migrate.context import FIELD_FUNCTIONS, FileContext
from linen2nnx.migrate.cst_meta import calls_in, nodes_of
from linen2nnx.migrate.cst_utils import code, names_in, parse_expression, self_attr
from linen2nnx.migrate.elementwise import setup_activations
from linen2nnx.migrate.kw_only import is_kw_only_marker
from linen2nnx.migrate.linen_api import feature_preserving_functions
from linen2nnx.migrate.rules import MOD_004, MOD_016
from linen2nnx.migrate.sites import LINEN_BASES, ClassPlan, Field
from linen2nnx.migrate.verify_syntax import class_body_names

CONFIGURING_DECORATORS = frozenset(
    {"gin.configurable", "gin.register", "gin.config.configurable", "gin.config.register"}
)
"""Class decorators (bare, or called with a name / ``denylist=``) that fill constructor parameters a
configuration binds, by name: they wrap ``__init__`` and read only its parameters, which the NNX
``__init__`` keeps (the Linen fields, by name), so they stay on the NNX class with no finding. A field
default of such a class is whatever the configuration binds, not a constant: a caller never spells it
out as the size of what it builds (:func:`default_for_caller`)."""


def configuring(ctx: FileContext, decorator: cst.Decorator) -> bool:
    """Whether ``decorator`` is one of :data:`CONFIGURING_DECORATORS`, bare or called."""
    applied = decorator.decorator
    target = applied.func if isinstance(applied, cst.Call) else applied
    return bool({ctx.absolute(q) for q in ctx.qualnames(target)} & CONFIGURING_DECORATORS)


def configured_by_name(ctx: FileContext, node: cst.ClassDef) -> bool:
    """Whether a decorator of ``node`` fills its fields from a configuration (:func:`configuring`)."""
    return any(configuring(ctx, d) for d in node.decorators)


def class_fields(ctx: FileContext, node: cst.ClassDef) -> list[Field]:
    """The dataclass fields of ``node``, after those of its Linen base classes (every one of them
    ``configured`` when a decorator fills them from a configuration: :func:`configured_by_name`)."""
    fields: list[Field] = []
    for base in node.bases:  # Linen base classes (this file's or another's) contribute their fields first
        base_plan = ctx.user_class_of(base.value)
        if base_plan is None:
            continue
        local = ctx.state.linen_classes.get(base_plan.name) is base_plan
        # a default of another file's base reads names its module binds
        fields += (
            base_plan.fields if local else [_with_base_names(ctx, base.value, f) for f in base_plan.fields]
        )
    # past this class's `_: dataclasses.KW_ONLY` (or all of them, `class X(Base, kw_only=True)`): its
    # later fields are keyword-only
    kw_only = any(
        k.keyword is not None and k.keyword.value == "kw_only" and code(k.value) == "True"
        for k in node.keywords
    )
    indexed = _element_fields(node)
    for stmt in node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    if "ClassVar" in code(small.annotation.annotation):
                        continue
                    if is_kw_only_marker(small):
                        kw_only = True
                        continue
                    own = _own_kw_only(ctx, small)  # `field(kw_only=True)` overrides the marker
                    field = dataclasses.replace(
                        ctx.dataclass_field(small), kw_only=kw_only if own is None else own
                    )
                    if holds_modules(field.annotation, field.name in indexed):
                        field = dataclasses.replace(field, holds_modules=True)
                    elif sequence_field(field.annotation, field.default):
                        field = dataclasses.replace(field, as_tuple=True)
                    if field.default is not None:  # `other: int = WIDTH`, a constant of the class body
                        reads = names_in(parse_expression(field.default)) & class_body_names(node)
                        field = dataclasses.replace(field, class_names=frozenset(reads))
                    at = next((i for i, f in enumerate(fields) if f.name == field.name), None)
                    if at is None:
                        fields.append(field)
                    else:  # a field declared again keeps its place, as a dataclass's does
                        fields[at] = field
    if configured_by_name(ctx, node):
        fields = [dataclasses.replace(f, configured=True) for f in fields]
    return fields


def _own_kw_only(ctx: FileContext, small: cst.AnnAssign) -> bool | None:
    """A field's own ``dataclasses.field(kw_only=...)`` when it says one, which the dataclass takes over
    the class's ``KW_ONLY`` marker or keyword (``kw_only=True`` on one field makes just that one a
    keyword-only argument, moved after the positional ones); None when it says none."""
    value = small.value
    if not isinstance(value, cst.Call) or not ctx.qualnames(value.func) & FIELD_FUNCTIONS:
        return None
    flag = next((a.value for a in value.args if a.keyword is not None and a.keyword.value == "kw_only"), None)
    if isinstance(flag, cst.Name) and flag.value in ("True", "False"):
        return flag.value == "True"
    return None


def _with_base_names(ctx: FileContext, base: cst.BaseExpression, field: Field) -> Field:
    """``field`` of ``base``, a class of another file, with the names its default reads that this file
    does not bind read through the base's module: ``t5_architecture.LayerRemat.LEGACY`` for a base
    written ``t5_architecture.Encoder``; for a base imported by name, its module's dotted name,
    imported."""
    names = ctx.state.module_names
    if field.default is None:
        return field
    if isinstance(base, cst.Attribute):
        return dataclasses.replace(field, default=qualified_default(field.default, names, code(base.value)))
    known = ctx.state.external
    module = next((q.rsplit(".", 1)[0] for q in map(ctx.absolute, ctx.qualnames(base)) if q in known), None)
    if module is None:
        return field
    default = qualified_default(field.default, names, module)
    if default == field.default:
        return field
    ctx.state.plain_imports.add(module)
    return dataclasses.replace(field, default=default)


def annotated_layer(ctx: FileContext, annotation: cst.BaseExpression) -> LayerRule | None:
    """The built-in layer an annotation names (``nn.Embed``, ``Optional[nn.Dense]``, ``nn.Dense | None``),
    when NNX has it."""
    if isinstance(annotation, cst.BinaryOperation) and isinstance(annotation.operator, cst.BitOr):
        sides = [annotation.left, annotation.right]
        others = [s for s in sides if not (isinstance(s, cst.Name) and s.value == "None")]
        annotation = others[0] if len(others) == 1 else annotation
    if isinstance(annotation, cst.Subscript) and len(annotation.slice) == 1:
        index = annotation.slice[0].slice
        if ctx.qualnames(annotation.value) & {"typing.Optional"} and isinstance(index, cst.Index):
            annotation = index.value
    if not isinstance(annotation, (cst.Attribute, cst.Name)):
        return None
    rule = ctx.layer_rule_of(annotation)
    return rule if rule is not None and not rule.manual_reason and not rule.nested else None


#: Methods of ``nnx.Module`` a field of the same name would hide (the NNX class stores fields as attributes).
MODULE_METHODS = frozenset(
    {"train", "eval", "sow", "perturb", "iter_modules", "iter_children", "set_attributes"}
)


def plan_field_kinds(ctx: FileContext, plan: ClassPlan, node: cst.ClassDef) -> None:
    """Whether the class is an RNN cell; which fields are activations (keep the feature size)."""
    plan.is_cell = any(
        LINEN_BASES.get(q) == "nnx.RNNCellBase" for base in node.bases for q in ctx.qualnames(base.value)
    ) or any(getattr(ctx.user_class_of(base.value), "is_cell", False) for base in node.bases)
    for stmt in node.body.body:  # `act: Callable = nn.relu`: calling self.act keeps the feature size
        for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
            if (
                isinstance(small, cst.AnnAssign)
                and isinstance(small.target, cst.Name)
                and small.value is not None
                and ctx.qualnames(small.value) & feature_preserving_functions()
                # a class of the file that binds it to anything else (a pooling function) says otherwise
                and all(
                    b.kind == "activation" for b in ctx.field_bindings.bases(plan.name, small.target.value)
                )
            ):
                plan.activation_fields.add(small.target.value)
            elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                rule = annotated_layer(ctx, small.annotation.annotation)
                if rule is not None:  # `embed_tokens: nn.Embed`: a layer a caller hands in
                    plan.layer_fields[small.target.value] = rule
    # `self.act = ACT2FN[self.config.act]` in setup: calling self.act keeps the feature size too
    plan.activation_fields |= setup_activations(ctx, node, set(plan.field_names))
    calls = calls_in(node.body)
    apis = [ctx.self_call(c) for c in calls]  # `self.<api>(...)` of each call, once
    called = set(apis) - {None}
    plan.put_calls = [c for c, api in zip(calls, apis) if api == "put_variable"]
    for f in plan.fields:  # `act: Callable` with no default, called: what the callers bind it to
        if (
            f.default is None
            and f.name in called
            and ctx.field_bindings.preserves_features(plan.name, f.name)
        ):
            plan.activation_fields.add(f.name)
    if "rngs" in plan.field_names:
        ctx.report(
            MOD_004,
            _field_line(node, "rngs"),  # on the field's line, where its marker goes
            f"{plan.name} has a field named `rngs`, which NNX constructors reserve for the nnx.Rngs",
            "rename the field before migrating",
        )
    for name in sorted(set(plan.field_names) & MODULE_METHODS):
        ctx.report(
            MOD_016,
            _field_line(node, name),
            f"{plan.name}'s field `{name}` becomes an attribute that hides nnx.Module.{name}() "
            f"(model.{name}() raises TypeError)",
            "rename the field; the model computes the same either way",
        )


def _field_line(node: cst.ClassDef, name: str) -> cst.CSTNode:
    """The statement of ``node``'s body that declares the field ``name`` (the class when none does)."""
    return next(
        (
            stmt
            for stmt in node.body.body
            if isinstance(stmt, cst.SimpleStatementLine)
            and any(isinstance(s, cst.AnnAssign) and code(s.target) == name for s in stmt.body)
        ),
        node,
    )


def read_at_class_creation(cls: cst.ClassDef) -> list[set[str]]:
    """For each statement of ``cls``'s body, the names the statements after it read while the class
    is created: its plain statements (``rot = Rotary(hidden_dim // heads)`` reads the fields' defaults,
    class attributes then), the defaults of fields (``wide: int = dim * 4``), and the decorators,
    defaults and annotations of its methods, not their bodies. A name read before the statement that
    binds it in the class is the module's (``promote_dtype: Fn = promote_dtype``)."""
    reads = [_creation_reads(stmt) for stmt in cls.body.body]
    later: list[set[str]] = []
    seen: set[str] = set()
    for read in reversed(reads):
        later.append(set(seen))
        seen |= read
    return later[::-1]


def _creation_reads(stmt: cst.BaseStatement) -> set[str]:
    if isinstance(stmt, cst.FunctionDef):
        parts: list[cst.CSTNode] = [d.decorator for d in stmt.decorators]
        params = stmt.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            parts += [p for p in (param.default, param.annotation) if p is not None]
        return {n for part in parts for n in names_in(part)}
    if isinstance(stmt, cst.SimpleStatementLine):
        read: set[str] = set()
        for small in stmt.body:  # of a field, its default
            field = isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name)
            read |= names_in(small.value) if field and small.value else set() if field else names_in(small)
        return read
    return set() if isinstance(stmt, cst.ClassDef) else names_in(stmt)


_CONTAINERS = frozenset(
    {"Mapping", "MutableMapping", "Dict", "dict", "FrozenDict", "Sequence", "List", "list", "Tuple", "tuple"}
    | {"Iterable", "Collection", "Set", "set", "frozenset"}
)
_PLAIN_ELEMENTS = frozenset(
    {"int", "float", "str", "bool", "bytes", "complex", "None", "Any", "Optional", "Union", "Literal"}
    | {
        "Array",
        "ArrayLike",
        "ndarray",
        "DType",
        "DTypeLike",
        "dtype",
        "Shape",
        "PRNGKey",
        "Axes",
        "Initializer",
    }
    | {
        "Ellipsis",
        "typing",
        "jax",
        "jnp",
        "np",
        "numpy",
        "nn",
        "linen",
        "flax",
        "collections",
        "abc",
        "Callable",
    }
)


def _element_fields(cls: cst.ClassDef) -> set[str]:
    """Fields whose elements the class reaches one by one: applied by index (``self.embedders[k](v)``)
    or looped over (``for b in self.blocks``, ``self.embedders.values()`` / ``.items()``)."""
    found = {self_attr(c.func.value) for c in calls_in(cls.body) if isinstance(c.func, cst.Subscript)}
    for loop in nodes_of(cls.body, (cst.For, cst.CompFor)):
        it = loop.iter  # type: ignore[attr-defined]
        if (
            isinstance(it, cst.Call)
            and isinstance(it.func, cst.Attribute)
            and it.func.attr.value in ("values", "items")
        ):
            it = it.func.value
        found.add(self_attr(it))
    return {f for f in found if f is not None}


def holds_modules(annotation: str | None, applied_by_index: bool) -> bool:
    """A field annotated as a container of modules (``Sequence[nn.Module]``), or as a container of some
    class whose elements the class reaches one by one (``Mapping[str, Embedder]`` and
    ``self.embedders[k](v)``, ``for b in self.blocks``: ``applied_by_index``, :func:`_element_fields`):
    its ``__init__`` keeps it as ``nnx.data(...)``. NNX treats any other attribute as static, and a
    static dict or list holding NNX modules is refused when the class is built. A container of plain
    values (``Sequence[int]``, ``Mapping[str, Any]``) is kept as it is."""
    if not annotation:
        return False
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", annotation))
    if not names & _CONTAINERS:
        return False
    return "Module" in annotation or (applied_by_index and bool(names - _CONTAINERS - _PLAIN_ELEMENTS))


_SEQUENCES = frozenset(
    {"Sequence", "MutableSequence", "List", "list", "Tuple", "tuple", "Iterable", "Collection"}
)


def sequence_field(annotation: str | None, default: str | None) -> bool:
    """A field annotated as a sequence (``Sequence[int]``, ``Optional[Tuple[int, int]]``), or with a tuple
    default: Linen freezes what a caller hands it (``flax.linen.module._freeze_attr``: a list becomes a
    tuple), so ``self.strides == (1, 1)`` and ``self.widths + (out,)`` hold for ``strides=[1, 1]`` too. The
    NNX ``__init__`` stores such a list as a tuple as well; a field of any other type keeps what it is
    handed (a config object or a number is not frozen by Linen either)."""
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", annotation or ""))
    if names & _SEQUENCES and not names & {"Mapping", "MutableMapping", "Dict", "dict", "FrozenDict"}:
        return True
    return default is not None and default.startswith("(") and default.endswith(")") and "," in default


def field_value(field: Field) -> str:
    """What the NNX ``__init__`` stores for ``field``: the argument (``nnx.data`` for modules, a list made
    a tuple for a sequence, as Linen does), or the default of a field that is no argument."""
    if not field.init:
        return str(field.default)
    if field.holds_modules:
        return f"nnx.data({field.name})"  # a dict or list of modules is data in NNX
    if field.as_tuple:
        return f"tuple({field.name}) if isinstance({field.name}, list) else {field.name}"
    return field.name


def default_for_caller(
    ctx: FileContext, callee: cst.BaseExpression, user: ClassPlan, field: Field
) -> str | None:
    """``field``'s default as the file building ``user`` through ``callee`` reads it (a submodule's
    output size spelled out in its caller: ``nnx.Linear(HIDDEN, 3)``): a constant of the class body as
    ``<callee>.WIDTH`` (the NNX class keeps it), a name of another file's module through that module;
    None where that cannot be said (the default reads another field, the callee is no plain name of
    the class, or a configuration may bind another value: ``Field.configured``)."""
    default = field.default
    if default is None or field.configured:
        return None
    named = ctx.user_class_of(callee) if type(callee) in (cst.Name, cst.Attribute) else None
    plain = named is not None and named.name == user.name
    if field.class_names:
        if not plain or field.class_names & {f.name for f in user.fields}:
            return None
        others = frozenset(names_in(parse_expression(default)) - field.class_names)
        default = qualified_default(default, others, code(callee))
    if ctx.state.linen_classes.get(user.name) is user:
        return default  # of this file: its module-level names are this file's
    owner = _module_of(ctx, callee) if plain else None
    if owner is None:
        return None
    # every name of the other file's module through it, even one this file binds too (another value)
    theirs = names_in(parse_expression(field.default)) - field.class_names
    qualified = qualified_default(default, frozenset(names_in(parse_expression(default)) - theirs), owner)
    if qualified != default and not isinstance(callee, cst.Attribute):
        ctx.state.pending_imports[qualified] = owner  # imported where the size is written (sizing.py)
    return qualified


def unspelled_reason(user: ClassPlan, given: Collection[str]) -> str:
    """Why a caller cannot spell out a size of ``user`` that reads its fields: a default left to a
    configuration (``Field.configured``), or a field it cannot say."""
    if any(f.configured and f.name not in given for f in user.fields):
        return f"a default of {user.name}'s fields, which a configuration may bind"
    return "submodule config"


def _module_of(ctx: FileContext, callee: cst.BaseExpression) -> str | None:
    """How this file reaches the module of the class of another file ``callee`` names: ``layers`` of
    ``layers.Block``; for a class imported by name, its module's dotted name (which the caller imports
    plainly where the size it spells out is written: sizing._module_out)."""
    if isinstance(callee, cst.Attribute):
        return code(callee.value)
    known = ctx.state.external
    return next((q.rsplit(".", 1)[0] for q in map(ctx.absolute, ctx.qualnames(callee)) if q in known), None)


def note_default_imports(state: Any, expr: str | None) -> None:
    """The modules a size spelled out in the caller reads defaults through (``pkg.layers.HIDDEN``, see
    :func:`default_for_caller`): imported plainly by the caller's file."""
    if expr is not None:
        state.plain_imports.update(m for d, m in state.pending_imports.items() if d in expr)
