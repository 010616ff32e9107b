"""Run under hvdrun -np 2 (no torch needed): hvdcomm._core.job_env, the
binding's copy of hvd/common/job_env.h, names what hvdrun really sets -- each
rank's placement variables hold what the library computed from them, and the
rendezvous and controller variables are present. Also: the names are unique,
shaped like environment variables, and each has a group."""
import os
import re
import sys

from hvdcomm import _core

je = _core.job_env
names = {k: v for k, v in vars(je).items() if re.fullmatch(r"[A-Z][A-Z0-9_]*", k)}
assert len(names) >= 10, names
assert len(set(names.values())) == len(names), "two keys name the same variable"
for key, name in names.items():
    assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name), (key, name)
assert set(je.groups) == set(names.values()), set(je.groups) ^ set(names.values())
assert je.groups[je.RANK] == "placement" and je.groups[je.RENDEZVOUS_ADDR] == "rendezvous", je.groups

_core.init()
r, n = _core.rank(), _core.size()
assert n == 2, n
for key in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"):
    value = os.environ.get(getattr(je, key))
    want = str(getattr(_core, key.lower())())
    if value != want:
        sys.exit(f"rank {r}: {getattr(je, key)}={value!r} but the library says {want}")
for key in ("RENDEZVOUS_ADDR", "RENDEZVOUS_PORT", "SECRET", "HOSTNAME", "START_TIMEOUT", "CONTROLLER"):
    if not os.environ.get(getattr(je, key)):
        sys.exit(f"rank {r}: hvdrun did not set {getattr(je, key)}")
assert je.ELASTIC not in os.environ and not _core.elastic_enabled()
_core.shutdown()
print(f"rank {r}: job_env ok ({len(names)} names)")
