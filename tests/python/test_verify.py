"""`verify` from Python on the public golden cases: the Session's outputs against reference.safetensors
with the golden README's recommended float32 tolerances ("Numerical noise floor and recommended
tolerances"), the integer traces exactly; and lingbot_map.verify() (the CLI's verify) passes.
testdata/tiny and testdata/streaming-flow-tiny (flow keyframes) are always checked; tiny-keyframes and
small-d24 when ../shared/golden holds them."""
import json
import pathlib

import numpy as np
import pytest

import lingbot_map as lm
from conftest import SHARED_GOLDEN, TINY

# A shared case that is not on this machine is a visible skip, not a silently shorter list.
CASES = [TINY, TINY.parent / "streaming-flow-tiny"] + [
    SHARED_GOLDEN / n if (SHARED_GOLDEN / n).is_dir()
    else pytest.param(SHARED_GOLDEN / n, marks=pytest.mark.skip(reason=f"shared golden case {SHARED_GOLDEN / n} not present"))
    for n in ("tiny-keyframes", "small-d24")]


def max_abs(a, b) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_golden_case_from_python(case_dir: pathlib.Path):
    case = json.loads((case_dir / "case.json").read_text())
    sc = case["scenario"]
    ref = lm.load_safetensors(case_dir / "reference.safetensors")
    model = lm.Model.load(case_dir / case["weights_file"], weights_dtype="f32")  # f32: the reference's precision
    assert model.weights_dtype == "f32"
    results, traces = [], {"frames": [], "specials": [], "visible": [], "camera": []}
    flow = dict(keyframe_interval="flow", flow_threshold=sc["flow_threshold"], max_non_keyframe_gap=sc["max_non_keyframe_gap"]) \
        if sc.get("flow_threshold") else dict(keyframe_interval=sc["keyframe_interval"])
    with lm.Session(model, scale_frames=sc["num_scale_frames"], kv_window=sc["kv_cache_sliding_window"],
                    camera_iterations=sc["camera_num_iterations"], kv_dtype="f32", features=True, patch_tokens=True,
                    **flow) as s:
        assert s.model.config["kv_cache"]["cross_frame_special"] == sc["kv_cache_cross_frame_special"]
        # The model input is PNG / 255 (the golden README); the flow case stores only the PNGs.
        images = ref["images"] if "images" in ref else [lm.load_image(p) for p in sorted((case_dir / "frames").iterdir())]
        for image in images:
            before = s.stats()["steps"]
            results += s.push(image)
            st = s.stats()
            if st["steps"] > before:
                traces["frames"].append(st["frames_resident"])
                traces["specials"].append(st["kept_special_tokens"])
                traces["visible"].append(st["visible_tokens"])
                traces["camera"].append(st["camera_cache_frames"])
        assert s.finish() == []
    n = len(images)
    assert [r.frame_index for r in results] == list(range(n))
    np.testing.assert_array_equal([r.is_keyframe for r in results], ref["is_keyframe"].astype(bool))
    np.testing.assert_array_equal([r.rope_time_index for r in results], ref["rope_time_index"])
    if "frame_type" in ref:
        np.testing.assert_array_equal([{"scale": 0, "keyframe": 1, "non-keyframe": 2}[r.frame_type] for r in results],
                                      ref["frame_type"])
    for key, trace in (("kv_cache_frames_after_step", "frames"), ("kv_cache_special_tokens_after_step", "specials"),
                       ("kv_cache_visible_tokens_after_step", "visible"), ("camera_kv_frames_after_step", "camera")):
        if key in ref:
            np.testing.assert_array_equal(traces[trace], ref[key], err_msg=key)

    def stack(field):
        return np.stack([getattr(r, field) for r in results])

    # pose_enc, pose_enc_iters, extrinsic, extrinsic_c2w: max|d| <= 1e-4 absolute.
    assert max_abs(stack("pose_enc"), ref["pose_enc"]) <= 1e-4
    assert max_abs(stack("pose_enc_iters").transpose(1, 0, 2), ref["pose_enc_iters"]) <= 1e-4
    assert max_abs(stack("w2c"), ref["extrinsic"]) <= 1e-4
    assert max_abs(stack("c2w"), ref["extrinsic_c2w"]) <= 1e-4
    # intrinsic: relative 1e-5.
    k, k_ref = stack("K").astype(np.float64), ref["intrinsic"].astype(np.float64)
    assert float(np.max(np.abs(k - k_ref) / np.maximum(np.abs(k_ref), 1.0))) <= 1e-5
    # depth, depth_conf, world_points: max|d| <= 1e-4 * max|ref|.
    for field, name, r in (("depth", "depth", ref["depth"][..., 0]), ("conf", "depth_conf", ref["depth_conf"]),
                           ("world_points", "world_points", ref["world_points"])):
        assert max_abs(stack(field), r) <= 1e-4 * float(np.abs(r).max()), name
    # aggregated_*, patch_tokens_frame0: max|d| <= 1e-4 * max|ref| (stored frames only).
    if "aggregated_frame_index" not in ref:  # the flow case stores head outputs only
        return
    frames = ref["aggregated_frame_index"]
    for j in range(len(results[0].features)):
        got = np.stack([results[f].features[j] for f in frames])
        r = ref[f"aggregated_{j}"]
        assert max_abs(got, r) <= 1e-4 * float(np.abs(r).max()), f"aggregated_{j}"
    r = ref["patch_tokens_frame0"]
    assert max_abs(results[0].patch_tokens, r) <= 1e-4 * float(np.abs(r).max())


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_engine_verify_passes(case_dir):
    rep = lm.verify(case_dir)
    assert rep["passed"], rep["report"]
    assert {row["status"] for row in rep["rows"]} <= {"ok", "input", "index"}
    assert "pose_enc" in {row["tensor"] for row in rep["rows"]}


def test_verify_bad_case_raises(tmp_path):
    with pytest.raises(lm.Error) as e:
        lm.verify(tmp_path)
    missing = f"golden case file not found: {tmp_path / 'case.json'}"
    assert str(e.value) == missing
    assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(lm.Error) as e:  # the keyword is verify --golden's name
        lm.verify(golden=tmp_path)
    assert str(e.value) == missing
    with pytest.warns(DeprecationWarning, match=r"case_dir= is deprecated, use golden= \(verify --golden\)"):
        with pytest.raises(lm.Error) as e:
            lm.verify(case_dir=tmp_path)
    assert str(e.value) == missing  # the folder given, not an empty one
    with pytest.raises(ValueError) as e:
        lm.verify(tmp_path, case_dir=tmp_path)
    assert str(e.value) == "give golden or its old spelling case_dir, not both"
    with pytest.raises(TypeError) as e:
        lm.verify()
    assert str(e.value) == "verify() missing 1 required positional argument: 'golden'"


def test_verify_takes_the_cli_weights_dtype_and_only():
    # As `lingbot-map verify --weights-dtype bf16 --only 'depth*'`: the bf16 run passes with the
    # scaled tolerances, and only the selected tensors are checked (the rest reported SKIP).
    full = lm.verify(TINY)
    bf16 = lm.verify(TINY, weights_dtype="bf16", only=["depth*"])
    assert full["passed"] and bf16["passed"], bf16["report"]
    status = {row["tensor"]: row["status"] for row in bf16["rows"]}
    assert status["depth"] == "ok" and status["depth_conf"] == "ok"
    assert status["pose_enc"] == "SKIP"
    depth = lambda rep: next(r for r in rep["rows"] if r["tensor"] == "depth")
    assert depth(bf16)["max_abs"] > depth(full)["max_abs"]  # it did run with bf16 weights
    with pytest.raises(ValueError, match=r"unknown weights dtype 'int8'"):
        lm.verify(TINY, weights_dtype="int8")
