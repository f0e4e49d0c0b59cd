"""The rank of what a class of the file returns, for a caller that knows its input's rank
(linen2nnx/migrate/callee_ranks.py), and the ranks of elementwise results (last_axis_ops.broadcast):
a rank is known only where every path proves it; else an index that may reach the last axis stays a
located finding. Numeric parity: the L2N-SHAPE-002/callee_rank fixture in test_module_forms_parity.py."""

import textwrap

import pytest

from linen2nnx.migrate import migrate_source
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.engine import Mode, migrate_paths
from linen2nnx.migrate.last_axis_ops import broadcast

CALLER = """

class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(6)(jnp.reshape(x, [x.shape[0], -1, x.shape[-1]]))
        x = Encoder()(x)
        return nn.Dense(3, name="head")(x[:, 0])
"""


def _head_findings(encoder_body: str) -> list[str]:
    src = "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Encoder(nn.Module):\n"
    src += "    flag: bool = False\n\n    @nn.compact\n    def __call__(self, x):\n"
    src += textwrap.indent(textwrap.dedent(encoder_body), " " * 8) + CALLER
    result = migrate_source(src, "model.py", module_name="model")
    assert migrate_source(result.output, "model.py", module_name="model").output == result.output
    return [f.message for f in result.findings if f.rule == "L2N-SHAPE-003" and "Model.head" in f.message]


@pytest.mark.parametrize(
    "body",
    [
        "return nn.LayerNorm()(x)",
        "y = nn.Dense(4)(x)\nreturn x + nn.Dense(x.shape[-1])(y)",
        "return nn.Conv(6, (3,), padding='SAME')(x) * 2.0",
    ],
)
def test_a_callee_that_keeps_its_input_rank_sizes_the_callers_index(body):
    assert _head_findings(body) == []


@pytest.mark.parametrize(
    "body",
    [
        "return jnp.mean(x, axis=1)",  # the token axis is gone: x[:, 0] indexes the last one
        "return x + jnp.ones((1, 1, 1, 1))",  # broadcasting against four axes adds one
        "return x[:, 0] if self.flag else x",  # ranks differ between the returns
        "return jnp.squeeze(x)",
    ],
)
def test_a_callee_that_may_change_the_rank_leaves_the_index_a_finding(body):
    found = _head_findings(body)
    assert len(found) == 1 and "unknown statically" in found[0], found


def test_broadcast_keeps_a_rank_only_when_the_other_operand_proves_it():
    x3 = Feat("input", input_name="x", rank=3)
    assert broadcast(x3, Feat("expr", expr="4", rank=3)) == x3
    assert broadcast(x3, Feat("expr", expr="4", rank=4)).rank == 4
    assert broadcast(x3, Feat("expr", expr="4", rank=1)) == x3
    assert broadcast(x3, Feat("expr", expr="4")).rank == 0  # another array of unknown rank
    assert broadcast(x3, Feat.unknown("Float"), (False, True)) == x3  # x / 255.0
    assert broadcast(Feat.unknown("Integer"), x3, (True, False)) == x3
    assert broadcast(x3, Feat.unknown("a call")).rank == 0  # jax.random.normal(key, (3, 1, d))


def _model_head_findings(body: str, extra: str = "") -> list[str]:
    src = "import flax.linen as nn\nimport jax.numpy as jnp\n" + extra + "\n\nclass Model(nn.Module):\n"
    src += "    pool: str = 'mean'\n\n    @nn.compact\n    def __call__(self, x):\n"
    src += "        x = nn.Dense(6)(jnp.reshape(x, [x.shape[0], -1, x.shape[-1]]))\n"
    src += textwrap.indent(textwrap.dedent(body), " " * 8)
    src += "\n        return nn.Dense(3, name='head')(jnp.concatenate([x, x], axis=1))\n"
    result = migrate_source(src, "model.py", module_name="model")
    assert migrate_source(result.output, "model.py", module_name="model").output == result.output
    return [f.message for f in result.findings if f.rule == "L2N-SHAPE-003" and "Model.head" in f.message]


@pytest.mark.parametrize(
    "body",
    [
        # blocks the size flow does not walk: what they bind is unknown after them, never the value before
        "match self.pool:\n    case 'mean':\n        x = x.mean(axis=1)",
        "try:\n    pass\nfinally:\n    x = x.mean(axis=1)",
        "for _ in range(0):\n    pass\nelse:\n    x = x.mean(axis=1)",
        "try:\n    pass\nexcept ValueError:\n    x = x.mean(axis=1)",
        # x += y is x + y: the mean has rank 2, a value of unknown rank may add axes
        "x = x.mean(axis=1)\nx += jnp.asarray(self.pool_table)",
        # tiling with more repeats than axes adds leading ones
        "x = jnp.tile(x.mean(axis=1), (2, 1, 1))",
    ],
)
def test_what_the_flow_does_not_walk_leaves_the_head_a_finding(body):
    found = _model_head_findings(body)
    assert len(found) == 1 and "unknown statically" in found[0], found


def test_a_helper_method_binds_keyword_arguments_by_name():
    extra = textwrap.dedent(
        """

        class Encoder(nn.Module):
            @nn.compact
            def __call__(self, x):
                h = nn.Dense(6)(x).mean(axis=1)
                return self._pick(b=x, a=h)

            def _pick(self, a, b):
                return a
        """
    )
    found = _model_head_findings("x = Encoder()(x)", extra)
    assert len(found) == 1, found  # the helper returns the mean (rank 2): x[:, ...] axis 1 is the last


def test_two_classes_of_one_name_are_not_probed_as_one():
    extra = textwrap.dedent(
        """

        class Block(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.LayerNorm()(x)


        def factory():
            class Block(nn.Module):
                @nn.compact
                def __call__(self, x):
                    return jnp.reshape(x, (-1, x.shape[-1]))

            return Block
        """
    )
    found = _model_head_findings("x = Block()(x)", extra)
    assert len(found) == 1, found  # which Block the name means is not one class: no rank from a probe


def _with_encoder_file(tmp_path, encoder: str):
    """``Model`` (CALLER) in model.py, applying ``Encoder`` imported from encoder.py (``encoder``):
    the run's result, model.py's output and its manual findings' messages."""
    (tmp_path / "encoder.py").write_text(encoder)
    (tmp_path / "model.py").write_text(
        "import flax.linen as nn\nimport jax.numpy as jnp\n\nfrom encoder import Encoder\n" + CALLER
    )
    result = migrate_paths([tmp_path], Mode.DIFF)
    out = next(f.output for f in result.files if f.path.name == "model.py")
    manual = [
        f.message for f in result.findings if f.path.endswith("model.py") and f.severity.value == "manual"
    ]
    return result, out, manual


@pytest.mark.parametrize(
    ("body", "sized"),
    [
        ("return nn.LayerNorm()(x)", True),  # keeps the rank: x[:, 0] indexes the token axis
        ("return jnp.mean(x, axis=1)", False),  # drops an axis: x[:, 0] may index the last one
    ],
)
def test_a_class_of_another_file_answers_for_its_rank_from_its_summary(tmp_path, body, sized):
    """``Encoder`` lives in another file: its file probes it for the common ranks and the summary
    carries what they found, so the caller's ``x[:, 0]`` is sized when the callee keeps the rank, and
    stays a finding when it does not (callee_ranks.with_out_ranks)."""
    _, out, manual = _with_encoder_file(
        tmp_path,
        "import flax.linen as nn\nimport jax.numpy as jnp\n\n\nclass Encoder(nn.Module):\n"
        "    @nn.compact\n    def __call__(self, x):\n" + textwrap.indent(body, " " * 8) + "\n",
    )
    if sized:
        assert manual == [] and "nnx.Linear(6, 3, rngs=rngs)" in out
    else:
        assert len(manual) == 1 and "Model.head" in manual[0], manual


def test_a_lifted_call_of_another_file_is_not_probed(tmp_path):
    """``nn.vmap`` on ``__call__`` moves the feature axis (``out_axes=2``): the walk of the method body
    would say the rank and the last axis are kept, so such a class is not probed and the caller's
    ``x[:, 0]`` stays a located finding."""
    _, _, manual = _with_encoder_file(
        tmp_path,
        "import functools\n\nimport flax.linen as nn\n\n\nclass Encoder(nn.Module):\n"
        "    @functools.partial(nn.vmap, in_axes=1, out_axes=2, variable_axes={'params': None},"
        " split_rngs={'params': False})\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.LayerNorm()(x)\n",
    )
    assert len(manual) == 1 and "Model.head" in manual[0], manual


def test_only_a_file_another_file_imports_probes_for_its_summary(tmp_path):
    """The rank probe for the summary costs a walk of each class: a file no other file of the run
    imports skips it (nobody reads its summaries); a file another imports carries the result."""
    encoder = (
        "import flax.linen as nn\n\n\nclass {name}(nn.Module):\n    @nn.compact\n"
        "    def __call__(self, x):\n        return nn.LayerNorm()(x)\n"
    )
    (tmp_path / "lonely.py").write_text(encoder.format(name="Lonely"))
    result, _, _ = _with_encoder_file(tmp_path, encoder.format(name="Encoder"))
    summaries = {k: v for f in result.files for k, v in (f.summaries or {}).items()}
    assert [rank for rank, _ in summaries["encoder.Encoder"].out_ranks] == [3]
    assert summaries["lonely.Lonely"].out_ranks == ()
