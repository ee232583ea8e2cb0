#!/usr/bin/env python3
"""Writes small PyTorch-format checkpoints for the loader tests (testdata/torch/*.pt) and, with
--fullsize OUT.pt, a full-size checkpoint with the keys/shapes of testdata/full-size-manifest.json.

No torch needed: the files are built exactly as torch.save lays them out (a zip archive with
<archive>/data.pkl, <archive>/data/<key>, <archive>/version), the pickle produced by Python's own
pickler (protocol 2) with stand-in classes that pickle under the real torch names. This makes the
fixtures an independent check of the C++ reader (they are not written by the code under test).
"""
import argparse
import collections
import json
import os
import pickle
import random
import struct
import sys
import types
import zipfile

# ---- stand-ins that pickle as torch._utils._rebuild_tensor_v2 / torch.<Type>Storage ----
torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
sys.modules["torch"] = torch
sys.modules["torch._utils"] = torch_utils
torch._utils = torch_utils


def _rebuild_tensor_v2(*args):
    raise RuntimeError("stand-in only")


_rebuild_tensor_v2.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2

STORAGE_TYPES = {"f32": ("FloatStorage", "<f", 4), "f64": ("DoubleStorage", "<d", 8), "f16": ("HalfStorage", "<e", 2),
                 "bf16": ("BFloat16Storage", None, 2), "i64": ("LongStorage", "<q", 8), "i32": ("IntStorage", "<i", 4),
                 "bool": ("BoolStorage", "<?", 1), "u8": ("ByteStorage", "<B", 1)}
for _name, _fmt, _size in STORAGE_TYPES.values():
    _cls = type(_name, (), {"__module__": "torch"})
    setattr(torch, _name, _cls)


class Storage:
    def __init__(self, dtype, key, data: bytes):
        self.cls = getattr(torch, STORAGE_TYPES[dtype][0])
        self.key = key
        self.data = data
        self.numel = len(data) // STORAGE_TYPES[dtype][2]


class Tensor:
    def __init__(self, storage, offset, shape, stride):
        self.args = (storage, offset, tuple(shape), tuple(stride), False, collections.OrderedDict())

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor_v2, self.args)


class Evil:
    """Pickles as posix.system('echo pwned'): a loader must never call it."""

    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/lingbot_pwned",))


def pack(dtype, values):
    if dtype == "bf16":  # truncate f32 (values chosen exactly representable)
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return b"".join(struct.pack(STORAGE_TYPES[dtype][1], v) for v in values)


def contiguous_stride(shape):
    stride, s = [], 1
    for d in reversed(shape):
        stride.insert(0, s)
        s *= d
    return stride


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


def collect_storages(obj, out):
    if isinstance(obj, Tensor):
        out[obj.args[0].key] = obj.args[0]
    elif isinstance(obj, dict):
        for v in obj.values():
            collect_storages(v, out)


def write_pt(path, obj, archive="archive", pkl=None, storages=None):
    if pkl is None:
        import io
        buf = io.BytesIO()
        Pickler(buf, protocol=2).dump(obj)
        pkl = buf.getvalue()
    if storages is None:
        storages = {}
        collect_storages(obj, storages)
    def entry(name):  # fixed timestamp: the fixtures are reproducible byte for byte
        return zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(entry(f"{archive}/data.pkl"), pkl)
        z.writestr(entry(f"{archive}/byteorder"), "little")
        for key, s in storages.items():
            z.writestr(entry(f"{archive}/data/{key}"), s.data)
        z.writestr(entry(f"{archive}/version"), "3\n")


def fixtures(outdir):
    os.makedirs(outdir, exist_ok=True)
    base = Storage("f32", "0", pack("f32", [float(i) for i in range(12)]))
    sd = collections.OrderedDict()
    sd["a"] = Tensor(base, 0, [3, 4], [4, 1])            # 0..11
    sd["a_t"] = Tensor(base, 0, [4, 3], [1, 4])          # transpose of a (shares the storage)
    sd["a_slice"] = Tensor(base, 5, [3], [2])            # 5, 7, 9
    sd["a_row"] = Tensor(base, 8, [1, 4], [4, 1])        # 8..11 (offset, contiguous)
    sd["expanded"] = Tensor(base, 2, [2, 3], [0, 1])     # rows of 2, 3, 4
    sd["scalar"] = Tensor(base, 7, [], [])               # 7
    sd["empty"] = Tensor(base, 0, [0, 3], [3, 1])
    sd["half"] = Tensor(Storage("f16", "1", pack("f16", [0.5, -2.0, 65504.0])), 0, [3], [1])
    sd["bf"] = Tensor(Storage("bf16", "2", pack("bf16", [1.0, -0.15625, 2.0**100])), 0, [3], [1])
    sd["dbl"] = Tensor(Storage("f64", "3", pack("f64", [0.25, -1.5])), 0, [2], [1])
    sd["steps"] = Tensor(Storage("i64", "4", pack("i64", [7, -1, 2**40])), 0, [3], [1])
    sd["mask"] = Tensor(Storage("bool", "5", pack("bool", [True, False])), 0, [2], [1])
    ns = argparse.Namespace(img_size=98, lr=2e-4, name="x", layers=[1, 2])
    top = {"state_dict": sd, "epoch": 3, "args": ns, "optimizer": {"state": {0: {"momentum": [1.5, None]}}, "lr": 0.1},
           "evil": Evil(), "meta": (1, 2.5, b"bytes", None, True, {"nested": ["x"]})}
    write_pt(os.path.join(outdir, "views.pt"), top, archive="views")

    w = Storage("f32", "0", pack("f32", [1.0, 2.0]))
    write_pt(os.path.join(outdir, "module_prefix.pt"),
             {"module.x": Tensor(w, 0, [2], [1]), "module.y": Tensor(w, 1, [1], [1])}, archive="module_prefix")

    write_pt(os.path.join(outdir, "no_state_dict.pt"), {"epoch": 1, "args": ns}, archive="no_state_dict")

    # Views / storages that lie about their extent.
    s = Storage("f32", "0", pack("f32", [1.0, 2.0, 3.0]))
    write_pt(os.path.join(outdir, "view_out_of_range.pt"), {"x": Tensor(s, 2, [2], [1])}, archive="a")
    big = Storage("f32", "0", pack("f32", [1.0, 2.0]))
    big.numel = 1000
    write_pt(os.path.join(outdir, "storage_too_small.pt"), {"x": Tensor(big, 0, [2], [1])}, archive="a")

    # Hand-written pickle: a state dict that names 'w' twice (impossible from a Python dict).
    pk = (b"\x80\x02}q\x00(X\x05\x00\x00\x00modelq\x01}q\x02(X\x01\x00\x00\x00w"
          b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000"
          b"X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89)tR"
          b"X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
          b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89)tRuu.")
    write_pt(os.path.join(outdir, "duplicate_key.pt"), None, archive="a", pkl=pk, storages={"0": Storage("f32", "0", pack("f32", [1.0, 2.0]))})

    # Two stride-0 views of a one-element storage declaring 1 GiB each (a memory bomb).
    one = Storage("f32", "0", pack("f32", [1.0]))
    write_pt(os.path.join(outdir, "expansion_bomb.pt"),
             {"x": Tensor(one, 0, [1 << 28], [0]), "y": Tensor(one, 0, [1 << 28], [0])}, archive="a")

    # A storage type the loader does not support (complex numbers).
    cplx = Storage("f32", "0", pack("f32", [1.0, 2.0]))
    cplx.cls = type("ComplexFloatStorage", (), {"__module__": "torch"})
    torch.ComplexFloatStorage = cplx.cls
    write_pt(os.path.join(outdir, "complex_storage.pt"), {"x": Tensor(cplx, 0, [1], [1])}, archive="a")

    # Legacy (pre-zip) serialization starts with a pickled magic number.
    with open(os.path.join(outdir, "legacy.pt"), "wb") as f:
        f.write(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.")


def fullsize(out, manifest):
    """Random-valued checkpoint with the manifest's keys/shapes, f32, streamed to disk."""
    entries = json.load(open(manifest))["tensors"]
    rng = random.Random(1234)
    block = struct.pack(f"<{1 << 18}f", *[rng.gauss(0.0, 0.02) for _ in range(1 << 18)])  # 1 MiB of values
    sd, storages = collections.OrderedDict(), {}
    for i, e in enumerate(entries):
        numel = 1
        for d in e["shape"]:
            numel *= d
        s = Storage("f32", str(i), b"")
        s.numel = numel
        storages[str(i)] = s
        sd[e["name"]] = Tensor(s, 0, e["shape"], contiguous_stride(e["shape"]))
    import io
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump({"model": sd, "epoch": 0, "args": argparse.Namespace(note="random weights")})
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        z.writestr("lingbot-map-long/data.pkl", buf.getvalue())
        z.writestr("lingbot-map-long/byteorder", "little")
        for key, s in storages.items():
            nbytes = s.numel * 4
            with z.open(f"lingbot-map-long/data/{key}", "w", force_zip64=nbytes > (1 << 31)) as f:
                left, phase = nbytes, (int(key) * 4096) % len(block)
                while left > 0:
                    chunk = block[phase:phase + left]
                    f.write(chunk)
                    left -= len(chunk)
                    phase = 0
        z.writestr("lingbot-map-long/version", "3\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outdir", default=os.path.join(os.path.dirname(__file__), "..", "testdata", "torch"))
    ap.add_argument("--fullsize", metavar="OUT.pt", help="write the full-size random checkpoint instead")
    ap.add_argument("--manifest", default=os.path.join(os.path.dirname(__file__), "..", "testdata", "full-size-manifest.json"))
    a = ap.parse_args()
    if a.fullsize:
        fullsize(a.fullsize, a.manifest)
    else:
        fixtures(a.outdir)
