"""The theory's quantities at a state θ (``diagnostics``: sharpness, tangent kernel, max-margin SVM)
and their replay along a sweep's runs for ``--diagnostics`` (``replay``)."""
