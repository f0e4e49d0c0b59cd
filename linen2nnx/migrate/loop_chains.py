"""Planning loops that go on filling the ``nnx.List`` of an earlier loop of the same auto-named class.

Part of the *analyse* step, a base of :class:`~linen2nnx.migrate.site_planning.SitePlanner`. Linen
names auto-named submodules from one counter per class, so consecutive loops building ``Block``s
(a ResNet's stages) name them ``Block_0`` .. ``Block_{n1 + n2 - 1}``, whatever the loop lengths: the
later loops' modules are the next elements of the first loop's list. ``__init__`` extends that one
list (so the name map stays ``Block_{k}`` -> ``block.{k}``), and each later call indexes it past the
elements before it (``self.block[len(range(n1)) + i]``), counted from the same config expressions.

Only what keeps that count exact is followed: the first loop is a plain ``for`` over the config,
nothing on the way is built under a condition, and no loop of the chain can stop early (``break``,
``continue``), which would make Linen's counter skip. Anything else stays a finding.

Modules of the class built before the first loop, one of them under a config test the loop is not
under (flaxmodels' ``MappingNetwork``: a label embedding when ``c_dim_ > 0``, then ``fc{i}`` layers),
number the loop's modules on from how many of them ran, which the config decides. They become the
first elements of the loop's list instead, each appended under its test, so ``{Class}_{k}`` is element
``k`` whatever the config (one static name map entry), and each call indexes the list past those that
ran before it (``self.dense[(1 if self.c_dim_ > 0 else 0) + i]``).
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.cst_utils import names_in, parse_expression, snake_case
from linen2nnx.migrate.loop_names import free_attribute
from linen2nnx.migrate.rules import MOD_004
from linen2nnx.migrate.sites import ClassPlan, LoopInfo, Site, jumps_in


def chain_label(site: Site) -> str:
    """What the size arguments of ``site`` are named after: its list's attribute, and for a layer
    appended after a loop its place (``last1`` counted from the end, or ``tail0`` after a loop that
    another follows, whose index is an expression of the config), for a later loop's elements that
    loop (``loop2``: one argument per loop of the chain)."""
    if site.extends is not None:
        return f"{site.attr}_loop{site.offset.count('len(') + 1}"
    if site.tail_of is None:
        return site.attr
    index = site.list_index.lstrip("-")
    return f"{site.attr}_" + (f"last{index}" if index.isdigit() else f"tail{site.tail_position()}")


class LoopChains:
    """The loop-chain part of the :class:`~linen2nnx.migrate.site_planning.SitePlanner` (a base class
    of it): uses the planner's ``ctx``, ``state``, ``add_site``, ``_loop_list`` and
    ``_plan_args_at_call``."""

    def chained_list(
        self, plan: ClassPlan, loop: LoopInfo, names: tuple[str, ...], counters: dict[str, int | None]
    ) -> Site | None:
        """The list an earlier plain loop built of auto-named ``names``, which this other loop's modules
        would go on filling; None when there is none (the planner's own finding then applies)."""
        if not any(counters.get(n, 0) is None for n in names):
            return None
        head = self._loop_list(plan, names[0])  # type: ignore[attr-defined]
        if head is None or head.loop is None or head.loop.node is None or head.loop.node is loop.node:
            return None
        return head

    def extends_list(
        self,
        plan: ClassPlan,
        node: cst.Call,
        at: cst.Call,
        head: Site,
        loop: LoopInfo,
        names: tuple[str, ...],
        conditions: list[str] | None,
    ) -> bool:
        """Can the loop's modules be the next elements of ``head``'s list (see the module docstring)?
        False, with a finding at ``at`` (the call as written), when the count of what comes before
        would not be exact."""
        why = None
        if head.attr in plan.stopped_lists:
            why = "and a loop left as it was"
        elif conditions or any(s.conditions for s in head.extensions):
            why = "under a condition"
        elif jumps_in(head.loop.node) or loop.node is None or jumps_in(loop.node):  # type: ignore[union-attr]
            why = "in a loop that may stop early (break / continue)"
        elif names_of(head) != names:
            why = "of other classes"
        if why is None:
            return True
        plan.stopped_lists.add(head.attr)  # what comes later would be counted past these modules
        self.state.handled.add(node.func)  # type: ignore[attr-defined]
        self.ctx.report(  # type: ignore[attr-defined]
            MOD_004,
            at,
            f"auto-named {names[0]} built in a loop after other {names[0]}s {why}: its Linen "
            "names depend on theirs",
            "give the loop's modules name=f'prefix_{i}'",
        )
        return False

    def plan_loop_extension(
        self,
        plan: ClassPlan,
        node: cst.Call,
        rule: LayerRule | None,
        what: str,
        head: Site,
        loop: LoopInfo,
        bound: dict[str, cst.Arg],
        local_names: set[str],
    ) -> None:
        """A loop's auto-named modules as the next elements of ``head``'s list (see the module docstring)."""
        site = self.add_site(plan, node, attr=head.attr, linen_name=head.linen_name, hoisted=True)  # type: ignore[attr-defined]
        site.container, site.loop, site.extends = "list", loop, head
        site.offset = offset_of(head)
        head.extensions.append(site)
        if loop.index:
            self.state.indexed_loops[loop.node] = loop  # type: ignore[attr-defined]
        self._plan_args_at_call(plan, site, rule, what, bound, local_names, {loop.var})  # type: ignore[attr-defined]
        plan.hoisted_order.append(site)

    def conditional_prefix(
        self,
        plan: ClassPlan,
        class_name: str,
        loop: LoopInfo,
        conditions: list[str] | None,
        n: int | None,
        local_names: set[str],
    ) -> list[Site] | None:
        """The ``n`` auto-named ``class_name`` modules built before this loop, its first of the class, when
        one of them was built under a config test (see the module docstring); None where the count of
        those that ran is not an expression ``__call__`` can evaluate at the loop: the loop under a test
        of its own or able to stop early, a module of the class in both branches of an ``if``, in a loop
        or built by a factory, or a test that reads a local of the method."""
        if not n or conditions or loop.node is None or jumps_in(loop.node):
            return None
        names = [f"{class_name}_{k}" for k in range(n)]
        prefix = [s for s in plan.hoisted_order if s.linen_name in names and not s.counted_as]
        if [s.linen_name for s in prefix] != names or not any(s.conditions for s in prefix):
            return None
        if any(
            s.kind not in ("layer", "module")
            or s.container is not None
            or s.loop is not None
            or s.nest is not None
            or s.factory is not None
            or s.lifted is not None
            or s.tail_of is not None
            for s in prefix
        ):
            return None
        if any(s.exclusive_with in prefix for s in plan.sites.values()):
            return None  # the other branch builds one of the class too
        tests = [c for s in prefix for c in s.conditions]
        if any(names_in(parse_expression(t)) & local_names for t in tests):
            return None
        return prefix

    def planned_prefixed(
        self,
        plan: ClassPlan,
        node: cst.Call,
        rule: LayerRule | None,
        what: str,
        class_name: str,
        loop: LoopInfo,
        conditions: list[str] | None,
        counters: dict[str, int | None],
        bound: dict[str, cst.Arg],
        local_names: set[str],
    ) -> bool:
        """Plans the loop's auto-named modules after a :meth:`conditional_prefix` of their class, if there
        is one (True), the loop's list starting with it; after the loop the count is unknown."""
        prefix = self.conditional_prefix(
            plan, class_name, loop, conditions, counters.get(class_name, 0), local_names
        )
        if prefix is None:
            return False
        self._plan_prefixed_loop(plan, node, rule, what, prefix, loop, bound, local_names)
        counters[class_name] = None
        return True

    def _plan_prefixed_loop(
        self,
        plan: ClassPlan,
        node: cst.Call,
        rule: LayerRule | None,
        what: str,
        prefix: list[Site],
        loop: LoopInfo,
        bound: dict[str, cst.Arg],
        local_names: set[str],
    ) -> None:
        """The modules of :meth:`conditional_prefix` as the first elements of this loop's list."""
        class_name = prefix[0].linen_name.rpartition("_")[0]
        attr = free_attribute(plan, snake_case(class_name), prefix)
        ran: list[str] = []  # for each module before, what it adds to the count: 1, or 1 when its test holds
        for site in prefix:
            site.attr, site.container, site.prefix_index = attr, "list", count_of(ran)
            test = " and ".join(f"({c})" if len(site.conditions) > 1 else c for c in site.conditions)
            ran.append(f"(1 if {test} else 0)" if test else "1")
        site = self.add_site(plan, node, attr=attr, linen_name=class_name, hoisted=True)  # type: ignore[attr-defined]
        site.container, site.loop, site.extends, site.offset = "list", loop, prefix[0], count_of(ran)
        prefix[0].extensions.append(site)
        if loop.index:
            self.state.indexed_loops[loop.node] = loop  # type: ignore[attr-defined]
        self._plan_args_at_call(plan, site, rule, what, bound, local_names, {loop.var})  # type: ignore[attr-defined]
        plan.hoisted_order.append(site)


def count_of(terms: list[str]) -> str:
    """The sum of ``terms`` (``1`` or a conditional ``(1 if t else 0)``), its literal ones added up."""
    ones = sum(1 for t in terms if t == "1")
    rest = [t for t in terms if t != "1"]
    return " + ".join([*([str(ones)] if ones or not rest else []), *rest])


def offset_of(head: Site) -> str:
    """How many elements ``head``'s list holds so far: its loop's, then each extension's (one per
    layer after a loop, a loop's length per later loop), as an expression of the config."""
    assert head.loop is not None
    loops = [f"len({head.loop.range_src})"]
    singles = 0
    for site in head.extensions:
        if site.extends is not None and site.loop is not None:
            loops.append(f"len({site.loop.range_src})")
        else:
            singles += 1
    return " + ".join([*loops, *([str(singles)] if singles else [])])


def names_of(site: Site) -> tuple[str, ...]:
    """The class names Linen may give the elements of a loop-built list (a factory field's classes)."""
    names = getattr(site.factory, "linen_names", ())
    return tuple(names) if names else (site.counted_as or site.linen_name,)
