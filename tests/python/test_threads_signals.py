"""The GIL is released while the engine computes (another Python thread runs meanwhile), a second
thread using the same Session is refused instead of racing, and Ctrl-C raises KeyboardInterrupt at
the next frame boundary of reconstruct() with no frame lost."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import lingbot_map as lm
from conftest import BUILD

BIG = dict(width=224, height=140)  # 16 x 10 patches: a push takes long enough to observe
BUSY = ("this Session is already running a call (one call at a time: from another thread, or from this call's progress "
        "callback; use one Session per thread)")


def test_other_python_thread_runs_while_a_frame_computes(demo_model):
    """A spinning thread records timestamps; with the GIL held during push() it could not run at all
    in the middle of the push (CPython hands the GIL over only between bytecodes), so a stamp in the
    middle half of a push proves the GIL was released there."""
    stamps, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.monotonic())

    with lm.Session(demo_model, scale_frames=1, threads=1) as s:
        s.push(lm.demo_frame(0, **BIG))  # scale phase + warm-up
        t = threading.Thread(target=spin)
        t.start()
        intervals = []
        try:
            for i in range(1, 4):
                t0 = time.monotonic()
                s.push(lm.demo_frame(i, **BIG))
                intervals.append((t0, time.monotonic()))
        finally:
            stop.set()
            t.join()
    inside = 0
    for t0, t1 in intervals:
        q = (t1 - t0) / 4
        inside += sum(1 for x in stamps if t0 + q <= x <= t1 - q)
    assert inside > 0, f"no other-thread activity during {len(intervals)} pushes of {[b - a for a, b in intervals]} s"


class _Poller:
    """A thread calling each of `reads` in turn until stopped, keeping the lingbot_map.Error messages."""

    def __init__(self, *reads, pause=0.001):
        self.errors, self._done = [], threading.Event()

        def poll():
            while not self._done.is_set():
                for read in reads:
                    try:
                        read()
                    except lm.Error as e:
                        self.errors.append(str(e))
                time.sleep(pause)

        self._thread = threading.Thread(target=poll)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


def test_second_thread_on_the_same_session_is_refused(demo_model):
    refused = threading.Event()

    def hold(progress):  # the push waits (GIL released) until the other thread has met it
        refused.wait(timeout=60)

    with lm.Session(demo_model, scale_frames=1, threads=1, progress=hold) as s:
        def second_call():
            try:
                s.push(None)
            except TypeError:  # no call running: the frame is refused, nothing pushed
                pass
            except lm.Error:
                refused.set()
                raise

        with _Poller(second_call) as poller:
            for i in range(4):
                s.push(lm.demo_frame(i, **BIG))
        errors = poller.errors
        assert s.stats()["frames_completed"] == 4  # the session was not disturbed
        # A CPU session holds no device memory.
        assert s.stats()["device_peak_bytes"] is None and s.stats()["device_kv_cache_bytes"] is None
    assert errors, "the polling thread never ran while a push was computing"
    assert set(errors) == {BUSY}


def test_readers_answer_from_another_thread_while_a_push_runs(demo_model):
    """stats(), options, windows, frames_pushed, finished and repr answer while a push computes, with the
    figures of the push's start (they were refused: a monitor thread or a UI could not show
    frames_pushed during a scale phase that runs minutes)."""
    seen, met = [], threading.Event()

    def read():
        seen.append((s.frames_pushed, s.stats()["frames_completed"], s.options["scale_frames"], s.windows,
                     s.finished, repr(s)))
        if seen[-1][5].endswith(", a call running>"):
            met.set()

    def hold(progress):  # the push waits (GIL released) until the other thread has read during it
        met.wait(timeout=60)

    with lm.Session(demo_model, scale_frames=2, threads=1, progress=hold) as s:
        with _Poller(read) as poller:
            for i in range(5):
                s.push(lm.demo_frame(i, **BIG))
        assert not poller.errors
        assert (s.frames_pushed, s.stats()["frames_completed"]) == (5, 5)
    assert any(r[5].endswith(", a call running>") for r in seen), "the polling thread never ran during a push"
    for pushed, completed, scale_frames, windows, finished, text in seen:
        assert 0 <= completed <= pushed <= 5 and scale_frames == 2 and windows is None and not finished
        assert text.startswith(f"<lingbot_map.Session streaming, {pushed} frame")
    pushed = [r[0] for r in seen]
    assert pushed == sorted(pushed)


def test_reading_an_exporter_while_another_thread_writes_is_refused(demo_model, tmp_path):
    """report() and frames read what write() changes with the GIL released: a call meanwhile is refused
    (they raced before: the GLB export's staged points were read while write() replaced them)."""
    with lm.Session(demo_model, scale_frames=1, threads=1) as s:
        results = [r for i in range(6) for r in s.push(lm.demo_frame(i, **BIG))]
    errors = []
    for attempt in range(50):  # until the poller has met a write (a loaded machine may not schedule it)
        with lm.Exporter(tmp_path / str(attempt), export="depth,ply,glb,npz") as ex:
            with _Poller(ex.report, lambda: ex.frames, pause=0.0005) as poller:
                for r in results:
                    ex.write(r)
            errors += poller.errors
            assert ex.frames == 6 and ex.report()["ply"]["points"] > 0
        if errors:
            break
    assert errors, "the polling thread never ran while a write was going on"
    assert set(errors) == {"this Exporter is already running a call in another thread (use one object per thread)"}


@pytest.mark.parametrize("kind", ["Session", "reconstruct() iterator"])
def test_a_progress_callback_calling_back_into_its_object_is_refused(demo_model, kind):
    """The same guard, on the same thread: the message names the callback too (it said "in another
    thread", which sent a probe looking for threads). Its readers answer, with the figures of the call's
    start (they were refused too)."""
    seen, read, obj = [], [], []

    def progress(p):
        if not seen:
            with pytest.raises(lm.Error) as e:
                obj[0].push(frames[0]) if kind == "Session" else next(obj[0])
            seen.append(str(e.value))
            read.append((obj[0].stats()["frames_completed"], obj[0].options["scale_frames"], obj[0].windows))

    frames = [lm.demo_frame(i) for i in range(2)]
    if kind == "Session":
        with lm.Session(demo_model, scale_frames=2, threads=1, progress=progress) as s:
            obj.append(s)
            for f in frames:
                s.push(f)
            assert s.stats()["frames_completed"] == 2
        assert seen == [BUSY]
    else:
        obj.append(lm.reconstruct(images=frames, model=demo_model, scale_frames=2, threads=1, progress=progress))
        assert len(list(obj[0])) == 2
        assert seen == [BUSY.replace("this Session", "this reconstruct() iterator").replace("one Session", "one iterator")]
    assert read == [(0, 2, None)]  # during the scale phase: no frame completed at its start


# The child installs Python's own SIGINT handler: a process started in the background by a shell
# without job control inherits SIGINT ignored, and Python then keeps it ignored.
CHILD = r"""
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, sys.argv[1])
import lingbot_map as lm
frames = [lm.demo_frame(i, width=224, height=140) for i in range(40)]
it = lm.reconstruct(images=frames, model=lm.Model.demo(), image_size=224, scale_frames=2, threads=1)
got = []
try:
    for r in it:
        got.append(r.frame_index)
        print("frame", r.frame_index, flush=True)
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print("interrupted after", len(got), flush=True)
    rest = [r.frame_index for r in it]  # the iterator is still usable: nothing lost, nothing repeated
    print("resumed", got + rest == list(range(40)), len(rest), flush=True)
"""


def start_child(tmp_path, name, script):
    """Runs `script` in a new interpreter with the module's build folder as its argument."""
    child = tmp_path / name
    child.write_text(script)
    return subprocess.Popen([sys.executable, str(child), str(BUILD / "python")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_ctrl_c_raises_keyboard_interrupt_at_the_next_frame(tmp_path):
    proc = start_child(tmp_path, "child.py", CHILD)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("frame 3"):
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    lines += out.split("\n")
    assert proc.returncode == 0, err
    interrupted = [ln for ln in lines if ln.startswith("interrupted after")]
    assert interrupted, "\n".join(lines) + err
    n = int(interrupted[0].split()[-1])
    assert 4 <= n < 40  # raised while frames remained, not at the end
    # A KeyboardInterrupt raised inside reconstruct()'s iterator (the engine was computing when the
    # signal came) leaves every result in the iterator; one raised in the caller's own loop code, in
    # the microseconds between two frames, is Python's and may drop that one result.
    resumed = [ln for ln in lines if ln.startswith("resumed")]
    assert resumed, "\n".join(lines)
    assert resumed[0] == f"resumed True {40 - n}" or int(resumed[0].split()[-1]) == 40 - n - 1, resumed[0]


# The children below send themselves SIGINT (as a terminal's Ctrl-C does, to the process) from a
# thread that first observes the main thread inside the step meant: a delay guessed from this
# machine's speed would land before the step on a slow one and after it on a fast one.
# armed(): the engine's own SIGINT handler is installed, which happens only around a scale phase's
# nogil block (python/src/interrupts.cpp, CtrlCStopsTheStep) with the default Python handler.
# in_a_push(obj): obj's repr says a call is running and the main thread's innermost Python
# frame is the script's own, so it is in the engine, not in Python code the call made. The watcher
# holds the GIL whenever it looks, so the main thread is then in the step's nogil block.
WATCHER = r"""
import ctypes
import os
import signal
import sys
import threading
import time
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, sys.argv[1])
import lingbot_map as lm

_libc = ctypes.CDLL(None, use_errno=True)


def sigint_handler_address():
    buf = ctypes.create_string_buffer(512)  # larger than any libc's struct sigaction; the handler comes first on Linux
    if _libc.sigaction(signal.SIGINT, None, buf) != 0:
        raise OSError(ctypes.get_errno(), "sigaction")
    return ctypes.c_void_p.from_buffer(buf).value


PYTHON_HANDLER = sigint_handler_address()


def armed():
    return sigint_handler_address() != PYTHON_HANDLER


def in_a_push(obj):
    if not repr(obj).endswith(", a call running>"):
        return False
    return sys._current_frames()[threading.main_thread().ident].f_code.co_filename == __file__


def ctrl_c_when(inside):
    def watch():
        while not inside():
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=watch, daemon=True).start()
"""


def run_child(tmp_path, name, script) -> tuple[list, str]:
    """Runs a child to its end (it must succeed); returns its output lines and all its output."""
    proc = start_child(tmp_path, name, WATCHER + script)
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    return out.split("\n"), out + err


# A scale phase is one engine step that can take minutes on a CPU: Ctrl-C during it stops it at its
# next block (SessionOptions::stop), KeyboardInterrupt comes then, and the iteration ends (the
# session holds part of a step). Before, KeyboardInterrupt waited for the whole scale phase and then
# every result came after all.
CHILD_SCALE_PHASE = r"""
frames = [lm.demo_frame(i, width=448, height=336) for i in range(20)]
it = lm.reconstruct(images=frames, model=lm.Model.demo(), image_size=448, scale_frames=16, threads=1)
ctrl_c_when(armed)  # armed only while the push of frame 15 runs the scale phase
try:
    got = [r.frame_index for r in it]
    print("NOT INTERRUPTED", len(got), flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    print("after", [r.frame_index for r in it], flush=True)


# Pushes 15 frames, then the frame that runs the scale phase (interrupted).
def interrupted_scale_phase(name, **options):
    s = lm.Session(lm.Model.demo(), scale_frames=16, threads=1, **options)
    for f in frames[:15]:
        s.push(f)
    ctrl_c_when(armed)
    try:
        s.push(frames[15])
        print("NOT INTERRUPTED " + name, flush=True)
    except KeyboardInterrupt:
        print(name + " interrupted", s.finished, s.frames_pushed, flush=True)
        return s


s = interrupted_scale_phase("session")
if s is not None:
    try:
        s.push(frames[0])
    except lm.Error as e:
        print("closed:", e, flush=True)
    s.reset()
    print("reset", len(s.push(frames[0])), flush=True)
interrupted_scale_phase("windowed", mode="windowed", window_size=20, overlap_size=1)
"""


def test_ctrl_c_stops_a_scale_phase_at_once(tmp_path):
    lines, text = run_child(tmp_path, "child_scale.py", CHILD_SCALE_PHASE)
    assert "interrupted" in lines, text
    assert "after []" in lines, text  # no result: the scale phase was stopped, the iteration ended
    # finished (closed) says the step was stopped, not run to its end with KeyboardInterrupt raised
    # after it. frames_pushed counts frame 15 once the session took it (its encoder ran): 15 when the
    # stop came before that, 16 after; the watcher cannot see which, and both are the documented state.
    for mode in ("session", "windowed"):
        assert mode + " interrupted True 15" in lines or mode + " interrupted True 16" in lines, text
    assert ("closed: the session has ended its sequence at a step that failed or was stopped (call reset() to "
            "start a new one)") in lines, text
    assert "reset 0" in lines, text


CHILD_WINDOWED_SCALE_PHASE = r"""
frames = [lm.demo_frame(i, width=448, height=336) for i in range(18)]
s = lm.Session(lm.Model.demo(), scale_frames=16, threads=1, mode="windowed", window_size=17, overlap_size=16)
got = []
for f in frames[:17]:
    got += s.push(f)  # window 0: its scale phase, then frame 16
print("window 1 begins", s.frames_pushed, flush=True)
ctrl_c_when(armed)
try:
    got += s.push(frames[17])  # re-feeds 16 frames: window 1's scale phase
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print("interrupted", s.finished, s.frames_pushed, flush=True)
    got += s.finish_early()
    print("frames", [r.frame_index for r in got], flush=True)
"""


def test_ctrl_c_stops_a_later_windows_scale_phase_at_once(tmp_path):
    """mode='windowed': the push that begins a window runs its scale phase; Ctrl-C stops it at once,
    and finish_early() returns what window 0 held back for the overlap."""
    lines, text = run_child(tmp_path, "child_windowed.py", CHILD_WINDOWED_SCALE_PHASE)
    assert "window 1 begins 17" in lines, text
    # Stopped, not run to its end: the windowed session closed (reset() reopens it). The stop came in
    # the scale phase of the 16 re-fed frames, before frame 17 was taken (its encoder runs after it).
    assert "interrupted True 17" in lines, text
    assert "frames " + str(list(range(17))) in lines, text  # window 0's rows, its overlap tail included


# A program with its own SIGINT handler decides what Ctrl-C does: a scale phase runs to its end and
# returns its results. With Python's default handler, Ctrl-C during a streamed push raises
# KeyboardInterrupt as that push returns, and its result is not lost: finish_early() returns it.
CHILD_RESULTS_KEPT = r"""
frames = [lm.demo_frame(i, width=448, height=336) for i in range(18)]
asked = []
signal.signal(signal.SIGINT, lambda *a: asked.append(1))
s = lm.Session(lm.Model.demo(), scale_frames=16, threads=1)
got = []
for f in frames[:15]:
    got += s.push(f)
ctrl_c_when(lambda: in_a_push(s))  # the engine's handler is not installed here: armed() stays False
got += s.push(frames[15])  # the scale phase
print("custom handler", len(asked), [r.frame_index for r in got] == list(range(16)), flush=True)
signal.signal(signal.SIGINT, signal.default_int_handler)
ctrl_c_when(lambda: in_a_push(s))
try:
    for i in range(200):
        got += s.push(frames[16 + i % 2])
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    got += s.finish_early()
    print("kept", s.frames_pushed > 16, [r.frame_index for r in got] == list(range(s.frames_pushed)), flush=True)
# Closed after such a KeyboardInterrupt without finish_early(): the held results are lost, and a
# warning says so (it was silent: only frames pushed without results were warned about).
s = lm.Session(lm.Model.demo(), scale_frames=1, threads=1)
s.push(frames[0])  # the scale phase: Ctrl-C there would stop the step instead
ctrl_c_when(lambda: in_a_push(s))
try:
    for i in range(200):
        s.push(frames[i % 2])
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    n = s.frames_pushed
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s.close()
    print("warned", [str(x.message) for x in w] == [f"lingbot_map.Session closed with the results of frame {n - 1} "
          "computed and not returned (a KeyboardInterrupt was raised in their place): call finish_early() first, "
          "which returns it"], [str(x.message) for x in w], flush=True)
"""


def test_ctrl_c_with_a_programs_own_handler_or_during_a_push_loses_no_result(tmp_path):
    lines, text = run_child(tmp_path, "child_kept.py", CHILD_RESULTS_KEPT)
    assert "custom handler 1 True" in lines, text
    assert "kept True True" in lines, text
    assert any(line.startswith("warned True") for line in lines), text


CHILD_FORKED = r"""
import multiprocessing as mp
import sys
sys.path.insert(0, sys.argv[1])
import lingbot_map as lm

def work(threads, q):
    try:
        with lm.Session(lm.Model.demo(), scale_frames=1, threads=threads) as s:
            q.put(("ok", len(s.push(lm.demo_frame(0)))))
    except lm.Error as e:
        q.put(("error", str(e)))

with lm.Session(lm.Model.demo(), scale_frames=1, threads=2) as s:
    s.push(lm.demo_frame(0))  # this process has run OpenMP threads
ctx = mp.get_context("fork")
for threads in (2, 1):
    q = ctx.Queue()
    p = ctx.Process(target=work, args=(threads, q))
    p.start()
    p.join(120)
    if p.exitcode is None:
        p.kill()  # hung: do not leave it behind
    print("child", threads, p.exitcode, q.get(timeout=5) if p.exitcode == 0 else "hung", flush=True)
"""


def test_a_forked_child_refuses_threads_instead_of_hanging(tmp_path):
    proc = start_child(tmp_path, "child_fork.py", CHILD_FORKED)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    lines = out.splitlines()
    assert lines[0] == ("child 2 0 ('error', \"this process was forked from one that had run lingbot_map on several "
                        "threads, and OpenMP's threads would hang here: start worker processes with multiprocessing's "
                        "'spawn' or 'forkserver' method (multiprocessing.get_context('spawn')), or use threads=1 in "
                        "this process\")"), out + err
    assert lines[1] == "child 1 0 ('ok', 1)", out + err


# Interpreter exit while a daemon thread is inside an engine step (the GIL released): exit() destroyed
# oneDNN's and OpenMP's globals under the step, a segfault (rc -11, in about half the runs). Now the
# module's atexit hook stops the step at its next block and waits for it; the thread is then parked
# until the process ends, so the exit is clean and quiet. The main thread exits once repr() says a
# call runs (no progress callback: one would take the GIL, and the step would wait in it).
EXIT_IN_A_STEP = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import lingbot_map as lm
frames = [lm.demo_frame(i, width=640, height=480) for i in range(8)]
s = lm.Session(lm.Model.demo(), scale_frames=2, image_size=518, threads=2)
threading.Thread(target=lambda: [s.push(f) for f in frames], daemon=True).start()
while "a call running" not in repr(s) or s.frames_pushed < int(sys.argv[2]):
    time.sleep(0.001)
print("exiting in a step", flush=True)
"""


@pytest.mark.parametrize("pushed", [1, 3])  # in the scale phase's push, in a later frame's
def test_exit_while_a_daemon_thread_is_in_a_step_is_clean(tmp_path, pushed):
    script = tmp_path / "exit_in_a_step.py"
    script.write_text(EXIT_IN_A_STEP)
    for _ in range(4):  # before the fix about half the runs crashed: 4 runs catch it 15 times in 16
        proc = subprocess.run([sys.executable, str(script), str(BUILD / "python"), str(pushed)], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "2"})
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "exiting in a step\n", "")


# The exit begins while a progress callback is in a call of its own (made without the GIL, nested in
# the step's): that call ends as usual, then the step stops and its thread parks (the nested call
# parked before: its outer step never ended, and the exit waited 30 s, then went on under the step).
EXIT_IN_A_CALLBACK = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import lingbot_map as lm
frames = [lm.demo_frame(i, width=640, height=480) for i in range(8)]
in_callback = threading.Event()
def progress(p):
    if p["frames"] == 1 and not in_callback.is_set():
        in_callback.set()
        lm.demo_frame(0, width=4088, height=4088)  # long enough for the exit to begin meanwhile
s = lm.Session(lm.Model.demo(), scale_frames=2, image_size=518, threads=2, progress=progress)
threading.Thread(target=lambda: [s.push(f) for f in frames], daemon=True).start()
in_callback.wait(600)
print("exiting in a step", flush=True)
"""

# A child forked while a daemon thread of the parent is in a step: the child has no such thread, and
# its exit does not wait for it (it waited 30 s for the parent's count, and said so).
FORK_IN_A_STEP = r"""
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import lingbot_map as lm
frames = [lm.demo_frame(i, width=640, height=480) for i in range(8)]
s = lm.Session(lm.Model.demo(), scale_frames=2, image_size=518, threads=1)
threading.Thread(target=lambda: [s.push(f) for f in frames], daemon=True).start()
while "a call running" not in repr(s) or s.frames_pushed < 3:
    time.sleep(0.001)
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # the child's exit runs the module's hook
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), time.monotonic() - t0 < 10, flush=True)
"""


@pytest.mark.parametrize("name, script, want", [
    ("callback", EXIT_IN_A_CALLBACK, "exiting in a step\n"),
    ("fork", FORK_IN_A_STEP, "child 0 True\n")])
def test_exit_with_a_nested_call_or_after_a_fork_does_not_wait(tmp_path, name, script, want):
    path = tmp_path / f"{name}.py"
    path.write_text(script)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(path), str(BUILD / "python")], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, want, "")
    assert time.monotonic() - t0 < 25  # not the hook's 30 s wait


# Calls from the exiting thread itself after the module's hook (an atexit hook registered before the
# import, a finalizer) run as usual: a Session, and an Exporter closed there writes its files (the
# first version refused them, and an Exporter closed there lost its scene.glb).
ATEXIT_CALL = r"""
import atexit, pathlib, sys
sys.path.insert(0, sys.argv[1])
out = pathlib.Path(sys.argv[2])
def late():
    import lingbot_map as lm
    with lm.Session(lm.Model.demo(), scale_frames=1) as s, lm.Exporter(out, export="poses,glb") as e:
        e.write(s.push(lm.demo_frame(0))[0])
    print("ran", sorted(p.name for p in out.iterdir()), flush=True)
atexit.register(late)
import lingbot_map
"""


def test_calls_from_a_later_atexit_hook_run(tmp_path):
    script = tmp_path / "atexit_call.py"
    script.write_text(ATEXIT_CALL)
    proc = subprocess.run([sys.executable, str(script), str(BUILD / "python"), str(tmp_path / "out")],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ran ['poses.json', 'scene.glb']\n", "")
