"""Configuration: the sections of a sweep's config, presets, TOML, validation (``schema``) and the
grid's knobs (``grid``). Imports no JAX, so ``--help`` stays fast."""
