#!/usr/bin/env python3
"""The agent image, built from the Dockerfile and run (label image): buildah, no Docker engine.

    image_test.py build    --cache-dir DIR [--timeout S]
    image_test.py contents --cache-dir DIR
    image_test.py sidecar  --cache-dir DIR --rank PATH

build     scripts/build-image.sh (the CPU-only image from a cached mmdebstrap Debian 12 base);
          prints the duration, size and layer count. The ctest fixture that the others need.
contents  in a container of the image: coll-agent --version says the project version, the
          webhook mode's --help, ldd of every binary and library the sidecar copies (libcoll
          and, when present, the NCCL face) finds every dependency, no compiler, non-root user,
          OCI labels (version, revision, source).
sidecar   the image's coll-agent as a pod's sidecar against the fake API server (host network):
          the webhook from the image admits the pods, each agent copies its libcoll into the
          pod's shared directory, two rank programs on the host load the copied library (and only
          it: image_rank has no run path) and run a checked all_reduce, the Communicator is Ready.

Exit 0 when everything passed, 1 otherwise, 77 (skipped, with the reason) without root, buildah
or the image. A closing `N passed, M failed` line.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "agent"))
import harness  # noqa: E402
import e2e_tests  # noqa: E402  (Checks, Skip, guarded, finish, topology, rank_env, ...)

SKIP = 77
AGENT_UID = 10001
WRAPPER = os.path.join(HERE, "agent-in-image.sh")


Skip = e2e_tests.Skip


def run(args, timeout=120, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def prerequisites():
    if os.geteuid() != 0:
        raise Skip("not root: buildah --isolation chroot and mmdebstrap need root (CI runs as "
                   "root)")
    for tool in ("buildah", "mmdebstrap"):
        if shutil.which(tool) is None:
            raise Skip("%s not found: scripts/setup.sh installs it" % tool)


def image_env(cache_dir):
    # image-cuda.env (scripts/build-image.sh --cuda-toolkit) with KCOLL_IMAGE_ENV=image-cuda.env
    path = os.path.join(cache_dir, os.environ.get("KCOLL_IMAGE_ENV", "image.env"))
    if not os.path.exists(path):
        raise Skip("no image: %s is missing (the image_build test makes it; run it first, or "
                   "scripts/build-image.sh --cache-dir %s)" % (path, cache_dir))
    with open(path) as f:
        env = {k: v.strip("\"") for k, v in (line.rstrip("\n").split("=", 1) for line in f
                                            if "=" in line)}
    if run(["buildah", "inspect", "--type", "image", env["IMAGE"]]).returncode != 0:
        raise Skip("image %s named in %s is not in buildah's storage: rebuild it"
                   % (env["IMAGE"], path))
    return env


class Container:
    """A working container of the image (buildah from), removed on exit. Containers that an
    earlier run left behind (killed at its ctest timeout) are removed first."""

    PREFIX = "kcoll-image-test-"

    def __init__(self, image):
        self.sweep()
        r = run(["buildah", "from", "--pull-never", "--name",
                 self.PREFIX + str(os.getpid()), image])
        if r.returncode != 0:
            raise RuntimeError("buildah from %s failed: %s" % (image, r.stderr))
        self.name = r.stdout.strip().splitlines()[-1]

    @classmethod
    def sweep(cls):
        r = run(["buildah", "containers", "--format", "{{.ContainerName}}"])
        for name in r.stdout.split():
            pid = name[len(cls.PREFIX):]
            if name.startswith(cls.PREFIX) and pid.isdigit() and not pid_alive(int(pid)):
                print("removing the container %s of an earlier run" % name)
                run(["buildah", "rm", name])

    def run(self, cmd, user=None, timeout=60):
        args = ["buildah", "run", "--isolation", "chroot", "--network", "host"]
        if user:
            args += ["--user", user]
        return run(args + [self.name, "--"] + cmd, timeout=timeout)

    def remove(self):
        run(["buildah", "rm", self.name])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


# ---------------------------------------------------------------------------------------------
def case_build(ck, args):
    prerequisites()
    t0 = time.time()
    cmd = [os.path.join(ROOT, "scripts", "build-image.sh"), "--cache-dir", args.cache_dir,
           "--timeout", str(args.timeout)]
    print("+ " + " ".join(cmd))
    sys.stdout.flush()
    # the script's own steps have deadlines; this one covers the whole of it
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, timeout=2 * args.timeout + 60)
        code = r.returncode
    except subprocess.TimeoutExpired:
        code = None
    elapsed = time.time() - t0
    print("image build: exit %s in %.1f s" % (code, elapsed))
    if not ck(code == 0, "scripts/build-image.sh builds the image"):
        return
    env = image_env(args.cache_dir)
    print("image %s: %s, %s layers, revision %s" % (env["IMAGE"], env["SIZE"], env["LAYERS"],
                                                   env["REVISION"]))
    ck(env["VERSION"] == run([os.path.join(ROOT, "scripts", "version.sh")]).stdout.strip(),
       "image.env names the project version (%s)" % env["VERSION"])
    # a CPU-only Debian 12 image: the minbase base (~170 MB) plus the runtime libraries and kcoll
    m = re.match(r"^([0-9.]+)\s*(kB|MB|GB)$", env["SIZE"].strip())
    mb = float(m.group(1)) * {"kB": 1e-3, "MB": 1, "GB": 1e3}[m.group(2)] if m else None
    ck(mb is not None and mb < 400, "the CPU-only image is under 400 MB (%s)" % env["SIZE"])


def case_contents(ck, args):
    prerequisites()
    env = image_env(args.cache_dir)
    version = env["VERSION"]
    r = run(["buildah", "inspect", "--type", "image", env["IMAGE"]])
    cfg = json.loads(r.stdout)["OCIv1"]["config"]
    labels = cfg.get("Labels") or {}
    ck(cfg.get("User", "").split(":")[0] == str(AGENT_UID),
       "the image runs as user %d, not root (%s)" % (AGENT_UID, cfg.get("User")))
    ck(cfg.get("Entrypoint") == ["/opt/kcoll/bin/coll-agent"], "entrypoint is coll-agent (%s)"
       % cfg.get("Entrypoint"))
    for key, want in (("org.opencontainers.image.version", version),
                      ("io.kcoll.library-version", version),
                      ("org.opencontainers.image.revision", env["REVISION"]),
                      ("io.kcoll.cuda", env.get("CUDA", "OFF"))):
        ck(labels.get(key) == want, "label %s is %s (%s)" % (key, want, labels.get(key)))
    ck(labels.get("org.opencontainers.image.source", "").startswith("https://"),
       "label org.opencontainers.image.source is a URL (%s)"
       % labels.get("org.opencontainers.image.source"))

    with Container(env["IMAGE"]) as c:
        # as the image's own user (buildah run takes the image's USER)
        r = c.run(["id", "-u"])
        ck(r.stdout.strip() == str(AGENT_UID), "commands in the container run as uid %d (%s)"
           % (AGENT_UID, r.stdout.strip() or r.stderr.strip()))
        r = c.run(["coll-agent", "--version"])
        print("coll-agent --version: " + (r.stdout.strip() or r.stderr.strip()))
        ck(r.returncode == 0 and r.stdout.startswith("coll-agent %s " % version),
           "coll-agent --version says %s" % version, r.stdout + r.stderr)
        r = c.run(["coll-agent", "webhook", "--help"])
        out = r.stdout + r.stderr
        ck(r.returncode == 0 and "--listen" in out and "--agent-image" in out,
           "coll-agent webhook --help (exit %d) lists --listen and --agent-image" % r.returncode,
           e2e_tests.tail(out))
        # what the sidecar copies, the NCCL face when the build had nccl.h, and the binaries
        r = c.run(["sh", "-c", "ls -1 /opt/kcoll/bin/* /opt/kcoll/lib/libcoll.so* "
                   "/opt/kcoll/lib/libcoll_cuda.so* /opt/kcoll/lib/kcoll-nccl/libnccl*.so* "
                   "/opt/kcoll/lib/kcoll-nccl-env/* 2>/dev/null; true"])
        files = r.stdout.split()
        libs = [f for f in files if "/lib/" in f]
        print("in the image: " + " ".join(files))
        ck(any(f.endswith("/libcoll.so.0") for f in libs), "the image has libcoll.so.0")
        ck(any(f.endswith("/kcoll-nccl-env/libnccl-env.so") for f in libs) and
           any(f.endswith("/kcoll-nccl-env/libjansson.so.4") for f in libs),
           "the image has NVIDIA NCCL's env plugin with its libjansson.so.4 beside it")
        nccl = [f for f in libs if "libnccl" in f and "nccl-env" not in f]
        print("NCCL face: %s" % (" ".join(nccl) if nccl else
                                 "absent (a CPU-only build has no nccl.h; the CUDA image has it)"))
        for f in files:
            r = c.run(["ldd", f])
            missing = [ln.strip() for ln in r.stdout.splitlines() if "not found" in ln]
            ck(r.returncode == 0 and not missing, "ldd %s: every dependency found" % f,
               r.stdout + r.stderr)
        r = c.run(["sh", "-c", "for t in cc gcc g++ clang make cmake ninja nvcc ld; do "
                   "command -v $t; done; ls /usr/include 2>/dev/null | head -3; true"])
        ck(r.stdout.strip() == "", "no compiler, build tool or system header in the runtime "
           "stage", r.stdout)
        r = c.run(["sh", "-c", "ls /var/lib/apt/lists | grep -v -x -e lock -e partial; true"])
        ck(r.stdout.strip() == "", "no apt package lists left in the image", r.stdout)


SIDECAR = "kcoll-agent"  # the webhook's sidecar (AGENT_WEBHOOK_SIDECAR_NAME); the pod template's
#                         own init container "coll-agent" is not it


def sidecar_env(pod, name):
    """The value the webhook gave variable `name` in the pod's coll-agent sidecar, or None."""
    for c in pod["spec"].get("initContainers", []):
        if c.get("name") == SIDECAR:
            for e in c.get("env", []):
                if e.get("name") == name:
                    return e.get("value")
    return None


def case_sidecar(ck, args):
    prerequisites()
    env = image_env(args.cache_dir)
    version = env["VERSION"]
    if not os.access(args.rank, os.X_OK):
        raise Skip("%s is not built" % args.rank)
    # Everything the agents touch (certificates, service-account files, sockets, the shared
    # library directories) lives under one directory that the wrapper bind-mounts at the same
    # path; the agents run as uid 10001, so it is open to them.
    work = tempfile.mkdtemp(prefix="kcoll-image-test-")
    os.chmod(work, 0o755)
    tempfile.tempdir = work
    make_certs = harness.make_certs

    def open_certs(d):
        ca, crt, key = make_certs(d)
        os.chmod(d, 0o777)
        os.chmod(key, 0o644)  # a throwaway key, read by the webhook as uid 10001
        return ca, crt, key

    harness.make_certs = open_certs
    ctr = Container(env["IMAGE"])
    os.environ.update({"KCOLL_IMAGE_CTR": ctr.name, "KCOLL_IMAGE_MOUNT": work})
    cl, ranks, wrappers = None, [], []
    try:
        t0 = time.time()
        # the webhook (coll-agent webhook) runs from the image too: it admits the pods below
        cl = harness.Cluster(WRAPPER, topologies=())
        wrappers.append(cl.webhook)
        print("fake API server up, the image's webhook listening on %d (%.1f s)"
              % (cl.webhook_port, time.time() - t0))
        cl.add(e2e_tests.topology("image-loopback", version))
        _, pods = cl.add_job("img", 2)
        ck(all(any(c.get("name") == SIDECAR for c in p["spec"].get("initContainers", []))
               for p in pods), "the image's webhook injected the %s sidecar into both pods"
           % SIDECAR)
        # each pod's shared volume (/var/run/kcoll in a pod): lib/ for libcoll and its GPU
        # plugin, nccl/ for kcoll's libnccl.so.2 when the image has it; the agents (uid 10001)
        # make both
        pod_dirs = [os.path.join(cl.dir, "pod-%d" % i) for i in range(2)]
        for d in pod_dirs:
            os.mkdir(d)
            os.chmod(d, 0o777)
        libdirs = [os.path.join(d, "lib") for d in pod_dirs]
        agents = []
        # the uids the webhook admits to the agent's socket (the containers' runAsUser; none:
        # root, as the ranks below run)
        uids = [sidecar_env(p, "COLL_AGENT_IPC_ALLOW_UIDS") for p in pods]
        ck(all(u is not None and "0" in u.split(",") for u in uids),
           "the webhook admits the training containers' uid 0 to the agent's socket (%s)" % uids)
        for p, d, u in zip(pods, libdirs, uids):
            a = cl.start_agent(p, env={"COLL_AGENT_LIB_DIR": d,
                                       "COLL_AGENT_IPC_ALLOW_UIDS": u or ""})
            agents.append(a)
            wrappers.append(a["proc"])
        # the sidecar copies before it opens its socket; a pod's main container starts after
        deadline = time.time() + 60
        while time.time() < deadline and not all(
                os.path.exists(a["sock"]) for a in agents):
            if any(a["proc"].poll() is not None for a in agents):
                break
            time.sleep(0.1)
        ok = ck(all(os.path.exists(a["sock"]) for a in agents),
                "both agents from the image opened their sockets within 60 s (%.1f s)"
                % (time.time() - t0), "\n".join(e2e_tests.tail(cl.agent_log(a), 1500)
                                                for a in agents))
        if not ok:
            return
        ck(all(os.stat(a["sock"]).st_uid == AGENT_UID for a in agents),
           "the agents ran as uid %d (their sockets' owner)" % AGENT_UID)
        # what the sidecar delivers: libcoll and, in a CUDA image, the GPU plugin into lib/;
        # kcoll's NCCL face, when the image has it, with the plugin beside it into nccl/
        lib = image_digests(ctr, "cd /opt/kcoll/lib && sha256sum libcoll.so* "
                                 "$(ls libcoll_cuda.so* 2>/dev/null)")
        nccl = image_digests(ctr, "cd /opt/kcoll/lib/kcoll-nccl 2>/dev/null && "
                                  "sha256sum libnccl.so*")
        if nccl:
            nccl.update({k: v for k, v in lib.items() if k.startswith("libcoll_cuda.so")})
        ncclenv = image_digests(ctr, "cd /opt/kcoll/lib/kcoll-nccl-env && "
                                     "sha256sum libnccl-env.so libjansson.so*")
        for d in pod_dirs:
            for sub, want in (("lib", lib), ("nccl", nccl), ("nccl-env", ncclenv)):
                got = dir_digests(os.path.join(d, sub))
                what = ("holds the image's files, byte for byte" if want else
                        "is empty or absent, as the image has none of them")
                ck(got == want, "%s/%s %s (%s)" % (os.path.basename(d), sub, what,
                                                   " ".join(sorted(got)) or "-"),
                   "image: %s\ncopied: %s" % (want, got))

        for i, (a, d) in enumerate(zip(agents, libdirs)):
            e = e2e_tests.rank_env(a["sock"])
            e["LD_LIBRARY_PATH"] = d
            log = open(os.path.join(cl.dir, "rank-%d.log" % i), "w")
            ranks.append((subprocess.Popen([args.rank], env=e, stdout=log,
                                           stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL), log.name))
            log.close()
        codes = []
        deadline = time.time() + 120
        for p, _ in ranks:
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.time())))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(None)
        outs = []
        for _, path in ranks:
            with open(path, errors="replace") as f:
                outs.append(f.read())
        for i, (code, out, d) in enumerate(zip(codes, outs, libdirs)):
            print("---- rank %d (exit %s)\n%s" % (i, code, out.strip()))
            lib = os.path.join(d, "libcoll.so.0")
            ck("loaded %s version %s" % (lib, version) in out.splitlines(),
               "rank %d loaded the copied %s (version %s)" % (i, lib, version))
            ck(code == 0 and "init ok rank=%d nranks=2" % i in out and
               "all_reduce ok count=" in out,
               "rank %d: communicator from its agent, checked 2-rank all_reduce" % i)
        st, ready = e2e_tests.wait_status(cl, "img", lambda s: s.get("phase") == "Ready", 30)
        print("Communicator img status: %s" % json.dumps(
            {k: st.get(k) for k in ("phase", "readyRanks", "nranks")}))
        ck(ready and st.get("readyRanks") == 2, "the Communicator is Ready with 2 ranks",
           json.dumps(st)[:2000])
        logs = "".join(cl.agent_log(a) for a in agents)
        ck(logs.count("AGENT-START coll-agent %s " % version) == 2 or
           logs.count("coll-agent %s mode=kube" % version) == 2,
           "both agents say they are coll-agent %s in kube mode" % version,
           e2e_tests.tail(logs))
        print("sidecar case: %.1f s" % (time.time() - t0))
    finally:
        for p, _ in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
        failed = ck.failed > 0
        if cl is not None:
            if failed:
                for a in cl.agents:
                    print("---- %s\n%s" % (a["log"], e2e_tests.tail(cl.agent_log(a), 2000)))
        stop_groups(wrappers)  # before close() reaps the leaders
        if cl is not None:
            cl.close(keep=failed)  # says where the files are kept when it keeps them
        ctr.remove()
        if not failed:
            shutil.rmtree(work, ignore_errors=True)


def image_digests(ctr, script):
    """{file name: sha256} from `sha256sum` run in the container ({} when it lists nothing)."""
    out = {}
    for ln in ctr.run(["sh", "-c", script + "; true"]).stdout.splitlines():
        digest, name = ln.split()
        out[name] = digest
    return out


def dir_digests(d):
    out = {}
    if os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def stop_groups(procs):
    """The wrappers run buildah in sessions of their own (setsid): end each group, by its id,
    while its leader is not yet reaped (a reaped leader's id may name another process's group
    by now: pid_max is 32768 here and other test runs start processes)."""
    procs = [p for p in procs if p.returncode is None]
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        live = []
        for p in procs:
            try:
                os.killpg(p.pid, sig)
                live.append(p.pid)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait_s
        while live and time.time() < deadline:
            live = [g for g in live if group_alive(g)]
            time.sleep(0.1)
        if not live:
            return


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def group_alive(pgid):
    """Does group pgid have a member that is not a zombie? (The un-reaped leader stays one.)"""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


CASES = {"build": case_build, "contents": case_contents, "sidecar": case_sidecar}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--rank")
    ap.add_argument("--skip", help="skip with this reason (e.g. a sanitizer build)")
    args = ap.parse_args()
    if args.skip:
        print("SKIP: " + args.skip)
        return SKIP
    ck = e2e_tests.Checks()
    t0 = time.time()
    skipped = e2e_tests.guarded(ck, args.case, CASES[args.case], ck, args)
    return e2e_tests.finish(ck, args.case, t0, skipped)


if __name__ == "__main__":
    sys.exit(main())
