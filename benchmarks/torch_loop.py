"""A plain PyTorch loop of the same sweep as mhsim: the baseline of ``benchmarks.logging_cost``.

    python -m benchmarks.torch_loop --inputs inputs.npz [--out curves.npz]

``inputs.npz`` is written by ``benchmarks.loop_inputs`` (mhsim's data and θ(0)). The loop is what a
researcher would write by hand: float32, ``torch.set_num_threads(2)``, one H-head model per
configuration (H, trial) with its heads in one tensor (U (H, d), W (H, d, d)), full-batch GD on
the logistic loss, and at every logged step, under ``no_grad``, the metrics mhsim logs: the
training and test loss, 0-1 error, the training margin, ‖U‖, ‖W‖, the head diversity, the test
attention on the relevant tokens, and, where mhsim logs them (``head_metrics`` in the file), the
per-head metrics (norms, |cos| with the planted directions, key direction by the same twelve
squarings of W Wᵀ as mhsim, head–head similarities). The model is mhsim's (docs/model.md):

    Φ(X) = c_H Σ_h U_hᵀ Xᵀ softmax(X W_h x_1),   ℓ = log(1 + e^{−yΦ}).

The curves go to ``--out`` (float32, (C, L) per metric, (C, L, H, …) per head for the per-head
metrics: configurations of different H are padded with NaN to the largest H). This module imports
numpy and torch only: its process pays neither JAX nor mhsim.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

SQUARINGS = 12  # as mhsim's key_directions
AGGREGATE = (
    "train_loss", "test_loss", "train_error", "test_error", "margin",
    "u_norm", "w_norm", "diversity", "attn_relevant",
)  # fmt: skip


def head_outputs(U: torch.Tensor, W: torch.Tensor, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(f (n, H), A (n, H, T)): f_h(X) = U_hᵀ Xᵀ softmax(X W_h x_1)."""
    a = torch.einsum("hde,ne->nhd", W, X[:, 0])  # W_h x_1
    A = torch.softmax(torch.einsum("ntd,nhd->nht", X, a), dim=-1)
    XU = torch.einsum("ntd,hd->nth", X, U)  # U_hᵀ x_t
    return torch.einsum("nht,nth->nh", A, XU), A


def norm_factor(norm: str, H: int) -> float:
    return {"sqrt": 1.0 / math.sqrt(H), "mean": 1.0 / H, "sum": 1.0}[norm]


def loss_of(z: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(-z).mean()  # mean log(1 + e^{-z})


def abs_cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|cos| between the rows of a (m, d) and b (k, d): (m, k), NaN for a zero row."""
    denom = a.norm(dim=-1)[:, None] * b.norm(dim=-1)[None, :]
    dot = (a @ b.T).abs()
    return torch.where(denom > 0, dot / torch.where(denom > 0, denom, 1.0), torch.nan)


def key_directions(W: torch.Tensor) -> torch.Tensor:
    """(H, d): the top left singular vector of each W_h, by repeated squaring of W Wᵀ (as mhsim)."""
    M = W @ W.transpose(1, 2)
    for _ in range(SQUARINGS):
        M = M @ M
        scale = M.abs().amax(dim=(1, 2), keepdim=True)
        M = M / torch.where(scale > 0, scale, 1.0)
    best = M.norm(dim=1).argmax(dim=1)  # each head's largest column
    col = M[torch.arange(M.shape[0]), :, best]
    size = col.norm(dim=1, keepdim=True)
    return col / torch.where(size > 0, size, 1.0)


def evaluate(
    U, W, c_H, train, test, mask, directions, per_head: bool, sims: bool = False
) -> dict[str, torch.Tensor]:
    """Every logged metric of one H-head model at one step (``per_head``: the per-head view's too,
    ``sims``: with the head–head matrices)."""
    f_train, _ = head_outputs(U, W, train[0])
    z_train = train[1] * (c_H * f_train.sum(1))
    f_test, A_test = head_outputs(U, W, test[0])
    z_test = test[1] * (c_H * f_test.sum(1))
    flat = torch.cat([U, W.reshape(W.shape[0], -1)], dim=1)  # (H, d + d²)
    head_mass = torch.einsum("nht,nt->nh", A_test, mask).mean(0)  # (H,)
    out = {
        "train_loss": loss_of(z_train),
        "test_loss": loss_of(z_test),
        "train_error": (~(z_train > 0)).float().mean(),
        "test_error": (~(z_test > 0)).float().mean(),
        "margin": z_train.min(),
        "u_norm": U.square().sum().sqrt(),
        "w_norm": W.square().sum().sqrt(),
        "diversity": (flat[:, None] - flat[None]).square().sum(-1).max().sqrt(),
        "attn_relevant": head_mass.mean(),
    }
    if per_head:
        keys = key_directions(W)
        out.update(
            head_u_norm=U.norm(dim=1),
            head_key_norm=W.square().sum((1, 2)).sqrt(),
            head_uk_cos=(keys * U).sum(1).abs() / (keys.norm(dim=1) * U.norm(dim=1)),
            head_attn_relevant=head_mass,
        )
        if sims:
            pattern = A_test.transpose(0, 1).reshape(A_test.shape[1], -1)
            out.update(
                head_u_sim=abs_cos(U, U),
                head_key_sim=abs_cos(keys, keys),
                head_attn_sim=abs_cos(pattern, pattern),
            )
        if directions is not None:
            out.update(head_u_cos=abs_cos(U, directions), head_key_cos=abs_cos(keys, directions))
    return out


def train_one(U, W, lr: float, c_H: float, train, test, mask, directions, per_head, steps, logged, view=()):
    """One configuration: GD for ``steps`` updates, its metrics at the steps in ``logged`` (a set),
    with ``per_head`` the per-head view at the steps in ``view`` (a set; ``per_head == "sims"``: with
    the head–head matrices): {metric: (L, …)}, the per-head view's (L_h, …)."""
    U, W = U.clone().requires_grad_(True), W.clone().requires_grad_(True)
    curves: list[dict[str, torch.Tensor]] = []
    heads: list[dict[str, torch.Tensor]] = []
    for t in range(steps + 1):
        if t in logged:
            with torch.no_grad():
                both = evaluate(
                    U, W, c_H, train, test, mask, directions, per_head and t in view, per_head == "sims"
                )
            if t in view:
                heads.append({k: v for k, v in both.items() if k.startswith("head_")})
            curves.append({k: v for k, v in both.items() if not k.startswith("head_")})
        if t == steps:
            break
        f, _ = head_outputs(U, W, train[0])
        gU, gW = torch.autograd.grad(loss_of(train[1] * (c_H * f.sum(1))), (U, W))
        with torch.no_grad():
            U -= lr * gU
            W -= lr * gW
    out = {k: torch.stack([c[k] for c in curves]) for k in curves[0]}
    return out | {k: torch.stack([c[k] for c in heads]) for k in (heads[0] if heads and heads[0] else ())}


def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every configuration of ``inputs`` one after the other: {metric: (C, L[, H, …])}."""
    tensor = {k: torch.from_numpy(np.array(v)) for k, v in inputs.items() if v.dtype.kind in "fb"}  # copies
    mask = tensor["mask_test"].float()
    directions = tensor.get("directions")
    per_head, norm = bool(inputs["head_metrics"]), str(inputs["norm"])
    per_head = "sims" if per_head and bool(inputs["head_sims"]) else per_head
    steps, logged = int(inputs["steps"]), set(inputs["log_steps"].tolist())
    view = set(inputs["head_steps"].tolist())
    heads, H_max = inputs["heads"], int(inputs["heads"].max())
    start = np.concatenate([[0], np.cumsum(heads)])
    out: dict[str, np.ndarray] = {}
    for c, (H, t) in enumerate(zip(heads.tolist(), inputs["trial"].tolist(), strict=True)):
        U0, W0 = tensor["U0"][start[c] : start[c + 1]], tensor["W0"][start[c] : start[c + 1]]
        train = (tensor["X_train"][t], tensor["y_train"][t])
        test = (tensor["X_test"][t], tensor["y_test"][t])
        dirs = None if directions is None else directions[t]
        curves = train_one(
            U0, W0, float(inputs["lr"][c]), norm_factor(norm, H), train, test, mask[t], dirs,
            per_head, steps, logged, view,
        )  # fmt: skip
        for k, v in curves.items():
            v = v.numpy()
            if k not in out:
                shape = (len(heads), v.shape[0], *[H_max if s == H else s for s in v.shape[1:]])
                out[k] = np.full(shape, np.nan, np.float32)
            out[k][(c, slice(None), *[slice(0, s) for s in v.shape[1:]])] = v
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.torch_loop", description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", type=Path, required=True, help="the .npz of benchmarks.loop_inputs")
    p.add_argument("--out", type=Path, help="write the curves to this .npz")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    begin = time.perf_counter()
    with np.load(args.inputs) as f:
        inputs = {k: f[k] for k in f.files}
    curves = run(inputs)
    if args.out is not None:
        np.savez(args.out, **curves)
    print(f"simulation {time.perf_counter() - begin:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
