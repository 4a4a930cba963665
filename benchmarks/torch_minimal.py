"""The smallest PyTorch loop of a sweep that logs its losses: the baseline of ``benchmarks.ratio``.

    python -m benchmarks.torch_minimal --inputs inputs.npz [--out curves.npz] [--threads 2]

``inputs.npz`` is written by ``benchmarks.loop_inputs`` (mhsim's data and θ(0)). Only what logging
the train and test loss at every step needs, as one would write it to time a sweep: float32,
``torch.set_num_threads``, one configuration (H, trial) at a time, its heads as one tensor
(U (H, d), W (H, d, d)), ``torch.optim.SGD`` at the configuration's η(H), the logistic loss by
softplus, and the test loss under ``no_grad`` at every step (θ_t before update t, and θ_S after
the last). No other metric (``benchmarks.torch_loop`` computes every one). The model (docs/model.md):

    Φ(X) = c_H Σ_h U_hᵀ Xᵀ softmax(X W_h x_1),   ℓ = log(1 + e^{−yΦ}).

``--out``: the curves ``train_loss`` and ``test_loss`` (C, S + 1), float32, configurations in the
file's order. It prints its phases (``import``, ``load``, ``loop``) in seconds. It imports numpy
and torch only: its process pays neither JAX nor mhsim.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402  (the import phase is timed from the first line)
import math  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

IMPORTED = time.perf_counter()


def logits(U: torch.Tensor, W: torch.Tensor, X: torch.Tensor, c_H: float) -> torch.Tensor:
    """Φ (n,) of the H-head model: c_H Σ_h U_hᵀ Xᵀ softmax(X W_h x_1)."""
    a = torch.einsum("hde,ne->nhd", W, X[:, 0])  # (n, H, d): W_h x_1
    A = torch.softmax(torch.einsum("ntd,nhd->nht", X, a), dim=-1)  # (n, H, T)
    XU = torch.einsum("ntd,hd->nth", X, U)  # (n, T, H): U_hᵀ x_t
    return c_H * torch.einsum("nht,nth->n", A, XU)


def loss(U, W, X, y, c_H) -> torch.Tensor:
    return torch.nn.functional.softplus(-y * logits(U, W, X, c_H)).mean()  # mean log(1 + e^{-yΦ})


def train(U0, W0, lr: float, c_H: float, steps: int, train_set, test_set) -> tuple[np.ndarray, np.ndarray]:
    """S = ``steps`` GD updates from (U0, W0): the train and test loss at steps 0 … S, (S + 1,) each."""
    U = torch.tensor(U0, requires_grad=True)
    W = torch.tensor(W0, requires_grad=True)
    opt = torch.optim.SGD([U, W], lr=lr)
    train_loss, test_loss = np.empty(steps + 1, np.float32), np.empty(steps + 1, np.float32)
    for t in range(steps):
        opt.zero_grad()
        value = loss(U, W, *train_set, c_H)
        value.backward()
        with torch.no_grad():
            test_loss[t] = loss(U, W, *test_set, c_H).item()
        train_loss[t] = value.item()
        opt.step()
    with torch.no_grad():
        train_loss[steps] = loss(U, W, *train_set, c_H).item()
        test_loss[steps] = loss(U, W, *test_set, c_H).item()
    return train_loss, test_loss


def run(z: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The curves (C, S + 1) of every configuration of the inputs ``z`` (``loop_inputs.build``)."""
    if str(z["norm"]) != "sqrt":
        raise ValueError(f"norm={z['norm']!s}: this loop implements c_H = 1/sqrt(H) only")
    trials = range(len(z["X_train"]))
    sets = {
        name: [(torch.from_numpy(z[f"X_{name}"][t]), torch.from_numpy(z[f"y_{name}"][t])) for t in trials]
        for name in ("train", "test")
    }
    steps, curves, first = int(z["steps"]), {"train_loss": [], "test_loss": []}, 0
    for H, trial, lr in zip(z["heads"].tolist(), z["trial"].tolist(), z["lr"].tolist(), strict=True):
        U0, W0 = z["U0"][first : first + H], z["W0"][first : first + H]
        first += H
        tr, te = train(U0, W0, lr, 1.0 / math.sqrt(H), steps, sets["train"][trial], sets["test"][trial])
        curves["train_loss"].append(tr)
        curves["test_loss"].append(te)
    return {k: np.stack(v) for k, v in curves.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.torch_minimal", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--inputs", type=Path, required=True, help="the file of benchmarks.loop_inputs")
    p.add_argument("--out", type=Path, help="write the curves here")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    with np.load(args.inputs) as f:
        z = {k: f[k] for k in f.files}
    loaded = time.perf_counter()
    curves = run(z)
    done = time.perf_counter()
    if args.out is not None:
        np.savez(args.out, **curves)
    for name, seconds in (("import", IMPORTED - START), ("load", loaded - IMPORTED), ("loop", done - loaded)):
        print(f"{name:<10} {seconds:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
