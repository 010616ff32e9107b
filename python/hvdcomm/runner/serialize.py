"""How ``hvdcomm.runner.run`` pickles the call and the results
(docs/python.md, "horovod.run").

With cloudpickle importable (Debian's ``python3-cloudpickle``; Horovod
depends on it), as Horovod does: functions and classes of the caller's
``__main__``, lambdas, closures and functions defined in a notebook, the
REPL or ``python -c`` travel by value; functions of importable modules by
reference. A worker never runs the caller's main script, so a script may call
``horovod.run`` at its top level without ``if __name__ == "__main__":``.
The workers need cloudpickle too (they unpickle with its helpers).

Without cloudpickle, the standard library's ``pickle`` sends functions and
classes by reference: their module and qualified name. A worker imports
that module to find them, so a function must be defined at the top level of
a module the workers can import. The caller's ``__main__`` is then handled
as ``multiprocessing``'s spawn start method does: the worker runs the
caller's main script (or ``-m`` module) under the name ``__mp_main__`` --
only when the call or a result refers to it -- and makes it ``__main__``
there, so the script must guard its own work with
``if __name__ == "__main__":``. Functions defined in a notebook, the REPL or
``python -c`` have no file a worker could run; the caller refuses them
before anything starts, naming cloudpickle.
"""
import io
import os
import pickle
import runpy
import sys
import types

try:
    import cloudpickle
except ImportError:  # the standard library's pickle, by reference (above)
    cloudpickle = None

PROTOCOL = pickle.DEFAULT_PROTOCOL
_MAIN_NAMES = ("__main__", "__mp_main__")


class _CallPickler(pickle.Pickler):
    """A Pickler that notes every function or class it sends by reference to
    ``__main__``."""

    def __init__(self, file):
        super().__init__(file, protocol=PROTOCOL)
        self.main_refs = []

    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) in _MAIN_NAMES:
            name = getattr(obj, "__qualname__", repr(obj))
            if name not in self.main_refs:
                self.main_refs.append(name)
        return NotImplemented


def by_value():
    """True when functions travel by value (cloudpickle is importable)."""
    return cloudpickle is not None


def dumps(obj):
    """``(bytes, names of __main__ objects it refers to by reference)``;
    pickle's errors propagate. With cloudpickle the list is empty: nothing
    of ``__main__`` goes by reference."""
    if cloudpickle is not None:
        return cloudpickle.dumps(obj, protocol=PROTOCOL), []
    buf = io.BytesIO()
    p = _CallPickler(buf)
    p.dump(obj)
    return buf.getvalue(), p.main_refs


def main_source():
    """Where a worker finds the caller's ``__main__``: ``("module", name)``
    for ``python -m name``, ``("path", file)`` for a script, or None
    (interactive: a notebook, the REPL, ``python -c``; or a package's
    ``__main__``, which multiprocessing does not re-run either)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        # No file: a notebook (IPython's namespace module), the REPL, -c.
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        if name == "__main__" or name.endswith(".__main__"):
            return None
        return ("module", name)
    return ("path", os.path.abspath(path))


class MainLoader:
    """Loads the caller's ``__main__`` in a worker, once, on first need."""

    def __init__(self, source):
        self.source = source
        self.module = None

    def load(self):
        if self.module is not None:
            return self.module
        if self.source is None:
            raise ImportError("the caller's __main__ has no file or module the workers could import "
                              "(a notebook, the REPL or python -c)")
        kind, where = self.source
        module = types.ModuleType("__mp_main__")
        if kind == "module":
            content = runpy.run_module(where, run_name="__mp_main__", alter_sys=True)
        else:
            content = runpy.run_path(where, run_name="__mp_main__")
        module.__dict__.update(content)
        sys.modules["__main__"] = sys.modules["__mp_main__"] = module
        self.module = module
        return module


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, main_loader):
        super().__init__(file)
        self._main_loader = main_loader

    def find_class(self, module, name):
        if module in _MAIN_NAMES:
            if self._main_loader is None:
                # The caller: a worker's __mp_main__ is the caller's __main__.
                module = "__main__"
            else:
                self._main_loader.load()
        return super().find_class(module, name)


def loads(data, main_loader=None):
    """Unpickles ``data``; in a worker ``main_loader`` (a MainLoader) resolves
    references to the caller's ``__main__``, in the caller None maps the
    worker's ``__mp_main__`` back to ``__main__``."""
    return _Unpickler(io.BytesIO(data), main_loader).load()
