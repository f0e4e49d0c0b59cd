"""Hugging Face ``transformers`` Flax models, end to end: ``migrate --trace``, then ``check``, no edit.

    python bench/outside_transformers.py [--models bert,gpt2] [--src DIR] [--keep DIR] [--json FILE]
                                         [--require-pass] [-v]

``transformers`` 4.46.3 is the last release that ships Flax (Linen) models, written by people this
project never talked to: a model per folder (``transformers/models/bert/modeling_flax_bert.py``), each a
stack of ``setup()`` modules built in comprehensions named ``str(i)``, configs held as plain objects
(``PretrainedConfig``), outputs returned as tuples or ``ModelOutput`` objects, attention layers whose
key projection reads the layer's input or a cross-attention's encoder states. For each model, as
``bench/outside_packages.py`` does for flaxmodels and recurrentgemma (its stages, table and exit code):
the sdist is fetched with ``pip download`` (``--src``: a folder of extracted sdists instead), its runtime
imports (``huggingface_hub``, ``tokenizers``, ``safetensors``, ...) pip-installed into the work folder;
the model's folder and the two shared Flax files (``modeling_flax_utils.py``,
``modeling_flax_outputs.py``) are migrated with the trace of a tiny config
(``bench/outside_traces/hf_transformers.py``: 2 layers, width 32), the pair spec is written, and
``check`` compares forward, gradients and loss in fp32 from the same (perturbed) weights. No size or
value is given by hand: what the migration could not settle is the spec's to fill, or the model fails.

Shims, for what JAX removed since (both sides, while the models run): ``jnp.clip(a_min=, a_max=)``; for
RoFormer, the ``x.split(n, axis)`` array method.

Exit status: 0, unless ``--require-pass`` is given and a model did not reach parity (then 1).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from outside_packages import Package, run_cli, spec_from_trace

REQUIREMENT = "transformers==4.46.3"
# what importing a Flax model of it needs (none of it a dependency of this project)
RUNTIME = (
    "huggingface_hub==0.26.2",
    "tokenizers==0.20.3",
    "safetensors==0.4.5",
    "regex",
    "requests",
    "pyyaml",
    "packaging",
    "filelock",
    "tqdm",
    "fsspec",
    "urllib3",
    "certifi",
    "idna",
    "charset_normalizer",
    "typing_extensions",
)
SHARED = ("transformers/modeling_flax_utils.py", "transformers/modeling_flax_outputs.py")
# model -> its folder under transformers/models (the trace spec's function has the model's name)
FOLDERS = {
    "bert": "bert",
    "roformer": "roformer",
    "xlm_roberta": "xlm_roberta",
    "big_bird": "big_bird",
    "distilbert": "distilbert",
    "gpt2": "gpt2",
    "gptj": "gptj",
    "llama": "llama",
    "xglm": "xglm",
    "pegasus": "pegasus",
    "mbart": "mbart",
    "marian": "marian",
    "vit": "vit",
    "clip": "clip",
    "wav2vec2": "wav2vec2",
    "longt5": "longt5",
}


@contextlib.contextmanager
def clip_a_min() -> Iterator[None]:
    """``jnp.clip(x, a_min=..., a_max=...)``, removed from JAX, accepted again while active."""
    import jax.numpy as jnp

    original = jnp.clip

    def clip(
        x: Any, min: Any = None, max: Any = None, *, a_min: Any = None, a_max: Any = None, **kw: Any
    ) -> Any:
        return original(x, a_min if a_min is not None else min, a_max if a_max is not None else max, **kw)

    jnp.clip = clip
    try:
        yield
    finally:
        jnp.clip = original


@contextlib.contextmanager
def array_split() -> Iterator[None]:
    """``x.split(n, axis)`` on arrays and tracers (RoFormer's rotary embedding), a method JAX no
    longer has, answered by ``jnp.split`` while active."""
    import jax.numpy as jnp
    from jax._src import array, core

    def split(self: Any, sections: Any, axis: int = 0) -> Any:
        return jnp.split(self, sections, axis)

    owners = (core.ShapedArray, array.ArrayImpl)
    before = [owner.__dict__.get("split") for owner in owners]
    core.ShapedArray.split = core.aval_method(split)
    array.ArrayImpl.split = split
    try:
        yield
    finally:
        for owner, old in zip(owners, before):
            if old is None:
                delattr(owner, "split")
            else:
                owner.split = old


def package(name: str) -> Package:
    folder = f"transformers/models/{FOLDERS[name]}"
    return Package(
        name,
        REQUIREMENT,
        "transformers",
        (folder, *SHARED),
        spec_from_trace("hf_transformers.py", folder, function=name),
        shims=(
            ("jnp.clip(a_min=, a_max=)", clip_a_min),
            *(("Array.split", array_split),) * (name == "roformer"),
        ),
        requires=RUNTIME,
    )


def main(argv: list[str] | None = None) -> int:
    title = f"{REQUIREMENT} Flax models → NNX: migrate --trace + check"
    models = {name: package(name) for name in FOLDERS}
    return run_cli(argv, __doc__.split("\n\n")[0], models, title, "linen2nnx-transformers-")


if __name__ == "__main__":
    sys.exit(main())
