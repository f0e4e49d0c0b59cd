"""Which locals of a method are static where they are read (linen2nnx/migrate/static_locals.py)."""

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import assigned_names, code
from linen2nnx.migrate.static_locals import StaticLocals, without_dead_statements

METHOD = """
def __call__(self, x):
    shape = [self.n, self.m]
    made = make(shape, self.use_bias)
    if self.use_bias:
        w, b = made
    else:
        w = made
    w = self.param('w', lambda *_: w)
    wide = x.shape[0]
    if wide > 2:
        k = self.n
    y = x @ w
    if self.use_bias:
        init = zeros()
        b = self.param('b', init, (self.m,))
        y = y + b
    return y
"""


def _flow(src: str = METHOD) -> tuple[cst.FunctionDef, StaticLocals, dict]:
    fn = cst.parse_module(src).body[0]
    assert isinstance(fn, cst.FunctionDef)
    counts = assigned_names(fn)
    flow = StaticLocals(fn, counts, lambda v: "self.param" in code(v), {"x", "self"})
    pure = flow.extend({}, set())
    return fn, flow, pure


def test_tuple_unpacking_if_on_config_and_conditional_initializer_are_static():
    _, flow, pure = _flow()
    assert set(pure) == {"shape", "made", "w", "b", "init"}  # not `wide` (the input), not `k` (its test)
    assert flow.rebound == {"w", "b"}  # rebound to the parameters later
    assert [code(t) for t in flow.replay_tests[pure["init"]]] == ["self.use_bias"]


def test_a_rebound_local_is_static_only_before_its_call_time_binding():
    fn, flow, _ = _flow()
    parents: dict = {}
    todo: list[cst.CSTNode] = [fn]
    while todo:
        node = todo.pop()
        for child in node.children:
            parents[child] = node
            todo.append(child)
    calls = {}

    class Calls(FastVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            calls.setdefault(code(node.func), []).append(node)

    Calls().walk(fn)
    base = {"w", "b", "x", "wide", "k", "y"}
    at_param = flow.call_time_at(calls["self.param"][0], base, parents.get)
    assert "w" not in at_param  # `lambda *_: w` reads the static w
    matmul = next(n for n in parents if isinstance(n, cst.BinaryOperation) and code(n) == "x @ w")
    assert "w" in flow.call_time_at(matmul, base, parents.get)  # after `w = self.param(...)`


def test_dead_statements_go_only_when_every_name_is_rebound_before_a_read():
    rewritten = METHOD.replace("self.param('w', lambda *_: w)", "self.w[...]").replace(
        "self.param('b', init, (self.m,))", "self.b[...]"
    )  # the method as the rewrite leaves it: the parameters are read, no longer created
    fn, _, pure = _flow(rewritten)
    kept = without_dead_statements(fn, [pure["w"]])
    assert "w, b = made" not in code(kept)  # w rebound first, b rebound in the only branch reading it
    fn, _, pure = _flow(rewritten.replace("    return y\n", "    return y + b\n"))
    assert "w, b = made" in code(without_dead_statements(fn, [pure["w"]]))  # b read where not rebound
