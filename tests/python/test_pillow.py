"""Images decoded and preprocessed as upstream's loader does it, checked against Pillow itself (Debian's
python3-pil): upstream reads every frame with PIL (Image.open, ImageOps.exif_transpose, RGBA composited
on white, convert("RGB")) and resizes it with PIL's bicubic filter (lingbot_map/utils/load_fn.py), and
`run` / lm.load_image / lm.preprocess claim to give the same bytes and floats. The expected values here
are Pillow's own output for the same files and arrays: equality, no tolerance."""
import io
import pathlib
import subprocess

import numpy as np
import pytest
from PIL import Image, ImageOps

import lingbot_map as lm
from conftest import TINY, TINY_CLI_OPTIONS

PATCH = 14


def pillow_preprocess(rgb: np.ndarray, mode: str, size: int) -> np.ndarray:
    """Upstream's load_and_preprocess_images for one picture, written from its description: width :=
    size (crop; pad: the longer side := size), the other side to the nearest multiple of the patch
    (Python's round), PIL bicubic, / 255 in float32, then a centre crop of the height (crop) or white
    padding to a size x size square (pad)."""
    img = Image.fromarray(rgb)
    w, h = img.size
    if mode == "pad" and w < h:
        nh, nw = size, round(w * (size / h) / PATCH) * PATCH
    else:
        nw, nh = size, round(h * (size / w) / PATCH) * PATCH
    out = np.asarray(img.resize((nw, nh), Image.Resampling.BICUBIC), dtype=np.uint8)
    t = out.astype(np.float32).transpose(2, 0, 1) / np.float32(255)
    if mode == "crop" and nh > size:
        top = (nh - size) // 2
        t = t[:, top:top + size, :]
    if mode == "pad":
        padded = np.ones((3, size, size), np.float32)
        top, left = (size - t.shape[1]) // 2, (size - t.shape[2]) // 2
        padded[:, top:top + t.shape[1], left:left + t.shape[2]] = t
        t = padded
    return t


def pillow_load(path: pathlib.Path) -> np.ndarray:
    """Upstream's reading of a frame file."""
    img = ImageOps.exif_transpose(Image.open(path))
    if img.mode == "RGBA":
        img = Image.alpha_composite(Image.new("RGBA", img.size, (255, 255, 255, 255)), img)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)


# Noise with smooth parts: bicubic's overshoot past 0 and 255 (clamped) and its flat-area sums both occur.
def picture(w: int, h: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    smooth = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256], axis=-1)
    noise = rng.integers(0, 256, (h, w, 3))
    return np.where(rng.random((h, w, 1)) < 0.5, smooth, noise).astype(np.uint8)


SIZES = [(640, 480), (480, 640), (1000, 333), (333, 1000), (518, 518), (97, 61), (1281, 719), (250, 251)]


@pytest.mark.parametrize("mode", ["crop", "pad"])
@pytest.mark.parametrize("image_size", [518, 224])
def test_preprocess_equals_pillow(mode, image_size):
    for i, (w, h) in enumerate(SIZES):
        rgb = picture(w, h, seed=i)
        want = pillow_preprocess(rgb, mode, image_size)
        got = lm.preprocess(rgb, image_size, mode)
        assert got.shape == want.shape, (w, h, got.shape, want.shape)
        differ = np.count_nonzero(got != want)
        assert differ == 0, f"{w}x{h} {mode} {image_size}: {differ} of {want.size} values differ from Pillow"


def write(img: Image.Image, path: pathlib.Path, **kw) -> pathlib.Path:
    img.save(path, **kw)
    return path


def test_decoded_files_equal_pillow(tmp_path):
    rgb = picture(45, 30, seed=7)
    base = Image.fromarray(rgb)
    files = []
    for orientation in range(1, 9):  # every EXIF orientation, on a JPEG as cameras write them
        exif = Image.Exif()
        exif[0x0112] = orientation
        files.append(write(base, tmp_path / f"o{orientation}.jpg", quality=90, exif=exif.tobytes()))
    files.append(write(base, tmp_path / "q100_444.jpg", quality=100, subsampling=0))
    files.append(write(base.convert("L"), tmp_path / "gray.jpg", quality=85))
    alpha = Image.fromarray(np.random.default_rng(3).integers(0, 256, (30, 45), dtype=np.uint8))
    rgba = base.copy()
    rgba.putalpha(alpha)
    files.append(write(rgba, tmp_path / "rgba.png"))
    files.append(write(base.convert("L"), tmp_path / "gray.png"))
    files.append(write(base.quantize(64), tmp_path / "palette.png"))
    la = base.convert("L")
    la.putalpha(alpha)
    files.append(write(la, tmp_path / "gray_alpha.png"))  # upstream composites RGBA only: LA's alpha is dropped
    transparent = base.quantize(16)
    files.append(write(transparent, tmp_path / "palette_trns.png", transparency=3))
    files.append(write(base, tmp_path / "plain.bmp"))
    files.append(write(rgba, tmp_path / "bgrx.bmp"))  # 32-bit BI_RGB: Pillow reads the alpha it wrote as padding
    png_exif = Image.Exif()
    png_exif[0x0112] = 6
    files.append(write(base, tmp_path / "rotated.png", exif=png_exif.tobytes()))
    for path in files:
        want = pillow_load(path)
        got = lm.load_image(path)
        assert got.shape == want.shape, (path.name, got.shape, want.shape)
        differ = np.count_nonzero(got != want)
        assert differ == 0, f"{path.name}: {differ} of {want.size} bytes differ from Pillow"
        # And through run's preprocessing, as one frame of a folder.
        assert np.array_equal(lm.preprocess(got, 112, "crop"), pillow_preprocess(want, "crop", 112)), path.name


def test_pillow_reads_the_preprocessed_frames_run_exports(tmp_path, cli):
    """`run --export-preprocessed DIR` writes the model inputs as PNGs: Pillow reads back exactly the
    floats the model saw (x 255)."""
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(3):
        Image.fromarray(picture(200, 150, seed=20 + i)).save(frames / f"{i:03d}.jpg", quality=92)
    out, pre = tmp_path / "out", tmp_path / "pre"
    subprocess.run([str(cli), "run", "--images", str(frames), "--model", str(TINY / "model.pt"), *TINY_CLI_OPTIONS,
                    "--export", "poses", "--export-preprocessed", str(pre), "--out", str(out)],
                   check=True, capture_output=True)
    written = sorted(pre.iterdir())
    assert [p.name for p in written] == ["000000.png", "000001.png", "000002.png"]
    for i, p in enumerate(written):
        back = np.asarray(Image.open(p).convert("RGB"), dtype=np.uint8)
        want = pillow_preprocess(pillow_load(frames / f"{i:03d}.jpg"), "crop", 112)
        assert np.array_equal(back.astype(np.float32).transpose(2, 0, 1) / np.float32(255), want), p.name


def test_an_animated_webp_is_refused_naming_the_file(cli, tmp_path):
    # FFmpeg's WebP demuxer gives animated files a stream of no size its decoder can read: one error
    # line naming the file (it was "image size must be positive, got 0x0").
    frames = [Image.new("RGB", (64, 48), (40 * i, 0, 0)) for i in range(3)]
    path = tmp_path / "clip.webp"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100)
    proc = subprocess.run([str(cli), "run", "--video", str(path), "--model", str(TINY / "model.pt"), *TINY_CLI_OPTIONS,
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (f"error: cannot open video {path}: its webp stream states no frame size (0x0); "
                           "FFmpeg cannot decode this file\n")
    assert not (tmp_path / "out").exists()
