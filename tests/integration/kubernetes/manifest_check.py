"""Offline checks of rendered Kubernetes manifests: the fields the API server
requires and the cross-references between objects (used by test_chart.py and
test_kubeflow.py). check_manifests(docs) returns a list of problems, [] when
all is well; no server is contacted."""
import base64
import re

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
WORKLOADS = {"Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"}
API_VERSIONS = {"ServiceAccount": "v1", "Secret": "v1", "ConfigMap": "v1", "Service": "v1", "Role":
                "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
                "Deployment": "apps/v1", "StatefulSet": "apps/v1", "Job": "batch/v1",
                "MPIJob": "kubeflow.org/v2beta1"}


# --------------------------------------------------------------- checker ---
def check_pod_spec(where, spec, objects, problems, restart_policies):
    def bad(msg):
        problems.append(f"{where}: {msg}")

    volumes = spec.get("volumes") or []
    names = [v.get("name") for v in volumes]
    if len(names) != len(set(names)):
        bad(f"duplicate volume names {names}")
    for v in volumes:
        if not DNS_LABEL.match(str(v.get("name", ""))):
            bad(f"volume name {v.get('name')!r} is not a DNS label")
        sources = [k for k in v if k != "name"]
        if len(sources) != 1:
            bad(f"volume {v.get('name')} has {len(sources)} sources {sources}")
        if "configMap" in v and ("ConfigMap", v["configMap"].get("name")) not in objects:
            bad(f"volume {v['name']} names ConfigMap {v['configMap'].get('name')} that is not rendered")
        if "secret" in v and ("Secret", v["secret"].get("secretName")) not in objects:
            bad(f"volume {v['name']} names Secret {v['secret'].get('secretName')} that is not rendered")
        if "persistentVolumeClaim" in v and not v["persistentVolumeClaim"].get("claimName"):
            bad(f"volume {v['name']} has no claimName")
        for key in ("secret", "configMap"):
            mode = (v.get(key) or {}).get("defaultMode")
            if mode is not None and not (isinstance(mode, int) and 0 <= mode <= 0o777):
                bad(f"volume {v['name']} defaultMode {mode!r} not in 0..0777")
    rp = spec.get("restartPolicy", "Always")
    if rp not in restart_policies:
        bad(f"restartPolicy {rp} (allowed here: {sorted(restart_policies)})")
    sa = spec.get("serviceAccountName")
    if sa and ("ServiceAccount", sa) not in objects and sa != "default":
        bad(f"serviceAccountName {sa} is not rendered")
    containers = spec.get("containers") or []
    if not containers:
        bad("no containers")
    cnames = [c.get("name") for c in containers]
    if len(cnames) != len(set(cnames)):
        bad(f"duplicate container names {cnames}")
    for c in containers:
        cw = f"container {c.get('name')!r}"
        if not DNS_LABEL.match(str(c.get("name", ""))):
            bad(f"{cw}: name is not a DNS label")
        if not c.get("image") or ":" not in c["image"] or c["image"].endswith(":"):
            bad(f"{cw}: image {c.get('image')!r} lacks a tag")
        if c.get("imagePullPolicy", "IfNotPresent") not in ("Always", "IfNotPresent", "Never"):
            bad(f"{cw}: imagePullPolicy {c.get('imagePullPolicy')}")
        for k in ("args", "command"):
            if k in c and not (isinstance(c[k], list) and all(isinstance(a, str) for a in c[k])):
                bad(f"{cw}: {k} must be a list of strings, got {c[k]!r}")
        port_names = set()
        for p in c.get("ports") or []:
            if not isinstance(p.get("containerPort"), int) or not 1 <= p["containerPort"] <= 65535:
                bad(f"{cw}: containerPort {p.get('containerPort')!r}")
            if "name" in p:
                if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", p["name"]) or len(p["name"]) > 15:
                    bad(f"{cw}: port name {p['name']!r} (IANA_SVC_NAME, <= 15 chars)")
                port_names.add(p["name"])
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            pr = c.get(probe)
            if pr:
                for kind in ("tcpSocket", "httpGet"):
                    port = (pr.get(kind) or {}).get("port")
                    if isinstance(port, str) and port not in port_names:
                        bad(f"{cw}: {probe} port {port!r} names no container port")
                if "exec" in pr:
                    cmd = (pr.get("exec") or {}).get("command")
                    if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
                        bad(f"{cw}: {probe} exec command {cmd!r} is not a list of strings")
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in names:
                bad(f"{cw}: volumeMount {m.get('name')!r} names no volume (have {names})")
            if not str(m.get("mountPath", "")).startswith("/"):
                bad(f"{cw}: mountPath {m.get('mountPath')!r} not absolute")
        paths = [m.get("mountPath") for m in c.get("volumeMounts") or []]
        if len(paths) != len(set(paths)):
            bad(f"{cw}: duplicate mountPaths {paths}")
        for e in c.get("env") or []:
            if not ENV_NAME.match(str(e.get("name", ""))):
                bad(f"{cw}: env name {e.get('name')!r}")
            if ("value" in e) == ("valueFrom" in e):
                bad(f"{cw}: env {e.get('name')} needs exactly one of value/valueFrom")
            if "value" in e and not isinstance(e["value"], str):
                bad(f"{cw}: env {e['name']} value {e['value']!r} is not a string")
        env_names = [e.get("name") for e in c.get("env") or []]
        if len(env_names) != len(set(env_names)):
            bad(f"{cw}: duplicate env names")
        for section in ("requests", "limits"):
            for k, v in ((c.get("resources") or {}).get(section) or {}).items():
                if not isinstance(v, (int, str)) or isinstance(v, bool):
                    bad(f"{cw}: resources.{section}.{k} = {v!r}")


def check_manifests(docs, external=()):
    """Problems (strings) with the rendered objects; [] when all is well.
    external: (kind, name) of objects that exist outside the chart (an
    existing Secret or ServiceAccount named in the values)."""
    problems = []
    objects = {}
    for d in docs:
        if not isinstance(d, dict):
            problems.append(f"not a mapping: {d!r:.80}")
            continue
        kind, name = d.get("kind"), (d.get("metadata") or {}).get("name")
        if not kind or not d.get("apiVersion") or not name:
            problems.append(f"object without apiVersion/kind/metadata.name: {d!r:.120}")
            continue
        if (kind, name) in objects:
            problems.append(f"{kind}/{name} rendered twice")
        objects[(kind, name)] = d
        if kind in API_VERSIONS and d["apiVersion"] != API_VERSIONS[kind]:
            problems.append(f"{kind}/{name}: apiVersion {d['apiVersion']} (expected {API_VERSIONS[kind]})")
        if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            problems.append(f"{kind}/{name}: name is not a DNS subdomain")
        if kind in ("Service", "StatefulSet") and (len(name) > 63 or not DNS_LABEL.match(name)):
            problems.append(f"{kind}/{name}: name must be a DNS label (<= 63)")
        if kind == "Service" and not name[0].isalpha():
            problems.append(f"{kind}/{name}: a Service name must start with a letter (DNS-1035)")
        for k, v in ((d["metadata"].get("labels") or {}).items()):
            if not isinstance(v, str) or len(v) > 63 or not re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", v):
                problems.append(f"{kind}/{name}: label {k}={v!r} is not a valid label value")
    rendered = dict(objects)
    for kind, name in external:
        objects[(kind, name)] = {"kind": kind, "metadata": {"name": name}, "external": True}

    for (kind, name), d in rendered.items():
        where = f"{kind}/{name}"
        spec = d.get("spec") or {}
        if kind in WORKLOADS:
            tmpl = spec.get("template") or {}
            labels = (tmpl.get("metadata") or {}).get("labels") or {}
            if kind != "Job":
                sel = (spec.get("selector") or {}).get("matchLabels") or {}
                if not sel:
                    problems.append(f"{where}: no spec.selector.matchLabels")
                for k, v in sel.items():
                    if labels.get(k) != v:
                        problems.append(f"{where}: selector {k}={v} does not match the template labels {labels}")
            allowed = {"Never", "OnFailure"} if kind == "Job" else {"Always"}
            check_pod_spec(where, tmpl.get("spec") or {}, objects, problems, allowed)
            if "replicas" in spec and (not isinstance(spec["replicas"], int) or spec["replicas"] < 0):
                problems.append(f"{where}: replicas {spec['replicas']!r}")
        if kind == "StatefulSet":
            svc = objects.get(("Service", spec.get("serviceName")))
            if not svc:
                problems.append(f"{where}: serviceName {spec.get('serviceName')!r} names no rendered Service")
            else:
                if svc["spec"].get("clusterIP") != "None":
                    problems.append(f"{where}: Service {spec['serviceName']} is not headless")
                labels = spec["template"]["metadata"]["labels"]
                for k, v in (svc["spec"].get("selector") or {}).items():
                    if labels.get(k) != v:
                        problems.append(f"{where}: Service {svc['metadata']['name']} selector {k}={v} misses the pods")
            if spec.get("podManagementPolicy") != "Parallel":
                problems.append(f"{where}: podManagementPolicy {spec.get('podManagementPolicy')} (want Parallel)")
            cont = spec["template"]["spec"]["containers"][0]
            if not cont.get("readinessProbe"):
                problems.append(f"{where}: no readiness probe")
        if kind == "Service":
            for p in spec.get("ports") or []:
                if not isinstance(p.get("port"), int) or not 1 <= p["port"] <= 65535:
                    problems.append(f"{where}: port {p.get('port')!r}")
                target = p.get("targetPort")
                if isinstance(target, str):
                    pods = [o for o in rendered.values() if o.get("kind") in WORKLOADS and all(
                        o["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in spec["selector"].items())]
                    if not pods:
                        problems.append(f"{where}: selects no rendered pods")
                    for o in pods:
                        names = {pp.get("name") for c in o["spec"]["template"]["spec"]["containers"]
                                 for pp in c.get("ports") or []}
                        if target not in names:
                            problems.append(f"{where}: targetPort {target} names no port of {o['metadata']['name']}")
        if kind == "Role":
            rules = d.get("rules")
            want = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
            if rules != want:
                problems.append(f"{where}: rules {rules} (want exactly {want})")
        if kind == "RoleBinding":
            ref = d.get("roleRef") or {}
            if ref.get("kind") != "Role" or ("Role", ref.get("name")) not in objects or \
                    ref.get("apiGroup") != "rbac.authorization.k8s.io":
                problems.append(f"{where}: roleRef {ref} names no rendered Role")
            for s in d.get("subjects") or []:
                if s.get("kind") != "ServiceAccount" or ("ServiceAccount", s.get("name")) not in objects \
                        or not s.get("namespace"):
                    problems.append(f"{where}: subject {s} names no rendered ServiceAccount (with namespace)")
        if kind == "Secret":
            for k, v in (d.get("data") or {}).items():
                try:
                    base64.b64decode(v, validate=True)
                except Exception:
                    problems.append(f"{where}: data.{k} is not base64")
        if kind == "ConfigMap":
            for k, v in (d.get("data") or {}).items():
                if not isinstance(v, str) or not re.match(r"^[-._a-zA-Z0-9]+$", k):
                    problems.append(f"{where}: data key {k!r} or its value is invalid")
    return problems


