"""Lock waits in CPython's parking lot (3.13+): a thread blocked on a PyMutex
(a free-threaded build's per-object lock, a threading.Lock) sleeps on a
semaphore of its own, so its futex word names nothing. The pypark uprobes note
the address it parked on; the wait must be charged to that address (inside the
contended object), to the thread that released it, and match the time the
workload measured itself inside the contended call (tests/workloads/pylock.py)."""
import time

import pytest

from conftest import ROOT, Workload, attach, by_tid, share
from test_gil import installed_python

pytestmark = pytest.mark.needs_root

PYLOCK = ROOT / "tests" / "workloads" / "pylock.py"

# test id -> the interpreter's name for installed_python
INTERPRETERS = {"3.14": "3.14", "3.15": "3.15", "3.14t": "3.14t", "stripped-3.14": "3.14-stripped", "debian-sid-3.14": "3.14-debian"}


def interpreter(name):
    return installed_python(INTERPRETERS[name])


def inside_at(w, name, after):
    """(seconds `name` spent inside its contended call, when) from the
    workload's first report at or after CLOCK_MONOTONIC `after`."""
    while True:
        parts = w.readline(5, f"a report of {name}").split()
        if parts[:2] == ["inside", name] and float(parts[3]) >= after:
            return float(parts[2]), float(parts[3])


def measure(w, name, duration):
    """Attach for `duration` s; returns (report, the share of time `name` spent
    inside its contended call meanwhile, by its own clock)."""
    s0, m0 = inside_at(w, name, time.monotonic())
    report, _ = attach(w.pid, duration)
    s1, m1 = inside_at(w, name, time.monotonic())
    return report, (s1 - s0) / (m1 - m0)


def contended(w):
    """The address range of the contended object: [id, id + basicsize)."""
    line = next(l for l in w.lines if l.startswith("object "))
    start, size = int(line.split()[1]), int(line.split()[2])
    return range(start, start + size)


def parked_on(report, where):
    """The report's top_futexes entries parked on an address in `where`."""
    return [f for f in report["top_futexes"] if f["kind"] == "parked" and int(f["addr"], 16) in where]


def check_lock_wait(report, w, victim, culprit, truth):
    t = by_tid(report)[w.tids[victim]]
    culprit_tid = w.tids[culprit]
    futex = share(t, "futex_wait")
    print(f"{victim}: futex_wait {futex:.3f} of its time, inside the call {truth:.3f} by its own clock; "
          f"woken by {t['futex_wait_by_waker']}")
    assert report["python"]["lock_probe"] == "uprobe", report["python"]
    assert truth >= 0.7, f"the workload did not contend: {truth:.3f}"
    assert abs(futex - truth) <= 0.1, (futex, truth)
    woken = t["futex_wait_by_waker"].get(str(culprit_tid), 0.0)
    assert woken >= 0.9 * t["seconds"]["futex_wait"], t["futex_wait_by_waker"]
    words = parked_on(report, contended(w))
    assert len(words) == 1, (report["top_futexes"], contended(w))
    assert w.tids[victim] in words[0]["waiters"] and culprit_tid in words[0]["wakers"], words
    # all of the victim's waits are on that one address: none left on its own semaphores
    assert words[0]["wait_s"] >= 0.9 * t["seconds"]["futex_wait"], (words, t["seconds"])


def test_free_threaded_object_lock_waits_are_charged_to_the_object_and_its_holder():
    """3.14t with the GIL off: an appender blocked on a list's per-object lock
    while a sorter holds it (list.sort keeps it for the whole sort): gil stays
    disabled, the wait is charged to an address inside the list, woken by the
    sorter, and matches the appender's own measurement within 10 points."""
    with Workload(interpreter("3.14t"), PYLOCK, "object") as w:
        report, truth = measure(w, "appender-0", 3.0)
    assert report["python"]["gil"] == "disabled", report["python"]
    check_lock_wait(report, w, "appender-0", "sorter", truth)
    assert all(t["seconds"]["gil_wait"] == 0.0 for t in report["threads"])
    # the appender's finding names the lock, an address inside the list
    blocked = [f for f in report["findings"] if f["kind"] == "blocked" and f["thread"]["tid"] == w.tids["appender-0"]]
    assert len(blocked) == 1 and int(blocked[0]["lock"], 16) in contended(w), (blocked, contended(w))


def test_free_threaded_object_lock_convoy_names_the_object():
    """Four appenders on the sorter's list: one lock convoy, on the list's
    address, called a CPython lock."""
    with Workload(interpreter("3.14t"), PYLOCK, "object", env={"APPENDERS": "4"}) as w:
        report, _ = attach(w.pid, 3.0)
        where = contended(w)
    convoys = [v for v in report["verdict"] if v.startswith("lock convoy on CPython lock ")]
    assert len(convoys) == 1, report["verdict"]
    assert int(convoys[0].split()[5].rstrip(":"), 16) in where, (convoys, where)


def test_free_threaded_control_with_lists_of_their_own():
    """The control: appenders with lists of their own wait on no lock."""
    with Workload(interpreter("3.14t"), PYLOCK, "object-separate") as w:
        report, truth = measure(w, "appender-0", 2.0)
        t = by_tid(report)[w.tids["appender-0"]]
    print(f"appender-0: futex_wait {share(t, 'futex_wait'):.3f}, inside append {truth:.3f}")
    assert truth < 0.05 and share(t, "futex_wait") < 0.05, (truth, t["seconds"])
    assert not parked_on(report, contended(w)), report["top_futexes"]
    assert not any(v.startswith("lock convoy") for v in report["verdict"]), report["verdict"]


@pytest.mark.parametrize("name", list(INTERPRETERS))
def test_threading_lock_waits_are_charged_to_the_lock_and_its_holder(name):
    """threading.Lock is a PyMutex from 3.14 on (with the GIL too; 3.13's is
    still a semaphore, whose own futex word names the lock): the waiter's wait
    is charged to an address inside the Lock object, woken by the holder, on
    Debian's LTO build too (which inlines the parking lot's functions)."""
    with Workload(interpreter(name), PYLOCK, "lock") as w:
        report, truth = measure(w, "waiter", 3.0)
    check_lock_wait(report, w, "waiter", "holder", truth)


def test_threading_lock_control_with_a_lock_of_its_own():
    with Workload(interpreter("3.14"), PYLOCK, "lock-separate") as w:
        report, truth = measure(w, "waiter", 2.0)
        t = by_tid(report)[w.tids["waiter"]]
    assert truth < 0.05 and share(t, "futex_wait") < 0.05, (truth, t["seconds"])
    assert not parked_on(report, contended(w)), report["top_futexes"]


def test_lock_probe_none_leaves_waits_on_futex_words():
    """--lock-probe none: no uprobe, the same wait charged to the waiter's own
    semaphore (a futex word, not inside the Lock)."""
    with Workload(interpreter("3.14"), PYLOCK, "lock") as w:
        report, _ = attach(w.pid, 2.0, "--lock-probe", "none")
        where = contended(w)
    assert report["python"]["lock_probe"] == "none", report["python"]
    assert not [f for f in report["top_futexes"] if f["kind"] == "parked"], report["top_futexes"]
    assert share(by_tid(report)[w.tids["waiter"]], "futex_wait") >= 0.7
    assert not any(int(f["addr"], 16) in where for f in report["top_futexes"]), (report["top_futexes"], where)
