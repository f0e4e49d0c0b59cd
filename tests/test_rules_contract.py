"""The rule catalogue and the codemod fixtures agree: every rule is shown by a fixture, every fixture
says what it shows, and every runnable fixture is checked numerically.

A rule nobody can trigger is dead documentation; a finding a fixture does not declare is a change
nobody reviewed. Fixtures live under the rule they are mainly about (tests/fixture_paths.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fixture_paths import FIXTURES, NO_FINDINGS_DIR, all_cases
from migrate_fixtures import migrate_case

from linen2nnx.migrate import migrate_source
from linen2nnx.migrate.rules import RULES

TESTS = Path(__file__).parent

# Rules no text fixture can show, each with the test that triggers it. A syntax error would make the
# fixture input fail the repo's lint and has no output to compare; the others need bytes, a file
# system or a bug.
EXEMPT = {
    "L2N-IO-001": "test_migrate_cli.py::test_syntax_error_is_named_and_others_still_migrate",
    "L2N-IO-002": "test_migrate_cli.py::test_undecodable_file_is_named",
    "L2N-IO-003": "test_migrate_cli.py::test_unwritable_output_is_named",
    "L2N-IO-004": "test_rules_contract.py::test_an_internal_error_is_reported_and_the_file_left_alone",
    # a default that reads a name of another file's module: a base class there, which one text cannot hold
    "L2N-VERIFY-008": "test_verify.py::test_an_init_default_reading_a_name_the_file_does_not_bind_is_reported",
    # a trace build that needs a broken model
    "L2N-VERIFY-010": "test_verify.py::test_trace_reports_a_model_that_does_not_build",
}

# Test files whose numeric parity tests run fixtures: a case counts as covered when one of them names it.
PARITY_TESTS = (
    "test_module_forms_parity.py",
    "test_norm_masks.py",
    "test_sequence_fields.py",
    "test_caller_sizes.py",
    "test_transforms_parity.py",
    "test_layer_parity.py",
    "test_training_parity.py",
    "test_train_loop_migration.py",
    "test_compact_names_parity.py",
    "test_partitioning.py",
    "test_param_with_axes_parity.py",
    "test_model_output_parity.py",
    "test_attention_parity.py",
    "test_gin_configurable.py",
    "test_key_replay.py",
    "test_init_writes.py",
)

# Fixture cases with no numeric parity test, and why none can be written.
NOT_RUNNABLE = {
    "deleted_field": "manual finding: the class stays Linen behind the bridge (each apply a fresh copy, as in Linen)",
    "attention_decode_unpacked": "manual findings: the classes stay Linen behind the bridge, nothing is rewritten",
    "bridged_scan_record": "manual findings: the class stays Linen behind the bridge, nothing is rewritten",
    "subclass_of_held_base": "manual findings: the base stays Linen behind the bridge; the subclass does not build",
    "factory_list_elements": "manual findings: the classes stay Linen behind the bridge, nothing is rewritten",
    "outside_factory_function": "imports a package that is not there (dopamine_like); manual findings",
    "class_chosen_by_condition": "manual findings: the blocks are built the Linen way (the verifier's markers)",
    "compact_class_choice_kept": "manual findings: the blocks are built the Linen way (the verifier's markers)",
    "with_context_creation": "manual findings: the class stays Linen behind the bridge, nothing is rewritten",
    "compact_method_input_shape": "manual findings: the class stays Linen behind the bridge, nothing is rewritten",
    "unpacked_changed_dict": "manual finding: a dict changed at call time, unpacked into a class of the run",
    "optional_input_refused": "manual findings: every class stays Linen behind the bridge, nothing is rewritten",
    "auto_names_across_methods": "manual findings: the class stays Linen behind the bridge, nothing is rewritten",
    "module_handed_on": "manual findings: the training code stays in its Linen form",
    "apply_foreign_method": "manual finding: apply's method is a function of a class outside the run",
    "unfollowed_receiver": "manual findings: Linen init / apply on models built where the rewrite cannot follow",
    "scan_function_default_axis": "manual finding: a scanned function with a default and one in_axes for all",
    "nested_layer_in_loop": "manual findings: a layer built in another's argument in a loop (names the map cannot pair)",
    "stack_axes": "manual findings: stacks NNX cannot lay out as Linen, and keywords Linen ignores at a scan's call",
    "pytree_param": "manual findings: parameters whose initializer returns several arrays",
    "attention_fn_custom": "manual findings: attention functions written for Linen's call",
    "dot_general_custom": "manual findings: dot_general / conv functions written for Linen's call",
    "nnx_differs": "manual findings: arguments whose literal NNX counterpart computes something else",
    "handed_layer_local": "manual findings: a layer handed on through a local that cannot be written in place",
    "module_alias_build": "manual findings: a class of the run built through a module-level alias without rngs",
    "module_copy": "manual findings: a handed module copied with Linen's Module.copy(name=...)",
    "module_clone": "manual findings: submodules and the class copied with Linen's Module.clone / copy",
    "between_two_loops": "manual findings: input widths a person fills (one is named after its place between loops)",
    "handwritten_bridge_of_converted": "manual findings: a hand-written wrapper applies a converted module the Linen way",
    "partial_left_at_unhoisted_sites": "manual findings: a layer partial stays Linen at sites under a call-time condition",
    "built_outside_class": "manual findings: a converted layer subclass built the Linen way at module level",
    "subclass_of_subclass": "manual findings: a subclass of a converted layer subclass is not converted",
    "concat_unknown_rank": "manual finding: a concatenation along axis 1 of parts of unknown rank",
    "outside_builder": "manual finding: a config method builds the module with a Linen name=",
    "built_outside_classes": "manual findings: a function and a module-level statement build the module as Linen does",
    "field_specifier": "manual findings: a field's default is another library's field specifier",
    "setup_rebound_later": "manual finding: a size setup() binds again below the layer it sizes",
    "read_before_bind": "manual finding: an __init__ reads an attribute a later line binds",
    "element_loop_skip": "manual finding: a loop over a setup list may skip an element",
    "element_loop_unsettled": "manual finding: the sizes of a loop over a setup list never settle",
    "shared_head_two_inputs": "manual findings: one submodule applied to inputs of different sizes",
    "attention_key_value_differ": "manual finding: attention keys and values of different sizes",
    "loop_kv_varying": "manual findings: blocks of a loop attend to values whose size the iteration changes",
    "nested_kept_class": "imports a package that does not exist (a class from outside the run)",
    "inherited_field_marker": "manual findings: a metadata box as a field default, a subclass of a kept base",
    "key_split_chain": "manual findings: submodules built with the keys of split chains __init__ cannot replay",
    "input_axis_rebound": "manual findings: submodule sizes read from a rebound value and a call-time index",
    "linen_tree_place": "manual findings: __post_init__, self.name and self.parent have no NNX meaning",
    "inherited_build_kept": "manual finding: a subclass running what a base kept as Linen builds",
    "super_setup_nested": "manual finding: super().setup() under a condition (Linen builds the base only then)",
    "unresolved_named_ctor": "manual finding: a submodule class imported by a computed path",
    "partial_name": "manual finding: a module built outside a module with a Linen name=",
    "classmethod_cls": "manual finding: a classmethod builds the class without the arguments NNX requires",
    "method_handed_self": "manual finding: a method creates a parameter through the module it is handed",
    "setup_external": "imports packages that are not part of the run (text_tools, vision_blocks)",
    "applied_named_factory": "manual findings: submodules built by unseen factories and applied at once",
    "child_shape_unknown": "manual finding: a child's input shape that nothing explains",
    "last_axis_reduced_or_dropped": "manual finding: inputs reduced or squeezed on the last axis",
    "written_axes_unknown": "manual finding: a padding, tile or reshape that may change the last axis",
    "axis_order_unknown": "manual findings: a transpose, einsum, swapaxes or reshape that may move the last axis",
    "tuple_returns_ambiguous": "manual findings: tuple elements and fields the source does not pin down",
    "list_changed_in_place": "manual findings: lists and output objects changed after they were built",
    "dunder_record": "manual findings: output classes with their own indexing or unpacking",
    "model_outputs_unknown": "manual findings: output fields and array indexes the source does not pin down",
    "helper_calls_kept": "manual findings: helper methods whose calls cannot be replayed in place",
    "manual_api": "manual findings: Linen scope APIs a person converts",
    "param_with_axes_left": "manual findings: param_with_axes calls whose axes may be None, or with module=",
    "param_with_axes_imported": "manual findings: param_with_axes reached by import, partial or a wrapper function",
    "param_with_axes_rebound": "manual finding: a name imported from flax and bound again by a def in the file",
    "scan_axis_and_axes_cache": "manual findings: a layer scan's init/apply axis choice, a variable_with_axes cache",
    "variable_splats_kept": "manual findings: self.variable splats whose value at the call is not known",
    "param_keywords_manual": "manual findings: self.param arguments with no conversion (unbox=False, splats)",
    "broadcast_elsewhere": "manual findings: nn.broadcast handed to an nn.scan this run does not convert",
    "metadata_boxes": "manual findings: Linen partition boxes tested for and built",
    "rebound_axis_call_time": "manual finding: a local rebound from a call argument sizes a parameter",
    "rebound_read_early": "manual findings: a local read before it is bound again, partials that cannot merge",
    "setup_partial_unmerged": "manual findings: setup() partials that cannot be merged into their calls",
    "loop_local_kept": "manual finding: a loop local read before the loop binds it",
    "loop_carried_local_kept": "manual findings: a loop's local read after it where its value there is not replayable",
    "merged_flag_kept": "manual findings: mode flags that cannot move to the call stay call-time values",
    "params_mutable_kept": "manual findings: the params-mutability question decides more than init-only work",
    "gru_cell": "manual finding: nnx.GRUCell computes another function than nn.GRUCell",
    "class_value": "manual finding: a module built at call time is left to a person",
    "loop_names_not_index": "manual finding: loop names that are no list index are left to a person",
    "compact_alias_kept": "manual findings: class-holding locals and loop names the codemod cannot follow",
    "local_child_variables": "manual finding: .variables of a child read through a local",
    "one_hot_axis": "manual finding: a layer after one_hot on another axis",
    "sequential_callable": "manual findings: layers after a plain callable that may change the last axis",
    "auto_name_after_switch": "manual finding: an auto-name that counts a module built under another test",
    "stateless_decorated": "manual findings: a decorator that creates a parameter, a class built under a call-time test",
    "loop_may_not_run_unknown": "manual finding: the size before a loop that may not run is unknown",
    "traced_coincidences": "manual findings: traced sizes two config explanations fit equally",
    "branch_local_call_time": "manual finding: a local one branch of a config test binds from a call-time value",
    "submodule_shape_local_size": "manual finding: a block's output size read from its input's shape",
    "param_override_other": "manual findings: layer subclasses that do more than transform a parameter",
    "shape_unpack_call_time": "manual findings: layers sized by a batch axis or a starred unpacking",
    "loop_jumps": "manual finding: modules built on some iterations of a loop are left to a person",
    "shape_test_other_axes": "manual findings: a shape test past a block, a slice or a transposed convolution",
    "decay_mask": "manual finding: an optimizer mask written for Linen's params tree",
    "auto_name_key": "manual finding: a loss reading a weight by its Linen auto-name",
    "sow_name_taken": "manual findings: sown under the name of a field, one name sown into two collections",
    "setup_array_from_loop": "manual finding: an array setup() builds from a list a loop filled",
    "local_changed_in_place": "manual findings: a local list or iterator changed in place sizes the layers",
    "norm_feature_axis": "manual findings: norms whose feature axis is not the last stay Linen",
    "rngs_field": "manual finding: a Linen field named rngs keeps the class Linen",
    "nest_inner_loop_may_not_run": "manual finding: a stage's norm reads a Dense an inner loop may not build",
    "setup_comprehension_offset": "manual finding: element names that are no list index stay Linen",
    "setup_loop_unfollowed": "manual findings: lists a setup() loop fills off its index stay Linen",
    "init_value_reads_input": "manual finding: a parameter's initial value reads the input's shape",
    "external_block": "imports a package that is not part of the run (vision_blocks)",
    "external_local": "imports a package that is not part of the run (text_blocks)",
    "factory_field_unbound": "manual finding: no caller says which layer the factory field builds",
    "compact_cnn": "manual finding: the Dense size after a flatten is a constructor argument a person fills",
    "setup_list": "manual finding: layer sizes applied in a loop are left to a person",
    "train_manual": "manual findings: the training code stays Linen",
    "train_init_size": "manual findings: init cannot give a constructor size; the training code stays Linen",
    "init_decode_flag": "manual finding: the training code stays Linen",
    "transform_unsupported": "manual finding: variable_carry is left as it is",
    "scan_of_remat_call": "manual finding: the scan of a remat call stays Linen as a whole",
    "not_flax": "no Flax model: the file is left byte-for-byte",
    "linen_helper": "manual finding: a module-level function still builds a Linen layer",
    "module_partial": "manual finding: a module-level partial of a Linen layer stays Linen",
    "remat_methods": "manual finding: nn.remat(methods=...) is left to a person",
    "pipeline_unsupported": "manual findings: a scan utility handed a lambda, nested vmaps that broadcast params",
    "nnx_specs_linen_rules": "no model: a guard around training code (test_migrate_fixtures runs it twice)",
    **dict.fromkeys(
        (
            "setup_comprehension_filtered",
            "tied_boxed",
            "named_heads",
            "scope_rng",
            "half_migrated",
            "helper_param",
            "applying_function",
        ),
        "manual findings of the verifier: the output does not build (that is what they show)",
    ),
}


def _findings(case: str) -> set[str]:
    return {f.rule for f in migrate_case(all_cases()[case]).findings}


@pytest.fixture(scope="module")
def actual() -> dict[str, set[str]]:
    """The rule ids each fixture case gives now."""
    return {name: _findings(name) for name in all_cases()}


def test_every_folder_is_a_rule_and_holds_its_rule(actual):
    for name, case in all_cases().items():
        if case.folder == NO_FINDINGS_DIR:
            assert actual[name] == set() == case.declared(), name
            continue
        assert case.folder in RULES, f"{case.folder}: not a rule id"
        assert case.folder in actual[name] and case.folder in case.declared(), (name, actual[name])


def test_no_fixture_gives_a_finding_it_does_not_declare(actual):
    undeclared = {name: sorted(actual[name] - case.declared()) for name, case in all_cases().items()}
    assert not {name: rules for name, rules in undeclared.items() if rules}


def test_every_rule_is_shown_by_a_fixture_or_exempt(actual):
    declared = {rule for case in all_cases().values() for rule in case.declared()}
    given = {rule for rules in actual.values() for rule in rules}
    shown = declared & given
    assert not set(EXEMPT) & shown, "an exempt rule now has a fixture: drop its exemption"
    assert sorted(set(RULES) - shown - set(EXEMPT)) == []
    assert set(EXEMPT) <= set(RULES)


@pytest.mark.parametrize("rule", sorted(EXEMPT))
def test_exempt_rules_name_a_test_that_triggers_them(rule):
    file, _, test = EXEMPT[rule].partition("::")
    source = (TESTS / file).read_text()
    tree = ast.parse(source)
    body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == test)
    assert rule in ast.get_source_segment(source, body)


def test_an_internal_error_is_reported_and_the_file_left_alone(monkeypatch):
    """A bug in the codemod becomes an error finding for that file, never a crash or a partial file."""
    import linen2nnx.migrate.after_module as after_module

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.delenv("LINEN2NNX_RAISE", raising=False)
    monkeypatch.setattr(after_module, "code_of", broken)
    src = (
        "import flax.linen as nn\n\n\nclass A(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
        "        return nn.Dense(2)(x)\n"
    )
    result = migrate_source(src, "a.py")
    assert result.output is None
    assert [(f.rule, f.severity.value) for f in result.findings] == [("L2N-IO-004", "error")]
    assert "RuntimeError: boom" in result.findings[0].message


def _named_in_parity_tests() -> set[str]:
    """Every string constant of the parity test files: case names (``"compact_loop"``) or fixture file
    names (``"compact_partitioned_in.py"``)."""
    names = set()
    for file in PARITY_TESTS:
        for node in ast.walk(ast.parse((TESTS / file).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value.removesuffix(".py").removesuffix("_in").removesuffix("_out"))
    return names


def test_every_runnable_fixture_has_a_parity_test():
    named = _named_in_parity_tests()
    cases = set(all_cases())
    assert sorted(cases - named - set(NOT_RUNNABLE)) == [], "add a parity test or a NOT_RUNNABLE reason"
    assert sorted(set(NOT_RUNNABLE) & named) == [], "has a parity test now: drop it from NOT_RUNNABLE"
    assert set(NOT_RUNNABLE) <= cases


def test_fixtures_are_only_pairs_in_rule_folders():
    stray = [
        p.relative_to(FIXTURES)
        for p in FIXTURES.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and not (p.parent.parent == FIXTURES and p.name.endswith(("_in.py", "_out.py")))
    ]
    assert stray == []
    assert all(case.output.is_file() for case in all_cases().values())
