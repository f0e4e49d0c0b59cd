"""Rewriting methods and classes (``leave_FunctionDef`` / ``leave_ClassDef``): ``@nn.compact`` and
``nn.scan`` decorators, the class body with its new ``__init__``, and the ``nnx.bridge`` fallback for a
class whose rewrite is blocked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.bridge import (
    BRIDGE_ATTR,
    bridge_wrapper,
    can_bridge,
    forwarded_methods,
    linen_class_name,
    linen_name,
    mutable_collections,
    packed_methods,
)
from linen2nnx.migrate.cells import CARRY_METHOD, nnx_initialize_carry
from linen2nnx.migrate.class_fields import configuring, read_at_class_creation
from linen2nnx.migrate.context import NNX_ONLY_RULES, FileContext
from linen2nnx.migrate.cst_utils import (
    code,
    is_docstring,
    names_in,
    parse_expression,
    parse_statement,
    without_dead_locals,
)
from linen2nnx.migrate.emit import Emitter
from linen2nnx.migrate.jit_methods import nnx_jit_decorator
from linen2nnx.migrate.key_replay import without_chains
from linen2nnx.migrate.kw_only import is_kw_only_marker
from linen2nnx.migrate.layer_subclasses import nnx_layer_subclass
from linen2nnx.migrate.lifted import (
    SCAN_DECORATORS,
    method_scan_call,
)
from linen2nnx.migrate.name_map_entries import record_name_map
from linen2nnx.migrate.post_init import can_move, hook_statements, is_post_init
from linen2nnx.migrate.record_facts import folders_of
from linen2nnx.migrate.rules import (
    API_002,
    API_006,
    LAYER_004,
    MOD_001,
    MOD_002,
    MOD_003,
    MOD_007,
    MOD_011,
    MOD_012,
    MOD_017,
    XFORM_001,
)
from linen2nnx.migrate.setup_arrays import split_properties
from linen2nnx.migrate.sites import (
    LINEN_BASES,
    LINEN_COMPACT,
    LINEN_MODULE,
    MARKER,
    ClassPlan,
    StatementMarker,
    marker_line,
    markers_of,
    one_line,
)
from linen2nnx.migrate.static_locals import (
    without_dead_statements,
)
from linen2nnx.migrate.tuple_flow import climbed_qualname
from linen2nnx.migrate.verify_syntax import bound_by
from linen2nnx.namemap import ClassEntry

DATACLASS_BLIND = frozenset({"typing.final", "typing_extensions.final"})
"""Class decorators that read nothing of the class: kept on the NNX class with no finding (so are those
that fill ``__init__``'s parameters from a configuration: class_fields.CONFIGURING_DECORATORS)."""
DATACLASS_BLIND_FACTORIES = frozenset(
    {
        "transformers.utils.add_start_docstrings",
        "transformers.utils.doc.add_start_docstrings",
        "transformers.file_utils.add_start_docstrings",
    }
)
"""Decorator factories whose decorator only prepends text to the class's ``__doc__`` and returns the
class (Hugging Face's model classes carry one each): the NNX class keeps it with no finding."""


class ClassRewriter:
    """Assembles the NNX class (or keeps the Linen one behind the bridge) from its plan."""

    def __init__(self, ctx: FileContext, emitter: Emitter) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.emitter = emitter
        # called with a class about to be kept as Linen: the findings only a Linen class gets (the
        # converted layer subclasses of other files it builds, which it would build the Linen way)
        self.on_kept_linen: Callable[[cst.ClassDef], None] = lambda original: None

    def leave_method(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        plan = self.ctx.current_plan()
        if plan is None:
            return updated
        if plan.key_replay is not None and original is plan.key_replay.fn:  # the key chain __init__ replays
            updated = without_chains(updated, plan.key_replay.names())
        if original is plan.compact:  # lines __init__ replays that the method no longer reads go
            candidates = {
                *plan.needed_locals,
                *(name for nest in plan.nests.values() for name in nest.local_stmts),
            }
            updated = without_dead_locals(updated, candidates)
            needed = {id(plan.pure_locals[name]) for name in plan.needed_locals}
            statements = [
                self.state.pure_updated.get(s, s) for s in plan.static_statements if id(s) in needed
            ]
            while statements:  # dropping one may leave the locals it read dead, and so on
                pruned = without_dead_statements(updated, statements)
                if pruned is updated:
                    break
                updated = without_dead_locals(pruned, candidates)
        keep = [
            nnx_jit_decorator(u) if o in self.state.nnx_jit_decorators else u
            for o, u in zip(original.decorators, updated.decorators)
            if not (self.ctx.qualnames(o.decorator) & LINEN_COMPACT)
        ]
        if len(keep) != len(updated.decorators):
            self.ctx.report(
                MOD_003, original, f"@nn.compact {original.name.value}: submodules hoisted into __init__"
            )
        scan = plan.scanned_methods.get(original.name.value)
        if scan is None or self.ctx.enclosing_class_plan(original) is not plan:
            return updated.with_changes(decorators=keep)
        keep = [
            nnx_jit_decorator(u) if o in self.state.nnx_jit_decorators else u
            for o, u in zip(original.decorators, updated.decorators)
            if not (self.ctx.qualnames(o.decorator) & LINEN_COMPACT)
            and not self._is_scan_decorator(o.decorator)
        ]
        self.state.step_methods[original.name.value] = updated.with_changes(
            name=cst.Name(scan.step), decorators=keep, leading_lines=[cst.EmptyLine(indent=False)]
        )
        when = (
            plan.state_when
            if plan.state_when in (None, "True") or original.name.value == "__call__"
            else "True"
        )
        self.state.uses_nnx = True
        self.ctx.report(
            XFORM_001,
            original,
            f"nn.scan on {plan.name}.{original.name.value} -> nnx.scan of "
            f"{scan.step} with the module broadcast",
        )
        call = parse_statement(f"return {method_scan_call(scan, original, when)}\n")
        return updated.with_changes(decorators=keep, body=cst.IndentedBlock(body=[call]))

    def _is_scan_decorator(self, node: cst.BaseExpression) -> bool:
        return (
            isinstance(node, cst.Call)
            and bool(node.args)
            and node.args[0].keyword is None
            and bool(self.ctx.qualnames(node.args[0].value) & SCAN_DECORATORS)
        )

    def leave_class(self, original: cst.ClassDef, updated: cst.ClassDef) -> Any:
        """The NNX class of a planned Linen class (or the Linen one behind ``nnx.bridge`` when findings
        block its rewrite); any other class as it is."""
        plan = self.state.class_stack.pop()
        sub = self.state.layer_subclasses.get(original.name.value) if plan is None else None
        if sub is not None and not self.state.class_stack:  # `class StdConv(nn.Conv)` overriding `param`
            self.state.uses_nnx = True
            self.ctx.report(
                LAYER_004,
                original,
                f"{original.name.value}(nn.{sub.rule.linen}) with a param override -> an nnx.{sub.rule.nnx} "
                "subclass that computes with the transformed parameters",
            )
            return nnx_layer_subclass(original, sub)
        if plan is None:
            return updated
        self.state.uses_nnx = True
        if plan.name.endswith("Linen") and self._has_sibling_class(original, plan.name.removesuffix("Linen")):
            if f"{plan.name.removesuffix('Linen')}.linen_class = {plan.name}" in self.state.module_lines:
                return original  # the Linen copy an earlier run kept for a class kept as Linen
            # bridged by an earlier run: kept with the markers it has, so a second run changes nothing
            return self._keep_linen(
                plan, original, original.name.value, remark=not markers_of(original, f"{MARKER} {MOD_007.id}")
            )
        if plan.blocking and self._bridgeable(plan, original):
            self.on_kept_linen(original)
            return self._bridged(plan, original, updated)
        bases = self._nnx_bases(original, updated)
        field_markers = self._rewritten_field_defaults(plan, original, updated)
        self._report_field_specifiers(plan, original)
        self._report_class_decorators(original)
        body, setup_body, init_index = self._nnx_body(plan, original, updated)
        if init_index is None:
            init_index = 1 if body and is_docstring(body[0]) else 0
        init_index = max(init_index, _after_attributes_read(body, plan))
        if plan.setup is not None:
            self.ctx.report(MOD_002, plan.setup, f"{plan.name}.setup() moved into __init__")
        setup_body, properties = split_properties(plan, setup_body)
        init = self.emitter.build_init(plan, setup_body)
        init = init.with_changes(
            leading_lines=[*([cst.EmptyLine(indent=False)] if init_index > 0 else []), *field_markers]
        )
        body[init_index:init_index] = [init, *properties]
        following = body[after] if (after := init_index + 1 + len(properties)) < len(body) else None
        if (
            isinstance(following, (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine))
            and not following.leading_lines
        ):
            body[after] = following.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        self.ctx.report(MOD_001, original, f"{plan.name} -> nnx.Module")
        self.state.converted[plan.name] = original
        record_name_map(self.ctx, self.state, plan)
        # `class Big(Base, kw_only=True)`: a dataclass keyword, which nnx.Module's __init_subclass__ rejects
        # (the fields are keyword-only parameters instead, class_fields.class_fields)
        keywords = [k for k in updated.keywords if k.keyword is None or k.keyword.value != "kw_only"]
        if bases and not keywords and updated.keywords:
            bases = [*bases[:-1], bases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
        return updated.with_changes(bases=bases, keywords=keywords, body=updated.body.with_changes(body=body))

    def _report_field_specifiers(self, plan: ClassPlan, original: cst.ClassDef) -> None:
        """Fields (own or inherited) whose default is another library's field specifier: the NNX
        ``__init__`` would take the specifier object itself as the value (rules.MOD_012)."""
        specified = [f for f in plan.fields if f.specifier and f.init]
        if specified:
            shown = ", ".join(f"{f.name} = {one_line(f.default or '')}" for f in specified)
            self.ctx.report(
                MOD_012,
                original,
                f"{plan.name}.__init__ takes field defaults from field specifiers ({shown}): a dataclass "
                "reads a specifier as the field's default, a parameter default is the specifier object",
                "write the value the specifier gives as the default (or None, built in __init__)",
            )

    def _absolute_names(self, node: cst.BaseExpression) -> set[str]:
        """The absolute names ``node`` may stand for: by the file's module name, and for a relative
        import that climbs the folders the file sits in, from the outermost of them (a namespace
        package: ``from ...utils import x`` in ``transformers/models/t5/`` is ``transformers.utils.x``)."""
        folders = folders_of(self.state.path)
        names = self.ctx.qualnames(node)
        return ({self.ctx.absolute(q) for q in names} | {climbed_qualname(q, folders) for q in names}) - {""}

    def _report_class_decorators(self, original: cst.ClassDef) -> None:
        """A class decorator is written for a Linen dataclass (it may read ``dataclasses.fields``): kept on
        the NNX class, a finding (rules.MOD_017), but for those that read no field (DATACLASS_BLIND)."""
        for decorator in original.decorators:
            applied = decorator.decorator
            maker = applied.func if isinstance(applied, cst.Call) else None
            if self.ctx.qualnames(applied) & DATACLASS_BLIND or (
                maker is not None and self._absolute_names(maker) & DATACLASS_BLIND_FACTORIES
            ):
                continue
            if configuring(self.ctx, decorator):
                continue
            self.ctx.report(
                MOD_017,
                decorator,
                f"class decorator @{one_line(code(decorator.decorator))} kept on {original.name.value}, now an "
                "nnx.Module: a Linen module is a dataclass, which the decorator may rely on "
                "(dataclasses.fields, the dataclass __init__)",
                "check that it works on the NNX class, or drop it",
            )

    def _bridgeable(self, plan: ClassPlan, original: cst.ClassDef) -> bool:
        """Whether a class whose rewrite is blocked can stay Linen behind the bridge: not when its body
        uses the file's other classes (they may be NNX now); a NamedTuple / dataclass record (a scan's
        ``Pair(a=state)``) is no module, and stays as it is."""
        others = (set(self.state.linen_classes) | self.state.module_classes) - {plan.name}
        others -= set(self.state.record_classes)
        has_user_base = any(self.ctx.user_class_of(b.value) for b in original.bases)
        return can_bridge(plan, has_user_base) and not (names_in(original.body) & others)

    def _has_sibling_class(self, original: cst.ClassDef, name: str) -> bool:
        """A class ``name`` beside ``original`` in the same block: the module, or the body of the function
        or class that holds both (an earlier run's wrapper of a class kept as Linen inside a test)."""
        block = self.ctx.parent_of(original)
        statements = block.body if isinstance(block, (cst.Module, cst.IndentedBlock)) else ()
        return any(isinstance(s, cst.ClassDef) and s.name.value == name for s in statements)

    def _bridged(self, plan: ClassPlan, original: cst.ClassDef, updated: cst.ClassDef) -> cst.FlattenSentinel:
        """The Linen class renamed ``<Name>Linen``, and an NNX ``<Name>`` that wraps it with
        ``nnx.bridge.ToNNX`` (after the Linen copies of the classes it builds through factory fields)."""
        plan.bridged = True  # its users planned after it hand it no input sizes: its Linen copy reads none
        batch_norm = any(
            site.rule is not None and site.rule.linen == "BatchNorm" for site in plan.sites.values()
        ) or "BatchNorm" in code(original)  # also through partial(nn.BatchNorm, ...)
        # the wrapper's defaults as a second run would write them (nn.relu -> nnx.relu), with their markers
        field_markers = self._rewritten_field_defaults(plan, original, updated)
        collections = mutable_collections(original, batch_norm)
        wrapper = bridge_wrapper(
            plan, collections, field_markers, forwarded_methods(original), packed_methods(original)
        )
        wrapper = wrapper.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2)
        return cst.FlattenSentinel(
            [
                *self._linen_copies(plan),
                self._keep_linen(plan, original, linen_name(plan.name)),
                linen_class_name(plan.name, plan.linen_prefix),
                wrapper,
            ]
        )

    def _nnx_bases(self, original: cst.ClassDef, updated: cst.ClassDef) -> list[cst.Arg]:
        """The class's bases, with Linen's ``nn.Module`` as ``nnx.Module``."""
        bases = []
        for o, u in zip(original.bases, updated.bases):
            linen_base = sorted(self.ctx.qualnames(o.value) & LINEN_MODULE)
            if linen_base:
                bases.append(u.with_changes(value=parse_expression(LINEN_BASES[linen_base[0]])))
            else:
                bases.append(u)
        return bases

    def _nnx_body(
        self, plan: ClassPlan, original: cst.ClassDef, updated: cst.ClassDef
    ) -> tuple[list[cst.BaseStatement], list[cst.BaseStatement], int | None]:
        """The class body less its fields, ``setup()`` and removed factory helpers (with the step method
        of a scanned one after it); the ``setup()`` body; where ``__init__`` goes (None: first)."""
        body: list[cst.BaseStatement] = []
        setup_body: list[cst.BaseStatement] = []
        post_init: list[cst.BaseStatement] = []
        init_index = None
        read_later = read_at_class_creation(original)  # fields the class body reads stay class attributes
        for orig_stmt, stmt, read in zip(original.body.body, updated.body.body, read_later):
            if self._is_field_line(plan, stmt):
                init_index = len(body) if init_index is None else init_index
                kept = _read_by_class_body(stmt, read)
                if kept is not None:
                    init_index += init_index == len(body)  # __init__ after them
                    body.append(kept)
                continue
            moved = self._moved_post_init(plan, original, orig_stmt, stmt)
            if moved is not None:
                post_init = moved
                init_index = len(body) if init_index is None else init_index
                continue
            if (
                isinstance(stmt, cst.FunctionDef)
                and stmt.name.value in plan.factories
                and not any(
                    f"self.{stmt.name.value}" in code(other)
                    for other in updated.body.body
                    if other is not stmt and isinstance(other, cst.FunctionDef)
                )
            ):
                self.ctx.report(
                    MOD_003,
                    orig_stmt,
                    f"{plan.name}.{stmt.name.value}(): each call became a "
                    "submodule built in __init__; the helper is removed",
                )
                continue
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "setup":
                setup_body = list(stmt.body.body)
                init_index = len(body) if init_index is None else init_index
                continue
            if plan.is_cell and isinstance(stmt, cst.FunctionDef) and stmt.name.value == CARRY_METHOD:
                stmt = self._carry_method(plan, orig_stmt, stmt)
            body.append(stmt)
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value in plan.scanned_methods:
                body.append(
                    self.state.step_methods.pop(stmt.name.value)
                )  # the scanned body, right after its scan
        return body, [*post_init, *setup_body], init_index

    def _carry_method(
        self, plan: ClassPlan, orig_stmt: cst.BaseStatement, stmt: cst.FunctionDef
    ) -> cst.FunctionDef:
        """A cell's ``initialize_carry`` in the order nnx.RNN calls it (a finding when it uses its key)."""
        reordered = nnx_initialize_carry(stmt)
        if reordered is None:
            self.ctx.report(
                API_002,
                orig_stmt,
                f"{plan.name}.{CARRY_METHOD}(rng, shape) uses its key: "
                f"nnx.RNN calls {CARRY_METHOD}(input_shape, rngs)",
                "take `rngs` (an nnx.Rngs or None) and draw the key from it",
            )
            return stmt
        self.ctx.report(
            API_006,
            orig_stmt,
            f"{plan.name}.{CARRY_METHOD}(rng, input_shape) -> "
            f"{CARRY_METHOD}(input_shape, rngs=None), as nnx.RNN calls it",
        )
        return reordered

    def _moved_post_init(
        self, plan: ClassPlan, original: cst.ClassDef, orig_stmt: cst.BaseStatement, stmt: cst.BaseStatement
    ) -> list[cst.BaseStatement] | None:
        """The statements of the class's ``__post_init__`` that ``__init__`` runs after the fields (see
        post_init.py), when ``stmt`` is that hook and it can move; else None (it stays, and the
        verifier reports it). Only a class whose bases are all Linen's own."""
        if not (is_post_init(orig_stmt) and is_post_init(stmt)) or plan.super_init is not None:
            return None
        if any(not (self.ctx.qualnames(b.value) & LINEN_MODULE) for b in original.bases):
            return None
        if not can_move(original, orig_stmt, plan.field_names):  # type: ignore[arg-type]
            return None
        moved = hook_statements(stmt)  # type: ignore[arg-type]  # as the rewrite left them
        self.ctx.report(
            MOD_011, orig_stmt, f"{plan.name}.__post_init__() moved into __init__, after the fields"
        )
        return moved

    def _linen_copies(self, plan: ClassPlan) -> list[cst.BaseStatement]:
        """Linen copies of the NNX classes a class kept as Linen builds through its factory fields
        (``block_cls=ResNetBlock``): the kept class runs Linen code only, so it gets ``ResNetBlockLinen``
        (named ``ResNetBlock`` for Linen's auto-names) through ``ResNetBlock.linen_class``."""
        out: list[cst.BaseStatement] = []
        others = set(self.state.linen_classes) | self.state.module_classes
        for f in plan.fields:
            for base in self.ctx.field_bindings.bases(plan.name, f.name):
                original = self.state.converted.get(base.name) if base.kind == "user" else None
                if (
                    original is None
                    or base.name in self.state.copied
                    or names_in(original.body) & (others - {base.name})
                ):
                    continue
                self.state.copied.add(base.name)
                note = cst.EmptyLine(
                    comment=cst.Comment(
                        f"# The Linen original of {base.name}, for {plan.name}Linen, which is kept as Linen"
                    )
                )
                out.append(
                    original.with_changes(
                        name=cst.Name(linen_name(base.name)),
                        leading_lines=[cst.EmptyLine(indent=False)] * 2 + [note],
                    )
                )
                out.append(linen_class_name(base.name))
                out.append(parse_statement(f"{base.name}.linen_class = {linen_name(base.name)}\n"))
        return out

    @staticmethod
    def _is_field_line(plan: ClassPlan, stmt: cst.BaseStatement) -> bool:
        field_names = set(plan.field_names)
        return isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, cst.AnnAssign)
            and isinstance(s.target, cst.Name)
            and (s.target.value in field_names or is_kw_only_marker(s))
            for s in stmt.body
        )

    def _rewritten_field_defaults(
        self, plan: ClassPlan, original: cst.ClassDef, updated: cst.ClassDef
    ) -> list[cst.EmptyLine]:
        """Point ``plan.fields`` at the defaults and annotations as rewritten (``nn.relu`` -> ``nnx.relu``,
        ``nn.initializers.Initializer`` -> ``nnx.initializers.Initializer``) and return the TODO markers
        of every field, its own and those it inherits (a base's default is repeated in this class's
        signature, where a second run would mark it): they move into ``__init__`` (or the bridge
        wrapper's), in the order of the fields."""
        by_name = {f.name: f for f in plan.fields}
        for orig_stmt, stmt in zip(original.body.body, updated.body.body):
            if self._is_field_line(plan, stmt):
                own = markers_of(stmt)
                for orig_small, small in zip(orig_stmt.body, stmt.body):  # type: ignore[attr-defined]
                    if small.target.value not in by_name:  # `_: dataclasses.KW_ONLY`: no field
                        continue
                    rewritten = self.ctx.dataclass_field(orig_small, small)
                    field = by_name[small.target.value]
                    field.default, field.annotation = rewritten.default, rewritten.annotation
                    field.markers = own
        markers = dict.fromkeys(m for f in plan.fields for m in f.markers)
        return [marker_line(m) for m in markers]

    def _keep_linen(
        self, plan: ClassPlan, original: cst.ClassDef, name: str, remark: bool = True
    ) -> cst.ClassDef:
        """The Linen original, renamed, for the nnx.bridge fallback (see bridge.py); with ``remark``
        False (an earlier run's copy that has its markers), exactly as it is."""
        rules = ", ".join(sorted(set(plan.blocking))) or "see the markers"
        wrapper = plan.name.removesuffix("Linen") if name == plan.name else plan.name
        self.ctx.report(
            MOD_007,
            original,
            f"{wrapper} kept as Linen ({name}) behind nnx.bridge.ToNNX: {rules} block its rewrite",
            "fix the findings, then migrate again",
        )
        entry = ClassEntry(
            name=self.ctx.class_key(wrapper),
            module=self.state.module_name,
            file=self.state.path,
            new_args=dict(plan.new_args),
            bridge=BRIDGE_ATTR,
        )
        self.state.name_map.classes[entry.name] = entry
        self.state.kept_linen.add(original)
        if not remark:
            return original
        marker = f"{MARKER} {MOD_007.id} {wrapper} kept as Linen behind nnx.bridge.ToNNX ({rules})"
        placed = self.state.placed_markers
        own = self.state.markers.pop(original, None)  # a finding on a decorator: the class's own marker
        if own:
            placed.setdefault(original, []).extend(own)
        nnx_only = tuple(f"{MARKER} {rule_id}" for rule_id in NNX_ONLY_RULES)  # dropped with their findings
        placed = {stmt: [m for m in notes if not m.startswith(nnx_only)] for stmt, notes in placed.items()}
        kept = original.visit(StatementMarker(placed))  # the findings' markers, on their Linen statements
        lines = [  # the class's own (a finding on a decorator) with the earlier MOD-007 marker left out
            line
            for line in kept.leading_lines
            if not (line.comment is not None and line.comment.value.startswith(f"{MARKER} {MOD_007.id}"))
        ]
        return kept.with_changes(name=cst.Name(name), leading_lines=[*lines, marker_line(marker)])

    def with_out_features(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """A converted class whose output size a caller reads (a loop nest, a factory field bound to
        several classes) ends its ``__init__`` with ``self.out_features = ...``, as NNX layers have."""
        if not isinstance(stmt, cst.ClassDef) or stmt.name.value not in self.state.out_features:
            return stmt
        expr = self.state.out_features[stmt.name.value]
        body = list(stmt.body.body)
        for i, member in enumerate(body):
            if isinstance(member, cst.FunctionDef) and member.name.value == "__init__":
                if expr == "self.out_features":
                    return stmt
                line = parse_statement(
                    f"self.out_features = {expr}  # the output size, read by the modules that build it\n"
                )
                body[i] = member.with_changes(body=member.body.with_changes(body=[*member.body.body, line]))
                return stmt.with_changes(body=stmt.body.with_changes(body=body))
        return stmt


def _read_by_class_body(stmt: cst.BaseStatement, read: set[str]) -> cst.BaseStatement | None:
    """A field line (``width: int = 8``) whose field a later statement of the class body reads while
    the class is created (``per_head = width // heads``): kept as a class attribute, as Linen's dataclass
    has it then (its TODO markers go to ``__init__`` with the fields'); None for any other."""
    if not any(s.value is not None and s.target.value in read for s in stmt.body):  # type: ignore[attr-defined]
        return None
    lines = [ln for ln in stmt.leading_lines if ln.comment is None or not ln.comment.value.startswith(MARKER)]
    return stmt.with_changes(leading_lines=lines)


def _after_attributes_read(body: list[cst.BaseStatement], plan: ClassPlan) -> int:
    """Where ``__init__`` may go at the earliest: after every class attribute its parameter defaults
    read (``quarter: int = half // 2`` below ``half = width // 2``), which Python evaluates then."""
    read = {n for f in plan.fields if f.default for n in names_in(parse_expression(f.default))}
    bound = [
        i
        for i, stmt in enumerate(body)
        if isinstance(stmt, cst.SimpleStatementLine) and bound_by(stmt) & read
    ]
    return bound[-1] + 1 if bound else 0
