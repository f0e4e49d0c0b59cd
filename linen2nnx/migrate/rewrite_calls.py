"""Rewriting calls (``leave_Call``): layer constructors and their calls, ``self.param`` / ``self.variable``,
``self.sow`` / ``self.make_rng``, ``nn.merge_param``, unboxing helpers and lifted transforms of functions.

Part of the *rewrite* step: every decision comes from the class's plan; constructors that move into
``__init__`` are built by the :class:`~linen2nnx.migrate.emit.Emitter`.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.api_findings import PARAMS_SCAN_SPEC
from linen2nnx.migrate.axes_params import left_call_finding
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import (
    bind_args,
    code,
    kwarg,
    parse_expression,
    self_attr,
    strip_commas,
)
from linen2nnx.migrate.decode_cache import init_call_cache
from linen2nnx.migrate.emit import Emitter
from linen2nnx.migrate.factories import PartialLocal
from linen2nnx.migrate.function_lifts import remat_of_function, scan_of_function
from linen2nnx.migrate.init_guards import init_only_guard, params_mutable_guard, scan_spec_choice
from linen2nnx.migrate.init_hints import report_self_api, self_api_hint
from linen2nnx.migrate.lazy_vars import creation, needs_jax, number_fields
from linen2nnx.migrate.lifted import LiftError, lifted_call
from linen2nnx.migrate.linen_api import (
    UNBOX_FUNCTIONS,
)
from linen2nnx.migrate.merge_flags import moved_flag_args
from linen2nnx.migrate.named_variables import rewrite_put, rewrite_sow, variable_query
from linen2nnx.migrate.rules import (
    API_002,
    API_003,
    API_004,
    API_007,
    LAYER_001,
    LAYER_002,
    PART_004,
    VAR_001,
    VAR_003,
    VAR_004,
    XFORM_001,
    XFORM_002,
)
from linen2nnx.migrate.sites import MERGE_PARAM, ClassPlan, Site, linen_name_text
from linen2nnx.migrate.variable_args import canonical_variable_call
from linen2nnx.migrate.variable_locals import with_locals


class CallRewriter:
    """Rewrites one call bottom-up, after its arguments were rewritten."""

    def __init__(self, ctx: FileContext, emitter: Emitter) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.emitter = emitter

    def _unboxed(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """``unbox_helper(state)`` / ``nn.unbox(tree)`` -> ``state``: nothing to unbox in NNX."""
        func = original.func
        helper = type(func) is cst.Name and func.value in self.state.unbox_helpers
        linen_unbox = any(
            q.removeprefix("flax.linen.") in UNBOX_FUNCTIONS
            for q in self.ctx.qualnames(func)
            if q.startswith("flax.linen.")
        )
        if (
            not (helper or linen_unbox)
            or len(updated.args) != 1
            or updated.args[0].keyword
            or updated.args[0].star
        ):
            return None
        self.state.handled.add(func)
        self.ctx.report(PART_004, original, f"{code(func)}(x) -> x: NNX values carry no metadata boxes")
        return updated.args[0].value

    def function_lift_kind(self, node: cst.Call) -> str | None:
        """``nn.remat(fn, ...)`` / ``nn.scan(fn, ...)`` of a plain function (the MaxText pipeline style)
        rather than of a module class."""
        kind = self.ctx.transform_kind(node.func)
        if kind is None or not node.args or node.args[0].keyword is not None or node.args[0].star:
            return None
        target = node.args[0].value
        if self.ctx.layer_rule_of(target) or self.ctx.user_class_of(target):
            return None
        if isinstance(target, cst.Name) and target.value in self.state.module_classes:
            return None  # a class of this file that is NNX already (an earlier run's output): not a function
        return kind

    def _function_transform(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """A lifted transform of a function that takes a module: NNX transforms take modules as
        arguments too, so ``nn.remat`` is a rename and ``nn.scan`` becomes ``nnx.scan`` with the module's
        axis (``None``: params broadcast) in front of the carry."""
        kind = self.function_lift_kind(original)
        if kind is None or original in self.state.relocated_calls:  # applied elsewhere by its plan
            return None
        if self.ctx.current_plan() is None and self.ctx.in_marked_class(original):
            return None  # an earlier run's leftover, reported where it stopped the rewrite
        if kind == "remat" and self._scanned_as_a_call(original):
            return updated  # left with the scan, which reports the nest
        fn = code(updated.args[0].value)
        kwargs = {a.keyword.value: a for a in updated.args[1:] if a.keyword is not None}
        orig_kwargs = {a.keyword.value: a.value for a in original.args[1:] if a.keyword is not None}

        def manual(why: str) -> cst.BaseExpression:
            self.ctx.report(
                XFORM_002,
                original,
                f"nn.{kind}({' '.join(fn.split())}, ...): {why}",
                "rewrite with the nnx transform by hand (see docs/nnx_facts.md, Lifted transforms)",
            )
            return updated

        if len(kwargs) != len(updated.args) - 1:
            return manual("positional transform arguments are not converted")
        self.state.uses_nnx = True
        if kind == "remat":
            result = remat_of_function(self.ctx, original, updated, fn, kwargs)
        elif kind == "scan":
            result = scan_of_function(self.ctx, original, fn, kwargs, orig_kwargs)
        else:
            result = "only nn.remat and nn.scan of functions are converted"
        return manual(result) if isinstance(result, str) else result

    def _scanned_as_a_call(self, original: cst.Call) -> bool:
        """``nn.scan(nn.remat(fn), ...)``: the scan of a call is left to a person (the inputs of the
        function it scans cannot be counted), so the remat stays Linen with it; an ``nnx.remat``
        inside an ``nn.scan`` could not run."""
        arg = self.ctx.parent_of(original)
        scan = self.ctx.parent_of(arg) if isinstance(arg, cst.Arg) else None
        return isinstance(scan, cst.Call) and scan.args[0] is arg and self.function_lift_kind(scan) == "scan"

    def leave_call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        merged = self._merge_param(original, updated)
        if merged is not None:
            return merged
        unboxed = self._unboxed(original, updated)
        if unboxed is not None:
            return unboxed
        lifted_fn = self._function_transform(original, updated)
        if lifted_fn is not None:
            return lifted_fn
        factory = self.state.factory_returns.get(original)
        if factory is not None:  # `return nn.Dense(...)` of a layer factory function
            rule = factory.rule
            self.ctx.report(
                LAYER_001,
                original,
                f"nn.{rule.linen} -> nnx.{rule.nnx} (returned by {factory.name}, which now takes "
                f"{f'{rule.in_arg} and ' if rule.in_arg else ''}rngs)",
            )
            return self.emitter.function_factory_return(factory, updated)
        plan = self.ctx.current_plan()
        if plan is None:
            return updated
        result = self._leave_call(plan, original, updated)
        left = left_call_finding(original, self.state.tree, self.state.module_name)
        if left is not None:
            self.ctx.report(API_002, original, *left)
        api = self.state.pending_api.pop(original, None)
        if api is not None and original not in self.state.handled and original not in plan.sites:
            report_self_api(self.ctx, api, original)
        return result

    def _leave_call(self, plan: ClassPlan, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """A call inside a planned class: a partial's or factory's constructor, a lazily created variable,
        a detached cell's carry, a site, a ``self.<api>`` call, or the application of a layer."""
        if original in self.state.factory_ctors:
            self.state.factory_updated[original] = updated
        local = self.state.partial_calls.get(original)
        if local is not None:  # the constructor each use stands for, as rewritten
            self.state.factory_updated[local.ctor] = cst.Call(
                func=updated.args[0].value, args=list(updated.args[1:])
            )
            return updated
        lazy = plan.lazy_vars.get(original)
        if lazy is not None and not lazy.put:
            found = self.state.variable_locals.get(original, {})
            canonical = canonical_variable_call(with_locals(updated, found, 2), "variable")
            assert not isinstance(canonical, str)  # the planner saw the same arguments
            args, numbers = list(canonical.args), number_fields(plan.fields)
            self.state.stmt_prefix.setdefault(lazy.statement, []).append(
                creation(lazy, args[2].value, args[3:], numbers)
            )
            self.state.uses_nnx = True
            self.state.needs_jax_import |= needs_jax(args[2].value, numbers)
            self.ctx.report(
                VAR_004,
                original,
                f"self.variable({lazy.collection!r}, {lazy.name!r}) -> "
                f"{lazy.var_type} self.{lazy.attr}, created on the first call as Linen does",
            )
            return parse_expression(f"self.{lazy.attr}")
        cell = plan.carry_inits.get(original)
        if cell is not None:  # a detached Linen cell's carry is the built cell's; a built cell's its own
            rng, shape = (code(a.value) for a in updated.args)
            self.state.uses_nnx = True
            self.ctx.report(
                LAYER_001,
                original,
                f"{code(original.func)}(rng, shape) -> self.{cell.attr}.initialize_carry(shape, rngs=...)",
            )
            return parse_expression(f"self.{cell.attr}.initialize_carry({shape}, rngs=nnx.Rngs(carry={rng}))")
        site = plan.sites.get(original)
        if site is not None and not site.hoisted and type(site.factory) is PartialLocal:
            ctor = self.state.factory_updated.get(site.factory.ctor)  # setup(): `self.q = dense(4)`
            return self._site_call(site, original, site.factory.merged(updated, ctor))
        if site is not None and site.factory is not None:  # built in __init__ once the helper is rewritten
            if type(site.factory) is PartialLocal and site.rule is not None:
                self.ctx.report(
                    LAYER_001,
                    original,
                    f"nn.{site.rule.linen} -> nnx.{site.rule.nnx} ({site.attr}, built through the partial "
                    f"{site.factory.name})",
                )
            self.state.factory_calls[original] = updated
            self.state.moved[original] = [
                kwarg(a, site.args[a].value) for a in site.moved_args if a in site.args
            ]
            return self.emitter.call_site(site)
        if site is not None:
            return self._site_call(site, original, updated)
        sow = self._rewrite_self_api(plan, original, updated)
        if sow is not None:
            return sow
        return self._applied_call(plan, original, updated)

    def _site_call(self, site: Site, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """A constructor the plan has a site for: built in place, or in ``__init__`` (its call site then
        reads the attribute)."""
        self.state.handled.add(original.func)
        if site.kind == "layer":
            self.ctx.report(LAYER_001, original, f"nn.{site.rule.linen} -> nnx.{site.rule.nnx} ({site.attr})")  # type: ignore[union-attr]
        elif site.kind in ("param", "variable"):
            self.ctx.report(
                VAR_001,
                original,
                f"self.{site.kind}({linen_name_text(site.linen_name)}) -> "
                f"{site.var_type} self.{site.attr} created in __init__",
            )
        built = self.emitter.build(site, updated)
        if not site.hoisted:
            return built
        self.state.built[original] = built
        if site.rule is not None:
            upd_bound, _ = bind_args(site.rule.linen_arg_order(), updated)
            self.state.moved[original] = [upd_bound[a] for a in site.moved_args if a in upd_bound]
        elif site.moved_args:  # a class of the run's merged mode flags (merge_flags.py)
            self.state.moved[original] = moved_flag_args(site, updated)
        return self.emitter.call_site(site)

    def _applied_call(self, plan: ClassPlan, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """``layer(x)`` of a planned layer: its call-time arguments, mode flags and lifted transforms."""
        applied = None
        if isinstance(original.func, cst.Call) and original.func in plan.sites:
            applied = plan.sites[original.func]  # nn.Layer(...)(x) in @nn.compact
        elif isinstance(original.func, cst.Name) and original.func.value in plan.local_sites:
            applied = plan.local_sites[original.func.value]  # layer = nn.Layer(...); layer(x)
        elif self_attr(original.func) is not None and not self.ctx.in_setup(original):
            applied = next(
                (
                    s
                    for s in plan.sites.values()
                    if s.attr == self_attr(original.func)
                    and not s.hoisted
                    and (s.rule is not None or s.lifted is not None)
                ),
                None,
            )  # self.layer(x) of a setup() layer, or of a lifted module class
        elif isinstance(original.func, cst.Name):
            applied = self._list_element(plan, original)  # `for block in self.blocks: block(x)`
        else:
            applied = self._lifted_via_module_argument(plan, original)
        if applied is None:
            return updated
        call = updated if applied.rule is None else self._rewrite_layer_call(applied, original, updated)
        if applied.rule is None and self.state.moved.get(applied.ctor):
            call = call.with_changes(args=strip_commas([*call.args, *self.state.moved[applied.ctor]]))
        if (
            applied.rule is None and applied.view_kwargs
        ):  # mode flags of the layers it builds with a handed partial
            self.state.uses_nnx = True
            view = [
                cst.Arg(call.func),
                *(kwarg(k, parse_expression(v)) for k, v in applied.view_kwargs.items()),
            ]
            call = call.with_changes(func=cst.Call(parse_expression("nnx.view"), strip_commas(view)))
        if applied.lifted is not None:
            return self._lifted_application(applied, original, call)
        return call

    def _lifted_application(self, applied: Site, original: cst.Call, call: cst.Call) -> cst.BaseExpression:
        """The call of a lifted layer under its NNX transforms (the plain call under a config flag
        that did not ask for them); left as it is, with a finding, when the form is not converted."""
        try:
            source = lifted_call(
                applied.lifted,
                code(call.func),
                list(call.args),
                self.ctx.is_broadcast,
                state_when=applied.state_when,
            )
        except LiftError as err:
            self.ctx.report(
                XFORM_002, original, str(err), "rewrite the call with nnx.scan / nnx.remat by hand"
            )
            return call
        if applied.lift_condition is not None:  # the transform a config flag asked for
            source = f"({source} if {applied.lift_condition} else {code(call)})"
        self.state.uses_nnx = True
        kinds = " + ".join(f"nn.{lift.kind}" for lift in applied.lifted.lifts)
        where = code(original.func) if isinstance(original.func, cst.Attribute) else f"self.{applied.attr}"
        self.ctx.report(
            XFORM_001,
            original,
            f"{kinds} of {code(applied.lifted.base)} -> NNX transforms at the call of {where}",
        )
        return parse_expression(source)

    def _lifted_via_module_argument(self, plan: ClassPlan, call: cst.Call) -> Site | None:
        """``pipeline.stages(x)`` in ``def iteration(pipeline, carry, _)`` nested in a method: the
        function a Linen lift receives with the module first (``nn.scan(iteration)(self, ...)``), so
        ``pipeline`` is ``self`` and a lifted setup() layer is applied under its transforms."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
            return None
        fn = self.ctx.enclosing_function(call)
        outer = self.ctx.enclosing_function(self.ctx.parent_of(fn)) if fn is not None else None
        if outer is None or not fn.params.params or fn.params.params[0].name.value != func.value.value:
            return None
        return next(
            (
                s
                for s in plan.sites.values()
                if s.attr == func.attr.value and not s.hoisted and s.lifted is not None
            ),
            None,
        )

    def _list_element(self, plan: ClassPlan, call: cst.Call) -> Site | None:
        """The lifted setup() comprehension whose element ``call`` applies: its callee is the target of
        an enclosing ``for block in self.blocks`` / ``for i, block in enumerate(self.blocks)``."""
        assert isinstance(call.func, cst.Name)
        name = call.func.value
        cur = self.ctx.parent_of(call)
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.ClassDef)):
            if isinstance(cur, cst.For):
                it, target = cur.iter, cur.target
                if isinstance(it, cst.Call) and code(it.func) == "enumerate" and len(it.args) == 1:
                    it = it.args[0].value
                    target = (
                        target.elements[1].value
                        if isinstance(target, cst.Tuple) and len(target.elements) == 2
                        else None
                    )
                attr = self_attr(it)
                if attr is not None and isinstance(target, cst.Name) and target.value == name:
                    return next(
                        (
                            s
                            for s in plan.sites.values()
                            if s.elements is not None and s.attr == attr and s.lifted
                        ),
                        None,
                    )
            cur = self.ctx.parent_of(cur)
        return None

    def _merge_param(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """``nn.merge_param('x', self.x, x)`` -> ``x if x is not None else self.x`` (NNX layers' own idiom:
        the call-time value wins; Linen's error for giving both, or neither, is not kept)."""
        if not any(q.removeprefix("flax.linen.") in MERGE_PARAM for q in self.ctx.qualnames(original.func)):
            return None
        args = updated.args
        if len(args) != 3 or any(a.keyword is not None or a.star for a in args):
            self.ctx.report(API_002, original, "merge_param with unusual arguments", "rewrite by hand")
            return None
        self.ctx.report(
            API_004, original, "merge_param -> `call_value if call_value is not None else attribute`"
        )
        attribute, call_value = args[1].value, args[2].value
        test = cst.Comparison(call_value, [cst.ComparisonTarget(cst.IsNot(), cst.Name("None"))])
        return cst.IfExp(test=test, body=call_value, orelse=attribute)

    def _rewrite_self_api(
        self, plan: ClassPlan, original: cst.Call, updated: cst.Call
    ) -> cst.BaseExpression | None:
        """``self.sow`` / ``self.make_rng`` / ``self.is_initializing`` -> their NNX spelling."""
        api = self.ctx.self_call(original)
        if api is None and _scope_make_rng(original) and "scope" not in plan.field_names:
            api = "make_rng"  # Linen's Module.make_rng is this very call: self.scope.make_rng(name)
        if api is None or api in plan.field_names:
            return None
        if api == "sow" and original.args and isinstance(original.args[0].value, cst.SimpleString):
            return rewrite_sow(self.ctx, plan, original, updated)
        if (
            api == "make_rng"
            and len(original.args) == 1
            and isinstance(original.args[0].value, cst.SimpleString)
        ):
            return self._rewrite_make_rng(plan, original)
        if (
            api in ("has_variable", "get_variable")
            and len(original.args) in ((2, 3) if api == "get_variable" else (2,))
            and all(isinstance(a.value, cst.SimpleString) for a in original.args[:2])
            and all(a.keyword is None for a in original.args)
        ):
            return variable_query(self.ctx, plan, api, original, updated)
        if api == "is_initializing" and not original.args:
            return self._rewrite_is_initializing(original, updated)
        if api == "put_variable":
            return rewrite_put(self.ctx, plan, original, updated)
        if api == "is_mutable_collection" and _only_string_arg(original) == "params":
            return self._rewrite_params_mutable(original)
        return None

    def _rewrite_make_rng(self, plan: ClassPlan, original: cst.Call) -> cst.BaseExpression:
        """``self.make_rng("dropout")`` (or ``self.scope.make_rng("dropout")``, which Linen's
        ``Module.make_rng`` calls and nothing more) -> a draw from the module's ``nnx.Rngs``."""
        stream = original.args[0].value.evaluated_value
        self.state.handled.add(original)
        plan.uses_rngs = True
        spelled = "self.scope.make_rng" if _scope_make_rng(original) else "self.make_rng"
        self.ctx.report(VAR_003, original, f"{spelled}({stream!r}) -> a draw from the module's nnx.Rngs")
        ref = f"self.rngs.{stream}()" if stream.isidentifier() else f"self.rngs[{stream!r}]()"
        return parse_expression(ref)

    def _rewrite_is_initializing(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """``self.is_initializing()`` -> ``False`` where the branch it guards creates nothing (exact, see
        :mod:`~.init_guards`) or with ``--unsafe-fixes``; else a finding."""
        self.state.handled.add(original)
        if init_only_guard(self.ctx, original):
            self.ctx.report(
                API_007,
                original,
                "self.is_initializing() -> False: the branch it guards only makes values for Linen's init "
                "or applies what the class builds, and creates nothing (NNX's __init__ builds every submodule; "
                "a call is Linen's apply)",
            )
            return cst.Name("False")
        if not self.state.unsafe_fixes:
            self.ctx.report(API_002, original, *self_api_hint(self.ctx, original, "is_initializing", None))
            return updated
        self.ctx.report(
            API_003,
            original,
            "self.is_initializing() -> False (NNX calls never initialise)",
            "init-only work now happens in __init__",
        )
        return cst.Name("False")

    def _rewrite_params_mutable(self, original: cst.Call) -> cst.BaseExpression | None:
        """``self.is_mutable_collection('params')`` -> ``False`` where it only skips, during Linen's
        init, work that creates nothing (see :mod:`~.init_guards`); else left to the API finding."""
        if not params_mutable_guard(self.ctx, original):
            if scan_spec_choice(self.ctx, original):  # its own finding, with the scan's hint
                self.state.handled.add(original)
                self.ctx.report(API_002, original, *PARAMS_SCAN_SPEC)
            return None
        self.state.handled.add(original)
        self.ctx.report(
            API_007,
            original,
            "self.is_mutable_collection('params') -> False: it is True only in Linen's init, and what it "
            "guards creates nothing (NNX's __init__ builds every variable; a call is Linen's apply)",
        )
        return cst.Name("False")

    def _as_bool(self, arg: cst.Arg) -> cst.Arg:
        """``mask=m`` -> ``mask=jax.numpy.asarray(m, dtype=bool)``, the cast Linen makes (``LayerRule.
        bool_call_args``); a name or attribute, which may hold None (no mask), only when it is not None."""
        value = arg.value
        if isinstance(value, cst.Comparison) or (isinstance(value, cst.Name) and value.value == "None"):
            return arg  # a comparison is a bool array already
        self.state.needs_jax_import = True
        cast = f"jax.numpy.asarray({code(value)}, dtype=bool)"
        if isinstance(value, (cst.Name, cst.Attribute)):
            cast = f"None if {code(value)} is None else {cast}"
        return arg.with_changes(value=parse_expression(cast))

    def _rewrite_layer_call(self, site: Site, original: cst.Call, updated: cst.Call) -> cst.Call:
        """Apply the call-time differences of a layer: moved mode args, renamed / unsupported keywords."""
        rule = site.rule
        assert rule is not None
        args = list(updated.args)
        plain = [a for a in original.args if a.keyword is None and not a.star]
        for o in original.args:
            # a positional argument names its keyword by position (`Dropout()(x, not train, key)`: rng)
            keyword = o.keyword.value if o.keyword is not None else None
            if keyword is None and not o.star and rule.call_keywords and o in plain:
                at = plain.index(o)
                keyword = rule.call_keywords[at] if at < len(rule.call_keywords) else None
            if keyword in rule.unsupported_call_args:
                self.ctx.report(
                    LAYER_002,
                    o,
                    f"{keyword}= of nn.{rule.linen}.__call__ has no nnx.{rule.nnx} equivalent",
                    "NNX layers draw randomness from their own rngs",
                )
        args = [
            a.with_changes(keyword=cst.Name(rule.call_renames[a.keyword.value]))
            if a.keyword is not None and a.keyword.value in rule.call_renames
            else a
            for a in args
        ]
        args = [self._as_bool(a) if a.keyword and a.keyword.value in rule.bool_call_args else a for a in args]
        if rule.call_keywords:
            positional = [a for a in args if a.keyword is None and not a.star]
            args = (
                positional[:1]
                + [kwarg(rule.call_keywords[i], a.value) for i, a in enumerate(positional) if i]
                + [a for a in args if a.keyword is not None or a.star]
            )
        moved = self.state.moved.get(site.ctor, [])
        args += [kwarg(a.keyword.value, a.value) if a.keyword else a for a in moved]
        flag = site.args.get(rule.init_call_cache) if rule.init_call_cache else None
        if flag is not None and code(flag.value) != "False":
            dtypes = tuple(
                code(self._built_arg(site, site.args[n])) if n in site.args else "None"
                for n in ("dtype", "param_dtype")
            )
            args = init_call_cache(
                self.ctx,
                site,
                original,
                args,
                code(self._built_arg(site, flag)),
                dtypes,  # type: ignore[arg-type]
            )
        func = updated.func
        if site.view_kwargs:
            self.state.uses_nnx = True
            view = [cst.Arg(func), *(kwarg(k, parse_expression(v)) for k, v in site.view_kwargs.items())]
            func = cst.Call(parse_expression("nnx.view"), strip_commas(view))
        return updated.with_changes(func=func, args=strip_commas(args))

    def _built_arg(self, site: Site, arg: cst.Arg) -> cst.BaseExpression:
        """A constructor argument as rewritten (``nn.x`` -> ``nnx.x``), for reuse at the call site."""
        built = self.state.built.get(site.ctor)
        if built is not None and site.rule is not None:
            bound, _ = bind_args(site.rule.linen_arg_order(), built)
            name = next((n for n, a in site.args.items() if a is arg), None)
            if name is not None and name in bound:
                return bound[name].value
        return arg.value


def _only_string_arg(call: cst.Call) -> str | None:
    """The value of ``call``'s one positional string-literal argument, else None."""
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return None
    value = call.args[0].value
    return value.evaluated_value if isinstance(value, cst.SimpleString) else None  # type: ignore[return-value]


def _scope_make_rng(call: cst.Call) -> bool:
    """``self.scope.make_rng(...)``: the scope call that Linen's ``self.make_rng(...)`` is a checked
    alias of (it only raises first when the module is unbound, as the scope access does)."""
    func = call.func
    return (
        isinstance(func, cst.Attribute) and func.attr.value == "make_rng" and self_attr(func.value) == "scope"
    )
