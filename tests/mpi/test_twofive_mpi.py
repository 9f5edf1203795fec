"""2.5D (``--algo 2.5d:C``) under MPI, checked against numpy float64.

Run with ``mpiexec -n N python -m pytest --with-mpi tests/mpi/test_twofive_mpi.py``:
``tests/test_mpi_suite.py`` runs it at 1–4 ranks, ``tests/test_twofive.py`` at 8.
Virtual nodes (``ranks_per_node``) make the layers and the cross-node paths
run on one machine.  A case whose node size does not divide the ranks, or
whose C does not divide the node, is skipped at that rank count.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from test_run_mpi import (COMM, DEVICE, P, RANK, config, corrupt_last_rank, everywhere, generated_product,
                          on_rank0, raised_everywhere, run_and_compare)

import hpcmm
from hpcmm.errors import InputError, VerificationError

#: (ranks per node, layers) at each rank count these tests run with.
CASES = [(1, 1), (2, 1), (2, 2), (4, 2), (4, 4)]
#: The last has partial blocks of 250 or more columns, stored padded (layout.padded).
SHAPES = [(37, 29, 41), (101, 67, 53), (41, 501, 23)]


def fits(rpn: int, layers: int) -> bool:
    return P % rpn == 0 and rpn % layers == 0 and rpn <= P


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("rpn,layers", CASES, ids=lambda v: str(v))
def test_products_match_numpy(mpi_tmp_path, rpn, layers, shape):
    """Every element of C is the float64 product's, within the rounding bound; the file says what ran."""
    if not fits(rpn, layers):
        pytest.skip(f"{layers} layers of nodes of {rpn} do not fit {P} ranks")
    m, n, k = shape
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, ranks_per_node=rpn, algo=f"2.5d:{layers}", seed=11)
    everywhere(result.summary["algo"] == f"2.5d:{layers}", f"algo {result.summary['algo']}")

    def check():
        with h5py.File(mpi_tmp_path / "result.h5") as f:
            reduce = f["timings/reduce_seconds"][...]
            assert reduce.shape == (P, 1) and (reduce >= 0).all(), reduce
            assert f["summary"].attrs["algo"] == f"2.5d:{layers}"
            assert sorted(set(f["topology"]["layer"])) == list(range(layers))

    on_rank0(check)


@pytest.mark.mpi(min_size=1)
def test_one_layer_is_summa(mpi_tmp_path):
    """C = 1: the same blocks and plan as summa, so the same C to the last bit."""
    m, n, k = 37, 29, 41
    outs = {}
    for algo in ("summa", "2.5d:1"):
        out = mpi_tmp_path / f"{algo.replace(':', '-')}.h5"
        run_and_compare(mpi_tmp_path, m=m, n=n, k=k, algo=algo, balance="none", out=str(out))
        outs[algo] = out

    def check():
        with h5py.File(outs["summa"]) as a, h5py.File(outs["2.5d:1"]) as b:
            assert np.array_equal(a["result/C"][...], b["result/C"][...])

    on_rank0(check)


@pytest.mark.mpi(min_size=2)
def test_files_are_read_at_the_layers_k_offsets(mpi_tmp_path):
    """A and B from .npy files of random numbers: each layer reads its own k slice."""
    rpn = 2 if P % 2 == 0 else P
    m, n, k = 23, 19, 31
    paths = [str(mpi_tmp_path / name) for name in ("a.npy", "b.npy")]
    if RANK == 0:
        rng = np.random.default_rng(5)
        np.save(paths[0], rng.standard_normal((m, k)))
        np.save(paths[1], rng.standard_normal((k, n)))
    COMM.Barrier()
    cfg = config(mpi_tmp_path, a=(paths[0], None), b=(paths[1], None), ranks_per_node=rpn, algo=f"2.5d:{rpn}")
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")

    def check():
        with h5py.File(cfg.out) as f:
            c = f["result/C"][...]
        ref = np.load(paths[0]) @ np.load(paths[1])
        assert np.allclose(c, ref, rtol=1e-12, atol=1e-12), float(np.abs(c - ref).max())

    on_rank0(check)


@pytest.mark.mpi(min_size=2)
def test_a_wrong_partial_block_fails_both_checks(mpi_tmp_path, monkeypatch):
    """The last rank's partial C goes wrong before the reduction: both checks fail on every rank."""
    if P % 2:
        pytest.skip("needs nodes of 2")
    corrupt_last_rank(monkeypatch, 1.0)
    m, n, k = 37, 29, 41
    for verify in ("freivalds", "full"):
        out = mpi_tmp_path / f"{verify}.h5"
        message = raised_everywhere(lambda: hpcmm.run(config(
            mpi_tmp_path, m=m, n=n, k=k, verify=verify, ranks_per_node=2, algo="2.5d:2", out=str(out)),
            comm=COMM), VerificationError)
        assert message.startswith(f"verification failed: {verify} residual")


@pytest.mark.mpi(min_size=2)
def test_layers_that_do_not_divide_the_node_are_refused(mpi_tmp_path):
    if P % 2:
        pytest.skip("needs nodes of 2")
    out = mpi_tmp_path / "never.h5"
    message = raised_everywhere(lambda: hpcmm.run(config(mpi_tmp_path, m=8, n=8, k=8, ranks_per_node=2,
                                                         algo="2.5d:3", out=str(out)), comm=COMM), InputError)
    assert message == "--algo=2.5d:3: 3 layers must divide the 2 ranks of each node", message
    everywhere(not out.exists(), "a refused run wrote its file")


@pytest.mark.mpi(min_size=1)
def test_k_smaller_than_the_layers_is_refused(mpi_tmp_path):
    if P % 2:
        pytest.skip("needs nodes of 2")
    message = raised_everywhere(lambda: hpcmm.run(config(mpi_tmp_path, m=8, n=8, k=1, ranks_per_node=2,
                                                         algo="2.5d:2", device=DEVICE), comm=COMM), InputError)
    assert "k=1 is less than 2 layers" in message, message


@pytest.mark.mpi(min_size=2)
def test_auto_runs_what_the_model_picks(mpi_tmp_path):
    """``--algo auto`` runs the candidate the model finds fastest and records every candidate's seconds."""
    if P % 2:
        pytest.skip("needs nodes of 2")
    import dataclasses  # noqa: PLC0415

    from hpcmm.model.cost import builtin  # noqa: PLC0415

    machine = mpi_tmp_path / "slow-net.json"
    if RANK == 0:
        slow = dataclasses.replace(builtin("h200x2"), name="slow-net", net_gbps=0.5, staged_gbps=0.5)
        machine.write_text(slow.to_json())
    COMM.Barrier()
    result = run_and_compare(mpi_tmp_path, m=64, n=64, k=4096, ranks_per_node=2, algo="auto", machine=str(machine),
                             verify="freivalds")
    # What the model says of this placement (all ranks on one host, nodes of 2; CPU: MPI on host buffers).
    from hpcmm.model.cost import Problem, load_machine, predict  # noqa: PLC0415

    names = ["summa"] + [f"2.5d:{c}" for c in (2,) if P % 2 == 0]
    seconds = {name: predict(Problem(64, 64, 4096), P, load_machine(str(machine)), ranks_per_node=2, ranks_per_host=P,
                             algo=name, cuda_aware=True).seconds for name in names}
    expected = min(seconds, key=seconds.get)
    everywhere(result.summary["algo"] == expected and result.summary["algo_asked"] == "auto",
               f"ran {result.summary['algo']}, the model says {seconds}")

    def check():
        with h5py.File(mpi_tmp_path / "result.h5") as f:
            attrs = f["summary"].attrs
            recorded = dict(zip([str(a) for a in attrs["predicted_algos"]], attrs["predicted_seconds"]))
            assert recorded == pytest.approx(seconds), (recorded, seconds)
            assert str(attrs["algo"]) == expected

    on_rank0(check)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("where", ["reduction", "engine"])
def test_one_rank_out_of_memory_at_set_up_fails_every_rank(mpi_tmp_path, where, monkeypatch):
    """The last rank's allocation fails alone while 2.5D builds (the reduction's partial block, or the
    layer engine's re-layout scratch, after the channels exist): every rank ends with the same error
    naming that rank, and none waits in a collective."""
    if P % 2:
        pytest.skip("2 layers need nodes of an even number of ranks")
    from hpcmm.execution.backend import Backend, GpuBackend
    from hpcmm.execution.engine import Engine

    def out_of_memory(real):
        def call(self, *args, **kwargs):
            if RANK == P - 1:
                raise MemoryError("out of memory (test)")
            return real(self, *args, **kwargs)
        return call

    if where == "reduction":  # the first poison of a 2.5D run is the reduction's partial block
        # numpy's (the base class's) and cupy's, which waits for its fill: the same test runs under
        # HPCMM_DEVICE=gpu
        for backend in (Backend, GpuBackend):
            monkeypatch.setattr(backend, "poison", out_of_memory(backend.poison))
    else:
        monkeypatch.setattr(Engine, "_relayout_scratch", out_of_memory(Engine._relayout_scratch))
    cfg = config(mpi_tmp_path, m=16, n=12, k=10, ranks_per_node=2, algo="2.5d:2", verify="none")
    message = raised_everywhere(lambda: hpcmm.run(cfg, comm=COMM, write=False), hpcmm.errors.HpcmmError)
    assert message == f"MemoryError: out of memory (test) (raised by rank {P - 1})", message
