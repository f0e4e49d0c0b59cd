"""The input sizes of what a subclass inherits, read again through the subclass's own methods.

A subclass that runs its base's build (inheritance.py) gets the base's size arguments as they are:
the base's dataflow sized each inherited layer from the base's ``__call__`` and helpers. Linen sizes
them lazily, from what reaches them when the *subclass* runs, so an override changes them: a
``__call__`` that feeds an inherited layer ``jnp.concatenate([x, 2 * x], -1)`` or
``super().__call__(self.pre(x))``, a helper the base routes its input through
(``self.preprocess(x)``) overridden, a ``__call__(self, mask, x)`` whose first input is no longer
the one the base's ``in_features: input:0`` reads. Kept as they were, the NNX layers got the base's
sizes ((5, 4) where Linen has (10, 4)), silently.

So when a subclass overrides ``__call__`` or a method of its base, the dataflow walks the subclass's
``__call__`` once more over the base's sites and its own (:class:`_InheritedFlow`: ``self.<m>`` is the
subclass's method where it has one, ``super().<m>(...)`` the base's, inlined), and the size each
inherited layer reads is compared with the base's own walk, each input named by its position. Where
any differs, the base's size arguments do not hold for the subclass: a blocking ``L2N-MOD-004``.

One override is read without a walk, so a base of another file (whose methods are not at hand) is
covered too: a ``__call__`` whose one statement is ``return super().__call__(q, q, mask)``, each
positional argument one of its own parameters, as is. The base's layers then read exactly what the
base's inputs read, renumbered: a size argument the base takes from its input 1 is the subclass's
input 0 (:func:`_passed_through`; a self-attention subclass of a query/key-value attention).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_utils import is_docstring, is_super_call
from linen2nnx.migrate.dataflow import Feat
from linen2nnx.migrate.inheritance import super_method
from linen2nnx.migrate.method_flow import MethodFlow
from linen2nnx.migrate.rules import MOD_004
from linen2nnx.migrate.sites import ClassPlan

if TYPE_CHECKING:
    from linen2nnx.migrate.sizing import Sizer

Methods = dict[str, tuple[cst.FunctionDef, int]]
"""A method name -> its definition and the place in the class chain of the class that defines it."""


class _InheritedFlow(MethodFlow):
    """The flow over a method of the class chain ``chain`` (the subclass first): ``self.<m>(...)`` is
    the first class's ``m`` that defines it, ``super().<m>(...)`` the next one's after the class of the
    method being walked; each inlined with the caller's values."""

    def __init__(self, sizer: Sizer, plan: ClassPlan, fn: cst.FunctionDef, chain: list[dict]) -> None:
        params = [p.name.value for p in fn.params.params][1:]
        super().__init__(sizer, plan, fn, params, resolve=False)
        self.chain = chain
        self.level = 0  # the place in the chain of the class whose method is being walked
        self.methods = {}  # every helper is inlined here, through method_of

    def method_of(self, call: cst.Call, args: list[Feat]) -> Feat | None:
        func = call.func
        start, name = None, None
        if isinstance(func, cst.Attribute) and type(func.value) is cst.Name and func.value.value == "self":
            start, name = 0, func.attr.value
        elif isinstance(func, cst.Attribute) and is_super_call(func.value) and not func.value.args:  # type: ignore[attr-defined]
            start, name = self.level + 1, func.attr.value
        found = _defined(self.chain, start, name) if name is not None and start is not None else None
        if found is None or self.depth >= 4:
            return super().method_of(call, args)
        callee, level = found
        if name in ("setup",):
            return None
        outer, self.level = self.level, level
        try:
            return self.inlined(callee, call, args)
        finally:
            self.level = outer

    def reads(self) -> dict[str, set[Feat]]:
        """The size each layer reads over the walk of ``fn``, inputs named by position."""
        flow = self._flow_over(self.params)
        flow.unsure_of = self.fn
        flow.builtin_dict = self._builtin_dict()
        self.flow = flow
        flow.run(self.fn.body.body)
        positions = {p: f"#{i}" for i, p in enumerate(self.params)}
        found: dict[str, set[Feat]] = {}
        for use in flow.uses:
            found.setdefault(use.key, set()).add(_by_position(use.feat, positions))
        return found


def _defined(chain: list[dict], start: int, name: str) -> tuple[cst.FunctionDef, int] | None:
    """The first definition of ``name`` in the chain from ``start`` on, with its place."""
    for level in range(start, len(chain)):
        if name in chain[level]:
            return chain[level][name], level
    return None


def _by_position(feat: Feat, positions: dict[str, str], forget: bool = True) -> Feat:
    """``feat`` with each input renamed (by its position among the walked method's parameters), and,
    with ``forget``, no reason on an unknown size (two walks that both cannot tell agree)."""
    changes: dict = {}
    if feat.kind == "input" or (feat.kind == "leaf" and not forget):
        changes["input_name"] = positions.get(feat.input_name, feat.input_name)
    if feat.kind == "unknown" and forget:
        changes.update(reason="", candidate=None, handed="")
    if feat.base is not None:
        changes["base"] = _by_position(feat.base, positions, forget)
    if feat.candidate is not None and "candidate" not in changes:
        changes["candidate"] = _by_position(feat.candidate, positions, forget)
    for part in ("elements", "tail"):
        if getattr(feat, part):
            changes[part] = tuple(_by_position(f, positions, forget) for f in getattr(feat, part))
    return dataclasses.replace(feat, **changes) if changes else feat


def _chain(sizer: Sizer, plan: ClassPlan) -> list[dict] | None:
    """The methods of ``plan``'s class and of each base whose build it runs, the class first; None
    when a class of the chain is of another file (its methods are not at hand)."""
    chain: list[dict] = []
    cur: ClassPlan | None = plan
    while cur is not None:
        methods = sizer.state.methods.get(cur.name)
        if methods is None or (cur is not plan and sizer.state.linen_classes.get(cur.name) is not cur):
            return None
        chain.append({fn.name.value: fn for fn in methods})
        cur = cur.super_init
    return chain


def check_inherited_sizes(sizer: Sizer, plan: ClassPlan, node: cst.ClassDef) -> None:
    """A blocking ``L2N-MOD-004`` when ``plan`` runs its base's build, overrides ``__call__`` or a
    method of the base, and an inherited layer then reads another size than in the base (located at
    the first override; at the class when a base is of another file, whose methods are not at hand)."""
    base = plan.super_init
    if base is None:
        return
    chain = _chain(sizer, plan)
    own = {fn.name.value: fn for fn in sizer.state.methods.get(plan.name, [])}
    inherited = set().union(*chain[1:]) | {"__call__"} if chain is not None else {"__call__"}
    overrides = [m for m in own if m in inherited and m != "setup"]
    if overrides == ["__call__"] and _hand_on(plan, base, own["__call__"]):
        return
    if chain is None:  # a base of another file: its methods are not at hand to walk
        call_time = any(how.startswith(("input", "traced:")) for how in base.new_args.values())
        changed = ["the layers"] if overrides and call_time else []
    else:
        changed = _changed_reads(sizer, plan, base, chain) if overrides else []
    if not changed:
        return
    where = own[overrides[0]] if chain is not None else node  # (a base of another file)
    sizer.ctx.report(
        MOD_004,
        where,
        f"{plan.name} overrides {', '.join(overrides)} of {base.name}, and then {', '.join(changed)} "
        f"inherited from {base.name} read(s) another input size than {base.name}'s size arguments say "
        "(Linen sizes them from what reaches them in this class)",
        f"build these layers in {plan.name}'s own setup with the sizes its inputs give, or call "
        f"{base.name}.__init__ with the sizes by hand",
    )


def _hand_on(plan: ClassPlan, base: ClassPlan, call: cst.FunctionDef) -> bool:
    """Whether ``call`` only hands its own inputs on to the base's ``__call__`` (:func:`_passed_through`);
    if so, ``plan`` takes the base's size arguments renumbered and gives back what the base gives."""
    handed = _passed_through(call, base.new_args)
    if handed is None:
        return False
    positions, renumbered = handed
    plan.new_args.update(renumbered)
    names = {p: plan.call_inputs[positions[i]] for i, p in enumerate(base.call_inputs) if i in positions}
    if base.out is not None and _inputs_of(base.out) <= set(names):  # what the base gives back
        plan.out = _by_position(base.out, names, forget=False)
    return True


INPUT_HOWS = ("input:", "input_shape:")
"""The kinds of size argument read from one positional input of ``__call__`` (``input:1``: the last
axis of its input 1; ``input_shape:1``: its whole shape), renumbered through a pass-through call."""


def _passed_through(
    call: cst.FunctionDef, base_args: dict[str, str]
) -> tuple[dict[int, int], dict[str, str]] | None:
    """When ``call`` only hands its own parameters on to the base's ``__call__`` (``return
    super().__call__(inputs_q, inputs_q, mask)``): the position among ``call``'s parameters of what it
    passes at each position, and the base's size arguments in the subclass's terms (each one read from
    the base's input k read from the parameter the call passes at position k). None when
    ``call`` does anything else, or when a size argument reads an input the call does not pass
    positionally (by keyword, a default, a computed value) or in a form not renumbered here."""
    body = (
        [s for s in call.body.body if not is_docstring(s)] if isinstance(call.body, cst.IndentedBlock) else []
    )
    stmt = body[0] if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) else None
    ret = stmt.body[0] if stmt is not None and len(stmt.body) == 1 else None
    sup = ret.value if isinstance(ret, cst.Return) else None
    if not isinstance(sup, cst.Call) or super_method(sup) != "__call__" or sup.func.value.args:  # type: ignore[attr-defined]
        return None
    params = [p.name.value for p in call.params.params][1:]
    positions: dict[int, int] = {}
    for k, arg in enumerate(sup.args):
        if arg.keyword is not None or arg.star:
            break
        if not (isinstance(arg.value, cst.Name) and arg.value.value in params):
            return None  # a computed value: its size is not the parameter's
        positions[k] = params.index(arg.value.value)
    out: dict[str, str] = {}
    for name, how in base_args.items():
        kind = next((k for k in INPUT_HOWS if how.startswith(k)), None)
        if kind is None:
            if how.startswith(("input", "traced:")):
                return None  # read from the inputs in another form
            continue
        index = how[len(kind) :]
        if not index.isdigit() or int(index) not in positions:
            return None
        out[name] = f"{kind}{positions[int(index)]}"
    return positions, out


def _inputs_of(feat: Feat) -> set[str]:
    """The method inputs ``feat`` reads."""
    found = {feat.input_name} if feat.kind in ("input", "leaf") else set()
    for part in (feat.base, feat.candidate, *feat.elements, *feat.tail):
        if part is not None:
            found |= _inputs_of(part)
    return found


def _changed_reads(sizer: Sizer, plan: ClassPlan, base: ClassPlan, chain: list[dict]) -> list[str]:
    """The inherited layers whose input size the subclass's walk reads otherwise than the base's."""
    call = _defined(chain, 0, "__call__")
    base_call = _defined(chain, 1, "__call__")
    if call is None or base_call is None:
        return []
    merged = dataclasses.replace(base, sites={**base.sites, **plan.sites})
    before = _walk(sizer, merged, chain[1:], base_call[0], base_call[1] - 1)
    after = _walk(sizer, merged, chain, call[0], call[1])
    params = call[0].params
    starred = isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None
    return [  # (one not applied holds nothing; an unknown size where the walk cannot bind the arguments
        # the override hands on, `super().__call__(x, *args, **kwargs)`, keeps the base's sizes)
        key
        for key, feats in before.items()
        if key in after
        and after[key] != feats
        and not (starred and all(f.kind == "unknown" for f in after[key]))
    ]


def _walk(
    sizer: Sizer, plan: ClassPlan, chain: list[dict], fn: cst.FunctionDef, level: int
) -> dict[str, set[Feat]]:
    """What each layer reads when ``fn``, of the class at ``level`` of ``chain``, runs."""
    flow = _InheritedFlow(sizer, plan, fn, chain)
    flow.level = level
    return flow.reads()
