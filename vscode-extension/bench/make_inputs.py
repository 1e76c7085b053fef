"""Writes the benchmark's inputs into OUT (skipped when they are there):

- big.prof: a real cProfile run of a program with 50,000 distinct functions (a call tree
  f0 -> f1, f2 -> ...), about 50,000 entries with their caller edges
- big.pt.trace.json: 100 MB of real torch.profiler events (a trace of train_small.py, repeated
  with shifted timestamps and ids until the file passes 100 MB)
"""
import cProfile
import json
import os
import sys

OUT = os.path.abspath(sys.argv[1])
N_FUNCTIONS = 50_000
TRACE_BYTES = 100 * 1024 * 1024


def big_prof(path):
    lines = []
    for i in range(N_FUNCTIONS):
        kids = [k for k in (2 * i + 1, 2 * i + 2) if k < N_FUNCTIONS]
        body = "; ".join(f"f{k}()" for k in kids) or "pass"
        lines.append(f"def f{i}():\n    {body}\n")
    ns = {}
    exec(compile("".join(lines), os.path.join(OUT, "fifty_thousand.py"), "exec"), ns)
    cProfile.runctx("f0()", ns, {}, path)


def big_trace(path):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "fixtures"))
    import torch  # noqa: F401
    import train_small
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        train_small.main(steps=20)
    one = os.path.join(OUT, "one.pt.trace.json")
    prof.export_chrome_trace(one)
    with open(one) as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(e.get("ts", 0) for e in events) + 10
    with open(path + ".partial", "w") as f:
        head = json.dumps(doc)[:-1]
        f.write(head + ', "traceEvents": [\n')
        written, copy, first = len(head), 0, True
        while written < TRACE_BYTES:
            for e in events:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = e["ts"] + copy * span
                args = e2.get("args")
                if isinstance(args, dict) and "External id" in args:
                    e2["args"] = dict(args, **{"External id": args["External id"] + copy * 1_000_000})
                text = ("" if first else ",\n") + json.dumps(e2)
                first = False
                f.write(text)
                written += len(text)
            copy += 1
        f.write("\n]}\n")
    os.replace(path + ".partial", path)
    os.remove(one)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    prof = os.path.join(OUT, "big.prof")
    trace = os.path.join(OUT, "big.pt.trace.json")
    if not os.path.exists(prof):
        big_prof(prof + ".partial")
        os.replace(prof + ".partial", prof)
    if not os.path.exists(trace):
        big_trace(trace)
