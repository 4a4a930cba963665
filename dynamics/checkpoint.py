"""Per-point checkpoints of a sweep: finished sweep points survive Ctrl-C and feed ``--resume``.

Each finished point (one compiled call covering one or more H) is written atomically to
``DIR/points/H<h1>-<h2>....npz`` with the resolved config's hash, and ``results.json`` is
rewritten with ``"complete": false`` and the summary of the points done so far. A resumed
run loads the points whose hash matches and runs only the others; every point is computed
by the same program with the same inputs, so the final files equal an uninterrupted run's.
(Kept as it was through the house's reorganisation: resume is bit-identical and tested so.)
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from dynamics.results import atomic_write_bytes
from dynamics.sweep import HeadResult
from dynamics.timings import phase

POINTS = "points"


def point_file(out: Path, heads) -> Path:
    return Path(out) / POINTS / ("H" + "-".join(str(int(h)) for h in heads) + ".npz")


def save_point(out: Path, config_hash: str, heads, curves: dict[str, np.ndarray], diverged_at) -> Path:
    """One finished point: ``curves[metric]`` is (n_point_heads, trials, L)."""
    buf = io.BytesIO()
    np.savez(
        buf,
        config_hash=np.array(config_hash),
        heads=np.asarray(heads),
        diverged_at=np.asarray(diverged_at),
        **{f"curve_{k}": v for k, v in curves.items()},
    )
    path = point_file(out, heads)
    with phase("writing"):
        atomic_write_bytes(path, buf.getvalue())
    return path


def load_points(out: Path, config_hash: str) -> dict[int, HeadResult]:
    """H -> (metric -> (trials, L), diverged_at (trials,)) for every saved point of this config."""
    done: dict[int, HeadResult] = {}
    folder = Path(out) / POINTS
    if not folder.is_dir():
        return done
    for path in sorted(folder.glob("H*.npz")):
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["config_hash"]) != config_hash:
                    continue
                curves = {k[len("curve_") :]: z[k] for k in z.files if k.startswith("curve_")}
                for i, h in enumerate(z["heads"]):
                    done[int(h)] = ({k: v[i] for k, v in curves.items()}, z["diverged_at"][i])
        except (OSError, ValueError, KeyError):
            continue  # a file from elsewhere or damaged: recompute that point
    return done


def clear_points(out: Path) -> None:
    folder = Path(out) / POINTS
    if folder.is_dir():
        for path in folder.glob("H*.npz"):
            path.unlink(missing_ok=True)
        if not any(folder.iterdir()):
            folder.rmdir()


def finished_heads(out: Path, config_hash: str) -> dict[int, HeadResult]:
    """Every H already finished in ``out`` for this config: a complete run's curves, or saved points."""
    from dynamics.engine import METRICS
    from dynamics.results import complete_results_hash, load_results

    if complete_results_hash(out) == config_hash:
        _, curves = load_results(out)
        return {
            int(h): ({k: curves[k][i] for k in METRICS}, curves["diverged_at"][i])
            for i, h in enumerate(curves["heads"])
        }
    return load_points(out, config_hash)


def run_checkpointed(cfg, out: Path, *, resume: bool = False, progress: bool = True, **sweep_kwargs):
    """``run_sweep`` that saves every finished point in ``out`` and, with ``resume``, skips them.

    After each point, ``results.json``/``curves.npz`` hold the points done so far with
    ``"complete": false``; at the end they hold the whole sweep with ``"complete": true``.
    """
    import jax

    from dynamics.config import resolve
    from dynamics.devices import device_name
    from dynamics.results import provenance, write_results
    from dynamics.sweep import SweepResult, run_sweep

    provenance()  # looked up now, not between a point's file and its results.json
    exp = resolve(cfg)
    cfg, steps = exp.config, np.array(exp.steps)
    out, config_hash = Path(out), cfg.hash()
    writer = jax.process_index() == 0  # with jax.distributed, process 0 alone writes
    done = finished_heads(out, config_hash) if resume else {}
    if not resume and writer:
        clear_points(out)
    heads = list(cfg.sweep.heads)
    device = device_name(sweep_kwargs.get("devices"))

    def on_point(indices, by_head, diverged_at):
        if not writer:
            return
        point_heads = [heads[i] for i in indices]
        save_point(out, config_hash, point_heads, by_head, diverged_at)
        for j, h in enumerate(point_heads):
            done[h] = ({k: v[j] for k, v in by_head.items()}, diverged_at[j])
        have = [h for h in heads if h in done]
        partial = SweepResult(
            config=cfg,
            heads=np.array(have),
            steps=steps,
            curves={k: np.stack([done[h][0][k] for h in have]) for k in by_head},
            diverged_at=np.stack([done[h][1] for h in have]),
            extra={"complete": False, "heads_todo": [h for h in heads if h not in done], "device": device},
        )
        write_results(partial, out)

    result = run_sweep(exp, progress=progress, on_point=on_point, skip_heads=done, **sweep_kwargs)
    result.extra.update(complete=True, device=device)
    if writer:
        write_results(result, out)
        clear_points(out)
    return result
