"""A hostile pass over the declared surface, its cases generated from the declarations: every knob
(``dynamics.config.sections.declared()``: the sections' fields and every data model's parameters)
and every part of every registry (``dynamics.parts.REGISTRIES``), over the surfaces a user has:
an API keyword (``dynamics.api.with_overrides``), a TOML file, a command-line flag, a grid axis.
A new knob or part gets its cases without an edit here.

The rule of every case (``tests/hostile_cases/outcome.py``): a one-line ``ValueError`` raised by
mhsim's own code naming the value or its field (on the command line: exit code 2 and one line),
or a run that completes with finite numbers. Classes, one test each: wrong type, out of range,
values without effect (idle), part names, part combinations, the config hash. The cases that
simulate are slow (n = 8, T = 3, d = 4, H 1-2, 2 steps); the others only validate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import math
import os

import jax
import numpy as np
import pytest

from dynamics import api, parts
from dynamics.cli import run as cli
from dynamics.config import schema
from dynamics.config.grid_axes import GRID_KNOBS, axis_name
from dynamics.errors import ConfigError
from tests.hostile_cases.outcome import refusal
from tests.hostile_cases.surfaces import (
    BASES,
    KNOBS,
    SMALL,
    base_doc,
    command_line,
    command_line_on,
    config_on,
    flags_of,
    home,
    judge,
    keyword,
    kind_of,
    toml,
    toml_text,
)

DATA_FIELDS = {f.name for f in dataclasses.fields(schema.DataConfig)}

# --- 1. wrong types ------------------------------------------------------------------------------

WRONG = {
    "int": ["abc", "", [2], [[2]], True, 2.5, 1j, {"a": 1}],
    "float": ["abc", "", [0.5], [[0.5]], True, 1j, {"a": 1}, "0.5 0.5"],
    "choice": [3, [None], True, 0.5, {"a": 1}],
    "bool": ["yes", "False", 1, 0, [True]],
    "heads": ["1,x", [1.5], [True], [[1]], {1: 2}, "1;2", [1, 1]],
    "diagnostics": [3, [3], "sharpness,sharpness", "Sharpness", [["kernel"]]],
    "readout_steps": ["a:b", [1.5, 2], [True], "1:2:3", {"a": 1}, [0, 1, 2]],
    "attention_steps": ["x", [None, 2], [[0, 1]], 3],
    "strengths": ["a,b", [True], [[1.0]], {"a": 1}, "1,,2"],
    "head_size": ["half", 1.5, True, [2]],
}


def _wrong_cases():
    out = []
    for k in KNOBS:
        for i, value in enumerate(WRONG.get(kind_of(k), [])):
            if value == [None]:
                value = [k.default]
            out.append(pytest.param(k, value, id=f"{k.key}-{i}"))
    return out


@pytest.mark.parametrize("k,value", _wrong_cases())
def test_a_wrong_type_by_keyword_is_refused_in_one_line(k, value):
    """An API keyword of the wrong type: refused naming the knob (never coerced silently)."""
    kind = kind_of(k)
    if kind in ("float", "int") and isinstance(value, str) and value == "":
        must = True
    else:
        must = kind not in ("choice",) or not isinstance(value, str)
    judge(lambda: keyword(k, value), k, value, must_refuse=must)


def _tomlable(value) -> bool:
    return not isinstance(value, complex) and None not in (value if isinstance(value, list) else [value])


@pytest.mark.parametrize("k,value", [p for p in _wrong_cases() if _tomlable(p.values[1])])
def test_a_wrong_type_in_a_toml_file_is_refused_in_one_line(k, value, tmp_path):
    judge(lambda: toml(k, value, tmp_path), k, value, must_refuse=True)


TEXT = {"int": ["abc", "", "1.5", "[2]", "0x10"], "float": ["abc", "", "[0.5]", "1,,2", "0.5.5"]}


@pytest.mark.parametrize(
    "k,text",
    [pytest.param(k, t, id=f"{k.key}-{t}") for k in KNOBS if k.flag for t in TEXT.get(kind_of(k), [])],
)
def test_a_wrong_text_for_a_flag_is_refused_in_one_line(k, text):
    judge(lambda: command_line(k, text), k, text, must_refuse=True)


# --- 2. out of range -----------------------------------------------------------------------------

NONFINITE = [math.nan, math.inf, -math.inf]
EXTREME = {
    "float": [-1.0, -1e-9, 0.0, 1.0 + 1e-9, 1.5e30, 1e300],
    "int": [-1, 0, 2**31, 2**63, 10**30],
    "readout_steps": [(0, 2**31), (2**31, 2**31 + 1), (10**30, None), (3, 3), (0, 0)],
    "attention_steps": [(0, 2**31), (2**31, 2**31 + 1), (10**30, None), (3, 3), (0, 0)],
    "heads": [(2**31,), (10**30,), (0,), (-1,), ()],
    "strengths": [(1e300,), (-1.0,), (0.0,), (math.nan, 1.0), (math.inf,)],
    "head_size": [0, -1, 2**31, 10**30],
}


def _range_cases(values):
    return [pytest.param(k, v, id=f"{k.key}-{v!r}") for k in KNOBS for v in values.get(kind_of(k), [])]


@pytest.mark.parametrize("k,value", _range_cases({"float": NONFINITE, "int": NONFINITE}))
def test_nan_and_infinity_are_refused_on_every_surface(k, value):
    """NaN and ±inf set nothing a run can simulate: refused by keyword and by flag."""
    judge(lambda: keyword(k, value), k, value, must_refuse=True)
    if k.flag:
        judge(lambda: command_line(k, str(value)), k, value, must_refuse=True)


@pytest.mark.parametrize("k,value", _range_cases(EXTREME))
def test_an_extreme_value_is_refused_in_one_line_or_accepted(k, value):
    """0, negatives, just past 1 and past 1e30, beyond int32 and int64: refused in one line (by
    keyword and by flag alike), or accepted (then the slow test runs it)."""
    by_keyword = judge(lambda: keyword(k, value), k, value)
    if k.flag:
        text = (
            ":".join("" if v is None else str(v) for v in value)
            if k.name.endswith("_steps")
            else _text(value)
        )
        by_flag = judge(lambda: command_line(k, text), k, value)
        assert (by_keyword is None) == (by_flag is None), (by_keyword, by_flag)


def _text(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _accepted_extremes():
    out = []
    for p in _range_cases(EXTREME):
        k, value = p.values
        try:
            keyword(k, value)
        except ConfigError:
            continue
        out.append(p)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("k,value", _accepted_extremes())
def test_an_accepted_extreme_value_runs_or_is_refused_before_running(k, value):
    """An extreme value validation accepted: the tiny sweep finishes with finite initial losses,
    or is refused in one line before it runs (a deep error or a crash is a failure)."""
    cfg = keyword(k, value)
    result = judge(lambda: api.run_sweep(cfg, progress=False), k, value)
    if result is not None:
        assert np.isfinite(result.curves["train_loss"][..., 0]).all(), result.curves["train_loss"]


BAD_RANGES = ["1:2:3:4", "1:2:0", "nan:1:3", "1:inf:3", "-1:2:3", "1:2:x", "1::3", ":", "1:2:2.5", "0.5,nan"]


@pytest.mark.parametrize(
    "k,text",
    [
        pytest.param(k, t, id=f"{k.key}-{t}")
        for k in KNOBS
        if k.name in GRID_KNOBS and k.spec.grid in (int, float) and k.flag
        for t in BAD_RANGES
    ],
)
def test_a_grid_axis_with_bad_parts_is_refused_in_one_line(k, text):
    """``--knob a:b:k`` with a bad part, or a list holding NaN: one line, exit code 2."""
    judge(lambda: command_line(k, text), k, text, must_refuse=True)


# --- 3. values without effect ----------------------------------------------------------------------


def _idle_cases():
    """(knob, base, data model, value) where the knob's ``idle`` says a value changes nothing."""
    out = []
    for k in KNOBS:
        for models, spec in k.variants or ((("dm1",), k.spec),):
            if spec.idle is None:
                continue
            for base, model in itertools.product(BASES, models):
                try:
                    cfg = schema.validate(config_on(base, model))
                except ConfigError:
                    continue
                for value in _other_values(k, cfg):
                    try:  # a candidate the knob does not take (a window "a:b" for an int) is skipped
                        changed = schema.apply_overrides(
                            cfg, {k.section: {k.name: value}}, "t", explicit=False
                        )
                    except ConfigError:
                        continue
                    if spec.idle(changed.resolved()) is not None:
                        out.append(
                            pytest.param(k, base, model, value, id=f"{k.key}-{base}-{model}-{value!r}")
                        )
                        break
    return out


def _other_values(k, cfg):
    current = getattr(getattr(cfg, k.section), k.name)
    if k.spec.choices is not None:
        return [c for c in k.spec.choices if c != current][:1]
    if k.spec.switch:
        return [not current]
    if k.name == "head_size":
        return [2]
    if isinstance(current, float):
        return [current * 0.5 if current else 0.25]
    return [2 if current in (None, 1) else current + 1, "0:2"]  # a number, or a window of updates


def _refusal_message(call) -> str:
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and "has no effect" in message, message
    return message


@pytest.mark.parametrize("k,base,model,value", _idle_cases())
def test_a_value_without_effect_is_refused_alike_on_every_surface(k, base, model, value, tmp_path):
    """The same one-line message by keyword, in a TOML file, by flag (``main``: exit code 2, one
    line on stderr, nothing written) and as a grid axis."""
    cfg = config_on(base, model)
    kw = _refusal_message(lambda: api.with_overrides(cfg, **{k.keyword: value}))
    path = tmp_path / "c.toml"
    path.write_text(f"[{k.section}]\n{k.name} = {toml_text(value)}\n")
    assert _refusal_message(lambda: schema.validate(schema.load_toml(path, base=cfg))) == kw
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    out = tmp_path / "out"
    argv = [*flags_of(base_doc(base, model)), k.flag, text, "--out", str(out), "--no-figure", "--quiet"]
    if k.spec.switch:
        argv.pop(argv.index(text))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    assert (code, err.getvalue()) == (2, f"error: {kw}\n")
    assert not out.exists()
    if k.name in GRID_KNOBS and k.spec.grid in (int, float):
        second = _other_values(k, schema.apply_overrides(cfg, {k.section: {k.name: value}}, "t"))[0]
        with pytest.raises(ValueError) as info:
            command_line_on(base, model, k, f"{value},{second}")
        assert kw.split(": ", 1)[1] in str(info.value), (kw, str(info.value))


# --- 4. part names ---------------------------------------------------------------------------------

_HOMOGLYPH = str.maketrans({"a": "а", "e": "е", "o": "о", "p": "р", "c": "с"})  # Cyrillic look-alikes
USER = "tests.hostile_cases.parts"


def _bad_names(registry) -> list[str]:
    names = registry.names
    out = []
    for name in names:
        for bad in (name[:-1], name.upper(), f" {name}", name + "\u200b", name.translate(_HOMOGLYPH)):
            if bad not in names and bad not in out:
                out.append(bad)
    return [*out, "", "nosuch_module_x:f", f"{USER}:missing", f"{USER}:NOT_CALLABLE", "a:b:c", ":"]


def _field_knob(registry):
    return next(k for k in KNOBS if k.key == registry.field)


def _part_cases():
    return [
        pytest.param(r, bad, id=f"{r.field}-{bad!r}")
        for r in parts.REGISTRIES.values()
        for bad in _bad_names(r)
    ]


@pytest.mark.parametrize("registry,bad", _part_cases())
def test_a_bad_part_name_is_refused_on_every_surface(registry, bad, tmp_path):
    """Misspelt, another case, a space, a zero-width character, Cyrillic look-alikes, empty, and a
    ``module:attribute`` that does not import, is missing or is not callable: one line naming it,
    by keyword, in a TOML file and by flag. (A categorical grid axis on the command line reads a
    comma list whose items are stripped: ' softmax' there is 'softmax', as '1, 2' is 1 and 2.)"""
    k = _field_knob(registry)
    judge(lambda: keyword(k, bad), k, bad, must_refuse=True)
    judge(lambda: toml(k, bad, tmp_path), k, bad, must_refuse=True)
    stripped = GRID_KNOBS.get(axis_name(k), (None, None, None))[2] is str and bad.strip() in registry.names
    exp = judge(lambda: command_line(k, bad), k, bad, must_refuse=not stripped)
    if stripped and exp is not None:  # (or refused as the stripped name would be)
        assert getattr(getattr(exp.config, k.section), k.name) == bad.strip()


def _user_cases():
    return [
        pytest.param(r, user, id=f"{user}-{r.field}")
        for user in ("raises", "returns_none")
        for r in parts.REGISTRIES.values()
    ]


@pytest.mark.parametrize("registry,user", _user_cases())
def test_a_user_part_that_raises_or_returns_nothing_is_refused_before_running(registry, user):
    """A user part whose function raises or returns None: refused in one line naming it, by
    validation or by the sweep before it simulates; never a traceback from inside JAX."""
    k = _field_knob(registry)
    name = f"{USER}:{user}"
    try:
        cfg = keyword(k, name)
    except ConfigError as exc:
        assert not refusal(exc, [name, k.key]), refusal(exc, [name, k.key])
        return
    judge(lambda: api.run_sweep(cfg, progress=False), k, name, must_refuse=True)


# --- 5. part combinations --------------------------------------------------------------------------

MODEL_REGISTRIES = [r for r in parts.REGISTRIES.values() if r.field.startswith("model.")]
TRAINING_REGISTRIES = [
    r for r in parts.REGISTRIES.values() if r.field.startswith("optim.") and r.field != "optim.loss"
]


def _combination(registries, names) -> dict:
    doc = {}
    for registry, name in zip(registries, names, strict=True):
        section, field = registry.field.split(".")
        doc.setdefault(section, {})[field] = name
    return doc


def _combos(registries):
    return [
        pytest.param(names, id="-".join(names)) for names in itertools.product(*(r.names for r in registries))
    ]


def _validated(registries, names, extra=None):
    """The combination on tiny sizes (SGD's batch where the optimiser takes one), validated."""
    doc = base_doc("default", "dm1")
    doc["sweep"]["fast_path"] = False
    doc["data"].update(T=3, d=4, n_irrelevant=1)
    for section, values in {**_combination(registries, names), **(extra or {})}.items():
        doc.setdefault(section, {}).update(values)
    if parts.OPTIMIZERS[doc["optim"].get("optimizer", "gd")].minibatch:
        doc["optim"]["batch_size"] = 4
    cfg = schema.apply_overrides(schema.Config(), doc, "combination")
    return schema.validate(cfg)


def _check_combination(registries, names):
    words = [*names, *(r.field for r in registries)]
    try:
        return _validated(registries, names)
    except ConfigError as exc:
        why = refusal(exc, words)
        assert not why, why
        assert "\n" not in str(exc)
        return None


@pytest.mark.parametrize("names", _combos(MODEL_REGISTRIES))
def test_every_combination_of_the_model_parts_is_accepted_or_refused_in_one_line(names):
    _check_combination(MODEL_REGISTRIES, names)


@pytest.mark.parametrize("names", _combos(TRAINING_REGISTRIES))
def test_every_combination_of_the_training_parts_is_accepted_or_refused_in_one_line(names):
    _check_combination(TRAINING_REGISTRIES, names)


DATA_REGISTRIES = [parts.REGISTRIES[name] for name in ("data_model", "loss", "optimizer")]


@pytest.mark.parametrize("names", _combos(DATA_REGISTRIES))
def test_every_data_model_with_every_loss_and_optimiser_is_accepted_or_refused_in_one_line(names):
    """Each data model (its own sizes) with each loss and optimiser: accepted, or refused in
    one line naming one of them (a regression model with a margin loss, a file without a path...)."""
    doc = {s: dict(v) for s, v in SMALL.items()}
    for section, values in _combination(DATA_REGISTRIES, names).items():
        doc.setdefault(section, {}).update(values)
    if parts.OPTIMIZERS[doc["optim"]["optimizer"]].minibatch:
        doc["optim"]["batch_size"] = 4
    words = [*names, *(r.field for r in DATA_REGISTRIES), "data.path", "init", "batch_size", "n_train"]
    try:
        schema.validate(schema.apply_overrides(schema.Config(), doc, "combination"))
    except ConfigError as exc:
        assert not refusal(exc, words), refusal(exc, words)
        assert "\n" not in str(exc)


def _accepted(registries):
    out = []
    for p in _combos(registries):
        try:
            _validated(registries, p.values[0])
        except ConfigError:
            continue
        out.append(p)
    return out


# Every accepted combination compiles its own programs: 207 of them in one process once ended in an
# abort inside XLA's compiler (and 91 of the 636 there are now, split over two workers, once crashed
# a worker), so the slow tier runs every 21st (a fixed sample of about 30, each registry's parts all
# present: tested below) and MHSIM_ALL_COMBINATIONS=1 runs them all.
_ACCEPTED_MODEL = _accepted(MODEL_REGISTRIES)
_SIMULATED = _ACCEPTED_MODEL if os.environ.get("MHSIM_ALL_COMBINATIONS") == "1" else _ACCEPTED_MODEL[::21]


@pytest.mark.slow
@pytest.mark.parametrize("names", _SIMULATED)
def test_every_accepted_combination_of_the_model_parts_runs_to_finite_numbers(names):
    """Every combination validation accepts (a fixed sample of them in the slow tier) runs a tiny
    sweep (H 1 and 2, 2 steps) to finite losses; a refusal at run time would have come too late
    (it must be validation's)."""
    from dynamics.sweeps.sweep import run_sweep

    try:
        result = run_sweep(_validated(MODEL_REGISTRIES, names), progress=False)
    finally:
        jax.clear_caches()  # the combination's programs are not needed again
    assert np.isfinite(result.curves["train_loss"]).all(), result.curves["train_loss"]


def test_the_simulated_sample_holds_every_part_of_every_model_registry():
    """The slow tier's sample of accepted combinations names each part that some accepted
    combination names (so no part goes unsimulated)."""
    for i in range(len(MODEL_REGISTRIES)):
        accepted = {p.values[0][i] for p in _ACCEPTED_MODEL}
        assert {p.values[0][i] for p in _SIMULATED} == accepted, MODEL_REGISTRIES[i]


# --- 6. the config hash ----------------------------------------------------------------------------


def _legal(k):
    """A value the knob takes on its home base other than its default, with an int's float form."""
    kind = kind_of(k)
    if kind == "float":
        return 1
    if kind == "int":
        return 2
    return None


@pytest.mark.parametrize("k", [pytest.param(k, id=k.key) for k in KNOBS if _legal(k) is not None])
def test_one_value_has_one_hash_whatever_its_form_or_surface(k, tmp_path):
    """The same value as a Python int, float and numpy scalar, by keyword, in a TOML file and by
    flag: the same config hash (or the same one-line refusal)."""
    value = _legal(k)
    forms = {
        "int": value,
        "float": float(value),
        "np.float32": np.float32(value),
        "np.int64": np.int64(value),
    }
    outcomes = {}
    for form, v in forms.items():
        outcomes[f"keyword {form}"] = _hash_or_message(lambda v=v: keyword(k, v))
    outcomes["toml int"] = _hash_or_message(lambda: toml(k, value, tmp_path))
    outcomes["toml float"] = _hash_or_message(lambda: toml(k, float(value), tmp_path))
    if k.flag:
        outcomes["flag"] = _hash_or_message(lambda: command_line(k, str(value)).config)
    if kind_of(k) == "int":  # an int knob refuses a float form: compare the int forms
        outcomes = {f: o for f, o in outcomes.items() if "float" not in f}
    kinds = {o[0] for o in outcomes.values()}
    assert kinds == {"hash"} or kinds == {"refused"}, outcomes
    if kinds == {"hash"}:
        assert len({o[1] for o in outcomes.values()}) == 1, outcomes


def _hash_or_message(call):
    try:
        return ("hash", schema.validate(call()).hash())
    except ValueError as exc:
        assert "\n" not in str(exc), str(exc)
        return ("refused", str(exc).split("=")[0])


def _unset_at_home(k) -> bool:
    """The knob's home base leaves it at its default (a base that sets it is another case)."""
    base = config_on(*home(k.key))
    return k.default not in (None, ()) and getattr(getattr(base, k.section), k.name) == k.default


@pytest.mark.parametrize("k", [pytest.param(k, id=k.key) for k in KNOBS if _unset_at_home(k)])
def test_the_default_given_explicitly_keeps_the_hash(k):
    """A knob given at its declared default by keyword: the same hash as not given (or refused as
    without effect, never a new hash for the same run)."""
    base = schema.validate(config_on(*home(k.key)))
    try:
        given = keyword(k, k.default)
    except ConfigError as exc:
        assert "has no effect" in str(exc), str(exc)
        return
    assert schema.validate(given).hash() == base.hash()


@pytest.mark.parametrize("k", [pytest.param(k, id=k.key) for k in KNOBS if kind_of(k) == "float"])
def test_a_results_file_with_an_int_real_keeps_its_recorded_hash(k):
    """A results.json written before a real's int became its float (``"lr": 1``) loads with the
    value as written, so its recorded config_hash is still its config's (never read as damaged)."""
    for value in (1, 0, 2):  # 1 where the knob takes it (label_noise <= 0.5 does not)
        if k.section == "data" and k.name not in DATA_FIELDS and value == k.default:
            continue  # a data model's parameter at its default is not written (task_variance = 1)
        written = config_on(*home(k.key))
        section = getattr(written, k.section)
        if k.section == "data" and k.name not in DATA_FIELDS:
            section = dataclasses.replace(section, params=(*section.params, (k.name, value)))
        else:
            section = dataclasses.replace(section, **{k.name: value})
        try:  # validated, as results.json has it
            written = schema.validate(dataclasses.replace(written, **{k.section: section}))
            break
        except ConfigError:
            continue
    loaded = schema.config_from_dict(written.to_dict())
    assert getattr(getattr(loaded, k.section), k.name) == getattr(getattr(written, k.section), k.name)
    assert loaded.hash() == written.hash()
