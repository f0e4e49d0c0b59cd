"""Arrays ``setup()`` computes from the configuration become properties of the NNX class.

``self.inv_freq = 1.0 / (self.base ** (jnp.arange(0, d, 2) / d))`` in ``setup()`` is recomputed on every
Linen ``apply``. The same line in ``__init__`` stores the array in the module, where NNX counts it as
state: built under ``nnx.eval_shape`` or ``nnx.jit`` (as a checkpoint conversion or an equivalence check
builds it) a jax array is a leaked tracer and a numpy one an abstract shape, and no Linen checkpoint has
the entry. A ``@property`` computes it where it is read, as Linen did (MaxText's own NNX
``RotaryEmbedding.timescale`` is one).

A value qualifies when it is bound by a top-level ``self.X = value`` of ``setup()`` (or one element of
``self.a, self.b = va, vb``), ``X`` bound nowhere else, or in the branches of a top-level config test
that binds nothing but such arrays (``if self.causal: self.mask = make_causal_mask(...)``: the property
takes the test, and raises ``AttributeError`` where no branch binds it, as reading it in Linen did); the
value calls into jax or numpy (or a function of the file that does) and reads nothing but fields,
attributes ``setup()`` bound before to plain values, earlier such properties, methods of the class
that read only those, names of the module and ``setup()`` locals of the same kind, which the property
computes again. An array value that reads other locals stays in ``__init__`` with a finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in, nodes_of
from linen2nnx.migrate.cst_utils import (
    assigned_names,
    code,
    names_in,
    parse_statement,
    self_attr,
    self_targets,
    single_assign,
)
from linen2nnx.migrate.mutation import mutated_locals
from linen2nnx.migrate.rules import MOD_004, MOD_014
from linen2nnx.migrate.sites import ClassPlan

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext

PYTHON_VALUES = frozenset({"int", "float", "bool", "complex", "str", "len", "tuple", "list", "round"})
ARRAY_LIBRARIES = ("jax.", "numpy.", "flax.linen.make_", "flax.linen.attention.make_")  # and Linen's masks
Binding = tuple[str, cst.BaseExpression]


def plan_setup_arrays(ctx: FileContext, plan: ClassPlan) -> None:
    """``plan.setup_properties``: each ``setup()`` attribute that becomes a property, with the
    ``setup()`` locals the property computes first (in order)."""
    setup = plan.setup
    if setup is None:
        return
    bound = assigned_names(setup)
    changed = mutated_locals(setup)  # `widths.append(w)`: not a value its binding alone gives
    attrs_bound: dict[str, int] = {}
    for node in nodes_of(setup.body, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For)):
        for _, name in self_targets(node):
            attrs_bound[name] = attrs_bound.get(name, 0) + 1
    site_calls = {id(c) for c in plan.sites} | {id(c) for c in plan.lazy_vars}
    local_reads: dict[str, list[str]] = {}  # replayable local -> the locals it needs, in order
    readable = set(plan.field_names)  # what a property may read of self
    array_locals: set[str] = set()
    method_reads = _method_reads(ctx, plan)  # read once; which are callable grows with `readable`
    for stmt in setup.body.body:  # an array bound under a config test stays (a helper's replay binds some)
        if any(id(c) in site_calls for c in calls_in(stmt)):
            continue
        readable |= {name for name, reads in method_reads.items() if not reads - readable}
        local = single_assign(stmt)
        if local is not None:
            if _computes_array(ctx, plan, local[1], array_locals):
                array_locals.add(local[0])
            needs = _needs(local[1], readable, bound, local_reads)
            if needs is not None and bound.get(local[0]) == 1 and local[0] not in changed:
                local_reads[local[0]] = needs
            continue
        branches = _config_branches(stmt)
        pairs = _self_assigns(stmt) if branches is None else [p for _, ps in branches for p in ps]
        if not pairs or not all(_computes_array(ctx, plan, v, array_locals) for _, v in pairs):
            readable |= {n for n, _ in pairs or ()}  # a plain value, set in __init__ before any read
            continue
        tests = [t for t, _ in branches or () if t is not None]
        needs = _all_needs([*tests, *(v for _, v in pairs)], readable, bound, local_reads)
        counts = {n: sum(1 for m, _ in pairs if m == n) for n, _ in pairs}
        once = all(attrs_bound.get(n) == c for n, c in counts.items())
        if branches is not None and any(len({n for n, _ in ps}) < len(ps) for _, ps in branches):
            once = False  # a branch binds it twice
        set_fields = {f.name for f in plan.fields if f.init or f.default is not None}  # what __init__ sets
        field = bool(set(counts) & set_fields)  # no property of that name then
        if needs is not None and once and not field:
            for name in counts:
                plan.setup_properties[name] = needs
                ctx.report(
                    MOD_014, stmt, f"setup()'s array self.{name} -> a property computed where it is read"
                )
            readable |= set(counts)
        elif branches is None and not set().union(*(self_reads(v) for _, v in pairs)) - readable:
            why = "that is also a field" if field else "bound more than once" if not once else None
            _report_kept(ctx, stmt, list(counts), why or "from locals it cannot compute again")


def _report_kept(ctx: FileContext, stmt: cst.BaseStatement, names: list[str], why: str) -> None:
    """The finding for arrays of ``setup()`` no property can compute (one that reads a variable is
    setup_values.py's, one that reads a method of another kind stays as it was)."""
    for name in names:
        ctx.report(
            MOD_004,
            stmt,
            f"setup() stores the array self.{name} {why}: kept in NNX's __init__ it is module "
            "state, which nnx.eval_shape / nnx.jit cannot build",
            f"compute self.{name} where it is used, or in a property from the class's fields",
        )


def report_handed_arrays(ctx: FileContext, plan: ClassPlan) -> None:
    """A finding for each class of the run built with an array argument (``Table(jnp.arange(8) / 8)``,
    ``Child(self.table)`` of a property): the child keeps it as a field, which NNX counts as module
    state that ``nnx.eval_shape`` / ``nnx.jit`` cannot build and no Linen checkpoint holds."""
    for site in plan.sites.values():
        if site.user is None:
            continue
        for arg in site.ctor.args:
            if _array_expression(ctx, arg.value) or self_reads(arg.value) & set(plan.setup_properties):
                ctx.report(
                    MOD_004,
                    arg,
                    f"{site.user.name} is handed an array ({code(arg.value)}): NNX keeps it as module state of "
                    "the child, which nnx.eval_shape / nnx.jit cannot build and no Linen checkpoint holds",
                    f"hand {site.user.name} the configuration and compute the array in it (a property)",
                )


NOT_ARRAYS = frozenset(
    {"dtype", "finfo", "iinfo", "issubdtype", "result_type", "promote_types", "ndim", "shape"}
)


def _array_expression(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """Whether ``value`` itself is an array: a jax.numpy / numpy function's result (not a dtype or its
    limits), arithmetic, an index or a tuple of one. Narrower than :func:`_computes_array`: an argument
    ``kernel_init=jax.nn.initializers.normal(0.02)`` or ``dtype=jnp.dtype('bfloat16')`` is no array."""
    if isinstance(value, cst.BinaryOperation):
        return _array_expression(ctx, value.left) or _array_expression(ctx, value.right)
    if isinstance(value, (cst.Tuple, cst.List)):  # a tuple holding one: the child holds it too
        return any(_array_expression(ctx, e.value) for e in value.elements)
    if isinstance(value, (cst.UnaryOperation, cst.Subscript)):
        return _array_expression(
            ctx, value.expression if isinstance(value, cst.UnaryOperation) else value.value
        )
    if not isinstance(value, cst.Call):
        return False
    names = ctx.qualnames(value.func)
    return any(
        n.startswith(("jax.numpy.", "numpy.")) and n.rsplit(".", 1)[-1] not in NOT_ARRAYS for n in names
    )


def _self_assigns(stmt: cst.CSTNode) -> list[Binding] | None:
    """``self.X = value`` on a line of its own -> ``[("X", value)]``; ``self.a, self.b = va, vb`` ->
    both; None for any other statement."""
    if not (
        type(stmt) is cst.SimpleStatementLine
        and len(stmt.body) == 1
        and type(stmt.body[0]) is cst.Assign
        and len(stmt.body[0].targets) == 1
    ):
        return None
    target, value = stmt.body[0].targets[0].target, stmt.body[0].value
    if type(target) is cst.Tuple and type(value) is cst.Tuple and len(target.elements) == len(value.elements):
        pairs = [(self_attr(t.value), v.value) for t, v in zip(target.elements, value.elements)]
        starred = any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements))
        return None if starred or any(n is None for n, _ in pairs) else pairs  # type: ignore[return-value]
    name = self_attr(target)
    return None if name is None else [(name, value)]


def _config_branches(stmt: cst.CSTNode) -> list[tuple[cst.BaseExpression | None, list[Binding]]] | None:
    """A top-level ``if`` / ``elif`` / ``else`` whose branches bind only ``self.X = value`` lines: each
    branch's test (None: the ``else``) and bindings; None for any other statement."""
    branches: list[tuple[cst.BaseExpression | None, list[Binding]]] = []
    node: cst.CSTNode | None = stmt
    while type(node) is cst.If:
        pairs = [_self_assigns(s) for s in node.body.body]
        if any(p is None for p in pairs):
            return None
        branches.append((node.test, [p for ps in pairs for p in ps]))  # type: ignore[union-attr]
        node = node.orelse
    if type(node) is cst.Else:
        pairs = [_self_assigns(s) for s in node.body.body]
        if any(p is None for p in pairs):
            return None
        branches.append((None, [p for ps in pairs for p in ps]))  # type: ignore[union-attr]
    return branches or None


def _method_reads(ctx: FileContext, plan: ClassPlan) -> dict[str, set[str]]:
    """What of ``self`` each plain method of the class reads (one that builds nothing, undecorated):
    a property may call it once every name it reads is readable."""
    return {
        m.name.value: self_reads(m.body)
        for m in ctx.state.methods.get(plan.name, [])
        if m.name.value not in ("setup", "__call__")
        and not m.decorators
        and not any(c in plan.sites for c in calls_in(m.body))
    }


def _computes_array(
    ctx: FileContext, plan: ClassPlan, value: cst.BaseExpression, array_locals: set[str] = frozenset()
) -> bool:
    """Whether ``value`` calls into jax or numpy, directly or through a function of the file or a method
    of the class, or reads a local that does, for an array (not ``int(2 ** np.ceil(...))``,
    ``x.item()``: a Python value, static as any field)."""
    if type(value) is cst.Call and (
        (type(value.func) is cst.Name and value.func.value in PYTHON_VALUES)
        or (type(value.func) is cst.Attribute and value.func.attr.value in ("item", "tolist"))
    ):
        return False
    if type(value) is cst.Lambda:
        return False  # a function (an initializer): it runs when called
    if names_in(value) & array_locals:
        return True
    methods = {m.name.value: m for m in ctx.state.methods.get(plan.name, [])}
    for call in nodes_of(value, (cst.Call,), opaque=(cst.Lambda,)):  # a lambda's run when it is called
        assert isinstance(call, cst.Call)
        if _calls_library(ctx, call):
            return True
        func, helper = call.func, None
        if type(func) is cst.Name:
            helper = ctx.state.module_functions.get(func.value)
        elif self_attr(func) is not None:
            helper = methods.get(self_attr(func) or "")
        if helper is not None and any(_calls_library(ctx, c) for c in calls_in(helper)):
            return True
    return False


def _calls_library(ctx: FileContext, call: cst.Call) -> bool:
    return any(n.startswith(ARRAY_LIBRARIES) for n in ctx.qualnames(call.func))


def self_reads(value: cst.BaseExpression) -> set[str]:
    """The ``X`` of each ``self.X`` ``value`` reads; ``{"self"}`` too when it uses ``self`` otherwise."""
    attrs = [n for n in nodes_of(value, (cst.Attribute,)) if self_attr(n) is not None]
    found = {self_attr(a) or "" for a in attrs}
    uses = sum(1 for n in nodes_of(value, (cst.Name,)) if n.value == "self")  # type: ignore[attr-defined]
    return found | ({"self"} if uses > len(attrs) else set())


def _all_needs(
    values: list[cst.BaseExpression],
    attrs: set[str],
    bound: dict[str, int],
    local_reads: dict[str, list[str]],
) -> list[str] | None:
    """:func:`_needs` of several values, joined in order; None when one reads what a property cannot."""
    needs: list[str] = []
    for value in values:
        more = _needs(value, attrs, bound, local_reads)
        if more is None:
            return None
        needs.extend(n for n in more if n not in needs)
    return needs


def _needs(
    value: cst.BaseExpression, attrs: set[str], bound: dict[str, int], local_reads: dict[str, list[str]]
) -> list[str] | None:
    """The ``setup()`` locals (with those they need, in order) ``value`` reads, when it reads nothing
    but ``attrs`` of ``self``, module names and replayable locals; None otherwise."""
    if self_reads(value) - attrs:
        return None
    needs: list[str] = []
    for name in sorted(names_in(value) - {"self"}):
        if name not in bound:
            continue  # a module name, a builtin, or a comprehension's own
        if name not in local_reads:
            return None
        needs.extend(n for n in [*local_reads[name], name] if n not in needs)
    return needs


def split_properties(
    plan: ClassPlan, setup_body: list[cst.BaseStatement]
) -> tuple[list[cst.BaseStatement], list[cst.FunctionDef]]:
    """The rewritten ``setup()`` body less the statements that become properties, and the properties
    (after ``__init__``, with the statements' comments); a local only they read leaves ``__init__`` too,
    its comments going with its first copy."""
    locals_by_name = {a[0]: s for s in setup_body if (a := single_assign(s)) is not None}
    moved: dict[int, list[str]] = {}  # statement -> the properties it gives, in order
    for stmt in setup_body:
        branches = _config_branches(stmt)
        pairs = _self_assigns(stmt) if branches is None else [p for _, ps in branches for p in ps]
        names = list(dict.fromkeys(n for n, _ in pairs or ()))
        if names and all(
            n in plan.setup_properties and all(local in locals_by_name for local in plan.setup_properties[n])
            for n in names
        ):  # else rewritten into something else: it stays
            moved[id(stmt)] = names
    if not moved:
        return setup_body, []
    kept = [s for s in setup_body if id(s) not in moved]
    dropped = {n for names in moved.values() for name in names for n in plan.setup_properties[name]}
    while True:  # a local that a statement left in __init__ reads stays, and so do those it reads
        read = set().union(
            *(names_in(s) for s in kept if (a := single_assign(s)) is None or a[0] not in dropped)
        )
        if not read & dropped:
            break
        dropped -= read
    properties: list[cst.FunctionDef] = []
    for stmt in setup_body:
        for name in moved.get(id(stmt), ()):
            replayed = []
            for local in plan.setup_properties[name]:
                lines = _comments(locals_by_name[local]) if local in dropped else []
                replayed.append(locals_by_name[local].with_changes(leading_lines=lines))
                locals_by_name[local] = locals_by_name[local].with_changes(leading_lines=())  # comments once
            properties.append(
                cst.FunctionDef(
                    name=cst.Name(name),
                    params=cst.Parameters([cst.Param(cst.Name("self"))]),
                    body=cst.IndentedBlock([*replayed, *_returns(stmt, name)]),
                    decorators=[cst.Decorator(cst.Name("property"))],
                    leading_lines=[cst.EmptyLine(indent=False), *_comments(stmt)],
                )
            )
            stmt = stmt.with_changes(leading_lines=())  # its comments go with the first property
    return [s for s in kept if (a := single_assign(s)) is None or a[0] not in dropped], properties


def _returns(stmt: cst.BaseStatement, name: str) -> list[cst.BaseStatement]:
    """The body that gives ``name``'s value from the statement binding it: ``return value``, or the
    config test with a ``return`` where a branch binds it (``pass`` where one does not) and, unless every
    branch does, ``raise AttributeError`` after it, as reading the unbound attribute in Linen does."""
    if type(stmt) is not cst.If:
        return [cst.SimpleStatementLine([cst.Return(v) for n, v in _self_assigns(stmt) or () if n == name])]
    exhaustive = True

    def branch(block: cst.BaseSuite) -> cst.IndentedBlock:
        nonlocal exhaustive
        values = [v for s in block.body for n, v in _self_assigns(s) or () if n == name]  # type: ignore[attr-defined]
        exhaustive = exhaustive and bool(values)
        small = cst.Return(values[0]) if values else cst.Pass()
        return cst.IndentedBlock([cst.SimpleStatementLine([small])])

    def rebuilt(node: cst.If) -> cst.If:
        orelse = node.orelse
        if type(orelse) is cst.If:
            orelse = rebuilt(orelse)
        elif type(orelse) is cst.Else:
            orelse = orelse.with_changes(body=branch(orelse.body))
        return node.with_changes(body=branch(node.body), orelse=orelse, leading_lines=())

    test = rebuilt(stmt)
    last = test
    while type(last.orelse) is cst.If:
        last = last.orelse
    if exhaustive and type(last.orelse) is cst.Else:
        return [test]
    return [
        test,
        parse_statement(f'raise AttributeError("{name}: setup() binds it only under the test above")\n'),
    ]


def _comments(stmt: cst.BaseStatement) -> list[cst.EmptyLine]:
    """The comment lines above ``stmt`` (its blank lines dropped)."""
    return [line for line in getattr(stmt, "leading_lines", ()) if line.comment is not None]
