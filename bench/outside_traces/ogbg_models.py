"""Trace spec for the Flax example ``ogbg_molpcba/models.py``: the ``GraphConvNet`` of its default
config (two message-passing steps here, latent size 16) on two small molecule graphs shaped like the
example's input pipeline makes them: 9 features a node, 3 an edge, and the one constant global feature
``train.replace_globals`` puts in. The embedder's Dense is applied inside ``jraph.GraphMapFeatures``
and each step's MLP inside ``jraph.GraphConvolution``, where no dataflow follows them: only running it
tells their input sizes. ``jraph`` (pure Python) is installed for the run with ``pip --no-deps``."""

from pathlib import Path

import numpy as np

from linen2nnx.spec import LinenSide, import_file

EXAMPLE = "ogbg_molpcba/models.py"
PIP = ("jraph",)


def linen_side(example: Path) -> LinenSide:
    import jraph

    models = import_file(example)
    rng = np.random.default_rng(0)
    n_node, n_edge = np.array([3, 2]), np.array([4, 2])
    graphs = jraph.GraphsTuple(
        nodes=rng.normal(size=(5, 9)).astype(np.float32),
        edges=rng.normal(size=(6, 3)).astype(np.float32),
        senders=np.array([0, 1, 2, 0, 3, 4]),
        receivers=np.array([1, 2, 0, 2, 4, 3]),
        n_node=n_node,
        n_edge=n_edge,
        globals=np.ones((2, 1), np.float32),
    )
    return LinenSide(
        model=models.GraphConvNet(
            latent_size=16, num_mlp_layers=2, message_passing_steps=2, output_globals_size=4
        ),
        batch={"x": graphs},
        loss=lambda out, batch: (out.globals**2).mean(),
        train_kwargs={},
        eval_kwargs={},
        name="ogbg_molpcba/GraphConvNet",
    )
