"""horovod.runner: horovodrun's Python API, ``run``, on hvdrun
(hvdcomm.runner; docs/python.md, "horovod.run")."""
from hvdcomm.runner import RunError, run  # noqa: F401
