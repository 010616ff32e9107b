#!/usr/bin/env python3
"""fdlist.py DIR PROGRAM [ARGS...]: writes the descriptors this process
inherited (number and what /proc/self/fd says it is) to DIR/<pid>.txt, then
execs PROGRAM (which inherits the very same descriptors). Used by
test_fault.py as the worker hvdrun starts."""
import os
import sys

# Before anything else opens a file: os.listdir's own directory descriptor is
# closed again by the time readlink runs, so it drops out below.
names = os.listdir("/proc/self/fd")
entries = []
for name in sorted(names, key=int):
    try:
        entries.append("%s %s" % (name, os.readlink("/proc/self/fd/" + name)))
    except OSError:
        pass
out_dir, argv = sys.argv[1], sys.argv[2:]
tmp = os.path.join(out_dir, ".%d.tmp" % os.getpid())
with open(tmp, "w") as f:
    f.write("\n".join(entries) + "\n")
os.rename(tmp, os.path.join(out_dir, "%d.txt" % os.getpid()))
os.execv(argv[0], argv)
