"""plena-sim sweep: the spec and its expansion, the engine on a LocalCluster (every point stored, resume,
reproducibility over 1 / 2 workers and threads), a forced kill of the sweep, a worker killed mid-point."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plena_cli.main import main
from studies.sweep import expr
from studies.sweep.engine import run_sweep
from studies.sweep.spec import SpecError, parse_spec
from studies.sweep.store import rows

ROOT = Path(__file__).resolve().parents[2]

SPEC_48 = """
name = "t48"
timing = ["serial", "overlap"]
[hardware]
presets = ["transactional", "small", "v80-64x16"]
[[workload]]
testbench = "linear"
[workload.set]
rows = [4, 9]
N = [64, 128]
K = [64, 128]
"""

#: the columns that depend on where and when a point ran, not on what it is
VOLATILE = ("wall_s", "peak_rss_mib", "worker", "started_at", "finished_at", "attempts", "code_version")


def _table(db: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows(db)]


# ----------------------------------------------------------------------------------------- the spec


def test_expansion_order_axes_derive_and_filters():
    spec = parse_spec(
        """
        timing = ["serial", "overlap"]
        seeds = {start = 0, stop = 1}
        [hardware]
        presets = ["transactional", "small"]
        [hardware.set]
        BLEN = [4, 64]
        [hardware.derive]
        BROADCAST_AMOUNT = "MLEN // HLEN"
        [[workload]]
        testbench = "linear"
        [workload.set]
        rows = [4, 8]
        [[filter]]
        when = "BLEN > 16 and MLEN == 64"
        reason = "too tall"
        [[filter]]
        when = "rows == 8 and timing == 'overlap'"
        reason = "not needed"
        """,
        "t.toml",
    )
    run, dropped = spec.expand()
    assert len(run) + len(dropped) == 2 * 2 * 2 * 2 * 2
    why = [(d.point.preset, d.point.set_hw["BLEN"], d.reason.split(":")[0]) for d in dropped]
    assert why.count(("transactional", 64, "too tall")) == 8
    assert why.count(("small", 64, "config")) == 8  # MLEN=32 is not a multiple of BLEN=64
    assert sum(d.reason == "not needed" for d in dropped) == 4 and len(dropped) == 20
    first = run[0]
    assert (first.preset, dict(first.set_hw), dict(first.params), first.timing, first.seed) == (
        "transactional",
        {"BLEN": 4, "BROADCAST_AMOUNT": 4},
        {"rows": 4},
        "serial",
        0,
    )
    assert [p.order for p in run] == sorted(p.order for p in run)
    assert len({p.id for p in run}) == len(run)
    assert first.argv() == [
        "run", "linear", "--hw", "transactional", "--set-hw", "BLEN=4", "--set-hw", "BROADCAST_AMOUNT=4",
        "--set", "rows=4", "--timing", "serial", "--seed", "0", "--json",
    ]  # fmt: skip
    small = next(p for p in run if p.preset == "small")
    assert small.set_hw["BROADCAST_AMOUNT"] == 2  # small: MLEN 32 / HLEN 16


def test_a_config_that_does_not_validate_is_filtered_with_the_error():
    spec = parse_spec('[hardware]\n[hardware.set]\nHLEN = [16, 48]\n[[workload]]\ntestbench = "linear"\n')
    run, dropped = spec.expand()
    assert len(run) == 1 and len(dropped) == 1
    assert dropped[0].reason.startswith("config: ") and "HLEN" in dropped[0].reason


def test_model_workloads_take_the_presets_shape():
    spec = parse_spec('[[workload]]\nmodel = "tiny"\n[workload.set]\nseq = [64, 128]\n'
                      '[[workload]]\nmodel = "tiny"\nkind = "decode"\n[workload.set]\nkv = [32]\n')  # fmt: skip
    run, _ = spec.expand()
    assert [(p.testbench, p.workload, p.params.get("seq"), p.params.get("kv")) for p in run] == [
        ("decoder_layer", "tiny/prefill", 64, None),
        ("decoder_layer", "tiny/prefill", 128, None),
        ("decoder_decode", "tiny/decode", None, 32),
    ]
    assert run[0].params["hidden"] == 256 and run[0].params["kv_heads"] == 2


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("[[workload]]\ntestbench = 'nope'\n", "workload[0].testbench = 'nope': unknown testbench"),
        ("[[workload]]\ntestbench = 'linear'\n[workload.set]\nfoo = [1]\n", "linear has no parameter 'foo'"),
        ("[hardware]\npresets = ['x']\n[[workload]]\ntestbench = 'linear'\n", "hardware.presets = 'x': unknown"),
        ("timing = ['rtl2']\n[[workload]]\ntestbench = 'linear'\n", "timing = 'rtl2': unknown"),
        ("colour = 1\n[[workload]]\ntestbench = 'linear'\n", "colour = 1: unknown key"),
        ("name = 'x'\n", "at least one [[workload]]"),
        ("[[workload]]\ntestbench = 'linear'\n[[filter]]\nwhen = '__import__(\"os\")'\n", "only min(...) and max(...)"),
        ("[[workload]]\ntestbench = 'linear'\n[workload.set]\nrows = []\n", "at least one value"),
        ("[[workload]]\ntestbench = 'linear'\n[workload.set]\nrows = {start = 5, stop = 1}\n", "stop >= start"),
        ("[[workload]\n", "not valid TOML"),
        ("[[workload]]\nmodel = 'tiny'\nkind = 'decode'\n[workload.set]\nseq = [1]\n", "takes kv"),
        ("[[workload]]\ntestbench = 'linear'\n[workload.set]\nseed = [1, 2]\n", "seeds = [...]"),
    ],
)
def test_bad_specs_name_the_key_and_value(text, fragment):
    with pytest.raises(SpecError, match=None) as info:
        parse_spec(text, "s.toml")
    assert fragment in str(info.value) and str(info.value).startswith("s.toml")


def test_expressions_are_arithmetic_only():
    assert expr.evaluate("max(MLEN // HLEN, 2) ** 2 % 7", {"MLEN": 64, "HLEN": 16}) == 2
    for bad, msg in (
        ("a.b", "not allowed"),
        ("x", "unknown name 'x'"),
        ("2 ** 1000", "magnitude <= 64"),
        ("1/0", "division"),
    ):
        with pytest.raises(expr.ExprError, match=msg):
            expr.evaluate(bad, {"a": 1})


# ----------------------------------------------------------------------------------------- the engine


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The 48-point sweep on 2 worker processes, then the same spec again (a resume)."""
    d = tmp_path_factory.mktemp("sweep")
    spec = parse_spec(SPEC_48, "t48.toml")
    first = run_sweep(spec, d / "a.db", workers=2)
    again = run_sweep(spec, d / "a.db", workers=2)
    return spec, d, first, again


def test_every_point_is_stored_and_a_resume_skips_them(swept):
    _spec, d, first, again = swept
    assert (first.points, first.ran, first.skipped, first.failed, first.filtered) == (48, 48, 0, 0, 0)
    assert first.by_status == {"PASS": 48} and first.workers == 2
    assert (again.ran, again.skipped) == (0, 48)
    table = rows(d / "a.db")
    assert len(table) == 48 and all(r["status"] == "PASS" and r["attempts"] == 1 for r in table)
    r = table[0]
    assert r["cycles"] > 0 and r["instructions"] > 0 and r["config"]["MLEN"] == r["MLEN"] == 64
    assert r["mac_array"] == r["BLEN"] * r["MLEN"] and r["macs"] > 0
    assert r["mac_utilization"] == pytest.approx(r["macs"] / (r["cycles"] * r["mac_array"]))
    assert set(r["busy"]) >= {"M", "V", "S", "H"} and r["result"]["passed"] is True


def test_the_same_rows_on_one_worker_two_workers_and_threads(swept, tmp_path):
    spec, d, _first, _again = swept
    run_sweep(spec, tmp_path / "one.db", workers=1)
    run_sweep(spec, tmp_path / "threads.db", workers=2, processes=False)
    base = _table(d / "a.db")
    assert _table(tmp_path / "one.db") == base
    assert _table(tmp_path / "threads.db") == base


def test_a_point_row_is_the_run_commands_json(swept, capsys):
    _spec, d, _f, _a = swept
    r = rows(d / "a.db")[5]
    argv = ["run", "linear", "--hw", r["preset"]] + [a for k, v in r["params"].items() for a in ("--set", f"{k}={v}")]
    assert main(argv + ["--timing", r["timing"], "--seed", str(r["seed"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["cycles"], doc["instructions"]) == (r["cycles"], r["instructions"])
    assert doc["stats"]["unit_busy_cycles"] == r["busy"]


def test_a_timing_only_sweep_gives_the_functional_cycles(tmp_path):
    """``timing_only = true`` (issue 30): every point runs timing-only, ends ``timed`` (not judged, not failed), with
    the cycles and busy of the functional point; the row's argv is the timing-only command."""
    text = SPEC_48.replace('timing = ["serial", "overlap"]', 'timing = ["rtl"]').replace(
        '["transactional", "small", "v80-64x16"]', '["transactional"]'
    )
    func = run_sweep(parse_spec(text), tmp_path / "f.db", workers=1, processes=False)
    timed = run_sweep(parse_spec("timing_only = true\n" + text), tmp_path / "t.db", workers=1, processes=False)
    assert func.by_status == {"PASS": 8} and timed.by_status == {"timed": 8} and timed.failed == 0
    by_params = {json.dumps(r["params"], sort_keys=True): r for r in rows(tmp_path / "f.db")}
    for r in rows(tmp_path / "t.db"):
        f = by_params[json.dumps(r["params"], sort_keys=True)]
        assert (r["cycles"], r["instructions"], r["busy"]) == (f["cycles"], f["instructions"], f["busy"])
        assert r["result"]["passed"] is None and r["id"] != f["id"]
    with pytest.raises(SpecError, match="timing_only"):
        parse_spec('timing_only = "yes"\n' + text)


# ----------------------------------------------------------------------------------------- kills


def _sweep_process(spec: Path, db: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "plena_cli", "sweep", str(spec), "--out", str(db), "--json", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )


def _finished(db: Path) -> dict[str, float]:
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        got = con.execute("SELECT id, finished_at FROM points WHERE finished_at IS NOT NULL").fetchall()
        con.close()
    except sqlite3.Error:
        return {}
    return dict(got)


def _wait(cond, timeout: float = 120.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_killed_sweep_resumes_without_rerunning_finished_points(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC_48.replace("rows = [4, 9]", "rows = [4, 9, 33, 64]"))  # 96 points
    db = tmp_path / "k.db"
    proc = _sweep_process(spec, db, "--workers", "2")
    seen_mid = _wait(lambda: len(_finished(db)) >= 10 and _finished(db))  # a reader mid-sweep sees points
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = _finished(db)
    assert len(before) >= len(seen_mid) and len(before) < 96
    done = subprocess.run(
        [sys.executable, "-m", "plena_cli", "sweep", str(spec), "--out", str(db), "--json", "--workers", "2"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=600,
    )
    summary = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert summary["skipped"] == len(before) and summary["ran"] == 96 - len(before)
    after = _finished(db)
    assert len(after) == 96 and all(after[k] == v for k, v in before.items())  # finished points not re-run


def test_a_worker_killed_mid_point_is_marked_and_the_point_rerun(tmp_path):
    spec = tmp_path / "slow.toml"
    spec.write_text(
        'seeds = [0, 1]\n[[workload]]\ntestbench = "flashattn_prefill"\n'
        "[workload.set]\nq_len = [2048]\nkv_len = [2048]\n"
    )
    db = tmp_path / "w.db"
    proc = _sweep_process(spec, db, "--workers", "2")

    def running():
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            got = con.execute(
                "SELECT id, worker FROM points WHERE status = 'running' AND worker LIKE '% pid %'"
            ).fetchall()
            con.close()
            return got
        except sqlite3.Error:
            return None

    pid, point = None, None
    for point_id, worker in _wait(running):
        pid, point = int(worker.rsplit(" ", 1)[1]), point_id
        break
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()
    summary = json.loads(out)
    assert summary["by_status"] == {"PASS": 2}
    row = next(r for r in rows(db) if r["id"] == point)
    assert row["status"] == "PASS" and row["attempts"] >= 2 and str(pid) not in row["worker"]


# ----------------------------------------------------------------------------------------- the command


def test_example_spec_runs_and_the_json_summary(tmp_path, capsys):
    assert main(["sweep", "--example"]) == 0
    text = capsys.readouterr().out
    spec = parse_spec(text, "example.toml")
    run, dropped = spec.expand()
    assert len(run) + len(dropped) <= 12 and dropped
    (tmp_path / "ex.toml").write_text(text)
    assert main(["sweep", str(tmp_path / "ex.toml"), "--out", str(tmp_path / "ex.db"), "--json", "--threads"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {k: doc[k] for k in ("points", "ran", "skipped", "failed", "filtered")} == {
        "points": len(run),
        "ran": len(run),
        "skipped": 0,
        "failed": 0,
        "filtered": len(dropped),
    }


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["sweep"], "usage: plena-sim sweep SPEC.toml"),
        (["sweep", "x.toml"], "--out RESULTS is required"),
        (["sweep", "nope.toml", "--out", "r.db"], "nope.toml: cannot read"),
        (["sweep", "x.toml", "--out", "r.db", "--workers", "0"], "--workers 0 must be >= 1"),
        (["sweep", "report"], "usage: plena-sim sweep report RESULTS"),
        (["sweep", "--example", "x"], "takes no other argument"),
    ],
)
def test_usage_errors_are_one_line(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.toml").write_text("[[workload]]\ntestbench = 'linear'\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_progress_counts_done_failed_running_and_the_rate():
    from studies.sweep.engine import Tally

    events: list[dict] = []
    t = Tally(3, events.append)
    t.started("a")
    t.started("b")
    t.finished("a", "w", "PASS")
    t.finished("b", "w", "mismatch")
    assert [(e["done"], e["failed"], e["running"], e["total"]) for e in events] == [
        (0, 0, 1, 3),
        (0, 0, 2, 3),
        (1, 0, 1, 3),
        (2, 1, 0, 3),
    ]
    assert events[-1]["status"] == "mismatch" and events[-1]["points_per_min"] > 0


def test_the_sweep_panel_without_json(tmp_path, capsys):
    (tmp_path / "s.toml").write_text("[[workload]]\ntestbench = 'linear'\n[workload.set]\nrows = [4, 8]\n")
    assert main(["sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "s.db"), "--threads"]) == 0
    out = capsys.readouterr().out
    assert "by status: PASS 2" in out and f"plena-sim sweep report {tmp_path / 's.db'}" in out


def test_a_model_layer_point_runs_with_its_regions():
    from studies.sweep.point import run_point

    spec = parse_spec('[[workload]]\nmodel = "tiny"\nkind = "decode"\n[workload.set]\nkv = [40]\n')
    (point,), _ = spec.expand()
    row = run_point(point.to_dict())
    assert row["status"] == "PASS" and row["cycles"] > 0
    paths = [r["path"] for r in row["regions"]]
    assert "layer/attention" in paths and "layer/ffn" in paths and paths[-1] == "(unlabelled)"
    assert sum(r["cycles_exclusive"] for r in row["regions"]) == row["cycles"]
