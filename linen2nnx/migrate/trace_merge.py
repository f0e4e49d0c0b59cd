"""One trace of several traced configs of a model (``ResNet`` with ``BasicBlock`` and ``Bottleneck``).

A trace only sees the classes its config builds: a ResNet18 never builds a ``Bottleneck``, so a
``Bottleneck``'s sizes stay unknown. Tracing each config and merging the traces gives the sizer
every class, and for a class two configs build, more instances to match a config expression against
(an expression must fit each of them, so more configs only rule out more coincidences).

Per-call records are concatenated in order, with each call's parent instance renumbered past the
parent class's instances of the traces before it; where one trace has a call record the other lacks
(which parent instance made it, which input leaf it read), the missing entries are None, so the
sizer treats those calls as unpaired. The Linen paths of modules (``path_inputs``) are the first
trace's alone: the other traces' instances have no path (None), so no size is looked up by a path of
another config's model. Axes a class's parameters read are kept only where every trace
that saw the child agrees. The root (its class, inputs and leaves, what the written spec builds) is
the first trace's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

from linen2nnx.migrate.trace import Trace

K = TypeVar("K")
V = TypeVar("V")


def merge_traces(traces: Sequence[Trace]) -> Trace:
    """One :class:`Trace` holding every call and instance of ``traces`` (see the module docstring)."""
    assert traces, "nothing to merge"
    merged = dataclasses.replace(traces[0])
    merged.child_inputs = {k: list(v) for k, v in traces[0].child_inputs.items()}
    merged.instances = {k: list(v) for k, v in traces[0].instances.items()}
    merged.own_inputs = {k: list(v) for k, v in traces[0].own_inputs.items()}
    merged.carries = {k: list(v) for k, v in traces[0].carries.items()}
    merged.child_parents = _aligned(traces[0].child_parents, traces[0].child_inputs)
    merged.input_leaves = _aligned(traces[0].input_leaves, traces[0].child_inputs)
    merged.own_leaves = dict(traces[0].own_leaves)
    merged.dims_read = dict(traces[0].dims_read)
    merged.instance_paths = {k: list(v) for k, v in traces[0].instance_paths.items()}
    for other in traces[1:]:
        _add(merged, other)
    return merged


def _add(merged: Trace, other: Trace) -> None:
    """Append ``other``'s records to ``merged`` (in place)."""
    before = {cls: len(v) for cls, v in merged.instances.items()}
    earlier = {key: len(merged.child_inputs.get(key, [])) for key in other.child_inputs}
    parents = _aligned(other.child_parents, other.child_inputs)
    leaves = _aligned(other.input_leaves, other.child_inputs)
    for key, shapes in other.child_inputs.items():
        merged.child_parents.setdefault(key, [None] * earlier[key]).extend(
            None if i is None else i + before.get(key[0], 0) for i in parents[key]
        )
        merged.input_leaves.setdefault(key, [None] * earlier[key]).extend(leaves[key])
        merged.child_inputs.setdefault(key, []).extend(shapes)
    for key in set(merged.dims_read) | set(other.dims_read):
        mine, theirs = merged.dims_read.get(key), other.dims_read.get(key)
        if mine == theirs:
            continue
        if mine is None and earlier.get(key, 0) == 0:
            merged.dims_read[key] = theirs  # type: ignore[assignment]  # only the other trace saw it
        elif theirs is not None or key in other.child_inputs:
            merged.dims_read.pop(key, None)  # the configs' parameters read different axes
    for cls, found in other.instances.items():  # aligned with the instances, no path (module docstring)
        paths = merged.instance_paths.setdefault(cls, [None] * before.get(cls, 0))
        paths.extend([None] * len(found))
    _extend(merged.instances, other.instances)
    _extend(merged.own_inputs, other.own_inputs)
    _extend(merged.carries, other.carries)
    for cls, found in other.own_leaves.items():
        merged.own_leaves.setdefault(cls, found)


def _aligned(per_call: dict[K, list[V]], calls: dict[K, list]) -> dict[K, list[V | None]]:
    """``per_call`` with one entry per call of ``calls`` for every key (None where it has none)."""
    return {
        key: list(per_call[key]) if len(per_call.get(key, [])) == len(shapes) else [None] * len(shapes)
        for key, shapes in calls.items()
    }


def _extend(into: dict[K, list], more: dict[K, list]) -> None:
    for key, values in more.items():
        into.setdefault(key, []).extend(values)
