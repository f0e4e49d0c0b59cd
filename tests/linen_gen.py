"""A hypothesis generator of random but valid Flax Linen source files, for the codemod property tests.

It draws SOURCE TEXT (what ``linen2nnx migrate`` consumes) plus a description of every class in it
(input rank, input feature size, constructor values, mode keywords), so a test can build inputs and
run the Linen original next to its migrated NNX twin.

What it covers (the forms the codemod supports):

- built-in layers from ``linen2nnx.layers.LAYER_RULES`` that take float inputs: ``Dense``, ``Conv``
  and ``ConvTranspose`` (4-D inputs only), ``LayerNorm``, ``RMSNorm``, ``GroupNorm`` (``num_groups``
  always divides the feature size), ``BatchNorm`` (mode from the call's ``train`` / ``deterministic``
  argument) and ``Dropout``; interleaved with ``relu`` / ``gelu`` / ``tanh``, either as their own
  statement or wrapped around a layer call;
- residual connections (``x = x + layer(x)``) around layers that keep the shape;
- ``setup()`` style (attributes, possibly defined in another order than they are applied, plus a
  ``__call__`` chain) and ``@nn.compact`` style (inline constructors, optional explicit ``name=``);
  mode arguments in the constructor or at the call (by keyword, or positionally for BatchNorm);
- dataclass fields: ints used as feature sizes (``self.f``, ``self.f * 2``, ``2 * self.f``, ``self.f`` /
  ``* 2`` over two lines inside the call's brackets), floats
  used as dropout rates, required or defaulted, plain or ``dataclasses.field(default=...)``, and
  constructed with their default or with another value;
- explicit ``name=`` values that equal a field or the attribute an auto-name becomes (``dense_0``);
- one to three classes per file, a later one possibly using earlier ones as submodules (compact
  ``Inner(...)(x, train=...)`` or setup ``self.enc = Inner(...)``, config passed positionally or
  by keyword, the mode argument translated between ``train`` and ``deterministic``);
- four spellings of the Linen import;
- sometimes a subclass of one of the classes, with a field of its own, that runs what its base builds
  (it overrides ``__call__`` with a plain method calling ``super().__call__``, and a ``setup()``
  base's ``setup`` with one calling ``super().setup()`` first).

Left out on purpose (the codemod does not support them yet; see the property tests' module
docstring): ``setup()`` lists / dicts of layers, layers created in loops, ``Embed`` (integer
inputs), and dataclass fields named like a constructor argument the codemod adds (``in_features``,
``rngs``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

# ---- the import spellings: (import lines, prefix used in the code) ------------------------------
IMPORTS = (
    ("import flax.linen as nn", "nn"),
    ("from flax import linen as nn", "nn"),
    ("from flax import linen", "linen"),
    ("import flax.linen as linen", "linen"),
)

ACTIVATIONS = ("relu", "gelu", "tanh")
INT_FIELDS = ("hidden", "width", "features", "dim", "channels", "mid", "out_dim")
FLOAT_FIELDS = ("rate", "drop_rate", "p_drop")
CLASS_NAMES = ("MLP", "Block", "Net", "Encoder", "Tower", "Stem", "Head")
# explicit compact names (fields are added per class)
EXPLICIT_NAMES = (
    "head",
    "proj",
    "stem",
    "norm",
    "Mixer",
    "last",
    "bn",
    "drop",
    "conv",
    "pre_norm",
    "dense_0",
    "dense_1",
    "conv_0",
    "layer_norm_0",
    "batch_norm_0",
    "dropout_0",
)
SETUP_ATTRS = ("fc", "proj", "norm", "drop", "bn", "conv", "head", "ln", "gn", "up", "mix")
RATES = ("0.1", "0.25", "0.5")
# Codemod bug (pinned in test_migrate_properties.py): a positional ``deterministic`` at a Dropout call
# stays positional, but ``nnx.Dropout.__call__`` takes it keyword-only. Switch on once fixed.
POSITIONAL_DROPOUT_MODE = True

# mode argument spellings: (parameter text, name, expression for "not training", train kw, eval kw)
MODES = (
    ("train: bool = False", "train", "not train", {"train": True}, {"train": False}),
    ("train=False", "train", "not train", {"train": True}, {"train": False}),
    ("*, train: bool = False", "train", "not train", {"train": True}, {"train": False}),
    (
        "deterministic: bool = True",
        "deterministic",
        "deterministic",
        {"deterministic": False},
        {"deterministic": True},
    ),
    (
        "*, deterministic: bool = True",
        "deterministic",
        "deterministic",
        {"deterministic": False},
        {"deterministic": True},
    ),
)


@dataclasses.dataclass
class GenField:
    name: str
    kind: str  # "int" | "float"
    default: Any  # None: required
    value: Any  # the value the model is built with
    spelled_as_field: bool = False  # dataclasses.field(default=...)

    def render(self) -> str:
        ann = self.kind
        if self.default is None:
            return f"{self.name}: {ann}"
        if self.spelled_as_field:
            return f"{self.name}: {ann} = dataclasses.field(default={self.default!r})"
        return f"{self.name}: {ann} = {self.default!r}"


@dataclasses.dataclass
class GenClass:
    """One generated Linen class and how to build inputs for it."""

    name: str
    style: str  # "setup" | "compact"
    source: str
    rank: int  # 2: (batch, features); 4: (batch, h, w, features)
    in_features: int
    spatial: int  # h = w for rank 4
    batch: int
    ctor_kwargs: dict[str, Any]  # dataclass field values to build it with (same on both sides)
    train_kwargs: dict[str, Any]
    eval_kwargs: dict[str, Any]
    mutable: tuple[str, ...]  # ("batch_stats",) when it has a BatchNorm
    layers: tuple[str, ...]  # Linen layer classes it uses, in application order (submodules expanded)
    fields: list[GenField] = dataclasses.field(default_factory=list)
    out_features: int = 0
    out_spatial: int = 0
    mode_name: str | None = None  # its train / deterministic call argument, if any
    mode_kwonly: bool = False
    base: str | None = None  # a subclass of that generated class (else of nn.Module)

    @property
    def input_shape(self) -> tuple[int, ...]:
        if self.rank == 2:
            return (self.batch, self.in_features)
        return (self.batch, self.spatial, self.spatial, self.in_features)


@dataclasses.dataclass
class GenFile:
    source: str
    import_line: str
    classes: list[GenClass]
    root: int  # index of the class a numeric test should check

    @property
    def root_class(self) -> GenClass:
        return self.classes[self.root]


# ---- one layer application ------------------------------------------------------------------------
@dataclasses.dataclass
class Op:
    layer: str | None  # Linen class, or None for a bare activation
    ctor: list[str] = dataclasses.field(default_factory=list)  # constructor arguments, rendered
    call: list[str] = dataclasses.field(default_factory=list)  # extra call keywords, rendered
    act: str | None = None  # activation (the op itself when layer is None, else wrapped around it)
    name: str | None = None  # explicit name= (compact) or attribute (setup)
    sub: str | None = None  # a user-defined class of the same file (then ``layer`` is its name)
    residual: bool = False  # ``x = x + layer(x)``


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _feature_expr(draw, int_fields: list[GenField]) -> tuple[str, int]:
    """A feature-size expression and its value: a literal or an int field."""
    choices = ["literal"]
    if int_fields:
        choices += ["field", "field", "times2", "twotimes", "two_lines"]
    kind = draw(st.sampled_from(choices))
    if kind == "literal":
        v = draw(st.integers(2, 8))
        return str(v), v
    f = draw(st.sampled_from(int_fields))
    if kind == "field":
        return f"self.{f.name}", f.value
    if kind == "times2":
        return f"self.{f.name} * 2", f.value * 2
    if kind == "two_lines":  # over two lines, inside the call's brackets (the text is no expression alone)
        return f"self.{f.name}\n        * 2", f.value * 2
    return f"2 * self.{f.name}", 2 * f.value


def _args(positional: list[str], keywords: list[tuple[str, str]], draw, names: list[str]) -> list[str]:
    """Spell the leading ``names`` positionally up to a drawn cut, the rest as keywords."""
    cut = draw(st.integers(0, len(positional)))
    out = list(positional[:cut])
    out += [f"{n}={v}" for n, v in zip(names[cut:], positional[cut:])]
    out += [f"{k}={v}" for k, v in keywords]
    return out


def _sub_eligible(inner: GenClass, rank: int, feat: int, sp: int) -> bool:
    """Can ``inner`` be applied here (after a Dense that fixes its input feature size if needed)?"""
    if inner.rank == 4:
        return rank == 4 and sp == inner.spatial
    return True


def _mode_value(inner_mode: str, outer_mode: str) -> str:
    """The inner module's mode argument, from the outer one's."""
    training = "train" if outer_mode == "train" else "not deterministic"
    return training if inner_mode == "train" else ("not train" if outer_mode == "train" else "deterministic")


@st.composite
def _class(draw, name: str, prefix: str, earlier: list[GenClass]) -> GenClass:
    p = prefix
    style = draw(st.sampled_from(["setup", "compact"]))
    rank = draw(st.sampled_from([2, 4]))
    in_features = draw(st.integers(2, 6))
    spatial = draw(st.integers(4, 6)) if rank == 4 else 1
    batch = 4 if rank == 2 else 2

    # -- fields --
    fields: list[GenField] = []
    for fname in draw(st.lists(st.sampled_from(INT_FIELDS), max_size=3, unique=True)):
        default = draw(st.one_of(st.none(), st.integers(2, 6)))
        value = default if default is not None and draw(st.booleans()) else draw(st.integers(2, 6))
        fields.append(GenField(fname, "int", default, value, draw(st.booleans()) if default else False))
    if draw(st.booleans()):
        fname = draw(st.sampled_from(FLOAT_FIELDS))
        default = draw(st.sampled_from([None, 0.1, 0.25, 0.5]))
        value = default if default is not None and draw(st.booleans()) else draw(st.sampled_from([0.1, 0.3]))
        fields.append(GenField(fname, "float", default, value, draw(st.booleans()) if default else False))
    fields.sort(key=lambda f: f.default is not None)  # required fields first (dataclass rule)
    int_fields = [f for f in fields if f.kind == "int"]
    float_fields = [f for f in fields if f.kind == "float"]
    ctor_kwargs = {f.name: f.value for f in fields if f.default is None or f.value != f.default}

    # -- the layer chain --
    mode = draw(st.sampled_from(MODES))
    mode_expr = mode[2]
    feat, sp = in_features, spatial
    ops: list[Op] = []
    layers: list[str] = []
    mutable = False
    sub_modes = False
    n_layers = draw(st.integers(1, 5))
    kinds = ["Dense", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm", "Dropout"]
    if rank == 4:
        kinds += ["Conv", "Conv", "ConvTranspose"]
    if earlier:
        kinds += ["Sub"] * 4
    # explicit compact names: some equal a field or the attribute an auto-name becomes (dense_0)
    explicit_pool = list(dict.fromkeys([*EXPLICIT_NAMES, *(f.name for f in fields)]))
    for _ in range(n_layers):
        if draw(st.integers(0, 2)) == 0:
            ops.append(Op(None, act=draw(st.sampled_from(ACTIVATIONS))))
        kind = draw(st.sampled_from(kinds))
        if kind == "Sub":
            options = [c for c in earlier if _sub_eligible(c, rank, feat, sp)]
            if not options:
                kind = "Dense"
            else:
                inner = draw(st.sampled_from(options))
                if feat != inner.in_features:  # fix the inner module's input size first
                    ops.append(Op("Dense", ctor=[str(inner.in_features)]))
                    layers.append("Dense")
                    feat = inner.in_features
                cut = draw(st.integers(0, len(inner.fields)))
                ctor = [repr(f.value) for f in inner.fields[:cut]]
                ctor += [
                    f"{k}={v!r}"
                    for k, v in inner.ctor_kwargs.items()
                    if k not in {f.name for f in inner.fields[:cut]}
                ]
                op = Op(inner.name, ctor=ctor, sub=inner.name)
                if inner.mode_name is not None:
                    value = _mode_value(inner.mode_name, mode[1])
                    kw_only = inner.mode_kwonly or draw(st.booleans())
                    op.call.append(f"{inner.mode_name}={value}" if kw_only else value)
                    sub_modes = True
                layers.extend(inner.layers)
                mutable = mutable or bool(inner.mutable)
                feat, sp = inner.out_features, inner.out_spatial
        if kind != "Sub":
            op = Op(kind)
            layers.append(kind)
        feat_before, sp_before = feat, sp
        if kind == "Dense":
            expr, feat = draw(_feature_expr(int_fields))
            kw = []
            if draw(st.booleans()):
                kw.append(("use_bias", "False"))
            if draw(st.integers(0, 3)) == 0:
                kw.append(("kernel_init", f"{p}.initializers.lecun_normal()"))
            op.ctor = _args([expr], kw, draw, ["features"])
        elif kind in ("Conv", "ConvTranspose"):
            expr, feat = draw(_feature_expr(int_fields))
            k = draw(st.integers(1, 3))
            kw = []
            if kind == "Conv" and sp >= k + 1 and draw(st.integers(0, 2)) == 0:
                kw.append(("padding", '"VALID"'))
                sp = sp - k + 1
            elif kind == "Conv" and sp >= 4 and draw(st.integers(0, 3)) == 0:
                kw.append(("strides", "(2, 2)"))
                sp = (sp + 1) // 2
            if draw(st.integers(0, 2)) == 0:
                kw.append(("use_bias", "False"))
            op.ctor = _args([expr, f"({k}, {k})"], kw, draw, ["features", "kernel_size"])
        elif kind in ("LayerNorm", "RMSNorm"):
            kw = []
            if draw(st.booleans()):
                kw.append(("epsilon", "1e-3"))
            if kind == "LayerNorm" and draw(st.integers(0, 3)) == 0:
                kw.append(("use_bias", "False"))
            op.ctor = [f"{k}={v}" for k, v in kw]
        elif kind == "GroupNorm":
            groups = draw(st.sampled_from(_divisors(feat)))
            op.ctor = [f"num_groups={groups}"] + (["epsilon=1e-4"] if draw(st.booleans()) else [])
        elif kind == "BatchNorm":
            mutable = True
            kw = []
            if draw(st.booleans()):
                kw.append(("momentum", "0.9"))
            if draw(st.integers(0, 2)) == 0:
                kw.append(("epsilon", "1e-4"))
            op.ctor = [f"{k}={v}" for k, v in kw]
            mode_kw = f"use_running_average={mode_expr}"
            if style == "compact" and draw(st.booleans()):
                op.ctor.insert(0, mode_kw)
            else:
                op.call.append(draw(st.sampled_from([mode_kw, mode_expr])))
        elif kind == "Dropout":
            rate = (
                f"self.{draw(st.sampled_from(float_fields)).name}"
                if float_fields and draw(st.booleans())
                else draw(st.sampled_from(RATES))
            )
            op.ctor = _args([rate], [], draw, ["rate"])
            mode_kw = f"deterministic={mode_expr}"
            if style == "compact" and draw(st.booleans()):
                op.ctor.append(mode_kw)
            else:
                op.call.append(
                    draw(st.sampled_from([mode_kw, mode_expr] if POSITIONAL_DROPOUT_MODE else [mode_kw]))
                )
        if draw(st.integers(0, 2)) == 0:
            op.act = draw(st.sampled_from(ACTIVATIONS))
        if kind != "Sub" and (feat, sp) == (feat_before, sp_before) and draw(st.integers(0, 3)) == 0:
            op.residual = True
        if style == "compact" and explicit_pool and draw(st.integers(0, 3)) == 0:
            op.name = draw(st.sampled_from(explicit_pool))
            explicit_pool.remove(op.name)
        ops.append(op)
    if all(k == "Dropout" for k in layers):  # something with parameters (a checkpoint needs "params")
        expr, feat = draw(_feature_expr(int_fields))
        ops.append(Op("Dense", ctor=[expr]))
        layers.append("Dense")
    if draw(st.integers(0, 3)) == 0:
        ops.append(Op(None, act=draw(st.sampled_from(ACTIVATIONS))))

    needs_mode = sub_modes or any(k in ("BatchNorm", "Dropout") for k in layers)
    use_mode = needs_mode or draw(st.booleans())
    train_kwargs, eval_kwargs = (mode[3], mode[4]) if use_mode else ({}, {})

    # -- render --
    inp = draw(st.sampled_from(["x", "inputs", "h"]))
    fresh = draw(st.booleans())  # fresh variable per statement, or reassign the input name
    sig = f"self, {inp}" + (f", {mode[0]}" if use_mode else "")
    lines = [f"class {name}({p}.Module):"]
    if draw(st.integers(0, 3)) == 0:
        lines.append(f'    """Generated {style}-style module."""')
        lines.append("")
    for f in fields:
        lines.append(f"    {f.render()}")
    if fields:
        lines.append("")

    if style == "setup":
        attrs = []
        used: set[str] = {f.name for f in fields}
        for op in ops:
            if op.layer is None:
                continue
            base = draw(st.sampled_from(SETUP_ATTRS))
            attr = base
            i = 1
            while attr in used:
                attr = f"{base}{i}"
                i += 1
            used.add(attr)
            op.name = attr
            ctor = f"{op.sub}(" if op.sub else f"{p}.{op.layer}("
            attrs.append((attr, f"{ctor}{', '.join(op.ctor)})"))
        order = draw(st.permutations(attrs))
        lines.append("    def setup(self):")
        lines += [f"        self.{a} = {c}" for a, c in order]
        lines.append("")
        lines.append(f"    def __call__({sig}):")
    else:
        lines.append(f"    @{p}.compact")
        lines.append(f"    def __call__({sig}):")

    body: list[str] = []
    cur = inp
    for i, op in enumerate(ops):
        if op.layer is None:
            value = f"{p}.{op.act}({cur})"
        else:
            call_args = ", ".join([cur, *op.call])
            if style == "setup":
                value = f"self.{op.name}({call_args})"
            else:
                ctor = list(op.ctor) + ([f'name="{op.name}"'] if op.name else [])
                func = op.sub if op.sub else f"{p}.{op.layer}"
                value = f"{func}({', '.join(ctor)})({call_args})"
            if op.act:
                value = f"{p}.{op.act}({value})"
            if op.residual:
                value = f"{cur} + {value}"
        if i == len(ops) - 1 and draw(st.booleans()):
            body.append(f"return {value}")
            cur = None
            break
        target = f"y{i}" if fresh else inp
        body.append(f"{target} = {value}")
        cur = target
    if cur is not None:
        body.append(f"return {cur}")
    lines += [f"        {b}" for b in body]

    return GenClass(
        name=name,
        style=style,
        source="\n".join(lines) + "\n",
        rank=rank,
        in_features=in_features,
        spatial=spatial,
        batch=batch,
        ctor_kwargs=ctor_kwargs,
        train_kwargs=dict(train_kwargs),
        eval_kwargs=dict(eval_kwargs),
        mutable=("batch_stats",) if mutable else (),
        layers=tuple(layers),
        fields=fields,
        out_features=feat,
        out_spatial=sp,
        mode_name=mode[1] if use_mode else None,
        mode_kwonly=mode[0].startswith("*"),
    )


@st.composite
def _subclass(draw, base: GenClass, prefix: str) -> GenClass:
    """A subclass of ``base`` that runs what ``base`` builds: it adds a defaulted field and overrides
    ``__call__`` with a plain method that calls ``super().__call__``; when ``base`` builds in
    ``setup``, it may also override ``setup`` with one that calls ``super().setup()`` first."""
    default = draw(st.integers(2, 4))
    field = GenField("extra_scale", "int", default, draw(st.sampled_from([default, 5])))
    lines = [f"class {base.name}Scaled({base.name}):", f"    {field.render()}", ""]
    if base.style == "setup" and draw(st.booleans()):
        lines += ["    def setup(self):", "        super().setup()", "        self.offset = 1.0", ""]
        scaled = "(super().__call__(x, *args, **kwargs) + self.offset) * self.extra_scale"
    else:
        scaled = "super().__call__(x, *args, **kwargs) * self.extra_scale"
    lines += ["    def __call__(self, x, *args, **kwargs):", f"        return {scaled}"]
    kwargs = dict(base.ctor_kwargs)
    if field.value != field.default:
        kwargs[field.name] = field.value
    return dataclasses.replace(
        base,
        name=f"{base.name}Scaled",
        source="\n".join(lines) + "\n",
        ctor_kwargs=kwargs,
        fields=[*base.fields, field],
        base=base.name,
    )


@st.composite
def linen_files(draw, max_classes: int = 3) -> GenFile:
    """A whole Linen source file: imports, then one to ``max_classes`` module classes (a later one
    may use earlier ones as submodules)."""
    import_line, prefix = draw(st.sampled_from(IMPORTS))
    names = draw(st.lists(st.sampled_from(CLASS_NAMES), min_size=1, max_size=max_classes, unique=True))
    classes: list[GenClass] = []
    for name in names:
        classes.append(draw(_class(name, prefix, list(classes))))
    if draw(st.integers(0, 3)) == 0:  # a subclass that runs what its base builds
        base = draw(st.sampled_from(classes))
        if "extra_scale" not in {f.name for f in base.fields}:
            classes.append(draw(_subclass(base, prefix)))
    header = []
    if any("dataclasses.field" in c.source for c in classes):
        header.append("import dataclasses")
        header.append("")
    extra = draw(st.sampled_from(["", "import jax.numpy as jnp\n"]))
    header.append(extra + import_line if extra else import_line)
    source = "\n".join(header) + "\n\n\n" + "\n\n".join(c.source for c in classes)
    # the last class is the likeliest to use the others: check it more often
    root = len(classes) - 1 if draw(st.booleans()) else draw(st.integers(0, len(classes) - 1))
    return GenFile(source=source, import_line=import_line, classes=classes, root=root)
