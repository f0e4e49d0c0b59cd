"""Which loops walk submodule lists one element per iteration (``element_loops._loop_over_lists``): the
list's elements are then sized by position (element 0 by what enters the loop, each later one by what
the element before it gives), so only loops whose iteration ``k`` surely applies element ``k`` count."""

import libcst as cst
import pytest

from linen2nnx.migrate.element_loops import _loop_over_lists


def _walked(header: str) -> list[tuple[str, str]]:
    loop = cst.parse_statement(f"{header}\n    x = f(x)\n")
    assert isinstance(loop, cst.For)
    return _loop_over_lists(loop)


@pytest.mark.parametrize(
    "header, walked",
    [
        ("for layer in self.layers:", [("layer", "layers")]),
        ("for i, layer in enumerate(self.layers):", [("layer", "layers")]),
        # diffusers' UNet blocks: one element of each list per iteration
        (
            "for resnet, attn in zip(self.resnets, self.attentions):",
            [("resnet", "resnets"), ("attn", "attentions")],
        ),
        ("for a, b, c in zip(self.a, self.b, self.c):", [("a", "a"), ("b", "b"), ("c", "c")]),
    ],
)
def test_loops_that_walk_lists(header, walked):
    assert _walked(header) == walked


@pytest.mark.parametrize(
    "header",
    [
        "for a, b in zip(self.a, others):",  # a list of the method: not a submodule list
        "for a, b in zip(self.a, self.a):",  # one list twice: element k is applied twice
        "for a, a2 in zip(self.a, self.b, self.c):",  # fewer names than lists
        "for a, b in zip(self.a, *rest):",  # a splat
        "for a, b in zip(self.a, self.b, strict=True):",  # a keyword
        "for a, (b, c) in zip(self.a, self.b):",  # a nested target
        "for a in self.a[1:]:",  # a slice: element 0 is not the first applied
        "for a in reversed(self.a):",
    ],
)
def test_other_loops_are_not_read(header):
    assert _walked(header) == []
