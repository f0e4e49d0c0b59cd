"""An attribute setup() binds in several branches (``linen2nnx/migrate/setup_branches.py``): a layer
applied to its output is sized by the branch that ran, as a choice on a config test, or left to a
constructor argument and a finding -- never sized by the last branch written."""

import pytest

from linen2nnx.migrate import migrate_source

HEADER = "import flax.linen as nn\n\n\ndef unknown_fn(x):\n    return x.sum(-1, keepdims=True)\n\n\n"


def _migrated(setup_lines: str, fields: str = "    wide: bool = True\n") -> tuple[str, list]:
    src = (
        HEADER + "class Model(nn.Module):\n" + fields + "\n    def setup(self):\n"
        "        self.embed = nn.Dense(4)\n" + setup_lines + "        self.head = nn.Dense(3)\n\n"
        "    def __call__(self, x):\n"
        "        return self.head(self.proj(self.embed(x)))\n"
    )
    result = migrate_source(src, "m.py", module_name="m")
    head = next(line.strip() for line in result.output.splitlines() if "self.head = " in line)
    return head, [f for f in result.findings if f.severity.value == "manual"]


@pytest.mark.parametrize(
    "setup_lines, in_features",
    [
        (  # statements
            "        if self.wide:\n            self.proj = nn.Dense(8)\n"
            "        else:\n            self.proj = nn.Dense(6)\n",
            "(8 if self.wide else 6)",
        ),
        ("        self.proj = nn.Dense(8) if self.wide else nn.Dense(6)\n", "(8 if self.wide else 6)"),
        # a function that keeps the last axis: the input's size on that branch
        ("        self.proj = nn.Dense(8) if self.wide else nn.relu\n", "(8 if self.wide else 4)"),
        ("        self.proj = nn.Dense(8) if self.wide else None\n", "8"),  # None is never applied
        (  # a dropout or a stand-in that keeps its input (big_vision's Gemma block)
            "        if self.wide:\n            self.proj = nn.Dropout(0.1, deterministic=True)\n"
            "        else:\n            self.proj = lambda x, *_: x\n",
            "4",
        ),
        ("        self.proj = nn.Dense(8) if self.wide else nn.Dense(8, use_bias=False)\n", "8"),  # agree
        ("        self.proj = nn.Dense(8)\n        self.proj = nn.Dense(8)\n", "8"),
    ],
)
def test_the_branch_that_ran_sizes_what_follows(setup_lines, in_features):
    head, manual = _migrated(setup_lines)
    assert head.startswith(f"self.head = nnx.Linear({in_features}, 3,"), head
    assert manual == []


@pytest.mark.parametrize(
    "setup_lines",
    [
        # a test on a local of setup(): __init__ may build the head before it is bound
        "        wide = self.wide\n        self.proj = nn.Dense(8) if wide else nn.Dense(6)\n",
        # three ways to build it
        "        self.proj = nn.Dense(8) if self.wide else (nn.Dense(6) if self.deep else nn.Dense(5))\n",
        # a function whose output size is not known
        "        self.proj = nn.Dense(8) if self.wide else unknown_fn\n",
        # an elif: the else branch's test is not the if's alone
        "        if self.wide:\n            self.proj = nn.Dense(8)\n"
        "        elif self.deep:\n            self.proj = nn.Dense(6)\n",
        # an annotated binding of a function whose output size is not known
        "        self.proj: object = unknown_fn\n        if self.wide:\n            self.proj = nn.Dense(8)\n",
        # bound twice, in sequence, to different sizes
        "        self.proj = nn.Dense(8)\n        self.proj = nn.Dense(6)\n",
    ],
)
def test_branches_it_cannot_tell_apart_leave_the_size_to_a_finding(setup_lines):
    head, manual = _migrated(setup_lines, "    wide: bool = True\n    deep: bool = False\n")
    assert head.startswith("self.head = nnx.Linear(head_in_features, 3,"), head
    assert [f.rule for f in manual] == ["L2N-SHAPE-003"], manual
    assert "differs between" in manual[0].message or "output of proj" in manual[0].message
