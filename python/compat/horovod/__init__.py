"""Compatibility shim: `import horovod.torch as hvd` runs on hvdcomm, and
`horovod.run` is hvdcomm.runner.run (docs/python.md)."""
from hvdcomm import __version__  # noqa: F401  (hvdrun's version, not a Horovod release number)
from horovod.runner import run  # noqa: F401
