"""Type stubs for lingbot_map (the native module _lingbot_map). Docstrings live in the module."""
import os
from types import TracebackType
from typing import Any, Callable, Iterator, Literal, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

__version__: str

PathLike = Union[str, bytes, os.PathLike[str]]
F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
Frame = Union[U8, F32]  # uint8 [H, W, 3] RGB, or float32 [3, H, W] in [0, 1]
KeyframeInterval = Union[Literal["auto", "flow"], int]
Backend = Literal["paged", "dense", "dense-full"]
KVDType = Literal["f32", "f16", "bf16"]
Mode = Literal["streaming", "windowed"]  # "crop" | "pad": the deprecated spelling of preprocess=
Preprocess = Literal["crop", "pad"]
Device = Literal["cpu", "cuda", "auto"]

class Error(RuntimeError): ...
class FileNotFound(Error, FileNotFoundError): ...

class Model:
    @staticmethod
    def load(
        path: PathLike,
        config: Optional[dict[str, Any]] = None,
        *,
        weights_dtype: Literal["auto", "f32", "f16", "bf16"] = "auto",
        device: Device = "cpu",  # the Sessions' device: what weights_dtype="auto" picks for
    ) -> Model: ...
    @staticmethod
    def demo(
        seed: int = ...,
        *,
        weights_dtype: Literal["auto", "f32", "f16", "bf16"] = "auto",
        device: Device = "cpu",
    ) -> Model: ...
    @property
    def config(self) -> dict[str, dict[str, Any]]: ...
    @property
    def weights_dtype(self) -> Literal["f32", "f16", "bf16"]: ...
    @property
    def patch_size(self) -> int: ...
    @property
    def parameter_count(self) -> int: ...
    @property
    def source(self) -> str: ...

class Result:  # a value: read-only fields and arrays (copy one to edit it: r.depth.copy()), pickles by value
    @property
    def frame_index(self) -> int: ...
    @property
    def is_keyframe(self) -> bool: ...
    @property
    def rope_time_index(self) -> int: ...
    @property
    def window_index(self) -> int: ...  # mode="windowed": the window the result comes from; else 0
    @property
    def window(self) -> int: ...  # deprecated spelling of window_index (DeprecationWarning)
    @property
    def is_scale_frame(self) -> bool: ...
    @property
    def frame_type(self) -> Literal["scale", "keyframe", "non-keyframe"]: ...
    @property
    def flow(self) -> float: ...
    @property
    def source(self) -> str: ...
    @property
    def timestamp(self) -> float: ...
    @property
    def pose_enc(self) -> F32: ...  # [9]
    @property
    def pose_enc_iters(self) -> F32: ...  # [camera_iterations, 9]
    @property
    def c2w(self) -> F32: ...  # [3, 4]
    @property
    def w2c(self) -> F32: ...  # [3, 4]
    @property
    def K(self) -> F32: ...  # [3, 3]
    @property
    def depth(self) -> F32: ...  # [H, W]
    @property
    def conf(self) -> F32: ...  # [H, W]
    @property
    def world_points(self) -> F32: ...  # [H, W, 3]
    @property
    def image(self) -> F32: ...  # [3, H, W]
    @property
    def content_rect(self) -> Optional[tuple[int, int, int, int]]: ...  # (x, y, width, height) of `image` from the picture; None: a model input given as it is
    @property
    def source_size(self) -> Optional[tuple[int, int]]: ...  # (width, height) of the picture `image` was made from; None: a float32 [3, H, W] model input
    @property
    def source_K(self) -> Optional[npt.NDArray[np.float64]]: ...  # [3, 3] K in that picture's pixels (poses.json source_intrinsics); None likewise
    @property
    def features(self) -> list[F32]: ...  # [P, 2C] per selected layer, P = (H/p)(W/p) patches + the special tokens (6 as released) (Session(features=True))
    @property
    def patch_tokens(self) -> Optional[F32]: ...  # [(H/p)(W/p), C] (Session(patch_tokens=True))

class Session:
    def __init__(
        self,
        model: Model,
        *,
        scale_frames: Optional[int] = None,  # None = the model's config (8 as released)
        kv_window: Optional[int] = None,  # None = the model's config (64 as released)
        keyframe_interval: Optional[KeyframeInterval] = None,  # None = "auto"
        camera_iterations: Optional[int] = None,  # None = the model's config (4 as released)
        kv_backend: Optional[Backend] = None,  # None = "paged"
        kv_dtype: KVDType = "bf16",
        threads: int = 0,
        image_size: Optional[int] = None,  # None: frames go in as they are (reconstruct's None is 518)
        mode: Mode = "streaming",
        preprocess: Optional[Preprocess] = None,  # None = "crop"
        window_size: Optional[int] = None,  # mode="windowed": None = 64
        overlap_size: Optional[int] = None,  # mode="windowed": None = 16 (unless overlap_keyframes)
        overlap_keyframes: Optional[int] = None,
        features: bool = False,
        patch_tokens: bool = False,
        flow_threshold: Optional[float] = None,  # keyframe_interval="flow" only; None = 5.0
        max_non_keyframe_gap: Optional[int] = None,  # keyframe_interval="flow" only; None = 30
        backend: Optional[Backend] = None,  # deprecated spelling of kv_backend (DeprecationWarning)
        keyframes: Optional[KeyframeInterval] = None,  # deprecated spelling of keyframe_interval (DeprecationWarning)
        device: Device = "cpu",  # "cuda" needs a CUDA build and a GPU; "auto" = cuda when available
        max_special_frames: int = 0,  # run's --max-special-frames: 0 keeps all; N bounds a long stream's cost
        progress: Optional[Callable[[dict[str, Any]], None]] = None,  # {"frames", "stage", "done", "total"} per block / frame's heads
    ) -> None: ...
    def push(self, frame: Frame, *, source: Optional[str] = None, timestamp: Optional[float] = None) -> list[Result]: ...
    def finish(self) -> list[Result]: ...
    def finish_early(self) -> list[Result]: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...
    def stats(self) -> dict[str, Optional[int]]: ...  # device_* entries are None on the CPU
    @property
    def options(self) -> dict[str, Any]: ...
    @property
    def windows(self) -> Optional[list[dict[str, Any]]]: ...  # mode="windowed" only
    @property
    def finished(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def frames_pushed(self) -> int: ...
    @property
    def model(self) -> Model: ...
    def __enter__(self) -> Session: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

class Reconstruction(Iterator[Result]):
    def __iter__(self) -> Reconstruction: ...
    def __next__(self) -> Result: ...
    def finish_early(self) -> list[Result]: ...
    def stats(self) -> dict[str, Optional[int]]: ...  # device_* entries are None on the CPU
    @property
    def options(self) -> dict[str, Any]: ...
    @property
    def windows(self) -> Optional[list[dict[str, Any]]]: ...  # mode="windowed" only
    @property
    def frame_count(self) -> Optional[int]: ...
    @property
    def damage(self) -> Optional[dict[str, Any]]: ...  # None unless the video or folder is damaged (then also a RuntimeWarning)
    @property
    def image_size(self) -> tuple[int, int]: ...
    @property
    def kind(self) -> Literal["images", "video", "arrays"]: ...

def reconstruct(
    images: Union[PathLike, Sequence[Frame], None] = None,
    video: Optional[PathLike] = None,
    *,
    model: Union[Model, PathLike],
    image_size: Optional[int] = None,  # None = 518; float32 arrays: must stay None (model inputs)
    mode: Mode = "streaming",
    preprocess: Optional[Preprocess] = None,  # None = "crop"
    window_size: Optional[int] = None,  # mode="windowed": None = 64
    overlap_size: Optional[int] = None,  # mode="windowed": None = 16 (unless overlap_keyframes)
    overlap_keyframes: Optional[int] = None,
    fps: Optional[float] = None,  # video= only; None = 10
    first_k: int = 0,
    stride: int = 1,
    rotate_cw90: bool = False,
    scale_frames: Optional[int] = None,  # None = the model's config (8 as released)
    kv_window: Optional[int] = None,  # None = the model's config (64 as released)
    keyframe_interval: Optional[KeyframeInterval] = None,  # None = "auto"
    camera_iterations: Optional[int] = None,  # None = the model's config (4 as released)
    kv_backend: Optional[Backend] = None,  # None = "paged"
    kv_dtype: KVDType = "bf16",
    threads: int = 0,
    features: bool = False,
    patch_tokens: bool = False,
    flow_threshold: Optional[float] = None,  # keyframe_interval="flow" only; None = 5.0
    max_non_keyframe_gap: Optional[int] = None,  # keyframe_interval="flow" only; None = 30
    backend: Optional[Backend] = None,  # deprecated spelling of kv_backend (DeprecationWarning)
    keyframes: Optional[KeyframeInterval] = None,  # deprecated spelling of keyframe_interval (DeprecationWarning)
    device: Device = "cpu",  # "cuda" needs a CUDA build and a GPU; "auto" = cuda when available
    max_special_frames: int = 0,  # run's --max-special-frames: 0 keeps all; N bounds a long stream's cost
    progress: Optional[Callable[[dict[str, Any]], None]] = None,  # {"frames", "stage", "done", "total"} per block / frame's heads
) -> Reconstruction: ...

class Exporter:
    def __init__(
        self,
        out: PathLike,
        *,
        export: Union[str, Sequence[str], None] = None,  # run's --export
        conf_threshold: float = 1.5,
        downsample: int = 10,
        meta: Optional[dict[str, Any]] = None,
        exports: Union[str, Sequence[str], None] = None,  # deprecated spelling of export (DeprecationWarning)
    ) -> None: ...
    # mask: bool / uint8 [H, W] over Result.image, False where the pixel gives no point (sky, moving objects)
    def write(self, result: Result, *, mask: Optional[npt.NDArray[Any]] = None) -> None: ...
    def close(self) -> None: ...
    def report(self) -> dict[str, Any]: ...
    @property
    def frames(self) -> int: ...
    def __enter__(self) -> Exporter: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

def load_image(path: PathLike) -> U8: ...
def preprocess(
    image: U8,
    image_size: int = 518,
    preprocess: Optional[Preprocess] = None,  # None = "crop"
    patch_size: int = 14,
    *,
    mode: Optional[Preprocess] = None,  # deprecated spelling of preprocess (DeprecationWarning)
) -> F32: ...
def demo_frame(index: int, width: int = 112, height: int = 70) -> U8: ...
def select_points(
    world_points: F32,
    image: F32,
    conf: Optional[F32] = None,
    depth: Optional[F32] = None,
    conf_threshold: float = 1.5,
    downsample: int = 10,
    content_rect: Optional[tuple[int, int, int, int]] = None,  # Result.content_rect: points only from inside it
    mask: Optional[npt.NDArray[Any]] = None,  # bool / uint8 [H, W]: points only where nonzero
) -> tuple[F32, U8]: ...
def load_safetensors(path: PathLike) -> dict[str, npt.NDArray[Any]]: ...
def verify(
    golden: Optional[PathLike] = None,  # verify --golden: a golden case folder (required; None only with the old case_dir=)
    *,
    kv_backend: Optional[Backend] = None,  # None = "paged"
    kv_dtype: KVDType = "f32",
    threads: int = 0,
    backend: Optional[Backend] = None,  # deprecated spelling of kv_backend (DeprecationWarning)
    device: Device = "cpu",  # as run's --device
    weights_dtype: Literal["auto", "f32", "f16", "bf16"] = "f32",  # as verify --weights-dtype
    only: Union[list[str], tuple[str, ...], None] = None,  # glob patterns of tensor names (verify --only); the rest SKIP
    case_dir: Optional[PathLike] = None,  # deprecated spelling of golden (DeprecationWarning)
) -> dict[str, Any]: ...
def export_kinds() -> list[dict[str, Any]]: ...
def default_exports() -> str: ...
def blas() -> str: ...
