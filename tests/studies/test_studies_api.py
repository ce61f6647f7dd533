"""The studies floor through its API (no command line in the call): ``run_model``, ``run_json`` (one testbench
case, the sweep worker's run) and ``run_sweep``, each against what ``plena-sim ... --json`` reports for the same
inputs, value for value (wall times and paths aside)."""

from __future__ import annotations

import json

import pytest

from studies.errors import CaseError, ModelError, StudyError
from studies.model import run_model
from studies.testbench_run import CaseRequest, run_json
from tests.util.cli import run

#: the columns of a sweep's row that depend on where and when a point ran, not on what it is
VOLATILE = ("wall_s", "peak_rss_mib", "worker", "started_at", "finished_at", "attempts", "code_version")


#: the host's timings in a document (every other value is the simulated run's)
WALL = ("wall_s", "host_seconds", "sim_cycles_per_second")


def _without_wall(doc: dict) -> dict:
    out = {k: v for k, v in doc.items() if k not in WALL}
    if isinstance(out.get("stats"), dict):
        out["stats"] = _without_wall(out["stats"])
    if "runs" in out:
        out["runs"] = {phase: _without_wall(r) for phase, r in out["runs"].items()}
    return out


def test_run_model_is_the_model_commands_json(capsys):
    doc = run_model("tiny", seq=16, kv=24)
    code, out, err = run(capsys, "model", "tiny", "--seq", "16", "--kv", "24", "--json")
    assert code == 0, err
    cli = json.loads(out)
    assert doc["verdict"] == "PASS" and doc["layers"] == 2 and doc["clock_hz"] == 1e9
    assert doc["prefill_layer_cycles"] == cli["prefill_layer_cycles"] > doc["decode_layer_cycles"] > 0
    assert doc["ttft_s"] == 2 * doc["prefill_layer_cycles"] / 1e9
    assert doc["decode_tokens_per_s"] == 1 / (2 * doc["decode_layer_cycles"] / 1e9)
    assert json.loads(json.dumps(_without_wall(doc))) == _without_wall(cli)


def test_run_model_refusals_are_typed():
    with pytest.raises(ModelError, match=r"^model: seq=0 must be >= 1$"):
        run_model("tiny", seq=0)
    with pytest.raises(ModelError, match=r"^unknown model 'nope'"):
        run_model("nope")
    assert issubclass(ModelError, StudyError) and issubclass(CaseError, StudyError)


def test_run_json_is_the_run_commands_json(capsys):
    ran = run_json(CaseRequest("linear", set=["rows=4", "K=128"], hw="small", seed=3), timing="overlap")
    argv = ["run", "linear", "--set", "rows=4", "--set", "K=128", "--hw", "small", "--seed", "3", "--timing", "overlap"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    cli = json.loads(out)
    assert ran.report.passed and ran.doc["cycles"] == cli["cycles"] > 0
    assert ran.doc["params"] == cli["params"] and ran.doc["params"]["rows"] == 4 and ran.doc["case"] == "custom"
    from studies.documents import as_printed

    assert _without_wall(as_printed(ran.doc)) == _without_wall(cli)


def test_run_json_refuses_what_the_run_command_refuses(capsys):
    with pytest.raises(CaseError) as exc:
        run_json(CaseRequest("linear", set=["rows=x"]))
    code, _out, err = run(capsys, "run", "linear", "--set", "rows=x")
    assert code == 2 and err.strip() == f"error: {exc.value}" == "error: --set rows: expected an integer, got 'x'"


SPEC = """
name = "two"
[hardware]
presets = ["transactional"]
[[workload]]
testbench = "linear"
[workload.set]
rows = [4, 9]
"""


def test_run_sweep_is_the_sweep_commands_json(tmp_path, capsys):
    from studies.sweep.engine import run_sweep
    from studies.sweep.spec import parse_spec
    from studies.sweep.store import rows

    summary = run_sweep(parse_spec(SPEC, "two.toml"), tmp_path / "api.db", workers=2, processes=False)
    (tmp_path / "two.toml").write_text(SPEC)
    code, out, err = run(capsys, "sweep", tmp_path / "two.toml", "--out", tmp_path / "cli.db", "--threads", "--json")
    assert code == 0, err
    cli = json.loads(out)
    doc = summary.to_dict()
    assert (doc["points"], doc["ran"], doc["failed"], doc["by_status"]) == (2, 2, 0, {"PASS": 2})
    keys = ("points", "ran", "skipped", "failed", "filtered", "by_status", "workers")
    assert {k: doc[k] for k in keys} == {k: cli[k] for k in keys}
    api_rows = [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows(tmp_path / "api.db")]
    cli_rows = [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows(tmp_path / "cli.db")]
    assert api_rows == cli_rows and [r["params"]["rows"] for r in api_rows] == [4, 9]
    for r in api_rows:  # each point's row holds what `plena-sim run --json` reports for it
        code, out, err = run(capsys, "run", "linear", "--hw", "transactional", "--set", f"rows={r['params']['rows']}",
                             "--timing", "serial", "--seed", "0", "--json")  # fmt: skip
        assert code == 0, err
        one = json.loads(out)
        assert r["status"] == "PASS" and (r["cycles"], r["instructions"]) == (one["cycles"], one["instructions"])
        assert r["busy"] == one["stats"]["unit_busy_cycles"] and r["regions"] == one["regions"]


@pytest.mark.parametrize(
    "workload,status",
    [
        ("rows = ['x']", "plan error"),  # the --set type check
        ("K = [65]", "plan error"),  # the generator's plan
        ("rows = [4]", "PASS"),
    ],
)
def test_a_points_verdict_and_message_are_the_run_commands(workload, status, capsys):
    """The worker's run of one point (:func:`studies.sweep.point.run_point`) gives the verdict of the exit code
    and the message of the error line that ``plena-sim run ... --json`` gives."""
    from studies.sweep.point import run_point
    from studies.sweep.spec import parse_spec

    (point,), _ = parse_spec(f"[[workload]]\ntestbench = 'linear'\n[workload.set]\n{workload}\n").expand()
    row = run_point(point.to_dict())
    code, out, err = run(capsys, *point.argv())
    assert row["status"] == status == {0: "PASS", 2: "plan error"}[code]
    if status == "PASS":
        assert row["message"] == "" and row["cycles"] == json.loads(out)["cycles"] > 0
    else:
        assert row["message"] == err.strip().removeprefix("error: ") and json.loads(out) == {"error": row["message"]}
        assert "cycles" not in row
