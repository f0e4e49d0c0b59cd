"""A list handed to a sequence field: Linen stores it as a tuple, and so does the migrated class."""

import numpy as np
from fixture_parity import assert_parity, build


def test_a_list_handed_to_a_sequence_field_computes_as_in_linen(tmp_path):
    linen_mod, nnx_mod, _, map_path = build("sequence_field_list", tmp_path)
    x = np.random.default_rng(0).normal(size=(2, 4, 4, 3)).astype(np.float32)
    assert_parity(
        linen_mod.Net(),
        lambda rngs: nnx_mod.Net(in_features=3, head_0_in_features=48, rngs=rngs),
        x,
        map_path,
    )


def test_the_stored_value_is_the_tuple_linen_stores(tmp_path):
    """Linen freezes the fields when a module is set up (bound): what its methods read is the tuple."""
    _, nnx_mod, _, _ = build("sequence_field_list", tmp_path)
    from flax import nnx

    block = nnx_mod.InvRes(strides=[1, 1], in_features=3, rngs=nnx.Rngs(0))
    assert block.strides == (1, 1)
    assert nnx_mod.InvRes(strides=None, in_features=3, rngs=nnx.Rngs(0)).strides is None
