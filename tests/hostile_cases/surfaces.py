"""The surfaces of the declared knobs for tests/test_hostile_declared.py: each knob's home (the
base config and data model under which its default has an effect), the config an API keyword, a
TOML file or the command-line flags make of a value there, and the judge of a case (a one-line
refusal naming the knob or its value, or an accepted config; never a deep error)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math

from dynamics import api
from dynamics.cli import run as cli
from dynamics.cli.common import with_flags
from dynamics.config import schema, sections
from dynamics.errors import ConfigError
from dynamics.parts.knobs import text_type
from dynamics.parts.values import float_arg, int_arg
from tests.hostile_cases.outcome import refusal

# The settings under which knobs act (SGD's batch, normalised GD, a factored key-query, a random
# init, a learned query, the max-margin diagnostic, the per-head view): a knob's cases run on the
# first whose config gives its default an effect.
BASES = {
    "default": {},
    "sgd": {"optim": {"optimizer": "sgd", "batch_size": 4}},
    "ngd": {"optim": {"optimizer": "normalized-gd"}},
    "factored": {"model": {"key_query": "factored", "init": "normal"}, "sweep": {"fast_path": False}},
    "normal": {"model": {"init": "normal"}, "sweep": {"fast_path": False}},
    "diagnostics": {"sweep": {"diagnostics": ("maxmargin",)}},
    "head_view": {"sweep": {"head_metrics": "on"}},
    "one_head": {"sweep": {"heads": (1,)}},
}
SMALL = {"sweep": {"heads": (1, 2), "trials": 1}, "optim": {"steps": 2}, "data": {"n_train": 8, "n_test": 8}}
PATHS = {"data.path", "model.init_from"}  # a file's path: tests/test_trust.py and test_hostile.py
KNOBS = [k for k in schema.declared() if k.key not in PATHS and k.flag]  # fast_path: --no-fast-path


def kind_of(k) -> str:
    """bool, choice, int, float or the knob's own name (a value with a form of its own)."""
    if k.spec.switch:
        return "bool"
    if k.spec.choices is not None:
        return "choice"
    if k.name in ("heads", "diagnostics", "readout_steps", "attention_steps", "strengths", "head_size"):
        return k.name
    typ = text_type(k) if k.spec.grid is None else k.spec.grid
    return {int: "int", int_arg: "int", float: "float", float_arg: "float"}.get(typ, "other")


def model_of(k) -> str:
    return k.variants[0][0][0] if k.variants else "dm1"


def spec_of(k):
    return k.variants[0][1] if k.variants else k.spec


def base_doc(name: str, model: str) -> dict:
    doc = {s: dict(v) for s, v in SMALL.items()}
    doc["data"]["model"] = model
    for section, values in BASES[name].items():
        doc.setdefault(section, {}).update(values)
    return doc


@functools.cache
def home(key: str) -> tuple[str, str]:
    """(base, data model) where the knob's default has an effect: its cases are tried there."""
    k = next(k for k in KNOBS if k.key == key)
    for name in BASES:
        try:
            cfg = schema.validate(config_on(name, model_of(k)))
        except ConfigError:
            continue
        if spec_of(k).idle is None or spec_of(k).idle(cfg) is None:
            return name, model_of(k)
    return "default", model_of(k)


@functools.cache
def config_on(name: str, model: str) -> schema.Config:
    return schema.apply_overrides(schema.Config(), base_doc(name, model), "base", explicit=False)


# --- the surfaces -------------------------------------------------------------------------------


def keyword(k, value):
    """The config ``with_overrides`` makes of the knob's keyword on its home base (validated)."""
    return api.with_overrides(config_on(*home(k.key)), **{k.keyword: value})


def toml_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value == math.inf else "-inf" if value < 0 and math.isinf(value) else repr(value))
        )
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{a} = {toml_text(b)}" for a, b in value.items()) + "}"
    return json.dumps(value) if isinstance(value, str) else str(value)


def toml(k, value, tmp_path):
    """The config a TOML file setting the knob makes on its home base (validated)."""
    path = tmp_path / "c.toml"
    path.write_text(f"[{k.section}]\n{k.name} = {toml_text(value)}\n")
    return schema.validate(schema.load_toml(path, base=config_on(*home(k.key))))


def flags_of(doc: dict) -> list[str]:
    """A base's settings as flags."""
    argv = []
    flags = sections.flags()
    for section, values in doc.items():
        for name, v in values.items():
            if (section, name) == ("sweep", "fast_path"):
                argv += [] if v else ["--no-fast-path"]
                continue
            text = ",".join(map(str, v)) if isinstance(v, tuple) else str(v)
            argv += [flags[f"{section}.{name}"], text]
    return argv


def command_line(k, text: str):
    """The experiment the flags make (parsed and validated, nothing run); argparse's own refusal
    comes back as a ValueError carrying its one line."""
    argv = with_flags(flags_of(base_doc(*home(k.key))), k.flag, text)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            args = cli.build_parser().parse_args(argv)
        except SystemExit as exit_:
            message = err.getvalue()
            assert exit_.code == 2 and message.count("\n") == 1, (exit_.code, message)
            raise ValueError(message.strip()) from None
    return cli.config_from_args(args)


def judge(call, k, value, *, must_refuse: bool = False):
    """Refused in one line naming the knob (or its value), or accepted; never a deep error."""
    try:
        result = call()
    except Exception as exc:  # noqa: BLE001 - every exception is judged
        why = refusal(exc, [k.name, k.keyword, k.flag[2:], k.key, repr(value)])
        assert not why, why
        assert "\n" not in str(exc).strip(), str(exc)
        return None
    assert not must_refuse, f"{k.key}={value!r} was accepted"
    return result


def command_line_on(base, model, k, text):
    argv = [*flags_of(base_doc(base, model)), k.flag, text]
    return cli.config_from_args(cli.build_parser().parse_args(argv))
