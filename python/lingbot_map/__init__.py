"""lingbot_map: streaming 3D reconstruction with LingBot-Map, from NumPy, without PyTorch.

The native engine of the `lingbot-map` command line tool, as a Python module:

    import lingbot_map as lm
    model = lm.Model.demo()                       # or lm.Model.load("lingbot-map-long.pt")
    with lm.Session(model, scale_frames=2) as session:
        for i in range(6):
            for r in session.push(lm.demo_frame(i)):
                print(r.frame_index, r.c2w[:, 3], r.depth.shape)

`reconstruct(images=..., video=..., model=...)` runs a folder, a list of arrays or a video the way
`lingbot-map run` does and yields one Result per frame; `Exporter` writes run's files (every `run --export` kind). A
Result's arrays are read-only float32 NumPy arrays that own their memory (`.copy()` one to edit it). Engine errors raise lingbot_map.Error with the
engine's message (a missing file or folder its subclass FileNotFound, also a FileNotFoundError); the GIL is released while the engine computes.
"""
import numpy as _numpy  # noqa: F401  (the extension's arrays need NumPy loaded)

from ._lingbot_map import (  # noqa: F401
    Error,
    Exporter,
    FileNotFound,
    Model,
    Reconstruction,
    Result,
    Session,
    __version__,
    blas,
    default_exports,
    demo_frame,
    export_kinds,
    load_image,
    load_safetensors,
    preprocess,
    reconstruct,
    select_points,
    verify,
)
from . import _lingbot_map as _native

import difflib as _difflib
import functools as _functools
import operator as _operator
import os as _os
import re as _re
import types as _types


# pickle's constructors of a Result and a Model (their __reduce__ names these): the native functions
# as Python functions, which pickle can refer to by name.
def _result_from_state(state):
    return _native._result_from_state(state)


def _model_from_state(state):
    return _native._model_from_state(state)


# Argument errors as Python's own functions word them. pybind11 answers a call it cannot match (an
# unknown or missing keyword, too many positional arguments) with "f(): incompatible function
# arguments" and every signature, never naming the argument; and an int that the parameter's C++ type
# cannot hold comes as a ValueError that cannot name it (strict_args.h). So each public function and
# method is replaced, once, here, by _native._ArgumentErrors(native, describe): a callable written in
# C++ that calls the native function (no Python frame: tracebacks and the warnings' stacklevel stay
# as they were) and, on TypeError or ValueError only, asks describe() for a better error: the call
# compared with the parameters pybind11 records (its signature, the docstring's first line). Other
# errors (an argument of the wrong type: pybind11's message) come as they are.
_INCOMPATIBLE = _re.compile(r"\w+\(\): incompatible (function|constructor) arguments\.")


def _parameters(native):
    """[(name, has_default, keyword_only, annotation)] from pybind11's signature line; None if it takes **kwargs."""
    sig = (native.__doc__ or "").splitlines()[0] if native.__doc__ else ""
    if "(" not in sig or ") ->" not in sig:
        return None
    inner = sig[sig.index("(") + 1: sig.rindex(") ->")]
    out, keyword_only = [], False
    for part in _re.split(r", (?=\*|\w+: )", inner) if inner else []:
        if part == "*":
            keyword_only = True
            continue
        if part.startswith("*"):  # *args / **kwargs: pybind11 takes anything there
            return None
        name, _, annotation = part.partition(": ")
        out.append((name, " = " in part, keyword_only, annotation.split(" = ", 1)[0]))
    return out


def _call_problem(name, params, args, kwargs):
    """What Python would say about this call of `name` with `params`, or None (an argument's type)."""
    names = [p[0] for p in params]
    for key in kwargs:
        if key not in names or key == "self":
            close = _difflib.get_close_matches(key, [n for n in names if n != "self"], n=1)
            return f"{name}() got an unexpected keyword argument '{key}'" + (
                f" (did you mean '{close[0]}'?)" if close else "")
    positional = [p for p in params if not p[2]]
    if len(args) > len(positional):
        counted = [p for p in positional if p[0] != "self"]
        given = len(args) - (len(positional) - len(counted))
        return (f"{name}() takes {len(counted)} positional argument{'s' if len(counted) != 1 else ''} but {given} "
                f"{'was' if given == 1 else 'were'} given")
    for n in names[:len(args)]:
        if n in kwargs:
            return f"{name}() got multiple values for argument '{n}'"
    for keyword_only in (False, True):
        missing = [f"'{n}'" for n, has_default, kw, _ in params[len(args):]
                   if kw == keyword_only and not has_default and n not in kwargs]
        if missing:
            listed = missing[0] if len(missing) == 1 else (
                " and ".join(missing) if len(missing) == 2 else ", ".join(missing[:-1]) + ", and " + missing[-1])
            return (f"{name}() missing {len(missing)} required {'keyword-only' if keyword_only else 'positional'} "
                    f"argument{'s' if len(missing) != 1 else ''}: {listed}")
    return None


# What a parameter of each annotation pybind11 records takes (strict_args.h: a count is no bool and no
# float, a flag no int or None), and how an error names it. Annotations not listed (object, a NumPy
# array) take anything here: pybind11's own message stays for them.
_NATIVE = "lingbot_map._lingbot_map."
_TAKES = {
    "int": ("an int", lambda v: hasattr(type(v), "__index__") and not isinstance(v, (bool, _numpy.bool_))),
    "float": ("a number", lambda v: isinstance(v, (int, float, _numpy.integer, _numpy.floating))
              and not isinstance(v, (bool, _numpy.bool_))),
    "bool": ("a bool", lambda v: isinstance(v, (bool, _numpy.bool_))),
    "str": ("a str", lambda v: isinstance(v, str)),
    "os.PathLike": ("a path (str or os.PathLike)", lambda v: isinstance(v, (str, bytes, _os.PathLike))),
    "List[str]": ("a list of str", lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)),
}


def _too_large_for_float(value):
    if isinstance(value, (bool, _numpy.bool_)) or not hasattr(type(value), "__index__"):
        return False
    try:
        float(_operator.index(value))
    except OverflowError:
        return True
    return False


def _type_problem(params, args, kwargs):
    """'<name> must be <what>, got <type>' for the first argument its annotation does not take, or None."""
    names = [p[0] for p in params]
    annotations = {p[0]: p[3] for p in params}
    given = list(zip(names, args)) + sorted(kwargs.items(), key=lambda kv: names.index(kv[0]))
    for name, value in given:
        if name == "self":
            continue
        annotation = annotations[name]
        optional = annotation.startswith("Optional[") and annotation.endswith("]")
        inner = annotation[len("Optional["):-1] if optional else annotation
        if inner == "float" and _too_large_for_float(value):  # pybind11 would fail with its signature dump
            return f"{name} must be a number a float can hold, got an int too large for one"
        if inner.startswith(_NATIVE):
            cls = getattr(_native, inner[len(_NATIVE):], None)
            if cls is None:
                continue
            what, takes = f"a lingbot_map.{cls.__name__}", (lambda v, cls=cls: isinstance(v, cls))
        elif inner in _TAKES:
            what, takes = _TAKES[inner]
        else:
            continue
        if (value is None and optional) or (value is not None and takes(value)):
            continue
        return f"{name} must be {what}{' or None' if optional else ''}, got {type(value).__name__}"
    return None


def _int_argument(params, args, kwargs, value):
    """The name of the first argument (in parameter order) holding the int `value`, or None."""
    names = [p[0] for p in params]
    given = list(zip(names, args)) + sorted(kwargs.items(), key=lambda kv: names.index(kv[0]) if kv[0] in names else 0)
    for n, v in given:
        if v is value:
            return n
    for n, v in given:
        try:
            if not isinstance(v, bool) and _operator.index(v) == value:
                return n
        except TypeError:
            pass
    return None


def _checked(native, name, qualname, init=False):
    """native wrapped in _ArgumentErrors, with its name, doc, ... (functools.wraps), or native itself.
    init: native is a class's __init__ (a second call on a live object raises instead of being ignored)."""
    params = _parameters(native)
    if params is None:
        return native

    def describe(args, kwargs, error):
        kwargs = kwargs or {}
        if isinstance(error, TypeError) and _INCOMPATIBLE.match(str(error)):
            problem = _call_problem(name, params, args, kwargs) or _type_problem(params, args, kwargs)
            if problem is not None:
                return TypeError(problem)
            # pybind11's message: the signatures, then every argument's repr (a list of frames: megabytes).
            text = str(error)
            return TypeError(text[:2000] + " ...") if len(text) > 2000 else None
        value = getattr(error, "_lingbot_int_arg", None)
        if isinstance(error, ValueError) and value is not None:
            arg = _int_argument(params, args, kwargs, value)
            if arg is not None:
                return ValueError(f"{arg} must fit in {error._lingbot_int_range}, got {value}")
        return None

    checked = _functools.wraps(native)(_native._ArgumentErrors(native, describe, init=init))
    checked.__module__, checked.__qualname__ = __name__, qualname
    return checked


def _check_arguments():
    for public in __all__:
        obj = globals()[public]
        if isinstance(obj, _types.BuiltinFunctionType):
            globals()[public] = _checked(obj, public, public)
            continue
        if not isinstance(obj, type) or issubclass(obj, BaseException):
            continue
        cls = obj
        for attr, value in list(vars(cls).items()):
            if attr.startswith("_") and attr != "__init__":
                continue
            name, qualname = cls.__name__ if attr == "__init__" else f"{cls.__name__}.{attr}", f"{cls.__name__}.{attr}"
            if isinstance(value, staticmethod) and isinstance(value.__func__, _types.BuiltinFunctionType):
                setattr(cls, attr, staticmethod(_checked(value.__func__, name, qualname)))
            elif isinstance(getattr(value, "__func__", None), _types.BuiltinFunctionType):  # pybind11's instancemethod
                setattr(cls, attr, _checked(value.__func__, name, qualname, init=attr == "__init__"))


__all__ = [
    "Error",
    "Exporter",
    "FileNotFound",
    "Model",
    "Reconstruction",
    "Result",
    "Session",
    "__version__",
    "blas",
    "default_exports",
    "demo_frame",
    "export_kinds",
    "load_image",
    "load_safetensors",
    "preprocess",
    "reconstruct",
    "select_points",
    "verify",
]

_check_arguments()
