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


# The layers, lowest first (docs/architecture.md): a module names only modules of lower layers
# (or its own layer's, without loops). Data flows one way: probes read the kernel, the session
# gathers their readings, the model is pure, the outputs (report, export) take the model's values
# and name nothing that gathers or reads, and cmd wires them.
LAYERS = [
    # leaves: no state of their own beyond what they are about, nothing above them
    {"model", "clock", "cgroup", "error", "http_client", "tls", "idhash", "procfs", "shrink", "outfile", "worker", "main"},
    # facts of a process beyond the kernel's: its interpreter (its memory and binaries), its
    # runtime's (a Go executable's build information and GOMAXPROCS), its container and pod (its cgroup path, the node's pod list)
    {"python", "identity", "runtime"},
    # the kernel's side
    {"probes"},
    # what gathers readings
    {"stacks", "age", "session"},
    # outputs: from the model's values only
    {"report", "export"},
    # wiring
    {"cli", "cmd"},
]
# what an output may name below it: the leaves and the interpreter's facts, never what gathers
OUTPUTS_MAY_NAME = LAYERS[0] | LAYERS[1]


def layer_of(module):
    return next(i for i, layer in enumerate(LAYERS) if module in layer)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in imports() if not any(m in layer for layer in LAYERS))
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}: place them"


def test_imports_go_down_the_layers():
    graph = imports()
    up = sorted((a, b) for a, deps in graph.items() for b in deps if b in graph and layer_of(b) > layer_of(a))
    assert not up, f"modules that name a higher layer (data flows one way: LAYERS): {up}"
    outputs = LAYERS[4]
    reach = sorted((a, b) for a in outputs for b in graph.get(a, ()) if b in graph and b not in OUTPUTS_MAY_NAME and b not in outputs)
    assert not reach, f"outputs that name what gathers (they take the model's values): {reach}"


def test_the_session_module_stays_small():
    lines = len((SRC / "session" / "mod.rs").read_text().splitlines())
    assert lines < 250, f"agent/src/session/mod.rs has {lines} lines: move code to its rooms (target, sample, resolve, lifetime)"
