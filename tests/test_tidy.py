"""One tidy frame everywhere: the head count is the column ``H`` in every frame of a sweep and of a
grid (whose long frame is its points' own sweep frames with a column per axis), old result folders
that call it ``heads`` still load, ``--heads`` takes a log range as every count does, and
``load_runs`` puts many run folders into one frame."""

from __future__ import annotations

import pytest

from dynamics.api import with_overrides
from dynamics.cli.run import build_parser, config_from_args
from dynamics.config.schema import ConfigError, load_toml
from dynamics.parts.values import parse_heads
from tests.helpers import cli_error

TINY = {"heads": [1, 2], "steps": 4, "trials": 2, "n_train": 8, "n_test": 8}


# --heads: lists and log ranges


@pytest.mark.parametrize(
    "text, want",
    [("1:8:4", (1, 2, 4, 8)), ("1:64:7", (1, 2, 4, 8, 16, 32, 64)), ("3:3:1", (3,)), ("1, 2,4", (1, 2, 4))],
)
def test_heads_take_a_log_range_of_whole_numbers(text, want):
    assert parse_heads(text) == want
    args = build_parser().parse_args(["--heads", text])
    assert config_from_args(args).config.sweep.heads == tuple(sorted(want))
    assert with_overrides(heads=text).sweep.heads == want  # the API keyword reads the flag's text


@pytest.mark.parametrize(
    "text, says",
    [
        ("1:10:3", "1, 3.16228, 10: not all whole numbers"),  # log-spaced 1..10 in three: 3.16 heads
        ("1:3:4", "4 distinct whole numbers do not fit between 1 and 3"),  # repeats once rounded
        ("2:2:2", "2 distinct whole numbers do not fit between 2 and 2"),
        ("0:8:4", "a > 0, b > 0 and k >= 1"),
        ("1:8", "must be a:b:k"),
        ("1:8:x", "must be a:b:k"),
    ],
)
def test_a_heads_range_of_fractions_or_repeats_is_one_line_naming_it(text, says, capsys, tmp_path):
    line = cli_error(["--heads", text, "--steps", "2"], capsys, tmp_path)
    assert line.startswith("error: argument --heads:") and f"heads={text!r}" in line and says in line
    with pytest.raises(ConfigError, match=f"^heads={text!r}"):  # the keyword: its own message, once
        with_overrides(heads=text)


def test_a_toml_file_takes_the_heads_range(tmp_path):
    path = tmp_path / "h.toml"
    path.write_text('[sweep]\nheads = "1:8:4"\n')
    assert load_toml(path).sweep.heads == (1, 2, 4, 8)
