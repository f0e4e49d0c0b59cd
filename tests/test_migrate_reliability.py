"""The reliability floor of migrate on real-world shapes of code: whatever it cannot convert, its
output parses, a second run changes nothing, and it never fails (exit 2) on a file Python can parse."""

import ast
import textwrap

import hypothesis
from hypothesis import strategies as st

from linen2nnx.migrate import Severity, migrate_source
from linen2nnx.migrate.sites import MARKER

MULTI_LINE = textwrap.dedent(
    """
    import flax.linen as nn


    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            y = nn.scan(
                nn.map_variables(
                    nn.Dense,
                    "params",
                    lambda v: v,
                ),
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=2,
            )(4)(x)
            return y
    """
)


def _errors(result) -> list:
    return [f for f in result.findings if f.severity is Severity.ERROR]


def test_a_multi_line_expression_in_a_marker_becomes_one_comment_line():
    result = migrate_source(MULTI_LINE, "stack.py")
    assert not _errors(result)
    ast.parse(result.output)
    markers = [line for line in result.output.splitlines() if MARKER in line]
    scan = [m for m in markers if "XFORM-002 nn.scan" in m]
    assert scan and 'nn.scan(nn.map_variables( nn.Dense, "params", lambda v: v, ), ...)' in scan[0]
    assert migrate_source(result.output, "stack.py").output == result.output


@hypothesis.settings(max_examples=40, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
@hypothesis.given(
    names=st.lists(
        st.text(
            alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12
        ),
        min_size=1,
        max_size=4,
        unique=True,
    )
)
def test_any_name_string_gives_valid_unique_attributes(names):
    """``name=`` may be any string in Linen; the output always parses, runs twice to the same text, and
    gives each module its own attribute."""
    layers = "\n".join(f"        x = nn.Dense(4, name={name!r})(x)" for name in names)
    source = f"import flax.linen as nn\n\n\nclass M(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n{layers}\n        return x\n"
    result = migrate_source(source, "m.py")
    assert not _errors(result), [f.format_text() for f in result.findings]
    tree = ast.parse(result.output)
    attrs = [
        t.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    ]
    assert len(attrs) == len(set(attrs)) >= len(names)
    assert migrate_source(result.output, "m.py").output == result.output
    children = result.name_map.classes["M"].children if "M" in result.name_map.classes else {}
    assert set(names) <= set(children), (names, children)


def test_setup_names_reach_the_name_map():
    source = textwrap.dedent(
        """
        import flax.linen as nn


        class Net(nn.Module):
            def setup(self):
                self.head = nn.Dense(3, name="head-out")
                self.blocks = [nn.Dense(3, name="b.0"), nn.LayerNorm()]

            def __call__(self, x):
                return self.head(self.blocks[1](self.blocks[0](x)))
        """
    )
    children = migrate_source(source, "net.py", module_name="net").name_map.classes["net.Net"].children
    assert children["head-out"].attr == "head"
    assert (children["b.0"].attr, children["b.0"].linen_class) == ("blocks/0", "flax.linen.Dense")
    assert (children["blocks_1"].attr, children["blocks_1"].linen_class) == (
        "blocks/1",
        "flax.linen.LayerNorm",
    )


def test_a_run_leaves_the_garbage_collector_as_it_found_it(tmp_path, monkeypatch):
    """During a run the collector skips what the run keeps (gc_tuning); after it, the thresholds are
    the caller's again and nothing stays frozen, also when the run fails half-way."""
    import gc

    import pytest

    from linen2nnx.migrate import engine, gc_tuning

    (tmp_path / "model.py").write_text(MULTI_LINE)
    gc.unfreeze()
    before = gc.get_threshold()
    seen: list[tuple] = []
    real_settle = gc_tuning.settle

    def settle() -> None:
        seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
        real_settle()

    monkeypatch.setattr(gc_tuning, "settle", settle)
    engine.migrate_paths([tmp_path], engine.Mode.CHECK, jobs=1)
    assert seen == [(max(before[0], gc_tuning.YOUNG_THRESHOLD), True)]
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

    def broken_run(work, jobs, on_file, options):
        yield engine._migrate_file((*work[0], {}, {}), options)  # one file done (settled), then a failure
        raise RuntimeError("a failure half-way through the run")

    monkeypatch.setattr(engine, "_run", broken_run)
    with pytest.raises(RuntimeError, match="half-way"):
        engine.migrate_paths([tmp_path], engine.Mode.CHECK, jobs=1)
    assert len(seen) == 2 and gc.get_threshold() == before and gc.get_freeze_count() == 0
