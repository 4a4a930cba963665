"""How close the engine's step is to the floor of a plain JAX step, on one CPU core.

python -m benchmarks.step_floor                 # DM1 (n = 100, d = 32) and planted (n = 1000, d = 16)
python -m benchmarks.step_floor --steps 30000   # longer timings

For each data shape it times, in microseconds per full-batch GD step of one zero-init run:

- ``minimal``: the smallest JAX program of the same step a user would write: one
  ``jax.grad`` of the one-head logistic loss (query = first token), the update, in a
  ``lax.fori_loop``; no metrics, no divergence checks, no packing;
- ``engine``: ``run_sweep`` of one run (H = 1, one trial, logging only the first and last
  step) on one device, warm (its compile excluded), divided by the steps;
- ``stacked``: ``minimal`` with the two contractions over X (scores and readout) stacked into
  one, which reads X once instead of twice: one of the formulations XLA:CPU runs slower.

If ``engine`` is close to ``minimal``, the simulation is at what XLA:CPU gives for these
shapes, and a faster simulation needs other hardware or another kernel, not engine work.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from dynamics.core.engine import CPU_COMPILER_OPTIONS

SHAPES = {"dm1": (100, 10, 32), "planted": (1000, 10, 16)}  # (n, T, d) of the presets


def _scores_readout(W, U, X):
    Wx = jnp.einsum("de,ne->nd", W, X[:, 0])
    return jnp.einsum("ntd,nd->nt", X, Wx), jnp.einsum("ntd,d->nt", X, U)


def _scores_readout_stacked(W, U, X):
    Wx = jnp.einsum("de,ne->nd", W, X[:, 0])
    B = jnp.stack([Wx, jnp.broadcast_to(U, Wx.shape)], axis=1)  # (n, 2, d)
    sv = jnp.einsum("ntd,nkd->nkt", X, B)
    return sv[:, 0], sv[:, 1]


def _loop(form, X, y, steps):
    def loss(p):
        s, v = form(p["W"], p["U"], X)
        z = y * jnp.sum(jax.nn.softmax(s, axis=-1) * v, axis=-1)
        return jnp.mean(jnp.logaddexp(0.0, -z))

    def step(t, p):
        return jax.tree.map(lambda a, g: a - g, p, jax.grad(loss)(p))

    def train(p):
        return jax.lax.fori_loop(0, steps, step, p)

    d = X.shape[-1]
    p = {"W": jnp.zeros((d, d)), "U": jnp.zeros((d,))}
    compiled = jax.jit(train).lower(p).compile(CPU_COMPILER_OPTIONS)
    jax.block_until_ready(compiled(p))
    start = time.perf_counter()
    jax.block_until_ready(compiled(p))
    return (time.perf_counter() - start) / steps


def _engine(model: str, n: int, d: int, steps: int) -> float:
    from dynamics import run_sweep

    kw = dict(data_model=model, n_train=n, width=d, heads=(1,), trials=1, steps=steps, log_points=2)
    kw["progress"] = False
    run_sweep(**kw)  # compile
    start = time.perf_counter()
    run_sweep(**kw)
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.step_floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10000, help="steps per timing (default 10000)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'data':<8} {'n':>5} {'d':>3}  {'minimal us':>10} {'engine us':>10} {'stacked us':>10}")
    for model, (n, T, d) in SHAPES.items():
        X = jnp.asarray(rng.normal(size=(n, T, d)).astype(np.float32) / np.sqrt(d))
        y = jnp.asarray(np.where(rng.normal(size=n) > 0, 1.0, -1.0).astype(np.float32))
        with jax.default_matmul_precision("highest"):
            minimal = _loop(_scores_readout, X, y, args.steps)
            stacked = _loop(_scores_readout_stacked, X, y, args.steps)
        engine = _engine(model, n, d, args.steps)
        cells = " ".join(f"{t * 1e6:>10.1f}" for t in (minimal, engine, stacked))
        print(f"{model:<8} {n:>5} {d:>3}  {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
