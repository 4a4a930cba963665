"""Run folders: a run without --out gets a new folder, a folder of another config is refused
(naming the settings that differ) unless --overwrite, the same config's results are reused."""

import json
import re
import threading
from datetime import datetime
from pathlib import Path

import pytest
from fuzzing import snapshot
from helpers import cli_run, fail_after_first_point

from dynamics.cli import bottleneck as bottleneck_cli
from dynamics.cli.common import with_flags
from dynamics.cli.run import _interrupted
from dynamics.errors import ConfigError
from dynamics.experiments import bottleneck as bn
from dynamics.sweeps.folders import Claim, differences, new_run_folder, run_kind, sweep_settings

TINY = ["--heads", "1", "--steps", "5", "--trials", "1", "--n-train", "8", "--n-test", "8", "--quiet"]
TINY += ["--no-figure"]
USE_OVERWRITE = "use --overwrite to replace it or another --out"
STAMPED = re.compile(r"default-\d{8}-\d{6}(-\d+)?")


def run_ok(argv, capsys, cwd) -> list[str]:
    code, out, err = cli_run(argv, capsys, cwd)
    assert code == 0, err
    return out.strip().splitlines()


def refused(argv, capsys, cwd) -> str:
    code, _, err = cli_run(argv, capsys, cwd)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_two_runs_without_out_leave_two_folders_each_named_first_and_last(tmp_path, capsys):
    firsts, lasts = [], []
    for _ in range(2):
        lines = run_ok(TINY, capsys, tmp_path)
        firsts.append(lines[0])
        lasts.append(lines[-1])
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all(STAMPED.fullmatch(f) for f in folders), folders
    for first, last, name in zip(firsts, lasts, folders, strict=True):
        assert first == f"writing into the new folder {Path('runs') / name}"
        assert last.startswith(f"wrote {Path('runs') / name / 'results.json'}")
        assert json.loads((tmp_path / "runs" / name / "results.json").read_text())["complete"] is True


def test_new_folders_of_the_same_second_get_a_counter_and_are_never_shared(tmp_path):
    now = datetime(2026, 1, 2, 3, 4, 5)
    made: list[Path] = []
    threads = [
        threading.Thread(target=lambda: made.append(new_run_folder("x", tmp_path, now))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted(p.name for p in made)
    assert names == sorted(["x-20260102-030405", *(f"x-20260102-030405-{i}" for i in range(2, 9))])
    assert all(p.is_dir() and not any(p.iterdir()) for p in made)


def test_a_run_into_another_configs_folder_is_refused_naming_the_settings_and_changing_nothing(
    tmp_path, capsys
):
    out = tmp_path / "x"
    run_ok([*TINY, "--out", str(out)], capsys, tmp_path)
    before = snapshot(out)
    line = refused([*with_flags(TINY, "--lr", "0.5", "--heads", "1,2"), "--out", str(out)], capsys, tmp_path)
    assert line == (
        f"error: {out} holds another config (optim.lr 1 there, 0.5 here; sweep.heads 1 there, 1,2 here); "
        f"{USE_OVERWRITE}"
    )
    assert snapshot(out) == before
    # a grid into a sweep's folder: refused as another kind of run, the folder unchanged
    line = refused([*TINY, "--lr", "0.5,1", "--out", str(out)], capsys, tmp_path)
    assert "holds a sweep's results, not a grid's" in line and snapshot(out) == before


def test_overwrite_replaces_and_removes_only_the_old_runs_files(tmp_path, capsys):
    out = tmp_path / "x"
    run_ok([*TINY, "--out", str(out)], capsys, tmp_path)
    (out / "figure.png").write_bytes(b"the old run's figure")  # (drawing one takes seconds)
    (out / "notes.txt").write_text("mine")
    (out / "my-data.npz").write_bytes(b"a user's data")
    lines = run_ok([*TINY, "--lr", "0.5", "--out", str(out), "--overwrite"], capsys, tmp_path)
    assert (
        lines[0]
        == f"{out} holds another config's results: replaced once this run's are written (--overwrite)"
    )
    meta = json.loads((out / "results.json").read_text())
    assert meta["config"]["optim"]["lr"] == 0.5 and meta["complete"] is True
    assert not (out / "figure.png").exists()  # the old run's, not written again: removed
    assert (out / "notes.txt").read_text() == "mine"  # not a run's files: kept
    assert (out / "my-data.npz").read_bytes() == b"a user's data"


def test_the_same_config_into_its_own_folder_reuses_its_results(tmp_path, capsys, monkeypatch):
    import dynamics.sweeps.sweep

    out = tmp_path / "x"
    first = run_ok([*TINY, "--out", str(out)], capsys, tmp_path)
    before = snapshot(out)

    def no_compute(*a, **k):
        raise AssertionError("finished results must not be recomputed")

    monkeypatch.setattr(dynamics.sweeps.sweep, "run_points", no_compute)
    for extra in ([], ["--resume"], ["--overwrite"]):
        lines = run_ok([*TINY, "--out", str(out), *extra], capsys, tmp_path)
        assert lines[0] == f"{out} already holds this config's finished results; nothing to run"
        assert lines[-2] == first[-2]  # the same table row
        assert lines[-1] == f"reused {out / 'results.json'} and {out / 'curves.npz'}"
        assert snapshot(out) == before


def test_grids_follow_the_same_rules(tmp_path, capsys, monkeypatch):
    import dynamics.sweeps.grid_runner

    out = tmp_path / "g"
    run_ok([*TINY, "--lr", "0.5,1", "--out", str(out)], capsys, tmp_path)
    before = snapshot(out)
    line = refused([*TINY, "--lr", "0.5,2", "--out", str(out)], capsys, tmp_path)
    assert "holds another config (grid.lr 0.5,1 there, 0.5,2 here)" in line and snapshot(out) == before
    monkeypatch.setattr(dynamics.sweeps.grid_runner, "run_points", lambda *a, **k: 1 / 0)
    lines = run_ok([*TINY, "--lr", "0.5,1", "--out", str(out)], capsys, tmp_path)
    assert lines[0].endswith("nothing to run") and snapshot(out) == before


def test_a_folder_of_other_files_is_refused_even_with_overwrite(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    before = snapshot(out)
    for extra in ([], ["--overwrite"]):
        line = refused([*TINY, "--out", str(out), *extra], capsys, tmp_path)
        assert "is not empty and holds no mhsim results (thesis.tex)" in line
        assert snapshot(out) == before


@pytest.mark.parametrize("flag", ["--resume", "--overwrite", "--distributed"])
def test_resume_and_overwrite_need_out(tmp_path, capsys, flag):
    line = refused([*TINY, flag], capsys, tmp_path)
    assert f"{flag} needs --out DIR" in line and not (tmp_path / "runs").exists()


def test_a_failing_run_without_out_leaves_no_empty_folder(tmp_path, capsys, monkeypatch):
    import dynamics.sweeps.devices

    def no_device(*a, **k):
        raise ConfigError("no such device")

    monkeypatch.setattr(dynamics.sweeps.devices, "select_devices", no_device)
    assert refused(TINY, capsys, tmp_path) == "error: no such device"
    assert list((tmp_path / "runs").iterdir()) == []


def test_the_interrupt_line_names_a_new_folder_to_finish_in(tmp_path):
    out = tmp_path / "runs" / "default-20260102-030405"
    (out / "points").mkdir(parents=True)
    (out / "points" / "H1.npz").write_bytes(b"")
    assert _interrupted({"out": out, "made": True}).endswith(
        f"rerun the same command with --out {out} to finish"
    )
    assert _interrupted({"out": out}).endswith("rerun the same command to finish")


def claim_on(
    meta: dict | None, folder: Path, overwrite=False, points=(), reader=lambda m: m["config"]
) -> str:
    """``Claim.decide`` for a folder holding ``meta`` as results.json and point files of ``points``."""
    import numpy as np

    folder.mkdir(exist_ok=True)
    if meta is not None:
        (folder / "results.json").write_text(json.dumps(meta))
    for i, h in enumerate(points):
        (folder / "points").mkdir(exist_ok=True)
        np.savez(folder / "points" / f"G{i}.npz", config_hash=np.array(h))
    here = {"optim.lr": 1.0, "sweep.heads": (1,)}
    return Claim("abc", here, reader, "sweep", run_kind, overwrite).decide(folder)


def test_what_a_claim_decides_for_each_kind_of_folder(tmp_path):
    config = {"optim.lr": 0.5, "sweep.heads": (1,)}
    assert claim_on(None, tmp_path / "empty") == "new"
    assert claim_on({"config": config, "config_hash": "abc"}, tmp_path / "done") == "done"
    partial = {"config": config, "config_hash": "abc", "complete": False}
    assert claim_on(partial, tmp_path / "partial") == "resume"
    assert claim_on(None, tmp_path / "points", points=["abc"]) == "resume"
    with pytest.raises(ConfigError, match=r"unfinished points of another config \(config_hash zzz there"):
        claim_on(None, tmp_path / "other-points", points=["zzz"])
    other = {"config": config, "config_hash": "zzz"}
    with pytest.raises(ConfigError, match=r"another config \(optim.lr 0.5 there, 1 here\)"):
        claim_on(other, tmp_path / "other")
    assert claim_on(other, tmp_path / "other", overwrite=True) == "replace"
    same = {"config": {"optim.lr": 1.0, "sweep.heads": [1]}, "config_hash": "old"}
    with pytest.raises(ConfigError, match="same settings from other numerics or other file contents"):
        claim_on(same, tmp_path / "renumbered")
    unreadable = {"config": {"optim": {"lr": "fast"}}, "config_hash": "zzz"}
    with pytest.raises(ConfigError, match=r"another config's results \(config_hash zzz there, abc here\)"):
        claim_on(unreadable, tmp_path / "unreadable", reader=sweep_settings)
    assert differences({"a": 1, "b": (1, 2)}, {"a": 1, "c": "x"}) == [
        "b 1,2 there, none here",
        "c none there, x here",
    ]


def test_the_bottleneck_presets_refuse_another_config_and_reuse_their_own(tmp_path, capsys):
    quick = bn.QUICK_EXPRESSIVITY
    out = tmp_path / "b"
    out.mkdir()
    other = dict(experiment=bn.EXPRESSIVITY, config={**json.loads(json.dumps(bn_dict(quick))), "seed": 7})
    (out / "results.json").write_text(json.dumps({**other, "config_hash": "another", "summary": []}))
    before = snapshot(out)
    argv = ["--preset", bn.EXPRESSIVITY, "--quick", "--quiet", "--no-figure", "--out", str(out)]
    assert bottleneck_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {out} holds another config (seed 7 there, 0 here); {USE_OVERWRITE}"
    assert snapshot(out) == before
    mine = {"experiment": bn.EXPRESSIVITY, "config": bn_dict(quick), "summary": []}
    (out / "results.json").write_text(json.dumps({**mine, "config_hash": bn.expressivity_key(quick)}))
    before = snapshot(out)
    assert bottleneck_cli.main(argv) == 0  # nothing runs: the run itself takes ~20 s
    assert capsys.readouterr().out.startswith(f"{out} already holds this config's finished results")
    assert snapshot(out) == before


def bn_dict(cfg) -> dict:
    import dataclasses

    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def test_the_same_config_finishes_its_own_unfinished_folder_to_the_same_numbers(
    tmp_path, capsys, monkeypatch
):
    import numpy as np

    argv = with_flags(TINY, "--heads", "1,2")
    with monkeypatch.context() as mp:
        fail_after_first_point(mp)
        assert refused([*argv, "--out", str(tmp_path / "cut")], capsys, tmp_path).endswith(
            "after the first point"
        )
    assert json.loads((tmp_path / "cut" / "results.json").read_text())["complete"] is False
    lines = run_ok([*argv, "--out", str(tmp_path / "cut")], capsys, tmp_path)
    assert lines[0] == f"{tmp_path / 'cut'} holds this config's unfinished results: reusing its finished part"
    run_ok([*argv, "--out", str(tmp_path / "whole")], capsys, tmp_path)
    with np.load(tmp_path / "cut" / "curves.npz") as a, np.load(tmp_path / "whole" / "curves.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert not (tmp_path / "cut" / "points").exists()
