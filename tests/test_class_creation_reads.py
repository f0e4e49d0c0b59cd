"""Fields the class body reads while the class is created stay class attributes of the NNX class
(rewrite_classes._nnx_body, class_fields.read_at_class_creation). Numeric parity: the fixture
L2N-MOD-001/class_attribute_reads_field in test_module_forms_parity.py."""

from linen2nnx.migrate import migrate_source

SRC = """import flax.linen as nn


def promote(x):
    return x


class Head(nn.Module):
    promote: object = promote
    heads: int = 2
    width: int = 8
    per_head = width // heads

    @nn.compact
    def __call__(self, x):
        return self.promote(nn.Dense(self.per_head)(x))
"""


def test_a_field_read_below_it_stays_and_one_read_above_it_is_the_module_name():
    result = migrate_source(SRC, "head.py", module_name="head")
    body = result.output.split("class Head(nnx.Module):\n", 1)[1]
    assert body.startswith("    heads: int = 2\n    width: int = 8\n\n    def __init__(")
    assert "    promote: object = promote\n" not in body  # its default reads the module's promote
    namespace: dict = {}
    exec(compile(result.output, "head.py", "exec"), namespace)  # the class body runs: no NameError
    assert namespace["Head"].per_head == 4
    assert migrate_source(result.output, "head.py", module_name="head").output == result.output


def test_init_goes_below_the_class_attributes_its_defaults_read():
    src = SRC.replace(
        "    per_head = width // heads\n", "    per_head = width // heads\n    depth: int = per_head * 2\n"
    )
    result = migrate_source(src, "head.py", module_name="head")
    namespace: dict = {}
    exec(compile(result.output, "head.py", "exec"), namespace)
    assert namespace["Head"].__init__.__defaults__[-1] == 8  # depth's default: per_head * 2
    assert not [f for f in result.findings if f.rule == "L2N-VERIFY-008"]


def test_a_field_declared_again_in_a_subclass_keeps_its_place():
    """Positional construction follows the dataclass's order: the base's, whatever order the subclass
    declares its fields in again."""
    src = SRC + "\n\nclass Wide(Head):\n    width: int = 16\n    heads: int = 4\n"
    result = migrate_source(src, "head.py", module_name="head")
    assert (
        "class Wide(Head):\n    def __init__(\n        self,\n        promote: object = promote,\n        heads: int = 4,\n        width: int = 16,"
        in result.output
    )
