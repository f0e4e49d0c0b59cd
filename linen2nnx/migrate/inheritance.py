"""A subclass of a Linen class of the run that inherits what its base builds.

Linen runs a base class's ``setup`` (or its ``@nn.compact`` method) for a subclass that does not
override it, and ``super().setup()`` runs it from the subclass's own ``setup``. The NNX base builds
those submodules in its ``__init__``, which the subclass's new ``__init__`` replaces: unless it calls
``super().__init__(...)``, the subclass has none of them (an ``AttributeError`` at the first call)
and ``super().setup()`` names a method NNX classes do not have. So the plan records which base's
build a class inherits (:func:`plan_inherited_build`) and ``__init__`` calls the base's ``__init__``
with the base's fields and the size arguments it gained (:func:`super_init_statement`): at the top
of ``__init__`` when the build is inherited, in place of ``super().setup()`` when it is called.
Which methods build a class (``builders``) travels in the class summary, so a base in another
file of the run counts too; a case the rewrite cannot follow is a blocking ``L2N-MOD-004``.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import is_super_call, parse_statement
from linen2nnx.migrate.rules import MOD_004, MOD_010
from linen2nnx.migrate.sites import ClassPlan


def own_builders(plan: ClassPlan, methods: list[cst.FunctionDef]) -> tuple[str, ...]:
    """The class's own methods that build it in Linen: ``setup`` and its ``@nn.compact`` method."""
    names = [fn.name.value for fn in methods]
    found = ["setup"] if "setup" in names else []
    if plan.compact is not None:
        found.append(plan.compact.name.value)
    return tuple(found)


def super_method(call: cst.Call) -> str | None:
    """``super().<name>(...)`` -> ``"name"``."""
    func = call.func
    return func.attr.value if isinstance(func, cst.Attribute) and is_super_call(func.value) else None


def super_statement(stmt: cst.BaseStatement) -> cst.Call | None:
    """The call of ``super().<name>()`` (no arguments) that is ``stmt``'s one statement; None else."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    call = small.value if isinstance(small, cst.Expr) else None
    return call if isinstance(call, cst.Call) and not call.args and super_method(call) is not None else None


def is_super_setup(stmt: cst.BaseStatement) -> bool:
    """``super().setup()`` as a statement of its own."""
    call = super_statement(stmt)
    return (
        call is not None and super_method(call) == "setup" and not call.func.value.args  # type: ignore[attr-defined]  # super() itself, as the rewrite replaces it
    )


def _calls_super(fn: cst.FunctionDef, name: str) -> bool:
    """``fn`` calls ``super().<name>(...)``."""
    return any(super_method(call) == name for call in calls_in(fn.body))


def plan_inherited_build(
    plan: ClassPlan,
    node: cst.ClassDef,
    methods: list[cst.FunctionDef],
    base_plan_of: Callable[[cst.BaseExpression], ClassPlan | None],
    report: Callable[..., None],
) -> None:
    """Set ``plan.builders`` and, when the class runs a base's build, ``plan.super_init`` (and
    ``plan.super_in_setup`` when ``super().setup()`` runs it); the base's size arguments join the
    class's own. Reports what it cannot follow (``report(rule, node, message, hint)``)."""
    own = own_builders(plan, methods)
    runs = _bases_it_runs(plan, node, methods, own, base_plan_of, report)
    if not runs:
        _report_held_bases(plan, node, base_plan_of, report)
    plan.builders = own if not runs or runs[0][1] else (*own, *runs[0][0].builders)
    if not runs:
        return
    if len(runs) > 1:
        report(
            MOD_004,
            node,
            f"{plan.name} inherits what several bases build ({', '.join(p.name for p, _ in runs)})",
            "build the bases' submodules in this class's own setup",
        )
        return
    base_plan, in_setup = runs[0]
    if base_plan.kept_linen or base_plan.blocking:
        report(
            MOD_004,
            node,
            f"{plan.name} inherits what {base_plan.name} builds, and manual findings block "
            f"{base_plan.name}'s rewrite (it stays Linen, or keeps what the findings mark)",
            "resolve the base's findings first",
        )
        return
    for arg, how in base_plan.new_args.items():
        if arg in plan.field_names or plan.new_args.setdefault(arg, how) != how:
            report(
                MOD_004,
                node,
                f"{base_plan.name}.__init__ gains a constructor argument {arg}, which {plan.name} has "
                "as a field or for another size",
                "call the base's __init__ by hand with the size it needs",
            )
            return
    plan.super_init, plan.super_in_setup = base_plan, in_setup
    where = "super().setup()" if in_setup else "the inherited " + " / ".join(base_plan.builders)
    report(MOD_010, node, f"{plan.name}: {where} -> super().__init__(...) of {base_plan.name}")


def _report_held_bases(
    plan: ClassPlan,
    node: cst.ClassDef,
    base_plan_of: Callable[[cst.BaseExpression], ClassPlan | None],
    report: Callable[..., None],
) -> None:
    """A base of the run that manual findings keep from its rewrite: its NNX class is a wrapper around
    the Linen copy (or keeps what the findings mark), with none of the base's methods or fields, so
    a subclass that reads them (``self._make_bias(...)``, a helper of the base) or inherits its
    ``__call__`` would not build or run; a finding, whatever the subclass itself reads."""
    for base in node.bases:
        base_plan = base_plan_of(base.value)
        if base_plan is not None and (base_plan.kept_linen or base_plan.blocking):
            report(
                MOD_004,
                node,
                f"{plan.name} subclasses {base_plan.name}, which manual findings keep from its rewrite (it "
                "stays Linen behind nnx.bridge, or keeps what the findings mark): the NNX base has none "
                "of its methods or fields",
                "resolve the base's findings first, then migrate again",
            )
            return


def _bases_it_runs(
    plan: ClassPlan,
    node: cst.ClassDef,
    methods: list[cst.FunctionDef],
    own: tuple[str, ...],
    base_plan_of: Callable[[cst.BaseExpression], ClassPlan | None],
    report: Callable[..., None],
) -> list[tuple[ClassPlan, bool]]:
    """The bases of the run whose build Linen runs for this class: (its plan, whether through
    ``super().setup()``)."""
    by_name = {fn.name.value: fn for fn in methods}
    setup = by_name.get("setup")
    calls_super = setup is not None and any(is_super_setup(s) for s in setup.body.body)
    runs: list[tuple[ClassPlan, bool]] = []
    for base in node.bases:
        base_plan = base_plan_of(base.value)
        if base_plan is None or not base_plan.builders:
            continue
        overridden = set(base_plan.builders) & set(by_name)
        extended = {m for m in overridden - {"setup"} if _calls_super(by_name[m], m)}
        if extended & set(own) and plan.sites:  # (with no submodule of its own, the names are the base's)
            report(
                MOD_004,
                node,
                f"{plan.name}.{'/'.join(sorted(extended))} is @nn.compact and calls the @nn.compact method of "
                f"{base_plan.name}: Linen numbers both methods' submodules in one scope",
                "build this class's own submodules in setup, or move them into the base",
            )
            continue
        overridden -= extended  # a plain override that calls super().__call__(...): the base's build runs
        if not overridden:
            runs.append((base_plan, False))
        elif base_plan.builders == ("setup",) and calls_super:
            runs.append((base_plan, True))
        elif overridden != set(base_plan.builders):
            report(
                MOD_004,
                node,
                f"{plan.name} overrides {', '.join(sorted(overridden))} of {base_plan.name} but inherits "
                f"the rest of what {base_plan.name} builds ({', '.join(base_plan.builders)})",
                "override every method that builds the base, or none",
            )
    return runs


def super_init_statement(plan: ClassPlan) -> cst.BaseStatement:
    """``super().__init__(<the base's fields>, <its size arguments>, rngs=rngs)``."""
    base = plan.super_init
    assert base is not None
    args = [f"{f.name}={f.name}" for f in base.fields if f.init]
    args += [f"{a}={a}" for a in base.new_args]
    if "rngs" not in base.field_names:
        args.append("rngs=rngs")
    return parse_statement(f"super().__init__({', '.join(args)})\n")
