"""The size dataflow through tuples and output objects (``linen2nnx/migrate/tuple_flow.py``): what it
follows exactly, and what it leaves unknown because the source does not pin it down."""

import libcst as cst
import pytest
from flow_snippets import A, B, X
from flow_snippets import snippet_flow as _flow
from flow_snippets import snippet_qualnames as _qualnames

from linen2nnx.migrate.dataflow import Feat
from linen2nnx.migrate.tuple_flow import agreed_return, record_classes


@pytest.mark.parametrize(
    "body, expected",
    [
        ("t = (a, b)\ny = t[0]", A),
        ("t = (a, b)\ny = t[-1]", B),
        ("t = (a, x, b)\ny = t[1:][1]", B),
        ("t = (a, x, b)\n_, *r = t\ny = r[0]", X),
        ("t = (a, x, b)\n*r, y = t", B),
        ("t = (a,) + (b, x)\ny = t[2]", X),
        ("t = (a,)\nt += (b,)\n_, y = t", B),
        ("t = (a,)\nif flag:\n    t += (b,)\ny = t[0]", A),  # a prefix: the first element on both paths
        ("t = (a,) + (b, x)[1:]\ny = t[1]", X),
    ],
)
def test_elements_the_source_pins_down(body, expected):
    assert _flow(body).env["y"] == expected


@pytest.mark.parametrize(
    "body",
    [
        "t = (a, b)\ny = t[i]",  # an index held in a name
        "t = (a,)\nif flag:\n    t += (b,)\ny = t[1]",  # an element past the known ones
        "t = (a,)\nif flag:\n    t += (b,)\ny = t[-1]",  # from the end of a tuple of unknown length
        "t = (a,)\nif flag:\n    t += (b,)\ny, *r = t",  # starred unpacking of a tuple of unknown length
        "t = (a,)\nif flag:\n    t += (b,)\ny, z = t",
        "t = (a,) + x\ny = t[0]",  # a tuple plus an array broadcasts: no tuple at all
        "t = (a, b) * 2\ny = t[0]",
        "t = (a, b)\ny = t[::2][0]",  # a slice with a step
    ],
)
def test_elements_the_source_leaves_open_stay_unknown(body):
    assert _flow(body).env["y"].kind in ("unknown", "sliced")


RECORDS = """
@flax.struct.dataclass
class Out:
    hidden: object
    extra: object = None

class Pair(NamedTuple):
    first: object
    second: object

@flax.struct.dataclass
class Post:
    hidden: object
    def __post_init__(self):
        pass

@flax.struct.dataclass
class Derived(Base):
    hidden: object

@dataclasses.dataclass
class Hidden:
    hidden: object = dataclasses.field(init=False)

class Indexed(NamedTuple):
    first: object
    second: object
    def __getitem__(self, i):
        return self.second

class Iterated(NamedTuple):
    first: object
    def __iter__(self):
        return iter(())

class Sized(NamedTuple):
    first: object
    def __len__(self):
        return 0

@dataclasses.dataclass
class Lookup:
    hidden: object
    def __getattribute__(self, name):
        return None

@flax.struct.dataclass
class Helper:
    hidden: object
    def total(self):
        return self.hidden
"""


def test_only_plain_data_classes_are_followed():
    records = record_classes(cst.parse_module(RECORDS).body, _qualnames)
    assert {n: (r.fields, r.sequence) for n, r in records.items()} == {
        "Out": (("hidden", "extra"), False),
        "Pair": (("first", "second"), True),
        "Helper": (("hidden",), False),  # a plain method that is no dunder: still plain data
    }


@pytest.mark.parametrize(
    "body, expected",
    [
        ("o = Out(hidden=a)\ny = o.hidden", A),
        ("o = Out(a, b)\ny = o.extra", B),
        ("p = Pair(a, second=x)\ny = p[1]", X),
        ("p = Pair(a, x)\n_, y = p", X),
        ("p = Pair(a, x)\ny = p.first", A),
    ],
)
def test_fields_of_output_objects(body, expected):
    assert _flow(body, RECORDS).env["y"] == expected


@pytest.mark.parametrize(
    "body",
    [
        "o = Out(hidden=a)\ny = o.extra",  # left to its default
        "o = Out(hidden=a)\ny = o[0]",  # a dataclass is no sequence
        "o = Post(hidden=a)\ny = o.hidden",  # __post_init__ may change it
        "o = Out(**kw)\ny = o.hidden",
        "o = Out(hidden=a) if flag else (a,)\ny = o.hidden",
        "o = (a,)\nif flag:\n    o = Out(hidden=a)\ny = o.hidden",  # an object on one path, a tuple on the other
    ],
)
def test_fields_the_source_does_not_pin_down_stay_unknown(body):
    assert _flow(body, RECORDS).env["y"].kind in ("unknown", "sliced")


def test_returns_keep_what_they_agree_on():
    same = Feat("tuple", elements=(A, B))
    assert agreed_return([same, same]) == same
    assert agreed_return([same, Feat("tuple", elements=(A,))]) == Feat("prefix", elements=(A,))
    assert agreed_return([same, Feat("tuple", elements=(B, B))]) == Feat(
        "tuple", elements=(Feat.unknown("differs between branches"), B)
    )
    assert agreed_return([A, B]) is None  # two sizes on two paths: no agreement
    assert agreed_return([same, Feat("record", expr="Out", elements=(A,), names=("hidden",))]) is None


def test_a_conditional_tuple_keeps_what_both_sides_hold():
    flow = _flow("t = (a, x) if flag else (a,)\ny = t[0]\nz = t[1]")
    assert flow.env["y"] == A
    assert flow.env["z"].kind == "unknown"


@pytest.mark.parametrize(
    "body, last",
    [
        ("t = (b,)\nif flag:\n    t = (x,) + t\ny = t[-1]", B),  # both paths end in b
        ("t = (a, b) if flag else (b,)\ny = t[-1]", B),
        ("t = (a, x) if flag else (b,)\ny = t[-1]", None),  # they end differently
        ("t = (a, b) if flag else (b,)\ny = t[-2]", None),  # past the end they share
    ],
)
def test_tuples_of_two_lengths_keep_the_end_they_share(body, last):
    """HF DistilBERT's block returns ``(h,)`` or ``(weights, h)``: ``layer_outputs[-1]`` is ``h``."""
    y = _flow(body).env["y"]
    assert y == last if last is not None else y.kind == "unknown"


@pytest.mark.parametrize(
    "body, known",
    [
        ("t = (a, *(x, b))\ny = t[2]", True),
        ("t = (a, *(x, b))\n_, _, y = t", True),
        ("r = (x,)\nif flag:\n    r += (b,)\nt = (a, *r)\ny = t[1]", True),  # a prefix spliced: still known
        ("t = (a, *r, b)\ny = t[0]", True),  # before a starred value of unknown length
        ("t = (a, *r, b)\ny = t[1]", False),  # after it: unknown
        ("t = (a, *r, b)\ny = t[-1]", False),
    ],
)
def test_starred_elements_of_a_display(body, known):
    y = _flow(body).env["y"]
    assert (y.kind in ("expr", "input")) == known


@pytest.mark.parametrize(
    "body",
    [
        "outs = [x]\nouts[0] = a\ny = outs[0]",  # an element replaced
        "outs = [x, a]\nouts.reverse()\ny = outs[0]",  # any method may change it
        "outs = [x]\nouts.insert(0, a)\ny = outs[0]",
        "outs = [x]\nfor i in range(2):\n    outs.append(a)\ny = outs[-1]",
        "outs = [x]\nouts.append(a)\ny = outs[-1]",
        "outs = [x, x]\ndel outs[0]\nouts.append(a)\ny = outs[1]",
        "outs = []\nouts.append(a)\nouts = [x] + outs\ny = outs[-1]",
        "outs = [x]\nfill(outs)\ny = outs[0]",  # a call that may change what it receives
        "outs = [x]\ndef more():\n    outs.append(a)\nmore()\ny = outs[-1]",  # a nested function
        "outs = [x]\nb = outs\nb[0] = a\ny = outs[0]",  # through another name for the same list
        "outs = [x]\nb = outs\nc = b\nc.append(a)\ny = outs[-1]",
        "outs = [x]\nb = outs\nouts += [a]\ny = b[-1]",  # += extends the list both names hold
        "outs = [[x]]\ninner = outs[0]\ninner[0] = a\ny = outs[0][0]",  # a list inside a list
        "outs = [[x]]\nfill(outs[0])\ny = outs[0][0]",
        "outs = [[x]]\nouts[0].append(a)\ny = outs[0][-1]",
        "outs = [[x]]\nz = [o.append(a) for o in outs]\ny = outs[0][-1]",  # through a comprehension
        "outs = [x]\nif (b := outs):\n    b.append(a)\ny = outs[-1]",  # through a walrus
        "outs = [x]\nd = {'k': outs}\nd['k'][0] = a\ny = outs[0]",  # through a dict that holds it
        "outs = [x]\nd = {'k': outs}\nd['k'].append(a)\ny = outs[-1]",
        "outs = [x]\npair = (outs, x)\npair[0].append(a)\ny = outs[-1]",
        "o = Out(hidden=x)\no.hidden = a\ny = o.hidden",  # a field of an object replaced
        "o = Out(hidden=x)\no.update()\ny = o.hidden",
        "outs = [x]\no = Out(hidden=outs)\no.hidden.append(a)\ny = outs[-1]",  # through the object holding it
        "outs = [x]\no = Out(hidden=outs)\nfill(o)\ny = outs[0]",
    ],
)
def test_lists_and_objects_changed_in_place_stay_unknown(body):
    """What a list or object was built with is not what it holds once something changes it in place."""
    assert _flow(body, RECORDS).env["y"].kind in ("unknown", "sliced")


@pytest.mark.parametrize(
    "body, expected",
    [
        ("t = (a, b)\nh, _ = t\nh = h.reshape(1)\ny = t[1]", B),  # a method of an element: t unchanged
        ("o = Out(a, b)\nh = o.hidden\nh = h.astype(1)\ny = o.extra", B),
        ("o = Out(a, b)\nz = f(o.hidden)\ny = o.extra", B),  # an element passed on: a size, no list
        ("outs = [a, b]\nz = len(outs)\ny = outs[1]", B),
        ("outs = (a, b)\no = Out(hidden=outs)\ny = outs[1]", B),  # a data class holds it, as a tuple does
        ("outs = [a, b]\no = Out(hidden=outs, extra=x)\ny = (outs[1], o)[0]", B),
    ],
)
def test_reads_of_unchanged_lists_and_objects_stay_known(body, expected):
    assert _flow(body, RECORDS).env["y"] == expected


@pytest.mark.parametrize("name", ["Indexed", "Iterated", "Sized", "Lookup"])
def test_classes_with_dunders_are_no_plain_data(name):
    """``__getitem__``, ``__iter__``, ``__len__``, ``__getattribute__``: indexing, unpacking or a field
    read need not give the field as passed."""
    assert name not in record_classes(cst.parse_module(RECORDS).body, _qualnames)


HF_RECORDS = """
@flax.struct.dataclass
class HFOut(ModelOutput):
    last: object = None
    pooled: object = None
    hidden: object = None

@flax.struct.dataclass
class Other(ModelOutput):
    last: object = None

class Named(NamedTuple):
    last: object

@flax.struct.dataclass
class Required(ModelOutput):
    last: object
    pooled: object = None
"""


def test_model_output_classes_index_their_fields_not_none():
    records = record_classes(cst.parse_module(HF_RECORDS).body, _qualnames)
    assert records["HFOut"].model_output and records["HFOut"].none_defaults == ("last", "pooled", "hidden")
    assert records["Required"].none_defaults == ("pooled",)


@pytest.mark.parametrize(
    "body, expected",
    [
        ("o = HFOut(last=a, pooled=None)\ny = o[0]", A),
        ("o = HFOut(last=a, pooled=b)\ny = o[1]", B),
        ("o = HFOut(pooled=b)\ny = o[0]", B),  # last left to its None default: skipped
        ("o = HFOut(None, b)\ny = o[0]", B),
        ("o = HFOut(last=a, pooled=b)\ny = o[-1]", B),  # every field decided: from the end too
        ("o = HFOut(last=a, pooled=b)\ny = o.pooled", B),
        ("o = HFOut(last=a, pooled=b)\ny = o[1:][0]", B),
        ("o = HFOut(last=a) if flag else (a, b)\ny = o[0]", A),  # a tuple on the other path agrees
        ("o = (a,)\nif flag:\n    o = HFOut(last=a, pooled=x)\ny = o.pooled", X),  # a tuple has no field
        ("t = (a, b)\ny = tuple(v for v in t if v is not None)[1]", B),
        ("t = (a, x)\no = tuple(v for v in t if v is not None) if flag else HFOut(last=a)\ny = o[0]", A),
        ("h = a[:, 0, :]\ny = h", A),  # the last index a bare `:`: the last axis is untouched
        ("y = a[..., :]", A),
        ("y = x[idx, :]", X),
    ],
)
def test_model_outputs_and_indexes_the_source_pins_down(body, expected):
    assert _flow(body, HF_RECORDS).env["y"] == expected


@pytest.mark.parametrize(
    "body",
    [
        "o = HFOut(last=x, pooled=b)\ny = o[1]",  # an input may be None: the next field may be first
        "o = HFOut(last=a, pooled=b if flag else None)\ny = o[1]",
        "o = HFOut(last=a, pooled=b if flag else None)\ny = o[-1]",
        "o = HFOut(last=a, pooled=z)\ny = o[1]",  # z unknown
        "o = HFOut(last=a)\ny = o.pooled",  # None
        "o = HFOut(last=a)\ny = o[1]",  # past the fields not None
        "o = Required(pooled=a)\ny = o[0]",  # last left to a default that is not None
        "o = HFOut(last=a) if flag else (b,)\ny = o[0]",  # the paths disagree
        "o = HFOut(last=a)\ny, = o",  # a ModelOutput iterates its keys
        "o = HFOut(last=a) if flag else Other(last=a)\ny = o.last",  # two classes
        "o = HFOut(last=a) if flag else Named(x)\ny = o.last",  # a NamedTuple has fields too
        "o = Named(x) if f else (a,)\no = HFOut(last=a) if flag else o\ny = o.last",
        "o = Named(x) if f else (a,)\no = HFOut(last=a) if flag else o\no = o if g else HFOut(last=a)\ny = o.last",
        "o = HFOut(last=a)\ny = o[i]",
        "t = (a, b)\ny = tuple(v for v in t if v)[0]",  # not a test of None
        "t = (x, b)\ny = tuple(v for v in t if v is not None)[1]",
        "t = (a, None, b)\ny = tuple(v for v in t if v is not None)[1]",  # a None in a display: not followed
        "y = a[:, 0]",  # on a value of rank 2 this indexes the last axis
        "y = a[..., 0]",
        "y = a[:, 1:]",  # slices the last axis of a value of rank 2
        "y = a[:, None]",
    ],
)
def test_model_outputs_and_indexes_the_source_leaves_open_stay_unknown(body):
    assert _flow(body, HF_RECORDS).env["y"].kind in ("unknown", "sliced")
