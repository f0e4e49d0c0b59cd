"""Matmul precision and accumulation dtype, module by module, read from the traced programs.

``precision=jax.lax.Precision.HIGHEST`` dropped in a migration changes nothing on CPU (XLA:CPU
computes every float32 dot in full float32) but a lot on a TPU / GPU, where DEFAULT means bfloat16
passes or TF32. Comparing numbers on CPU cannot catch it, so this check compares the programs: both
eval forwards are traced to jaxprs with every module call wrapped in a ``jax.named_scope`` naming
the module, and each ``dot_general`` / ``conv_general_dilated`` is attributed to the innermost
module scope around it (sub-jaxprs of scans, remat and jit included). For each NNX module the
multiset of ``(primitive, operand dtypes, precision, preferred_element_type)`` must equal the Linen
module's: a dropped ``dtype=jnp.bfloat16`` shows as float32 operands where Linen's were bfloat16, which
the numbers alone cannot tell apart once the tolerance is bfloat16's (:func:`linen_compute_dtype`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import jax

from linen2nnx.equivalence.capture import PathT, linen_hooked, nnx_hooked, tag_modules
from linen2nnx.equivalence.compare import LeafResult, missing
from linen2nnx.equivalence.modmap import ModuleMap, join
from linen2nnx.equivalence.randomness import same_keys
from linen2nnx.equivalence.sown import linen_sown_to_nnx, quiet_sow, sown_collections, sown_tree

CHECK = "precision"
SHARDING = "sharding"  # activation sharding constraints, compared the same way (under a mesh)
DOT_PRIMITIVES = ("dot_general", "conv_general_dilated", "ragged_dot_general")
_SCOPE = "l2n<"
_SCOPE_RE = re.compile(r"l2n<([^>]*)>")


def _scope_hook(
    path: PathT, kind: str, has_params: bool, fn: Callable[..., Any], args: tuple, kwargs: dict
) -> Any:
    with jax.named_scope(_SCOPE + "|".join(path) + ">"):
        return fn(*args, **kwargs)


def _linen_scope_hook() -> Callable[..., Any]:
    """:func:`_scope_hook` for Linen, where a submodule applied by hand inside another module's call
    (``self.conv.apply({'params': {'kernel': w}}, x)``: weight norm, a tied head) runs as an unbound
    clone whose path is the root's: its dots belong to the module whose call runs it (NNX runs the
    merged copy there too), not to the root, which would then compare the whole model's dots."""
    active: list[PathT] = []

    def hook(
        path: PathT, kind: str, has_params: bool, fn: Callable[..., Any], args: tuple, kwargs: dict
    ) -> Any:
        if not path and active:
            path = active[-1]
        active.append(path)
        try:
            return _scope_hook(path, kind, has_params, fn, args, kwargs)
        finally:
            active.pop()

    return hook


def _precision_name(p: Any) -> str:
    if p is None:
        return "DEFAULT"
    if isinstance(p, (tuple, list)):
        names = [_precision_name(x) for x in p]
        return names[0] if len(set(names)) == 1 else ",".join(names)
    return getattr(p, "name", str(p))


def _sub_jaxprs(params: dict[str, Any]) -> Iterator[Any]:
    from jax.extend import core as jcore

    for value in params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, jcore.ClosedJaxpr):
                yield v.jaxpr
            elif isinstance(v, jcore.Jaxpr):
                yield v


def _dot_signature(eqn: Any) -> str | None:
    """``dot_general(float32,float32, precision=HIGHEST, preferred=None)`` for a matmul or conv."""
    if eqn.primitive.name not in DOT_PRIMITIVES:
        return None
    pet = eqn.params.get("preferred_element_type")
    if pet is not None and all(getattr(v.aval, "dtype", None) == pet for v in eqn.invars[:2]):
        pet = None  # accumulating float32 operands in float32 is the default, spelled or not
    operands = ",".join(str(getattr(v.aval, "dtype", "?")) for v in eqn.invars[:2])
    return (
        f"{eqn.primitive.name}({operands}, precision={_precision_name(eqn.params.get('precision'))}, "
        f"preferred={getattr(pet, 'name', pet)})"
    )


def constraint_signature(eqn: Any) -> str | None:
    """``sharding_constraint(P('data', None, 'tensor'))`` for an activation sharding constraint (what
    ``nn.with_logical_constraint`` becomes under a mesh: its names already mapped to mesh axes)."""
    if eqn.primitive.name != "sharding_constraint":
        return None
    sharding = eqn.params.get("sharding")
    spec = getattr(sharding, "spec", sharding)
    return f"sharding_constraint(P({', '.join(repr(e) for e in tuple(spec or ()))}))"


def module_ops(jaxpr: Any, signature: Callable[[Any], str | None] = _dot_signature) -> dict[PathT, list[str]]:
    """``{module path: ['dot_general(precision=HIGHEST, preferred=None)', ...]}`` for a traced program:
    the operations ``signature`` names (dots by default; :func:`constraint_signature` for constraints)."""
    out: dict[PathT, list[str]] = defaultdict(list)

    def walk(jx: Any, prefix: str) -> None:
        for eqn in jx.eqns:
            stack = f"{prefix}/{eqn.source_info.name_stack}"
            sig = signature(eqn)
            if sig is not None:
                scopes = _SCOPE_RE.findall(stack)
                out[tuple(scopes[-1].split("|")) if scopes and scopes[-1] else ()].append(sig)
            for sub in _sub_jaxprs(eqn.params):
                walk(sub, stack)

    walk(jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") else jaxpr, "")
    return dict(out)


COARSE_FLOATS = ("float16", "bfloat16")


def linen_compute_dtype(
    pair: Any, variables: Any, module_map: ModuleMap | None = None
) -> tuple[str | None, frozenset[str]]:
    """``(compute dtype, exact outputs)`` of the Linen eval forward, traced once (shapes only: nothing
    runs). The compute dtype is the 16-bit float it computes in (an operation's result in it,
    sub-jaxprs included), the coarser one when it uses both; None for a program in float32 or wider.
    The exact outputs are the output leaves (``out[0]``, as :func:`.compare.compare_outputs` names
    them) that no 16-bit operation feeds: the backward slice of each, an operation with a sub-program
    counted as coarse when anything inside it is; empty when the program has no 16-bit operation.
    With ``module_map``, the sown values no 16-bit operation feeds too, under the NNX paths the
    ``intermediates`` check names them by: a float32 auxiliary loss beside bfloat16 experts is
    judged at float32."""
    side = pair.linen
    args, kwargs = side.call_args(False)
    rngs = side.apply_rngs()
    with same_keys():
        closed, (out_shape, updates) = jax.make_jaxpr(
            lambda v: side.model.apply(v, *args, **kwargs, rngs=rngs, mutable=list(sown_collections())),
            return_shape=True,
        )(variables)
    jx = closed.jaxpr
    found = next((d for d in reversed(COARSE_FLOATS) if d in _dtypes(jx)), None)
    if found is None:
        return None, frozenset()
    exact_vars = [not coarse for coarse in _coarse_outputs(jx, [False] * len(jx.invars))]
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(out_shape)[0]]
    exact = {"out" + path for path, ok in zip(paths, exact_vars) if ok}
    sown = sown_tree(updates) if module_map is not None else {}
    if sown:  # each sown leaf numbered by its place among the program's outputs, then placed
        numbered = jax.tree.unflatten(jax.tree.structure(sown), range(len(paths), len(exact_vars)))
        placed = linen_sown_to_nnx(numbered, module_map)
        exact |= {path for path, index in placed.items() if exact_vars[index]}
    return found, frozenset(exact)


def _coarse_outputs(jx: Any, coarse_in: list[bool]) -> list[bool]:
    """For each output of ``jx``, whether a 16-bit operation is in its backward slice, given that of
    each input. A scan, a jit or a remat is followed inside (per output: a float32 value sown in a
    scanned layer beside a bfloat16 one stays exact); any other operation with a sub-program counts
    as coarse for all its outputs when anything inside it is."""
    from jax.extend import core as jcore

    coarse_of: dict[Any, bool] = dict(zip(jx.invars, coarse_in))
    coarse_of.update((v, _is_coarse(v)) for v in jx.constvars)
    for eqn in jx.eqns:
        ins = [not isinstance(v, jcore.Literal) and coarse_of.get(v, False) for v in eqn.invars]
        outs = _followed(eqn, ins)
        if outs is None:
            here = any(_is_coarse(v) for v in eqn.outvars)
            here = here or any(_dtypes(sub) & set(COARSE_FLOATS) for sub in _sub_jaxprs(eqn.params))
            outs = [here or any(ins)] * len(eqn.outvars)
        coarse_of.update(zip(eqn.outvars, outs))
    return [not isinstance(v, jcore.Literal) and coarse_of.get(v, False) for v in jx.outvars]


def _followed(eqn: Any, ins: list[bool]) -> list[bool] | None:
    """:func:`_coarse_outputs` of a scan's body (its carries to a fixed point) or of a jit's or remat's
    program, per output of ``eqn``; None for any other operation."""
    params = eqn.params
    sub = params.get("jaxpr")
    sub = getattr(sub, "jaxpr", sub)
    if sub is None or not hasattr(sub, "eqns") or len(sub.invars) != len(ins):
        return None
    if eqn.primitive.name == "scan":
        consts, carries = params["num_consts"], params["num_carry"]
        carry = ins[consts : consts + carries]
        for _ in range(carries + 1):  # a carry once coarse stays so: at most one change per carry
            outs = _coarse_outputs(sub, [*ins[:consts], *carry, *ins[consts + carries :]])
            grown = [a or b for a, b in zip(carry, outs[:carries])]
            if grown == carry:
                break
            carry = grown
    elif eqn.primitive.name in ("pjit", "jit", "remat", "checkpoint", "closed_call", "core_call"):
        outs = _coarse_outputs(sub, ins)
    else:
        return None
    return [c or _is_coarse(v) for c, v in zip(outs, eqn.outvars)]


def _is_coarse(var: Any) -> bool:
    return str(getattr(getattr(var, "aval", None), "dtype", "")) in COARSE_FLOATS


def _dtypes(jx: Any) -> set[str]:
    """The dtypes of every operation's results in ``jx``, sub-jaxprs included."""
    seen: set[str] = set()
    for eqn in jx.eqns:
        seen.update(str(getattr(v.aval, "dtype", "")) for v in eqn.outvars)
        for sub in _sub_jaxprs(eqn.params):
            seen |= _dtypes(sub)
    return seen


def linen_program(pair: Any, variables: Any) -> Any:
    """The Linen eval forward traced with every module call in a scope naming its path (nothing runs)."""
    side = pair.linen
    args, kwargs = side.call_args(False)
    rngs = side.apply_rngs()  # a model that draws (make_rng) at eval
    with linen_hooked(_linen_scope_hook()), same_keys():
        return jax.make_jaxpr(lambda v: side.model.apply(v, *args, **kwargs, rngs=rngs))(variables)


def nnx_program(pair: Any, model: Any) -> Any:
    """The NNX eval forward traced the same way, by NNX module path (on a tagged clone)."""
    from flax import nnx

    clone = nnx.clone(model)
    tag_modules(clone)
    gdef, state = nnx.split(clone)
    args, kwargs = pair.linen.call_args(False)
    with nnx_hooked(clone, _scope_hook), quiet_sow():
        return jax.make_jaxpr(lambda s: nnx.merge(gdef, s)(*args, **kwargs))(state)


def precision_leaves(pair: Any, sides: Any, module_map: ModuleMap) -> list[LeafResult]:
    """One ``precision`` leaf per NNX module whose dots can be compared with its Linen module's.

    A module that runs as many dots on both sides compares their multisets: one of two
    ``precision=HIGHEST`` einsums dropped fails though both sides still run some HIGHEST and some
    DEFAULT dot. Where the numbers differ, the *sets* of dot signatures are compared (Linen's
    ``OptimizedLSTMCell`` runs one fused dot where ``nnx.LSTMCell`` runs eight). A module compares its own dots when both sides
    run some; when only one side does (a fused computation on one side, children's dots on the
    other), that side's own dots meet the other side's whole subtree; a module with no dots of its
    own on either side gives no leaf, so a precision slip fails the module it is in, not its parents.
    A Linen module the module map cannot place gives its dots to its nearest mapped ancestor.
    """
    programs = linen_program(pair, sides.linen_variables), nnx_program(pair, sides.nnx_model)
    linen_own, nnx_own = _owned(programs, module_map, module_ops)
    results = constraint_leaves(*_owned(programs, module_map, lambda j: module_ops(j, constraint_signature)))
    for path in sorted(set(linen_own) | set(nnx_own)):
        count_l, count_n = linen_own.get(path, Counter()), nnx_own.get(path, Counter())
        mine_l, mine_n = set(count_l), set(count_n)
        if mine_l and mine_n and count_l.total() == count_n.total():
            ref, got = count_l, count_n  # as many dots: each signature as often
        elif mine_l and mine_n:
            ref, got = mine_l, mine_n
        elif mine_l:
            ref, got = mine_l, _subtree(nnx_own, path)
        else:
            ref, got = _subtree(linen_own, path), mine_n
        if not ref or not got:
            continue  # the other side runs no dot here at all: a structural difference the numbers judge
        n = sum(linen_own.get(path, Counter()).values()) or sum(nnx_own.get(path, Counter()).values())
        if ref == got:
            results.append(LeafResult(CHECK, path, (n,), 0.0, 0.0, 0.0, 1.0, 0.0, True, _fmt(ref)))
        else:
            results.append(missing(CHECK, path, (n,), f"Linen {_fmt(ref)}; NNX {_fmt(got)}"))
    return results


def _owned(
    programs: tuple[Any, Any], module_map: ModuleMap, ops: Callable[[Any], dict[PathT, list[str]]]
) -> tuple[dict[str, Counter[str]], dict[str, Counter[str]]]:
    """The operations ``ops`` picks from each side's program, by NNX module path (a Linen module the
    module map cannot place gives them to ``linen:<its path>``)."""
    linen_own: dict[str, Counter[str]] = defaultdict(Counter)
    for lpath, found in ops(programs[0]).items():
        target = module_map.owner(lpath)
        linen_own[join(target) if target is not None else "linen:" + join(lpath)].update(found)
    return linen_own, {join(p): Counter(found) for p, found in ops(programs[1]).items()}


def constraint_leaves(
    linen_own: dict[str, Counter[str]], nnx_own: dict[str, Counter[str]]
) -> list[LeafResult]:
    """Activation sharding constraints (only a mesh makes them): one ``sharding`` leaf for the whole
    forward when both sides constrain alike, else a failing leaf per module whose own constraints
    differ (a dropped ``nn.with_logical_constraint``, or one with its names changed), which the
    numbers never show: a constraint changes where values live, not what they are."""
    total_l = sum(linen_own.values(), Counter())
    total_n = sum(nnx_own.values(), Counter())
    if not total_l and not total_n:
        return []
    n = max(total_l.total(), total_n.total())
    if total_l == total_n:
        return [LeafResult(SHARDING, "", (n,), 0.0, 0.0, 0.0, 1.0, 0.0, True, _fmt(total_l))]
    differ = [p for p in sorted(set(linen_own) | set(nnx_own)) if linen_own.get(p) != nnx_own.get(p)]
    return [
        missing(
            SHARDING,
            path,
            (n,),
            f"Linen {_fmt(linen_own.get(path, Counter())) or 'none'}; NNX {_fmt(nnx_own.get(path, Counter())) or 'none'}",
        )
        for path in differ
    ]


def _subtree(own: dict[str, Counter[str]], path: str) -> set[str]:
    """Every signature of ``path`` and the modules below it."""
    prefix = path + "/" if path else ""
    return {sig for p, dots in own.items() if p == path or p.startswith(prefix) for sig in dots}


def _fmt(signatures: set[str] | Counter[str]) -> str:
    """The signatures, sorted; a multiset's with their counts where a signature repeats (``2x ...``)."""
    if isinstance(signatures, Counter):
        return ", ".join(f"{n}x {sig}" if n > 1 else sig for sig, n in sorted(signatures.items()))
    return ", ".join(sorted(signatures))
