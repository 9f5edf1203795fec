"""``/result/C`` through MPI-IO (h5py built on parallel HDF5) is the file the serial path writes.

Where h5py has parallel HDF5, ``--save-c`` makes every rank write its block
of C collectively (``driver="mpio"``); elsewhere the ranks write one after
another.  Each test here runs the same product twice, once each way, and
checks that the parallel path really ran (every rank opened the file with
the ``mpio`` driver), that both files hold the same C bit for bit, and that C
is the float64 product within its rounding bound.  Shapes are uneven, and
some leave ranks with empty blocks of C.

PyPI's h5py is serial: there the tests are skipped, unless
``REQUIRE_PARALLEL_HDF5=1`` (set by ``.ci/parallel-hdf5``) makes that a
failure.  Run with::

    mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_parallel_hdf5.py
"""

from __future__ import annotations

import os
import types

import h5py
import numpy as np
import pytest
from test_run_mpi import COMM, P, compare, config, everywhere, generated_product, on_rank0

import hpcmm
from hpcmm.io import h5io

PARALLEL = bool(h5py.get_config().mpi)

pytestmark = pytest.mark.mpi(min_size=2)

if not PARALLEL and os.environ.get("REQUIRE_PARALLEL_HDF5") == "1":
    pytest.fail("REQUIRE_PARALLEL_HDF5=1 but this h5py is built on serial HDF5", pytrace=False)
if not PARALLEL:
    pytest.skip("h5py is built on serial HDF5 (PyPI's); parallel HDF5 is tested by .ci/parallel-hdf5",
                allow_module_level=True)


class H5pyAsSeen:
    """h5py as :mod:`hpcmm.io.h5io` sees it: records the drivers of the files opened; ``serial`` hides MPI."""

    def __init__(self, serial: bool) -> None:
        self.serial = serial
        self.drivers: list[str | None] = []

    def __getattr__(self, name):
        return getattr(h5py, name)

    def get_config(self):
        return types.SimpleNamespace(mpi=False) if self.serial else h5py.get_config()

    def File(self, *args, **kwargs):  # noqa: N802 - h5py's name
        self.drivers.append(kwargs.get("driver"))
        return h5py.File(*args, **kwargs)


def shapes() -> dict[str, tuple[int, int, int, tuple[int, int] | None]]:
    """(m, n, k, grid) sized from the rank count; ``grid`` None: hpcmm's choice."""
    return {
        "uneven": (7 * P + 3, 5 * P + 1, 3 * P + 2, None),
        "tall": (11 * P + 5, 3, P + 4, None),
        "wide": (5, 9 * P + 2, 2 * P + 3, (1, P)),
        # Fewer rows than grid rows: ranks below row m hold empty blocks of C.
        "empty-rows": (1, 2 * P + 1, 3, (P, 1)),
        "empty-columns": (2 * P + 1, 1, 2, (1, P)),
    }


@pytest.mark.parametrize("kind", list(shapes()))
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_mpio_file_equals_the_serial_file(mpi_tmp_path, monkeypatch, kind, dtype):
    m, n, k, grid = shapes()[kind]
    files = {}
    for way, serial in (("parallel", False), ("serial", True)):
        seen = H5pyAsSeen(serial)
        monkeypatch.setattr(h5io, "h5py", seen)
        cfg = config(mpi_tmp_path, m=m, n=n, k=k, grid=grid, dtype=dtype,
                     out=str(mpi_tmp_path / f"{kind}-{dtype}-{way}.h5"))
        result = hpcmm.run(cfg, comm=COMM)
        monkeypatch.undo()
        everywhere(result.check.passed, f"{way}: residual {result.summary['residual']}")
        # Collective MPI-IO on every rank, empty blocks included; none on the serial way.
        uses_mpio = "mpio" in seen.drivers
        everywhere(uses_mpio == (not serial), f"{way}: drivers {seen.drivers}")
        files[way] = cfg.out

    def check():
        with h5py.File(files["parallel"], "r") as par, h5py.File(files["serial"], "r") as ser:
            c_par, c_ser = par["result/C"][()], ser["result/C"][()]
            assert c_par.dtype == c_ser.dtype and c_par.shape == c_ser.shape == (m, n)
            assert np.array_equal(c_par, c_ser), f"{int((c_par != c_ser).sum())} element(s) differ"
        a, b = generated_product(42, m, n, k, dtype)
        compare(files["parallel"], a, b, dtype)

    on_rank0(check)
