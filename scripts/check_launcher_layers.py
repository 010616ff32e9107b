#!/usr/bin/env python3
"""The launcher's layering, checked: no file of lib/launcher includes a
header of a folder above its own (docs/design.md, "The launcher's layers").

Folders are layers, lowest first (a folder's subfolders -- spawn/ssh,
discovery/kubernetes, ... -- belong to its layer):

    process < hosts < options < plan < discovery < spawn < supervise < elastic < job

A file may include headers of its own layer and of the layers below it.

Each violation is one line, `FILE:LINE: ...`, naming both folders; the exit
status is 1 when there is one, 2 when a folder is in no layer (add it to
LAYERS and to docs/design.md).

One error path (docs/design.md, "Error rules"): the words every error line
starts with, "hvdrun: error: ", are spelled once, as kErrorPrefix in
process/report.h; every other file reports through report_error/JobError
(or kErrorPrefix), so a string literal with them elsewhere is a violation.

    check_launcher_layers.py SOURCE_DIR   check the tree (ctest launcher.layers)
    check_launcher_layers.py --self-test  plant a bad include and an error
                                          prefix in a copy of a small tree;
                                          both must be reported
                                          (ctest launcher.layers_self_test)
"""
import os
import re
import sys
import tempfile

LAYERS = ["process", "hosts", "options", "plan", "discovery", "spawn", "supervise", "elastic", "job"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s*"hvd/launcher/([^"]+)"')
ERROR_LITERAL = '"hvdrun: error'
ERROR_PREFIX_HOME = "process/report.h"
ROOTS = ["lib/launcher/src", "lib/launcher/include/hvd/launcher"]


def layer_of(relative):
    """The top folder of a path below src/ or include/hvd/launcher/, or None."""
    parts = relative.split("/")
    return parts[0] if len(parts) > 1 else None


def check(source_dir):
    problems = []
    unknown = set()
    for root in ROOTS:
        base = os.path.join(source_dir, root)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                own = layer_of(os.path.relpath(path, base))
                if own is None:
                    continue
                if own not in RANK:
                    unknown.add(own)
                    continue
                relative = os.path.relpath(path, base)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        code = line.strip()
                        if ERROR_LITERAL in line and not code.startswith(("//", "*")) and relative != ERROR_PREFIX_HOME:
                            shown = os.path.relpath(path, source_dir)
                            problems.append(
                                f"{shown}:{number}: spells the error prefix {ERROR_LITERAL}...\" itself: report "
                                f"through report_error/JobError or kErrorPrefix ({ERROR_PREFIX_HOME}; docs/design.md)")
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = layer_of(m.group(1))
                        if target is None:
                            continue
                        if target not in RANK:
                            unknown.add(target)
                            continue
                        if RANK[target] > RANK[own]:
                            shown = os.path.relpath(path, source_dir)
                            problems.append(
                                f"{shown}:{number}: {own}/ includes hvd/launcher/{m.group(1)}, a header of "
                                f"{target}/, a layer above it (order: {' < '.join(LAYERS)}; docs/design.md)")
    return problems, unknown


def report(source_dir):
    problems, unknown = check(source_dir)
    for p in problems:
        print(p)
    for u in sorted(unknown):
        print(f"lib/launcher: folder {u}/ is in no layer: add it to LAYERS in {sys.argv[0]} and to docs/design.md")
    if unknown:
        return 2
    return 1 if problems else 0


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        def write(relative, text):
            path = os.path.join(tmp, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)

        write("lib/launcher/include/hvd/launcher/job/modes.h", "#pragma once\n")
        write("lib/launcher/include/hvd/launcher/process/report.h",
              '#pragma once\ninline constexpr const char* kErrorPrefix = "hvdrun: error: ";\n')
        write("lib/launcher/src/job/modes.cpp",
              '// prints "hvdrun: error: ..." through report_error\n#include "hvd/launcher/job/modes.h"\n')
        write("lib/launcher/include/hvd/launcher/plan/plan.h", '#pragma once\n#include "hvd/launcher/hosts/hosts.h"\n')
        write("lib/launcher/src/spawn/ssh/ssh.cpp", '#include "hvd/launcher/plan/plan.h"\n#include <vector>\n')
        write("lib/launcher/src/job/job.cpp", '#include "hvd/launcher/spawn/ssh/ssh.h"\n')
        problems, unknown = check(tmp)
        if problems or unknown:
            print("self-test: a clean tree was reported:", problems, unknown)
            return 1
        # The planted bad include: plan/ (low) includes job/ (the top).
        write("lib/launcher/src/plan/dry_run.cpp",
              '#include "hvd/launcher/plan/plan.h"\n  #  include "hvd/launcher/job/modes.h"\n')
        problems, unknown = check(tmp)
        expected = ("lib/launcher/src/plan/dry_run.cpp:2: plan/ includes hvd/launcher/job/modes.h, a header of "
                    "job/, a layer above it")
        if len(problems) != 1 or not problems[0].startswith(expected):
            print("self-test: the planted include plan/ -> job/ was not reported as expected:", problems)
            return 1
        # The error prefix spelled outside process/report.h.
        write("lib/launcher/src/plan/dry_run.cpp", '#include "hvd/launcher/plan/plan.h"\n')
        write("lib/launcher/src/job/static_job.cpp",
              'void f() { std::fprintf(stderr, "hvdrun: error: %s\\n", "x"); }\n')
        problems, unknown = check(tmp)
        expected = "lib/launcher/src/job/static_job.cpp:1: spells the error prefix"
        if len(problems) != 1 or not problems[0].startswith(expected):
            print("self-test: the planted error prefix was not reported as expected:", problems)
            return 1
        # A folder in no layer is an error of its own (the list must grow with the tree).
        write("lib/launcher/src/newfolder/x.cpp", "\n")
        _, unknown = check(tmp)
        if unknown != {"newfolder"}:
            print("self-test: an unlisted folder was not reported:", unknown)
            return 1
    print("self-test: ok (a clean tree passes, a planted plan/ -> job/ include, a planted error prefix and an "
          "unlisted folder are reported)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(report(sys.argv[1]))
