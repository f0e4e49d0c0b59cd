"""The value the feature-size dataflow tracks for each expression (see dataflow.py and tuple_flow.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

DISAGREEING = "applications disagree:"
"""The reason of the unknown size of a module applied to inputs of different sizes: never taken from a
trace (which sees one of them), always a required constructor argument."""


@dataclasses.dataclass(frozen=True)
class Feat:
    """Where a value's last axis comes from (``kind``; see dataflow.py), or, for a tuple or output
    object, one such value per element (tuple_flow.py)."""

    kind: str  # expr | input | flatten | sliced | tuple | prefix | namedtuple | record | choice | unknown
    expr: str = ""
    input_name: str = ""
    base: Feat | None = None
    reason: str = ""
    elements: tuple[Feat, ...] = ()  # compound kinds (tuple_flow.py): one Feat per element
    names: tuple[str, ...] = ()  # kinds "namedtuple" / "record": the field name of each element
    tail: tuple[Feat, ...] = ()  # kind "prefix": its last elements, where every path ends alike
    rank: int = 0  # number of axes when known (a parameter of literal shape); 0: unknown
    leading: int = 0  # for a flatten: the leading axes it provably keeps (``x.reshape(x.shape[0], -1)``: 1)
    reduced: tuple[
        int, ...
    ] = ()  # for a candidate of a reduction: the axes reduced (a trace's rank confirms)
    candidate: Feat | None = None
    """For an unknown size: what it is if an assumption no source text proves holds (the right operand
    of ``x @ y`` has rank >= 2); only a trace that shows the same sizes confirms it."""
    handed: str = ""
    """For an unknown size: the constructor field whose module's output it is, exactly (``self.embed(t)``
    of a module the builder hands in; see handed_modules.py)."""

    @staticmethod
    def unknown(reason: str) -> Feat:
        return Feat("unknown", reason=reason)

    def rankless(self) -> Feat:
        """The same size with the rank unknown: what a step that may add or drop axes keeps."""
        return dataclasses.replace(self, rank=0) if self.rank else self


@dataclasses.dataclass
class LayerInfo:
    """What the flow needs to know about one layer application."""

    key: str  # NNX attribute of the layer
    out_expr: str | None  # source of its output feature size; None: same as its input
    out_unknown: bool = False  # the output size cannot be told statically
    out_fn: Callable[[Feat], Feat] | None = None  # the output as a function of the first input (wins if set)
    input_index: int = 0  # the positional argument whose last axis the layer reads (a cell's x)
    input_names: tuple[str, ...] = ()  # the callee's input parameters, in order (inputs given by keyword)
    keeps_rank: bool = False  # the output has the input's rank (a norm, a Dense), else its rank is unknown

    def output(self, first: Feat, unknown: str | None = None) -> Feat:
        """What the application gives when its first input is ``first`` (``unknown``: the reason of an
        output size that cannot be told, by default the layer's key)."""
        if self.out_fn is not None:
            return self.out_fn(first)
        if self.out_unknown:
            return Feat.unknown(unknown or f"output of {self.key}")
        if self.out_expr is not None:  # a layer that keeps the rank maps only the last axis's size
            return Feat("expr", expr=self.out_expr, rank=first.rank if self.keeps_rank else 0)
        return first if self.keeps_rank else first.rankless()
