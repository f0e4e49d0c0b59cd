"""Planning nested and loop-nest sites: layers built in another layer's arguments, and submodules
built inside nested ``for`` loops that ``__init__`` replays.

Part of the *analyse* step, a base of :class:`~linen2nnx.migrate.site_planning.SitePlanner`: a
layer nested in ``nn.Sequential`` / ``nn.RNN`` arguments is built in place and named in its parent's
scope; a loop nest (:class:`~linen2nnx.migrate.sites.LoopNest`) becomes an ``nnx.List`` the
rewritten loops take their next element from. Plain hoisted sites are the planner's own.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_names,
    bind_args,
    code,
    names_in,
    parse_statement,
    rebound_names,
    single_assign,
    snake_case,
)
from linen2nnx.migrate.factory_fields import FieldFactory
from linen2nnx.migrate.layer_args import builds_mode_layers, check_rnn_carry_init
from linen2nnx.migrate.loop_names import (
    clashes,
    counting,
    free_attribute,
    loop_name_value,
    name_pattern,
    pattern_attr,
    single_name,
)
from linen2nnx.migrate.loop_tests import replayable_test
from linen2nnx.migrate.rules import LAYER_003, MOD_004
from linen2nnx.migrate.sites import ClassPlan, LoopNest, Site, root_site, shape_last_refs
from linen2nnx.migrate.static_locals import static_everywhere


class NestPlanning:
    """The nested and loop-nest part of the :class:`~linen2nnx.migrate.site_planning.SitePlanner` (a
    base class of it): uses the planner's ``ctx``, ``state``, ``add_site``, ``_arg_order``,
    ``_plan_args_at_call`` and ``has_side_effects``."""

    def nesting(self, plan: ClassPlan, node: cst.Call) -> tuple[Site, str, int] | None:
        """(outer layer site, its argument, list index) when ``node`` is built as a layer argument."""
        parent = self.ctx.parent_of(node)
        index = -1
        if isinstance(parent, cst.Element):
            container = self.ctx.parent_of(parent)
            if not isinstance(container, (cst.List, cst.Tuple)):
                return None
            index = [e.value for e in container.elements].index(node)
            parent = self.ctx.parent_of(container)
        if not isinstance(parent, cst.Arg):
            return None
        call = self.ctx.parent_of(parent)
        outer = plan.sites.get(call) if isinstance(call, cst.Call) else None
        if outer is None or outer.rule is None:
            return None
        arg_name = next((name for name, arg in outer.args.items() if arg is parent), None)
        if arg_name is None:
            return None
        if index < 0 and arg_name in outer.rule.nested:
            return outer, arg_name, -1
        if index >= 0 and arg_name == outer.rule.varargs_list:
            return outer, arg_name, index
        return None

    def flag_handed_locals(self, plan: ClassPlan, fn: cst.FunctionDef) -> None:
        """``cell = nn.LSTMCell(4)`` then ``nn.RNN(cell)`` where the local could not be written in place
        (nested_locals.py: it is read twice or in a loop, or a module of its class is built before the read): the
        argument names a module the method builds, or another call-time value, which ``__init__`` does
        not have. A finding, never a constructor that reads an unbound name."""
        static = static_everywhere(plan)
        bound = assigned_names(fn)
        for site in list(plan.sites.values()):
            rule = site.rule
            if rule is None or not (rule.nested or rule.varargs_list):
                continue
            for arg_name, arg in site.args.items():
                if arg_name not in rule.nested and arg_name != rule.varargs_list:
                    continue
                values = arg.value.elements if isinstance(arg.value, (cst.List, cst.Tuple)) else [arg]
                for value in (v.value for v in values):
                    if isinstance(value, cst.Name) and value.value in bound and value.value not in static:
                        self.ctx.report(
                            MOD_004,
                            value,
                            f"{value.value}, handed to {code(site.ctor.func)} as {arg_name}, is a local "
                            "__init__ cannot replay (a module the method builds, or a call-time value)",
                            "build the module in the argument itself",
                        )

    def _nested_name(
        self, node: cst.Call, rule: LayerRule | None, user: ClassPlan | None, class_name: str, counters: dict
    ) -> str:
        """Linen's name of a layer built in another's argument: its ``name=``, which consumes no
        counter, else the next auto-name of its class in the method."""
        _, name_arg = bind_args(self._arg_order(rule, user), node)
        if name_arg is not None and isinstance(name_arg.value, cst.SimpleString):
            return name_arg.value.evaluated_value
        n = counters.get(class_name, 0) or 0
        counters[class_name] = n + 1
        return f"{class_name}_{n}"

    def _flag_in_loop(self, root: Site, node: cst.Call, class_name: str, where: str, subpath: str) -> None:
        """A layer built in another layer's argument in a loop (``nn.RNN(nn.LSTMCell(d))`` per
        iteration): Linen names each ``LSTMCell_<k>`` in the method's scope, beside the list of outer
        layers, and the name map has no entry for ``rnn[k].cell``: a finding, never a silent map."""
        if root.loop is None and root.nest is None:
            return
        self.ctx.report(
            MOD_004,
            node,
            f"{class_name} is built inside {where} in a loop: Linen names each one {class_name}_<k> beside "
            f"the list, which the name map cannot pair with the element's {subpath}",
            "write the loop by hand: an nnx.List of the outer layers, each built around its own",
        )

    def plan_nested(
        self,
        plan: ClassPlan,
        node: cst.Call,
        rule: LayerRule | None,
        nesting: tuple[Site, str, int],
        counters: dict[str, int | None],
        user: ClassPlan | None = None,
    ) -> None:
        """A layer (or a Linen class of the run, e.g. a custom cell in ``nn.RNN``) built as another
        layer's argument: built in place, named in the parent's scope by Linen."""
        outer, arg_name, index = nesting
        subpath = f"{outer.rule.varargs_list}/{index}" if index >= 0 else outer.rule.nested[arg_name]  # type: ignore[union-attr]
        class_name = rule.auto_name if rule else user.name  # type: ignore[union-attr]
        linen_name = self._nested_name(node, rule, user, class_name, counters)
        site = self.add_site(plan, node, attr=f"{outer.attr}/{subpath}", linen_name=linen_name, hoisted=False)
        site.parent, site.nested_arg, site.element = outer, arg_name, index
        outer.nested.append(site)
        if rule is not None:
            check_rnn_carry_init(self.ctx, site, rule, outer)
        root = root_site(site)
        self._flag_in_loop(root, node, class_name, f"nn.{outer.rule.linen}'s {arg_name}", subpath)  # type: ignore[union-attr]
        local_names = set(assigned_names(self.ctx.enclosing_function(node))) - static_everywhere(plan)
        self._view_conflicts(root, site, rule, class_name, outer, local_names)
        moved = self._nested_call_time_args(site, rule, root, outer, class_name, local_names)
        site.moved_args = tuple(moved)
        if moved and rule is not None:
            self.ctx.report(
                LAYER_003,
                node,
                f"{', '.join(moved)} of nn.{rule.linen} applied at the call of "
                f"self.{root.attr} through nnx.view",
            )

    def _nested_call_time_args(
        self,
        site: Site,
        rule: LayerRule | None,
        root: Site,
        outer: Site,
        class_name: str,
        local_names: set[str],
    ) -> list[str]:
        """The nested layer's arguments that read call-time values: a size the dataflow knows, a mode flag
        the nest's ``nnx.view`` sets at the call (returned), or a finding."""
        moved: list[str] = []
        for name, arg in site.args.items():
            uses = (names_in(arg.value) - NOT_LOCAL) & local_names
            if not uses or (rule is not None and (name in rule.nested or name == rule.varargs_list)):
                continue
            value = code(arg.value)
            shape_locals = shape_last_refs(arg.value, uses)
            if shape_locals is not None and not (rule is not None and name in rule.call_args):
                site.shape_refs[name] = shape_locals  # `x.shape[-1]`: the dataflow knows x's size
            elif (
                rule is not None
                and name in rule.call_args
                and root.hoisted
                and _set_otherwise(root, site, name, value)
            ):
                self.ctx.report(
                    MOD_004,
                    arg,
                    f"{name}={value} of nn.{rule.linen} (inside nn.{outer.rule.linen}) would reach, through the "  # type: ignore[union-attr]
                    f"nnx.view setting it at the call of self.{root.attr}, layers of the nest that set it otherwise",
                    "pass the flag to each layer's call by hand",
                )
            elif (
                rule is not None
                and name in rule.call_args
                and root.hoisted
                and root.view_kwargs.get(name, value) == value
            ):
                root.view_kwargs[name] = value  # the call becomes nnx.view(layer, deterministic=...)(x)
                moved.append(name)
            else:
                self.ctx.report(
                    MOD_004,
                    arg,
                    f"argument {name}= of {class_name if rule is None else f'nn.{rule.linen}'} (inside "
                    f"nn.{outer.rule.linen}) uses the call-time value {', '.join(sorted(uses))}",  # type: ignore[union-attr]
                    f"build this {'module' if rule is None else 'layer'} by hand",
                )
        return moved

    def _view_conflicts(
        self,
        root: Site,
        site: Site,
        rule: LayerRule | None,
        class_name: str,
        outer: Site,
        call_time: set[str],
    ) -> None:
        """A layer of the nest that fixes a mode flag the nest's ``nnx.view`` sets from a call-time value
        (``nn.BatchNorm(use_running_average=True)`` beside ``...=not train``), or a class of the run
        with such layers inside: the view would set theirs too."""
        where = f"inside nn.{outer.rule.linen}" if outer.rule is not None else "in the nest"
        if rule is None:
            if root.view_kwargs and site.user is not None and builds_mode_layers(site.user):
                self.ctx.report(
                    MOD_004,
                    site.ctor,
                    f"{class_name} ({where}) builds layers with mode flags, which the nnx.view setting "
                    f"{', '.join(root.view_kwargs)} at the call of self.{root.attr} would set too",
                    "pass the flag to each layer's call by hand",
                )
            return
        for name, arg in site.args.items():
            value = code(arg.value)
            fixed = not ((names_in(arg.value) - NOT_LOCAL) & call_time)  # a call-time one: the caller's loop
            if fixed and name in rule.call_args and root.view_kwargs.get(name, value) != value:
                self.ctx.report(
                    MOD_004,
                    arg,
                    f"{name}={value} of nn.{rule.linen} ({where}) would be overridden by the nnx.view "
                    f"setting {name}={root.view_kwargs[name]} at the call of self.{root.attr}",
                    "build this layer by hand",
                )

    def nest_loop(
        self, node: cst.For, call_time: set[str], counts: dict[str, int], plan: ClassPlan
    ) -> tuple[set[str], dict[str, cst.SimpleStatementLine]] | None:
        """A ``for`` __init__ can replay (see sites.LoopNest): its iterable reads no call-time value
        (``call_time``: the method's locals but the enclosing loops' own). Returns its targets and the
        body's locals that read only the config, the loops' names and earlier such locals."""
        targets = names_in(node.target)
        if not isinstance(node.target, (cst.Name, cst.Tuple)) or node.orelse is not None or node.asynchronous:
            return None
        if targets & rebound_names(node.body):
            return None  # `for w in s: w = w * 2`: a constructor reading `w` reads the body's value
        if (names_in(node.iter) - NOT_LOCAL) & call_time or self.has_side_effects(node.iter):
            return None
        names, stmts = set(targets), {}
        for stmt in node.body.body:
            assigned = single_assign(stmt)
            if assigned is None:
                continue
            name, value = assigned
            if counts.get(name) != 1 or self.has_side_effects(value):
                continue
            if not (names_in(value) - NOT_LOCAL) & (call_time - names):
                names.add(name)
                stmts[name] = stmt
        return names, stmts

    def plan_nest_child(
        self,
        plan: ClassPlan,
        target: cst.Call,
        node: cst.Call,
        rule: LayerRule | None,
        user: ClassPlan | None,
        factory: Any,
        loops: list[tuple[set[str], dict[str, Any]]],
        counters: dict[str, int | None],
        local_names: set[str],
        conditions: list[str],
    ) -> None:
        """A submodule built inside a loop nest (see sites.LoopNest): auto-named, unconditional, on a
        line of the loops' own bodies."""
        what = f"nn.{rule.linen}" if rule else user.name  # type: ignore[union-attr]
        names = (
            factory.linen_names
            if isinstance(factory, FieldFactory)
            else (self.ctx.linen_class_name(target.func, rule.auto_name if rule else user.name),)  # type: ignore[union-attr]
        )
        bound, name_arg = bind_args(self._arg_order(rule, user), target)
        statement = self.ctx.enclosing_statement(node)
        outer = self._outer_loop(statement, len(loops), local_names, set().union(*(n for n, _ in loops)))
        tested = any(isinstance(p, cst.If) for p in self._between(statement, outer))  # loop_tests.py
        why, pattern = self._refusal(plan, outer, conditions, name_arg, len(loops), names, counters, tested)
        single = single_name(self.ctx, name_arg.value) if name_arg is not None and pattern else None
        if why is not None:
            self.state.handled.add(target.func)
            self.ctx.report(
                MOD_004,
                node,
                f"{what} built inside nested loops {why} is not hoisted yet",
                "build the modules in __init__ (an nnx.List) and index it at the call",
            )
            return
        class_name = names[0]
        if pattern is None:
            counters.update(dict.fromkeys(names, None))
        else:
            names = (pattern,)  # the name map's key: `block{i+2}`
        assert isinstance(outer, cst.For)
        nest = plan.nests.get(outer)
        if nest is None:
            nest = plan.nests[outer] = self._loop_nest(outer, loops)
        attr = snake_case(names[0]) if len(names) == 1 else list_attr(factory.name)
        attr = free_attribute(plan, pattern_attr(pattern, class_name) if pattern is not None else attr)
        site = self.add_site(plan, target, attr=attr, linen_name=names[0], hoisted=True)
        site.container, site.nest = "list", nest
        site.single_name = single or ""
        nest.sites.append(site)
        self.state.stmt_prefix.setdefault(outer, []).append(
            parse_statement(f"{nest.iterator(site)} = iter(self.{attr})\n")
        )  # what the loops take the next element of
        nest.statements[id(site)] = statement
        self._plan_args_at_call(plan, site, rule, what, bound, local_names, nest.names)
        plan.hoisted_order.append(site)

    def _refusal(
        self,
        plan: ClassPlan,
        outer: cst.CSTNode | None,
        conditions: list[str],
        name_arg: cst.Arg | None,
        depth: int,
        names: tuple[str, ...],
        counters: dict[str, int | None],
        tested: bool = False,
    ) -> tuple[str | None, str | None]:
        """Why a module of a loop nest is not hoisted (None: it is), and the pattern of its names when
        it is built with ``name=`` in one loop (``block{i+2}``). ``tested``: built under an ``if`` of the
        loop body, on the iterations it holds only, so ``name=`` patterns (one per iteration) are not."""
        if tested and name_arg is not None:
            return "with name= under an if: its list skips the iterations the test fails", None
        pattern = None
        if name_arg is not None and depth == 1 and isinstance(outer, cst.For) and not conditions:
            value = loop_name_value(self.ctx, name_arg.value)  # `f'block{i + 1}'`, or a local bound to it
            pattern = self._nest_name(plan, value, outer)  # the list's names
        if not isinstance(outer, cst.For):
            return "on a line the loops do not hold directly (inside an if / with)", None
        if conditions:
            return "under a condition", None
        if name_arg is not None and pattern is None:
            return "with name=: Linen names it once per iteration", None
        if pattern is None and any(counters.get(n, 0) != 0 for n in names):
            return f"after other {names[0]}s: its Linen names depend on theirs", None
        return None, pattern

    @staticmethod
    def _nest_name(plan: ClassPlan, value: cst.BaseExpression, loop: cst.For) -> str | None:
        """The element-name pattern of ``name=value`` for a module built once per iteration of the one
        loop ``loop`` (``enumerate(stages[1:], 1)`` with ``f'block{i + 1}'``: ``block{i+2}``), its
        elements in the order the loop builds them; None when not followed or read by another list."""
        counted = counting(loop)
        pattern = name_pattern(value, *counted) if counted is not None else None
        return pattern if pattern is not None and not clashes(pattern, list(plan.sites.values())) else None

    def _outer_loop(
        self, statement: cst.CSTNode | None, depth: int, local_names: set[str], loop_names: set[str]
    ) -> cst.CSTNode | None:
        """The ``for`` ``depth`` loops up from ``statement`` when only loop bodies lie between them (a
        ``For``), or ``if`` statements whose tests read no local but the loops' names (loop_tests.py,
        replayed by ``__init__``); else the first node that is neither."""
        outer = statement
        seen = 0
        while outer is not None and not (isinstance(outer, cst.For) and seen == depth):
            outer = self.ctx.parent_of(outer)
            if isinstance(outer, cst.For):
                seen += 1
            elif isinstance(outer, cst.If) and replayable_test(outer.test, local_names, loop_names):
                continue
            elif not isinstance(outer, (cst.IndentedBlock, cst.For, cst.Else)):
                break
        return outer

    def _between(self, statement: cst.CSTNode | None, outer: cst.CSTNode | None) -> list[cst.CSTNode]:
        """The nodes from ``statement`` up to ``outer`` (excluded)."""
        found, cur = [], statement
        while cur is not None and cur is not outer:
            found.append(cur)
            cur = self.ctx.parent_of(cur)
        return found

    @staticmethod
    def _loop_nest(outer: cst.For, loops: list[tuple[set[str], dict[str, Any]]]) -> LoopNest:
        """The nest rooted at ``outer``: the loops' names and their replayable body locals."""
        return LoopNest(
            outer,
            set().union(*(n for n, _ in loops)),
            {k: v for _, stmts in loops for k, v in stmts.items()},
        )


def list_attr(field: str) -> str:
    """The nnx.List attribute for what a factory field bound to several classes builds in a loop
    (``block_cls`` -> ``block``): Linen names the elements after whichever class it is."""
    for suffix in ("_cls", "_class", "_def", "_module", "_factory"):
        if field.endswith(suffix) and len(field) > len(suffix):
            return field.removesuffix(suffix)
    return f"{field}_modules"


def _set_otherwise(root: Site, site: Site, name: str, value: str) -> bool:
    """Whether a layer of ``root``'s nest planned before ``site`` gives mode flag ``name`` another value
    than ``value``, or a class of the run in it builds layers with mode flags (the view would set them)."""
    pending = list(root.nested)
    while pending:
        other = pending.pop()
        pending.extend(other.nested)
        if other is site:
            continue
        if other.rule is None and other.user is not None and builds_mode_layers(other.user):
            return True
        arg = other.args.get(name)
        if (
            other.rule is not None
            and name in other.rule.call_args
            and arg is not None
            and code(arg.value) != value
        ):
            return True
    return False
