"""What the CPU backend and the host's memory figures promise, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/execution/backend.py left alive or without a
test on a CPU (docs/mutation.md).  The host's memory is read from files the kernel writes
(``/proc/meminfo``, ``/proc/self/cgroup`` and the cgroup tree) and from ``sysconf``: the tests hand the
module a small stand-in file system and ``sysconf`` of their own, so that each figure is known.  The GPU
backend's description and copy are read through the stand-in cupy of ``tests/test_backend_streams.py``.
"""

from __future__ import annotations

import contextlib
import io
import resource
import types

import numpy as np
import pytest

from hpcmm.errors import InputError
from hpcmm.execution import backend as backend_module
from hpcmm.execution.backend import CpuBackend, GpuBackend, gpu_count, host_memory, make_backend, orders

PAGE = 4096
MEMINFO = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:   3000 kB\nCached:  50 kB\n"


def _host(monkeypatch, files: dict[str, str], pages=1000, avail_pages=20):
    """The module sees ``files`` (path: text; any other path is missing) and a host of ``pages`` pages."""

    def fake_open(path, *args, **kwargs):
        if path not in files:
            raise FileNotFoundError(path)
        return io.StringIO(files[path])

    def sysconf(name):
        values = {"SC_PHYS_PAGES": pages, "SC_PAGE_SIZE": PAGE}
        if avail_pages is not None:
            values["SC_AVPHYS_PAGES"] = avail_pages
        if name not in values:
            raise ValueError(name)
        return values[name]

    monkeypatch.setattr(backend_module, "open", fake_open, raising=False)
    monkeypatch.setattr(backend_module, "os", types.SimpleNamespace(sysconf=sysconf))


# -- the host's memory ------------------------------------------------------------------


def test_free_memory_is_memavailable_in_bytes(monkeypatch):
    _host(monkeypatch, {"/proc/meminfo": MEMINFO})
    assert host_memory() == (3000 * 1024, 1000 * PAGE)


@pytest.mark.parametrize("meminfo", [None, "MemTotal: 1000 kB\nMemFree: 100 kB\n", "MemAvailable: lots\n"],
                         ids=["no_file", "no_line", "not_a_number"])
def test_without_memavailable_free_memory_is_the_available_pages(monkeypatch, meminfo):
    _host(monkeypatch, {} if meminfo is None else {"/proc/meminfo": meminfo})
    assert host_memory() == (20 * PAGE, 1000 * PAGE)


def test_without_available_pages_everything_counts_as_free(monkeypatch):
    _host(monkeypatch, {}, avail_pages=None)
    assert host_memory() == (1000 * PAGE, 1000 * PAGE)


V2 = "/sys/fs/cgroup"


@pytest.mark.parametrize("levels, free", [
    # the job's limit, one level above the step's (the tightest wins)
    ({"": "max", "/slurm": "max", "/slurm/job_7": "500000", "/slurm/job_7/stepX": "900000"}, 500000),
    # the root's limit, with levels between that set none or are hidden
    ({"": "400000", "/slurm/job_7": "max", "/slurm/job_7/stepX": "900000"}, 400000),
    # the step's own limit, every level above it unlimited
    ({"": "max", "/slurm": "max", "/slurm/job_7": "max", "/slurm/job_7/stepX": "300000"}, 300000),
    # the level of the job alone set, the step's hidden
    ({"/slurm/job_7": "200000"}, 200000),
    # no level sets one
    ({"": "max", "/slurm/job_7": "max"}, 3000 * 1024),
], ids=["job", "root", "step", "between_hidden", "none"])
def test_a_cgroup_v2_limit_caps_free_memory(monkeypatch, levels, free):
    files = {"/proc/meminfo": MEMINFO, "/proc/self/cgroup": "garbage\n0::/slurm/job_7/stepX\n"}
    files.update({f"{V2}{level}/memory.max": text + "\n" for level, text in levels.items()})
    _host(monkeypatch, files)
    assert host_memory() == (free, 1000 * PAGE)


def test_a_cgroup_v1_memory_hierarchy_caps_free_memory(monkeypatch):
    """v1: the hierarchy whose controllers include ``memory``; the others (and a v2 line) pass by.  A name is
    taken as written, blanks and colons included."""
    files = {"/proc/meminfo": MEMINFO,
             "/proc/self/cgroup": "12:cpu,cpuacct:/other\n5:hugetlb,memory:/job:1/task 0 \n1:name=systemd:/x\n",
             "/sys/fs/cgroup/memory/other/memory.limit_in_bytes": "1000\n",
             "/sys/fs/cgroup/memory/job:1/memory.limit_in_bytes": "250000\n",
             "/sys/fs/cgroup/memory/job:1/task 0 /memory.limit_in_bytes": "9223372036854771712\n",
             "/sys/fs/cgroup/memory/job:1/task 0/memory.limit_in_bytes": "1000\n",
             f"{V2}/x/memory.max": "1000\n"}
    _host(monkeypatch, files)
    assert host_memory() == (250000, 1000 * PAGE)


def test_a_limit_above_the_hosts_memory_changes_nothing(monkeypatch):
    files = {"/proc/meminfo": MEMINFO, "/proc/self/cgroup": "0::/a\n", f"{V2}/a/memory.max": f"{1000 * PAGE}\n"}
    _host(monkeypatch, files)
    assert host_memory() == (3000 * 1024, 1000 * PAGE)
    files[f"{V2}/a/memory.max"] = f"{1000 * PAGE - 1}\n"
    assert host_memory() == (3000 * 1024, 1000 * PAGE)  # below the host's memory, above what is free
    files[f"{V2}/a/memory.max"] = "4096\n"
    assert host_memory() == (4096, 1000 * PAGE)


def test_without_a_cgroup_file_there_is_no_limit(monkeypatch):
    _host(monkeypatch, {"/proc/meminfo": MEMINFO, f"{V2}/memory.max": "4096\n"})
    assert host_memory() == (3000 * 1024, 1000 * PAGE)


def test_the_cpu_backend_reports_the_hosts_memory(monkeypatch):
    _host(monkeypatch, {"/proc/meminfo": MEMINFO})
    assert CpuBackend().memory_info() == (3000 * 1024, 1000 * PAGE)


def test_peak_memory_is_this_processs_high_water_mark_in_bytes():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = CpuBackend().peak_memory()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert before <= peak <= after


# -- orders --------------------------------------------------------------------------------


def test_an_array_of_two_columns_a_stride_apart_has_no_order():
    assert orders(np.empty((3, 4))[:, ::2]) == {}
    assert orders(np.empty((4, 3), order="F")[::2, :]) == {}


def test_one_element_has_leading_dimension_one():
    assert orders(np.empty((1, 1))) == {"C": 1, "F": 1}


def test_leading_dimensions_are_whole_numbers():
    found = orders(np.empty((6, 16))[:, :5]) | orders(np.empty((16, 3), order="F")[:5])
    assert found == {"C": 16, "F": 16} and all(type(ld) is int for ld in found.values())


# -- the CPU backend ------------------------------------------------------------------------


def test_a_cpu_backend_has_device_zero_nothing_exported_and_no_streams():
    be = CpuBackend()
    assert (be.device_id, be.exported_bytes, be.compute_stream, be.comm_stream) == (0, 0, None, None)
    assert (be.name, be.on_gpu, be.xp) == ("numpy", False, np)
    assert be.describe() == {"backend": "numpy"}
    assert be.device_used() == 0 and be.event_done(be.event()) is True and be.gemm_rows() == []
    assert be.use_gemm_library("auto", sharers=2) is None and be.gemm_rows() == []


def test_host_time_between_two_events():
    assert CpuBackend().elapsed(1.25, 3.75) == 2.5


def test_copies_and_host_arrays():
    be, gen = CpuBackend(), np.random.default_rng(5)
    src = gen.random((3, 4))
    dst = np.zeros((3, 4))
    be.copy(dst, src)
    assert np.array_equal(dst, src)
    f = be.from_host(src, order="F")
    assert f.flags.f_contiguous and np.array_equal(f, src)
    c = be.from_host(src.T)
    assert c.flags.c_contiguous and np.array_equal(c, src.T)
    assert be.from_host([[1.5, 2.5]]).tolist() == [[1.5, 2.5]]
    pinned = be.pinned_empty(10)
    assert (pinned.dtype, pinned.shape) == (np.uint8, (10,))
    assert be.empty((2, 3), np.float32, order="F").flags.f_contiguous
    assert be.to_host(src) is src


def test_accumulating_through_numpy_keeps_each_shape_apart(monkeypatch):
    """Without BLAS's beta = 1, C += A·B goes through a scratch array per shape and type."""
    monkeypatch.setattr(backend_module, "ACCUMULATE_IN_BLAS", False)
    be, gen = CpuBackend(), np.random.default_rng(11)
    for m, n, w in ((4, 3, 5), (2, 6, 3), (4, 3, 2)):
        a, b, c = gen.random((m, w)), gen.random((w, n)), gen.random((m, n))
        expected = c + a @ b
        be.gemm(a, b, c, accumulate=True)
        np.testing.assert_allclose(c, expected, rtol=1e-14, atol=0)


# -- the GPU backend's pure parts, through a stand-in cupy --------------------------------


def test_a_gpu_copy_from_the_host_is_row_major_unless_asked():
    calls = []

    class Stream:
        def synchronize(self):
            calls.append("synchronize")

    def asarray(array, order="K"):
        calls.append(f"copy {np.asarray(array).shape} {order}")
        return np.asarray(array)

    be = GpuBackend.__new__(GpuBackend)
    be.cupy = types.SimpleNamespace(asarray=asarray, cuda=types.SimpleNamespace(get_current_stream=Stream))
    be.device = contextlib.nullcontext()
    be.from_host(np.ones((2, 3)))
    assert calls == ["copy (2, 3) C", "synchronize"]


def test_a_gpu_describes_its_name_uuid_pci_address_and_index():
    be = GpuBackend.__new__(GpuBackend)
    props = {"name": "H100 stand-in", "uuid": bytes(range(16, 32)), "pciDomainID": 1, "pciBusID": 0x1a,
             "pciDeviceID": 0x1f}
    be.cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceProperties=lambda device: props)))
    be.device_id = 3
    assert be.describe() == {"backend": "cupy", "gpu_name": "H100 stand-in",
                             "gpu_uuid": "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f", "gpu_pci": "0001:1a:1f.0",
                             "gpu_index": "3"}
    props.clear()
    props["name"] = "bare"
    assert be.describe()["gpu_pci"] == "0000:00:00.0"


# -- choosing a backend ---------------------------------------------------------------------


def _cupy(count):
    def get_count():
        if isinstance(count, Exception):
            raise count
        return count

    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=get_count)))


@pytest.mark.parametrize("cupy, count", [(None, 0), (_cupy(RuntimeError("no driver")), 0), (_cupy(3), 3)],
                         ids=["no_cupy", "no_driver", "three"])
def test_gpu_count(monkeypatch, cupy, count):
    monkeypatch.setattr(backend_module, "_import_cupy", lambda: cupy)
    assert gpu_count() == count and type(gpu_count()) is int


def test_make_backend_takes_the_cpu_where_asked_or_where_no_gpu_is(monkeypatch):
    monkeypatch.setattr(backend_module, "gpu_count", lambda: 0)
    assert type(make_backend("cpu", 0, 1)) is CpuBackend
    assert type(make_backend("auto", 3, 4)) is CpuBackend
    with pytest.raises(InputError) as caught:
        make_backend("gpu", 0, 1)
    assert str(caught.value) == "--device=gpu: no usable GPU (cupy missing or no CUDA device visible)"


@pytest.mark.parametrize("device", ["auto", "gpu"])
def test_ranks_take_the_gpus_round_robin(monkeypatch, device):
    monkeypatch.setattr(backend_module, "gpu_count", lambda: 2)
    monkeypatch.setattr(backend_module, "GpuBackend", lambda device_id: ("gpu", device_id))
    assert [make_backend(device, rank, 5) for rank in range(5)] == [("gpu", r % 2) for r in range(5)]
    monkeypatch.setattr(backend_module, "gpu_count", lambda: (_ for _ in ()).throw(AssertionError("asked")))
    assert type(make_backend("cpu", 0, 1)) is CpuBackend  # the CPU asks for no GPU
