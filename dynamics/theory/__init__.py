"""The theory's quantities at a state θ (``diagnostics``: sharpness, tangent kernel; ``svm``: the
max-margin SVM), their replay along a sweep's runs for ``--diagnostics`` (``replay``) and the
max-margin view of a run's own snapshots (``maxmargin``), and the replica prediction of tied
low-rank attention's positional and semantic minima (``positional_semantic``)."""
