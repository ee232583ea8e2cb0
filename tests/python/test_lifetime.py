"""Object lifetime in a long-lived process (a notebook, a server): what a dropped Session or
reconstruct() iterator held is freed, including through a progress callback that refers back to it
(a reference cycle only the garbage collector can break), and an iterator that has ended frees its
KV cache while it is still referenced. Memory is read from glibc's allocator (mallinfo2: bytes in use,
heap and mmap), which is exact where RSS moves by pages."""
import ctypes
import gc
import os
import subprocess
import sys
import weakref

import pytest

import lingbot_map as lm
from conftest import BUILD


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def heap_bytes() -> int:
    """Bytes the C allocator has handed out and not got back (small blocks + mmapped blocks)."""
    info = _libc.mallinfo2()
    return info.uordblks + info.hblkhd


FRAMES = [lm.demo_frame(i) for i in range(4)]
OPTIONS = dict(scale_frames=2, kv_window=2, threads=1)


def test_a_progress_callback_that_refers_back_does_not_keep_a_dropped_session_alive(demo_model):
    def make():
        s = lm.Session(demo_model, progress=lambda d: s, **OPTIONS)  # a closure over s: a cycle
        for f in FRAMES:
            s.push(f)
        return weakref.ref(s)

    class Job:  # a bound method of an object that holds the Session: the other common cycle
        def __init__(self):
            self.session = lm.Session(demo_model, progress=self.tick, **OPTIONS)

        def tick(self, d):
            pass

    refs = [make()]
    job = Job()
    for f in FRAMES:
        job.session.push(f)
    refs.append(weakref.ref(job.session))
    del job
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_a_progress_callback_that_refers_back_does_not_keep_a_dropped_iterator_alive(demo_model):
    class Job:
        def __init__(self):
            self.it = lm.reconstruct(images=FRAMES, model=demo_model, progress=self.tick, **OPTIONS)

        def tick(self, d):
            pass

    job = Job()
    next(job.it)  # mid-iteration: the engine still holds the callback
    ref = weakref.ref(job.it)
    del job
    gc.collect()
    assert ref() is None


def test_session_model_does_not_keep_the_session_alive(demo_model):
    s = lm.Session(demo_model, **OPTIONS)
    s.push(FRAMES[0])
    model = s.model
    ref = weakref.ref(s)
    with pytest.warns(RuntimeWarning, match=r"Session garbage-collected with frame 0 pushed and no result for it"):
        del s
        gc.collect()
    assert ref() is None
    assert model.patch_size == demo_model.patch_size and model.config == demo_model.config  # still usable


def test_an_ended_iterator_frees_its_cache_and_callback_and_still_reports(demo_model):
    calls = []

    def progress(d):
        calls.append(d)

    it = lm.reconstruct(images=[lm.demo_frame(i, 448, 448) for i in range(3)], model=demo_model, image_size=448,
                        kv_window=8, scale_frames=2, threads=1, progress=progress)
    results = [next(it) for _ in range(3)]  # every frame, but the iteration has not ended yet
    stats, options = it.stats(), it.options
    reserved = stats["bytes_reserved"]
    assert reserved > 8 * 2**20  # a cache big enough to see in the allocator's figures
    held = sys.getrefcount(progress)
    gc.collect()
    before = heap_bytes()
    with pytest.raises(StopIteration):
        next(it)
    gc.collect()
    freed = before - heap_bytes()
    assert freed >= 0.9 * reserved, (freed, reserved)  # while `it` is still referenced
    assert sys.getrefcount(progress) == held - 1  # the engine's reference to the callback is gone
    assert it.stats() == stats and it.options == options and len(results) == 3 and calls
    assert it.finish_early() == [] and "finished" in repr(it)
    with pytest.raises(StopIteration):
        next(it)


def test_an_ended_iterator_lets_go_of_its_input(demo_model, tmp_path):
    """The frames a list gave (the iterator holds them in a tuple) and a video's decoder are freed when
    the iteration ends or finish_early() runs; damage, frame_count and image_size still answer."""
    frames = [lm.demo_frame(i) for i in range(3)]
    held = [sys.getrefcount(f) for f in frames]
    it = lm.reconstruct(images=frames, model=demo_model, **OPTIONS)
    assert [sys.getrefcount(f) for f in frames] == [h + 1 for h in held]
    size = it.image_size
    assert len(list(it)) == 3
    assert [sys.getrefcount(f) for f in frames] == held
    assert it.frame_count == 3 and it.image_size == size and it.damage is None

    it = lm.reconstruct(images=frames, model=demo_model, **OPTIONS)
    next(it)
    it.finish_early()
    assert [sys.getrefcount(f) for f in frames] == held

    from test_cli_equivalence import write_y4m  # an uncompressed stream: its decoder holds frame buffers
    video = tmp_path / "clip.y4m"
    write_y4m(video, [lm.demo_frame(i, 640, 480) for i in range(3)])

    def freed_at_the_end(**source):  # heap bytes freed when the iteration ends, and the iterator
        it = lm.reconstruct(model=demo_model, **source, **OPTIONS)
        results = [next(it) for _ in range(3)]  # every frame, but the iteration has not ended yet
        gc.collect()
        before = heap_bytes()
        with pytest.raises(StopIteration):
            next(it)
        gc.collect()
        return before - heap_bytes(), results, it

    # The same frames from a list and from the video: the cache goes at the end in both; the video's
    # run frees its decoder's buffers too (a decoder never freed passed the check on `del it` below).
    pictures = [lm.demo_frame(i, 640, 480) for i in range(3)]  # held here: not freed with the iteration
    from_list, _, _ = freed_at_the_end(images=pictures)
    from_video, results, it = freed_at_the_end(video=video, fps=0)
    assert from_video - from_list >= 640 * 480 * 3, (from_video, from_list)  # at least a frame of 8-bit RGB
    assert len(results) == 3 and it.damage is None and it.frame_count is None and "finished" in repr(it)
    gc.collect()
    before = heap_bytes()
    del it
    gc.collect()
    assert before - heap_bytes() < 64 * 1024  # nothing big was left to free


def test_finish_early_frees_the_cache_and_returns_the_tail_first(demo_model):
    it = lm.reconstruct(images=[lm.demo_frame(i, 448, 448) for i in range(12)], model=demo_model, image_size=448,
                        mode="windowed", window_size=5, overlap_size=2, scale_frames=2, kv_window=3, threads=1)
    first = [next(it) for _ in range(4)]
    reserved = it.stats()["bytes_reserved"]
    gc.collect()
    before = heap_bytes()
    tail = it.finish_early()  # the rows computed and held back for the overlap come first
    gc.collect()
    assert before - heap_bytes() >= 0.9 * reserved
    assert [r.frame_index for r in first + tail] == list(range(len(first) + len(tail))) and tail
    assert it.windows and it.stats()["bytes_reserved"] == reserved  # the figures of the last step


def test_a_collection_while_a_subclass_instance_is_made_is_safe():
    """The first instance of a Python subclass allocates its type cache after the object exists and
    before pybind11 lays out its C++ value: a collection there visited an instance with nothing to
    read, and crashed. Run in a child so that a crash fails this test, not the whole run."""
    code = "\n".join([
        "import gc, lingbot_map as lm",
        "class MySession(lm.Session): pass",
        "gc.set_threshold(1)",
        "s = MySession(lm.Model.demo(), scale_frames=2, threads=1)",
        "s.me = s  # a subclass instance has a __dict__: a cycle through it is collected too",
        "ref = __import__('weakref').ref(s)",
        "del s",
        "MySession.__new__(MySession)",  # an instance without its C++ value (a Reconstruction cannot be made so)
        "gc.collect()",
        "assert ref() is None",
        "print('ok')",
    ])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(BUILD / "python")))
    assert (proc.returncode, proc.stdout) == (0, "ok\n"), proc.stderr
