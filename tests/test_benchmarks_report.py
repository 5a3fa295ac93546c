"""``python -m benchmarks report``: its command line, and the table it writes from a
results record (a small fake one here; nothing is measured)."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("benchmarks_report",
                                               ROOT / "benchmarks" / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

MACHINE = "2-core Test CPU, no GPU, jax 0.10.2"
RECORD = {
    "mode": "quick", "machine": MACHINE, "commit": "abc1234", "seconds": {"ppo": 12.0},
    "rows": [
        {"key": "ppo-rejax", "what": "PPO, CartPole-v1", "peer": "rejax", "machine": MACHINE,
         "commit": "abc1234", "status": "measured", "date": "2026-01-02 03:04 UTC",
         "command": "python benchmarks/ppo.py --as-users-run", "ours": 300_000.0,
         "theirs": 200_000.0, "unit": "env steps/s", "ratio": 1.5, "ours_return": None,
         "peer_return": None, "note": "4 envs"},
        {"key": "sac-rejax", "what": "SAC, Pendulum-v1", "peer": "rejax", "machine": MACHINE,
         "commit": "abc1234", "status": "measured", "date": "2026-01-02 03:05 UTC",
         "command": "python benchmarks/sac.py", "ours": 2_000.0, "theirs": 1_000.0,
         "unit": "env steps/s", "ratio": 2.0, "ours_return": -150.25, "peer_return": -170.5,
         "note": ""},
        {"key": "td3-rejax", "what": "TD3, Pendulum-v1", "peer": "rejax", "machine": MACHINE,
         "commit": "abc1234", "status": "not measured yet", "date": "",
         "command": "python -m benchmarks report --quick --only td3-rejax",
         "note": "no benchmark script for it yet"},
        {"key": "dqn-rejax", "what": "DQN, CartPole-v1", "peer": "rejax", "machine": MACHINE,
         "commit": "abc1234", "status": "skipped", "date": "2026-01-02 03:06 UTC",
         "command": "python benchmarks/apex.py --speed-only", "note": "rejax not installed"},
    ],
    "tables": {"compare": [
        {"entry": "dqn", "paradigm": "serial replay", "steps_per_second": 50_000.0,
         "final_return": 120.0, "compile_seconds": 3.25, "train_seconds": 2.0,
         "env_steps": 100_000},
        {"entry": "ppo", "paradigm": "synchronous actors", "steps_per_second": 400_000.0,
         "final_return": 500.0, "compile_seconds": 4.5, "train_seconds": 0.25,
         "env_steps": 100_000},
    ]},
}


def test_help_runs():
    out = subprocess.run([sys.executable, "-m", "benchmarks", "report", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--quick" in out.stdout and "--full" in out.stdout


def test_render_rows():
    md = report.render(RECORD).splitlines()
    # measured: 300,000 / 200,000 = 1.50; no returns recorded -> "-"
    assert ("| PPO, CartPole-v1 | rejax | 300,000 | 200,000 | env steps/s | **1.50** | - | "
            f"{MACHINE} | 2026-01-02 03:04 UTC | abc1234 | "
            "`python benchmarks/ppo.py --as-users-run` | 4 envs |") in md
    # returns: -150.25 -> "-150.2" (one decimal, round half to even), -170.5 -> "-170.5"
    assert any(r.startswith("| SAC, Pendulum-v1 | rejax | 2,000 | 1,000 |")
               and "| **2.00** | -150.2 / -170.5 |" in r for r in md)
    # a pending row names no machine and no commit, only the command that will fill it
    assert ("| TD3, Pendulum-v1 | rejax | not measured yet | | | | |  |  |  | "
            "`python -m benchmarks report --quick --only td3-rejax` | "
            "no benchmark script for it yet |") in md
    assert any(r.startswith("| DQN, CartPole-v1 | rejax | skipped |")
               and "rejax not installed" in r for r in md)
    # compare's table, fastest first: ppo 400,000 before dqn 50,000
    ppo = md.index("| ppo | synchronous actors | 100,000 | 400,000 | 500.0 | 4.5 |")
    dqn = md.index("| dqn | serial replay | 100,000 | 50,000 | 120.0 | 3.2 |")
    assert ppo < dqn


def test_write_summary_keeps_the_prose(tmp_path):
    path = tmp_path / "B.md"
    path.write_text(f"# B\nbefore\n{report.START}\nold table\n{report.END}\nafter\n")
    report.write_summary(path, "new table")
    assert path.read_text() == f"# B\nbefore\n{report.START}\nnew table\n{report.END}\nafter\n"
    path.write_text("# B\nno markers\n")
    with pytest.raises(ValueError, match="add the two markers"):
        report.write_summary(path, "new table")


def test_render_only_command(tmp_path):
    record, md = tmp_path / "r.json", tmp_path / "B.md"
    record.write_text(json.dumps(RECORD))
    md.write_text(f"{report.START}\n{report.END}\n")
    run = [sys.executable, "-m", "benchmarks", "report", "--render-only", str(record),
           "--report", str(md)]
    out = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "| **1.50** |" in md.read_text()
    md.write_text("no markers\n")  # a user's mistake: one line, exit 2
    out = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_replay_readers():
    rows = [  # us per op; speedup = flashbax / ours
        {"transition": "minatar", "capacity": 2**17, "op": "uniform add 256", "ours_us": 40.0,
         "flashbax_us": 60.0, "speedup": 1.5, "xla_floor_us": 20.0},
        {"transition": "minatar", "capacity": 2**17, "op": "prioritized add 256",
         "ours_us": 50.0, "flashbax_us": 200.0, "speedup": 4.0},
        {"transition": "minatar", "capacity": 2**17, "op": "uniform sample 256",
         "ours_us": 90.0, "flashbax_us": 300.0, "speedup": 300 / 90},
    ]
    copy = report.replay_copy({"rows": rows})
    assert (copy.ours, copy.theirs, copy.ratio) == (40.0, 20.0, 0.5)  # 20 / 40
    low = report.replay_flashbax({"rows": rows})  # the uniform add 256 is left out
    assert low.ratio == pytest.approx(300 / 90) and "uniform sample 256" in low.note
    assert "bare gather" not in low.note  # no floor in this run
    rows[2].update(xla_floor_us=60.0, flashbax_over_xla_floor=5.0)
    low = report.replay_flashbax({"rows": rows})
    assert low.note.endswith("uniform sample 256: flashbax 5.0x a bare gather of its rows, "
                             "ours 3.3x flashbax")


def test_merge_keeps_the_rows_not_rerun():
    new = {"mode": "quick", "machine": "m2", "commit": "def5678", "seconds": {"sac": 9.0},
           "cpu_seconds": {"sac": 8.0}, "tables": {},
           "rows": [{**RECORD["rows"][1], "ratio": 3.0}]}
    merged = report.merge({**RECORD, "cpu_seconds": {}}, new)
    assert [r["key"] for r in merged["rows"]] == ["ppo-rejax", "dqn-rejax", "sac-rejax",
                                                  "td3-rejax"]  # in LINES' order
    assert merged["rows"][2]["ratio"] == 3.0 and merged["tables"] == RECORD["tables"]
    assert merged["seconds"] == {"ppo": 12.0, "sac": 9.0} and merged["commit"] == "def5678"


def test_merge_drops_a_selected_row_the_new_run_holds_no_figure_for():
    # --only sac-rejax,td3-rejax where this mode's run gives td3-rejax no figure: the
    # earlier record's td3-rejax row (a failed run, say) does not stay in the report.
    new = {"mode": "quick", "machine": "m2", "commit": "def5678", "seconds": {"sac": 9.0},
           "cpu_seconds": {}, "tables": {}, "selected": ["sac-rejax", "td3-rejax"],
           "rows": [{**RECORD["rows"][1], "ratio": 3.0}]}
    merged = report.merge({**RECORD, "cpu_seconds": {}}, new)
    assert [r["key"] for r in merged["rows"]] == ["ppo-rejax", "dqn-rejax", "sac-rejax"]


def test_run_job_skips_a_missing_peer_and_names_a_kill(tmp_path):
    say = lambda _: None  # noqa: E731
    missing = report.Job("x", ("-c", "pass"), ("-c", "pass"), None,
                         needs=("no_such_module_here",))
    run = report.run_job(missing, "quick", tmp_path, 60, say)
    assert run["status"] == report.SKIPPED and "no_such_module_here not installed" in run["note"]
    killed = report.Job("x", ("-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
                        (), None)
    run = report.run_job(killed, "quick", tmp_path, 60, say)
    assert (run["status"], run["note"]) == (report.FAILED, "killed by signal 9")
    ok = report.Job("x", ("-c", "print('{\"median\": 2.5}')"), (), None)
    run = report.run_job(ok, "quick", tmp_path, 60, say)
    assert run["status"] == report.MEASURED and run["data"] == {"median": 2.5}
    assert json.loads((tmp_path / "x.json").read_text()) == {"median": 2.5}


def test_td3_reader():
    data = {  # shaped like benchmarks/td3.py's JSON
        "steps": 30_000, "seeds": 2,
        "median_env_steps_per_s": {"td3": 1_000.0, "rejax": 400.0},
        "greedy_return": {"td3": -150.0, "rejax": -160.0},
    }
    fig = report.td3_rejax(data)
    assert (fig.ours, fig.theirs, fig.unit) == (1_000.0, 400.0, "env steps/s")
    assert fig.ratio == 2.5  # 1,000 / 400
    assert (fig.ours_return, fig.peer_return) == (-150.0, -160.0)
    assert fig.note.startswith("30,000 steps x 2 seed(s)")


def _host(case: str, steps_per_second: float, final_return: float, steps: int = 8192) -> dict:
    return {"case": case, "steps": steps, "steps_per_second": steps_per_second,
            "train_seconds": steps / steps_per_second, "compile_seconds": 40.0,
            "final_return": final_return}


def test_host_env_readers():
    rows = [  # shaped like benchmarks/host_envs.py's JSON
        _host("jaxrl_par:ppo:8:async", 2_000.0, 40.0),
        _host("jaxrl_par:ppo:8:sync", 4_000.0, 40.0),
        _host("sb3:ppo:8:subproc", 500.0, 38.0),
        _host("jaxrl_par:ppo:32:async", 3_000.0, 30.0),
        _host("sb3:ppo:32:subproc", 1_000.0, 25.0),
        _host("sb3:ppo:32:dummy", 1_500.0, 25.0),
        _host("jaxrl_par:sac:4:async", 750.0, -900.0, 6_000),
        _host("sb3:sac:4:subproc", 150.0, float("nan"), 6_000),
    ]
    ppo = report.host_ppo_sb3({"rows": rows})
    # the most envs both ran: 32; 3,000 / 1,000 = 3.0; at 8 envs 2,000 / 500 = 4.00x
    assert (ppo.ours, ppo.theirs, ppo.ratio) == (3_000.0, 1_000.0, 3.0)
    assert (ppo.ours_return, ppo.peer_return) == (30.0, 25.0)
    assert ppo.note.startswith("32 envs, 8,192 steps; 8 envs 4.00x")
    sac = report.host_sac_sb3({"rows": rows})
    assert (sac.ours, sac.theirs, sac.ratio) == (750.0, 150.0, 5.0)  # 750 / 150
    assert (sac.ours_return, sac.peer_return) == (-900.0, None)  # NaN: no episode ended
    # without SB3 the script writes jaxrl_par's rows only: neither row has a figure
    ours_only = {"rows": [r for r in rows if r["case"].startswith("jaxrl_par")]}
    assert report.host_ppo_sb3(ours_only) is None and report.host_sac_sb3(ours_only) is None
    assert report.host_td3_sb3({"rows": rows}) is None  # a run with --no-td3


def test_host_env_readers_take_the_default_grouped_envs_where_the_run_has_them():
    rows = [
        _host("jaxrl_par:ppo:32:grouped", 12_000.0, 30.0),
        _host("jaxrl_par:ppo:32:async", 3_000.0, 30.0),
        _host("sb3:ppo:32:subproc", 1_000.0, 25.0),
        {**_host("jaxrl_par:sac:4:grouped", 900.0, -900.0, 6_000), "updates_per_second": 800.0},
        {**_host("jaxrl_par:sac:4:async", 750.0, -900.0, 6_000), "updates_per_second": 700.0},
        {**_host("sb3:sac:4:subproc", 150.0, -950.0, 6_000), "updates_per_second": 100.0},
    ]
    ppo = report.host_ppo_sb3({"rows": rows})
    # 12,000 / 1,000 = 12.0; the async case 3,000 / 1,000 = 3.00x in the note
    assert (ppo.ours, ppo.ratio) == (12_000.0, 12.0)
    assert ppo.note.startswith("32 envs, 8,192 steps; a subprocess per core; "
                               "a subprocess per env (async) 3.00x")
    sac = report.host_sac_sb3({"rows": rows})
    assert (sac.ours, sac.ratio) == (900.0, 6.0)  # 900 / 150
    assert "(async) 5.00x" in sac.note and "800 / 100 = 8.00x" in sac.note


def test_host_td3_reader():
    rows = [  # host_envs.py's TD3 cases (replay learners also give gradient steps/s)
        {**_host("jaxrl_par:td3:4:async", 1_800.0, -900.0, 6_000), "updates_per_second": 1_500.0},
        {**_host("jaxrl_par:td3:4:sync", 2_000.0, -900.0, 6_000), "updates_per_second": 1_700.0},
        {**_host("sb3:td3:4:subproc", 400.0, -1_100.0, 6_000), "updates_per_second": 300.0},
    ]
    fig = report.host_td3_sb3({"rows": rows})
    # the subprocess cases: 1,800 / 400 = 4.5 env steps/s; 1,500 / 300 = 5.00x updates
    assert (fig.ours, fig.theirs, fig.unit, fig.ratio) == (1_800.0, 400.0, "env steps/s", 4.5)
    assert (fig.ours_return, fig.peer_return) == (-900.0, -1_100.0)
    assert fig.note == ("4 envs, 6,000 steps; gradient steps/s 1,500 / 300 = 5.00x; "
                        "compile 40 s apart")


def test_ppo_sb3_reader(tmp_path):
    path = tmp_path / "sb3_ppo.json"  # shaped like benchmarks/sb3_ppo.py's JSON
    path.write_text(json.dumps({
        "steps": 40_960, "hyperparameters": {"num_envs": 8, "num_steps": 32},
        "runs": {"ours": [{"steps_per_second": 90_000.0, "compile_s": 6.0,
                           "final_return": 200.0}],
                 "sb3": [{"steps_per_second": 1_500.0, "torch_threads": 2,
                          "final_return": 150.0}]},
        "median_steps_per_second": {"ours": 90_000.0, "sb3": 1_500.0},
        "final_return": {"ours": [200.0, 300.0], "sb3": [150.0, None]},
        "compile_s": 6.0}))
    fig = report.ppo_sb3(json.loads(path.read_text()))
    assert (fig.ours, fig.theirs, fig.unit, fig.ratio) == (90_000.0, 1_500.0, "env steps/s", 60.0)
    assert (fig.ours_return, fig.peer_return) == (250.0, 150.0)  # means; a None left out
    assert fig.note == "40,960 steps, 8 envs; compile 6 s apart; SB3 torch threads 2"


def test_dqn_purejaxrl_reader(tmp_path):
    path = tmp_path / "purejaxrl_dqn.json"  # shaped like benchmarks/purejaxrl_dqn.py's JSON
    path.write_text(json.dumps({
        "steps": 200_000,
        "median_steps_per_second": {"ours": 60_000.0, "purejaxrl": 40_000.0},
        "compile_s": {"ours": 5.0, "purejaxrl": 9.0},
        "final_return": {"ours": [400.0], "purejaxrl": [120.0, 140.0]},
        "greedy_return": {"ours": [500.0], "purejaxrl": [450.0, 350.0]}}))
    fig = report.dqn_purejaxrl(json.loads(path.read_text()))
    assert (fig.ours, fig.theirs, fig.ratio) == (60_000.0, 40_000.0, 1.5)  # 60,000 / 40,000
    assert (fig.ours_return, fig.peer_return) == (500.0, 400.0)  # greedy, mean over rounds
    assert fig.note == ("200,000 steps, 10 envs; compile 5 s / 9 s apart; greedy returns; "
                        "training returns 400.0 / 130.0")


def test_every_line_has_a_job_or_a_reason():
    jobs = {job.key for job in report.JOBS}
    for line in report.LINES:
        assert (line.job in jobs and line.read is not None) or (line.job is None
                                                                 and line.pending), line.key
    pj = next(job for job in report.JOBS if job.key == "purejaxrl-dqn")
    assert pj.purejaxrl and "--steps" in pj.quick
