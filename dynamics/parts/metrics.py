"""The logged metrics, declared once (no JAX: the command line's tables read them too).

Each curve a run logs is a ``Metric``: its name (the key in ``curves.npz`` and ``SweepResult.curves``),
its *kind* — what one logged value of one run is — and its label. The kind says everything that
code elsewhere needs to know of a curve, so nothing is keyed on a name's prefix or suffix:

- ``run``: one number per run (the losses, errors, margin, norms, diversity, …);
- ``head``: one per head (H,);
- ``head_head``: a head × head matrix (H, H);
- ``planted``: one per head and planted direction of the data (H, P);
- ``feature``: one per head and feature of a per-feature mask (H, F);
- ``snapshot``: a head's parameter at the logged step (H, …) (``sweep.save_params``);
- ``run_snapshot``: a run's parameter at the logged step (the bias).

The engine lays out per slot what is not per run (``per_slot``), the sweep lays the slots out per
head and makes head–head matrices square (``pairwise``), the memory estimate counts each curve's
numbers per logged step (``numbers``), the results loader checks each curve's shape, and the
per-head figure draws the metrics that declare a ``panel``.

A classification run logs the losses, 0-1 errors and the smallest train margin; a regression run
logs the losses (the train and test MSE) and the excess risk, test MSE less the data model's noise
floor (NaN where unknown), and no error or margin. Both log the parameter norms, head diversity
and attention on the relevant tokens (NaN where they are unknown). With ``sweep.head_metrics`` a
run logs the per-head metrics of ``dynamics.core.heads`` too. ``sweep.log`` chooses among these:
``losses`` logs the train and test loss alone (the engine computes nothing else), ``default`` the
set above, ``all`` that set with the per-head metrics at every H and the head–head matrices.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynamics.parts.data import DATA_MODELS
from dynamics.parts.training import LOSSES

TASKS = ("classification", "regression")
# The head count's column in every frame and its key in every summary row; results.json files of
# older versions call it "heads" in their summary rows (``OLD_HEAD_COUNT``, read as ``HEAD_COUNT``).
HEAD_COUNT = "H"
OLD_HEAD_COUNT = "heads"
# What a run logs (``sweep.log``): the train and test loss only, today's default set (losses,
# errors, margin, norms, diversity, attention; the per-head view up to 16 heads), or all of it (the
# per-head metrics at every H with the head–head matrices).
LOGS = ("losses", "default", "all")
LOSS_METRICS = ("train_loss", "test_loss")
KINDS = ("run", "head", "head_head", "planted", "feature", "snapshot", "run_snapshot")
PER_HEAD_KINDS = ("head", "head_head", "planted", "feature")  # the per-head metrics (``head_frame``)


@dataclass(frozen=True)
class Metric:
    """One logged curve. ``label``: what it is, in words ({key_dir} and {key_norm} name the model's
    key direction and key-query norm; a per-planted-direction metric's labels its heatmaps, "·" the
    direction); ``tasks``: the tasks whose runs log it (a run metric); ``title``: its column in the
    result tables (a summary metric's); ``panel``: the per-head figure draws it, under this title,
    ``absent`` the figure's note when the results lack it, ``tag`` its name in the figure's legend;
    ``unit``: its values lie in [0, 1]; ``log_scale``: figures draw it on a log axis (a loss, where
    every value is > 0; else linear, as a 0-1 error)."""

    name: str
    kind: str
    label: str
    tasks: tuple[str, ...] = TASKS
    title: str | None = None
    panel: str | None = None
    absent: str | None = None
    tag: str | None = None
    unit: bool = False
    log_scale: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"metric {self.name!r}: kind={self.kind!r} must be one of {', '.join(KINDS)}")

    @property
    def per_slot(self) -> bool:
        """The engine logs it per head slot (S, …), not per run (R,)."""
        return self.kind in (*PER_HEAD_KINDS, "snapshot")

    @property
    def per_head(self) -> bool:
        """A per-head metric (``sweep.head_metrics``)."""
        return self.kind in PER_HEAD_KINDS

    @property
    def pairwise(self) -> bool:
        """Its last axis is a second head axis."""
        return self.kind == "head_head"

    @property
    def snapshot(self) -> bool:
        return self.kind in ("snapshot", "run_snapshot")

    def numbers(self, H: int, P: int = 0, F: int = 0, size: int = 1) -> int:
        """Its numbers per run and logged step: H heads, P planted directions, F features, ``size`` the
        numbers of one head's (or run's) parameter for a snapshot."""
        return {
            "run": 1,
            "head": H,
            "head_head": H * H,
            "planted": H * P,
            "feature": H * F,
            "snapshot": H * size,
            "run_snapshot": size,
        }[self.kind]

    def trailing(self, H: int, P: int | None = None, F: int | None = None) -> tuple[int | None, ...]:
        """Its axes after (…, L) in a sweep's curves: () per run, (H_max,) per head, (H_max, H_max)
        head–head, (H_max, P) per planted direction, (H_max, F) per feature (None: any size)."""
        return {
            "run": (),
            "head": (H,),
            "head_head": (H, H),
            "planted": (H, P),
            "feature": (H, F),
        }[self.kind]


REGISTRY: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add ``metric`` to the registry (its name must be new)."""
    if metric.name in REGISTRY:
        raise ValueError(f"a metric named {metric.name!r} is already registered")
    REGISTRY[metric.name] = metric
    return metric


CLS, REG = ("classification",), ("regression",)
for _m in (
    Metric("train_loss", "run", "train loss", title="train loss", log_scale=True),
    Metric("test_loss", "run", "test loss", title="test loss", log_scale=True),
    Metric("train_error", "run", "train 0-1 error", CLS, title="train err"),
    Metric("test_error", "run", "test 0-1 error", CLS, title="test err"),
    Metric("margin", "run", "smallest train margin", CLS),
    Metric("excess_risk", "run", "test MSE − noise floor", REG, title="excess risk", log_scale=True),
    Metric("u_norm", "run", "‖U‖"),
    Metric("w_norm", "run", "key-query norm"),
    Metric("diversity", "run", "head diversity"),
    Metric("attn_relevant", "run", "attention on relevant tokens", unit=True),
    # per head (``dynamics.core.heads``), in the per-head figure's panel order
    Metric(
        "head_attn_relevant",
        "head",
        "attention on relevant tokens",
        panel="attention on relevant tokens",
        absent="attention on relevant tokens (this data model marks none)",
        unit=True,
    ),
    Metric(
        "head_u_cos",
        "planted",
        "|cos(U_h, ·)|",
        panel="|cos(U_h, best direction)|",
        absent="|cos(U_h, ·)| with planted directions (not in these results)",
        tag="U",
        unit=True,
    ),
    Metric(
        "head_key_cos",
        "planted",
        "|cos({key_dir}, ·)|",
        panel="|cos({key_dir}, best dir.)|",
        absent="the key direction's |cos| with planted directions (not in these results)",
        tag="key",
        unit=True,
    ),
    Metric("head_u_norm", "head", "‖U_h‖", panel="‖U_h‖"),
    Metric("head_key_norm", "head", "key-query norm", panel="{key_norm}"),
    Metric("head_uk_cos", "head", "|cos(key direction, U_h)|", unit=True),
    Metric("head_attn_feature", "feature", "attention on each feature's tokens", unit=True),
    Metric("head_u_sim", "head_head", "|cos(U_h, U_h')|", unit=True),
    Metric("head_key_sim", "head_head", "|cos| of the key directions", unit=True),
    Metric("head_attn_sim", "head_head", "|cos| of the attention patterns", unit=True),
    # snapshots of θ (``sweep.save_params``): a head's arrays per slot, the bias per run
    *(
        Metric(f"param_{p}", "snapshot", f"θ: {p} of each head")
        for p in ("U", "W", "Q", "K", "k", "a", "V", "O")
    ),
    Metric("param_b", "run_snapshot", "θ: the bias"),
):
    register(_m)
del _m


def kind_of(name: str) -> str | None:
    """The kind of the curve ``name``, or None for a curve that is not a registered metric (a user's
    metric, a theory diagnostic)."""
    metric = REGISTRY.get(name)
    return None if metric is None else metric.kind


def is_per_slot(name: str) -> bool:
    """The engine logs ``name`` per head slot (a per-head metric or a head's parameter)."""
    return name in REGISTRY and REGISTRY[name].per_slot


def is_per_head(name: str) -> bool:
    return name in REGISTRY and REGISTRY[name].per_head


def has_head_axes(name: str) -> bool:
    """A registered curve with axes after (…, L): a per-head metric or a snapshot of θ."""
    return name in REGISTRY and REGISTRY[name].kind != "run"


def is_snapshot(name: str) -> bool:
    return name in REGISTRY and REGISTRY[name].snapshot


def snapshot_name(param: str) -> str:
    """The curve of the parameter ``param`` (``U``, ``W``, …, ``b``); a registered metric."""
    name = f"param_{param}"
    if not is_snapshot(name):
        raise KeyError(f"no snapshot metric is registered for the parameter {param!r}")
    return name


def run_metrics(task: str) -> tuple[str, ...]:
    return tuple(m.name for m in REGISTRY.values() if m.kind == "run" and task in m.tasks)


def per_head_metrics() -> tuple[Metric, ...]:
    return tuple(m for m in REGISTRY.values() if m.per_head)


METRICS = run_metrics("classification")  # a classification run's
REGRESSION_METRICS = run_metrics("regression")
SUMMARY_METRICS = tuple(m.name for m in REGISTRY.values() if m.title is not None)  # those it logs
COLUMN_TITLES = {m.name: m.title for m in REGISTRY.values() if m.title is not None}


def metric_names(task: str, noise_floor: bool = True) -> tuple[str, ...]:
    """The metrics a run of this task logs ("classification" or "regression"); regression logs the
    excess risk only where the data's noise floor is known (``noise_floor``)."""
    if task != "regression":
        return METRICS
    return REGRESSION_METRICS if noise_floor else tuple(m for m in REGRESSION_METRICS if m != "excess_risk")


def metrics_of(cfg) -> tuple[str, ...]:
    """The metrics a run of the (validated) config ``cfg`` logs: its loss's task, and whether its data
    model knows its noise floor (data from a file do not)."""
    if logs_losses_only(cfg):
        return LOSS_METRICS
    model = DATA_MODELS[cfg.data.model]
    known = getattr(model, "noise_floor_known", not model.from_file)
    return metric_names(LOSSES[cfg.optim.loss].task, known)


def logs_losses_only(cfg) -> bool:
    """``sweep.log`` is ``losses``: the train and test loss, nothing else of the registry (a
    config of a version without the knob logs the default set)."""
    return getattr(cfg.sweep, "log", "default") == "losses"


def logs_all(cfg) -> bool:
    return getattr(cfg.sweep, "log", "default") == "all"


HEAD_METRICS_AUTO_MAX = 16  # "auto" logs the per-head metrics up to this many heads
HEAD_POINTS = 200  # the per-head view's default: about this many of the logged steps


def head_metrics_on(cfg) -> bool:
    """``sweep.head_metrics``: "on", "off", or "auto" (on where the sweep's largest H is at most
    ``HEAD_METRICS_AUTO_MAX``: the head–head matrices grow as H² per logged step); ``sweep.log``
    ``losses`` turns them off and ``all`` on, whatever ``sweep.head_metrics`` says."""
    if getattr(cfg.model, "output", "pooled") == "sequence":  # no readout U to read (refused if 'on')
        return False
    if logs_losses_only(cfg) or logs_all(cfg):
        return logs_all(cfg)
    mode = cfg.sweep.head_metrics
    return mode == "on" or (mode == "auto" and max(cfg.sweep.heads) <= HEAD_METRICS_AUTO_MAX)


def head_view_on(cfg) -> bool:
    """The run logs a per-head view: the per-head metrics or the snapshots of θ."""
    return head_metrics_on(cfg) or bool(cfg.sweep.save_params)


def logged_per_head(cfg) -> tuple[Metric, ...]:
    """The per-head metrics a run of ``cfg`` logs (none when ``head_metrics_on`` is False): the
    head–head matrices only with ``head_sims_on``."""
    if not head_metrics_on(cfg):
        return ()
    return tuple(m for m in per_head_metrics() if not m.pairwise or head_sims_on(cfg))


def head_sims_on(cfg) -> bool:
    """The run logs the head–head similarity matrices: ``sweep.head_sims``, or ``sweep.log`` all."""
    return head_metrics_on(cfg) and (bool(cfg.sweep.head_sims) or logs_all(cfg))


def head_stride(cfg, n_logged: int) -> int:
    """Every how many logged steps the per-head view is logged: ``sweep.head_every``, or by default
    the smallest stride that keeps it to about ``HEAD_POINTS`` points (1 for a run that logs fewer)."""
    if cfg.sweep.head_every is not None:
        return int(cfg.sweep.head_every)
    return max(1, -(-n_logged // HEAD_POINTS))


def head_indices(cfg, n_logged: int) -> list[int]:
    """The positions among the ``n_logged`` logged steps where the per-head view (per-head metrics,
    snapshots) is logged: every ``head_stride``-th from step 0, and the last logged step always."""
    if n_logged <= 0:
        return []
    return sorted({*range(0, n_logged, head_stride(cfg, n_logged)), n_logged - 1})


def head_schedule(steps, cfg) -> list[int]:
    """The steps of the per-head view among the logged ``steps`` (a subset: never finer than them)."""
    steps = [int(s) for s in steps]
    return [steps[i] for i in head_indices(cfg, len(steps))]
