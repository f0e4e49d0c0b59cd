"""Linen's init-call cache protocol at an NNX call site (see ``LayerRule.init_call_cache``).

Linen creates an attention layer's decode cache on the init call, a call that does not decode; NNX needs
``init_cache(shape, dtype)`` first. The call site does that on the first call and runs it without
decoding, so every later call sees Linen's cache::

    attn_fresh_cache = decode and self.attn.cached_key is None  # Linen creates the cache on the init call
    if attn_fresh_cache:
        self.attn.init_cache(x.shape, dtype=...)                # the key's shape and dtype, as Linen's
    y = self.attn(x, ..., decode=decode and not attn_fresh_cache)

The shape is read from the keys' input as the NNX call receives it (its arguments already renamed:
``SelfAttention(x, mask)``'s second positional is the mask, not the keys). An input that is not a plain
name or attribute (``self.attn(self.pos(x))``, a position embedding with its own decode cache) is
evaluated once, where the call evaluated it: bound by ``:=`` in the call, and the cache created in the
``decode=`` argument, after it (``decode and not (fresh and self.attn.init_cache(...) is None)``,
``init_cache`` returning None). Inputs the call hands through ``*args`` / ``**kwargs`` are a finding.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import code, kwarg, parse_expression
from linen2nnx.migrate.rules import LAYER_001, LAYER_002
from linen2nnx.migrate.sites import Site

#: Names of dtypes: a constructor's ``dtype=jnp.bfloat16`` is one; ``dtype=self.dtype`` may be None.
_DTYPE_NAMES = frozenset(
    {"bfloat16", "float16", "float32", "float64", "half", "single", "double", "complex64", "complex128"}
)


def init_call_cache(
    ctx: FileContext, site: Site, original: cst.Call, args: list[cst.Arg], flag: str, dtypes: tuple[str, str]
) -> list[cst.Arg]:
    """``args`` (the NNX call's, renamed) with the protocol's ``decode=`` added, its prefix queued before
    the statement of ``original``; ``dtypes``: the constructor's ``dtype`` and ``param_dtype`` source
    (``None`` where not given). Unchanged, with a finding, where the keys' input is not visible."""
    assert site.rule is not None
    at = _keys_input(args)
    if at is None:
        ctx.report(
            LAYER_002,
            original,
            f"nn.{site.rule.linen}(decode=...) applied through *args / **kwargs: the inputs that size "
            "its decode cache (NNX's init_cache(shape, dtype)) are not visible",
            "pass the attention's inputs by position or keyword",
        )
        return args
    flag = flag if _plain(parse_expression(flag)) else f"({flag})"
    fresh = f"{site.attr}_fresh_cache"
    value = args[at].value
    inline = not _plain(value)
    shape_of = f"{site.attr}_inputs" if inline else code(value)
    create = f"self.{site.attr}.init_cache({shape_of}.shape, dtype={_dtype_source(ctx, shape_of, *dtypes)})"
    lines = (
        f"{fresh} = {flag} and self.{site.attr}.cached_key is None  # Linen creates the cache on the init "
        "call, which does not decode\n"
    )
    if inline:  # the input evaluated once, where the call evaluates it
        named = cst.NamedExpr(cst.Name(shape_of), value, lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        args = [*args[:at], args[at].with_changes(value=named), *args[at + 1 :]]
        decode = f"{flag} and not ({fresh} and {create} is None)"
    else:
        lines += f"if {fresh}:\n    {create}\n"
        decode = f"{flag} and not {fresh}"
    statement = ctx.enclosing_statement(original)
    ctx.state.stmt_prefix.setdefault(statement, []).extend(cst.parse_module(lines).body)
    ctx.report(
        LAYER_001,
        original,
        f"nn.{site.rule.linen}(decode={flag}): the first decode call creates "
        f"the cache with self.{site.attr}.init_cache and does not decode, as Linen's init call",
    )
    return [*args, kwarg("decode", parse_expression(decode))]


def _keys_input(args: list[cst.Arg]) -> int | None:
    """Index in ``args`` of the input Linen's keys are projected from: ``inputs_k`` (Linen's ``inputs_kv``
    renamed), else the queries; None where ``*args`` / ``**kwargs`` may hold it."""
    if any(a.star for a in args):
        return None
    keyed = {a.keyword.value: i for i, a in enumerate(args) if a.keyword is not None}
    positional = [i for i, a in enumerate(args) if a.keyword is None]
    if "inputs_k" in keyed:
        return keyed["inputs_k"]
    if len(positional) > 1:
        return positional[1]
    return positional[0] if positional else keyed.get("inputs_q")


def _plain(node: cst.BaseExpression) -> bool:
    """A name or an attribute of one (``x``, ``self.x``): reading it again gives the same value."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name) and not node.lpar


def _dtype_source(ctx: FileContext, shape_of: str, dtype: str, param_dtype: str) -> str:
    """Linen's key dtype: the constructor's ``dtype``, else (None) the promotion of the input and the
    ``param_dtype`` (float32 unless given), as its projection's ``promote_dtype``."""
    promoted = (
        f"jax.numpy.promote_types({shape_of}.dtype, "
        f"{param_dtype if param_dtype != 'None' else 'jax.numpy.float32'})"
    )
    node = parse_expression(dtype)
    if isinstance(node, cst.SimpleString) or (
        isinstance(node, cst.Attribute | cst.Name)
        and (node.attr if isinstance(node, cst.Attribute) else node).value in _DTYPE_NAMES
    ):
        return dtype
    ctx.state.needs_jax_import = True
    if dtype == "None":
        return promoted
    return f"{dtype} if {dtype} is not None else {promoted}"  # `dtype=self.dtype` may hold None
