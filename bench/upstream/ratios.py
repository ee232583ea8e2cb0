#!/usr/bin/env python3
"""Ratio lines ours / upstream from `lingbot-map bench model` output and an upstream_bench.py summary.

Inputs: the log of our bench (its `summary:` line), our bench's --csv (per-push phase CPU ms) and a
file holding upstream_bench.py's `summary:` line. Prints one `ratio ...` line per quantity and a
final `compare: key=value ...` line. Per-frame values are means over the single-frame pushes after
the scale phase on both sides.
"""

import argparse
import csv
import sys

# ours CSV column -> upstream summary key
PHASES = (
    ("encoder", "encoder_ms", "upstream_encoder_cpu_ms"),
    ("frame_blocks", "frame_blocks_ms", "upstream_frame_blocks_cpu_ms"),
    ("global_blocks", "global_blocks_ms", "upstream_global_blocks_cpu_ms"),
    ("camera", "camera_ms", "upstream_camera_cpu_ms"),
    ("dpt", "dpt_ms", "upstream_dpt_cpu_ms"),
)
SAME = ("resolution", "frames", "scale_frames", "kv_window", "threads")


def read_summary(path):
    """The last `summary:` line of a file, as a dict."""
    line = None
    with open(path, errors="replace") as f:
        for ln in f:
            if ln.startswith("summary:"):
                line = ln
    if line is None:
        sys.exit("error: no 'summary:' line in %s" % path)
    out = {}
    for tok in line.split()[1:]:
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def ours_phase_means(csv_path, config, scale_frames):
    sums, n = {}, 0
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            if row["config"] != config or int(row["results"]) != 1 or int(row["push"]) <= scale_frames:
                continue
            n += 1
            for _, col, _ in PHASES:
                sums[col] = sums.get(col, 0.0) + float(row[col])
    if n == 0:
        return None, 0
    return {k: v / n for k, v in sums.items()}, n


def ratio(a, b):
    return a / b if b > 0 else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", required=True, choices=("f32", "bf16"))
    p.add_argument("--ours-log", required=True, help="stdout of lingbot-map bench model (holds summary:)")
    p.add_argument("--ours-csv", help="lingbot-map bench model --csv file (per-phase CPU ms)")
    p.add_argument("--upstream-summary", required=True, help="file with upstream_bench.py's summary: line")
    p.add_argument("--resolution", required=True)
    p.add_argument("--frames", required=True)
    p.add_argument("--scale-frames", required=True, type=int)
    p.add_argument("--kv-window", required=True)
    p.add_argument("--threads", required=True)
    p.add_argument("--upstream-reused", action="store_true",
                   help="the upstream summary comes from an earlier run (not side by side with ours)")
    a = p.parse_args(argv)

    ours = read_summary(a.ours_log)
    up = read_summary(a.upstream_summary)
    config = "w%s_kv%s" % (a.dtype, a.dtype)
    want = {"resolution": a.resolution, "frames": a.frames, "scale_frames": str(a.scale_frames),
            "kv_window": a.kv_window, "threads": a.threads}
    mismatch = [k for k in SAME if up.get(k) != want[k]]
    if up.get("dtype") != a.dtype:
        mismatch.append("dtype")
    # A ratio of runs with other settings measures the settings: refused, not warned about.
    if mismatch:
        print("error: upstream summary %s differs from this comparison in %s (%s): no ratios"
              % (a.upstream_summary, ", ".join(mismatch),
                 " ".join("%s=%s" % (k, up.get(k)) for k in mismatch)), file=sys.stderr)
        return 1
    if ours.get("threads") != a.threads or ours.get("frames") != a.frames:
        print("error: our summary has threads=%s frames=%s, this comparison threads=%s frames=%s: no ratios"
              % (ours.get("threads"), ours.get("frames"), a.threads, a.frames), file=sys.stderr)
        return 1

    # side_by_side=no: upstream's numbers come from another run, on a machine whose load then may
    # differ (the load averages below say how much): the ratios are not a side-by-side measurement.
    res = [("side_by_side", "no" if a.upstream_reused else "yes"),
           ("dtype", a.dtype), ("resolution", a.resolution), ("frames", a.frames),
           ("scale_frames", str(a.scale_frames)), ("kv_window", a.kv_window), ("threads", a.threads),
           ("torch", up.get("torch", "na")),
           ("ours_load_avg_start", ours.get("load_avg_start", "na")), ("ours_load_avg_end", ours.get("load_avg_end", "na")),
           ("upstream_load_avg_start", up.get("load_avg_start", "na")),
           ("upstream_load_avg_end", up.get("load_avg_end", "na"))]

    def line(name, o, u, unit, fmt="%.0f"):
        r = ratio(o, u)
        print(("ratio %s %-18s ours " + fmt + " %s / upstream " + fmt + " %s = %.3f")
              % (a.dtype, name + ":", o, unit, u, unit, r))
        res.append(("ours_" + name + ("_" + unit if unit != "GiB" else "_gib"), fmt % o))
        res.append(("upstream_" + name + ("_" + unit if unit != "GiB" else "_gib"), fmt % u))
        res.append(("ratio_" + name, "%.3f" % r))

    o_cpu = float(ours[config + "_frame_cpu_ms"])
    u_cpu = float(up["upstream_frame_cpu_ms"])
    line("frame_cpu", o_cpu, u_cpu, "ms")
    line("frame_wall", float(ours[config + "_frame_wall_ms"]), float(up["upstream_frame_wall_ms"]), "ms")
    if a.ours_csv:
        means, n = ours_phase_means(a.ours_csv, config, a.scale_frames)
        if means is None:
            print("warning: no single-frame pushes of %s in %s" % (config, a.ours_csv))
        else:
            for name, col, ukey in PHASES:
                line(name + "_cpu", means[col], float(up[ukey]), "ms")
    line("peak_rss", float(ours[config + "_peak_rss_gib"]), float(up["peak_rss_gib"]), "GiB", "%.2f")
    print("compare: " + " ".join("%s=%s" % kv for kv in res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
