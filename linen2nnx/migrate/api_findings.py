"""What an unconverted Linen API means in NNX: the message and hint of its ``L2N-API-002`` finding.

A manual finding is only useful when it says what the code becomes in NNX. These tables hold, for each
Linen Module method (``self.<api>(...)``) and each ``flax.linen`` name the codemod leaves to a person,
the NNX form and the section of ``docs/nnx_facts.md`` that explains it. The rewrites that *are* exact
(``self.is_initializing()`` guarding init-only inputs, a ``put_variable`` of a literal name, ...) are
made elsewhere; a finding from here means the use is outside what they prove.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

_FACTS = "docs/nnx_facts.md"
_API = f"{_FACTS}#linen-module-api-with-no-nnx-counterpart"
_VARS = f"{_FACTS}#variables-and-module-structure"
_XFORMS = f"{_FACTS}#lifted-transforms"
_SHARDING = f"{_FACTS}#sharding-and-logical-partitioning"

# self.<api>(...) of a Linen module -> (what it is, its NNX form)
SELF_API: dict[str, tuple[str, str]] = {
    "param": (
        "self.param(...) in a form the codemod does not follow (a computed name, a statement it cannot "
        "place in __init__)",
        "create it in __init__: self.<name> = nnx.Param(init_fn(rngs.params(), *init_args))",
    ),
    "variable": (
        "self.variable(...) in a form the codemod does not follow (a computed name, in a loop, a statement "
        "it cannot place in __init__)",
        "create it in __init__: self.<name> = VariableType(init_fn(*init_args)), VariableType the "
        "nnx.Variable subclass of the collection",
    ),
    "sow": (
        "self.sow(...) in a form the codemod does not follow (a computed collection)",
        "self.sow(VariableType, name, value), VariableType the nnx.Variable subclass of the collection",
    ),
    "make_rng": (
        "self.make_rng(...) of a computed stream name",
        "draw from the module's nnx.Rngs: self.rngs[stream]()",
    ),
    "is_initializing": (
        "self.is_initializing() is True only in Linen's init; NNX initialises in __init__ and a call is "
        "Linen's apply, where it is False, but this branch does more than make dummy inputs for init",
        "build in __init__ what the init-only branch creates and read the test as False at call time "
        "(--unsafe-fixes reads it as False here)",
    ),
    "is_mutable_collection": (
        "self.is_mutable_collection(col) asks whether Linen's apply was given mutable=[col]; NNX Variables "
        "are always mutable in a call (updates happen in place)",
        "keep the branch for a mutable collection, or make the choice a flag of the call",
    ),
    "put_variable": (
        "self.put_variable(col, name, v) of a computed, 'params' or expression-level name: NNX writes a "
        "Variable the module holds as an attribute",
        "self.<name>.value = v on a Variable created in __init__ (or on the first write, "
        "self.<name> = nnx.Cache(v)); a computed name needs a dict-valued Variable per collection",
    ),
    "get_variable": (
        "self.get_variable(col, name) of a computed name or collection: NNX reads a Variable the module "
        "holds as an attribute",
        "self.<name>.value (getattr(self, name, None) for an optional one)",
    ),
    "has_variable": (
        "self.has_variable(col, name) of a computed name or collection: NNX asks whether the module holds "
        "the Variable attribute",
        "hasattr(self, name), or isinstance(getattr(self, name, None), nnx.Variable)",
    ),
    "scope": (
        "self.scope is Linen's variable scope; an NNX module holds its Variables as attributes",
        "read and write the Variable attributes; nnx.state(self) is the module's state",
    ),
    "variables": (
        "self.variables is the bound scope's collections; an NNX module holds its Variables as attributes",
        "nnx.state(self) (nnx.state(self, nnx.Param) for the parameters)",
    ),
    "bind": (
        "module.bind(variables) makes a bound Linen module; an NNX module holds its own state",
        "nnx.update(module, state), or nnx.merge(graphdef, state)",
    ),
    "unbind": (
        "module.unbind() splits a bound Linen module from its variables",
        "graphdef, state = nnx.split(module)",
    ),
    "apply": (
        "Module.apply runs a Linen module on given variables; an NNX module is called directly",
        "call the submodule; nnx.split / nnx.merge give the functional form",
    ),
    "init": (
        "Module.init builds a Linen module's variables; NNX builds them in __init__",
        "construct the NNX module (nnx.eval_shape for shapes only)",
    ),
    "init_with_output": (
        "Module.init_with_output builds the variables and runs the call; NNX builds them in __init__",
        "construct the NNX module, then call it",
    ),
    "lazy_init": (
        "Module.lazy_init builds the variables from shapes; NNX builds them in __init__",
        "nnx.eval_shape(lambda: Module(..., rngs=nnx.Rngs(0)))",
    ),
    "perturb": (
        "self.perturb in an unconverted form (a collection other than 'perturbations' or a computed name)",
        "self.perturb(name, x) of the NNX module, read with nnx.Perturbation",
    ),
    "has_rng": (
        "self.has_rng(stream) asks for a Linen rng stream; NNX streams are attributes of an nnx.Rngs",
        "stream in self.rngs (the module's nnx.Rngs)",
    ),
    "path": (
        "self.path is the module's Linen scope path; an NNX module does not know where it sits",
        "pass the path (or the per-layer setting it selects) to the constructor; nnx.iter_graph(root) "
        "yields every (path, module) from the root",
    ),
}

# flax.linen names (after `flax.linen.`) with no NNX counterpart -> (what it is, its NNX form)
NO_COUNTERPART: dict[str, tuple[str, str, str]] = {
    "module._context.module_stack": (
        "Linen's private stack of the modules being called (its last element is the module running now, "
        "`.path` its scope path); NNX has no such stack",
        "pass the path (or the per-layer setting it selects) to the constructor; nnx.iter_graph(root) "
        "yields every (path, module) from the root",
        _API,
    ),
    "map_variables": (
        "nn.map_variables maps a Linen module's collections on their way in and out; NNX has no lift of it",
        "transform the Variables where the module holds them (nnx.state / nnx.update, or a wrapper whose "
        "__call__ maps the values), or nnx.split the module and map the State",
        _XFORMS,
    ),
    "Fp8DirectDotGeneralOp": (
        "a Linen fp8 module (a dot_general or an einsum; scales and amax histories in the '_overwrite_with_gradient' "
        "collection); flax.nnx has none",
        "an nnx.Module holding them as Variables of a subclass registered as '_overwrite_with_gradient', "
        "calling flax.linen.fp8_ops (pure functions, kept)",
        _VARS,
    ),
    "Module.init": (
        "Linen's init of a Linen module called as a function; NNX builds the variables in __init__",
        "construct the NNX module (nnx.eval_shape of the constructor for shapes only)",
        _API,
    ),
    "Module.apply": (
        "Linen's apply of a Linen module called as a function; an NNX module holds its state and is called",
        "call the NNX module; nnx.split / nnx.merge give the functional form",
        _API,
    ),
    "module.wrap_method_once": (
        "Linen's wrapper that makes a method run inside the module's scope; NNX methods are plain methods",
        "call the method directly",
        _API,
    ),
    "transforms.lift_transform": (
        "Linen's lift of a jax transform over scopes; NNX transforms take modules as arguments",
        "the nnx transform of the same name (nnx.vmap, nnx.scan, nnx.remat, nnx.jit, ...)",
        _XFORMS,
    ),
    "partitioning.param_with_axes": (
        "a param with logical axis names, recorded in the 'params_axes' collection; NNX keeps "
        "the names on the Variable",
        "nnx.Param(init(rngs.params(), shape), out_sharding=axes) in __init__",
        _SHARDING,
    ),
    "partitioning.variable_with_axes": (
        "a variable with logical axis names, recorded in '<col>_axes'; NNX keeps the names on the Variable",
        "VariableType(init(...), out_sharding=axes) in __init__",
        _SHARDING,
    ),
    "partitioning.AxisMetadata": (
        "the box of the 'params_axes' collection; NNX keeps the names on the Variable",
        "read var.out_sharding, or nnx.get_partition_spec(state)",
        _SHARDING,
    ),
    "partitioning.get_axis_names": (
        "reads the 'params_axes' collection; NNX keeps the names on the Variable",
        "nnx.get_partition_spec(state) under nnx.logical_axis_rules(())",
        _SHARDING,
    ),
    "partitioning.scan_with_axes": (
        "an nn.scan that also stacks the 'params_axes' names",
        "nnx.scan over modules built with nnx.vmap; the stacked axis name is nnx.vmap's transform_metadata",
        _XFORMS,
    ),
    "partitioning.vmap_with_axes": (
        "an nn.vmap that also stacks the 'params_axes' names",
        "nnx.vmap with transform_metadata={nnx.PARTITION_NAME: name}",
        _XFORMS,
    ),
    "partitioning.remat": (
        "Linen's remat that keeps the 'params_axes' names",
        "nnx.remat (the names stay on the Variables)",
        _XFORMS,
    ),
    "partitioning.ScanIn": (
        "the marker of a scanned-over parameter axis for scan_with_axes",
        "nnx.scan's in_axes for the module's state",
        _XFORMS,
    ),
}
for _name in ("Fp8Einsum", "NANOOFp8DotGeneralOp", "Fp8DotGeneralOp", "Fp8DotGeneralBase"):
    NO_COUNTERPART[_name] = NO_COUNTERPART["Fp8DirectDotGeneralOp"]


_PARAMS_MUTABLE = (
    "self.is_mutable_collection('params') is True only in Linen's init (NNX's __init__); at call time, "
    "Linen's apply, it is False, but here its branch does more than skip work that creates nothing",
    "build in __init__ what the True branch creates and keep the False branch at call time",
)


PARAMS_SCAN_SPEC = (
    "self.is_mutable_collection('params') picks the scanned parameter axis of a layer scan (the plain "
    "axis while Linen's init creates the stacked parameters, ScanIn(axis) when apply reads them): "
    "Linen's init/apply split of one nn.scan / scan_with_axes / factory_scan, with no NNX counterpart",
    "create the stacked layers in __init__ with nnx.vmap(..., out_axes=axis) over split rngs and apply "
    f"them with nnx.scan(..., in_axes=(axis, nnx.Carry)) on the state: the ScanIn branch is the call (see {_XFORMS})",
)


def string_args(call: cst.Call) -> tuple[str | None, str | None]:
    """The string literals of a call's first two arguments (None where an argument is not one)."""
    values = [a.value for a in call.args[:2]] + [None, None]
    return tuple(v.evaluated_value if isinstance(v, cst.SimpleString) else None for v in values[:2])  # type: ignore[return-value]


def self_api_finding(
    api: str, first_arg: str | None = None, second_arg: str | None = None
) -> tuple[str, str]:
    """(message, hint) of an unconverted ``self.<api>(...)`` call (``first_arg`` / ``second_arg``: its
    arguments' string literals, where they are)."""
    if api == "is_mutable_collection" and first_arg == "params":
        what, how = _PARAMS_MUTABLE
        return what, f"{how} (see {_API})"
    if api == "has_variable" and first_arg is not None and second_arg is not None:
        return (
            f"self.has_variable({first_arg!r}, {second_arg!r}): no self.variable / self.param of this class "
            "that the codemod follows creates it (a submodule's, one another API creates, such as "
            "partitioning.variable_with_axes, or one the codemod cannot place); NNX asks whether the module "
            "holds the Variable attribute",
            f"create the Variable in __init__ or on the first call, then hasattr(self, {second_arg!r}) "
            f"(see {_API})",
        )
    what, how = SELF_API.get(
        api,
        (f"self.{api}(...) is Linen Module API in a form with no automatic conversion", "rewrite by hand"),
    )
    return what, f"{how} (see {_API})"


def no_counterpart_finding(short: str) -> tuple[str, str] | None:
    """(message, hint) of a ``flax.linen.<short>`` the table knows (``short`` or a dotted name under
    it, ``module._context.module_stack.append``); None otherwise."""
    parts = short.split(".")
    for end in range(len(parts), 0, -1):
        entry = NO_COUNTERPART.get(".".join(parts[:end]))
        if entry is not None:
            what, how, where = entry
            return f"flax.linen.{short}: {what}", f"{how} (see {where})"
    return None


def unbox_if_boxed(box: cst.Attribute, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]) -> bool:
    """``box`` is the class tested in ``if isinstance(v, box): v = v.unbox()`` (no ``else``, nothing
    else in the body): the statement unboxes a Linen box and leaves any other value unchanged, so it
    computes the same on NNX values, which are never boxed, and stays as it is."""
    arg = parent_of(box)
    call = parent_of(arg) if isinstance(arg, cst.Arg) else None
    test = call
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Name)
        and call.func.value == "isinstance"
        and len(call.args) == 2
        and call.args[1] is arg
        and isinstance(call.args[0].value, cst.Name)
        and not any(a.keyword or a.star for a in call.args)
    ):
        return False
    stmt = parent_of(test)
    if not isinstance(stmt, cst.If) or stmt.test is not test or stmt.orelse is not None:
        return False
    body = stmt.body.body
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return False
    assign = body[0].body[0]
    name = call.args[0].value.value
    return (
        isinstance(assign, cst.Assign)
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
        and assign.targets[0].target.value == name
        and isinstance(assign.value, cst.Call)
        and not assign.value.args
        and isinstance(assign.value.func, cst.Attribute)
        and assign.value.func.attr.value == "unbox"
        and isinstance(assign.value.func.value, cst.Name)
        and assign.value.func.value.value == name
    )
