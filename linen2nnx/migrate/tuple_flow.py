"""Feature sizes through tuples and output objects that blocks return.

A submodule often returns several values -- ``return h, attn`` / ``return (h,) + outputs[1:]`` /
``return Output(last_hidden_state=h)`` -- and its caller reads one of them: ``h, _ = block(x)``,
``block(x)[0]``, ``out.last_hidden_state``. The dataflow (:mod:`~linen2nnx.migrate.dataflow`) keeps
one :class:`~linen2nnx.migrate.dataflow.Feat` per element so that the next layer's input size is still
known there. Four kinds of sequence-like values:

- ``tuple``       every element known, in order (a tuple or list display);
- ``prefix``      the first elements known, more may follow (``(h,) + rest`` with ``rest`` a tuple of
                  unknown length, or branches that return tuples of different lengths);
- ``namedtuple``  a ``typing.NamedTuple`` of this file built with its fields: a ``tuple`` whose
                  elements also have names;
- ``record``      a dataclass of this file (``flax.struct.dataclass``, ``dataclasses.dataclass``)
                  built with its fields: named elements, no indexing;
- ``output``      an object that indexes over the elements that are not None
                  (:mod:`~linen2nnx.migrate.output_values`): a Hugging Face ``ModelOutput`` of a class
                  of the run, or ``tuple(v for v in outs if v is not None)``.

Data classes of the other files of the run arrive as facts (:mod:`~linen2nnx.migrate.record_facts`).

Only what the source proves is followed: a literal index or slice, ``+`` of two sequences, a field
passed to the constructor. Anything else (a non-literal index, an index past the known prefix, starred
unpacking of a sequence of unknown length, a field left to its default) is unknown, and the existing
finding stands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import libcst as cst

from linen2nnx.migrate import mapping_flow, output_values
from linen2nnx.migrate.cst_utils import absolute_qualname, config_test, leaves_function
from linen2nnx.migrate.dataflow_types import DISAGREEING, Feat

SIZED = ("expr", "input")
"""Kinds with a size of their own (a config expression, or a method input's)."""
SEQUENCES = ("tuple", "prefix", "namedtuple")
"""Kinds that index and concatenate as a Python tuple."""
COMPOUND = (*SEQUENCES, "record", "output", mapping_flow.KIND)

RECORD_DECORATORS = frozenset({"flax.struct.dataclass", "dataclasses.dataclass"})
NAMED_TUPLE_BASES = frozenset({"typing.NamedTuple", "NamedTuple"})
MODEL_OUTPUT_BASES = frozenset({"transformers.utils.ModelOutput", "transformers.utils.generic.ModelOutput"})
"""Hugging Face's base of output classes: ``out[k]`` is the ``k``-th field that is not None, in the
order the class declares them; ``out.name`` the field (:mod:`~linen2nnx.migrate.output_values`)."""


def _refused_method(name: str) -> bool:
    """A method a plain data class may not define: any dunder (``__getitem__``, ``__iter__``, ``__len__``,
    ``__getattr__``, ``__post_init__``, ...) may change what indexing, unpacking or a field read gives."""
    return name.startswith("__") and name.endswith("__")


@dataclasses.dataclass(frozen=True)
class RecordClass:
    """A plain data class of the file: its fields in order, and whether it is a NamedTuple (indexable)."""

    fields: tuple[str, ...]
    sequence: bool
    model_output: bool = False  # a subclass of Hugging Face's ModelOutput: indexes its fields not None
    none_defaults: tuple[str, ...] = ()  # the fields whose default is None


def record_classes(
    body: Sequence[cst.CSTNode],
    qualnames: Callable[[cst.CSTNode], set[str]],
    module_name: str = "",
    folders: Sequence[str] = (),
) -> dict[str, RecordClass]:
    """The module-level classes whose attributes read back the constructor's arguments unchanged:
    a dataclass or NamedTuple with no base of its own (or a dataclass whose one base is Hugging Face's
    ``ModelOutput``, which adds no field), every field a plain annotated name, and no method that could
    change what a field holds. ``folders``: the names of the folders the file sits in, innermost last
    (see :func:`_is_model_output`)."""
    out: dict[str, RecordClass] = {}
    for stmt in body:
        if not isinstance(stmt, cst.ClassDef):
            continue
        bases = [a.value for a in stmt.bases]
        sequence = bool(bases) and all(
            qualnames(b) & NAMED_TUPLE_BASES or (isinstance(b, cst.Name) and b.value == "NamedTuple")
            for b in bases
        )
        decorated = any(_is_record_decorator(d.decorator, qualnames) for d in stmt.decorators)
        model_output = len(bases) == 1 and _is_model_output(qualnames(bases[0]), module_name, folders)
        if stmt.keywords or not (
            (sequence and not stmt.decorators) or (decorated and (not bases or model_output))
        ):
            continue
        fields = _plain_fields(stmt.body.body)
        if fields:
            out[stmt.name.value] = RecordClass(fields, sequence, model_output, _none_defaults(stmt.body.body))
    return out


def _none_defaults(body: Sequence[cst.CSTNode]) -> tuple[str, ...]:
    """The annotated fields of a class body whose default is the literal None."""
    return tuple(
        small.target.value
        for stmt in body
        if isinstance(stmt, cst.SimpleStatementLine)
        for small in stmt.body
        if isinstance(small, cst.AnnAssign)
        and isinstance(small.target, cst.Name)
        and isinstance(small.value, cst.Name)
        and small.value.value == "None"
    )


def _is_model_output(qualnames: set[str], module_name: str, folders: Sequence[str] = ()) -> bool:
    """Whether a base names Hugging Face's ``ModelOutput`` by its absolute name. A relative
    ``from .utils import ModelOutput`` that climbs above the run's packages is not taken for it: a
    project's own ``utils.ModelOutput`` may index all its fields, and a wrong index is a wrong size.
    Folders without ``__init__.py`` are packages too (namespace packages): a relative import proves
    that the folders it climbs are, so it names the outermost of them (``folders``), and
    ``from .utils import ModelOutput`` in a folder ``transformers`` is ``transformers.utils.ModelOutput``."""
    return any(
        absolute_qualname(q, module_name) in MODEL_OUTPUT_BASES
        or climbed_qualname(q, folders) in MODEL_OUTPUT_BASES
        for q in qualnames
    )


def climbed_qualname(qualname: str, folders: Sequence[str]) -> str:
    """A relative import's name from the outermost folder it climbs (``..utils.X`` in ``a/b/f.py``:
    ``a.utils.X``), whatever holds that folder; "" for an absolute name or a climb past ``folders``."""
    dots = len(qualname) - len(qualname.lstrip("."))
    if not dots or dots > len(folders) or not folders[-dots].isidentifier():
        return ""
    return f"{folders[-dots]}.{qualname.lstrip('.')}"


def _is_record_decorator(node: cst.BaseExpression, qualnames: Callable[[cst.CSTNode], set[str]]) -> bool:
    func = node.func if isinstance(node, cst.Call) else node
    if isinstance(node, cst.Call) and any(a.keyword is None or a.keyword.value == "init" for a in node.args):
        return False  # dataclass(init=False) or a positional argument: a constructor of its own
    return bool(qualnames(func) & RECORD_DECORATORS)


def _plain_fields(body: Sequence[cst.CSTNode]) -> tuple[str, ...]:
    """The field names of a class body of annotated names, docstrings and methods that cannot change a
    field; () when anything else stands in it."""
    fields: list[str] = []
    methods: set[str] = set()
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef):
            methods.add(stmt.name.value)
            if stmt.decorators:
                return ()  # a property or a class method may shadow a field
            continue
        if not isinstance(stmt, cst.SimpleStatementLine):
            return ()
        for small in stmt.body:
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString):
                continue
            if isinstance(small, cst.Pass):
                continue
            if not (isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name)):
                return ()
            annotation = cst.Module(body=[]).code_for_node(small.annotation.annotation)
            if any(word in annotation for word in ("ClassVar", "InitVar", "KW_ONLY")):
                return ()
            if isinstance(small.value, cst.Call):
                return ()  # field(init=False, ...) and the like: not read back as passed
            fields.append(small.target.value)
    if methods & set(fields) or any(_refused_method(m) for m in methods):
        return ()
    return tuple(fields)


def built_record(node: cst.Call, record: RecordClass, args: Sequence[Feat], name: str) -> Feat | None:
    """``Out(h, aux=a)``: each field's value as passed; a field left to its default is unknown (for a
    ``ModelOutput``, one passed as None or left to a None default is None). None when the arguments
    cannot be matched to the fields (``*args``, ``**kwargs``, an unknown keyword)."""
    values: dict[str, Feat] = {}
    positional = 0
    for arg, feat in zip(node.args, args):
        if record.model_output and output_values.is_none(arg.value):
            feat = output_values.NONE
        if arg.star:
            return None
        if arg.keyword is None:
            if positional >= len(record.fields):
                return None
            values[record.fields[positional]] = feat
            positional += 1
        elif arg.keyword.value in record.fields and arg.keyword.value not in values:
            values[arg.keyword.value] = feat
        else:
            return None
    if record.model_output:
        values.update({f: output_values.NONE for f in record.none_defaults if f not in values})
    elements = tuple(values.get(f, Feat.unknown(f"the default of {name}.{f}")) for f in record.fields)
    kind = "output" if record.model_output else "namedtuple" if record.sequence else "record"
    return Feat(kind, expr=name, elements=elements, names=record.fields)


def field_of(value: Feat, attr: str) -> Feat | None:
    """``out.attr`` of a record or NamedTuple value; None for any other value."""
    if value.kind not in ("record", "namedtuple", "output"):
        return None
    if value.kind == "output" and value.reason == NAMED:
        return Feat.unknown(f"attribute {attr} of objects of different classes")
    if attr in value.names:  # of an output merged with a tuple display: only the object has fields
        found = value.elements[value.names.index(attr)]
        return Feat.unknown(f"{value.expr}.{attr}, None") if found == output_values.NONE else found
    return Feat.unknown(f"attribute {attr} of {value.expr or 'a tuple'}")


def _literal_int(node: cst.BaseExpression | None) -> int | None:
    negative = isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
    number = node.expression if negative else node  # type: ignore[union-attr]
    if not isinstance(number, cst.Integer):
        return None
    return -int(number.value) if negative else int(number.value)


def indexed(value: Feat, node: cst.Subscript) -> Feat | None:
    """``value[i]`` / ``value[a:b]`` of a sequence with literal bounds: the element or the sub-sequence
    when the source proves which; None when ``value`` is no sequence or the subscript is not literal
    (the caller keeps its own reading of an indexed array)."""
    if value.kind == "output":
        return _output_indexed(value, node)
    if value.kind == mapping_flow.KIND:
        return mapping_flow.looked_up(value, node)
    if value.kind not in SEQUENCES or len(node.slice) != 1:
        return None
    index = node.slice[0].slice
    if isinstance(index, cst.Index):
        i = _literal_int(index.value)
        if i is None:
            return Feat.unknown("an index the source does not spell out")
        return element(value, i)
    if isinstance(index, cst.Slice):
        return sliced(value, index)
    return None


def _output_indexed(value: Feat, node: cst.Subscript) -> Feat:
    """``out[i]`` / ``out[a:b]`` of an ``output`` value: over its elements that are not None, and the
    same of the tuple another path returns instead (``base``), when both agree."""
    index = node.slice[0].slice if len(node.slice) == 1 else None
    got = indexed(output_values.present(value), node) if isinstance(index, (cst.Index, cst.Slice)) else None
    if got is None:
        return Feat.unknown("an index of an output object")
    if value.base is None:
        return got
    other = indexed(value.base, node)
    return merge_value(got, other) if other is not None else Feat.unknown("an index of another path's value")


def element(value: Feat, i: int) -> Feat:
    """The ``i``-th element of a sequence value (negative from the end where its length is known, or
    its last elements are: ``out[-1]`` of ``(h,)`` or ``(weights, h)``, whichever path ran)."""
    n = len(value.elements)
    if value.kind == "prefix":
        if -len(value.tail) <= i < 0:
            return value.tail[i]
        return value.elements[i] if 0 <= i < n else Feat.unknown("an element past the known ones")
    return value.elements[i] if -n <= i < n else Feat.unknown("an index out of range")


def sliced(value: Feat, index: cst.Slice) -> Feat:
    """``value[a:b]`` with literal (or absent) bounds and no step."""
    bounds = []
    for bound in (index.lower, index.upper):
        b = None if bound is None else _literal_int(bound)
        if bound is not None and b is None:
            return Feat.unknown("a slice the source does not spell out")
        bounds.append(b)
    if index.step is not None:
        return Feat.unknown("a slice with a step")
    lower, upper = bounds
    if value.kind != "prefix":
        return Feat("tuple", elements=value.elements[lower:upper])
    if (lower or 0) < 0 or (upper is not None and (upper < 0 or upper > len(value.elements))):
        return Feat.unknown("a slice past the known elements")
    if upper is None:
        return Feat("prefix", elements=value.elements[lower:])
    return Feat("tuple", elements=value.elements[lower:upper])


def joined(left: Feat, right: Feat) -> Feat:
    """``left + right`` of two sequences: a tuple, or a prefix when ``left``'s length is not known or
    ``right``'s elements are not all known. Anything else is unknown (``(h,) + array`` broadcasts)."""
    if left.kind not in SEQUENCES or right.kind not in SEQUENCES:
        return Feat.unknown("a sum of a sequence and something else")
    ends = right.elements if right.kind == "tuple" else right.tail  # what the sum ends with
    if left.kind == "prefix":
        return Feat("prefix", elements=left.elements, tail=ends)
    if right.kind == "prefix":
        return Feat("prefix", elements=left.elements + right.elements, tail=ends)
    return Feat("tuple", elements=left.elements + right.elements)


def displayed(parts: Sequence[tuple[bool, Feat]]) -> Feat:
    """A tuple or list display, each part ``(starred, value)``: a starred sequence's elements spliced
    in; after a starred value of unknown length, only the elements before it are known (a prefix)."""
    elements: list[Feat] = []
    for starred, value in parts:
        if not starred:
            elements.append(value)
            continue
        value = as_sequence(value)
        elements.extend(value.elements if value.kind in ("tuple", "prefix") else ())
        if value.kind != "tuple":
            return Feat("prefix", elements=tuple(elements))
    return Feat("tuple", elements=tuple(elements))


def as_sequence(value: Feat) -> Feat:
    """A NamedTuple as the tuple of its fields (what unpacking and ``+`` see)."""
    return Feat("tuple", elements=value.elements) if value.kind == "namedtuple" else value


def merged(a: Feat, b: Feat, merge: Callable[[Feat, Feat], Feat]) -> Feat | None:
    """Two compound values one of which a later read sees (branches of an ``if``, several returns):
    element by element, ``merge`` deciding each pair; a prefix as long as both when their lengths
    differ. None when either is not compound."""
    if a.kind not in COMPOUND or b.kind not in COMPOUND:
        return None
    if mapping_flow.KIND in (a.kind, b.kind):
        return mapping_flow.merged(a, b, merge)
    if "output" in (a.kind, b.kind) and "record" not in (a.kind, b.kind):
        return _merged_output(a, b, merge)
    if a.kind == "record" or b.kind == "record":
        if a.kind != b.kind or a.expr != b.expr:
            return Feat.unknown("different objects on different paths")
        return dataclasses.replace(a, elements=tuple(merge(x, y) for x, y in zip(a.elements, b.elements)))
    if a.kind == b.kind == "namedtuple" and a.expr == b.expr:
        return dataclasses.replace(a, elements=tuple(merge(x, y) for x, y in zip(a.elements, b.elements)))
    sa, sb = as_sequence(a), as_sequence(b)
    elements = tuple(merge(x, y) for x, y in zip(sa.elements, sb.elements))
    same_length = sa.kind == sb.kind == "tuple" and len(sa.elements) == len(sb.elements)
    named = NAMED if _may_have_fields(a) or _may_have_fields(b) else ""
    if same_length:
        return Feat("tuple", elements=elements, reason=named)
    ends = [s.elements if s.kind == "tuple" else s.tail for s in (sa, sb)]  # matched from the end
    tail = tuple(merge(x, y) for x, y in zip(ends[0][::-1], ends[1][::-1]))[::-1]
    known_tail = tail if any(t.kind != "unknown" for t in tail) else ()  # nothing they end alike in
    return Feat("prefix", elements=elements, reason=named, tail=known_tail)


NAMED = "some path gives an object with fields"
"""The ``reason`` of a compound value that is a NamedTuple or an output object on some path: a field
read of it is not followed (another path's object may hold a field of the same name)."""


def _may_have_fields(value: Feat) -> bool:
    return (
        value.kind == "namedtuple" or value.reason == NAMED or (value.kind == "output" and bool(value.names))
    )


def _merged_output(a: Feat, b: Feat, merge: Callable[[Feat, Feat], Feat]) -> Feat:
    """An ``output`` value and another compound one a later read sees: the same class, field by field;
    else the one with fields (a read of a field fails on the other, a tuple) with the other kept as
    ``base``, which every index must agree with. Two different classes with fields: unknown."""
    if a.kind == b.kind == "output" and a.expr == b.expr and a.names == b.names:
        bases = [v.base for v in (a, b) if v.base is not None]
        base = bases[0] if len(bases) == 1 else merged(bases[0], bases[1], merge) if bases else None
        elements = tuple(merge(x, y) for x, y in zip(a.elements, b.elements))
        named = (
            NAMED if NAMED in (a.reason, b.reason) or (base is not None and _may_have_fields(base)) else ""
        )
        return dataclasses.replace(a, elements=elements, base=base, reason=named)
    first, other = (
        (a, b) if a.kind == "output" and (a.names or not (b.kind == "output" and b.names)) else (b, a)
    )
    if first.names and other.kind == "output" and other.names:
        return Feat.unknown("different objects on different paths")
    base = other if first.base is None else merged(first.base, other, merge)
    if base is None or base.kind == "unknown":
        return Feat.unknown("different objects on different paths")
    named = NAMED if first.reason == NAMED or _may_have_fields(base) else ""
    return dataclasses.replace(first, base=base, reason=named)


def unpacked(target: cst.Tuple | cst.List, value: Feat) -> list[tuple[cst.BaseExpression, Feat]]:
    """The value each target of ``a, b = value`` / ``a, *rest = value`` gets; unknown for all when the
    value's length is not known to match."""
    value = as_sequence(value)
    targets = list(target.elements)
    stars = [i for i, el in enumerate(targets) if isinstance(el, cst.StarredElement)]
    n = len(value.elements)
    if (
        value.kind != "tuple"
        or len(stars) > 1
        or (not stars and n != len(targets))
        or n < len(targets) - len(stars)
    ):
        return [(el.value, Feat.unknown("tuple unpacking")) for el in targets]
    if not stars:
        return [(el.value, v) for el, v in zip(targets, value.elements)]
    s = stars[0]
    tail = len(targets) - s - 1
    rest = Feat("tuple", elements=value.elements[s : n - tail])
    parts = [*value.elements[:s], rest, *value.elements[n - tail :]]
    return [(el.value, v) for el, v in zip(targets, parts)]


def agreed(returns: Sequence[Feat], merge: Callable[[Feat, Feat], Feat]) -> Feat | None:
    """What every return statement of a function agrees on: the one value when they are all equal, the
    element-wise agreement of compound values, else None."""
    if not returns:
        return None
    if all(r == returns[0] for r in returns):
        return returns[0]
    if all(r.rankless() == returns[0].rankless() for r in returns):  # the same size, ranks that differ
        return returns[0].rankless()
    out: Feat | None = returns[0]
    for r in returns[1:]:
        out = merged(out, r, merge) if out is not None else None
        if out is None or out.kind == "unknown":
            return None
    return out


def mapped(value: Feat, each: Callable[[Feat], Feat]) -> Feat:
    """``value`` with ``each`` applied to every element of a compound value (its kind and names kept;
    an ``output`` value's None elements stay None, and its other path's value is mapped too)."""
    if value.kind != "output":
        return dataclasses.replace(
            value, elements=tuple(each(e) for e in value.elements), tail=tuple(each(e) for e in value.tail)
        )
    elements = tuple(e if e == output_values.NONE else each(e) for e in value.elements)
    base = mapped(value.base, each) if value.base is not None and value.base.kind in COMPOUND else value.base
    return dataclasses.replace(value, elements=elements, base=base)


def merge_value(va: Feat, vb: Feat, config_test: str | None = None) -> Feat:
    """One value after two paths: itself when they agree, a ``choice`` on a config test when both are
    sized, the element-wise agreement of two tuples or objects, else unknown."""
    if va == vb:
        return va
    if va.rankless() == vb.rankless():  # the same size on both paths, of ranks that differ
        return va.rankless()
    if config_test is not None and va.kind in SIZED and vb.kind in SIZED:
        return Feat("choice", expr=config_test, elements=(va, vb))
    both = merged(va, vb, lambda x, y: merge_value(x, y, config_test))
    if both is not None:
        return both
    # unknown on one path only: that path's reason is the one to fix (`from call`, `from reshape`);
    # after a test of the config, marked: a trace sees one side's size only (ONE_SIDE)
    unknown = [v for v in (va, vb) if v.kind == "unknown" and not v.reason.startswith(DISAGREEING)]
    reason = unknown[0].reason if len(unknown) == 1 and unknown[0].reason else "differs between branches"
    number = reason in ("Integer", "Float")  # a number has no axis to size a layer: no side to mark
    return Feat.unknown(reason + (ONE_SIDE if config_test is not None and not number else ""))


#: The end of an unknown value's reason where the paths of a test of the config disagree (`if
#: self.double: x = f(x)`): the size depends on which way the test went, and a trace of one config
#: saw one way, so a field equal to its size is no evidence of the other.
ONE_SIDE = ", on one side of a config test"


def after_if(stmt: cst.If, then: dict[str, Feat], other: dict[str, Feat], unsure: Callable) -> dict:
    """The values after ``stmt`` (``then``: its body's; ``other``: its ``else``'s, or those before it).
    A branch that ends in ``return`` / ``raise`` reaches nothing after the ``if``: the other's values
    hold as they are. Else, where they differ: a ``choice`` on a test of the config (decided in
    ``__init__`` too) when both sides are sized, else unknown; a name one side leaves unbound has the
    other's value unless ``unsure()`` holds it (FeatureFlow.unsure)."""
    exits = leaves_function(stmt.body), leaves_function(stmt.orelse)
    if exits[0] != exits[1]:
        return other if exits[0] else then
    test, out = config_test(stmt.test), {}
    for k in then.keys() | other.keys():
        va, vb = then.get(k), other.get(k)
        if va is not None and vb is not None:
            out[k] = merge_value(va, vb, test)
        else:
            names = unsure()
            out[k] = Feat.unknown("differs between branches") if names is None or k in names else va or vb
    return out


def agreed_return(returns: Sequence[Feat]) -> Feat | None:
    """What a function's return statements agree on (see :func:`agreed`)."""
    return agreed(returns, merge_value)
