"""horovod.runner.launch: ``python -m horovod.runner.launch <horovodrun
arguments>`` (run_commandline) and Horovod's private ``_run(args)`` on
hvdrun (hvdcomm.runner.launch; docs/python.md, "horovod.runner.launch")."""
from hvdcomm.runner.launch import run_args as _run  # noqa: F401
from hvdcomm.runner.launch import run_commandline  # noqa: F401

if __name__ == "__main__":
    run_commandline()
