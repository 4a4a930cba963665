"""The model and its training: Φ and its parts' math (``model``), losses, a sweep's data arrays
(``data``), JAX's PRNG in numpy (``rng``) and the compiled engine (``engine``). The engine imports
nothing from the config, the sweeps or the command lines."""
