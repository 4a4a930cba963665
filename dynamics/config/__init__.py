"""Configuration: the sections of a sweep's config and its hash (``sections``), each knob declared
once on its field (``knobs``; why a given value would have no effect: ``idle``), overrides and
values given as text (``overrides``, ``values``), presets (``presets``), TOML files (``tomlfile``),
validation (``validation``), the grid's knobs (``grid_axes``) and θ(0) files (``initfile``); ``schema``
names them all in one place. Imports no JAX, so ``--help`` stays fast."""
