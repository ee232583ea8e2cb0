"""Session: protocol, memory ownership of the result arrays, context manager, reset, stats, and the
exact exception for every bad input or misuse."""
import errno
import gc
import os
import re
import warnings

import numpy as np
import pytest

import lingbot_map as lm

H, W = 70, 112
FRAME_ERROR = "frame must be a uint8 array [H, W, 3] (RGB) or a float32 array [3, H, W] (RGB in [0, 1]), got "


def frames(n: int) -> list:
    return [lm.demo_frame(i) for i in range(n)]


def run(model, frames_, **kw) -> list:
    out = []
    with lm.Session(model, **kw) as s:
        for f in frames_:
            out += s.push(f)
        out += s.finish()
    return out


def test_scale_phase_protocol_and_result_fields(demo_model):
    with lm.Session(demo_model, scale_frames=3, kv_window=4) as s:
        assert s.push(lm.demo_frame(0)) == [] and s.push(lm.demo_frame(1)) == []
        got = s.push(lm.demo_frame(2))
        assert [r.frame_index for r in got] == [0, 1, 2]
        (r3,) = s.push(lm.demo_frame(3))
        assert s.finish() == []
        assert s.finished and s.frames_pushed == 4
        st = s.stats()
        assert st["steps"] == 2 and st["frames_completed"] == 4 and st["frames_stored"] == 4
        assert s.options["scale_frames"] == 3 and s.options["kv_window"] == 4 and s.options["keyframe_interval"] == 1
    # After the with-block (the cache freed) the readers keep their last figures, as reconstruct()'s
    # iterator does; they raised "the Session is closed".
    assert s.closed and s.stats() == st and s.frames_pushed == 4 and s.options["kv_window"] == 4
    assert s.windows is None and repr(s) == "<lingbot_map.Session closed>"
    r = got[0]
    shapes = {"pose_enc": (9,), "pose_enc_iters": (4, 9), "c2w": (3, 4), "w2c": (3, 4), "K": (3, 3),
              "depth": (H, W), "conf": (H, W), "world_points": (H, W, 3), "image": (3, H, W)}
    for name, shape in shapes.items():
        a = getattr(r, name)
        assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == shape, name
        assert a.flags.c_contiguous
    assert r3.frame_index == 3 and r3.is_keyframe and r3.rope_time_index == 3
    assert r.features == [] and r.patch_tokens is None
    # c2w and w2c are inverse rigid transforms; K has the principal point at the image centre.
    c2w = np.vstack([r.c2w, [0, 0, 0, 1]]).astype(np.float64)
    w2c = np.vstack([r.w2c, [0, 0, 0, 1]]).astype(np.float64)
    np.testing.assert_allclose(c2w @ w2c, np.eye(4), atol=1e-5)
    assert (r.K[0, 2], r.K[1, 2]) == (W / 2, H / 2)
    np.testing.assert_array_equal(r.image, lm.demo_frame(0).transpose(2, 0, 1).astype(np.float32) / np.float32(255))


def test_progress_reports_every_block_and_frame_and_its_errors_fail_the_step(demo_model):
    """progress= (SessionOptions::step_progress): the scale phase runs for minutes on a CPU with no
    result; the callable hears each block and each frame's heads, with the GIL held."""
    depth = 4  # the demo model's aggregator blocks
    events = []
    plain = run(demo_model, frames(3), scale_frames=2)
    got = run(demo_model, frames(3), scale_frames=2, progress=events.append)
    assert [r.frame_index for r in got] == [0, 1, 2]
    for a, b in zip(plain, got):  # the callback changes nothing
        np.testing.assert_array_equal(a.depth, b.depth)
    expected = []
    for n in (2, 1):  # the scale phase (frames 0, 1), then frame 2
        expected += [{"frames": n, "stage": "aggregator", "done": d, "total": depth} for d in range(depth + 1)]
        expected += [{"frames": n, "stage": "heads", "done": f, "total": n} for f in range(1, n + 1)]
    assert events == expected
    events.clear()
    assert len(list(lm.reconstruct(images=[lm.demo_frame(i) for i in range(3)], model=demo_model, scale_frames=2,
                                   image_size=112, progress=events.append))) == 3
    assert events == expected

    def fails(p):
        if p["done"] == 2:
            raise ValueError("the progress display broke")
    with lm.Session(demo_model, scale_frames=2, progress=fails) as s:
        s.push(lm.demo_frame(0))
        with pytest.raises(ValueError, match="^the progress display broke$"):
            s.push(lm.demo_frame(1))
        assert s.finished  # a failed step: reset() starts again
    def stops(p):  # out of reconstruct()'s next() it would end the iteration without an error
        raise StopIteration
    with pytest.raises(RuntimeError, match="^the progress callable raised StopIteration$"):
        list(lm.reconstruct(images=[lm.demo_frame(i) for i in range(3)], model=demo_model, scale_frames=2,
                            image_size=112, progress=stops))
    with pytest.raises(TypeError, match="^progress must be None or a callable taking a dict, got int$"):
        lm.Session(demo_model, progress=3)


def test_short_stream_finish_runs_the_scale_phase(demo_model):
    with lm.Session(demo_model, scale_frames=4) as s:
        assert s.push(lm.demo_frame(0)) == [] and s.push(lm.demo_frame(1)) == []
        assert [r.frame_index for r in s.finish()] == [0, 1]


def test_results_own_their_memory_after_session_is_deleted(demo_model):
    s = lm.Session(demo_model, scale_frames=1)
    (r,) = s.push(lm.demo_frame(0))
    depth, points = r.depth, r.world_points
    expected_depth, expected_points = depth.copy(), points.copy()
    del s, r
    gc.collect()
    # New allocations after the session is gone must not reuse the arrays' memory.
    junk = [np.full((H, W, 3), -7.0, np.float32) for _ in range(64)]
    with lm.Session(demo_model, scale_frames=1) as s2:
        s2.push(lm.demo_frame(5))
    del s2, junk
    gc.collect()
    np.testing.assert_array_equal(depth, expected_depth)
    np.testing.assert_array_equal(points, expected_points)
    assert depth.base is not None and not depth.flags.owndata  # zero-copy: the engine buffer, owned by a capsule


def test_float32_input_equals_uint8_input(demo_model):
    u8 = frames(3)
    f32 = [f.transpose(2, 0, 1).astype(np.float32) / np.float32(255) for f in u8]
    a, b = run(demo_model, u8, scale_frames=2), run(demo_model, f32, scale_frames=2)
    assert len(a) == len(b) == 3
    for x, y in zip(a, b):
        assert x.depth.tobytes() == y.depth.tobytes() and x.w2c.tobytes() == y.w2c.tobytes()
    # Non-contiguous views are accepted (copied): same results.
    strided = [np.ascontiguousarray(f[:, ::-1])[:, ::-1] for f in u8]
    assert not strided[0].flags.c_contiguous
    c = run(demo_model, strided, scale_frames=2)
    assert len(c) == 3
    assert all(x.depth.tobytes() == y.depth.tobytes() for x, y in zip(a, c))


def test_reset_starts_a_fresh_sequence(demo_model):
    fresh = run(demo_model, frames(4), scale_frames=2)
    with lm.Session(demo_model, scale_frames=2) as s:
        for f in frames(3):
            s.push(f)
        s.reset()
        assert s.frames_pushed == 0 and not s.finished
        again = []
        for f in frames(4):
            again += s.push(f)
        again += s.finish()
    assert [r.frame_index for r in again] == [r.frame_index for r in fresh] == [0, 1, 2, 3]
    for x, y in zip(fresh, again):
        assert x.depth.tobytes() == y.depth.tobytes() and x.pose_enc.tobytes() == y.pose_enc.tobytes()


def test_keyframe_interval_and_features(demo_model):
    rs = run(demo_model, frames(7), scale_frames=2, keyframe_interval=2, features=True, patch_tokens=True)
    assert [r.is_keyframe for r in rs] == [True, True, True, False, True, False, True]
    assert [r.rope_time_index for r in rs] == [0, 1, 2, 3, 3, 4, 4]
    cfg = demo_model.config
    assert len(rs[0].features) == len(cfg["aggregator"]["selected_layers"])
    assert rs[0].features[0].shape == (6 + 5 * 8, 2 * cfg["aggregator"]["embed_dim"])
    assert rs[0].patch_tokens.shape == (5 * 8, cfg["encoder"]["embed_dim"])


def test_preprocessing_on_request(demo_model):
    big = lm.demo_frame(0, width=300, height=200)
    with lm.Session(demo_model, scale_frames=1, image_size=112, preprocess="crop") as s:
        (r,) = s.push(big)
    np.testing.assert_array_equal(r.image, lm.preprocess(big, image_size=112, preprocess="crop"))
    assert r.depth.shape == (70, 112)
    with lm.Session(demo_model, scale_frames=1) as s, pytest.raises(
            lm.Error, match=re.escape("image size 200x300 (HxW) is not a multiple of the patch size 14: a Session takes "
                                      "pictures as they are unless image_size= asks for run's preprocessing "
                                      "(Session(model, image_size=518) resizes and crops them as run and upstream do)")):
        s.push(big)


@pytest.mark.parametrize("frame, exc, message", [
    (np.zeros((H, W, 3), np.float64), TypeError, FRAME_ERROR + "float64 array of shape (70, 112, 3)"),
    ([[0, 1]], TypeError, FRAME_ERROR + "list"),
    (np.zeros((H, W), np.uint8), ValueError, FRAME_ERROR + "uint8 array of shape (70, 112)"),
    (np.zeros((H, W, 4), np.uint8), ValueError, FRAME_ERROR + "uint8 array of shape (70, 112, 4)"),
    (np.zeros((H, W, 3), np.float32), ValueError,
     FRAME_ERROR + "float32 array of shape (70, 112, 3) (channels last: frame.transpose(2, 0, 1) gives [3, H, W])"),
    (np.full((3, H, W), 255, np.float32), ValueError,
     "frame: float32 values must be RGB in [0, 1] (uint8 / 255), got 255.0 at flat index 0"),
    (np.where(np.arange(3 * H * W).reshape(3, H, W) == 5, np.nan, 0.5).astype(np.float32), ValueError,
     "frame: float32 values must be RGB in [0, 1] (uint8 / 255), got nan at flat index 5"),
    (np.zeros((71, W, 3), np.uint8), lm.Error, "image size 71x112 (HxW) is not a multiple of the patch size 14: a Session "
     "takes pictures as they are unless image_size= asks for run's preprocessing (Session(model, image_size=518) "
     "resizes and crops them as run and upstream do)"),
    (np.zeros((3, H, W), np.uint8), ValueError,
     FRAME_ERROR + "uint8 array of shape (3, 70, 112) (channels first: frame.transpose(1, 2, 0) gives [H, W, 3])"),
])
def test_bad_frames_raise_exact_messages(demo_model, frame, exc, message):
    with lm.Session(demo_model, scale_frames=2) as s:
        with pytest.raises(exc) as e:
            s.push(frame)
        assert str(e.value) == message
        assert s.frames_pushed == 0  # nothing was consumed


def test_float_frames_get_the_engines_one_percent_margin(demo_model):
    # A resampled frame overshoots [0, 1] slightly: the module accepts what the engine (and the C++ API) accept.
    frame = np.full((3, H, W), 0.5, np.float32)
    frame[0, 0, 0], frame[1, 0, 0] = 1.005, -0.005
    with lm.Session(demo_model, scale_frames=2) as s:
        s.push(frame)
        assert s.frames_pushed == 1
        frame[2, 0, 0] = 1.25
        with pytest.raises(ValueError) as e:
            s.push(frame)
        assert str(e.value) == ("frame: float32 values must be RGB in [0, 1] (uint8 / 255), got 1.25 at flat index "
                                + str(2 * H * W))
        assert s.frames_pushed == 1
        assert len(s.finish()) == 1


def test_sequence_misuse_raises_engine_messages(demo_model):
    s = lm.Session(demo_model, scale_frames=1)
    s.push(lm.demo_frame(0))
    with pytest.raises(lm.Error) as e:
        s.push(lm.demo_frame(1, width=126))
    assert str(e.value) == "frame 1 has size 70x126 (HxW), but this sequence's frames are 70x112 (call reset() to start a new sequence)"
    s.finish()
    with pytest.raises(lm.Error) as e:
        s.push(lm.demo_frame(1))
    assert str(e.value) == "a frame pushed after finish(): the session has finished its sequence (call reset() to start a new one)"
    with pytest.raises(lm.Error) as e:
        s.finish()
    assert str(e.value) == "finish() called twice: the session has finished its sequence (call reset() to start a new one)"
    s.close()
    assert s.closed
    closed = "the Session is closed (close() or the end of its with-block): create a new Session"
    for call in (lambda: s.push(lm.demo_frame(0)), s.finish, s.finish_early, s.reset, s.__enter__):
        with pytest.raises(lm.Error) as e:
            call()
        assert str(e.value) == closed
    # The readers answer after close() (finished raised, where the docs list it among them), with the
    # state the Session was closed in.
    assert (s.finished, s.frames_pushed) == (True, 1)
    unfinished = lm.Session(demo_model, scale_frames=1)
    unfinished.push(lm.demo_frame(0))
    unfinished.close()
    assert (unfinished.finished, unfinished.closed, repr(unfinished)) == (False, True, "<lingbot_map.Session closed>")
    assert issubclass(lm.Error, RuntimeError)
    # A missing path is caught by Python's own except clause as well as by lm.Error's.
    assert issubclass(lm.FileNotFound, lm.Error) and issubclass(lm.FileNotFound, FileNotFoundError)
    assert lm.FileNotFound.__module__ == "lingbot_map" and lm.FileNotFound.__doc__.startswith("A model file")


def test_every_missing_input_path_is_a_file_not_found(tmp_path):
    # load_safetensors and verify raised a plain lm.Error ("cannot open ...", "... does not exist"), which an
    # `except FileNotFoundError` around them did not catch, where Model.load, load_image and reconstruct's did.
    for call, message in [(lambda: lm.load_safetensors(tmp_path / "nope.safetensors"),
                           f"safetensors file not found: {tmp_path / 'nope.safetensors'}"),
                          (lambda: lm.verify(tmp_path / "case"), f"verify: golden case folder not found: {tmp_path / 'case'}"),
                          (lambda: lm.load_image(tmp_path / "a.png"), f"image file not found: {tmp_path / 'a.png'}")]:
        with pytest.raises(FileNotFoundError) as e:
            call()
        assert isinstance(e.value, lm.FileNotFound) and str(e.value) == message
        assert e.value.errno == errno.ENOENT and e.value.filename == message.rsplit(": ", 1)[1]  # as open()'s


def test_an_error_naming_a_path_that_is_not_utf8_keeps_its_message(tmp_path):
    # POSIX names are bytes: pybind11's translation of a message that is not UTF-8 raised an exception with
    # no text at all ("FileNotFound()"). The message writes the byte as \xNN; filename names the file again.
    missing = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.pt")
    with pytest.raises(lm.FileNotFound) as e:
        lm.Model.load(missing)
    assert str(e.value) == f"model file not found: {tmp_path}/caf\\xe9.pt"
    assert e.value.filename == missing and os.fsencode(e.value.filename).endswith(b"/caf\xe9.pt")
    assert e.value.errno == errno.ENOENT
    bad = os.fsencode(tmp_path) + b"/caf\xe9.png"
    with open(bad, "wb") as f:
        f.write(b"not an image")
    with pytest.raises(lm.Error) as e:
        lm.load_image(os.fsdecode(bad))
    assert type(e.value) is lm.Error and "caf\\xe9.png" in str(e.value), str(e.value)


@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(scale_frames=0), ValueError, "scale_frames must be >= 1, got 0"),
    (dict(kv_window=0), ValueError, "kv_window must be >= 1, got 0"),
    (dict(camera_iterations=0), ValueError, "camera_iterations must be >= 1, got 0"),
    (dict(threads=-1), ValueError, "threads must be >= 0 (0 = all cores), got -1"),
    (dict(keyframe_interval=-1), ValueError, "keyframe_interval must be in 1..1000000 (or 0 = 'auto'), got -1"),
    (dict(keyframe_interval=2**31), ValueError,
     "keyframe_interval must be in 1..1000000 (or 0 = 'auto'), got 2147483648"),
    (dict(keyframe_interval=2**64), ValueError,
     "keyframe_interval must be in 1..1000000 (or 0 = 'auto'), got 18446744073709551616"),
    (dict(preprocess="pad"), ValueError, "preprocess= applies to run's preprocessing, which image_size= asks for: "
     "give image_size too (frames without it go in as they are)"),
    (dict(image_size=5012), ValueError, "image_size must be in 1..4096, got 5012"),
    (dict(max_special_frames=-1), ValueError, "max_special_frames must be in 0..1073741824 (0 = keep all), got -1"),
    # The engine's upper bounds (lingbot/session.h) are option values too: ValueError, its message.
    (dict(scale_frames=1025), ValueError, "scale_frames must be at most 1024, got 1025"),
    (dict(kv_window=2**21), ValueError, "kv_window must be at most 1048576, got 2097152"),
    (dict(camera_iterations=65), ValueError, "camera_iterations must be at most 64, got 65"),
    (dict(threads=5000), ValueError, "threads must be at most 4096, got 5000"),
    (dict(kv_backend="dense-full", max_special_frames=4), ValueError,
     "max_special_frames does not apply to the dense-full KV backend (it keeps every frame)"),
    (dict(kv_backend="dense-full", kv_window=8), ValueError,  # was silently ignored
     "kv_window does not apply to the dense-full KV backend (it keeps every frame)"),
    # An int its C++ parameter cannot hold: ValueError naming the argument (not pybind11's TypeError).
    (dict(scale_frames=2**40), ValueError, "scale_frames must fit in a 32-bit int (-2147483648..2147483647), got 1099511627776"),
    (dict(scale_frames=np.int64(2**40)), ValueError,
     "scale_frames must fit in a 32-bit int (-2147483648..2147483647), got 1099511627776"),
    (dict(threads=-2**70), ValueError,
     "threads must fit in a 32-bit int (-2147483648..2147483647), got -1180591620717411303424"),
    (dict(max_special_frames=2**63), ValueError,
     "max_special_frames must fit in a 64-bit int (-9223372036854775808..9223372036854775807), got 9223372036854775808"),
    (dict(keyframe_interval="every"), ValueError, "keyframe_interval must be 'auto', 'flow' or an interval >= 1, got 'every'"),
    (dict(keyframe_interval=True), TypeError, "keyframe_interval must be 'auto', 'flow' or an int >= 1, got bool"),
    (dict(keyframe_interval="flow", flow_threshold=0), ValueError, "flow_threshold must be a number > 0 (pixels), got 0.0"),
    (dict(keyframe_interval="flow", max_non_keyframe_gap=0), ValueError, "max_non_keyframe_gap must be >= 1, got 0"),
    (dict(kv_backend="flash"), ValueError, "unknown KV backend 'flash' (expected paged, dense or dense-full)"),
    (dict(kv_dtype="f64"), ValueError, "unknown dtype 'f64' (expected f32, f16 or bf16)"),
    (dict(image_size=100), ValueError, "image_size must be a multiple of the model's patch size 14, got 100"),
    (dict(image_size=0), ValueError, "image_size must be positive, got 0"),
    (dict(mode="zoom"), ValueError, "mode must be 'streaming' or 'windowed', got 'zoom'"),
    (dict(preprocess="zoom"), ValueError, "preprocess must be 'crop' or 'pad', got 'zoom'"),
    (dict(keyframe_interval=2, keyframes=2), ValueError, "give keyframe_interval or its old spelling keyframes, not both"),
    (dict(mode="pad", preprocess="crop"), ValueError,
     "mode='pad' (the old spelling of preprocess=) contradicts preprocess='crop'"),
    (dict(mode="pad", preprocess="pad"), ValueError, "give preprocess='pad' or its old spelling mode='pad', not both"),
    (dict(window_size=8), ValueError, "window_size only applies to mode='windowed'"),
    (dict(flow_threshold=3.0), ValueError, "flow_threshold only applies to keyframe_interval='flow'"),
    (dict(keyframe_interval=2, max_non_keyframe_gap=3), ValueError,
     "max_non_keyframe_gap only applies to keyframe_interval='flow'"),
    (dict(mode="windowed", scale_frames=2, window_size=4, overlap_size=3, keyframe_interval="flow"), ValueError,
     "window_size 4 must be at least overlap_size 3 + scale_frames 2 with keyframes chosen while running "
     "(keyframe_interval 'flow'), or consecutive windows would not overlap by it"),
    (dict(overlap_size=2), ValueError, "overlap_size only applies to mode='windowed'"),
    (dict(mode="windowed", overlap_size=2, overlap_keyframes=1), ValueError, "give overlap_size or overlap_keyframes, not both"),
    (dict(mode="windowed", overlap_size=-1), ValueError, "overlap_size must be >= 0, got -1"),
    (dict(mode="windowed", overlap_keyframes=0), ValueError,
     "overlap_keyframes must be >= 1 (the overlap is at least the scale frames; no overlap: overlap_size=0), got 0"),
    (dict(mode="windowed", scale_frames=8, window_size=8), ValueError,
     "window_size 8 must be larger than scale_frames 8: a window stores its scale frames plus at least one keyframe"),
    (dict(mode="windowed", scale_frames=2, window_size=6, overlap_size=6), ValueError,
     "overlap_size 6 must be smaller than a window (6 frames: scale_frames 2 + (window_size 6 - 2) keyframes x "
     "keyframe_interval 1)"),
    (dict(mode="windowed", scale_frames=2, window_size=4, overlap_keyframes=4, keyframe_interval=1), ValueError,
     "overlap_keyframes 4 (= 4 frames) must be smaller than a window (4 frames: scale_frames 2 + (window_size 4 - 2) "
     "keyframes x keyframe_interval 1)"),
    (dict(mode="windowed", scale_frames=1, window_size=3), ValueError,  # the default overlap is named too
     "overlap_size 16 must be smaller than a window (3 frames: scale_frames 1 + (window_size 3 - 1) keyframes x "
     "keyframe_interval 1)"),
])
def test_bad_options_raise_exact_messages(demo_model, kwargs, exc, message):
    with pytest.raises(exc) as e:
        lm.Session(demo_model, **kwargs)
    assert str(e.value) == message


def test_options_are_keyword_only(demo_model):
    with pytest.raises(TypeError) as e:
        lm.Session(demo_model, 8)
    assert str(e.value) == "Session() takes 1 positional argument but 2 were given"


@pytest.mark.parametrize("call, message", [
    (lambda m: lm.Session(m, scale_frame=2),
     "Session() got an unexpected keyword argument 'scale_frame' (did you mean 'scale_frames'?)"),
    (lambda m: lm.Session(m, colour=2), "Session() got an unexpected keyword argument 'colour'"),
    (lambda m: lm.Session(m, scale_frames=2).push(lm.demo_frame(0), sourc="a"),
     "Session.push() got an unexpected keyword argument 'sourc' (did you mean 'source'?)"),
    (lambda m: lm.Model.demo(sed=3), "Model.demo() got an unexpected keyword argument 'sed' (did you mean 'seed'?)"),
    (lambda m: lm.demo_frame(0, widht=112), "demo_frame() got an unexpected keyword argument 'widht' (did you mean 'width'?)"),
    (lambda m: lm.Session(), "Session() missing 1 required positional argument: 'model'"),
    (lambda m: lm.Session(m, scale_frames=2).push(), "Session.push() missing 1 required positional argument: 'frame'"),
    (lambda m: lm.select_points(), "select_points() missing 2 required positional arguments: 'world_points' and 'image'"),
    (lambda m: lm.demo_frame(0, 112, 70, 1), "demo_frame() takes 3 positional arguments but 4 were given"),
    (lambda m: lm.demo_frame(0, index=1), "demo_frame() got multiple values for argument 'index'"),
])
def test_call_mistakes_are_named_as_python_names_them(demo_model, call, message):
    """pybind11 answers a call it cannot match with every signature and never names the keyword."""
    with pytest.raises(TypeError) as e:
        call(demo_model)
    assert str(e.value) == message
    assert e.value.__context__ is None
    assert all(tb.tb_frame.f_code.co_filename != lm.__file__ for tb in traceback_of(e.value))  # adds no frame


def traceback_of(error):
    tb = error.__traceback__
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_an_int_out_of_its_parameters_range_is_a_value_error():
    with pytest.raises(ValueError) as e:
        lm.Model.demo(seed=-1)
    assert str(e.value) == "seed must fit in a 64-bit unsigned int (0..18446744073709551615), got -1"
    with pytest.raises(ValueError) as e:
        lm.demo_frame(2**63)
    assert str(e.value) == "index must fit in a 64-bit int (-9223372036854775808..9223372036854775807), got 9223372036854775808"
    with pytest.raises(ValueError) as e:
        lm.demo_frame(0, 2**31)  # positional: named by its place
    assert str(e.value) == "width must fit in a 32-bit int (-2147483648..2147483647), got 2147483648"


def test_demo_frame_refuses_a_frame_larger_than_push_takes_before_allocating():
    with pytest.raises(ValueError) as e:
        lm.demo_frame(0, 30000, 15000)
    assert str(e.value) == "demo_frame of 15000x30000 pixels (HxW) would be more than the 178956970 a frame may have"
    with pytest.raises(ValueError) as e:
        lm.demo_frame(0, 100000, 100000)
    assert str(e.value) == "demo_frame of 100000x100000 pixels (HxW) would be more than the 178956970 a frame may have"


def test_backends_and_kv_dtypes(demo_model):
    ref = run(demo_model, frames(4), scale_frames=2, kv_dtype="f32")
    for backend in ("dense", "dense-full"):
        other = run(demo_model, frames(4), scale_frames=2, kv_backend=backend, kv_dtype="f32")
        assert len(other) == len(ref) == 4
        for x, y in zip(ref, other):
            np.testing.assert_allclose(x.depth, y.depth, rtol=1e-4, atol=1e-4 * float(np.abs(x.depth).max()))
    # bf16 K/V: the storage rounding changes the results, within the bound accuracy_kv_dtype_test.cpp
    # asserts on the golden cases: one unit roundoff (2^-8) x max|f32 result| (measured here: depth
    # 0.045, w2c 0.17, world points 0.16 of it).
    half = run(demo_model, frames(4), scale_frames=2, kv_dtype="bf16")
    assert len(half) == len(ref) == 4
    for name in ("depth", "w2c", "world_points"):
        diff = max(float(np.abs(getattr(x, name) - getattr(y, name)).max()) for x, y in zip(ref, half))
        bound = 2.0**-8 * max(float(np.abs(getattr(x, name)).max()) for x in ref)
        assert 0 < diff <= bound, (name, diff, bound)
    assert lm.Session(demo_model, kv_dtype="bf16").options["kv_dtype"] == "bf16"
    # dense-full has no window: options says none (as summary.json), not the unused default
    assert lm.Session(demo_model, kv_backend="dense-full").options["kv_window"] is None
    assert lm.Session(demo_model, kv_backend="dense").options["kv_window"] == 64


def test_old_backend_keyword_still_works_with_a_deprecation_warning(demo_model):
    # docs/naming.md: backend= is the old spelling of kv_backend=.
    with pytest.warns(DeprecationWarning, match=re.escape("backend= is deprecated, use kv_backend=")):
        s = lm.Session(demo_model, backend="dense")
    assert s.options["kv_backend"] == "dense"
    s.close()
    with pytest.raises(ValueError, match=re.escape("give kv_backend or its old spelling backend, not both")):
        lm.Session(demo_model, kv_backend="dense", backend="dense")


def test_model_load_config_and_errors(tiny_model, tmp_path):
    from conftest import TINY
    cfg = tiny_model.config
    assert cfg["aggregator"]["depth"] == 4 and cfg["aggregator"]["selected_layers"] == [0, 1, 2, 3]
    assert cfg["kv_cache"]["cross_frame_special"] is True and cfg["encoder"]["ln_eps"] == pytest.approx(1e-6)
    assert tiny_model.patch_size == 14 and tiny_model.parameter_count == 1731628
    nested = lm.Model.load(TINY / "model.pt", config={"camera": {"num_iterations": 3}, "kv_cache.sliding_window": 5})
    assert nested.config["camera"]["num_iterations"] == 3 and nested.config["kv_cache"]["sliding_window"] == 5
    st = lm.Model.load(TINY / "weights.safetensors")
    assert st.config == cfg
    for path, config, exc, message in [
        (tmp_path / "missing.pt", None, lm.FileNotFound, f"model file not found: {tmp_path / 'missing.pt'}"),
        (TINY / "case.json", None, lm.Error,
         f"{TINY / 'case.json'}: unrecognised checkpoint format (neither a PyTorch zip checkpoint nor safetensors)"),
        (TINY / "model.pt", {"camera.bogus": 1}, lm.Error,
         "unknown config key 'camera.bogus' (see `lingbot-map inspect` for the list)"),
        (TINY / "model.pt", {"camera": {"num_iterations": "x"}}, lm.Error,
         "config camera.num_iterations: 'x' is not an integer"),
        (TINY / "model.pt", {"camera": {"num_iterations": None}}, TypeError,
         "config values must be bool, int, float, str or a list of numbers, got NoneType"),
        (TINY / "model.pt", [1], TypeError, "config must be a dict, got list"),
    ]:
        with pytest.raises(exc) as e:
            lm.Model.load(path, config=config)
        assert str(e.value) == message


def _cpu_has_native_bf16() -> bool:
    flags = open("/proc/cpuinfo").read()
    return " avx512_bf16" in flags or " amx_bf16" in flags


def test_defaults_match_lingbot_map_run():
    # docs/cli.md "Defaults": bf16 KV cache, weights 'auto' (bf16 where the CPU has a native bf16 GEMM);
    # the oracle for "native" is the CPU's flag list.
    from conftest import TINY
    model = lm.Model.load(TINY / "model.pt")
    assert model.weights_dtype == ("bf16" if _cpu_has_native_bf16() else "f32")
    assert lm.Model.load(TINY / "model.pt", weights_dtype="f32").weights_dtype == "f32"
    with lm.Session(model) as s:
        assert s.options["kv_dtype"] == "bf16"
    with pytest.raises(ValueError, match=re.escape("unknown weights dtype 'int8' (expected auto, f32, f16 or bf16)")):
        lm.Model.load(TINY / "model.pt", weights_dtype="int8")


def test_device_option_names_what_is_missing():
    # device= as run's --device: cpu by default; auto falls back to the CPU without a GPU; cuda
    # without a CUDA build (this one) or a GPU raises naming what is missing; unknown names raise.
    from conftest import TINY
    model = lm.Model.load(TINY / "model.pt", weights_dtype="f32")
    with lm.Session(model) as s:
        assert s.options["device"] == "cpu"
    with lm.Session(model, device="auto") as s:
        assert s.options["device"] in ("cpu", "cuda")
        cuda_visible = s.options["device"] == "cuda"
    if not cuda_visible:
        with pytest.raises(lm.Error, match=r"^device cuda: (this build has no CUDA support|no CUDA device is visible)"):
            lm.Session(model, device="cuda")
    with pytest.raises(ValueError, match=re.escape("unknown device 'gpu' (expected auto, cpu or cuda)")):
        lm.Session(model, device="gpu")
    # verify() takes the same option (and checks it before running the case).
    if not cuda_visible:
        with pytest.raises(lm.Error, match=r"^device cuda: "):
            lm.verify(TINY, device="cuda")
    assert lm.verify(TINY, device="auto" if not cuda_visible else "cpu")["passed"]
    # Model.load / demo take the Sessions' device for weights_dtype="auto" (run picks it for its
    # --device); checked the same way, before anything is loaded.
    assert lm.Model.load(TINY / "model.pt", device="cpu").weights_dtype == lm.Model.load(TINY / "model.pt").weights_dtype
    if not cuda_visible:
        for load in (lambda: lm.Model.load(TINY / "model.pt", device="cuda"), lambda: lm.Model.demo(device="cuda"),
                     lambda: lm.reconstruct([lm.demo_frame(0)], model=TINY / "model.pt", device="cuda")):
            with pytest.raises(lm.Error, match=r"^device cuda: (this build has no CUDA support|no CUDA device is visible)"):
                load()
    with pytest.raises(ValueError, match=re.escape("unknown device 'gpu' (expected auto, cpu or cuda)")):
        lm.Model.demo(device="gpu")


def test_frames_that_went_through_pickle_are_accepted(demo_model):
    """multiprocessing queues and process pools unpickle arrays with a dtype object of their own (and
    byte order is the caller's): any uint8 / float32 array is a frame."""
    import pickle
    def first_result(frame):
        with lm.Session(demo_model, scale_frames=1) as s:
            return s.push(frame)[0]
    u8 = lm.demo_frame(0)
    f32 = lm.preprocess(lm.demo_frame(0), 112)
    for frame in (u8, f32):
        want = first_result(frame)
        raw = np.frombuffer(b"\0" + frame.tobytes(), dtype=frame.dtype, offset=1)  # misaligned for float32
        for other in (pickle.loads(pickle.dumps(frame)), frame.astype(frame.dtype.newbyteorder(">")),
                      raw.reshape(frame.shape)):
            got = first_result(other)
            assert np.array_equal(got.depth, want.depth) and np.array_equal(got.c2w, want.c2w)
    pts, rgb = lm.select_points(pickle.loads(pickle.dumps(want.world_points)), pickle.loads(pickle.dumps(want.image)))
    assert pts.shape[1] == 3 and rgb.dtype == np.uint8


def test_config_key_given_twice_is_refused():
    from conftest import TINY
    with pytest.raises(ValueError, match=re.escape("config gives camera.num_iterations twice (as a dotted key and nested)")):
        lm.Model.load(TINY / "model.pt", config={"camera.num_iterations": 2, "camera": {"num_iterations": 3}})


def test_model_config_gives_the_defaults():
    """scale_frames, kv_window and camera_iterations left None come from the model's configuration
    (Model.load(config=...) is not silently overridden); a value given to the Session wins."""
    from conftest import TINY
    model = lm.Model.load(TINY / "model.pt", config={"kv_cache": {"scale_frames": 3, "sliding_window": 5},
                                                     "camera": {"num_iterations": 2}})
    with lm.Session(model) as s:
        o = s.options
        assert (o["scale_frames"], o["kv_window"], o["camera_iterations"]) == (3, 5, 2)
        rs = []
        for i in range(3):
            rs += s.push(lm.demo_frame(i))
        assert [r.frame_index for r in rs] == [0, 1, 2] and rs[0].pose_enc_iters.shape == (2, 9)
    with lm.Session(model, scale_frames=2, kv_window=3, camera_iterations=4) as s:
        assert (s.options["scale_frames"], s.options["kv_window"], s.options["camera_iterations"]) == (2, 3, 4)
    plain = lm.Model.load(TINY / "model.pt")
    it = lm.reconstruct(images=[lm.demo_frame(0)], model=plain, image_size=112)
    assert (it.options["scale_frames"], it.options["kv_window"], it.options["camera_iterations"]) == (8, 64, 4)


def test_numpy_integer_keyframe_interval(demo_model):
    with lm.Session(demo_model, keyframe_interval=np.int64(3)) as s:
        assert s.options["keyframe_policy"] == "interval 3"


def test_max_special_frames_bounds_a_long_stream(demo_model):
    """run's --max-special-frames: past the window + N stored frames the cache and camera cache stop
    growing; without it they grow by one frame's specials per stored frame."""
    def stats_after(n, **kw):
        with lm.Session(demo_model, scale_frames=2, kv_window=3, keyframe_interval=1, **kw) as s:
            for i in range(n):
                s.push(lm.demo_frame(i % 8))
            return s.stats(), s.options
    bounded_20, options = stats_after(20, max_special_frames=4)
    bounded_40, _ = stats_after(40, max_special_frames=4)
    assert options["max_special_frames"] == 4
    for key in ("bytes_reserved", "camera_cache_bytes", "special_tokens"):
        assert bounded_40[key] == bounded_20[key], key
    unbounded_20, options = stats_after(20)
    unbounded_40, _ = stats_after(40)
    assert options["max_special_frames"] == 0
    assert unbounded_40["special_tokens"] > unbounded_20["special_tokens"]
    assert unbounded_40["camera_cache_bytes"] > unbounded_20["camera_cache_bytes"]


RESULT_FIELDS = ("frame_index", "is_keyframe", "is_scale_frame", "frame_type", "flow", "rope_time_index", "window_index",
                 "source", "timestamp")
RESULT_ARRAYS = ("pose_enc", "pose_enc_iters", "c2w", "w2c", "K", "depth", "conf", "world_points", "image")


def _pool_worker(args):
    """Runs in a spawned process: the Model and the Results cross the pipe by pickle."""
    model, frame_list = args
    with lm.Session(model, scale_frames=2, kv_window=3, keyframe_interval=1, image_size=112) as s:
        out = []
        for f in frame_list:
            out += s.push(f)
        return out + s.finish()


def test_results_and_models_pickle(tmp_path):
    """Result pickles by value (every field and array); Model by reference (the checkpoint path, config
    overrides and weights dtype; unpickling loads the file again): a spawned process pool gives the
    same results as this process."""
    import multiprocessing
    import pickle
    from conftest import TINY
    model = lm.Model.load(TINY / "model.pt", config={"camera": {"num_iterations": 2}}, weights_dtype="f32")
    frame_list = [lm.load_image(p) for p in sorted((TINY / "frames").iterdir())[:5]]
    local = _pool_worker((model, frame_list))
    local[3] = next(iter(lm.reconstruct(images=frame_list, model=model, image_size=112, scale_frames=2,
                                        features=True, patch_tokens=True)))  # a Result with features too
    for r in local:
        back = pickle.loads(pickle.dumps(r))
        assert type(back) is lm.Result
        assert [getattr(back, f) for f in RESULT_FIELDS] == [getattr(r, f) for f in RESULT_FIELDS]
        for name in RESULT_ARRAYS + ("patch_tokens",):
            a, b = getattr(r, name), getattr(back, name)
            assert (a is None and b is None) or (a.dtype == b.dtype and a.tobytes() == b.tobytes()), name
        assert len(back.features) == len(r.features) and all(
            x.tobytes() == y.tobytes() for x, y in zip(back.features, r.features))
    assert local[3].features and local[3].patch_tokens is not None

    clone = pickle.loads(pickle.dumps(model))
    assert (clone.source, clone.weights_dtype, clone.config) == (model.source, "f32", model.config)
    assert clone.config["camera"]["num_iterations"] == 2
    demo = pickle.loads(pickle.dumps(lm.Model.demo(seed=7)))
    assert demo.source == "demo" and demo.config == lm.Model.demo(seed=7).config

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        remote = pool.map(_pool_worker, [(model, frame_list)])[0]
    want = _pool_worker((model, frame_list))
    assert [r.frame_index for r in remote] == [r.frame_index for r in want] == list(range(5))
    for a, b in zip(remote, want):
        assert a.depth.tobytes() == b.depth.tobytes() and a.c2w.tobytes() == b.c2w.tobytes()

    moved = tmp_path / "model.pt"
    moved.write_bytes((TINY / "model.pt").read_bytes())
    state = pickle.dumps(lm.Model.load(moved))
    moved.unlink()
    with pytest.raises(lm.FileNotFound, match="unpickling a Model loads its checkpoint again: model file not found: "):
        pickle.loads(state)


def test_every_frame_type_pickles(demo_model):
    """Scale frames, keyframes and non-keyframes (a keyframe interval above 1, as the automatic rule picks
    for long sequences) all go through pickle: a process pool or a joblib cache gets every Result."""
    import pickle
    with lm.Session(demo_model, scale_frames=2, kv_window=3, keyframe_interval=2) as s:
        out = [r for i in range(5) for r in s.push(lm.demo_frame(i))] + s.finish()
    assert [r.frame_type for r in out] == ["scale", "scale", "keyframe", "non-keyframe", "keyframe"]
    for r in out:
        back = pickle.loads(pickle.dumps(r))
        assert [getattr(back, f) for f in RESULT_FIELDS] == [getattr(r, f) for f in RESULT_FIELDS]


def test_a_crafted_pickle_is_refused_not_crashed_on(demo_model):
    """A Result unpickles from a tuple (its __reduce__): a field that is not a float32 array of its
    rank is a ValueError (repr and Exporter.write read the arrays' memory)."""
    import pickle
    with lm.Session(demo_model, scale_frames=1) as s:
        r = s.push(lm.demo_frame(0))[0]
    from_state, (state,) = r.__reduce__()
    state = list(state)
    arrays = list(state[10])
    for i, name, bad in ((5, "depth", 2), (5, "depth", [1.0, 2.0]), (7, "world_points", np.zeros((2, 2), np.float32)),
                         (0, "pose_enc", np.zeros(9, np.int32))):
        broken = list(arrays)
        broken[i] = bad
        crafted = state[:10] + [tuple(broken)] + state[11:]
        with pytest.raises(ValueError) as e:
            from_state(tuple(crafted))
        assert str(e.value).startswith(f"not a pickled lingbot_map.Result: {name} is not a "), str(e.value)
    back = pickle.loads(pickle.dumps(r))
    assert repr(back) == repr(r)


def test_a_pickle_of_something_else_is_a_value_error():
    for state, message in [
        (("x",) * 6, "not a pickled lingbot_map.Model of this version"),
        ((1, None, [], "s", "f32", "demo"), "not a pickled lingbot_map.Model: the seed is str, not int"),
        ((1, None, [], -1, "f32", "demo"), "not a pickled lingbot_map.Model: the seed -1 is not in 0..18446744073709551615"),
        ((1, None, [], 3, "f64", "demo"),
         "not a pickled lingbot_map.Model: weights dtype: unknown dtype 'f64' (expected f32, f16 or bf16)"),
        ((1, 5, [], 3, "f32", "demo"), "not a pickled lingbot_map.Model: the checkpoint path is int, not str"),
        ((1, "m.pt", [("a", 1)], 3, "f32", "m.pt"),
         "not a pickled lingbot_map.Model: a config override is not a (key, value) pair of str"),
    ]:
        with pytest.raises(ValueError) as e:
            lm._model_from_state(state)
        assert str(e.value) == message, state
    for state, message in [
        ((2,) * 13, "not a pickled lingbot_map.Result: is_keyframe is int, not bool"),
        ((2, 0, True, 0, 0.0, 0, 0, "s", 0.0, 1, 2, [], False),
         "not a pickled lingbot_map.Result: the arrays are int, not a tuple"),
        ((2, "0", True, 0, 0.0, 0, 0, "s", 0.0, 1, (None,) * 10, [], False),
         "not a pickled lingbot_map.Result: frame_index is str, not int"),
        ((2, 0, True, 0, 0.0, 0, 0, 7, 0.0, 1, (None,) * 10, [], False),
         "not a pickled lingbot_map.Result: source is int, not str"),
        ((2, 0, True, 0, 0.0, 0, 0, "s", 0.0, 1, (None,) * 10, 3, False),
         "not a pickled lingbot_map.Result: features is int, not a list"),
    ]:
        with pytest.raises(ValueError) as e:
            lm._result_from_state(state)
        assert str(e.value) == message, state


def test_config_sections_take_dicts():
    from conftest import TINY
    with pytest.raises(TypeError) as e:
        lm.Model.load(TINY / "model.pt", config={"kv_cache": 5})
    assert str(e.value) == "config section kv_cache must be a dict of its settings ({'kv_cache': {'<setting>': value}}), got int"
    with pytest.raises(TypeError) as e:
        lm.Model.load(TINY / "model.pt", config={"camera": {"num_iterations": {"x": 1}}})
    assert str(e.value) == "config value camera.num_iterations must be bool, int, float, str or a list of numbers, got dict"
    with pytest.raises(lm.Error) as e:  # a key the model has not: the engine's error
        lm.Model.load(TINY / "model.pt", config={"kv_caches": 5})
    assert str(e.value) == "unknown config key 'kv_caches' (see `lingbot-map inspect` for the list)"


def test_results_and_models_are_made_by_the_module_only(demo_model):
    """An instance made without its C++ value (Class.__new__(Class), as pickle's default protocol
    makes one before __setstate__) read unallocated memory: repr crashed the interpreter."""
    import copy
    for cls, makers in ((lm.Result, "Session.push(), finish() and reconstruct()"),
                        (lm.Model, "Model.load() and Model.demo()")):
        for make in (lambda: cls.__new__(cls), lambda: cls()):
            with pytest.raises(TypeError) as e:
                make()
            assert str(e.value) == f"lingbot_map.{cls.__name__} objects are made by {makers}, not constructed"
    assert not hasattr(lm.Result, "__setstate__") and not hasattr(lm.Model, "__setstate__")
    with lm.Session(demo_model, scale_frames=1) as s:
        r = s.push(lm.demo_frame(0))[0]
    shallow, deep = copy.copy(r), copy.deepcopy(r)
    assert repr(shallow) == repr(deep) == repr(r)
    assert shallow.depth is r.depth and deep.depth is not r.depth and deep.depth.tobytes() == r.depth.tobytes()
    assert repr(copy.deepcopy(demo_model)) == repr(demo_model)


def test_an_instance_made_without_init_is_refused_not_read(demo_model):
    """Session and Exporter need __init__; one made by __new__ alone
    has no C++ value, and pybind11 handed its methods uninitialised memory: repr read a 'closed' or a
    'busy' Session, or crashed. Every method and property now checks."""
    cases = ((lm.Session, "lingbot_map.Session(...)", ["__repr__", "push", "finish", "reset", "close", "stats"],
              ["options", "frames_pushed", "finished", "closed", "model", "windows"]),
             (lm.Exporter, "lingbot_map.Exporter(...)", ["write", "close", "report"], ["frames"]))
    # A Reconstruction cannot be made at all (reconstruct() makes it): not by __new__, not by calling the class,
    # which said pybind11's "No constructor defined!".
    for make in (lambda: lm.Reconstruction.__new__(lm.Reconstruction), lm.Reconstruction):
        with pytest.raises(TypeError) as e:
            make()
        assert str(e.value) == "lingbot_map.Reconstruction objects are made by lingbot_map.reconstruct(), not constructed"
    for cls, maker, methods, properties in cases:
        obj = cls.__new__(cls)
        want = f"this lingbot_map.{cls.__name__} was made by __new__ without __init__: make one with {maker}"
        with lm.Session(demo_model, scale_frames=1) as s:
            result = s.push(lm.demo_frame(0))[0]
        args = {"push": (lm.demo_frame(0),), "write": (result,)}
        for name in methods:
            with pytest.raises(TypeError) as e:
                getattr(obj, name)(*args.get(name, ()))
            assert str(e.value) == want, name
        for name in properties:
            with pytest.raises(TypeError) as e:
                getattr(obj, name)
            assert str(e.value) == want, name
        if hasattr(cls, "__exit__"):
            with pytest.raises(TypeError, match="was made by __new__ without __init__"):
                obj.__exit__(None, None, None)
    with pytest.raises(TypeError) as e:  # the unbound method with something else as self
        lm.Session.push(3, lm.demo_frame(0))
    assert str(e.value) == "lingbot_map.Session method called on 3"


def test_a_picture_of_another_size_after_preprocessing_is_named_as_such(demo_model):
    with lm.Session(demo_model, scale_frames=1, image_size=112) as s:
        s.push(np.zeros((200, 300, 3), np.uint8))
        with pytest.raises(lm.Error) as e:  # as the engine's own size error
            s.push(np.zeros((300, 200, 3), np.uint8))
        assert str(e.value) == (
            "frame 1 (300x200, HxW) preprocesses to 112x112 at image_size=112, but this sequence's frames preprocess "
            "to 70x112: a Session takes pictures of one size and orientation per sequence (reset() starts a new one; "
            "reconstruct() pads mixed sizes as upstream does)")
        assert s.frames_pushed == 1
        s.reset()
        assert len(s.push(np.zeros((300, 200, 3), np.uint8))) == 1


def test_arguments_take_what_their_annotations_say(demo_model):
    """A bool is no count and None or 1 no flag (pybind11 would take them as 1 / False / True);
    NumPy integers are ints."""
    for kwargs, message in ((dict(scale_frames=True), "scale_frames must be an int or None, got bool"),
                            (dict(threads=False), "threads must be an int, got bool"),
                            (dict(max_special_frames=True), "max_special_frames must be an int, got bool"),
                            (dict(image_size=True), "image_size must be an int or None, got bool"),
                            (dict(patch_tokens=None), "patch_tokens must be a bool, got NoneType"),
                            (dict(features=1), "features must be a bool, got int"),
                            (dict(threads=None), "threads must be an int, got NoneType"),
                            (dict(kv_dtype=None), "kv_dtype must be a str, got NoneType")):
        with pytest.raises(TypeError) as e:
            lm.Session(demo_model, **kwargs)
        assert str(e.value) == message
    # The argument is named, not every frame's repr (pybind11's message ran to megabytes for a list of frames).
    with pytest.raises(TypeError) as e:
        lm.reconstruct(images=[lm.demo_frame(0)] * 50, model=demo_model, stride=True)
    assert str(e.value) == "stride must be an int, got bool"
    for call, message in ((lambda: lm.Session(3), "model must be a lingbot_map.Model, got int"),
                          (lambda: lm.Exporter(None), "out must be a path (str or os.PathLike), got NoneType"),
                          (lambda: lm.Model.demo(seed="a"), "seed must be an int, got str"),
                          (lambda: lm.verify("x", only="depth"), "only must be a list of str or None, got str"),
                          (lambda: lm.Session(demo_model).push(lm.demo_frame(0), timestamp="x"),
                           "timestamp must be a number or None, got str")):
        with pytest.raises(TypeError) as e:
            call()
        assert str(e.value) == message
    for fraction in (2.5, np.float32(2.0)):  # a count is an integer: no truncation
        with pytest.raises(TypeError) as e:
            lm.Session(demo_model, scale_frames=fraction)
        assert str(e.value) == f"scale_frames must be an int or None, got {type(fraction).__name__}"
    with lm.Session(demo_model, scale_frames=np.int64(2), features=np.bool_(True)) as s:
        assert s.options["scale_frames"] == 2 and s.options["features"] is True


def test_timestamps_must_be_finite(demo_model):
    with lm.Session(demo_model, scale_frames=2) as s:
        for bad in (float("nan"), float("inf")):
            with pytest.raises(ValueError) as e:
                s.push(lm.demo_frame(0), timestamp=bad)
            assert str(e.value) == f"timestamp must be a finite number of seconds, got {bad}"
        # An int no float holds: named, not pybind11's dump of every signature and argument.
        for huge in (10**400, -(10**309), 10**5000):  # (str() of the last one raises: over 4300 digits)
            with pytest.raises(TypeError) as e:
                s.push(lm.demo_frame(0), timestamp=huge)
            assert str(e.value) == "timestamp must be a number a float can hold, got an int too large for one"
        assert s.push(lm.demo_frame(0), timestamp=0.0) == []  # the refused pushes left no frame
        assert len(s.finish()) == 1
    with pytest.raises(TypeError) as e:
        lm.Session(demo_model, keyframe_interval="flow", flow_threshold=10**309)
    assert str(e.value) == "flow_threshold must be a number a float can hold, got an int too large for one"


def test_repr_and_error_module(demo_model):
    s = lm.Session(demo_model, scale_frames=2)
    assert repr(s) == "<lingbot_map.Session streaming, 0 frames pushed>"
    s.push(lm.demo_frame(0))
    assert repr(s) == "<lingbot_map.Session streaming, 1 frame pushed>"
    s.finish()
    assert repr(s) == "<lingbot_map.Session streaming, 1 frame pushed, finished>"
    s.close()
    assert repr(s) == "<lingbot_map.Session closed>"
    assert lm.Error.__module__ == "lingbot_map"


def test_config_takes_numpy_values():
    from conftest import TINY
    m = lm.Model.load(TINY / "model.pt", {"kv_cache": {"scale_frames": np.int64(3)},
                                         "image_norm": {"mean": np.array([0.5, 0.5, 0.5])}})
    assert m.config["kv_cache"]["scale_frames"] == 3
    assert m.config["image_norm"]["mean"] == [0.5, 0.5, 0.5]


def test_a_frame_larger_than_any_image_is_refused_before_it_is_copied(demo_model):
    huge = np.broadcast_to(np.uint8(0), (2**31 + 14, 1, 3))  # no memory: every row is the same bytes
    with lm.Session(demo_model) as s:
        with pytest.raises(ValueError) as e:
            s.push(huge)
    assert str(e.value) == "frame has 2147483662x1 pixels (HxW), more than the 178956970 a frame may have"


def test_float_frames_refuse_preprocessing_options(demo_model):
    frames = [np.zeros((3, 70, 112), np.float32)] * 2
    for kwargs in (dict(image_size=224), dict(preprocess="pad")):
        with pytest.raises(ValueError) as e:
            lm.reconstruct(frames, model=demo_model, scale_frames=2, **kwargs)
        assert str(e.value) == ("image_size= and preprocess= preprocess uint8 frames; float32 frames are model inputs "
                                "already (give uint8 [H, W, 3] frames, or leave both unset)")
    rec = lm.reconstruct(frames, model=demo_model, scale_frames=2)
    assert rec.options["image_size"] is None and rec.options["preprocess"] is None
    assert [r.depth.shape for r in rec] == [(70, 112), (70, 112)]


def test_a_config_value_a_session_cannot_take_names_the_config_key():
    """Model.load(config=) takes values the Session refuses; the error names the config key, not a
    keyword the caller never gave, and the keyword overrides it."""
    from conftest import TINY
    for cfg, message in (
            ({"kv_cache": {"sliding_window": 0}},
             "the model config's kv_cache.sliding_window is 0, outside the 1..1048576 a Session takes: give kv_window= "
             "(or a config with another value)"),
            ({"camera": {"num_iterations": 100}},
             "the model config's camera.num_iterations is 100, outside the 1..64 a Session takes: give "
             "camera_iterations= (or a config with another value)")):
        m = lm.Model.load(TINY / "model.pt", config=cfg)
        with pytest.raises(ValueError) as e:
            lm.Session(m)
        assert str(e.value) == message
        with pytest.raises(ValueError) as e:
            lm.reconstruct(images=[lm.demo_frame(0)], model=m)
        assert str(e.value) == message
        with lm.Session(m, kv_window=3, camera_iterations=2) as s:
            assert (s.options["kv_window"], s.options["camera_iterations"]) == (3, 2)


def test_a_request_that_cannot_fit_in_memory_is_refused_up_front():
    """As run: a KV window and frame size no machine holds fail before any frame, naming the keyword
    to lower (an allocation failure frames later, or the OOM killer ending the interpreter, before)."""
    from conftest import TINY
    m = lm.Model.load(TINY / "model.pt")
    # More than the machine's memory and swap: the pool alone could not be reserved.
    advice = " of memory and swap: lower kv_window= or scale_frames= (the KV cache keeps the window's and the scale frames) or image_size="
    with pytest.raises(lm.Error) as e:
        lm.reconstruct(images=TINY / "frames", model=m, kv_window=1048576, image_size=4088, scale_frames=2)
    assert str(e.value).startswith("the reconstruction needs at least ") and str(e.value).endswith(advice), str(e.value)
    with lm.Session(m, kv_window=1048576, scale_frames=2) as s:
        with pytest.raises(lm.Error) as e:
            s.push(np.zeros((3, 4088, 4088), np.float32))
        assert str(e.value).startswith("the reconstruction needs at least ") and str(e.value).endswith(advice)
        assert s.frames_pushed == 0


def test_a_result_is_a_value(demo_model):
    """A probe edited r.depth in place and the Exporter wrote the edit (and c2w stopped being w2c's
    inverse); features was the Result's own list, so a cleared one made its pickle unloadable. The
    arrays are read-only, also after unpickling, and features is a new list on each access."""
    import pickle
    with lm.Session(demo_model, scale_frames=1, features=True, patch_tokens=True) as s:
        r = s.push(lm.demo_frame(0))[0]
    for back in (r, pickle.loads(pickle.dumps(r))):
        for name in ("pose_enc", "pose_enc_iters", "c2w", "w2c", "K", "depth", "conf", "world_points", "image",
                     "patch_tokens", "source_K"):
            a = getattr(back, name)
            assert not a.flags.writeable, name
            with pytest.raises(ValueError, match="read-only"):
                a[...] = 0
        assert back.features and all(not f.flags.writeable for f in back.features)
        back.features.clear()
        assert len(back.features) > 0


def test_a_second_init_on_a_live_object_is_refused(demo_model, tmp_path):
    """pybind11 ignores __init__ on an object already made: s.__init__(model, scale_frames=3) would
    leave the old session as it was without a word. It raises, for Session and Exporter, subclasses too."""
    s = lm.Session(demo_model, scale_frames=1)
    with pytest.raises(TypeError) as e:
        s.__init__(demo_model, scale_frames=3)
    assert str(e.value) == "Session.__init__ was already called on this Session: make a new Session"
    assert s.options["scale_frames"] == 1

    class Mine(lm.Session):
        def __init__(self, model):
            super().__init__(model, scale_frames=2)

    mine = Mine(demo_model)
    assert mine.options["scale_frames"] == 2
    with pytest.raises(TypeError) as e:
        lm.Session.__init__(mine, demo_model)
    assert str(e.value) == "Mine.__init__ was already called on this Mine: make a new Mine"  # the runtime type
    assert mine.options["scale_frames"] == 2  # left as it was
    with lm.Exporter(tmp_path / "a") as x:
        with pytest.raises(TypeError) as e:
            x.__init__(tmp_path / "b")
        assert str(e.value) == "Exporter.__init__ was already called on this Exporter: make a new Exporter"
    assert not (tmp_path / "b").exists()
    # Every new object initializes as usual (one made where a dropped one was included).
    for _ in range(50):
        assert lm.Session(demo_model, scale_frames=3).options["scale_frames"] == 3


def test_a_pil_image_is_refused_saying_how_to_pass_it(demo_model):
    from PIL import Image
    with lm.Session(demo_model, scale_frames=2) as s, pytest.raises(TypeError) as e:
        s.push(Image.new("RGB", (W, H)))
    assert str(e.value) == (FRAME_ERROR + 'Image (np.asarray(image.convert("RGB")) gives the uint8 array; '
                            "lingbot_map.load_image(path) reads a file as Pillow and upstream do)")


def test_frames_left_without_results_are_warned_about(demo_model):
    """A stream shorter than scale_frames gives its results at finish(): closing without it lost them in
    silence (a probe's five frames pushed, `del s`, nothing)."""
    lost = r"lingbot_map.Session closed with frames 0 to 2 pushed and no result for them: call finish\(\) first"
    s = lm.Session(demo_model, scale_frames=8)
    for i in range(3):
        assert s.push(lm.demo_frame(i)) == []
    with pytest.warns(RuntimeWarning, match=lost):
        s.close()
    with pytest.warns(RuntimeWarning, match=r"closed with frame 0 pushed and no result for it"):
        with lm.Session(demo_model, scale_frames=8) as s:
            s.push(lm.demo_frame(0))
    with lm.Session(demo_model, scale_frames=8) as s:  # one Session, several clips: reset() between them
        s.push(lm.demo_frame(0))
        s.push(lm.demo_frame(1))
        with pytest.warns(RuntimeWarning, match=r"Session reset with frames 0 to 1 pushed and no result for them"):
            s.reset()
        assert s.frames_pushed == 0
        s.push(lm.demo_frame(0))
        assert len(s.finish()) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with lm.Session(demo_model, scale_frames=8) as s:  # finished: nothing lost
            s.push(lm.demo_frame(0))
            assert len(s.finish()) == 1
        with pytest.raises(KeyError), lm.Session(demo_model, scale_frames=8) as s:  # the exception says it
            s.push(lm.demo_frame(0))
            raise KeyError("the caller's error")
        s = lm.Session(demo_model, scale_frames=8)
        s.push(lm.demo_frame(0))
        with pytest.raises(RuntimeWarning):  # -W error: raised, and the Session is closed all the same
            s.close()
        assert s.closed


def test_upstream_names_say_where_they_went_and_repr_names_the_frame_type(demo_model):
    with lm.Session(demo_model, scale_frames=1) as s:
        (scale,) = s.push(lm.demo_frame(0))
        (kept,) = s.push(lm.demo_frame(1))
    assert repr(scale) == "<lingbot_map.Result frame 0 scale 112x70>"  # said "keyframe" for a scale frame
    assert repr(kept) == "<lingbot_map.Result frame 1 keyframe 112x70>"
    for name, now in [("extrinsic", "w2c ([3, 4] world -> camera; c2w is its inverse)"),
                      ("intrinsic", "K ([3, 3], in the model input's pixels; source_K in the picture's)"),
                      ("depth_conf", "conf ([H, W])"), ("images", "image ([3, H, W], one frame)")]:
        with pytest.raises(AttributeError) as e:
            getattr(scale, name)
        assert str(e.value) == f"'Result' object has no attribute '{name}': upstream's {name} is Result.{now}"
    assert not hasattr(scale, "nothing") and getattr(scale, "nothing", 7) == 7


def test_a_session_freed_by_the_cycle_collector_warns_too(demo_model):
    # The collector frees the engine (tp_clear) before the destructor runs: the warning came or not
    # depending on the order the collector took (a review finding).
    class Holder:
        pass

    holder = Holder()
    holder.session = lm.Session(demo_model, scale_frames=8, progress=lambda info: holder)  # a cycle
    holder.session.push(lm.demo_frame(0))
    with pytest.warns(RuntimeWarning, match=r"Session garbage-collected with frame 0 pushed and no result for it"):
        del holder
        gc.collect()
