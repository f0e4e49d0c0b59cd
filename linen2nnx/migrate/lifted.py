"""Lifted transforms applied to module classes: ``nn.scan``, ``nn.remat`` / ``nn.checkpoint``, ``nn.vmap``.

Linen wraps a module *class* (``nn.scan(Block, ...)(cfg, name="layers")(x, ...)``, or an alias
``BlockLayer = nn.remat(Block, ...)`` used later). NNX splits the same thing in two:

- **construction** (``__init__``): a stacked layer (``variable_axes={'params': 0}``) is built by
  ``nnx.vmap`` over forked rngs, so the stack sits on the axis the Linen checkpoint uses and weight
  conversion is a rename; ``metadata_params={nn.PARTITION_NAME: 'layers'}`` becomes the mode-proof
  ``nnx.transform_metadata(..., partition='layers')`` (the ``transform_metadata=`` keyword is ignored
  outside graph mode, docs/nnx_facts.md#graph-mode-tree-mode-and-graph-updates). A broadcast module (``variable_broadcast='params'``) and a
  remat-only module are built as the plain class;
- **application** (the call site): ``nnx.scan`` / ``nnx.vmap`` / ``nnx.remat`` of a small lambda that
  takes the module as an argument (so its Variables follow the transform) and closes over the
  broadcast inputs (``nn.broadcast``), Python flags and keyword arguments. Closing over them also
  replaces Linen's ``static_argnums`` (which counts ``self`` as argument 0). The scan body returns
  the Linen body's own ``(carry, ys)``, never the Params of the stack.

Anything outside this (``variable_carry``, ``data_transform``, ``methods=``, non-literal axes)
is a ``manual`` finding; nothing is emitted half-converted.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import assigned_in, code, names_in

TRANSFORMS = {"scan": "scan", "remat": "remat", "checkpoint": "remat", "vmap": "vmap"}
# Linen names a lifted class after its core transform (``type(transform.__name__.capitalize() + name)``):
# ``nn.remat(Block)`` is ``CheckpointBlock``, so its auto-names are ``CheckpointBlock_0``, ...
LIFTED_CLASS_PREFIX = {"scan": "Scan", "remat": "Checkpoint", "vmap": "Vmap"}
"""Linen transform name -> the kind handled here (``nn.checkpoint`` is ``nn.remat``)."""
PARTITION_NAME_KEY = "partition_name"
# keywords written where the lifted call runs (lifted_call), not where __init__ builds the stack
CALL_SITE_KWARGS = {
    "remat": frozenset({"policy", "prevent_cse"}),
    "scan": frozenset({"out_axes", "length", "reverse", "unroll"}),
    "vmap": frozenset({"out_axes", "axis_name", "spmd_axis_name"}),
}
"""``nn.PARTITION_NAME``'s value: ``metadata_params={'partition_name': 'layers'}`` spells the same key."""
LINEN_MARKERS = frozenset({"broadcast", "PARTITION_NAME", *TRANSFORMS})
"""``flax.linen`` names consumed by a converted transform (no 'no conversion' finding for them)."""

SUPPORTED_KWARGS = {
    "scan": {
        "variable_axes",
        "variable_broadcast",
        "split_rngs",
        "in_axes",
        "out_axes",
        "length",
        "reverse",
        "unroll",
        "metadata_params",
    },
    "remat": {"policy", "prevent_cse", "static_argnums", "concrete"},
    "vmap": {
        "variable_axes",
        "split_rngs",
        "in_axes",
        "out_axes",
        "axis_size",
        "axis_name",
        "spmd_axis_name",
        "metadata_params",
    },
}


@dataclasses.dataclass
class Lift:
    """One transform of a chain: its kind and its (original) keyword arguments."""

    kind: str  # scan | remat | vmap
    kwargs: dict[str, cst.BaseExpression]
    node: cst.Call


@dataclasses.dataclass
class LiftChain:
    """``nn.scan(nn.remat(Block, ...), ...)``: the transforms, outermost first, and the class they wrap."""

    lifts: list[Lift]
    base: cst.BaseExpression

    def of(self, kind: str) -> Lift | None:
        return next((lift for lift in self.lifts if lift.kind == kind), None)

    @property
    def stacked(self) -> Lift | None:
        """The scan / vmap whose params get a stack axis (``variable_axes={'params': axis}``)."""
        for lift in self.lifts:
            if lift.kind in ("scan", "vmap") and param_axis(lift) is not None:
                return lift
        return None


class LiftError(ValueError):
    """A transform form that is not converted; the message says what and why."""


def literal_dict(node: cst.BaseExpression | None) -> dict[str, cst.BaseExpression]:
    """``{'params': 0, 'cache': 0}`` -> ``{'params': <0>, ...}``; anything else raises LiftError."""
    if node is None:
        return {}
    if not isinstance(node, cst.Dict):
        raise LiftError(f"`{code(node)}` is not a dict literal")
    out = {}
    for el in node.elements:
        if not isinstance(el, cst.DictElement):
            raise LiftError(f"`{code(node)}` unpacks another dict")
        key = el.key
        if isinstance(key, cst.SimpleString):
            out[key.evaluated_value] = el.value
        elif isinstance(key, cst.Attribute) and key.attr.value == "PARTITION_NAME":
            out[PARTITION_NAME_KEY] = el.value  # the key nn.PARTITION_NAME is: one spelling for both
        else:
            raise LiftError(f"key `{code(key)}` is not a literal")
    return out


def param_axis(lift: Lift) -> str | None:
    """The stack axis of the params (source), or None when they are broadcast / not stacked."""
    axes = literal_dict(lift.kwargs.get("variable_axes"))
    value = axes.get("params")
    if value is None or (isinstance(value, cst.Name) and value.value == "None"):
        return None
    return code(value)


def partition_name(lift: Lift) -> str | None:
    meta = literal_dict(lift.kwargs.get("metadata_params"))
    value = meta.get(PARTITION_NAME_KEY)
    return None if value is None else code(value)


def validate(chain: LiftChain, is_broadcast: callable, fn: cst.FunctionDef | None = None) -> None:
    """Raise LiftError for what the emitters below do not cover. ``fn``: the method the chain is built
    in, whose parameters and locals (but ``setup()``'s, replayed as they are) ``__init__`` does not have:
    a stack size read from one (``axis_size=x.shape[1]``) cannot size the stack there."""
    call_time = _call_time_names(fn)
    setup_locals = _setup_locals(fn)
    for lift in chain.lifts:
        for key, value in lift.kwargs.items():
            if (
                key in CALL_SITE_KWARGS.get(lift.kind, ()) and names_in(value) & setup_locals
            ):  # NameError there
                local = sorted(names_in(value) & setup_locals)[0]
                raise LiftError(f"nn.{lift.kind}({key}={code(value)}) reads {local}, a local of setup()")
        size = lift.kwargs.get("length" if lift.kind == "scan" else "axis_size")
        if size is not None and names_in(size) & call_time:
            key = "length" if lift.kind == "scan" else "axis_size"
            raise LiftError(f"nn.{lift.kind}({key}={code(size)}) reads a call-time value")
    for lift in chain.lifts:
        extra = set(lift.kwargs) - SUPPORTED_KWARGS[lift.kind]
        if extra:
            raise LiftError(f"nn.{lift.kind}({', '.join(sorted(extra))}=...) is not converted")
        if lift.kind in ("scan", "vmap"):
            literal_dict(lift.kwargs.get("variable_axes"))
            literal_dict(lift.kwargs.get("split_rngs"))
            unknown = set(literal_dict(lift.kwargs.get("metadata_params"))) - {PARTITION_NAME_KEY}
            if unknown:
                raise LiftError(f"metadata_params key {sorted(unknown)[0]!r} is not converted")
            axes = in_axes_list(lift.kwargs.get("in_axes"), is_broadcast)
            if axes is None:
                raise LiftError(f"in_axes={code(lift.kwargs['in_axes'])} is not a literal")
            if any(a.startswith("-") for a in axes):  # -1 scans the features the layers' sizes read
                raise LiftError(
                    f"in_axes={code(lift.kwargs['in_axes'])}: a negative axis may scan the feature axis, which "
                    "the input sizes of the layers inside are read from"
                )
        if lift.kind in ("scan", "vmap"):
            _one_stack_axis(lift)
        if lift.kind == "scan":
            broadcast = lift.kwargs.get("variable_broadcast")
            stacked = param_axis(lift) is not None
            if not stacked and broadcast is None:
                raise LiftError("nn.scan neither stacks nor broadcasts 'params'")
            if stacked and "length" not in lift.kwargs:
                raise LiftError("nn.scan over a stack of layers without length=")
        if lift.kind == "vmap" and param_axis(lift) is not None and "axis_size" not in lift.kwargs:
            raise LiftError("nn.vmap with stacked params needs axis_size=")
    kinds = [lift.kind for lift in chain.lifts]
    if kinds.count("scan") + kinds.count("vmap") > 1 and (
        "scan" in kinds or any(param_axis(lift) is None for lift in chain.lifts if lift.kind == "vmap")
    ):
        raise LiftError(
            "nested nn.scan / nn.vmap are converted only when every one is an nn.vmap that stacks params"
        )


def _one_stack_axis(lift: Lift) -> None:
    """NNX stacks all of a layer's state on one axis: the params' (``out_axes`` of the ``nnx.vmap`` that
    builds the stack, the layer's ``in_axes`` in ``nnx.scan``). Linen's ``variable_axes`` may put each
    collection on its own (flaxformer: params on 1, cache on 0, intermediates on 2): a cache or sown value
    would land on the params' axis, a scalar cache index fail to build. A params axis other than 0 or -1
    also stacks the state NNX alone has (a Dropout's RNG key and count, one scalar per layer) on it: the stack
    does not build (``axis 1 is out of bounds``)."""
    axes = literal_dict(lift.kwargs.get("variable_axes"))
    stack = param_axis(lift)
    others = sorted(set(axes) - {"params"})
    if stack is None:
        if others:  # the layer is handed to nnx.scan unmapped (None): what it creates is carry
            raise LiftError(
                f"nn.{lift.kind} stacks {', '.join(map(repr, others))} of a layer "
                "whose params it shares: NNX maps a layer's state as one (the layer's axis, None), so a value "
                "it sows or creates would be carry, which nnx.capture cannot collect"
            )
        return
    if stack not in ("0", "-1"):  # axis 0 and the last axis exist on a stack of scalars too
        raise LiftError(
            f"nn.{lift.kind} stacks 'params' on axis {stack}: NNX stacks all of a layer's state on that axis, "
            f"also the RNG state only NNX has (one scalar per layer), which has no axis {stack}"
        )
    for name in others:
        value = axes[name]
        if code(value) != stack:
            raise LiftError(
                f"nn.{lift.kind} stacks {name!r} on axis {code(value)} and 'params' on axis {stack}: NNX "
                "stacks all of a layer's state on the params' axis"
            )


def _setup_locals(fn: cst.FunctionDef | None) -> set[str]:
    """The names ``setup()`` binds: a transform's keyword reading one is written where the lifted call
    runs, in ``__call__``, which does not have them (``self`` is the module, not a local)."""
    if fn is None or fn.name.value != "setup":
        return set()
    return assigned_in(fn.body) - {"self"}


def _call_time_names(fn: cst.FunctionDef | None) -> set[str]:
    """The parameters of ``fn`` (not ``setup()``) but ``self``, and the locals bound from them."""
    if fn is None or fn.name.value == "setup":
        return set()
    params = fn.params
    names = {p.name.value for p in (*params.params, *params.kwonly_params, *params.posonly_params)} - {"self"}
    bindings = [
        (assigned_in(node), names_in(node.value if isinstance(node, cst.Assign) else node.iter))
        for node in nodes_of(fn.body, (cst.Assign, cst.For))
    ]
    grown = True
    while grown:  # `n = x.shape[1]`, then `m = n * 2`
        grown = False
        for targets, read in bindings:
            if read & names and not targets <= names:
                names |= targets
                grown = True
    return names


def in_axes_list(node: cst.BaseExpression | None, is_broadcast: callable) -> list[str] | str | None:
    """Linen ``in_axes`` -> one source per input (``'None'`` for ``nn.broadcast``), a single axis
    applying to all inputs, or None when it is not a literal."""
    if node is None:
        return "0"
    if isinstance(node, cst.Name) and node.value == "None":
        return "None"
    if isinstance(node, cst.Integer) or (
        isinstance(node, cst.UnaryOperation) and isinstance(node.expression, cst.Integer)
    ):
        return code(node)
    if is_broadcast(node):
        return "None"
    if isinstance(node, cst.Tuple):
        out = []
        for el in node.elements:
            if is_broadcast(el.value) or (isinstance(el.value, cst.Name) and el.value.value == "None"):
                out.append("None")
            elif isinstance(el.value, (cst.Integer, cst.UnaryOperation)):
                out.append(code(el.value))
            else:
                return None
        return out
    return None


def lifted_ctor(chain: LiftChain, ctor: str) -> str:
    """The construction of a lifted module in ``__init__`` (``ctor`` builds one, using ``rngs``).

    Nested ``nn.vmap``s (a pipeline's repeats of its stages) nest their ``nnx.vmap``s, the innermost
    around the constructor, so the params get the stack axes in Linen's order."""
    stacked = [lift for lift in chain.lifts if lift.kind == "vmap"] if chain.of("scan") is None else []
    if len(stacked) < 2:
        stacked = [chain.stacked] if chain.stacked is not None else []
    built = ctor
    for lift in reversed(stacked):
        axis = param_axis(lift) or "0"
        length = code(lift.kwargs["length"] if lift.kind == "scan" else lift.kwargs["axis_size"])
        body = f"lambda rngs: {built}"
        partition = partition_name(lift)
        if partition is not None:
            body = f"nnx.transform_metadata({body}, in_axes=0, out_axes={axis}, partition={partition})"
        built = f"nnx.vmap({body}, in_axes=0, out_axes={axis})(rngs.split({length}))"
    return built


def lifted_call(
    chain: LiftChain,
    module_ref: str,
    args: list[cst.Arg],
    is_broadcast: callable,
    state_when: str | None = None,
) -> str:
    """The application of a lifted module: ``module_ref(*args)`` under the chain's NNX transforms.

    ``graph_updates=False`` keeps NNX from writing the whole layer stack back out of ``nnx.scan`` /
    ``nnx.remat``: the Params copy that costs memory (docs/nnx_facts.md#graph-updates-and-the-stack-copy); sown values still reach
    ``nnx.capture``. Only a call that creates variables (a decode cache's first call) needs graph
    updates to carry them out: ``state_when`` is that condition in the caller's terms (``decode``),
    "True" when it cannot be told, None when the module never creates any.
    """
    positional = [code(a.value) for a in args if a.keyword is None and not a.star]
    rest = [code(a) for a in args if a.keyword is not None or a.star]
    for a in args:
        if a.star:
            raise LiftError("*args / **kwargs at the call of a lifted module")
    keywords = [a.keyword.value for a in args if a.keyword is not None]
    kind = next((lift.kind for lift in chain.lifts if lift.kind in ("scan", "vmap")), None)
    if keywords and kind is not None:  # flax.core.lift packs them with enable_kwargs=False
        raise LiftError(
            f"{', '.join(k + '=' for k in keywords)} at the call of an nn.{kind} module: Linen ignores keyword "
            "arguments there (a RuntimeWarning; the layer runs with its defaults), NNX would apply them"
        )
    remat = chain.of("remat")
    remat_kwargs = None
    updates = {None: ", graph_updates=False", "True": ""}.get(
        state_when, f", graph_updates=bool({state_when})"
    )
    if remat is not None:
        remat_kwargs = "".join(
            f", {k}={code(v)}" for k, v in remat.kwargs.items() if k in ("policy", "prevent_cse")
        )
        remat_kwargs += updates
    scan, vmaps = chain.of("scan"), [lift for lift in chain.lifts if lift.kind == "vmap"]
    if scan is not None:
        return _scanned_call(scan, module_ref, positional, rest, is_broadcast, remat_kwargs, updates)
    if vmaps:
        return _vmapped_call(vmaps, module_ref, positional, rest, is_broadcast, remat_kwargs)
    assert remat_kwargs is not None
    return f"nnx.remat({_layer_lambda(['_layer'], positional, rest)}{remat_kwargs})({module_ref})"


def _layer_lambda(params: list[str], call_args: list[str], rest: list[str]) -> str:
    """The function a transform applies: the layer (``_layer``) called on the mapped inputs."""
    return f"lambda {', '.join(params)}: _layer({', '.join([*call_args, *rest])})"


def _scanned_call(
    scan: Lift,
    module_ref: str,
    positional: list[str],
    rest: list[str],
    is_broadcast: callable,
    remat_kwargs: str | None,
    updates: str,
) -> str:
    """``nnx.scan`` over the layer stack: the carry first, the module's axis, then the scanned inputs;
    wrapped in ``nnx.remat`` when the chain has one (``remat_kwargs`` not None)."""
    if not positional:
        raise LiftError("a scanned module called without a carry")
    axes = in_axes_list(scan.kwargs.get("in_axes"), is_broadcast)
    xs = positional[1:]
    per_x = axes if isinstance(axes, list) else [axes] * len(xs)
    if len(per_x) != len(xs):
        raise LiftError(f"in_axes has {len(per_x)} entries for {len(xs)} scanned inputs")
    params, call_args, passed, nnx_axes = _map_inputs(xs, per_x)
    module_axis = param_axis(scan) or "None"
    body = _layer_lambda(["_carry", "_layer", *params], ["_carry", *call_args], rest)
    passed = [positional[0], module_ref, *passed]
    if remat_kwargs is not None:
        body = f"nnx.remat({body}{remat_kwargs})"
    out_axes = code(scan.kwargs["out_axes"]) if "out_axes" in scan.kwargs else "0"
    extra = "".join(
        f", {k}={code(scan.kwargs[k])}" for k in ("length", "reverse", "unroll") if k in scan.kwargs
    )
    extra += updates
    in_axes = ", ".join(["nnx.Carry", module_axis, *nnx_axes])
    return (
        f"nnx.scan({body}, in_axes=({in_axes}), out_axes=(nnx.Carry, {out_axes}){extra})({', '.join(passed)})"
    )


def _vmapped_call(
    vmaps: list[Lift],
    module_ref: str,
    positional: list[str],
    rest: list[str],
    is_broadcast: callable,
    remat_kwargs: str | None,
) -> str:
    """``nnx.vmap`` of the layer over its inputs (the module's own axis first), the outermost of
    ``vmaps`` first, each inner one applied inside the outer one's function; the innermost call is
    wrapped in ``nnx.remat`` when the chain has one."""
    vmap = vmaps[0]
    axes = in_axes_list(vmap.kwargs.get("in_axes"), is_broadcast)
    per_x = axes if isinstance(axes, list) else [axes] * len(positional)
    if len(per_x) != len(positional):
        raise LiftError(f"in_axes has {len(per_x)} entries for {len(positional)} inputs")
    params, call_args, passed, nnx_axes = _map_inputs(positional, per_x)
    if len(vmaps) > 1:
        inner = _vmapped_call(vmaps[1:], "_layer", call_args, rest, is_broadcast, remat_kwargs)
        body = f"lambda {', '.join(['_layer', *params])}: {inner}"
    else:
        body = _layer_lambda(["_layer", *params], call_args, rest)
        if remat_kwargs is not None:
            body = f"nnx.remat({body}{remat_kwargs})"
    passed, nnx_axes = [module_ref, *passed], [param_axis(vmap) or "None", *nnx_axes]
    out_axes = code(vmap.kwargs["out_axes"]) if "out_axes" in vmap.kwargs else "0"
    extra = "".join(
        f", {k}={code(vmap.kwargs[k])}" for k in ("axis_name", "spmd_axis_name") if k in vmap.kwargs
    )
    return (
        f"nnx.vmap({body}, in_axes=({', '.join(nnx_axes)},), out_axes={out_axes}{extra})({', '.join(passed)})"
    )


# ---- nn.scan as a method decorator -----------------------------------------------------------------
SCAN_DECORATORS = frozenset({"flax.linen.scan", "flax.linen.transforms.scan"})
"""``@functools.partial(<one of these>, ...)`` on a method scans the method's body over its inputs."""
STEP_SCAN_KWARGS = frozenset(  # nn.scan of a step: a method (@partial(nn.scan, ...)) or a function
    {
        "variable_broadcast",
        "variable_axes",
        "split_rngs",
        "in_axes",
        "out_axes",
        "length",
        "reverse",
        "unroll",
    }
)


@dataclasses.dataclass
class MethodScan:
    """``@functools.partial(nn.scan, variable_broadcast='params', in_axes=1, out_axes=1)`` on
    ``def __call__(self, carry, x)``: in NNX the body stays a plain method (``step``) and the
    decorated name applies ``nnx.scan`` to it, with the module broadcast (``None``) in front of
    the carry -- the same params at every step, as ``variable_broadcast='params'`` says."""

    step: str  # the name the body keeps
    in_axes: list[str]  # one per scanned input (``None`` for nn.broadcast)
    out_axes: str
    extra: str  # length / reverse / unroll, as keyword source


def method_scan(
    kwargs: dict[str, cst.BaseExpression], fn: cst.FunctionDef, taken: set[str], is_broadcast: callable
) -> MethodScan:
    """Validate a scanned method; LiftError says what is not converted and why."""
    extra = set(kwargs) - STEP_SCAN_KWARGS
    if extra:
        raise LiftError(f"nn.scan({', '.join(sorted(extra))}=...) on a method is not converted")
    broadcast = kwargs.get("variable_broadcast")
    names = {code(broadcast)} if broadcast is not None else set()
    if isinstance(broadcast, (cst.List, cst.Tuple)):
        names = {code(e.value) for e in broadcast.elements}
    if not names or not names <= {"'params'", '"params"', "True"}:
        raise LiftError("nn.scan on a method converts only variable_broadcast='params' (shared weights)")
    if literal_dict(kwargs.get("variable_axes")):
        raise LiftError("nn.scan on a method with variable_axes (per-step variables) is not converted")
    for name, value in literal_dict(kwargs.get("split_rngs")).items():
        if code(value) != "False" and name != "params":
            raise LiftError(
                f"split_rngs={{{name!r}: {code(value)}}}: per-step random streams are not converted"
            )
    params = fn.params
    if (
        params.star_arg not in (None, cst.MaybeSentinel.DEFAULT)
        or params.star_kwarg
        or params.kwonly_params
        or params.posonly_params
        or any(p.default is not None for p in params.params)
        or len(params.params) < 2
    ):
        raise LiftError("a scanned method takes (self, carry, *xs) positionally")
    xs = len(params.params) - 2
    axes = in_axes_list(kwargs.get("in_axes"), is_broadcast)
    if axes is None:
        raise LiftError("in_axes is not a literal")
    per_x = axes if isinstance(axes, list) else [axes] * xs
    if len(per_x) != xs:
        raise LiftError(f"in_axes has {len(per_x)} entries for {xs} scanned inputs")
    if any(a.startswith("-") for a in per_x):
        raise LiftError("a negative in_axes may scan the feature axis, which the layers' sizes read")
    out = kwargs.get("out_axes")
    out_axes = "0" if out is None else code(out)
    if not out_axes.isdigit():
        raise LiftError(f"out_axes={out_axes} is not a non-negative literal")
    step = f"_{fn.name.value.strip('_')}_step"
    while step in taken:
        step += "_"
    rest = "".join(f", {k}={code(kwargs[k])}" for k in ("length", "reverse", "unroll") if k in kwargs)
    return MethodScan(step, per_x, out_axes, rest)


def method_scan_call(scan: MethodScan, fn: cst.FunctionDef, state_when: str | None) -> str:
    """The body of the decorated method: ``nnx.scan`` of its step, the module broadcast first.
    ``graph_updates=False`` as for scans of classes (see :func:`lifted_call`). A broadcast input
    (``nn.broadcast``) is closed over, not handed to ``nnx.scan``: Linen's scan closes over it, so a
    Python flag stays Python (``if residual:``), where ``nnx.scan`` would trace it."""
    carry, *xs = [p.name.value for p in fn.params.params[1:]]
    updates = {None: ", graph_updates=False", "True": ""}.get(
        state_when, f", graph_updates=bool({state_when})"
    )
    scanned = ", ".join([carry, *(x for x, axis in zip(xs, scan.in_axes) if axis != "None")])
    in_axes = ", ".join(["None", "nnx.Carry", *(axis for axis in scan.in_axes if axis != "None")])
    return (
        f"nnx.scan(lambda _module, {scanned}: _module.{scan.step}({', '.join([carry, *xs])}), "
        f"in_axes=({in_axes}), out_axes=(nnx.Carry, {scan.out_axes}){scan.extra}{updates})(self, {scanned})"
    )


def _map_inputs(xs: list[str], axes: list[str]) -> tuple[list[str], list[str], list[str], list[str]]:
    """Split a call's inputs for an NNX transform: a broadcast one (axis ``None``) is closed over by
    the lambda, a mapped one becomes its parameter ``_x{i}``. Returns (lambda parameters, the inner
    call's arguments, the values passed to the transform, their axes)."""
    params, call_args, passed, nnx_axes = [], [], [], []
    for i, (x, axis) in enumerate(zip(xs, axes)):
        if axis == "None":
            call_args.append(x)
        else:
            params.append(f"_x{i}")
            call_args.append(f"_x{i}")
            passed.append(x)
            nnx_axes.append(axis)
    return params, call_args, passed, nnx_axes
