"""The cost model's calibration and command helpers, one behaviour a test.

Written against the mutants that mutation testing of the end of hpcmm/model/cost.py left alive
(docs/mutation.md): the fits of ``bench transport`` figures (:func:`~hpcmm.model.cost.fit_link`,
:func:`~hpcmm.model.cost.fit_staged`, :func:`~hpcmm.model.cost.fit_staged_by_size`), the links a
transport file gives a description (:func:`~hpcmm.model.cost.relink`), the sweep's timings on a device
whose clock is virtual, the description written by ``--save``, and what ``model check`` reads from a
results file.  Every figure is exact: the samples lie on the model's own lines, and the stand-in device
advances its clock by the seconds the test gives it.
"""

from __future__ import annotations

import os
import secrets
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

from hpcmm.errors import InputError
from hpcmm.io import h5io
from hpcmm.model import cost as model
from hpcmm.model.cost import Machine, builtin

MIB = 1 << 20


def _exact(value, rel=1e-12):
    """``pytest.approx`` without its absolute tolerance of 1e-12 (docs/mutation.md)."""
    return pytest.approx(value, rel=rel, abs=0)


# -- fit_link: t = latency + bytes / rate, relative least squares ----------------------------------------
def test_fit_link_gives_back_the_line_it_was_made_on():
    samples = [(b, 20e-6 + b / 50e9) for b in (1 << 20, 1 << 24, 1 << 28)]
    gbps, lat = model.fit_link(samples)
    assert gbps == _exact(50.0, 1e-10) and lat == _exact(20.0, 1e-8)
    ints = [(1 << 20, 1), (1 << 21, 2), (1 << 22, 4)]  # whole seconds: 1 MiB a second, no latency
    assert model.fit_link(ints) == (pytest.approx(MIB / 1e9, rel=1e-12, abs=0), pytest.approx(0.0, abs=1e-9))


def test_fit_link_weighs_each_sample_by_its_own_size():
    """Noisy samples: the fit minimises the relative errors, ((lat + bytes × inv) − t) / t."""
    samples = [(1 << 20, 100e-6), (1 << 22, 130e-6), (1 << 24, 600e-6), (1 << 26, 1.9e-3)]
    x = np.array([s[0] for s in samples], dtype=float)
    t = np.array([s[1] for s in samples])
    # the normal equations of sum(((lat + x inv) / t - 1) ** 2), solved by hand
    u, v = 1 / t, x / t
    lat, inv = np.linalg.solve([[u @ u, u @ v], [u @ v, v @ v]], [u.sum(), v.sum()])
    gbps, lat_us = model.fit_link(samples)
    assert gbps == _exact(1 / inv / 1e9, 1e-9) and lat_us == _exact(lat * 1e6, 1e-9)
    plain = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), t, rcond=None)[0]  # unweighted: another line
    assert abs(1 / plain[1] / 1e9 - gbps) > 0.01 * gbps


def test_fit_link_of_one_size_is_its_rate_without_latency():
    assert model.fit_link([(8e9, 2.0)]) == (4.0, 0.0)
    assert model.fit_link([(8e9, 1.0), (8e9, 3.0)]) == (4.0, 0.0)  # the mean bytes over the mean time
    gbps, lat = model.fit_link([(1000, 1e-3), (1001, 1e-3 + 1e-9)])  # one byte apart is two sizes: a line
    assert gbps == _exact(1.0, 1e-6) and lat == _exact(999.0, 1e-6)


def test_fit_link_keeps_a_rate_where_larger_transfers_ran_faster():
    """A negative slope is noise: the rate of the largest transfer alone, no latency."""
    samples = [(1 << 20, 2e-3), (1 << 26, 1e-3), (1 << 24, 1.5e-3)]
    assert model.fit_link(samples) == ((1 << 26) / 1e-3 / 1e9, 0.0)


def test_fit_link_of_times_that_do_not_grow_with_the_size_is_the_largest_transfers_rate():
    """Equal times for two sizes fit a slope of rounding error, not a rate of 1e16 GB/s: the largest alone."""
    assert model.fit_link([(1e6, 1e-3), (2e6, 1e-3)]) == (2.0, 0.0)
    assert model.fit_link([(1e6, 1e-3), (2e6, 1e-3), (4e6, 1e-3 * (1 + 1e-9))]) == (pytest.approx(4.0 / (1 + 1e-9)), 0.0)


def test_fit_link_takes_no_negative_latency():
    samples = [(b, -5e-6 + b / 10e9) for b in (1 << 20, 1 << 24)]
    gbps, lat = model.fit_link(samples)
    assert gbps == _exact(10.0, 1e-9) and lat == 0.0


@pytest.mark.parametrize("samples", [[], [(1 << 20, 0.0)], [(1 << 20, 1e-3), (1 << 22, 0.0)],
                                     [(1 << 20, 1e-3), (1 << 22, -1e-3)]], ids=["none", "zero", "one_zero",
                                                                                 "negative"])
def test_fit_link_refuses_transfers_without_a_positive_time(samples):
    with pytest.raises(InputError) as caught:
        model.fit_link(samples)
    assert str(caught.value) == "fit_link: needs transfers with positive times"


# -- fit_staged: the host MPI's share of staged transfers ------------------------------------------------
def _staged(gbps, lat_us, sizes=(4 * MIB, 16 * MIB, 64 * MIB), copy_gbps=1e9, chunk=1 << 40, k=1):
    """Transfers timed end to end: the host MPI at ``gbps`` shared by ``k`` pairs, plus the first and last
    chunk's copies at ``copy_gbps``."""
    probe = Machine("t", host_copy_gbps=copy_gbps, staged_chunk_bytes=chunk)
    out = []
    for b in sizes:
        fill, drain = model.staged_copy_seconds(b, probe)
        out.append((b, lat_us * 1e-6 + b * k / (gbps * 1e9) + float(fill) + float(drain)))
    return out


def test_fit_staged_takes_the_chunk_copies_off():
    single = _staged(8.0, 50.0, copy_gbps=20.0, chunk=8 * MIB)
    gbps, lat, host = model.fit_staged(single, {}, 20.0, 8 * MIB)
    assert gbps == _exact(8.0, 1e-9) and lat == _exact(50.0, 1e-6) and host is None


def test_fit_staged_keeps_the_raw_time_where_the_copies_would_take_it_all():
    """Copies slower than assumed leave nothing for the host MPI: the time end to end is fitted."""
    single = [(b, 1e-4 + b / 5e9) for b in (4 * MIB, 16 * MIB)]
    assert model.fit_staged(single, {}, 0.001, 1 << 40)[:2] == model.fit_link(single)


def test_fit_staged_keeps_a_time_the_copies_leave_exactly_nothing_of():
    """A transfer whose copies take exactly its time keeps its raw time: no sample of zero seconds."""
    chunk = 1 << 20
    copy_gbps = 2**30 / 1e9  # one MiB in exactly 2**-10 s
    probe = Machine("t", host_copy_gbps=copy_gbps, staged_chunk_bytes=chunk)
    fill, drain = model.staged_copy_seconds(chunk, probe)
    assert float(fill) == float(drain) == 2.0**-10
    single = [(chunk, 2.0**-9), (4 * chunk, 2.0**-9 + 1e-3)]
    gbps, lat, _ = model.fit_staged(single, {}, copy_gbps, chunk)
    assert gbps > 0 and lat >= 0


def test_fit_staged_host_aggregate_is_the_best_k_times_rate_of_two_pairs_or_more():
    single = _staged(8.0, 50.0)
    two = _staged(0.2, 50.0, k=1)  # each of 2 pairs at 0.2 GB/s: the host moved 0.4 GB/s
    three = _staged(0.1, 50.0)  # 0.3 GB/s
    assert model.fit_staged(single, {2: two}, 1e9, 1 << 40)[2] == _exact(0.4, 1e-9)
    assert model.fit_staged(single, {3: three, 2: two}, 1e9, 1 << 40)[2] == _exact(0.4, 1e-9)
    assert model.fit_staged(single, {3: three}, 1e9, 1 << 40)[2] == _exact(0.3, 1e-9)
    # one pair at a time is not a concurrent run, and a K without rows says nothing
    assert model.fit_staged(single, {1: two}, 1e9, 1 << 40)[2] is None
    assert model.fit_staged(single, {2: []}, 1e9, 1 << 40)[2] is None


# -- model check: what a results file says, and the line that refuses a bad one ----------------------------
def _results(path, m=4096, n=4096, k=4096, ranks=4, seconds=0.03, **kw):
    from test_model import _results_file

    return _results_file(path, m, n, k, ranks, seconds, **kw)


def _edit(path, where, key, value=None, delete=False):
    """Set (or delete) attribute ``key`` of ``where`` ("/", "config", "summary") in a results file."""
    with h5py.File(path, "r+") as f:
        attrs = f.attrs if where == "/" else f[where].attrs
        if delete:
            del attrs[key]
        else:
            attrs[key] = value
    return path


def _refusal(path, machine="h200x2"):
    with pytest.raises(InputError) as caught:
        model.check_rows([str(path)], builtin(machine))
    return str(caught.value)


def test_check_needs_files():
    with pytest.raises(InputError) as caught:
        model.check_rows([], builtin("h200x2"))
    assert str(caught.value) == "model check: give the results files (FILE.h5 ...) of measured runs"


#: (where, attribute, value, the reason after "model check: PATH: ")
BAD_VALUES = [
    ("/", "ranks", 0, "ranks=0: expected an integer from 1 to 9223372036854775807"),
    ("/", "ranks", 2.5, "ranks=2.5: expected an integer from 1 to 9223372036854775807"),
    ("/", "ranks", True, "ranks=True: expected an integer from 1 to 9223372036854775807"),
    ("/", "ranks", "4", "ranks='4': expected an integer from 1 to 9223372036854775807"),
    ("config", "m", 0, "config m=0: expected an integer from 1 to 9223372036854775807"),
    ("config", "n", -3, "config n=-3: expected an integer from 1 to 9223372036854775807"),
    ("config", "k", float("inf"), "config k=inf: expected an integer from 1 to 9223372036854775807"),
    ("config", "dtype", 8, "config dtype=8: expected a text"),
    ("config", "ranks_per_node", -1, "config ranks_per_node=-1: expected an integer from 0 to 9223372036854775807"),
    ("config", "grid", 4, "config grid=4: expected a text"),
    # a value of 60 characters is shown whole, a longer one cut to 57 and "..."
    ("config", "grid", np.array([7] * 16 + [77]), "config grid=array([ 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, "
                                                  "77]): expected a text"),
    ("config", "grid", np.array([7] * 18), "config grid=array([7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,...: "
                                           "expected a text"),
    ("config", "panel", 0, "config panel=0: expected an integer from 1 to 9223372036854775807"),
    ("config", "prefetch", -1, "config prefetch=-1: expected an integer from 0 to 9223372036854775807"),
    ("summary", "seconds", 0.0, "summary seconds=0.0: expected a positive number of seconds"),
    ("summary", "seconds", -1.0, "summary seconds=-1.0: expected a positive number of seconds"),
    ("summary", "seconds", float("inf"), "summary seconds=inf: expected a positive number of seconds"),
    ("summary", "seconds", "fast", "summary seconds='fast': expected a positive number of seconds"),
    ("summary", "seconds", True, "summary seconds=True: expected a positive number of seconds"),
]


@pytest.mark.parametrize("where, key, value, reason", BAD_VALUES,
                         ids=[f"{w}-{k}-{i}" for i, (w, k, _, _) in enumerate(BAD_VALUES)])
def test_check_refuses_a_bad_value_naming_its_field(where, key, value, reason, tmp_path):
    path = _edit(_results(tmp_path / "r.h5"), where, key, value)
    assert _refusal(path) == f"model check: {path}: {reason}"


def test_check_refuses_a_bad_topology_entry(tmp_path):
    path = _results(tmp_path / "r.h5")
    with h5py.File(path, "r+") as f:
        f["topology/local_size"][1] = 0
    assert _refusal(path) == f"model check: {path}: topology local_size=0: expected an integer from 1 to " \
                             "9223372036854775807"


def test_check_names_what_a_file_lacks(tmp_path):
    """A missing config field is named as an attribute; h5py's own words for a missing root attribute."""
    path = _edit(_results(tmp_path / "a.h5"), "config", "dtype", delete=True)
    assert _refusal(path) == f"model check: {path}: not a results file the model can read (KeyError: no " \
                             "attribute 'dtype')"
    path = _edit(_results(tmp_path / "b.h5"), "/", "ranks", delete=True)
    message = _refusal(path)  # h5py's words, which change between its versions
    assert message.startswith(f"model check: {path}: not a results file the model can read (KeyError: \"")
    assert message.endswith(" attribute (can't locate attribute: 'ranks')\")") and "\n" not in message


def test_check_says_once_that_a_file_is_not_hdf5(tmp_path):
    path = tmp_path / "note.h5"
    path.write_text("a note\n")
    assert _refusal(path) == f"model check: {path}: not an HDF5 file"
    missing = tmp_path / "missing.h5"
    assert _refusal(missing) == f"model check: {missing}: no such file"


def test_check_takes_whole_floats_and_the_largest_integer(tmp_path):
    path = _edit(_results(tmp_path / "r.h5"), "config", "m", 4096.0)
    _edit(path, "/", "ranks", np.float32(4.0))
    (row,) = model.check_rows([path], builtin("h200x2"))
    assert row.problem.m == 4096 and row.ranks == 4
    assert model._whole(np.int64(2**63 - 1), "x") == 2**63 - 1  # the bound itself is taken


def _predicted(path, machine="h200x2"):
    (row,) = model.check_rows([str(path)], builtin(machine) if isinstance(machine, str) else machine)
    return row


def _want(ranks=4, m=4096, n=4096, k=4096, dtype="float64", machine="h200x2", **kw):
    kw = dict(dict(ranks_per_host=4, panel=1024, prefetch=1, cuda_aware=False, grid=(2, 2), step_order="common",
                   balance="none"), **kw)
    return model.predict(model.Problem(m, n, k, dtype), ranks, builtin(machine), **kw).seconds


def test_check_predicts_tf32_and_the_files_type(tmp_path):
    tf32 = _results(tmp_path / "t.h5", dtype="float32", tf32=True)
    f32 = _results(tmp_path / "f.h5", dtype="float32")
    assert _predicted(tf32).problem.dtype == "tf32" and _predicted(f32).problem.dtype == "float32"
    assert _predicted(tf32).predicted == _exact(_want(dtype="tf32"))
    assert _predicted(f32).predicted == _exact(_want(dtype="float32"))
    assert _want(dtype="tf32") != _want(dtype="float32") != _want()


def test_check_takes_cuda_awareness_from_the_file_and_yes_without_it(tmp_path):
    aware = _results(tmp_path / "a.h5", rpn=1, cuda_aware_mpi_decision=True)
    unset = _edit(_results(tmp_path / "u.h5", rpn=1), "config", "cuda_aware_mpi_decision", delete=True)
    assert _want(cuda_aware=True, ranks_per_node=1) != _want(cuda_aware=False, ranks_per_node=1)
    assert _predicted(aware).predicted == _exact(_want(cuda_aware=True, ranks_per_node=1))
    assert _predicted(unset).predicted == _exact(_want(cuda_aware=True, ranks_per_node=1))


def test_check_takes_the_ranks_per_host_and_prefetch_of_the_file(tmp_path):
    path = _results(tmp_path / "r.h5", ranks=2, grid="1x2", prefetch=0)
    with h5py.File(path, "r+") as f:
        f["topology/local_size"][...] = 1
    kw = dict(ranks=2, grid=(1, 2), machine="h200x8-ndr")  # one rank a host, not both on one
    want = _want(ranks_per_host=1, prefetch=0, **kw)
    assert want != _want(ranks_per_host=2, prefetch=0, **kw) and want != _want(ranks_per_host=1, prefetch=1, **kw)
    assert _predicted(path, "h200x8-ndr").predicted == _exact(want)


def test_check_reads_a_balance_only_where_the_file_names_one(tmp_path):
    """Three ranks on two GPUs: a file without ``balance`` ran equal blocks."""
    kw = dict(ranks=3, ranks_per_host=3, grid=(1, 3), ranks_per_node=3)
    assert _want(balance="none", **kw) != _want(balance="share", **kw)
    plain = _results(tmp_path / "p.h5", ranks=3, rpn=3, grid="1x3")
    shared = _results(tmp_path / "s.h5", ranks=3, rpn=3, grid="1x3", balance="product")
    assert _predicted(plain).predicted == _exact(_want(balance="none", **kw))
    assert _predicted(shared).predicted == _exact(_want(balance="share", **kw))


def test_check_reads_a_25d_file_without_a_grid(tmp_path):
    """hpcmm writes no grid for a 2.5d run (the layers have their own): the file is still read."""
    path = _results(tmp_path / "r.h5", ranks=8, rpn=8, grid="", algo="2.5d:2")
    with h5py.File(path, "r+") as f:
        f["topology/local_size"][...] = 8
    row = _predicted(path)
    want = model.predict(model.Problem(4096, 4096, 4096), 8, builtin("h200x2"), ranks_per_node=8, ranks_per_host=8,
                         panel=1024, prefetch=1, algo="2.5d:2", cuda_aware=False, step_order="common",
                         balance="none")
    assert row.algo == "2.5d:2" and row.predicted == _exact(want.seconds)


def test_check_bounds_the_steps_by_the_files_panel_and_layers(tmp_path):
    """The bound on simulated steps counts the file's own panel, and 2.5d's layers share k."""
    narrow = _results(tmp_path / "n.h5", m=64, n=64, k=40000, ranks=1, grid="1x1", panel=1)
    with h5py.File(narrow, "r+") as f:
        f["topology/local_size"][...] = 1
    assert _refusal(narrow) == f"model check: {narrow}: --m=64 --n=64 --k=40000: the model would simulate at " \
                               "least 40000 steps (k over a panel of 1), more than 32768; give a wider --panel " \
                               "or a smaller problem"
    layered = _results(tmp_path / "l.h5", m=64, n=64, k=2**17, ranks=2, rpn=2, grid="", panel=1, algo="2.5d:2")
    assert _refusal(layered) == f"model check: {layered}: --m=64 --n=64 --k=131072: the model would simulate at " \
                                "least 65536 steps (k over a panel of 1), more than 32768; give a wider --panel " \
                                "or a smaller problem"


def test_check_bounds_the_rank_steps_by_the_files_grid(tmp_path):
    """One block of k per grid column: a 1 x 2048 grid takes 2048 steps on each of 2048 ranks."""
    path = _results(tmp_path / "r.h5", m=2048, n=2048, k=2048, ranks=2048, grid="1x2048", panel=2048)
    assert _refusal(path).endswith("the model would simulate at least 2048 steps (one per block of k on the grid) "
                                   "on each of 2048 ranks, more than 1048576 rank-steps")


def test_check_shows_a_dash_for_a_file_without_paths(tmp_path):
    none = _edit(_results(tmp_path / "a.h5"), "summary", "paths", delete=True)
    empty = _edit(_results(tmp_path / "b.h5"), "summary", "paths", np.array([], dtype="S4"))
    assert _predicted(none).paths == "-" and _predicted(empty).paths == "-"
    assert _predicted(_results(tmp_path / "c.h5")).paths == "ipc,staged"


def test_check_tells_apart_runs_of_other_ranks_per_node(tmp_path):
    """Two runs alike but for --ranks-per-node are no repeats of one another."""
    files = [_results(tmp_path / "a.h5", rpn=2), _results(tmp_path / "b.h5", rpn=4)]
    rows = model.check_rows(files, builtin("h200x2"))
    assert [r.ranks_per_node for r in rows] == [2, 4]
    assert "repeated runs:" not in model.check_table(files, builtin("h200x2"))


def test_check_table_repeats_and_gains_as_a_user_reads_them(tmp_path):
    """Three repeats of summa under MPS, two of 2.5d beside one summa, and a 2.5d run with no summa beside it
    (listed first): each repeat's line, and a gain line for each algorithm run beside summa."""
    machine = builtin("h200x2")
    alone = [_results(tmp_path / "alone.h5", m=2048, n=2048, k=2048, seconds=0.004, algo="2.5d:2", rpn=2)]
    mps = [_results(tmp_path / f"mps{i}.h5", seconds=s, rpn=2, mps=True) for i, s in enumerate((0.05, 0.03, 0.04))]
    pair = [_results(tmp_path / "s.h5", m=8192, n=8192, k=8192, seconds=0.2, rpn=2),
            *[_results(tmp_path / f"t{i}.h5", m=8192, n=8192, k=8192, seconds=s, algo="2.5d:2", rpn=2)
              for i, s in enumerate((0.1, 0.14))]]
    files = alone + mps + pair
    rows = model.check_rows(files, machine)
    lines = model.check_table(files, machine).split("\n")
    start = lines.index("repeated runs:")
    assert lines[start - 1] == ""
    mps_rows, twofive = rows[1:4], rows[5:7]
    med = float(np.median([r.predicted for r in mps_rows]))
    assert lines[start + 1] == (f"{'4096x4096x4096 float64 4 ranks rpn 2 MPS summa':<52} 3 runs: min 0.03 s, median "
                                f"0.04 s, max 0.05 s, spread 66.7 %, error of the median {100 * (med / 0.04 - 1):.1f} %")
    med = float(np.median([r.predicted for r in twofive]))
    assert lines[start + 2] == (f"{'8192x8192x8192 float64 4 ranks rpn 2 2.5d:2':<52} 2 runs: min 0.1 s, median "
                                f"0.12 s, max 0.14 s, spread 40.0 %, error of the median {100 * (med / 0.12 - 1):.1f} %")
    assert lines[start + 3] == ""
    assert lines[start + 4] == (f"{'gain over summa':<44}{'algo':>8}{'measured':>10}{'predicted':>11}"
                                f"{'difference':>12}")
    (label, algo, meas, pred), = model.gain_rows(rows)
    assert (label, algo) == ("8192x8192x8192 float64 4 ranks rpn 2", "2.5d:2")
    assert meas == _exact(0.2 / 0.12 - 1) and pred == _exact(rows[4].predicted / med - 1)
    assert lines[start + 5] == (f"{label:<44}{algo:>8}{100 * meas:>9.1f}%{100 * pred:>10.1f}%"
                                f"{100 * (pred - meas):>9.1f} pp")
    assert lines[start + 6:] == []


def _made_on(path, ranks=4, **columns):
    """Replace /topology by a table (as hpcmm writes it) of ``local_size`` and the given text columns."""
    fields = [("local_size", np.int64)] + [(c, h5py.string_dtype()) for c in columns]
    data = np.empty(ranks, dtype=fields)
    data["local_size"] = ranks
    for c, value in columns.items():
        data[c] = value
    with h5py.File(path, "r+") as f:
        del f["topology"]
        f.create_dataset("topology", data=data)
    return path


def test_check_reads_the_machine_a_file_was_made_on_from_its_topology_table(tmp_path):
    gpus = _made_on(_results(tmp_path / "g.h5"), backend="cupy", gpu_name="NVIDIA H200")
    assert _predicted(gpus, "phoenix-cpu").mismatch == "made on GPUs (NVIDIA H200), but phoenix-cpu describes CPUs"
    assert _predicted(gpus).mismatch == ""
    backend = _made_on(_results(tmp_path / "b.h5"), backend="cupy")
    assert _predicted(backend, "phoenix-cpu").mismatch == "made on GPUs (), but phoenix-cpu describes CPUs"
    named = _made_on(_results(tmp_path / "n.h5"), gpu_name="NVIDIA A100-SXM4-80GB")
    h200 = builtin("h200x2").replace(description="the 2 x H200 test machine")
    assert _predicted(named, h200).mismatch == "made on NVIDIA A100-SXM4-80GB, but h200x2 describes H200"
    cpus = _made_on(_results(tmp_path / "c.h5"), backend="numpy", gpu_name="")
    assert _predicted(cpus, "phoenix-cpu").mismatch == ""
    assert _predicted(cpus).mismatch == "made on CPUs (numpy), but h200x2 describes GPUs"


# -- model measure's timings, on a device whose clock is virtual -------------------------------------------
class ClockDevice:
    """A device with two streams on a virtual clock: a GEMM or a copy advances its stream's clock by the
    next of ``seconds`` (the last repeated); an event marks its stream's time.  As on the GPU backend, an
    event or a GEMM without a stream is on the compute stream, a copy on the communication stream, and the
    time between two events is known only once the later one has been waited for (CUDA's "not ready")."""

    xp = np

    def __init__(self, seconds, on_gpu=True, device_id=0):
        self.on_gpu = on_gpu
        self.device_id = device_id
        self.compute_stream, self.comm_stream = "compute", "comm"
        self.clock = {"compute": 0.0, "comm": 0.0}
        self.seconds = list(seconds)
        self.gemms, self.copies, self.forgotten, self.waited = [], [], 0, []

    def _advance(self, stream):
        self.clock[stream] += self.seconds.pop(0) if len(self.seconds) > 1 else self.seconds[0]

    def empty(self, shape, dtype, order="C"):
        return np.empty(shape, dtype, order=order)

    def event(self, stream=None):
        stream = self.compute_stream if stream is None else stream
        return SimpleNamespace(stream=stream, time=self.clock[stream])

    def event_synchronize(self, event):
        if event is not None:
            self.waited.append(event)

    def elapsed(self, start, stop):
        assert any(e is stop for e in self.waited), "not ready: the later event was not waited for"
        assert start.stream == stop.stream, "events of two streams"
        return stop.time - start.time

    def synchronize(self):
        pass

    def gemm(self, a, b, c, accumulate, stream=None, tf32=False):
        stream = self.compute_stream if stream is None else stream
        self.gemms.append(dict(a=(a.shape, a.dtype.name, a.flags.f_contiguous), b=(b.shape, b.dtype.name),
                               c=(c.shape, c.dtype.name), finite=bool(np.isfinite(c).all()),
                               accumulate=accumulate, tf32=tf32, stream=stream))
        self._advance(stream)

    def forget_gemm_plans(self):
        self.forgotten += 1

    def copy(self, dst, src, stream=None):
        stream = self.comm_stream if stream is None else stream
        assert dst.nbytes == src.nbytes
        self.copies.append((dst.nbytes, stream))
        self._advance(stream)


class ReducingComm(ThreadComm):
    """The thread ranks' communicator with mpi4py's ``allreduce`` of Python values (SUM and MAX)."""

    def allreduce(self, value, op=MPI.SUM):
        values = self.allgather(value)
        if op is MPI.MAX:
            return max(values)
        if op is MPI.SUM:
            return sum(values)
        raise ValueError(f"op {op!r}")


def test_time_gemm_is_the_median_call_of_batches_sized_by_a_first_timed_call():
    """An untimed first call (a plan), a timed one that sizes the batches (3/16 s over 3 batches of calls of
    1/256 s: 16 calls each), then 3 batches: the median batch's seconds per call (binary fractions: exact)."""
    per_batch = [2**-8] * 16 + [2**-6] * 16 + [2**-7] * 16
    device = ClockDevice([5.0, 2**-8] + per_batch + [1.0])
    got = model._time_gemm(device, MPI.COMM_SELF, 96, 64, 32, "float64", True, 3 / 16)
    assert got == 2**-7
    assert len(device.gemms) == 2 + 3 * 16 and device.forgotten == 1
    for call in device.gemms:
        assert call == dict(a=((96, 32), "float64", True), b=((32, 64), "float64"), c=((96, 64), "float64"),
                            finite=True, accumulate=True, tf32=False, stream="compute")
    assert len(device.waited) == 4 and all(e.stream == "compute" for e in device.waited)


def test_time_gemm_times_tf32_on_float32_operands_in_the_runs_order():
    device = ClockDevice([2**-8])
    assert model._time_gemm(device, MPI.COMM_SELF, 8, 6, 4, "tf32", False, 3 / 16) == 2**-8
    for call in device.gemms:  # the untimed first call too
        assert call["tf32"] is True and call["accumulate"] is False
        assert call["a"] == ((8, 4), "float32", False) and call["b"] == ((4, 6), "float32")
        assert call["c"][1] == "float32"
    for dtype, tf32 in (("float32", False), ("tf32", True)):  # a CPU takes A as stored, tf32 too
        device = ClockDevice([0.01], on_gpu=False)
        model._time_gemm(device, MPI.COMM_SELF, 8, 6, 4, dtype, False, 0.3)
        assert {(c["tf32"], c["a"]) for c in device.gemms} == {(tf32, ((8, 4), "float32", True))}


def test_time_gemm_runs_as_many_calls_on_every_rank_as_the_slowest_first_call_needs():
    """Two ranks: rank 1's first call takes 1/64 s, so both run batches of 4 calls (1/16 s / (1/64 s)); rank 0's
    took 1/128 s, and the two together 3/128 s (3 calls)."""
    comm = ReducingComm(2)
    devices = [ClockDevice([1.0, 2**-7, 2**-8]), ClockDevice([1.0, 2**-6, 2**-8])]
    outcomes = comm.run(lambda rank: model._time_gemm(devices[rank], comm, 16, 16, 16, "float64", False, 3 / 16))
    assert outcomes == [("returned", 2**-8), ("returned", 2**-8)]
    assert [len(d.gemms) for d in devices] == [2 + 3 * 4, 2 + 3 * 4]


def test_time_gemm_on_the_cpu_backend():
    from hpcmm.execution.backend import CpuBackend

    seconds = model._time_gemm(CpuBackend(), MPI.COMM_SELF, 32, 32, 32, "float64", True, 0.003)
    assert 0 < seconds < 1


def test_time_copy_reads_and_writes_a_c_block_six_times_and_keeps_the_median_of_the_last_five():
    """4 MiB on a CPU (a C block in the caches), 256 MiB on a GPU; the first copy is a warm-up."""
    device = ClockDevice([9.0, 0.004, 0.001, 0.002, 0.005, 0.003, 7.0], on_gpu=False)
    assert model._time_copy(device, MPI.COMM_SELF) == _exact(2 * (4 << 20) / 0.003 / 1e9)
    assert device.copies == [(4 << 20, "comm")] * 6
    assert len(device.waited) == 6 and all(e.stream == "comm" for e in device.waited)


def test_time_copy_on_a_gpu_copies_256_mib(monkeypatch):
    device = ClockDevice([0.002], on_gpu=True)
    monkeypatch.setattr(device, "empty", lambda shape, dtype: SimpleNamespace(nbytes=shape, fill=lambda v: None))
    assert model._time_copy(device, MPI.COMM_SELF) == _exact(2 * (256 << 20) / 0.002 / 1e9)
    assert device.copies == [(256 << 20, "comm")] * 6


def test_sharers_counts_the_ranks_of_each_device_or_of_each_core():
    comm = ThreadComm(3)
    devices = [ClockDevice([1.0], device_id=d) for d in (0, 1, 0)]
    assert comm.run(lambda rank: model._sharers(devices[rank], comm)) == [("returned", 2), ("returned", 1),
                                                                        ("returned", 2)]
    cpu = ClockDevice([1.0], on_gpu=False, device_id=5)
    for cores, want in ((1, 3), (2, 2), (3, 1), (8, 1)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(model, "_cores", lambda cores=cores: cores)
            assert comm.run(lambda rank: model._sharers(cpu, comm)) == [("returned", want)] * 3


def test_cores_are_the_affinity_or_else_the_cpu_count(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5})
    assert model._cores() == 3

    def no_affinity(pid):
        raise OSError("not here")

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert model._cores() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert model._cores() == 1


# -- --save: the description written whole, beside the user's files --------------------------------------
def test_a_saved_description_is_readable_and_not_executable(tmp_path):
    old = os.umask(0o022)
    try:
        model.save_machine(builtin("h200x2"), str(tmp_path / "m.json"))
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "m.json").st_mode & 0o777 == 0o644
    assert model.load_machine(str(tmp_path / "m.json")) == builtin("h200x2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_save_never_takes_a_hidden_name_that_exists(tmp_path, monkeypatch):
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(secrets, "token_hex", lambda nbytes=None: next(names))
    taken = tmp_path / ".m.json.aaaaaaaaaaaa.tmp"
    taken.write_text("someone else's\n")
    model.save_machine(builtin("h200x2"), str(tmp_path / "m.json"))
    assert taken.read_text() == "someone else's\n"
    assert model.load_machine(str(tmp_path / "m.json")) == builtin("h200x2")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.json.aaaaaaaaaaaa.tmp", "m.json"]


def test_save_refused_leaves_no_temporary_file(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError) as caught:
        model.save_machine(builtin("h200x2"), str(tmp_path / "d"))
    assert str(caught.value) == f"--save={tmp_path}/d: cannot write the description (Is a directory)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    with pytest.raises(InputError) as caught:
        model.save_machine(builtin("h200x2"), str(tmp_path / "none" / "m.json"))
    assert str(caught.value) == f"--save={tmp_path}/none/m.json: cannot write the description (No such file or " \
                                "directory)"


# -- bench transport files: the links of a description ----------------------------------------------------
def _line(gbps, lat_us, sizes=(1 << 20, 1 << 24, 1 << 26)):
    return [(b, lat_us * 1e-6 + b / (gbps * 1e9)) for b in sizes]


def _transport(path, rows, created="2026-11-30T16:47:00+00:00"):
    """A ``bench transport`` file of ``(path, dst, bytes, seconds)`` rows, made at ``created`` (none: absent)."""
    table = [{"src": 0, "dst": dst, "path": name, "bytes": float(b), "seconds": t, "gbps": 0.0}
             for name, dst, b, t in rows]
    h5io.write_table_file(str(path), False, "bench-transport", "transport", table, {"hpcmm": "test"})
    with h5py.File(path, "r+") as f:
        if created is None:
            f.attrs.pop("created", None)
        else:
            f.attrs["created"] = created
    return str(path)


def _rows(name, samples, dst=1):
    return [(name, dst, b, t) for b, t in samples]


def test_links_of_every_path_a_transport_file_measures(tmp_path):
    """Pulls (ipc, then shm), MPI, the device's own copy, the copies to and from the host (the slower of the
    two), the staged path with the host's copies taken off, and its aggregate: each from its own rows."""
    staged = _rows("staged", _line(6.0, 80.0, (4 * MIB, 16 * MIB, 64 * MIB)))
    staged_x2 = _rows("staged-x2", _line(4.0, 80.0, (4 * MIB, 16 * MIB, 64 * MIB)))
    rows = (staged_x2 + _rows("ipc", _line(300.0, 10.0)) + _rows("mpi", _line(20.0, 3.0))
            + _rows("d2d", _line(900.0, 5.0)) + _rows("d2h", _line(50.0, 9.0)) + _rows("h2d", _line(40.0, 8.0))
            + staged)
    base = builtin("h200x2").replace(staged_chunk_bytes=4 * MIB, host_copy_gbps=7.0)
    got = model.relink(base, _transport(tmp_path / "t.h5", rows))
    assert got.intra_gbps == _exact(300.0, 1e-9) and got.intra_latency_us == _exact(10.0, 1e-6)
    assert got.net_gbps == _exact(20.0, 1e-9) and got.net_latency_us == _exact(3.0, 1e-6)
    assert got.local_gbps == _exact(900.0, 1e-9)
    assert got.host_copy_gbps == _exact(40.0, 1e-9)
    single = [(b, t) for _, _, b, t in staged]
    gbps, lat, host = model.fit_staged(single, {2: [(b, t) for _, _, b, t in staged_x2]}, got.host_copy_gbps,
                                       4 * MIB)
    assert (got.staged_gbps, got.staged_latency_us, got.staged_host_gbps) == (gbps, lat, host)
    assert gbps != pytest.approx(model.fit_staged(single, {}, 25.0, 32 * MIB)[0], rel=1e-3)
    by_mib, contention = model.fit_staged_by_size(single, {2: [(b, t) for _, _, b, t in staged_x2]},
                                                  got.host_copy_gbps, 4 * MIB, lat)
    assert got.staged_gbps_by_mib == by_mib and got.staged_contention == contention > 0
    assert got.gemm == base.gemm and got.links_measured == "2026-11-30T16:47:00+00:00"
    assert got.source == f"{base.source}; links from {tmp_path}/t.h5"


def test_the_host_copies_are_the_slower_direction(tmp_path):
    for d2h, h2d in ((30.0, 60.0), (60.0, 30.0)):
        path = _transport(tmp_path / f"{d2h}.h5", _rows("d2h", _line(d2h, 9.0)) + _rows("h2d", _line(h2d, 8.0)))
        assert model.relink(builtin("h200x2"), path).host_copy_gbps == _exact(30.0, 1e-9)
    only = _transport(tmp_path / "only.h5", _rows("d2h", _line(35.0, 9.0)))
    assert model.relink(builtin("h200x2"), only).host_copy_gbps == _exact(35.0, 1e-9)


def test_links_of_a_cpu_are_shared_memory_and_a_gpu_keeps_its_own_copy(tmp_path):
    rows = _rows("shm", _line(12.0, 2.0)) + _rows("d2d", _line(900.0, 5.0))
    path = _transport(tmp_path / "t.h5", rows)
    cpu = model.relink(builtin("phoenix-cpu"), path)
    assert cpu.local_gbps == _exact(12.0, 1e-9) and cpu.intra_gbps == _exact(12.0, 1e-9)
    gpu = model.relink(builtin("h200x2"), path)
    assert gpu.local_gbps == _exact(900.0, 1e-9) and gpu.intra_gbps == _exact(12.0, 1e-9)
    only_shm = model.relink(builtin("h200x2"), _transport(tmp_path / "s.h5", _rows("shm", _line(12.0, 2.0))))
    assert only_shm.local_gbps == builtin("h200x2").local_gbps


def test_links_without_host_copies_keep_the_descriptions(tmp_path, monkeypatch):
    """No d2h or h2d rows: the staged path's copies are the base's (or the defaults without a base)."""
    staged = _line(6.0, 80.0, (4 * MIB, 16 * MIB, 64 * MIB))
    path = _transport(tmp_path / "t.h5", _rows("staged", staged))
    base = builtin("h200x2").replace(staged_chunk_bytes=4 * MIB, host_copy_gbps=7.0)
    got = model.relink(base, path)
    assert got.host_copy_gbps == 7.0
    assert got.staged_gbps == model.fit_staged(staged, {}, 7.0, 4 * MIB)[0]
    assert got.staged_gbps_by_mib == model.fit_staged_by_size(staged, {}, 7.0, 4 * MIB, got.staged_latency_us)[0]
    from test_model_command import _samples

    monkeypatch.setattr(model, "_meminfo", lambda: 16 * 2**30)
    measured = model._describe_measured(None, False, {"float64": _samples(1e12)}, 30.0, 1, path, 4)
    assert measured.staged_gbps == model.fit_staged(staged, {}, Machine.host_copy_gbps, Machine.staged_chunk_bytes)[0]
    assert measured.staged_gbps_by_mib == model.fit_staged_by_size(staged, {}, Machine.host_copy_gbps,
                                                                   Machine.staged_chunk_bytes,
                                                                   measured.staged_latency_us)[0]
    assert measured.staged_host_gbps == Machine.staged_host_gbps  # no staged-xK rows: no aggregate


def test_links_take_the_pair_0_to_1_where_a_file_has_it(tmp_path):
    """Three ranks: the pair 0 → 2 shares a device and is slower; a broadcast row (dst -1) counts as 0 → 1."""
    rows = (_rows("ipc", _line(300.0, 10.0), dst=2) + _rows("ipc", _line(100.0, 10.0), dst=1)
            + _rows("mpi", _line(5.0, 3.0), dst=2) + _rows("mpi", _line(20.0, 3.0), dst=-1)
            + _rows("shm", _line(9.0, 3.0), dst=2))
    links, _, _ = model._read_transport(_transport(tmp_path / "t.h5", rows))
    assert links["ipc"] == (_exact(100.0, 1e-9), _exact(10.0, 1e-6))
    assert links["mpi"] == (_exact(20.0, 1e-9), _exact(3.0, 1e-6))
    assert links["shm"] == (_exact(9.0, 1e-9), _exact(3.0, 1e-6))  # no pair 0 → 1: every row


def test_links_of_several_files_together(tmp_path):
    first = _transport(tmp_path / "a.h5", _rows("ipc", _line(300.0, 10.0, (1 << 20,))), "2026-11-30T16:44:00+00:00")
    second = _transport(tmp_path / "b.h5", _rows("ipc", _line(300.0, 10.0, (1 << 26,))), "2026-11-30T16:47:00+00:00")
    links, _, created = model._read_transport(f"{first},{second}")
    assert links["ipc"] == (_exact(300.0, 1e-9), _exact(10.0, 1e-6))  # one size from each file: a line
    assert created == "2026-11-30T16:47:00+00:00"
    undated = model.relink(builtin("h200x2"), _transport(tmp_path / "c.h5", _rows("ipc", _line(300.0, 10.0)), None))
    assert undated.links_measured == ""


def test_a_transport_file_that_is_none_is_refused_naming_it(tmp_path):
    missing = tmp_path / "missing.h5"
    with pytest.raises(InputError) as caught:
        model._read_transport(str(missing))
    assert str(caught.value).startswith(f"--transport={missing}: ")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["numbers"] = [1, 2]
    with pytest.raises(InputError) as caught:
        model._read_transport(str(other))
    message = str(caught.value)
    assert message.startswith(f"--transport={other}: not a `bench transport` file (")
    assert "'transport' doesn't exist" in message and "\n" not in message


def test_a_transport_file_of_too_many_rows_is_refused_before_it_is_read(tmp_path):
    """More than 2**20 rows are refused unread; 2**20 rows (of zeros, never written) are read, and their
    times refused by the fit."""
    dtype = np.dtype([("src", np.int64), ("dst", np.int64), ("path", h5py.string_dtype()), ("bytes", np.float64),
                      ("seconds", np.float64)])
    for rows, words in ((model.MOST_RANK_STEPS + 1, "/transport has 1048577 rows, more than 1048576"),
                        (model.MOST_RANK_STEPS, None)):
        path = tmp_path / f"{rows}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("transport", shape=(rows,), dtype=dtype)
        with pytest.raises(InputError) as caught:
            model._read_transport(str(path))
        if words:
            assert str(caught.value) == f"--transport={path}: {words}"
        else:
            assert str(caught.value) == "fit_link: needs transfers with positive times"


# -- model scaling: the two markdown tables ----------------------------------------------------------------
def test_scaling_tables_as_markdown():
    """Strong scaling over 1 and 2 nodes of 8 GPUs (the largest size fits only on two), weak scaling from the
    first size at n = 2180·√nodes rounded to 256 (2180 / 256 = 8.52: 9), one cell and row at a time."""
    machine = builtin("h200x8-ndr")
    text = model.scaling_tables(machine, "float32", [1, 2], [2180, 350000])
    lines = text.split("\n")

    def cell(p):
        return f"{p.tflops:.0f} ({100 * p.exposed_seconds / p.seconds:.0f} %)"

    p = {(size, x): model.predict(model.Problem(size, size, size, "float32"), 8 * x, machine)
         for size in (2180, 350000, 2304, 3072) for x in (1, 2)}
    assert p[350000, 1].seconds == float("inf") and p[350000, 2].seconds < float("inf")
    assert lines[:7] == [
        "Strong scaling, float32, h200x8-ndr (8 ranks per node): TFLOP/s (exposed communication %)",
        "",
        "| n = m = k | 1 node | 2 nodes |",
        "|---|---|---|",
        f"| 2180 | {cell(p[2180, 1])} | {cell(p[2180, 2])} |",
        f"| 350000 | does not fit | {cell(p[350000, 2])} |",
        ""]
    assert lines[7:11] == [
        "Weak scaling, float32: n = 2180·√nodes (the same memory per GPU); TFLOP/s per GPU, exposed %, busiest "
        "NIC ÷ mean NIC bytes", "", "| nodes | n | grid | TFLOP/s per GPU | exposed | busiest/mean NIC |",
        "|---|---|---|---|---|---|"]
    one, two = p[2304, 1], p[3072, 2]
    assert not one.nic_bytes_mean and two.nic_bytes_mean
    assert lines[11:] == [
        f"| 1 | 2304 | {one.grid} | {one.tflops / 8:.1f} | {100 * one.exposed_seconds / one.seconds:.1f} % | – |",
        f"| 2 | 3072 | {two.grid} | {two.tflops / 16:.1f} | {100 * two.exposed_seconds / two.seconds:.1f} % | "
        f"{two.nic_bytes_max / two.nic_bytes_mean:.2f} |"]
    assert model.scaling_tables(machine, "float64", [1], [2048]) != model.scaling_tables(machine, "float32", [1],
                                                                                          [2048]).replace(
        "float32", "float64")


# -- the sweep's calls and operands -----------------------------------------------------------------------
def test_sweep_calls_fill_each_batch_within_a_thousand_calls():
    assert model.sweep_calls(2**-8, 3 / 16) == 16
    assert model.sweep_calls(2**-8, 1 / 16, batches=1) == 16  # one batch takes all the seconds
    assert model.sweep_calls(2**-8, 1 / 16, batches=0) == 16
    assert model.sweep_calls(1e-9, 0.3) == 1000 and model.sweep_calls(0.0, 0.3) == 1000
    assert model.sweep_calls(-1.0, 0.3) == 1000 and model.sweep_calls(10.0, 0.3) == 1


def test_sweep_operands_are_the_runs_type_and_order_with_data_in_minus_one_to_one():
    a, b = model.sweep_operands(np, 300, 200, 100, "float64", on_gpu=False)
    assert a.dtype == b.dtype == np.float64 and a.shape == (300, 100) and b.shape == (100, 200)
    assert a.flags.f_contiguous and b.flags.c_contiguous
    for x in (a, b):
        assert -1 <= x.min() < -0.9 and 0.9 < x.max() < 1
    a, b = model.sweep_operands(np, 6, 5, 4, "tf32", on_gpu=False)  # as stored on a CPU, where tf32 is float32
    assert a.dtype == np.float32 and a.flags.f_contiguous and b.flags.c_contiguous
    a, _ = model.sweep_operands(np, 6, 5, 4, "tf32")
    assert a.flags.c_contiguous


# -- the bound on what the model simulates ------------------------------------------------------------------
def _bound(prob, ranks, machine, **kw):
    try:
        model.check_problem(prob, ranks, machine, **kw)
    except InputError as exc:
        return str(exc)
    return None


def test_check_problem_refuses_an_operand_past_2_62_bytes_naming_it():
    h200 = builtin("h200x2")
    P = model.Problem
    assert _bound(P(2**31, 1, 2**29), 1, h200) == ("--m=2147483648 --n=1 --k=536870912: A (2147483648 x 536870912 "
                                                  "float64) takes more than 2**62 bytes, more than the model counts")
    assert _bound(P(1, 2**29, 2**31), 1, h200, what="r.h5") == (
        "r.h5: --m=1 --n=536870912 --k=2147483648: B (2147483648 x 536870912 float64) takes more than 2**62 bytes, "
        "more than the model counts")
    assert _bound(P(2**31, 2**29, 1), 1, h200).startswith("--m=2147483648 --n=536870912 --k=1: C (2147483648 x "
                                                          "536870912 float64) takes more than")
    # exactly 2**62 bytes are counted: the bound on the steps refuses it instead
    assert "takes more than" not in _bound(P(2**31, 1, 2**28), 1, h200)


def test_check_problem_refuses_more_ranks_than_it_places():
    h200 = builtin("h200x8-ndr")
    assert _bound(model.Problem(64, 64, 64), 2**20 + 1, h200) == "--ranks=1048577: more than the 1048576 ranks the " \
                                                                 "model places"
    assert _bound(model.Problem(64, 64, 64), 2**20, h200).startswith("--m=64 --n=64 --k=64 --ranks=1048576: the "
                                                                     "model would simulate at least 64 steps")


def test_check_problem_counts_steps_over_the_widest_panel_the_run_could_take():
    h200 = builtin("h200x2")
    P = model.Problem
    assert _bound(P(1, 1, 2**30), 1, h200) is None  # one rank: one step of all of k
    assert _bound(P(1, 1, 2**30), 2, h200) == ("--m=1 --n=1 --k=1073741824: the model would simulate at least 131072 "
                                              "steps (k over a panel of 8192), more than 32768; give a wider --panel "
                                              "or a smaller problem")
    assert _bound(P(64, 64, 65537), 1, h200, panel=2) == ("--m=64 --n=64 --k=65537: the model would simulate at "
                                                          "least 32769 steps (k over a panel of 2), more than 32768; "
                                                          "give a wider --panel or a smaller problem")
    # 2.5d: k shared among its layers, 8 unless the algorithm names them
    assert _bound(P(64, 64, 2**21), 8, h200, algo="2.5d:2", panel=16) == (
        "--m=64 --n=64 --k=2097152: the model would simulate at least 65536 steps (k over a panel of 16), more than "
        "32768; give a wider --panel or a smaller problem")
    assert _bound(P(64, 64, 2**21), 128, h200, algo="2.5d", panel=16) == (
        "--m=64 --n=64 --k=2097152 --ranks=128: the model would simulate at least 16384 steps (k over a panel of 16) "
        "on each of 128 ranks, more than 1048576 rank-steps")
    assert _bound(P(64, 64, 2**21), 128, h200, algo="2.5d:8", panel=16) == _bound(P(64, 64, 2**21), 128, h200,
                                                                                   algo="2.5d", panel=16)


def test_check_problem_names_the_devices_whose_memory_the_operands_exceed():
    """Operands past every device's memory: the narrowest panel (256), and the devices named."""
    P = model.Problem
    one_host = builtin("h200x2").replace(memory_gib=2**-6)  # all 4 ranks on the one host of 2 GPUs of 16 MiB
    assert _bound(P(1, 1, 2**24), 4, one_host) == (
        "--m=1 --n=1 --k=16777216: the model would simulate at least 65536 steps (k over a panel of 256, the "
        "narrowest: the operands' 0.25 GiB exceed the 0.03125 GiB of 2 device(s)), more than 32768; give a wider "
        "--panel or a smaller problem")
    lone = Machine("lone", devices_per_node=1, hosts=0, memory_gib=2**-8)  # a GPU a host, each 4 MiB
    assert _bound(P(1, 1, 2**24), 4, lone, ranks_per_host=1) == (
        "--m=1 --n=1 --k=16777216: the model would simulate at least 65536 steps (k over a panel of 256, the "
        "narrowest: the operands' 0.25 GiB exceed the 0.01562 GiB of 4 device(s)), more than 32768; give a wider "
        "--panel or a smaller problem")
    operands = (2 * 2**24 + 1) * 8
    exact = Machine("exact", memory_gib=operands / 2**30)  # the operands fill one device exactly: they fit
    assert _bound(P(1, 1, 2**24), 1, exact) is None


# -- the model command's options, as parsed ----------------------------------------------------------------
def _parse(*argv):
    from hpcmm.cli import main as cli

    return vars(cli.parse(["model", *argv]))


def test_model_options_default_as_the_readme_says():
    assert _parse() == dict(
        command="model", what="predict", files=[], machine=None, m=8192, n=None, k=None, dtype="float64", ranks=2,
        ranks_per_node=None, ranks_per_host=None, grid=None, panel=None, prefetch=None, algo="summa", cuda_aware=None,
        balance="share", mps="no", step_order="auto", json=False, transport=None, dtypes=None, save=None, shapes=None,
        sweep_seconds=None, nodes="1,2,4,8,16,32,64", sizes="16384,32768,65536,131072,262144", status_file=None)


def test_model_options_as_given():
    got = _parse("check", "a.h5", "b.h5", "--machine", "x.json", "--m", "1", "--n", "2", "--k", "3", "--dtype",
                 "tf32", "--ranks", "1", "--ranks-per-node", "1", "--ranks-per-host", "1", "--grid", "1x1", "--panel",
                 "1", "--prefetch", "0", "--algo", "2.5d", "--cuda-aware", "yes", "--balance", "none", "--mps", "yes",
                 "--step-order", "common", "--json", "--transport", "t.h5", "--dtypes", "float32", "--save", "m.json",
                 "--shapes", "8x8x8", "--sweep-seconds", "0.5", "--nodes", "2", "--sizes", "1024")
    assert got == dict(
        command="model", what="check", files=["a.h5", "b.h5"], machine="x.json", m=1, n=2, k=3, dtype="tf32",
        ranks=1, ranks_per_node=1, ranks_per_host=1, grid="1x1", panel=1, prefetch=0, algo="2.5d", cuda_aware="yes",
        balance="none", mps="yes", step_order="common", json=True, transport="t.h5", dtypes="float32",
        save="m.json", shapes="8x8x8", sweep_seconds=0.5, nodes="2", sizes="1024", status_file=None)
    for what in ("predict", "measure", "links", "check", "show", "scaling"):
        assert _parse(what)["what"] == what
    assert _parse("--cuda-aware", "no", "--balance", "share", "--mps", "no", "--step-order", "auto")["cuda_aware"] \
        == "no"


#: (argv, the line that refuses it)
PARSE_REFUSED = [(["--" + flag, str(low - 1)], f"argument --{flag}: --{flag}={low - 1}: expected an integer >= {low}")
                 for flag, low in (("m", 1), ("n", 1), ("k", 1), ("ranks", 1), ("ranks-per-node", 1),
                                   ("ranks-per-host", 1), ("panel", 1), ("prefetch", 0))]
PARSE_REFUSED += [
    (["solve"], "argument what: invalid choice: 'solve' (choose from predict, measure, links, check, show, scaling)"),
    (["--dtype", "float8"], "argument --dtype: invalid choice: 'float8'"),
    (["--cuda-aware", "maybe"], "argument --cuda-aware: invalid choice: 'maybe' (choose from yes, no)"),
    (["--balance", "product"], "argument --balance: invalid choice: 'product' (choose from share, none)"),
    (["--mps", "on"], "argument --mps: invalid choice: 'on' (choose from yes, no)"),
    (["--step-order", "own"], "argument --step-order: invalid choice: 'own' (choose from auto, common)"),
    (["--sweep-seconds", "fast"], "argument --sweep-seconds: invalid float value: 'fast'"),
]


@pytest.mark.parametrize("argv, words", PARSE_REFUSED, ids=["_".join(a).lstrip("-") for a, _ in PARSE_REFUSED])
def test_model_options_refused_in_one_line(argv, words):
    with pytest.raises(InputError) as caught:
        _parse(*argv)
    assert str(caught.value).replace("'", "").startswith(words.replace("'", ""))


# -- the staged rate by message size and its contention ------------------------------------------------------
def test_staged_rate_by_size_is_the_median_pair_less_latency_and_copies():
    """Two pairs at each size (a median of two is their mean); a size where the latency takes all the time is
    left out; the chunk copies come off each time."""
    copy, chunk, lat = 10.0, 2 * MIB, 50.0
    probe = Machine("t", host_copy_gbps=copy, staged_chunk_bytes=chunk)

    def timed(b, gbps):
        fill, drain = model.staged_copy_seconds(b, probe)
        return b, lat * 1e-6 + b / (gbps * 1e9) + float(fill) + float(drain)

    single = [timed(4 * MIB, 6.0), timed(4 * MIB, 8.0), timed(16 * MIB, 9.0), (1024, 40e-6)]
    by_mib, contention = model.fit_staged_by_size(single, {}, copy, chunk, lat)
    assert [mib for mib, _ in by_mib] == [4.0, 16.0]
    assert [g for _, g in by_mib] == [_exact(7.0, 1e-11), _exact(9.0, 1e-11)]
    assert contention == 0.0
    # a transfer whose copies take exactly its time (binary fractions: 2**-10 s each way) leaves no rate either
    exact = Machine("t", host_copy_gbps=2**30 / 1e9, staged_chunk_bytes=MIB)
    assert [float(x) for x in model.staged_copy_seconds(MIB, exact)] == [2.0**-10, 2.0**-10]
    by_mib, _ = model.fit_staged_by_size([(MIB, 2.0**-9), (4 * MIB, 1e-2)], {}, 2**30 / 1e9, MIB, 0.0)
    assert [mib for mib, _ in by_mib] == [4.0]


def test_staged_contention_is_the_median_slowdown_per_extra_pair_from_4_mib():
    sizes = (1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB)
    single = _staged(8.0, 0.0, sizes)
    # each of k pairs at 8 / (1 + c (k - 1)) GB/s: c = 0.1 at 4 MiB, 0.2 at 16, 0.3 at 64 (0.9 at 1 MiB, left out)
    share = {1 * MIB: 0.9, 4 * MIB: 0.1, 16 * MIB: 0.2, 64 * MIB: 0.3}
    concurrent = {k: [(b, b * (1 + share[b] * (k - 1)) / 8e9) for b in sizes] for k in (2, 4)}
    concurrent[1] = [(b, b / 1e9) for b in sizes]  # one pair at a time says nothing of contention
    concurrent[3] = [(8 * MIB, 1.0)]  # a size not timed alone
    _, contention = model.fit_staged_by_size(single, concurrent, 1e9, 1 << 40, 0.0)
    assert contention == _exact(0.2, 1e-6)
    faster = {2: [(b, b / 9e9) for b in sizes]}  # pairs at once faster than alone: no contention, not a negative one
    assert model.fit_staged_by_size(single, faster, 1e9, 1 << 40, 0.0)[1] == 0.0
    lone = {2: [(4 * MIB, 4 * MIB * 1.5 / 8e9)]}
    assert model.fit_staged_by_size(single, lone, 1e9, 1 << 40, 0.0)[1] == _exact(0.5, 1e-6)


# -- which description predicts a run, and whether it describes the machine it ran on --------------------------
def test_machine_for_takes_the_links_measured_last_before_the_run():
    a = Machine("a", links_measured="2026-11-30T16:44:00+00:00")
    b = Machine("b", links_measured="2026-11-30T17:47:00+01:00")  # 16:47 UTC
    c = Machine("c", links_measured="never")
    pick = [model.machine_for(t, [c, a, b]).name for t in (
        "2026-11-30T16:45:00+00:00", "2026-11-30T16:47:00+00:00", "2026-11-30T16:47:00", "2026-11-30T16:46:59",
        "2026-11-30T16:43:00+00:00", "", "yesterday")]
    assert pick == ["a", "b", "b", "a", "c", "c", "c"]


def test_machine_mismatch_names_both_machines():
    h200 = Machine("h200x2", description="the 2 x H200 test machine")
    cpu = Machine("mine", device="cpu")
    assert model.machine_mismatch(["numpy", "numpy"], ["", ""], h200) == "made on CPUs (numpy), but h200x2 describes GPUs"
    assert model.machine_mismatch([], [], h200) == "made on CPUs (numpy), but h200x2 describes GPUs"
    assert model.machine_mismatch(["numpy", "cupy"], ["", ""], cpu) == "made on GPUs (), but mine describes CPUs"
    assert model.machine_mismatch(["numpy"], ["NVIDIA H200", "", "NVIDIA A100", "NVIDIA H200"], cpu) == \
        "made on GPUs (NVIDIA A100, NVIDIA H200), but mine describes CPUs"
    assert model.machine_mismatch(["cupy"], ["NVIDIA A100-SXM4-80GB", "Tesla P100"], h200) == \
        "made on NVIDIA A100-SXM4-80GB, Tesla P100, but h200x2 describes H200"
    assert model.machine_mismatch(["cupy"], ["Tesla P100"], Machine("x", description="A100 and H200 nodes")) == \
        "made on Tesla P100, but x describes A100, H200"
    assert model.machine_mismatch(["cupy"], ["NVIDIA A100", "NVIDIA H200"], h200) == ""
    assert model.machine_mismatch(["cupy"], ["NVIDIA h200"], h200) == ""
    assert model.machine_mismatch(["cupy"], ["NVIDIA A100"], Machine("a100-and-h200", description="A100 H200")) == ""
    assert model.machine_mismatch(["cupy"], ["NVIDIA A100"], Machine("gpus")) == ""
    assert model.machine_mismatch(["cupy"], ["Some GPU"], h200) == ""
    assert model.machine_mismatch(["cupy"], [""], h200) == ""


def test_machine_mismatch_takes_no_nvlink_count_for_a_gpu_model():
    """The built-in h200x2 says "(NV18 NVLink)": the warning names the GPUs it describes, not the link."""
    assert model.machine_mismatch(["cupy"], ["NVIDIA A100-SXM4-80GB"], model.load_machine("h200x2")) == \
        "made on NVIDIA A100-SXM4-80GB, but h200x2 describes H200"


# -- --shapes and a file's grid --------------------------------------------------------------------------------
def test_shapes_are_read_as_m_n_w_triples():
    assert model.parse_shapes("8192x4096x2048, 16384X2048x2048") == [(8192, 4096, 2048), (16384, 2048, 2048)]
    assert model.parse_shapes(None) == [] and model.parse_shapes("") == [] and model.parse_shapes(" , ,") == []
    assert model.parse_shapes("1x1x1,,2x3x4") == [(1, 1, 1), (2, 3, 4)]


@pytest.mark.parametrize("text, words", [
    ("8x8", "--shapes: '8x8' is not MxNxW (e.g. 8192x4096x2048)"),
    ("8x8x8, 8xax8 ", "--shapes: '8xax8' is not MxNxW (e.g. 8192x4096x2048)"),
    ("8x8x8x8", "--shapes: '8x8x8x8' is not MxNxW (e.g. 8192x4096x2048)"),
    (" 0x8x8", "--shapes: '0x8x8' has an extent below 1"),
    ("8x0x8", "--shapes: '8x0x8' has an extent below 1"),
    ("8x8x-1", "--shapes: '8x8x-1' has an extent below 1"),
])
def test_shapes_refused_naming_the_item(text, words):
    with pytest.raises(InputError) as caught:
        model.parse_shapes(text)
    assert str(caught.value) == words


def test_check_reads_the_files_grid(tmp_path):
    turned = _results(tmp_path / "t.h5", grid="4X1")
    assert _predicted(turned).predicted == _exact(_want(grid=(4, 1)))
    assert _want(grid=(4, 1)) != _want(grid=(2, 2))
    bad = _results(tmp_path / "b.h5", grid="4x")
    assert _refusal(bad) == f"model check: {bad}: --grid='4x': expected PRxPC, e.g. 2x4"


def test_check_problem_takes_its_bounds_themselves():
    """32768 steps, 2**20 rank-steps and operands that fill the devices exactly are within the bounds; a step per
    block of k is named as such only where the blocks outnumber the panels."""
    h200 = builtin("h200x8-ndr")
    P = model.Problem
    assert _bound(P(1, 1, 2**15), 1, h200, panel=1) is None
    assert _bound(P(1, 1, 2**15), 32, h200, panel=1) is None
    assert _bound(P(1, 1, 2**16), 2**16, h200, panel=1, grid=(1, 2**16)) == (
        "--m=1 --n=1 --k=65536: the model would simulate at least 65536 steps (k over a panel of 1), more than "
        "32768; give a wider --panel or a smaller problem")
    operands = (2 * 2**29 + 1) * 8
    full = Machine("full", devices_per_node=2, hosts=1, memory_gib=operands / 2 / 2**30)
    assert _bound(P(1, 1, 2**29), 2, full) == (
        "--m=1 --n=1 --k=536870912: the model would simulate at least 65536 steps (k over a panel of 8192), more "
        "than 32768; give a wider --panel or a smaller problem")


def test_check_refuses_a_topology_of_more_rows_than_it_places_ranks(tmp_path):
    """Sizes past 2**20 rows are refused before they are read; 2**20 rows (never written: zeros) are read."""
    for rows, reason in ((model.MOST_RANK_STEPS + 1, "/topology has 1048577 rows, more than 1048576 ranks"),
                         (model.MOST_RANK_STEPS, "topology local_size=0: expected an integer from 1 to "
                                                 "9223372036854775807")):
        path = _results(tmp_path / f"{rows}.h5")
        with h5py.File(path, "r+") as f:
            del f["topology/local_size"]
            f["topology"].create_dataset("local_size", shape=(rows,), dtype=np.int64)
        assert _refusal(path) == f"model check: {path}: {reason}"


def test_the_sweeps_shapes_are_aligned():
    """A measured description keeps its base's penalty of odd leading dimensions, since the sweep times only
    aligned shapes (`_describe_measured`): every extent a multiple of 64, on a GPU and on a CPU, and the GPU's
    sweep reaching 16384 x 16384 x 2048."""
    for on_gpu in (True, False):
        shapes = model._sweep_shapes(on_gpu)
        assert shapes and all(x % 64 == 0 for shape in shapes for x in shape)
        assert len(set(shapes)) == len(shapes)
    assert (16384, 16384, 2048) in model._sweep_shapes(True)


def test_a_failure_without_words_is_named_by_its_type(tmp_path, monkeypatch):
    """An error that says nothing (an ``OSError()`` from HDF5) is named by its type, in one line."""
    path = _results(tmp_path / "r.h5")
    transport = _transport(tmp_path / "t.h5", _rows("ipc", _line(300.0, 10.0)))

    def mute(*args, **kwargs):
        raise OSError()

    monkeypatch.setattr(h5py, "File", mute)
    assert _refusal(path) == f"model check: {path}: not a results file the model can read (OSError: OSError)"
    with pytest.raises(InputError) as caught:
        model._read_transport(transport)
    assert str(caught.value) == f"--transport={transport}: not a `bench transport` file (OSError)"
