"""Sizes and reads the rewrite must not take on trust: each case once converted silently into an NNX
model that did not build or computed something else. Each must now be a located manual finding (or,
where the source does prove it, the right size)."""

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
    assert "L2N-VERIFY-003" in manual


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
