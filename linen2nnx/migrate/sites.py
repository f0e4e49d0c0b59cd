"""The data of a planned rewrite: fields, sites (what moves into ``__init__``) and class plans,
plus the Linen facts the planner keys on and small syntax helpers it shares."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import libcst as cst

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.cst_meta import FastVisitor, syntax_children
from linen2nnx.migrate.cst_utils import (
    code,
    parse_expression,
    subscriptable,
)
from linen2nnx.migrate.dataflow import Feat
from linen2nnx.namemap import is_field_name

LINEN_BASES = {
    "flax.linen.Module": "nnx.Module",
    "flax.linen.module.Module": "nnx.Module",
    "flax.linen.RNNCellBase": "nnx.RNNCellBase",  # a custom cell: nnx.RNN takes it as its own cells
    "flax.linen.recurrent.RNNCellBase": "nnx.RNNCellBase",
}
"""Linen base classes a module class may derive from -> the NNX base that replaces it."""
LINEN_MODULE = frozenset(LINEN_BASES)
LINEN_COMPACT = frozenset({"flax.linen.compact", "flax.linen.module.compact"})


def compact_only(fn: cst.FunctionDef, qualnames: Callable[[cst.BaseExpression], set[str]]) -> bool:
    """Whether ``fn`` carries no decorator but ``nn.compact``: a walk of its body sees the axes its
    callers pass (a lift such as ``@partial(nn.vmap, in_axes=1, out_axes=2)`` moves them)."""
    return all(qualnames(d.decorator) & LINEN_COMPACT for d in fn.decorators)


MARKER = "# TODO(linen2nnx):"


_Stmt = TypeVar("_Stmt", cst.SimpleStatementLine, cst.BaseCompoundStatement)


def one_line(comment: str) -> str:
    """A marker's text on one line: a message quoting a multi-line expression (``nn.scan(\n ...)``)
    would make an invalid comment node. Line breaks and the indentation around them become one space."""
    return re.sub(r"[ \t]*[\r\n]+[ \t]*", " ", comment) if "\n" in comment or "\r" in comment else comment


def marker_line(comment: str) -> cst.EmptyLine:
    """The comment line of one TODO marker (see :func:`one_line`)."""
    return cst.EmptyLine(comment=cst.Comment(one_line(comment)))


def markers_of(node: cst.CSTNode, prefix: str = MARKER) -> tuple[str, ...]:
    """The TODO markers on ``node``'s leading lines that start with ``prefix``, in order."""
    return tuple(
        line.comment.value
        for line in getattr(node, "leading_lines", ())
        if line.comment is not None and line.comment.value.startswith(prefix)
    )


def with_new_markers(stmt: _Stmt, notes: list[str]) -> _Stmt:
    """``stmt`` with the TODO markers in ``notes`` it does not carry yet: one marker per rule and
    statement, so a second run (whose message may name the kept ``<Name>Linen`` class, or a size it
    now knows) never adds another wording of a marker that is already there."""
    notes = [one_line(n) for n in notes]
    existing = {line.comment.value for line in stmt.leading_lines if line.comment is not None}
    marked = {" ".join(c.split()[:3]) for c in existing if c.startswith(MARKER)}
    extra = [
        marker_line(n)
        for n in dict.fromkeys(notes)
        if n not in existing and " ".join(n.split()[:3]) not in marked
    ]
    return stmt.with_changes(leading_lines=[*stmt.leading_lines, *extra]) if extra else stmt


class StatementMarker(cst.CSTTransformer):
    """Adds TODO markers to the statements they concern (``original statement -> marker texts``), none
    twice (see :func:`with_new_markers`): the one way a pass marks an already built tree."""

    def __init__(self, markers: Mapping[cst.CSTNode, list[str]]) -> None:
        super().__init__()
        self.markers = markers

    def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
        notes = self.markers.get(original_node)
        if notes and isinstance(updated_node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return with_new_markers(updated_node, notes)
        return updated_node


# Linen-only Module API: a call on ``self`` to any of these has no NNX meaning yet.
LINEN_SELF_API = frozenset(
    {
        "param",
        "variable",
        "sow",
        "make_rng",
        "is_initializing",
        "is_mutable_collection",
        "has_variable",
        "put_variable",
        "get_variable",
        "has_rng",
        "scope",
        "variables",
        "bind",
        "unbind",
        "apply",
        "init",
        "init_with_output",
        "perturb",
        "lazy_init",
        "path",
    }
)
MERGE_PARAM = frozenset({"merge_param", "module.merge_param"})
# Linen collection -> NNX Variable type (the registry of nnx.variablelib, docs/nnx_facts.md#variables-and-module-structure).
COLLECTION_TYPES = {
    "params": "Param",
    "batch_stats": "BatchStat",
    "cache": "Cache",
    "intermediates": "Intermediate",
}


@dataclasses.dataclass
class Field:
    name: str
    annotation: str
    default: str | None
    init: bool = True  # dataclasses.field(init=False): set inside the class, not a constructor argument
    markers: tuple[str, ...] = ()  # the TODO markers of its line (a subclass's __init__ repeats them)
    kw_only: bool = False  # after a ``_: dataclasses.KW_ONLY`` marker: a keyword-only constructor argument
    specifier: bool = False  # its default is another library's field specifier (see rules.MOD_012)
    added: bool = False  # an argument the NNX class gains (``<attr>_dtype``): no field of the Linen class
    class_names: frozenset[str] = frozenset()  # names of the class body its default reads (``WIDTH``)
    holds_modules: bool = False  # a container of modules (class_fields.holds_modules): nnx.data in NNX
    configured: bool = False  # its class takes defaults from a configuration (gin): no constant default
    as_tuple: bool = False  # a sequence field: a list handed to it is a tuple, as in Linen (sequence_field)


@dataclasses.dataclass
class LoopInfo:
    var: str  # loop variable
    range_src: str  # the iterable, e.g. ``range(self.num_layers)``
    index: str = ""  # for ``for v in <config list>``: the index the loop is rewritten to count with
    node: Any = None  # the For statement (rewritten to ``enumerate`` when ``index`` is set)

    @property
    def target_src(self) -> str:
        return f"{self.index}, {self.var}" if self.index else self.var

    @property
    def iter_src(self) -> str:
        return f"enumerate({self.range_src})" if self.index else self.range_src

    @property
    def position(self) -> str:
        """The element's index in the loop."""
        return self.index or self.var

    def previous(self) -> str:
        """The loop variable's value one iteration earlier."""
        return f"{subscriptable(self.range_src)}[{self.index} - 1]" if self.index else f"({self.var} - 1)"


@dataclasses.dataclass
class LoopNest:
    """Submodules built inside loops the list comprehension of a single ``for`` cannot express: nested
    loops (``for i, n in enumerate(self.stages): for j in range(n):``), or loop bodies with locals the
    constructors read (``strides = (2, 2) if j == 0 else (1, 1)``). Linen names them on from its
    counters (``Block_0`` .. ``Block_{n-1}`` across the whole nest); each becomes an nnx.List that
    ``__init__`` appends to by replaying the same loops, and the call takes the list's next element."""

    outer: cst.For
    names: set[str]  # loop targets and the loop bodies' locals the constructors may read
    local_stmts: dict[str, cst.SimpleStatementLine]  # body local -> its assignment (replayed in __init__)
    sites: list[Site] = dataclasses.field(default_factory=list)
    # id(site) -> its line
    statements: dict[int, cst.SimpleStatementLine] = dataclasses.field(default_factory=dict)
    # id(site) -> when the dataflow applies it
    applied: dict[int, int] = dataclasses.field(default_factory=dict)
    # first (``norm(dense(x))`` builds the Dense first: the LayerNorm's size reads ``self.dense[-1]``)

    def iterator(self, site: Site) -> str:
        """The ``__call__`` local that walks the site's list (``block_iter = iter(self.block)``)."""
        return f"{site.attr}_iter"


@dataclasses.dataclass
class Site:
    """One submodule or variable construction that moves into (or stays in) ``__init__``."""

    kind: str  # layer | module | param | variable
    attr: str  # NNX attribute (``layers[0]`` for setup list items)
    linen_name: str  # Linen child / variable name (a container prefix for loop-built lists)
    ctor: cst.Call  # original construction call
    hoisted: bool  # True for @nn.compact (the call site becomes ``self.attr``)
    rule: LayerRule | None = None
    user: ClassPlan | None = None
    args: dict[str, cst.Arg] = dataclasses.field(default_factory=dict)  # Linen argument name -> original Arg
    in_expr: str | None = None
    in_kv_expr: str | None = None  # an attention layer's key / value size, where it is not in_expr's
    # new ctor arg of the user class -> expr
    user_in: dict[str, str] = dataclasses.field(default_factory=dict)
    moved_args: tuple[str, ...] = ()  # Linen args moved to call time
    dropped_args: tuple[str, ...] = ()  # Linen args the NNX layer already honours (LayerRule.dropped_when)
    container: str | None = None
    loop: LoopInfo | None = None
    collection: str = "params"
    var_type: str = "nnx.Param"  # the Variable type's expression (custom_vars.py: or the file's own)
    parent: Site | None = None  # the layer whose constructor argument this one is (RNN(cell), Sequential)
    nested: list[Site] = dataclasses.field(default_factory=list)
    nested_arg: str = ""  # the parent's Linen argument holding this one ("cell", or "layers" + index)
    element: int = -1  # index in the parent's list argument (Sequential)
    # arg -> locals used as `v.shape[-1]`
    shape_refs: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # arg -> source resolved by the dataflow
    arg_sources: dict[str, str] = dataclasses.field(default_factory=dict)
    shape_sizes: dict[str, dict[str, str]] = dataclasses.field(
        default_factory=dict
    )  # arg -> {local: its size} that arg_sources put for `local.shape[-1]` (see resolved_arg)
    view_kwargs: dict[str, str] = dataclasses.field(default_factory=dict)  # mode kwargs applied with nnx.view
    conditions: list[str] = dataclasses.field(default_factory=list)  # config tests of enclosing `if`s
    lifted: Any = None  # a migrate.lifted.LiftChain: built / applied under nn.scan, nn.remat, nn.vmap
    lift_condition: str | None = None  # ... only when this holds (`self.gradient_checkpointing`)
    exclusive_with: Site | None = None  # same attribute, built under the opposite config condition
    factory: Any = None  # migrate.factories.Factory when built by a helper method (`self.dense(...)`)
    state_when: str | None = None  # when its call creates variables, in the caller's terms (None: never)
    tail_of: Site | None = None  # the loop-built list this auto-named layer after the loop extends
    tail: list[Site] = dataclasses.field(default_factory=list)  # of a loop-built list: those extensions
    extends: Site | None = None  # the loop-built list a later loop of auto-named layers goes on filling
    extensions: list[Site] = dataclasses.field(
        default_factory=list
    )  # of that list: tails and loops, in order
    offset: str = ""  # of an extension: how many elements come before it (an expression of the config)
    prefix_index: str = ""  # built before its class's first loop, in that loop's list: its index there
    counted_as: str = ""  # a loop's list of auto-named modules numbered on after others: their class
    nest: LoopNest | None = None  # built in nested loops (or a loop body with locals): see LoopNest
    elements: str | None = None  # of a setup() comprehension: its elements' Linen names, `blocks.{i}`
    elements_index: str = ""  # ... and the comprehension's index variable
    single_name: str = ""  # of a loop's list: element 0's Linen name where the loop builds it alone (`wi`)
    scope_names: tuple[str, ...] = ()  # built into the parent's scope (nn.share_scope): its names there
    choice_plans: tuple[Any, ...] = ()  # the classes a config-chosen local builds (class_choices.py)

    @property
    def flow_key(self) -> str:
        """The site's key in the dataflow (two exclusive sites share an attribute, not a key; the
        layers appended to a loop-built list share its attribute)."""
        if self.tail_of is not None:
            return f"{self.attr}#tail{self.tail_position()}"
        if self.extends is not None:
            return f"{self.attr}#from {self.offset}"  # distinct per loop, and kept by dataclasses.replace
        at = f"#at {self.prefix_index}" if self.prefix_index else ""  # one of a list's first elements
        return self.attr + ("#else" if self.exclusive_with is not None else "") + at

    @property
    def list_index(self) -> str:
        """Where an extension of a loop-built list sits in it: counted from the end, since the loop's
        length is only known at run time."""
        assert self.tail_of is not None
        at = next(i for i, s in enumerate(self.tail_of.extensions) if s.ctor is self.ctor)
        if any(s.extends is not None for s in self.tail_of.extensions[at + 1 :]):  # a loop goes on after it
            return self.offset  # count from the start
        return str(self.tail_position() - len(self.tail_of.tail))

    def tail_position(self) -> int:
        """Where it is among the layers after the loop (found by its call: the sizer sizes copies of a
        site, one per class a factory field may build)."""
        assert self.tail_of is not None
        return next(i for i, s in enumerate(self.tail_of.tail) if s.ctor is self.ctor)


@dataclasses.dataclass(frozen=True)
class BranchLocal:
    """``if test: emb = nn.Embed(...)`` / ``else: emb = self.shared``: a local that is the class's own
    layer in one branch and a module handed in by the caller in the other. Its output size is the
    built layer's in one branch and the handed-in layer's ``out_attr`` in the other, chosen by the
    same test in ``__init__`` (an AttributeError there, never a wrong size, if that layer lacks it)."""

    site: Site
    test: str  # the `if` test, true when the class's own layer is used
    other: str  # the handed-in module (``self.shared``)


@dataclasses.dataclass
class ClassPlan:
    name: str
    fields: list[Field]
    sites: dict[cst.Call, Site] = dataclasses.field(default_factory=dict)
    new_args: dict[str, str] = dataclasses.field(default_factory=dict)  # kw-only arg -> how obtained
    setup: cst.FunctionDef | None = None
    compact: cst.FunctionDef | None = None  # the @nn.compact method (pure locals replayed in __init__)
    hoisted_order: list[Site] = dataclasses.field(default_factory=list)
    containers: dict[str, list[Site]] = dataclasses.field(default_factory=dict)
    pure_locals: dict[str, cst.BaseStatement] = dataclasses.field(default_factory=dict)
    static_statements: list[cst.BaseStatement] = dataclasses.field(default_factory=list)  # static_locals.py
    key_replay: Any = None  # key_replay.KeyReplay: the split chain of keys __init__ replays for its builds
    static_flow: Any = None  # static_locals.StaticLocals: which locals are static where
    # local -> vars read as v.shape[-1]
    shape_locals: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # local -> {v: size}
    shape_local_sizes: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    needed_locals: list[str] = dataclasses.field(default_factory=list)
    setup_vars: dict[str, str] = dataclasses.field(default_factory=dict)  # setup attr -> param | variable
    setup_properties: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # setup_arrays.py
    out: Feat | None = None  # feature size of ``__call__``'s result
    first_input: str = "x"
    call_inputs: tuple[str, ...] = ()  # __call__'s parameters in order, for inputs given by keyword
    # compact local bound to a submodule
    local_sites: dict[str, Site] = dataclasses.field(default_factory=dict)
    # local bound per `if` branch
    branch_sites: dict[str, BranchLocal] = dataclasses.field(default_factory=dict)
    uses_rngs: bool = False  # make_rng is used: the module keeps ``self.rngs``
    # method -> (params, result)
    method_out: dict[str, tuple[list[str], Feat]] = dataclasses.field(default_factory=dict)

    key: str = ""  # name-map key (module.Class)
    linen_prefix: str = ""  # ``@partial(nn.remat, ...)`` on the class: Linen names it ``CheckpointBlock``
    activation_fields: set[str] = dataclasses.field(default_factory=set)  # fields defaulting to nn.relu & co.
    layer_fields: dict[str, Any] = dataclasses.field(default_factory=dict)  # `embed: nn.Embed`: its rule
    factories: dict[str, Any] = dataclasses.field(default_factory=dict)  # helper method -> factories.Factory
    lazy_vars: dict[cst.Call, Any] = dataclasses.field(
        default_factory=dict
    )  # self.variable (or a first self.put_variable) -> lazy_vars.LazyVar
    put_calls: list[Any] = dataclasses.field(default_factory=list)  # its self.put_variable calls
    other_weights: set[str] = dataclasses.field(default_factory=set)  # layers applied with other weights
    input_shape_locals: set[str] = dataclasses.field(default_factory=set)  # pure but for `x.shape` / `x.ndim`
    shape_input: str = ""  # the call input whose shape those read (stood in for in __init__)
    shape_rank_only: bool = False  # ... for its rank alone (input_sizes.reads_rank_only)
    holds_nothing: bool = False  # creates no variable and no submodule (stateless_classes.py)
    user_base: bool = False  # derives from a class of the run (it cannot stay Linen behind the bridge)
    traced_sizes: dict[str, Any] = dataclasses.field(default_factory=dict)  # required arg -> traced value
    size_paths: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # (trace_paths.py)
    input_sizes: list[Any] = dataclasses.field(default_factory=list)  # input_sizes.InputSize, to finish
    input_shape_params: list[Any] = dataclasses.field(default_factory=list)  # variables sized by its shape
    blocking: list[str] = dataclasses.field(default_factory=list)  # manual findings that stop the rewrite
    scanned_methods: dict[str, Any] = dataclasses.field(default_factory=dict)  # method -> lifted.MethodScan
    method_names: frozenset[str] = frozenset()  # the class's own methods: no child or variable takes one
    carry_inits: dict[cst.Call, Site] = dataclasses.field(default_factory=dict)  # Linen cell.initialize_carry
    state_when: str | None = None  # when it (or a submodule) creates variables at call time, in terms of
    # its __call__ parameters ("True": possibly always); None: never (see lazy_vars.py)
    partial_classes: set[Any] = dataclasses.field(default_factory=set)  # classes of converted partial locals
    shape_tests: dict[Any, Any] = dataclasses.field(default_factory=dict)  # `if` -> (ShapeTest, method)
    # `if` -> (values its test sees, params)
    if_envs: dict[Any, Any] = dataclasses.field(default_factory=dict)
    is_cell: bool = False  # an nn.RNNCellBase subclass: __call__(carry, x) returns a carry of the same shape
    nests: dict[Any, LoopNest] = dataclasses.field(default_factory=dict)  # outermost `for` -> its LoopNest
    stopped_lists: set[str] = dataclasses.field(default_factory=set)  # loop lists a later loop of the
    # same class could not extend: what comes after is counted past elements the list does not hold
    mode_partials: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # local -> {flag: src}
    optional_inputs: set[str] = dataclasses.field(default_factory=set)  # sizes of an input that may be None
    call_flags: tuple[str, ...] = ()  # fields __call__ merges with a call argument (merge_flags.py)
    builders: tuple[str, ...] = ()  # methods that build it in Linen, its own and inherited (inheritance.py)
    super_init: ClassPlan | None = None  # the base whose __init__ its __init__ calls
    super_in_setup: bool = False  # ... where setup() called super().setup() (else first)
    kept_linen: bool = False  # (a class of another file) kept as Linen behind the bridge
    bridged: bool = False  # (of this file, rewritten before its users) kept as Linen behind the bridge
    known_scope_names: tuple[str, ...] | None = None  # a stand-in's: see scope_names
    known_out_ranks: dict[int, Feat] = dataclasses.field(default_factory=dict)  # a stand-in's (callee_ranks)

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    def scope_names(self) -> tuple[str, ...] | None:
        """The names Linen gives what this class creates in its own scope (its variables and
        submodules, ``{field}`` for a variable a field names), when each is one fixed name: what a
        parent sharing this class's scope (``nn.share_scope``) finds at its own level. None when some
        name is not fixed (a list, a loop, a base's build) or nothing is planned."""
        if self.known_scope_names is not None or not self.sites:
            return self.known_scope_names
        if self.blocking or self.kept_linen or self.containers or self.lazy_vars:
            return None
        if self.super_init is not None or self.nests:
            return None
        names: list[str] = []
        for site in self.sites.values():
            if site.parent is not None:
                continue  # inside a layer: Linen names it under that layer
            if site.container is not None or site.loop is not None or "{i" in site.linen_name:
                return None
            names.extend(site.scope_names or (site.linen_name,))  # a child sharing this scope: its names
        return tuple(dict.fromkeys(names))

    def summary(self) -> ClassSummary:
        return ClassSummary(
            *(self.key, self.name, list(self.fields), dict(self.new_args), self.out, self.first_input),
            *(self.state_when, self.call_flags, self.builders, bool(self.blocking), self.call_inputs),
            self.scope_names(),
            shape_rank_only=self.shape_rank_only,
            holds_nothing=self.holds_nothing,
            optional_inputs=frozenset(self.optional_inputs),
            traced_sizes=tuple(self.traced_sizes.items()),
            size_paths=tuple(self.size_paths.items()),
        )


@dataclasses.dataclass
class ClassSummary:
    """What other files need to know about a migrated class (picklable: no syntax trees)."""

    key: str
    name: str
    fields: list[Field]
    new_args: dict[str, str]
    out: Feat | None
    first_input: str
    state_when: str | None = None
    call_flags: tuple[str, ...] = ()
    builders: tuple[str, ...] = ()
    kept_linen: bool = False
    call_inputs: tuple[str, ...] = ()
    scope_names: tuple[str, ...] | None = None
    out_ranks: tuple[tuple[int, Feat], ...] = ()  # __call__'s result per input rank (callee_ranks.py)
    shape_rank_only: bool = False
    holds_nothing: bool = False
    optional_inputs: frozenset[str] = frozenset()  # size arguments that default to None (ClassPlan's)
    traced_sizes: tuple[tuple[str, Any], ...] = ()  # what the trace saw for required sizes (spec_writer)
    size_paths: tuple[tuple[str, tuple[str, ...]], ...] = ()  # required arg -> its layer's path
    partitioned: bool = False  # its file gives weights sharding names: a training file builds it guarded
    sows: bool = False  # its file sows (or names a class of a file that does): applies run on a copy
    bridged_inside: bool = False  # builds a class kept as Linen (at any depth): training code lazy-inits it
    factory_fields: frozenset[str] = frozenset()  # fields it builds from (crossfile_bindings.py)
    entry: Any = None  # its name-map entry once its file is rewritten (what alike_builds.py reads)

    def as_plan(self) -> ClassPlan:
        """A plan stand-in for a class planned in another file (only its interface is used)."""
        return ClassPlan(
            name=self.name,
            fields=list(self.fields),
            new_args=dict(self.new_args),
            out=self.out,
            first_input=self.first_input,
            key=self.key,
            state_when=self.state_when,
            call_flags=self.call_flags,
            builders=self.builders,
            kept_linen=self.kept_linen,
            call_inputs=self.call_inputs,
            known_scope_names=self.scope_names,
            known_out_ranks=dict(self.out_ranks),
            shape_rank_only=self.shape_rank_only,
            holds_nothing=self.holds_nothing,
            optional_inputs=set(self.optional_inputs),
            traced_sizes=dict(self.traced_sizes),
            size_paths=dict(self.size_paths),
        )


def linen_name_text(linen_name: str) -> str:
    """How a finding spells a variable's Linen name: ``'scale'``, or ``self.weight_name``."""
    return f"self.{linen_name[1:-1]}" if is_field_name(linen_name) else repr(linen_name)


def nest_fors(outer: cst.For) -> list[cst.For]:
    """``outer`` and every ``for`` loop inside it (not inside nested functions), outermost first."""
    found: list[cst.For] = []

    class Fors(FastVisitor):
        def visit_For(self, node: cst.For) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

    Fors().walk(outer)
    return found


def jumps_in(loop: cst.For) -> bool:
    """Whether ``loop`` holds a ``break``, ``continue`` or ``return`` (outside nested functions): then Linen builds
    a module on only some iterations, and a list built by replaying the loop's ranges would have
    elements Linen never built, or number them differently (``continue`` at ``i == 1``: the module
    used at ``i == 2`` is Linen's ``Dense_1``)."""
    found: list[cst.CSTNode] = []

    class Jumps(FastVisitor):
        def visit_Break(self, node: cst.Break) -> None:
            found.append(node)

        def visit_Continue(self, node: cst.Continue) -> None:
            found.append(node)

        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)  # `if i == self.exit_at: return x`: the later elements are never built

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

    Jumps().walk(loop.body)
    return bool(found)


def loop_name_prefix(value: cst.BaseExpression, var: str) -> str | None:
    """``f"block_{i}"`` inside ``for i in ...`` -> ``"block"``."""
    if not isinstance(value, cst.FormattedString) or len(value.parts) != 2:
        return None
    text, expr = value.parts
    if not (isinstance(text, cst.FormattedStringText) and isinstance(expr, cst.FormattedStringExpression)):
        return None
    if not (
        text.value.endswith("_")
        and isinstance(expr.expression, cst.Name)
        and expr.expression.value == var
        and expr.conversion is None
        and expr.format_spec is None
    ):
        return None
    prefix = text.value[:-1]
    return prefix if prefix.isidentifier() else None


def is_shape_last(node: cst.CSTNode) -> str | None:
    """``v.shape[-1]`` -> ``"v"``."""
    if (
        isinstance(node, cst.Subscript)
        and len(node.slice) == 1
        and isinstance(node.slice[0].slice, cst.Index)
        and isinstance(node.value, cst.Attribute)
        and node.value.attr.value == "shape"
        and isinstance(node.value.value, cst.Name)
    ):
        index = node.slice[0].slice.value
        if (
            isinstance(index, cst.UnaryOperation)
            and isinstance(index.operator, cst.Minus)
            and isinstance(index.expression, cst.Integer)
            and index.expression.value == "1"
        ):
            return node.value.value.value
    return None


def shape_last_refs(value: cst.BaseExpression, uses: set[str]) -> list[str] | None:
    """The locals of ``uses`` when each appears only as ``v.shape[-1]`` in ``value``; else None."""
    found: list[str] = []
    other = False
    stack: list[cst.CSTNode] = [value]  # a stack of the nodes still to read, not a visitor class a call
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cst.Subscript:
            name = is_shape_last(node)  # type: ignore[arg-type]
            if name is not None:
                found.append(name)
                continue
        elif kind is cst.Name:
            other = other or node.value in uses  # type: ignore[attr-defined]
        elif kind is cst.Attribute:  # `v.shape`: its value only, the attribute's name is no local
            stack.append(node.value)  # type: ignore[attr-defined]
            continue
        stack.extend(syntax_children(node))
    return None if other or not found else sorted(set(found))


def replace_shape_last(value: cst.BaseExpression, sizes: dict[str, str]) -> str:
    class T(cst.CSTTransformer):
        def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
            name = is_shape_last(original)
            if name is None or name not in sizes:
                return updated
            return parse_expression(
                f"({sizes[name]})"
                if not sizes[name].isidentifier() and not sizes[name].replace(".", "").isidentifier()
                else sizes[name]
            )

    return code(value.visit(T()))


def resolved_arg(site: Site, name: str, updated: cst.BaseExpression) -> cst.BaseExpression:
    """The value of argument ``name`` the dataflow resolved: its ``v.shape[-1]`` reads replaced in the
    rewritten value ``updated`` (which keeps the rewrite's own changes, ``nnx.initializers``), else the
    resolved source."""
    sizes = site.shape_sizes.get(name)
    if sizes is None:
        return parse_expression(site.arg_sources[name])
    return parse_expression(replace_shape_last(updated, sizes)) if sizes else updated


def built_arg_text(site: Site, name: str, arg: cst.Arg) -> str:
    """Argument ``name`` of a submodule's construction as ``__init__`` builds it: ``features=x.shape[-1]``
    as the size the dataflow resolved (``in_features``), not the call-time ``x`` ``__init__`` never binds."""
    sizes = site.shape_sizes.get(name)
    if sizes:
        return replace_shape_last(arg.value, sizes)
    return site.arg_sources.get(name, code(arg.value))


def root_site(site: Site) -> Site:
    """The outermost site a nested site is built inside (itself when not nested)."""
    while site.parent is not None:
        site = site.parent
    return site
