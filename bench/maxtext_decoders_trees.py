"""The state trees of MaxText's decoders, built inside a MaxText environment (a child process).

    python bench/maxtext_decoders_trees.py --stubs a,b --scan 0|1 [--migrated MODULE] [--probe]

``bench/maxtext_decoders.py`` runs this with MaxText's source and its dependencies on the path: it
needs MaxText importable, which the parent cannot assume, so nothing here is imported by the parent.
It prints one JSON object: for each side (``authors``: ``NNXDecoder`` of ``layers/nnx_decoders.py``
via ``nnx.eval_shape``; ``linen``: ``Decoder`` of ``layers/decoders.py``, the ``params`` of
``jax.eval_shape(init)``; ``migrated``: the ``Decoder`` that ``migrate`` wrote, via
``nnx.eval_shape``) its leaves as ``path -> {shape, dtype, sharding, type}``, or the error that
stopped it; and (``migrated call``) where one call of the migrated ``Decoder`` stops, if it does. ``--probe`` only imports both files and exits 0, or 3 naming the missing module.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import sys
import traceback
import types
from typing import Any

# A tiny model of MaxText's default decoder block: every dimension small, two layers.
TINY = {
    "per_device_batch_size": 1.0,
    "run_name": "linen2nnx_bench",
    "enable_checkpointing": False,
    "base_num_decoder_layers": 2,
    "attention": "dot_product",
    "max_target_length": 16,
    "max_prefill_predict_length": 4,
    "base_emb_dim": 32,
    "base_num_query_heads": 2,
    "base_num_kv_heads": 2,
    "base_mlp_dim": 64,
    "head_dim": 16,
    "vocab_size": 128,
}


# ---- stubs for the modules that only download or only run on accelerators ----------------------
class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(f"{cls.__name__}.{name}")


def _stub(name: str) -> type:
    """A class standing for any attribute: callable, subclassable, usable in ``X | None``."""
    return _StubMeta(
        name, (), {"__init__": lambda self, *a, **k: None, "__getattr__": lambda self, k: _stub(k)}
    )


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(f"{self.__name__}.{name}")


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every module under the given top-level names as a stub package."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.served: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in self.names:
            self.served.add(fullname.split(".")[0])
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # type: ignore[attr-defined]
        module.__version__ = "0.0.0"  # type: ignore[attr-defined]


# ---- building the trees --------------------------------------------------------------------------
def make_config(scan: bool, block: str | None = None) -> Any:
    """MaxText's own config (``base.yml`` with the tiny overrides), as its unit tests build it."""
    from maxtext.configs import pyconfig

    base = os.path.join(os.path.dirname(pyconfig.__file__), "base.yml")
    extra = {"decoder_block": block} if block else {}
    return pyconfig.initialize(
        [sys.argv[0], base], override_model_config=True, scan_layers=scan, **TINY, **extra
    )


def _sharding(meta: dict[str, Any]) -> list[Any] | None:
    for key in ("out_sharding", "sharding_names", "sharding"):
        if meta.get(key) is not None:
            return [str(n) if n is not None else None for n in meta[key]]
    return None


def nnx_leaves(model: Any) -> dict[str, dict[str, Any]]:
    """Every Variable of an (abstract) NNX module: shape, dtype, partition names, Variable type."""
    from flax import nnx

    out = {}
    for path, var in nnx.to_flat_state(nnx.state(model)):
        value = var.get_value() if hasattr(var, "get_value") else var.value
        out["/".join(map(str, path))] = {
            "shape": list(getattr(value, "shape", ())),
            "dtype": str(getattr(value, "dtype", type(value).__name__)),
            "sharding": _sharding(var.get_metadata()),
            "type": type(var).__name__,
        }
    return out


def linen_leaves(variables: Any) -> dict[str, dict[str, Any]]:
    """Every leaf of a Linen variables tree (``LogicallyPartitioned`` boxes give the names)."""
    import jax
    from flax import linen as nn

    out = {}
    is_box = lambda x: isinstance(x, nn.spmd.LogicallyPartitioned)  # noqa: E731
    for path, leaf in jax.tree_util.tree_flatten_with_path(variables, is_leaf=is_box)[0]:
        boxed = is_box(leaf)
        value = leaf.value if boxed else leaf
        keys = [getattr(k, "key", getattr(k, "idx", k)) for k in path]
        out["/".join(map(str, keys))] = {
            "shape": list(value.shape),
            "dtype": str(value.dtype),
            "sharding": [str(n) if n is not None else None for n in leaf.names] if boxed else None,
            "type": keys[0],
        }
    return out


def authors_tree(cfg: Any, mesh: Any) -> dict[str, Any]:
    from flax import nnx
    from maxtext.layers.nnx_decoders import NNXDecoder

    model = nnx.eval_shape(lambda: NNXDecoder(config=cfg, mesh=mesh, rngs=nnx.Rngs(params=0, dropout=1)))
    return nnx_leaves(model)


def linen_tree(cfg: Any, mesh: Any) -> dict[str, Any]:
    """``Decoder.init`` under ``jax.eval_shape``, with the token embedder ``Transformer`` gives it."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn
    from maxtext.layers.decoders import Decoder
    from maxtext.layers.embeddings import embed_as_linen

    class Holder(nn.Module):  # models.Transformer's setup, less the encoders and MTP
        def setup(self) -> None:
            self.token_embedder = embed_as_linen(
                num_embeddings=cfg.vocab_size,
                num_features=cfg.emb_dim,
                dtype=cfg.dtype,
                embedding_init=nn.initializers.normal(stddev=1.0),
                config=cfg,
                mesh=mesh,
            )
            self.decoder = Decoder(config=cfg, mesh=mesh)

        def __call__(self, tokens: Any, positions: Any) -> Any:
            return self.decoder(self.token_embedder, tokens, positions)

    tokens = jnp.ones((1, cfg.max_target_length), jnp.int32)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    shapes = jax.eval_shape(lambda: Holder().init(rngs, tokens, tokens))
    leaves = linen_leaves(shapes)
    prefix = "params/decoder/"
    return {k[len(prefix) :]: v for k, v in leaves.items() if k.startswith(prefix)}


def migrated_tree(cfg: Any, mesh: Any, module: str) -> dict[str, Any]:
    import importlib

    from flax import nnx

    decoder = importlib.import_module(module).Decoder
    model = nnx.eval_shape(lambda: decoder(config=cfg, mesh=mesh, rngs=nnx.Rngs(params=0, dropout=1)))
    return nnx_leaves(model)


def migrated_call(cfg: Any, mesh: Any, module: str) -> dict[str, Any]:
    """The migrated ``Decoder`` built for real (the model is tiny) and called once, as ``Transformer``
    calls it: where its call-time construction stops, if it does; the output's shape if not."""
    import importlib

    import jax
    import jax.numpy as jnp
    from flax import nnx
    from maxtext.layers.embeddings import Embed

    model = importlib.import_module(module).Decoder(config=cfg, mesh=mesh, rngs=nnx.Rngs(params=0, dropout=1))
    embed = Embed(
        num_embeddings=cfg.vocab_size, num_features=cfg.emb_dim, config=cfg, mesh=mesh, rngs=nnx.Rngs(0)
    )
    tokens = jnp.ones((1, cfg.max_target_length), jnp.int32)
    with jax.set_mesh(mesh):
        out = model(embed, tokens, tokens, deterministic=True)
    return {"output": str(jax.tree.map(jnp.shape, out))}


def _side(build: Any, *args: Any) -> dict[str, Any]:
    """One side's leaves, or where and why building it failed (the comparison goes on without it):
    the innermost frame in MaxText's tree (the migrated file included), else the innermost."""
    try:
        return {"leaves": build(*args)}
    except Exception as e:
        frames = traceback.extract_tb(e.__traceback__)
        ours = [f for f in frames if f"{os.sep}maxtext{os.sep}" in f.filename] or frames
        last = ours[-1] if ours else None
        where = f"{os.path.basename(last.filename)}:{last.lineno}: {last.line}" if last else "?"
        return {"error": f"{type(e).__name__}: {e}"[:600], "where": where, "line": last.lineno if last else 0}


def build_all(scan: bool, migrated: str | None, block: str | None = None) -> dict[str, Any]:
    from jax.sharding import Mesh
    from maxtext.utils import maxtext_utils

    cfg = make_config(scan, block)
    mesh = Mesh(maxtext_utils.create_device_mesh(cfg), cfg.mesh_axes)
    out = {
        "config": {
            "decoder_block": str(cfg.decoder_block),
            "scan_layers": scan,
            "layers": cfg.num_decoder_layers,
        },
        "authors": _side(authors_tree, cfg, mesh),
        "linen": _side(linen_tree, cfg, mesh),
    }
    if migrated:
        out["migrated"] = _side(migrated_tree, cfg, mesh, migrated)
        called = _side(migrated_call, cfg, mesh, migrated)
        out["migrated call"] = called.pop("leaves", called)
    return out


def _missing(error: ImportError) -> str | None:
    """The module an import failed on, also when a package re-raised it (sympy without mpmath)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ModuleNotFoundError) and seen.name:
            return seen.name
        seen = seen.__cause__ or seen.__context__
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stubs", default="", help="top-level modules served as stubs, comma-separated")
    parser.add_argument("--scan", type=int, choices=(0, 1), default=0)
    parser.add_argument("--migrated", help="the module holding the migrated Decoder")
    parser.add_argument("--block", help="MaxText's decoder_block (default: base.yml's)")
    parser.add_argument("--probe", action="store_true", help="only import both decoder files")
    args = parser.parse_args(argv)
    finder = StubFinder({s for s in args.stubs.split(",") if s})
    sys.meta_path.insert(0, finder)
    try:
        import maxtext.layers.decoders
        import maxtext.layers.nnx_decoders  # noqa: F401
    except ImportError as e:
        print(json.dumps({"missing": _missing(e), "error": str(e)}))
        return 3
    if args.probe:
        print(json.dumps({"missing": None, "stubbed": sorted(finder.served)}))
        return 0
    print(
        json.dumps(
            {**build_all(bool(args.scan), args.migrated, args.block), "stubbed": sorted(finder.served)}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
