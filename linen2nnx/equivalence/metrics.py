"""Distance metrics between a Linen reference array and its NNX counterpart (host-side numpy, float64).

Everything is computed in float64 on the host so the metrics are not themselves a source of error.
The elementwise ones (max / mean absolute difference, max relative difference, cosine) apply to
every leaf; the distribution ones apply where they mean something:

- logits (the forward outputs, whose last axis is the class / vocabulary axis): the KL divergence
  ``KL(softmax(ref) || softmax(got))`` per row (its max and mean) and top-1 / top-5 agreement, i.e.
  how a difference shows up in what the model *predicts*, not only in raw numbers;
- gradients: the norm ratio ``‖g_nnx‖ / ‖g_linen‖``, which exposes a scaled loss (a ``mean`` turned
  into a ``sum``) even when the direction (cosine) is perfect.
"""

from __future__ import annotations

import math

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of the flattened arrays (1.0 when both are zero, 0.0 when only one is)."""
    a = np.nan_to_num(a.ravel(), posinf=0.0, neginf=0.0)
    b = np.nan_to_num(b.ravel(), posinf=0.0, neginf=0.0)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - np.max(x, axis=-1, keepdims=True)
    return x - np.log(np.sum(np.exp(x), axis=-1, keepdims=True))


def logit_metrics(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """``kl_max``, ``kl_mean``, ``top1``, ``top5`` over the rows of ``(..., classes)`` logits.

    ``top1`` is the fraction of rows whose argmax agrees; ``top5`` the mean overlap of the two
    top-``min(5, classes)`` sets. Empty for scalars, one-class outputs or non-finite values.
    """
    if ref.ndim == 0 or ref.shape[-1] < 2 or not (np.all(np.isfinite(ref)) and np.all(np.isfinite(got))):
        return {}
    r = ref.reshape(-1, ref.shape[-1]).astype(np.float64)
    g = got.reshape(-1, got.shape[-1]).astype(np.float64)
    if r.shape[0] == 0:
        return {}
    lr, lg = _log_softmax(r), _log_softmax(g)
    kl = np.sum(np.exp(lr) * (lr - lg), axis=-1)
    kl = np.maximum(kl, 0.0)  # rounding can give -1e-17
    k = min(5, r.shape[-1])
    top_r = np.argsort(-r, axis=-1, kind="stable")[:, :k]
    top_g = np.argsort(-g, axis=-1, kind="stable")[:, :k]
    overlap = [len(set(a) & set(b)) / k for a, b in zip(top_r.tolist(), top_g.tolist())]
    return {
        "kl_max": float(np.max(kl)),
        "kl_mean": float(np.mean(kl)),
        "top1": float(np.mean(top_r[:, 0] == top_g[:, 0])),
        "top5": float(np.mean(overlap)),
    }


def norm_ratio(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """``{'norm_ratio': ‖got‖ / ‖ref‖}`` (1.0 when both are zero, inf when only ``ref`` is)."""
    nr = float(np.linalg.norm(np.nan_to_num(ref.ravel())))
    ng = float(np.linalg.norm(np.nan_to_num(got.ravel())))
    if nr == 0.0:
        return {"norm_ratio": 1.0 if ng == 0.0 else math.inf}
    return {"norm_ratio": ng / nr}
