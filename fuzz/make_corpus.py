#!/usr/bin/env python3
"""Writes the committed seed corpora in fuzz/corpus/<target>/ (small files made here, no downloads).

Usage: fuzz/make_corpus.py BUILD_FUZZ_DIR   (the video and image seeds come from the built
make_seeds; without it they are left as they are).
"""
import io, json, os, pickle, struct, subprocess, sys, zipfile, zlib
from collections import OrderedDict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def pickles():
    objs = {
        "dict": {"a": 1, "b": [1.5, -2, None, True], "c": (b"xy", "z" * 3)},
        "nested": [[1, [2, [3, {"k": (4,)}]]], set([1, 2]), frozenset([3])],
        "ordered": OrderedDict([("w", 1.0), ("x", 2 ** 70), ("y", -(2 ** 40))]),
        "memo": [[0] * 3] * 4,
    }
    for name, o in objs.items():
        for proto in (2, 3, 4, 5):
            put("fuzz_pickle", f"{name}_p{proto}.pkl", pickle.dumps(o, protocol=proto))
    # The pickles torch.save writes (data.pkl of the committed test checkpoints).
    for pt in sorted(os.listdir(os.path.join(ROOT, "testdata", "torch"))):
        path = os.path.join(ROOT, "testdata", "torch", pt)
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                for n in z.namelist():
                    if n.endswith("data.pkl"):
                        put("fuzz_pickle", pt.replace(".pt", ".pkl"), z.read(n))


def zips_and_torch():
    for pt in sorted(os.listdir(os.path.join(ROOT, "testdata", "torch"))):
        data = open(os.path.join(ROOT, "testdata", "torch", pt), "rb").read()
        put("fuzz_torch", pt, data)
        put("fuzz_zip", pt, data)
    for name, kw in (("stored.zip", dict(compression=zipfile.ZIP_STORED)),
                     ("deflated.zip", dict(compression=zipfile.ZIP_DEFLATED))):
        b = io.BytesIO()
        with zipfile.ZipFile(b, "w", **kw) as z:
            z.writestr("archive/data.pkl", pickle.dumps({"x": 1}, protocol=2))
            z.writestr("archive/data/0", b"\0" * 16)
        put("fuzz_zip", name, b.getvalue())
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", allowZip64=True) as z:
        z.writestr(zipfile.ZipInfo("archive/version"), b"3\n")
    put("fuzz_zip", "zip64.zip", b.getvalue())


def safetensors():
    def st(tensors, meta=None):
        header, blobs, off = {}, b"", 0
        for name, (dtype, shape, raw) in tensors.items():
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
            blobs += raw
            off += len(raw)
        if meta:
            header["__metadata__"] = meta
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        return struct.pack("<Q", len(h)) + h + blobs
    put("fuzz_safetensors", "f32.safetensors", st({"w": ("F32", [2, 3], struct.pack("<6f", *range(6)))}))
    put("fuzz_safetensors", "mixed.safetensors", st({
        "a": ("F16", [4], b"\0<" * 4), "b": ("BF16", [2, 1], b"\x80?" * 2), "c": ("I64", [2], struct.pack("<2q", 1, -1)),
        "d": ("BOOL", [3], b"\1\0\1"), "e": ("F64", [1], struct.pack("<d", 0.5)), "s": ("F32", [], struct.pack("<f", 1)),
        "z": ("F32", [0, 4], b"")}, {"format": "pt"}))


def binary_seeds(build):
    tool = os.path.join(build, "fuzz", "make_seeds")
    if not os.path.exists(tool):
        print(f"{tool} not built: video and image seeds left as they are")
        return
    subprocess.run([tool, os.path.join(CORPUS, "fuzz_video"), os.path.join(CORPUS, "fuzz_image")], check=True)


def image_metadata_seeds():
    """Seeds for the orientation parsers and the rarer layouts of fuzz_image, built by hand (no tool
    writes them all): PNG orientation in XMP (plain and compressed iTXt) and in ImageMagick's hex
    "Raw profile type exif" zTXt, a 16-bit grey+alpha PNG, a JPEG-less XMP APP1 file, 16-bit 5-6-5 and
    OS/2 palette BMPs."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    def png(w, h, depth, colour, row, extra):
        rows = b"".join(b"\0" + row for _ in range(h))
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 0)) + extra +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

    xmp = b'<x:xmpmeta><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="6"/></x:xmpmeta>'
    tiff = b"II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0\x06\0\0\0\0\0\0\0"
    profile = b"\nexif\n%8d\n" % len(tiff) + tiff.hex().encode() + b"\n"
    rgb_row = bytes(range(24))
    put("fuzz_image", "xmp_itxt.png", png(8, 2, 8, 2, rgb_row, chunk(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp)))
    put("fuzz_image", "xmp_itxt_deflated.png",
        png(8, 2, 8, 2, rgb_row, chunk(b"iTXt", b"XML:com.adobe.xmp\0\1\0\0\0" + zlib.compress(xmp))))
    put("fuzz_image", "raw_profile_exif.png",
        png(8, 2, 8, 2, rgb_row, chunk(b"zTXt", b"Raw profile type exif\0\0" + zlib.compress(profile))))
    put("fuzz_image", "grey_alpha16.png", png(4, 2, 16, 4, bytes(range(16)), b""))
    baseline = os.path.join(CORPUS, "fuzz_image", "baseline.jpg")  # make_seeds' (committed)
    if os.path.exists(baseline):
        jpg = open(baseline, "rb").read()
        app1 = b"\xff\xe1" + struct.pack(">H", 31 + len(xmp)) + b"http://ns.adobe.com/xap/1.0/\0" + xmp
        put("fuzz_image", "xmp_app1.jpg", jpg[:2] + app1 + jpg[2:])

    def bmp(info, palette, pixels):
        offset = 14 + len(info) + len(palette)
        return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + palette + pixels

    put("fuzz_image", "bitfields565.bmp", bmp(struct.pack("<IiiHHIIiiII", 40, 4, 2, 1, 16, 3, 16, 0, 0, 0, 0) +
                                              struct.pack("<3I", 0xF800, 0x7E0, 0x1F), b"", bytes(range(16))))
    put("fuzz_image", "os2_palette8.bmp",
        bmp(struct.pack("<IHHHH", 12, 4, 1, 1, 8), bytes(range(256)) * 3, bytes([0, 127, 254, 255])))


def golden():
    case = json.load(open(os.path.join(ROOT, "testdata", "tiny", "case.json")))
    small = {k: case[k] for k in ("case", "weights_file", "scenario", "model", "constructor_kwargs") if k in case}
    put("fuzz_golden_case", "tiny_case.json", json.dumps(small, indent=1).encode())
    put("fuzz_golden_case", "minimal.json", json.dumps(
        {"weights_file": "w.safetensors", "scenario": {"num_scale_frames": 2, "kv_cache_sliding_window": 3}}).encode())


if __name__ == "__main__":
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-fuzz")
    pickles(); zips_and_torch(); safetensors(); binary_seeds(build); image_metadata_seeds(); golden()
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        print(f"{t}: {len(files)} seeds, {size} bytes")
