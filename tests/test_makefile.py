"""The README's two commands each work alone on a fresh machine: every make
target depends on the set-up it needs. A fresh machine cannot be had on a
machine already set up, so the dependency graph is checked with a dry run
that treats every target as out of date (`make -n -B`)."""
import subprocess

from conftest import ROOT


def dry_run(target):
    cp = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.splitlines()


def first(lines, needle):
    for i, line in enumerate(lines):
        if needle in line:
            return i
    return None


def test_make_test_sets_up_everything_before_it_builds_or_tests():
    lines = dry_run("test")
    apt = first(lines, "apt-get install")
    assert apt is not None, "make test installs the build packages (libelf, clang...)"
    for step in ["cargo test", "cargo build", "-m pytest", "agent/fuzz/run.sh"]:
        i = first(lines, step)
        assert i is not None and apt < i, (step, lines)
    for tool, user in [("-m venv", "-m pytest"), ("go install helm.sh/helm", "-m pytest"), ("cargo install cargo-fuzz", "agent/fuzz/run.sh")]:
        assert first(lines, tool) is not None and first(lines, tool) < first(lines, user), (tool, lines)


def test_make_unit_alone_installs_the_build_packages():
    lines = dry_run("unit")
    assert first(lines, "apt-get install") < first(lines, "cargo test"), lines


def test_make_demo_sets_up_only_what_the_demo_needs():
    lines = dry_run("demo")
    assert first(lines, "apt-get install") < first(lines, "cargo build") < first(lines, "tests/demo.sh"), lines
    for heavy in ["go install", "cargo install cargo-fuzz", "-m venv", "pip install", "prometheus"]:
        assert first(lines, heavy) is None, (heavy, "the demo does not need it")
