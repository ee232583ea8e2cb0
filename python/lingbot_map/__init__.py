"""lingbot_map: streaming 3D reconstruction with LingBot-Map, from NumPy, without PyTorch.

The native engine of the `lingbot-map` command line tool, as a Python module:

    import lingbot_map as lm
    model = lm.Model.demo()                       # or lm.Model.load("lingbot-map-long.pt")
    with lm.Session(model, scale_frames=2) as session:
        for i in range(6):
            for r in session.push(lm.demo_frame(i)):
                print(r.frame_index, r.c2w[:, 3], r.depth.shape)

`reconstruct(images=..., video=..., model=...)` runs a folder, a list of arrays or a video the way
`lingbot-map run` does and yields one Result per frame; `Exporter` writes run's files (every `run --export` kind). Arrays are
float32 NumPy arrays that own their memory. Engine errors raise lingbot_map.Error with the
engine's message; the GIL is released while the engine computes.
"""
import numpy as _numpy  # noqa: F401  (the extension's arrays need NumPy loaded)

from ._lingbot_map import (  # noqa: F401
    Error,
    Exporter,
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


# pickle's constructors of a Result and a Model (their __reduce__ names these): the native functions
# as Python functions, which pickle can refer to by name.
def _result_from_state(state):
    return _native._result_from_state(state)


def _model_from_state(state):
    return _native._model_from_state(state)


__all__ = [
    "Error",
    "Exporter",
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
