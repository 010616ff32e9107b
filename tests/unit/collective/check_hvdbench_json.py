#!/usr/bin/env python3
"""hvdbench under the real hvdrun, 2 ranks, --json: the machine-readable
table parses, has every op and size asked for, every per-size check is ok,
and busbw follows nccl-tests' formulas. Runs both the raw-collective and the
public-API (--api) paths.

  check_hvdbench_json.py HVDRUN HVDBENCH
"""
import json
import subprocess
import sys


def run(hvdrun, hvdbench, extra):
    argv = [hvdrun, "-np", "2", "-H", "localhost:2", hvdbench, "--op", "all", "-b", "4K", "-e", "256K", "-f", "8",
            "-n", "3", "-w", "1", "--json"] + extra
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(argv)} exited {p.returncode}\n{p.stderr}")
    # Rank 0 prints the JSON document; other ranks print nothing.
    body = "\n".join(l.split(":", 1)[1] for l in p.stdout.splitlines() if l.startswith("[0]<stdout>:"))
    others = [l for l in p.stdout.splitlines() if l.startswith("[1]<stdout>:")]
    if others:
        sys.exit(f"FAILED: rank 1 printed {others[:3]}")
    doc = json.loads(body)
    return doc


def check(doc, path):
    assert doc["ranks"] == 2, doc
    assert doc["path"] == path, doc["path"]
    n = doc["ranks"]
    seen = {}
    for row in doc["results"]:
        assert row["check"] == "ok", row
        assert row["time_us"] > 0 and row["iters"] >= 1, row
        assert row["count"] * 4 == row["bytes"], row
        factor = {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "broadcast": 1.0}[row["op"]]
        assert abs(row["busbw_gbps"] - row["algbw_gbps"] * factor) <= 1e-9 * max(1.0, row["algbw_gbps"]), row
        seen.setdefault(row["op"], []).append(row["bytes"])
    for op in ("allreduce", "allgather", "broadcast"):
        assert seen.get(op) == [4096, 32768, 262144], (op, seen)


def main():
    hvdrun, hvdbench = sys.argv[1:3]
    check(run(hvdrun, hvdbench, []), "comm")
    check(run(hvdrun, hvdbench, ["--api"]), "api")
    print("hvdbench --json under hvdrun: ok (comm and api paths)")


if __name__ == "__main__":
    main()
