"""The learned query, the bias, the task and --init-from: what the config accepts and refuses,
what a file's targets mean, and the old configs' hashes kept."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import DEFAULT_CONFIG_HASH

from dynamics.config.schema import (
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    SweepConfig,
    apply_overrides,
    validate,
)
from dynamics.core import inits, model
from dynamics.core.data import make_data


def npz(folder, y_train, y_test, T=3, d=4, name="data.npz"):
    rng = np.random.default_rng(0)
    path = folder / name
    X = rng.normal(size=(len(y_train) + len(y_test), T, d)).astype(np.float32)
    np.savez(path, X_train=X[: len(y_train)], y_train=y_train, X_test=X[len(y_train) :], y_test=y_test)
    return str(path)


def test_the_task_and_loss_follow_the_data(tmp_path):
    assert validate(Config()).optim.task == "classification"
    assert Config().hash() == DEFAULT_CONFIG_HASH  # the default run's hash, as before these fields
    real = npz(tmp_path, np.array([0.3, -1.2, 2.0]), np.array([0.1, 0.5]))
    cfg = validate(Config(data=DataConfig(model="npz", path=real)))
    assert (cfg.optim.task, cfg.optim.loss) == ("regression", "mse")  # the task's first loss
    with pytest.raises(ConfigError, match=r"optim.task='classification' contradicts the data"):
        validate(Config(data=DataConfig(model="npz", path=real), optim=OptimConfig(task="classification")))
    with pytest.raises(ConfigError, match=r"optim.task='regression' contradicts the data: data.model='dm1'"):
        validate(Config(optim=OptimConfig(task="regression")))
    with pytest.raises(ConfigError, match=r"optim.loss='mse' is a regression loss.*'logistic', 'exp'"):
        validate(Config(optim=OptimConfig(loss="mse")))
    explicit = apply_overrides(
        Config(data=DataConfig(model="npz", path=real)), {"optim": {"loss": "logistic"}}, "t"
    )
    with pytest.raises(
        ConfigError, match=r"optim.loss='logistic' is a classification loss; the task is regression"
    ):
        validate(explicit)  # a loss asked for is never swapped
    with pytest.raises(ConfigError, match=r"optim.task='ranking' is not one of"):
        validate(Config(optim=OptimConfig(task="ranking")))


def test_a_files_targets_are_never_remapped_under_regression(tmp_path):
    zero_one = npz(tmp_path, np.array([0, 1, 1]), np.array([1, 0]))
    cfg = validate(Config(data=DataConfig(model="npz", path=zero_one)))
    assert cfg.optim.task == "classification"
    data, _ = make_data(cfg.data, np.zeros(2, np.uint32), 1, task=cfg.optim.task)
    assert np.asarray(data.y_train).tolist() == [-1.0, 1.0, 1.0]  # 0/1 labels as ±1
    reg = validate(Config(data=DataConfig(model="npz", path=zero_one), optim=OptimConfig(task="regression")))
    assert reg.optim.loss == "mse"
    data, _ = make_data(reg.data, np.zeros(2, np.uint32), 1, task=reg.optim.task)
    assert np.asarray(data.y_train).tolist() == [0.0, 1.0, 1.0]  # regression targets as they are
    bad = npz(tmp_path, np.array([0.5, np.nan, 1.0]), np.array([1.0, 0.0]), name="nan.npz")
    from datamodels.npz import DataError

    cfg = validate(Config(data=DataConfig(model="npz", path=bad)))
    with pytest.raises(DataError, match=r"'y_train': has non-finite targets"):
        make_data(cfg.data, np.zeros(2, np.uint32), 1, task=cfg.optim.task)


def test_the_learned_query_has_no_key_query_matrix():
    cfg = validate(Config(model=ModelConfig(query="learned")))
    assert cfg.model.query == "learned"
    with pytest.raises(
        ConfigError, match=r"model.key_query='factored' was given but has no effect: model.query='learned'"
    ):
        validate(Config(model=ModelConfig(query="learned", key_query="factored", init="normal")))
    given = apply_overrides(Config(), {"model": {"query": "learned", "head_size": 2}}, "t")
    with pytest.raises(ConfigError, match=r"model.head_size=2 was given but has no effect"):
        validate(given)
    with pytest.raises(ConfigError, match=r"needs model.init='normal'"):
        validate(Config(model=ModelConfig(query="learned", attention="erf")))  # zero init: a saddle
    params = inits.init_params(None, 3, 5, query="learned", bias=True)
    assert {k: v.shape for k, v in params.items()} == {"U": (3, 5), "k": (3, 5), "b": ()}
    assert inits.param_count(3, 5, query="learned", bias=True) == 3 * 5 * 2 + 1
    with pytest.raises(ValueError, match=r"query='learned' needs a vector k per head"):
        model.attention(inits.init_params(None, 1, 5), np.zeros((2, 4, 5), np.float32), query="learned")
    with pytest.raises(ValueError, match=r"params\['b'\] has shape \(2, 2\)"):
        model.check_params({**params, "b": np.zeros((2, 2), np.float32)})


def base(tmp_path, **model_kw) -> Config:
    data = npz(tmp_path, np.array([1.0, -1.0, 1.0]), np.array([1.0, -1.0]))
    return Config(
        data=DataConfig(model="npz", path=data),
        model=ModelConfig(**model_kw),
        sweep=SweepConfig(heads=(1, 2), trials=2),
    )


def test_init_from_checks_the_file_against_the_model(tmp_path):
    def file(**arrays):
        path = tmp_path / "theta.npz"
        np.savez(path, **arrays)
        return str(path)

    U, W = np.ones((2, 4)), np.ones((2, 4, 4))
    assert validate(base(tmp_path, init_from=file(U=U, W=W))).model.init_from
    assert validate(
        base(tmp_path, init_from=file(U=np.ones((2, 2, 4)), W=np.ones((2, 2, 4, 4))))
    )  # per trial
    cases = [
        (dict(U=U), r"has \['U'\]; this model's parameters are \['U', 'W'\]"),
        (dict(U=U, W=W, V=U), r"has 'V', not a parameter"),
        (dict(U=U, W=np.ones((2, 4, 3))), r"'W' has shape \(2, 4, 3\), expected \(2, 4, 4\)"),
        (dict(U=U[:1], W=W[:1]), r"holds H=1 heads; the sweep's largest H is 2"),
        (dict(U=np.ones((3, 2, 4)), W=np.ones((3, 2, 4, 4))), r"expected \(2, 2, 4\)"),  # 3 trials, not 2
        (dict(U=U * np.nan, W=W), r"'U' has non-finite values"),
    ]
    for arrays, match in cases:
        with pytest.raises(ConfigError, match=match):
            validate(base(tmp_path, init_from=file(**arrays)))
    with pytest.raises(ConfigError, match=r"cannot be read as an .npz file"):
        validate(base(tmp_path, init_from=str(tmp_path / "missing.npz")))
    with pytest.raises(ConfigError, match=r"this model's parameters are \['U', 'W', 'b'\]"):
        validate(base(tmp_path, init_from=file(U=U, W=W), bias=True))
    given = apply_overrides(base(tmp_path, init_from=file(U=U, W=W)), {"model": {"init_scale": 2.0}}, "t")
    with pytest.raises(
        ConfigError, match=r"model.init_scale=2.0 was given but has no effect: model.init_from"
    ):
        validate(given)


def test_a_changed_init_file_changes_the_hash(tmp_path):
    path = tmp_path / "theta.npz"
    np.savez(path, U=np.ones((2, 4)), W=np.ones((2, 4, 4)))
    cfg = base(tmp_path, init_from=str(path))
    before = cfg.hash()
    np.savez(path, U=2 * np.ones((2, 4)), W=np.ones((2, 4, 4)))
    assert cfg.hash() != before
    assert dataclasses.replace(cfg, model=ModelConfig()).hash() != before
