"""horovod.common.util: the helpers scripts and framework glue import from
it, on hvdcomm (docs/python.md, "The horovod package").

What hvdcomm has is answered by hvdcomm: it provides one framework
extension, horovod.torch, so ``EXTENSIONS`` is ``['torch']`` and every other
framework is "not built". Left out, so importing them fails:
``check_installed_version`` (Horovod's record of the framework versions it
was compiled against; hvdcomm links no framework) and the private helpers
other than ``_cache`` (Horovod's own tests/test_common.py import it)."""
import os
import subprocess
import sys
import sysconfig
import warnings
from contextlib import contextmanager

EXTENSIONS = ["torch"]


def get_ext_suffix():
    """The file suffix of this interpreter's extension modules."""
    return sysconfig.get_config_var("EXT_SUFFIX") or sysconfig.get_config_var("SO") or ".so"


def get_extension_full_path(pkg_path, *args):
    """``<dir of pkg_path>/<args[:-1]>/<args[-1]><ext suffix>``, as Horovod's."""
    if not args:
        raise ValueError("get_extension_full_path: name the extension")
    return os.path.join(os.path.dirname(pkg_path), *args[:-1], args[-1] + get_ext_suffix())


def check_extension(ext_name, ext_env_var, pkg_path, *args):
    """Raises ImportError unless the framework extension ``ext_name``
    (``horovod.torch``, ...) is built. hvdcomm has ``horovod.torch`` only: its
    native part is hvdcomm's extension, whichever file Horovod's
    ``pkg_path``/``args`` would name."""
    if ext_name.split(".")[-1] != "torch":
        raise ImportError(f"Extension {ext_name} has not been built: hvdrun's horovod compatibility package "
                          f"provides horovod.torch only ({ext_env_var} does not apply)")
    import hvdcomm._core  # noqa: F401  (raises ImportError when the extension is missing)


def extension_available(ext_base_name, verbose=False):
    """Whether ``horovod.<ext_base_name>`` can be used: only ``torch`` can,
    when hvdcomm.torch imports (torch installed)."""
    ok = False
    if ext_base_name == "torch":
        try:
            import hvdcomm.torch  # noqa: F401
            ok = True
        except ImportError:
            ok = False
    if verbose:
        print(f"Extension {ext_base_name} {'was' if ok else 'was NOT'} built.")
    return ok


def _cache(f):
    """Memoizes ``f`` on its arguments (positional, and keyword in any order):
    the first call with given arguments runs ``f``, later ones return that
    result. Arguments must be hashable. Horovod's helper of the same name,
    which its code and tests use for probes that are costly to repeat."""
    results = {}

    def wrapper(*args, **kwargs):
        key = (args, frozenset(kwargs.items()))
        if key not in results:
            results[key] = f(*args, **kwargs)
        return results[key]

    wrapper.__name__ = getattr(f, "__name__", "wrapper")
    wrapper.__doc__ = getattr(f, "__doc__", None)
    return wrapper


@_cache
def _torch_sees_gpu():
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return probe.returncode == 0 and probe.stdout.strip() == "True"


def gpu_available(ext_base_name, verbose=False):
    """Whether the framework sees a GPU: for ``torch``,
    ``torch.cuda.is_available()``, asked once in a child process as Horovod
    does (so this process does not initialize CUDA); False for other
    frameworks."""
    ok = ext_base_name == "torch" and _torch_sees_gpu()
    if verbose:
        print(f"Extension {ext_base_name} {'was' if ok else 'was NOT'} running with GPU.")
    return ok


def _built(fact, verbose):
    """hvdcomm.torch's answer, or None when no extension loads (as Horovod)."""
    try:
        from hvdcomm.torch import mpi_ops
    except ImportError:
        return None
    return getattr(mpi_ops, fact)(verbose=verbose)


def mpi_built(verbose=False):
    return _built("mpi_built", verbose)


def gloo_built(verbose=False):
    return _built("gloo_built", verbose)


def nccl_built(verbose=False):
    return _built("nccl_built", verbose)


def ddl_built(verbose=False):
    return _built("ddl_built", verbose)


def ccl_built(verbose=False):
    return _built("ccl_built", verbose)


@contextmanager
def env(**kwargs):
    """Sets the given environment variables (None: left alone) for the
    ``with`` block and restores the previous values afterwards."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    backup = {k: os.environ.get(k) for k in kwargs}
    os.environ.update(kwargs)
    try:
        yield
    finally:
        for k, v in backup.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def get_average_backwards_compatibility_fun(reduce_ops):
    """``impl(op, average)`` -> the reduce op: ``op`` when given (with
    ``average`` too: ValueError), else Average/Sum from the deprecated
    ``average`` (DeprecationWarning), else Average."""
    def impl(op, average):
        if op is not None:
            if average is not None:
                raise ValueError("The op parameter supersedes average. Please provide only one of them.")
            return op
        if average is not None:
            warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                          DeprecationWarning)
            return reduce_ops.Average if average else reduce_ops.Sum
        return reduce_ops.Average
    return impl


def num_rank_is_power_2(num_rank):
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


def split_list(lst, n):
    """``lst`` in ``n`` chunks whose sizes differ by at most one (the first ones larger)."""
    d, r = divmod(len(lst), n)
    return [lst[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def is_iterable(x):
    try:
        iter(x)
    except TypeError:
        return False
    return True


def is_version_greater_equal_than(ver, target):
    """``ver >= target`` by ``packaging.version``; ``target`` must be major.minor.patch."""
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError(f"This function only accepts string arguments, got {type(ver).__name__} "
                         f"{ver!r} and {type(target).__name__} {target!r}")
    if len(target.split(".")) != 3:
        raise ValueError(f"We only accept target version values in the form of: major.minor.patch. "
                         f"Received: {target}")
    from packaging import version
    return version.parse(ver) >= version.parse(target)
