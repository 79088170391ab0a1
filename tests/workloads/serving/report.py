"""The data the Python servers' slow request serializes: many rows, as many as make one
json.dumps call of them (one C call that never releases the GIL) take about `target`
seconds on this machine. The servers call json.dumps themselves, in their own
render_report(), so that the Python stack names both."""
import json
import time


def make_rows(n):
    return [
        {
            "id": i,
            "sku": f"SKU-{i:08d}",
            "name": f"item number {i}",
            "price": i * 1.37 + 0.01,
            "qty": i % 97,
            "ratio": i / 7.0,
            "tags": ["alpha", "beta", "gamma"],
            "active": i % 2 == 0,
        }
        for i in range(n)
    ]


def dumps_seconds(rows):
    """The median of three json.dumps(rows), in seconds."""
    times = []
    for _ in range(3):
        t = time.perf_counter()
        json.dumps(rows)
        times.append(time.perf_counter() - t)
    return sorted(times)[1]


def calibrate(target):
    """(rows, seconds): rows whose json.dumps takes about `target` seconds, and that time."""
    n = 20000
    for _ in range(4):  # the time per row is not quite linear in the size: scale until near
        rows = make_rows(n)
        took = dumps_seconds(rows)
        if 0.8 < took / target < 1.25:
            break
        n = max(1000, int(n * target / took))
    return rows, took
