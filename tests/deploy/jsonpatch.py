"""Tiny RFC 6902 JSON Patch applier (add, remove, replace, move, copy, test) for the webhook test.

Strict on purpose: a path that does not exist where RFC 6902 requires it, an array index out of
range or a malformed pointer raises PatchError, so a patch that the API server would reject fails
the test too.
"""
import copy


class PatchError(Exception):
    pass


def parse_pointer(ptr):
    """RFC 6901: '' is the whole document; '/a~1b/~0c' -> ['a/b', '~c']."""
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise PatchError("pointer %r does not start with /" % ptr)
    out = []
    for tok in ptr[1:].split("/"):
        i = 0
        while True:
            i = tok.find("~", i)
            if i < 0:
                break
            if i + 1 >= len(tok) or tok[i + 1] not in "01":
                raise PatchError("bad escape in %r" % ptr)
            i += 2
        out.append(tok.replace("~1", "/").replace("~0", "~"))
    return out


def _index(container, tok, allow_end):
    if tok == "-" and allow_end:
        return len(container)
    if not tok.isdigit() or (len(tok) > 1 and tok[0] == "0"):
        raise PatchError("bad array index %r" % tok)
    i = int(tok)
    limit = len(container) if allow_end else len(container) - 1
    if i > limit:
        raise PatchError("array index %d out of range (len %d)" % (i, len(container)))
    return i


def _parent(doc, tokens):
    cur = doc
    for tok in tokens[:-1]:
        if isinstance(cur, dict):
            if tok not in cur:
                raise PatchError("missing member %r" % tok)
            cur = cur[tok]
        elif isinstance(cur, list):
            cur = cur[_index(cur, tok, False)]
        else:
            raise PatchError("cannot descend into %r" % (cur,))
    return cur


def _get(doc, tokens):
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError("missing member %r" % last)
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, False)]
    raise PatchError("cannot index %r" % (parent,))


def _add(doc, tokens, value):
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, True), value)
    else:
        raise PatchError("cannot add into %r" % (parent,))
    return doc


def _remove(doc, tokens):
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError("missing member %r" % last)
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, False))
    raise PatchError("cannot remove from %r" % (parent,))


def apply_patch(doc, patch):
    """Returns a patched deep copy of doc."""
    if not isinstance(patch, list):
        raise PatchError("a JSON Patch is an array")
    doc = copy.deepcopy(doc)
    for op in patch:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError("bad operation %r" % (op,))
        tokens = parse_pointer(op["path"])
        kind = op["op"]
        if kind == "add":
            if "value" not in op:
                raise PatchError("add without value")
            doc = _add(doc, tokens, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, tokens)
        elif kind == "replace":
            _get(doc, tokens)
            if not tokens:
                doc = copy.deepcopy(op["value"])
            else:
                _remove(doc, tokens)
                doc = _add(doc, tokens, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            src = parse_pointer(op["from"])
            value = _get(doc, src)
            if kind == "move":
                _remove(doc, src)
            doc = _add(doc, tokens, copy.deepcopy(value))
        elif kind == "test":
            if _get(doc, tokens) != op["value"]:
                raise PatchError("test failed at %s" % op["path"])
        else:
            raise PatchError("unknown op %r" % kind)
    return doc


if __name__ == "__main__":
    # self-check of the applier against RFC 6902 appendix A cases
    assert apply_patch({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}]) == \
        {"foo": "bar", "baz": "qux"}
    assert apply_patch({"foo": ["bar", "baz"]},
                       [{"op": "add", "path": "/foo/1", "value": "qux"}]) == \
        {"foo": ["bar", "qux", "baz"]}
    assert apply_patch({"foo": [1]}, [{"op": "add", "path": "/foo/-", "value": 2}]) == \
        {"foo": [1, 2]}
    assert apply_patch({"a/b": {"m~n": 1}},
                       [{"op": "replace", "path": "/a~1b/m~0n", "value": 2}]) == {"a/b": {"m~n": 2}}
    for bad in ([{"op": "add", "path": "/x/y", "value": 1}],
                [{"op": "add", "path": "/foo/5", "value": 1}],
                [{"op": "replace", "path": "/nope", "value": 1}]):
        try:
            apply_patch({"foo": []}, bad)
        except PatchError:
            continue
        raise AssertionError("accepted %r" % bad)
    print("jsonpatch self-check ok")
