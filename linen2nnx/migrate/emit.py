"""Emitting NNX code from a plan: layer constructors, ``__init__``, and the name-map entry of a class.

Part of the *rewrite* step; :class:`Emitter` works on the rewritten nodes the rewriters hand it.
"""

from __future__ import annotations

from collections.abc import Collection

import libcst as cst

from linen2nnx.layers import dtype_kwargs, nnx_ctor_params
from linen2nnx.migrate.annotation_names import written_annotation
from linen2nnx.migrate.class_fields import field_value
from linen2nnx.migrate.conditional_emit import conditional, nested_in_else, other_branch
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import (
    bind_args,
    code,
    kwarg,
    laid_out_as,
    names_in,
    parse_expression,
    parse_statement,
    self_attr,
    strip_commas,
    with_args,
    without_keywords,
)
from linen2nnx.migrate.data_none import DataMarks, as_data, data_marks
from linen2nnx.migrate.dict_kwargs import spelled_out
from linen2nnx.migrate.factories import call_site_ctor
from linen2nnx.migrate.factory_fields import FieldFactory, FieldPartial
from linen2nnx.migrate.function_factories import FunctionFactory
from linen2nnx.migrate.inheritance import is_super_setup, super_init_statement
from linen2nnx.migrate.input_sizes import tuple_valued
from linen2nnx.migrate.kw_only import init_fields
from linen2nnx.migrate.layer_args import einsum_bias_shape
from linen2nnx.migrate.lazy_vars import as_array, init_call, needs_jax, number_fields
from linen2nnx.migrate.lifted import lifted_ctor
from linen2nnx.migrate.loop_names import built_per_iteration
from linen2nnx.migrate.loop_tests import replay_loops, test_names
from linen2nnx.migrate.merge_flags import with_moved_flags
from linen2nnx.migrate.name_map_entries import handed_builds_convert
from linen2nnx.migrate.rebound_locals import bound_name
from linen2nnx.migrate.replayed_lines import replayed_assign
from linen2nnx.migrate.rules import LAYER_002, MOD_004
from linen2nnx.migrate.sites import (
    ClassPlan,
    LoopNest,
    Site,
    marker_line,
    nest_fors,
    replace_shape_last,
    resolved_arg,
)
from linen2nnx.migrate.variable_args import canonical_variable_call
from linen2nnx.migrate.variable_locals import with_locals


class Emitter:
    """Builds the NNX constructors and the ``__init__`` of a planned class."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self._data_marks = DataMarks()  # setup's attributes bound to a static value before their submodule

    def _nnx_ctor(self, site: Site, updated: cst.Call, checked: bool = False) -> cst.Call:
        rule = site.rule
        assert rule is not None
        upd_bound, _ = bind_args(rule.linen_arg_order(), updated)
        for name in site.arg_sources:
            upd_bound[name] = upd_bound[name].with_changes(
                value=resolved_arg(site, name, upd_bound[name].value)
            )
        args: list[cst.Arg] = [
            upd_bound[name].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
            for name in rule.positional
            if name in upd_bound
        ]
        if rule.varargs_list and rule.varargs_list in upd_bound:
            value = upd_bound[rule.varargs_list].value
            if isinstance(value, (cst.List, cst.Tuple)):
                args += [cst.Arg(e.value) for e in value.elements]
            else:
                args.append(cst.Arg(value, star="*"))
        if rule.in_arg is not None:
            args.insert(rule.in_index, cst.Arg(parse_expression(site.in_expr or "None")))
        for name, arg in upd_bound.items():
            if (
                name not in rule.positional
                and name not in site.moved_args
                and name not in site.dropped_args
                and name != rule.varargs_list
            ):
                args.append(
                    kwarg(rule.nnx_arg(name), _as_data(arg.value) if name in rule.data_args else arg.value)
                )
        if rule.linen == "Einsum":
            bias = einsum_bias_shape(upd_bound)
            use_bias = upd_bound.get("use_bias")
            args = [a for a in args if not (a.keyword is not None and a.keyword.value == "use_bias")]
            if bias is not None and (use_bias is None or code(use_bias.value) != "False"):
                args.insert(2, cst.Arg(parse_expression(bias)))
        given = {rule.nnx_arg(name) for name in upd_bound}
        args += [kwarg(k, parse_expression(v)) for k, v in rule.extra_kwargs.items() if k not in given]
        sources = {name: code(arg.value) for name, arg in upd_bound.items()}
        args += [
            kwarg(k, parse_expression(v))
            for k, v in dtype_kwargs(rule, sources, given - set(site.dropped_args))
        ]
        if site.in_kv_expr is not None:  # attention keys / values of another size than the queries
            args.append(kwarg("in_kv_features", parse_expression(site.in_kv_expr)))
        args += self._unpacked(site, updated, checked)
        if "rngs" in nnx_ctor_params(rule.nnx):
            args.append(kwarg("rngs", cst.Name("rngs")))
        self.state.uses_nnx = True
        return cst.Call(
            func=parse_expression(rule.callee or f"nnx.{rule.nnx}"),
            args=laid_out_as(updated.args, args),
            whitespace_before_args=updated.whitespace_before_args,  # `nn.Dense(\n`: the same lines
        )

    def _unpacked(self, site: Site, updated: cst.Call, checked: bool) -> list[cst.Arg]:
        """``*args`` / ``**kwargs`` of a layer's construction, passed on, never dropped: their keys are Linen's
        names (NNX renames some), a finding unless a layer factory function's check or the method's own
        dict of them (:mod:`~linen2nnx.migrate.dict_kwargs`) vouched for them."""
        unpacked = [a for a in updated.args if a.star == "**" or (a.star and not checked)]
        if unpacked and not checked and not spelled_out(self.ctx.enclosing_function(site.ctor), site):
            assert site.rule is not None
            self.ctx.report(
                LAYER_002,
                site.ctor,
                f"nn.{site.rule.linen}(..., {', '.join(a.star + code(a.value) for a in unpacked)}) passes "
                f"arguments nnx.{site.rule.nnx} receives under their Linen names and positions",
                f"spell them out, with nnx.{site.rule.nnx}'s names",
            )
        return unpacked

    def _user_ctor(self, site: Site, updated: cst.Call) -> cst.Call:
        if site.lifted is not None:  # nn.scan(Block, ...)(cfg): the class itself, lifted in _build
            updated = updated.with_changes(func=parse_expression(code(site.lifted.base)))
        elif site.ctor.func in self.state.hoisted_aliases:  # `block(...)` of `block = Block`, which goes
            chosen = self.state.alias_choices.get(site.ctor.func)  # `(BlockA if self.a else BlockB)(...)`
            func = (
                f"({code(chosen)})" if chosen is not None else code(self.state.alias_classes[site.ctor.func])
            )
            updated = updated.with_changes(func=parse_expression(func))
        args = self._handed_instances(site, updated)
        args = [a for a in args if not (a.keyword is not None and a.keyword.value == "name")]
        args = with_moved_flags(site, args)  # merged mode flags: given at the call
        if site.arg_sources:  # `Cell(x.shape[-1])`: the size the dataflow resolved
            assert site.user is not None
            bound, _ = bind_args(site.user.field_names, updated)
            resolved = {id(bound[name]): name for name in site.arg_sources if name in bound}
            args = [
                a.with_changes(value=resolved_arg(site, resolved[id(a)], a.value)) if id(a) in resolved else a
                for a in args
            ]
        added = [kwarg(name, parse_expression(expr)) for name, expr in site.user_in.items()]
        # a class with a field named rngs stays Linen, its wrapper taking NNX's as nnx_rngs (bridge.py)
        own = site.user is not None and "rngs" in site.user.field_names
        added.append(kwarg("nnx_rngs" if own else "rngs", cst.Name("rngs")))
        return with_args(updated, args, added)

    def _handed_instances(self, site: Site, updated: cst.Call) -> list[cst.Arg]:
        """``updated``'s arguments, each one that builds a class of the run in place
        (``AltUp(norm=Norm(scale_plus_one=False))``) given ``rngs=rngs``: the instance is handed to the
        module, which holds it as an attribute in NNX too (:func:`.name_map_entries.handed_builds_convert`
        says where). Sizes such a class gains are not known here: the verifier reports the build when its
        ``__init__`` requires more."""
        original = site.ctor
        if not handed_builds_convert(site) or len(original.args) != len(updated.args):
            return list(updated.args)
        out = []
        for before, after in zip(original.args, updated.args):
            value = after.value
            if (
                isinstance(before.value, cst.Call)
                and isinstance(value, cst.Call)
                and not before.star
                and self.ctx.user_class_of(before.value.func) is not None
                and not any(a.keyword is not None and a.keyword.value in ("rngs", "name") for a in value.args)
                and not any(a.star for a in value.args)
            ):
                after = after.with_changes(
                    value=with_args(value, list(value.args), [kwarg("rngs", cst.Name("rngs"))])
                )
            out.append(after)
        return out

    def _variable_ctor(self, site: Site, updated: cst.Call) -> cst.Call:
        found = self.state.variable_locals.get(site.ctor, {})
        canonical = canonical_variable_call(
            with_locals(updated, found, 1 if site.kind == "param" else 2), site.kind
        )
        assert not isinstance(canonical, str)  # the planner saw the same arguments
        args = list(canonical.args)
        args = [  # the resolved sizes in the rewritten value: `nnx.initializers`, not Linen's
            a.with_changes(value=resolved_arg(site, str(i), a.value)) if str(i) in site.arg_sources else a
            for i, a in enumerate(args)
        ]
        init = args[1 if site.kind == "param" else 2].value
        if site.kind == "param":
            value = init_call(init, [cst.Arg(parse_expression("rngs.params()")), *args[2:]])
        else:
            value = init_call(init, args[3:])
        plan = self.ctx.current_plan()
        numbers = number_fields(plan.fields) if plan is not None else frozenset()
        value = as_array(init, value, numbers)  # `lambda key: 2.0`: a Python number NNX's v[...] cannot read
        self.state.needs_jax_import |= needs_jax(init, numbers)
        self.state.uses_nnx = True
        return cst.Call(parse_expression(site.var_type), [cst.Arg(value)])

    def build(self, site: Site, updated: cst.Call, in_loop: bool = True) -> cst.BaseExpression:
        if site.kind == "layer":
            built = self._nnx_ctor(site, updated)
        elif site.kind == "module":
            built = self._user_ctor(site, updated)
        else:
            built = self._variable_ctor(site, updated)
        if site.lifted is not None:
            built = parse_expression(lifted_ctor(site.lifted, code(built)))
        return built_per_iteration(site, built) if in_loop else built

    def _build_factory(self, site: Site, replayed: Collection[str] = ()) -> cst.BaseExpression | None:
        """The constructor a factory-method call stands for, from the rewritten helper and call
        (``replayed``: the locals ``__init__`` replays, which it may call instead)."""
        call = self.state.factory_calls.get(site.ctor)
        if call is None:
            return None
        if isinstance(site.factory, FunctionFactory):  # `ops.linear(...)`: the function builds it
            return self.function_factory_call(site, call)
        if isinstance(site.factory, FieldFactory):  # `self.conv(...)`: the field builds it, given the sizes
            local = site.factory.local if isinstance(site.factory, FieldPartial) else None
            ctor = self.state.factory_updated.get(local.ctor) if local is not None else None
            merged = site.factory.merged(call, ctor)
            built = self.build(site, merged, in_loop=False)  # the loop's list: below
            assert isinstance(built, cst.Call)
            given = {a.keyword.value for a in merged.args if a.keyword is not None}
            # NNX's differing defaults (`decode=False`) are passed as for the layer written there, but for
            # those a binding's partial gives (`partial(nn.MultiHeadDotProductAttention, decode=True)`)
            extra = (
                (set(site.rule.extra_kwargs) & site.factory.partial_keywords) - given
                if site.rule is not None
                else set()
            )
            args = [a for a in built.args if a.keyword is None or a.keyword.value not in extra]
            func = f"self.{site.factory.name}"
            if (
                local is not None
                and local.name in replayed
                and all(a.keyword for a in local.partial.args[1:])
            ):
                # `conv(in_features, ...)`: the replayed local gives the partial's own keywords
                own = {a.keyword.value for a in call.args if a.keyword is not None}
                rule = site.rule
                implied = {
                    rule.nnx_arg(k) if rule else k
                    for k in (a.keyword.value for a in local.partial.args[1:])
                    if k not in own
                }  # type: ignore[union-attr]
                args, func = (
                    [a for a in args if a.keyword is None or a.keyword.value not in implied],
                    local.name,
                )
            return built_per_iteration(
                site, built.with_changes(func=parse_expression(func), args=strip_commas(args))
            )
        ctor = self.state.factory_updated.get(site.factory.ctor, site.factory.ctor)
        built = call_site_ctor(site.factory, call, ctor)
        return None if built is None else self.build(site, built)

    def function_factory_call(self, site: Site, call: cst.Call) -> cst.Call:
        """``ops.linear(3 * d, p)`` -> ``ops.linear(3 * d, p, in_features=..., rngs=rngs)``: the
        rewritten function takes the input size and the rngs as keywords."""
        rule = site.rule
        assert rule is not None
        added = (
            [kwarg(rule.in_arg, parse_expression(site.in_expr or "None"))] if rule.in_arg is not None else []
        )
        added.append(kwarg("rngs", cst.Name("rngs")))
        return with_args(call, list(call.args), added)

    def function_factory_return(self, factory: FunctionFactory, updated: cst.Call) -> cst.Call:
        """A ``return nn.Dense(...)`` of a layer factory function -> ``return nnx.Linear(in_features,
        ..., rngs=rngs)``, the input size being the parameter the function gains; a ``**kwargs`` it
        unpacks stays (its keys were checked to be arguments the NNX layer takes as they are)."""
        rule = factory.rule
        site = Site(
            kind="layer", attr="", linen_name="", ctor=updated, hoisted=False, rule=rule, in_expr=rule.in_arg
        )
        return self._nnx_ctor(site, updated, checked=True)

    def call_site(self, site: Site) -> cst.BaseExpression:
        if site.nest is not None:  # the next element of the list the replayed loops built
            return parse_expression(f"next({site.nest.iterator(site)})")
        ref = f"self.{site.attr}[{site.loop.position}]" if site.loop is not None else f"self.{site.attr}"
        if site.extends is not None and site.loop is not None:  # past the elements before this loop's
            ref = f"self.{site.attr}[{site.offset} + {site.loop.position}]"
        if site.tail_of is not None:
            ref = f"self.{site.attr}[{site.list_index}]"
        if site.prefix_index:  # built before its class's first loop: among the list's first elements
            ref = f"self.{site.attr}[{site.prefix_index}]"
        if site.kind == "param":
            ref += "[...]"
        return parse_expression(ref)

    def build_init(self, plan: ClassPlan, setup_body: list[cst.BaseStatement]) -> cst.FunctionDef:
        """``__init__`` of a planned class: its fields, the ``setup()`` body, the replayed locals and the
        hoisted submodules and variables, in Linen's creation order."""
        names = self.state.module_names  # and `jax`, which the output imports when it needs it
        fn = self._init_header(plan, names | {"jax"} if names and self.state.needs_jax_import else names)
        stmts: list[cst.BaseStatement] = [
            parse_statement(f"self.{f.name} = {field_value(f)}\n")
            for f in plan.fields
            if f.init or f.default is not None  # init=False: its default, set here
        ]
        if plan.uses_rngs:
            stmts.append(parse_statement("self.rngs = rngs.fork()\n"))
        if plan.super_init is not None and not plan.super_in_setup:  # it inherits what its base builds
            stmts.append(super_init_statement(plan))
        self._data_marks = data_marks(setup_body, {s.attr for s in plan.sites.values()})
        for stmt in setup_body:
            if is_super_setup(stmt):  # runs the base's build, or Linen's empty setup
                if plan.super_init is not None and plan.super_in_setup:
                    stmts.append(super_init_statement(plan).with_changes(leading_lines=stmt.leading_lines))
                continue
            stmts.append(self._containerize_nested(plan, stmt))
        shape_arg = next((a for a, how in plan.new_args.items() if how == "input_shape:0"), None)
        if shape_arg is not None and (plan.input_shape_locals or plan.input_shape_params):  # a stand-in input
            stmts.append(
                parse_statement(
                    f"{plan.shape_input} = jax.ShapeDtypeStruct(tuple({shape_arg}), jax.numpy.float32)\n"
                )
            )
            self.state.needs_jax_import = True
        stmts.extend(self._replayed_locals(plan))
        if plan.key_replay is not None:  # the split chain of keys the builds read (key_replay.py)
            stmts.extend(cst.parse_module("\n".join([*plan.key_replay.source_lines(), ""])).body)
        self._hoisted(plan, stmts)
        if not stmts:
            stmts.append(parse_statement("pass\n"))
        return fn.with_changes(body=fn.body.with_changes(body=stmts))

    @staticmethod
    def _init_header(plan: ClassPlan, names: frozenset[str] | None = None) -> cst.FunctionDef:
        """``def __init__(self, <fields>, *, <new size arguments>, rngs: nnx.Rngs): pass``; an annotation
        that reads a name the file does not bind (``names``) is written as a string."""
        params = ["self"]
        keyword_only = False
        for f, star in init_fields(plan.fields):
            if star:  # Linen's keyword-only fields: after KW_ONLY, or a required one after defaulted ones
                params.append("*")
                keyword_only = True
            default = f" = {f.default}" if f.default is not None else ""
            params.append(f"{f.name}: {written_annotation(f.annotation, names)}{default}")
        if not keyword_only:
            params.append("*")
        params.extend(
            f"{a}: tuple[int, ...]"
            if tuple_valued(how)
            else f"{a}: int | None = None"  # a size needed only when a config test builds its layer,
            if how == "unresolved_if" or a in plan.optional_inputs  # or of an input that may be None
            else f"{a}: int"
            for a, how in plan.new_args.items()
        )
        if "rngs" not in plan.field_names:
            params.append("rngs: nnx.Rngs")
        one_line = f"def __init__({', '.join(params)}):\n    pass\n"
        many_lines = "def __init__(\n" + "".join(f"    {p},\n" for p in params) + "):\n    pass\n"
        header = one_line if len(one_line) <= 96 else many_lines
        fn = parse_statement(header)
        assert isinstance(fn, cst.FunctionDef)
        return fn

    def _replayed_locals(self, plan: ClassPlan) -> list[cst.BaseStatement]:
        """The config locals ``__init__`` replays (``cfg = self.config``), as rewritten; a shape local
        reads its static sizes."""
        stmts: list[cst.BaseStatement] = []
        replayed: set[int] = set()  # `w, b = ...` binds two needed names in one statement
        for name in plan.needed_locals:
            if id(plan.pure_locals[name]) in replayed:
                continue
            replayed.add(id(plan.pure_locals[name]))
            stmt = self.state.pure_updated.get(plan.pure_locals[name], plan.pure_locals[name])
            if name in plan.mode_partials:  # its call-time flags are given where its layers are called
                value = stmt.body[0].value  # type: ignore[attr-defined]
                stmt = stmt.with_changes(
                    body=[
                        stmt.body[0].with_changes(  # type: ignore[attr-defined]
                            value=without_keywords(value, set(plan.mode_partials[name]))
                        )
                    ]
                )
            if name in plan.shape_locals:
                sizes = plan.shape_local_sizes.get(name)
                if sizes is None:
                    self.ctx.report(
                        MOD_004,
                        plan.pure_locals[name],
                        f"`{name}` reads an input size the dataflow cannot tell",
                        "compute it from constructor arguments / config",
                    )
                    continue
                value = replayed_assign(stmt)[1]  # type: ignore[index]  # `n, l, d = x.shape`: x.shape[-1]
                stmt = parse_statement(f"{bound_name(name)} = {replace_shape_last(value, sizes)}\n")
            tests = plan.static_flow.replay_tests.get(plan.pure_locals[name]) if plan.static_flow else None
            if tests:  # bound under `if`s on config in the method: under the same tests here
                test = " and ".join(code(t) if len(tests) == 1 else f"({code(t)})" for t in tests)
                stmt = parse_statement(f"if {test}:\n    pass\n").with_changes(  # type: ignore[call-arg]
                    body=cst.IndentedBlock([stmt.with_changes(leading_lines=[])])  # type: ignore[attr-defined]
                )
            stmts.append(stmt)
        return stmts

    def _hoisted(self, plan: ClassPlan, stmts: list[cst.BaseStatement]) -> None:
        """Append the hoisted submodules and variables (loop nests, conditional ones) to ``stmts``."""
        emitted_if: dict[str, int] = {}
        emitted_nests: set[int] = set()
        assigned: set[str] = set()  # attributes an earlier site sets: a later test must not reset them
        for site in plan.hoisted_order:
            if site.nest is not None:
                if id(site.nest) not in emitted_nests:
                    emitted_nests.add(id(site.nest))
                    stmts.extend(self._nest_init(site.nest, plan.needed_locals))
                continue
            built = (
                self._build_factory(site, plan.needed_locals)
                if site.factory is not None
                else self.state.built.get(site.ctor)
            )
            if built is None:
                continue
            markers = [marker_line(m) for m in dict.fromkeys(self.state.init_markers.get(site.ctor, []))]
            if site.prefix_index == "0" and site.attr not in assigned:  # the list its class's loop fills
                stmts.append(parse_statement(f"self.{site.attr} = nnx.List()\n"))
                assigned.add(site.attr)
            if site.tail_of is not None or site.prefix_index:  # the element after the loop's: Linen's
                # {Class}_{loop length}; or one before it, among the first elements
                statement = cst.Expr(cst.Call(parse_expression(f"self.{site.attr}.append"), [cst.Arg(built)]))
            elif site.extends is not None and isinstance(built, cst.Call):  # a later loop's elements
                extend = parse_expression(f"self.{site.attr}.extend")
                statement = cst.Expr(cst.Call(extend, [cst.Arg(built.args[0].value)]))
            else:
                statement = cst.Assign(
                    targets=[cst.AssignTarget(parse_expression(f"self.{site.attr}"))], value=built
                )
            # the markers go on the statement holding the code, as a second run would place them
            lines = [cst.SimpleStatementLine([s]) for s in self._built_lazily(site, statement)]
            lines[0] = lines[0].with_changes(leading_lines=markers)
            assign = lines[-1] if len(lines) == 1 else lines  # type: ignore[assignment]
            earlier, index = site.attr in assigned, emitted_if.get(site.attr)
            assigned.add(site.attr)
            if isinstance(assign, list):  # `self.blocks = nnx.List()`, then the elements one by one
                if site.conditions:
                    conditional(site, assign, stmts, bare=earlier)
                    emitted_if[site.attr] = len(stmts) - 1
                else:
                    stmts.extend(assign)
            elif site.exclusive_with is not None and site.exclusive_with.attr in emitted_if:
                index = emitted_if[site.exclusive_with.attr]  # the other branch of the same switch
                block = stmts[index]
                stmts[index] = block.with_changes(orelse=other_branch(site, block, assign))
            elif site.conditions and earlier and index is not None:  # the same attribute, another branch
                nested = nested_in_else(stmts[index], site, assign)
                if nested is None:
                    conditional(site, assign, stmts, bare=True)
                else:
                    stmts[index] = nested
            elif site.conditions:  # created only when Linen would create it; absent -> None
                conditional(site, assign, stmts, bare=earlier)
                emitted_if[site.attr] = len(stmts) - 1
            elif not (earlier and isinstance(statement, cst.Assign)):  # a shared stateless one: built once
                stmts.append(assign)

    @staticmethod
    def _built_lazily(site: Site, statement: cst.BaseSmallStatement) -> list[cst.BaseSmallStatement]:
        """A loop's list whose elements read the one built before them (``in_features=
        self.blocks[-1].out_features``): each element is appended before the next is built (a generator
        that ``extend`` consumes), starting from an empty list; else ``statement`` as it is."""
        if site.container != "list" or site.loop is None or f"self.{site.attr}[-1]" not in code(statement):
            return [statement]
        call = statement.value
        if not (isinstance(call, cst.Call) and call.args and isinstance(call.args[0].value, cst.ListComp)):
            return [statement]
        comp = call.args[0].value
        generator = cst.GeneratorExp(elt=comp.elt, for_in=comp.for_in)
        extend = cst.Expr(cst.Call(parse_expression(f"self.{site.attr}.extend"), [cst.Arg(generator)]))
        if isinstance(statement, cst.Expr):  # a later loop's elements: already `self.blocks.extend(...)`
            return [extend]
        empty = cst.Assign(targets=statement.targets, value=parse_expression("nnx.List()"))
        return [empty, extend]

    def _nest_init(self, nest: LoopNest, replayed: Collection[str]) -> list[cst.BaseStatement]:
        """The nest's lists, then its loops replayed with what the constructors read: each line that
        built submodules becomes ``self.<list>.append(<NNX constructor>)``, in the same order."""
        appends: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        read: set[str] = set()
        in_order = sorted(nest.sites, key=lambda s: nest.applied.get(id(s), len(nest.applied)))
        for site in in_order:
            built = (
                self._build_factory(site, replayed)
                if site.factory is not None
                else self.state.built.get(site.ctor)
            )
            if built is None:
                continue
            read |= names_in(built)
            line = cst.SimpleStatementLine(
                [cst.Expr(cst.Call(parse_expression(f"self.{site.attr}.append"), [cst.Arg(built)]))]
            )
            appends.setdefault(nest.statements[id(site)], []).append(line)
        for f in nest_fors(nest.outer):
            read |= names_in(f.iter)
        read |= test_names(nest.outer)  # the `if`s around appends (loop_tests.py) read them too
        needed: set[cst.CSTNode] = set()
        for name, stmt in reversed(list(nest.local_stmts.items())):  # a local may read an earlier one
            if name in read:
                needed.add(stmt)
                read |= names_in(stmt.body[0].value)  # type: ignore[attr-defined]
        loops = replay_loops(nest.outer, needed, appends)
        lists = [parse_statement(f"self.{site.attr} = nnx.List()\n") for site in in_order]
        self.state.uses_nnx = True
        return [*lists, *([loops] if loops is not None else [])]

    def _containerize_nested(self, plan: ClassPlan, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """:meth:`_containerize` on a setup() statement and on those under its ``if`` / ``for`` /
        ``with`` (``if config.norm == "layer": self.layers = [...]``), not inside a nested ``def``."""
        if isinstance(stmt, cst.SimpleStatementLine):
            return self._containerize(plan, stmt)
        emitter = self

        class Nested(cst.CSTTransformer):
            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return False

            def visit_ClassDef(self, node: cst.ClassDef) -> bool:
                return False

            def leave_SimpleStatementLine(
                self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
            ) -> cst.BaseStatement:
                return emitter._containerize(plan, updated)

        return stmt.visit(Nested())  # type: ignore[return-value]

    def _containerize(self, plan: ClassPlan, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """``self.layers = [..layers..]`` in setup -> ``nnx.List([...])`` (a plain list is rejected by NNX);
        ``self.norm = None`` before the submodule it holds later -> ``nnx.data(None)`` (data_none.py)."""
        if not isinstance(stmt, cst.SimpleStatementLine):
            return stmt
        marked = as_data(stmt, self._data_marks)  # `self.norm = None` before `self.norm = Norm()`
        if marked is not None:
            self.state.uses_nnx = True
            return marked
        if not (len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            return stmt
        assign = stmt.body[0]
        attr = self_attr(assign.targets[0].target)
        if attr in plan.containers and isinstance(assign.value, (cst.List, cst.Tuple)):
            value = cst.Call(parse_expression("nnx.List"), [cst.Arg(cst.List(assign.value.elements))])
            return stmt.with_changes(body=[assign.with_changes(value=value)])
        if isinstance(assign.value, (cst.ListComp, cst.Name)) and any(
            s.elements is not None and s.attr == attr for s in plan.sites.values()
        ):  # a comprehension of submodules (setup_lists.py) or a list a loop filled (setup_loop_lists.py)
            value = cst.Call(parse_expression("nnx.List"), [cst.Arg(assign.value)])
            return stmt.with_changes(body=[assign.with_changes(value=value)])
        return stmt


def _as_data(value: cst.BaseExpression) -> cst.BaseExpression:
    """``nnx.data(value)`` for an array argument the NNX layer keeps as an attribute (a literal None
    stays as is)."""
    if isinstance(value, cst.Name) and value.value == "None":
        return value
    return cst.Call(cst.Attribute(cst.Name("nnx"), cst.Name("data")), [cst.Arg(value)])
