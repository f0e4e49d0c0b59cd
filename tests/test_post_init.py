"""A Linen module's ``__post_init__`` (``linen2nnx/migrate/post_init.py``): moved into ``__init__`` after
the fields when that is the same program, else left where it is with the verifier's finding."""

import pytest

from linen2nnx.migrate import migrate_source

HOOK_CLASS = (
    "import flax.linen as nn\n\n\n"
    "class Block(nn.Module):\n"
    "    width: int = 4\n\n"
    "{hook}\n"
    "    @nn.compact\n"
    "    def __call__(self, x):\n"
    "        return nn.Dense(self.width)(x)\n"
)


def _migrated(hook: str, extra: str = "") -> tuple[str, set[str]]:
    result = migrate_source(HOOK_CLASS.format(hook=hook) + extra, "m.py", module_name="m")
    return result.output, {f.rule for f in result.findings}


def test_moved_hook_runs_after_the_fields_and_before_the_layers():
    out, rules = _migrated(
        "    def __post_init__(self):\n"
        "        super().__post_init__()\n"
        "        assert self.width > 0, self.width\n"
    )
    assert "L2N-MOD-011" in rules and "L2N-VERIFY-004" not in rules
    assert "__post_init__" not in out
    init = out[out.index("def __init__") :]
    assert init.index("self.width = width") < init.index("assert self.width > 0") < init.index("nnx.Linear")


@pytest.mark.parametrize(
    "hook",
    [
        # a field rebound: callers read sizes from the fields as the constructor receives them
        "    def __post_init__(self):\n        self.width = 2 * self.width\n        super().__post_init__()\n",
        "    def __post_init__(self):\n        object.__setattr__(self, 'width', 8)\n"
        "        super().__post_init__()\n",
        # an early return would leave __init__ before the layers are built
        "    def __post_init__(self):\n        super().__post_init__()\n        if self.width:\n"
        "            return\n        print(self.width)\n",
        # the base's hook not chained exactly once
        "    def __post_init__(self):\n        print(self.width)\n",
        "    def __post_init__(self):\n        super().__post_init__()\n        super().__post_init__()\n",
        # more than self, or a decorator
        "    def __post_init__(self, *args):\n        super().__post_init__()\n",
        "    @staticmethod\n    def __post_init__():\n        pass\n",
        # called again elsewhere in the class
        "    def __post_init__(self):\n        super().__post_init__()\n\n"
        "    def reset(self):\n        self.__post_init__()\n",
    ],
)
def test_hook_that_is_not_the_same_program_in_init_stays_reported(hook):
    out, rules = _migrated(hook)
    assert "def __post_init__" in out
    assert "L2N-MOD-011" not in rules
    assert "L2N-VERIFY-004" in rules


def test_hook_of_a_subclass_of_a_run_class_stays_reported():
    """A base of the run may have a hook of its own to chain to: the subclass's hook stays."""
    sub = (
        "\n\nclass Wide(Block):\n"
        "    extra: int = 2\n\n"
        "    def __post_init__(self):\n"
        "        super().__post_init__()\n"
    )
    out, rules = _migrated("", sub)
    assert out.count("def __post_init__") == 1 and "L2N-VERIFY-004" in rules
