"""Every probe's doc states the per-event cost of its programs as measured by the bench on the
programs the tree builds (issue 38): a figure measured on older BPF sources fails here, with the
command that measures it again. No root needed."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import probe_docs  # noqa: E402


def test_every_probe_doc_states_costs_measured_on_the_programs_the_tree_builds():
    bad = probe_docs.stale()
    assert not bad, "\n".join(f"docs/probes/{d}.md: {why}: run make bench-cost" for d, why in bad)


def test_the_check_names_a_doc_whose_program_changed(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(ROOT / "bpf", root / "bpf")
    shutil.copytree(ROOT / "docs" / "probes", root / "docs" / "probes")
    assert probe_docs.stale(root) == probe_docs.stale(ROOT)
    # a header only the sched object includes, changed: its docs (sched, stacks) go stale, the others do not
    h = root / "bpf" / "holder_samples.bpf.h"
    h.write_text(h.read_text() + "\n/* changed */\n")
    stale = dict(probe_docs.stale(root))
    assert set(stale) >= {"sched", "stacks"}, stale
    assert "measured on bpf/sched.bpf.c's sources" in stale["sched"], stale
    assert not {"gil", "pypark", "syscalls"} & set(stale), stale
    # the command line says so and fails
    cmd = subprocess.run([sys.executable, ROOT / "bench" / "probe_docs.py", "check", root], capture_output=True, text=True)
    assert cmd.returncode == 1, cmd
    assert "docs/probes/sched.md: its figures were measured on" in cmd.stderr and "run make bench-cost" in cmd.stderr, cmd


def test_a_section_is_written_from_the_bench_results_and_read_back(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(ROOT / "bpf", root / "bpf")
    results = {
        "machine": {"cpu": "Test CPU", "cpus": 2, "kernel": "6.18", "virtualization": "none", "commit": "abc1234"},
        "started": "2026-11-28T00:00:00", "bpf_digests": probe_docs.digests(root),
        "per_event_costs": {"pingpong-all": {"over_floor": {"sched_switch": {
            "watched_ns": 321.0, "floor_ns": 71.0, "watched_over_floor_ns": 250.0, "unwatched_over_floor_ns": 4.0,
            "watched_runs_per_s": 150000.0}}}},
        "pingpong-all": {"bpf_stats": {"waitmeter-all": {"runs": 3, "bpf_progs": {
            "sample_holder": {"ns_per_run": 987.0, "runs_per_s": 1000.0, "cpu_share": 0.001}}}}},
    }
    text = probe_docs.section("sched", results)
    assert "| pingpong-all | `sched_switch` | 321 | 71 | +250 | +4 | 150,000 |" in text, text
    assert f"<!-- sources: sched {results['bpf_digests']['sched']} -->" in text
    stacks = probe_docs.section("stacks", results)
    assert "| `sample_holder` | pingpong-all (`waitmeter-all`) |" in stacks and "| 987 | 1,000 |" in stacks, stacks
    # a program the run did not exercise says so, never a made-up figure
    assert "not run" in probe_docs.section("gil", results)
    # results without digests (a binary older than its sources) write nothing
    del results["bpf_digests"]
    with pytest.raises(SystemExit, match="rerun make bench-cost"):
        probe_docs.section("sched", results)
