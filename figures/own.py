"""The figure a sweep draws of its own question, where the generic one (a line per H, final loss
against H) would say little: ``own_figure(result)`` picks it from what the run is.

- a max-margin sweep with snapshots (``max-margin``, ``max-margin-prompt``): the alignment with
  θ^mm, the attention on the selected token and ‖θ‖ (``figures.max_margin``), ``max-margin.png``;
- an emergence-data run of one H with emergence times (``emergence``): the loss and the
  attention mass against the step with t_att marked
  (``figures.emergence``), ``emergence.png``;
- a single-location sweep of one H with its per-head curves (``single-location``): the
  alignments and the excess risk beside its floor (``figures.single_location``),
  ``single-location.png``;
- a multi-location sweep of one H with its per-head curves (``specialisation``): each head's
  overlap with each feature, ‖U_h‖ and the test loss of trial 0, titled with the runs whose
  features are all held (``figures.specialisation``), ``specialisation.png``.

Every other sweep draws the generic figure (``figures.sweep``), ``figure.png``; so does one of
these whose curves were not logged (``sweep.log`` losses), which ``unavailable`` then names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dynamics.sweeps import emergence


def own_figure(result) -> tuple[Callable[..., list[Path]], str] | None:
    """(``plot(result, stem)``, the file's stem) of ``result``'s own figure, or None (the generic)."""
    cfg = result.config
    if cfg.data.model == "max-margin" and cfg.sweep.save_params:
        from figures.max_margin import plot_max_margin  # each figure's module only when it is drawn

        return plot_max_margin, "max-margin"
    if len(result.heads) != 1:
        return None
    if cfg.data.model == "emergence" and emergence.logged(result.curves):
        from figures.emergence import plot_emergence  # (as above)

        return plot_emergence, "emergence"
    if cfg.data.model == "single-location" and "head_key_cos" in result.curves:
        from figures.single_location import plot_single_location  # (as above)

        return plot_single_location, "single-location"
    if (
        cfg.data.model == "multi-location"
        and "head_key_cos" in result.curves
        and result.extra.get("directions")
    ):
        from figures.specialisation import plot_result  # (as above)

        return plot_result, "specialisation"
    return None


# The own figures that read logged curves: (data model, the curves it needs, the figure).
_NEEDS = (
    ("emergence", ("excess_risk", "attn_relevant"), "emergence"),
    ("single-location", ("head_key_cos",), "single-location"),
    ("multi-location", ("head_key_cos",), "specialisation"),
)


def unavailable(result) -> str | None:
    """One line when ``result``'s question has an own figure whose curves the run did not log (the
    generic figure is drawn instead), else None."""
    cfg = result.config
    if len(result.heads) != 1:
        return None
    for model, needs, stem in _NEEDS:
        lacking = [name for name in needs if name not in result.curves]
        if cfg.data.model == model and lacking:
            return (
                f"the {stem} figure needs {', '.join(lacking)}, not logged (sweep.log="
                f"{cfg.sweep.log!r}); drawing the losses instead"
            )
    return None
