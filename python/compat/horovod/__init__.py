"""Compatibility shim: `import horovod.torch as hvd` runs on hvdcomm (docs/python.md)."""
