"""A grid folder is checked against its own records when loaded, as a sweep folder is: a damaged
or edited one is a one-line ConfigError naming the folder and the file, never a traceback or a
grid with wrong labels."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dynamics.config.grid_axes import resolve_grid
from dynamics.config.schema import Config, ConfigError, apply_overrides
from dynamics.sweeps.grid_runner import run_grid_checkpointed

LRS = [0.1, 1.0]
SMALL = {
    "data": {"n_train": 16, "n_test": 20, "T": 4, "d": 6},
    "optim": {"steps": 8},
    "sweep": {"heads": (1, 2), "trials": 1, "log_every": 4},
}


@pytest.fixture(scope="module")
def grid_folder(tmp_path_factory) -> Path:
    """A tiny grid over η₀ (2 points × H = 1, 2), its files written by the command line's writer."""
    out = tmp_path_factory.mktemp("grid")
    cfg = apply_overrides(Config(name="g"), SMALL, "test")
    run_grid_checkpointed(resolve_grid(cfg, {"lr": LRS}), out, progress=False)
    return out


def _edit_json(folder: Path, edit) -> None:
    meta = json.loads((folder / "results.json").read_text())
    edit(meta)
    (folder / "results.json").write_text(json.dumps(meta))


def _edit_npz(folder: Path, edit, name: str = "curves.npz") -> None:
    with np.load(folder / name) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    with open(folder / name, "wb") as f:
        np.savez(f, **arrays)


def _set(d: dict, path: str, value) -> None:
    *up, last = path.split(".")
    for key in up:
        d = d[key]
    d[last] = value


def _drop(d: dict, path: str) -> None:
    *up, last = path.split(".")
    for key in up:
        d = d[key]
    del d[last]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _new_hash(meta: dict) -> None:
    """The edited grid's own hash: the edit passes the hash check and must be caught by the arrays."""
    from dynamics.config.schema import config_from_dict

    axes = tuple((n, tuple(meta["grid"]["values"][n])) for n in meta["grid"]["axes"])
    meta["config_hash"] = resolve_grid(config_from_dict(meta["config"]), axes).hash()


def _lr_relabelled(meta: dict) -> None:
    _set(meta, "grid.values.lr", [0.1, 2.0])
    _new_hash(meta)


# damage -> (the file the message names, what it says)
DAMAGE = {
    "lr_edited_by_hand": (
        lambda f: _edit_json(f, lambda m: _set(m, "grid.values.lr", [0.1, 2.0])),
        "config_hash",
    ),
    "lr_edited_with_its_hash": (lambda f: _edit_json(f, _lr_relabelled), "curves.npz's lr values"),
    "axes_key_missing": (
        lambda f: _edit_json(f, lambda m: _drop(m, "grid.axes")),
        "grid has no list of axes",
    ),
    "grid_not_a_record": (
        lambda f: _edit_json(f, lambda m: _set(m, "grid", "lr")),
        "grid has no list of axes",
    ),
    "values_missing_an_axis": (lambda f: _edit_json(f, lambda m: _set(m, "grid.values", {})), "grid values"),
    "axis_unknown": (
        lambda f: _edit_json(
            f, lambda m: (_set(m, "grid.axes", ["nope"]), _set(m, "grid.values", {"nope": [1]}))
        ),
        "not a valid grid",
    ),
    "shape_edited": (lambda f: _edit_json(f, lambda m: _set(m, "grid.shape", [3])), "grid shape"),
    "schema_version": (lambda f: _edit_json(f, lambda m: _set(m, "schema_version", 99)), "schema_version"),
    "config_hash": (lambda f: _edit_json(f, lambda m: _set(m, "config_hash", "0" * 16)), "config_hash"),
    "config_steps": (lambda f: _edit_json(f, lambda m: _set(m, "config.optim.steps", 12)), "config_hash"),
    "config_not_a_record": (lambda f: _edit_json(f, lambda m: _set(m, "config.optim", 5)), "config"),
    "json_steps": (lambda f: _edit_json(f, lambda m: _set(m, "steps", [0, 4, 9])), "results.json's steps"),
    "json_heads": (lambda f: _edit_json(f, lambda m: _set(m, "heads", [1, 4])), "results.json's heads"),
    "complete_not_bool": (lambda f: _edit_json(f, lambda m: _set(m, "complete", "yes")), "complete"),
    "wall_time": (lambda f: _edit_json(f, lambda m: _set(m, "wall_time_s", "soon")), "wall_time_s"),
    "diagnostics_short": (lambda f: _edit_json(f, lambda m: _set(m, "diagnostics", [])), "diagnostics"),
    "json_truncated": (lambda f: _truncate(f / "results.json"), "results.json"),
    "json_garbage": (lambda f: (f / "results.json").write_bytes(b"\xff\xfe{not json"), "results.json"),
    "json_not_a_dict": (lambda f: (f / "results.json").write_text("[1, 2]"), "results.json"),
    "npz_missing": (lambda f: (f / "curves.npz").unlink(), "curves.npz"),
    "npz_truncated": (lambda f: _truncate(f / "curves.npz"), "curves.npz"),
    "npz_garbage": (lambda f: (f / "curves.npz").write_bytes(b"PK\x03\x04 nothing"), "curves.npz"),
    "npz_lr_values": (
        lambda f: _edit_npz(f, lambda a: a.__setitem__("lr", np.array([0.1, 3.0]))),
        "lr values",
    ),
    "npz_lr_missing": (lambda f: _edit_npz(f, lambda a: a.pop("lr")), "lr values"),
    "npz_grid_axes": (lambda f: _edit_npz(f, lambda a: a.pop("grid_axes")), "grid_axes"),
    "npz_point_dropped": (
        lambda f: _edit_npz(f, lambda a: a.__setitem__("train_loss", a["train_loss"][:, :1])),
        "'train_loss' has shape",
    ),
    "npz_diverged_point_dropped": (
        lambda f: _edit_npz(f, lambda a: a.__setitem__("diverged_at", a["diverged_at"][:, :1])),
        "'diverged_at' has shape",
    ),
    "npz_steps_cut": (
        lambda f: _edit_npz(f, lambda a: a.__setitem__("train_loss", a["train_loss"][..., :1])),
        "train_loss",
    ),
    "npz_steps_edited": (lambda f: _edit_npz(f, lambda a: a.__setitem__("steps", a["steps"] + 1)), "steps"),
    "npz_heads_edited": (lambda f: _edit_npz(f, lambda a: a.__setitem__("heads", a["heads"][::-1])), "heads"),
    "npz_metric_missing": (lambda f: _edit_npz(f, lambda a: a.pop("test_loss")), "'test_loss'"),
    "npz_diverged_missing": (lambda f: _edit_npz(f, lambda a: a.pop("diverged_at")), "'diverged_at'"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_or_edited_grid_folder_is_a_one_line_error_naming_it(grid_folder, tmp_path, kind):
    from dynamics import load_results

    folder = tmp_path / "copy"
    shutil.copytree(grid_folder, folder)
    damage, says = DAMAGE[kind]
    damage(folder)
    with pytest.raises(ConfigError) as err:
        load_results(folder)
    message = str(err.value)
    assert "\n" not in message
    assert str(folder) in message, message
    assert "results.json" in message or "curves.npz" in message, message
    assert says in message, message


def test_an_intact_grid_folder_loads_with_its_labels(grid_folder):
    from dynamics import load_results

    result = load_results(grid_folder)
    assert result.grid.axes == (("lr", tuple(LRS)),)
    assert [p.optim.lr for p in result.grid.points] == LRS
    assert result.curves["train_loss"].shape == (2, 2, 1, 3)
    frame = result.summary_frame()
    assert sorted(set(frame["lr"])) == LRS and sorted(set(frame["H"])) == [1, 2]
    for k, lr in enumerate(LRS):
        point = result.point(k)
        assert point.config.optim.lr == lr
        assert np.array_equal(point.curves["train_loss"], result.curves["train_loss"][:, k], equal_nan=True)
