"""What the theory diagnostics (``sweep.diagnostics``, ``dynamics.theory``) need of a config: the
replay re-trains the papers' model with full-batch GD or Adam and the plain step
(``check_replay``, ``check_diagnostics``); the max-margin view of a run's own snapshots
(``from_snapshots``) needs only one query token, among the keys or outside them
(``check_snapshot_maxmargin``).
Called by ``dynamics.config.validation.validate`` in its order of checks; each refusal one line. No JAX."""

from __future__ import annotations

from dynamics import parts
from dynamics.config import sections as sec
from dynamics.config.identity import added_fields
from dynamics.errors import ConfigError
from dynamics.parts.value_checks import choice as _choice

SNAPSHOT_HINT = " ('maxmargin' alone with sweep.save_params reads the run's own θ, without this limit)"


def from_snapshots(sweep: sec.SweepConfig) -> bool:
    """The ``maxmargin`` diagnostic alone with ``sweep.save_params``: read from the engine's own θ at
    every logged step (``dynamics.theory.maxmargin``), no replay, so no replay's restrictions."""
    return sweep.diagnostics == ("maxmargin",) and bool(sweep.save_params)


def check_replay(cfg: sec.Config) -> None:
    """The theory diagnostics are posed for classification (any of them), and the replay re-trains
    full-batch GD or Adam with the plain step: refused otherwise."""
    if cfg.sweep.diagnostics and cfg.optim.task == "regression":
        raise ConfigError(
            "sweep.diagnostics are posed for classification (margins, the attention SVM); "
            "the task is regression"
        )
    if not cfg.sweep.diagnostics or from_snapshots(cfg.sweep):
        return
    optim = cfg.optim
    rules = parts.OPTIMIZERS.get(optim.optimizer)
    if rules.minibatch or rules.normalise_per_run:  # the replay takes the full-batch direction as it is
        raise ConfigError(
            f"sweep.diagnostics replays full-batch GD or Adam; got optim.optimizer={optim.optimizer!r}"
            f"{SNAPSHOT_HINT}"
        )
    changed = [k for k, v in added_fields(sec.OptimConfig).items() if getattr(optim, k) != v]
    if changed:
        raise ConfigError(
            f"sweep.diagnostics replays the plain step (no group rules or constraint); "
            f"got optim.{changed[0]}={getattr(optim, changed[0])!r}{SNAPSHOT_HINT}"
        )


def check_snapshot_maxmargin(model: sec.ModelConfig) -> None:
    query = parts.QUERIES[model.query]
    if parts.READOUTS[model.readout].factored:
        raise ConfigError("sweep.diagnostics 'maxmargin' reads U_h: model.readout='factored' has V_h and O_h")
    if query.all_tokens or not parts.ACTIVATIONS[model.attention].normalises:
        raise ConfigError(
            f"sweep.diagnostics 'maxmargin' needs one query per example (first, last, outside or "
            f"learned) and an "
            f"attention that normalises (softmax); got model.query={model.query!r}, "
            f"model.attention={model.attention!r}"
        )


def check_diagnostics(names: tuple[str, ...], model: sec.ModelConfig, data: sec.DataConfig) -> None:
    if not isinstance(names, tuple):
        raise ConfigError(f"sweep.diagnostics={names!r} must be a tuple of names from {sec.DIAGNOSTICS}")
    for name in names:
        _choice("sweep.diagnostics", name, sec.DIAGNOSTICS)
    if len(set(names)) != len(names):
        raise ConfigError(f"sweep.diagnostics={list(names)} has repeated values")
    changed = {
        k: getattr(model, k) for k, v in added_fields(sec.ModelConfig).items() if getattr(model, k) != v
    }
    if names and not parts.QUERIES[model.query].matrix:
        changed = {"query": model.query}
    if names and changed:  # the replay re-trains the papers' model: softmax at β = 1
        name, value = next(iter(changed.items()))
        raise ConfigError(
            f"sweep.diagnostics needs the papers' model (a key-query matrix, softmax attention at "
            f"temperature 1, no bias: the replay's model); "
            f"got model.{name}={value!r}{SNAPSHOT_HINT}"
        )
    if "maxmargin" in names:
        if not parts.DATA_MODELS[data.model].relevant_tokens:
            known = ", ".join(n for n, m in parts.DATA_MODELS.items() if m.relevant_tokens)
            raise ConfigError(
                f"sweep.diagnostics 'maxmargin' needs data whose relevant tokens are known ({known}); "
                f"data.model={data.model!r} has none"
            )
        if not parts.QUERIES[model.query].first_token:
            raise ConfigError(
                f"sweep.diagnostics 'maxmargin' needs model.query='first' (the attention SVM is "
                f"posed for the first token as query); got model.query={model.query!r}"
            )
