"""2.5D without MPI: the layer geometry for every rank of many node shapes, ``--algo`` parsing and
refusals, ``auto``'s choice against the cost model; and the MPI products at 8 ranks
(``tests/mpi/test_twofive_mpi.py`` under ``mpiexec -n 8``; 1–4 ranks run in ``test_mpi_suite``)."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
import ranklog
from launcher import mpiexec_or_skip, run_launcher
from ranklog import Part, hpcmm_argv
from hang_guards import MPI_TIMEOUT
from test_mpi_suite import BACKSTOP, suite_verdict
from test_reliability_budget import hang_within, quiet_within

from hpcmm.planning.algo_choice import Placed, choose
from hpcmm.planning.algorithms.layers import LayeredLayout, Layers, check_layers, parse_algo, valid_layer_counts
from hpcmm.cli.main import config_from, parse
from hpcmm.config import RunConfig, settings_from_environment
from hpcmm.errors import InputError
from hpcmm.geometry.layout import Grid
from hpcmm.model.cost import Problem, builtin, predict
from mpi4py import MPI


def nodes_of(count: int, size: int, shuffle: int | None = None) -> list[list[int]]:
    """``count`` nodes of ``size`` ranks; with ``shuffle`` the ranks are spread in a random order."""
    ranks = list(range(count * size))
    if shuffle is not None:
        np.random.default_rng(shuffle).shuffle(ranks)
    return [ranks[i * size:(i + 1) * size] for i in range(count)]


def owners(layout: LayeredLayout, which: str, shape: tuple[int, int]) -> np.ndarray:
    count = np.zeros(shape, dtype=int)
    for rank in range(layout.layers.size):
        (r0, r1), (c0, c1) = getattr(layout, which)(rank)
        assert 0 <= r0 <= r1 <= shape[0] and 0 <= c0 <= c1 <= shape[1], (which, rank, (r0, r1, c0, c1))
        count[r0:r1, c0:c1] += 1
    return count


GEOMETRIES = [(nodes, size, c) for nodes, size in [(1, 1), (1, 2), (2, 2), (1, 4), (2, 4), (3, 4), (2, 6), (4, 8)]
              for c in range(1, size + 1) if size % c == 0]


@pytest.mark.parametrize("count,size,layers", GEOMETRIES)
@pytest.mark.parametrize("shape", [(37, 29, 41), (101, 67, 53), (5, 3, 2), (1, 1, 1), (8, 8, 8)])
def test_every_element_has_one_owner(count, size, layers, shape):
    m, n, k = shape
    geometry = Layers.build(nodes_of(count, size, shuffle=count * size + layers), layers)
    layout = LayeredLayout(m, n, k, geometry, Grid(*MPI.Compute_dims(geometry.layer_size, 2)))
    for which, dims in (("a_block", (m, k)), ("b_block", (k, n)), ("c_block", (m, n))):
        assert (owners(layout, which, dims) == 1).all(), which
    for rank in range(geometry.size):
        k0, k1 = geometry.k_range(geometry.layer(rank), k)
        (_, (a0, a1)), ((b0, b1), _) = layout.a_block(rank), layout.b_block(rank)
        assert k0 <= a0 <= a1 <= k1 and k0 <= b0 <= b1 <= k1  # inside its layer's k range


@pytest.mark.parametrize("count,size,layers", GEOMETRIES)
def test_layers_and_fibers(count, size, layers):
    nodes = nodes_of(count, size, shuffle=7)
    geometry = Layers.build(nodes, layers)
    q = size // layers
    for layer in range(layers):
        members = geometry.members(layer)
        assert [geometry.layer_rank(r) for r in members] == list(range(len(members)))
        assert all(geometry.layer(r) == layer for r in members)
    for node in nodes:
        for local, rank in enumerate(node):
            assert geometry.layer(rank) == local // q  # node-local ranks [l·q, (l+1)·q)
            fiber = geometry.fiber(rank)
            assert set(fiber) <= set(node) and len(fiber) == layers  # the fiber stays on the node
            assert [geometry.layer(r) for r in fiber] == list(range(layers))
            assert len({geometry.layer_rank(r) for r in fiber}) == 1


def test_k_smaller_than_the_layers_still_owns_everything_once():
    geometry = Layers.build(nodes_of(2, 4), 4)
    layout = LayeredLayout(9, 7, 2, geometry, Grid(2, 1))
    assert (owners(layout, "a_block", (9, 2)) == 1).all() and (owners(layout, "b_block", (2, 7)) == 1).all()
    assert (owners(layout, "c_block", (9, 7)) == 1).all()
    assert [layout.layer_layout(layer).k for layer in range(4)] == [1, 1, 0, 0]


def test_worked_example():
    geometry = Layers.build([[0, 1, 2, 3], [4, 5, 6, 7]], 2)
    layout = LayeredLayout(101, 67, 53, geometry, Grid(2, 2))
    assert layout.c_block(1) == ((0, 26), (34, 67)) and layout.c_block(3) == ((26, 51), (34, 67))
    assert layout.a_block(3) == ((0, 51), (27 + 13, 53)) and layout.b_block(2)[0] == (27, 27 + 13)


@pytest.mark.parametrize("text,expected", [("summa", "summa"), ("2.5D", "2.5d"), ("2.5d:4", "2.5d:4"),
                                           (" auto ", "auto"), ("2.5d: 2", "2.5d:2")])
def test_parse_algo(text, expected):
    assert str(parse_algo(text)) == expected


@pytest.mark.parametrize("text", ["2d", "2.5d:0", "2.5d:-2", "2.5d:x", "2.5d:", "summa:2", "3d:2"])
def test_parse_algo_refuses(text):
    with pytest.raises(InputError, match=rf"^--algo={text!r}: expected"):
        parse_algo(text)


def test_check_layers_messages():
    with pytest.raises(InputError, match=r"^--algo=2\.5d:3: 3 layers must divide the 2 ranks of each node$"):
        check_layers(3, [2, 2])
    with pytest.raises(InputError, match="same number of ranks, not 2, 3"):
        check_layers(2, [2, 3])
    with pytest.raises(InputError, match="k=3 is less than 4 layers"):
        check_layers(4, [4], k=3)
    check_layers(2, [4, 4], k=2)
    assert valid_layer_counts(6, 100) == (2, 3, 6) and valid_layer_counts(1, 100) == ()


def test_config_and_environment():
    assert RunConfig().algo == "summa"
    assert settings_from_environment({"HPCMM_ALGO": "2.5D:2"}) == {"algo": "2.5d:2"}
    with pytest.raises(InputError, match=r"^HPCMM_ALGO='2\.5d:0': expected"):
        settings_from_environment({"HPCMM_ALGO": "2.5d:0"})
    with pytest.raises(InputError, match="--grid=2x1: applies to --algo=summa only"):
        RunConfig(algo="2.5d:2", grid=(2, 1))
    ns = parse(["--algo", "2.5D:4", "--machine", "h200x8-ndr"])
    cfg = config_from(ns, environ={}, argv=[])
    assert (cfg.algo, cfg.machine) == ("2.5d:4", "h200x8-ndr")
    with pytest.raises(InputError, match="--algo='fast'"):
        parse(["--algo", "fast"])


def test_auto_picks_what_the_model_says(tmp_path):
    """Long k on a slow network: 2.5d must win; short k and a large C over slow links in the node: summa."""
    placed = Placed(8, (2, 2, 2, 2), 8, True)
    base = builtin("h200x2")
    slow_net = dataclasses.replace(base, name="slow-net", net_gbps=0.5, staged_gbps=0.5)
    slow_node = dataclasses.replace(base, name="slow-node", intra_gbps=1.0)
    for machine, shape, winner in ((slow_net, (4096, 4096, 16384), "2.5d:2"),
                                   (slow_node, (16384, 16384, 512), "summa")):
        path = tmp_path / f"{machine.name}.json"
        path.write_text(machine.to_json())
        choice = choose("auto", placed, shape, "float64", machine=str(path))
        predicted = dict(choice.predicted)
        assert set(predicted) == {"summa", "2.5d:2"}
        for name, seconds in predicted.items():  # the very figures the model gives
            assert seconds == pytest.approx(predict(Problem(*shape), 8, machine, ranks_per_node=2,
                                                    ranks_per_host=8, algo=name, cuda_aware=True).seconds)
        assert choice.ran == winner == min(predicted, key=predicted.get), predicted
        assert choice.summary()["algo_asked"] == "auto" and choice.summary()["algo"] == winner


def test_two_point_five_without_c_takes_the_fastest_layer_count():
    choice = choose("2.5d", Placed(8, (4, 4), 8, False), (4096, 4096, 4096), "float64")
    predicted = dict(choice.predicted)
    assert set(predicted) == {"2.5d:2", "2.5d:4"} and choice.ran == min(predicted, key=predicted.get)
    with pytest.raises(InputError, match="no layer count above 1"):
        choose("2.5d", Placed(2, (1, 1), 2, False), (64, 64, 64), "float64")


def test_model_layers_cut_the_virtual_node():
    """The model refuses what the run refuses: layers must divide the (virtual) node, not only the host."""
    with pytest.raises(InputError, match="4 layers must divide the 2 ranks of each node"):
        predict(Problem(4096, 4096, 4096), 8, builtin("h200x2"), ranks_per_node=2, ranks_per_host=8,
                algo="2.5d:4")


@pytest.mark.parametrize("ranks, args, line", [
    (2, ["--algo", "2.5d:3"], "hpcmm: error: --algo=2.5d:3: 3 layers must divide the 2 ranks of each node"),
    (2, ["--algo", "2.5d:zero"], "hpcmm: error: argument --algo: --algo='2.5d:zero': expected"),
    (4, ["--algo", "2.5d:2", "--k", "7", "--panel", "4"],
     "hpcmm: error: --panel=4: wider than the k of a 2.5d layer (k=7 over 2 layers: 3 for the narrowest)"),
])
def test_bad_algo_exits_2_before_any_work(tmp_path, ranks, args, line):
    """A bad --algo (or a panel wider than a layer's k) ends the job with status 2 and one line, and no file.

    The verdict comes from each rank's own stderr (tests/ranklog.py), not from the launcher's mixed output.
    """
    out = tmp_path / "never.h5"
    argv = hpcmm_argv("--device", "cpu", "--quiet", "--m", "16", "--ranks-per-node", "2", *args, "--out", str(out))
    o = ranklog.run([Part(argv, ranks=ranks)], tmp_path / "logs", tmp_path, hang_within())
    assert o.rc == 2, o.describe()
    assert o.the_line()[1].startswith(line), o.describe()
    assert not out.exists()


@pytest.mark.timeout(BACKSTOP)
def test_products_at_8_ranks(tmp_path):
    mpiexec = mpiexec_or_skip()
    try:
        import pytest_mpi  # noqa: F401
    except ImportError:
        pytest.skip("pytest-mpi is not installed (pip install -e '.[test]')")
    cmd = [mpiexec, "-n", "8", sys.executable, "-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider",
           "tests/mpi/test_twofive_mpi.py", "--junit-per-rank", str(tmp_path)]
    proc = run_launcher(cmd, None, stall=MPI_TIMEOUT + quiet_within())  # a mark per test, as the MPI suite
    problems = suite_verdict(tmp_path, 8)
    assert not problems, "\n\n".join(problems) + f"\n\nlauncher output (last part):\n{proc.stdout[-8000:]}"
    assert proc.returncode == 0, proc.stdout[-20000:]

