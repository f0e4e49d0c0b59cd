"""What the verifier knows about names: which flax names are Linen or NNX classes, which flax.linen
functions are pure (fine in NNX code), and the constructor signatures of the run's NNX classes.

Kept apart from the walk (``verify.py``) because these are facts, decided by explicit tables and by
flax itself, not by the shape of the code being checked.
"""

from __future__ import annotations

import dataclasses
import inspect
from functools import cache
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import callee_name, code, root_name
from linen2nnx.migrate.linen_api import KEPT_LINEN_FUNCTIONS, equivalent_in_nnx, same_in_nnx
from linen2nnx.migrate.sites import ClassSummary, one_line

LINEN_TREE_PLACE = frozenset({"name", "parent", "path"})
"""The Linen module's name and place in its tree: an NNX module has neither (a hand-written NNX class
may define them itself, so only the classes the run converted are checked for them)."""

LINEN_SELF_ONLY = frozenset(
    {
        "param",
        "variable",
        "scope",
        "make_rng",
        "put_variable",
        "get_variable",
        "has_variable",
        "has_rng",
        "is_initializing",
        "is_mutable_collection",
        *LINEN_TREE_PLACE,
    }
)
"""``self.<name>`` Linen Module API with no NNX meaning (``sow`` and ``perturb`` exist in NNX too)."""

VARIABLE_METHODS = frozenset({"apply", "init", "init_with_output"})
"""``<module>.<name>(...)``: Linen's functional entry points; an NNX module is called directly."""


@cache
def _flax_object(qualname: str) -> Any:
    """The object ``flax.linen.<...>`` / ``flax.nnx.<...>`` names, or None."""
    import importlib

    for root in ("flax.linen", "flax.nnx"):
        if qualname == root or qualname.startswith(root + "."):
            obj: Any = importlib.import_module(root)
            for part in qualname[len(root) + 1 :].split(".") if qualname != root else ():
                obj = getattr(obj, part, None)
                if obj is None:
                    return None
            return obj
    return None


@cache
def flax_class_kind(qualname: str) -> str | None:
    """``"linen"`` for a flax.linen Module class, ``"nnx"`` for a flax.nnx one, else None."""
    obj = _flax_object(qualname)
    if not inspect.isclass(obj):
        return None
    import flax.linen as nn
    from flax import nnx

    if issubclass(obj, nn.Module):
        return "linen"
    if issubclass(obj, nnx.Module):
        return "nnx"
    return None


def impure_linen_name(names: Any, func: cst.BaseExpression) -> str | None:
    """The ``flax.linen`` name ``func`` spells when it is neither a pure function nor a class (judged
    elsewhere); None for anything else, a method of a call's result included
    (``nn.make_causal_mask(m).squeeze``, which the resolver reads through the call)."""
    if root_name(func) is None:
        return None
    return next(
        (
            q
            for q in names.qualnames(func)
            if q.startswith("flax.linen.") and flax_class_kind(q) is None and not is_pure_linen(q)
        ),
        None,
    )


@cache
def is_pure_linen(qualname: str) -> bool:
    """True for a flax.linen function that is fine in NNX code: shared with flax.nnx (the very object),
    an equivalent or kept function of :mod:`linen_api` (its ``KEPT_LINEN_FUNCTIONS``: one table for both passes)."""
    local = qualname.removeprefix("flax.linen.")
    last = local.rsplit(".", 1)[-1]
    for name in dict.fromkeys((local, last)):
        if name != local and _flax_object(f"flax.linen.{name}") is not _flax_object(qualname):
            continue  # `flax.linen.x.f` is `flax.linen.f` only when they are the same object
        if same_in_nnx(name) or equivalent_in_nnx(name) or name in KEPT_LINEN_FUNCTIONS:
            return True
    return False


@dataclasses.dataclass(frozen=True)
class Signature:
    """What a constructor accepts: enough to tell a call that misses an argument or passes a Linen one."""

    positional: tuple[str, ...]  # positional-or-keyword parameters, in order
    required: frozenset[str]  # parameters without a default
    keywords: frozenset[str]  # every name a keyword argument may use
    var_positional: bool = False
    var_keyword: bool = False
    linen_only: frozenset[str] = frozenset()  # keywords that are wrong even where **kwargs takes anything

    @classmethod
    def of_summary(cls, summary: ClassSummary) -> Signature:
        """A class another file of the run migrated: converted or bridged, its NNX constructor takes
        neither ``name`` nor ``parent`` and requires ``rngs``; a converted one also requires the size
        arguments it gained (keyword-only; all but those needed only under a config test, and those of
        an input that may be None, which default to None). Its fields are not checked here."""
        fields = {f.name for f in summary.fields}
        linen_only = frozenset({"name", "parent"} - fields)
        optional = summary.optional_inputs  # the size of an input that may be None defaults to None too
        sizes = (
            ()
            if summary.kept_linen
            else (a for a, how in summary.new_args.items() if how != "unresolved_if" and a not in optional)
        )
        return cls((), frozenset({"rngs", *sizes}) - fields, frozenset(), True, True, linen_only)

    def problem(self, call: cst.Call) -> str:
        """What is wrong with ``call`` (empty when nothing is known to be)."""
        keywords = [a.keyword.value for a in call.args if a.keyword is not None]
        if any(a.star == "**" for a in call.args):  # the mapping may hold anything; a Linen name= stays wrong
            linen = self.linen_only | (
                frozenset() if self.var_keyword else {"name", "parent"} - self.keywords
            )
            wrong = [k for k in keywords if k in linen]
            return (
                f"passes {', '.join(f'{k}=' for k in wrong)}, which its __init__ does not take"
                if wrong
                else ""
            )
        positional = [a for a in call.args if a.keyword is None]
        problems = []
        wrong = [
            k for k in keywords if k in self.linen_only or (not self.var_keyword and k not in self.keywords)
        ]
        if wrong:
            problems.append(f"passes {', '.join(f'{k}=' for k in wrong)}, which its __init__ does not take")
        if not any(a.star == "*" for a in positional):
            if not self.var_positional and len(positional) > len(self.positional):
                problems.append(
                    f"passes {len(positional)} positional arguments, its __init__ takes "
                    f"{len(self.positional)}"
                )
            given = {*self.positional[: len(positional)], *keywords}
            missing = sorted(self.required - given, key=self._order)
            if missing:
                problems.append(f"misses {', '.join(missing)}, which its __init__ requires")
        return "; ".join(problems)

    def _order(self, name: str) -> tuple[int, str]:
        return (self.positional.index(name) if name in self.positional else len(self.positional), name)


def signature_of(cls: cst.ClassDef) -> Signature | None:
    """The signature of ``cls.__init__`` (without ``self``); None when the class defines none."""
    init = next(
        (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None
    )
    if init is None or init.decorators:
        return None
    params = init.params
    positional = [p for p in [*params.posonly_params, *params.params]][1:]  # less self
    required = {p.name.value for p in [*positional, *params.kwonly_params] if p.default is None}
    keyword_names = [p.name.value for p in [*params.params, *params.kwonly_params]]
    return Signature(
        positional=tuple(p.name.value for p in positional),
        required=frozenset(required),
        keywords=frozenset(keyword_names) - {"self"},
        var_positional=isinstance(params.star_arg, cst.Param),
        var_keyword=params.star_kwarg is not None,
    )


NOT_MODULE_PREFIXES = ("jax.", "numpy.", "flax.nnx.", "builtins.", "collections.", "typing.", "dataclasses.")
"""Where a capitalised callee is known not to be a Linen module (``jax.ShapeDtypeStruct(..., name=)``)."""


def looks_like_linen_module(call: cst.Call, qualnames: set[str]) -> bool:
    """A capitalised callee nothing resolves, given ``name=`` and no ``rngs=``: how a Linen submodule is
    built (``importlib.import_module(path).Model(**cfg, name="llm")``), never an NNX one."""
    last = callee_name(call)
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    return (
        last[:1].isupper()
        and "name" in keywords
        and "rngs" not in keywords
        and not any(q.startswith(NOT_MODULE_PREFIXES) for q in qualnames)
    )


def applied_linen_module(call: cst.Call, qualnames: set[str]) -> bool:
    """A call given ``name=`` and no ``rngs=`` whose result is applied at once, from a callee nothing
    resolves to a known non-module (a factory function of another package, a method returning a class:
    ``linears.dense_general(..., name="logits")(y)``): how a Linen compact method builds and runs a
    submodule, never how an NNX one is built. The caller knows the result is applied."""
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    return (
        "name" in keywords
        and "rngs" not in keywords
        and not any(q.startswith((*NOT_MODULE_PREFIXES, "functools.")) for q in qualnames)
    )


def star_imports(module: cst.Module) -> list[str]:
    """The modules ``module`` star-imports at its top level (``from .layers import *`` -> ``.layers``)."""
    return [
        "." * len(s.relative) + (code(s.module) if s.module is not None else "")
        for line in module.body
        if isinstance(line, cst.SimpleStatementLine)
        for s in line.body
        if isinstance(s, cst.ImportFrom) and isinstance(s.names, cst.ImportStar)
    ]


def unresolved_build(call: cst.Call, qualnames: set[str], *, applied: bool, stars: list[str]) -> str | None:
    """How a call nothing resolves builds a module as Linen does, for the finding: by a capitalised name
    with ``name=`` and no ``rngs``, built with ``name=`` and applied at once (``applied``: the method
    calls its result, ``factory(..., name="x")(y)``, a compact method's idiom), or Linen's
    ``Module.clone`` / ``copy``; or a capitalised bare name that one of the file's star imports
    (``stars``) may bind, built without ``rngs`` (its class is unknown here: a Linen module, or a class
    of the run whose NNX ``__init__`` requires them); None when it does not."""
    from linen2nnx.migrate.verify_syntax import linen_module_copy

    shown = one_line(code(call.func))
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    if (
        stars
        and type(call.func) is cst.Name
        and not qualnames
        and shown[:1].isupper()
        and "rngs" not in keywords
        and not any(a.star == "**" for a in call.args)
    ):
        imports = ", ".join(f"from {m} import *" for m in stars)
        return f"{shown}(...) names a class that `{imports}` may bind, built without rngs,"
    if looks_like_linen_module(call, qualnames):
        return f"{shown}(...) takes name= and no rngs, as a Linen module does,"
    if applied and applied_linen_module(call, qualnames):
        return f"{shown}(..., name=...) builds a module with name= and no rngs that this method applies, as a Linen compact method does,"
    if linen_module_copy(call):
        return f"{shown}(..., name=...) is Linen's Module.{call.func.attr.value} (an NNX module has none)"  # type: ignore[attr-defined]
    return None
