"""The import edits both migrate passes share (``linen2nnx.migrate.imports``): where an added
``import`` goes, how the blank lines around it are set, and which unused imports are dropped."""

from __future__ import annotations

import libcst as cst
import pytest

from linen2nnx.migrate.imports import drop_unused_imports, drop_unused_linen_imports, ensure_plain_import
from linen2nnx.migrate.training.rewrite import drop_unused_train_state_import


def _plain(source: str, name: str, **kwargs: bool) -> str:
    return ensure_plain_import(cst.parse_module(source), name, **kwargs).code


def test_plain_import_goes_before_the_first_import_with_a_blank_line_after_by_default() -> None:
    source = '"""Doc."""\n\n# third party\nimport jax\n'
    assert _plain(source, "math") == '"""Doc."""\n\n# third party\nimport math\n\nimport jax\n'


def test_plain_import_joins_the_import_block_without_blank_line_after() -> None:
    source = '"""Doc."""\n\nimport jax\nfrom flax import nnx\n'
    assert _plain(source, "functools", blank_line_after=False) == (
        '"""Doc."""\n\nimport functools\nimport jax\nfrom flax import nnx\n'
    )


@pytest.mark.parametrize("blank_line_after", [True, False])
def test_plain_import_stays_after_future_imports(blank_line_after: bool) -> None:
    source = '"""Doc."""\n\nfrom __future__ import annotations\n\nfrom flax import nnx\n'
    out = _plain(source, "math", blank_line_after=blank_line_after)
    compile(out, "<migrated>", "exec")  # a line above ``from __future__`` would be a SyntaxError
    assert out.index("from __future__") < out.index("import math") < out.index("from flax import nnx")


def test_plain_import_after_future_imports_when_no_other_import() -> None:
    out = _plain('"""Doc."""\nfrom __future__ import annotations\nx = 1\n', "math")
    assert out == '"""Doc."""\nfrom __future__ import annotations\nimport math\nx = 1\n'


def test_plain_import_not_added_when_the_name_is_bound() -> None:
    for source in ("import math\n", "import numpy as math\n", "import jax as math\n"):
        assert _plain(source, "math") == source
    assert _plain("import jax.numpy as jnp\n", "jax") == "import jax\n\nimport jax.numpy as jnp\n"


def test_drop_unused_train_state_import_keeps_used_names_and_other_imports() -> None:
    source = "from flax.training import train_state, common_utils\nimport jax\n\nx = common_utils\n"
    out = drop_unused_train_state_import(cst.parse_module(source)).code
    assert out == "from flax.training import common_utils\nimport jax\n\nx = common_utils\n"
    used = "from flax.training import train_state\n\nx = train_state.TrainState\n"
    assert drop_unused_train_state_import(cst.parse_module(used)).code == used


def test_drop_unused_linen_imports_tidies_the_new_first_line() -> None:
    source = "import flax.linen as nn\n\nimport jax\n\nx = jax\n"
    assert drop_unused_linen_imports(cst.parse_module(source)).code == "import jax\n\nx = jax\n"


def test_drop_unused_imports_applies_the_given_filter_only() -> None:
    def drop_os(small: cst.BaseSmallStatement, used: set[str]) -> cst.BaseSmallStatement | None:
        is_os = isinstance(small, cst.Import) and small.names[0].name.value == "os"
        return None if is_os and "os" not in used else small

    source = "import os; import sys\nimport re\n\ny = sys\n"
    out = drop_unused_imports(cst.parse_module(source), drop_os).code
    assert out == "import sys\nimport re\n\ny = sys\n"
