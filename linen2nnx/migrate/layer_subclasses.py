"""A subclass of a built-in layer that overrides ``param`` to transform a parameter it reads.

big_vision's weight-standardised convolution::

    class StdConv(nn.Conv):
      def param(self, name, *a, **kw):
        param = super().param(name, *a, **kw)
        if name == "kernel":
          param = weight_standardize(param, axis=[0, 1, 2], eps=1e-5)
        return param

A Linen layer creates and reads each parameter through ``self.param``: the override hands the
transformed value to the layer's computation while the stored parameter stays the raw one. An NNX layer
reads its parameters as attributes (``self.kernel[...]``), so the NNX class runs its base's
``__call__`` on a clone of itself whose parameter holds the transformed value::

    class StdConv(nnx.Conv):
      def __call__(self, *args, **kwargs):
        layer = nnx.clone(self)
        param = self.kernel[...]
        param = weight_standardize(param, axis=[0, 1, 2], eps=1e-5)
        layer.kernel[...] = param
        return nnx.Conv.__call__(layer, *args, **kwargs)

The stored parameters are the base layer's (its call sites, the name map and the converter treat the
class as its base, built under its own name), and the base computes with the transformed value at the
point Linen's does (before a mask or a dtype promotion): the same numbers. Only that exact form
qualifies -- one base of :data:`TRANSFORMED`, a class body of nothing but the override, the override
being ``super().param(...)`` followed by ``if name == "<parameter>":`` blocks that only rebind the
result from values that are not Linen -- anything else stays as it was, with its findings. A subclass
of such a class is not one (Linen applies its parent's override too); it and any place the rewrite does
not reach that names a converted class get a finding (:mod:`~linen2nnx.migrate.layer_subclass_uses`).
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.cst_utils import code, is_docstring, names_in, parse_statement

TRANSFORMED = {"Dense": ("kernel", "bias"), "Conv": ("kernel", "bias"), "ConvTranspose": ("kernel", "bias")}
"""Built-in layers whose parameters an override may transform, and those parameters' names (the same
attribute names in NNX)."""


@dataclasses.dataclass(frozen=True)
class LayerSubclass:
    """A recognised subclass: its layer rule (built under the subclass's name) and the transforms."""

    rule: LayerRule
    result: str  # the override's local holding the parameter (``param``)
    transforms: tuple[tuple[str, tuple[cst.BaseSmallStatement, ...]], ...]  # (parameter, statements)


def layer_subclass(cls: cst.ClassDef, base_rule: LayerRule | None, is_linen: object) -> LayerSubclass | None:
    """``cls`` as a :class:`LayerSubclass` when it has exactly the form of the module docstring;
    ``is_linen(node)`` says whether a name in the transform stands for Linen (then it does not qualify)."""
    if base_rule is None or base_rule.linen not in TRANSFORMED or cls.decorators or len(cls.bases) != 1:
        return None
    if cls.keywords or not isinstance(cls.body, cst.IndentedBlock):
        return None
    body = [s for s in cls.body.body if not is_docstring(s)]
    if len(body) != 1 or not isinstance(body[0], cst.FunctionDef) or body[0].name.value != "param":
        return None
    found = _override(body[0], TRANSFORMED[base_rule.linen])
    if found is None or any(is_linen(n) for _, stmts in found[1] for s in stmts for n in _names(s)):
        return None
    return LayerSubclass(
        dataclasses.replace(base_rule, callee=cls.name.value, subclass=cls.name.value), found[0], found[1]
    )


def _override(fn: cst.FunctionDef, params: tuple[str, ...]) -> tuple[str, tuple] | None:
    """(result local, transforms) of ``def param(self, name, *a, **kw)`` of the exact form (or with
    named arguments that it forwards in the same order: ``def param(self, name, init_fn,
    *init_args)``, as the Vision Transformer's ResNet writes it); else None."""
    p = fn.params
    if (
        fn.decorators
        or fn.asynchronous
        or len(p.params) < 2
        or p.posonly_params
        or p.kwonly_params
        or isinstance(p.star_arg, cst.ParamStar)
        or any(q.default is not None for q in p.params)
        or not isinstance(fn.body, cst.IndentedBlock)
    ):
        return None
    name = p.params[1].name.value
    forwarded = [q.name.value for q in p.params[1:]]
    if isinstance(p.star_arg, cst.Param):
        forwarded.append(f"*{p.star_arg.name.value}")
    if isinstance(p.star_kwarg, cst.Param):
        forwarded.append(f"**{p.star_kwarg.name.value}")
    own = {f.lstrip("*") for f in forwarded} | {"self"}
    stmts = [s for s in fn.body.body if not is_docstring(s)]
    if len(stmts) < 2:
        return None
    first, last = code(stmts[0]).strip(), code(stmts[-1]).strip()
    result = first.split("=", 1)[0].strip()
    if not result.isidentifier() or first != f"{result} = super().param({', '.join(forwarded)})":
        return None
    if last != f"return {result}":
        return None
    transforms = []
    for stmt in stmts[1:-1]:
        found = _transform(stmt, name, result, params)
        if found is None or any(names_in(s) & own for s in found[1]):
            return None
        if any(found[0] == done for done, _ in transforms):
            return None
        transforms.append(found)
    return (result, tuple(transforms)) if transforms else None


def _transform(stmt: cst.BaseStatement, name: str, result: str, params: tuple[str, ...]) -> tuple | None:
    """``if name == "kernel": param = f(param)`` -> ``("kernel", (param = f(param),))``; else None."""
    if (
        not isinstance(stmt, cst.If)
        or stmt.orelse is not None
        or not isinstance(stmt.body, cst.IndentedBlock)
    ):
        return None
    test = code(stmt.test).strip()
    wanted = next((p for p in params if test in (f'{name} == "{p}"', f"{name} == '{p}'")), None)
    if wanted is None:
        return None
    smalls: list[cst.BaseSmallStatement] = []
    for line in stmt.body.body:
        if not isinstance(line, cst.SimpleStatementLine):
            return None
        for small in line.body:
            target = (
                small.targets[0].target
                if isinstance(small, cst.Assign) and len(small.targets) == 1
                else small.target
                if isinstance(small, cst.AugAssign)
                else None
            )
            if not (isinstance(target, cst.Name) and target.value == result):
                return None
            smalls.append(small)
    return wanted, tuple(smalls)


def _names(small: cst.BaseSmallStatement) -> list[cst.BaseExpression]:
    """The name and attribute-chain nodes of a statement (for the Linen check)."""
    found: list[cst.BaseExpression] = []

    class V(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            found.append(node)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

    small.visit(V())
    return found


def nnx_layer_subclass(cls: cst.ClassDef, sub: LayerSubclass) -> cst.ClassDef:
    """The NNX class of a recognised subclass (see the module docstring)."""
    rule, result = sub.rule, sub.result
    used = {n for _, stmts in sub.transforms for s in stmts for n in names_in(s)} | {result}
    # the method's own names must not shadow one the transform reads (a module-level `args`)
    clone, args, kwargs = (_fresh(n, used) for n in ("layer", "args", "kwargs"))
    lines = [
        f"def __call__(self, *{args}, **{kwargs}):\n",
        f"    # Linen's `param` override: nnx.{rule.nnx} computes with the values it returned\n",
        f"    {clone} = nnx.clone(self)\n",
    ]
    for param, stmts in sub.transforms:
        inner = "    "
        if param != "kernel":  # a layer built without it (use_bias=False) never reads it
            lines.append(f"    if self.{param} is not None:\n")
            inner = "        "
        lines.append(f"{inner}{result} = self.{param}[...]\n")
        lines += [f"{inner}{code(s).strip().rstrip(';')}\n" for s in stmts]
        lines.append(f"{inner}{clone}.{param}[...] = {result}\n")
    lines.append(f"    return nnx.{rule.nnx}.__call__({clone}, *{args}, **{kwargs})\n")
    method = parse_statement("".join(lines))
    assert isinstance(cls.body, cst.IndentedBlock)
    body = [s for s in cls.body.body if is_docstring(s)]
    if body:
        method = method.with_changes(leading_lines=[cst.EmptyLine(indent=False)])  # type: ignore[call-arg]
    base = cls.bases[0].with_changes(value=cst.parse_expression(f"nnx.{rule.nnx}"))
    return cls.with_changes(bases=[base], body=cls.body.with_changes(body=[*body, method]))


def _fresh(name: str, used: set[str]) -> str:
    """``name``, with underscores appended until no name in ``used`` is the same; then taken."""
    while name in used:
        name += "_"
    used.add(name)
    return name
