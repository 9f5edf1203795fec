"""Write the small input matrices the tests read, each with its known product.

Run from anywhere (the files go beside this script)::

    python data/make_data.py

Files (a few KiB together; the seed is fixed, so a rerun gives the same bytes
of data):

``small.h5``
    Datasets ``A`` (37×23), ``B`` (23×29) and ``C`` = ``A @ B`` (37×29), all
    float64, for ``--a data/small.h5:A --b data/small.h5:B``.
``A.npy``, ``B.npy``, ``C_npy.npy``
    ``A`` (19×11), ``B`` (11×13) and their product (19×13), float64, for
    ``--a data/A.npy --b data/B.npy``.

Sizes are prime-ish on purpose: no process grid divides them evenly.  Values
are uniform in [-1, 1), never zero-filled, so a product that skips a panel or
a block shows up.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import h5py
import numpy as np

SEED = 20261129
HERE = Path(__file__).resolve().parent


def make(out: Path = HERE) -> list[Path]:
    """Write the files into ``out``; returns their paths."""
    rng = np.random.default_rng(SEED)
    a = rng.uniform(-1.0, 1.0, (37, 23))
    b = rng.uniform(-1.0, 1.0, (23, 29))
    small = out / "small.h5"
    with h5py.File(small, "w") as f:
        f.attrs["about"] = "hpcmm test inputs: C = A @ B (see data/make_data.py)"
        f.attrs["seed"] = SEED
        f.create_dataset("A", data=a)
        f.create_dataset("B", data=b)
        f.create_dataset("C", data=a @ b)
    a2 = rng.uniform(-1.0, 1.0, (19, 11))
    b2 = rng.uniform(-1.0, 1.0, (11, 13))
    paths = [small]
    for name, array in (("A.npy", a2), ("B.npy", b2), ("C_npy.npy", a2 @ b2)):
        np.save(out / name, array)
        paths.append(out / name)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for the files (default: data/)")
    args = parser.parse_args()
    for path in make(args.out):
        print(f"{path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
