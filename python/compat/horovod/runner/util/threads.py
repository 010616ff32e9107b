"""horovod.runner.util.threads: Horovod's background-thread helpers,
in_thread and on_event (Horovod's test utilities import in_thread).

Semantics as Horovod's: `args` must be a tuple (ValueError otherwise, so a
single argument is not silently unpacked); `silent=True` is the caller's
explicit request that the target's exceptions end the thread without a
traceback; otherwise they propagate as in any thread (threading.excepthook
prints them)."""
import threading

__all__ = ["in_thread", "on_event"]


def _check_args(args):
    if not isinstance(args, tuple):
        raise ValueError(f"args must be a tuple, not {type(args)}, for a single argument use (arg,)")


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts target(*args) in a new thread and returns the started thread."""
    _check_args(args)
    fn = target
    if silent:
        def fn(*a):
            try:
                target(*a)
            except Exception:  # the caller asked for silence (silent=True)
                pass
    thread = threading.Thread(target=fn, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


def on_event(event, func, args=(), stop=None, check_stop_interval_s=1.0, daemon=True, silent=False):
    """Runs func(*args) in a new thread once `event` is set; with `stop`
    (checked every check_stop_interval_s), func is not run if stop is set
    first. A non-daemon thread needs a stop event (ValueError otherwise)."""
    if event is None:
        raise ValueError("Event must not be None")
    _check_args(args)
    if stop is None:
        if not daemon:
            raise ValueError("Stop event must be given for non-daemon event thread")

        def wait_then_run():
            event.wait()
            func(*args)
    else:
        def wait_then_run():
            while not event.is_set() and not stop.is_set():
                event.wait(timeout=check_stop_interval_s)
            if not stop.is_set():
                func(*args)
    return in_thread(wait_then_run, daemon=daemon, silent=silent)
