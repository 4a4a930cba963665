"""python -m benchmarks.compiler_options: XLA:CPU YNNPACK settings on this model's GD step.

Times 100 full-batch GD steps (forward + backward of ``model.logits``, 5 trials vmapped,
``lax.fori_loop``) per setting, shape and number of heads, best of 3, and prints µs per
run-step. The engine uses the setting that was best or tied everywhere here
(``dynamics.core.engine.CPU_COMPILER_OPTIONS``).
"""

from __future__ import annotations

import argparse
import sys
import time

SETTINGS = {
    "default": {},
    "ynn off": {"xla_cpu_experimental_ynn_fusion_type": ""},
    "ynn dot only": {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"},
}
SHAPES = {"DM1 (n=100, d=32)": (100, 32), "planted (n=1000, d=16)": (1000, 16)}


def time_step(n: int, d: int, heads: int, options: dict, trials: int = 5, steps: int = 100) -> float:
    import jax
    import jax.numpy as jnp

    from dynamics.core import model as mdl
    from dynamics.core.losses import Loss, mean_loss

    T = 10
    X = jax.random.normal(jax.random.PRNGKey(0), (trials, n, T, d)) / d**0.5  # (trials, n, T, d)
    y = jnp.sign(jax.random.normal(jax.random.PRNGKey(1), (trials, n)))  # (trials, n)
    p0 = {
        "U": 0.1 * jax.random.normal(jax.random.PRNGKey(2), (trials, heads, d)),
        "W": 0.1 * jax.random.normal(jax.random.PRNGKey(3), (trials, heads, d, d)),
    }

    def objective(p, X, y):
        return mean_loss(y * mdl.logits(p, X), Loss.LOGISTIC)

    def train(p, X, y):
        def body(_, p):
            g = jax.vmap(jax.grad(objective))(p, X, y)
            return jax.tree_util.tree_map(lambda a, b: a - 0.5 * b, p, g)

        return jax.lax.fori_loop(0, steps, body, p)

    f = jax.jit(train, compiler_options=options)
    jax.block_until_ready(f(p0, X, y))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        jax.block_until_ready(f(p0, X, y))
        best = min(best, time.perf_counter() - t)
    return best / steps / trials * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compiler_options", description=__doc__)
    p.add_argument("--heads", default="1,8,32", help="comma-separated numbers of heads")
    args = p.parse_args(argv)
    heads = [int(h) for h in args.heads.split(",")]
    print("| shape | H | " + " | ".join(SETTINGS) + " |")
    print("|---|---|" + "---|" * len(SETTINGS))
    for shape, (n, d) in SHAPES.items():
        for h in heads:
            cells = [f"{time_step(n, d, h, opts):.0f}" for opts in SETTINGS.values()]
            print(f"| {shape} | {h} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
