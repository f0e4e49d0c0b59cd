"""First divergence: the submodule where Linen and NNX part ways.

When a check fails, both sides run the failing mode once more, eagerly, with every submodule call
recorded (:mod:`.capture`). Linen calls are aligned with NNX calls through the module map
(:mod:`.modmap`): the k-th Linen call of a module meets the k-th NNX call of its counterpart, and a
call inside a scan is compared invocation by invocation (layer by layer, time step by time step).
Walking the aligned calls in the order they *finish* (children before parents), the **culprit** is
the first module whose output differs beyond tolerance while its inputs agree: its own code, not
anything upstream, made the difference. A parent whose children all agree but whose output does
not is named itself (the bug is in its own glue code).

Some bugs change no activation at all: a dropped matmul ``precision`` (invisible on CPU), a sown
value that is not sown any more, a BatchNorm momentum, a dropout rate. Then the culprit is the module
owning the first failing ``config`` / ``precision`` / ``intermediates`` / ``batch_stats`` / ``grad`` leaf,
in execution order.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict, deque
from typing import Any

from linen2nnx.equivalence.capture import Call, capture_linen, capture_nnx
from linen2nnx.equivalence.compare import LeafResult, compare_leaf, json_num, missing
from linen2nnx.equivalence.modmap import ModuleMap, join
from linen2nnx.equivalence.tolerances import Tolerances

CHECK = "divergence"
#: state checks that can localise a bug no activation shows, most specific first
STATE_CHECKS = ("config", "precision", "sharding", "intermediates", "batch_stats", "grad")
#: state checks whose leaves name their module outright: one owner needs no replay
OWNED_CHECKS = STATE_CHECKS[:5]
#: the train forward with dropout on (:mod:`.dropout_on`)
DROPOUT_CHECKS = ("forward/dropout", "loss/dropout")


@dataclasses.dataclass
class ModuleDiff:
    """One aligned module call site: how its outputs (and inputs) compare."""

    linen_path: str
    nnx_path: str
    order: int
    kind: str
    calls: int
    max_abs: float
    tol: float
    passed: bool
    inputs_agree: bool
    first_bad_call: int | None = None
    inputs: list[LeafResult] = dataclasses.field(default_factory=list)
    """Input leaves at the first differing invocation (or the worst one when all agree)."""
    outputs: list[LeafResult] = dataclasses.field(default_factory=list)
    check: str = CHECK
    note: str = ""
    reads_other_weights: bool = False
    """Its activations going in agree, the weights it reads do not, and no other Linen invocation's
    do either: a wrong checkpoint or name map entry, found at this module."""

    def to_json(self) -> dict[str, Any]:
        return {
            "linen_path": self.linen_path,
            "nnx_path": self.nnx_path,
            "order": self.order,
            "max_abs": json_num(self.max_abs),
            "tol": json_num(self.tol),
            "passed": bool(self.passed),
        }


@dataclasses.dataclass
class Divergence:
    """Where the two sides first differ; ``culprit`` is ``None`` when nothing could be pinned down."""

    mode: str
    modules: list[ModuleDiff]
    culprit: ModuleDiff | None
    unaligned: list[str] = dataclasses.field(default_factory=list)
    """Linen module paths with no NNX call to compare against."""
    note: str = ""

    @property
    def inputs_agree(self) -> bool | None:
        return None if self.culprit is None else self.culprit.inputs_agree

    def to_json(self) -> dict[str, Any]:
        c = self.culprit
        culprit = (
            None
            if c is None
            else {
                "linen_path": c.linen_path,
                "nnx_path": c.nnx_path,
                "check": c.check,
                "max_abs": json_num(c.max_abs),
                "tol": json_num(c.tol),
                **({"note": c.note} if c.note else {}),
            }
        )
        return {
            "culprit": culprit,
            "inputs_agree": self.inputs_agree,
            "modules": [m.to_json() for m in self.modules],
        }

    def summary(self) -> str:
        """The culprit and its input / output diff table, as text."""
        c = self.culprit
        if c is None:
            return f"first divergence ({self.mode}): not localised{'; ' + self.note if self.note else ''}"
        where = f"Linen {c.linen_path or '(root)'} / NNX {c.nnx_path or '(root)'}"
        call = f", invocation {c.first_bad_call}" if c.first_bad_call else ""
        lines = [
            f"first divergence ({self.mode}, {c.check}): {c.kind} at {where}{call}; "
            f"inputs {'agree' if c.inputs_agree else 'differ'}" + (f"; {c.note}" if c.note else "")
        ]
        for label, leaves in (("in ", c.inputs), ("out", c.outputs)):
            for lf in leaves:
                lines.append(
                    f"    {label} {lf.path:<40} {lf.shape!s:<16} max|Δ| {lf.max_abs:.3g}  tol {lf.tol:.3g}"
                    f"  {'ok' if lf.passed else 'DIFFERS'} {lf.note}"
                )
        return "\n".join(lines)


# ---- aligning and comparing calls ----------------------------------------------------------------
def _compare_values(
    prefix: str, ref: list[Any], got: list[Any], tols: Tolerances, depth: int, structural: bool
) -> list[LeafResult]:
    """Leafwise comparison of one invocation's inputs or outputs.

    Outputs must have the same number of leaves (``structural``); inputs are compared over the
    leaves both sides pass, since call signatures may differ by mode flags and the like.
    """
    out = [
        compare_leaf(CHECK, f"{prefix}[{i}]", r, g, tols, depth=depth)
        for i, (r, g) in enumerate(zip(ref, got))
    ]
    if structural and len(ref) != len(got):
        out.append(missing(CHECK, prefix, (), f"Linen gives {len(ref)} arrays, NNX {len(got)}"))
    return out


def _weights_at(call: Call, i: int) -> Any:
    return call.weights[i] if i < len(call.weights) else None


def compare_weights(
    lin: Call, nnx_call: Call, i: int, tols: Tolerances, depth: int
) -> tuple[list[LeafResult], str]:
    """The parameters invocation ``i`` reads on both sides, as one ``weights`` input leaf.

    Compared as sorted values (:func:`.capture.fingerprint`), so a renamed or transposed kernel
    still agrees; two modules holding different amounts of parameters are not compared. When they
    differ and NNX reads what another Linen invocation reads, the note says which: a stack scanned
    in another order than Linen's (``reverse=``, a permuted stack), not this module, is at fault."""
    ref, got = _weights_at(lin, i), _weights_at(nnx_call, i)
    if ref is None or got is None or ref.shape != got.shape:
        return [], ""
    leaf = compare_leaf(CHECK, "weights", ref, got, tols, depth=depth)
    if leaf.passed:
        return [leaf], ""
    same = [
        j
        for j in range(len(lin.weights))
        if j != i
        and _weights_at(lin, j) is not None
        and _weights_at(lin, j).shape == got.shape
        and compare_leaf(CHECK, "weights", _weights_at(lin, j), got, tols, depth=depth).passed
    ]
    note = (
        f"NNX invocation {i} reads the weights of Linen invocation {same[0]}: the stack runs in another order"
        if same
        else ""
    )
    return [dataclasses.replace(leaf, note=note or "the module reads other weights")], note


def compare_calls(lin: Call, nnx_call: Call, order: int, depth: int, tols: Tolerances) -> ModuleDiff:
    """Compare two aligned calls invocation by invocation; the first differing one decides.

    The weights each invocation reads count among its inputs (see :func:`compare_weights`)."""
    n = min(len(lin.outputs), len(nnx_call.outputs))
    note = ""
    if len(lin.outputs) != len(nnx_call.outputs) and not nnx_call.error:
        note = f"Linen ran it {len(lin.outputs)} times, NNX {len(nnx_call.outputs)}"
    worst: tuple[float, list[LeafResult], list[LeafResult], int | None] = (-1.0, [], [], None)
    for i in range(n):
        outs = _compare_values("out", lin.outputs[i], nnx_call.outputs[i], tols, depth + i, True)
        ins = _compare_values("in", lin.inputs[i], nnx_call.inputs[i], tols, depth + i, False)
        weights, slice_note = compare_weights(lin, nnx_call, i, tols, depth + i)
        ins += weights
        margin = max((lf.margin for lf in outs), default=0.0)
        if any(not lf.passed for lf in outs):
            worst = (margin, ins, outs, i)
            note = note or slice_note
            break
        if margin > worst[0]:
            worst = (margin, ins, outs, None)
    _, ins, outs, bad = worst
    own_weights = _own_weights_differ(ins)
    if nnx_call.error and bad is None:
        i = len(nnx_call.outputs)
        ins = _compare_values(
            "in",
            lin.inputs[i] if i < len(lin.inputs) else [],
            nnx_call.inputs[0] if nnx_call.inputs else [],
            tols,
            depth + i,
            False,
        )
        outs = [missing(CHECK, "out", (), f"NNX raised {nnx_call.error}")]
        bad, note = i, f"NNX raised {nnx_call.error}"
    elif note and bad is None:
        outs = [*outs, missing(CHECK, "calls", (), note)]
        bad = n
    inputs_agree = all(lf.passed for lf in ins) and (bool(ins) or not lin.inputs or not lin.inputs[0])
    failing = [lf for lf in outs if not lf.passed]
    top = max(failing or outs, key=lambda lf: lf.margin, default=None)
    return ModuleDiff(
        linen_path=join(lin.path),
        nnx_path=join(nnx_call.path),
        order=order,
        kind=lin.kind,
        calls=n,
        max_abs=top.max_abs if top else 0.0,
        tol=top.tol if top else 0.0,
        passed=not failing,
        inputs_agree=inputs_agree,
        first_bad_call=bad,
        inputs=ins,
        outputs=outs,
        note=note,
        reads_other_weights=own_weights and bool(failing),
    )


def _own_weights_differ(ins: list[LeafResult]) -> bool:
    """The activations going in agree and the ``weights`` input does not, matching no other Linen
    invocation's (whose note would say so: a stack run in another order, the stack's own fault)."""
    weights = next((lf for lf in ins if lf.path == "weights"), None)
    return (
        weights is not None
        and not weights.passed
        and not weights.note.startswith("NNX invocation")
        and all(lf.passed for lf in ins if lf.path != "weights")
    )


def align(
    linen_calls: list[Call], nnx_calls: list[Call], module_map: ModuleMap, tols: Tolerances
) -> tuple[list[ModuleDiff], list[str]]:
    """Pair the k-th Linen call of each module with the k-th NNX call of its counterpart."""
    queues: dict[tuple[str, ...], deque[Call]] = defaultdict(deque)
    for c in sorted(nnx_calls, key=lambda c: c.order):
        queues[c.path].append(c)
    diffs: list[ModuleDiff] = []
    unaligned: list[str] = []
    depth = 0
    for lin in sorted(linen_calls, key=lambda c: c.order):
        target = module_map(lin.path)
        if target is None or not queues.get(target):
            unaligned.append(join(lin.path) or "(root)")
            continue
        nnx_call = queues[target].popleft()
        depth += int(nnx_call.has_params)
        diffs.append(compare_calls(lin, nnx_call, len(diffs), depth, tols))
    return diffs, unaligned


# ---- the culprit ---------------------------------------------------------------------------------
def stack_order_note(culprit: ModuleDiff, diffs: list[ModuleDiff]) -> str:
    """Why a stack is blamed rather than a layer in it: the modules inside whose invocation reads the
    weights of another Linen invocation (a scan run in reverse or over a permuted stack)."""
    prefix = culprit.nnx_path + "/" if culprit.nnx_path else ""
    inside = [
        d
        for d in diffs
        if d.nnx_path.startswith(prefix)
        and d.nnx_path != culprit.nnx_path
        and any(
            lf.path == "weights" and not lf.passed and lf.note.startswith("NNX invocation") for lf in d.inputs
        )
    ]
    if not inside:
        return ""
    first = inside[0]
    return (
        f"{len(inside)} module(s) inside read another layer's weights (first: {first.nnx_path}: "
        f"{first.note}); look at how the stack is scanned (reverse=, the order of the stacked layers)"
    )


def _state_culprit(
    failed: list[LeafResult], diffs: list[ModuleDiff], nnx_modules: set[str]
) -> ModuleDiff | None:
    """The module owning the first failing state leaf (precision, sown value, stats, gradient)."""
    order = {}
    linen_of = {}
    for d in diffs:
        order.setdefault(d.nnx_path, d.order)
        linen_of.setdefault(d.nnx_path, d.linen_path)
    for check in STATE_CHECKS:
        leaves = [lf for lf in failed if _base(lf.check).split("/", 1)[0] == check]  # intermediates/train too
        if not leaves:
            continue
        owned = []
        for lf in leaves:
            owner = _owner(lf.path, nnx_modules)
            owned.append((order.get(owner, math.inf), owner, lf))
        _, owner, lf = min(owned, key=lambda t: (t[0], t[1]))
        return ModuleDiff(
            linen_path=linen_of.get(owner, ""),
            nnx_path=owner,
            order=int(order.get(owner, -1)),
            kind="",
            calls=0,
            max_abs=lf.max_abs,
            tol=lf.tol,
            passed=False,
            inputs_agree=True,
            outputs=[lf],
            check=lf.check,
            note=lf.note,
        )
    return None


def _owner(leaf_path: str, nnx_modules: set[str]) -> str:
    """The deepest NNX module path that is a prefix of ``leaf_path`` (``linen:`` paths: none)."""
    if leaf_path.startswith("linen:"):
        return ""
    parts = leaf_path.split("/")
    for cut in range(len(parts), -1, -1):
        cand = "/".join(parts[:cut])
        if cand in nnx_modules:
            return cand
    return ""


def _base(check: str) -> str:
    """``forward/eval@eager`` -> ``forward/eval``."""
    return check.split("@", 1)[0]


def mode_for(failed: list[LeafResult]) -> tuple[str, bool, bool]:
    """``(mode name, train, long batch)`` to replay: the first failing forward-like check decides."""
    checks = {_base(lf.check) for lf in failed}
    if checks & {"forward/eval", "loss/eval"}:
        return "forward/eval", False, False
    if checks & {"forward/train", "loss/train", "grad", "batch_stats"}:
        return "forward/train", True, False
    if checks & {"forward/long", "loss/long"}:
        return "forward/long", False, True
    if checks & set(DROPOUT_CHECKS):
        return "forward/dropout", True, False
    return "forward/eval", False, False


def _activation_culprit(diffs: list[ModuleDiff]) -> ModuleDiff | None:
    """The first failing call whose inputs agree, or whose activations agree while the weights it
    reads are not Linen's (its note says which); None when there is none."""
    culprit = next((d for d in diffs if not d.passed and (d.inputs_agree or d.reads_other_weights)), None)
    if culprit is None:
        return None
    why = (
        "the activations going in agree, the weights it reads differ from Linen's (a wrong checkpoint, "
        "or a name map entry that points at another weight)"
        if culprit.reads_other_weights
        else stack_order_note(culprit, diffs)
    )
    culprit.note = "; ".join(x for x in (culprit.note, why) if x)
    return culprit


def _moved_dropout(diffs: list[ModuleDiff], culprit: ModuleDiff | None) -> ModuleDiff | None:
    """Replayed with dropout on after every dropout-off forward agreed, ``culprit`` is the module whose
    inputs agree and which computes differently: when it is no dropout itself (a dropout with a changed
    rate is), the first dropout inside it whose input differs from Linen's is one the migration moved
    there (the first: the others follow from it)."""
    if culprit is not None and culprit.kind.endswith("Dropout"):
        return None
    inside = culprit.nnx_path + "/" if culprit is not None and culprit.nnx_path else ""
    moved = next(
        (
            d
            for d in diffs
            if d.kind.endswith("Dropout")
            and not d.passed
            and not d.inputs_agree
            and d.nnx_path.startswith(inside)
        ),
        None,
    )
    if moved is not None:
        moved.note = (
            "with dropout on, this dropout's input differs from Linen's while every forward with dropout off "
            "agrees: it is applied at another place in the dataflow (before an activation it followed, "
            "after a residual add it sat inside)"
        )
    return moved


def localise(
    pair: Any,
    sides: Any,
    failed: list[LeafResult],
    module_map: ModuleMap,
    tolerances: Tolerances | None = None,
) -> Divergence:
    """Replay the failing mode on both sides, align the calls and name the culprit.

    When only state checks failed and all their leaves belong to one module, that module is the
    culprit and nothing is replayed (there is no activation to compare and no order to find).
    """
    import dataclasses as dc

    from linen2nnx.equivalence.modmap import nnx_module_paths

    tols = Tolerances.coerce(tolerances)
    nnx_modules = {join(p) for p in nnx_module_paths(sides.nnx_model)}
    owned = [lf for lf in failed if _base(lf.check) in OWNED_CHECKS]
    # a differing setting explains what the dropout-on forward shows (a changed rate): not replayed
    if owned and all(_base(lf.check) in (*OWNED_CHECKS, *DROPOUT_CHECKS) for lf in failed):
        owners = {_owner(lf.path, nnx_modules) for lf in owned}
        if len(owners) == 1:
            culprit = _state_culprit(owned, [], nnx_modules)
            if culprit is not None:
                linen = module_map.linen_of(tuple(culprit.nnx_path.split("/")) if culprit.nnx_path else ())
                culprit.linen_path = join(linen) if linen is not None else ""
                return Divergence(
                    mode=culprit.check,
                    modules=[],
                    culprit=culprit,
                    note=f"only state checks{' and the dropout-on forward' if len(owned) < len(failed) else ''} "
                    "failed, the state checks all in one module: not replayed",
                )
    mode, train, long = mode_for(failed)
    run_pair = pair
    if long and getattr(pair.linen, "long_batch", None) is not None:
        run_pair = dc.replace(pair, linen=dc.replace(pair.linen, batch=pair.linen.long_batch))
    dropout = mode == "forward/dropout"  # replayed with the dropout on, the same masks on both sides
    linen_calls, linen_error = capture_linen(run_pair, sides.linen_variables, train, dropout=dropout)
    nnx_calls, nnx_error = capture_nnx(run_pair, sides.nnx_model, train, dropout=dropout)
    diffs, unaligned = align(linen_calls, nnx_calls, module_map, tols)
    for d in diffs:
        d.check = mode
    culprit = _activation_culprit(diffs)
    if dropout:
        culprit = _moved_dropout(diffs, culprit) or culprit
    note = "; ".join(
        x
        for x in (
            f"Linen raised {linen_error}" if linen_error else "",
            f"NNX raised {nnx_error}" if nnx_error else "",
        )
        if x
    )
    if culprit is None:
        culprit = _state_culprit(failed, diffs, nnx_modules)
    if culprit is None:
        culprit = next((d for d in diffs if not d.passed), None)
    return Divergence(mode=mode, modules=diffs, culprit=culprit, unaligned=unaligned, note=note)
