"""θ(0) from a file (``--init-from FILE.npz``): the parameters by name, checked against the model.

The file holds one array per parameter of the model's layout — ``U`` (H, d) with ``W`` (H, d, d),
``Q`` and ``K`` (H, d, d_h), or ``k`` (H, d) for the learned query — and ``b`` (a scalar) when the
model has a bias. Every array may carry a leading trial axis (``U`` (trials, H, d), ``b``
(trials,)): trial i then starts from its own row, otherwise every trial starts from the same
values. A run of H heads starts from the file's first H heads, so the file's H must be at least
the sweep's largest. numpy only (the config layer reads it; no JAX).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from dynamics.errors import ConfigError

NAMES = ("U", "W", "Q", "K", "k", "b")
FLOAT32_MAX = float(np.finfo(np.float32).max)  # beyond it, float32 (the default precision) holds inf


def read(path: str) -> dict[str, np.ndarray]:
    """The file's arrays by name (float64 copies); a one-line ConfigError for a file that cannot be
    read, an unknown key, or an array that is not real and finite."""
    where = f"model.init_from={path!r}"
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ConfigError(f"{where} is a single .npy array, not an .npz archive of named arrays")
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ConfigError(
            f"{where} cannot be read as an .npz file ({' '.join(str(err).split())[:160]})"
        ) from None
    unknown = sorted(set(arrays) - set(NAMES))
    if unknown:
        raise ConfigError(f"{where} has {unknown[0]!r}, not a parameter; the names are {', '.join(NAMES)}")
    for name, a in arrays.items():
        if a.dtype.kind not in "biuf" or a.dtype == np.bool_:
            raise ConfigError(f"{where}: {name!r} must be a real array, got dtype {a.dtype}")
        if not np.all(np.isfinite(a)):
            raise ConfigError(f"{where}: {name!r} has non-finite values")
        big = np.abs(a.astype(np.float64)) > FLOAT32_MAX
        if np.any(big):
            raise ConfigError(
                f"{where}: {name!r} has {int(big.sum())} values beyond float32's range "
                f"(e.g. {a[big].flat[0]:.4g}); θ(0) must lie within ±{FLOAT32_MAX:.4g}, where the "
                "simulation's float32 holds it (it would start at inf)"
            )
    return {k: np.asarray(v, np.float64) for k, v in arrays.items()}


def expected(
    d: int, head_size: int | None, learned: bool, bias: bool, tied: bool = False
) -> dict[str, tuple[int, ...]]:
    """One head's shapes by name (the head axis left out), and ``b`` () when there is a bias; a
    ``tied`` head (W_h = Q_h Q_hᵀ) has Q and no K."""
    if learned:
        shapes = {"U": (d,), "k": (d,)}
    elif head_size is None:
        shapes = {"U": (d,), "W": (d, d)}
    elif tied:
        shapes = {"U": (d,), "Q": (d, head_size)}
    else:
        shapes = {"U": (d,), "Q": (d, head_size), "K": (d, head_size)}
    return {**shapes, **({"b": ()} if bias else {})}


def check(
    arrays: dict[str, np.ndarray], path: str, shapes: dict[str, tuple[int, ...]], heads: int, trials: int
) -> bool:
    """The file's arrays are the model's, with at least ``heads`` heads; True when they carry a
    trial axis (of length ``trials``), False when shared by every trial. One-line ConfigErrors."""
    where = f"model.init_from={path!r}"
    if set(arrays) != set(shapes):
        raise ConfigError(
            f"{where} has {sorted(arrays)}; this model's parameters are {sorted(shapes)} "
            "(U with W; Q and K; or k; and b with --bias)"
        )
    per_trial = arrays["U"].ndim == 3
    lead = (trials,) if per_trial else ()
    H = arrays["U"].shape[len(lead)] if arrays["U"].ndim == len(lead) + 2 else 0
    for name, shape in shapes.items():
        want = lead + (() if name == "b" else (H,)) + shape
        if arrays[name].shape != want:
            dims = "(trials, H, …)" if per_trial else "(H, …)"
            raise ConfigError(
                f"{where}: {name!r} has shape {arrays[name].shape}, expected {want} "
                f"(every array {dims} alike; d, d_h and trials those of the run)"
            )
    if H < heads:
        raise ConfigError(f"{where} holds H={H} heads; the sweep's largest H is {heads}: it needs as many")
    return per_trial
