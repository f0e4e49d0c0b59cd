"""The training codemod: Linen ``init`` / ``apply`` / ``TrainState`` code -> the NNX split/merge fast path.

Runs after the module codemod, on its output, over the code *outside* module classes. The NNX
shapes it emits (each verified against the Linen numerics, see ``tests/test_train_loop_migration.py``):

- ``model = MLP(hidden=32)`` (a Linen module built outside a module) -> ``functools.partial(MLP, hidden=32)``:
  Linen modules are configuration until ``init``; the NNX constructor also needs ``rngs`` and the input
  sizes, which only ``init`` knows.
- ``variables = model.init(rng, x, train=False)`` -> ``variables = model(in_features=x.shape[-1],
  rngs=nnx.Rngs(rng, dropout=rng))``: constructing is initialising; ``variables`` now holds the model.
- ``variables['params']`` -> ``nnx.state(variables, nnx.Param)``.
- ``TrainState.create(apply_fn=model.apply, params=variables['params'], tx=tx)`` ->
  ``nnx.split((variables, nnx.Optimizer(variables, tx, wrt=nnx.Param)))``: the train state becomes the
  ``(graphdef, state)`` pair. The graphdef has no leaves, so ``jax.jit`` treats it as static and only
  the state's arrays cross the jit boundary (the fast path, not ``nnx.jit`` over the whole graph).
- a function that reads its train-state argument starts with ``model, optimizer = nnx.merge(*state)``;
  ``state.params`` -> ``nnx.state(model, nnx.Param)``, ``state.batch_stats`` -> ``nnx.state(model,
  nnx.BatchStat)``, ``state.step`` -> ``optimizer.step[...]``.
- ``state.apply_fn({'params': params, ...}, x, rngs={'dropout': k}, mutable=['batch_stats'])`` -> a copy
  of the model with those params (``nnx.merge(nnx.graphdef(model), params, nnx.state(model,
  nnx.Not(nnx.Param)), copy=True)``, so a ``jax.value_and_grad`` over the params State stays a pure
  function), ``nnx.reseed(copy, dropout=k, policy="match_shape")`` (layers stacked by ``nnx.vmap`` hold one
  key per layer; the new key is split to match, as Linen's ``split_rngs`` gives each layer its own), and
  ``(copy(x), {'batch_stats': nnx.state(copy, nnx.BatchStat)})`` for the mutable collections.
- ``state = state.apply_gradients(grads=g)`` -> ``optimizer.update(model, g)`` (in place); ``state =
  state.replace(batch_stats=b)`` -> ``nnx.update(model, b)``; later uses of ``state`` read the re-split
  ``(state[0], nnx.state((model, optimizer)))``. ``new = state.apply_gradients(...)`` works the same way
  when the old state is never read again (NNX updates in place, Linen made a copy).
- a train state held in a local (``state = create_train_state(...)``, rebound by a train step in a loop)
  is merged right before each statement that reads a field of it.

The MaxText recipes (see :mod:`linen2nnx.migrate.train_sharding` for why each is exact):

- ``model.init(...)`` whose call Linen makes with the class's call-time state condition true (a decode
  cache under ``if decode:``) -> the construction, then that call: NNX creates such state on the call.
- ``jax.eval_shape(functools.partial(model.init, decode=True), key, x)`` -> ``jax.eval_shape(init_model,
  key, x)`` with a local ``def init_model(rng, *args)`` that builds the NNX model (and makes that call):
  the abstract model stands for Linen's abstract variables (``[...]['cache']`` -> ``nnx.state(..., nnx.Cache)``).
- ``model.apply({'params': p, 'cache': c}, x, decode=True, mutable=['cache'])`` with ``p`` / ``c`` passed
  in (``decode_step(model, params, cache, tokens)``, ``model`` static) -> ``applied = nnx.eval_shape(lambda:
  model(rngs=...))``, ``nnx.update(applied, p, c)``, ``applied(x, decode=True)``, ``{'cache':
  nnx.state(applied, nnx.Cache)}``: the States go into an abstract instance, no weights are initialised.
- ``nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, rules)`` with the active rules ->
  ``nnx.get_named_sharding(abstract, mesh)``; other partition specs of training values are read under
  ``nnx.logical_axis_rules(())`` (Linen's are logical names whatever rules are active).
- in a file that deals in sharding, each NNX model is built under ``nnx.use_eager_sharding(<a mesh is
  active>)``: sharded as it is created under ``jax.set_mesh``, metadata only without a mesh.

A train state changes representation for the whole file, so the conversion is all or nothing: if any
training construct of the file has no safe conversion, nothing of the training code is rewritten and
each such construct gets a ``manual`` finding with an inline TODO marker.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping

import libcst as cst
from libcst.metadata import Assignment, FunctionScope, MetadataWrapper, PositionProvider

from linen2nnx.migrate.cst_meta import code_of
from linen2nnx.migrate.cst_utils import code, is_docstring, kwarg, names_in, needs_parens
from linen2nnx.migrate.findings import Finding, Severity
from linen2nnx.migrate.imports import ensure_nnx_import
from linen2nnx.migrate.rules import training as training_rules
from linen2nnx.migrate.rules.base import Rule
from linen2nnx.migrate.rules.training import (
    TRAIN_001,
    TRAIN_002,
    TRAIN_003,
    TRAIN_004,
    TRAIN_005,
    TRAIN_006,
    TRAIN_007,
    TRAIN_008,
    TRAIN_009,
    TRAIN_010,
    TRAIN_011,
    TRAIN_012,
    TRAIN_013,
    TRAIN_014,
    TRAIN_015,
)
from linen2nnx.migrate.sites import COLLECTION_TYPES, MARKER, ClassSummary
from linen2nnx.migrate.train_sharding import (
    EAGER_GUARD,
    LOGICAL_TO_MESH,
    NO_RULES,
    PARTITION_SPEC,
    RULES_READERS,
    decide,
    literal,
    uses_sharding,
)
from linen2nnx.migrate.train_values import InitFunction, Val, ValueAnalysis, string_index

# keyword arguments of ``init`` that only pick the call-time mode: they create no variables
MODE_KWARGS = frozenset({"train", "training", "is_training", "deterministic", "use_running_average"})
# collections an NNX apply can hand back like Linen's ``mutable=[...]`` (intermediates need nnx.capture)
MUTABLE_TYPES = {c: t for c, t in COLLECTION_TYPES.items() if c in ("batch_stats", "cache")}
# the NNX variable type of each Linen collection a train state or a variables dict may hold
STATE_TYPES = {c: t for c, t in COLLECTION_TYPES.items() if c != "intermediates"}
BLOCKING = tuple(r for r in training_rules.RULES if r.blocks_rewrite)
# init keywords that change what Linen initialises: no NNX construction reproduces them
INIT_ONLY_KWARGS = ("method", "mutable", "capture_intermediates")
_HINTS = ("train_state", ".init(", ".init,", ".init)", ".apply(", "apply_fn", "apply_gradients")
_FILE_HINT = "the file's training code is left in its Linen form"


def mentions_training(source: str) -> bool:
    """Cheap pre-filter: only files that look like Linen training code are parsed again."""
    return any(h in source for h in _HINTS)


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
    """Finds the training constructs of one file and plans their rewrite (or why it cannot be done)."""

    def __init__(self, wrapper: MetadataWrapper, values: ValueAnalysis, sharding: bool = False):
        self.values = values
        self.sharding = sharding  # the file deals in sharding: NNX models are built under the eager guard
        self.wrapper = wrapper
        self.edits: dict[cst.CSTNode, Edit] = {}
        self.replace_stmt: dict[cst.CSTNode, Callable[[cst.CSTNode], list[cst.BaseStatement]]] = {}
        self.prelude: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        self.split_tuple: set[cst.CSTNode] = set()  # `out, updates = <mutable apply>`: one statement each
        self.wrap: dict[cst.CSTNode, list[str]] = {}  # statement -> context managers it now runs under
        self.after: dict[cst.CSTNode, list[str]] = {}  # statement -> statements that follow it
        self.handled: set[cst.CSTNode] = set()  # `model.init` attributes a rewrite of their call consumed
        self.notes: list[Note] = []
        self.uses_partial = False
        self.reserved: dict[cst.CSTNode, set[str]] = {}  # function -> names this pass introduced
        self.streams = self._streams()
        self.positions = wrapper.resolve(PositionProvider)
        self._locals_done: set[tuple[object, str]] = set()
        self._local_owner: dict[cst.CSTNode | None, Owner] = {}

    # ---- reporting -----------------------------------------------------------------------------
    def note(self, rule: Rule, node: cst.CSTNode, message: str, hint: str = "") -> None:
        self.notes.append(Note(rule, node, message, hint))

    def block(self, rule: Rule, node: cst.CSTNode, message: str, hint: str) -> None:
        self.note(rule, node, f"{message}; {_FILE_HINT}", hint)

    @property
    def blocked(self) -> bool:
        return any(n.rule.blocks_rewrite for n in self.notes)

    # ---- helpers ---------------------------------------------------------------------------------
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
            if isinstance(cur, (cst.Lambda, cst.BaseComp, cst.BaseCompoundStatement, cst.SimpleStatementSuite)):
                return None
            cur = self.parent(cur)
        if cur is None or len(cur.body) != 1 or not isinstance(self.parent(cur), (cst.IndentedBlock, cst.Module)):
            return None
        return cur

    def fresh(self, scope_node: cst.CSTNode | None, base: str) -> str:
        """A name unused in ``scope_node`` (a function, or the module) and not yet introduced there."""
        key = scope_node if scope_node is not None else self.values.module
        taken = names_in(key) | self.reserved.setdefault(key, set())
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        self.reserved[key].add(name)
        return name

    def _streams(self) -> set[str]:
        """RNG streams the file's apply calls seed (``rngs={'dropout': k}``): the model is built with
        each one named, so that ``nnx.reseed`` finds them (a stream that falls back to ``default`` would not)."""
        found = {"dropout"}
        for call in self.values.walk(lambda n: isinstance(n, cst.Call)):
            assert isinstance(call, cst.Call)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("apply", "apply_fn"):
                rngs = next((a.value for a in call.args if a.keyword and a.keyword.value == "rngs"), None)
                entries = self._variables_dict(rngs) if rngs is not None else None
                found |= {e.key for e in entries or () if e.key and e.key.isidentifier()}
        return found

    # ---- planning ----------------------------------------------------------------------------------
    def run(self) -> None:
        for node in self.values.walk(lambda n: isinstance(n, (cst.Call, cst.Subscript, cst.Attribute, cst.Name))):
            if self.values.in_module_class(node):
                continue
            if isinstance(node, cst.Call):
                self._call(node)
            elif isinstance(node, cst.Subscript):
                self._subscript(node)
            elif isinstance(node, cst.Attribute):
                self._attribute(node)
            elif node in self.values.access:
                self._variables_use(node)  # type: ignore[arg-type]
        for scope in {s for s in self.values.scopes.values() if s is not None}:
            for assignment in scope.assignments:
                if isinstance(assignment, Assignment) and not self.values.in_module_class(assignment.node):
                    self._train_state_binding(assignment, scope)

    def _call(self, call: cst.Call) -> None:
        values = self.values
        if values.user_class(call.func) is not None and not self._is_init_receiver(call):
            self._partial(call)
            return
        init = values.eval_shape_init(call)
        if init is not None:
            self._eval_shape_init(call, init)
            return
        if values.qualnames(call.func) & PARTITION_SPEC:
            self._partition_spec(call)
            return
        if not isinstance(call.func, cst.Attribute):
            return
        attr = call.func.attr.value
        receiver = values.value_of(call.func.value)
        if attr == "init" and receiver is not None and receiver.kind == "module":
            self._init(call, receiver)
        elif attr == "apply" and receiver is not None and receiver.kind == "module":
            self._module_apply(call, receiver)
        elif attr == "apply" and call.args and isinstance(call.args[0].value, cst.Dict) \
                and "params" in {k for k, _ in dict_items(call.args[0].value)}:
            self.block(TRAIN_009, call, f"`{code(call.func)}({{'params': ...}}, ...)`: a Linen apply on a "
                       "model this run does not migrate", "migrate the file that defines the model in the same "
                       "run, or call the NNX model directly")
        elif attr == "create" and values.is_ts_class(call.func.value):
            self._create(call)

    def _is_init_receiver(self, call: cst.Call) -> bool:
        attr = self.parent(call)
        return isinstance(attr, cst.Attribute) and attr.attr.value == "init" and isinstance(
            self.parent(attr), cst.Call)

    def _attribute(self, node: cst.Attribute) -> None:
        """``model.init`` / ``model.apply`` used as a value (``jax.jit(model.init)``): no call to rewrite."""
        if node.attr.value not in ("init", "apply") or node in self.handled:
            return
        parent = self.parent(node)
        if isinstance(parent, cst.Call) and parent.func is node:
            return
        receiver = self.values.value_of(node.value)
        if receiver is not None and receiver.kind == "module" and not self._is_create_apply_fn(node):
            self.block(TRAIN_009, node, f"`{code(node)}` used as a value", "call it directly: NNX builds the "
                       "module instead of init, and calls the module instead of apply")

    def _variables_use(self, node: cst.BaseExpression) -> None:
        """What ``init`` returned may be indexed by collection, applied, passed on or returned; used any
        other way it would silently be the NNX model (``jax.tree_util.tree_map(f, variables)``)."""
        value = self.values.value_of(node)
        if value is None or value.kind != "vars":
            return
        parent = self.parent(node)
        if isinstance(parent, cst.Subscript) and parent.value is node and string_index(parent) is not None:
            return
        if isinstance(parent, (cst.Return, cst.Assign, cst.AnnAssign)) and parent.value is node:
            return
        if STATE_TYPES.get(self._partition_spec_key(node) or ""):
            return  # nn.get_partition_spec(variables)['params']: the specs of one collection
        if isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
            call = self.parent(parent)
            if isinstance(call, cst.Call) and call.args and call.args[0] is parent and isinstance(
                    call.func, cst.Attribute) and call.func.attr.value in ("apply", "apply_fn"):
                return
        self.block(TRAIN_008, node, f"the variables `{code(node)}` of an initialised model used as a whole "
                   "(in NNX they are the model itself)", "use nnx.state(model, nnx.Param) / nnx.split(model)")

    def _is_create_apply_fn(self, node: cst.CSTNode) -> bool:
        arg = self.parent(node)
        return isinstance(arg, cst.Arg) and arg.keyword is not None and arg.keyword.value == "apply_fn"

    # ---- R1 / R2 / R3: module values, init, collections ------------------------------------------
    def _partial(self, call: cst.Call) -> None:
        self.uses_partial = self.uses_partial or bool(call.args)
        name = code(call.func)
        self.note(TRAIN_001, call, f"{name}(...) built outside a module -> functools.partial({name}, ...): "
                  "the NNX constructor also needs rngs and input sizes, which init supplies")

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call)
            if not updated.args:
                return updated.func  # the class itself is the constructor
            return with_args(updated, [cst.Arg(updated.func), *updated.args],
                             func=cst.parse_expression("functools.partial"))

        self.edits[call] = Edit(build)

    def _init(self, call: cst.Call, receiver: Val) -> None:
        summary = receiver.summary
        assert summary is not None
        parent = self.parent(call)
        if not ((isinstance(parent, cst.Subscript) and parent.value is call and string_index(parent) is not None)
                or (isinstance(parent, (cst.Return, cst.Assign, cst.AnnAssign)) and parent.value is call)):
            self.block(TRAIN_008, call, f"`{code(call.func)}(...)` used as a whole (in NNX it builds the model)",
                       "bind the model to a name, then use nnx.state(model, nnx.Param)")
            return
        if any(a.star for a in call.args):
            self.block(TRAIN_009, call, f"`{code(call.func)}(*...)`: the example inputs are not visible",
                       "pass the rngs and example inputs explicitly")
            return
        positional = [i for i, a in enumerate(call.args) if a.keyword is None]
        keywords = {a.keyword.value: i for i, a in enumerate(call.args) if a.keyword is not None}
        for name in keywords:
            if name in INIT_ONLY_KWARGS:
                self.block(TRAIN_009, call, f"init keyword {name}= changes what Linen initialises",
                           "construct the NNX module by hand")
                return
        rng_index = keywords.get("rngs", positional[0] if positional else None)
        if rng_index is None:
            self.block(TRAIN_009, call, "init without rngs", "pass the PRNG key")
            return
        inputs = [i for i in positional if i != rng_index]  # the rest only run __call__: nothing to build
        sizes: dict[str, tuple[int, str]] = {}
        for arg, how in summary.new_args.items():
            index = input_index(how)
            if 0 <= index < len(inputs):
                sizes[arg] = (inputs[index], how)
            elif index == 0 and summary.first_input in keywords:
                sizes[arg] = (keywords[summary.first_input], how)
            else:
                self.note(TRAIN_010, call, f"{summary.name} needs constructor argument {arg}, which init's "
                          "inputs do not give", f"pass {arg}=... where the module is built (see L2N-SHAPE-003)")
        call_kwargs = {k: call.args[i].value for k, i in keywords.items() if k != "rngs"}
        creates = self._creates_state(call, summary, call_kwargs)
        if creates is None:
            return
        stmt = self.insertable(call)
        if creates:  # Linen's init call created call-time state: the NNX model makes that call once
            target = parent.targets[0].target if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None
            args = [call.args[i] for i in inputs] + [call.args[i] for k, i in keywords.items() if k != "rngs"]
            if stmt is None or not isinstance(target, cst.Name) or not all(_pure_or_literal(a.value) for a in args):
                self.block(TRAIN_015, call, f"`{code(call.func)}(...)` creates {summary.name}'s call-time state "
                           "(e.g. a decode cache), which NNX creates on the first such call; the init is not a "
                           "`name = ...` statement of plain arguments to repeat that call after", "bind the init to "
                           "a name: `variables = model.init(...)`")
                return
            self.after.setdefault(stmt, []).append(f"{target.value}({', '.join(code(_bare(a)) for a in args)})")
        if self.sharding and stmt is not None:
            self._eager(stmt, call, summary.name)
        self.note(TRAIN_002, call, f"{code(call.func)}(...) -> constructing the NNX {summary.name} "
                  "(construction is initialisation)" + (", then the call that creates its call-time state" if creates
                                                        else ""))
        direct = isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call) \
            and self.values.user_class(call.func.value.func) is not None
        streams = sorted(self.streams)

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
            new = [kwarg(arg, input_size(updated.args[i].value, how)) for arg, (i, how) in sizes.items()]
            new.append(kwarg("rngs", rngs_expr(updated.args[rng_index].value, streams)))
            ctor = updated.func.value
            if direct:
                assert isinstance(ctor, cst.Call)
                return with_args(ctor, [*ctor.args, *new])
            return with_args(cst.Call(ctor), new)

        self.edits[call] = Edit(build)

    def _eager(self, stmt: cst.CSTNode, node: cst.CSTNode, name: str) -> None:
        """Build under ``nnx.use_eager_sharding(<a mesh is active>)``: partition metadata would otherwise
        raise with no mesh, where Linen's boxes stay metadata."""
        guards = self.wrap.setdefault(stmt, [])
        if EAGER_GUARD not in guards:
            guards.append(EAGER_GUARD)
        self.note(TRAIN_014, node, f"the NNX {name} is built with eager sharding only under a mesh (Linen's "
                  "partition boxes are metadata until a mesh and rules make them shardings)")

    def _creates_state(self, node: cst.CSTNode, summary: ClassSummary | None,
                       kwargs: Mapping[str, cst.BaseExpression]) -> bool | None:
        """Does the Linen init at ``node`` (called with ``kwargs``) create call-time state that the
        program reads? None (and blocked) when that cannot be decided."""
        when = summary.state_when if summary is not None else None
        if when is None:
            return False
        known = {}
        for key, value in kwargs.items():
            ok, evaluated = literal(code(value))
            if ok:
                known[key] = evaluated
        decided = decide(when, known)
        if decided is not None:
            return decided
        reads = self._collections_read(node)
        if reads is not None and reads <= {"params"}:
            return False  # only the params are read: whatever the call would create is never seen
        self.block(TRAIN_015, node, f"whether this init creates {summary.name}'s call-time state "  # type: ignore[union-attr]
                   f"(when `{when}`) depends on arguments it does not pass as literals", "pass them as literal "
                   "keywords (e.g. decode=True), or build the NNX model and make that call by hand")
        return None

    def _collections_read(self, node: cst.CSTNode) -> set[str] | None:
        """The collections the program reads from the variables ``node`` evaluates to (directly, or through
        the one name they are bound to); None when they may be used any other way."""
        parent = self.parent(node)
        if isinstance(parent, cst.Subscript) and parent.value is node:
            key = string_index(parent)
            return {key} if key is not None else None
        if not (isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1
                and isinstance(parent.targets[0].target, cst.Name)):
            return None
        assignment = self.values.assignment_of(parent.targets[0].target)
        if assignment is None:
            return None
        reads: set[str] = set()
        for use in self.values.uses(assignment):
            use_parent = self.parent(use)
            key = string_index(use_parent) if isinstance(use_parent, cst.Subscript) and use_parent.value is use \
                else self._partition_spec_key(use)
            if key is None:
                return None
            reads.add(key)
        return reads

    def _partition_spec_key(self, node: cst.CSTNode) -> str | None:
        """``nnx.get_partition_spec(<node>)['params']`` -> ``'params'``."""
        arg = self.parent(node)
        spec = self.parent(arg) if isinstance(arg, cst.Arg) and arg.keyword is None and not arg.star else None
        if not (isinstance(spec, cst.Call) and len(spec.args) == 1 and self.values.qualnames(spec.func) & PARTITION_SPEC):
            return None
        sub = self.parent(spec)
        return string_index(sub) if isinstance(sub, cst.Subscript) and sub.value is spec else None

    # ---- R11: init as a function value under jax.eval_shape -----------------------------------------
    def _eval_shape_init(self, call: cst.Call, init: InitFunction) -> None:
        """``jax.eval_shape(functools.partial(model.init, k=v), rng, *inputs)`` -> ``jax.eval_shape(f, rng,
        *inputs)`` with ``f`` building the NNX model (and making the call that creates its call-time
        state): the abstract model, whose ``nnx.state`` / partition specs stand for Linen's variables."""
        self.handled.add(init.attr)
        summary = init.summary
        name = code(init.partial if init.partial is not None else init.attr)
        kwargs: dict[str, cst.BaseExpression] = {}
        for arg in (init.partial.args[1:] if init.partial is not None else ()):
            if arg.keyword is None or arg.star or arg.keyword.value in (*INIT_ONLY_KWARGS, "rngs"):
                self.block(TRAIN_009, arg, f"`{name}` with an argument the NNX constructor cannot take",
                           "build the NNX model in a function of (rng, *inputs) by hand")
                return
            kwargs[arg.keyword.value] = arg.value
        rest = call.args[1:]
        if not rest or any(a.keyword is not None or a.star for a in rest) or isinstance(rest[0].value, cst.Dict):
            self.block(TRAIN_009, call, f"`jax.eval_shape({name}, ...)` without a single PRNG key and "
                       "positional inputs", "pass jax.eval_shape a key and the example inputs")
            return
        creates = self._creates_state(call, summary, kwargs)
        if creates is None or summary is None:
            return
        fn = self.function_of(call)
        rng, args = self.fresh(fn, "rng"), self.fresh(fn, "args")
        sizes: list[str] = []
        for arg, how in summary.new_args.items():
            if input_index(how) >= 0:
                sizes.append(f"{arg}={args}[{input_index(how)}].shape{'' if how.startswith('input_shape:') else '[-1]'}")
            else:
                self.note(TRAIN_010, call, f"{summary.name} needs constructor argument {arg}, which init's "
                          "inputs do not give", f"pass {arg}=... where the module is built (see L2N-SHAPE-003)")
        rngs = code(rngs_expr(cst.Name(rng), sorted(self.streams)))
        guarded = self.sharding
        stmt = self.insertable(call) if creates or guarded else None
        if (creates or guarded) and stmt is None:
            self.block(TRAIN_008, call, f"`jax.eval_shape({name}, ...)` inside an expression the codemod cannot "
                       "put a function definition before", "bind its result to a name in a plain statement")
            return
        def_name = self.fresh(fn, "init_model") if stmt is not None else ""
        var = self.fresh(fn, "nnx_model") if creates else ""
        self.note(TRAIN_011, call, f"jax.eval_shape({name}, ...) -> jax.eval_shape of a function that builds "
                  f"the NNX {summary.name}" + (" and makes the call that creates its call-time state" if creates
                                               else "") + ": the abstract model")
        if guarded:
            self.note(TRAIN_014, call, f"the NNX {summary.name} is built with eager sharding only under a mesh "
                      "(Linen's partition boxes are metadata until a mesh and rules make them shardings)")

        def ctor(updated: cst.CSTNode) -> str:
            attr = updated.args[0].value if init.partial is not None else updated  # type: ignore[attr-defined]
            receiver = attr.value  # type: ignore[attr-defined]
            text = code(receiver)
            if needs_parens(receiver) or isinstance(receiver, (cst.Await, cst.Yield, cst.NamedExpr)):
                text = f"({text})"
            return f"{text}({', '.join([*sizes, f'rngs={rngs}'])})"

        def call_kwargs(updated: cst.CSTNode) -> str:
            given = updated.args[1:] if init.partial is not None else []  # type: ignore[attr-defined]
            return "".join(f", {a.keyword.value}={code(a.value)}" for a in given)

        def before(updated: cst.CSTNode) -> list[cst.BaseStatement]:
            built = ctor(updated)
            if creates:
                body = f"{var} = {built}\n"
                body = f"with {EAGER_GUARD}:\n    {body}" if guarded else body
                body += f"{var}(*{args}{call_kwargs(updated)})\nreturn {var}\n"
            else:
                body = f"with {EAGER_GUARD}:\n    return {built}\n" if guarded else f"return {built}\n"
            text = f"def {def_name}({rng}, *{args}):\n" + "".join(f"    {line}\n" for line in body.splitlines())
            return [cst.parse_statement(text)]

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            if stmt is not None:
                return cst.Name(def_name)
            return cst.parse_expression(f"lambda {rng}, *{args}: {ctor(updated)}")

        target = init.partial if init.partial is not None else init.attr
        self.edits[target] = Edit(build, before if stmt is not None else None, stmt)

    # ---- R13: partition specs and shardings of training values ---------------------------------------
    def _partition_spec(self, call: cst.Call) -> None:
        """``nnx.get_partition_spec(x)`` (the module codemod's spelling of ``nn.get_partition_spec``) where
        Linen read logical names: see :mod:`linen2nnx.migrate.train_sharding`."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return
        arg = call.args[0].value
        holder = self.parent(call)
        outer = self.parent(holder) if isinstance(holder, cst.Arg) and holder.keyword is None else None
        if isinstance(outer, cst.Call) and outer.args and outer.args[0] is holder \
                and self.values.qualnames(outer.func) & LOGICAL_TO_MESH:
            mesh = self._argument(outer, 1, "mesh")
            rules = self._argument(outer, 2, "rules")
            if mesh is not None and rules is not None and self._active_rules(rules) and len(outer.args) == 3:
                self.note(TRAIN_013, outer, f"{code(outer.func)}({code(call)}, {code(mesh)}, <the active rules>) "
                          f"-> nnx.get_named_sharding({code(arg)}, {code(mesh)})")

                def named(updated: cst.CSTNode) -> cst.CSTNode:
                    spec_arg = updated.args[0].value.args[0].value  # type: ignore[attr-defined]
                    mesh_arg = next(a.value for i, a in enumerate(updated.args)  # type: ignore[attr-defined]
                                    if (a.keyword is None and i == 1) or (a.keyword and a.keyword.value == "mesh"))
                    return cst.parse_expression(f"nnx.get_named_sharding({code(spec_arg)}, {code(mesh_arg)})")

                self.edits[outer] = Edit(named)
                return
            self._logical_specs(call, f"`{code(outer.func)}` maps the specs of {code(arg)} through its own rules")
            return
        value = self.values.value_of(arg)
        if value is None or value.kind not in ("vars", "coll", "ts"):
            return  # not a value of the training code: the module codemod's conversion stands
        if value.kind == "vars":
            key = string_index(holder) if isinstance(holder, cst.Subscript) and holder.value is call else None
            var_type = STATE_TYPES.get(key or "")
            if var_type is None:
                return  # the variables used whole: reported where they are used
            self.edits[holder] = Edit(lambda updated, t=var_type: cst.parse_expression(  # type: ignore[misc]
                f"nnx.get_partition_spec(nnx.state({code(updated.value.args[0].value)}, nnx.{t}))"))  # type: ignore[attr-defined]
        self._logical_specs(call, f"the partition specs of {code(arg)}")

    def _logical_specs(self, call: cst.Call, what: str) -> None:
        """Run ``call``'s statement under ``nnx.logical_axis_rules(())``, so that the specs are the logical
        names Linen's ``get_partition_spec`` returns, whatever rules the caller made active."""
        stmt = self.insertable(call)
        if stmt is None:
            self.block(TRAIN_008, call, f"{what}: Linen's are logical names whatever rules are active, "
                       "nnx.get_partition_spec applies the active ones", f"read them under `with {NO_RULES}:`")
            return
        guards = self.wrap.setdefault(stmt, [])
        if NO_RULES not in guards:
            guards.insert(0, NO_RULES)
        self.note(TRAIN_013, call, f"{what}: read under `with {NO_RULES}:` (Linen's partition specs are "
                  "the logical names whatever rules are active)")

    @staticmethod
    def _argument(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
        """Argument ``index`` / ``keyword=`` of ``call`` (None where a ``*args`` hides it)."""
        for i, arg in enumerate(call.args):
            if arg.star:
                return None
            if (arg.keyword is None and i == index) or (arg.keyword is not None and arg.keyword.value == keyword):
                return arg.value
        return None

    def _active_rules(self, node: cst.BaseExpression) -> bool:
        """``nn.get_logical_axis_rules()``, or the one name bound to it (``mesh, rules = ..., ...`` too)."""
        if isinstance(node, cst.Name):
            refs = self.values.referents(node)
            if len(refs) != 1:
                return False
            bound = self.values.binding_value(refs[0]) or self._unpacked(refs[0].node)
            if bound is None or self.function_of(bound) is not self.function_of(node):
                return False
            node = bound
        return isinstance(node, cst.Call) and not node.args and bool(self.values.qualnames(node.func) & RULES_READERS)

    def _unpacked(self, target: cst.CSTNode) -> cst.BaseExpression | None:
        """``a, b = x, y``: the ``y`` that the target ``b`` is bound to."""
        element = self.parent(target)
        pattern = self.parent(element) if isinstance(element, cst.Element) else None
        assign_target = self.parent(pattern) if isinstance(pattern, cst.Tuple) else None
        assign = self.parent(assign_target) if isinstance(assign_target, cst.AssignTarget) else None
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.value, cst.Tuple)
                and len(assign.value.elements) == len(pattern.elements)):  # type: ignore[union-attr]
            return None
        index = next(i for i, e in enumerate(pattern.elements) if e is element)  # type: ignore[union-attr]
        value = assign.value.elements[index]
        return None if isinstance(value, cst.StarredElement) else value.value

    def _subscript(self, node: cst.Subscript) -> None:
        value = self.values.value_of(node)
        if value is None or value.kind != "coll":
            return
        var_type = STATE_TYPES.get(value.collection)
        if var_type is None:
            self.block(TRAIN_008, node, f"collection {value.collection!r} of an initialised model",
                       "collect it with nnx.capture / a custom nnx.Variable type")
            return
        self.note(TRAIN_003, node, f"variables[{value.collection!r}] -> nnx.state(model, nnx.{var_type})")
        self.edits[node] = Edit(lambda updated: cst.parse_expression(
            f"nnx.state({code(updated.value)}, nnx.{var_type})"))  # type: ignore[attr-defined]

    # ---- R4: TrainState.create ---------------------------------------------------------------------
    def _create(self, call: cst.Call) -> None:
        hint = "build the model, then nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))"
        args = {a.keyword.value: a for a in call.args if a.keyword is not None}
        if any(a.keyword is None for a in call.args) or not {"params", "tx"} <= set(args):
            self.block(TRAIN_008, call, "TrainState.create without params= and tx= keywords", hint)
            return
        params = self.values.value_of(args["params"].value)
        if params is None or params.kind != "coll" or params.collection != "params" or params.holder is None:
            self.block(TRAIN_008, call, "TrainState.create(params=...) whose params do not come from a model "
                       "this run migrates, initialised in scope", hint)
            return
        holder = params.holder
        scope = self.values.scopes.get(call)
        if scope is None or holder not in scope[holder.name]:
            self.block(TRAIN_008, call, f"the model `{holder.name}` is not visible where its TrainState is "
                       "created", hint)
            return
        fields = self.values.ts_fields(call.func.value)  # type: ignore[attr-defined]
        for name, arg in args.items():
            if name in ("params", "tx"):
                continue
            if name == "apply_fn":
                if not (isinstance(arg.value, cst.Attribute) and arg.value.attr.value == "apply"):
                    self.block(TRAIN_008, arg, "TrainState.create(apply_fn=...) that is not a module's apply",
                               "call the NNX model (or a function of it) in the train step")
                    return
                continue
            value = self.values.value_of(arg.value)
            if not (name in fields and name in STATE_TYPES and value is not None and value.kind == "coll"
                    and value.holder is holder and value.collection == name):
                self.block(TRAIN_008, arg, f"TrainState field {name}= has no NNX counterpart here",
                           "keep it next to the (graphdef, state) pair by hand")
                return
        self.note(TRAIN_004, call, "TrainState.create(...) -> nnx.split((model, nnx.Optimizer(model, tx, "
                  "wrt=nnx.Param))): the train state is the (graphdef, state) pair")
        model = holder.name

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call)
            tx = next(a.value for a in updated.args if a.keyword is not None and a.keyword.value == "tx")
            return cst.parse_expression(f"nnx.split(({model}, nnx.Optimizer({model}, {code(tx)}, wrt=nnx.Param)))")

        self.edits[call] = Edit(build)

    # ---- R5: apply ---------------------------------------------------------------------------------
    def _module_apply(self, call: cst.Call, receiver: Val) -> None:
        """``model.apply(variables, x)`` where the variables come from a model initialised in scope, or
        are passed in (``decode_step(model, params, cache, tokens)``): then, in NNX, the States of those
        collections, put into an abstract instance of the model (see :meth:`_apply`)."""
        hint = "keep the NNX model from construction and call it (nnx.merge it with the params to apply)"
        if not call.args or call.args[0].keyword is not None or call.args[0].star:
            self.block(TRAIN_009, call, "apply without a variables argument", hint)
            return
        first = call.args[0].value
        whole = self.values.value_of(first)
        scope = self.values.scopes.get(call)
        if whole is not None and whole.kind == "vars" and isinstance(first, cst.Name):
            self._apply(call, first.value, lambda key, value: True, receiver.summary)
            return
        entries = self._variables_dict(first)
        params = next((e.value for e in entries or () if e.key == "params"), None)
        held = self.values.value_of(params) if params is not None else None
        if held is None or held.kind != "coll" or held.holder is None or scope is None \
                or held.holder not in scope[held.holder.name]:
            given = [self.values.value_of(e.value) for e in entries or ()]
            if params is not None and all(v is None or (v.kind == "coll" and v.collection == e.key)
                                          for v, e in zip(given, entries or ())):
                self._apply(call, "", lambda key, value: False, receiver.summary, constructor=True)
                return
            self.block(TRAIN_009, call, f"`{code(call.func)}(...)` with params that do not come from a model "
                       "initialised in scope", hint)
            return
        holder = held.holder

        def own(key: str, value: cst.BaseExpression) -> bool:
            v = self.values.value_of(value)
            return v is not None and v.kind == "coll" and v.holder is holder and v.collection == key

        self._apply(call, holder.name, own, receiver.summary)

    def _variables_dict(self, node: cst.BaseExpression) -> list[Entry] | None:
        """The entries of a variables dict literal, or of the one dict literal a local name is bound to
        (then an override reads ``name['key']``, the dict as it is at run time)."""
        if isinstance(node, cst.Dict):
            return [Entry(k, v, lambda updated, i=i: dict_items(updated)[i][1])  # type: ignore[arg-type]
                    for i, (k, v) in enumerate(dict_items(node))]
        if isinstance(node, cst.Name):
            bound = [self.values.binding_value(a) for a in self.values.referents(node)]
            if len(bound) == 1 and isinstance(bound[0], cst.Dict):
                return [Entry(k, v, lambda updated, k=k: cst.parse_expression(f"{node.value}[{k!r}]"))
                        for k, v in dict_items(bound[0])]
        return None

    def _apply(self, call: cst.Call, model: str, own: Callable[[str, cst.BaseExpression], bool],
               summary: ClassSummary | None = None, constructor: bool = False) -> bool:
        """Plan ``<apply>(variables, *args, rngs=, mutable=, method=, **kw)`` -> a call of ``model`` or of a
        copy of it holding the overriding collections. Returns False (and blocks) when it cannot.

        ``constructor``: ``call`` is ``module.apply`` on a module value (an NNX constructor) with no model
        in scope; the collections given are NNX States, put with ``nnx.update`` into the abstract model
        ``nnx.eval_shape`` builds (no weights are initialised only to be overwritten). ``nnx.update`` also
        adds Variables the constructor does not make, such as a decode cache (created at call time)."""
        hint = "call the NNX model directly (nnx.merge a copy with the params it should use)"
        name = code(call.func)
        entries = self._variables_dict(call.args[0].value) if call.args and call.args[0].keyword is None \
            and not call.args[0].star else None
        if entries is None and not (call.args and isinstance(call.args[0].value, cst.Name)
                                    and self.values.value_of(call.args[0].value) is not None):
            self.block(TRAIN_008, call, f"`{name}(...)` with a variables argument that is not a dict literal",
                       hint)
            return False
        overrides: list[tuple[Entry, str]] = []  # (dict entry, variable type)
        for entry in entries or ():
            var_type = STATE_TYPES.get(entry.key or "")
            if var_type is None or entry.key is None:
                self.block(TRAIN_008, call, f"`{name}(...)` with collection {entry.key!r}", hint)
                return False
            if not own(entry.key, entry.value):
                overrides.append((entry, var_type))
        if entries is not None and "params" not in {e.key for e in entries}:
            self.block(TRAIN_008, call, f"`{name}(...)` without params", hint)
            return False
        streams: list[Entry] = []
        mutable: list[str] = []
        method = "__call__"
        for arg in call.args[1:]:
            if arg.star == "**":
                self.block(TRAIN_008, call, f"`{name}(..., **kwargs)` may hold rngs / mutable", hint)
                return False
            key = arg.keyword.value if arg.keyword is not None else None
            if key == "rngs":
                items = self._variables_dict(arg.value)
                if items is None or not all(e.key and e.key.isidentifier() for e in items):
                    self.block(TRAIN_008, arg, "rngs= that is not a dict literal of stream names",
                               "nnx.reseed(model, <stream>=key) before the call")
                    return False
                streams = items
            elif key == "mutable":
                cols = mutable_collections(arg.value)
                if cols is None or any(c not in MUTABLE_TYPES for c in cols):
                    self.block(TRAIN_008, arg, f"mutable={code(arg.value)}", "NNX updates state in place; read "
                               "it back with nnx.state(model, <VariableType>)")
                    return False
                mutable = cols
            elif key == "method":
                method = method_name(arg.value) or ""
                if not method:
                    self.block(TRAIN_008, arg, f"method={code(arg.value)}", "call that method of the NNX model")
                    return False
            elif key in ("capture_intermediates",):
                self.block(TRAIN_008, arg, f"{key}=", "use nnx.capture(model, nnx.Intermediate)")
                return False
        if constructor and entries is None:
            self.block(TRAIN_009, call, f"`{name}(...)` with a variables argument that is not a dict literal",
                       hint)
            return False
        sizes: list[tuple[str, int, str]] = []
        if constructor and summary is not None:
            inputs = [i for i, a in enumerate(call.args) if i > 0 and a.keyword is None]
            for arg, how in summary.new_args.items():
                index = input_index(how)
                if 0 <= index < len(inputs):
                    sizes.append((arg, inputs[index], how))
                else:
                    self.note(TRAIN_010, call, f"{summary.name} needs constructor argument {arg}, which the "
                              "apply's inputs do not give", f"pass {arg}=... where the module is built")
        copy = bool(overrides or streams or mutable or constructor)
        stmt = self.insertable(call) if copy else None
        if copy and stmt is None:
            self.block(TRAIN_008, call, f"`{name}(...)` inside an expression the codemod cannot put a merge "
                       "before (lambda, comprehension, compound statement header)", hint)
            return False
        fn = self.function_of(call)
        applied = self.fresh(fn, "applied") if copy else model
        if constructor:
            self.note(TRAIN_012, call, f"{name}(...) -> the abstract NNX {summary.name if summary else 'model'} "
                      "(nnx.eval_shape) updated with the given " + ", ".join(str(e.key) for e, _ in overrides)
                      + " States, then called")
            if self.sharding:
                self.note(TRAIN_014, call, "the abstract model is built with eager sharding only under a mesh")
        else:
            self.note(TRAIN_005, call, f"{name}(...) -> a call of the NNX model" + (
                " (a copy holding the given " + ", ".join(str(e.key) for e, _ in overrides) + ")" if overrides else ""))

        def before(updated: cst.CSTNode) -> list[cst.BaseStatement]:
            assert isinstance(updated, cst.Call)
            lines = []
            if constructor:
                assert isinstance(updated.func, cst.Attribute)
                receiver = code(updated.func.value)
                if needs_parens(updated.func.value):
                    receiver = f"({receiver})"
                rngs = code(rngs_expr(cst.Integer("0"), sorted(self.streams)))
                ctor_args = [f"{arg}={code(input_size(updated.args[i].value, how))}" for arg, i, how in sizes]
                abstract = f"{applied} = nnx.eval_shape(lambda: {receiver}({', '.join([*ctor_args, f'rngs={rngs}'])}))"
                lines.append(f"with {EAGER_GUARD}:\n    {abstract}" if self.sharding else abstract)
                given = [e.source(updated.args[0].value) for e, _ in overrides]
                lines.append(f"nnx.update({applied}, {', '.join(code(g) for g in given)})")
            elif overrides:
                given = [e.source(updated.args[0].value) for e, _ in overrides]
                types = [f"nnx.{t}" for _, t in overrides]
                rest = types[0] if len(types) == 1 else f"nnx.Any({', '.join(types)})"
                lines.append(f"{applied} = nnx.merge(nnx.graphdef({model}), {', '.join(code(g) for g in given)}, "
                             f"nnx.state({model}, nnx.Not({rest})), copy=True)")
            else:
                lines.append(f"{applied} = nnx.merge(*nnx.split({model}), copy=True)")
            if streams:
                rngs = next(a.value for a in updated.args if a.keyword is not None and a.keyword.value == "rngs")
                keys = ", ".join(f"{e.key}={code(e.source(rngs))}" for e in streams)
                lines.append(f'nnx.reseed({applied}, {keys}, policy="match_shape")')
            return [cst.parse_statement(line + "\n") for line in lines]

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call)
            args = [a for a in updated.args[1:] if a.keyword is None or a.keyword.value not in
                    ("rngs", "mutable", "method")]
            func = cst.parse_expression(applied if method == "__call__" else f"{applied}.{method}")
            result: cst.BaseExpression = with_args(updated, args, func=func)
            if mutable:
                state = ", ".join(f'"{c}": nnx.state({applied}, nnx.{MUTABLE_TYPES[c]})' for c in mutable)
                result = cst.Tuple([cst.Element(result), cst.Element(cst.parse_expression(f"{{{state}}}"))])
            return result

        self.edits[call] = Edit(build, before if copy else None, stmt)
        small = stmt.body[0] if stmt is not None else None
        if mutable and isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 \
                and isinstance(small.targets[0].target, cst.Tuple) and len(small.targets[0].target.elements) == 2:
            self.split_tuple.add(stmt)  # type: ignore[arg-type]
        return True

    # ---- R6 / R7: train states read inside a function ---------------------------------------------
    def _train_state_binding(self, assignment: Assignment, scope: object) -> None:
        node = assignment.node
        if isinstance(node, cst.Param):
            value = self.values.param_value(node, assignment)
            if value is None or value.kind != "ts":
                return
            fn = self.function_of(node)
            if fn is not None and isinstance(scope, FunctionScope):
                self._owner(fn, assignment, scope)
            return
        value = self.values.bound(assignment)
        key = (scope, assignment.name)
        if value is None or value.kind != "ts" or key in self._locals_done:
            return
        self._locals_done.add(key)
        group = [a for a in scope.assignments[assignment.name] if isinstance(a, Assignment)]  # type: ignore[attr-defined]
        self._local_state(assignment.name, group)

    def _local_state(self, name: str, group: list[Assignment]) -> None:
        """A train state held in a local (``state = create_train_state(...)``): each statement that reads
        it is preceded by its own ``model, optimizer = nnx.merge(*state)`` (the local may be rebound by
        any call in between, e.g. ``state, metrics = train_step(state, batch)``)."""
        uses = list(dict.fromkeys(u for a in group for u in self.values.uses(a)))
        reads: dict[cst.SimpleStatementLine, list[cst.Attribute]] = {}
        for use in uses:
            attr = self.parent(use)
            if not (isinstance(attr, cst.Attribute) and attr.value is use):
                continue
            field = attr.attr.value
            call = self.parent(attr)
            is_call = isinstance(call, cst.Call) and call.func is attr
            stmt = self.insertable(attr)
            readable = field in ("params", "step", "tx") or field in STATE_TYPES
            if stmt is None or (field != "apply_fn" if is_call else not readable):
                self.block(TRAIN_008, attr, f"`{code(attr)}` of a train state held in a local variable",
                           "read it after `model, optimizer = nnx.merge(*state)`")
                return
            reads.setdefault(stmt, []).append(attr)
        for stmt, attrs in reads.items():
            fn = self.function_of(stmt)
            owner = self._local_owner.get(fn) or Owner(fn, name, self.fresh(fn, "model"),  # type: ignore[arg-type]
                                                          self.fresh(fn, "optimizer"))
            self._local_owner[fn] = owner
            needs_optimizer = needs_model = False
            for attr in attrs:
                if attr.attr.value == "apply_fn":
                    if not self._apply(self.parent(attr), owner.model, state_own(group, self.values)):  # type: ignore[arg-type]
                        return
                    needs_model = True
                else:
                    needs_optimizer |= attr.attr.value in ("step", "tx")
                    needs_model |= attr.attr.value not in ("step", "tx")
                    self._field_read(attr, owner)
            if needs_model and needs_optimizer:
                merge = f"{owner.model}, {owner.optimizer} = nnx.merge(*{name})"
            elif needs_optimizer:
                merge = f"{owner.optimizer} = nnx.merge(*{name})[1]"
            else:
                merge = f"{owner.model} = nnx.merge(*{name})[0]"
            self.prelude.setdefault(stmt, []).append(cst.parse_statement(merge + "\n"))

    def _owner(self, fn: cst.FunctionDef, param: Assignment, scope: FunctionScope) -> None:
        """Plan the merge prelude, field reads, apply sites and rebinding statements of one train-state
        parameter of ``fn`` and of the names ``apply_gradients`` / ``replace`` rebind it to in ``fn``."""
        names = {param.name}
        group: list[Assignment] = [param]
        rebinding: dict[cst.CSTNode, cst.Call] = {}  # statement -> the apply_gradients / replace call
        foreign: Assignment | None = None  # a rebinding by anything else (a problem only if fields are read)
        changed = True
        while changed and foreign is None:  # grow the group through `new = old.apply_gradients(...)`, `new = new.replace(...)`
            changed = False
            for use in [u for a in group for u in self.values.uses(a)]:
                target = self._update_target(use)
                if target is not None and target not in names:
                    names.add(target)
                    changed = True
            for name in sorted(names):
                for a in scope.assignments[name]:
                    if not isinstance(a, Assignment) or a in group:
                        continue
                    found = self._rebinding_statement(a.node, names)
                    if found is None:
                        foreign = a
                        break
                    group.append(a)
                    rebinding[found[0]] = found[1]
                    changed = True
        accesses = list(dict.fromkeys(use for a in group for use in self.values.uses(a)))  # an access may see several
        attribute_uses = [u for u in accesses if isinstance(self.parent(u), cst.Attribute)
                          and self.parent(u).value is u]  # type: ignore[union-attr]
        if not attribute_uses:
            return
        if foreign is not None:
            self.block(TRAIN_008, foreign.node, f"train state `{foreign.name}` reassigned by something other "
                       "than apply_gradients / replace", "read its fields after `model, optimizer = nnx.merge(*state)`")
            return
        body = fn.body
        if not isinstance(body, cst.IndentedBlock):
            self.block(TRAIN_008, fn, f"{fn.name.value} is a one-line function", "give it an indented body")
            return
        for stmt, call in rebinding.items():
            if not self._linear_update(stmt, call, fn, accesses):
                return
        owner = Owner(fn, param.name, self.fresh(fn, "model"), self.fresh(fn, "optimizer"))
        for use in attribute_uses:
            attr = self.parent(use)
            assert isinstance(attr, cst.Attribute)
            field = attr.attr.value
            call = self.parent(attr)
            is_call = isinstance(call, cst.Call) and call.func is attr
            if field == "apply_fn" and is_call:
                if not self._apply(call, owner.model, state_own(group, self.values)):  # type: ignore[arg-type]
                    return
            elif field in ("apply_gradients", "replace") and is_call:
                stmt = self.statement_of(call)  # type: ignore[arg-type]
                if rebinding.get(stmt) is not call and not self._returned_update(call, stmt):  # type: ignore[arg-type]
                    self.block(TRAIN_008, call, f"`{use.value}.{field}(...)` outside `name = ...` / "
                               "`return ...`", "apply the update with optimizer.update(model, grads) by hand")
                    return
                if stmt not in rebinding:
                    rebinding[stmt] = call  # type: ignore[index,assignment]
            elif not is_call and self._field_read(attr, owner):
                pass
            else:
                self.block(TRAIN_008, attr, f"train-state field `{field}` has no NNX counterpart",
                           "use the model / optimizer merged from the split state")
                return
        for stmt, call in rebinding.items():
            if not self._rebind(stmt, call, owner):
                return
        owner.rebinds = bool(rebinding)
        if owner.rebinds:
            owner.uses_optimizer = True
            resplit = f"({param.name}[0], nnx.state(({owner.model}, {owner.optimizer})))"
            receivers = {c.func.value for c in rebinding.values()}  # type: ignore[attr-defined]
            for use in accesses:
                if use not in attribute_uses and use not in receivers and not self._is_target(use):
                    self.edits[use] = Edit(lambda updated, r=resplit: cst.parse_expression(r))
        first = next((s for s in body.body if not is_docstring(s)), None)
        if first is None:
            return
        targets = f"{owner.model}, {owner.optimizer}" if owner.uses_optimizer else f"{owner.model}, _"
        if not owner.uses_optimizer and "_" in names_in(fn):
            targets = owner.model
        merge = f"nnx.merge(*{param.name})" + ("[0]" if targets == owner.model else "")
        self.prelude.setdefault(first, []).insert(0, cst.parse_statement(f"{targets} = {merge}\n"))
        self.note(TRAIN_007, fn, f"{fn.name.value}: train state `{param.name}` read through "
                  f"`{targets} = nnx.merge(*{param.name})`")

    def _update_target(self, use: cst.Name) -> str | None:
        """``new = <use>.apply_gradients(...)`` / ``.replace(...)`` -> ``"new"``."""
        attr = self.parent(use)
        call = self.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is use else None
        if not (isinstance(call, cst.Call) and call.func is attr
                and attr.attr.value in ("apply_gradients", "replace")):  # type: ignore[union-attr]
            return None
        assign = self.parent(call)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target,
                                                                                       cst.Name):
            return assign.targets[0].target.value
        return None

    def _linear_update(self, stmt: cst.CSTNode, call: cst.Call, fn: cst.FunctionDef,
                       accesses: list[cst.Name]) -> bool:
        """NNX updates in place, so ``new = old.apply_gradients(...)`` is only the same program when ``old``
        is never read again: not after the statement, and not on a later turn of a loop around it."""
        receiver = call.func.value  # type: ignore[attr-defined]
        target = stmt.body[0].targets[0].target  # type: ignore[attr-defined]
        if target.value == receiver.value:
            return True
        cur = self.parent(stmt)
        while cur is not None and cur is not fn:
            if isinstance(cur, (cst.For, cst.While)):
                self.block(TRAIN_008, call, f"`{target.value} = {receiver.value}.{call.func.attr.value}(...)` "  # type: ignore[attr-defined]
                           "inside a loop (NNX updates the state in place)", f"rebind `{receiver.value}` itself")
                return False
            cur = self.parent(cur)
        end = self.positions[stmt].end.line
        for use in accesses:
            if use.value == receiver.value and use is not receiver and self.positions[use].start.line > end:
                self.block(TRAIN_008, use, f"`{receiver.value}` read after `{target.value} = "
                           f"{receiver.value}.{call.func.attr.value}(...)` (NNX updates the state in place)",  # type: ignore[attr-defined]
                           "keep what you need from the old state before the update")
                return False
        return True

    def _is_target(self, name: cst.Name) -> bool:
        parent = self.parent(name)
        return isinstance(parent, cst.AssignTarget) and parent.target is name

    def _rebinding_statement(self, target: cst.CSTNode, names: set[str]) -> tuple[cst.CSTNode, cst.Call] | None:
        """``state = state.apply_gradients(...)`` / ``new = state.replace(...)``: (statement, call)."""
        assign_target = self.parent(target)
        assign = self.parent(assign_target) if isinstance(assign_target, cst.AssignTarget) else None
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return None
        call = assign.value
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                and call.func.attr.value in ("apply_gradients", "replace")
                and isinstance(call.func.value, cst.Name) and call.func.value.value in names):
            return None
        stmt = self.statement_of(assign)
        return (stmt, call) if stmt is not None else None

    def _returned_update(self, call: cst.Call, stmt: cst.CSTNode | None) -> bool:
        return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(
            stmt.body[0], cst.Return) and stmt.body[0].value is call

    def _rebind(self, stmt: cst.CSTNode, call: cst.Call, owner: Owner) -> bool:
        field = call.func.attr.value  # type: ignore[attr-defined]
        effects: list[tuple[str, int]] = []  # (statement template, index of the argument it uses)
        for i, arg in enumerate(call.args):
            key = arg.keyword.value if arg.keyword is not None else None
            if field == "apply_gradients" and key == "grads":
                effects.append(("{optimizer}.update({model}, {value})", i))
                owner.uses_optimizer = True
            elif key in STATE_TYPES and (key != "params" or field == "replace"):
                effects.append(("nnx.update({model}, {value})", i))
            else:
                what = f"{key}=" if key else "a positional argument"
                self.block(TRAIN_008, arg, f"{owner.param}.{field}({what}...) has no NNX counterpart",
                           "update the model / optimizer by hand")
                return False
        if field == "apply_gradients" and not any(t.startswith("{optimizer}") for t, _ in effects):
            self.block(TRAIN_008, call, "apply_gradients without grads=", "optimizer.update(model, grads)")
            return False
        returned = self._returned_update(call, stmt)
        resplit = f"({owner.param}[0], nnx.state(({owner.model}, {owner.optimizer})))"
        self.note(TRAIN_006, call, f"{owner.param}.{field}(...) -> "
                  + ("optimizer.update(model, grads)" if field == "apply_gradients" else "nnx.update(model, ...)"))

        def replace(updated: cst.CSTNode) -> list[cst.BaseStatement]:
            assert isinstance(updated, cst.SimpleStatementLine)
            small = updated.body[0]
            new_call = small.value  # type: ignore[attr-defined]
            lines = [template.format(optimizer=owner.optimizer, model=owner.model,
                                     value=code(new_call.args[i].value)) for template, i in effects]
            if returned:
                lines.append(f"return {resplit}")
            out = [cst.parse_statement(line + "\n") for line in lines]
            out[0] = out[0].with_changes(leading_lines=updated.leading_lines)
            return out

        self.replace_stmt[stmt] = replace
        return True

    def _field_read(self, attr: cst.Attribute, owner: Owner) -> bool:
        field = attr.attr.value
        if field == "params":
            expr = f"nnx.state({owner.model}, nnx.Param)"
        elif field in STATE_TYPES:
            expr = f"nnx.state({owner.model}, nnx.{STATE_TYPES[field]})"
        elif field == "step":
            expr, owner.uses_optimizer = f"{owner.optimizer}.step[...]", True
        elif field == "tx":
            expr, owner.uses_optimizer = f"{owner.optimizer}.tx", True
        else:
            return False
        if self._is_target(attr) or isinstance(self.parent(attr), (cst.AugAssign, cst.Del)):
            return False
        extra = " (an unsigned uint32, where Linen's is int32)" if field == "step" else ""
        self.note(TRAIN_007, attr, f"{owner.param}.{field} -> {expr}{extra}")
        self.edits[attr] = Edit(lambda updated, e=expr: cst.parse_expression(e))
        return True


def state_own(group: list[Assignment], values: ValueAnalysis) -> Callable[[str, cst.BaseExpression], bool]:
    """For ``state.apply_fn``: a collection is the state's own when the dict passes ``state.<field>``."""

    def own(key: str, value: cst.BaseExpression) -> bool:
        if not (isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name)):
            return False
        refs = values.referents(value.value)
        return value.attr.value == key and bool(refs) and all(r in group for r in refs)

    return own


# ---- expression helpers ---------------------------------------------------------------------------
def dict_items(node: cst.Dict) -> list[tuple[str | None, cst.BaseExpression]]:
    """``{'params': p, **x}`` -> ``[('params', p), (None, x)]``."""
    out: list[tuple[str | None, cst.BaseExpression]] = []
    for element in node.elements:
        if isinstance(element, cst.DictElement):
            key = element.key.evaluated_value if isinstance(element.key, cst.SimpleString) else None
            out.append((key if isinstance(key, str) else None, element.value))
        else:
            out.append((None, element.value))
    return out


def mutable_collections(node: cst.BaseExpression) -> list[str] | None:
    """``['batch_stats']`` -> ``['batch_stats']``; ``False`` -> ``[]``; anything else -> None."""
    if isinstance(node, cst.Name) and node.value == "False":
        return []
    if isinstance(node, (cst.List, cst.Tuple)):
        out = []
        for element in node.elements:
            if not isinstance(element.value, cst.SimpleString):
                return None
            out.append(str(element.value.evaluated_value))
        return out
    if isinstance(node, cst.SimpleString):
        return [str(node.evaluated_value)]
    return None


def method_name(node: cst.BaseExpression) -> str | None:
    """``method='encode'`` / ``method=Model.encode`` -> ``'encode'``."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) and value.isidentifier() else None
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def input_index(how: str) -> int:
    """The positional input a new constructor argument comes from (``input:0``, ``input_shape:0``); -1
    for one no input gives."""
    return int(how.split(":")[1]) if how.startswith(("input:", "input_shape:")) else -1


def input_size(node: cst.BaseExpression, how: str) -> cst.BaseExpression:
    """What a new constructor argument takes from the input ``node``: its shape, or its last axis."""
    if not how.startswith("input_shape:"):
        return last_axis(node)
    if needs_parens(node) or isinstance(node, (cst.Await, cst.Yield, cst.NamedExpr)):
        node = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.parse_expression(f"{code(node)}.shape")


def last_axis(node: cst.BaseExpression) -> cst.BaseExpression:
    """``x`` -> ``x.shape[-1]`` (parenthesised where needed)."""
    if needs_parens(node) or isinstance(node, (cst.Await, cst.Yield, cst.NamedExpr)):
        node = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.parse_expression(f"{code(node)}.shape[-1]")


def _pure(node: cst.BaseExpression) -> bool:
    """Safe to evaluate twice: a name, an attribute / subscript chain, or jax.random.key(...) of those."""
    if isinstance(node, cst.Name):
        return True
    if isinstance(node, cst.Attribute):
        return _pure(node.value)
    if isinstance(node, cst.Subscript):
        return _pure(node.value) and all(isinstance(e.slice, cst.Index) and _pure_or_literal(e.slice.value)
                                         for e in node.slice)
    if isinstance(node, cst.Call) and code(node.func) in ("jax.random.key", "jax.random.PRNGKey", "random.key",
                                                         "random.PRNGKey"):
        return all(a.keyword is None and not a.star and _pure_or_literal(a.value) for a in node.args)
    return False


def _bare(arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=cst.SimpleWhitespace(""))


def _pure_or_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Integer, cst.SimpleString)) or _pure(node) or (
        isinstance(node, cst.BinaryOperation) and _pure_or_literal(node.left) and _pure_or_literal(node.right))


def rngs_expr(node: cst.BaseExpression, streams: list[str]) -> cst.BaseExpression:
    """Linen init rngs -> ``nnx.Rngs``: a key seeds the default stream (Linen's ``params``); each stream
    the apply calls reseed is named too, so that ``nnx.reseed`` finds it (a placeholder seed, replaced
    before any train-mode call)."""
    if isinstance(node, cst.Dict):
        items = [(k, v) for k, v in dict_items(node) if k is not None]
        given = {k for k, _ in items}
        base = next((v for k, v in items if k == "params"), items[0][1] if items else None)
        seed = code(base) if base is not None and _pure(base) else "0"
        parts = [f"{k}={code(v)}" for k, v in items] + [f"{s}={seed}" for s in streams if s not in given]
        return cst.parse_expression(f"nnx.Rngs({', '.join(parts)})")
    seed = code(node) if _pure(node) else "0"
    parts = [code(node)] + [f"{s}={seed}" for s in streams]
    return cst.parse_expression(f"nnx.Rngs({', '.join(parts)})")


def with_args(call: cst.Call, args: list[cst.Arg], func: cst.BaseExpression | None = None) -> cst.Call:
    """``call`` with ``args`` (a subset or extension of its own), keeping its layout: a comma after every
    argument but the last, which takes the old last argument's comma and trailing whitespace."""
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    old_last = call.args[-1] if call.args else None
    out = []
    for i, arg in enumerate(args):
        if i < len(args) - 1:
            if not isinstance(arg.comma, cst.Comma) or arg is old_last:
                arg = arg.with_changes(comma=comma, whitespace_after_arg=cst.SimpleWhitespace(""))
        elif old_last is not None:
            arg = arg.with_changes(comma=old_last.comma, whitespace_after_arg=old_last.whitespace_after_arg)
        else:
            arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        out.append(arg)
    return call.with_changes(func=func if func is not None else call.func, args=out)


# ---- rewriting ---------------------------------------------------------------------------------------
class TrainRewriter(cst.CSTTransformer):
    """Applies a :class:`TrainPlanner`'s plan bottom-up (edits see their children already rewritten)."""

    def __init__(self, planner: TrainPlanner, markers: Mapping[cst.CSTNode, list[str]], apply_edits: bool):
        super().__init__()
        self.planner = planner
        self.markers = markers
        self.apply_edits = apply_edits
        self.pending: dict[cst.CSTNode, list[cst.BaseStatement]] = {}

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode | cst.FlattenSentinel:  # type: ignore[override]
        updated = super().on_leave(original, updated)  # type: ignore[assignment]
        plan = self.planner
        if self.apply_edits:
            edit = plan.edits.get(original)
            if edit is not None:
                if edit.before is not None and edit.stmt is not None:
                    self.pending.setdefault(edit.stmt, []).extend(edit.before(updated))
                updated = edit.build(updated)
        if not isinstance(original, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return updated
        notes = [n for n in self.markers.get(original, [])
                 if n not in {line.comment.value for line in updated.leading_lines if line.comment}]  # type: ignore[attr-defined]
        if notes:
            comments = [cst.EmptyLine(comment=cst.Comment(n)) for n in dict.fromkeys(notes)]
            updated = updated.with_changes(leading_lines=[*updated.leading_lines, *comments])  # type: ignore[attr-defined]
        if not self.apply_edits:
            return updated
        out: list[cst.BaseStatement] = [*plan.prelude.get(original, []), *self.pending.pop(original, [])]
        replace = plan.replace_stmt.get(original)
        body = replace(updated) if replace is not None else [updated]  # type: ignore[list-item]
        if original in plan.split_tuple:
            body = split_pair(body[0])  # type: ignore[arg-type]
        if plan.wrap.get(original):
            body = [wrap_in(body, plan.wrap[original])]
        body += [cst.parse_statement(line + "\n") for line in plan.after.get(original, [])]
        if not out:
            return cst.FlattenSentinel(body) if len(body) != 1 else body[0]
        # the statement's comments and blank lines now lead the inserted ones
        out[0] = out[0].with_changes(leading_lines=body[0].leading_lines)
        body[0] = body[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)] if isinstance(
            body[0], (cst.FunctionDef, cst.ClassDef)) or isinstance(out[-1], cst.FunctionDef) else [])
        block = plan.parent(original)
        first = isinstance(block, (cst.IndentedBlock, cst.Module)) and block.body and block.body[0] is original
        if isinstance(out[0], cst.FunctionDef) and not first and not (
                out[0].leading_lines and out[0].leading_lines[0].comment is None):  # a blank line before a def
            out[0] = out[0].with_changes(leading_lines=[cst.EmptyLine(indent=False), *out[0].leading_lines])
        return cst.FlattenSentinel([*out, *body])


def wrap_in(body: list[cst.BaseStatement], managers: list[str]) -> cst.With:
    """``with <managers>:`` around ``body``; the first statement's comments and blank lines lead the block."""
    items = [cst.WithItem(cst.parse_expression(m), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
             for m in managers]
    items[-1] = items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    inner = [body[0].with_changes(leading_lines=[]), *body[1:]]
    return cst.With(items, cst.IndentedBlock(inner), leading_lines=body[0].leading_lines)  # type: ignore[arg-type]


def split_pair(stmt: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
    """``a, b = (x, y)`` -> ``a = x`` and ``b = y`` (``y`` reads neither ``a`` nor ``b``: it is built here)."""
    small = stmt.body[0]
    if not (isinstance(small, cst.Assign) and isinstance(small.value, cst.Tuple)
            and isinstance(small.targets[0].target, cst.Tuple)):
        return [stmt]
    pairs = zip(small.targets[0].target.elements, small.value.elements)
    out: list[cst.BaseStatement] = [cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(t.value)], v.value)])
                                    for t, v in pairs]
    out[0] = out[0].with_changes(leading_lines=stmt.leading_lines)
    return out


# ---- entry point ---------------------------------------------------------------------------------------
def migrate_training(code_text: str, original: str, *, path: str, module_name: str,
                     local: Mapping[str, ClassSummary], external: Mapping[str, ClassSummary],
                     rule_enabled: Callable[[str], bool]) -> tuple[str, list[Finding]]:
    """Rewrite the training code of one file (the module codemod's output). Findings carry the line
    numbers of ``original`` (the input of the whole migration)."""
    if not mentions_training(code_text) or not any(rule_enabled(r.id) for r in training_rules.RULES):
        return code_text, []
    if "nnx" in original and "linen" not in original:
        return code_text, []  # NNX code already (flax.training's TrainState works with NNX states too)
    if any(f"{MARKER} {rule}" in original for rule in BLOCKING):
        return code_text, []  # left to a person by an earlier run: its markers say why (delete them to retry)
    wrapper = MetadataWrapper(cst.parse_module(code_text), unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    values = ValueAnalysis(wrapper, local, external, module_name)
    planner = TrainPlanner(wrapper, values, sharding=uses_sharding(original))
    planner.run()
    blocked = planner.blocked
    notes = [n for n in planner.notes if n.rule.blocks_rewrite] if blocked else planner.notes
    notes = [n for n in notes if rule_enabled(n.rule.id)]
    to_input = line_map(code_text, original)
    findings: list[Finding] = []
    markers: dict[cst.CSTNode, list[str]] = {}
    for n in notes:
        pos = positions.get(n.node)
        line, col = (to_input(pos.start.line), pos.start.column + 1) if pos else (1, 1)
        severity = n.rule.severity
        findings.append(Finding(n.rule.id, severity, path, line, col, n.message, n.hint))
        if severity is Severity.MANUAL:
            stmt = planner.statement_of(n.node)
            if stmt is not None:
                markers.setdefault(stmt, []).append(f"{MARKER} {n.rule.id} {n.message}")
    rewrites = planner.edits or planner.replace_stmt or planner.wrap or planner.after
    if not blocked and not rewrites and not markers:
        return code_text, findings
    module = wrapper.module.visit(TrainRewriter(planner, markers, apply_edits=not blocked))
    if not blocked and rewrites:
        module = ensure_nnx_import(module)
        if planner.uses_partial:
            module = ensure_import(module, "functools")
        if "jax.sharding.get_abstract_mesh()" in code_of(module):
            module = ensure_import(module, "jax")
        module = drop_unused_train_state_import(module)
    return code_of(module), findings


def line_map(new: str, old: str) -> Callable[[int], int]:
    """Map 1-based line numbers of ``new`` back to ``old`` (unchanged lines exactly; a changed block to
    the start of the block it replaced)."""
    a, b = old.splitlines(), new.splitlines()
    table: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            table[j + 1] = (i1 + (j - j1) if tag == "equal" else min(i1 + (j - j1), max(i2 - 1, i1))) + 1
    return lambda line: table.get(line, line)


def ensure_import(module: cst.Module, name: str) -> cst.Module:
    """``import <name>`` unless the module binds it at top level; placed before the first import."""
    body = list(module.body)
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import) and any(
                        code(a.name) == name and a.asname is None for a in small.names):
                    return module
    index = next((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine) and any(
        isinstance(x, (cst.Import, cst.ImportFrom)) and not (
            isinstance(x, cst.ImportFrom) and x.module is not None and code(x.module) == "__future__")
        for x in s.body)), None)
    if index is None:
        index = next((i for i, s in enumerate(body) if not is_docstring(s)), len(body))
    statement = cst.parse_statement(f"import {name}\n")
    if index < len(body):
        statement = statement.with_changes(leading_lines=body[index].leading_lines)
        body[index] = body[index].with_changes(leading_lines=[])
    body.insert(index, statement)
    return module.with_changes(body=body)


def drop_unused_train_state_import(module: cst.Module) -> cst.Module:
    """Remove ``from flax.training import train_state`` (and aliases) once nothing uses the name."""
    used: set[str] = set()
    for stmt in module.body:
        if not (isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)):
            used |= names_in(stmt)
    body: list[cst.BaseStatement] = []
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            smalls = []
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and small.module is not None \
                        and code(small.module) == "flax.training" and not isinstance(small.names, cst.ImportStar):
                    keep = [a for a in small.names if not (a.name.value == "train_state" and code(
                        a.asname.name if a.asname else a.name) not in used)]
                    if not keep:
                        continue
                    small = small.with_changes(names=[*keep[:-1], keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
                elif isinstance(small, cst.Import):
                    keep = [a for a in small.names if not (code(a.name) == "flax.training.train_state" and a.asname
                                                           is not None and code(a.asname.name) not in used)]
                    if not keep:
                        continue
                    small = small.with_changes(names=[*keep[:-1], keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
                smalls.append(small)
            if not smalls:
                continue
            smalls[-1] = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            stmt = stmt.with_changes(body=smalls)
        body.append(stmt)
    return module.with_changes(body=body)
