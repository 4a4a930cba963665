"""mhsim's dynamics: the multi-head attention model, losses, optimisers and the training engine."""

from dynamics.config import PRESETS, Config, ConfigError, DataConfig, ModelConfig, OptimConfig, SweepConfig
from dynamics.data import Data
from dynamics.engine import METRICS
from dynamics.losses import Loss, error_rate, margin_loss, mean_loss
from dynamics.model import (
    Init,
    KeyQuery,
    Norm,
    Query,
    attention,
    attention_scores,
    head_norm,
    head_outputs,
    init_params,
    key_query_matrix,
    logits,
    param_count,
)

__all__ = [
    "PRESETS",
    "Config",
    "ConfigError",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "SweepConfig",
    "METRICS",
    "Data",
    "Loss",
    "error_rate",
    "margin_loss",
    "mean_loss",
    "KeyQuery",
    "Init",
    "Norm",
    "Query",
    "attention",
    "attention_scores",
    "head_norm",
    "head_outputs",
    "init_params",
    "key_query_matrix",
    "logits",
    "param_count",
]
