"""Objects indexed over their elements that are not None: the ``output`` kind of the dataflow.

Two such values reach a layer in Hugging Face-style code. A ``ModelOutput`` subclass (a data class of
the run whose one base is ``transformers.utils.ModelOutput``) keeps its fields, ``out.name``, but
``out[k]`` is the ``k``-th field *that is not None*, in the order the class declares them;
``tuple(v for v in outs if v is not None)`` is the same sequence without names. A
:class:`~linen2nnx.migrate.dataflow_types.Feat` of kind ``output`` holds every field's value
(``elements``, with ``names`` for a ``ModelOutput``); a field known to be None holds :data:`NONE`.
A block that returns such an object on one path and a tuple display on another (``return_dict``)
keeps the display as ``base``: an index is known only where both agree (see ``tuple_flow``).

Which fields are not None is decided only where the source proves it, and in the terms of the code
that reads the index: an array the dataflow sized (a layer's output, a reshape) is not None, the
literal None or a field left to a None default is None, and anything else -- a method input (a caller
may pass None), an unknown -- leaves every later position undecided. A callee's input becomes its
caller's value before the index is read, so ``outputs[0]`` of a block whose first field is its own
input is decided by what the caller passed.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.dataflow_types import Feat

NONE = Feat.unknown("the value None")
"""An element known to be None (skipped by indexing)."""
ARRAYS = ("expr", "flatten")
"""Kinds of a value that is an array, hence not None."""


def is_none(node: cst.BaseExpression) -> bool:
    """The literal ``None``."""
    return isinstance(node, cst.Name) and node.value == "None"


def present(value: Feat) -> Feat:
    """The elements of an ``output`` value that indexing sees, in order: a ``tuple`` when every
    element is decided, else the ``prefix`` before the first undecided one."""
    elements: list[Feat] = []
    for e in value.elements:
        if e == NONE:
            continue
        if e.kind not in ARRAYS:
            return Feat("prefix", elements=tuple(elements))
        elements.append(e)
    return Feat("tuple", elements=tuple(elements))


def filtered_source(node: cst.Call, qualnames: set[str]) -> cst.BaseExpression | None:
    """``outs`` of ``tuple(v for v in outs if v is not None)`` (the builtin ``tuple``), else None."""
    if not qualnames & {"tuple", "builtins.tuple"} or len(node.args) != 1:
        return None
    gen = node.args[0].value
    if not isinstance(gen, cst.GeneratorExp) or node.args[0].keyword is not None or node.args[0].star:
        return None
    clause = gen.for_in
    if clause.inner_for_in is not None or clause.asynchronous is not None or len(clause.ifs) != 1:
        return None
    target, elt, test = clause.target, gen.elt, clause.ifs[0].test
    if not (isinstance(target, cst.Name) and isinstance(elt, cst.Name) and elt.value == target.value):
        return None
    if not (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.Name)
        and test.left.value == target.value
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, cst.IsNot)
        and is_none(test.comparisons[0].comparator)
    ):
        return None
    return clause.iter


def filtered(source: Feat) -> Feat:
    """``tuple(v for v in source if v is not None)`` of a value whose every element is known."""
    if source.kind not in ("tuple", "namedtuple"):
        return Feat.unknown("a filtered sequence of unknown length")
    return Feat("output", elements=source.elements)


def summand(value: Feat) -> Feat:
    """What ``value + other`` / ``other + value`` sees of a value: an output object with fields (a
    ``ModelOutput``, an ordered dict, which has no ``+``) never reaches a ``+`` that does not raise,
    so only the tuple another path gives instead (its ``base``) does; a filtered tuple is the tuple of
    its elements not None (:func:`present`). Any other value as it is."""
    if value.kind != "output":
        return value
    if value.names:
        return summand(value.base) if value.base is not None else Feat.unknown("a sum of an output object")
    return present(value)
