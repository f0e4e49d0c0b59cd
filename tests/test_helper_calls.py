"""Replaying helper methods' calls in @nn.compact (migrate/helper_calls.py): when a call is replayed,
when the class is left as written, and where the findings land."""

import textwrap

import libcst as cst

from linen2nnx.migrate import migrate_source
from linen2nnx.migrate.discovery import read_run
from linen2nnx.migrate.helper_calls import replay_helper_calls
from linen2nnx.migrate.shared_helpers import KEY as SHARED_KEY
from linen2nnx.migrate.shared_helpers import run_shared_helpers

HEADER = "import flax.linen as nn\n\n\n"

BLOCK = """
class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = self._block(x, 3, index=1)
        return x

    def _block(self, x, features, index):
        for i in range(2):
            x = nn.Dense(features, name=f"fc{index}_{i}")(x)
        return x
"""


def replayed(source: str):
    source = HEADER + textwrap.dedent(source)
    return replay_helper_calls(cst.parse_module(source), source)


def test_a_static_call_is_replayed_with_linen_names():
    result = replayed(BLOCK)
    assert result is not None and result.classes == ["Net"]
    assert 'name="fc1_0"' in result.source and 'name="fc1_1"' in result.source
    assert "def _block" not in result.source and "# replayed: x = self._block(x, 3, index=1)" in result.source


def test_a_helper_a_subclass_overrides_is_not_replayed():
    assert (
        replayed(
            BLOCK + "\n\nclass Wide(Net):\n    def _block(self, x, features, index):\n        return x\n"
        )
        is None
    )


def test_a_helper_another_method_calls_is_not_replayed():
    assert (
        replayed(
            BLOCK + "\n    def encode(self, x):\n        x = self._block(x, 3, index=2)\n        return x\n"
        )
        is None
    )


def test_a_helper_used_in_an_expression_is_not_replayed():
    assert (
        replayed(BLOCK.replace("x = self._block(x, 3, index=1)", "x = x + self._block(x, 3, index=1)"))
        is None
    )


def test_a_rebound_parameter_passed_under_another_name_is_not_replayed():
    assert replayed(BLOCK.replace("x = self._block(x, 3, index=1)", "y = self._block(x, 3, index=1)")) is None


def test_a_multiline_call_gives_a_one_line_note():
    result = replayed(
        BLOCK.replace("self._block(x, 3, index=1)", "self._block(\n            x, 3, index=1\n        )")
    )
    assert result is not None and "# replayed: x = self._block( x, 3, index=1 )" in result.source
    cst.parse_module(result.source)


def test_findings_are_on_the_original_lines():
    source = HEADER + textwrap.dedent(BLOCK)
    result = migrate_source(source, "net.py", module_name="net")
    call_line = source.splitlines().index("        x = self._block(x, 3, index=1)") + 1
    assert result.source == source and "self.fc1_1 = nnx.Linear(3, 3" in result.output
    assert {f.line for f in result.findings if f.rule == "L2N-SHAPE-002"} == {call_line}, result.findings


def test_a_class_still_kept_as_linen_keeps_its_helpers():
    source = HEADER + textwrap.dedent(BLOCK).replace("(x, 3, index=1)", "(x, features=x.shape[0], index=1)")
    result = migrate_source(source, "net.py", module_name="net")
    assert "def _block" in result.output and "could not be replayed in place" in result.output


def test_a_renamed_parameter_leaves_attributes_and_keywords_alone():
    source = BLOCK.replace("def _block(self, x, features, index):", "def _block(self, h, features, index):")
    source = source.replace(
        '        for i in range(2):\n            x = nn.Dense(features, name=f"fc{index}_{i}")(x)\n        return x',
        '        h = nn.Dense(features, use_bias=self.h, name=f"fc{index}")(h)\n        return h',
    )
    source = source.replace("class Net(nn.Module):\n", "class Net(nn.Module):\n    h: bool = True\n\n")
    result = replayed(source)
    assert result is not None and 'x = nn.Dense(3, use_bias=self.h, name="fc1")(x)' in result.source


def test_a_string_argument_in_an_f_string_becomes_its_text():
    source = BLOCK.replace('name=f"fc{index}_{i}"', 'name=f"{tag}_{i}_{x.shape[-1]}"').replace(
        "features, index)", 'features, index, tag="fc")'
    )
    result = replayed(source)
    assert result is not None and 'name=f"fc_0_{x.shape[-1]}"' in result.source, result.source


def test_a_loop_of_helper_calls_named_from_its_variable_is_unrolled():
    source = BLOCK.replace(
        "x = self._block(x, 3, index=1)", "for k in range(2):\n            x = self._block(x, 3, index=k)"
    )
    result = replayed(source)
    assert (
        result is not None
        and [f'name="fc{k}_{i}"' in result.source for k in (0, 1) for i in (0, 1)] == [True] * 4
    )
    result = replayed(
        source.replace("return x\n\n    def", "return x + k\n\n    def")
    )  # `k` read after the loop
    assert result is not None and "for k in range(2):" in result.source


def test_a_helper_a_subclass_calls_is_not_replayed():
    source = BLOCK + "\n\nclass Wide(Net):\n    def setup(self):\n        self._block(None, 3, index=2)\n"
    assert replayed(source) is None


SETUP_HELPER = """
class Block(nn.Module):
    features: int

    def setup(self):
        self._setup_mlp()

    def _setup_mlp(self):
        self.mlp = nn.Dense(self.features)

    def __call__(self, x):
        return self.mlp(x)
"""


def test_a_setup_helper_binding_layers_is_replayed_in_setup():
    result = replayed(SETUP_HELPER)
    assert result is not None and result.classes == ["Block"]
    assert "def _setup_mlp" not in result.source
    assert "# replayed: self._setup_mlp()\n        self.mlp = nn.Dense(self.features)" in result.source


def test_a_setup_helper_another_method_calls_is_not_replayed():
    source = SETUP_HELPER + "\n    def reset(self):\n        self._setup_mlp()\n"
    assert replayed(source) is None


def test_a_setup_helper_whose_result_is_bound_to_an_attribute_is_not_replayed():
    source = SETUP_HELPER.replace("        self._setup_mlp()\n", "        self.extra = self._setup_mlp()\n")
    assert replayed(source) is None


def test_a_helper_another_file_of_the_run_names_is_not_replayed(tmp_path):
    """Replaying removes the method; a subclass in another file calling or overriding it would lose it."""
    (tmp_path / "base.py").write_text(HEADER + textwrap.dedent(SETUP_HELPER))
    (tmp_path / "sub.py").write_text(
        "from base import Block\n\n\nclass Wide(Block):\n    def setup(self):\n        self._setup_mlp()\n"
    )
    shared = run_shared_helpers(read_run([tmp_path / "base.py", tmp_path / "sub.py"]))
    assert shared.shared("_setup_mlp") and not shared.shared("mlp")
    source = HEADER + textwrap.dedent(SETUP_HELPER)
    assert replay_helper_calls(cst.parse_module(source), source, functions={SHARED_KEY: shared}) is None
    alone = run_shared_helpers(read_run([tmp_path / "base.py"]))
    assert replay_helper_calls(cst.parse_module(source), source, functions={SHARED_KEY: alone}) is not None


def test_a_read_of_an_attribute_stays_before_the_helper_rebinds_it():
    source = SETUP_HELPER.replace(
        "        self.mlp = nn.Dense(self.features)\n",
        "        width = self.features\n        self.features = 2 * self.features\n"
        "        self.mlp = nn.Dense(width)\n",
    )
    result = replayed(source)
    assert result is not None and "width = self.features" in result.source
    assert "nn.Dense(width)" in result.source


def test_a_helper_reading_a_module_name_the_caller_shadows_is_not_replayed():
    source = "init = nn.initializers.zeros\n" + SETUP_HELPER.replace(
        "        self._setup_mlp()\n", "        init = nn.initializers.ones\n        self._setup_mlp()\n"
    ).replace("nn.Dense(self.features)", "nn.Dense(self.features, kernel_init=init)")
    assert replayed(source) is None


def test_a_helper_the_class_reaches_by_a_computed_name_is_not_replayed():
    source = SETUP_HELPER.replace(
        "        self._setup_mlp()\n", "        self._setup_mlp()\n        getattr(self, '_setup_' + 'x')\n"
    )
    assert replayed(source) is None


UNPACKED = """
class Router(nn.Module):
    noisy: bool = False

    @nn.compact
    def __call__(self, x):
        probs, aux = self._gates(x)
        return probs * aux

    @nn.nowrap
    def _gates(self, h):
        logits = nn.Dense(3, name="router")(h)
        if not self.noisy:
            return logits, logits.sum()
        probs = logits * 2.0
        aux = probs.mean()
        return probs, aux
"""


def test_an_unpacked_nowrap_helper_with_a_guard_is_replayed():
    """``@nn.nowrap`` helper, a tuple of names, a guard's return and locals named as the results: the
    rest after the guard becomes its else, each return the assignment of the names."""
    result = replayed(UNPACKED)
    assert result is not None and result.classes == ["Router"]
    assert "def _gates" not in result.source
    assert "probs, aux = logits, logits.sum()" in result.source and "else:" in result.source


def test_a_local_named_as_the_result_a_rebound_parameter_takes_is_not_replayed():
    """``x = self._h(x)`` where ``_h(self, h)`` rebinds ``h`` (renamed ``x``) and also has a local
    ``x``: replayed, the two would be one variable (``x = x + x`` for ``h + x``)."""
    source = """
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x, y = self._h(x)
            return x + y

        @nn.nowrap
        def _h(self, h):
            x = nn.Dense(4, name="inner")(h)
            h = h * 2.0
            return h + x, x
    """
    assert replayed(source) is None
    assert (
        replayed(
            source.replace("x, y = self._h(x)", "x = self._h(x)").replace("return h + x, x", "return h + x")
        )
        is None
    )


ROUTER = """
class Router(nn.Module):
    experts: int = 4
    dtype: object = None

    @nn.compact
    def __call__(self, x):
        gates, aux = self._gates(x, self.experts)
        return gates, aux

    @nn.nowrap
    def _gates(self, x, experts):
        dtype = self.dtype or x.dtype
        logits = nn.Dense(experts, dtype=dtype, name="dense")(x)
        if self.experts > 2:
            return logits, logits.sum()
        else:
            return logits, None
"""


def test_a_class_kept_linen_after_its_replay_says_what_kept_it():
    """vmoe's routers: the helper call replays in place, then the layer's dtype read from the input keeps
    the class Linen; the layer's finding (and its marker) name that reason, not the replay."""
    source = HEADER + textwrap.dedent(ROUTER)
    result = migrate_source(source, "router.py", module_name="router")
    dense_line = (
        source.splitlines().index('        logits = nn.Dense(experts, dtype=dtype, name="dense")(x)') + 1
    )
    (finding,) = [f for f in result.findings if f.rule == "L2N-API-002"]
    assert finding.line == dense_line, result.findings
    assert "could not be replayed" not in finding.message
    assert "replay in place, but the class then still stays Linen: L2N-MOD-004 at line" in finding.message
    assert "argument dtype= of nn.Dense uses the call-time value x" in finding.message
    assert finding.message in result.output  # its marker says the same
    assert "def _gates" in result.output  # the class keeps its author's code
    again = migrate_source(result.output, "router.py", module_name="router")
    assert again.output == result.output
