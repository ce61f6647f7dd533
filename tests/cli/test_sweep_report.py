"""`sweep report`'s modules (studies.sweep.report; the tables of plena_cli.sweep_report): workload keys, Pareto
fronts (against a brute force), the summary's exact counts and groups, the plotted data (fronts, the heat-map
grid), the PNG / SVG files and the CSV / Parquet exports, all on small results databases written here by hand
(no simulation)."""

from __future__ import annotations

import csv
import io
import json
import random
import sqlite3
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from plena_cli import sweep_report
from studies.sweep import report, store

FA = {"testbench": "flashattn_prefill", "case_id": "P1", "params": {"q_len": 128, "kv_len": 256}, "timing": "serial"}
LIN = {"testbench": "linear", "case_id": None, "params": {"m": 64, "k": 128}, "timing": "overlap"}
LIN_SERIAL = {**LIN, "timing": "serial"}
FA_KEY = "flashattn_prefill[P1] kv_len=256 q_len=128 / serial"
LIN_KEY = "linear k=128 m=64 / overlap"
LIN_SERIAL_KEY = "linear k=128 m=64 / serial"
FA_STEM = "flashattn_prefill_P1_kv_len_256_q_len_128_serial"
LIN_STEM = "linear_k_128_m_64_overlap"

# id, workload, (MLEN, BLEN, VLEN), status, message, cycles, sram_bytes
POINTS = [
    ("a1", FA, (64, 4, 64), "PASS", "", 9000, 100_000),
    ("a2", FA, (64, 8, 64), "PASS", "", 6000, 110_000),
    ("a3", FA, (128, 4, 64), "PASS", "", 6000, 190_000),  # ties a2 on the MAC front, dominated by it on SRAM
    ("a4", FA, (128, 8, 64), "mismatch", "failing checks: O", 3000, 200_000),  # fastest, but failing
    ("a5", FA, (256, 4, 64), "PASS", "", 7000, 300_000),  # dominated by a2 on both
    ("a6", FA, (256, 8, 64), "PASS", "", 2500, 320_000),
    ("b1", LIN, (64, 4, 64), "PASS", "", 5000, 100_000),
    ("b2", LIN, (32, 8, 128), "PASS", "", 5000, 100_000),  # identical (cost, cycles) to b1: both on the fronts
    ("b3", LIN, (128, 4, 64), "PASS", "", 4000, 150_000),
    ("b4", LIN, (128, 8, 128), "fault", "pc 12: VRAM address out of range", None, 160_000),
    ("b5", LIN, (256, 4, 64), "plan error", "m must be a multiple of BLEN", None, 300_000),
    ("b6", LIN, (256, 8, 128), "plan error", "m must be a multiple of BLEN", None, 320_000),
    ("b7", LIN, (512, 4, 64), "crashed", "RuntimeError: boom", None, 600_000),
    ("b8", LIN, (512, 8, 64), "pending", "", None, 620_000),
    ("b9", LIN, (1024, 4, 64), "filtered", "MLEN > 512", None, None),
    ("b10", LIN, (1024, 8, 64), "filtered", "MLEN > 512", None, None),
    ("c1", LIN_SERIAL, (64, 4, 64), "crashed", "KilledWorker: gone", None, 100_000),
]
HLEN = 16


def _point_row(k: int, pid: str, wl: dict, hw: tuple[int, int, int], status: str, sram: int | None) -> dict:
    mlen, blen, vlen = hw
    set_hw = {"MLEN": mlen, "BLEN": blen, "VLEN": vlen, "BROADCAST_AMOUNT": mlen // HLEN}
    placed = status != "filtered"
    cols = {"MLEN": mlen, "VLEN": vlen, "BLEN": blen, "HLEN": HLEN, "BROADCAST_AMOUNT": mlen // HLEN}
    return {
        "id": pid,
        "ord": k,
        "sweep": "t",
        "status": "filtered" if not placed else "pending",
        "message": POINTS[k][4] if not placed else "",
        "attempts": 0,
        "workload": wl["testbench"],
        **wl,
        "preset": "transactional",
        "set_hw": set_hw,
        "config": {"MLEN": mlen, "BLEN": blen} if placed else None,
        "seed": 0,
        **{c: (v if placed else None) for c, v in cols.items()},
        "mac_array": mlen * blen if placed else None,
        "sram_bytes": sram,
        "code_version": "0.1.0+test",
    }


def _finish_values(pid: str, status: str, message: str, cycles: int | None) -> dict:
    return {
        "status": status,
        "message": message,
        "attempts": 1,
        "cycles": cycles,
        "instructions": None if cycles is None else cycles // 2,
        "macs": None if cycles is None else cycles * 4,
        "mac_utilization": None if cycles is None else 0.25,
        "busy": None if cycles is None else {"matrix": cycles // 4},
        "stalls": None if cycles is None else {"stall_hbm": 7},
        "result": {"passed": status == "PASS", "failing_checks": [], "error": None},
        "wall_s": 1.5,
        "peak_rss_mib": 120.5,
        "worker": f"w-{pid}",
        "finished_at": 1700000000.5,
    }


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "sweep.sqlite"
    s = store.Store(path)
    try:
        s.add(_point_row(k, pid, wl, hw, status, sram) for k, (pid, wl, hw, status, _m, _c, sram) in enumerate(POINTS))
        for pid, _wl, _hw, status, message, cycles, _sram in POINTS:
            if status not in ("filtered", "pending"):
                s.finish(pid, _finish_values(pid, status, message, cycles))
    finally:
        s.close()
    return path


def brute_front(rows, cost, metric="cycles"):
    """Per workload: the PASS points no other PASS point of it dominates, ascending (cost, metric, ord)."""
    out = {}
    for key in dict.fromkeys(report.workload_key(r) for r in rows):
        pts = [r for r in rows if report.workload_key(r) == key and r["status"] == "PASS"]
        on = [
            p
            for p in pts
            if not any(
                q[cost] <= p[cost] and q[metric] <= p[metric] and (q[cost] < p[cost] or q[metric] < p[metric])
                for q in pts
            )
        ]
        out[key] = [p["id"] for p in sorted(on, key=lambda p: (p[cost], p[metric], p["ord"]))]
    return out


# =========================================================================== keys and fronts


def test_workload_key_sorts_params_and_names_case_and_timing():
    assert report.workload_key(FA) == FA_KEY
    assert report.workload_key(LIN) == LIN_KEY
    row = {"testbench": "x", "case_id": "", "params": json.dumps({"b": True, "a": 1.5, "c": "s"}), "timing": "overlap"}
    assert report.workload_key(row) == "x a=1.5 b=true c=s / overlap"
    assert report.workload_key({"testbench": "y", "params": None, "timing": "serial"}) == "y / serial"


def test_pareto_fixture_fronts_exact_and_equal_to_brute_force(results):
    rows = store.rows(results)
    mac = report.pareto(rows)
    sram = report.pareto(rows, cost="sram_bytes")
    assert mac == {FA_KEY: ["a1", "a2", "a3", "a6"], LIN_KEY: ["b1", "b2", "b3"], LIN_SERIAL_KEY: []}
    assert sram == {FA_KEY: ["a1", "a2", "a6"], LIN_KEY: ["b1", "b2", "b3"], LIN_SERIAL_KEY: []}
    assert mac == brute_front(rows, "mac_array")
    assert sram == brute_front(rows, "sram_bytes")


def test_pareto_random_sets_with_ties_equal_brute_force():
    rng = random.Random(16)
    for trial in range(300):
        rows = [
            {
                "id": f"p{k}",
                "ord": k,
                "status": rng.choice(["PASS", "PASS", "PASS", "mismatch", "fault"]),
                "testbench": rng.choice(["t1", "t2"]),
                "params": {"n": rng.choice([1, 2])},
                "timing": "serial",
                "mac_array": rng.choice([256, 512, 1024, 2048]),
                "cycles": rng.randint(1, 6),
            }
            for k in range(rng.randint(0, 14))
        ]
        assert report.pareto(rows) == brute_front(rows, "mac_array"), f"trial {trial}: {rows}"


# =========================================================================== summary and tables


def test_summarize_exact_counts_fronts_best_and_failure_groups(results):
    s = report.summarize(results)
    assert s["total"] == 17
    assert s["points"] == {
        "PASS": 8,
        "mismatch": 1,
        "fault": 1,
        "plan error": 2,
        "crashed": 2,
        "filtered": 2,
        "pending": 1,
    }
    assert s["workloads"] == {
        FA_KEY: {"points": 6, "by_status": {"PASS": 5, "mismatch": 1}},
        LIN_KEY: {
            "points": 10,
            "by_status": {"PASS": 3, "fault": 1, "plan error": 2, "crashed": 1, "filtered": 2, "pending": 1},
        },
        LIN_SERIAL_KEY: {"points": 1, "by_status": {"crashed": 1}},
    }
    rows = store.rows(results)
    assert s["pareto"] == brute_front(rows, "mac_array")
    assert s["pareto_sram"] == brute_front(rows, "sram_bytes")

    def best(pid, mlen, blen, vlen, cycles, sram):
        set_hw = {"MLEN": mlen, "BLEN": blen, "VLEN": vlen, "BROADCAST_AMOUNT": mlen // HLEN}
        return {
            "id": pid,
            "preset": "transactional",
            "set_hw": set_hw,
            "cycles": cycles,
            "mac_array": mlen * blen,
            "sram_bytes": sram,
        }

    assert s["best"] == {
        FA_KEY: [
            best("a6", 256, 8, 64, 2500, 320_000),
            best("a2", 64, 8, 64, 6000, 110_000),
            best("a3", 128, 4, 64, 6000, 190_000),
        ],
        LIN_KEY: [
            best("b3", 128, 4, 64, 4000, 150_000),
            best("b1", 64, 4, 64, 5000, 100_000),
            best("b2", 32, 8, 128, 5000, 100_000),
        ],
        LIN_SERIAL_KEY: [],
    }
    assert s["failures"] == {
        "mismatch": {"failing checks: O": {"count": 1, "ids": ["a4"]}},
        "fault": {"pc 12: VRAM address out of range": {"count": 1, "ids": ["b4"]}},
        "plan error": {"m must be a multiple of BLEN": {"count": 2, "ids": ["b5", "b6"]}},
        "crashed": {
            "KilledWorker: gone": {"count": 1, "ids": ["c1"]},
            "RuntimeError: boom": {"count": 1, "ids": ["b7"]},
        },
    }
    assert s["filtered"] == {"filtered": {"MLEN > 512": {"count": 2, "ids": ["b9", "b10"]}}}
    json.dumps(s)  # the --json document


def test_render_prints_headline_best_points_and_reasons(results):
    buf = io.StringIO()
    sweep_report.render(Console(file=buf, width=250, highlight=False, color_system=None), report.summarize(results))
    text = buf.getvalue()
    lines = text.splitlines()
    assert lines[0] == (
        "17 points in 3 workloads: 8 PASS, 1 mismatch, 1 fault, 2 plan error, 2 crashed, 2 filtered, 1 pending"
    )
    row_a6 = next(line for line in lines if " a6 " in line)
    for cell in (FA_KEY, "transactional", "BLEN=8 BROADCAST_AMOUNT=16 MLEN=256 VLEN=64", "2,500", "2048", "mac, sram"):
        assert cell in row_a6
    row_a3 = next(line for line in lines if " a3 " in line)
    assert "mac" in row_a3 and "sram" not in row_a3.split("KiB")[-1]
    assert "no passing point" in next(line for line in lines if LIN_SERIAL_KEY in line)
    row_plan = next(line for line in lines if "m must be a multiple of BLEN" in line)
    assert "plan error" in row_plan and " 2 " in row_plan and "b5 b6" in row_plan
    assert "b9 b10" in next(line for line in lines if "MLEN > 512" in line)


def test_reason_rows_merge_messages_differing_only_in_numbers():
    failures = {
        "fault": {
            "pc 12: VRAM address 4096 out of range": {"count": 2, "ids": ["f1", "f2"]},
            "pc 40: VRAM address 8192 out of range": {"count": 3, "ids": ["f3", "f4", "f5"]},
            "pc 7: division by zero in BF16": {"count": 1, "ids": ["f6"]},
        },
        "crashed": {"RuntimeError: boom": {"count": 1, "ids": ["c1"]}},
    }
    assert sweep_report._reason_rows(failures) == [
        ("fault", 5, "pc N: VRAM address N out of range", ["f1", "f2", "f3"]),
        ("fault", 1, "pc 7: division by zero in BF16", ["f6"]),
        ("crashed", 1, "RuntimeError: boom", ["c1"]),
    ]


def test_sizes_in_binary_units():
    assert [report.size_text(n) for n in (None, 0, 1000, 1024, 1536, 537_401_344, 3 << 30)] == [
        "", "0 B", "1000 B", "1 KiB", "1.5 KiB", "512.5 MiB", "3 GiB"
    ]  # fmt: skip


# =========================================================================== plots


def test_plot_data_series_fronts_and_heat_map_grid(results):
    data = report.plot_data(results)
    assert list(data) == [f"{FA_STEM}-pareto", f"{FA_STEM}-heatmap", f"{LIN_STEM}-pareto"]
    rows = store.rows(results)
    passing = {r["id"]: r for r in rows if r["status"] == "PASS"}
    for stem, key in ((FA_STEM, FA_KEY), (LIN_STEM, LIN_KEY)):
        fig = data[f"{stem}-pareto"]
        assert fig["kind"] == "pareto" and fig["workload"] == key
        ids = [r["id"] for r in rows if r["id"] in passing and report.workload_key(r) == key]
        for panel, cost in zip(fig["panels"], ("mac_array", "sram_bytes"), strict=True):
            front = brute_front(rows, cost)[key]
            assert panel["cost"] == cost
            assert panel["ids"] == ids
            assert panel["x"] == [passing[i][cost] for i in ids]
            assert panel["y"] == [passing[i]["cycles"] for i in ids]
            assert panel["front"] == front
            assert panel["front_x"] == [passing[i][cost] for i in front]
            assert panel["front_y"] == [passing[i]["cycles"] for i in front]
    assert data[f"{FA_STEM}-pareto"]["panels"][0]["front_x"] == [256, 512, 512, 2048]
    assert data[f"{FA_STEM}-pareto"]["panels"][1]["front_y"] == [9000, 6000, 2500]
    # MLEN x BLEN (BROADCAST_AMOUNT = MLEN // HLEN follows MLEN: no axis of its own); a4 failed: a blank cell
    assert data[f"{FA_STEM}-heatmap"] == {
        "kind": "heatmap",
        "workload": FA_KEY,
        "metric": "cycles",
        "x_key": "MLEN",
        "y_key": "BLEN",
        "x": [64, 128, 256],
        "y": [4, 8],
        "cells": [[9000, 6000, 7000], [6000, None, 2500]],
        "ids": [["a1", "a3", "a5"], ["a2", None, "a6"]],
    }


def test_plot_writes_png_and_svg_per_figure(results, tmp_path):
    out = tmp_path / "plots"  # created; its parent must exist (the rule of every output, below)
    written = report.plot(results, out)
    stems = [f"{FA_STEM}-pareto", f"{FA_STEM}-heatmap", f"{LIN_STEM}-pareto"]
    assert written == [out / f"{s}.{ext}" for s in stems for ext in ("png", "svg")]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in written)
    for p in written:
        blob = p.read_bytes()
        assert len(blob) > 1000
        if p.suffix == ".png":
            assert blob.startswith(b"\x89PNG\r\n\x1a\n")
        else:
            assert ET.parse(p).getroot().tag == "{http://www.w3.org/2000/svg}svg"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(ValueError, match="file: cannot create the plot directory"):
        report.plot(results, not_a_dir)
    with pytest.raises(ValueError, match=r"cannot create the plot directory: .*missing' .*does not exist"):
        report.plot(results, tmp_path / "missing" / "deep")
    assert not (tmp_path / "missing").exists()


def test_stems_are_safe_and_distinct():
    stems = report._stems(["a[b] x=1 / serial", "a_b_x_1_serial", "z" * 300])
    assert stems["a[b] x=1 / serial"] == "a_b_x_1_serial"
    assert stems["a_b_x_1_serial"].startswith("a_b_x_1_serial-") and len(stems["a_b_x_1_serial"]) == 23
    assert len(stems["z" * 300]) == 109
    assert len(set(stems.values())) == 3


def test_no_heat_map_unless_exactly_two_independent_axes():
    def machine(**kv):
        return {"preset": "p", "HLEN": 16, **kv}

    line = [machine(MLEN=m) for m in (64, 128)]
    grid = [machine(MLEN=m, BLEN=b, BROADCAST_AMOUNT=m // 16) for m in (64, 128) for b in (4, 8)]
    cube = [machine(MLEN=m, BLEN=b, VLEN=v) for m in (64, 128) for b in (4, 8) for v in (64, 128)]
    presets = [{**machine(MLEN=m), "preset": p} for m in (64, 128) for p in ("a", "b")]
    assert report._grid_axes(line) is None
    assert report._grid_axes(grid) == ("MLEN", "BLEN")
    assert report._grid_axes(cube) is None
    assert report._grid_axes(presets) == ("MLEN", "preset")


# =========================================================================== exports


def _stored(path):
    con = sqlite3.connect(path)
    try:
        cols = ", ".join(f'"{k}"' for k in store.COLUMNS)
        return con.execute(f"SELECT {cols} FROM points ORDER BY ord").fetchall()
    finally:
        con.close()


def test_export_csv_round_trips_exact_values(results, tmp_path):
    target = tmp_path / "points.csv"
    report.export(results, csv=target)
    with target.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        body = list(reader)
    assert header == list(store.COLUMNS)
    assert body == [["" if v is None else str(v) for v in row] for row in _stored(results)]
    a1 = dict(zip(header, body[0], strict=True))
    assert a1["id"] == "a1" and a1["cycles"] == "9000" and a1["mac_utilization"] == "0.25" and a1["wall_s"] == "1.5"
    assert a1["params"] == '{"kv_len": 256, "q_len": 128}' and a1["case_id"] == "P1"
    assert dict(zip(header, body[14], strict=True))["config"] == ""  # a filtered point: NULL


def test_export_parquet_readable_by_duckdb_with_same_rows(results, tmp_path):
    import duckdb

    target = tmp_path / "points.parquet"
    report.export(results, parquet=target, csv=tmp_path / "also.csv")
    assert (tmp_path / "also.csv").stat().st_size > 0
    con = duckdb.connect()
    try:
        rel = con.execute("SELECT * FROM read_parquet(?)", [str(target)])
        names = [d[0] for d in rel.description]
        got = rel.fetchall()
        types = dict(
            con.execute(
                "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet(?))", [str(target)]
            ).fetchall()
        )
    finally:
        con.close()
    assert names == list(store.COLUMNS)
    assert got == _stored(results)
    declared = {"TEXT": "VARCHAR", "INTEGER": "BIGINT", "REAL": "DOUBLE"}
    assert types == {k: declared[t.split()[0]] for k, t in store.COLUMNS.items()}


def test_export_errors_are_clean_value_errors(results, tmp_path):
    bad = tmp_path / "no-such-dir" / "points.csv"
    with pytest.raises(ValueError, match=r"no-such-dir/points\.csv: cannot write the CSV export"):
        report.export(results, csv=bad)
    with pytest.raises(ValueError, match=r"points\.parquet: cannot write the Parquet export"):
        report.export(results, parquet=tmp_path / "no-such-dir" / "points.parquet")
    with pytest.raises(ValueError, match="name a CSV or a Parquet file"):
        report.export(results)
    with pytest.raises(ValueError, match="no such results database"):
        report.export(tmp_path / "missing.sqlite", csv=tmp_path / "x.csv")


def test_export_of_an_empty_database_writes_the_header(tmp_path):
    path = tmp_path / "empty.sqlite"
    store.Store(path).close()
    report.export(path, csv=tmp_path / "e.csv", parquet=tmp_path / "e.parquet")
    assert (tmp_path / "e.csv").read_text().splitlines() == [",".join(store.COLUMNS)]
    assert report.summarize(path)["points"] == {}
