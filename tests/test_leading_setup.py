"""The attributes setup() binds first (``linen2nnx/migrate/leading_setup.py``), spelled out in the
class's fields so that a caller can read a block's output size through them."""

import libcst as cst

from linen2nnx.migrate.leading_setup import leading_setup_values


def _values(setup: str, fields=("config", "dim", "heads")) -> dict[str, str]:
    return leading_setup_values(cst.parse_module(setup).body[0], fields)


def test_leading_attributes_are_spelled_out_in_fields():
    values = _values(
        "def setup(self):\n"
        "    self.hidden_size = self.config.hidden_size\n"
        "    cfg = self.config\n"
        "    self.n = cfg.num_heads\n"
        "    self.head_dim = self.hidden_size // self.n\n"
        "    self.wide = self.dim * 4 + 1\n"
        "    self.dense = nn.Dense(self.hidden_size)\n"
        "    self.after = self.dim\n"
    )
    assert values == {
        "hidden_size": "self.config.hidden_size",
        "n": "self.config.num_heads",
        "head_dim": "self.config.hidden_size // self.config.num_heads",
        "wide": "self.dim * 4 + 1",
    }  # not `after`: bound after setup() builds a layer


def test_what_has_no_value_in_fields_is_left_out():
    values = _values(
        "def setup(self):\n"
        "    self.a = GLOBAL_WIDTH\n"  # a module-level name
        "    self.b = self.unknown_attr\n"  # not a field
        "    self.c = local + 1\n"  # a local never bound here
        "    self.d = self.dim\n"
        "    self.d = self.dim * 2\n"  # bound twice: which one holds is not one value
        "    self.e = self.dim\n"
    )
    assert values == {"e": "self.dim"}
