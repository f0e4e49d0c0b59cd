"""A norm's int or float ``mask=``: Linen casts it to bool, and so does the migrated call."""

import jax
import jax.numpy as jnp
import numpy as np
from fixture_parity import build

from linen2nnx.equivalence import check, perturbed
from linen2nnx.spec import LinenSide, ModelPair


def test_an_int_padding_mask_reaches_the_norms_as_linen_casts_it(tmp_path):
    linen_mod, nnx_mod, _, map_path = build("norm_mask_cast", tmp_path)
    rng = np.random.default_rng(0)
    pad = (rng.random((2, 5, 8)) < 0.7).astype(np.int32)
    pad[..., 0] = 1  # no position or feature left with nothing to average (Linen's own NaN)
    side = LinenSide(
        model=linen_mod.MaskedNorms(),
        batch={"x": rng.normal(size=(2, 5, 4)).astype(np.float32), "pad": pad},
        inputs=lambda b: ((b["x"], b["pad"]), {}),
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    variables = perturbed(side.init_variables())
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_mod.MaskedNorms(in_features=4, rngs=rngs), name_map=map_path
    )
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol, lf.note) for lf in parity.failures]
    assert len(parity.by_check()["grad"]) == len(jax.tree.leaves(variables["params"]))
