"""The model and its training: Φ and its parts' math (``model``; the attention activations
``activations``; θ(0) ``inits``), losses, a sweep's data arrays (``data``), JAX's PRNG in numpy
(``rng``) and the compiled engine (``engine``, around its ``program``, the slots' θ(0) ``start``
and SGD's batches ``sampling``). Nothing here imports the config, the sweeps or the command
lines."""
