"""bfloat16: the element type numpy lacks, how the host multiplies it, how files hold it.

numpy has no bfloat16; ``ml_dtypes`` gives it one (``np.dtype("bfloat16")``
resolves once ml_dtypes is imported).  cupy (14 and later) takes the same
dtype for its arrays and cuBLAS (``CUDA_R_16BF``).

Importing ml_dtypes takes the better part of a second (it builds its types
and their ufuncs), so this module imports it only where bfloat16 is used:
:func:`bfloat16` (and :data:`BFLOAT16`, its value), :func:`numpy_dtype` of
``"bfloat16"``, :func:`from_storage` of a dataset marked bfloat16.  A run,
a Matmul or a bench case of ``bfloat16`` calls :func:`bfloat16` when its
type is checked (:class:`~hpcmm.config.RunConfig`), so that numpy knows the
name from then on; float64 runs, ``model``, ``report`` of a float file and
``info`` never load it.  :func:`is_bfloat16` answers without loading it: no
bfloat16 array or dtype exists before ml_dtypes is imported.

Three things bfloat16 needs that the other types get for free:

* **The host GEMM.**  numpy multiplies ml_dtypes arrays element by element
  in Python-level loops; :func:`host_matmul` widens both operands to
  float32, multiplies with BLAS, and rounds the float32 sum to bfloat16
  once, as cuBLAS does with a float32 compute type.
* **HDF5.**  h5py stores an ml_dtypes bfloat16 array as an opaque 2-byte
  type that no reader understands.  hpcmm stores bfloat16 datasets as their
  raw 16-bit patterns (``uint16``, the same bytes) with the attribute
  ``element_type = "bfloat16"`` (:data:`TYPE_ATTRIBUTE`): exact, half the
  size of float32, and ``dataset[()].view(ml_dtypes.bfloat16)`` gives the
  values back.  :func:`read_dataset` reads both that and plain float
  datasets (a float32 dataset read for ``--dtype bfloat16`` is rounded).
* **MPI.**  mpi4py cannot name an MPI datatype for it; hpcmm's transports
  move bytes, so nothing there changes.

>>> kind = bfloat16()
>>> np.dtype("bfloat16") is kind
True
>>> stored = to_storage(np.array([1.5, -2.0], dtype=kind))
>>> stored.dtype.name, stored.tolist()
('uint16', [16320, 49152])
>>> from_storage(stored, {TYPE_ATTRIBUTE: "bfloat16"}).astype(np.float32).tolist()
[1.5, -2.0]
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["BFLOAT16", "TYPE_ATTRIBUTE", "bfloat16", "from_storage", "host_matmul", "is_bfloat16", "numpy_dtype",
           "product_flops", "read_dataset", "storage_attributes", "storage_dtype", "to_storage"]

#: numpy's bfloat16 (ml_dtypes); ``np.dtype("bfloat16")`` is this dtype.  Bound on first use
#: (:func:`bfloat16`, through the module's ``__getattr__``): importing this module loads no ml_dtypes.
BFLOAT16: np.dtype
#: Attribute of a dataset stored as raw bits, naming the type its bits hold.
TYPE_ATTRIBUTE = "element_type"
#: The integer type whose bits a bfloat16 dataset holds.
_BITS = np.dtype(np.uint16)


def bfloat16() -> np.dtype:
    """numpy's bfloat16 (ml_dtypes, imported on the first call); ``np.dtype("bfloat16")`` is it from then on."""
    kind = globals().get("BFLOAT16")
    if kind is None:
        import ml_dtypes  # noqa: PLC0415 - only where bfloat16 is used: the import costs most of a second

        kind = globals()["BFLOAT16"] = np.dtype(ml_dtypes.bfloat16)
    return kind


def __getattr__(name: str):
    if name == "BFLOAT16":
        return bfloat16()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def numpy_dtype(name) -> np.dtype:
    """The numpy dtype of a type name (``bfloat16`` included: ml_dtypes is imported for it)."""
    return bfloat16() if str(name) == "bfloat16" else np.dtype(name)


def is_bfloat16(dtype) -> bool:
    """Whether ``dtype`` (a dtype, a type or a name) is bfloat16; loads no ml_dtypes to say no."""
    if isinstance(dtype, str):
        return dtype == "bfloat16"
    # Before ml_dtypes is imported no bfloat16 dtype, type or array exists.
    return "ml_dtypes" in sys.modules and np.dtype(dtype) == bfloat16()


def storage_dtype(dtype) -> np.dtype:
    """The dtype HDF5 holds a ``dtype`` array in: ``uint16`` for bfloat16, else ``dtype`` itself."""
    return _BITS if is_bfloat16(dtype) else np.dtype(dtype)


def storage_attributes(dtype) -> dict[str, str]:
    """Attributes the dataset of a ``dtype`` array carries (``element_type`` for bfloat16)."""
    return {TYPE_ATTRIBUTE: "bfloat16"} if is_bfloat16(dtype) else {}


def to_storage(array: np.ndarray) -> np.ndarray:
    """``array`` as HDF5 stores it: a bfloat16 array's bits as ``uint16`` (a view, no copy)."""
    return array.view(_BITS) if is_bfloat16(array.dtype) else array


def from_storage(data: np.ndarray, attrs) -> np.ndarray:
    """Undo :func:`to_storage`: ``uint16`` data marked ``element_type = "bfloat16"`` viewed as bfloat16."""
    kind = attrs.get(TYPE_ATTRIBUTE, "")
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind == "bfloat16" and data.dtype == _BITS:
        return data.view(bfloat16())
    return data


def stored_type(dtype, attrs) -> np.dtype:
    """The element type a dataset of ``dtype`` with ``attrs`` holds (bfloat16 for marked raw bits)."""
    return from_storage(np.empty(0, dtype=dtype), attrs).dtype


def read_dataset(dataset, selection=()) -> np.ndarray:
    """``dataset[selection]`` with bfloat16 raw bits returned as bfloat16 (h5py ``Dataset``)."""
    return from_storage(dataset[selection], dataset.attrs)


def host_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for bfloat16 on the host: float32 operands, float32 BLAS sum, the float32 result.

    The caller rounds to bfloat16 once, after adding what it accumulates
    (cuBLAS with ``CUBLAS_COMPUTE_32F`` and ``beta = 1`` does the same).
    Exact products of bfloat16 values fit float32 (8 + 8 bits of mantissa),
    so only the float32 sums round before the final rounding to bfloat16.
    """
    return np.matmul(a.astype(np.float32), b.astype(np.float32))


def product_flops(m: int, n: int, k: int, dtype: str) -> float:
    """Floating-point operations of one product ``C = A·B`` (a complex multiply-add is 8): the one place they are counted."""
    return (8.0 if str(dtype).startswith("complex") else 2.0) * m * n * k
