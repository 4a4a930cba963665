"""Per-point checkpoints of a sweep: finished sweep points survive Ctrl-C and feed ``--resume``.

Each finished point (one compiled call covering one or more H) is written atomically to
``DIR/points/H<h1>-<h2>....npz`` with the resolved config's hash, and ``results.json`` is
rewritten with ``"complete": false`` and the summary of the points done so far. A resumed
run loads the points whose hash matches and runs only the others; every point is computed
by the same program with the same inputs, so the final files equal an uninterrupted run's.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from dynamics.io import atomic_write_bytes

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
    atomic_write_bytes(path, buf.getvalue())
    return path


def load_points(out: Path, config_hash: str) -> dict[int, tuple[dict[str, np.ndarray], np.ndarray]]:
    """H -> (metric -> (trials, L), diverged_at (trials,)) for every saved point of this config."""
    done: dict[int, tuple[dict[str, np.ndarray], np.ndarray]] = {}
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


def saved_config_hash(out: Path) -> str | None:
    try:
        return json.loads((Path(out) / "results.json").read_text()).get("config_hash")
    except (OSError, ValueError):
        return None
