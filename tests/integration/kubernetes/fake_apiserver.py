#!/usr/bin/env python3
"""A fake Kubernetes API server for tests: the part of the real protocol that
pod discovery uses, over HTTPS with certificates this module makes with
openssl, bearer-token authentication, and a control API for the test.

    with FakeApiServer(tmpdir) as api:            # HTTPS on 127.0.0.1:<free port>
        api.add_pod("w-0", labels={"app": "hvd"}, ip="198.18.4.2")
        api.set_ready("w-0")
        api.write_kubeconfig(path)                # for kubectl and hvdrun
        api.write_serviceaccount(dir)             # token, ca.crt, namespace
        api.env()                                 # KUBERNETES_SERVICE_HOST/PORT
        ...
        api.terminate("w-0"); api.delete("w-0")

What it serves (read-only, namespaced pods only; JSON only):
  GET /version, /api, /api/v1, /apis              discovery (kubectl needs it)
  GET /api/v1/namespaces/NS/pods[?labelSelector=..&fieldSelector=..&limit=..]
      a PodList whose metadata.resourceVersion is the server's current one
  GET /api/v1/namespaces/NS/pods/NAME
  GET .../pods?watch=1&resourceVersion=RV[&timeoutSeconds=N&allowWatchBookmarks=true]
      a chunked stream of {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,
      "object": ...} lines: every change after RV, then live ones. An RV
      older than the last compaction (compact()) gets one ERROR event
      carrying a Status with code 410 (reason Expired), as a real API server
      does; with gone_as_http=True the watch request gets HTTP 410 instead.
Authentication: "Authorization: Bearer <token>" must be one of the accepted
tokens (set_tokens); otherwise 401 with a Status body. forbid(True) answers
every pod request with 403 and the real server's message
('pods is forbidden: User "system:serviceaccount:NS:SA" cannot list
resource "pods" in API group "" in the namespace "NS"'); fail_next(code, n)
answers the next n pod requests with that status. drop_watches() closes every
open watch connection (the client must reconnect). misbehave(list_mode,
watch_mode) turns pod lists and watches hostile (see there). Every request is recorded
in .requests (method, path, query dict, token, status, verb) for assertions.

Authorization (RBAC): set_role(rules) makes the server authorize every pod
request of the service account (the accepted tokens) as a real API server
does with one Role bound to it in the server's namespace: allowed only when
a rule's apiGroups hold "" (or "*"), its resources hold "pods" (or "*") and
its verbs hold the request's verb (get: one pod; list; watch) and the
request is in that namespace; anything else (another namespace, the cluster
scope, a verb not granted) gets the real 403 message. The discovery paths
(/version, /api, /api/v1, /apis) stay open to every authenticated user, as
the system:discovery ClusterRole makes them. Without set_role every
authenticated request is allowed (a cluster-admin kubeconfig).

StatefulSet pods: restart(name) is a container restart in place (same pod,
same UID and IP, restartCount + 1, Ready False until set_ready);
recreate(name) is what the StatefulSet controller does after a deletion: a
new pod under the same name, same labels, subdomain and IP, a new UID.

Label selectors: comma-separated requirements, each `k=v`, `k==v`, `k!=v`,
`k`, `!k`, `k in (a,b)`, `k notin (a,b)`. Field selectors: `status.phase=X`,
`status.phase!=X`, `metadata.name=X`, `metadata.namespace=X`.

The server never sends traffic anywhere: it only listens (127.0.0.1 by
default, or an address the test created, e.g. a netns bridge 198.18.X.1).

CLI for manual use:  fake_apiserver.py serve DIR [--pods N]
"""
import copy
import datetime
import http.server
import json
import os
import re
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

POD_PATH = re.compile(r"^/api/v1/namespaces/([a-z0-9.-]+)/pods(?:/([a-z0-9.-]+))?$")
ALL_PODS_PATH = "/api/v1/pods"


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_certificates(directory, addresses=("127.0.0.1",), names=("localhost", "kubernetes.default.svc")):
    """A CA and a server certificate signed by it (SANs: the addresses and
    names), plus a client certificate/key pair signed by the same CA (CN
    'hvdrun-test', O 'system:masters'). Returns a dict of paths."""
    os.makedirs(directory, exist_ok=True)
    p = {k: os.path.join(directory, k) for k in (
        "ca.key", "ca.crt", "server.key", "server.csr", "server.crt", "client.key", "client.csr", "client.crt",
        "san.cnf")}

    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
         p["ca.key"], "-out", p["ca.crt"], "-days", "2", "-subj", "/CN=hvdrun-test-ca")
    sans = ",".join([f"IP:{a}" for a in addresses] + [f"DNS:{n}" for n in names])
    with open(p["san.cnf"], "w") as f:
        f.write(f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", p["server.key"],
         "-out", p["server.csr"], "-subj", "/CN=kube-apiserver")
    ossl("x509", "-req", "-in", p["server.csr"], "-CA", p["ca.crt"], "-CAkey", p["ca.key"], "-CAcreateserial",
         "-out", p["server.crt"], "-days", "2", "-extfile", p["san.cnf"])
    client_cnf = os.path.join(directory, "client.cnf")
    with open(client_cnf, "w") as f:
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", p["client.key"],
         "-out", p["client.csr"], "-subj", "/O=system:masters/CN=hvdrun-test")
    ossl("x509", "-req", "-in", p["client.csr"], "-CA", p["ca.crt"], "-CAkey", p["ca.key"], "-CAcreateserial",
         "-out", p["client.crt"], "-days", "2", "-extfile", client_cnf)
    return p


def parse_label_selector(text):
    """A list of (key, op, values) requirements; raises ValueError."""
    reqs = []
    text = (text or "").strip()
    i = 0
    parts = []
    depth = 0
    cur = ""
    for ch in text:  # split on commas outside parentheses
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    for part in parts:
        part = part.strip()
        m = re.fullmatch(r"([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            reqs.append((m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",") if v.strip()]))
            continue
        m = re.fullmatch(r"([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)", part)
        if m:
            op = {"==": "=", "=": "=", "!=": "!="}[m.group(2)]
            reqs.append((m.group(1), op, [m.group(3)]))
            continue
        m = re.fullmatch(r"(!?)([A-Za-z0-9./_-]+)", part)
        if m:
            reqs.append((m.group(2), "!exists" if m.group(1) else "exists", []))
            continue
        raise ValueError(f"unable to parse requirement: {part!r}")
    del i
    return reqs


def labels_match(reqs, labels):
    for key, op, values in reqs:
        has = key in labels
        v = labels.get(key)
        if op == "=" and not (has and v == values[0]):
            return False
        if op == "!=" and has and v == values[0]:
            return False
        if op == "in" and not (has and v in values):
            return False
        if op == "notin" and has and v in values:
            return False
        if op == "exists" and not has:
            return False
        if op == "!exists" and has:
            return False
    return True


def parse_field_selector(text):
    reqs = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(metadata\.name|metadata\.namespace|status\.phase|spec\.nodeName)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise ValueError(f'field label not supported: {part.split("=")[0].rstrip("!")}')
        reqs.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
    return reqs


def fields_match(reqs, pod):
    for field, op, value in reqs:
        obj = pod
        for k in field.split("."):
            obj = obj.get(k, {}) if isinstance(obj, dict) else {}
        actual = obj if isinstance(obj, str) else ""
        if (actual == value) != (op == "="):
            return False
    return True


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


class _Watch:
    def __init__(self):
        self.cond = threading.Condition()
        self.closed = False


class FakeApiServer:
    """See the module documentation."""

    def __init__(self, directory, namespace="default", address="127.0.0.1", port=0, token="test-token-1",
                 service_account="hvdrun", extra_addresses=(), gone_as_http=False):
        self.directory = directory
        self.namespace = namespace
        self.address = address
        self.service_account = service_account
        self.gone_as_http = gone_as_http
        addresses = [address] + [a for a in extra_addresses if a != address]
        self.certs = make_certificates(os.path.join(directory, "pki"), addresses=addresses)
        self.ca_path = self.certs["ca.crt"]
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._tokens = {token}
        self.token = token
        self._rv = 100
        self._compacted_rv = 0
        self._pods = {}  # (ns, name) -> pod dict
        self._events = []  # (rv, type, pod)
        self._forbid = False
        self._role = None  # RBAC rules (set_role); None: everything allowed
        self._fail = []  # [code, remaining]
        self._watch_generation = 0
        self._hostile_list = None
        self._hostile_watch = None
        self._stopping = threading.Event()
        self.requests = []
        self._httpd = None
        self._thread = None
        self._port = port

    # ---- lifecycle -------------------------------------------------------
    def start(self):
        server = self

        class Handler(_Handler):
            api = server

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._httpd = Server((self.address, self._port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.certs["server.crt"], self.certs["server.key"])
        ctx.load_verify_locations(self.ca_path)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # client certificates authenticate too
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._httpd is None:
            return
        self._stopping.set()
        self.drop_watches()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"https://{host}:{self.port}"

    # ---- credentials ------------------------------------------------------
    def set_tokens(self, *tokens):
        """Accept exactly these bearer tokens from now on (token rotation)."""
        with self._lock:
            self._tokens = set(tokens)
            self.token = tokens[0] if tokens else None

    def write_kubeconfig(self, path, token=None, ca=None, client_cert=False, token_file=None, embed=False,
                         namespace=None, context="fake", insecure=False):
        """A kubeconfig whose current context points at this server. ca: a CA
        file to trust instead of ours (for wrong-CA tests); client_cert: use
        the client certificate instead of a token; embed: *-data fields."""
        import base64

        def data(p):
            with open(p, "rb") as f:
                return base64.b64encode(f.read()).decode()

        cluster = {"server": self.url}
        ca = ca or self.ca_path
        if insecure:
            cluster["insecure-skip-tls-verify"] = True
        elif embed:
            cluster["certificate-authority-data"] = data(ca)
        else:
            cluster["certificate-authority"] = ca
        user = {}
        if client_cert:
            if embed:
                user["client-certificate-data"] = data(self.certs["client.crt"])
                user["client-key-data"] = data(self.certs["client.key"])
            else:
                user["client-certificate"] = self.certs["client.crt"]
                user["client-key"] = self.certs["client.key"]
        elif token_file:
            user["tokenFile"] = token_file
        else:
            user["token"] = token if token is not None else self.token
        ctx = {"cluster": "fake-cluster", "user": "fake-user"}
        if namespace:
            ctx["namespace"] = namespace
        config = {"apiVersion": "v1", "kind": "Config", "current-context": context,
                  "clusters": [{"name": "fake-cluster", "cluster": cluster}],
                  "users": [{"name": "fake-user", "user": user}],
                  "contexts": [{"name": context, "context": ctx}], "preferences": {}}
        with open(path, "w") as f:
            json.dump(config, f, indent=2)  # JSON is YAML
        os.chmod(path, 0o600)
        return path

    def write_serviceaccount(self, directory, token=None, namespace=None, ca=None):
        """The files a pod's service account mount holds: token, ca.crt, namespace."""
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "token"), "w") as f:
            f.write(token if token is not None else self.token)
        with open(ca or self.ca_path) as src, open(os.path.join(directory, "ca.crt"), "w") as dst:
            dst.write(src.read())
        with open(os.path.join(directory, "namespace"), "w") as f:
            f.write(namespace or self.namespace)
        return directory

    def env(self):
        """The variables Kubernetes sets in every pod for the API server."""
        return {"KUBERNETES_SERVICE_HOST": self.address, "KUBERNETES_SERVICE_PORT": str(self.port),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(self.port)}

    # ---- failures ---------------------------------------------------------
    def forbid(self, on=True):
        with self._lock:
            self._forbid = on

    def set_role(self, rules):
        """Authorize pod requests against these Role rules (a list of
        {"apiGroups", "resources", "verbs"} dicts, as in a Role manifest),
        in this server's namespace only; None turns authorization off."""
        with self._lock:
            self._role = None if rules is None else copy.deepcopy(list(rules))

    def allowed(self, verb, namespace):
        """Whether the Role (set_role) lets the service account do `verb`
        on pods in `namespace` (None: the cluster scope)."""
        with self._lock:
            if self._role is None:
                return True
            if namespace != self.namespace:
                return False  # a Role grants nothing outside its namespace
            for rule in self._role:
                groups = rule.get("apiGroups") or []
                resources = rule.get("resources") or []
                verbs = rule.get("verbs") or []
                if rule.get("resourceNames"):
                    continue  # never used by discovery: lists and watches cannot be limited by name
                if ("" in groups or "*" in groups) and ("pods" in resources or "*" in resources) and (
                        verb in verbs or "*" in verbs):
                    return True
            return False

    def fail_next(self, code, count=1):
        with self._lock:
            self._fail = [code, count]

    def drop_watches(self):
        """Close every open watch stream (as a load balancer or an API server
        restart would)."""
        with self._changed:
            self._watch_generation += 1
            self._changed.notify_all()

    def misbehave(self, list_mode=None, watch_mode=None):
        """Hostile answers, for tests of the client's limits (None: normal).
        list_mode: 'drip' (200 with a Content-Length, then one byte of the
        body every 0.5 s), 'silent' (200 headers after 1.5 s, then nothing), 'huge' (a
        valid PodList of about 40 MiB, chunked, as fast as the client
        reads). watch_mode: 'garbage' (200, one valid BOOKMARK event, then a
        line that is not an event, with control characters and an ANSI
        escape in it, then the end of the stream)."""
        with self._lock:
            self._hostile_list = list_mode
            self._hostile_watch = watch_mode

    def compact(self):
        """Forget the event history: watches from any older resourceVersion
        now get 410 Gone, as after etcd compaction."""
        with self._lock:
            self._compacted_rv = self._rv
            self._events.clear()

    # ---- pods -------------------------------------------------------------
    def _bump(self, kind, pod):
        self._rv += 1
        pod["metadata"]["resourceVersion"] = str(self._rv)
        self._events.append((self._rv, kind, copy.deepcopy(pod)))
        self._changed.notify_all()

    def add_pod(self, name, labels=None, ip=None, ready=False, phase=None, namespace=None, gpus=0,
                annotations=None, subdomain=None, hostname=None, container="worker", cpu_limit=None):
        ns = namespace or self.namespace
        if phase is None:
            phase = "Running" if ready else "Pending"
        limits = {}
        if gpus:
            limits["nvidia.com/gpu"] = str(gpus)
        if cpu_limit:
            limits["cpu"] = str(cpu_limit)
        pod = {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()), "labels": dict(labels or {}),
                         "annotations": dict(annotations or {}), "creationTimestamp": _now()},
            "spec": {"containers": [{"name": container, "image": "hvdrun:test",
                                     "resources": {"limits": limits, "requests": dict(limits)}}]},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": _now()}],
                "containerStatuses": [{"name": container, "ready": bool(ready), "restartCount": 0,
                                       "image": "hvdrun:test"}]},
        }
        if subdomain:
            pod["spec"]["subdomain"] = subdomain
            pod["spec"]["hostname"] = hostname or name
        if ip and phase != "Pending":
            pod["status"]["podIP"] = ip
            pod["status"]["podIPs"] = [{"ip": ip}]
        elif ip:
            pod["_pending_ip"] = ip
        with self._changed:
            if (ns, name) in self._pods:
                raise ValueError(f"pod {ns}/{name} exists")
            self._pods[(ns, name)] = pod
            self._bump("ADDED", pod)
        return pod

    def _modify(self, name, namespace, fn):
        with self._changed:
            pod = self._pods[(namespace or self.namespace, name)]
            fn(pod)
            self._bump("MODIFIED", pod)

    def set_ready(self, name, ready=True, namespace=None):
        def fn(pod):
            if ready:
                pod["status"]["phase"] = "Running"
                ip = pod.pop("_pending_ip", None)
                if ip:
                    pod["status"]["podIP"] = ip
                    pod["status"]["podIPs"] = [{"ip": ip}]
            for c in pod["status"]["conditions"]:
                if c["type"] == "Ready":
                    c["status"] = "True" if ready else "False"
                    c["lastTransitionTime"] = _now()
            for c in pod["status"].get("containerStatuses", []):
                c["ready"] = bool(ready)
        self._modify(name, namespace, fn)

    def restart(self, name, namespace=None):
        """The kubelet restarting the pod's container in place (it crashed or
        was OOM-killed): same pod, UID and IP; restartCount + 1; not Ready
        until set_ready (the readiness probe passing again)."""
        def fn(pod):
            for c in pod["status"].get("containerStatuses", []):
                c["restartCount"] = c.get("restartCount", 0) + 1
                c["ready"] = False
            for c in pod["status"]["conditions"]:
                if c["type"] == "Ready":
                    c["status"] = "False"
                    c["lastTransitionTime"] = _now()
        self._modify(name, namespace, fn)

    def recreate(self, name, namespace=None, ready=False):
        """Delete the pod and create it again under the same name, labels,
        subdomain and IP with a new UID, as a StatefulSet does (its pods keep
        their names). Returns the new pod."""
        with self._changed:
            old = copy.deepcopy(self._pods[(namespace or self.namespace, name)])
            self.delete(name, namespace)
            ip = old["status"].get("podIP") or old.get("_pending_ip")
            return self.add_pod(name, labels=old["metadata"]["labels"], ip=ip, ready=ready,
                                namespace=namespace, annotations=old["metadata"]["annotations"],
                                subdomain=old["spec"].get("subdomain"), hostname=old["spec"].get("hostname"),
                                container=old["spec"]["containers"][0]["name"])

    def set_phase(self, name, phase, namespace=None):
        def fn(pod):
            pod["status"]["phase"] = phase
        self._modify(name, namespace, fn)

    def set_annotation(self, name, key, value, namespace=None):
        def fn(pod):
            pod["metadata"]["annotations"][key] = value
        self._modify(name, namespace, fn)

    def terminate(self, name, namespace=None, grace=30):
        """What `kubectl delete pod` does first: deletionTimestamp set."""
        def fn(pod):
            pod["metadata"]["deletionTimestamp"] = _now()
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self._modify(name, namespace, fn)

    def delete(self, name, namespace=None):
        with self._changed:
            pod = self._pods.pop((namespace or self.namespace, name))
            self._bump("DELETED", pod)

    def pods(self, namespace=None):
        with self._lock:
            return [copy.deepcopy(p) for (ns, _), p in sorted(self._pods.items()) if ns == (namespace or self.namespace)]

    def requests_for(self, predicate=lambda r: True):
        with self._lock:
            return [r for r in self.requests if predicate(r)]

    # ---- serving (called from handler threads) ------------------------------
    @staticmethod
    def _public(pod):
        return {k: v for k, v in pod.items() if not k.startswith("_")}

    def _select(self, namespace, labels, fields):
        return [self._public(copy.deepcopy(p)) for (ns, _), p in sorted(self._pods.items())
                if (namespace is None or ns == namespace) and labels_match(labels, p["metadata"]["labels"])
                and fields_match(fields, p)]


class _Handler(http.server.BaseHTTPRequestHandler):
    api = None  # set by the subclass FakeApiServer.start makes
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _record(self, status, token, query):
        with self.api._lock:
            self.api.requests.append({"method": self.command, "path": urllib.parse.urlsplit(self.path).path,
                                      "query": query, "token": token, "status": status,
                                      "client_cert": self._client_cn(), "verb": getattr(self, "_verb", None)})

    def _client_cn(self):
        try:
            cert = self.connection.getpeercert()
        except (AttributeError, ValueError):
            return None
        if not cert:
            return None
        for rdn in cert.get("subject", ()):
            for k, v in rdn:
                if k == "commonName":
                    return v
        return None

    def _send_json(self, status, body, token=None, query=None):
        data = (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)
        self._record(status, token, query or {})

    def do_GET(self):
        api = self.api
        self._verb = None  # a pod request's verb (get, list, watch), once known
        split = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(split.query, keep_blank_values=True).items()}
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer "):].strip() if auth.startswith("Bearer ") else None
        with api._lock:
            authorized = (token in api._tokens) if token else self._client_cn() == "hvdrun-test"
        if not authorized:
            self._send_json(401, status_body(401, "Unauthorized", "Unauthorized"), token, query)
            return
        path = split.path.rstrip("/") or "/"
        if path == "/version":
            self._send_json(200, {"major": "1", "minor": "28", "gitVersion": "v1.28.0-fake", "platform": "linux/amd64"},
                            token, query)
            return
        if path == "/api":
            self._send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{api.address}:{api.port}"}]}, token, query)
            return
        if path == "/apis":
            self._send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}, token, query)
            return
        if path == "/api/v1":
            self._send_json(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
                 "verbs": ["get", "list", "watch"], "shortNames": ["po"], "categories": ["all"]}]}, token, query)
            return
        m = POD_PATH.match(path)
        if not m and path != ALL_PODS_PATH:
            self._send_json(404, status_body(404, "NotFound", "the server could not find the requested resource"),
                            token, query)
            return
        namespace = m.group(1) if m else None
        name = m.group(2) if m else None
        watch = query.get("watch", "") in ("1", "true", "True")
        verb = "watch" if watch else ("get" if name else "list")
        self._verb = verb
        with api._lock:
            # the client certificate is system:masters (cluster-admin); tokens are the service account's
            forbidden = api._forbid or (token is not None and not api.allowed(verb, namespace))
            fail = None
            if api._fail and api._fail[1] > 0:
                fail = api._fail[0]
                api._fail[1] -= 1
        if forbidden:
            who = f"system:serviceaccount:{api.namespace}:{api.service_account}"
            where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            self._send_json(403, status_body(
                403, "Forbidden", f'pods is forbidden: User "{who}" cannot {verb} resource "pods" in API group ""{where}',
                {"kind": "pods"}), token, query)
            return
        if fail:
            self._send_json(fail, status_body(fail, "InternalError" if fail >= 500 else "BadRequest",
                                              f"injected failure {fail}"), token, query)
            return
        with api._lock:
            hostile = api._hostile_watch if watch else api._hostile_list
        if hostile and not name:
            self._hostile(hostile, namespace, token, query)
            return
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            fields = parse_field_selector(query.get("fieldSelector", ""))
        except ValueError as e:
            self._send_json(400, status_body(400, "BadRequest", str(e)), token, query)
            return
        if name:
            with api._lock:
                pod = api._pods.get((namespace, name))
                body = api._public(copy.deepcopy(pod)) if pod else None
            if body is None:
                self._send_json(404, status_body(404, "NotFound", f'pods "{name}" not found',
                                                 {"name": name, "kind": "pods"}), token, query)
            else:
                self._send_json(200, body, token, query)
            return
        if not watch:
            with api._lock:
                items = api._select(namespace, labels, fields)
                rv = str(api._rv)
            self._send_json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": rv},
                                  "items": items}, token, query)
            return
        self._watch(namespace, labels, fields, query, token)

    def _chunk(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _hostile(self, mode, namespace, token, query):
        api = self.api
        self._record(200, token, query)
        self.close_connection = True
        try:
            if mode in ("drip", "silent"):
                if mode == "silent" and api._stopping.wait(1.5):
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(1 << 20))
                self.end_headers()
                self.wfile.flush()
                while not api._stopping.wait(0.5):
                    if mode == "drip":
                        self.wfile.write(b" ")
                        self.wfile.flush()
            elif mode == "huge":
                with api._lock:
                    pod = api._public(copy.deepcopy(next(iter(api._pods.values())))) if api._pods else {}
                item = json.dumps(pod).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                head = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":['
                self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
                block = b",".join([item] * max(1, (1 << 20) // (len(item) + 1)))
                for i in range(40):
                    data = (b"," if i else b"") + block
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                tail = b"]}"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
            elif mode == "garbage":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with api._lock:
                    rv = str(api._rv)
                self._chunk({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                                            "metadata": {"resourceVersion": rv}}})
                data = b"\x1b[31mnot an event\x07\x00 " + b"x" * 300 + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
                self.wfile.flush()
            else:
                raise ValueError("unknown hostile mode " + mode)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass

    def _watch(self, namespace, labels, fields, query, token):
        api = self.api
        try:
            since = int(query.get("resourceVersion") or 0)
        except ValueError:
            self._send_json(400, status_body(400, "BadRequest", "invalid resourceVersion"), token, query)
            return
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        with api._lock:
            gone = since and since < api._compacted_rv
            if gone and api.gone_as_http:
                pass
        if gone and api.gone_as_http:
            self._send_json(410, status_body(410, "Expired", f"too old resource version: {since} ({api._compacted_rv})"),
                            token, query)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._record(200, token, query)
        try:
            if gone:
                self._chunk({"type": "ERROR", "object": status_body(
                    410, "Expired", f"too old resource version: {since} ({api._compacted_rv})")})
                self.wfile.write(b"0\r\n\r\n")
                return
            with api._changed:
                generation = api._watch_generation
                if not since:
                    # No resourceVersion: the current state as ADDED events first.
                    for p in api._select(namespace, labels, fields):
                        self._chunk({"type": "ADDED", "object": p})
                    since = api._rv
                sent = since
                while True:
                    for rv, kind, pod in list(api._events):
                        if rv <= sent:
                            continue
                        sent = rv
                        ns_ok = namespace is None or pod["metadata"]["namespace"] == namespace
                        if ns_ok and labels_match(labels, pod["metadata"]["labels"]) and fields_match(fields, pod):
                            self._chunk({"type": kind, "object": api._public(pod)})
                    sent = max(sent, api._rv)
                    if api._watch_generation != generation:
                        self.close_connection = True
                        return  # dropped: no terminating chunk, like a cut connection
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    api._changed.wait(min(remaining, 0.5))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True


def main(argv):
    import argparse
    import tempfile
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("dir", nargs="?")
    s.add_argument("--pods", type=int, default=2)
    s.add_argument("--label", default="app=hvd")
    args = parser.parse_args(argv)
    directory = args.dir or tempfile.mkdtemp(prefix="fake-apiserver-")
    key, _, value = args.label.partition("=")
    with FakeApiServer(directory) as api:
        for i in range(args.pods):
            api.add_pod(f"worker-{i}", labels={key: value}, ip=f"127.0.0.{i + 2}", ready=True)
        kubeconfig = api.write_kubeconfig(os.path.join(directory, "kubeconfig"))
        print(f"serving {api.url}; KUBECONFIG={kubeconfig}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
