"""``**kwargs`` of a built-in layer whose keys a method spells out: ``nn.Dense(d, **inits)``.

Real Linen code gathers the initialisers it passes to several layers in a local dict
(``inits = dict(kernel_init=..., bias_init=...)``) or picks them by a flag
(``kw = {"kernel_init": zeros} if self.zero_init else {}``) and unpacks it into each constructor.
NNX receives such a keyword unchanged when it takes the argument under the same name and the layer
rewrite treats it as it is; the unpacking can then stay as it is. Everything else about the dict must
be known: the name is bound once in the method, to a dict display with string-literal keys, a
``dict(key=...)`` call or a conditional of those, and is read nowhere but in ``**`` unpackings: nothing
else can add a key (``__init__`` replays that one binding, so a later ``kw["k"] = v`` would be lost).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from linen2nnx.layers import LayerRule, nnx_ctor_params
from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import assigned_names, names_in
from linen2nnx.migrate.function_factories import LINEN_ONLY_ARGS
from linen2nnx.migrate.sites import Site


def spelled_out(fn: cst.FunctionDef | None, site: Site) -> bool:
    """Whether every unpacking of the built-in layer ``site`` builds in ``fn`` is a ``**name`` of a local
    dict whose keys ``fn`` spells out and the NNX layer takes as they are."""
    assert site.rule is not None
    if fn is None:
        return False
    for arg in site.ctor.args:
        if arg.star == "*" or (arg.star == "**" and not isinstance(arg.value, cst.Name)):
            return False
        if arg.star == "**":
            keys = unpacked_keys(fn, arg.value.value)
            if keys is None or not passes_unchanged(site.rule, keys):
                return False
    return True


# what a dict may carry: arguments no part of the codemod reads (sizes, strides, an output width and the
# like feed the dataflow, which sees only arguments written out), only initialisers and number formats
INERT = frozenset({"dtype", "param_dtype", "precision", "use_bias", "use_scale", "epsilon", "dot_general"})


def passes_unchanged(rule: LayerRule, keys: set[str]) -> bool:
    """Whether every key is a keyword argument the NNX layer takes under its Linen name, that the
    layer rewrite neither moves, drops, checks, renames nor adds itself, and that no size the codemod
    works out depends on (an initialiser or a number format: see :data:`INERT`)."""
    special = (
        rule.unsupported_args
        | rule.call_args
        | frozenset(rule.only_values)
        | frozenset(rule.dropped_when)
        | frozenset(rule.extra_kwargs)
        | frozenset(rule.positional)
        | LINEN_ONLY_ARGS
    )
    accepted = nnx_ctor_params(rule.nnx)
    return all(
        (k.endswith("_init") or k in INERT)
        and k in rule.linen_arg_order()
        and k not in special
        and rule.nnx_arg(k) == k
        and k in accepted
        for k in keys
    )


def unpacked_keys(fn: cst.FunctionDef, name: str) -> set[str] | None:
    """Every key the local dict ``name`` of ``fn`` may hold at a ``**name`` unpacking (see the module
    docstring); None when that cannot be known."""
    keys: set[str] = set()
    bound = False
    for node, parent in _walk(fn.body, None):
        if isinstance(node, cst.Assign) and any(_is(t.target, name) for t in node.targets):
            found = _display_keys(node.value) if len(node.targets) == 1 and not bound else None
            if found is None or names_in(node.value) & (_locals_of(fn) - {"self"}):
                return None  # unknown keys, or values of the call (x.dtype) that __init__ cannot replay
            keys, bound = found, True
        elif isinstance(node, cst.Name) and node.value == name:
            if isinstance(parent, cst.AssignTarget):
                continue  # the binding, checked above
            if isinstance(parent, cst.Arg) and parent.star == "**":
                continue
            return None
        elif isinstance(node, (cst.FunctionDef, cst.Lambda, cst.Global, cst.Nonlocal)) and _mentions(
            node, name
        ):
            return None
    return keys if bound else None


def _display_keys(value: cst.BaseExpression) -> set[str] | None:
    if isinstance(value, cst.IfExp):
        body, orelse = _display_keys(value.body), _display_keys(value.orelse)
        return None if body is None or orelse is None else body | orelse
    if isinstance(value, cst.Dict):
        keys = set()
        for element in value.elements:
            if not (isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)):
                return None
            keys.add(str(element.key.evaluated_value))
        return keys
    if isinstance(value, cst.Call) and _is(value.func, "dict"):
        if any(a.keyword is None or a.star for a in value.args):
            return None
        return {a.keyword.value for a in value.args if a.keyword is not None}
    return None


def _locals_of(fn: cst.FunctionDef) -> set[str]:
    """The method's parameters and the names it binds: what a value read in ``__init__`` cannot see."""
    params = fn.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in every} | set(assigned_names(fn))


def _is(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return any(_is(n, name) for n, _ in _walk(node, None))


def _walk(node: cst.CSTNode, parent: cst.CSTNode | None) -> Iterator[tuple[cst.CSTNode, cst.CSTNode | None]]:
    """Every node under ``node`` with its parent."""
    yield node, parent
    for child in syntax_children(node):
        yield from _walk(child, node)
