"""Check a mapping against the target NNX model before a single byte is written.

The target is built abstractly (``nnx.eval_shape``), so validation allocates no weights. Rules:
every ``Param`` / ``BatchStat`` slot (and every ``Cache`` slot when the checkpoint has a ``cache``
collection) is filled exactly once, with the same shape and dtype; every Linen leaf has a home of
the right Variable type. Everything else in the NNX state (``RngKey`` / ``RngCount`` under
``rngs``, see docs/nnx_facts.md#seeds-dropout-and-rng-state) is kept from a fresh init. All problems are collected and raised
together as one :class:`~linen2nnx.errors.ConversionError`, because fixing them one run at a time is
slow and ``nnx.replace_by_pure_dict`` would silently accept most of them (docs/nnx_facts.md#replace_by_pure_dict-checks-neither-shapes-nor-coverage).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from linen2nnx import trees
from linen2nnx.checkpoint_convert.keys import key_fit, same_dtype
from linen2nnx.checkpoint_convert.mapping import Leaf, Match, PathT, Problem, Slot, join, variable_type
from linen2nnx.errors import ConversionError, L2NError

#: Collections whose NNX slots must all be filled even when the checkpoint lacks the collection.
ALWAYS_REQUIRED = ("params", "batch_stats")


@dataclasses.dataclass
class Target:
    """The abstract NNX model: its graphdef, abstract state and flat slot table."""

    graphdef: Any
    abstract_state: Any
    slots: dict[PathT, Slot]
    name: str
    aliases: dict[PathT, PathT] = dataclasses.field(default_factory=dict)
    """Another path of a Variable the model holds in several places (one embedding shared by an
    encoder and a decoder) -> the path ``nnx.state`` lists it under, which is the one filled."""


def abstract_target(make_nnx: Any, name: str = "") -> Target:
    """Build the target model with ``nnx.eval_shape`` (shapes only) and list its state leaves."""
    from flax import nnx

    try:
        abstract = nnx.eval_shape(make_nnx)
    except Exception as e:
        raise L2NError(
            f"cannot build the target NNX model{f' {name}' if name else ''}: {type(e).__name__}: {e}"
        ) from e
    graphdef, state = nnx.split(abstract)
    slots: dict[PathT, Slot] = {}
    for path, var in nnx.to_flat_state(state):
        value = var.get_value() if isinstance(var, nnx.Variable) else var
        vtype = type(var) if isinstance(var, nnx.Variable) else object
        slots[tuple(path)] = Slot(
            tuple(path), vtype, tuple(getattr(value, "shape", ())), getattr(value, "dtype", None)
        )
    return Target(graphdef, state, slots, name or type(abstract).__name__, shared_paths(abstract, slots))


def shared_paths(model: Any, slots: dict[PathT, Slot]) -> dict[PathT, PathT]:
    """Every path of a Variable reachable from ``model`` through more than one attribute path, other
    than the one ``nnx.state`` keeps, mapped to that one. The name map spells a shared module where
    Linen keeps its parameters, which may be where NNX's state does not list it."""
    from flax import nnx
    from flax.nnx import graph

    found: dict[int, list[PathT]] = defaultdict(list)

    def walk(node: Any, path: PathT, ancestors: frozenset[int]) -> None:
        impl = graph.get_node_impl(node)
        if impl is None or id(node) in ancestors:
            return
        for key, child in impl.node_dict(node).items():
            if isinstance(child, nnx.Variable):
                found[id(child)].append((*path, key))
            elif graph.get_node_impl(child) is not None:
                walk(child, (*path, key), ancestors | {id(node)})

    walk(model, (), frozenset())
    aliases: dict[PathT, PathT] = {}
    for paths in found.values():
        kept = [p for p in paths if p in slots]
        if len(paths) > 1 and len(kept) == 1:
            aliases.update({p: kept[0] for p in paths if p != kept[0]})
    return aliases


def fresh_leaves(build: Any, paths: set[PathT]) -> dict[PathT, Any]:
    """The Variables at ``paths`` of a graph node ``build()`` makes, from one jitted init in which only
    they leave, so that XLA drops every other initialiser (a 7B model is never allocated for them)."""
    import jax
    from flax import nnx

    state = jax.jit(lambda: nnx.state(build(), lambda path, _: tuple(path) in paths))()
    return {tuple(path): var for path, var in nnx.to_flat_state(state)}


def required_types(collections: Iterable[str]) -> tuple[type, ...]:
    """Variable types whose every slot must come from the checkpoint."""
    return tuple(variable_type(c) for c in sorted({*ALWAYS_REQUIRED, *collections}))


def validate(
    leaves: list[Leaf],
    matches: list[Match],
    problems: list[Problem],
    target: Target,
    collections: Iterable[str],
) -> tuple[list[Match], list[Slot], list[Problem]]:
    """Return (good matches, slots kept from init, all problems) — nothing is raised here."""
    problems = list(problems)
    matches = [
        dataclasses.replace(m, nnx_path=target.aliases[m.nnx_path]) if m.nnx_path in target.aliases else m
        for m in matches
    ]
    named = {n for p in problems if p.linen for n in p.linen.split(", ")}
    named_nnx = {n for p in problems if p.nnx for n in p.nnx.split(", ")}
    by_slot: dict[PathT, list[Match]] = defaultdict(list)
    good: list[Match] = []
    for m in matches:
        problem = _match_problem(m, target)
        if problem is not None and problem.kind in ("no NNX home", "type mismatch"):
            problems.append(problem)
            continue
        by_slot[m.nnx_path].append(m)
        if problem is not None:
            problems.append(problem)
        else:
            good.append(_key_noted(m, target))
    problems += _filled_twice(by_slot)
    dup = {p for p, ms in by_slot.items() if len(ms) > 1}
    good = [m for m in good if m.nnx_path not in dup]
    matched = {m.leaf for m in matches}
    problems += [_homeless(leaf) for leaf in leaves if leaf not in matched and leaf.name not in named]
    kept, unfilled = _unfilled_slots(target, by_slot, required_types(collections), named_nnx)
    return good, kept, problems + unfilled


def _match_problem(m: Match, target: Target) -> Problem | None:
    """What is wrong with one Linen leaf -> NNX slot match, if anything."""
    slot = target.slots.get(m.nnx_path)
    leaf = m.leaf
    nnx_name = join(m.nnx_path)
    if slot is None:
        return Problem(
            "no NNX home",
            leaf.name,
            nnx_name,
            f"the target model has no state at this path (got {_fmt(leaf)})",
        )
    want = variable_type(leaf.collection)
    if not issubclass(slot.var_type, want):
        return Problem(
            "type mismatch",
            leaf.name,
            nnx_name,
            f"expected a {want.__name__} slot, the target has a {slot.type_name}",
        )
    if key_fit(slot.shape, slot.dtype, leaf.shape, leaf.dtype) is not None:
        return None  # a PRNG key's raw data into a typed key slot, or the reverse (keys.py)
    if tuple(slot.shape) != tuple(leaf.shape):
        return Problem("shape mismatch", leaf.name, nnx_name, f"expected {_fmt(slot)}, got {_fmt(leaf)}")
    if not same_dtype(slot.dtype, leaf.dtype):
        return Problem("dtype mismatch", leaf.name, nnx_name, f"expected {_fmt(slot)}, got {_fmt(leaf)}")
    return None


def _key_noted(m: Match, target: Target) -> Match:
    """``m`` with ``how`` saying its key data is wrapped (or unwrapped) when filled, else as it is."""
    slot = target.slots[m.nnx_path]
    how = key_fit(slot.shape, slot.dtype, m.leaf.shape, m.leaf.dtype)
    return m if how is None else dataclasses.replace(m, how=how)


def _filled_twice(by_slot: dict[PathT, list[Match]]) -> list[Problem]:
    return [
        Problem(
            "filled twice",
            ", ".join(m.leaf.name for m in ms),
            join(path),
            f"{len(ms)} Linen leaves map to one NNX slot",
        )
        for path, ms in sorted(by_slot.items(), key=lambda kv: join(kv[0]))
        if len(ms) > 1
    ]


def _homeless(leaf: Leaf) -> Problem:
    return Problem(
        "no NNX home",
        leaf.name,
        None,
        f"no NNX slot of type {variable_type(leaf.collection).__name__} matches this path (got {_fmt(leaf)})",
    )


def _unfilled_slots(
    target: Target, by_slot: dict[PathT, list[Match]], required: tuple[type, ...], named_nnx: set[str]
) -> tuple[list[Slot], list[Problem]]:
    """Slots no leaf fills: kept from init (rng state, ...) or, for a required type, a problem."""
    kept: list[Slot] = []
    problems: list[Problem] = []
    for path, slot in sorted(target.slots.items(), key=lambda kv: join(kv[0])):
        if path in by_slot:
            continue
        if not issubclass(slot.var_type, required) and issubclass(slot.var_type, _runtime_types()):
            kept.append(slot)
        elif join(path) not in named_nnx:
            problems.append(
                Problem(
                    "not filled",
                    None,
                    join(path),
                    f"no Linen leaf maps to this {slot.type_name} {_fmt(slot)}",
                )
            )
    return kept, problems


def _runtime_types() -> tuple[type, ...]:
    """Variable types a model makes afresh at run time (RNG streams, a decode cache, sown values and
    perturbations): a checkpoint without them loses nothing. Any other Variable (a custom collection
    such as an EMA) holds trained state, so one the checkpoint does not fill is a problem, not a silent
    init value (unless Linen's init never creates it, :mod:`.linen_unused`)."""
    from flax import nnx

    return (nnx.RngState, nnx.Cache, nnx.Intermediate, nnx.Perturbation)


def raise_problems(problems: list[Problem], source: str, target: str) -> None:
    """One ConversionError that names every problem, sorted so the message is stable."""
    if not problems:
        return
    lines = sorted({str(p) for p in problems})
    hints = "".join(f"\n  hint: {hint}" for hint in problem_hints(problems))
    raise ConversionError(
        f"cannot convert {source} into {target}: {len(lines)} problem(s), nothing written\n"
        + "\n".join(f"  - {line}" for line in lines)
        + hints
    )


def problem_hints(problems: list[Problem]) -> list[str]:
    """What a whole class of problems usually means, said once: a variables dict saved where the
    params go (every homeless leaf under ``params/params/``), or a checkpoint in another float dtype
    than the model the spec builds (convert never casts: a silent cast would hide a lost precision)."""
    hints = []
    homeless = [p.linen for p in problems if p.kind == "no NNX home" and p.linen]
    if homeless and all(name.startswith("params/params/") for name in homeless):
        hints.append(
            "every unplaced leaf is under params/params/: the checkpoint's 'params' holds a whole Linen "
            "variables dict ({'params': {'params': ...}}, e.g. TrainState.create(params=model.init(...))); "
            "save variables['params'] as the params, or re-save the checkpoint with that level removed"
        )
    if any(p.kind == "dtype mismatch" for p in problems):
        hints.append(
            "the checkpoint's dtypes differ from those of the NNX model the spec builds; convert does not "
            "cast: build the model with the checkpoint's param_dtype in the spec, or cast the checkpoint first"
        )
    return hints


def _fmt(x: Slot | Leaf) -> str:
    return f"{tuple(x.shape)} {dtype_name(x.dtype)}"


def dtype_name(dtype: Any) -> str:
    """``float32`` for numpy dtypes, the jax spelling for the rest (``key<fry>``), ``?`` when unknown."""
    return trees.dtype_name(dtype, missing="?")
