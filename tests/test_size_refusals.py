"""Sizes, reads and weights the tool must not take on trust: each case once went through silently (an
NNX model that did not build or computed something else, a weight left at init, a weight dropped).
Each must now be a located manual finding or a named error (or, where the source proves it, the right
size)."""

import textwrap

from linen2nnx.migrate import migrate_source

HEADER = "import flax.linen as nn\nimport jax.numpy as jnp\n\n"


def _manual(src: str) -> tuple[str, set[str]]:
    result = migrate_source(HEADER + textwrap.dedent(src), "case.py")
    compile(result.output, "case.py", "exec")
    return result.output, {f.rule for f in result.findings if f.severity.value == "manual"}


def test_an_own_variable_whose_attribute_setup_reassigns_is_not_read_through_the_attribute():
    _, manual = _manual(
        """
        class M(nn.Module):
            def setup(self):
                self.w = self.param('w', nn.initializers.ones, (3,))
                self.w = self.w * 2.0

            def __call__(self, x):
                return x * self.w + x * self.variables['params']['w']
        """
    )
    # `self.w * 2.0` computed in setup() from the parameter: the class stays Linen (setup_values.py)
    assert {"L2N-MOD-004", "L2N-MOD-007"} <= manual


def test_a_submodule_local_rebound_under_a_condition_is_not_its_callers_size():
    output, manual = _manual(
        """
        class Inner(nn.Module):
            width: int = 4
            double: bool = True

            @nn.compact
            def __call__(self, x):
                d = self.width
                if self.double:
                    d *= 2
                return nn.Dense(d)(x)

        class M(nn.Module):
            width: int = 4

            @nn.compact
            def __call__(self, x):
                return nn.Dense(3)(Inner(self.width)(x))
        """
    )
    assert "L2N-SHAPE-003" in manual and "nnx.Linear(self.width, 3" not in output


def test_a_caller_name_spelled_like_a_setup_local_of_the_callee_keeps_the_callers_value():
    output, _ = _manual(
        """
        class Sub(nn.Module):
            features: int
            hidden: int = 8

            def setup(self):
                out = 2 * self.hidden
                k = 7
                self.a = nn.Dense(out)
                self.b = nn.Dense(self.features)

            def __call__(self, x):
                return jnp.concatenate([self.a(x), self.b(x)], axis=-1)

        class Top(nn.Module):
            width: int = 4

            @nn.compact
            def __call__(self, x):
                k = self.width * 3
                return nn.Dense(3)(Sub(features=k)(x))
        """
    )
    assert "(7)" not in output  # the callee's k = 7 never stands for the caller's k


def test_a_list_changed_in_place_is_not_read_as_its_first_value():
    _, manual = _manual(
        """
        class Block(nn.Module):
            @nn.compact
            def __call__(self, x):
                reps = [1, 1]
                reps[-1] = 3
                return nn.Dense(3)(jnp.tile(x, reps))
        """
    )
    assert "L2N-SHAPE-003" in manual


def test_a_setup_local_a_nested_function_rebinds_or_a_lambda_shadows_is_not_spelled_out():
    for body in (
        "out = self.features\n        def grow():\n            nonlocal out\n            out = 2 * out\n"
        "        grow()\n        self.proj = nn.Dense(out)",
        "out = self.features\n        self.proj = nn.Dense((lambda out: out * 3)(out))",
    ):
        src = (
            "class Sub(nn.Module):\n    features: int\n\n    def setup(self):\n        "
            + body
            + "\n\n    def __call__(self, x):\n        return self.proj(x)\n\n\n"
            "class Top(nn.Module):\n    @nn.compact\n    def __call__(self, x):\n"
            "        return nn.Dense(3)(Sub(features=4)(x))\n"
        )
        output, manual = _manual(src)
        assert "L2N-SHAPE-003" in manual, output


TRAIN_ONLY = """
import flax.linen as nn


class Net(nn.Module):
    def setup(self):
        self.body = nn.Dense(4)
        self.aux = nn.Dense(4)

    def __call__(self, x, train: bool = False):
        h = self.body(x)
        if train:
            h = h + self.aux(h)
        return h
"""


def test_a_train_only_layer_is_never_kept_from_init_nor_dropped_on_the_way_back(tmp_path):
    """A layer Linen creates only in train mode: a checkpoint without it is refused (it is not one Linen
    never creates), and `--to linen` of a checkpoint with it refuses a Linen side whose eval init has
    no place for it instead of writing a checkpoint without it."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import pytest

    from linen2nnx.checkpoint_convert.api import convert, convert_tree
    from linen2nnx.checkpoint_convert.to_linen import convert_to_linen
    from linen2nnx.errors import ConversionError, L2NError
    from linen2nnx.spec import LinenSide, ModelPair, import_file

    result = migrate_source(TRAIN_ONLY, "net.py", module_name="net")
    (tmp_path / "linen_src.py").write_text(TRAIN_ONLY)
    (tmp_path / "nnx_src.py").write_text(result.output)
    result.name_map.save(tmp_path / "map.json")
    linen, nnx_module = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    x = np.ones((2, 3), np.float32)
    side = LinenSide(
        model=linen.Net(),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
    )
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_module.Net(in_features=3, rngs=rngs),
        name_map=tmp_path / "map.json",
    )
    with pytest.raises(ConversionError, match="not filled: NNX aux/kernel"):
        convert_tree(side.init_variables(), pair)
    trained = linen.Net().init(jax.random.key(0), x, train=True)
    convert(trained, tmp_path / "nnx", pair)
    with pytest.raises(L2NError, match="params/aux/kernel"):
        convert_to_linen(tmp_path / "nnx", tmp_path / "back", pair)
    assert not (tmp_path / "back").exists()
