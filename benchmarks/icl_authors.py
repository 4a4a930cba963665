"""Draw the in-context linear-attention authors' training set (github.com/yedizhang/linattn-icl)
with their own code, for ``python -m dynamics.run --preset icl-linear --data OUT.npz``.

Run it with the Python of an environment that has their dependencies (torch, numpy), not
mhsim's: ``python benchmarks/icl_authors.py THEIR_CHECKOUT OUT.npz [their flags]``. It imports
their ``config`` and ``data`` modules, seeds as their ``train.py`` does (default seed 10) and
calls their ``gen_dataset``; a 1000-sequence test set is drawn after it by their ``gen_data_``
with the same Λ (whitened on its own, as they whiten every set). Nothing of theirs is copied.
"""

import sys
from pathlib import Path

import numpy as np


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: python benchmarks/icl_authors.py THEIR_CHECKOUT OUT.npz [their train.py flags]")
    sys.path.insert(0, str(Path(argv[0]).resolve()))
    import torch
    from config import config
    from data import gen_cov, gen_data_, gen_dataset

    sys.argv = [sys.argv[0], *argv[2:]]  # their config() parses (and prints) sys.argv itself
    args = config().parse_args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    data = gen_dataset(args)  # their training set, exactly as train.py draws it
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    w_iwl = torch.normal(0, 1, size=(args.in_dim, args.out_dim))  # gen_dataset's first draw
    cov = gen_cov(args)  # so this Λ is the training set's
    x_test, y_test = gen_data_(1000, args.seq_len, args.in_dim, args.out_dim, cov, w_iwl, 1)
    D = args.in_dim
    np.savez(
        argv[1],
        X_train=data["x"].cpu().numpy().astype(np.float32),
        y_train=data["y"].cpu().numpy()[:, -1, D].astype(np.float32),
        X_test=x_test.cpu().numpy().astype(np.float32),
        y_test=y_test.cpu().numpy()[:, -1, D].astype(np.float32),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
