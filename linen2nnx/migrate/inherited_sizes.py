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
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_utils import is_super_call
from linen2nnx.migrate.dataflow import Feat
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


def _by_position(feat: Feat, positions: dict[str, str]) -> Feat:
    """``feat`` with each input named by its position among the walked method's parameters, and no
    reason on an unknown size (two walks that both cannot tell agree)."""
    changes: dict = {}
    if feat.kind == "input":
        changes["input_name"] = positions.get(feat.input_name, feat.input_name)
    if feat.kind == "unknown":
        changes.update(reason="", candidate=None, handed="")
    if feat.base is not None:
        changes["base"] = _by_position(feat.base, positions)
    if feat.candidate is not None and "candidate" not in changes:
        changes["candidate"] = _by_position(feat.candidate, positions)
    for part in ("elements", "tail"):
        if getattr(feat, part):
            changes[part] = tuple(_by_position(f, positions) for f in getattr(feat, part))
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
    if chain is None:
        overrides: list[str] = ["__call__"] if "__call__" in plan.method_names else []
        call_time = any(how.startswith(("input", "traced:")) for how in base.new_args.values())
        changed = ["the layers"] if overrides and call_time else []
    else:
        inherited = set().union(*chain[1:]) | {"__call__"}
        overrides = [m for m in chain[0] if m in inherited and m != "setup"]
        changed = _changed_reads(sizer, plan, base, chain) if overrides else []
    if not changed:
        return
    where = chain[0][overrides[0]] if chain is not None else node  # (a base of another file)
    sizer.ctx.report(
        MOD_004,
        where,
        f"{plan.name} overrides {', '.join(overrides)} of {base.name}, and then {', '.join(changed)} "
        f"inherited from {base.name} read(s) another input size than {base.name}'s size arguments say "
        "(Linen sizes them from what reaches them in this class)",
        f"build these layers in {plan.name}'s own setup with the sizes its inputs give, or call "
        f"{base.name}.__init__ with the sizes by hand",
    )


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
