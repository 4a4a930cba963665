"""Per-point checkpoints of a sweep: finished sweep points survive Ctrl-C and feed ``--resume``.

Each finished point (one compiled call covering one or more H) is written atomically to
``DIR/points/H<h1>-<h2>....npz`` with the resolved config's hash, and ``results.json`` is
rewritten with ``"complete": false`` and the summary of the points done so far. A resumed
run loads the points whose hash matches and runs only the others; every point is computed
by the same program with the same inputs, so the final files equal an uninterrupted run's.
(Kept as it was through the house's reorganisation: resume is bit-identical and tested so.)
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np

from dynamics.config.schema import ConfigError, resolve
from dynamics.infra import interrupts
from dynamics.infra.files import atomic_write_bytes
from dynamics.infra.timings import phase
from dynamics.parts.metrics import METRICS, REGRESSION_METRICS, has_head_axes, head_schedule
from dynamics.sweeps.folders import DAMAGED, LOCK, POINTS
from dynamics.sweeps.midrun import PREFIX, MidRun
from dynamics.sweeps.sweep_result import HeadResult, SweepResult


def point_file(out: Path, heads) -> Path:
    return Path(out) / POINTS / ("H" + "-".join(str(int(h)) for h in heads) + ".npz")


def write_point(path: Path, config_hash: str, curves: dict[str, np.ndarray], diverged_at, **extra) -> Path:
    """One finished point's file (a sweep's or a grid's): the hash, ``diverged_at``, each curve as
    ``curve_<metric>`` and ``extra`` arrays, written atomically and shielded from Ctrl-C."""
    buf = io.BytesIO()
    arrays = {f"curve_{k}": v for k, v in curves.items()}
    np.savez(buf, config_hash=np.array(config_hash), diverged_at=np.asarray(diverged_at), **extra, **arrays)
    with phase("writing"), interrupts.shielded():
        atomic_write_bytes(path, buf.getvalue())
    return path


def read_points(paths, config_hash: str, read, what: str = "its H values") -> dict:
    """``read(npz)`` -> {key: result} merged over the point files ``paths`` of this config (another
    hash: skipped). A damaged file (or one ``read`` refuses with ValueError) is skipped with a
    warning that names it, and that point is recomputed."""
    done: dict = {}
    for path in paths:
        if not path.is_file():
            continue
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["config_hash"]) != config_hash:
                    continue
                point = read(z)
        except DAMAGED as err:
            warnings.warn(f"{path} is damaged ({type(err).__name__}): recomputing {what}", stacklevel=3)
            continue
        done.update(point)
    return done


def clear_points(out: Path, pattern: str = "H*.npz") -> None:
    """Remove the point files (``pattern``) in ``out/points``, and the folder once empty."""
    folder = Path(out) / POINTS
    if folder.is_dir():
        for path in folder.glob(pattern):
            path.unlink(missing_ok=True)
        if not any(folder.iterdir()):
            folder.rmdir()


def save_point(out: Path, config_hash: str, heads, curves: dict[str, np.ndarray], diverged_at) -> Path:
    """One finished sweep point: ``curves[metric]`` is (n_point_heads, trials, L)."""
    return write_point(point_file(out, heads), config_hash, curves, diverged_at, heads=np.asarray(heads))


def load_points(out: Path, config_hash: str, shape: tuple[int, ...] | None = None) -> dict[int, HeadResult]:
    """H -> (metric -> (trials, L), diverged_at (trials,)) for every saved point of this config.

    A damaged point file, or one of the wrong ``shape`` (trials, L[, L_h the per-head view's
    steps]), is skipped with a warning that names it: that point is recomputed."""
    folder = Path(out) / POINTS
    paths = sorted(folder.glob("H*.npz")) if folder.is_dir() else []
    return read_points(paths, config_hash, lambda z: _read_point(z, shape))


def _read_point(z, shape: tuple[int, int] | None) -> dict[int, HeadResult]:
    heads, diverged_at = z["heads"], z["diverged_at"]
    names = METRICS if "curve_margin" in z.files else REGRESSION_METRICS  # a classification run's has margins
    names = [k for k in names if k != "excess_risk" or "curve_excess_risk" in z.files]
    names += [
        f[len("curve_") :] for f in z.files if f.startswith("curve_") and has_head_axes(f[len("curve_") :])
    ]
    curves = {k: z[f"curve_{k}"] for k in names}  # KeyError: a file of another version
    for k, v in curves.items():
        # (trials, L), the per-head view's curves (trials, L_h, …): ``shape`` (trials, L[, L_h])
        want = None if shape is None else (len(heads), shape[0], shape[-1] if has_head_axes(k) else shape[1])
        got = v.shape[: len(want)] if want is not None and has_head_axes(k) else v.shape
        if heads.ndim != 1 or (want is not None and got != want) or v.shape[0] != len(heads):
            raise ValueError(f"curve {k} has shape {v.shape}, expected {want}")
    return {int(h): ({k: v[i] for k, v in curves.items()}, diverged_at[i]) for i, h in enumerate(heads)}


def finished_heads(
    out: Path, config_hash: str, shape: tuple[int, ...] | None = None
) -> dict[int, HeadResult]:
    """Every H already finished in ``out`` for this config: a complete run's curves, or saved
    points. A damaged or missing curves.npz beside a complete results.json is recomputed (warned)."""
    from dynamics.sweeps.result_files import complete_results_hash, load_results  # lazy: JAX: not at import

    logged = set(METRICS + REGRESSION_METRICS)
    if complete_results_hash(out) == config_hash:
        try:
            _, curves = load_results(out)
            return {
                int(h): (
                    {k: v[i] for k, v in curves.items() if k in logged or has_head_axes(k)},
                    curves["diverged_at"][i],
                )
                for i, h in enumerate(curves["heads"])
            }
        except DAMAGED as err:
            warnings.warn(
                f"{Path(out) / 'curves.npz'} is missing or damaged ({type(err).__name__}): recomputing",
                stacklevel=2,
            )
    return load_points(out, config_hash, shape)


@contextlib.contextmanager
def locked(out: Path):
    """Hold ``out``'s lock file (a second run on the same --out is refused with a ConfigError),
    and remove the temporary files a killed run left behind (no one else writes there now)."""
    import filelock  # lazy: only when a folder is locked

    out = Path(out)
    try:
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {str(out)!r} is a file, not a folder")
        out.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(out / LOCK)
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise ConfigError(
            f"--out {str(out)!r} is in use by another run (it holds {LOCK}); "
            f"wait for it to end or choose another --out"
        ) from None
    except OSError as err:
        raise ConfigError(f"--out {str(out)!r} cannot be written: {err.strerror or err}") from None
    try:
        for stale in [*out.glob(".*.tmp"), *out.glob(f"{POINTS}/.*.tmp")]:
            stale.unlink(missing_ok=True)
        yield out
    finally:
        lock.release()


def run_checkpointed(
    cfg, out: Path, *, resume: bool = False, progress: bool = True, finish=None, claim=None,
    checkpoint_every=None, **sweep_kwargs,
):  # fmt: skip
    """``run_sweep`` that saves every finished point in ``out`` and, with ``resume``, skips them;
    a long point keeps its state mid-run every ``checkpoint_every`` seconds (default 10,
    ``dynamics.sweeps.midrun``), and with ``resume`` continues from it.

    After each point, ``results.json``/``curves.npz`` hold the points done so far with
    ``"complete": false``; at the end they hold the whole sweep with ``"complete": true``, written
    once, after ``finish(result)`` (the command line's figures and timings) has run on the result
    in memory (written even when it raises). ``claim`` (``dynamics.sweeps.folders.Claim``, the
    command line's): what ``out`` holds is checked under its lock before anything is read (another
    config's results refused), and a replaced run's files are removed once this run's are written.
    """
    import jax  # lazy: JAX: not at import

    from dynamics.sweeps.devices import device_name  # lazy: JAX: not at import

    exp, out = resolve(cfg), Path(out)
    writer = jax.process_index() == 0  # with jax.distributed, process 0 alone writes
    every = {} if checkpoint_every is None else {"every_s": checkpoint_every}
    midrun = MidRun(out, exp.config.hash(), resume, writer=writer, **every)
    with locked(out) if writer else contextlib.nullcontext():
        if claim is not None and writer:
            claim.enter(out)
        device = device_name(sweep_kwargs.get("devices"))
        sweep_kwargs = {**sweep_kwargs, "midrun": midrun}
        result = _run_locked(exp, out, resume, progress, writer, device, sweep_kwargs, finish)
        if claim is not None and writer:
            claim.written(out)
        return result


def _run_locked(
    exp, out: Path, resume: bool, progress: bool, writer: bool, device: str, sweep_kwargs, finish
):
    # lazy: JAX: the checkpoints load none at import
    from dynamics.sweeps.result_files import complete_results_hash, provenance, write_results
    from dynamics.sweeps.sweep import run_sweep  # lazy: JAX: not at import

    provenance()  # looked up now, not between a point's file and its results.json

    cfg, steps, config_hash = exp.config, np.array(exp.steps), exp.config.hash()
    shape = (cfg.sweep.trials, len(steps), len(head_schedule(steps, cfg)))
    done = finished_heads(out, config_hash, shape) if resume else {}
    # A complete result already in --out stays until this run has finished: no partial pair over it.
    keep_previous = complete_results_hash(out) is not None
    heads = list(cfg.sweep.heads)

    def on_point(point_heads, by_head, diverged_at):
        if writer:
            # One shield over the point file and the partial pair: an interrupt never lands between
            # them (the point would be on disk, but results.json would not yet name it).
            with interrupts.shielded():
                _save(point_heads, by_head, diverged_at)

    def _save(point_heads, by_head, diverged_at):
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
        if not keep_previous:
            write_results(partial, out)

    result = run_sweep(exp, progress=progress, on_point=on_point, skip_heads=done, **sweep_kwargs)
    result.extra.update(complete=True, device=device)
    if writer:
        finish_then_write(result, finish, lambda: write_results(result, out))
        clear_points(out)
        clear_points(out, f"{PREFIX}*.npz")  # another config's, left by an interrupted run
    return result


def finish_then_write(result, finish, write) -> None:
    """``finish(result)`` (the command line's figures and timings; ``None``: nothing), then
    ``write()``, the run's final files: written even when ``finish`` raises."""
    try:
        if finish is not None:
            finish(result)
    finally:
        write()
