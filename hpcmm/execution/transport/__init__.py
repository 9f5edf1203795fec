"""Moving blocks between ranks: same node (CUDA IPC, MPI shared windows), across nodes (MPI).

Path names, as they appear in the HDF5 file and the summary:

``ipc``     CUDA IPC: a device-to-device copy from a node peer's mapped buffer
``shm``     MPI shared-memory window: a host copy from a node peer's segment
``mpi``     MPI with the backend's own buffers (device buffers on GPU: CUDA-aware)
``staged``  device → pinned host → MPI → pinned host → device
"""

from .channel import PanelChannel, Transfer, select_paths
from .detect import CudaAwareness, decide

PATHS = ("ipc", "shm", "mpi", "staged")

__all__ = ["PATHS", "CudaAwareness", "PanelChannel", "Transfer", "decide", "select_paths"]
