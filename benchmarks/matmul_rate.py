"""The machine's float32 matrix-multiply rate under XLA, the yardstick of the simulation's FLOP rate.

    python -m benchmarks.matmul_rate [--json FILE]

Times ``a @ b`` jitted on JAX's default device (best of 3 timed blocks of about 2·10¹⁰ FLOP each,
after one untimed call), for a large square product (the machine's rate, on all cores) and for the
products the DM1 sweeps of ``benchmarks.ratio`` are made of: W_h x_1 for a pack of 26 heads on
the test set (300 × 32 by 32 × 832) and the training set (100 × 32 by 32 × 832), and the readout
U_hᵀ x_t (3000 × 32 by 32 × 26), which XLA runs on one core each. Prints GFLOP/s per shape (2mkn
FLOP per product).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

LARGE = "large 2048 x 2048 x 2048"  # the machine's rate: the yardstick benchmarks.ratio divides by
SHAPES = {
    LARGE: (2048, 2048, 2048),
    "test-set W x_1 (300x32)(32x832)": (300, 32, 832),
    "train-set W x_1 (100x32)(32x832)": (100, 32, 832),
    "readout (3000x32)(32x26)": (3000, 32, 26),
}


def rate(m: int, k: int, n: int, flop_per_block: float = 2e10) -> float:
    """GFLOP/s of an (m, k) by (k, n) float32 product, jitted: best of 3 blocks."""
    import jax  # lazy: a benchmark's child process pays JAX's import only when it measures
    import jax.numpy as jnp  # lazy: as above

    a = jnp.ones((m, k), jnp.float32) / k
    b = jnp.ones((k, n), jnp.float32)
    f = jax.jit(lambda a, b: a @ b)
    f(a, b).block_until_ready()
    reps = max(3, int(flop_per_block / (2 * m * k * n)))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            out = f(a, b)
        out.block_until_ready()
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2 * m * k * n / best / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.matmul_rate", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, help="also write {shape: GFLOP/s} here")
    args = p.parse_args(argv)
    rates = {name: rate(*shape) for name, shape in SHAPES.items()}
    for name, r in rates.items():
        print(f"{name}: {r:.1f} GFLOP/s")
    if args.json is not None:
        args.json.write_text(json.dumps(rates, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
