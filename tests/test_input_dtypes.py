"""A variable Linen creates in its input's dtype (linen2nnx/migrate/input_dtypes.py): NNX creates it in
``<attr>_dtype``, a keyword argument defaulting to float32. A checkpoint in another dtype fails
conversion naming the leaf until the argument is given; given, it converts and computes what Linen
does. Any other read of a call-time value stays a located manual finding. Numeric parity of the
float32 default: the L2N-VAR-007 fixture in test_module_forms_parity.py."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from linen2nnx.errors import L2NError
from linen2nnx.migrate import migrate_source
from linen2nnx.spec import LinenSide, ModelPair, import_file

SRC = textwrap.dedent(
    """\
    import flax.linen as nn
    import jax.numpy as jnp


    class Affine(nn.Module):
        @nn.compact
        def __call__(self, x):
            scale = self.param("scale", nn.initializers.normal(), (x.shape[-1],), x.dtype)
            return x * scale + 1.0
    """
)


def _migrated(tmp_path, src=SRC):
    result = migrate_source(src, "affine.py", module_name="affine")
    assert migrate_source(result.output, "affine.py", module_name="affine").output == result.output
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    return result, import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py"), map_path


def _pair(linen_module, nnx_module, x, map_path, **nnx_kwargs):
    side = LinenSide(model=linen_module.Affine(), batch={"x": x}, loss=lambda out, b: jnp.mean(out**2))
    factory = lambda rngs: nnx_module.Affine(in_features=x.shape[-1], **nnx_kwargs, rngs=rngs)  # noqa: E731
    return side, ModelPair(linen=side, nnx_factory=factory, name_map=map_path)


def test_a_bfloat16_checkpoint_needs_the_dtype_argument(tmp_path):
    from linen2nnx.checkpoint_convert.api import convert_state

    result, linen_module, nnx_module, map_path = _migrated(tmp_path)
    assert [f.rule for f in result.findings if f.rule == "L2N-VAR-007"] == ["L2N-VAR-007"]
    assert not [f for f in result.findings if f.severity.value == "manual"]
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 5)), jnp.bfloat16)
    side, pair = _pair(linen_module, nnx_module, x, map_path)
    variables = side.model.init(jax.random.key(0), x)
    assert variables["params"]["scale"].dtype == jnp.bfloat16  # Linen: the dtype its init input had
    with pytest.raises(L2NError, match=r"scale.*dtype|dtype.*scale"):
        convert_state(variables, pair, map_path)
    _, pair = _pair(linen_module, nnx_module, x, map_path, scale_dtype=jnp.bfloat16)
    model, _ = convert_state(variables, pair, map_path)
    assert model.scale[...].dtype == jnp.bfloat16
    np.testing.assert_array_equal(model(x), side.model.apply(variables, x))


def test_a_float32_init_keeps_its_variable_in_float32_at_a_bfloat16_call(tmp_path):
    from linen2nnx.checkpoint_convert.api import convert_state

    _, linen_module, nnx_module, map_path = _migrated(tmp_path)
    x32 = jnp.asarray(np.random.default_rng(1).normal(size=(2, 5)), jnp.float32)
    side, pair = _pair(linen_module, nnx_module, x32, map_path)
    variables = side.model.init(jax.random.key(0), x32)
    model, _ = convert_state(variables, pair, map_path)
    x16 = x32.astype(jnp.bfloat16)
    linen_out, nnx_out = side.model.apply(variables, x16), model(x16)
    assert linen_out.dtype == nnx_out.dtype == jnp.float32  # neither casts the variable
    np.testing.assert_array_equal(nnx_out, linen_out)


@pytest.mark.parametrize(
    "body",
    [
        # the input rebound before the variable: its dtype may have changed
        'x = x.astype(jnp.bfloat16)\nscale = self.param("scale", nn.initializers.ones, (4,), x.dtype)',
        # the dtype of another call-time value
        'h = x * 2\nscale = self.param("scale", nn.initializers.ones, (4,), h.dtype)',
        # the input read otherwise in the same argument
        'scale = self.param("scale", nn.initializers.ones, (4,), x.dtype if x.ndim > 1 else None)',
    ],
)
def test_other_call_time_dtypes_stay_located_findings(body):
    src = "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Affine(nn.Module):\n"
    src += "    @nn.compact\n    def __call__(self, x):\n"
    src += textwrap.indent(body, " " * 8) + "\n        return x * scale\n"
    result = migrate_source(src, "affine.py", module_name="affine")
    found = [f for f in result.findings if f.rule == "L2N-MOD-004"]
    assert len(found) == 1 and "call-time value" in found[0].message, [f.message for f in result.findings]
    assert "L2N-VAR-007" not in {f.rule for f in result.findings}


@pytest.mark.parametrize(
    "body",
    [
        # rebound on the same line, before the variable
        'x = x.astype(jnp.bfloat16); s = self.param("s", nn.initializers.ones, (4,), x.dtype)',
        # a match capture rebinds it
        'match (x.astype(jnp.bfloat16),):\n    case (x,):\n        pass\ns = self.param("s", nn.initializers.ones, (4,), x.dtype)',
        # inside a loop, where an earlier iteration may rebind it
        'for _ in range(2):\n    s = self.param("s", nn.initializers.ones, (4,), x.dtype)\n    x = x.astype(jnp.bfloat16)',
    ],
)
def test_an_input_rebound_before_the_variable_is_not_its_init_dtype(body):
    src = "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Affine(nn.Module):\n"
    src += "    @nn.compact\n    def __call__(self, x):\n"
    src += textwrap.indent(body, " " * 8) + "\n        return x[..., :4] * s\n"
    result = migrate_source(src, "affine.py", module_name="affine")
    assert "L2N-VAR-007" not in {f.rule for f in result.findings}
    assert [f.rule for f in result.findings if f.severity.value == "manual"]


def test_the_dtype_argument_shadows_nothing_the_class_defines():
    src = textwrap.dedent(
        """\
        import flax.linen as nn
        import jax.numpy as jnp


        class Affine(nn.Module):
            probe_dtype = jnp.bfloat16  # a class constant the class reads

            @nn.compact
            def __call__(self, x):
                probe = self.param("probe", nn.initializers.ones, (x.shape[-1],), x.dtype)
                return (x * probe).astype(self.probe_dtype)
        """
    )
    result = migrate_source(src, "affine.py", module_name="affine")
    assert "probe_dtype_: jax.typing.DTypeLike = jax.numpy.float32" in result.output
    assert "self.probe_dtype_ = probe_dtype_" in result.output
    assert "self.probe_dtype =" not in result.output


def test_a_caller_that_casts_the_input_is_told_which_argument_to_pass():
    src = SRC + textwrap.dedent(
        """\


        class Half(nn.Module):
            @nn.compact
            def __call__(self, x):
                h = x.astype(jnp.bfloat16)
                return Affine()(h)
        """
    )
    result = migrate_source(src, "affine.py", module_name="affine")
    found = [f for f in result.findings if f.rule == "L2N-VAR-008"]
    assert len(found) == 1 and "scale_dtype" in found[0].hint, [f.message for f in result.findings]
    assert found[0].line == src.splitlines().index("        return Affine()(h)") + 1


@pytest.mark.parametrize(
    "body",
    [
        "return Affine()(nn.Dense(3, dtype=jnp.bfloat16)(x))",
        "h = nn.LayerNorm(dtype=jnp.bfloat16)(x)\n                return Affine()(h)",
    ],
    ids=["layer_inline", "layer_local"],
)
def test_a_caller_that_hands_on_a_layer_output_in_its_dtype_is_told_too(body):
    """A built-in layer given ``dtype=`` outputs in it (mixed precision: big_vision's ``dtype_mm``), so
    Linen's init creates the callee's ``x.dtype`` variable in bfloat16; NNX in float32 unless told."""
    src = SRC + textwrap.dedent(
        f"""\


        class Half(nn.Module):
            @nn.compact
            def __call__(self, x):
                {body}
        """
    )
    result = migrate_source(src, "affine.py", module_name="affine")
    found = [f for f in result.findings if f.rule == "L2N-VAR-008"]
    assert len(found) == 1 and "scale_dtype" in found[0].hint, [f.message for f in result.findings]


@pytest.mark.parametrize("dtype", ["None", "jnp.float32"])
def test_a_layer_given_no_dtype_or_float32_is_no_cast(dtype):
    src = SRC + textwrap.dedent(
        f"""\


        class Full(nn.Module):
            @nn.compact
            def __call__(self, x):
                return Affine()(nn.Dense(3, dtype={dtype})(x))
        """
    )
    result = migrate_source(src, "affine.py", module_name="affine")
    assert not [f for f in result.findings if f.rule == "L2N-VAR-008"]


LAYER_DTYPE = textwrap.dedent(
    """\
    import flax.linen as nn
    import jax.numpy as jnp


    class Embed(nn.Module):
        dtype: jnp.dtype = jnp.float32

        @nn.compact
        def __call__(self, x):
            x = nn.Dense(4, dtype=self.dtype, name="proj")(x)
            x = jnp.reshape(x, (x.shape[0], -1, 4))
            token = self.param("token", nn.initializers.normal(), (1, 1, 4), x.dtype)
            return jnp.concatenate([jnp.tile(token, (x.shape[0], 1, 1)), x], axis=1)
    """
)


def test_a_variable_in_the_dtype_a_layer_casts_to_is_created_in_that_dtype(tmp_path):
    """Dense(dtype=self.dtype) then a reshape: the token is created in self.dtype, no new argument,
    and a bfloat16 model creates a bfloat16 token, as Linen's init does."""
    result = migrate_source(LAYER_DTYPE, "embed.py", module_name="embed")
    assert not [f for f in result.findings if f.severity.value == "manual"]
    assert "(1, 1, 4), self.dtype)" in result.output and "token_dtype" not in result.output
    (tmp_path / "linen_src.py").write_text(LAYER_DTYPE)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen, nnx_side = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    from flax import nnx

    x = jnp.ones((2, 3), jnp.float32)
    variables = linen.Embed(dtype=jnp.bfloat16).init(jax.random.key(0), x)
    model = nnx_side.Embed(dtype=jnp.bfloat16, in_features=3, rngs=nnx.Rngs(0))
    assert variables["params"]["token"].dtype == model.token[...].dtype == jnp.bfloat16


@pytest.mark.parametrize(
    "binding",
    [
        "x = x.astype(jnp.bfloat16)",  # a cast: not followed
        "x = nn.Dense(4, dtype=jnp.bfloat16)(x.astype(jnp.float16))",  # fine: the layer casts
        "x = nn.Dense(4, dtype=t)(x)",  # a dtype of a local
        "h = x.astype(jnp.bfloat16)\nx = nn.LayerNorm(use_scale=False, use_bias=False)(h)",  # no parameter
        "for _ in range(2):\n        x = nn.Dense(4, dtype=self.dtype)(x)",  # a loop
        "if self.dtype:\n        x = nn.Dense(4, dtype=self.dtype)(x)",  # one branch
        "x = nn.Dense(4, dtype=self.dtype)(x) if self.dtype else x",  # an expression of two values
        "x = nn.Embed(10, 4, param_dtype=jnp.bfloat16)(x)",  # Embed: in its param_dtype, not its input's
    ],
)
def test_a_dtype_the_code_does_not_say_stays_a_finding(binding):
    body = "\n".join("        " + line for line in binding.splitlines())
    src = (
        "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Head(nn.Module):\n"
        "    dtype: jnp.dtype = jnp.float32\n\n    @nn.compact\n    def __call__(self, x, t=jnp.float32):\n"
        f"{body}\n"
        '        scale = self.param("scale", nn.initializers.ones, (4,), x.dtype)\n'
        "        return x * scale\n"
    )
    result = migrate_source(src, "head.py", module_name="head")
    manual = [f.rule for f in result.findings if f.severity.value == "manual"]
    if "jnp.float16" in binding:
        assert not manual and "(4,), jnp.bfloat16)" in result.output
    else:
        assert "L2N-MOD-004" in manual, binding


@pytest.mark.parametrize(
    "binding",
    [
        "x = nn.Dense(4)(x.astype(jnp.bfloat16))",  # a cast input promotes with float32 parameters
        "x = nn.LayerNorm(use_bias=False)(x.astype(jnp.bfloat16))",  # a scale is left: float32 too
    ],
)
def test_a_layer_with_float32_parameters_outputs_float32_whatever_its_input(tmp_path, binding):
    """Without dtype=, a layer's output is the promotion of its input and its float32 parameters:
    float32 for a bfloat16 input too, so the variable takes the float32 keyword argument, as Linen's
    init creates it."""
    src = (
        "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Head(nn.Module):\n"
        "    @nn.compact\n    def __call__(self, x):\n"
        f"        {binding}\n"
        '        scale = self.param("scale", nn.initializers.ones, (4,), x.dtype)\n'
        "        return x * scale\n"
    )
    result = migrate_source(src, "head.py", module_name="head")
    assert not [f for f in result.findings if f.severity.value == "manual"]
    assert "scale_dtype: jax.typing.DTypeLike = jax.numpy.float32" in result.output
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen, nnx_side = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    from flax import nnx

    x = jnp.ones((2, 4), jnp.float32)
    variables = linen.Head().init(jax.random.key(0), x)
    model = nnx_side.Head(in_features=4, rngs=nnx.Rngs(0))
    assert variables["params"]["scale"].dtype == model.scale[...].dtype == jnp.float32


NONE_FIELD = (
    "import flax.linen as nn\nimport jax.numpy as jnp\nfrom typing import Any\n\n\nclass Head(nn.Module):\n"
    "    dtype: Any = None\n\n    @nn.compact\n    def __call__(self, x):\n"
    "        x = nn.Dense(4, dtype=self.dtype, name='proj')(x)\n"
    "        tok = self.param('tok', nn.initializers.normal(1.0), (1, 4), x.dtype)\n        return x + tok\n"
)


@pytest.mark.parametrize("dtype", [None, jnp.bfloat16, jnp.float16])
def test_a_layer_dtype_field_that_defaults_to_none_gives_the_variable_its_dtype_when_set(tmp_path, dtype):
    """dtype=self.dtype of a field defaulting to None (Flax's own convention): left None, Linen promotes
    the input with the parameters, so the variable takes the input's dtype argument (float32); set, the
    layer outputs in it and Linen's init creates the variable in it. A Head(dtype=bfloat16) built from
    scratch had a float32 token in NNX where Linen's is bfloat16."""
    result = migrate_source(NONE_FIELD, "head.py", module_name="head")
    assert not [f for f in result.findings if f.severity.value == "manual"]
    assert "tok_dtype: jax.typing.DTypeLike = jax.numpy.float32" in result.output
    (tmp_path / "linen_src.py").write_text(NONE_FIELD)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen, nnx_side = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    from flax import nnx

    x = jnp.ones((2, 3), jnp.float32)
    variables = linen.Head(dtype=dtype).init(jax.random.key(0), x)
    model = nnx_side.Head(dtype=dtype, in_features=3, rngs=nnx.Rngs(0))
    expected = jnp.float32 if dtype is None else dtype
    assert variables["params"]["tok"].dtype == model.tok[...].dtype == expected
    assert jax.tree.map(lambda v: (v.shape, v.dtype), variables["params"]) == {
        "proj": {"kernel": ((3, 4), jnp.float32), "bias": ((4,), jnp.float32)},
        "tok": ((1, 4), expected),
    }
