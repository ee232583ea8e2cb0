// Reader of viewer/NNNNNN.bin, the per-frame file `lingbot-map run` writes for this page
// (src/io/export_viewer.h; README "Viewer frame format"). Little-endian; the arrays returned are
// views into the fetched buffer (every part starts on a 4-byte boundary), not copies.
export const HEADER_BYTES = 128;

export function parseViewerFrame(buffer) {
  const dv = new DataView(buffer);
  const magic = String.fromCharCode(dv.getUint8(0), dv.getUint8(1), dv.getUint8(2), dv.getUint8(3));
  if (magic !== 'LBVF') throw new Error(`not a viewer frame (magic ${JSON.stringify(magic)})`);
  const version = dv.getUint32(4, true);
  if (version !== 1) throw new Error(`viewer frame version ${version}, this page reads version 1`);
  const headerBytes = dv.getUint32(8, true);
  const f = {
    keyframe: (dv.getUint32(12, true) & 1) !== 0,
    timestampSeconds: (dv.getUint32(12, true) & 2) !== 0,  // else timestamp is the frame index (no clock)
    index: Number(dv.getBigInt64(16, true)),
    timestamp: dv.getFloat64(24, true),
    width: dv.getUint32(32, true),
    height: dv.getUint32(36, true),
    c2w: new Float32Array(buffer, 40, 12),  // row-major 3x4, camera -> world (OpenCV camera axes)
    fx: dv.getFloat32(88, true), fy: dv.getFloat32(92, true),
    cx: dv.getFloat32(96, true), cy: dv.getFloat32(100, true),
    count: dv.getUint32(104, true),
    confThreshold: dv.getFloat32(108, true),
    previewWidth: dv.getUint32(112, true),
    previewHeight: dv.getUint32(116, true),
    depthLo: dv.getFloat32(120, true),  // depth_preview/NNNNNN.png's colour range (0, 0: no valid depth)
    depthHi: dv.getFloat32(124, true),
  };
  const pad4 = (n) => (n + 3) & ~3;
  const n = f.count, pn = f.previewWidth * f.previewHeight;
  let off = headerBytes;
  f.xyz = new Float32Array(buffer, off, 3 * n); off += 12 * n;
  f.conf = new Float32Array(buffer, off, n); off += 4 * n;
  f.rgb = new Uint8Array(buffer, off, 3 * n); off += pad4(3 * n);
  f.previewRgb = new Uint8Array(buffer, off, 3 * pn); off += pad4(3 * pn);
  if (off !== buffer.byteLength) throw new Error(`viewer frame ${f.index}: ${buffer.byteLength} bytes, expected ${off}`);
  return f;
}
