"""How a kcoll process group gets its communicator.

The default group under the agent or coll-run: the env:// rendezvous handler is wrapped so that,
when MASTER_ADDR is not set and COLL_AGENT_SOCKET (agent) or COLL_UNIQUE_ID (coll-run) is, it
creates the kcoll communicator itself (coll_comm_init_agent / coll_comm_init_rank), takes rank and
world size from it, and gives PyTorch a TCPStore served by rank 0 whose address rank 0 broadcasts
over that communicator (PyTorch's own barriers and new_group need a shared store). The backend
then uses that communicator. Every other group: group rank 0 creates a unique id and shares it
through the group's store.
"""
import importlib
import os
import socket
import threading
import urllib.parse
from datetime import timedelta

import torch.distributed as dist

from . import _C, _envaudit

ENV_STORE_ADDR = "KCOLL_STORE_ADDR"  # the address rank 0's store is reached at (default: below)
_ADDR_BYTES = 256
_UID_KEY = "kcoll/unique_id"

# The communicator the env:// rendezvous created for the default group, until the backend
# takes it (one per process: there is one default group).
_lock = threading.Lock()
_pending = {}
# Under coll-run, the store of the first default group and how many came after it: the job's
# COLL_UNIQUE_ID serves one creation (coll-run's bootstrap root ends once every rank is in), so
# a default group made again after destroy_process_group (a test suite, a job that re-creates
# its group) gets a fresh unique id from rank 0 through that store, under a prefix of its own.
_reinit = {}


def _store_address():
    given = os.environ.get(ENV_STORE_ADDR)
    if given:
        return given
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _local_store_address():
    """Under coll-run every rank is on this host: the unique id's host is reachable."""
    uid = os.environ.get("COLL_UNIQUE_ID", "")
    parts = uid.split(":")
    if len(parts) >= 4 and parts[0].startswith("kcoll"):
        return ":".join(parts[1:-2]).strip("[]")
    return None


def _seconds(timeout):
    return timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)


def world_comm(timeout_s=0.0):
    """The communicator of the whole job from the agent or coll-run's environment, or None;
    timeout_s (> 0, the group's timeout) bounds its creation."""
    if os.environ.get("COLL_AGENT_SOCKET"):
        return _C.Comm.init_agent(timeout_s), _store_address()
    uid = os.environ.get("COLL_UNIQUE_ID")
    if uid:
        try:
            rank = int(os.environ["COLL_RANK"])
            nranks = int(os.environ["COLL_NRANKS"])
        except (KeyError, ValueError) as e:
            raise RuntimeError("kcoll: COLL_UNIQUE_ID is set but COLL_RANK/COLL_NRANKS are "
                               "missing or not integers (%s); start the ranks with coll-run"
                               % e) from None
        addr = os.environ.get(ENV_STORE_ADDR) or _local_store_address() or _store_address()
        if "store" in _reinit:
            return _again(rank, nranks, timeout_s), addr
        return _C.Comm.init_rank(uid, rank, nranks, timeout_s), addr
    return None


def _again(rank, nranks, timeout_s):
    """A default group after the first under coll-run: its communicator from a unique id that
    rank 0 makes and shares through the first group's store."""
    _reinit["count"] += 1
    key = "kcoll/world/%d/unique_id" % _reinit["count"]
    if rank == 0:
        uid = _C.unique_id(timeout_s)
        _reinit["store"].set(key, uid)
    else:
        uid = _reinit["store"].get(key).decode()
    return _C.Comm.init_rank(uid, rank, nranks, timeout_s)


def _kcoll_env_rendezvous(url, timeout=timedelta(minutes=30), **kwargs):
    made = world_comm(_seconds(timeout))
    if made is None:
        raise RuntimeError("kcoll: no rendezvous: set MASTER_ADDR/MASTER_PORT (torchrun), run "
                           "under the kcoll agent (COLL_AGENT_SOCKET) or under coll-run")
    comm, addr = made
    rank, world = comm.rank, comm.size
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query))
    for name, value in (("rank", rank), ("world_size", world)):
        if name in query and int(query[name]) != value:
            comm.abort()
            raise RuntimeError("kcoll: init_process_group(%s=%s) but kcoll's communicator says "
                               "%s=%d" % (name, query[name], name, value))
    if "store" in _reinit:
        store = dist.PrefixStore("kcoll/world/%d" % _reinit["count"], _reinit["store"])
    elif rank == 0:
        # not waiting for the workers here: they learn the port from the broadcast below
        store = dist.TCPStore("0.0.0.0", 0, world, True, timeout, wait_for_workers=False)
        data = ("%s:%d" % (addr, store.port)).encode()
        comm.broadcast_bytes(data, 0, _ADDR_BYTES)
    else:
        data = comm.broadcast_bytes(b"", 0, _ADDR_BYTES).rstrip(b"\0").decode()
        host, port = data.rsplit(":", 1)
        store = dist.TCPStore(host, int(port), world, False, timeout)
    if os.environ.get("COLL_UNIQUE_ID") and not os.environ.get("COLL_AGENT_SOCKET") and \
            "store" not in _reinit:
        _reinit.update(store=store, count=0)
    with _lock:
        _pending["world"] = (comm, rank, world)
    yield (store, rank, world)
    raise RuntimeError("kcoll: the rendezvous handler cannot be re-used")


def install_env_handler():
    """Wrap env:// so that the agent and coll-run need no MASTER_ADDR (idempotent)."""
    # the module, not the function of the same name that torch.distributed exports
    handlers = importlib.import_module("torch.distributed.rendezvous")._rendezvous_handlers
    orig = handlers.get("env")
    if orig is None or getattr(orig, "_kcoll", False):
        return

    def env_handler(url, **kwargs):
        if "MASTER_ADDR" not in os.environ and (os.environ.get("COLL_AGENT_SOCKET") or
                                                os.environ.get("COLL_UNIQUE_ID")):
            return _kcoll_env_rendezvous(url, **kwargs)
        return orig(url, **kwargs)

    env_handler._kcoll = True
    handlers["env"] = env_handler


def create_process_group(store, rank, size, timeout):
    """The backend's creator: (store, rank, world_size, timeout) -> process group."""
    comm = None
    with _lock:
        got = _pending.pop("world", None)
    if got is not None and not dist.is_initialized() and got[1:] == (rank, size):
        comm = got[0]
    elif got is not None:
        got[0].abort()
    seconds = _seconds(timeout)
    if comm is None:
        # the group's timeout bounds the creation too: a rank that failed before it (its store
        # timed out, it died) is named within the timeout, not after COLL_BOOTSTRAP_TIMEOUT
        if rank == 0:
            uid = _C.unique_id(seconds)
            store.set(_UID_KEY, uid)
        else:
            uid = store.get(_UID_KEY).decode()
        comm = _C.Comm.init_rank(uid, rank, size, seconds)
    _envaudit.audit(comm.rank)
    return _C.create(comm, seconds)
