#!/usr/bin/env python3
"""Reads the Dockerfile (no Docker engine here) and checks it against the CMake build: multi-stage,
the binaries and library it expects are targets that CMake installs where it copies them from, the
final stage is non-root with no build tools, and .dockerignore keeps build output and secrets out
of the context."""
import fnmatch
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploytools import REPO, Checker  # noqa: E402

t = Checker("dockerfile_test")


def logical_lines(text):
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def cmake_text():
    chunks = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        # CMakeLists.txt and the helper modules (cmake/CollCuda.cmake declares COLL_CUDA)
        for name in files:
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                with open(os.path.join(root, name)) as f:
                    chunks.append(f.read())
    return "\n".join(chunks)


def ignored(rel, patterns):
    """.dockerignore matching, close enough for a size check: a pattern matches the path or one of
    its parent folders from the context root; a leading **/ matches at any depth."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pat in patterns:
        pat = pat.rstrip("/")
        if pat.startswith("**/"):
            if any(fnmatch.fnmatchcase(p, pat[3:]) for p in parts):
                return True
        elif any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            return True
    return False


def context_size(patterns):
    size = count = 0
    for root, dirs, files in os.walk(REPO):
        rel_root = os.path.relpath(root, REPO)
        rel_root = "" if rel_root == "." else rel_root + "/"
        dirs[:] = [d for d in dirs if not ignored(rel_root + d, patterns)]
        for name in files:
            path = os.path.join(root, name)
            if not ignored(rel_root + name, patterns) and os.path.isfile(path):
                size += os.path.getsize(path)
                count += 1
    return size, count


def main():
    with open(os.path.join(REPO, "Dockerfile")) as f:
        lines = logical_lines(f.read())
    stages, global_args = [], {}
    for ln in lines:
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", ln, re.I)
        a = re.match(r"ARG\s+(\w+)=(\S+)", ln)
        if m:
            # the base images are build arguments (global ARGs before the first FROM)
            image = re.sub(r"\$\{(\w+)\}", lambda v: global_args.get(v.group(1), v.group(0)),
                           m.group(1))
            stages.append({"image": image, "from": m.group(1), "name": m.group(2), "lines": []})
        elif stages:
            stages[-1]["lines"].append(ln)
        elif a:
            global_args[a.group(1)] = a.group(2)
    t.check(len(stages) == 2, "two stages (%d)" % len(stages))
    build, final = stages[0], stages[-1]
    t.check(build["from"] == "${BUILD_IMAGE}" and final["from"] == "${RUNTIME_IMAGE}",
            "each stage's base is a build argument (%s, %s)" % (build["from"], final["from"]))
    t.check("devel" in build["image"] and "cuda" in build["image"],
            "build stage defaults to a CUDA devel image (%s)" % build["image"])
    t.check("devel" not in final["image"] and "cuda" in final["image"],
            "final stage defaults to a CUDA image that is not a devel image (%s)" % final["image"])
    body = "\n".join(build["lines"])
    # CUDA=ON (default) or OFF (CPU-only, plain Debian 12 bases): the CMake switch follows it
    t.check("ARG CUDA=ON" in body and "-DCOLL_CUDA=ON" in body and "-DCOLL_CUDA=OFF" in body,
            "build argument CUDA (default ON) selects -DCOLL_CUDA=ON or OFF")
    t.check("-DCOLL_VERSION_STRING" not in body and "coll_get_version_string" in body and
            "KCOLL_VERSION" in body,
            "the build stage checks KCOLL_VERSION against the built library instead of stamping it")
    t.check("cmake -S . -B" in body and "cmake --build" in body and "cmake --install" in body,
            "build stage configures, builds and installs with CMake")
    t.check("-DCOLL_BUILD_TESTS=OFF" in body, "tests not built into the image")

    fin = "\n".join(final["lines"])
    users = [ln.split(None, 1)[1] for ln in final["lines"] if ln.upper().startswith("USER ")]
    t.check(users and users[-1].split(":")[0] not in ("0", "root"),
            "final stage runs as a non-root user (%s)" % users)
    for tool in ("build-essential", "cmake", "ninja-build", "gcc", "g++", "make", "-dev ",
                 "pkg-config", "nvcc"):
        installs = [ln for ln in final["lines"] if "apt-get install" in ln]
        t.check(not any(tool in ln + " " for ln in installs),
                "no %s installed in the final stage" % tool.strip())
    t.check("rm -rf /var/lib/apt/lists" in fin, "final stage drops the apt lists")
    t.check("ldd" in fin and "not found" in fin, "final stage checks shared libraries resolve")
    t.check("NVIDIA_VISIBLE_DEVICES=void" in fin, "final stage does not claim the node's GPUs")
    t.check(re.search(r'ENTRYPOINT \["/opt/kcoll/bin/coll-agent"\]', fin) is not None,
            "entrypoint is coll-agent")
    for label in ("org.opencontainers.image.version", "org.opencontainers.image.revision",
                  "org.opencontainers.image.source"):
        t.check(label + "=" in fin, "final stage has the OCI label %s" % label)

    # consistency with CMake
    cm = cmake_text()
    for exe in ("coll-agent", "coll-run", "coll-perf"):
        direct = re.search(r"add_executable\(\s*%s(?=[\s)])" % re.escape(exe), cm)
        # tools/: coll_add_tool(NAME sources...) wraps add_executable(${name} ...)
        wrapped = re.search(r"coll_add_tool\(\s*%s(?=[\s)])" % re.escape(exe), cm) and \
            re.search(r"add_executable\(\s*\$\{name\}", cm)
        t.check(bool(direct or wrapped), "%s is a CMake target" % exe)
        t.check("/opt/kcoll/bin/%s" % exe in body, "build stage checks %s was installed" % exe)
    t.check(re.search(r"install\(TARGETS coll-agent RUNTIME DESTINATION bin\)", cm) is not None,
            "CMake installs coll-agent to bin/")
    t.check(re.search(r"install\(TARGETS \$\{(tool|name)\} RUNTIME DESTINATION bin\)", cm)
            is not None,
            "CMake installs the tools to bin/")
    t.check(re.search(r"install\(TARGETS coll coll_static LIBRARY DESTINATION lib", cm) is not None,
            "CMake installs libcoll.so to lib/")
    t.check(re.search(r"add_library\(coll SHARED", cm) is not None, "libcoll.so is a target")
    t.check("COPY --from=build /opt/kcoll/ /opt/kcoll/" in fin or
            ("COPY --from=build /opt/kcoll/bin/" in fin and "COPY --from=build /opt/kcoll/lib/"
             in fin), "final stage copies bin/ and lib/ from the install prefix")
    for opt in re.findall(r"-D(COLL_[A-Z_]+)=", body):
        t.check(re.search(r"(option|set)\(%s\b" % opt, cm) is not None,
                "-D%s is an option of the CMake project" % opt)
    # the apt packages of the build stage cover what the CMake files look up with pkg-config
    for mod, pkg in (("libmicrohttpd", "libmicrohttpd-dev"), ("gnutls", "libgnutls28-dev"),
                     ("jansson", "libjansson-dev"), ("libcurl", "libcurl4-openssl-dev"),
                     ("yaml-0.1", "libyaml-dev")):
        if mod in cm:
            t.check(pkg in body, "build stage installs %s (pkg-config %s)" % (pkg, mod))

    with open(os.path.join(REPO, ".dockerignore")) as f:
        ign = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    for pat in (".git", ".deps", "build", "build-*"):
        t.check(pat in ign, ".dockerignore has %s" % pat)
    for needed in ("libcoll", "kernels", "k8s-agent", "tools", "cmake", "CMakeLists.txt"):
        t.check(needed not in ign, ".dockerignore keeps %s in the context" % needed)
    # what this checkout would send (build folders, base tarballs and all): a few MiB of sources
    size, count = context_size(ign)
    print("build context of this checkout: %.1f MiB in %d files" % (size / 1048576.0, count))
    t.check(size < 16 << 20, "the build context stays under 16 MiB (%.1f MiB)"
            % (size / 1048576.0))
    t.done()


if __name__ == "__main__":
    main()
