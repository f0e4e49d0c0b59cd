"""Which config expressions explain a traced size: the fields of a class's traced instances, the
entries of config objects they hold, products of two, elements of tuple fields.

Part of the *analyse* step, read by :class:`~linen2nnx.migrate.trace_sizing.TraceEvidence`: a traced
number is only evidence for an expression that equals it in every traced instance of the class.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from linen2nnx.migrate.sites import ClassPlan


def config_values(expr: str, configs: list[dict]) -> list[Any] | None:
    """``expr`` (a config expression of ``self``) in each traced instance; None when it does not
    evaluate in one of them."""
    try:
        return [eval(expr, {}, {"self": SimpleNamespace(**cfg)}) for cfg in configs]
    except Exception:
        return None


def match_config(
    sizes: list[int], configs: list[dict], plan: ClassPlan, inputs: Sequence[tuple[int, ...]] = ()
) -> list[str]:
    """Config expressions (``self.hidden``, ``self.config.emb_dim``) equal to the traced size in
    every traced instance of the class; when none is, products of two of them
    (``self.config.num_heads * self.config.head_dim``). The caller decides what one / several
    matches mean (several: ambiguous, a finding), so every other explanation of the number that one
    trace cannot rule out is listed beside a match, never dropped: a small literal multiple of a
    field beside a product (``2 * self.d``, a concatenation, is ``self.d * self.n`` where ``n`` is
    2), and an axis other than the last of a traced input (``inputs``: a token count or a resolution
    the data sets, which a field may equal by chance). None matching, nothing is listed: the rivals
    alone explain no expression. A field equal to the size is taken over products (a transformer's
    ``emb_dim`` is ``num_heads * head_dim`` in most configs, the zoo decoder's included)."""
    if len(sizes) != 1 or not configs:
        return []
    size = sizes[0]
    fields = set(plan.field_names)
    per_instance = [_int_config_values(cfg, fields) for cfg in configs]
    common = set.intersection(*(set(values) for values in per_instance))
    direct = sorted(e for e in common if all(values[e] == size for values in per_instance))
    factors = sorted(e for e in common if all(values[e] > 1 for values in per_instance))
    products = [
        f"{a} * {b}"
        for i, a in enumerate(factors)
        for b in factors[i + 1 :]  # two fields: a square (`num_classes ** 2`) sizes no feature axis
        if all(values[a] * values[b] == size for values in per_instance)
    ]
    rivals = [_input_axis(size, shape, axis) for shape in inputs for axis in _leading_axes(shape, size)]
    if direct:  # a field equal to the size outranks a product (see the branch strict-trace-ambiguity)
        return direct + sorted(set(rivals))
    if not products:
        return []
    # an element of a tuple field (`self.block_out_channels[0]`) explains it as well as a product of
    # two fields does, so it makes one ambiguous; alone it is never taken (tuples hold many numbers:
    # kernel sizes, strides, a list of widths, one of which a flattened input's size may equal)
    elements = [_int_elements(cfg, fields) for cfg in configs]
    shared = set.intersection(*(set(values) for values in elements))
    rivals += [e for e in shared if all(values[e] == size for values in elements)]
    rivals += [
        f"{k} * {e}" for e in factors for k in SMALL_MULTIPLES if all(k * v[e] == size for v in per_instance)
    ]
    return direct + products + sorted(set(rivals))


#: The literal multiples of one field a value may be made of without any field of the factor (a
#: concatenation of two or three copies, an MLP's ratio of 4), which a product of two fields equals
#: whenever one of them holds the factor in the traced config.
SMALL_MULTIPLES = (2, 3, 4)


def _leading_axes(shape: tuple[int, ...], size: int) -> list[int]:
    """The axes of ``shape`` before its last (batch, tokens, pixels) that hold ``size``; a 1 is no
    evidence of anything, nor is a size below 2."""
    return [axis for axis, n in enumerate(shape[:-1]) if n == size and size > 1]


def _input_axis(size: int, shape: tuple[int, ...], axis: int) -> str:
    """How a rival input axis reads in a finding's list of candidates."""
    return f"axis {axis} of a traced input of shape {tuple(shape)} ({size}, set by the data)"


def match_each(sizes: list[int], configs: list[dict], plan: ClassPlan) -> list[str]:
    """Config expressions equal, in each traced instance of the class, to the size its own call saw
    (``sizes[i]`` is the call of ``configs[i]``)."""
    fields = set(plan.field_names)
    per_instance = [_int_config_values(cfg, fields) for cfg in configs]
    common = set.intersection(*(set(values) for values in per_instance)) if per_instance else set()
    return sorted(e for e in common if all(v[e] == n for v, n in zip(per_instance, sizes)))


def confirmed_by_trace(static: str | None, sizes: list[int], configs: list[dict]) -> bool:
    """A size the dataflow gives that every traced call saw: an integer literal, or an expression of
    the config (``self.features * self.expansion`` after ``nn.Conv(self.features * self.expansion,
    ...)``) equal in each traced instance to the size its call saw (``sizes[i]`` the call of
    ``configs[i]`` when there are as many; else one size, seen by every instance)."""
    if static is None:
        return False
    if static.isdigit():
        return all(int(static) == n for n in sizes)
    values = config_values(static, configs) if configs else None
    if not values or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in values):
        return False
    if len(values) == len(sizes):
        return all(int(v) == n for v, n in zip(values, sizes))
    return len(set(sizes)) == 1 and all(int(v) == sizes[0] for v in values)


def traced_inputs(trace: Any, cls: str) -> list[tuple[int, ...]]:
    """The shapes of the arrays the trace saw enter the model and the class ``cls`` (each call's
    positional arguments, the leaves of its first call's and of the model's): their axes before the
    last are sizes the data sets (tokens, pixels), which :func:`match_config` lists beside a field
    that equals one by chance."""
    if trace is None:
        return []
    own = [shape for call in trace.own_inputs.get(cls, []) for shape in call if shape]
    leaves = [*trace.own_leaves.get(cls, {}).values(), *trace.root_leaves.values()]
    return sorted({tuple(s) for s in [*own, *leaves, *trace.root_inputs] if s})


def base_factors(
    base: Any, shapes: list[tuple[int, ...]], configs: list[dict]
) -> tuple[str, set[int]] | None:
    """The config base of a flattened or sliced value (``base``: its last axis before, a ``Feat`` of
    ``self.ch``) and the whole factors each traced call's size is of it; None where the base is no
    config expression or a size is no whole multiple of it."""
    if base is None or base.kind != "expr" or not configs:
        return None
    factors = set()
    for shape, value in zip(shapes, config_values(base.expr, configs) or []):
        if not isinstance(value, int) or value <= 0 or not shape or shape[-1] % value:
            return None
        factors.add(shape[-1] // value)
    return (base.expr, factors) if factors else None


def _int_config_values(cfg: dict, fields: set[str]) -> dict[str, int]:
    """``expression -> int`` of one traced instance's fields and the entries of its config objects (a
    numpy integer counts: StyleGAN's feature maps are an ``np.clip`` of config)."""
    out: dict[str, int] = {}
    for name, value in cfg.items():
        if name not in fields:
            continue
        whole = isinstance(value, numbers.Integral)
        items = [(f"self.{name}", value)] if whole else _config_items(f"self.{name}", value)
        out.update(
            {e: int(v) for e, v in items if isinstance(v, numbers.Integral) and not isinstance(v, bool)}
        )
    return out


def _int_elements(cfg: dict, fields: set[str]) -> dict[str, int]:
    """``expression -> int`` of the integer elements of one traced instance's tuple and list fields
    (``self.block_out_channels[0]``)."""
    return {
        f"self.{name}[{i}]": int(v)
        for name, value in cfg.items()
        if name in fields and isinstance(value, (tuple, list)) and not hasattr(value, "_fields")
        for i, v in enumerate(value)
        if isinstance(v, numbers.Integral) and not isinstance(v, bool)
    }


def _config_items(prefix: str, value: Any) -> list[tuple[str, Any]]:
    """``(expression, value)`` of each entry of a config object held in a field: a dataclass's or a
    NamedTuple's fields, a mapping's string keys (``self.config['hidden']``), a plain object's public
    attributes (a ``SimpleNamespace``, a ``PretrainedConfig``-style class)."""
    if isinstance(value, type) or callable(value):
        return []
    if dataclasses.is_dataclass(value):
        return [(f"{prefix}.{f.name}", getattr(value, f.name, None)) for f in dataclasses.fields(value)]
    if isinstance(value, Mapping):
        return [(f"{prefix}[{k!r}]", v) for k, v in value.items() if isinstance(k, str)]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple config
        return [(f"{prefix}.{f}", getattr(value, f)) for f in value._fields]
    attrs = getattr(value, "__dict__", None)
    if not isinstance(attrs, dict):
        return []
    return [(f"{prefix}.{k}", v) for k, v in attrs.items() if k.isidentifier() and not k.startswith("_")]
