"""Layer factory functions at module level: ``def linear(features, params): ... return nn.Dense(...)``.

Real Linen code wraps built-in layers in small module-level functions that choose initialisers or
pretrained weights, and calls them inside ``@nn.compact``: ``x = ops.linear(3 * d, get(p, 'c_proj'))(x)``.
Linen names the module such a function builds after its class, in the *caller's* scope (``Dense_0``).
An NNX layer also needs its input size and ``rngs``, so the codemod

- rewrites the function: every ``return nn.Dense(...)`` becomes ``return nnx.Linear(in_features, ...,
  rngs=rngs)`` and the function gains the keyword-only parameters ``in_features`` and ``rngs``;
- turns each call site into a submodule that ``__init__`` builds through the function
  (``self.dense_0 = ops.linear(3 * d, ..., in_features=..., rngs=rngs)``), sized and named as the layer
  would be if it were written there.

A function is such a factory only when every ``return`` builds the same kind of built-in layer, with
the same output size and only arguments the NNX layer takes as they are; anything else is left as it
is, and the verifier reports the calls an NNX class makes to it. The facts are text, not trees, so
that the files of a run that import the function learn of it as they learn of its classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import libcst as cst

from linen2nnx.layers import LayerRule, layer_rule
from linen2nnx.migrate.cst_meta import returned_values, syntax_children
from linen2nnx.migrate.cst_utils import bind_args, code, parse_expression
from linen2nnx.migrate.factories import substitute

LINEN_ONLY_ARGS = frozenset({"name", "parent"})


@dataclasses.dataclass(frozen=True)
class FunctionFactory:
    """A module-level function that builds one kind of built-in layer (see the module docstring)."""

    key: str  # absolute dotted name: pkg.ops.linear
    name: str  # the function's own name
    layer: str  # flax.linen qualified name of the layer it builds
    params: tuple[str, ...]
    defaults: tuple[tuple[str, str], ...]  # parameter -> its default's source
    ctor: str  # the first `return`'s constructor: what a call site is sized and named by

    @property
    def rule(self) -> LayerRule:
        rule = layer_rule(self.layer)
        assert rule is not None
        return rule

    def merged(self, call: cst.Call, ctor: cst.Call | None = None) -> cst.Call | None:
        """The constructor ``call`` stands for: the first ``return``'s, parameters replaced by the call's
        arguments (defaults filled in); None when the arguments do not bind."""
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in call.args) or len(positional) > len(self.params):
            return None
        values = {param: code(arg.value) for param, arg in zip(self.params, positional)}
        for arg in call.args:
            if arg.keyword is not None:
                if arg.keyword.value not in self.params or arg.keyword.value in values:
                    return None
                values[arg.keyword.value] = code(arg.value)
        defaults = dict(self.defaults)
        for param in self.params:
            if param not in values:
                if param not in defaults:
                    return None
                values[param] = defaults[param]
        merged = substitute(parse_expression(self.ctor), values)
        return merged if isinstance(merged, cst.Call) else None


def find_function_factory(
    fn: cst.FunctionDef, key: str, rule_of: Callable[[cst.BaseExpression], LayerRule | None]
) -> tuple[FunctionFactory, list[cst.Call]] | None:
    """``fn`` as a factory, with the constructors its ``return``s build; None when it is not one."""
    params = fn.params
    if fn.decorators or params.star_kwarg is not None or isinstance(params.star_arg, cst.Param):
        return None
    plain = [*params.posonly_params, *params.params, *params.kwonly_params]
    names = [p.name.value for p in plain]
    returns = returned_values(fn.body)
    if not returns or any(not isinstance(r, cst.Call) for r in returns):
        return None
    ctors: list[cst.Call] = returns  # type: ignore[assignment]
    rules = [rule_of(c.func) for c in ctors]
    rule = rules[0]
    if rule is None or any(r is not rule for r in rules) or not _plain_rule(rule):
        return None
    if {"rngs", rule.in_arg} & set(names) or names[:1] == ["self"]:
        return None
    outs = set()
    for ctor in ctors:
        given = _given_args(fn, ctor, rule)
        if given is None or not given <= set(rule.linen_arg_order()) or given & _converted_args(rule):
            return None
        bound, _ = bind_args(rule.linen_arg_order(), ctor)
        outs.add(code(bound[rule.out_arg].value) if rule.out_arg and rule.out_arg in bound else "")
    if len(outs) != 1:
        return None  # the returns build layers of different widths: a call site cannot be sized
    factory = FunctionFactory(
        key=key,
        name=fn.name.value,
        layer=rule.linen_qualname,
        params=tuple(names),
        defaults=tuple((p.name.value, code(p.default)) for p in plain if p.default is not None),
        ctor=code(ctors[0]),
    )
    return factory, ctors


def with_factory_params(fn: cst.FunctionDef, rule: LayerRule) -> cst.FunctionDef:
    """``fn`` with the keyword-only parameters its NNX layer needs: the input size, then ``rngs``."""
    params = fn.params
    added = [cst.Param(cst.Name(rule.in_arg), cst.Annotation(cst.Name("int")))] if rule.in_arg else []
    added.append(cst.Param(cst.Name("rngs"), cst.Annotation(parse_expression("nnx.Rngs"))))
    star = params.star_arg if isinstance(params.star_arg, cst.ParamStar) else cst.ParamStar()
    kwonly = [p.with_changes(comma=cst.MaybeSentinel.DEFAULT) for p in params.kwonly_params]
    plain = [p.with_changes(comma=cst.MaybeSentinel.DEFAULT) for p in params.params]
    return fn.with_changes(
        params=params.with_changes(params=plain, star_arg=star, kwonly_params=[*kwonly, *added])
    )


def _plain_rule(rule: LayerRule) -> bool:
    """A layer whose NNX constructor is the Linen one plus the input size and rngs (nothing nested,
    nothing moved to call time, nothing Linen creates on the init call)."""
    return not (
        rule.manual_reason
        or rule.nested
        or rule.varargs_list
        or rule.carry_init
        or rule.init_call_cache
        or rule.linen == "Einsum"
    )


def _converted_args(rule: LayerRule) -> frozenset[str]:
    """Linen arguments the layer rewrite treats specially (moved, dropped, checked, refused)."""
    return (
        rule.unsupported_args
        | rule.call_args
        | frozenset(rule.only_values)
        | frozenset(rule.dropped_when)
        | LINEN_ONLY_ARGS
    )


def _given_args(fn: cst.FunctionDef, ctor: cst.Call, rule: LayerRule) -> set[str] | None:
    """The Linen arguments ``ctor`` passes: its own, and the literal keys of a local dict it unpacks
    (``kwargs = {'epsilon': eps}; kwargs['bias_init'] = ...; nn.LayerNorm(**kwargs)``); None when
    they cannot be known."""
    order = rule.linen_arg_order()
    given: set[str] = set()
    positional = 0
    for arg in ctor.args:
        if arg.star == "*":
            return None
        if arg.star == "**":
            keys = _dict_keys(fn, arg.value)
            if keys is None:
                return None
            given |= keys
        elif arg.keyword is not None:
            given.add(arg.keyword.value)
        else:
            if positional >= len(order):
                return None
            given.add(order[positional])
            positional += 1
    return given


def _dict_keys(fn: cst.FunctionDef, value: cst.BaseExpression) -> set[str] | None:
    """Every key a local dict may hold, when it is built from a dict display and subscript
    assignments with string-literal keys only, and is used nowhere else."""
    if not isinstance(value, cst.Name):
        return None
    keys: set[str] = set()
    uses = 0
    for node in _walk(fn.body):
        if isinstance(node, cst.Assign) and any(
            isinstance(t.target, cst.Name) and t.target.value == value.value for t in node.targets
        ):
            if len(node.targets) != 1 or not isinstance(node.value, cst.Dict):
                return None
            for element in node.value.elements:
                if not (isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)):
                    return None
                keys.add(str(element.key.evaluated_value))
            uses -= 1  # the target Name is counted below
        elif isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name):
            if node.value.value == value.value:
                index = node.slice[0].slice if len(node.slice) == 1 else None
                if not (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)):
                    return None
                keys.add(str(index.value.evaluated_value))
                uses -= 1
        elif isinstance(node, cst.Name) and node.value == value.value:
            uses += 1
    return keys if uses == 1 else None  # the one use left is the `**` unpacking


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in syntax_children(node):
        yield from _walk(child)
