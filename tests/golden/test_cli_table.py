#!/usr/bin/env python3
"""hvdrun_cli_table: the flag tables of docs/cli.md ("Every horovodrun
flag") against the real binary, run as `horovodrun` (the link next to
hvdrun), as a copied horovodrun line would run it.

* The first tables list exactly horovodrun 0.28.1's option strings (the
  list below, read from horovod/runner/launch.py's parser), each row with a
  behaviour of the documented grammar; every option `hvdrun --help` shows is
  listed somewhere in the section.
* Every row's example runs once per name of the row, in a temporary
  directory that holds the files the examples name: `-np 1 EXAMPLE true`
  (elastic groups: with a discovery script; --help, --version and -cb
  alone). `works`, `works differently` and `addition` rows must exit 0 with
  no warning line; `warns and ignores` rows must exit 0 with exactly one
  warning line, naming the flag; `error (exit N)` rows must exit N with one
  `hvdrun: error:` line.

usage: test_cli_table.py HVDRUN CLI_MD
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

HVDRUN, CLI_MD = (os.path.abspath(a) for a in sys.argv[1:3])
HOROVODRUN = os.path.join(os.path.dirname(HVDRUN), "horovodrun")

# Every option string of horovodrun 0.28.1's argparse parser (argparse's own
# -h/--help included), in launch.py's order.
HOROVODRUN_0_28_1 = """
-h --help -v --version -np --num-proc -cb --check-build --disable-cache --start-timeout
--network-interfaces --network-interface --output-filename --verbose --config-file
-p --ssh-port -i --ssh-identity-file
--fusion-threshold-mb --cycle-time-ms --cache-capacity --hierarchical-allreduce --no-hierarchical-allreduce
--hierarchical-allgather --no-hierarchical-allgather --torus-allreduce --no-torus-allreduce
--autotune --no-autotune --autotune-log-file --autotune-warmup-samples --autotune-steps-per-sample
--autotune-bayes-opt-max-samples --autotune-gaussian-process-noise
--min-np --min-num-proc --max-np --max-num-proc --slots-per-host --elastic-timeout --reset-limit
--blacklist-cooldown-range
--timeline-filename --timeline-mark-cycles --no-timeline-mark-cycles
--no-stall-check --stall-check --stall-check-warning-time-seconds --stall-check-shutdown-time-seconds
--mpi-threads-disable --no-mpi-threads-disable --mpi-args --tcp --binding-args --num-nccl-streams
--thread-affinity --gloo-timeout-seconds
--log-level --log-with-timestamp --log-without-timestamp -prefix-timestamp --prefix-output-with-timestamp
--log-hide-timestamp --no-log-hide-timestamp
-H --hosts -hostfile --hostfile --host-discovery-script
--gloo --mpi --jsrun
""".split()

SECTION = "## Every horovodrun flag"
ADDITIONS = "### hvdrun's additions"
ELASTIC_ADDITIONS = "### hvdrun's elastic additions"
# Run with --kubernetes-selector and --dry-run against a fake API server
# (tests/integration/kubernetes/fake_apiserver.py) through a kubeconfig.
KUBERNETES_ADDITIONS = "### hvdrun's Kubernetes additions"
KUBE_ENV = {}
BEHAVIOUR = re.compile(r"^(works differently: |warns and ignores: |error \(exit (\d+)\): |addition: |works\b)")
ALONE = {"-h", "--help", "-v", "--version", "-cb", "--check-build"}
NP = {"-np", "--num-proc"}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL " + what, flush=True)
    return cond


def cells(line):
    """The cells of a markdown table line ('\\|' is a pipe inside a cell)."""
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [p.strip().replace("\\|", "|") for p in parts]


class Row:
    def __init__(self, heading, flag, example, behaviour, line):
        self.heading, self.line = heading, line
        # `-np`, `--num-proc N` -> the names; the placeholder is dropped.
        self.names = [chunk.split()[0].split("[")[0] for chunk in re.findall(r"`([^`]+)`", flag)]
        examples = re.findall(r"`([^`]+)`", example)
        self.example = shlex.split(examples[0]) if len(examples) == 1 else []
        self.behaviour = behaviour
        m = BEHAVIOUR.match(behaviour)
        self.kind = m.group(1).rstrip(": ").split(" (")[0] if m else None
        self.exit_code = int(m.group(2)) if m and m.group(2) else 0
        self.addition = heading in (ADDITIONS, ELASTIC_ADDITIONS, KUBERNETES_ADDITIONS)
        self.elastic = "elastic" in heading
        self.kubernetes = heading == KUBERNETES_ADDITIONS


def read_table():
    rows, heading, inside = [], None, False
    with open(CLI_MD) as f:
        for line in f:
            if line.startswith("## "):
                inside = line.strip() == SECTION
                continue
            if not inside:
                continue
            if line.startswith("### "):
                heading = line.strip()
                continue
            if not line.startswith("|"):
                continue
            c = cells(line)
            if len(c) != 3 or c[0] == "flag" or set(c[0]) <= set("-: "):
                continue
            rows.append(Row(heading, *c, line.strip()))
    return rows


def args_for(row, name):
    """The example with its flag spelt `name` (the example starts with one of
    the row's names, alone or as NAME=VALUE)."""
    first, rest = row.example[0], row.example[1:]
    for n in sorted(row.names, key=len, reverse=True):
        if first == n or first.startswith(n + "="):
            return [name + first[len(n):]] + rest
    raise AssertionError(f"example {row.example} does not start with one of {row.names}")


def command_line(row, name, program):
    args = args_for(row, name)
    if ALONE & set(row.names):
        return [program] + args
    base = [] if NP & set(row.names) else ["-np", "1"]
    if row.kubernetes:
        base += ["--dry-run"] + ([] if "--kubernetes-selector" in args else ["--kubernetes-selector", "app=hvdrun"])
    if row.elastic and "--host-discovery-script" not in args:
        base += ["--host-discovery-script", "./discover.sh"]
    return [program] + base + args + ["true"]


def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "HVDRUN_", "OMPI_", "PMIX_"))}
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    env.update(KUBE_ENV)
    return env


def run(argv, cwd):
    return subprocess.run(argv, cwd=cwd, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)


def warning_lines(stderr):
    return [line for line in stderr.splitlines() if "] [warning] " in line]


def names_in(text, names):
    words = set(re.findall(r"(?<![\w-])-{1,2}[A-Za-z][\w-]*", text))
    return words & set(names)


def check_row(row, cwd):
    for name in row.names:
        argv = command_line(row, name, HOROVODRUN)
        if name in ("--mpi", "--mpi-args") and shutil.which("mpirun") is None:
            print(f"skip {' '.join(argv)}: no mpirun on PATH", flush=True)
            continue
        p = run(argv, cwd)
        shown = "horovodrun " + " ".join(shlex.quote(a) for a in argv[1:])
        problem = f"{shown}: exit {p.returncode}, stderr {p.stderr!r} ({row.line})"
        warnings = warning_lines(p.stderr)
        if row.kind in ("works", "works differently", "addition"):
            check(p.returncode == 0, "not accepted: " + problem)
            check(not warnings, "a warning for a flag documented as working: " + problem)
            if ALONE & set(row.names):
                check(p.stdout.strip() != "", f"{shown}: nothing on stdout")
        elif row.kind == "warns and ignores":
            check(p.returncode == 0, "not accepted: " + problem)
            check(len(warnings) == 1 and names_in(warnings[0], row.names),
                  "not exactly one warning line naming the flag: " + problem)
        elif row.kind == "error":
            lines = p.stderr.splitlines()
            check(p.returncode == row.exit_code and len(lines) == 1 and lines[0].startswith("hvdrun: error: "),
                  f"not one error line and exit {row.exit_code}: " + problem)


def main():
    rows = read_table()
    check(len(rows) > 50, f"only {len(rows)} rows read from {CLI_MD} ({SECTION})")

    # The grammar of each row.
    for row in rows:
        check(row.names and all(n.startswith("-") for n in row.names), f"no flag names: {row.line}")
        check(len(row.example) > 0, f"no single `example`: {row.line}")
        check(row.kind is not None, f"behaviour does not start with a documented form: {row.line}")
        check(row.addition == (row.kind == "addition") or (row.addition and row.kind == "error"),
              f"'addition:' rows belong to the additions tables and only there: {row.line}")

    # The horovodrun tables list horovodrun's option strings, each once.
    horovodrun_names = [n for row in rows if not row.addition for n in row.names]
    missing = [n for n in HOROVODRUN_0_28_1 if n not in horovodrun_names]
    extra = [n for n in horovodrun_names if n not in HOROVODRUN_0_28_1]
    twice = sorted({n for n in horovodrun_names if horovodrun_names.count(n) > 1})
    check(not missing, f"horovodrun flags missing from the table: {missing}")
    check(not extra, f"not horovodrun 0.28.1 flags, yet in its tables: {extra}")
    check(not twice, f"listed twice: {twice}")
    all_names = {n for row in rows for n in row.names}

    # The entry point: horovodrun is hvdrun under another name.
    check(os.path.realpath(HOROVODRUN) == os.path.realpath(HVDRUN), f"{HOROVODRUN} is not a link to {HVDRUN}")
    with tempfile.TemporaryDirectory(prefix="hvd-cli-table-") as cwd:
        for program, name in ((HVDRUN, "hvdrun"), (HOROVODRUN, "horovodrun")):
            p = run([program, "--help"], cwd)
            check(p.returncode == 0 and f"Usage: {name} -np N " in p.stdout, f"{name} --help: usage line names {name}")
        # Every option --help shows is in the tables.
        shown = set()
        for line in p.stdout.splitlines():
            m = re.match(r"^  (-\S+)", line)
            if m:
                shown.update(m.group(1).split(","))
        check(len(shown) > 50, f"only {len(shown)} options read from --help")
        check(not (shown - all_names), f"options of --help missing from docs/cli.md: {sorted(shown - all_names)}")

        # The files the examples name.
        with open(os.path.join(cwd, "hosts.txt"), "w") as f:
            f.write("localhost slots=1\n")
        with open(os.path.join(cwd, "hvdrun.yaml"), "w") as f:
            f.write("params:\n  cache_capacity: 1024\n")
        with open(os.path.join(cwd, "id_ed25519"), "w") as f:
            f.write("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        script = os.path.join(cwd, "discover.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho localhost:1\n")
        os.chmod(script, 0o755)

        api = None
        if any(row.kubernetes for row in rows):
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration",
                                            "kubernetes"))
            from fake_apiserver import FakeApiServer
            api = FakeApiServer(os.path.join(cwd, "api")).start()
            api.add_pod("hvd-0", labels={"app": "hvdrun"}, ip="127.0.0.2", ready=True)
            KUBE_ENV["KUBECONFIG"] = api.write_kubeconfig(os.path.join(cwd, "kubeconfig"))
        try:
            for row in rows:
                if row.names and row.example and row.kind:
                    check_row(row, cwd)
        finally:
            if api:
                api.stop()
            KUBE_ENV.clear()

        # A copied guide line: -n for -np, as argparse reads it.
        p = run([HOROVODRUN, "-n", "1", "--hostfile", "hosts.txt", "true"], cwd)
        check(p.returncode == 0, f"horovodrun -n 1 --hostfile hosts.txt true: exit {p.returncode}, {p.stderr!r}")

    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print(f"{len(rows)} rows, {len(all_names)} flag names: ok")


main()
