"""The passes after the module pass, on one file: its factory functions, the training pass, the verifier.

:func:`after_module_pass` takes the module pass's tree and gives the final output, the functions
importing files see and each later pass's findings; :func:`facts_for_importers` what else the files
importing this one replay or report. Kept apart from :mod:`.engine`, which runs files and modes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst

from linen2nnx.migrate import record_facts
from linen2nnx.migrate.cst_meta import code_of
from linen2nnx.migrate.findings import Finding
from linen2nnx.migrate.function_outs import function_out_facts
from linen2nnx.migrate.function_replay import replayable_functions
from linen2nnx.migrate.names import NameResolver
from linen2nnx.migrate.param_helpers import param_helper_functions
from linen2nnx.migrate.star_imports import star_names
from linen2nnx.migrate.verify_syntax import helper_facts


def facts_for_importers(tree: cst.Module, module_name: str, command: Any) -> dict[str, Any]:
    """What importing files replay or report: this file's replayable functions and parameter helpers,
    its converted layer subclasses and its tables of elementwise activations."""
    return {
        **replayable_functions(tree, module_name),
        **command.layer_subclass_facts,
        **command.elementwise_facts,
        **function_out_facts(command.ctx),
        **param_helper_functions(tree, module_name),
        **helper_facts(tree, module_name),
        **record_facts.record_facts(
            {k: v for k, v in command.state.record_classes.items() if k in command.state.module_classes},
            module_name,
        ),
    }


def after_module_pass(
    out_tree: cst.Module,
    source: str,
    path: str,
    module_name: str,
    command: Any,
    external: Mapping[str, Any] | None,
    factories: Mapping[str, Any] | None,
    rule_enabled: Callable[[str], bool],
    built: set[str],
) -> tuple[str, dict[str, Any], list[Finding], list[Finding]]:
    """The module pass's code, then the file's own factory functions, the training pass and the
    verifier: the output, the factories importing files see, and the two passes' findings."""
    module_output = code_of(out_tree)  # = .code, without libcst's per-node context managers
    names_of_output = functools.cache(
        lambda: NameResolver(out_tree, star_names(factories, module_name))
    )  # one resolver for both readers
    own_factories = _factories_of(command, out_tree, module_output, module_name, names_of_output)
    known = {**(factories or {}), **command.function_factories}  # the verifier checks their calls too
    output, train_findings, verify_findings = training_and_verify(
        out_tree,
        module_output,
        source,
        path,
        module_name,
        command,
        external,
        known,
        rule_enabled,
        names_of_output,
        built,
    )
    if names_of_output.cache_info().currsize:
        names_of_output().release()  # its scopes' cycles (see engine._release)
    return output, own_factories, train_findings, verify_findings


def _factories_of(
    command: Any,
    out_tree: cst.Module,
    module_output: str,
    module_name: str,
    names_of_output: Callable[[], NameResolver],
) -> dict[str, Any]:
    """The file's functions that matter to the files importing it: its layer factory functions, rewritten
    to build NNX layers, and the functions that still build Linen modules (NNX classes here and in
    importing files must not call them)."""
    from linen2nnx.migrate.linen_factories import linen_factories

    factories: dict[str, Any] = dict(command.function_factories)
    if "linen" in module_output or "rngs" in module_output:  # still Linen, or NNX built without rngs
        factories.update(linen_factories(out_tree, module_name, names_of=names_of_output))
    return factories


def training_and_verify(
    out_tree: cst.Module,
    module_output: str,
    source: str,
    path: str,
    module_name: str,
    command: Any,
    external: Mapping[str, Any] | None,
    factories: Mapping[str, Any],
    rule_enabled: Callable[[str], bool],
    names_of_output: Callable[[], NameResolver],
    built: set[str],
) -> tuple[str, list[Finding], list[Finding]]:
    """The passes after the module pass: training code, then the verifier. Returns the output and
    each pass's findings. ``names_of_output`` gives the resolver of ``out_tree``; ``built`` gains the
    classes of the run the output's NNX classes build (see :func:`.verify.verify_output`)."""
    from linen2nnx.migrate.training import migrate_training
    from linen2nnx.migrate.training.planner import FILE_HINT
    from linen2nnx.migrate.verify import verify_output

    output, train_findings = migrate_training(  # training code: after the modules it uses
        module_output,
        source,
        path=path,
        module_name=module_name,
        local=command.summaries,
        external=external or {},
        rule_enabled=rule_enabled,
    )
    # the verifier: Linen left in a class the output calls NNX becomes a located manual finding
    # (it reads the module pass's tree when the training pass changed nothing: no parse)
    output, verify_findings = verify_output(
        output,
        source,
        path=path,
        module_name=module_name,
        external=external or {},
        factories=factories,
        rule_enabled=rule_enabled,
        tree=out_tree if output is module_output else None,
        converted=command.converted_classes,
        names_of_tree=names_of_output,
        built=built,
        # training code left in its Linen form is reported as a whole: its builds are not each a finding
        # (an earlier run's marker says so too: a second run must change nothing)
        outside_classes=FILE_HINT not in source and not any(FILE_HINT in f.message for f in train_findings),
    )
    return output, train_findings, verify_findings
