"""Hostile inputs for the fuzz tests (hypothesis strategies) and what every one must give.

The promise checked: a TOML file, an ``.npz`` file or a command line either works
or ends in one ``ConfigError``/``DataError`` line (exit 2 on the command line); never another
exception, never a traceback, and a failing run leaves the output folder as it was.
Used by tests/test_fuzz.py (small budgets, default suite) and tests/test_stress.py (big ones).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers import child_env
from hypothesis import strategies as st

from datamodels.npz import DataError, load_npz
from dynamics.cli import run as cli
from dynamics.config.schema import SECTIONS, ConfigError, load_toml, resolve

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {s: [f.name for f in dataclasses.fields(c)] for s, c in SECTIONS.items()}
WORDS = ["dm1", "planted", "mixture", "npz", "split", "zero", "normal", "factored", "full", "adam", "gd"]
WORDS += ["fig2", "default", "bottleneck-expressivity", "bottleneck-heads", "", " ", "\n", "é", "x" * 70]

scalars = st.one_of(
    st.booleans(),
    st.integers(-5, 70),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=8),
)
values = st.one_of(scalars, st.lists(st.one_of(st.integers(-3, 70), st.floats(-2, 2)), max_size=5))


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return (
            "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == -float("inf") else repr(v))
        )
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string (JSON escapes are TOML escapes)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return str(v)


@st.composite
def structured_toml(draw) -> str:
    lines = []
    if draw(st.booleans()):
        lines.append(f"preset = {toml_value(draw(st.sampled_from(WORDS)))}")
    if draw(st.booleans()):
        lines.append(f"name = {toml_value(draw(scalars))}")
    for section in draw(st.lists(st.sampled_from([*FIELDS, "extra"]), max_size=4, unique=True)):
        lines.append(f"[{section}]")
        names = FIELDS.get(section, []) + ["bogus"]
        for name in draw(st.lists(st.sampled_from(names), max_size=4, unique=True)):
            lines.append(f"{name} = {toml_value(draw(values))}")
    return "\n".join(lines) + "\n"


def toml_documents():
    return st.one_of(structured_toml(), st.text(max_size=200), st.binary(max_size=200).map(repr))


@st.composite
def npz_files(draw) -> bytes:
    """An .npz as bytes: well formed with random shapes and dtypes, or damaged, or noise."""
    arrays = {}
    keys = draw(st.lists(st.sampled_from(["X_train", "y_train", "X_test", "y_test", "extra"]), unique=True))
    n, m, T, d = (draw(st.integers(0, 5)) for _ in range(4))
    for key in keys:
        ndim_ok = 3 if key.startswith("X") else 1
        ndim = draw(st.sampled_from([ndim_ok, ndim_ok, 0, 2]))
        shape = {3: (n if key == "X_train" else m, T, d), 1: (n if key == "y_train" else m,)}.get(
            ndim, (2,) * ndim
        )
        dtype = draw(st.sampled_from(["float32", "float64", "int8", "bool", "float16", "U1", "complex64"]))
        fill = draw(st.sampled_from([0.0, 1.0, -1.0, np.nan, np.inf, 1e300]))
        with np.errstate(all="ignore"):
            a = np.full(shape, fill).astype(dtype) if dtype != "U1" else np.full(shape, "a")
        if key.startswith("y") and dtype not in ("U1", "complex64"):
            a = np.resize(np.array([1, -1, 0], dtype=dtype), shape)
        arrays[key] = a
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    damage = draw(st.sampled_from(["none", "truncate", "flip", "noise"]))
    if damage == "truncate":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    elif damage == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    elif damage == "noise":
        data = draw(st.binary(max_size=300))
    return data


# What a real command line can carry: no NUL byte (execve ends an argument there), no lone surrogate.
ARGV_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"))

FLAG_VALUES = {
    "--heads": st.one_of(st.sampled_from(["1,2", "8,1,4,2", "0", "1,1", "", "a", "-1", "1,,3"]), ARGV_TEXT),
    "--trials": st.sampled_from(["1", "0", "-2", "x", "1e3"]),
    "--steps": st.sampled_from(["1", "5", "0", "100000000000", "nan"]),
    "--lr": st.sampled_from(["0.1", "0", "-1", "inf", "nan", "1e400"]),
    "--n-train": st.sampled_from(["4", "0", "10000000"]),
    "--n-test": st.sampled_from(["4", "0"]),
    "--tokens": st.sampled_from(["3", "0", "4096"]),
    "--width": st.sampled_from(["6", "1", "4096"]),
    "--init": st.sampled_from(["zero", "normal", "ones"]),
    "--key-query": st.sampled_from(["full", "factored"]),
    "--head-size": st.sampled_from(["split", "1", "9", "0", "x"]),
    "--data-model": st.sampled_from(["dm1", "planted", "npz", "mixture"]),
    "--preset": st.sampled_from(["fig2", "nope", "", "bottleneck-heads"]),
    "--config": st.sampled_from(["", ".", "missing.toml", "/dev/null"]),
    "--data": st.sampled_from(["", ".", "missing.npz", "GOOD"]),
    "--seed": st.sampled_from(["0", "-1", "99999999999999999999"]),
    "--log-every": st.sampled_from(["1", "0"]),
}


@st.composite
def command_lines(draw, runnable: bool = False) -> list[str]:
    """An argv of dynamics.run; ``runnable``: small enough that a valid one runs in seconds."""
    argv = []
    for flag in draw(st.lists(st.sampled_from(sorted(FLAG_VALUES)), max_size=6, unique=True)):
        if runnable and flag in (
            *("--preset", "--steps", "--n-train", "--tokens", "--width", "--config"),
            *("--n-test", "--trials"),  # set below: a flag given twice with two values is refused
        ):
            continue
        argv += [flag, draw(FLAG_VALUES[flag])]
    if runnable:
        argv += ["--steps", "3", "--n-train", "4", "--n-test", "4", "--trials", "1", "--quiet", "--no-figure"]
        argv = [a for i, a in enumerate(argv) if not (a in ("--n-train", "--n-test") and "--data" in argv)]
    return argv


def good_npz(folder: Path) -> Path:
    """A valid data file: n = 8 train, 6 test examples of T = 3 tokens of width d = 6."""
    rng = np.random.default_rng(0)
    path = folder / "good.npz"
    y = np.array([1, -1] * 4, dtype=np.float32)
    np.savez(
        path, X_train=rng.normal(size=(8, 3, 6)), y_train=y, X_test=rng.normal(size=(6, 3, 6)), y_test=y[:6]
    )
    return path


def one_line(message: str) -> bool:
    return "\n" not in message.strip() and bool(message.strip())


def check_toml(folder: Path, text: str) -> None:
    path = folder / "c.toml"
    path.write_bytes(text.encode("utf-8", "replace"))
    try:
        resolve(load_toml(path))
    except ConfigError as err:
        assert one_line(str(err)), repr(str(err))


def check_npz(folder: Path, payload: bytes) -> None:
    from datamodels.npz import read_header

    path = folder / "d.npz"
    path.write_bytes(payload)
    try:
        header = read_header(path)
    except DataError as err:
        assert one_line(str(err)), repr(str(err))
        header = None
    try:
        data = load_npz(path)
    except DataError as err:
        assert one_line(str(err)), repr(str(err))
        return
    assert header is not None, "the header reader refused a file that loads"
    assert (header.n_train, header.n_test, header.T, header.d) == (
        data.X_train.shape[0],
        data.X_test.shape[0],
        *data.X_train.shape[1:],
    )


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> sha256)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def check_command_line(folder: Path, argv: list[str]) -> None:
    """Parse and validate in-process: an Experiment, or exit 2 / a ConfigError in one line."""
    argv = [str(good_npz(folder)) if a == "GOOD" else a for a in argv]
    before = snapshot(folder)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = cli.build_parser().parse_args(argv)
        cli.config_from_args(args)
    except SystemExit as stop:
        assert stop.code in (0, 2) and (stop.code == 0 or one_line(err.getvalue())), err.getvalue()
    except (ConfigError, ValueError) as error:
        assert one_line(str(error)), repr(str(error))
    assert snapshot(folder) == before


def check_real_run(previous: Path, folder: Path, argv: list[str]) -> None:
    """A real subprocess on --out holding a complete result: 0, or 2 with one line and --out intact."""
    import shutil

    out = folder / "out"
    shutil.copytree(previous, out)
    before = snapshot(out)
    argv = [str(good_npz(folder)) if a == "GOOD" else a for a in argv]
    env = child_env()
    proc = subprocess.run(
        [sys.executable, "-m", "dynamics.run", *argv, "--out", str(out)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 2), (argv, proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode == 2:
        assert one_line(proc.stderr), (argv, proc.stderr)
        assert snapshot(out) == before, argv
