"""Reading a results file back: the unit of every figure, and its tables as pandas DataFrames.

Every group and table of a results file carries a ``units`` attribute, a JSON
object from each attribute's or column's name to its unit (``"s"``,
``"bytes"``, ``"fraction"`` — 0.05 is 5 % —, ``"flop"``, ``"TFLOP/s"``,
``"flop/s"``); a plain dataset of seconds carries ``units = "s"``.  Names
with no unit (counts, names, flags) are left out.

Example::

    from hpcmm.io.results import tables, units
    frames = tables("run.h5")                  # {"topology": DataFrame, "timings/steps": ..., ...}
    units("run.h5", "summary")["load_imbalance"]   # 'fraction'
"""

from __future__ import annotations

import json
import re

import numpy as np

__all__ = ["UNIT_RULES", "tables", "unit_of", "units", "units_of"]

#: A name's unit by the first rule whose pattern matches it (docs/hdf5-schema.md says the same).
UNIT_RULES = (
    (r"(^|_)seconds(_|$)|_s$|^seconds|clock_uncertainty|^elapsed", "s"),
    (r"(^|_)bytes(_|$)|_bytes_|^bytes$", "bytes"),
    (r"_fraction$|^load_imbalance$|^predicted_imbalance$|^efficiency$|^residual$|^tolerance$|"
     r"^verify_detectable$|^hpcmm_over_", "fraction"),
    (r"^tflops|_tflops$", "TFLOP/s"),
    (r"^gemm_rate$|_rate$", "flop/s"),
    (r"^flops$", "flop"),
)


def unit_of(name: str) -> str | None:
    """The unit of a figure called ``name``, ``None`` for one without (a count, a name, a flag).

    >>> unit_of("exposed_comm_seconds"), unit_of("peak_bytes"), unit_of("load_imbalance"), unit_of("panel")
    ('s', 'bytes', 'fraction', None)
    """
    for pattern, unit in UNIT_RULES:
        if re.search(pattern, name):
            return unit
    return None


def units_of(names) -> str:
    """The ``units`` attribute for ``names``: JSON from each name that has a unit to it."""
    return json.dumps({name: unit for name in names if (unit := unit_of(name)) is not None}, sort_keys=True)


def units(path: str, node: str = "summary") -> dict[str, str]:
    """The units of ``node``'s attributes (a group) or columns (a table) in the results file ``path``."""
    import h5py  # noqa: PLC0415

    with h5py.File(path, "r") as f:
        text = f[node].attrs.get("units", "{}")
    text = text.decode() if isinstance(text, bytes) else str(text)
    return json.loads(text) if text.startswith("{") else {"": text}


def tables(path: str) -> dict:
    """Every table of a results file, by its path: pandas DataFrames where pandas imports, else numpy arrays.

    Tables are the compound datasets (``topology``, ``transfers``, ``memory``,
    ``timings/steps``, ``timings/plans``, ``timings/gemms``, ``bench``…), one
    row per record, strings decoded; ``timeline/events`` comes with its
    ``columns``.  ``DataFrame.attrs["units"]`` holds each column's unit.
    """
    import h5py  # noqa: PLC0415

    try:
        import pandas  # noqa: PLC0415
    except ImportError:
        pandas = None
    found: dict = {}

    def visit(name, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        columns = None
        if obj.dtype.names is not None:
            data = obj[()]
            columns = list(obj.dtype.names)
        elif "columns" in obj.attrs and obj.ndim == 2:
            data = obj[()]
            columns = [c.decode() if isinstance(c, bytes) else str(c) for c in obj.attrs["columns"]]
        else:
            return
        unit_text = obj.attrs.get("units", "{}")
        unit_text = unit_text.decode() if isinstance(unit_text, bytes) else str(unit_text)
        column_units = json.loads(unit_text) if unit_text.startswith("{") else {}
        if pandas is None:
            found[name] = data
            return
        if data.dtype.names is not None:
            frame = pandas.DataFrame({c: [v.decode() if isinstance(v, bytes) else v for v in data[c]]
                                      if data.dtype[c].kind == "O" else np.asarray(data[c]) for c in columns})
        else:
            frame = pandas.DataFrame(data, columns=columns)
        frame.attrs["units"] = column_units
        found[name] = frame

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return found
