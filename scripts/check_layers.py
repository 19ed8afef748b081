#!/usr/bin/env python3
"""The layering check of libcoll: every arrow points down.

libcoll/src/ is cut into layers, lowest first (written once, here):

    base < plan < transport < engine < bootstrap < algo < device < core

A file of a layer may include headers of its own layer and of the layers below it, never of a
layer above; a transport's folder (transport/socket/, transport/shm/, transport/ib/) may use
transport/*.h and its own folder, not another transport's. Outside libcoll, kernels/ and proto/
are leaves (they include nothing of libcoll but the public coll.h), nccl/ (NCCL's face) and
python/ (the PyTorch backend's C++) sit on coll.h alone too (nccl/env/, NVIDIA NCCL's env plugin,
a client of the agent, may add proto/, the agent client and the InfiniBand probe), and plugins/ may include only the device layer's plugin contract. With --objects, the same order is checked on the compiled
objects: a symbol a lower layer's object needs may not be defined only by a higher layer's (no
call, no data reference goes up, whatever the headers say). Include cycles are reported too.

usage: check_layers.py [--root DIR] [--objects DIR] [--self-test]
Exit status 0 when clean, 1 with one line per violation, 2 on bad usage.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

LAYERS = ["base", "plan", "transport", "engine", "bootstrap", "algo", "device", "core"]
# headers a libcoll file may include from outside libcoll/src (leaves below every layer)
LEAF_HEADERS = {"coll.h", "coll_kernels.h", "agent_ipc.h", "hex.h", "netaddr.h", "peer_ipc.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def layer_of(rel):
    """Layer index of a path relative to libcoll/src, or None."""
    top = rel.split("/", 1)[0]
    return LAYERS.index(top) if top in LAYERS else None


def transport_folder(rel):
    parts = rel.split("/")
    return parts[1] if parts[0] == "transport" and len(parts) > 2 else None


def sources(d, exts=(".c", ".h", ".cu")):
    for dirpath, _, files in os.walk(d):
        for f in sorted(files):
            if f.endswith(exts):
                yield os.path.join(dirpath, f)


def resolve(src_root, including_rel, inc):
    """The libcoll/src-relative path an include names, or None when it is outside libcoll."""
    if os.path.exists(os.path.join(src_root, inc)):
        return os.path.normpath(inc)
    here = os.path.dirname(including_rel)
    cand = os.path.normpath(os.path.join(here, inc))
    if os.path.exists(os.path.join(src_root, cand)):
        return cand
    return None


def check_includes(root):
    src_root = os.path.join(root, "libcoll", "src")
    problems, graph = [], {}
    for path in sources(src_root):
        rel = os.path.relpath(path, src_root)
        mine = layer_of(rel)
        if mine is None:
            problems.append(f"libcoll/src/{rel}: not in a layer folder ({', '.join(LAYERS)})")
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        graph[rel] = []
        for inc in INCLUDE.findall(text):
            target = resolve(src_root, rel, inc)
            if target is None:
                if os.path.basename(inc) not in LEAF_HEADERS and inc not in LEAF_HEADERS:
                    problems.append(f"libcoll/src/{rel}: includes \"{inc}\", which is neither "
                                    "in libcoll/src nor a leaf header (coll.h, coll_kernels.h, "
                                    "agent_ipc.h, hex.h, netaddr.h, peer_ipc.h)")
                continue
            graph[rel].append(target)
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                problems.append(f"libcoll/src/{rel}: {LAYERS[mine]} includes \"{inc}\" of the "
                                f"higher layer {LAYERS[theirs]} (order: {' < '.join(LAYERS)})")
            tf, tt = transport_folder(rel), transport_folder(target)
            if tt is not None and tt != tf:
                problems.append(f"libcoll/src/{rel}: includes \"{inc}\", a header of the {tt} "
                                "transport; transports share only transport/*.h")
    problems += cycles(graph)
    # leaves, nccl/ (NCCL's face) and python/ (the PyTorch backend's C++), which sit on the
    # public coll.h only
    for leaf in ("kernels", "proto", "nccl", "python"):
        problems += check_leaf(root, leaf)
    problems += check_plugins(root)
    return problems


def cycles(graph):
    found, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt]
                found.append("include cycle: " + " -> ".join("libcoll/src/" + c for c in cyc))
            elif state.get(nxt) is None:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if state.get(node) is None:
            visit(node, [])
    return found


# NVIDIA NCCL's environment plugin (nccl/env/) is no face on coll.h but a client of the pod's
# agent: besides coll.h it may use the agent contract (proto/), libcoll's agent client and its
# InfiniBand probe (the transport policy decided in the training container), and nothing else.
ENV_PLUGIN_INCLUDES = ("bootstrap/agent_client.h", "transport/ib/ib_probe.h")


def check_leaf(root, leaf):
    d = os.path.join(root, leaf)
    problems = []
    if not os.path.isdir(d):
        return problems
    for path in sources(d, exts=(".c", ".h", ".cu", ".cpp", ".hpp")):
        text = open(path, encoding="utf-8", errors="replace").read()
        env_plugin = leaf == "nccl" and os.path.relpath(path, d).startswith("env" + os.sep)
        for inc in INCLUDE.findall(text):
            local = os.path.exists(os.path.join(os.path.dirname(path), inc)) or \
                os.path.exists(os.path.join(d, inc))
            if env_plugin and (inc in ENV_PLUGIN_INCLUDES or
                               os.path.exists(os.path.join(root, "proto", inc))):
                continue
            if not local and inc != "coll.h":
                problems.append(f"{os.path.relpath(path, root)}: {leaf}/ may include only its "
                                f"own headers and coll.h, not \"{inc}\"")
    return problems


def check_plugins(root):
    d = os.path.join(root, "plugins")
    problems = []
    if not os.path.isdir(d):
        return problems
    kernels = os.path.join(root, "kernels")
    for path in sources(d):
        text = open(path, encoding="utf-8", errors="replace").read()
        for inc in INCLUDE.findall(text):
            ok = inc == "gpu_plugin.h" or inc == "coll.h" or \
                os.path.exists(os.path.join(os.path.dirname(path), inc)) or \
                any(os.path.exists(os.path.join(k, inc)) for k in (kernels, kernels + "/cuda"))
            if not ok:
                problems.append(f"{os.path.relpath(path, root)}: a plugin may include only "
                                f"gpu_plugin.h, kernels/ and its own files, not \"{inc}\"")
    return problems


def nm_symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRCVW" and parts[1].isupper():
            defined.add(parts[2])
    return defined, undefined


def check_objects(objdir):
    """objdir: the object directory of libcoll's sources (.../coll_objects.dir/src)."""
    objs = {}
    for path in sources(objdir, exts=(".o",)):
        rel = os.path.relpath(path, objdir)
        objs[rel] = nm_symbols(path)
    if not objs:
        return [f"{objdir}: no object files (build libcoll first)"]
    owner = {}
    for rel, (defined, _) in objs.items():
        for sym in defined:
            owner.setdefault(sym, []).append(rel)
    problems = []
    for rel, (_, undefined) in sorted(objs.items()):
        mine = layer_of(rel)
        if mine is None:
            continue
        for sym in sorted(undefined):
            where = owner.get(sym)
            if not where:
                continue
            lowest = min(where, key=lambda r: layer_of(r) if layer_of(r) is not None else 99)
            theirs = layer_of(lowest)
            if theirs is not None and theirs > mine:
                src = rel[:-2] if rel.endswith(".o") else rel
                problems.append(f"libcoll/src/{src}: {LAYERS[mine]} uses {sym}, defined in "
                                f"{lowest[:-2]} of the higher layer {LAYERS[theirs]}")
    return problems


def self_test():
    """The check must be able to fail: an upward include, a cross-transport include, a cycle and
    a non-leaf kernels include are each reported, and a clean tree is not."""
    with tempfile.TemporaryDirectory() as t:
        def put(rel, text):
            p = os.path.join(t, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, "w").write(text)
        put("libcoll/src/base/a.h", '#include "coll.h"\n')
        put("libcoll/src/plan/p.h", '#include "base/a.h"\n')
        put("libcoll/src/transport/shm/s.h", '#include "plan/p.h"\n')
        put("kernels/k.h", '#include "coll.h"\n')
        clean = check_includes(t)
        put("libcoll/src/base/up.c", '#include "plan/p.h"\n')
        put("libcoll/src/transport/ib/i.c", '#include "transport/shm/s.h"\n')
        put("libcoll/src/plan/c1.h", '#include "plan/c2.h"\n')
        put("libcoll/src/plan/c2.h", '#include "plan/c1.h"\n')
        put("kernels/bad.c", '#include "base/a.h"\n')
        put("python/kcoll/csrc/bad.cpp", '#include "base/a.h"\n')
        dirty = check_includes(t)
    want = ["base includes \"plan/p.h\" of the higher layer plan",
            "a header of the shm transport", "include cycle", "kernels/ may include only",
            "python/ may include only"]
    missing = [w for w in want if not any(w in p for p in dirty)]
    if clean or missing:
        print("check_layers self-test FAILED: clean tree reported", clean, "; not reported:",
              missing)
        return 1
    print(f"check_layers self-test: a clean tree passes, {len(dirty)} planted violations "
          "reported")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--objects", help="libcoll's object directory (.../coll_objects.dir/src)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    problems = check_includes(root)
    nobj = ""
    if args.objects:
        problems += check_objects(args.objects)
        nobj = " and on the objects"
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} violation(s); order {' < '.join(LAYERS)}")
        return 1
    print(f"check_layers: every arrow points down{nobj} ({' < '.join(LAYERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
