"""User data from an .npz file: X_train (n, T, d), y_train (n,), X_test (m, T, d), y_test (m,),
and optionally mask_train (n, T) and mask_test (m, T), the relevant tokens (bool, or 0/1).
Vector targets y_train (n, o), y_test (m, o) with o >= 2 are a regression task (a matrix readout).
Sequence targets y_train (n, T, d), y_test (m, T, d), one d-vector per token of X, are flattened
token by token to (n, T·d) vector targets, as a data model's sequence targets are (``--output
sequence``).

Targets are labels, a classification task, when y_train and y_test are each all +-1 or all 0/1
(0/1 mapped 0 -> -1, array by array). Any other finite targets are kept as they are: a
regression task (``UserData.task``, ``infer_task``); asked for as regression
(``load_npz(path, "regression")``), every target is kept as it is, ±1 and 0/1 included.
Other keys are ignored, except one that looks like a known key misspelt (``mask_tarin``): refused.
Every problem is a one-line DataError naming the file and the offending key.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

REQUIRED_KEYS = ("X_train", "y_train", "X_test", "y_test")
MASK_KEYS = ("mask_train", "mask_test")  # optional: the relevant tokens of each set


class UserData(NamedTuple):
    """A user's train/test split, numpy float32: labels in {-1, +1}, or regression targets."""

    X_train: np.ndarray  # (n, T, d)
    y_train: np.ndarray  # (n,)
    X_test: np.ndarray  # (m, T, d)
    y_test: np.ndarray  # (m,)
    mask_train: np.ndarray | None = None  # (n, T) bool relevant tokens, None if not in the file
    mask_test: np.ndarray | None = None  # (m, T) bool
    task: str = "classification"  # "regression" when the targets are not labels


class DataError(ValueError):
    """A user data file that cannot be used; the message names the file and the key. Always one
    line: a newline in a path is shown escaped."""

    def __init__(self, message: object = ""):
        super().__init__(str(message).replace("\r", "\\r").replace("\n", "\\n"))


def _fail(path: Path, key: str | None, problem: str) -> DataError:
    where = f"{path}" if key is None else f"{path}: key '{key}'"
    return DataError(f"{where}: {problem}")


def _read(archive: np.lib.npyio.NpzFile, path: Path, key: str) -> np.ndarray:
    try:
        array = archive[key]
    except ValueError as e:  # object arrays need pickle, which is refused
        raise _fail(path, key, f"cannot be read without pickle ({e})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as e:
        raise _fail(path, key, f"is corrupt ({e})") from None
    if array.dtype.kind not in "biuf":
        raise _fail(path, key, f"must be numeric, got dtype {array.dtype}")
    if array.size == 0:
        raise _fail(path, key, f"is empty (shape {array.shape})")
    return array


def _tokens(path: Path, key: str, X: np.ndarray) -> np.ndarray:
    if X.ndim != 3:
        raise _fail(path, key, f"must be 3-D (n, T, d), got shape {X.shape}")
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below
        X32 = X.astype(np.float32)
    bad = int(np.size(X32) - np.count_nonzero(np.isfinite(X32)))
    if bad:
        raise _fail(path, key, f"has {bad} non-finite values (NaN/inf, after float32)")
    return X32


def _target_shape_error(key: str, y_shape: tuple, x_shape: tuple) -> str | None:
    """Why targets of ``y_shape`` cannot go with tokens of ``x_shape`` (n, T, d); None if they can:
    (n,), (n, o) with o >= 2, or (n, T, d), one d-vector per token (sequence targets)."""
    if len(y_shape) == 1 or (len(y_shape) == 2 and y_shape[1] >= 2):
        return None
    if len(y_shape) == 3 and tuple(y_shape[1:]) == tuple(x_shape[1:]):
        return None
    tokens = f"(n, {x_shape[1]}, {x_shape[2]})"
    return (
        f"must be 1-D (n,), (n, o) vector targets with o >= 2, or (n, T, d) = {tokens} sequence "
        f"targets (one per token of {key.replace('y', 'X', 1)}), got shape {tuple(y_shape)}"
    )


def _targets(path: Path, key: str, y: np.ndarray, n: int, x_key: str, x_shape: tuple) -> np.ndarray:
    problem = _target_shape_error(key, y.shape, x_shape)
    if problem:
        raise _fail(path, key, problem)
    if y.ndim == 3:  # sequence targets, token by token: (n, T·d)
        y = y.reshape(y.shape[0], -1)
    if y.shape[0] != n:
        raise _fail(path, key, f"has {y.shape[0]} labels but {x_key} has n={n} examples")
    with np.errstate(over="ignore", invalid="ignore"):
        y32 = y.astype(np.float32)
    if not np.all(np.isfinite(y32)):
        detail = "labels must be finite ±1 or 0/1, or real regression targets"
        raise _fail(path, key, f"has non-finite targets: {detail}")
    return y32


def _task(y_train: np.ndarray, y_test: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
    """(task, y_train, y_test): labels when each target array is all ±1 or all 0/1 (0/1 mapped to
    ±1, array by array); regression otherwise, the targets as they are."""
    if _target_task(y_train, y_test) == "regression":
        return "regression", y_train, y_test
    return "classification", *(_pm1(y) for y in (y_train, y_test))


def _pm1(y: np.ndarray) -> np.ndarray:
    return y if np.all(np.isin(y, (-1, 1))) else np.where(y == 1, 1.0, -1.0).astype(np.float32)


def _mask(path: Path, key: str, mask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    if mask.shape != shape:
        raise _fail(path, key, f"must have shape (n, T) = {shape}, got {mask.shape}")
    if mask.dtype != bool and not np.all(np.isin(mask, (0, 1))):
        raise _fail(path, key, "must be bool (or 0/1): True on the relevant tokens")
    return mask.astype(bool)


def _target_task(*targets: np.ndarray) -> str:
    """classification when every target array is all in {-1, +1} or all in {0, 1}; else regression."""
    labels = all(np.all(np.isin(y, (-1, 1))) or np.all(np.isin(y, (0, 1))) for y in targets)
    return "classification" if labels else "regression"


def infer_task(path: str | os.PathLike) -> str:
    """The task a data file's targets imply: "classification" when y_train and y_test are each all
    ±1 or all 0/1, "regression" otherwise. Reads the two target arrays only; raises DataError."""
    path = Path(path)
    read_header(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            targets = [_read(archive, path, k).ravel() for k in ("y_train", "y_test")]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        if isinstance(e, DataError):
            raise
        raise _fail(path, None, f"is not a valid .npz (zip) file ({_short(e)})") from None
    return _target_task(*targets)


def _check_unknown(path: Path, files: list[str]) -> None:
    """Other keys (notes, metadata) are ignored, but one that looks like a known key misspelt
    (``mask_tarin``, ``x_train``: a known prefix, or close to a known key) is refused: its array
    would silently not be used."""
    known = (*REQUIRED_KEYS, *MASK_KEYS)
    for key in files:
        if key in known:
            continue
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        if near or key.lower().startswith(("x_", "y_", "mask")):
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise _fail(path, key, f"is not a key mhsim reads{hint}; allowed: {', '.join(known)}")


def load_npz(path: str | os.PathLike, task: str | None = None) -> UserData:
    """Load and check a user data file (see the module docstring); raise DataError. ``task``
    None infers it from the targets (``infer_task``); "regression" keeps every target as it is,
    "classification" needs ±1 or 0/1 labels."""
    if isinstance(path, bool) or not isinstance(path, str | os.PathLike):
        raise TypeError(f"path={path!r:.80} must be the path of an .npz file (str or pathlib.Path)")
    if task not in (None, "classification", "regression"):
        raise DataError(f"task={task!r:.80}: expected None (from the targets), classification or regression")
    path = Path(path)
    read_header(path)  # shapes and dtypes first, from the headers: nothing is decompressed before
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise _fail(path, None, f"is not a valid .npz (zip) file ({e})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):  # a bare .npy array
        raise _fail(path, None, "is a single .npy array, not an .npz archive of named arrays")
    with archive:
        missing = [k for k in REQUIRED_KEYS if k not in archive.files]
        if missing:
            raise _fail(
                path,
                missing[0],
                f"is missing (missing: {', '.join(missing)}; required: "
                f"{', '.join(REQUIRED_KEYS)}; found: {', '.join(archive.files) or 'none'})",
            )
        _check_unknown(path, archive.files)
        raw = {k: _read(archive, path, k) for k in (*REQUIRED_KEYS, *MASK_KEYS) if k in archive.files}
    X_train = _tokens(path, "X_train", raw["X_train"])
    X_test = _tokens(path, "X_test", raw["X_test"])
    if X_test.shape[1:] != X_train.shape[1:]:
        raise _fail(
            path,
            "X_test",
            f"has tokens (T, d) = {X_test.shape[1:]} but X_train has {X_train.shape[1:]}",
        )
    y_train = _targets(path, "y_train", raw["y_train"], X_train.shape[0], "X_train", X_train.shape)
    y_test = _targets(path, "y_test", raw["y_test"], X_test.shape[0], "X_test", X_test.shape)
    if y_train.shape[1:] != y_test.shape[1:]:
        raise _fail(
            path, "y_test", f"has targets of shape {y_test.shape[1:]} but y_train has {y_train.shape[1:]}"
        )
    if y_train.ndim == 2:  # vector targets: a regression, whatever their values
        if task == "classification":
            raise _fail(
                path, "y_train", f"has vector targets {y_train.shape}: classification needs (n,) labels"
            )
        task = "regression"
    if task == "regression":  # targets as they are: never remapped
        pass
    else:
        found, y_train, y_test = _task(y_train, y_test)
        if task == "classification" and found != task:
            raise _fail(path, "y_train", "classification needs ±1 or 0/1 labels in y_train and in y_test")
        task = found
    masks = {
        k: _mask(path, k, raw[k], X.shape[:2]) if k in raw else None
        for k, X in (("mask_train", X_train), ("mask_test", X_test))
    }
    return UserData(X_train, y_train, X_test, y_test, masks["mask_train"], masks["mask_test"], task)


class NpzHeader(NamedTuple):
    """What an .npz's headers say, read without loading (or decompressing) any array."""

    n_train: int
    n_test: int
    T: int
    d: int
    nbytes: int  # the four arrays' size in memory once loaded, before the float32 copy
    outputs: int = 1  # o of vector targets y (n, o); 1 for scalar targets (n,)


MAX_MEMBER_HEADER = 65536  # an .npy header is a few hundred bytes; numpy itself caps it near here


def read_header(path: str | os.PathLike) -> NpzHeader:
    """The shapes of a user data file from its .npy headers (each member's first bytes only).

    Checks what ``load_npz`` checks of the shapes and dtypes (keys present, 3-D tokens, 1-D
    labels, matching n and (T, d), numeric dtypes), so that a run is planned and its memory
    estimated before any array is read. Raise a one-line DataError.
    """
    path = Path(path)
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError as err:  # a name too long for the file system, a permission denied on the way
        raise _fail(path, None, f"cannot be read ({err.strerror or err})") from None
    if not is_file:
        raise _fail(path, None, "is a folder, not a file" if is_dir else "no such file")
    try:
        with open(path, "rb") as f:
            if f.read(6) == b"\x93NUMPY":
                raise _fail(path, None, "is a single .npy array, not an .npz archive of named arrays")
        with zipfile.ZipFile(path) as archive:
            names = {n[: -len(".npy")]: n for n in archive.namelist() if n.endswith(".npy")}
            missing = [k for k in REQUIRED_KEYS if k not in names]
            if missing:
                raise _fail(
                    path,
                    missing[0],
                    f"is missing (missing: {', '.join(missing)}; required: {', '.join(REQUIRED_KEYS)}; "
                    f"found: {', '.join(sorted(names)) or 'none'})",
                )
            shapes = {k: _member_header(archive, names[k], path, k) for k in REQUIRED_KEYS}
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, RuntimeError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        raise _fail(path, None, f"is not a valid .npz (zip) file ({_short(e)})") from None
    return _check_shapes(path, shapes)


def _short(err: BaseException) -> str:
    return " ".join(str(err).split())[:200]


def _member_header(archive: zipfile.ZipFile, member: str, path: Path, key: str):
    with archive.open(member) as f:
        try:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else None
            read = read or np.lib.format.read_array_header_2_0
            shape, _fortran, dtype = read(f, max_header_size=MAX_MEMBER_HEADER)
        except (ValueError, EOFError, SyntaxError, TypeError) as e:
            raise _fail(path, key, f"is corrupt ({_short(e)})") from None
    if dtype.hasobject:
        raise _fail(path, key, "cannot be read without pickle (object array)")
    if dtype.kind not in "biuf":
        raise _fail(path, key, f"must be numeric, got dtype {dtype}")
    if math.prod(shape) == 0:
        raise _fail(path, key, f"is empty (shape {shape})")
    return shape, dtype


def _check_shapes(path: Path, headers: dict) -> NpzHeader:
    shapes = {k: s for k, (s, _) in headers.items()}
    for key in ("X_train", "X_test"):
        if len(shapes[key]) != 3:
            raise _fail(path, key, f"must be 3-D (n, T, d), got shape {shapes[key]}")
    for key, x_key in (("y_train", "X_train"), ("y_test", "X_test")):
        problem = _target_shape_error(key, shapes[key], shapes[x_key])
        if problem:
            raise _fail(path, key, problem)
        if shapes[key][0] != shapes[x_key][0]:
            raise _fail(
                path, key, f"has {shapes[key][0]} labels but {x_key} has n={shapes[x_key][0]} examples"
            )
    if shapes["X_test"][1:] != shapes["X_train"][1:]:
        raise _fail(
            path,
            "X_test",
            f"has tokens (T, d) = {shapes['X_test'][1:]} but X_train has {shapes['X_train'][1:]}",
        )
    nbytes = sum(math.prod(s) * d.itemsize for s, d in headers.values())
    (n, T, d), m = shapes["X_train"], shapes["X_test"][0]
    o = math.prod(shapes["y_train"][1:])  # 1 for scalar targets; T·d for sequence targets
    return NpzHeader(n_train=int(n), n_test=int(m), T=int(T), d=int(d), nbytes=int(nbytes), outputs=int(o))


def content_digest(path: str | os.PathLike) -> str:
    """The sha256 of the file's bytes (16 hex digits): what the config hash knows of the data."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]
