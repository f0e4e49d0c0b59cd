"""Codemod in/out fixture pairs: exact output, idempotency, and the findings each case must raise."""

from pathlib import Path

import pytest

from linen2nnx.migrate import Severity, migrate_source

FIXTURES = Path(__file__).parent / "fixtures" / "migrate"
CASES = sorted(p.name.removesuffix("_in.py") for p in FIXTURES.glob("*_in.py"))

# Manual findings each case must report (and no others): a silent conversion is a bug.
EXPECTED_MANUAL = {
    "compact_cnn": {"L2N-SHAPE-003"},  # Dense after a flatten, no trace
    "compact_dense": set(),  # self.param shaped by x.shape[-1], a param under a config `if`, from-imports
    "compact_loop": set(),  # loop-built submodules, a user submodule, a config local replayed in __init__
    "compact_param": set(),
    "compact_partitioned": set(),  # nn.with_logical_partitioning -> nnx.with_partitioning
    "compact_seq_loop": set(),  # loops over a config list (-> enumerate) and range() with per-layer widths
    # auto-named layers after a loop of their class extend its nnx.List; one under a condition is kept as Linen
    "compact_loop_tail": {"L2N-MOD-004", "L2N-MOD-007"},
    "compact_matmul": {"L2N-SHAPE-003"},  # x @ w / jnp.dot / lax.dot_general with own params; x @ y stays unknown
    "compact_shape_local": set(),  # `out = x.shape[-1] if ... else ...` replayed in __init__, merge_param
    "compact_branch_layer": set(),  # a layer local bound per `if` branch: own nn.Embed or a shared one
    "compact_tied": set(),  # local-bound embed reused by .attend, a dropout called later, a sown metric
    "field_kinds": set(),  # kw_only required field after a defaulted one; init=False field
    "import_alias": set(),
    "inheritance": set(),
    "bridge_fallback": {"L2N-API-002", "L2N-MOD-007"},
    "class_value": {"L2N-MOD-004"},
    "factory_field_block": set(),  # module-factory fields followed to their bindings; a shortcut under a shape test
    "partial_local": set(),  # local partials of a layer and of a class of the run, each use a submodule; name="if" -> self.if_
    "custom_cell": set(),  # nn.RNNCellBase subclass in nn.RNN(split_rngs={'params': False, 'dropout': True})  # partial(Head, ...) handed to a helper in @nn.compact: built at call time  # Linen scope API: kept as Linen, the parent is NNX
    "manual_api": {"L2N-API-002", "L2N-MOD-007"},
    # self.conv(...)(x) with `conv: ModuleDef`: both classes kept as Linen; the bridged parent builds BlockLinen
    "factory_field": {"L2N-SHAPE-003"},  # factory fields bound by callers; a mean over axes (1, 2) needs a trace
    "factory_field_bridged": {"L2N-MOD-004", "L2N-MOD-007"},  # a kept-Linen class gets Linen copies of what it builds
    "flatten_input": set(),  # a flatten of the input: the input's shape becomes a constructor argument
    "factory_field_stages": set(),  # blocks of several classes built in nested loops; a mode partial via nnx.view
    "not_flax": set(),
    "setup_list": {"L2N-SHAPE-003"},  # layers applied in a loop over a list: sizes unknown statically
    "setup_mlp": set(),
    "setup_conditional": set(),  # a submodule under `if`, a helper method the dataflow follows
    "setup_param": set(),
    "transform_scan_layers": set(),  # nn.remat inside nn.scan, or an unrolled remat loop: one `layers` attribute
    "transform_scan_time": set(),  # a cell scanned over time (params broadcast), the carry sized by jnp.zeros
    # @functools.partial(nn.scan, ...) on a method -> nnx.scan of a step method; per-step dropout keys kept Linen
    "transform_scan_method": {"L2N-XFORM-002", "L2N-MOD-007"},
    "transform_vmap": set(),
    "partitioning_api": {"L2N-PART-003"},  # axis_rules renamed, unbox calls simplified, get_partition_spec flagged
    "transform_functions": {"L2N-XFORM-002"},  # remat / broadcast scan of functions converted; a stacked one not  # an nn.vmap ensemble of a built-in layer
    "transform_unsupported": {"L2N-XFORM-002"},  # (uses the run's Counter: cannot stay Linen, so no bridge)  # variable_carry: reported, left as is
    "factory_method": set(),  # helper methods returning layers: one submodule per call, the helper removed
    "lazy_cache": set(),  # a cache created on the first call; has_variable -> hasattr
    "attention_decode": set(),  # MHA(decode=cfg.decode): init_cache on the first call, as Linen's init call
    "input_shape": set(),  # a kernel sized from several input axes: an inputs_shape argument
    "tuple_helpers": set(),  # tuple results, a module-level helper, a second method reusing a submodule
    "train_state": set(),  # TrainState + jitted init + dropout rngs -> nnx.Optimizer on the split (graphdef, state)
    "train_batch_stats": set(),  # mutable batch_stats, replace, `new = old.apply_gradients(...)`, a local state read
    "train_apply": set(),  # init / apply without a TrainState: rngs dict, method=, an inline init
    "train_manual": {"L2N-TRAIN-008", "L2N-TRAIN-009"},  # custom TrainState field, apply on unknown params
    "train_init_size": {"L2N-SHAPE-003", "L2N-TRAIN-010"},  # a constructor size init cannot give
    "train_sharded": set(),  # MaxText recipe: eval_shape'd init, named shardings, logical specs, decode cache
}


def test_every_case_has_expectations():
    assert set(CASES) == set(EXPECTED_MANUAL)


@pytest.mark.parametrize("case", CASES)
def test_fixture_output(case):
    src = (FIXTURES / f"{case}_in.py").read_text()
    expected = (FIXTURES / f"{case}_out.py").read_text()
    result = migrate_source(src, f"{case}_in.py")
    assert result.output == expected
    compile(result.output, f"{case}_out.py", "exec")
    manual = {f.rule for f in result.findings if f.severity is Severity.MANUAL}
    assert manual == EXPECTED_MANUAL[case]
    # every manual finding leaves exactly one inline marker naming its rule
    for rule in manual:
        assert f"# TODO(linen2nnx): {rule}" in result.output


@pytest.mark.parametrize("case", CASES)
def test_second_run_changes_nothing(case):
    once = migrate_source((FIXTURES / f"{case}_in.py").read_text(), "x.py").output
    twice = migrate_source(once, "x.py").output
    assert twice == once


def test_identical_linen_names_are_repointed_to_nnx():
    out = migrate_source((FIXTURES / "compact_param_in.py").read_text(), "m.py").output
    assert "import flax.linen" not in out and "nnx.initializers.ones(rngs.params()" in out


def test_findings_are_located():
    result = migrate_source((FIXTURES / "compact_cnn_in.py").read_text(), "cnn.py")
    shape = [f for f in result.findings if f.rule == "L2N-SHAPE-003"]
    assert [(f.path, f.line) for f in shape] == [("cnn.py", 13)]
    assert shape[0].format_text().startswith("cnn.py:13:13: L2N-SHAPE-003 [manual]")


def test_kept_linen_class_markers_are_not_reworded_by_a_second_run():
    """A second run sees the kept class as ``<Name>Linen``: its findings name that class, but the
    statement already carries a marker of the same rule, so nothing is added."""
    src = (
        "import jax.numpy as jnp\nfrom flax import linen as nn\n\n\n"
        "class Head(nn.Module):\n"
        "    @nn.compact\n"
        "    def __call__(self, x):\n"
        "        kernel = self.get_variable('params', 'k')\n"
        "        return nn.Dense(3)(jnp.mean(x, axis=1)) + kernel\n"
    )
    once = migrate_source(src, "x.py").output
    assert "class HeadLinen(nn.Module)" in once and once.count("L2N-SHAPE-003") == 1
    assert migrate_source(once, "x.py").output == once
