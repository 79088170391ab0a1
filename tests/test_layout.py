"""The house's layout rules (issue 12), checked on the source: data flows one
way between the agent's modules, and the session stays small."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "agent" / "src"
USE = re.compile(r"\bcrate::([a-z_]+)")


def top_module(path):
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".rs") if len(rel.parts) > 1 else rel.stem


def imports():
    """top-level module -> the top-level modules it names (crate::X), tests excluded."""
    graph = {}
    for f in SRC.rglob("*.rs"):
        text = f.read_text()
        text = text.split("#[cfg(test)]\nmod tests")[0]
        me = top_module(f)
        graph.setdefault(me, set()).update(m for m in USE.findall(text) if m != me)
    return graph


def test_no_module_imports_one_that_imports_it_back():
    graph = imports()
    assert len(graph) > 8, graph  # the parser found the modules
    loops = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a in graph.get(b, ())})
    assert not loops, f"modules that import each other: {loops}"


def test_the_session_module_stays_small():
    lines = len((SRC / "session" / "mod.rs").read_text().splitlines())
    assert lines < 250, f"agent/src/session/mod.rs has {lines} lines: move code to its rooms (target, sample, resolve, lifetime)"
