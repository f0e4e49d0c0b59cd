"""A traced size is one number of one config: a config expression that equals it is taken only when
nothing else one trace cannot rule out explains it too. Each case here was a plain ``L2N-SHAPE-001``
guess that another config of the same model proves wrong; each is now an ``L2N-SHAPE-003`` that lists
the candidates (the required constructor argument is what a person, or the written spec, fills), or,
for a flatten's factor of 1, a finding that says it holds for the traced resolution only."""

import textwrap

import jax.numpy as jnp
import numpy as np

from linen2nnx.migrate import FileResult, Severity, migrate_source
from linen2nnx.migrate.trace import trace_linen
from linen2nnx.spec import LinenSide, import_file


def _traced(tmp_path, source: str, cls: str, shape: tuple[int, ...], **config) -> FileResult:
    """``source`` migrated with the trace of ``cls(**config)`` on zeros of ``shape``."""
    source = textwrap.dedent(source)
    path = tmp_path / f"{cls.lower()}_{len(list(tmp_path.iterdir()))}.py"
    path.write_text(source)
    module = import_file(path)
    side = LinenSide(
        model=getattr(module, cls)(**config),
        batch={"x": np.zeros(shape, np.float32)},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    return migrate_source(source, path.name, module_name=path.stem, trace=trace_linen(side))


def _sized(result: FileResult, site: str) -> list[tuple[str, str]]:
    """``(rule, message)`` of the findings that size ``site`` (``Net.dense_1``)."""
    return [(f.rule, f.message) for f in result.findings if site in f.message and "SHAPE" in f.rule]


def _ambiguous(result: FileResult, site: str) -> str:
    """The message of the one ambiguity finding of ``site``; no ``L2N-SHAPE-001`` guessed it."""
    sized = _sized(result, site)
    assert not [m for rule, m in sized if rule == "L2N-SHAPE-001"], sized
    manual = [f for f in result.findings if f.severity is Severity.MANUAL and site in f.message]
    assert {f.rule for f in manual} == {"L2N-SHAPE-003"}, sized
    (message,) = [m for _, m in sized if "ambiguous" in m or "matches" in m]
    return message


MIXER = """
import flax.linen as nn
import jax.numpy as jnp


class MlpBlock(nn.Module):
    mlp_dim: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(x.shape[-1])(nn.gelu(nn.Dense(self.mlp_dim)(x)))


class Mixer(nn.Module):
    hidden: int = 16
    tok_mlp: int = 8

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.hidden)(x)
        y = jnp.swapaxes(nn.LayerNorm()(x), 1, 2)
        return x + jnp.swapaxes(MlpBlock(self.tok_mlp)(y), 1, 2)
"""


def test_a_token_count_of_the_traced_input_is_no_config_width(tmp_path):
    """16 tokens mixed by a block, and a hidden width of 16: the block's input size is the token
    count (axis 1 of the input), which a longer input changes; self.hidden equals it by chance."""
    message = _ambiguous(_traced(tmp_path, MIXER, "Mixer", (2, 16, 3)), "Mixer.mlp_block_0")
    assert "self.hidden" in message and "axis 1 of a traced input of shape (2, 16, 3)" in message
    # 10 tokens: no field is 10, so no guess to make, as before
    assert not _sized(_traced(tmp_path, MIXER, "Mixer", (2, 10, 3)), "= self.hidden")


POSEMB = """
import flax.linen as nn
import jax.numpy as jnp


class AddPositionEmbs(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + self.param("pos", nn.initializers.normal(0.02), (1, x.shape[1], x.shape[2]))


class ViT(nn.Module):
    hidden: int = 16

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.hidden, (2, 2), strides=(2, 2))(x)
        b, h, w, c = x.shape
        return AddPositionEmbs()(jnp.reshape(x, (b, h * w, c))).mean(1)
"""


def test_a_patch_count_read_by_a_parameter_is_no_config_width(tmp_path):
    """An 8 x 8 image in 2 x 2 patches: 16 patches, the hidden width 16 too. The embedding's length
    axis is the patch count, which the image's size sets; its width is self.hidden."""
    message = _ambiguous(_traced(tmp_path, POSEMB, "ViT", (2, 8, 8, 3)), "ViT.add_position_embs_0")
    assert "axis 1, traced 16, matches: self.hidden" in message and "axis 2 of the input itself" in message


DOUBLED = """
import jax
import jax.numpy as jnp
import flax.linen as nn


class Net(nn.Module):
    d: int = 8
    out: int = 2

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.d)(x)
        return nn.Dense(self.out)(jax.lax.collapse(jnp.stack([x, x], -1), 1))
"""


def test_a_product_of_two_fields_is_no_better_than_a_literal_multiple(tmp_path):
    """Two copies of d = 8 stacked: 16, which d * out makes too where out is 2. Both are listed."""
    message = _ambiguous(_traced(tmp_path, DOUBLED, "Net", (2, 5)), "Net.dense_1")
    assert "self.d * self.out" in message and "2 * self.d" in message


BRANCHED = """
import jax
import jax.numpy as jnp
import flax.linen as nn


class Net(nn.Module):
    d: int = 8
    double: bool = False

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.d)(x)
        {branch}
        return nn.Dense(3)(x)
"""
DOUBLE = "jax.lax.collapse(jnp.stack([x, x], -1), 1)"


def test_a_size_one_branch_changes_is_not_the_traced_sides(tmp_path):
    """The trace took `double=False`, where the size is self.d; `double=True` doubles it. Whether the
    branch is a conditional expression or an `if`, the size stays the user's to give."""
    for branch in (f"x = {DOUBLE} if self.double else x", f"if self.double:\n            x = {DOUBLE}"):
        result = _traced(tmp_path, BRANCHED.format(branch=branch), "Net", (2, 5))
        sized = _sized(result, "Net.dense_1")
        assert [rule for rule, _ in sized] == ["L2N-SHAPE-003"], sized


FLATTENED = """
import jax
import jax.numpy as jnp
import flax.linen as nn


class CNN(nn.Module):
    ch: int = 4
    hidden: int = 64

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.ch, (3, 3), strides=({stride}, {stride}))(x)
        x = x.reshape((x.shape[0], -1))
        return nn.Dense(3)(nn.Dense(self.hidden)(x))
"""


def test_a_flatten_of_pixels_is_sized_for_the_traced_resolution_only(tmp_path):
    """4 x 4 pixels of 4 channels: 64, which the hidden width is too: both listed. An 8 x 8 image
    strided to 1 x 1 pixel: self.ch, said to hold for the traced resolution only, as any factor."""
    message = _ambiguous(_traced(tmp_path, FLATTENED.format(stride=1), "CNN", (2, 4, 4, 1)), "CNN.dense_1")
    assert "16 * self.ch (for the traced input resolution only)" in message and "self.hidden" in message
    one = _traced(tmp_path, FLATTENED.format(stride=8), "CNN", (2, 8, 8, 1))
    (found,) = [f for f in one.findings if f.rule == "L2N-SHAPE-001" and "CNN.dense_1" in f.message]
    assert "= self.ch (traced: 4)" in found.message and "traced input resolution only" in found.hint


HEADS = """
import jax
import jax.numpy as jnp
import flax.linen as nn


class Attn(nn.Module):
    d_model: int = 16
    heads: int = 2
    head_dim: int = 8

    @nn.compact
    def __call__(self, x):
        b, n, _ = x.shape
        v = nn.DenseGeneral((self.heads, self.head_dim))(x)
        return nn.Dense(self.d_model)(v.reshape(b, n, -1))
"""


def test_a_flatten_of_heads_lists_the_heads_field_beside_the_factor(tmp_path):
    """Merging 2 heads of 8 is a flatten too: its factor is the heads field, not a literal 2."""
    message = _ambiguous(_traced(tmp_path, HEADS, "Attn", (2, 5, 16)), "Attn.dense_0")
    assert "2 * self.head_dim (for the traced input resolution only)" in message
    assert "self.heads * self.head_dim" in message
