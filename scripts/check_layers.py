#!/usr/bin/env python3
"""The layering, checked: no file includes a header of a folder above its
own (docs/design.md, "Modules and their direction", "The launcher's layers"
and "The collective library's tree").

Three rules, each a list of layers, lowest first:

  modules   lib/<module>/: common < store < transport < collective, and
            launcher beside transport (common and store only: the launcher
            never includes the collective library or the transport).
            A file of lib/M may include "hvd/N/..." only for N at or below M.
  launcher  lib/launcher's folders (a folder's subfolders -- spawn/ssh,
            discovery/kubernetes, ... -- belong to its layer):
            process < hosts < options < plan < discovery < spawn < supervise
            < elastic < job. Headers are included as "hvd/launcher/<folder>/...".
  collective  lib/collective/src's folders: shm < bootstrap < algorithms <
            engine < elastic < api. Private headers are included by folder,
            "engine/controller.h", or bare from the file's own folder.

A file may include headers of its own layer and of the layers below it. An
include that climbs folders by a relative path ("../x.h") is refused too:
it hides which folder it reaches.

One error path (docs/design.md, "Error rules"): the words every launcher
error line starts with, "hvdrun: error: ", are spelled once, as
kErrorPrefix in process/report.h; every other launcher file reports through
report_error/JobError (or kErrorPrefix), so a string literal with them
elsewhere is a violation.

Each violation is one line, `FILE:LINE: ...`, naming both folders; the exit
status is 1 when there is one, 2 when a folder is in no layer (add it to the
rule below and to docs/design.md).

    check_layers.py SOURCE_DIR   check the tree (ctest layers.check)
    check_layers.py --self-test  plant a bad include of each kind and an
                                 error prefix in a copy of a small tree; each
                                 must be reported (ctest layers.self_test)
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ERROR_LITERAL = '"hvdrun: error'
ERROR_PREFIX_HOME = "lib/launcher/include/hvd/launcher/process/report.h"
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


class Rule:
    """One ordering of folders. `roots`: the folders (relative to the
    source dir) whose files are checked, each file's layer being the first
    path component below its root. `target`: maps an include's text to the
    layer it reaches, or None when the include is not this rule's business.
    `error_prefix`: also keep the one error path in these files."""

    def __init__(self, name, layers, roots, target, doc, error_prefix=False):
        self.name = name
        self.layers = layers
        self.rank = {n: i for i, n in enumerate(layers)}
        self.roots = roots
        self.target = target
        self.doc = doc
        self.error_prefix = error_prefix


def _first_component(relative):
    parts = relative.split("/")
    return parts[0] if len(parts) > 1 else None


MODULES = ["common", "store", "transport", "launcher", "collective"]
# The launcher sits beside the transport: below it only common and store.
MODULE_MAY_INCLUDE = {
    "common": {"common"},
    "store": {"common", "store"},
    "transport": {"common", "store", "transport"},
    "launcher": {"common", "store", "launcher"},
    "collective": {"common", "store", "transport", "collective"},
}
LAUNCHER = ["process", "hosts", "options", "plan", "discovery", "spawn", "supervise", "elastic", "job"]
COLLECTIVE = ["shm", "bootstrap", "algorithms", "engine", "elastic", "api"]


def _launcher_target(text):
    if not text.startswith("hvd/launcher/"):
        return None
    return _first_component(text[len("hvd/launcher/"):])


def _collective_target(text):
    if text.startswith("hvd/"):
        return None
    first = _first_component(text)
    if first is None:  # a bare name: the file's own folder
        return None
    return first


RULES = [
    Rule("launcher", LAUNCHER, ["lib/launcher/src", "lib/launcher/include/hvd/launcher"],
         _launcher_target, 'docs/design.md, "The launcher\'s layers"', error_prefix=True),
    Rule("collective", COLLECTIVE, ["lib/collective/src"],
         _collective_target, 'docs/design.md, "The collective library\'s tree"'),
]


def _source_files(base):
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(dirpath, name)


def _check_modules(source_dir, problems, unknown):
    lib = os.path.join(source_dir, "lib")
    if not os.path.isdir(lib):
        return
    for module in sorted(os.listdir(lib)):
        base = os.path.join(lib, module)
        if not os.path.isdir(base):
            continue
        if module not in MODULE_MAY_INCLUDE:
            unknown.add(("modules", module))
            continue
        for path in _source_files(base):
            shown = os.path.relpath(path, source_dir)
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    text = m.group(1)
                    if text.startswith("../") or "/../" in text:
                        problems.append(f"{shown}:{number}: includes \"{text}\" by a relative path that climbs "
                                        f"folders: name the header from an include directory instead")
                        continue
                    if not text.startswith("hvd/"):
                        continue
                    other = _first_component(text[len("hvd/"):])
                    if other is None or other in MODULE_MAY_INCLUDE[module]:
                        continue
                    if other not in MODULE_MAY_INCLUDE:
                        continue  # not a module header (a generated one, say)
                    problems.append(
                        f"{shown}:{number}: lib/{module} includes {text}, a header of lib/{other}, which "
                        f"lib/{module} may not use (lib/{module} may include: "
                        f"{', '.join(sorted(MODULE_MAY_INCLUDE[module]))}; docs/design.md, "
                        f"\"Modules and their direction\")")


def _check_rule(rule, source_dir, problems, unknown):
    for root in rule.roots:
        base = os.path.join(source_dir, root)
        if not os.path.isdir(base):
            continue
        for path in _source_files(base):
            relative = os.path.relpath(path, base)
            own = _first_component(relative)
            if own is None:
                continue
            if own not in rule.rank:
                unknown.add((rule.name, own))
                continue
            shown = os.path.relpath(path, source_dir)
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    code = line.strip()
                    if (rule.error_prefix and ERROR_LITERAL in line and not code.startswith(("//", "*"))
                            and shown != ERROR_PREFIX_HOME):
                        problems.append(
                            f"{shown}:{number}: spells the error prefix {ERROR_LITERAL}...\" itself: report "
                            f"through report_error/JobError or kErrorPrefix (process/report.h; docs/design.md)")
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = rule.target(m.group(1))
                    if target is None or target == own:
                        continue
                    if target not in rule.rank:
                        if rule.name == "launcher":
                            unknown.add((rule.name, target))
                        continue  # collective: a folder outside src/ (cuda/ headers by their own path)
                    if rule.rank[target] > rule.rank[own]:
                        problems.append(
                            f"{shown}:{number}: {own}/ includes {m.group(1)}, a header of {target}/, a layer "
                            f"above it ({rule.name} order: {' < '.join(rule.layers)}; {rule.doc})")


def check(source_dir):
    problems = []
    unknown = set()
    _check_modules(source_dir, problems, unknown)
    for rule in RULES:
        _check_rule(rule, source_dir, problems, unknown)
    return problems, unknown


def report(source_dir):
    problems, unknown = check(source_dir)
    for p in problems:
        print(p)
    for rule, folder in sorted(unknown):
        print(f"{rule}: folder {folder}/ is in no layer: add it to the {rule} rule in {sys.argv[0]} "
              f"and to docs/design.md")
    if unknown:
        return 2
    return 1 if problems else 0


def self_test():
    failures = []

    def expect_one(tmp, what, expected_start):
        problems, unknown = check(tmp)
        if len(problems) != 1 or not problems[0].startswith(expected_start) or unknown:
            failures.append(f"{what}: expected one problem starting {expected_start!r}, got {problems} {unknown}")

    with tempfile.TemporaryDirectory() as tmp:
        def write(relative, text):
            path = os.path.join(tmp, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)

        # A small clean tree with every rule's shapes.
        write("lib/common/include/hvd/common/error.h", "#pragma once\n")
        write("lib/store/src/store.cpp", '#include "hvd/common/error.h"\n')
        write("lib/transport/src/tcp.cpp", '#include "hvd/store/store.h"\n#include "hvd/common/error.h"\n')
        write("lib/launcher/include/hvd/launcher/job/modes.h", "#pragma once\n")
        write("lib/launcher/include/hvd/launcher/process/report.h",
              '#pragma once\ninline constexpr const char* kErrorPrefix = "hvdrun: error: ";\n')
        write("lib/launcher/src/job/modes.cpp",
              '// prints "hvdrun: error: ..." through report_error\n#include "hvd/launcher/job/modes.h"\n'
              '#include "hvd/store/store.h"\n')
        write("lib/launcher/include/hvd/launcher/plan/plan.h", '#pragma once\n#include "hvd/launcher/hosts/hosts.h"\n')
        write("lib/launcher/src/spawn/ssh/ssh.cpp", '#include "hvd/launcher/plan/plan.h"\n#include <vector>\n')
        write("lib/launcher/src/job/job.cpp", '#include "hvd/launcher/spawn/ssh/ssh.h"\n')
        write("lib/collective/src/engine/context.cpp",
              '#include "engine/controller.h"\n#include "bootstrap/comm_impl.h"\n#include "device_executor.h"\n'
              '#include "hvd/transport/link.h"\n')
        write("lib/collective/src/algorithms/ring.cpp", '#include "ring.h"\n#include "algorithms/reduce.h"\n')
        write("lib/collective/src/bootstrap/comm.cpp", '#include "shm/local_links.h"\n')
        problems, unknown = check(tmp)
        if problems or unknown:
            print("self-test: a clean tree was reported:", problems, unknown)
            return 1

        # launcher: plan/ (low) includes job/ (the top).
        write("lib/launcher/src/plan/dry_run.cpp",
              '#include "hvd/launcher/plan/plan.h"\n  #  include "hvd/launcher/job/modes.h"\n')
        expect_one(tmp, "launcher plan/ -> job/",
                   "lib/launcher/src/plan/dry_run.cpp:2: plan/ includes hvd/launcher/job/modes.h, a header of job/, "
                   "a layer above it (launcher order")
        write("lib/launcher/src/plan/dry_run.cpp", '#include "hvd/launcher/plan/plan.h"\n')

        # launcher: the error prefix spelled outside process/report.h.
        write("lib/launcher/src/job/static_job.cpp",
              'void f() { std::fprintf(stderr, "hvdrun: error: %s\\n", "x"); }\n')
        expect_one(tmp, "error prefix", "lib/launcher/src/job/static_job.cpp:1: spells the error prefix")
        os.remove(os.path.join(tmp, "lib/launcher/src/job/static_job.cpp"))

        # collective: bootstrap/ (low) includes engine/.
        write("lib/collective/src/bootstrap/hierarchy.h", '#pragma once\n#include "engine/operations.h"\n')
        expect_one(tmp, "collective bootstrap/ -> engine/",
                   "lib/collective/src/bootstrap/hierarchy.h:2: bootstrap/ includes engine/operations.h, a header of "
                   "engine/, a layer above it (collective order")
        os.remove(os.path.join(tmp, "lib/collective/src/bootstrap/hierarchy.h"))

        # modules: the launcher includes the collective library.
        write("lib/launcher/src/job/gpu.cpp", '#include "hvd/collective/hvd.h"\n')
        expect_one(tmp, "module launcher -> collective",
                   "lib/launcher/src/job/gpu.cpp:1: lib/launcher includes hvd/collective/hvd.h, a header of "
                   "lib/collective")
        os.remove(os.path.join(tmp, "lib/launcher/src/job/gpu.cpp"))

        # modules: a lower module includes a higher one.
        write("lib/store/src/peek.cpp", '#include "hvd/transport/link.h"\n')
        expect_one(tmp, "module store -> transport",
                   "lib/store/src/peek.cpp:1: lib/store includes hvd/transport/link.h, a header of lib/transport")
        os.remove(os.path.join(tmp, "lib/store/src/peek.cpp"))

        # A relative include that climbs folders.
        write("lib/collective/src/bootstrap/mpi_env.cpp", '#include "../../mpi_bootstrap/hvd_mpi_bootstrap.h"\n')
        expect_one(tmp, "relative include", "lib/collective/src/bootstrap/mpi_env.cpp:1: includes "
                                            '"../../mpi_bootstrap/hvd_mpi_bootstrap.h" by a relative path')
        os.remove(os.path.join(tmp, "lib/collective/src/bootstrap/mpi_env.cpp"))

        # A folder in no layer is an error of its own (the lists must grow with the tree).
        write("lib/launcher/src/newfolder/x.cpp", "\n")
        write("lib/collective/src/newcore/y.cpp", "\n")
        _, unknown = check(tmp)
        if unknown != {("launcher", "newfolder"), ("collective", "newcore")}:
            failures.append(f"unlisted folders: {unknown}")

    if failures:
        for f in failures:
            print("self-test:", f)
        return 1
    print("self-test: ok (a clean tree passes; planted launcher, collective and module includes that go up, a "
          "climbing relative include, an error prefix and unlisted folders are each reported)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(report(sys.argv[1]))
