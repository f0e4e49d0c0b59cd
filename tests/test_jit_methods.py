"""``nn.jit`` on a method of a class the run converts (linen2nnx/migrate/jit_methods.py): ``nnx.jit`` with
``self`` dropped from the static and donated arguments, or a located manual finding naming the setting
NNX has no spelling for. Numeric parity: the L2N-XFORM-003 fixture in test_module_forms_parity.py."""

import textwrap

import pytest

from linen2nnx.migrate import migrate_source

HEAD = "import functools\n\nimport flax.linen as nn\n\n\n"


def _migrate(decorator: str):
    src = HEAD + textwrap.dedent(
        f"""\
        class Block(nn.Module):
            features: int = 4

            {decorator}
            @nn.compact
            def __call__(self, x, n=1, m=2):
                return nn.Dense(self.features)(x) * n * m
        """
    )
    result = migrate_source(src, "block.py", module_name="block")
    again = migrate_source(result.output, "block.py", module_name="block")
    assert again.output == result.output  # idempotent
    return result


def _decorator_line(output: str) -> str:
    return next(line.strip() for line in output.splitlines() if line.strip().startswith("@"))


@pytest.mark.parametrize(
    ("linen", "nnx"),
    [
        ("@nn.jit", "@nnx.jit"),
        ("@functools.partial(nn.jit, static_argnames='self')", "@nnx.jit"),
        ("@functools.partial(nn.jit, static_argnames=('self',), rngs=True)", "@nnx.jit"),
        (
            "@functools.partial(nn.jit, static_argnames=['n', 'self', 'm'])",
            "@functools.partial(nnx.jit, static_argnames=['n', 'm'])",
        ),
        (
            "@functools.partial(nn.jit, static_argnums=(0, 2), donate_argnums=0)",
            "@functools.partial(nnx.jit, static_argnums=(2,))",
        ),
        (
            "@functools.partial(nn.jit, static_argnums=(2, 3), backend='cpu')",
            "@functools.partial(nnx.jit, static_argnums=(2, 3), backend='cpu')",
        ),
    ],
)
def test_method_jit_becomes_nnx_jit_without_self(linen, nnx):
    result = _migrate(linen)
    assert _decorator_line(result.output) == nnx
    assert "L2N-XFORM-003" in {f.rule for f in result.findings}
    assert not [f for f in result.findings if f.severity.value == "manual"]


@pytest.mark.parametrize(
    ("linen", "reason"),
    [
        ("@functools.partial(nn.jit, variables='params')", "variables= selects part"),
        ("@functools.partial(nn.jit, methods=['encode'])", "methods= has no nnx.jit counterpart"),
        ("@functools.partial(nn.jit, static_argnames=NAMES)", "not a literal"),
        ("@functools.partial(nn.jit, True)", "given by position"),
    ],
)
def test_method_jit_setting_without_nnx_spelling_is_located(linen, reason):
    result = _migrate(linen)
    found = [f for f in result.findings if f.rule == "L2N-API-002"]
    assert len(found) == 1 and reason in found[0].message, [f.message for f in result.findings]
    assert found[0].line == 9  # the decorator's line
    assert "class BlockLinen(nn.Module)" in result.output  # kept as Linen behind the bridge


def test_jit_of_a_module_class_is_not_a_method_decorator():
    src = HEAD + textwrap.dedent(
        """\
        class Block(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(3)(x)


        class Model(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.jit(Block)()(x)
        """
    )
    result = migrate_source(src, "model.py", module_name="model")
    assert "L2N-XFORM-003" not in {f.rule for f in result.findings}
    assert [f.rule for f in result.findings if f.severity.value == "manual"]
