"""How close the engine's step is to the floor of a plain JAX step, on one CPU core.

python -m benchmarks.step_floor                 # DM1 (n = 100, d = 32) and planted (n = 1000, d = 16)
python -m benchmarks.step_floor --steps 30000   # longer timings
python -m benchmarks.step_floor --pack          # also the random-init sweep's pack of 26 heads

For each data shape it times, in microseconds per full-batch GD step of one zero-init run:

- ``minimal``: the smallest JAX program of the same step a user would write: one
  ``jax.grad`` of the one-head logistic loss (query = first token), the update, in a
  ``lax.fori_loop``; no metrics, no divergence checks, no packing;
- ``engine``: ``run_sweep`` of one run (H = 1, one trial, logging only the first and last
  step) on one device, warm (its compile excluded), divided by the steps;
- ``exact``: ``minimal`` with the engine's softmax, whose derivative is exact at saturation
  (``dynamics.core.activations.softmax``): what the engine's exactness costs;
- ``stacked``: ``minimal`` with the two contractions over X (scores and readout) stacked into
  one, which reads X once instead of twice: one of the formulations XLA:CPU runs slower.

If ``engine`` is close to ``exact``, the simulation is at what XLA:CPU gives for these
shapes, and a faster simulation needs other hardware or another kernel, not engine work.

``--pack`` times the same two for a step of ``benchmarks.ratio``'s random-init sweep: one pack of
S = 26 heads (H = 16, 8 and 2 sharing it) from θ(0) ~ N(0, 1/d), GD η = 1, DM1 with 100 training and
300 test examples, the train and test loss logged at every step (``--log losses``). ``minimal``
(and ``exact``) is one 26-head model (no runs sharing the slots, no divergence checks) that stores
both losses in a ``fori_loop``; ``engine`` is ``run_sweep`` of the three runs on one device, warm. The sweep's
simulation is 10 such pack-steps per step (5 trials, 2 packs) on two devices.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from dynamics.core import activations
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


def _loop(form, X, y, steps, softmax=jax.nn.softmax):
    def loss(p):
        s, v = form(p["W"], p["U"], X)
        z = y * jnp.sum(softmax(s) * v, axis=-1)
        return jnp.mean(jnp.logaddexp(0.0, -z))

    def step(t, p):
        return jax.tree.map(lambda a, g: a - g, p, jax.grad(loss)(p))

    def train(p):
        return jax.lax.fori_loop(0, steps, step, p)

    d = X.shape[-1]
    return _compiled_timer(train, {"W": jnp.zeros((d, d)), "U": jnp.zeros((d,))}, steps)()


def _timer(run, steps: int):
    """A timer (no arguments, seconds per step) of ``run()``, a call that blocks until it is done,
    after one untimed call (its compile)."""
    run()

    def timed() -> float:
        start = time.perf_counter()
        run()
        return (time.perf_counter() - start) / steps

    return timed


def _compiled_timer(fn, p, steps: int):
    """``_timer`` of ``fn(p)`` jitted with the engine's CPU compiler options."""
    compiled = jax.jit(fn).lower(p).compile(CPU_COMPILER_OPTIONS)
    return _timer(lambda: jax.block_until_ready(compiled(p)), steps)


def _engine_timer(steps: int, **kw):
    """``_timer`` of ``run_sweep(**kw)`` (no progress bar) of ``steps`` steps."""
    from dynamics import run_sweep

    return _timer(lambda: run_sweep(**kw, steps=steps, progress=False), steps)


def _engine(model: str, n: int, d: int, steps: int) -> float:
    return _engine_timer(steps, data_model=model, n_train=n, width=d, heads=(1,), trials=1, log_points=2)()


PACK = dict(heads=(16, 8, 2), n_train=100, n_test=300, T=10, d=32)  # one pack of benchmarks.ratio


def _pack_minimal(steps: int, softmax=jax.nn.softmax):
    """A timer (no arguments, seconds per step) of the smallest JAX program of a pack-step: one
    S-head model, GD η = 1, the train loss (from the update's forward) and the test loss at θ_t
    stored at every step; compiled and run once."""
    S, T, d = sum(PACK["heads"]), PACK["T"], PACK["d"]
    rng = np.random.default_rng(0)

    def data(n):
        X = jnp.asarray(rng.normal(size=(n, T, d)).astype(np.float32) / np.sqrt(d))
        return X, jnp.asarray(np.where(rng.normal(size=n) > 0, 1.0, -1.0).astype(np.float32))

    (Xtr, ytr), (Xte, yte) = data(PACK["n_train"]), data(PACK["n_test"])

    def loss(p, X, y):
        a = jnp.einsum("hde,ne->nhd", p["W"], X[:, 0])  # W_h x_1
        A = softmax(jnp.einsum("ntd,nhd->nht", X, a))
        phi = jnp.einsum("nht,nth->n", A, jnp.einsum("ntd,hd->nth", X, p["U"])) / np.sqrt(S)
        return jnp.mean(jnp.logaddexp(0.0, -y * phi))

    def step(t, carry):
        p, train, test = carry
        value, g = jax.value_and_grad(loss)(p, Xtr, ytr)
        train, test = train.at[t].set(value), test.at[t].set(loss(p, Xte, yte))
        return jax.tree.map(lambda a, b: a - b, p, g), train, test

    def run(p):
        return jax.lax.fori_loop(0, steps, step, (p, jnp.zeros(steps), jnp.zeros(steps)))

    normal = rng.normal(size=(S, d, d + 1)).astype(np.float32) / np.sqrt(d)
    return _compiled_timer(run, {"W": jnp.asarray(normal[..., :d]), "U": jnp.asarray(normal[..., d])}, steps)


def _pack_engine(steps: int):
    """A timer as ``_pack_minimal``'s of ``run_sweep`` of the pack's three runs, compiled."""
    return _engine_timer(
        steps,
        data_model="dm1",
        n_train=PACK["n_train"],
        n_test=PACK["n_test"],
        init="normal",
        init_scale=1.0,
        optimizer="gd",
        lr=1.0,
        heads=PACK["heads"],
        trials=1,
        log_every=1,
        log="losses",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.step_floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10000, help="steps per timing (default 10000)")
    p.add_argument("--pack", action="store_true", help="also the random-init sweep's pack-step (S = 26)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    columns = " ".join(f"{c + ' us':>10}" for c in ("minimal", "exact", "engine", "stacked"))
    print(f"{'data':<8} {'n':>5} {'d':>3}  {columns}")
    for model, (n, T, d) in SHAPES.items():
        X = jnp.asarray(rng.normal(size=(n, T, d)).astype(np.float32) / np.sqrt(d))
        y = jnp.asarray(np.where(rng.normal(size=n) > 0, 1.0, -1.0).astype(np.float32))
        with jax.default_matmul_precision("highest"):
            minimal = _loop(_scores_readout, X, y, args.steps)
            exact = _loop(_scores_readout, X, y, args.steps, softmax=activations.softmax)
            stacked = _loop(_scores_readout_stacked, X, y, args.steps)
        engine = _engine(model, n, d, args.steps)
        cells = " ".join(f"{t * 1e6:>10.1f}" for t in (minimal, exact, engine, stacked))
        print(f"{model:<8} {n:>5} {d:>3}  {cells}")
    if args.pack:
        steps = max(1, args.steps // 10)  # a pack-step is about 40 one-head steps
        timers = _pack_minimal(steps), _pack_minimal(steps, activations.softmax), _pack_engine(steps)
        rounds = [[f() for f in timers] for _ in range(3)]  # alternating
        minimal, exact, engine = (min(t) for t in zip(*rounds, strict=True))
        print(
            f"random-init pack (S = 26, test loss every step, {steps} steps, best of 3): minimal "
            f"{minimal * 1e6:.0f} us, exact {exact * 1e6:.0f} us, engine {engine * 1e6:.0f} us per step "
            f"(engine / minimal {engine / minimal:.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
