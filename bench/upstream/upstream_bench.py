#!/usr/bin/env python3
"""Time upstream's PyTorch LingBot-Map (an upstream checkout given with --upstream) on the CPU.

Builds upstream's streaming model (the class demo.py builds for --mode streaming, with the
constructor arguments demo.py passes, SDPA backend) at full size with seeded random weights,
checks its state_dict against the released checkpoint's manifest, and streams random frames the
way upstream's streaming inference does: the scale frames as one batch, then one frame per
forward through the KV cache. It prints a per-push table (process CPU and wall ms, CPU ms per
phase, peak RSS) and one `summary: key=value ...` line; compare.sh puts that next to
`lingbot-map bench model` for the same settings.

Nothing from upstream is part of this project: the harness only imports the checkout.
"""

import argparse
import gc
import json
import os
import resource
import sys
import time
import types

GIB = float(1 << 30)
PHASES = ("encoder", "frame_blocks", "global_blocks", "camera", "dpt")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--upstream", required=True,
                   help="upstream checkout (the directory holding lingbot_map/ and demo.py)")
    p.add_argument("--resolution", default="224", choices=("224", "518"),
                   help="224: 224x224; 518: 518 wide x 378 high (as lingbot-map bench model)")
    p.add_argument("--frames", type=int, default=3, help="frames pushed in total (> --scale-frames)")
    p.add_argument("--scale-frames", type=int, default=2, help="scale frames (one batched forward)")
    p.add_argument("--kv-window", type=int, default=64, help="KV cache sliding window (frames)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads and torch.set_num_interop_threads")
    p.add_argument("--dtype", default="f32", choices=("f32", "bf16"),
                   help="f32: demo.py on the CPU; bf16: demo.py's GPU recipe on the CPU "
                        "(aggregator cast to bf16 under autocast, heads in f32)")
    p.add_argument("--camera-iterations", type=int, default=4, help="camera head refinement iterations")
    p.add_argument("--seed", type=int, default=1, help="random weights / frames seed")
    p.add_argument("--manifest", default=None,
                   help="state_dict manifest to check against (default: shared/golden/full-size-manifest.json "
                        "beside or above the project, if found)")
    p.add_argument("--calibrate", default="on", choices=("on", "off"),
                   help="time one linear 1005x1024->4096 in the run's dtype (GFLOP per CPU-second)")
    p.add_argument("--summary-out", default=None, help="also write the summary line to this file")
    a = p.parse_args(argv)
    if a.scale_frames < 1:
        p.error("--scale-frames must be >= 1")
    if a.frames <= a.scale_frames:
        p.error("--frames must exceed --scale-frames")
    if a.threads < 1:
        p.error("--threads must be >= 1")
    return a


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return "/".join(f.read().split()[:3])
    except OSError:
        return "na"


def proc_status_bytes(field):
    """A kB field of /proc/self/status ("VmHWM", "VmRSS") in bytes, or None where unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def vm_hwm_bytes():
    """Peak RSS (VmHWM) in bytes; resettable through clear_refs."""
    b = proc_status_bytes("VmHWM")
    return b if b is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def vm_rss_bytes():
    b = proc_status_bytes("VmRSS")
    return b if b is not None else 0


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def blas_libraries():
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if any(s in base for s in ("blas", "mkl", "lapack", "dnnl", "mkldnn")):
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    return sorted(libs)


def blas_name(libs):
    names = [os.path.basename(x) for x in libs]
    for pick in (lambda n: "openblas" in n or "mkl" in n, lambda n: "blas" in n):
        for n in names:
            if pick(n):
                return n
    return "na"


def openblas_threads(libs):
    """openblas_get_num_threads() of the OpenBLAS mapped into the process, or None."""
    import ctypes
    for path in libs:
        if "openblas" in os.path.basename(path):
            try:
                return int(ctypes.CDLL(path).openblas_get_num_threads())
            except (OSError, AttributeError):
                return None
    return None


# --------------------------------------------------------------------------------------------
# Stubs for what torch 1.13 / this machine lacks (installed before upstream is imported).
# --------------------------------------------------------------------------------------------

SDPA_CHUNK_SCORES = 64 << 20  # attention scores per query-row chunk (256 MB in f32)


def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """Math attention softmax(Q K^T * scale + mask) V, in query-row chunks to bound memory.

    Same contract as torch 2's F.scaled_dot_product_attention for what upstream passes: a bool
    mask (True = attend) or an additive float mask, broadcastable to [..., L, S]; is_causal
    (top-left aligned). The softmax is taken in f32 and cast back to the inputs' dtype.
    """
    import math
    import torch
    if dropout_p:
        raise NotImplementedError("scaled_dot_product_attention stub: dropout_p > 0")
    L, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    sc = scale if scale is not None else 1.0 / math.sqrt(D)
    kt = key.transpose(-2, -1)
    out = torch.empty(query.shape[:-1] + (value.shape[-1],), dtype=value.dtype, device=query.device)
    batch_elems = max(1, query[..., 0, 0].numel())
    rows = max(1, min(L, SDPA_CHUNK_SCORES // max(1, batch_elems * S)))
    for r0 in range(0, L, rows):
        r1 = min(L, r0 + rows)
        s = torch.matmul(query[..., r0:r1, :] * sc, kt)
        if attn_mask is not None:
            m = attn_mask[..., r0:r1, :] if attn_mask.shape[-2] != 1 else attn_mask
            if m.dtype == torch.bool:
                s = s.masked_fill(~m, float("-inf"))
            else:
                s = s + m
        if is_causal:
            causal = torch.ones(r1 - r0, S, dtype=torch.bool, device=query.device).tril(diagonal=r0)
            s = s.masked_fill(~causal, float("-inf"))
        p = torch.softmax(s.float(), dim=-1).to(value.dtype)
        out[..., r0:r1, :] = torch.matmul(p, value)
    return out


def install_stubs(log):
    import torch
    import torch.nn.functional as F

    if not hasattr(F, "scaled_dot_product_attention"):
        F.scaled_dot_product_attention = _sdpa_math
        log("stub: torch.nn.functional.scaled_dot_product_attention (torch %s lacks it) = math attention "
            "softmax(QK^T*scale + mask)V in query-row chunks, bool/float attn_mask, is_causal; softmax in f32"
            % torch.__version__)

    if not hasattr(torch, "compiler") or not hasattr(getattr(torch, "compiler"), "cudagraph_mark_step_begin"):
        mod = getattr(torch, "compiler", None) or types.ModuleType("torch.compiler")
        mod.cudagraph_mark_step_begin = lambda: None
        torch.compiler = mod
        sys.modules.setdefault("torch.compiler", mod)
        log("stub: torch.compiler.cudagraph_mark_step_begin = no-op (only marks CUDA-graph steps)")

    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        attn = sys.modules.get("torch.nn.attention")
        if attn is None:
            attn = types.ModuleType("torch.nn.attention")
            sys.modules["torch.nn.attention"] = attn
            torch.nn.attention = attn
        flex = types.ModuleType("torch.nn.attention.flex_attention")

        class BlockMask:  # type annotation only on the streaming path
            pass

        def create_mask(*a, **k):
            raise NotImplementedError("flex_attention stub: create_mask is not on the streaming path")

        flex.BlockMask = BlockMask
        flex.create_mask = create_mask
        attn.flex_attention = flex
        sys.modules["torch.nn.attention.flex_attention"] = flex
        log("stub: torch.nn.attention.flex_attention (BlockMask, create_mask raising; imported, not used by streaming)")

    def missing(name):
        try:
            __import__(name)
            return False
        except ImportError:
            return True

    try:
        import typing
        import typing_extensions
        if not hasattr(typing_extensions, "List"):
            typing_extensions.List = typing.List
            log("stub: typing_extensions.List = typing.List (this typing_extensions predates it)")
    except ImportError:
        m = types.ModuleType("typing_extensions")
        import typing
        m.List = typing.List
        sys.modules["typing_extensions"] = m
        log("stub: typing_extensions with List = typing.List")

    if missing("einops"):
        m = types.ModuleType("einops")

        def rearrange(*a, **k):
            raise NotImplementedError("einops stub")

        m.rearrange = rearrange
        sys.modules["einops"] = m
        log("stub: einops (rearrange raising; imported by layers/attention.py, not called)")

    if missing("huggingface_hub"):
        m = types.ModuleType("huggingface_hub")

        class PyTorchModelHubMixin:  # only adds hub save/load methods
            pass

        m.PyTorchModelHubMixin = PyTorchModelHubMixin
        sys.modules["huggingface_hub"] = m
        log("stub: huggingface_hub.PyTorchModelHubMixin = empty mixin (hub save/load only)")

    if missing("tqdm"):
        m = types.ModuleType("tqdm")
        auto = types.ModuleType("tqdm.auto")

        class tqdm:  # progress bar: iterate, print nothing
            def __init__(self, iterable=None, *a, **k):
                self.iterable = iterable if iterable is not None else []

            def __iter__(self):
                return iter(self.iterable)

            def update(self, *a, **k):
                pass

            def close(self):
                pass

            def set_postfix(self, *a, **k):
                pass

            @staticmethod
            def write(s, *a, **k):
                print(s)

        auto.tqdm = tqdm
        m.tqdm = tqdm
        m.auto = auto
        sys.modules["tqdm"] = m
        sys.modules["tqdm.auto"] = auto
        log("stub: tqdm / tqdm.auto.tqdm = silent pass-through iterator")

    if missing("scipy"):
        scipy = types.ModuleType("scipy")
        spatial = types.ModuleType("scipy.spatial")
        transform = types.ModuleType("scipy.spatial.transform")

        class Rotation:
            def __init__(self, *a, **k):
                raise NotImplementedError("scipy stub")

        transform.Rotation = Rotation
        spatial.transform = transform
        scipy.spatial = spatial
        sys.modules.update({"scipy": scipy, "scipy.spatial": spatial, "scipy.spatial.transform": transform})
        log("stub: scipy.spatial.transform.Rotation raising (imported by utils/geometry.py, not on the forward)")


# --------------------------------------------------------------------------------------------
# Phase timing
# --------------------------------------------------------------------------------------------

class PhaseTimer:
    """Process-CPU and wall seconds per phase, from forward pre-/post-hooks on the phase modules."""

    def __init__(self):
        self.cpu = {p: 0.0 for p in PHASES}
        self.wall = {p: 0.0 for p in PHASES}
        self._open = {}

    def attach(self, module, phase):
        key = id(module)

        def pre(mod, inputs):
            self._open[key] = (time.process_time(), time.perf_counter())

        def post(mod, inputs, output):
            c0, w0 = self._open.pop(key)
            self.cpu[phase] += time.process_time() - c0
            self.wall[phase] += time.perf_counter() - w0

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)

    def snapshot(self):
        return dict(self.cpu), dict(self.wall)


# --------------------------------------------------------------------------------------------

def find_manifest(explicit):
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    d = here
    for _ in range(6):
        for cand in (os.path.join(d, "shared", "golden", "full-size-manifest.json"),):
            if os.path.isfile(cand):
                return cand
        d = os.path.dirname(d)
    return None


def check_manifest(model, path, log):
    """Compares state_dict names, shapes and dtypes with the manifest; returns 'match' / 'differ' / 'skipped'."""
    if not path:
        log("manifest: skipped (no full-size-manifest.json found; pass --manifest FILE)")
        return "skipped", 0
    with open(path) as f:
        man = json.load(f)
    want = {t["name"]: (tuple(t["shape"]), t.get("dtype", "float32")) for t in man["tensors"]}
    sd = model.state_dict()
    have = {k: (tuple(v.shape), str(v.dtype).replace("torch.", "")) for k, v in sd.items()}
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    shape = sorted(k for k in set(want) & set(have) if want[k][0] != have[k][0])
    dtype = sorted(k for k in set(want) & set(have) if want[k][0] == have[k][0] and want[k][1] != have[k][1])
    elements = sum(v.numel() for v in sd.values())
    if not (missing or extra or shape or dtype):
        log("manifest: all %d state_dict keys match %s (names, shapes, dtypes; %d elements)"
            % (len(want), path, elements))
        return "match", len(want)
    log("manifest: state_dict differs from %s: %d missing, %d unexpected, %d shape, %d dtype differences"
        % (path, len(missing), len(extra), len(shape), len(dtype)))
    for k in missing[:20]:
        log("  missing:    %s %s" % (k, want[k]))
    for k in extra[:20]:
        log("  unexpected: %s %s" % (k, have[k]))
    for k in shape[:20]:
        log("  shape:      %s manifest %s model %s" % (k, want[k][0], have[k][0]))
    for k in dtype[:20]:
        log("  dtype:      %s manifest %s model %s" % (k, want[k][1], have[k][1]))
    return "differ", len(want)


def calibrate(torch, dtype, threads):
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(1)
    a = torch.randn(1005, 1024, generator=g).to(dtype)
    w = torch.randn(4096, 1024, generator=g).to(dtype)
    F.linear(a, w)
    flop = 2.0 * 1005 * 1024 * 4096
    n = 3
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        F.linear(a, w)
    dc, dw = (time.process_time() - c0) / n, (time.perf_counter() - w0) / n
    return flop / dw / 1e9, flop / dc / 1e9


def main(argv=None):
    a = parse_args(argv)

    def log(s):
        print(s, flush=True)

    load_start = load_average()
    t_start = time.perf_counter()

    # torch.set_num_threads does not reach a BLAS that torch was not built against by name (Debian's
    # torch uses the generic libblas.so.3, often OpenBLAS with its own thread pool): pin it by the
    # environment, read when the library loads with torch.
    pinned = []
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        if os.environ.get(var) != str(a.threads):
            pinned.append("%s=%d (was %s)" % (var, a.threads, os.environ.get(var, "unset")))
            os.environ[var] = str(a.threads)
    import torch
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(a.threads)
    except RuntimeError as e:  # only settable before the first inter-op work
        log("warning: set_num_interop_threads(%d): %s" % (a.threads, e))
    log("torch %s (%s), threads %d intra-op / %d inter-op"
        % (torch.__version__, torch.__file__, torch.get_num_threads(), torch.get_num_interop_threads()))

    if pinned:
        log("threads: environment %s" % ", ".join(pinned))
    install_stubs(log)

    up = os.path.abspath(a.upstream)
    if not os.path.isdir(os.path.join(up, "lingbot_map")):
        sys.exit("error: --upstream %s has no lingbot_map/ (an upstream checkout or extracted copy)" % up)
    sys.path.insert(0, up)
    # Same module demo.py's load_model imports for --mode streaming.
    from lingbot_map.models.gct_stream import GCTStream  # noqa: E402

    if a.resolution == "224":
        W, H = 224, 224
    else:
        W, H = 518, 378
    S, F_total = a.scale_frames, a.frames
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32

    # ---- model: demo.py's GCTStream(...) arguments, SDPA backend (the only one without flashinfer) ----
    torch.manual_seed(a.seed)
    tb = time.perf_counter()
    model = GCTStream(
        img_size=518,            # demo.py --image_size default; sets the pos_embed size of the checkpoint
        patch_size=14,
        enable_3d_rope=True,
        max_frame_num=1024,
        kv_cache_sliding_window=a.kv_window,
        kv_cache_scale_frames=S,
        kv_cache_cross_frame_special=True,
        kv_cache_include_scale_frames=True,
        use_sdpa=True,
        camera_num_iterations=a.camera_iterations,
    )
    model = model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    build_s = time.perf_counter() - tb
    log("model: upstream GCTStream (%s), %.3f G parameters, random weights (torch.manual_seed(%d)) built in %.1f s"
        % (sys.modules[GCTStream.__module__].__file__, n_params / 1e9, a.seed, build_s))
    manifest_result, _ = check_manifest(model, find_manifest(a.manifest), log)

    if dtype != torch.float32:
        # demo.py: on a bf16 device the aggregator is cast and the whole inference runs under autocast;
        # gct_base._predict_* upcast the tokens and run each head with (CUDA) autocast disabled, so the
        # heads keep f32 weights. On the CPU the autocast that upstream disables is the CPU one: the heads
        # are wrapped to disable it here, which is what upstream's code does on its GPU.
        model.aggregator = model.aggregator.to(dtype=dtype)
        for name in ("camera_head", "depth_head", "point_head", "local_point_head"):
            head = getattr(model, name, None)
            if head is None:
                continue
            fwd = head.forward

            def no_autocast(*args, _fwd=fwd, **kw):
                with torch.autocast("cpu", enabled=False):
                    return _fwd(*args, **kw)

            head.forward = no_autocast
        log("dtype bf16: aggregator cast to bfloat16, every forward under torch.autocast('cpu', bfloat16); "
            "camera/DPT heads f32 with CPU autocast disabled (upstream disables CUDA autocast there)")
    else:
        log("dtype f32: demo.py's CPU dtype (no autocast)")

    timer = PhaseTimer()
    agg = model.aggregator
    timer.attach(agg.patch_embed, "encoder")
    for b in agg.frame_blocks:
        timer.attach(b, "frame_blocks")
    for b in agg.global_blocks:
        timer.attach(b, "global_blocks")
    if model.camera_head is not None:
        timer.attach(model.camera_head, "camera")
    if model.depth_head is not None:
        timer.attach(model.depth_head, "dpt")

    gen = torch.Generator().manual_seed(a.seed + 1)
    images = torch.rand(1, F_total, 3, H, W, generator=gen)  # [B, S, 3, H, W] in [0, 1]

    cal = None
    if a.calibrate == "on":
        cal = calibrate(torch, dtype, a.threads)
        log("calibration: %s linear 1005x1024->4096: %.1f GFLOP/s wall, %.1f GFLOP per CPU-second"
            % (a.dtype, cal[0], cal[1]))
    libs = blas_libraries()
    log("libraries: %s" % (", ".join(libs) if libs else "none found in /proc/self/maps"))
    blas_threads = openblas_threads(libs)
    if blas_threads is not None:
        log("openblas threads: %d" % blas_threads)
        if blas_threads != a.threads:
            log("warning: OpenBLAS runs %d threads, not %d" % (blas_threads, a.threads))

    gc.collect()
    rss_weights = vm_rss_bytes()
    build_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    reset_ok = reset_peak_rss()
    log("rss after build: %.2f GiB (build peak %.2f GiB); peak RSS %s"
        % (rss_weights / GIB, build_peak / GIB, "reset before streaming" if reset_ok else "NOT reset (no clear_refs)"))

    # ---- stream: inference_streaming's call sequence (keyframe_interval 1, as demo.py for <= 320 frames) ----
    log("stream: %dx%d, %d frames: %d scale frames in one forward, then %d single-frame forwards; kv window %d"
        % (W, H, F_total, S, F_total - S, a.kv_window))
    rows = []
    finite = True
    kept = {"pose_enc": [], "depth": [], "depth_conf": []}
    ctx_dtype = dtype
    with torch.no_grad():
        model.clean_kv_cache()
        pushes = [(0, S)] + [(i, i + 1) for i in range(S, F_total)]
        for f0, f1 in pushes:
            n = f1 - f0
            x = images[:, f0:f1]
            cpu0, wall0 = timer.snapshot()
            c0, w0 = time.process_time(), time.perf_counter()
            torch.compiler.cudagraph_mark_step_begin()
            if ctx_dtype != torch.float32:
                with torch.autocast("cpu", dtype=ctx_dtype):
                    o = model.forward(x, num_frame_for_scale=S, num_frame_per_block=n, causal_inference=True)
            else:
                o = model.forward(x, num_frame_for_scale=S, num_frame_per_block=n, causal_inference=True)
            dc, dw = time.process_time() - c0, time.perf_counter() - w0
            cpu1, wall1 = timer.snapshot()
            for k in kept:
                if k in o:
                    kept[k].append(o[k])
                    finite = finite and bool(torch.isfinite(o[k]).all())
            del o
            row = {"push": f1, "frames": n, "wall_ms": 1e3 * dw, "cpu_ms": 1e3 * dc,
                   "rss": vm_rss_bytes(), "peak_rss": vm_hwm_bytes()}
            for p in PHASES:
                row[p + "_ms"] = 1e3 * (cpu1[p] - cpu0[p])
                row[p + "_wall_ms"] = 1e3 * (wall1[p] - wall0[p])
            row["other_ms"] = row["cpu_ms"] - sum(row[p + "_ms"] for p in PHASES)
            rows.append(row)
            print("  push %d/%d: %d frame(s), %.0f ms wall, %.0f ms CPU, peak RSS %.2f GiB"
                  % (f1, F_total, n, row["wall_ms"], row["cpu_ms"], row["peak_rss"] / GIB), file=sys.stderr, flush=True)

    peak = vm_hwm_bytes()
    load_end = load_average()

    # ---- table ----
    hdr = "%-8s %5s %4s %9s %9s %8s %8s %8s %7s %7s %7s %9s" % (
        "config", "push", "res", "wall ms", "CPU ms", "encoder", "frameblk", "globblk", "camera", "dpt", "other",
        "peak GiB")
    log(hdr)
    cfg = "up_" + a.dtype
    for r in rows:
        log("%-8s %5d %4d %9.0f %9.0f %8.0f %8.0f %8.0f %7.0f %7.0f %7.0f %9.2f" % (
            cfg, r["push"], r["frames"], r["wall_ms"], r["cpu_ms"], r["encoder_ms"], r["frame_blocks_ms"],
            r["global_blocks_ms"], r["camera_ms"], r["dpt_ms"], r["other_ms"], r["peak_rss"] / GIB))

    streamed = rows[1:]
    def mean(key):
        return sum(r[key] for r in streamed) / len(streamed)

    log("%s: %.0f ms CPU / %.0f ms wall per frame after the scale phase (mean of %d), scale phase %.0f ms CPU, "
        "peak RSS %.2f GiB, outputs %s" % (cfg, mean("cpu_ms"), mean("wall_ms"), len(streamed), rows[0]["cpu_ms"],
                                           peak / GIB, "finite" if finite else "NOT finite"))

    s = [
        ("impl", "upstream"),
        ("torch", torch.__version__),
        ("dtype", a.dtype),
        ("resolution", a.resolution),
        ("size", "%dx%d" % (W, H)),
        ("frames", str(F_total)),
        ("scale_frames", str(S)),
        ("kv_window", str(a.kv_window)),
        ("threads", str(a.threads)),
        ("seed", str(a.seed)),
        ("load_avg_start", load_start),
        ("load_avg_end", load_end),
        ("upstream_frame_cpu_ms", "%.0f" % mean("cpu_ms")),
        ("upstream_frame_wall_ms", "%.0f" % mean("wall_ms")),
    ]
    for p in PHASES + ("other",):
        s.append(("upstream_%s_cpu_ms" % p, "%.0f" % mean(p + "_ms")))
    s += [
        ("upstream_scale_phase_cpu_ms", "%.0f" % rows[0]["cpu_ms"]),
        ("upstream_scale_phase_wall_ms", "%.0f" % rows[0]["wall_ms"]),
        ("peak_rss_gib", "%.2f" % (peak / GIB)),
        ("peak_rss_reset", "yes" if reset_ok else "no"),
        ("weights_rss_gib", "%.2f" % (rss_weights / GIB)),
        ("build_peak_rss_gib", "%.2f" % (build_peak / GIB)),
        ("parameters", str(n_params)),
        ("manifest", manifest_result),
        ("outputs_finite", "yes" if finite else "no"),
        ("blas", blas_name(libs)),
        ("blas_threads", "na" if blas_threads is None else str(blas_threads)),
    ]
    if cal:
        s += [("linear_gflops", "%.1f" % cal[0]), ("linear_gflops_per_cpu_s", "%.1f" % cal[1])]
    s.append(("total_wall_s", "%.1f" % (time.perf_counter() - t_start)))
    line = "summary: " + " ".join("%s=%s" % kv for kv in s)
    log(line)
    if a.summary_out:
        with open(a.summary_out, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
