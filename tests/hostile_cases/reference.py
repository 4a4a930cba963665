"""An independent float64 numpy reference of the documented model (docs/model.md) and of full-batch
GD, written from the documentation alone: Φ(X; θ) = c_H Σ_h U_hᵀ Xᵀ σ(β X W_h q) (+ b), the losses
of the margin z = yΦ (or of the residual Φ − y), gradients by central finite differences in float64.
Parameters are tiny (H ≤ 2, d ≤ 4), so finite differences are exact to ~1e-9."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

LOSSES = {
    "logistic": lambda z: np.logaddexp(0.0, -z),
    "exp": lambda z: np.exp(-z),
    "hinge2": lambda z: np.maximum(0.0, 1.0 - z) ** 2,
    "square": lambda z: (1.0 - z) ** 2,
    "mse": lambda r: r**2,
}


def _softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def _softmax1(s):
    m = np.maximum(s.max(axis=-1, keepdims=True), 0.0)
    e = np.exp(s - m)
    return e / (np.exp(-m) + e.sum(axis=-1, keepdims=True))


ACTIVATIONS = {
    "softmax": _softmax,
    "softmax1": _softmax1,
    "linear": lambda s: s,
    "sigmoid": lambda s: 1.0 / (1.0 + np.exp(-s)),
    "erf": erf,
    "tanh": np.tanh,
}


def norm_factor(H: int, norm: str) -> float:
    return {"sqrt": 1.0 / math.sqrt(H), "mean": 1.0 / H, "sum": 1.0}[norm]


def phi(p, X, *, query="first", attention="softmax", norm="sqrt", beta=1.0):
    """Φ (n,) of params p (numpy dict: U (H,d) with W (H,d,d), or Q, K (H,d,dh), or k (H,d); b)."""
    X = np.asarray(X, np.float64)
    U = p["U"]
    H = U.shape[0]
    sigma = ACTIVATIONS[attention] if isinstance(attention, str) else attention
    if "k" in p:
        scores = np.einsum("ntd,hd->nht", X, p["k"])[..., None]  # one query
    else:
        W = p["W"] if "W" in p else np.einsum("hdk,hek->hde", p["Q"], p["K"])
        q = {"first": X[:, :1], "last": X[:, -1:], "all": X}[query]  # (n, S, d)
        scores = np.einsum("ntd,hde,nse->nhts", X, W, q)
    a = sigma(beta * np.moveaxis(scores, 2, 3))  # (n, H, S, T), σ over the T tokens
    out = np.einsum("nhst,ntd->nhsd", a, X).mean(axis=2)  # mean over the queries
    f = np.einsum("nhd,hd->nh", out, U)
    return norm_factor(H, norm) * f.sum(axis=1) + float(p.get("b", 0.0))


def metrics(p, X, y, *, loss="logistic", task="classification", **model):
    f = phi(p, X, **model)
    y = np.asarray(y, np.float64)
    if task == "regression":
        return {"loss": float(np.mean(LOSSES[loss](f - y)))}
    z = y * f
    ell = LOSSES[loss] if isinstance(loss, str) else loss
    return {"loss": float(np.mean(ell(z))), "error": float(np.mean(~(z > 0))), "margin": float(np.min(z))}


def _flat(p):
    keys = sorted(p)
    return keys, [np.shape(p[k]) for k in keys], np.concatenate([np.ravel(p[k]) for k in keys])


def _unflat(keys, shapes, v):
    out, i = {}, 0
    for k, s in zip(keys, shapes, strict=True):
        m = int(np.prod(s))
        out[k] = v[i : i + m].reshape(s)
        i += m
    return out


def train(
    p0,
    X,
    y,
    Xt,
    yt,
    *,
    steps,
    lr,
    loss="logistic",
    task="classification",
    lr_scaling="constant",
    readout_wd=0.0,
    attention_wd=0.0,
    **model,
):
    """Curves (steps + 1,) of full-batch GD from p0: train/test loss (and error, margin)."""
    p = {k: np.asarray(v, np.float64) for k, v in p0.items()}
    H = p["U"].shape[0]
    eta = lr * H ** {"constant": 0.0, "sqrt": 0.5, "linear": 1.0}[lr_scaling]
    keys, shapes, v = _flat(p)
    wd = np.concatenate(
        [
            np.full(int(np.prod(s)), readout_wd if k in ("U", "b") else attention_wd)
            for k, s in zip(keys, shapes, strict=True)
        ]
    )

    def objective(vec):
        return metrics(_unflat(keys, shapes, vec), X, y, loss=loss, task=task, **model)["loss"]

    curves = {}
    for t in range(steps + 1):
        q = _unflat(keys, shapes, v)
        curves.setdefault("params", []).append(q)
        for name, data in (("train", (X, y)), ("test", (Xt, yt))):
            for m, val in metrics(q, *data, loss=loss, task=task, **model).items():
                curves.setdefault(f"{name}_{m}", []).append(val)
        if t == steps:
            break
        g = np.empty_like(v)
        for i in range(v.size):
            e = np.zeros_like(v)
            e[i] = 1e-6
            g[i] = (objective(v + e) - objective(v - e)) / 2e-6
        v = v - eta * (g + wd * v)
    return {k: (c if k == "params" else np.asarray(c)) for k, c in curves.items()}


def zeros(H, d, *, learned=False, bias=False):
    p = {"U": np.zeros((H, d))}
    p["k" if learned else "W"] = np.zeros((H, d) if learned else (H, d, d))
    if bias:
        p["b"] = np.zeros(())
    return p
