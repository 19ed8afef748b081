"""Shared helpers of the deploy tests: locating helm/kubectl/node, skipping, YAML via kubectl."""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SKIP = 77


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(SKIP)


def find_tool(name):
    """A tool from the repo's .deps/bin (scripts/setup.sh puts helm and kubectl there), else PATH."""
    for cand in (os.path.join(REPO, ".deps", "bin", name),
                 os.path.join(REPO, ".deps", "bin", name, name)):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return shutil.which(name)


def need_tool(name, why):
    path = find_tool(name)
    if path is None:
        skip("%s not found in %s/.deps/bin or PATH (%s); run scripts/setup.sh"
             % (name, REPO, why))
    return path


def run(cmd, input_text=None, check=True, env=None):
    res = subprocess.run(cmd, input=input_text, capture_output=True, text=True, env=env)
    if check and res.returncode != 0:
        raise AssertionError("command failed (%d): %s\nstdout:\n%s\nstderr:\n%s"
                             % (res.returncode, " ".join(cmd), res.stdout[-4000:],
                                res.stderr[-4000:]))
    return res


def yaml_to_objects(kubectl, text):
    """Parses a multi-document YAML stream into a list of objects with real kubectl, offline.

    `kubectl annotate --local -f - KEY- -o json` reads any kind without an API server (`create
    --dry-run=client` needs discovery) and prints each document as JSON, untyped, so nothing in
    the YAML is dropped or renamed; it adds an empty metadata.annotations, removed again here
    when the document had none.
    """
    if not text.strip():
        return []
    res = run([kubectl, "annotate", "--local", "-f", "-", "kcoll.io/test-parse-", "-o", "json",
               "--kubeconfig=/dev/null"], input_text=text)
    dec = json.JSONDecoder()
    out, i, s = [], 0, res.stdout
    while True:
        while i < len(s) and s[i].isspace():
            i += 1
        if i >= len(s):
            break
        doc, i = dec.raw_decode(s, i)
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out.extend(doc["items"])
        else:
            out.append(doc)
    for doc in out:
        meta = doc.get("metadata")
        if isinstance(meta, dict) and meta.get("annotations") == {}:
            del meta["annotations"]
    return out


class Checker:
    """Collects failures so one run reports every broken expectation."""

    def __init__(self, name):
        self.name = name
        self.failures = []
        self.passed = 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failures.append(what)
            print("FAIL: " + what, flush=True)
        return cond

    def done(self):
        print("%s: %d checks passed, %d failed" % (self.name, self.passed, len(self.failures)))
        sys.exit(1 if self.failures else 0)


def yaml_file_objects(kubectl, path):
    with open(path) as f:
        objs = yaml_to_objects(kubectl, f.read())
    return objs


def need_ajv():
    """node and ajv (tests/deploy/package.json, installed by tests/deploy/setup-node.sh)."""
    node = need_tool("node", "runs the ajv JSON-schema validator")
    marker = os.path.join(REPO, ".deps", "node_modules", "ajv", "package.json")
    if not os.path.isfile(marker) and shutil.which("npm"):
        # same as scripts/setup.sh would do; a test run without the registry just skips
        print("ajv missing: running tests/deploy/setup-node.sh", flush=True)
        try:
            subprocess.run([os.path.join(HERE, "setup-node.sh")], timeout=300,
                           stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            print("setup-node.sh failed: %s" % e)
    if not os.path.isfile(marker):
        skip("ajv is not installed in .deps/node_modules; run tests/deploy/setup-node.sh "
             "(scripts/setup.sh does)")
    return node


def ajv_validate(node, schemas, cases):
    """Validates each case {'id','schema','object'} with ajv; returns {id: {valid, errors,
    object (defaulted)}}."""
    res = run([node, os.path.join(HERE, "validate_crd.js")],
              input_text=json.dumps({"schemas": schemas, "cases": cases}))
    return json.loads(res.stdout)


def crd_schema(crd):
    versions = crd["spec"]["versions"]
    return versions[0]["schema"]["openAPIV3Schema"]
