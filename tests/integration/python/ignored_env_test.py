"""ignored_env_test.py HVDRUN PYTHONPATH: variables the library reads but
does not honour yet (issue 20) each give one warning line, from rank 0 only,
at the default log level; unset, they give none."""
import os
import subprocess
import sys
import tempfile

hvdrun, pythonpath = sys.argv[1], sys.argv[2]
WORKER = "import hvdcomm.torch as hvd; hvd.init(); hvd.barrier(); hvd.shutdown()"
IGNORED = {
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "1",
    "HOROVOD_HIERARCHICAL_ALLGATHER": "1",
    "HOROVOD_TORUS_ALLREDUCE": "1",
    "HOROVOD_AUTOTUNE": "1",
    "HOROVOD_TIMELINE": None,  # a path, filled in below
}


def run(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    env.update(PYTHONPATH=pythonpath, **extra)
    p = subprocess.run([hvdrun, "-np", "2", "-H", "localhost:2", sys.executable, "-c", WORKER], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=50)
    if p.returncode != 0:
        raise SystemExit(f"hvdrun exited {p.returncode}:\n{p.stdout}")
    return p.stdout.splitlines()


with tempfile.TemporaryDirectory() as tmp:
    timeline = os.path.join(tmp, "timeline.json")
    autotune_log = os.path.join(tmp, "autotune.csv")
    extra = {k: (v if v is not None else timeline) for k, v in IGNORED.items()}
    extra["HOROVOD_AUTOTUNE_LOG"] = autotune_log
    lines = run(extra)
    failures = []
    for var, value in extra.items():
        if var == "HOROVOD_AUTOTUNE_LOG":
            continue
        hits = [ln for ln in lines if f"{var}={value} is ignored" in ln]
        if len(hits) != 1:
            failures.append(f"{var}: expected one warning line, got {len(hits)}: {hits}")
            continue
        line = hits[0]
        if "issue 20" not in line or "warn" not in line.lower():
            failures.append(f"{var}: line lacks 'issue 20' or warning level: {line!r}")
        if "[1]" in line.split(var)[0]:
            failures.append(f"{var}: warned by rank 1: {line!r}")
    auto = [ln for ln in lines if "HOROVOD_AUTOTUNE=1 is ignored" in ln]
    if auto and f"HOROVOD_AUTOTUNE_LOG={autotune_log}" not in auto[0]:
        failures.append(f"the autotune line does not name its log file: {auto[0]!r}")
    if os.path.exists(timeline) or os.path.exists(autotune_log):
        failures.append("a timeline/autotune file appeared, yet the warning says none is written")
    # unset: not a word about them
    quiet = [ln for ln in run({}) if "is ignored" in ln]
    if quiet:
        failures.append(f"warnings without the variables set: {quiet}")
    if failures:
        print("\n".join(failures))
        print("--- output with the variables set:\n" + "\n".join(lines))
        raise SystemExit(1)
print("every ignored variable warned once, on rank 0")
