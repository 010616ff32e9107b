#!/usr/bin/env python3
"""Black-box checks of the hvdrun binary's CLI outcomes: exit codes, which
stream a message goes to, and that usage errors are exactly one line. Nothing
here starts a worker (every case fails before launch or is a dry run)."""
import json
import subprocess
import sys

HVDRUN = sys.argv[1]
GOLDEN_DIR = sys.argv[2]

# (args, exit code, stdout must contain, stderr must equal or None)
CASES = [
    (["--help"], 0, "Usage: hvdrun -np N", ""),
    (["--version"], 0, "hvdrun ", ""),
    (["-cb"], 0, "Available Controllers:", ""),
    (["-np", "2", "--dry-run", "true"], 0, "rank  host", ""),
    (["python"], 2, "", "hvdrun: error: -np/--num-proc is required (e.g. hvdrun -np 4 python train.py)\n"),
    (["-np", "2", "-H", "a:2", "b:2", "python"], 2, "",
     "hvdrun: error: 'b:2' looks like a host; join hosts with commas: -H a:2,b:2\n"),
    (["-np", "2", "-H", "h:abc", "true"], 2, "", "hvdrun: error: 'h:abc': slot count 'abc' is not a number\n"),
    (["-np", "5", "-H", "a:2,b:2", "true"], 2, "", "hvdrun: error: -np 5 but only 4 slots on 2 hosts (a:2, b:2)\n"),
    (["-np", "2", "--hostfile", GOLDEN_DIR + "/bad.hosts", "true"], 2, "",
     "hvdrun: error: " + GOLDEN_DIR + "/bad.hosts:3: 'bad slots=zero': slot count 'zero' is not a number\n"),
    (["-np", "2", "--hostfile", "/nonexistent/hvd.hosts", "true"], 2, "",
     "hvdrun: error: cannot read hostfile '/nonexistent/hvd.hosts': No such file or directory\n"),
    (["--max-np", "2", "-np", "2", "true"], 2, "",
     "hvdrun: error: --max-np needs --host-discovery-script or --min-np (elastic mode)\n"),
    (["--jsrun", "-np", "2", "true"], 4, "", "hvdrun: error: --jsrun is not supported yet (jsrun/LSF mode)\n"),
    (["-np", "2", "--no-such-flag", "true"], 2, "", None),
]

failures = 0
for args, code, out_has, err in CASES:
    env = {"PATH": "/usr/bin:/bin"}
    p = subprocess.run([HVDRUN] + args, capture_output=True, text=True, timeout=20, env=env)
    problems = []
    if p.returncode != code:
        problems.append(f"exit {p.returncode}, expected {code}")
    if out_has not in p.stdout:
        problems.append(f"stdout lacks {out_has!r}")
    if err is not None and p.stderr != err:
        problems.append(f"stderr {p.stderr!r}, expected {err!r}")
    if code == 2 and p.stderr.count("\n") != 1:
        problems.append(f"usage error is not one line: {p.stderr!r}")
    if problems:
        failures += 1
        print(f"FAIL hvdrun {' '.join(args)}: " + "; ".join(problems))

# --dry-run=json is valid JSON on stdout with nothing else mixed in.
p = subprocess.run([HVDRUN, "-np", "3", "-H", "localhost:2,127.0.0.1:1", "--dry-run=json", "echo", "hi"],
                   capture_output=True, text=True, timeout=20)
try:
    doc = json.loads(p.stdout)
    assert doc["np"] == 3 and doc["workers"][2]["host"] == "127.0.0.1", doc
    assert "HVDRUN_SECRET" not in p.stdout
except Exception as e:  # noqa: BLE001 - report any shape problem
    failures += 1
    print(f"FAIL --dry-run=json: {e}: {p.stdout[:500]!r}")

print(f"{len(CASES) + 1 - failures}/{len(CASES) + 1} CLI black-box checks passed")
sys.exit(1 if failures else 0)
