"""Planning the sites of a class: where each submodule and variable is built, under which conditions.

Part of the *analyse* step. :class:`SitePlanner` turns a constructor call the ``CompactCollector``
(or ``setup()``) meets into a :class:`~linen2nnx.migrate.sites.Site` on the plan: a hoisted layer or an
``nnx.List`` built in a loop here; a layer nested in another's arguments or a replayed loop nest in its base
:class:`~linen2nnx.migrate.nest_planning.NestPlanning`; a variable created in ``__init__`` or lazily in
its base :class:`~linen2nnx.migrate.variable_planning.VariablePlanning`. It also works out the
conditions (``if`` tests on config, restated shape tests) a site is built under.
"""

from __future__ import annotations

from collections.abc import Collection

import libcst as cst

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.call_time_builds import method_parameters, other_branch_builds, presence_part
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    attribute_for,
    bind_args,
    code,
    names_in,
    negated,
    reads_only,
    self_attr,
    snake_case,
)
from linen2nnx.migrate.factory_fields import FieldFactory
from linen2nnx.migrate.foreign_locals import local_value, plain_foreign
from linen2nnx.migrate.guard_conditions import config_part, guards
from linen2nnx.migrate.input_sizes import input_size_arg
from linen2nnx.migrate.key_chains import call_time_message
from linen2nnx.migrate.layer_args import check_layer_args, einsum_bias_shape
from linen2nnx.migrate.local_sites import held_submodule
from linen2nnx.migrate.loop_chains import LoopChains, names_of, offset_of
from linen2nnx.migrate.loop_locals import loop_local_value
from linen2nnx.migrate.loop_names import clashes, free_attribute, loop_name_pattern, pattern_attr
from linen2nnx.migrate.merge_flags import moved_flag
from linen2nnx.migrate.nest_planning import NestPlanning, list_attr
from linen2nnx.migrate.rules import (
    API_002,
    LAYER_002,
    LAYER_003,
    MOD_004,
    MOD_006,
    MOD_008,
)
from linen2nnx.migrate.shape_tests import (
    POOLING,
    SPATIAL_ARGS_UNDECIDED,
    SPATIAL_LAYERS,
    ShapeTest,
    keeps_other_axes,
    restated,
    restated_last_axes,
    shape_test_of,
    strided,
)
from linen2nnx.migrate.side_effects import has_side_effects
from linen2nnx.migrate.sites import (
    ClassPlan,
    LoopInfo,
    Site,
    loop_name_prefix,
    shape_last_refs,
)
from linen2nnx.migrate.sizing import Sizer
from linen2nnx.migrate.unknown_builders import check_handed_factories, flag_unknown_builder
from linen2nnx.migrate.variable_planning import VariablePlanning


class SitePlanner(NestPlanning, LoopChains, VariablePlanning):
    """Records the sites of a plan (the original tree only; no rewriting here)."""

    def __init__(self, ctx: FileContext, sizer: Sizer) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.sizer = sizer  # static sizes of restated shape tests

    def _arg_order(self, site_rule: LayerRule | None, user: ClassPlan | None) -> tuple[str, ...]:
        if site_rule is not None:
            return site_rule.linen_arg_order()
        assert user is not None
        return tuple(user.field_names)

    def has_side_effects(self, value: cst.BaseExpression, fields: Collection[str] = ()) -> bool:
        return has_side_effects(self.ctx, value, fields)

    def flag_unknown_submodule(self, node: cst.Call, plan: ClassPlan) -> None:
        """``Foo(...)(x)`` in @nn.compact with ``Foo`` neither a built-in layer nor a Linen class of the run:
        most likely a Linen submodule defined elsewhere, which would stay unconverted. Say so.

        ``self.conv(...)(x)`` with ``conv`` a field is a submodule built by a factory the caller passes
        in (``conv: ModuleDef = nn.Conv``, big_vision / imagenet style). Left as it is, the NNX class
        would build a fresh module on every call (or call a Linen class outside any scope): a silent
        failure, so it is reported, and blocks the rewrite. So is ``m = Foo(...)`` then ``m(x)``: the
        module a local bound once holds."""
        ctor, via = node.func, ""
        if isinstance(ctor, cst.Name):
            ctor, via = local_value(self.ctx, node, ctor.value), f" applied through the local {ctor.value}"
            if isinstance(ctor, cst.Call) and not plain_foreign(self.ctx, node, ctor):
                return
        if not isinstance(ctor, cst.Call):
            return
        if flag_unknown_builder(self.ctx, plan, node, ctor):
            return  # an element of a field of module factories, called at call time
        if not isinstance(ctor.func, (cst.Name, cst.Attribute)):
            return
        if self.ctx.layer_rule_of(ctor.func) or self.ctx.user_class_of(ctor.func):
            return  # a known layer / class: planned on its own
        factory_field = self_attr(ctor.func)
        if factory_field is not None and self.ctx.field_factory(plan, factory_field) is not None:
            return  # built from a module-factory field whose bindings the codemod follows: planned there
        if factory_field in plan.field_names and factory_field not in plan.factories:
            self.ctx.report(
                MOD_008,
                ctor,
                f"self.{factory_field}(...)(...) builds a submodule from the "
                f"module-factory field {factory_field!r} at call time",
                f"build it in __init__: self.<name> = {factory_field}(in_features, ..., rngs=rngs), "
                "with an NNX layer class passed in",
            )
            return
        name = ctor.func.value if isinstance(ctor.func, cst.Name) else ctor.func.attr.value
        if isinstance(ctor.func, cst.Name) and self._bound_to_partial(ctor, name):
            # `QKVDense = partial(Dense, ...)` then `QKVDense(name='q')(x)`: a module built through a local
            self.ctx.report(
                MOD_004,
                ctor,
                f"{name}(...)(...) builds a submodule through the local {name}, "
                "which the codemod does not follow",
                "build the module in __init__ with its class",
            )
            return
        if not name[:1].isupper() or self.ctx.self_call(ctor) is not None:
            return
        qualnames = self.ctx.qualnames(ctor.func)
        if any(q.startswith(("jax.", "jnp.", "numpy.", "functools.")) for q in qualnames):
            return
        if self._imported_layer_subclass(ctor, name):
            return
        self.ctx.report(
            MOD_006,
            ctor,
            f"{name}(...){via or '(...)'} looks like a Linen submodule that is not part of this run",
            "migrate the file that defines it in the same run, or convert it by hand",
        )

    def applied(self, node: cst.Call) -> bool:
        """Is ``node`` immediately called (``node(...)``): a module built and applied in place?"""
        parent = self.ctx.parent_of(node)
        return isinstance(parent, cst.Call) and parent.func is node

    def _imported_layer_subclass(self, ctor: cst.Call, name: str) -> bool:
        """``StdConv(...)`` of a converted layer subclass another file of the run defines: reported as
        such (it is part of the run, and NNX now), not as a submodule from outside the run."""
        rule = self.ctx.imported_layer_subclass(ctor.func)
        if rule is None:
            return False
        self.ctx.report(
            API_002,
            ctor,
            f"{name} (an nn.{rule.linen} subclass with a param override, imported from another file of "
            f"this run) is rewritten there as an nnx.{rule.nnx} subclass; building it from another file "
            "is not converted",
            f"build it by hand: {name}(in_features, ..., rngs=rngs) in __init__, as the file defining it does",
        )
        return True

    def _bound_to_partial(self, node: cst.CSTNode, name: str) -> bool:
        """Is ``name`` a local of the function around ``node`` assigned a ``functools.partial(...)``?"""
        owner = self.ctx.enclosing_function(node)
        for call in calls_in(owner.body) if owner is not None else ():
            assign = self.ctx.parent_of(call)
            if (
                isinstance(assign, cst.Assign)
                and assign.value is call
                and any(isinstance(t.target, cst.Name) and t.target.value == name for t in assign.targets)
                and self.ctx.qualnames(call.func) & {"functools.partial"}
            ):
                return True
        return False

    def conditions_of(
        self,
        node: cst.CSTNode,
        fn: cst.FunctionDef,
        local_names: set[str],
        plan: ClassPlan | None = None,
        skipped: frozenset[str] = frozenset(),
        stateless: bool = False,
        presence: dict[str, str] | None = None,
    ) -> list[str] | None:
        """Config tests of the ``if``s around ``node`` (``not (t)`` on else branches) and of the early
        returns before it (guard_conditions.py); None when a test uses a call-time value, so the
        construction cannot be decided in __init__ -- but for a shape
        test (``if residual.shape != y.shape``), restated once the dataflow has run (shape_tests.py).
        A test whose locals are all ``skipped`` (a loop's own names) is left out: see LayerRule.no_variables;
        for a ``stateless`` module, so is a test's call-time part (guard_conditions.config_part).
        ``presence`` (a dict to fill): a test of whether an optional input of ``fn`` is given stays in
        the list whole, and the dict maps it to its config part (call_time_builds.py)."""
        conditions: list[str] = []
        optional = method_parameters(fn) if presence is not None else frozenset()
        for guard in guards(node, fn, self.ctx.parent_of):
            cur, call_time = guard.node, bool((names_in(guard.node.test) - NOT_LOCAL) & local_names)
            if type(cur) is cst.If and reads_only(cur.test, local_names, skipped):
                continue  # built every iteration, used where Linen built it
            if guard.early and call_time:
                continue  # `if decode and cached: return cache`: Linen's init takes the whole path
            if stateless and call_time:  # holding nothing, built whatever the call-time part says
                part = config_part(cur.test, guard.holds, local_names)
                if part is None:
                    return None
                conditions[:0] = [part] if part else []
                continue
            part = (
                presence_part(cur.test, guard.holds, optional, local_names)
                if optional and call_time
                else None
            )
            if part is not None and type(cur) is cst.If and not other_branch_builds(cur, guard.holds):
                test = code(cur.test)
                conditions.insert(0, test if guard.holds else negated(test))
                presence[conditions[0]] = part  # type: ignore[index]
                continue
            if type(cur) is cst.IfExp and (call_time or calls_in(cur.orelse if guard.holds else cur.body)):
                return None  # a call-time test of an expression (no shape test restates it), or the other
                # branch may build too: its auto-names count from the same start
            test = code(cur.test)
            if call_time and type(cur) is cst.If:
                shape = None if plan is None else shape_test_of(self.ctx, plan, cur, fn, local_names)
                if shape is None:
                    return None
                test = shape.token
            conditions.insert(0, test if guard.holds else negated(test))
        return conditions

    def restate_shape_tests(self, plan: ClassPlan) -> None:
        """Each shape test in ``__init__`` terms (see shape_tests.py), or a manual finding on what it builds."""
        for test, fn in plan.shape_tests.values():
            token = test.token
            under = [s for s in plan.hoisted_order if any(token in c for c in s.conditions)]
            text = self._restated(plan, test, fn, under)
            for site in under:
                if text is None:
                    self.state.handled.add(site.ctor)
                    self.ctx.report(
                        MOD_004,
                        site.ctor,
                        f"{site.attr} is built under `{code(test.node.test)}`, "
                        "which the codemod cannot restate from constructor arguments",
                        "create it in __init__ under a test of the config, and keep the call's test",
                    )
                    continue
                site.conditions = [c.replace(token, text) for c in site.conditions]

    def _restated(
        self, plan: ClassPlan, test: ShapeTest, fn: cst.FunctionDef, under: list[Site]
    ) -> str | None:
        seen = plan.if_envs.get(test.node)
        if seen is None or not under:
            return None
        env, params = seen
        self.state.flow_method = fn.name.value
        size = lambda f: None if f is None else self.sizer.static_size(plan, f, params, test.node)  # noqa: E731
        if test.last_refs:
            return restated_last_axes(test, {n: size(env.get(n)) for n in test.last_refs})
        widths = [size(env.get(test.a)), size(env.get(test.b))]
        if None in widths:
            return None
        if any(self.ctx.qualnames(c.func) & POOLING for c in calls_in(fn)):
            return None
        if not keeps_other_axes(self.ctx, plan, fn, test.node):
            return None
        strides = []
        first = plan.hoisted_order.index(under[0])
        for site in plan.hoisted_order[:first]:
            rule = site.rule
            if rule is None or rule.linen not in SPATIAL_LAYERS:
                continue
            given = dict(site.args)
            if isinstance(site.factory, FieldFactory):
                if set(site.factory.partial_keywords) & {"strides", "padding", *SPATIAL_ARGS_UNDECIDED}:
                    return None
            if any(a in given for a in SPATIAL_ARGS_UNDECIDED):
                return None
            padding = given.get("padding")
            if padding is not None and code(padding.value).strip("'\"") != "SAME":
                return None
            if "strides" in given:
                kernel = given.get("kernel_size")
                moved = strided(given["strides"].value, kernel.value if kernel else None)
                if moved is None:
                    return None
                strides.append(moved)
        return restated(test, widths[0], widths[1], strides)  # type: ignore[arg-type]

    def plan_compact_child(
        self,
        plan: ClassPlan,
        node: cst.Call,
        rule: LayerRule | None,
        user: ClassPlan | None,
        loop: LoopInfo | None,
        counters: dict[str, int | None],
        local_names: set[str],
        conditions: list[str] | None = None,
        factory: object = None,
        origin: cst.Call | None = None,
    ) -> None:
        """A submodule built in @nn.compact outside any loop nest: hoisted into ``__init__`` under the
        attribute of its Linen name (an ``nnx.List`` element when built in a loop). ``origin``: the
        call as written, where its findings go (``node`` stands for what a factory builds)."""
        at = origin if origin is not None else node
        what = f"nn.{rule.linen}" if rule else user.name  # type: ignore[union-attr]
        class_name = self.ctx.linen_class_name(node.func, rule.auto_name if rule else user.name)  # type: ignore[union-attr]
        bound, name_arg = bind_args(self._arg_order(rule, user), node)
        names = factory.linen_names if isinstance(factory, FieldFactory) and factory.linen_names else ()
        names = names or (class_name,)
        if name_arg is not None:
            named = self._explicit_name(plan, name_arg, loop, what, class_name)
        elif counters.get(class_name, 0) is None and loop is None:
            self._plan_loop_tail(
                plan, node, rule, what, class_name, bound, local_names, conditions, names, at
            )
            return
        elif loop is not None and (head := self.chained_list(plan, loop, names, counters)) is not None:
            if self.extends_list(plan, node, at, head, loop, names, conditions):
                self.plan_loop_extension(plan, node, rule, what, head, loop, bound, local_names)
            return
        elif (
            loop is not None
            and factory is None
            and self.planned_prefixed(
                plan, node, rule, what, class_name, loop, conditions, counters, bound, local_names
            )
        ):
            return
        else:
            named = self._auto_name(
                at, loop, counters, what, class_name, names, factory, list(plan.sites.values())
            )
        if named is None:
            return
        linen_name, attr, container = named
        attr = free_attribute(plan, attr)  # taken by another module or a field: a distinct attribute
        site = self.add_site(plan, node, attr=attr, linen_name=linen_name, hoisted=True)
        site.container, site.loop = container, loop
        if name_arg is None and container == "list" and linen_name != class_name:
            site.counted_as = class_name  # `Dense_{i+2}`: numbered on after Dense_0 and Dense_1
        if loop is not None and loop.index:
            self.state.indexed_loops[loop.node] = (
                loop  # `for v in seq` becomes `for v_index, v in enumerate(seq)`
            )
        self._plan_args_at_call(plan, site, rule, what, bound, local_names, {loop.var} if loop else set())
        plan.hoisted_order.append(site)

    def _explicit_name(
        self, plan: ClassPlan, name_arg: cst.Arg, loop: LoopInfo | None, what: str, class_name: str
    ) -> tuple[str, str, str | None] | None:
        """(Linen name, attribute, container) of a module built with ``name=``: a literal, or in a loop
        an f-string prefix (``f'layer_{i}'``) naming the elements of an ``nnx.List``."""
        name_value = name_arg.value
        if isinstance(name_value, cst.SimpleString) and loop is None:
            linen_name = name_value.evaluated_value
            return linen_name, attribute_for(linen_name, class_name), None  # name='if' -> self.if_, ...
        # only where the variable is the element's list index: ``range(n)`` or ``enumerate``'s count, not
        # ``range(2, n)`` or a config sequence, whose names (``layer_2``, ``layer_64``) index nothing
        if loop is not None and (prefix := loop_name_prefix(name_value, loop.index or loop.var)):
            return prefix, snake_case(prefix), "list"
        pattern = loop_name_pattern(name_value, loop) if loop is not None else None
        if pattern is not None and not clashes(pattern, list(plan.sites.values())):
            return pattern, pattern_attr(pattern, class_name), "list"  # `EncDecBlock{i}`, `unit{i+2}`
        self.ctx.report(
            MOD_004,
            name_arg,
            f"{what}(name=...) is not a literal the codemod can follow",
            "use a string literal, or f'prefix_{i}' inside `for i in range(n)`",
        )
        return None

    def _auto_name(
        self,
        node: cst.Call,
        loop: LoopInfo | None,
        counters: dict[str, int | None],
        what: str,
        class_name: str,
        names: tuple[str, ...] = (),
        factory: object = None,
        sites: list[Site] | None = None,
    ) -> tuple[str, str, str | None] | None:
        """(Linen name, attribute, container) of an auto-named module (``Dense_0``), counting it; in a
        loop, the whole ``nnx.List`` of ``Dense``s (of whichever class a factory field builds; after
        ``n`` others, a list whose element ``k`` is ``Dense_{k+n}``). None, with a finding, when the
        name depends on a loop's length. ``sites``: the class's sites so far."""
        if loop is not None and len(names) > 1 and isinstance(factory, FieldFactory):
            if any(counters.get(n, 0) != 0 for n in names):  # after others, or after a loop (None)
                self.ctx.report(
                    MOD_004,
                    node,
                    f"auto-named {what} built in a loop after other {' or '.join(n + 's' for n in names)}",
                    "give the loop's modules name=f'prefix_{i}'",
                )
                return None
            counters.update(dict.fromkeys(names, None))
            return names[0], list_attr(factory.name), "list"
        n = counters.get(class_name, 0)
        if n is None:
            self.ctx.report(
                MOD_004,
                node,
                f"auto-named {what} after a loop that built {class_name}s: its "
                "Linen name depends on the loop length",
                "give it an explicit name=",
            )
            return None
        if loop is not None:
            # after n others of the class, each built whenever the loop runs (the collector checked):
            # Linen numbers the loop's modules on from n, element k is `{class_name}_{k + n}`
            pattern = f"{class_name}_{{i+{n}}}" if n else class_name
            if n and (factory is not None or clashes(pattern, sites or [])):
                self.ctx.report(
                    MOD_004,
                    node,
                    f"auto-named {what} built in a loop after other {class_name}s",
                    "give the loop's modules name=f'prefix_{i}'",
                )
                return None
            counters[class_name] = None
            return pattern, snake_case(class_name), "list"
        counters[class_name] = n + 1
        linen_name = f"{class_name}_{n}"
        return linen_name, snake_case(linen_name), None

    def _plan_loop_tail(
        self,
        plan: ClassPlan,
        node: cst.Call,
        rule: LayerRule | None,
        what: str,
        class_name: str,
        bound: dict[str, cst.Arg],
        local_names: set[str],
        conditions: list[str] | None,
        names: tuple[str, ...],
        at: cst.Call,
    ) -> None:
        """An auto-named module after a loop that built its class: Linen names it
        ``{class_name}_{loop length}``, the next element of the loop's ``nnx.List`` -- when both are of
        the same classes (not a ``Block`` after a factory field's ``Block`` or ``Wide`` list)."""
        tail_of = self._loop_list(plan, class_name)
        stopped = tail_of is not None and tail_of.attr in plan.stopped_lists
        if tail_of is not None and names_of(tail_of) != names:
            self.state.handled.add(node.func)
            self.ctx.report(
                MOD_004,
                at,
                f"auto-named {what} after a loop that built {' or '.join(n + 's' for n in names_of(tail_of))}: its Linen "
                "name depends on the class a factory field builds",
                "give it an explicit name=",
            )
            return
        if tail_of is None or conditions or stopped:
            guarded = any(  # the loop itself ran under a condition: how many it built depends on it too
                s.container == "list" and (s.counted_as or s.linen_name) == class_name and s.conditions
                for s in plan.hoisted_order
            )
            self.state.handled.add(node.func)  # this finding says it all
            self.ctx.report(
                MOD_004,
                at,
                f"auto-named {what} after a loop that built {class_name}s"
                + (" under a condition" if (conditions and tail_of is not None) or guarded else "")
                + (" and a loop left as it was" if stopped else "")
                + ": its Linen name "
                "depends on the loop length",
                "give it an explicit name=",
            )
            return
        site = self.add_site(plan, node, attr=tail_of.attr, linen_name=class_name, hoisted=True)
        site.container, site.tail_of = "list", tail_of
        if tail_of.loop is not None:
            site.offset = offset_of(tail_of)  # its index, should a later loop go on filling the list
        tail_of.tail.append(site)
        tail_of.extensions.append(site)
        self._plan_args_at_call(plan, site, rule, what, bound, local_names, set())
        plan.hoisted_order.append(site)

    @staticmethod
    def _loop_list(plan: ClassPlan, class_name: str) -> Site | None:
        """The unconditional nnx.List a loop built of auto-named ``class_name``s (Linen ``Dense_{i}``)."""
        return next(
            (
                s
                for s in plan.hoisted_order
                if (s.loop is not None or s.nest is not None)
                and s.container == "list"
                and (s.counted_as or s.linen_name) == class_name
                and not s.conditions
                and s.exclusive_with is None
                and s.tail_of is None
                and s.extends is None
            ),
            None,
        )

    def _plan_args_at_call(
        self,
        plan: ClassPlan,
        site: Site,
        rule: LayerRule | None,
        what: str,
        bound: dict[str, cst.Arg],
        local_names: set[str],
        loop_names: set[str],
    ) -> None:
        """Constructor arguments that read call-time values: mode flags move to the call, ``x.shape[-1]``
        waits for the dataflow, anything else is a finding."""
        moved = []
        for arg_name, arg in bound.items():
            if rule is not None and (arg_name in rule.nested or arg_name == rule.varargs_list):
                continue  # layers built in this argument are checked on their own
            if plan.key_replay is not None and (key := plan.key_replay.source(arg)) is not None:
                site.arg_sources[arg_name] = key  # a key of a split chain __init__ replays
                continue
            uses = (names_in(arg.value) - NOT_LOCAL) & (local_names - loop_names)
            if uses:
                shape_locals = shape_last_refs(arg.value, uses)
                in_loop = loop_local_value(self.ctx, site, arg.value, uses)
                if (rule is not None and arg_name in rule.call_args) or moved_flag(site, arg_name, arg):
                    moved.append(arg_name)
                elif rule is None and in_loop is not None:
                    site.arg_sources[arg_name] = in_loop  # computed in the loop's comprehension
                elif shape_locals is not None:
                    site.shape_refs[arg_name] = shape_locals  # `x.shape[-1]`: the dataflow knows x's size
                elif (held := held_submodule(plan, arg.value)) is not None:
                    site.arg_sources[arg_name] = held  # a local holding a submodule: the attribute
                elif not input_size_arg(self.ctx, plan, site, arg_name, arg, uses, what):  # `x.shape[3]`
                    self.ctx.report(MOD_004, arg, *call_time_message(self.ctx, arg_name, arg, uses, what))
        site.moved_args = tuple(moved)
        if moved:
            self.ctx.report(
                LAYER_003, site.ctor, f"{', '.join(moved)} of {what} moved to the call of self.{site.attr}"
            )
        for arg in site.ctor.args if rule is None else ():  # a layer's unpacked arguments: L2N-LAYER-002
            uses = (names_in(arg.value) - NOT_LOCAL) & (local_names - loop_names) if arg.star else set()
            if uses:  # `kw = dict(self.block); kw['scale'] = 2.0; Block(**kw)`: kw never reaches __init__
                self.ctx.report(
                    MOD_004,
                    arg,
                    f"{arg.star}{' '.join(code(arg.value).split())} of {what} unpacks the call-time value "
                    f"{', '.join(sorted(uses))}, which __init__ cannot replay",
                    "build the arguments in __init__ from constructor arguments and config, or pass them by name",
                )

    def add_site(self, plan: ClassPlan, call: cst.Call, *, attr: str, linen_name: str, hoisted: bool) -> Site:
        rule = self.ctx.layer_rule_of(call.func)
        user = None if rule else self.ctx.user_class_of(call.func)
        bound, _ = bind_args(self._arg_order(rule, user), call)
        lifted = self.ctx.check_lifted(call)  # validated (a finding when not converted), names consumed
        site = Site(
            kind="layer" if rule else "module",
            attr=attr,
            linen_name=linen_name,
            ctor=call,
            hoisted=hoisted,
            rule=rule,
            user=user,
            args=bound,
            lifted=lifted or None,
        )
        plan.sites[call] = site
        self.state.handled.add(call.func)
        if rule is not None and rule.manual_reason:
            self.ctx.report(
                LAYER_002,
                call,
                f"nn.{rule.linen}: {rule.manual_reason}",
                "see docs/nnx_facts.md#layers-and-parameter-layouts (the layer table: linen2nnx/layers.py)",
            )
        no_bias = "use_bias" in bound and code(bound["use_bias"].value) == "False"
        if rule is not None and rule.linen == "Einsum" and not no_bias and einsum_bias_shape(bound) is None:
            self.ctx.report(
                LAYER_002,
                call,
                "nn.Einsum bias shape cannot be derived statically (needs literal "
                "shape and einsum_str without '...')",
                "give nnx.Einsum its bias_shape by hand",
            )
        if rule is not None:
            check_layer_args(self.ctx, rule, site, bound)
        if user is not None and self.state.linen_classes.get(user.name) is not user:
            check_handed_factories(self.ctx, plan, user, bound)
        return site
