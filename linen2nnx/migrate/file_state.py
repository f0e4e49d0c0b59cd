"""What the module pass knows about one file, as explicit data shared by its parts.

The resolver, the class planner, the sizer, the emitter and the transformer (see
:mod:`~linen2nnx.migrate.module_rewrite`) all read and write one :class:`FileState`; every field says
which part writes it and which parts read it. Nodes used as keys are nodes of the *original* tree
(libcst nodes hash by identity), so a planning result stays valid while the transformer rebuilds the
tree bottom-up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any

import libcst as cst

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.dataflow import Feat
from linen2nnx.migrate.elementwise import ElementwiseTable
from linen2nnx.migrate.factory_fields import FieldBindings
from linen2nnx.migrate.findings import Finding
from linen2nnx.migrate.function_factories import FunctionFactory
from linen2nnx.migrate.function_outs import KEY_PREFIX as FUNCTION_OUT_KEY
from linen2nnx.migrate.layer_subclass_uses import LayerSubclassFact
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.record_facts import external_records
from linen2nnx.migrate.sites import ClassPlan, ClassSummary
from linen2nnx.migrate.star_imports import star_names
from linen2nnx.migrate.table_changes import KEY as RUN_CHANGES_KEY
from linen2nnx.migrate.table_changes import RunChanges
from linen2nnx.migrate.trace import Trace
from linen2nnx.migrate.tuple_flow import RecordClass
from linen2nnx.namemap import NameMap

IMPORTED_KEY = "run:imported_modules"  # a run's fact: the modules some other file of it imports


@dataclasses.dataclass(eq=False)
class FileState:
    """The per-file state of the module pass (one instance per migrated file)."""

    # ---- inputs: the run's options for this file --------------------------------------------
    path: str  # the file, as findings report it
    module_name: str  # its dotted module name (for relative imports and name-map keys)
    imported_modules: frozenset[str] | None = None  # the run's modules another file imports; None: unknown
    trace: Trace | None = None  # recorded input shapes, the sizer's second source of evidence
    rule_enabled: Callable[[str], bool] = lambda rule_id: True  # --select / --ignore
    unsafe_fixes: bool = False  # apply fixes that rest on a stated assumption
    external: dict[str, ClassSummary] = dataclasses.field(default_factory=dict)  # other files' Linen classes
    external_factories: dict[str, FunctionFactory] = dataclasses.field(
        default_factory=dict
    )  # other files' layer factory functions
    external_layer_subclasses: dict[str, LayerSubclassFact] = dataclasses.field(
        default_factory=dict
    )  # other files' converted layer subclasses, by key (layer_subclass_uses.py)
    external_elementwise: frozenset[str] = frozenset()  # other files' tables of activations (elementwise.py)
    external_function_outs: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # other files' functions whose result keeps an argument's last axis (function_outs.py)
    run_changes: RunChanges | None = None  # the names any file of the run may change (table_changes.py)
    external_records: dict[str, RecordClass] = dataclasses.field(
        default_factory=dict
    )  # other files' plain data classes, by dotted name (record_facts.py)
    stars: Callable[[str], Collection[str]] | None = None  # what a star import binds (star_imports.py)

    # ---- outputs (read by engine.migrate_source) ------------------------------------------------
    findings: list[Finding] = dataclasses.field(default_factory=list)
    summaries: dict[str, ClassSummary] = dataclasses.field(
        default_factory=dict
    )  # this file's classes, by key
    name_map: NameMap = dataclasses.field(default_factory=NameMap)  # Linen -> NNX names (emitter, bridge)
    uses_nnx: bool = False  # the output needs `from flax import nnx`
    needs_jax_import: bool = False  # an emitted jax.ShapeDtypeStruct / jax.numpy stand-in
    needs_math_import: bool = False  # an emitted math.prod of an input shape
    plain_imports: set[str] = dataclasses.field(
        default_factory=set
    )  # `import <module>` lines the output needs
    pending_imports: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # a default read through another file's module -> that module: imported where a size shows it
    variable_classes: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # custom collection -> its nnx.Variable subclass (variable planning; defined by leave_Module)
    sown_collections: set[str] = dataclasses.field(
        default_factory=set
    )  # custom ones sown: nnx.Intermediate's

    # ---- the tree and its lazily built indices (resolver) -------------------------------------
    tree: cst.Module = dataclasses.field(default_factory=lambda: cst.Module([]))  # the original tree
    source: str | None = None  # the text it was parsed from, when known (finding positions)
    resolver: NameResolver | None = None  # qualified names, built on first use
    parents: dict[cst.CSTNode, cst.CSTNode] | None = None  # parent of each original node, on first use
    bindings: FieldBindings | None = None  # what callers bind to module-factory fields, on first use

    # ---- findings bookkeeping (report) --------------------------------------------------------
    reported: set[tuple[cst.CSTNode, str, str]] = dataclasses.field(default_factory=set)  # de-duplication
    unplaced: list[tuple[int, cst.CSTNode]] = dataclasses.field(default_factory=list)  # (finding index, node)
    markers: dict[cst.CSTNode, list[str]] = dataclasses.field(default_factory=dict)  # statement -> TODO lines
    init_markers: dict[cst.Call, list[str]] = dataclasses.field(default_factory=dict)  # hoisted ctor -> TODOs
    placed_markers: dict[cst.CSTNode, list[str]] = dataclasses.field(
        default_factory=dict
    )  # for bridged classes
    kept_linen: set[cst.ClassDef] = dataclasses.field(default_factory=set)  # originals kept as Linen
    planning: bool = False  # a class is being planned: blocking findings go to pending_blocking
    pending_blocking: list[str] = dataclasses.field(default_factory=list)  # ... of the class being planned
    class_stack: list[ClassPlan | None] = dataclasses.field(
        default_factory=list
    )  # enclosing classes (None: not Linen)

    # ---- module-level facts (resolved in visit_Module) ----------------------------------------
    module_classes: set[str] = dataclasses.field(default_factory=set)  # names of the file's classes
    module_functions: dict[str, cst.FunctionDef] = dataclasses.field(default_factory=dict)
    marked_classes: dict[cst.ClassDef, bool] = dataclasses.field(default_factory=dict)  # see in_marked_class
    module_names: frozenset[str] | None = None  # every top-level name (annotation_names.py); None: unknown
    record_classes: dict[str, RecordClass] = dataclasses.field(
        default_factory=dict
    )  # its plain data classes, whose fields the dataflow follows (tuple_flow.py); context writes, flows read
    function_factories: dict[str, FunctionFactory] = dataclasses.field(
        default_factory=dict
    )  # this file's layer factory functions, by name (function_factories.py)
    factory_returns: dict[cst.Call, FunctionFactory] = dataclasses.field(
        default_factory=dict
    )  # ... the constructors their returns build
    relocated_calls: set[cst.Call] = dataclasses.field(
        default_factory=set
    )  # transform calls a plan applies elsewhere (their statement is dropped): not rewritten in place
    alias_classes: dict[cst.CSTNode, cst.BaseExpression] = dataclasses.field(
        default_factory=dict
    )  # `block_class` of `block_class(...)` in setup() -> the class the local holds (setup_lists.py)
    hoisted_aliases: set[cst.CSTNode] = dataclasses.field(
        default_factory=set
    )  # ... of those, a @nn.compact local whose statement goes: __init__ builds the class (compact_aliases.py)
    alias_choices: dict[cst.CSTNode, cst.BaseExpression] = dataclasses.field(
        default_factory=dict
    )  # ... of those, a local chosen among classes on the config -> the choice `__init__` makes (class_choices.py)
    factory_layers: dict[cst.CSTNode, LayerRule] = dataclasses.field(
        default_factory=dict
    )  # the constructor each call of one stands for (its callee: a node built from text) -> its layer
    unbox_helpers: set[str] = dataclasses.field(
        default_factory=set
    )  # functions that only strip metadata boxes
    transform_aliases: dict[str, tuple[cst.Name, set[str], cst.BaseExpression]] = dataclasses.field(
        default_factory=dict
    )  # `remat = nn_partitioning.remat`: alias -> (its target, the transform's qualified names, the value)
    lift_aliases: dict[str, cst.Call] = dataclasses.field(
        default_factory=dict
    )  # BlockLayer = nn.remat(Block)
    alias_stmts: dict[str, cst.SimpleStatementLine] = dataclasses.field(
        default_factory=dict
    )  # ... their lines
    alias_use: dict[str, bool] = dataclasses.field(default_factory=dict)  # alias -> every use converted
    module_lines: set[str] = dataclasses.field(default_factory=set)  # `X.linen_class = XLinen` lines
    function_out: dict[str, tuple[list[str], Feat] | None] = dataclasses.field(
        default_factory=dict
    )  # helper -> size, or None for none (FileContext.function_out, on first need)
    elementwise_tables: frozenset[str] | None = None  # this file's tables of activations (elementwise.py)
    changed_here: frozenset[str] | None = None  # names the file may change, by last part (elementwise.py)

    # ---- plans (planner; read by sizer, emitter, transformer) ---------------------------------
    plans: dict[cst.ClassDef, ClassPlan] = dataclasses.field(default_factory=dict)
    linen_classes: dict[str, ClassPlan] = dataclasses.field(default_factory=dict)  # planned so far, by name
    # (id of a class's plan, input rank) -> (the plan, what its __call__ returns for an input of that rank, and the probes
    # running now, outermost first (sizer; see callee_ranks.py)
    rank_probes: dict[tuple[int, int], Any] = dataclasses.field(default_factory=dict)
    rank_probes_running: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    methods: dict[str, list[cst.FunctionDef]] = dataclasses.field(
        default_factory=dict
    )  # class -> its methods
    flow_method: str | None = None  # the method the sizer's dataflow runs over now

    # ---- planning results keyed by original node (planner -> transformer) ---------------------
    handled: set[cst.CSTNode] = dataclasses.field(default_factory=set)  # Linen names a rewrite consumes
    # method decorators `@nn.jit` / `@functools.partial(nn.jit, ...)` re-pointed to nnx.jit (attribute
    # rewriter -> class rewriter, which fixes their settings: see jit_methods.py)
    nnx_jit_decorators: set[cst.Decorator] = dataclasses.field(default_factory=set)
    layer_subclasses: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # class name -> layer_subclasses.LayerSubclass: a built-in layer with a `param` override
    broadcast_reported: set[cst.CSTNode] = dataclasses.field(
        default_factory=set
    )  # statements with nn.broadcast
    variable_locals: dict[cst.Call, dict[str, cst.BaseExpression]] = dataclasses.field(
        default_factory=dict
    )  # self.param / self.variable -> the known locals it reads (variable planning -> emitter)
    indexed_loops: dict[cst.For, Any] = dataclasses.field(default_factory=dict)  # `for v in seq` -> enumerate
    factory_ctors: set[cst.Call] = dataclasses.field(
        default_factory=set
    )  # `return nn.Dense(...)` of factories
    partial_calls: dict[cst.Call, Any] = dataclasses.field(default_factory=dict)  # `partial(nn.Dense, ...)`
    dropped_statements: set[cst.CSTNode] = dataclasses.field(default_factory=set)  # ... their assignments
    binding_values: dict[cst.CSTNode, tuple[LayerRule, Any]] = dataclasses.field(
        default_factory=dict
    )  # `nn.Conv` bound to a factory field, with the plan of the field's class
    stmt_prefix: dict[cst.CSTNode, list[cst.BaseStatement]] = dataclasses.field(
        default_factory=dict
    )  # added lines
    stmt_replaced: dict[cst.CSTNode, cst.BaseStatement] = dataclasses.field(
        default_factory=dict
    )  # statements rewritten whole (a put_variable write)
    else_kept: set[cst.If] = dataclasses.field(
        default_factory=set
    )  # `if` statements whose else branch stands for both (setup_lists.remat_branches)

    # ---- rewrite results keyed by original node (transformer -> emitter) ----------------------
    moved: dict[cst.Call, list[cst.Arg]] = dataclasses.field(
        default_factory=dict
    )  # ctor args moved to the call
    built: dict[cst.Call, cst.BaseExpression] = dataclasses.field(
        default_factory=dict
    )  # hoisted ctor, as built
    pure_updated: dict[cst.CSTNode, cst.BaseStatement] = dataclasses.field(
        default_factory=dict
    )  # replayed lines
    pending_api: dict[cst.CSTNode, cst.Attribute] = dataclasses.field(default_factory=dict)  # self.<api>(...)
    factory_updated: dict[cst.Call, cst.Call] = dataclasses.field(
        default_factory=dict
    )  # factory ctor, rewritten
    factory_calls: dict[cst.Call, cst.Call] = dataclasses.field(
        default_factory=dict
    )  # factory call, rewritten
    step_methods: dict[str, cst.FunctionDef] = dataclasses.field(
        default_factory=dict
    )  # scanned method's step
    converted: dict[str, cst.ClassDef] = dataclasses.field(
        default_factory=dict
    )  # NNX classes: their originals
    copied: set[str] = dataclasses.field(default_factory=set)  # ... of which a Linen copy was kept
    out_features: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # class -> `self.out_features = ...`

    @classmethod
    def of(
        cls,
        *,
        path: str,
        module_name: str,
        trace: Trace | None,
        rule_enabled: Callable[[str], bool],
        unsafe_fixes: bool,
        external: Mapping[str, ClassSummary] | None,
        factories: Mapping[str, Any] | None = None,
    ) -> FileState:
        return cls(
            path=path,
            module_name=module_name,
            trace=trace,
            rule_enabled=rule_enabled,
            unsafe_fixes=unsafe_fixes,
            external=dict(external or {}),
            external_factories={k: v for k, v in (factories or {}).items() if isinstance(v, FunctionFactory)},
            external_layer_subclasses={
                k: v for k, v in (factories or {}).items() if isinstance(v, LayerSubclassFact)
            },
            external_elementwise=frozenset(
                v.key for v in (factories or {}).values() if isinstance(v, ElementwiseTable)
            ),
            external_function_outs={
                k: v for k, v in (factories or {}).items() if k.startswith(FUNCTION_OUT_KEY)
            },
            run_changes=(factories or {}).get(RUN_CHANGES_KEY),
            imported_modules=(factories or {}).get(IMPORTED_KEY),
            external_records=external_records(factories or {}),
            stars=star_names(factories, module_name),
        )
