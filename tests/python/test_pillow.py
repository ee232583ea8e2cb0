"""Images decoded and preprocessed as upstream's loader does it, checked against Pillow itself (Debian's
python3-pil): upstream reads every frame with PIL (Image.open, ImageOps.exif_transpose, RGBA composited
on white, convert("RGB")) and resizes it with PIL's bicubic filter (lingbot_map/utils/load_fn.py), and
`run` / lm.load_image / lm.preprocess claim to give the same bytes and floats. The expected values here
are Pillow's own output for the same files and arrays: equality, no tolerance."""
import io
import json
import pathlib
import struct
import subprocess
import zlib

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


def assert_each_decodes_as_pillow(folder: pathlib.Path, files: dict) -> None:
    """Writes each {name: bytes} into `folder`; lm.load_image must give Pillow's shape and pixels."""
    for name, data in files.items():
        path = folder / name
        path.write_bytes(data)
        want = pillow_load(path)
        got = lm.load_image(path)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert np.array_equal(got, want), f"{name}: {np.count_nonzero(got != want)} of {want.size} bytes differ from Pillow"


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_file(w: int, h: int, depth: int, colour_type: int, rows: list, extra: bytes = b"") -> bytes:
    """A PNG built chunk by chunk, for the layouts and metadata chunks Pillow cannot be asked to write."""
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour_type, 0, 0, 0))
    idat = png_chunk(b"IDAT", zlib.compress(b"".join(b"\0" + r for r in rows)))
    return b"\x89PNG\r\n\x1a\n" + ihdr + extra + idat + png_chunk(b"IEND", b"")


def bmp_file(info_header: bytes, palette: bytes, pixels: bytes) -> bytes:
    offset = 14 + len(info_header) + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info_header + palette + pixels


def xmp_packet(orientation: str) -> bytes:
    return (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
            b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/">' + orientation.encode() +
            b"</rdf:Description></rdf:RDF></x:xmpmeta>")


def test_orientation_metadata_and_rare_layouts_equal_pillow(tmp_path):
    """Where Pillow's getexif finds an orientation besides EXIF (a PNG's XMP packet, as macOS Preview
    writes it; ImageMagick's hex "Raw profile type exif" text), and layouts that were decoded otherwise:
    16-bit grey+alpha PNG (Pillow opens it as RGBA: composited), 16-bit BMPs (Pillow's v * 255 / 31, stb's
    bit copy gave 33 for 32), OS/2 palette BMPs (stb_image read 4 of 256 colours from its stack)."""
    rng = np.random.default_rng(11)
    rgb_rows = [bytes(rng.integers(0, 256, 5 * 3, dtype=np.uint8)) for _ in range(3)]  # 5x3 RGB
    exif = Image.Exif()
    exif[0x0112] = 6
    tiff = exif.tobytes()[6:]  # Pillow's bytes start with "Exif\0\0"
    profile = f"\nexif\n{len(tiff):8d}\n{tiff.hex()}\n".encode()
    upright = Image.Exif()
    upright[0x0112] = 1
    files = {
        "xmp_attribute.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(
            b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp_packet('<rdf:li tiff:Orientation="6"/>'))),
        "xmp_element_compressed.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(
            b"iTXt", b"XML:com.adobe.xmp\0\1\0\0\0" + zlib.compress(xmp_packet("<tiff:Orientation>8</tiff:Orientation>")))),
        # An EXIF Orientation tag, even 1, wins over the XMP one.
        "exif_then_xmp.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"eXIf", upright.tobytes()[6:]) + png_chunk(
            b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp_packet('<rdf:li tiff:Orientation="6"/>'))),
        "raw_profile_ztxt.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(
            b"zTXt", b"Raw profile type exif\0\0" + zlib.compress(profile))),
        "raw_profile_text.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"tEXt", b"Raw profile type exif\0" + profile)),
        "grey_alpha_16.png": png_file(4, 2, 16, 4, [struct.pack(">8H", 0, 0, 30000, 0x8000, 65535, 0, 1000, 65535)] * 2),
    }
    v5_565 = struct.pack("<IiiHHIIiiII", 40, 4, 2, 1, 16, 3, 16, 0, 0, 0, 0) + struct.pack("<3I", 0xF800, 0x7E0, 0x1F)
    px16 = struct.pack("<8H", 0x0821, 0x1082, 0x2104, 0xFFFF, 0x7BEF, 0x8410, 0x001F, 0xF800)
    files["bitfields_565.bmp"] = bmp_file(v5_565, b"", px16)
    files["rgb_555.bmp"] = bmp_file(struct.pack("<IiiHHIIiiII", 40, 4, 2, 1, 16, 0, 16, 0, 0, 0, 0), b"", px16)
    palette = b"".join(bytes([7, 255 - i, i]) for i in range(256))  # B, G, R: 3 bytes an entry in OS/2 files
    files["os2_palette_8.bmp"] = bmp_file(struct.pack("<IHHHH", 12, 8, 1, 1, 8), palette,
                                          bytes([0, 1, 250, 251, 252, 253, 254, 255]))
    files["os2_palette_1.bmp"] = bmp_file(struct.pack("<IHHHH", 12, 8, 2, 1, 1), bytes([10, 10, 200, 200, 10, 200]),
                                          bytes([0b10100011, 0, 0, 0, 0b01010101, 0, 0, 0]))
    assert_each_decodes_as_pillow(tmp_path, files)
    assert pillow_load(tmp_path / "xmp_attribute.png").shape == (5, 3, 3)  # the orientation is read: turned


def tiff_ifd(*entries, tail: bytes = struct.pack("<II", 6, 1)) -> bytes:
    """A little-endian TIFF block with IFD0 holding `entries` (tag, type, count, 4 value bytes), then
    `tail` at offset 14 + 12 * len(entries) (by default a RATIONAL's 6 / 1)."""
    head = b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", len(entries))
    body = b"".join(struct.pack("<HHI", t, ty, n) + v for t, ty, n, v in entries)
    return head + body + b"\0\0\0\0" + tail


@pytest.mark.filterwarnings("ignore::UserWarning:PIL.TiffImagePlugin")  # Pillow's notes on the odd EXIF blocks
def test_orientation_edge_cases_equal_pillow(tmp_path):
    """Pillow's reading of the Orientation entry and of where the metadata chunks are, one file each:
    any numeric type (a RATIONAL 6/1 rotates), an unknown type or a count of 0 (absent: the XMP one is
    read), duplicate entries (the last), the raw profile's hex split inside a byte, XMP after the image
    data when an EXIF came before it (not read) and when none did (read)."""
    rgb_rows = [bytes(np.random.default_rng(5).integers(0, 256, 5 * 3, dtype=np.uint8)) for _ in range(3)]
    rational_at = struct.pack("<I", 8 + 2 + 12 + 4)
    xmp6 = png_chunk(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp_packet('<rdf:li tiff:Orientation="6"/>'))
    split = bytes.fromhex("49492a0008000000010012010300010000000800000000000000")  # Orientation SHORT 8
    hex_lines = "\n".join(split.hex()[i:i + 7] for i in range(0, 2 * len(split), 7))  # odd: bytes straddle lines
    profile = f"\nexif\n{len(split):8d}\n{hex_lines}\n".encode()

    def with_image_data_then(extra_after: bytes, extra_before: bytes = b"") -> bytes:
        return png_file(5, 3, 8, 2, rgb_rows, extra_before)[:-12] + extra_after + png_chunk(b"IEND", b"")

    files = {
        "rational.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"eXIf", tiff_ifd((0x0112, 5, 1, rational_at)))),
        "unknown_type_then_xmp.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(
            b"eXIf", tiff_ifd((0x0112, 99, 1, struct.pack("<HH", 3, 0)))) + xmp6),
        "count_0_then_xmp.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(
            b"eXIf", tiff_ifd((0x0112, 3, 0, struct.pack("<HH", 3, 0)))) + xmp6),
        "duplicates.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"eXIf", tiff_ifd(
            (0x0112, 3, 1, struct.pack("<HH", 3, 0)), (0x0112, 3, 1, struct.pack("<HH", 8, 0))))),
        "raw_profile_split.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"tEXt", b"Raw profile type exif\0" + profile)),
        "exif_then_late_xmp.png": with_image_data_then(xmp6, png_chunk(b"eXIf", tiff_ifd((0x0110, 3, 1, b"\0\0\0\0")))),
        "late_xmp.png": with_image_data_then(xmp6),
        # An entry whose data lies past the block ends the directory: the Orientation after it is not read.
        "data_past_the_block.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"eXIf", tiff_ifd(
            (0x010E, 2, 100, struct.pack("<I", 9999)), (0x0112, 3, 1, struct.pack("<HH", 6, 0))))),
        "byte_type.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"eXIf", tiff_ifd((0x0112, 1, 1, b"\x06\0\0\0")))),
        "two_shorts.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"eXIf", tiff_ifd((0x0112, 3, 2, struct.pack("<HH", 6, 6))))),
        "long8.png": png_file(5, 3, 8, 2, rgb_rows, png_chunk(b"eXIf", tiff_ifd(
            (0x0112, 16, 1, rational_at), tail=struct.pack("<Q", 6)))),
        # Damaged deflate streams before the XMP that counts: they spent the text budget (a review finding).
        "damaged_texts_then_xmp.png": png_file(5, 3, 8, 2, rgb_rows, b"".join(
            png_chunk(b"zTXt", b"XML:com.adobe.xmp\0\0\x78\x9c\xff") for _ in range(5)) + xmp6),
    }
    assert_each_decodes_as_pillow(tmp_path, files)
    assert pillow_load(tmp_path / "rational.png").shape == (5, 3, 3)  # the cases do turn the picture
    assert pillow_load(tmp_path / "late_xmp.png").shape == (5, 3, 3)
    assert pillow_load(tmp_path / "exif_then_late_xmp.png").shape == (3, 5, 3)
    assert pillow_load(tmp_path / "two_shorts.png").shape == (5, 3, 3) and pillow_load(tmp_path / "long8.png").shape == (5, 3, 3)
    assert pillow_load(tmp_path / "damaged_texts_then_xmp.png").shape == (5, 3, 3)


def test_other_formats_are_named_whatever_the_file_name(tmp_path):
    """A WebP or GIF saved under a .jpg name (web downloads often are) is refused naming what it is: the
    message was libstb's "Image not of any known type, or corrupt", as for a damaged file."""
    for fmt, what in [("WEBP", "a WebP image"), ("GIF", "a GIF image"), ("TIFF", "a TIFF image")]:
        path = tmp_path / f"{fmt.lower()}.jpg"
        Image.new("RGB", (8, 8), (200, 10, 10)).save(path, format=fmt)
        with pytest.raises(lm.Error) as e:
            lm.load_image(path)
        assert str(e.value) == (f"cannot decode image {path}: it is {what} (by its contents), not a JPEG, PNG or BMP "
                                "file, the formats frames are read in: convert it to PNG or JPEG")


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


def test_an_animated_png_given_as_a_video_is_a_video(cli, tmp_path):
    """A still image given to --video is one frame with no frame rate; an animated PNG (Pillow writes
    one with save_all) is a video of its frames: it was announced as "about 1 frame" and its progress
    read 2/1, 3/1."""
    frames = [Image.fromarray(picture(64, 48, seed=30 + i)) for i in range(3)]
    path = tmp_path / "clip.png"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100)
    proc = subprocess.run([str(cli), "run", "--video", str(path), "--fps", "0", "--model", str(TINY / "model.pt"),
                           *TINY_CLI_OPTIONS, "--export", "poses", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "is an image file" not in proc.stdout and "about 1 frame" not in proc.stdout, proc.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["frames"] == 3 and summary["input"]["sample_interval"] == 1, summary["input"]
