"""horovod.runner: horovodrun's Python API, ``run``, on hvdrun
(hvdcomm.runner; docs/python.md, "horovod.run"), and Horovod's
``_HorovodArgs`` for ``horovod.runner.launch._run``."""
from hvdcomm.runner import RunError, run  # noqa: F401
from hvdcomm.runner.launch import HorovodArgs as _HorovodArgs  # noqa: F401
