"""Linen's count of auto-named modules before one built under config tests (auto_name_counts.py)."""

import libcst as cst

from linen2nnx.migrate.auto_name_counts import literal, never_together, stable_tests, static_count
from linen2nnx.migrate.cst_utils import assigned_names


def stable(_: str) -> bool:
    return True


def test_a_test_and_its_negation_read_as_one_test():
    assert literal("self.pre_norm") == ("self.pre_norm", True)
    assert literal("not (self.pre_norm)") == ("self.pre_norm", False)
    assert literal("not not self.a") == ("self.a", True)


def test_the_count_is_static_only_where_every_outcome_agrees():
    pre, post = ["self.pre_norm"], ["not self.pre_norm"]
    assert static_count([pre], post, stable) == 0  # the post norm is the first that runs
    assert static_count([pre, post], pre, stable) == 1  # the second pre norm follows the first only
    assert static_count([pre], [], stable) is None  # a norm built always: 0 or 1 before it
    assert static_count([pre, post], [], stable) == 1  # one of the switch's norms ran, either way


def test_a_test_that_is_not_one_value_throughout_relates_to_nothing():
    assert static_count([["use"]], ["not use"], lambda test: test != "use") is None


def test_never_together_needs_a_test_that_excludes():
    assert never_together(["self.a"], ["not (self.a)", "self.b"], stable)
    assert not never_together(["self.a"], ["self.b"], stable)


def test_a_parameter_bound_again_is_no_stable_test():
    fn = cst.parse_module(
        "def f(self, ids, embeds=None):\n"
        "    if embeds is None:\n"
        "        embeds = ids * 2\n"
        "    width = self.width\n"
        "    return embeds\n"
    ).body[0]
    stable = stable_tests(assigned_names(fn))
    assert not stable("embeds is None")  # reads otherwise after the `if` binds it
    assert stable("ids is None") and stable("width > 2") and stable("self.pre_norm")
