#!/usr/bin/env python3
"""Writes hvdrun's man page (roff) from `hvdrun --help`, whose options come
from the launcher's flag table (lib/launcher/src/options/flags.cpp), so the
page always lists exactly the flags the binary accepts.

    make_manpage.py HVDRUN OUT.1 [VERSION]

Run by the build (apps/hvdrun/CMakeLists.txt); installed as
share/man/man1/hvdrun.1, with horovodrun.1 pointing at it.
"""
import re
import subprocess
import sys


def roff(text):
    """Escapes text for roff: backslashes, and a leading dot or quote."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def parse(help_text):
    """(usage line, [(section title, [(option, [description lines])])], trailer lines)."""
    lines = help_text.splitlines()
    usage = next((l[len("Usage: "):] for l in lines if l.startswith("Usage: ")), "hvdrun [options] command")
    sections, trailer = [], []
    current = None
    option = None
    body = lines[lines.index(next(l for l in lines if l.startswith("Usage: "))) + 1:]
    for line in body:
        if not line.strip():
            option = None
            continue
        if re.match(r"^\S.*:$", line):  # "General:", "Options:"
            current = (line[:-1], [])
            sections.append(current)
            option = None
            continue
        if current is None or not line.startswith(" "):
            trailer.append(line)  # the closing paragraph
            current = None
            continue
        m = re.match(r"^  (\S.*?)(?:\s{2,}(\S.*))?$", line)
        if m and not line.startswith("    "):
            option = (m.group(1), [m.group(2)] if m.group(2) else [])
            current[1].append(option)
        elif option is not None:
            option[1].append(line.strip())
    return usage, sections, trailer


def page(usage, sections, trailer, version):
    out = [f'.TH HVDRUN 1 "" "hvdrun {roff(version)}" "User Commands"',
           ".SH NAME",
           "hvdrun, horovodrun \\- run a Horovod job (a C++ horovodrun)",
           ".SH SYNOPSIS",
           f".B {roff(usage.split(' ', 1)[0])}",
           roff(usage.split(" ", 1)[1]) if " " in usage else "",
           ".SH DESCRIPTION",
           "hvdrun starts the worker processes of a data\\-parallel training job on this host, "
           "over SSH or through mpirun, serves their rendezvous, multiplexes their output and tears "
           "everything down on failure or Ctrl\\-C. It accepts horovodrun's command line;",
           ".B horovodrun",
           "is the same program.",
           ".PP",
           "Everything from the first positional argument on is the worker command, passed through "
           "untouched."]
    for title, options in sections:
        if not options:
            continue
        out.append(f".SH {roff(title.upper())}" if title == "Options" else f".SS {roff(title)}")
        for flag, desc in options:
            out += [".TP", f"\\fB{roff(flag)}\\fR"] + [roff(d) for d in desc]
    if trailer:
        out += [".SH NOTES", " ".join(roff(l.strip()) for l in trailer)]
    out += [".SH EXIT STATUS",
            "0 when every worker exited successfully; 2 for a usage or configuration error (nothing "
            "started); 3 for a launch failure; 4 for a feature not supported; 5 when an elastic job gave up; "
            "6 when a platform follower could not follow its leader; 127 when the worker command was not found; "
            "128+N after signal N; otherwise the status of the first worker that failed. "
            "exit\\-codes.md has the whole table.",
            ".SH SEE ALSO",
            "The installed documentation in",
            ".IR <prefix>/share/doc/hvdrun/docs :",
            "cli.md (every flag and environment variable), exit\\-codes.md, python.md (the horovod "
            "package), elastic.md, kubernetes.md, platforms.md, mpi.md."]
    return "\n".join(l for l in out if l is not None) + "\n"


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    hvdrun, dest = sys.argv[1], sys.argv[2]
    help_text = subprocess.run([hvdrun, "--help"], stdout=subprocess.PIPE, text=True, check=True).stdout
    version = sys.argv[3] if len(sys.argv) == 4 else \
        subprocess.run([hvdrun, "--version"], stdout=subprocess.PIPE, text=True, check=True).stdout.split()[-1]
    usage, sections, trailer = parse(help_text)
    if sum(len(o) for _, o in sections) < 10:
        sys.exit(f"make_manpage.py: '{hvdrun} --help' lists too few options to be its help text")
    with open(dest, "w") as f:
        f.write(page(usage, sections, trailer, version))


if __name__ == "__main__":
    main()
