// Reader of viewer/NNNNNN.bin, the per-frame file `lingbot-map run` writes for this page
// (src/io/export_viewer.h; docs/viewer.md "Viewer frame format"). Little-endian; the arrays returned are
// views into the fetched buffer (every part starts on a 4-byte boundary), not copies.
export const HEADER_BYTES = 128;

// Errors name what is wrong with the file, not where (the caller adds its name): a damaged file must
// not surface as a typed array's or DataView's own RangeError.
export function parseViewerFrame(buffer) {
  const bytes = buffer.byteLength;
  if (bytes < HEADER_BYTES) throw new Error(`${bytes} bytes: shorter than its ${HEADER_BYTES}-byte header (truncated?)`);
  const dv = new DataView(buffer);
  const magic = String.fromCharCode(dv.getUint8(0), dv.getUint8(1), dv.getUint8(2), dv.getUint8(3));
  if (magic !== 'LBVF') throw new Error(`not a viewer frame (magic ${JSON.stringify(magic)})`);
  const version = dv.getUint32(4, true);
  if (version !== 1 && version !== 2) throw new Error(`viewer frame version ${version}, this page reads versions 1 and 2`);
  const headerBytes = dv.getUint32(8, true);
  const f = {
    keyframe: (dv.getUint32(12, true) & 1) !== 0,
    // Version 2: bit 1 says the timestamp is seconds, else it is the frame index (no clock); version 1
    // files (written before the bit) leave the unit unknown (null).
    timestampSeconds: version === 1 ? null : (dv.getUint32(12, true) & 2) !== 0,
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
  if (headerBytes < HEADER_BYTES || headerBytes % 4 || headerBytes > bytes)
    throw new Error(`header size ${headerBytes} in a ${bytes}-byte file (expected ${HEADER_BYTES}..file size, a multiple of 4)`);
  // The size the header implies, checked before any array is made (a damaged count would otherwise
  // be a RangeError, or a huge allocation). Plain numbers: exact far beyond any real file.
  const pad4 = (n) => Math.ceil(n / 4) * 4;
  const n = f.count, pn = f.previewWidth * f.previewHeight;
  const expected = headerBytes + 16 * n + pad4(3 * n) + pad4(3 * pn);
  if (expected !== bytes) {
    throw new Error(`${bytes} bytes, expected ${expected} for ${n} points and a ${f.previewWidth}x${f.previewHeight} ` +
      `preview (${bytes < expected ? 'truncated?' : 'extra bytes'})`);
  }
  let off = headerBytes;
  f.xyz = new Float32Array(buffer, off, 3 * n); off += 12 * n;
  f.conf = new Float32Array(buffer, off, n); off += 4 * n;
  f.rgb = new Uint8Array(buffer, off, 3 * n); off += pad4(3 * n);
  f.previewRgb = new Uint8Array(buffer, off, 3 * pn);
  return f;
}
