#!/usr/bin/env python3
"""One version: project(kcoll VERSION x.y.z) in CMakeLists.txt (scripts/version.sh prints it) is
the library's version string and coll-agent's; the Dockerfile's KCOLL_VERSION defaults (every
stage), the chart's version, appVersion (the default image tag) and kcoll.io/library-version
annotation must equal it. Fails naming each place that drifted; a self-check proves a drifted copy
is caught."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploytools import REPO, Checker  # noqa: E402

t = Checker("version_test")


def read(rel):
    with open(os.path.join(REPO, rel)) as f:
        return f.read()


def versions(cmake, dockerfile, chart, agent_h):
    """{place: version or None} of every place that must carry the project version."""
    out = {}
    m = re.search(r"^project\(kcoll VERSION ([0-9][0-9.]*)[\s)]", cmake, re.M)
    out["CMakeLists.txt project(VERSION)"] = m.group(1) if m else None
    args = re.findall(r"^ARG KCOLL_VERSION=(\S*)\s*$", dockerfile, re.M)
    stages = len(re.findall(r"^FROM\s", dockerfile, re.M))
    out["Dockerfile ARG KCOLL_VERSION (%d of %d stages)" % (len(args), stages)] = \
        args[0] if args and len(args) == stages and len(set(args)) == 1 else None
    for key, pat in (("version", r"^version:\s*\"?([^\"\s]+)\"?\s*$"),
                     ("appVersion", r"^appVersion:\s*\"?([^\"\s]+)\"?\s*$"),
                     ("annotation kcoll.io/library-version",
                      r"^\s+kcoll\.io/library-version:\s*\"?([^\"\s]+)\"?\s*$")):
        m = re.search(pat, chart, re.M)
        out["Chart.yaml " + key] = m.group(1) if m else None
    # coll-agent's version is the compile definition from CMake, never a literal of its own
    m = re.search(r"^#define AGENT_VERSION\s+\"([^\"]*)\"", agent_h, re.M)
    out["k8s-agent/agent.h (no literal AGENT_VERSION)"] = None if m else "project"
    return out


def drift(vs):
    want = vs["CMakeLists.txt project(VERSION)"]
    return [(place, v) for place, v in vs.items() if v not in (want, "project")]


def main():
    cmake, dockerfile = read("CMakeLists.txt"), read("Dockerfile")
    chart, agent_h = read("deploy/helm/kcoll/Chart.yaml"), read("k8s-agent/agent.h")
    vs = versions(cmake, dockerfile, chart, agent_h)
    want = vs["CMakeLists.txt project(VERSION)"]
    t.check(want is not None, "CMakeLists.txt declares project(kcoll VERSION x.y.z) (%s)" % want)
    for place, v in vs.items():
        print("  %-55s %s" % (place, v))
    bad = drift(vs)
    t.check(not bad, "every place carries %s%s" % (
        want, "" if not bad else "; drifted: " + ", ".join("%s=%s" % b for b in bad)))
    r = subprocess.run([os.path.join(REPO, "scripts", "version.sh")], capture_output=True,
                       text=True, timeout=30)
    t.check(r.returncode == 0 and r.stdout.strip() == want,
            "scripts/version.sh prints %s (%s)" % (want, r.stdout.strip() or r.stderr.strip()))
    # the check itself catches drift: a chart whose appVersion moved on alone, a Dockerfile
    # stage left behind, a literal AGENT_VERSION
    moved = chart.replace('appVersion: "%s"' % want, 'appVersion: "%s.1"' % want)
    t.check(moved != chart and drift(versions(cmake, dockerfile, moved, agent_h)) ==
            [("Chart.yaml appVersion", want + ".1")], "self-check: a moved appVersion is caught")
    behind = dockerfile.replace("ARG KCOLL_VERSION=%s" % want, "ARG KCOLL_VERSION=0.0.9", 1)
    t.check(behind != dockerfile and len(drift(versions(cmake, behind, chart, agent_h))) == 1,
            "self-check: one Dockerfile stage left behind is caught")
    lit = agent_h + '\n#define AGENT_VERSION "%s"\n' % want
    t.check(len(drift(versions(cmake, dockerfile, chart, lit))) == 1,
            "self-check: a literal AGENT_VERSION in agent.h is caught")
    t.done()


if __name__ == "__main__":
    main()
