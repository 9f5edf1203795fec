"""``hpcmm model`` in this process: each option reaches the prediction, each bad input its one line.

The subprocess tables of tests/test_reliability_inputs.py check the exit status and the files a
refused command leaves; these call :func:`~hpcmm.model.cost.model_main` directly, so that a change to
how an option is read (or to the message that names it) fails here, where a mutation run sees it.
Each option's case first checks that the option changes the library's prediction, so that a command
that dropped it could not pass.
"""

from __future__ import annotations

import json

import pytest
from mpi4py import MPI

from hpcmm.cli import main as cli
from hpcmm.errors import InputError
from hpcmm.model import cost as model
from hpcmm.model.cost import Problem, builtin, predict
from test_model import _results_file

BASE = ["--machine", "h200x2", "--m", "6000", "--n", "5000", "--k", "4000", "--ranks", "4"]
PROBLEM = Problem(6000, 5000, 4000)

#: (flags beside BASE, the keywords of predict() they stand for, the first keyword's option being the one
#: tested and the others its setting)
OPTIONS = [
    (["--ranks-per-node", "1"], dict(ranks_per_node=1)),
    (["--ranks-per-host", "1", "--machine", "h200x8-ndr"], dict(ranks_per_host=1, machine="h200x8-ndr")),
    (["--grid", "1x4"], dict(grid=(1, 4))),
    (["--panel", "128"], dict(panel=128)),
    (["--prefetch", "0", "--ranks-per-node", "1"], dict(prefetch=0, ranks_per_node=1)),
    (["--algo", "split-relay", "--ranks-per-node", "1", "--ranks-per-host", "1", "--machine", "h200x8-ndr"],
     dict(algo="split-relay", ranks_per_node=1, ranks_per_host=1, machine="h200x8-ndr")),
    (["--cuda-aware", "yes", "--ranks-per-node", "1"], dict(cuda_aware=True, ranks_per_node=1)),  # h200x2: no
    (["--cuda-aware", "no", "--ranks-per-node", "1", "--ranks-per-host", "1", "--machine", "h200x8-ndr"],
     dict(cuda_aware=False, ranks_per_node=1, ranks_per_host=1, machine="h200x8-ndr")),  # h200x8-ndr: yes
    (["--balance", "none", "--ranks", "3"], dict(balance="none", ranks=3)),
    (["--mps", "yes"], dict(mps=True)),
    (["--step-order", "common"], dict(step_order="common")),
]


def _predict(ranks=4, machine="h200x2", **kw):
    return predict(PROBLEM, ranks, builtin(machine), **kw)


def _printed(argv, capsys, comm=MPI.COMM_SELF) -> str:
    assert model.model_main(cli.parse(["model", *argv]), comm) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("flags, kw", OPTIONS, ids=[" ".join(f) for f, _ in OPTIONS])
def test_each_option_reaches_the_prediction(flags, kw, capsys):
    """Text and JSON: what the library predicts with the option's keyword, not what it predicts without."""
    want = _predict(**kw)
    without = dict(list(kw.items())[1:])
    assert want.as_dict() != _predict(**without).as_dict(), "the option must change the prediction here"
    machine = builtin(kw.get("machine", "h200x2"))
    args = BASE + flags
    assert _printed(args, capsys) == model.describe(PROBLEM, want, machine) + "\n"
    assert _printed(args + ["--json"], capsys) == json.dumps(want.as_dict(), indent=2) + "\n"


def test_n_and_k_default_to_m_and_the_type_is_taken(capsys):
    out = json.loads(_printed(["--m", "3000", "--ranks", "2", "--dtype", "float32", "--json"], capsys))
    want = predict(Problem(3000, 3000, 3000, "float32"), 2, builtin("h200x2"))
    assert out == json.loads(json.dumps(want.as_dict()))
    assert out != json.loads(json.dumps(predict(Problem(3000, 3000, 3000), 2, builtin("h200x2")).as_dict()))


def test_show_prints_the_description(tmp_path, capsys):
    assert _printed(["show"], capsys) == builtin("h200x2").to_json() + "\n"
    path = tmp_path / "m.json"
    path.write_text(builtin("daint-p100").to_json())
    assert _printed(["show", "--machine", str(path)], capsys) == builtin("daint-p100").to_json() + "\n"


def test_scaling_prints_the_tables_of_its_nodes_sizes_and_type(capsys):
    got = _printed(["scaling", "--machine", "h200x8-ndr", "--nodes", "1,2", "--sizes", "8192,16384",
                    "--dtype", "float32"], capsys)
    assert got == model.scaling_tables(builtin("h200x8-ndr"), "float32", [1, 2], [8192, 16384]) + "\n"
    assert "| 2 nodes |" in got and "| 16384 |" in got


def test_check_takes_several_descriptions_and_every_file(tmp_path, capsys):
    """``--machine a,b``: each description loaded (the table says which links predicted which run)."""
    early = tmp_path / "early.json"
    late = tmp_path / "late.json"
    base = builtin("h200x2")
    early.write_text(base.replace(links_measured="2026-11-30T16:44:00+00:00").to_json())
    late.write_text(base.replace(links_measured="2026-11-30T16:47:00+00:00", staged_gbps=1.0).to_json())
    files = [_results_file(tmp_path / f"r{i}.h5", 4096, 4096, 4096, 4, 0.05, rpn=1, created=t)
             for i, t in enumerate(["2026-11-30T16:45:00+00:00", "2026-11-30T16:48:00+00:00"])]
    got = _printed(["check", *files, "--machine", f"{early},{late}"], capsys)
    machines = [model.load_machine(str(early)), model.load_machine(str(late))]
    assert got == model.check_table(files, machines) + "\n"
    assert "2026-11-30T16:44:00+00:00: 1 run(s), 2026-11-30T16:47:00+00:00: 1 run(s)" in got
    assert got != model.check_table(files[:1], machines) + "\n"


class _SecondRank:
    """A one-process communicator that says it is rank 1: what the other ranks of a job print."""

    def __init__(self):
        self.comm = MPI.COMM_SELF

    def Get_rank(self):
        return 1

    def __getattr__(self, name):
        return getattr(self.comm, name)


@pytest.mark.parametrize("argv", [[], ["show"], ["scaling", "--nodes", "1", "--sizes", "4096"]])
def test_only_rank_0_prints(argv, capsys):
    assert model.model_main(cli.parse(["model", *argv]), _SecondRank()) == 0
    assert capsys.readouterr().out == ""


def test_links_writes_the_description_on_rank_0_only(tmp_path, capsys):
    from test_model import _staged_transport

    links = _staged_transport(tmp_path / "t.h5", 3.0, "2026-11-30T16:47:00+00:00")
    save = tmp_path / "rank1.json"
    assert model.model_main(cli.parse(["model", "links", "--transport", links, "--save", str(save)]),
                            _SecondRank()) == 0
    assert not save.exists() and capsys.readouterr().out == ""


# -- refused before any work: (argv, the one line's words); {d} is the test's folder ---------------------
REFUSED = [
    (["predict", "{d}/extra.h5"], "model predict: takes no files (given {d}/extra.h5); model check reads results"),
    (["show", "{d}/extra.h5", "{d}/more.h5"], "model show: takes no files (given {d}/extra.h5)"),
    (["links", "--transport", ",", "--save", "{d}/m.json"], "--transport=',': name a `bench transport` file"),
    (["links", "--transport", "{d}/none.h5", "--save", "{d}/m.json"], "--transport={d}/none.h5"),
    (["links", "--transport", "{d}/t.h5,{d}/none.h5", "--save", "{d}/m.json"], "--transport={d}/none.h5"),
    (["links", "--transport", "{d}/t.h5", "--save", "{d}/t.h5"], "is the input file --transport={d}/t.h5"),
    (["measure", "--transport", "{d}/t.h5", "--save", "{d}/t.h5"], "is the input file --transport={d}/t.h5"),
    (["links", "--machine", "{d}/base.json", "--transport", "{d}/t.h5", "--save", "{d}/base.json"],
     "is the input file --machine={d}/base.json"),
    (["measure", "--save", "{d}/note.txt"], "--save={d}/note.txt: exists and is not a machine description"),
    (["measure", "--save", "{d}/m.json", "--sweep-seconds", "0"], "--sweep-seconds=0.0: expected a positive"),
    (["measure", "--save", "{d}/m.json", "--sweep-seconds", "-1"], "--sweep-seconds=-1.0: expected a positive"),
    (["measure", "--save", "{d}/m.json", "--sweep-seconds", "inf"], "--sweep-seconds=inf: expected a positive"),
    (["scaling", "--nodes", "1,x"], "--nodes='x': expected an integer >= 1"),
    (["scaling", "--nodes", ","], "--nodes=',': expected comma-separated integers >= 1"),
    (["scaling", "--sizes", "0"], "--sizes=0: expected an integer >= 1"),
    (["scaling", "--sizes", "16384", "--nodes", "3000000000000000000"], "--ranks=6000000000000000000: more than"),
    (["scaling", "--sizes", "20000000", "--nodes", "1"], "--nodes=1 --sizes: --m=20000000"),
    (["scaling", "--machine", "h200x8-ndr", "--sizes", "2000000", "--nodes", "1,400"],
     "--nodes=400 --sizes: --m=40000000 --n=40000000 --k=40000000"),
    (["predict", "--m", "20000000"], "--m=20000000 --n=20000000 --k=20000000: the model would simulate"),
    (["predict", "--m", "2000", "--n", "7", "--k", "20000000", "--panel", "64"], "a panel of 64"),
    (["predict", "--m", "200000", "--k", "200000", "--n", "8", "--dtype", "float16", "--ranks", "20000",
      "--grid", "20000x1"], "--m=200000 --n=8 --k=200000 --ranks=20000"),
    (["predict", "--ranks", "100000"], "--ranks=100000: the model would simulate at least"),
]


@pytest.fixture
def folder(tmp_path):
    from test_model import _staged_transport

    _staged_transport(tmp_path / "t.h5", 3.0, "2026-11-30T16:47:00+00:00")
    (tmp_path / "base.json").write_text(builtin("h200x2").to_json())
    (tmp_path / "note.txt").write_text("a note\n")
    (tmp_path / "extra.h5").write_text("")
    return tmp_path


@pytest.mark.parametrize("argv, words", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refused_with_its_line_and_nothing_written(argv, words, folder, capsys):
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    argv = [a.replace("{d}", str(folder)) for a in argv]
    with pytest.raises(InputError) as caught:
        model.model_main(cli.parse(["model", *argv]), MPI.COMM_SELF)
    assert words.replace("{d}", str(folder)) in str(caught.value)
    assert "\n" not in str(caught.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("seconds", ["0.5", "1", "2.5"])
def test_a_positive_sweep_time_is_taken(seconds, folder):
    """Every positive finite --sweep-seconds passes the check (measure's own run is timed elsewhere)."""
    model.check_options(cli.parse(["model", "measure", "--save", str(folder / "m.json"), "--sweep-seconds", seconds]))


def test_save_may_replace_a_description_but_not_what_it_reads(folder):
    """``--save`` onto a description that is not an input is allowed; checks pass, nothing written yet."""
    model.check_options(cli.parse(["model", "links", "--transport", str(folder / "t.h5"),
                                   "--save", str(folder / "base.json")]))
    assert model.load_machine(str(folder / "base.json")) == builtin("h200x2")


def test_check_reads_its_files_and_machines_before_anything(folder, capsys):
    """A ``check`` with a good file and a missing description: the description's line, nothing printed."""
    good = _results_file(folder / "good.h5", 4096, 4096, 4096, 4, 0.05, rpn=1)
    with pytest.raises(InputError, match="missing.json"):
        model.model_main(cli.parse(["model", "check", good, "--machine", f"h200x2,{folder}/missing.json"]),
                         MPI.COMM_SELF)
    assert capsys.readouterr().out == ""
    model.check_options(cli.parse(["model", "check", good, "--machine", "h200x2,daint-p100"]))
