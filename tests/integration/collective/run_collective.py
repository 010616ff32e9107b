#!/usr/bin/env python3
"""Runs a multi-process collective test and checks its outcome.

  run_collective.py --launcher hvdrun|self --launcher-bin PATH --np N
                    --program PATH [--mode MODE] [--expect REGEX]
                    [--transport shm|tcp]

'self' is collective_launch (an in-test store server plus forked workers);
'hvdrun' is the real launcher on localhost. Normal modes pass when the
launcher exits 0 and every rank printed a line matching --expect (default
"rank R: MODE ok"). Mode 'kill' passes when one rank was SIGKILLed, every
survivor failed with IoError within 2 s of the kill, every survivor's error
names the killed rank as the rank that failed ("lost its communicator: rank
K failed", also those that only saw a peer abort after it: issue 29), and the
launcher exited non-zero; with --transport, the errors must show that
transport (a survivor names the killed rank's shared-memory link under shm;
no shared memory anywhere under tcp). --transport sets HVD_TRANSPORT for the
workers; --kill-rank K picks the victim (default: the last rank).
Every run is bounded in time and must leave no process behind (found by a
unique tag on the workers' command line) and nothing new named hvd* in
/dev/shm.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time
import uuid


def leftover_processes(tag):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if tag.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def dev_shm_hvd():
    try:
        return {n for n in os.listdir("/dev/shm") if "hvd" in n.lower()}
    except OSError:
        return set()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", choices=["hvdrun", "self"], required=True)
    ap.add_argument("--launcher-bin", required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--mode")
    ap.add_argument("--expect")
    ap.add_argument("--timeout", type=float, default=50)
    ap.add_argument("--transport", choices=["shm", "tcp"])
    ap.add_argument("--kill-rank", type=int, help="mode kill: the rank that kills itself (default: the last)")
    ap.add_argument("--check-data-path", action="store_true",
                    help="hvdrun --verbose: the log must name the data path --transport chose")
    args = ap.parse_args()

    tag = "hvdtest-" + uuid.uuid4().hex
    prog = [args.program] + ([args.mode] if args.mode else []) + [tag]
    if args.launcher == "hvdrun":
        cmd = [args.launcher_bin, "-np", str(args.np), "-H", f"localhost:{args.np}"]
        cmd += (["--verbose"] if args.check_data_path else []) + prog
    else:
        cmd = [args.launcher_bin, str(args.np)] + prog
    env = dict(os.environ)
    if args.check_data_path:
        env.pop("HOROVOD_LOG_LEVEL", None)  # --verbose: info
    else:
        env.setdefault("HOROVOD_LOG_LEVEL", "warning")
    if args.transport:
        env["HVD_TRANSPORT"] = args.transport
    if args.kill_rank is not None:
        env["HVD_TEST_KILL_RANK"] = str(args.kill_rank)
    shm_before = dev_shm_hvd()

    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        print(out.decode(errors="replace"))
        print(f"FAIL: {' '.join(cmd)} did not finish within {args.timeout} s")
        return 1
    text = out.decode(errors="replace")
    elapsed = time.monotonic() - start
    print(text)
    print(f"exit {proc.returncode} after {elapsed:.2f} s: {' '.join(cmd)}")

    errors = []
    time.sleep(0.3)
    left = leftover_processes(tag)
    if left:
        errors.append(f"processes left behind: {left}")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    if args.check_data_path:
        # One line per host from its lowest rank (shm), or from rank 0 (tcp).
        everyone = ",".join(str(r) for r in range(args.np))
        want = (f"rank 0: data path: shared memory between the ranks [{everyone}] of this host"
                if args.transport == "shm" else "rank 0: data path: TCP to every peer (HVD_TRANSPORT=tcp)")
        lines = [l for l in text.splitlines() if "data path:" in l]
        if len(lines) != 1 or want not in lines[0]:
            errors.append(f"expected one log line containing '{want}', got {lines}")

    leaked = dev_shm_hvd() - shm_before
    if leaked:
        errors.append(f"left in /dev/shm: {sorted(leaked)}")

    if args.mode == "kill":
        if proc.returncode == 0:
            errors.append("the launcher exited 0 although a rank was killed")
        killed = re.search(r"rank (\d+): KILLING_AT (\d+)", text)
        if not killed:
            errors.append("no rank reported KILLING_AT")
        else:
            victim, t_kill = int(killed.group(1)), int(killed.group(2))
            for r in range(args.np):
                if r == victim:
                    continue
                m = re.search(rf"rank {r}: FAILED_AT (\d+) iter \d+ IoError: (.+)", text)
                if not m:
                    errors.append(f"survivor rank {r} did not report an IoError")
                    continue
                delay = (int(m.group(1)) - t_kill) / 1e9
                print(f"rank {r} failed {delay * 1000:.1f} ms after the kill: {m.group(2)}")
                if delay > 2.0:
                    errors.append(f"survivor rank {r} took {delay:.2f} s (> 2 s) to fail")
                if not re.search(r"rank \d+", m.group(2).split("failed:", 1)[-1]):
                    errors.append(f"survivor rank {r}'s error names no peer rank: {m.group(2)}")
                named = re.search(r"lost its communicator: rank (\d+) failed\b", m.group(2))
                if not named or int(named.group(1)) != victim:
                    errors.append(f"survivor rank {r}'s error does not name the killed rank {victim} as the rank "
                                  f"that failed: {m.group(2)}")
            # The victim's neighbours see its link close; others see the
            # cascade. At least one survivor names the victim itself.
            failures = re.findall(r"rank \d+: FAILED_AT \d+ iter \d+ IoError: (.+)", text)
            if not any(re.search(rf"rank {victim}\b", f.split("failed:", 1)[-1]) for f in failures):
                errors.append(f"no survivor's error names the killed rank {victim}")
            if args.transport == "shm" and not any(f"rank {victim} (shared memory" in f for f in failures):
                errors.append(f"under shm no survivor failed on its shared-memory link to rank {victim}")
            if args.transport == "tcp" and "shared memory" in text:
                errors.append("HVD_TRANSPORT=tcp, yet a shared-memory link appears")
    else:
        if proc.returncode != 0:
            errors.append(f"the launcher exited {proc.returncode}")
        pattern = args.expect or rf"rank (\d+): {re.escape(args.mode)} ok"
        ranks = set()
        for line in text.splitlines():
            m = re.search(pattern, line)
            if m:
                ranks.add(m.group(1) if m.groups() else line)
        if len(ranks) != args.np:
            errors.append(f"expected {args.np} ranks to match '{pattern}', got {len(ranks)}")

    for e in errors:
        print("FAIL: " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
