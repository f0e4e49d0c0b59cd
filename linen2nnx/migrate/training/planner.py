"""The plan of one file's training rewrite: what the construct handlers record, and the helpers they share.

A :class:`TrainPlanner` holds no construct logic. The handlers of :mod:`.init`, :mod:`.eval_shape`,
:mod:`.state_reads`, :mod:`.apply`, :mod:`.train_state` and :mod:`.sharding` read the file through its
:class:`~linen2nnx.migrate.training.values.ValueAnalysis` and write their findings (``notes``) and
rewrites (``edits``, ``prelude``, ``replace_stmt``, ``wrap``, ``after``, ``split_tuple``) here; the
rewriter of :mod:`.rewrite` then applies them in one bottom-up pass. Keeping the plan in one object is
what makes the pass all or nothing: a blocking note anywhere drops every edit of the file.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from linen2nnx.migrate.cst_meta import unchecked
from linen2nnx.migrate.cst_utils import names_in, numbered_name
from linen2nnx.migrate.rules.base import Rule
from linen2nnx.migrate.sites import COLLECTION_TYPES
from linen2nnx.migrate.training.exprs import dict_items
from linen2nnx.migrate.training.values import ValueAnalysis

# collections an NNX apply can hand back like Linen's ``mutable=[...]`` (intermediates need nnx.capture)
MUTABLE_TYPES = {c: t for c, t in COLLECTION_TYPES.items() if c in ("batch_stats", "cache")}
# the NNX variable type of each Linen collection a train state or a variables dict may hold
STATE_TYPES = {c: t for c, t in COLLECTION_TYPES.items() if c != "intermediates"}
# init keywords that change what Linen initialises: no NNX construction reproduces them
INIT_ONLY_KWARGS = ("method", "mutable", "capture_intermediates")
FILE_HINT = "the file's training code is left in its Linen form"


def sows_values(source: str) -> bool:
    """The file's modules may sow (``self.sow`` / ``self.perturb``): Linen keeps the values only where the
    apply makes the collection mutable, NNX in the module that sows them."""
    return ".sow(" in source or ".perturb(" in source


@dataclasses.dataclass
class Edit:
    """Replace ``node`` with ``build(updated)``; ``before(updated)`` statements go before ``stmt``."""

    build: Callable[[cst.CSTNode], cst.CSTNode]
    before: Callable[[cst.CSTNode], list[cst.BaseStatement]] | None = None
    stmt: cst.CSTNode | None = None


@dataclasses.dataclass
class Note:
    rule: Rule
    node: cst.CSTNode
    message: str
    hint: str = ""


@dataclasses.dataclass
class Entry:
    """One ``'collection': value`` of a variables dict; ``source(updated_arg)`` gives the value to merge."""

    key: str | None
    value: cst.BaseExpression
    source: Callable[[cst.BaseExpression], cst.BaseExpression]


@dataclasses.dataclass
class Owner:
    """A function that receives a train state and reads it: the names its merge prelude binds."""

    fn: cst.FunctionDef | None  # None: module-level code
    param: str
    model: str
    optimizer: str
    uses_optimizer: bool = False
    rebinds: bool = False


class TrainPlanner:
    """The findings and planned rewrites of one file's training code (see the module docstring)."""

    def __init__(
        self, wrapper: MetadataWrapper, values: ValueAnalysis, sharding: bool = False, sows: bool = False
    ):
        self.values = values
        self.sharding = sharding  # the file deals in sharding: NNX models are built under the eager guard
        self.sows = sows  # its models may sow: a plain apply runs on a copy (the sown values go with it)
        self.edits: dict[cst.CSTNode, Edit] = {}
        self.replace_stmt: dict[cst.CSTNode, Callable[[cst.CSTNode], list[cst.BaseStatement]]] = {}
        self.prelude: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        self.split_tuple: set[cst.CSTNode] = set()  # `out, updates = <mutable apply>`: one statement each
        self.wrap: dict[cst.CSTNode, list[str]] = {}  # statement -> context managers it now runs under
        self.after: dict[cst.CSTNode, list[str]] = {}  # statement -> statements that follow it
        self.handled: set[cst.CSTNode] = set()  # `model.init` attributes a rewrite of their call consumed
        self.direct_calls: set[cst.CSTNode | None] = set()  # functions that call a model itself, not a copy
        self.notes: list[Note] = []
        self.uses_partial = False
        self.streams: set[str] = {"dropout"}  # RNG streams the file's apply calls seed (set before planning)
        self._wrapper = wrapper
        self.locals_done: set[tuple[object, str]] = set()  # (scope, name) of train-state locals planned
        self.local_owner: dict[tuple[cst.CSTNode | None, str], Owner] = {}  # (function, state local) -> names
        self._reserved: dict[cst.CSTNode, set[str]] = {}  # function -> names this pass introduced
        self._taken: dict[cst.CSTNode, set[str]] = {}  # function -> names it uses (the tree does not change)

    @functools.cached_property
    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        """libcst's positions (start and end) of every node: resolved only when an update's order
        against later reads must be checked (findings take their starts from one cheap code generation)."""
        return unchecked(self._wrapper.resolve, PositionProvider)  # its visit's copies skip libcst's check

    # ---- reporting -----------------------------------------------------------------------------
    def note(self, rule: Rule, node: cst.CSTNode, message: str, hint: str = "") -> None:
        self.notes.append(Note(rule, node, message, hint))

    def block(self, rule: Rule, node: cst.CSTNode, message: str, hint: str) -> None:
        self.note(rule, node, f"{message}; {FILE_HINT}", hint)

    @property
    def blocked(self) -> bool:
        return any(n.rule.blocks_rewrite for n in self.notes)

    # ---- tree helpers ----------------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.values.parent(node)

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        cur: cst.CSTNode | None = node
        while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.parent(cur)
        return cur

    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        cur = self.parent(node)
        while cur is not None and not isinstance(cur, cst.FunctionDef):
            cur = self.parent(cur)
        return cur

    def insertable(self, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
        """The statement line holding ``node`` if statements can go right before it, evaluated just
        before ``node`` is (no lambda, comprehension or compound-statement header in between)."""
        cur: cst.CSTNode | None = self.parent(node)
        while cur is not None and not isinstance(cur, cst.SimpleStatementLine):
            if isinstance(
                cur, (cst.Lambda, cst.BaseComp, cst.BaseCompoundStatement, cst.SimpleStatementSuite)
            ):
                return None
            cur = self.parent(cur)
        if (
            cur is None
            or len(cur.body) != 1
            or not isinstance(self.parent(cur), (cst.IndentedBlock, cst.Module))
        ):
            return None
        return cur

    def is_target(self, name: cst.Name) -> bool:
        parent = self.parent(name)
        return isinstance(parent, cst.AssignTarget) and parent.target is name

    def fresh(self, scope_node: cst.CSTNode | None, base: str) -> str:
        """A name unused in ``scope_node`` (a function, or the module) and not yet introduced there."""
        key = scope_node if scope_node is not None else self.values.module
        if key not in self._taken:
            self._taken[key] = names_in(key)
        name = numbered_name(base, self._taken[key] | self._reserved.setdefault(key, set()))
        self._reserved[key].add(name)
        return name

    def variables_dict(self, node: cst.BaseExpression) -> list[Entry] | None:
        """The entries of a variables dict literal, or of the one dict literal a local name is bound to
        (then an override reads ``name['key']``, the dict as it is at run time)."""
        if isinstance(node, cst.Dict):
            return [
                Entry(k, v, lambda updated, i=i: dict_items(updated)[i][1])  # type: ignore[arg-type]
                for i, (k, v) in enumerate(dict_items(node))
            ]
        if isinstance(node, cst.Name):
            bound = [self.values.binding_value(a) for a in self.values.referents(node)]
            if len(bound) == 1 and isinstance(bound[0], cst.Dict):
                return [
                    Entry(k, v, lambda updated, k=k: cst.parse_expression(f"{node.value}[{k!r}]"))
                    for k, v in dict_items(bound[0])
                ]
        return None
