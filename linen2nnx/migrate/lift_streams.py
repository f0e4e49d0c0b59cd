"""The RNG streams of a lifted transform whose keys NNX draws otherwise than Linen (L2N-XFORM-004).

Part of the *analyse* step, beside :mod:`~linen2nnx.migrate.lifted`: a stack that leaves a stream unsplit
(Linen gives every layer the same key, NNX's stack each its own), and a shared layer's scan or vmap
(NNX hands the one layer, its RNG state included, to every step or element). Converted weights do not
depend on it, so the finding is ``unsafe``, not ``manual``.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.lifted import Lift, LiftChain, literal_dict, param_axis


def unsplit_streams(lift: Lift, block: Any) -> list[str]:
    """The RNG streams a stack (an ``nn.scan`` / ``nn.vmap`` that stacks params) leaves unsplit: those
    ``split_rngs`` sets False, and ``dropout`` when it is not listed and the stacked class (``block``,
    its plan, when of the run) builds a Dropout. Linen gives every layer the same key of a stream set
    False, and has no ``dropout`` key at all inside a stack that does not list it (its train step raises);
    NNX's stack (``rngs.split(n)``) splits every stream."""
    if lift.kind not in ("scan", "vmap") or param_axis(lift) is None:
        return []
    split = split_rngs_of(lift.kwargs)
    unsplit = sorted(k for k, v in split.items() if v == "False")
    sites = getattr(block, "sites", {}).values()
    if "dropout" not in split and any(s.rule is not None and s.rule.linen == "Dropout" for s in sites):
        unsplit.append("dropout")
    return unsplit


def split_rngs_of(kwargs: dict[str, cst.BaseExpression]) -> dict[str, str]:
    """A transform's ``split_rngs={...}`` as ``{stream: source}`` (``{'dropout': 'False'}``)."""
    return {k: code(v) for k, v in literal_dict(kwargs.get("split_rngs")).items()}


def shared_layer_streams(kind: str, split_rngs: dict[str, str]) -> tuple[list[str], str]:
    """The streams whose keys a transform of a layer it shares (params broadcast) draws otherwise in NNX,
    and how. NNX hands the one layer, its RNG state included, to every step or element:

    - ``nn.scan``: a stream set False gives every Linen step the same key (a locked dropout mask); the
      NNX layer's stream counts on, a new key each step;
    - ``nn.vmap``: a stream set True gives each Linen element its own key; the NNX layer's one stream
      gives every element the same key.

    ``params`` is left out: a shared layer's params are created once either way."""
    other = {k: v for k, v in split_rngs.items() if k != "params"}
    if kind == "scan":
        streams = sorted(k for k, v in other.items() if v == "False")
        how = "Linen draws the same key of it at every step, NNX's scan a new key each step"
    else:
        streams = sorted(k for k, v in other.items() if v != "False")
        how = "Linen gives each element its own key of it, NNX's vmap gives every element the layer's one key"
    return streams, how


def report_unsplit_streams(ctx: Any, chain: LiftChain, at: cst.CSTNode) -> None:
    """L2N-XFORM-004 (unsafe: converted weights do not depend on it) for each transform of ``chain``
    whose keys differ in NNX: a stack that leaves a stream unsplit (:func:`unsplit_streams`), a shared
    layer's scan or vmap (:func:`shared_layer_streams`)."""
    for lift in chain.lifts:
        unsplit = unsplit_streams(lift, ctx.user_class_of(chain.base))
        if unsplit:
            report_stream_keys(
                ctx,
                at,
                f"nn.{lift.kind} leaves {', '.join(map(repr, unsplit))} unsplit (split_rngs): Linen gives "
                "every layer the same key of a stream set False (and none of one it does not list: its train "
                "step raises), NNX's stack gives each layer its own",
            )
        elif lift.kind in ("scan", "vmap") and param_axis(lift) is None:
            split = split_rngs_of(lift.kwargs)
            streams, how = shared_layer_streams(lift.kind, split)
            if streams:
                report_stream_keys(
                    ctx, at, f"nn.{lift.kind} of a shared layer, {split_text(split, streams)}: {how}"
                )


def report_method_scan_streams(ctx: Any, at: cst.CSTNode, method: str, kwargs: dict[str, Any]) -> None:
    """:func:`report_unsplit_streams` for ``@partial(nn.scan, ...)`` on ``method``: the layer is shared."""
    split = split_rngs_of(kwargs)
    streams, how = shared_layer_streams("scan", split)
    if streams:
        report_stream_keys(ctx, at, f"nn.scan of {method}, {split_text(split, streams)}: {how}")


def split_text(split_rngs: dict[str, str], streams: list[str]) -> str:
    """``split_rngs={'dropout': False}``: the entries of ``streams`` as the source spells them."""
    return "split_rngs={" + ", ".join(f"{k!r}: {split_rngs[k]}" for k in streams) + "}"


def report_stream_keys(ctx: Any, at: cst.CSTNode, message: str) -> None:
    from linen2nnx.migrate.rules import XFORM_004

    ctx.report(
        XFORM_004,
        at,
        message,
        "converted weights are unaffected; for training from scratch or with dropout, split the stream "
        "the same way on both sides, or split the NNX layer's rngs by hand (nnx.split_rngs / rngs.fork)",
    )
