"""Validation: any config from the command line or a TOML file ends in a valid config or a
ConfigError that names the field; never a traceback (property-based, hypothesis)."""

import dataclasses
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynamics.cli import run as cli
from dynamics.config.schema import SECTIONS, Config, ConfigError, apply_overrides, load_toml, preset, validate

FIELDS = [(s, f.name) for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "dm1",
            "planted",
            "npz",
            "split",
            "zero",
            "normal",
            "factored",
            "adam",
            "gd",
            "sqrt",
            "all",
            "linear",
            "exp",
        ]
    ),
    st.lists(st.integers(-3, 70), max_size=4),
)
FIELD_NAMES = {name for _, name in FIELDS} | set(SECTIONS) | {"name"}


def names_a_field(message: str) -> bool:
    return any(re.search(rf"\b{re.escape(n)}\b", message) for n in FIELD_NAMES) or "preset" in message


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(FIELDS), ANY_VALUE), max_size=5),
    st.sampled_from(["default", "fig2", "planted-adam"]),
)
def test_random_overrides_validate_or_name_the_field(changes, base):
    overrides: dict = {}
    for (section, name), value in changes:
        overrides.setdefault(section, {})[name] = value
    try:
        cfg = validate(apply_overrides(preset(base), overrides, "test"))
    except ConfigError as err:
        msg = str(err)
        assert "\n" not in msg and names_a_field(msg), msg
        return
    assert isinstance(cfg, Config) and cfg.data.T is not None or cfg.data.model == "npz"


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.dictionaries(st.text(max_size=8), ANY_VALUE, max_size=3),
        max_size=3,
    )
)
def test_random_toml_tables_never_crash(doc):
    try:
        validate(apply_overrides(Config(), doc, "config x.toml"))
    except ConfigError as err:
        assert "\n" not in str(err)


FLAGS = [
    "--heads",
    "--steps",
    "--lr",
    "--trials",
    "--seed",
    "--norm",
    "--init",
    "--width",
    "--tokens",
    "--noise",
    "--zeta",
    "--relevant",
    "--head-size",
    "--key-query",
    "--log-every",
    "--log-points",
    "--label-noise",
    "--teacher-heads",
    "--init-scale",
    "--data-model",
    "--preset",
    "--n-train",
]
TOKENS = st.one_of(
    st.text(max_size=6),
    st.integers(-5, 100).map(str),
    st.floats().map(str),
    st.sampled_from(["1,2", "0", "-1", "inf", "nan", "split", "planted", "factored", "1e400"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(FLAGS), TOKENS), max_size=4))
def test_random_command_lines_never_traceback(pairs):
    argv = [x for flag, value in pairs for x in (flag, value)]
    parser = cli.build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        assert exit_.code == 2
        return
    try:
        cli.config_from_args(args)
    except ConfigError as err:
        assert "\n" not in str(err) and names_a_field(str(err)), str(err)


@pytest.mark.parametrize(
    "overrides,needle",
    [
        ({"model": {"key_query": "factored"}}, "needs model.init='normal'"),
        ({"data": {"d": 5}}, "data.d=5 is too small"),
        ({"data": {"model": "npz", "path": "x.npz", "noise": 0.5}}, "cannot be combined"),
        ({"model": {"init": "normal", "key_query": "factored", "head_size": 64}}, "model.head_size=64"),
        ({"data": {"model": "planted", "zeta": 0.2}}, "has no parameter data.zeta"),
        ({"optim": {"steps": 10**9}}, "optim.steps"),
        ({"sweep": {"heads": (1, 1)}}, "repeated"),
        ({"name": "../etc"}, "name="),
    ],
)
def test_impossible_combinations(overrides, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        validate(apply_overrides(Config(), overrides, "test"))


def test_toml_unknown_key_did_you_mean(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('preset = "fig2"\n[optim]\nsteps = 10\n[swep]\ntrials = 2\n')
    with pytest.raises(ConfigError, match=r"unknown section 'swep' \(did you mean 'sweep'\?\)"):
        load_toml(path)
    path.write_text("[model]\nnrom = 'sqrt'\n")
    with pytest.raises(ConfigError, match=r"model.nrom \(did you mean 'norm'\?\)"):
        load_toml(path)
    path.write_text("[model\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(path)
    path.write_text('preset = "fig2"\n[optim]\nsteps = 10\n')
    cfg = validate(load_toml(path))
    assert cfg.name == "fig2" and cfg.optim.steps == 10 and cfg.sweep.heads == (1, 2, 4, 8, 16, 32, 64)
