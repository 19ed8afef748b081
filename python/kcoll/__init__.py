"""kcoll for PyTorch: ``import kcoll`` registers the ``torch.distributed`` backend "kcoll".

    import kcoll, torch.distributed as dist
    dist.init_process_group("kcoll")        # under the kcoll agent, coll-run, or torchrun

Rendezvous (see docs/torch.md):
  * under the kcoll sidecar agent (COLL_AGENT_SOCKET set) and under coll-run (COLL_UNIQUE_ID,
    COLL_RANK, COLL_NRANKS set), ``init_process_group`` needs no MASTER_ADDR/MASTER_PORT: when
    they are absent, the env:// rendezvous creates kcoll's communicator first and takes rank and
    world size from it;
  * otherwise (torchrun, MASTER_ADDR/MASTER_PORT, an explicit store) rank 0 of each group creates
    a kcoll unique id and shares it through the store PyTorch passes to the backend.
"""
import atexit

import torch
import torch.distributed as dist

from . import _C
from . import _rendezvous

__all__ = ["library_version", "torch_built_with", "shutdown", "abort", "INTERFACE", "BACKEND"]

BACKEND = "kcoll"
# What this build of the package pins: the coll.h it was compiled against (COLL_VERSION code)
# and the PyTorch C++ API (version, base class) of its extension.
INTERFACE = {
    "coll_h": _C.HEADER_VERSION,
    "torch": _C.TORCH_BUILT_WITH,
    "torch_base": _C.TORCH_BASE,
    "cuda": _C.CUDA,
}


def library_version():
    """The libcoll version string (the one every rank compares at bootstrap)."""
    return _C.library_version()


def torch_built_with():
    return _C.TORCH_BUILT_WITH


def _backend_of(group):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if hasattr(pg, "_get_backend"):  # PyTorch 2.x: the group holds a backend per device
        pg = pg._get_backend(torch.device("cpu"))
    # TORCH_DISTRIBUTED_DEBUG=DETAIL: 2.x wraps a plugin's backend in a checking wrapper
    return getattr(pg, "wrapped_pg", pg)


def shutdown(group=None):
    """End a kcoll process group (default: the default group) while references to it remain (a
    DDP model holds one): its queued collectives run, its worker stops, its communicator is let
    go, and a later collective on it raises saying so. PyTorch >= 2.7's destroy_process_group
    does this itself; on older versions, call it before destroy_process_group."""
    _C.shutdown_group(_backend_of(group))


def abort(group=None):
    """Abort a kcoll process group, from any thread: its collectives in progress or queued raise
    now, here and on its peers (whose calls with this rank raise naming it), and later ones
    raise saying it was aborted. The way out of a collective that waits on a peer that will not
    come, without waiting for the group's timeout (Backend::abort on PyTorch >= 2.7)."""
    _C.abort_group(_backend_of(group))


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    creator = _rendezvous.create_process_group
    try:
        dist.Backend.register_backend(BACKEND, creator, devices=["cpu", "cuda"])
    except TypeError:  # PyTorch < 2.0: no devices argument
        dist.Backend.register_backend(BACKEND, creator)
    _rendezvous.install_env_handler()
    # the groups' workers stop before the interpreter finalizes: one that drops a Python
    # callback after that would abort the process at exit
    atexit.register(_C.shutdown_all)


if torch.__version__.split("+")[0].split(".")[:2] != _C.TORCH_BUILT_WITH.split(".")[:2]:
    raise ImportError("kcoll: this package was built against PyTorch %s but PyTorch %s is "
                      "imported; rebuild kcoll (cmake, or pip install ./python) with this PyTorch"
                      % (_C.TORCH_BUILT_WITH, torch.__version__))
_register()
