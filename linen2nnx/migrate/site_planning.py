"""Planning the sites of a class: where each submodule and variable is built, under which conditions.

Part of the *analyse* step. :class:`SitePlanner` turns a constructor call the
:class:`~linen2nnx.migrate.compact_collect.CompactCollector` (or ``setup()``) meets into a
:class:`~linen2nnx.migrate.sites.Site` on the plan: a hoisted layer, an ``nnx.List`` built in a loop, a
layer nested in another's arguments, a replayed loop nest, a variable created in ``__init__`` or
lazily; and it works out the conditions (``if`` tests on config, restated shape tests) it is built
under.
"""

from __future__ import annotations

import keyword
from typing import Any

import libcst as cst

from linen2nnx.layers import ARG_CHECKS, LayerRule, nnx_ctor_params
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import FastVisitor, calls_in
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_names,
    bind_args,
    code,
    names_in,
    parse_statement,
    self_attr,
    single_assign,
    snake_case,
)
from linen2nnx.migrate.factory_fields import FieldFactory
from linen2nnx.migrate.lazy_vars import LazyVar
from linen2nnx.migrate.rules import (
    API_002,
    LAYER_001,
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
    parse_shape_test,
    restated,
    strided,
)
from linen2nnx.migrate.sites import (
    COLLECTION_TYPES,
    ClassPlan,
    LoopInfo,
    LoopNest,
    Site,
    einsum_bias_shape,
    loop_name_prefix,
    root_site,
    shape_last_refs,
)
from linen2nnx.migrate.sizing import Sizer


class SitePlanner:
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

    def has_side_effects(self, value: cst.BaseExpression) -> bool:
        command = self
        found = False

        class V(FastVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                nonlocal found
                if (
                    command.ctx.self_call(node)
                    or command.ctx.layer_rule_of(node.func)
                    or command.ctx.user_class_of(node.func)
                    or isinstance(node.func, cst.Call)
                ):
                    found = True

        V().walk(value)
        return found

    def plan_lazy_variable(
        self, plan: ClassPlan, node: cst.Call, conditions: list[str] | None, local_names: set[str]
    ) -> bool:
        """``self.variable`` of a non-param collection that Linen creates on the init call (under a
        call-time condition, or sized by call-time values, or a decode cache): created on the first
        call in NNX too (see lazy_vars.py). True when planned so."""
        if self.ctx.self_call(node) != "variable":
            return False
        args = [a for a in node.args if a.keyword is None and not a.star]
        if (
            len(args) < 3
            or len(args) != len(node.args)
            or not all(isinstance(a.value, cst.SimpleString) for a in args[:2])
        ):
            return False
        collection, name = args[0].value.evaluated_value, args[1].value.evaluated_value  # type: ignore[union-attr]
        var_type = COLLECTION_TYPES.get(collection)
        call_time = any((names_in(a.value) - NOT_LOCAL) & local_names for a in args[2:])
        if (
            var_type is None
            or collection == "params"
            or not (conditions is None or call_time or collection == "cache")
        ):
            return False
        statement = self.ctx.statement_of(node)
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        attr = name if name.isidentifier() else snake_case(name)
        taken = (
            set(plan.field_names)
            | {s.attr for s in plan.sites.values()}
            | {v.attr for v in plan.lazy_vars.values()}
        )
        while attr in taken:
            attr += "_"
        self.state.handled.add(node)
        plan.lazy_vars[node] = LazyVar(
            collection, name, attr, var_type, statement, self._call_time_when(node)
        )
        return True

    def _call_time_when(self, node: cst.CSTNode) -> str:
        """The ``if`` tests around ``node`` in its method, when they only read the method's parameters
        and config (``decode``, ``not self.deterministic``); "True" otherwise."""
        fn = self.ctx.enclosing_function(node)
        if fn is None:
            return "True"
        params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)} - {"self"}
        tests: list[str] = []
        prev, cur = node, self.ctx.parent_of(node)
        while cur is not None and cur is not fn:
            if isinstance(cur, cst.If):
                if (names_in(cur.test) - NOT_LOCAL - {"self"}) - params:
                    return "True"
                if prev is cur.body:
                    tests.insert(0, code(cur.test))
                elif prev is cur.orelse:
                    tests.insert(0, f"not ({code(cur.test)})")
            prev, cur = cur, self.ctx.parent_of(cur)
        if not tests:
            return "True"
        return " and ".join(f"({t})" if len(tests) > 1 else t for t in tests)

    def flag_unknown_submodule(self, node: cst.Call, plan: ClassPlan) -> None:
        """``Foo(...)(x)`` in @nn.compact with ``Foo`` neither a built-in layer nor a Linen class of the run:
        most likely a Linen submodule defined elsewhere, which would stay unconverted. Say so.

        ``self.conv(...)(x)`` with ``conv`` a field is a submodule built by a factory the caller passes
        in (``conv: ModuleDef = nn.Conv``, big_vision / imagenet style). Left as it is, the NNX class
        would build a fresh module on every call (or call a Linen class outside any scope): a silent
        failure, so it is reported, and blocks the rewrite."""
        ctor = node.func
        if not isinstance(ctor, cst.Call) or not isinstance(ctor.func, (cst.Name, cst.Attribute)):
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
        self.ctx.report(
            MOD_006,
            ctor,
            f"{name}(...)(...) looks like a Linen submodule that is not part of this run",
            "migrate the file that defines it in the same run, or convert it by hand",
        )

    def applied(self, node: cst.Call) -> bool:
        """Is ``node`` immediately called (``node(...)``): a module built and applied in place?"""
        parent = self.ctx.parent_of(node)
        return isinstance(parent, cst.Call) and parent.func is node

    def _bound_to_partial(self, node: cst.CSTNode, name: str) -> bool:
        """Is ``name`` a local of the function around ``node`` assigned a ``functools.partial(...)``?"""
        owner = self.ctx.enclosing_function(node)
        if owner is None:
            return False
        command = self
        found = False

        class Assigns(FastVisitor):
            def visit_Assign(self, assign: cst.Assign) -> None:
                nonlocal found
                if (
                    any(isinstance(t.target, cst.Name) and t.target.value == name for t in assign.targets)
                    and isinstance(assign.value, cst.Call)
                    and command.ctx.qualnames(assign.value.func) & {"functools.partial"}
                ):
                    found = True

        Assigns().walk(owner.body)
        return found

    def conditions_of(
        self, node: cst.CSTNode, fn: cst.FunctionDef, local_names: set[str], plan: ClassPlan | None = None
    ) -> list[str] | None:
        """Config tests of the ``if``s around ``node`` (``not (t)`` on else branches); None when a test
        uses a call-time value, so the construction cannot be decided in __init__ -- but for a shape
        test (``if residual.shape != y.shape``), restated once the dataflow has run (shape_tests.py)."""
        conditions: list[str] = []
        prev, cur = node, self.ctx.parent_of(node)
        while cur is not None and cur is not fn:
            if isinstance(cur, cst.If):
                if (names_in(cur.test) - NOT_LOCAL) & local_names:
                    shape = None if plan is None else self._shape_test(plan, cur, fn)
                    if shape is None:
                        return None
                    test = shape.token
                else:
                    test = code(cur.test)
                if prev is cur.body:
                    conditions.insert(0, test)
                elif prev is cur.orelse:
                    conditions.insert(0, f"not ({test})")
            prev, cur = cur, self.ctx.parent_of(cur)
        return conditions

    def _shape_test(self, plan: ClassPlan, node: cst.If, fn: cst.FunctionDef) -> ShapeTest | None:
        if node not in plan.shape_tests:
            test = parse_shape_test(node.test, node, len(plan.shape_tests))
            if test is None:
                return None
            plan.shape_tests[node] = (test, fn)
        return plan.shape_tests[node][0]

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
        feats = [env.get(test.a), env.get(test.b)]
        if any(f is None for f in feats):
            return None
        self.state.flow_method = fn.name.value
        widths = [self.sizer.static_size(plan, f, params, test.node) for f in feats]  # type: ignore[arg-type]
        if None in widths:
            return None
        if any(self.ctx.qualnames(c.func) & POOLING for c in calls_in(fn)):
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
        class_name = rule.linen if rule else user.name  # type: ignore[union-attr]
        _, name_arg = bind_args(self._arg_order(rule, user), node)
        if name_arg is not None and isinstance(name_arg.value, cst.SimpleString):
            linen_name = name_arg.value.evaluated_value  # explicit names consume no counter
        else:
            n = counters.get(class_name, 0) or 0
            counters[class_name] = n + 1
            linen_name = f"{class_name}_{n}"
        site = self.add_site(plan, node, attr=f"{outer.attr}/{subpath}", linen_name=linen_name, hoisted=False)
        site.parent, site.nested_arg, site.element = outer, arg_name, index
        outer.nested.append(site)
        root = root_site(site)
        local_names = set(assigned_names(self.ctx.enclosing_function(node))) - set(plan.pure_locals)
        moved = []
        for name, arg in site.args.items():
            uses = (names_in(arg.value) - NOT_LOCAL) & local_names
            if not uses or (rule is not None and (name in rule.nested or name == rule.varargs_list)):
                continue
            value = code(arg.value)
            shape_locals = shape_last_refs(arg.value, uses)
            if shape_locals is not None and not (rule is not None and name in rule.call_args):
                site.shape_refs[name] = shape_locals  # `x.shape[-1]`: the dataflow knows x's size
            elif rule is None:
                self.ctx.report(
                    MOD_004,
                    arg,
                    f"argument {name}= of {class_name} (inside nn.{outer.rule.linen}) "  # type: ignore[union-attr]
                    f"uses the call-time value {', '.join(sorted(uses))}",
                    "build this module by hand",
                )
            elif name in rule.call_args and root.hoisted and root.view_kwargs.get(name, value) == value:
                root.view_kwargs[name] = value  # the call becomes nnx.view(layer, deterministic=...)(x)
                moved.append(name)
            else:
                self.ctx.report(
                    MOD_004,
                    arg,
                    f"argument {name}= of nn.{rule.linen} (inside nn.{outer.rule.linen}) "  # type: ignore[union-attr]
                    f"uses the call-time value {', '.join(sorted(uses))}",
                    "build this layer by hand",
                )
        site.moved_args = tuple(moved)
        if moved and rule is not None:
            self.ctx.report(
                LAYER_003,
                node,
                f"{', '.join(moved)} of nn.{rule.linen} applied at the call of "
                f"self.{root.attr} through nnx.view",
            )

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
    ) -> None:
        what = f"nn.{rule.linen}" if rule else user.name  # type: ignore[union-attr]
        class_name = rule.linen if rule else user.name  # type: ignore[union-attr]
        bound, name_arg = bind_args(self._arg_order(rule, user), node)
        container = None
        if name_arg is not None:
            name_value = name_arg.value
            if isinstance(name_value, cst.SimpleString) and loop is None:
                linen_name = name_value.evaluated_value
                attr = linen_name if linen_name.isidentifier() else snake_case(linen_name)
                if keyword.iskeyword(attr):  # name='if' (Flax's own LSTMCell): self.if_
                    attr += "_"
            elif loop is not None and (prefix := loop_name_prefix(name_value, loop.var)) is not None:
                linen_name, attr, container = prefix, snake_case(prefix), "list"
            else:
                self.ctx.report(
                    MOD_004,
                    name_arg,
                    f"{what}(name=...) is not a literal the codemod can follow",
                    "use a string literal, or f'prefix_{i}' inside `for i in range(n)`",
                )
                return
        else:
            n = counters.get(class_name, 0)
            if n is None and loop is None:
                tail_of = self._loop_list(plan, class_name)
                if tail_of is None or conditions:
                    self.state.handled.add(node.func)  # this finding says it all
                    self.ctx.report(
                        MOD_004,
                        node,
                        f"auto-named {what} after a loop that built {class_name}s"
                        + (" under a condition" if tail_of is not None else "")
                        + ": its Linen name "
                        "depends on the loop length",
                        "give it an explicit name=",
                    )
                    return
                # Linen names it {class_name}_{loop length}: the next element of the loop's nnx.List
                site = self.add_site(plan, node, attr=tail_of.attr, linen_name=class_name, hoisted=True)
                site.container, site.tail_of = "list", tail_of
                tail_of.tail.append(site)
                self._plan_args_at_call(plan, site, rule, what, bound, local_names, set())
                plan.hoisted_order.append(site)
                return
            if n is None:
                self.ctx.report(
                    MOD_004,
                    node,
                    f"auto-named {what} after a loop that built {class_name}s: its "
                    "Linen name depends on the loop length",
                    "give it an explicit name=",
                )
                return
            if loop is not None:
                if n:
                    self.ctx.report(
                        MOD_004,
                        node,
                        f"auto-named {what} built in a loop after other {class_name}s",
                        "give the loop's modules name=f'prefix_{i}'",
                    )
                    return
                counters[class_name] = None
                linen_name, attr, container = class_name, snake_case(class_name), "list"
            else:
                counters[class_name] = n + 1
                linen_name = f"{class_name}_{n}"
                attr = snake_case(linen_name)
        if any(s.attr == attr and s.hoisted for s in plan.sites.values()) or attr in plan.field_names:
            attr = f"{attr}_"
        site = self.add_site(plan, node, attr=attr, linen_name=linen_name, hoisted=True)
        site.container, site.loop = container, loop
        if loop is not None and loop.index:
            self.state.indexed_loops[loop.node] = (
                loop  # `for v in seq` becomes `for v_index, v in enumerate(seq)`
            )
        self._plan_args_at_call(plan, site, rule, what, bound, local_names, {loop.var} if loop else set())
        plan.hoisted_order.append(site)

    def nest_loop(
        self, node: cst.For, call_time: set[str], counts: dict[str, int], plan: ClassPlan
    ) -> tuple[set[str], dict[str, cst.SimpleStatementLine]] | None:
        """A ``for`` __init__ can replay (see sites.LoopNest): its iterable reads no call-time value
        (``call_time``: the method's locals but the enclosing loops' own). Returns its targets and the
        body's locals that read only the config, the loops' names and earlier such locals."""
        targets = names_in(node.target)
        if not isinstance(node.target, (cst.Name, cst.Tuple)) or node.orelse is not None or node.asynchronous:
            return None
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
            factory.linen_names if isinstance(factory, FieldFactory) else (rule.linen if rule else user.name,)
        )  # type: ignore[union-attr]
        bound, name_arg = bind_args(self._arg_order(rule, user), target)
        statement = self.ctx.enclosing_statement(node)
        outer = statement
        depth = 0
        while outer is not None and not (isinstance(outer, cst.For) and depth == len(loops)):
            outer = self.ctx.parent_of(outer)
            if isinstance(outer, cst.For):
                depth += 1
            elif not isinstance(outer, (cst.IndentedBlock, cst.For)):
                break
        why = None
        if not isinstance(outer, cst.For):
            why = "on a line the loops do not hold directly (inside an if / with)"
        elif conditions:
            why = "under a condition"
        elif name_arg is not None:
            why = "with name=: Linen names it once per iteration"
        elif any(counters.get(n, 0) != 0 for n in names):
            why = f"after other {names[0]}s: its Linen names depend on theirs"
        if why is not None:
            self.state.handled.add(target.func)
            self.ctx.report(
                MOD_004,
                node,
                f"{what} built inside nested loops {why} is not hoisted yet",
                "build the modules in __init__ (an nnx.List) and index it at the call",
            )
            return
        counters.update(dict.fromkeys(names, None))
        assert isinstance(outer, cst.For)
        nest = plan.nests.get(outer)
        if nest is None:
            nest = plan.nests[outer] = LoopNest(
                outer,
                set().union(*(n for n, _ in loops)),
                {k: v for _, stmts in loops for k, v in stmts.items()},
            )
        attr = snake_case(names[0]) if len(names) == 1 else _list_attr(factory.name)
        while any(s.attr == attr and s.hoisted for s in plan.sites.values()) or attr in plan.field_names:
            attr = f"{attr}_"
        site = self.add_site(plan, target, attr=attr, linen_name=names[0], hoisted=True)
        site.container, site.nest = "list", nest
        nest.sites.append(site)
        self.state.stmt_prefix.setdefault(outer, []).append(
            parse_statement(f"{nest.iterator(site)} = iter(self.{attr})\n")
        )  # what the loops take the next element of
        nest.statements[id(site)] = statement
        self._plan_args_at_call(plan, site, rule, what, bound, local_names, nest.names)
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
                and s.linen_name == class_name
                and not s.conditions
                and s.exclusive_with is None
                and s.tail_of is None
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
            uses = (names_in(arg.value) - NOT_LOCAL) & (local_names - loop_names)
            if uses:
                shape_locals = shape_last_refs(arg.value, uses)
                if rule is not None and arg_name in rule.call_args:
                    moved.append(arg_name)
                elif shape_locals is not None:
                    site.shape_refs[arg_name] = shape_locals  # `x.shape[-1]`: the dataflow knows x's size
                else:
                    self.ctx.report(
                        MOD_004,
                        arg,
                        f"argument {arg_name}= of {what} uses the call-time value "
                        f"{', '.join(sorted(uses))} and cannot move to __init__",
                        "compute it from constructor arguments / config",
                    )
        site.moved_args = tuple(moved)
        if moved:
            self.ctx.report(
                LAYER_003, site.ctor, f"{', '.join(moved)} of {what} moved to the call of self.{site.attr}"
            )

    def add_site(self, plan: ClassPlan, call: cst.Call, *, attr: str, linen_name: str, hoisted: bool) -> Site:
        rule = self.ctx.layer_rule_of(call.func)
        user = None if rule else self.ctx.user_class_of(call.func)
        bound, _ = bind_args(self._arg_order(rule, user), call)
        site = Site(
            kind="layer" if rule else "module",
            attr=attr,
            linen_name=linen_name,
            ctor=call,
            hoisted=hoisted,
            rule=rule,
            user=user,
            args=bound,
            lifted=self.ctx.lift_chain(call.func),
        )
        plan.sites[call] = site
        self.state.handled.add(call.func)
        if rule is not None and rule.manual_reason:
            self.ctx.report(
                LAYER_002,
                call,
                f"nn.{rule.linen}: {rule.manual_reason}",
                "see docs/rules.md and the reference's layer table",
            )
        if rule is not None and rule.linen == "Einsum" and einsum_bias_shape(bound) is None:
            self.ctx.report(
                LAYER_002,
                call,
                "nn.Einsum bias shape cannot be derived statically (needs literal "
                "shape and einsum_str without '...')",
                "give nnx.Einsum its bias_shape by hand",
            )
        if rule is not None:
            for arg_name, arg in bound.items():
                nnx_name = rule.nnx_arg(arg_name)
                if arg_name == rule.varargs_list:
                    continue
                if arg_name in rule.dropped_when:
                    check = ARG_CHECKS[rule.dropped_when[arg_name]]
                    if check.passes(code(arg.value)):
                        site.dropped_args += (arg_name,)
                        self.ctx.report(
                            LAYER_001, arg, f"nn.{rule.linen}({arg_name}=...) dropped: {check.note}"
                        )
                    else:
                        self.ctx.report(
                            LAYER_002,
                            arg,
                            f"nn.{rule.linen}({arg_name}={code(arg.value)}) has no nnx.{rule.nnx} equivalent",
                            f"see the nnx.{rule.nnx} signature; re-express it",
                        )
                elif arg_name in rule.unsupported_args or nnx_name not in nnx_ctor_params(rule.nnx):
                    self.ctx.report(
                        LAYER_002,
                        arg,
                        f"nn.{rule.linen}({arg_name}=...) has no nnx.{rule.nnx} equivalent",
                        f"see the nnx.{rule.nnx} signature; drop or re-express it",
                    )
                elif arg_name in rule.only_values and code(arg.value) not in rule.only_values[arg_name]:
                    self.ctx.report(
                        LAYER_002,
                        arg,
                        f"nn.{rule.linen}({arg_name}={code(arg.value)}) is not "
                        f"converted yet (only {arg_name}={' / '.join(rule.only_values[arg_name])})",
                        f"rewrite this nnx.{rule.nnx} by hand",
                    )
        return site

    def add_variable_site(
        self,
        plan: ClassPlan,
        call: cst.Call,
        *,
        hoisted: bool,
        local_names: set[str],
        attr: str | None = None,
    ) -> Site | None:
        """``self.param(name, init, *args)`` / ``self.variable(col, name, init, *args)``."""
        kind = self.ctx.self_call(call)
        self.state.handled.add(call)  # reported here either way: no generic "Linen API" finding on top
        args = [a for a in call.args if a.keyword is None]
        need = 2 if kind == "param" else 3
        literal = [a.value for a in args[: need - 1]]
        if (
            len(args) < need
            or any(a.star for a in call.args)
            or not all(isinstance(v, cst.SimpleString) for v in literal)
        ):
            self.ctx.report(
                API_002,
                call,
                f"self.{kind}(...) with non-literal names or keyword-only arguments",
                "create the nnx.Variable in __init__ by hand",
            )
            return None
        collection = "params" if kind == "param" else literal[0].evaluated_value  # type: ignore[union-attr]
        name = literal[-1].evaluated_value  # type: ignore[union-attr]
        var_type = COLLECTION_TYPES.get(collection)
        if var_type is None:
            self.ctx.report(
                API_002,
                call,
                f"self.variable in the custom collection {collection!r}",
                "define `class <Name>(nnx.Variable)` registered with nnx.register_variable_name",
            )
            return None
        if any(a.keyword is not None for a in call.args):
            self.ctx.report(
                API_002,
                call,
                f"self.{kind}(...) keyword arguments are not converted yet",
                "create the nnx.Variable in __init__ by hand",
            )
            return None
        shape_refs: dict[str, list[str]] = {}
        for i, a in enumerate(args):
            uses = (names_in(a.value) - NOT_LOCAL) & local_names
            refs = shape_last_refs(a.value, uses) if uses else None
            if uses and refs is None:
                self.ctx.report(
                    MOD_004,
                    call,
                    f"self.{kind}({name!r}, ...) uses the call-time value "
                    f"{', '.join(sorted(uses))} and cannot move to __init__",
                    "derive its shape from constructor arguments, or use --trace",
                )
                return None
            if refs:
                shape_refs[str(i)] = refs  # (x.shape[-1], features): the dataflow knows x's size
        if collection == "cache" and hoisted:
            self.ctx.report(
                API_002, call, "a Linen decode cache created at call time", "use NNX's init_cache pattern"
            )
            return None
        attr = attr or (name if name.isidentifier() else snake_case(name))
        if attr in plan.field_names:
            attr = f"{attr}_"
        site = Site(
            kind="param" if kind == "param" else "variable",
            attr=attr,
            linen_name=name,
            ctor=call,
            hoisted=hoisted,
            collection=collection,
            var_type=var_type,
            shape_refs=shape_refs,
        )
        site.args = {str(i): a for i, a in enumerate(args)}
        plan.sites[call] = site
        if hoisted:
            plan.hoisted_order.append(site)
        return site


def _list_attr(field: str) -> str:
    """The nnx.List attribute for what a factory field bound to several classes builds in a loop
    (``block_cls`` -> ``block``): Linen names the elements after whichever class it is."""
    for suffix in ("_cls", "_class", "_def", "_module", "_factory"):
        if field.endswith(suffix) and len(field) > len(suffix):
            return field.removesuffix(suffix)
    return f"{field}_modules"
