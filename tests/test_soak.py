"""scripts/benchmark_soak.py, the soak of `encdec serve`: its verdict (what fails a run, the growth it reports) on
made-up results, and a short run against a real server, which writes its section between the markers."""

from __future__ import annotations

import collections
import importlib.util
import re

from tiny_model_folders import REPO_ROOT

SPEC = importlib.util.spec_from_file_location("benchmark_soak", REPO_ROOT / "scripts" / "benchmark_soak.py")
script = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(script)  # puts the repository root on sys.path: benchmarks.soak imports
from benchmarks.soak import FILES, TEXT_KINDS, SoakResult, SoakSettings, Tally, verdict  # noqa: E402


def made_up(statuses: dict[str, dict[int, int]], rss: list[float], exit_status: int | None = None,
            faults: list[str] = (), stopped: str = "") -> SoakResult:
    """A result of samples every 500 requests, the n-th of ``rss[n]`` MiB in the server (and 10 in a child)."""
    tally = Tally(statuses={kind: collections.Counter(counts) for kind, counts in statuses.items()})
    tally.samples = [{"requests": 500 * n, "server": mib, "children": 10.0, "count": 1, "files": 12, "failed": 0}
                     for n, mib in enumerate(rss)]
    return SoakResult(SoakSettings(), tally, 60.0, exit_status, stopped, list(faults), len(faults))


def test_the_verdict_is_the_growth_after_the_warm_up_and_fails_only_over_the_check() -> None:
    result = made_up({"native": {200: 3000}, "detect": {429: 3}}, [400, 600, 700, 701, 702, 703.5])
    line, failures = verdict(result)
    assert line == ("server process RSS from request 1,000 to 2,500: 700.0 -> 703.5 MiB, +3.5 MiB (+2.33 MiB per "
                    "1,000 requests); its child processes 1 to 1, 10.0 to 10.0 MiB together")
    assert failures == []  # a 4xx is counted, not failed
    assert verdict(result, check_flat=4)[1] == []
    line, failures = verdict(result, check_flat=2)
    assert line.endswith(": not flat (--check-flat 2 MiB)")
    assert failures == ["the server's RSS grew +3.5 MiB after the warm-up, over --check-flat 2 MiB"]
    # more workers after the warm-up: a leak
    for sample, count in zip(result.tally.samples, [0, 1, 1, 1, 2, 3], strict=True):
        sample["count"] = count
    assert verdict(result)[1] == ["the server's child processes grew from 1 to 3 after the warm-up"]


def test_a_5xx_a_request_without_answer_a_fault_a_dead_server_and_a_cut_short_run_each_fail() -> None:
    result = made_up({"native": {200: 10, 500: 2}, ".docx": {0: 1, -1: 1}, "download": {-1: 1}}, [400, 500, 500],
                     exit_status=-9, faults=["Traceback (most recent call last):"], stopped="the time limit")
    _, failures = verdict(result)
    assert failures == ["server errors: 2 x 500",
                        "1 request(s) got no answer (connection dropped or refused, or timed out)",
                        "1 file upload(s) answered 200 without a translatedFileUrl",
                        "the server died during the run (exit status -9)",
                        "1 line(s) of the server's log show a fault, the first: 'Traceback (most recent call last):'",
                        "the requests stopped early, at the time limit"]
    assert verdict(made_up({"native": {200: 1}}, [400, 500]))[1] == ["too few memory samples"]


def test_a_short_soak_of_a_real_server_passes_and_writes_its_section(pairs, tmp_path, capsys) -> None:
    """45 requests (three cycles of every kind: 33 jobs, the files' 12 downloads) from 2 clients to `encdec serve`
    with keys, a character limit and metrics: every request answered 2xx, the section written between the markers."""
    doc = tmp_path / "serving.md"
    doc.write_text(f"before\n{script.BEGIN}\nold\n{script.END}\nafter\n", encoding="utf-8")
    status = script.main(["--model", f"de-en={pairs['de-en']}", "--model", f"en-de={pairs['en-de']}",
                          "--requests", "45", "--every", "15", "--warmup", "15", "--clients", "2",
                          "--time-limit", "240", "--output", str(doc)])
    assert status == 0, capsys.readouterr().err
    text = doc.read_text(encoding="utf-8")
    assert text.startswith(f"before\n{script.BEGIN}\n_Measured ") and text.endswith(f"{script.END}\nafter\n")
    assert "old" not in text
    assert [int(n) for n in re.findall(r"^\| (\d+) \|", text, re.MULTILINE)] == [0, 15, 30, 45]
    rows = re.findall(r"^\| (?:native|LT) .*?\| (\d+) \| (\d+) \| (.*?) \|", text, re.MULTILINE)
    assert rows == [("3", "3", "-")] * (len(TEXT_KINDS) + len(FILES)) + [("12", "12", "-")], text
    assert "**server process RSS from request 15 to 45: " in text
