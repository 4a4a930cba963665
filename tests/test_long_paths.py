"""A path the file system cannot take (a component of 300 characters: File name too long) given to
a documented entry point is a one-line error naming it, never an OSError traceback."""

import pytest
from helpers import cli_run

from dynamics.config.schema import ConfigError

LONG = "x" * 300  # over every common file system's 255-byte limit on one name


def _one_line(message: str, path) -> None:
    assert "\n" not in message.strip() and "Traceback" not in message, message
    assert str(path) in message, message


@pytest.mark.parametrize(
    "argv",
    [["--out", "{long}"], ["--resume", "--out", "{long}"], ["--out", "{long}/sub"], ["--data", "{long}.npz"]],
    ids=["out", "resume", "out_below", "data"],
)
def test_the_command_line_names_a_path_too_long_in_one_line(tmp_path, capsys, argv):
    long = tmp_path / LONG
    args = [a.format(long=long) for a in argv]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    code, _, err = cli_run(["--heads", "1", "--steps", "4", "--trials", "1", *args], capsys, tmp_path)
    assert code == 2, err
    _one_line(err, long)


@pytest.mark.parametrize("inside", ["", "results.json"])
def test_load_results_names_a_path_too_long_in_one_line(tmp_path, inside):
    from dynamics import load_results

    path = tmp_path / LONG / inside if inside else tmp_path / LONG
    with pytest.raises(ConfigError) as err:
        load_results(path)
    _one_line(str(err.value), tmp_path / LONG)


def test_run_sweep_names_a_data_path_too_long_in_one_line(tmp_path):
    from dynamics import run_sweep

    path = tmp_path / f"{LONG}.npz"
    with pytest.raises(ValueError) as err:  # the data file's DataError, as for a missing file
        run_sweep(heads=[1], steps=4, trials=1, data=str(path), progress=False)
    _one_line(str(err.value), path)


def test_a_checkpointed_run_names_an_out_too_long_in_one_line(tmp_path):
    from dynamics.config.schema import Config
    from dynamics.sweeps.checkpoint import run_checkpointed

    with pytest.raises(ConfigError) as err:
        run_checkpointed(Config(), tmp_path / LONG, progress=False)
    _one_line(str(err.value), tmp_path / LONG)
