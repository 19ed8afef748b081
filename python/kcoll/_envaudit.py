"""ProcessGroupNCCL's settings, answered for the kcoll backend: a job moved from backend="nccl"
to "kcoll" keeps its environment, and none of it may be ignored without a word. One INFO line
per name set, once per process, where kcoll logs (stderr or COLL_DEBUG_FILE), when COLL_DEBUG
(else NCCL_DEBUG) is INFO or TRACE; as kcoll's own audit answers the NCCL_* knobs it does not
read. (With backend="nccl" on kcoll's libnccl.so.2, ProcessGroupNCCL reads them itself.)"""
import os
import socket
import threading

from . import _C

_RAISES = ("a failed collective raises on every rank, naming the rank at fault, and a wait "
           "past the group's timeout aborts the communicator and raises")
_HANG = ("a collective that made no progress for 30 s is logged (WARN) naming the ranks it "
         "waits for, and fails at the group's timeout")
_NO_RECORDER = ("no flight recorder; kcoll's errors name the collective, its number and the "
                "peer (docs/diagnostics.md)")
# name without its TORCH_ prefix (PyTorch reads both spellings of these) -> what kcoll does
_ANSWERS = {
    "NCCL_ASYNC_ERROR_HANDLING": _RAISES,
    "NCCL_BLOCKING_WAIT": "Work.wait() blocks; " + _RAISES,
    "NCCL_DESYNC_DEBUG": ("every collective's call (kind, count, datatype, op, root) is checked "
                          "against the other ranks'; a mismatch fails naming both calls"),
    "NCCL_ENABLE_MONITORING": _HANG,
    "NCCL_HEARTBEAT_TIMEOUT_SEC": _HANG,
    "NCCL_TRACE_BUFFER_SIZE": _NO_RECORDER,
    "NCCL_DUMP_ON_TIMEOUT": _NO_RECORDER,
}
_once = threading.Lock()
_done = []


def _wanted():
    level = os.environ.get("COLL_DEBUG") or os.environ.get("NCCL_DEBUG") or ""
    return level.upper() in ("INFO", "TRACE")


def lines(environ):
    """The INFO texts for the ProcessGroupNCCL settings in environ."""
    out = []
    for name in sorted(environ):
        key = name[len("TORCH_"):] if name.startswith("TORCH_NCCL_") else name
        if key in _ANSWERS:  # TORCH_NCCL_X, or the older spelling NCCL_X
            what = _ANSWERS[key]
        elif name.startswith("TORCH_NCCL_"):
            out.append("%s=%s is ProcessGroupNCCL's and has no meaning for the kcoll backend"
                       % (name, environ[name]))
            continue
        elif name == "TORCH_DISTRIBUTED_DEBUG" and environ[name].upper() == "DETAIL":
            out.append("TORCH_DISTRIBUTED_DEBUG=DETAIL: PyTorch 1.13 does not wrap a custom "
                       "backend in its collective checker; kcoll checks every collective's call "
                       "against the other ranks' itself")
            continue
        else:
            continue
        out.append("%s=%s is ProcessGroupNCCL's; the kcoll backend does not read it and does "
                   "this instead: %s" % (name, environ[name], what))
    return out


def audit(rank):
    with _once:
        if _done:
            return
        _done.append(True)
    if not _wanted():
        return
    prefix = "%s:%d:rank %d kcoll INFO TORCH " % (socket.gethostname(), os.getpid(), rank)
    for text in lines(os.environ):
        _C.log_text(prefix + text)
