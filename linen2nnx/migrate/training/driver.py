"""The training pass of one file: parse, analyse, plan, report, rewrite.

Runs after the module pass, on its output; findings carry the line numbers of the original input.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable, Mapping

import libcst as cst
from libcst.metadata import MetadataWrapper

from linen2nnx.migrate.cst_meta import code_of, parse_module, start_positions
from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.rules import training as training_rules
from linen2nnx.migrate.sites import MARKER, ClassSummary
from linen2nnx.migrate.training.dispatch import plan_file, plan_path_reads
from linen2nnx.migrate.training.init_subscripts import split_init_subscripts
from linen2nnx.migrate.training.planner import TrainPlanner, sows_values
from linen2nnx.migrate.training.returned_updates import split_returned_updates
from linen2nnx.migrate.training.rewrite import TrainRewriter, finish_imports
from linen2nnx.migrate.training.sharding import uses_sharding
from linen2nnx.migrate.training.values import ValueAnalysis
from linen2nnx.migrate.traverse import transform

BLOCKING = tuple(r for r in training_rules.RULES if r.blocks_rewrite)
_HINTS = ("train_state", ".init(", ".init,", ".init)", ".apply(", "apply_fn", "apply_gradients")

Markers = dict[cst.CSTNode, list[str]]  # statement -> the TODO markers of its manual findings


def mentions_training(source: str) -> bool:
    """Cheap pre-filter: only files that look like Linen training code are parsed again."""
    return any(h in source for h in _HINTS)


def migrate_training(
    code_text: str,
    original: str,
    *,
    path: str,
    module_name: str,
    local: Mapping[str, ClassSummary],
    external: Mapping[str, ClassSummary],
    rule_enabled: Callable[[str], bool],
) -> tuple[str, list[Finding]]:
    """Rewrite the training code of one file (the module codemod's output). Findings carry the line
    numbers of ``original`` (the input of the whole migration)."""
    if not mentions_training(code_text) or not any(rule_enabled(r.id) for r in training_rules.RULES):
        return code_text, []
    if "nnx" in original and "linen" not in original:
        return code_text, []  # NNX code already (flax.training's TrainState works with NNX states too)
    if any(f"{MARKER} {rule}" in original for rule in BLOCKING):
        return code_text, []  # left to a person by an earlier run: its markers say why (delete them to retry)
    tree = parse_module(code_text)  # = cst.parse_module(code_text), cheaper
    planner, wrapper = _planned(tree, local, external, module_name, original)
    split = _split(tree) if planner.blocked else None
    if split is not None:  # `params = model.init(...)['params']` as two statements may convert
        retried = _planned(split, local, external, module_name, original)
        if not retried[0].blocked:
            (planner, wrapper), code_text = retried, code_of(split)
    plan_path_reads(planner)
    blocked = planner.blocked
    findings, markers = _report(planner, wrapper.module, path, line_map(code_text, original), rule_enabled)
    rewrites = planner.edits or planner.replace_stmt or planner.wrap or planner.after
    if not blocked and not rewrites and not markers:
        return code_text, findings
    rewriter = TrainRewriter(planner, markers, apply_edits=not blocked)
    module = transform(wrapper.module, rewriter, ())  # = wrapper.module.visit(rewriter), cheaper
    if not blocked and rewrites:
        module = finish_imports(module, planner)
    return code_of(module), findings


def _split(tree: cst.Module) -> cst.Module | None:
    """``tree`` with an init's subscript and a returned update each written as statements of their
    own, the forms the pass reads; None where it has neither."""
    inits = split_init_subscripts(tree)
    updates = split_returned_updates(inits or tree)
    return updates or inits


def _planned(
    tree: cst.Module,
    local: Mapping[str, ClassSummary],
    external: Mapping[str, ClassSummary],
    module_name: str,
    original: str,
) -> tuple[TrainPlanner, MetadataWrapper]:
    wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
    values = ValueAnalysis(wrapper, local, external, module_name)
    planner = TrainPlanner(
        wrapper,
        values,
        sharding=uses_sharding(original) or names_flagged(external, original, "partitioned"),
        sows=sows_values(original) or names_flagged(external, original, "sows"),
    )
    plan_file(planner)
    return planner, wrapper


def _report(
    planner: TrainPlanner,
    module: cst.Module,
    path: str,
    to_input: Callable[[int], int],
    rule_enabled: Callable[[str], bool],
) -> tuple[list[Finding], Markers]:
    """The findings of the enabled rules (only the blocking ones when the rewrite is blocked), and the
    TODO markers of the manual ones."""
    notes = [n for n in planner.notes if n.rule.blocks_rewrite] if planner.blocked else planner.notes
    notes = [n for n in notes if rule_enabled(n.rule.id)]
    findings: list[Finding] = []
    markers: Markers = {}
    starts = start_positions(module, {n.node for n in notes})
    for n in notes:
        pos = starts.get(n.node)
        line, col = (to_input(pos[0]), pos[1] + 1) if pos else (1, 1)
        severity = n.rule.severity
        findings.append(Finding(n.rule.id, severity, path, line, col, n.message, n.hint))
        if severity is Severity.MANUAL:
            stmt = planner.statement_of(n.node)
            if stmt is not None:
                markers.setdefault(stmt, []).append(f"{MARKER} {n.rule.id} {n.message}")
    return findings, markers


def line_map(new: str, old: str) -> Callable[[int], int]:
    """Map 1-based line numbers of ``new`` back to ``old`` (unchanged lines exactly; a changed block to
    the start of the block it replaced). A line of a top-level class maps into the class of the same
    name in ``old``, or to its ``class`` line: the diff may pair a rewritten ``__init__`` with a line
    another class repeats (``stages: tuple = (2, 1)``), and a finding must name its own class."""
    a, b = old.splitlines(), new.splitlines()
    table: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            table[j + 1] = (i1 + (j - j1) if tag == "equal" else min(i1 + (j - j1), max(i2 - 1, i1))) + 1
    new_classes, old_classes = _class_lines(new), _class_lines(old)

    def to_old(line: int) -> int:
        mapped = table.get(line, line)
        name = next((n for n, (start, end) in new_classes.items() if start <= line <= end), None)
        if name is None or name not in old_classes:
            return mapped
        start, end = old_classes[name]
        return mapped if start <= mapped <= end else start

    return to_old


def _class_lines(text: str) -> dict[str, tuple[int, int]]:
    """The first and last line of each top-level class of ``text`` (none when it does not parse)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    return {
        node.name: (node.lineno, node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


def names_flagged(external: Mapping[str, ClassSummary], source: str, flag: str) -> bool:
    """Whether ``source`` names a class of another file whose summary has ``flag`` set: ``partitioned``
    (its weights carry sharding names, so the training code builds it under the eager guard, as a file
    that deals in sharding does) or ``sows`` (a plain apply runs on a copy)."""
    names = {summary.name for summary in external.values() if getattr(summary, flag)}
    return bool(names) and bool(set(re.findall(r"\b[A-Za-z_]\w*\b", source)) & names)
