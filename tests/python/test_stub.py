"""The typed stub (lingbot_map/__init__.pyi) describes the module as built: the same public names,
methods and properties, and for every function the same parameters in the same order, the same
keyword-only marker and the same defaults as the signatures pybind11 records."""
import ast
import pathlib
import re

import pytest

import lingbot_map as lm

STUB = pathlib.Path(lm.__file__).with_name("__init__.pyi")
TREE = ast.parse(STUB.read_text())
STUB_NAMES = {n.name for n in TREE.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
STUB_ONLY_ALIASES = {"PathLike", "F32", "U8", "Frame", "KeyframeInterval", "Preprocess", "Backend", "KVDType", "Mode", "Device"}


def stub_params(fn: ast.FunctionDef) -> list[tuple[str, bool, object]]:
    """(name, keyword_only, default or Ellipsis for 'no check' / NoDefault) without self."""
    out = []
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(pos, defaults):
        out.append((arg.arg, False, "NoDefault" if d is None else ast.literal_eval(d)))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, True, "NoDefault" if d is None else ast.literal_eval(d)))
    return [p for p in out if p[0] != "self"]


def native_params(obj) -> list[tuple[str, bool, object]]:
    sig = obj.__doc__.splitlines()[0]
    inner = sig[sig.index("(") + 1: sig.rindex(") ->")]
    out, kw_only = [], False
    for part in re.split(r", (?=\*|\w+: )", inner) if inner else []:
        if part == "*":
            kw_only = True
            continue
        name, rest = part.split(": ", 1)
        default = ast.literal_eval(rest.split(" = ", 1)[1]) if " = " in rest else "NoDefault"
        out.append((name, kw_only, default))
    return [p for p in out if p[0] != "self"]


def test_public_names_match():
    assert set(lm.__all__) - {"__version__"} == STUB_NAMES
    assert {n.targets[0].id for n in TREE.body if isinstance(n, ast.Assign)} == STUB_ONLY_ALIASES


def functions():
    for node in TREE.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, getattr(lm, node.name), node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not any(
                        isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list):
                    if item.name in ("__enter__", "__exit__", "__iter__", "__next__"):
                        continue
                    yield f"{node.name}.{item.name}", getattr(getattr(lm, node.name), item.name), item


@pytest.mark.parametrize("name, native, node", list(functions()), ids=lambda x: x if isinstance(x, str) else "")
def test_signatures_match(name, native, node):
    got, want = stub_params(node), native_params(native)
    assert [(n, k) for n, k, _ in got] == [(n, k) for n, k, _ in want], name
    for (n, _, d_stub), (_, _, d_native) in zip(got, want):
        if d_stub is not Ellipsis:
            assert d_stub == d_native, f"{name}: default of {n}"


def test_class_members_match():
    for node in TREE.body:
        if not isinstance(node, ast.ClassDef) or node.name in ("Error", "FileNotFound"):  # exceptions: the members are the builtins'
            continue
        cls = getattr(lm, node.name)
        stub_members = {i.name for i in node.body if isinstance(i, ast.FunctionDef)} | {
            i.target.id for i in node.body if isinstance(i, ast.AnnAssign)}
        native = {m for m in dir(cls) if not m.startswith("_")}
        assert {m for m in stub_members if not m.startswith("_")} == native, node.name
        assert cls.__doc__, node.name


def test_every_public_function_is_documented():
    for name in lm.__all__:
        obj = getattr(lm, name)
        if callable(obj):
            doc = obj.__doc__ or ""
            assert len(doc.splitlines()) >= 2 or (isinstance(obj, type) and doc), name
