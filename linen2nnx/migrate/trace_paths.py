"""What the trace saw at one Linen path: the traced value of a size that a chain of builders hands down.

A size the dataflow cannot tell becomes a required constructor argument, and each class of the run
that builds the class passes it on as an argument of its own, up to the class at the top of the run
(:mod:`.caller_sizes`). Along that chain the argument keeps the Linen path, relative to the class
that takes it, of the layer whose input size it is (``ClassPlan.size_paths``): ``('key',)`` in an
attention block, ``('attention', 'key')`` in the layer that builds it, ``('encoder', '{i}',
'attention', 'key')`` at the top, where ``{i}`` stands for each element of a list built in
``setup()`` (the argument is then a tuple, one size per element). The classes in the middle of such
a chain are built several times, and what one instance saw says nothing of another; the class at the
top is built once, so its Linen path is known and the trace's record of every module's path gives
the value for the written pair spec (``TRACED_ARGS``): the sizes the traced config needs, which other
configs may not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.sites import Site
from linen2nnx.migrate.trace import Trace
from linen2nnx.namemap import element_key

#: No value: the trace did not see the layer (or saw it with several sizes).
MISSING = object()
#: Marks a part of a path built under a config test (``if self.config.add_cross_attention:``).
OPTIONAL = "?"


def traced_at(trace: Trace, base: tuple[str, ...], rel: tuple[str, ...]) -> Any:
    """The last-axis input size the trace saw for the layer at ``base + rel`` (one size for every
    call), a tuple of them for each element where a part of ``rel`` is a list's name pattern, None
    for a layer whose holder the traced model never built where that holder is built under a config
    test (:data:`OPTIONAL`: the NNX class builds nothing there either, so no size is read), else
    :data:`MISSING` (a holder built always in NNX, which Linen built only once called, needs a size
    the trace cannot tell)."""
    return _at(trace, trace.built_paths, base, rel)


def _at(trace: Trace, built: frozenset[tuple[str, ...]], base: tuple[str, ...], rel: tuple[str, ...]) -> Any:
    for index, part in enumerate(rel):
        if "{i" not in part:
            continue
        prefix = (*base, *linen_names(rel[:index]))
        each = []
        for k in range(10_000):
            element = (*prefix, element_key(part.lstrip(OPTIONAL), k))
            if element not in built:
                break
            value = _at(trace, built, element, rel[index + 1 :])
            if value is MISSING or isinstance(value, tuple):
                return MISSING  # a list inside a list's elements: one tuple cannot say it
            each.append(value)
        return tuple(each) if each else _never_built(trace, built, base, rel[:index])
    sizes = {shape[-1] for shape in trace.path_inputs.get((*base, *linen_names(rel)), []) if shape}
    if len(sizes) == 1:
        return sizes.pop()
    return _never_built(trace, built, base, rel) if not sizes else MISSING


def _never_built(
    trace: Trace, built: frozenset[tuple[str, ...]], base: tuple[str, ...], parts: tuple[str, ...]
) -> Any:
    """None where the first module on the way that the traced model never called is one NNX builds
    under a config test too and its holder never defined it (the test was false: nothing reads the
    size), else :data:`MISSING` (defined but never called: NNX builds it, and needs its size)."""
    for depth in range(len(parts)):
        if (*base, *linen_names(parts[: depth + 1])) in built:
            continue
        defined = trace.defined.get((*base, *linen_names(parts[:depth])))
        if parts[depth].startswith(OPTIONAL) and defined is not None:
            return None if parts[depth].lstrip(OPTIONAL) not in defined else MISSING
        return MISSING
    return MISSING


def linen_names(parts: tuple[str, ...]) -> tuple[str, ...]:
    """A path as Linen names it (without the :data:`OPTIONAL` marks)."""
    return tuple(part.lstrip(OPTIONAL) for part in parts)


def size_path(
    site: Site, child_arg: str, shape: bool, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> tuple[str, ...] | None:
    """The Linen path, relative to the class that builds ``site``, of the layer whose input size
    ``child_arg`` of what ``site`` builds is (``{i}`` patterns for the elements of a setup() list,
    :data:`OPTIONAL` for a part built under a test), or None where none is known. ``shape``: the
    argument takes a tuple (a whole input shape, which has no path, or one size per element, which
    has). ``parent_of``: the parents of the original tree's nodes."""
    if site.parent is not None or site.loop is not None or site.nest is not None:
        return None
    if site.tail_of is not None or site.extends is not None:
        return None
    name = site.elements if site.elements is not None else site.linen_name
    # built under a test in NNX: a hoisted site as its conditions say (a call-time test's module is built
    # always), a setup() one as the `if` it stays under
    tested = site.conditions if site.hoisted else _under_test(site.ctor, parent_of)
    name = OPTIONAL + name if tested else name
    if not shape and input_size_of(site, child_arg, shape):
        return (name,)  # a layer's (or a class's) own input: what the trace records of each module
    below = dict(site.user.size_paths).get(child_arg) if site.kind == "module" and site.user else None
    per_element = below is not None and any("{i" in part for part in below)
    if below is None or (shape and not per_element) or (site.elements is not None and per_element):
        return None  # unknown, a whole input shape, or a list inside a list's elements
    return (name, *below)


def _under_test(node: cst.CSTNode | None, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]) -> bool:
    """Is ``node`` built under an ``if`` or a conditional expression of its method (``setup()`` keeps
    its tests as they are: its sites carry no conditions)?"""
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        if isinstance(node, (cst.If, cst.IfExp)):
            return True
        node = parent_of(node)
    return False


def input_size_of(site: Site, child_arg: str, shape: bool) -> bool:
    """``child_arg`` of what ``site`` builds is its input's last axis (or, with ``shape``, its whole
    shape): a built-in layer's ``in_features`` (not one told which axis it reads: ``DenseGeneral(axis=-2)``,
    ``BatchNorm(axis=1)``), a class of the run's size of its first input."""
    if site.kind == "layer":
        return child_arg == "in_features" and "axis" not in site.args
    how = site.user.new_args.get(child_arg) if site.user is not None else None
    return how == ("input_shape:0" if shape else "input:0")
