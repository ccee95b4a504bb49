"""Each benchmark's smallest configuration runs, so the suite keeps working.

Windows are a few milliseconds and rounds one; the numbers mean nothing, the
shapes (every figure present, every ratio positive) do.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sqlite3
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from benchmarks import __main__ as suite
from benchmarks import (
    bench_bigfiles,
    bench_engine,
    bench_hostile,
    bench_landing,
    bench_replay,
    bench_scaling,
    bench_search,
    bench_server,
)
from tests.edit_corpus import CASES


def test_engine_every_configuration_and_figure(tmp_path: Path) -> None:
    samples = bench_engine.run(
        1, 0.01, tmp_path, sizes=(4 * 1024, 64 * 1024), verbose=False, tail_window=0.01
    )
    figures = bench_engine.figures(samples)
    for name in (
        "edit_full_1w_vs_floor",
        "edit_full_8w_vs_floor1w",
        "edit_full_32w_vs_floor1w",
        "edit_normal_1w_vs_rename",
        "read_hash_vs_raw",
        "batch100_files_vs_floor1w",
        "edit_full_1w_64k_vs_floor",
        "edit_full_1w_p99_latency_vs_floor",
        "edit_full_1w_p99_vs_p50",
        "edit_cpu_us_32w_tmpfs",
    ):
        assert figures[name]["median"] > 0, name
    raw = bench_engine.raw(samples)
    assert raw["edit_full_32w"]["ops"][0] >= 32 * 3  # every writer did its minimum
    assert raw["edit_full_32w_tmpfs"]["ops"][0] >= 32 * 3
    assert raw["edit_full_32w_tmpfs"]["cpu_us_per_op"]["median"] > 0
    assert not any(p.name.startswith("engine-") for p in tmp_path.iterdir())  # cleaned up
    # This process's tmpfs folder only: other runs on the machine keep their own.
    assert not (bench_engine.TMPFS / f"ledgerfs-bench-{os.getpid()}").exists()


def test_engine_edits_leave_the_last_content(tmp_path: Path) -> None:
    sample = anyio.run(bench_engine.engine_edits, tmp_path, "normal", 2, 4096, 0.0)
    assert sample.ops == 6
    for name in ("f0.txt", "f1.txt"):
        assert (tmp_path / name).read_bytes().startswith(b"counter: 000000000003\n")


def test_bench_folder_defaults_under_the_repo() -> None:
    folder = bench_engine.bench_folder(None)
    assert folder.is_relative_to(bench_engine.repo_root() / ".bench-cache")
    info = bench_engine.machine_info(folder)
    assert info["filesystem"] and info["cpu_count"] and info["date"]


def test_scaling_smallest_sizes(tmp_path: Path) -> None:
    sizes = (1000, 2000)
    result = bench_scaling.run(
        1, sizes, 2, 2, verbose=False, cache=tmp_path, op_sizes=sizes, repeats=1
    )
    figures = bench_scaling.figures(result["cells"], sizes, sizes)
    assert figures["commit_cost_2k_vs_1k"]["median"] > 0
    assert figures["history_2k_vs_1k"]["median"] > 0
    for name in bench_scaling.OPERATIONS:
        assert figures[f"{name}_2k_vs_1k"]["median"] > 0, name
    cached = sorted(p.parent.name for p in tmp_path.glob("journal-v*/journal.db"))
    assert cached == [f"journal-v{result['schema_version']}-{n}" for n in ("1k", "2k")]
    # Each measurement took back what it added: the journals are as built.
    for n in sizes:
        journal = tmp_path / f"journal-v{result['schema_version']}-{bench_scaling.label(n)}"
        db = sqlite3.connect(journal / "journal.db")
        assert db.execute("SELECT max(id), count(*) FROM transactions").fetchone() == (
            n + bench_scaling.OLD,
            n + bench_scaling.OLD,
        )
        db.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads /proc (Linux)")
def test_big_files_paging_and_peak_memory(tmp_path: Path) -> None:
    size = 1024 * 1024
    paged = anyio.run(bench_bigfiles.paging, tmp_path / "paging", 1, size)
    assert paged["pages"] > 1 and paged["ratios"][0] > 0
    mem = anyio.run(bench_bigfiles.memory, tmp_path / "memory", size)
    assert (tmp_path / "memory" / "root" / "big.txt").read_bytes().endswith(b"needle twice\n")
    figures = bench_bigfiles.figures(paged, mem)
    assert set(figures) == {
        "paging_50mib_vs_whole_read",
        "peak_over_size_edit",
        "peak_over_size_patch",
        "peak_over_size_undo",
    }


def test_scaling_journal_bytes_per_line_edit(tmp_path: Path) -> None:
    sizes = {"1kib": 1024, "512kib": 512 * 1024}
    figures = bench_scaling.journal_bytes_per_line_edit(tmp_path, rounds=1, sizes=sizes)
    assert figures["line_edit_seconds_512kib"]["median"] > 0
    # An edit of a chunked image stores about a chunk, not the file.
    assert 0 < figures["journal_bytes_per_line_edit_512kib"]["median"] < 64 * 1024


def test_ledgerfs_server_over_stdio(tmp_path: Path) -> None:
    argv, why = bench_server.ledgerfs_command()
    assert argv is not None, why
    sample = anyio.run(
        bench_server.run_server,
        "ledgerfs_normal",
        [*argv, "--auto-occ", "off", "--durability", "normal"],
        tmp_path,
        3,
    )
    assert sample["rate"] > 0 and len(sample["latencies"]) == 3


@pytest.mark.skipif(
    not (shutil.which("node") and shutil.which("npm")),
    reason="the reference server needs node and npm (.ci/run installs them with apt)",
)
def test_reference_server_over_stdio(tmp_path: Path) -> None:
    # Installs the reference server from npm into .bench-cache on first use (~10 s).
    argv, why = bench_server.reference_command(install=True)
    assert argv is not None, why
    sample = anyio.run(bench_server.run_server, "reference", argv, tmp_path, 3)
    assert sample["rate"] > 0


def test_hostile_reports_both_figures_and_the_classes_left_out(tmp_path: Path) -> None:
    out = tmp_path / "hostile.json"
    chosen = ["regex", "deep_tree", "big_history"]
    argv = ["--rounds", "1", "--calls", "3", "--dir", str(tmp_path), "--json", str(out)]
    bench_hostile.main([*argv, "--classes", ",".join(chosen)])
    payload = json.loads(out.read_text())
    assert payload["figures"]["hostile_unrelated_p99_vs_idle"] > 0
    assert payload["figures"]["hostile_peak_rss_mib"] > 0
    raw = payload["raw"]["hostile"]
    assert raw["classes"] == chosen
    assert set(raw["left_out"]) == set(bench_hostile.CLASSES) - set(chosen)
    assert raw["hostile_calls"] >= 1


@pytest.mark.parametrize("name", list(bench_hostile.CLASSES))
def test_every_hostile_class_sets_up_its_calls(tmp_path: Path, name: str) -> None:
    calls = bench_hostile.CLASSES[name](tmp_path)
    assert calls and all(tool and arguments for tool, arguments in calls)


def test_suite_writes_its_json_with_every_suite_skipped(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    skips = [arg for name in suite.SUITES for arg in ("--skip", name)]
    suite.main(["--json", str(out), "--dir", str(tmp_path), *skips])
    payload = json.loads(out.read_text())
    assert set(payload) >= {"machine", "figures", "raw"}
    assert payload["missing"] == list(suite.HEADLINE)


def _small_source(root: Path) -> Path:
    source = root / "source"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "a.py").write_text("class Boom(ValueError):\n    def __init__(self):\n")
    (source / "b.py").write_text("def __init__\n")
    return source


def test_suite_prints_and_writes_every_figure_with_its_spread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The whole-suite path (collect, print, JSON) over a real suite on a small tree.
    source = _small_source(tmp_path)
    monkeypatch.setattr(
        suite,
        "SUITES",
        {"search": lambda argv: bench_search.main([*argv, "--source", str(source)])},
    )
    out = tmp_path / "results.json"
    suite.main(["--quick", "--json", str(out), "--dir", str(tmp_path / "bench")])
    payload = json.loads(out.read_text())
    printed = capsys.readouterr().out.splitlines()
    names = [f"search_{name}_vs_grep" for name, _, _ in bench_search.PATTERNS]
    assert sorted(payload["figures"]) == sorted(names)
    for name in names:
        median, spread = payload["figures"][name], payload["spread"][name]
        assert isinstance(median, float) and median > 0
        assert spread["rounds"] == 3 and spread["min"] <= median <= spread["max"]
        assert spread["spread"] == pytest.approx((spread["max"] - spread["min"]) / median, abs=1e-5)
        (line,) = [line for line in printed if f" {name} " in line]
        assert f"{median:.3f}" in line and "spread" in line


@pytest.mark.parametrize(
    ("part", "medians", "spreads"),
    [
        ({"figures": {"a": 2.0}, "spread": {"a": {"spread": 0.1}}}, {"a": 2.0}, {"a": 0.1}),
        (
            {"figures": {"a": {"median": 2.0, "spread": 0.5, "rounds": [1.5, 2.5]}}},
            {"a": 2.0},
            {"a": 0.5},
        ),
        ({"figures": {"a": 3}}, {"a": 3.0}, {}),
    ],
)
def test_suite_collects_figures_of_either_shape(
    part: dict[str, Any], medians: dict[str, float], spreads: dict[str, float]
) -> None:
    got_medians, got_spreads = suite.collect(part)
    assert got_medians == medians
    assert {name: s["spread"] for name, s in got_spreads.items()} == spreads


def test_plot_from_engine_results(tmp_path: Path) -> None:
    from benchmarks import plot

    samples: dict[str, list[bench_engine.Sample]] = {}
    names = [*bench_engine.configurations(0.01, bench_engine.SIZES)]
    for k, name in enumerate(names):
        sample = bench_engine.Sample()
        sample.ops, sample.elapsed, sample.bytes = 10 + k, 0.1, 4096 * (10 + k)
        sample.latencies = [0.001, 0.002]
        samples[name] = [sample, sample]
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"machine": {}, "raw": {"engine": bench_engine.raw(samples)}}))
    paths = plot.main([str(results), "--out", str(tmp_path / "png")])
    assert [p.name for p in paths] == ["concurrency.png", "filesize.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_search_against_grep_finds_what_grep_finds(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "a.py").write_text("class Boom(ValueError):\n    def __init__(self):\n")
    (source / "b.py").write_text("def __init__\nclass KeyError_x: pass\n")
    result = bench_search.run(tmp_path / "bench", 1, source)
    assert result["raw"]["tree"]["files"] == 2
    for name, _, _ in bench_search.PATTERNS:
        raw = result["raw"][name]
        assert raw["ledgerfs_matches"] == raw["grep_lines"], name
        assert result["figures"][f"search_{name}_vs_grep"] > 0
    assert result["raw"]["literal_common"]["grep_lines"] == 2


def test_replay_agrees_with_git_and_profiles(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    bench_replay.git(repo, "init", "-q")
    for round_ in range(3):
        (repo / "a.txt").write_text("".join(f"line {i} {round_}\n" for i in range(5)))
        bench_replay.git(repo, "add", "-A")
        bench_replay.git(repo, "commit", "-q", "-m", f"r{round_}")
    figures = bench_replay.main(
        [str(repo), "--commits", "2", "--variants", "plain", "--profile", "--dir", str(tmp_path)]
    )
    assert (figures["patches"], figures["agree"], figures["disagree"]) == (2, 2, [])
    assert figures["ledgerfs_ms"]["median"] > 0 and figures["git_ms"]["median"] > 0
    profile = figures["profile"]
    assert profile["patches"] == 2 and profile["cpu_ms_per_patch"]["event loop"] > 0
    assert "function calls" in profile["hot_functions"]  # the pstats report
    assert not any(p.name.startswith("replay-") for p in tmp_path.iterdir())  # cleaned up


def test_security_every_figure() -> None:
    from benchmarks import bench_security

    figures = bench_security.run(20)
    assert all(value >= 0 for value in figures.values())
    assert figures["open_beneath_vs_plain"] > 0 and figures["content_check_4k_vs_blake3"] > 0


def test_profile_reports_every_phase_per_edit(tmp_path: Path) -> None:
    from benchmarks import bench_profile

    out = tmp_path / "profile.json"
    args = ["--writers", "1", "2", "--seconds", "0.05", "--json", str(out), "--dir", str(tmp_path)]
    payload = bench_profile.main([*args, "--tmpfs"] if bench_engine.tmpfs_folder() else args)
    written = json.loads(out.read_text())
    assert written["missing"] == payload["missing"] == []  # every hook found on this code
    names = [name for name, _ in bench_profile.PHASES]
    for label in ("1 writer", "2 writers"):
        result = written["results"][label]
        assert result["edits"] >= 3 * result["writers"]
        assert sorted(result["phases"]) == sorted(names)
        assert result["process_cpu_us_per_edit"] > 0 and result["plain_cpu_us_per_edit"] > 0
        # The engine's own functions ran in every edit, on the threads named.
        for phase in ("path resolve", "load", "diff", "SQL", "file step"):
            (name,) = [n for n in names if n.startswith(phase)]
            assert result["phases"][name]["calls_per_edit"] >= 1, (label, name)
        # A lone begin commits on the loop's thread: the writer thread may be idle.
        assert result["threads"]["event loop"] > 0 and "journal writer" in result["threads"]
    assert all(name in written["table"] for name in names)
    assert not any(p.name.startswith("profile-") for p in tmp_path.iterdir())  # cleaned up
    merged = bench_profile.main(["--merge", f"before={out}", f"after={out}"])["table"]
    header = merged.splitlines()[0]
    assert "before, 1 writer" in header and "after, 2 writers" in header


def test_profile_reports_a_vanished_function_as_missing_and_restores_the_rest() -> None:
    from benchmarks import bench_profile
    from ledgerfs.engine import diffs, history

    phases = (
        ("gone", ("ledgerfs.engine.paths.NoSuchThing.resolve", "no_such_module.fn")),
        ("diff", ("ledgerfs.engine.diffs.unified_diff",)),
    )
    original = diffs.unified_diff
    profiler = bench_profile.Profiler(phases)
    with bench_profile.profiling(profiler):
        assert set(profiler.missing) == {
            "ledgerfs.engine.paths.NoSuchThing.resolve",
            "no_such_module.fn",
        }
        assert profiler.installed == ["ledgerfs.engine.diffs.unified_diff"]
        # The copy `from .diffs import unified_diff` made is wrapped too.
        assert history.unified_diff is diffs.unified_diff is not original
        history.unified_diff("a", b"x\n", b"y\n")
    assert history.unified_diff is diffs.unified_diff is original
    (book,) = [totals for _, totals in profiler.snapshot().values()]
    assert book["diff"][1] == 1 and book["gone"] == [0, 0, 0, 0]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_profile_charges_a_coroutine_its_steps_and_nested_calls_their_own(backend: str) -> None:
    from benchmarks import bench_profile

    profiler = bench_profile.Profiler((("outer", ()), ("inner", ())))
    inner = profiler.wrap_sync(lambda: sum(range(20_000)), "inner")

    async def body() -> int:
        first = inner()
        await anyio.sleep(0)
        return first + inner()

    outer = profiler.wrap_async(body, "outer")
    assert anyio.run(outer, backend=backend) == 2 * sum(range(20_000))
    (book,) = [totals for _, totals in profiler.snapshot().values()]
    assert book["outer"][1] == 1 and book["outer"][3] >= 2  # one call, timed in steps
    assert book["inner"][1] == 2 and book["inner"][0] > 0


def test_aiofiles_variants_read_the_same_bytes(tmp_path: Path) -> None:
    from benchmarks import bench_aiofiles

    out = tmp_path / "aiofiles.json"
    args = ["--sizes", "1", "--rounds", "2", "--reads", "1", "--dir", str(tmp_path)]
    bench_aiofiles.main([*args, "--json", str(out)])
    written = json.loads(out.read_text())
    for name in ("thread_chunked", "aiofiles_stream", "aiofiles_whole"):
        for measure in ("time", "loop_cpu"):
            figure = f"{name}_1m_{measure}_vs_thread"
            assert written["figures"][figure] > 0 and written["spread"][figure]["rounds"] == 2
    for name in (*bench_aiofiles.VARIANTS, "engine_read_file", "engine_read_media"):
        assert written["raw"]["reads"][f"{name}_1m"]["wall_ms"]["median"] > 0, name
    assert not any(p.name.startswith("aiofiles-") for p in tmp_path.iterdir())  # cleaned up


STANDALONE = [
    (
        "bench_filestep",
        ["--writes", "20", "--rounds", "2"],
        ["filestep_swap_vs_rename_wall", "filestep_swap_vs_rename_cpu"],
        ["rename", "swap"],
    ),
    (
        "bench_startup",
        ["--edits", "12", "--rounds", "2"],
        ["edit_full_first12_vs_floor", "edit_full_first12_p50_latency_vs_floor"],
        ["floor", "engine"],
    ),
    (
        "bench_loops",
        ["--parts", "served", "--edits", "40", "--rounds", "2", "--modes", "normal"],
        ["mcp_edits_normal_uvloop_vs_asyncio", "mcp_edits_normal_cpu_uvloop_vs_asyncio"],
        ["uvloop", "asyncio"],
    ),
    (
        "bench_loops",
        ["--parts", "embedded", "--rounds", "2", "--window", "0.05"],
        ["lone_full_uvloop_vs_asyncio", "lone_normal_trio_vs_asyncio"],
        ["lone_full_asyncio", "lone_normal_trio"],
    ),
]


@pytest.mark.parametrize(
    ("module", "argv", "figures", "variants"), STANDALONE, ids=[c[0] for c in STANDALONE]
)
def test_standalone_benches_measure_each_round_and_clean_up(
    tmp_path: Path, module: str, argv: list[str], figures: list[str], variants: list[str]
) -> None:
    bench = importlib.import_module(f"benchmarks.{module}")
    out = tmp_path / "out.json"
    bench.main([*argv, "--dir", str(tmp_path), "--json", str(out)])
    written = json.loads(out.read_text())
    for figure in figures:
        assert written["figures"][figure] > 0 and written["spread"][figure]["rounds"] == 2
    assert [len(written["results"][name]) for name in variants] == [2, 2]
    assert list(tmp_path.iterdir()) == [out]  # its folders and every temp file removed


def test_ab_journal_compares_two_checkouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import ab_journal

    checkout = Path(__file__).resolve().parents[2]
    ab_journal.main([str(checkout), "--rounds", "2", "--window", "0.02", "--single"])
    out = capsys.readouterr().out
    assert sum(line.startswith("round ") for line in out.splitlines()) == 2
    assert "group commit, this / other: " in out
    for who in ("this", "other"):
        assert f"{who}: journal_group_commit_32w_vs_single " in out
    assert ab_journal.load_journal(checkout, "other_journal_again").Journal is not None


def test_landing_plays_the_whole_corpus_in_every_mode(tmp_path: Path) -> None:
    outcomes, skipped = anyio.run(partial(bench_landing.run, tmp_path, verbose=False))
    figures = bench_landing.figures(outcomes)
    assert set(figures) | set(skipped) == {*bench_landing.MODES, "reference"}
    for mode in bench_landing.MODES:
        assert figures[mode]["cases"] == len(CASES)
        assert figures[mode]["wrong_writes"] == 0 and figures[mode]["not_landed"] == 0
        assert 1 <= figures[mode]["calls_to_land"] <= 2


def test_marks_every_policy_and_figure(tmp_path: Path) -> None:
    from benchmarks import bench_marks

    samples = bench_marks.run(1, 0.01, tmp_path)
    assert [len(samples[name]) for name in bench_marks.POLICIES] == [1, 1, 1]
    figures = bench_marks.figures(samples)
    for name in ("marks_delayed_vs_checkpoint_cpu", "marks_each_vs_checkpoint_cpu"):
        assert figures[name]["median"] > 0
    assert list(tmp_path.iterdir()) == []  # every workspace removed


def test_rewind_bench_compares_both_ways_and_cleans_up(tmp_path: Path) -> None:
    from benchmarks import bench_rewind

    out = tmp_path / "out.json"
    # Enough undos that their rows fill a page (images dedupe and compress: 8 did not).
    argv = ["--files", "3", "--transactions", "24", "--rounds", "2"]
    bench_rewind.main([*argv, "--dir", str(tmp_path), "--json", str(out)])
    written = json.loads(out.read_text())
    for figure in ("undo_each_vs_rewind_time", "undo_each_vs_rewind_journal"):
        assert written["figures"][figure] > 0 and written["spread"][figure]["rounds"] == 2
    [first, _] = written["raw"]["rewind"]["rounds"]
    assert first["rewind_transactions"] == first["undo_each_transactions"] == 24
    assert list(tmp_path.iterdir()) == [out]


def test_ui_bench_times_every_page_on_both_journals(tmp_path: Path) -> None:
    from benchmarks import bench_ui

    out = tmp_path / "out.json"
    argv = ["--small", "20", "--large", "60", "--rounds", "1", "--passes", "2"]
    bench_ui.main([*argv, "--dir", str(tmp_path), "--json", str(out)])
    written = json.loads(out.read_text())
    for page in bench_ui.PAGES:
        assert written["figures"][f"ui_{page}_large_vs_small"] > 0
        assert written["spread"][f"ui_{page}_large_vs_small"]["rounds"] == 2
        for size in ("20", "60"):
            times = written["raw"]["ui"][size]["pages"][page]
            assert times["first_ms"] > 0 and times["median_ms"] > 0
    assert list(tmp_path.iterdir()) == [out]
