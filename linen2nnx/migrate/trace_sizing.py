"""Sizes from the trace: what ``--trace SPEC`` recorded, accepted only when the config explains it.

Part of the *analyse* step, the second kind of evidence of :class:`~linen2nnx.migrate.sizing.Sizer`
(after static dataflow, before a required constructor argument): a traced size is taken when exactly
one config expression of the class equals it in every traced instance, when it confirms the
candidate the dataflow proposed, or (with ``--unsafe-fixes``) as the literal; a layer the trace saw
read a leaf of its module's own call arguments unchanged (a field of a NamedTuple input a library
hands it) gets that leaf's last axis as a constructor argument, as an input's own does. Kept apart from the
static sizing so that each reads as one kind of evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import libcst as cst

from linen2nnx.migrate.call_inputs import passed_input
from linen2nnx.migrate.config_match import (
    base_factors,
    config_values,
    confirmed_by_trace,
    match_config,
    match_each,
    traced_inputs,
)
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.dataflow import Feat
from linen2nnx.migrate.handed_modules import HANDED, handed_size
from linen2nnx.migrate.input_sizes import ones, tuple_valued
from linen2nnx.migrate.rules import SHAPE_001, SHAPE_002, SHAPE_003, SHAPE_004
from linen2nnx.migrate.sites import ClassPlan, Site
from linen2nnx.migrate.trace_paths import MISSING, input_size_of, linen_names, size_path, traced_at
from linen2nnx.migrate.tuple_flow import ONE_SIDE
from linen2nnx.namemap import element_key


class TraceEvidence:
    """The trace's part of the :class:`~linen2nnx.migrate.sizing.Sizer` (a base class of it): uses the
    sizer's ``ctx`` / ``state``, ``static_size`` (a candidate the trace confirms is sized statically)
    and ``_required_arg`` (the fallback when the trace does not decide)."""

    def _traced_arg(self, plan: ClassPlan, site: Site, arg: str, how: str, node: cst.CSTNode) -> str:
        """A submodule's argument its own config could not express (``traced:6``): the caller's config
        expression with that traced value, when exactly one matches."""
        matched = match_config(
            [int(how.split(":")[1])],
            self.state.trace.instances.get(plan.name, []) if self.state.trace is not None else [],
            plan,
            traced_inputs(self.state.trace, plan.name),
        )
        if len(matched) == 1:
            self.ctx.report(
                SHAPE_001,
                node,
                f"{arg} of {site.user.name if site.user else site.attr} = "
                f"{matched[0]} (traced: {how.split(':')[1]}; the only config value that matches)",
            )
            return matched[0]
        return self._required_arg(plan, site, f"{arg} of {site.user.name if site.user else site.attr}", node)

    def check_traced_carry(self, plan: ClassPlan, site: Site, node: cst.CSTNode) -> None:
        """A Linen cell's hidden size is its carry's last axis (``h.shape[-1]``), not ``features``: the
        two differ when a caller hands in a carry of another width (seq2seq's decoder starts from the
        encoder's state). A trace that shows such a carry makes the NNX cell's size a manual finding."""
        if (
            self.state.trace is None
            or site.rule is None
            or site.rule.out_arg not in site.args
            or site.rule.out_arg in site.arg_sources
        ):
            return
        carried = {
            sizes[-1] for sizes in self.state.trace.carries.get((plan.name, site.linen_name), []) if sizes
        }
        features = code(site.args[site.rule.out_arg].value)
        values = config_values(features, self.state.trace.instances.get(plan.name, []))
        if values is None:
            return
        declared = set(values)
        if not carried or not declared or carried == declared:
            return
        matched = match_config(
            sorted(carried),
            self.state.trace.instances.get(plan.name, []),
            plan,
            traced_inputs(self.state.trace, plan.name),
        )
        if len(matched) == 1:
            size = matched[0]
        elif len(carried) == 1:  # not this class's config: a constructor argument its caller fills
            size = f"{site.attr}_hidden_features".replace("/", "_")
            plan.new_args[size] = f"traced:{carried.pop()}"
        else:
            self.ctx.report(
                SHAPE_003,
                node,
                f"hidden size of {plan.name}.{site.attr}: Linen's nn.{site.rule.linen} "
                f"takes it from its carry (traced {sorted(carried)}), not from {features} (traced "
                f"{sorted(declared)})",
                f"give nnx.{site.rule.nnx} the carry's width as hidden_features",
            )
            return
        site.arg_sources[site.rule.out_arg] = size
        self.ctx.report(
            SHAPE_001,
            node,
            f"hidden size of {plan.name}.{site.attr} = {size}: Linen's "
            f"nn.{site.rule.linen} takes it from its carry (traced), not from {features}",
        )

    def _confirmed_candidate(
        self, plan: ClassPlan, site: Site, feat: Feat, params: list[str], node: cst.CSTNode
    ) -> str | None:
        """An unknown size with a candidate (``x @ y``: y's last axis if y has rank >= 2) is taken only
        when the trace shows the site reading exactly the candidate's size in every traced call."""
        candidate = feat.candidate
        if self.state.trace is None or candidate is None or site.loop is not None or site.tail_of is not None:
            return None
        shapes = [s for s in self.state.trace.shapes_for(plan.name, site.linen_name) if s]
        sizes = {s[-1] for s in shapes}
        if not sizes or (len(sizes) != 1 and not feat.reduced):
            return None
        if (
            feat.reduced
        ):  # `jnp.mean(x, axis=(1, 2))` read as is: x had len(axes) more axes than the site's input;
            # only the rank is evidence, so traced configs of several widths confirm it alike
            ranks = {len(s) + len(feat.reduced) for s in shapes}
            if len(ranks) != 1 or not all(
                -rank <= a < rank - 1 and a != -1 for a in feat.reduced for rank in ranks
            ):
                return None
            evidence = (
                f"the reduced value has rank {ranks.pop()}, so axes {list(feat.reduced)} leave its last"
            )
        else:
            if (
                candidate.kind == "input"
                and self.state.flow_method == "__call__"
                and candidate.input_name in params
            ):
                index = params.index(candidate.input_name)
                seen = {
                    call[index][-1]
                    for call in self.state.trace.own_inputs.get(plan.name, [])
                    if index < len(call) and call[index]
                }
            elif candidate.kind == "expr":
                values = config_values(candidate.expr, self.state.trace.instances.get(plan.name, []))
                if values is None:
                    return None
                seen = set(values)
            else:
                return None
            if seen != sizes:
                return None
            evidence = f"{sizes.pop()}, which confirms {feat.reason} as its last axis"
        size = self.static_size(plan, candidate, params, node)
        if size is not None:
            self.ctx.report(
                SHAPE_001,
                node,
                f"input feature size of {plan.name}.{site.attr} = {size} (traced: {evidence})",
            )
        return size

    def _from_trace(
        self, plan: ClassPlan, site: Site, feat: Feat, node: cst.CSTNode, later: bool = False
    ) -> str | None:
        """The size of ``site``'s input from the trace (``feat``: what the dataflow made of it): a leaf of
        the class's own inputs it was fed unchanged (unless the dataflow saw a value chosen on a test, of
        which the trace saw one side: ``context = x if context is None else context``), the config value
        its traced size matches, or (``--unsafe-fixes``) the traced literal. ``later``: the size of a list's
        elements after the first, which only the traced calls of those elements tell (a config that
        builds one element says nothing of the others)."""
        if self.state.trace is None or site.tail_of is not None:
            return None  # the trace knows one Linen name; a list's extension moves with the loop's length
        listed = site.loop is not None or site.nest is not None  # Linen names its elements on: {Class}_{k}
        if listed or site.elements is not None:
            shapes = self._element_shapes(plan, site, first=1 if later else 0)
        else:
            shapes = self.state.trace.shapes_for(plan.name, site.linen_name)
            leaf = self._input_leaf(plan, site, node) if not _branched(feat) else None
            if leaf is not None:
                return leaf
        sizes = sorted({s[-1] for s in shapes if s})
        if not sizes or feat.reason.endswith(ONE_SIDE):  # the traced config's side of a test of the config
            return self._traced_literal(plan, site, sizes, node)
        configs = (
            self._site_configs(plan, site) if not listed else self.state.trace.instances.get(plan.name, [])
        )
        flat = self._flattened(plan, site, feat, shapes, configs, node) if not listed else None
        if flat is not None:  # "": ambiguous, reported
            return flat or self._traced_literal(plan, site, sizes, node)
        scaled = (
            self._sliced_base(f"{plan.name}.{site.attr}", feat, shapes, configs, node) if not listed else None
        )
        if scaled is not None:
            return scaled
        matched = match_config(sizes, configs, plan, traced_inputs(self.state.trace, plan.name))
        if len(matched) == 1:
            self.ctx.report(
                SHAPE_001,
                node,
                f"input feature size of {plan.name}.{site.attr} = {matched[0]} "
                f"(traced: {sizes[0]}; the only config value that matches)",
            )
            return matched[0]
        if len(matched) > 1:
            self.ctx.report(
                SHAPE_003,
                node,
                f"input feature size of {plan.name}.{site.attr} is ambiguous: the "
                f"traced {sizes[0]} equals {', '.join(matched)}",
                "pass the size explicitly, or trace with a config where these differ",
            )
        return self._traced_literal(plan, site, sizes, node)

    def _traced_literal(self, plan: ClassPlan, site: Site, sizes: list[int], node: cst.CSTNode) -> str | None:
        """With ``--unsafe-fixes``, the one size the trace saw, as a literal (``L2N-SHAPE-004``): right
        for the traced config only, which the finding says; else None (a required argument)."""
        if len(sizes) == 1 and self.state.unsafe_fixes:
            self.ctx.report(
                SHAPE_004,
                node,
                f"input feature size of {plan.name}.{site.attr} is the traced literal {sizes[0]}",
                "replace it with an expression of the config if it can vary",
            )
            return str(sizes[0])
        return None

    def _site_configs(self, plan: ClassPlan, site: Site) -> list[dict]:
        """The configs of the traced instances of the class that called ``site`` (a layer built under
        `if self.add_downsample` exists in some blocks only: a field equal to its size in those is the
        explanation, whatever the others hold); all of them where the trace does not tell."""
        assert self.state.trace is not None
        every = self.state.trace.instances.get(plan.name, [])
        owners = self.state.trace.child_parents.get((plan.name, site.linen_name), [])
        if not owners or any(i is None or not 0 <= i < len(every) for i in owners):
            return every
        return [every[i] for i in sorted(set(owners))]  # type: ignore[index]

    def _input_leaf(self, plan: ClassPlan, site: Site, node: cst.CSTNode) -> str | None:
        """A layer that every traced call fed one leaf of the module's own ``__call__`` arguments,
        unchanged (``graphs.nodes``, which ``jraph.GraphMapFeatures`` hands its ``embed_node_fn``):
        that leaf's last axis, a constructor argument as an input's own is (``graphs_nodes_features``;
        ``in_features`` for the first argument itself)."""
        assert self.state.trace is not None
        paths = self.state.trace.input_leaves.get((plan.name, site.linen_name), [])
        call = next((m for m in self.state.methods.get(plan.name, []) if m.name.value == "__call__"), None)
        if not paths or None in paths or len(set(paths)) != 1 or call is None:
            return None
        index, _, accessor = paths[0].partition(":")  # type: ignore[union-attr]
        params = [p.name.value for p in call.params.params][1:]
        if int(index) >= len(params) or not _PLAIN_ACCESSOR.fullmatch(accessor):
            return None
        if call.params.params[int(index) + 1].default is not None:
            # an optional input (`context=None`): the trace saw it given, a caller may not give it
            return None
        why = f", which the trace saw {plan.name}.{site.attr} read unchanged"
        return self._leaf_argument(plan, int(index), params[int(index)], accessor, node, why)

    def _forwarded_leaf(
        self, plan: ClassPlan, how: str, feats: dict, args: tuple, node: cst.CSTNode, params: list[str]
    ) -> str | None:
        """A submodule's size of a leaf of its input ``input_leaf:i:['image']`` where the caller passes it
        one of its own ``__call__`` inputs (or a leaf of one): the caller's argument for the same leaf."""
        if not how.startswith("input_leaf:"):
            return None
        index, _, accessor = how.removeprefix("input_leaf:").partition(":")
        given = feats.get(0) if index == "0" else passed_input(node, args, int(index), "")
        if given is None or given.kind not in ("input", "leaf") or self.state.flow_method != "__call__":
            return None
        if given.input_name not in params:
            return None
        prefix = given.expr if given.kind == "leaf" else ""
        return self._leaf_argument(
            plan, params.index(given.input_name), given.input_name, prefix + accessor, node
        )

    def _leaf_argument(
        self, plan: ClassPlan, index: int, param: str, accessor: str, node: cst.CSTNode, why: str = ""
    ) -> str | None:
        """The constructor argument holding the last-axis size of the leaf ``accessor`` (``['image']``)
        of ``__call__``'s argument ``param`` (the argument itself for ``''``), added once with its
        finding; None when its name already stands for another size."""
        if accessor:
            label = re.sub(r"\W+", "_", accessor).strip("_")  # ['obs']['state'] -> obs_state
            arg, how = f"{param}_{label}_features", f"input_leaf:{index}:{accessor}"
        else:
            arg, how = ("in_features" if index == 0 else f"{param}_features"), f"input:{index}"
        while arg in plan.field_names:
            arg += "_"
        if arg in plan.new_args:
            return arg if plan.new_args[arg] == how else None
        plan.new_args[arg] = how
        self.ctx.report(
            SHAPE_002,
            node,
            f"{plan.name} gains constructor argument {arg}: the last-axis size of `{param}{accessor}`{why}",
            f"pass {arg}={param}{accessor}.shape[-1] where {plan.name} is built",
        )
        return arg

    def unapplied_child_size(self, plan: ClassPlan, site: Site, arg: str, how: str) -> str | None:
        """A size ``arg`` of a module the flow never saw applied: its input as the trace saw it called,
        the output size of a module it is handed, or what the trace saw at its layer's path."""
        if how == "input:0":
            traced = self._from_trace(plan, site, Feat.unknown("a module applied elsewhere"), site.ctor)
            if traced:
                return traced
        if how.startswith(HANDED) and (handed := handed_size(self, plan, site, arg, how, site.ctor)):
            return handed
        return self.traced_child_size(plan, site, arg, how, site.ctor)

    def traced_child_size(
        self, plan: ClassPlan, site: Site, arg: str, how: str, node: cst.CSTNode
    ) -> str | None:
        """A size ``arg`` a class of the run asks its builder for, which the trace saw at its layer's
        Linen path (:mod:`.trace_paths`) in every traced instance of this class: the one config
        expression equal, in each instance, to what that instance's layer saw (Hugging Face's key
        projection, applied to the layer's input or to a cross-attention's: the trace saw the first)."""
        trace = self.state.trace
        if trace is None or site.kind != "module" or site.user is None or tuple_valued(how):
            return None
        rel = size_path(site, arg, False, self.ctx.parent_of)
        paths, configs = trace.instance_paths.get(plan.name, []), trace.instances.get(plan.name, [])
        if rel is None or any("{i" in part for part in rel) or len(paths) != len(configs) or None in paths:
            return None
        sizes = [traced_at(trace, path, rel) for path in paths]
        if not sizes or not all(type(size) is int and size > 1 for size in sizes):
            return None  # a 1 broadcasts against any width: a parameter of it would run, wrong
        inputs = {shape[-1] for call in trace.own_inputs.get(plan.name, []) for shape in call if shape}
        if set(sizes) <= inputs:
            return None  # the width of an input of this class's own: the layer may read that input
        matched = match_each(sizes, configs, plan)
        if len(matched) != 1:
            return None  # none or several: the required argument, which the written spec fills
        where = "/".join(linen_names(rel))
        self.ctx.report(
            SHAPE_001,
            node,
            f"{arg} of {site.user.name} = {matched[0]} (traced at {where}: {sorted(set(sizes))}; the only "
            "config value that matches in each instance)",
        )
        return matched[0]

    def note_traced_value(self, plan: ClassPlan, site: Site, arg: str, child_arg: str, shape: bool) -> None:
        """Record in ``plan.traced_sizes`` what the trace saw for ``arg``, a size no config expression
        explains, where the class was traced once and ``arg`` is the input size (or whole input shape)
        of a layer or class of the run it applies alone, or one input size per element of a setup()
        list (a tuple), or a size a child asks for, found by its layer's Linen path (``size_paths``,
        :mod:`.trace_paths`): the written pair spec builds the traced model with it (the code keeps
        the required argument and its finding: another config may need other sizes)."""
        trace = self.state.trace
        if trace is None:
            return
        rel = size_path(site, child_arg, shape, self.ctx.parent_of)
        if rel is not None:
            plan.size_paths[arg] = rel  # what a builder of this class, built once, looks up
        if len(trace.instances.get(plan.name, [])) != 1:
            return
        value = self._direct_traced_value(plan, site, child_arg, shape)
        base = trace.instance_paths.get(plan.name, [None])[0]
        if value is MISSING and rel is not None and base is not None:
            value = traced_at(trace, base, rel)
        if value is not MISSING:
            plan.traced_sizes[arg] = value

    def _direct_traced_value(self, plan: ClassPlan, site: Site, child_arg: str, shape: bool) -> Any:
        """:meth:`note_traced_value`'s value from the class's own children, or :data:`MISSING`."""
        trace = self.state.trace
        assert trace is not None
        child = site.user if site.kind == "module" and site.elements is None and site.loop is None else None
        if (
            child is not None
            and child_arg in child.traced_sizes
            and len(trace.instances.get(child.name, [])) == 1
        ):
            return child.traced_sizes[child_arg]  # a size the child asks its builder for
        if (
            not input_size_of(site, child_arg, shape)
            or site.parent is not None
            or site.loop is not None
            or site.nest is not None
            or site.tail_of is not None
            or (site.elements is not None and shape)
        ):
            return MISSING
        if site.elements is None:
            seen = {tuple(s) if shape else s[-1] for s in trace.shapes_for(plan.name, site.linen_name) if s}
            return seen.pop() if len(seen) == 1 else MISSING
        each = []
        for found in self._each_element(plan, site.elements):
            seen = {s[-1] for s in found if s}
            if len(seen) != 1:
                break
            each.append(seen.pop())
        return tuple(each) if each else MISSING

    def size_hint(self, plan: ClassPlan, arg: str, size: str = "size") -> str:
        """The hint of a required size (``size``: or sizes): run a trace, or (one ran) what it left to do."""
        if self.state.trace is None:
            return f"run `linen2nnx migrate --trace SPEC` or pass the {size} explicitly"
        if arg in plan.traced_sizes:
            return (
                f"pass the {size} explicitly; the pair spec written with --out-dir gives the traced "
                f"{plan.traced_sizes[arg]}, right for the traced config only"
            )
        return f"pass the {size} explicitly: no config value explains what the trace saw, if it saw the layer"

    def _element_shapes(self, plan: ClassPlan, site: Site, first: int = 0) -> list[tuple[int, ...]]:
        """The traced inputs of every element of a loop-built list (``GPT2Block_0``, ``GPT2Block_1``, ...
        or ``layer_0``, ... for ``name=f'layer_{i}'``): one size for all of them is a size of the
        list, which a config expression may explain as it explains a single module's."""
        assert self.state.trace is not None
        if site.elements is not None:  # a setup() comprehension's names: `blocks_{i}`, `block.{i}`
            pattern = site.elements
        elif "{i" in site.linen_name:  # a loop's computed names: `EncDecBlock{i}`, `unit{i+2}`
            pattern = site.linen_name
        else:  # `Block_{i}` (auto-named), `layers_{i}` (`name=f'layers_{i}'`, whose prefix names the list)
            pattern = site.linen_name + "_{i}"
        return [shape for found in list(self._each_element(plan, pattern))[first:] for shape in found]

    def _each_element(self, plan: ClassPlan, pattern: str) -> Iterator[list[tuple[int, ...]]]:
        """The traced input shapes of element 0, 1, ... of a list whose Linen names follow ``pattern``,
        up to the first element the trace did not see."""
        assert self.state.trace is not None
        for k in range(10_000):
            found = self.state.trace.shapes_for(plan.name, element_key(pattern, k))
            if not found:
                return
            yield found

    def _sliced_base(
        self, label: str, feat: Feat, shapes: list[tuple[int, ...]], configs: list[dict], node: cst.CSTNode
    ) -> str | None:
        """An indexed config-sized value (``x[:, 0]``) the trace saw keep its whole base size: that
        base, when every traced instance agrees (``label``: the site, ``Class.attr``)."""
        found = base_factors(feat.base, shapes, configs) if feat.kind == "sliced" else None
        if found is None or found[1] != {1}:
            return None
        traced = min(s[-1] for s in shapes if s)
        self.ctx.report(SHAPE_001, node, f"input feature size of {label} = {found[0]} (traced: {traced})")
        return found[0]

    def _flattened(
        self,
        plan: ClassPlan,
        site: Site,
        feat: Feat,
        shapes: list[tuple[int, ...]],
        configs: list[dict],
        node: cst.CSTNode,
    ) -> str | None:
        """A flatten's size (``x.reshape((x.shape[0], -1))`` after a conv of ``self.ch``) is its base
        times the axes it merges: pixels, whose number the traced input's resolution sets, written as
        that factor with a finding that says so (also a factor of 1, a 1 x 1 image); or config (heads),
        which a field equal to the factor may be, as a field equal to the whole size may explain it:
        then ``""``, an ``L2N-SHAPE-003`` listing them. None: no config base, or factors that differ."""
        found = base_factors(feat.base, shapes, configs) if feat.kind == "flatten" else None
        if found is None or len(found[1]) != 1:
            return None
        (base, (factor,)), sizes = found, sorted({s[-1] for s in shapes if s})
        scaled = base if factor == 1 else f"{factor} * {base}"
        rivals = [f"{e} * {base}" for e in match_config([factor], configs, plan) if factor > 1]
        rivals += [
            m
            for m in match_config(sizes, configs, plan, traced_inputs(self.state.trace, plan.name))
            if m != scaled
        ]
        if rivals:
            self.ctx.report(
                SHAPE_003,
                node,
                f"input feature size of {plan.name}.{site.attr} is ambiguous: the traced {sizes[0]} is "
                f"{scaled} (for the traced input resolution only), {', '.join(rivals)}",
                "pass the size explicitly, or trace with a config where these differ",
            )
            return ""
        self.ctx.report(
            SHAPE_001,
            node,
            f"input feature size of {plan.name}.{site.attr} = {scaled} (traced: {sizes[0]})",
            "the factor holds for the traced input resolution only",
        )
        return scaled

    def _axis_matches(
        self,
        plan: ClassPlan,
        sizes: list[int],
        configs: list[dict],
        shape: tuple[int, ...],
        axis: int,
        paired: bool,
    ) -> list[str]:
        """The config expressions an axis of an input shape a parameter reads may be, with its rivals:
        before the last, an axis of the traced inputs or another axis of ``shape`` holding the same
        number (16 patches of an 8 x 8 image beside a width of 16), each no evidence. Of equal fields
        the caller takes the one the class names (see the branch strict-trace-ambiguity), never one
        beside a rival that is no field."""
        if paired:
            return match_each(sizes, configs, plan)
        last = axis == len(shape) - 1
        matched = match_config(
            sizes, configs, plan, [] if last else traced_inputs(self.state.trace, plan.name)
        )
        if matched and not last:
            same = [
                f"axis {j} of the input itself" for j, n in enumerate(shape) if n == sizes[0] and j != axis
            ]
            matched += same
        return matched

    def _input_shape(
        self,
        plan: ClassPlan,
        site: Site,
        arg: str,
        node: cst.CSTNode,
        static: str | None = None,
        rank: int = 0,
    ) -> str:
        """The input shape a module sizes its parameters from, as config expressions: from the trace,
        the axes its parameter shapes read (each matched to one config value, in every traced instance
        of the class when the calls pair with them) and 1 for the others (batch, length: never read, so
        any size builds the same parameters). ``static``: the input's last-axis size the dataflow
        knows, for a last axis no config value matches (a literal the trace confirms). With no trace of
        it, a module that reads its input's ``rank`` alone gets ones (``input_sizes.reads_rank_only``)."""
        key = (plan.name, site.linen_name)
        trace = self.state.trace
        read = trace.dims_read.get(key) if trace is not None else None
        calls = trace.shapes_for(*key) if trace is not None else []
        shapes = sorted(set(calls))
        what = f"{arg} of {site.user.name if site.user else site.attr} ({plan.name}.{site.attr})"
        configs = trace.instances.get(plan.name, []) if trace is not None else []
        paired = len(shapes) > 1 and len({len(s) for s in shapes}) == 1
        if paired:  # each call's shape with the config of the parent instance that made it
            parents = trace.child_parents.get(key, []) if trace is not None else []
            if len(parents) == len(calls) and all(i is not None and i < len(configs) for i in parents):
                configs = [configs[i] for i in parents]  # type: ignore[index]
            paired = len(calls) == len(configs)
        if read is None or not (len(shapes) == 1 or paired):
            if rank and read is None and site.user is not None and site.user.shape_rank_only:
                return ones(rank)
            return self._required_arg(plan, site, what, node, arg, shape=True)
        source = " ".join(code(m) for m in self.state.methods.get(plan.name, []))
        dims, last = [], len(shapes[0]) - 1
        for axis in range(len(shapes[0])):
            if axis - len(shapes[0]) not in read:
                dims.append("1")
                continue
            sizes = [shape[axis] for shape in calls] if paired else [shapes[0][axis]]
            matched = self._axis_matches(plan, sizes, configs, shapes[0], axis, paired)
            named = [m for m in matched if "." + m.rsplit(".", 1)[-1] in source and m.startswith("self.")]
            named = named if all(m.startswith("self.") for m in matched) else []
            if len(matched) == 1 or len(named) == 1:
                dims.append(matched[0] if len(matched) == 1 else named[0])
            elif not matched and axis == last and confirmed_by_trace(static, sizes, configs):
                dims.append(static)  # type: ignore[arg-type]
            else:
                traced = sizes[0] if len(set(sizes)) == 1 else sorted(set(sizes))
                return self._required_arg(
                    plan,
                    site,
                    f"{what} (axis {axis}, traced {traced}, matches: {', '.join(matched) or 'no config value'})",
                    node,
                    arg,
                    shape=True,
                )
        expr = f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
        shown = shapes[0] if len(shapes) == 1 else shapes
        self.ctx.report(SHAPE_001, node, f"{what} = {expr} (traced {shown}; axes not read are 1)")
        return expr


#: What the dataflow says of a value one test chooses between two others: the trace saw one side only.
_BRANCHED = frozenset(
    {"conditional expression", "differs between branches", "different objects on different paths"}
)


def _branched(feat: Feat) -> bool:
    """The value depends on which way a branch went (also one on a test of the config,
    :data:`~.tuple_flow.ONE_SIDE`, which alone rules out a config field equal to the traced size): the
    trace saw one side, so an input leaf it equals is no evidence of the other side."""
    return feat.reason in _BRANCHED or feat.reason.endswith(ONE_SIDE)


# attributes, string keys and int indices (jax's keystr of NamedTuple fields, dicts, lists): an
# expression on the argument; other key kinds (a custom pytree's flat index) are no attribute path
_PLAIN_ACCESSOR = re.compile(r"(\.[A-Za-z_]\w*|\['[A-Za-z_]\w*'\]|\[\d+\])*")
