"""The size dataflow through dicts (``linen2nnx/migrate/mapping_flow.py``): a dict display or one filled
key by key keeps the size of each entry under a literal key, in order; what may replace an entry (a
key the source does not spell out, an in-place change the flow does not follow) makes it unknown."""

import dataclasses

import pytest
from flow_snippets import A, B, X
from flow_snippets import snippet_flow as _flow

from linen2nnx.migrate.applications import one_size
from linen2nnx.migrate.dataflow import Feat


@pytest.mark.parametrize(
    "body, expected",
    [
        ("d = {'h': a, 'p': b}\ny = d['h']", A),
        ('d = {"h": a}\ny = d["h"]', A),  # either quote
        ("d = {'h': a, 'h': b}\ny = d['h']", B),  # a repeated key: the last one wins
        ("d = {}\nd['h'] = a\ny = d['h']", A),
        ("d = {'h': x}\nd['h'] = a\ny = d['h']", A),  # replaced: the new value
        ("d = {'h': a}\ny = d['h']\nd['h'] = b", A),  # a store after the read does not reach back
        ("d = {'h': a}\nd['p'] = b\ny = d['h']", A),  # another key left alone
        ("d = {}\nd['stem'] = a\nfor i in range(2):\n    d[f'stage{i}'] = b\ny = d['stem']", A),
        ("d = {'s': a}\nd[f'stage{i}'] = b\nd['s'] = x\ny = d['s']", X),  # stored again after
        ("y = d['h'] = a", A),
        ("d = {'h': a}\nz = d['h'] = b\ny = d['h']", B),
        ("t = ({'h': a}, b)\nd, _ = t\ny = d['h']", A),  # a dict inside a tuple
        ("d = {'h': a} if flag else {'h': a, 'p': b}\ny = d['h']", A),  # both paths hold it
        ("d = {'h': a}\nif flag:\n    d['p'] = b\ny = d['h']", A),
    ],
)
def test_entries_the_source_pins_down(body, expected):
    assert _flow(body).env["y"] == expected


@pytest.mark.parametrize(
    "body",
    [
        "d = {'h': a}\ny = d['p']",  # a key it does not hold
        "d = {'h': a}\ny = d[k]",  # a key held in a name
        "d = {'h': a}\nd[k] = b\ny = d['h']",  # a store under a key that may be 'h'
        "d = {'h': a}\nd[f'{k}'] = b\ny = d['h']",
        "d = {'stage': a}\nd[f'stage{i}'] = b\ny = d['stage']",  # the f-string may spell it
        "d = {'h': a, **rest}\ny = d['h']",  # ** entries may replace it
        "d = {k: a}\ny = d['h']",
        "d = {'h': a}\nd.update(h=b)\ny = d['h']",  # any method may change it
        "d = {'h': a}\ndel d['h']\nd['p'] = b\ny = d['h']",
        "d = {'h': a}\nd['h'] += b\ny = d['h']",
        "d = {'h': a}\nfill(d)\ny = d['h']",  # a call that may change what it receives
        "d = {'h': a}\ne = d\ne['h'] = b\ny = d['h']",  # through another name for the same dict
        "d = {'h': a}\ne = d\nd['h'] = b\ny = e['h']",
        "d = {'h': a}\ndef more():\n    d['h'] = b\nmore()\ny = d['h']",  # a nested function
        "d = {'h': a}\nif flag:\n    d['h'] = b\ny = d['h']",  # another value on one path
        "d = {'h': a} if flag else (a, b)\ny = d['h']",  # a dict on one path only
        "d = {'h': a}\ny = d.h",  # no attribute reads of a dict
        "d = {'h': a}\nh, = d\ny = h",  # unpacking gives keys
        "d = {'h': a}\ny = (d + (b,))[0]",
    ],
)
def test_entries_the_source_leaves_open_stay_unknown(body):
    assert _flow(body).env["y"].kind in ("unknown", "sliced")


def test_a_block_returning_a_dict_gives_its_entries_to_the_caller():
    """What every return statement agrees on: the keys both hold."""
    flow = _flow("if flag:\n    return {'h': a, 'p': b}\nreturn {'h': a}")
    assert [r.names for r in flow.returns] == [("h", "p"), ("h",)]
    from linen2nnx.migrate.tuple_flow import agreed_return

    assert agreed_return(flow.returns) == Feat("mapping", elements=(A,), names=("h",))


OTHER = Feat.unknown("a reduction over leading axes of a value of unknown rank")
BRANCH, LOOP = (1, 0), (2, 0)


@pytest.mark.parametrize(
    "applied, expected",
    [
        ([(A, ()), (OTHER, ())], A),  # the known size first, on the same path
        ([(A, ()), (OTHER, (BRANCH,))], A),  # the unknown one inside a branch the known one encloses
        ([(X, (LOOP,)), (OTHER, (LOOP, BRANCH))], X),
        ([(A, ()), (A, ()), (OTHER, ())], A),
        ([(A, ()), (B, ())], A),  # two known sizes: the second runs only where it equals the first
        ([(A, ()), (X, (BRANCH,))], A),
    ],
)
def test_a_known_size_that_ran_first_is_the_modules(applied, expected):
    assert one_size(applied) == expected


@pytest.mark.parametrize(
    "applied",
    [
        [(OTHER, ()), (A, ())],  # the unknown one first: an early return may skip the known one
        [(A, (BRANCH,)), (OTHER, ())],  # the known one in a branch that may not run
        [(A, ((1, 0),)), (OTHER, ((1, 1),))],  # if / else: either may be the only one to run
        [(OTHER, ()), (A, ()), (B, ())],  # two known sizes after an unknown first one
        [(A, (BRANCH,)), (X, ())],  # the first known in a branch that may not run
        [(A, ()), (Feat.unknown("applications disagree: elsewhere"), ())],
    ],
)
def test_sizes_that_may_differ_disagree(applied):
    """Never taken from a trace: it shows the size of one config only."""
    assert one_size(applied).reason.startswith("applications disagree:")


def test_applications_all_of_unknown_size_leave_one_size_for_a_trace():
    """One module has one input size: where no application's is known, a trace's is the module's."""
    sliced = Feat("sliced", base=A)
    one = one_size([(sliced, ()), (OTHER, ((1, 0),))])
    assert one.kind == "unknown" and not one.reason.startswith("applications disagree:")
    with_candidate = Feat("unknown", reason="stacked", candidate=A)
    assert (
        one_size([(with_candidate, ()), (dataclasses.replace(with_candidate, reason="other"), ())]).candidate
        == A
    )
    assert one_size([(with_candidate, ()), (OTHER, ())]).candidate is None


LEAF = """import flax.linen as nn


class M(nn.Module):
    @nn.compact
    def __call__(self, batch):
{body}
"""


def _leaf_sizes(body: str) -> tuple[dict[str, str], list[str]]:
    from linen2nnx.migrate import migrate_source

    lines = "\n".join("        " + line for line in body.strip().splitlines())
    result = migrate_source(LEAF.format(body=lines), "m.py", module_name="m")
    manual = [f.rule for f in result.findings if f.severity.value == "manual"]
    return result.name_map.classes["m.M"].new_args, manual


@pytest.mark.parametrize(
    "body",
    [
        "return nn.Dense(3)(batch['image'])",
        "out = {}\nout['h'] = nn.Dense(8)(batch['image'])\nreturn nn.Dense(3)(out['h'])",  # its own dict
    ],
)
def test_an_input_entry_read_by_a_literal_key_is_a_constructor_argument(body):
    new_args, manual = _leaf_sizes(body)
    assert new_args == {"batch_image_features": "input_leaf:0:['image']"} and manual == []


@pytest.mark.parametrize(
    "body",
    [
        "batch['image'] = nn.Dense(8)(batch['image'])\nreturn nn.Dense(3)(batch['image'])",  # replaced
        "b = batch\nb['image'] = nn.Dense(8)(batch['image'])\nreturn nn.Dense(3)(batch['image'])",
        "preprocess(batch)\nreturn nn.Dense(3)(batch['image'])",  # a call that may change it
        "batch.update(image=batch['image'] * 2)\nreturn nn.Dense(3)(batch['image'])",
        "del batch['other']\nreturn nn.Dense(3)(batch['image'])",
        "return nn.Dense(3)(batch[key])",  # a key the source does not spell out
        "return nn.Dense(3)(batch['not-a-name'])",
    ],
)
def test_an_input_entry_that_may_have_been_replaced_stays_a_finding(body):
    new_args, manual = _leaf_sizes(body)
    assert not any(how.startswith("input_leaf:") for how in new_args.values()) and manual


DICT_RETURN = """import flax.linen as nn
{binding}

class Body(nn.Module):
    @nn.compact
    def __call__(self, x):
        return dict(hidden=nn.Dense(6)(x), aux=None)


class Head(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(Body()(x)["hidden"])
"""


@pytest.mark.parametrize(
    "binding, sized",
    [("", True), ("def dict(**kw):\n    return list(kw.values())\n", False), ("from foo import dict", False)],
)
def test_a_builtin_dict_call_is_a_display(binding, sized):
    """``dict(hidden=h, aux=None)`` of the builtin holds its keywords' values, as ``{'hidden': h}``
    does; a ``dict`` the file binds may be anything."""
    from linen2nnx.migrate import migrate_source

    result = migrate_source(DICT_RETURN.format(binding=binding), "m.py", module_name="m")
    manual = [f.message for f in result.findings if f.severity.value == "manual"]
    assert (manual == []) is sized, manual
    assert ("nnx.Linear(6, 3" in (result.output or "")) is sized


def test_one_size_read_from_values_of_several_ranks_is_that_size():
    """A projection applied before one reshape and after another (diffusers' proj_in) reads one size."""
    rank3, rank4 = Feat("input", input_name="x", rank=3), Feat("input", input_name="x", rank=4)
    assert one_size([(rank3, ((1, 0),)), (rank4, ((1, 1),))]) == Feat("input", input_name="x")
