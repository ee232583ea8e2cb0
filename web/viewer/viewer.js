// The lingbot-map browser viewer: reads a run's viewer/NNNNNN.bin files through the server that
// `lingbot-map view` / `run --serve` starts, follows /api/status while the run goes on, and draws
// the points (in chunks of consecutive frames), camera frustums with the frame image, and the trajectory.
//
// Conventions: the world frame is the run's (poses are camera -> world, OpenCV camera axes x right,
// y down, z forward). three.js draws that world as is; only the orbit camera's "up" is set to the
// cameras' mean -y axis (what upstream's viewer does), so the scene appears upright.
//
// For tests and scripts the page reports its state on <body>: data-frames (frames loaded, in
// order), data-points (points loaded = the points.ply count), data-points-shown, data-status
// (running | completed | interrupted | failed | ended | disconnected), data-ready (1: nothing more
// to load, or the server is not answering), data-frame-error (a frame file that could not be read),
// data-cameras / data-cameras-in-view (posed frames, and those the last fit shows), data-camera
// (the orbit camera's position as last drawn), data-points-kept / data-point-budget (the points the
// page holds after thinning, and its budget), data-images (frames that hold their image), data-preview
// (the frame whose image the 2D preview shows; absent while it is being fetched), data-draw-calls
// (WebGL draw calls of the last render).
//
// Memory is bounded for long and live runs (docs/viewer.md): at most ?points=N points (default 4M)
// are kept, older frames thinned to make room, and at most ?images=N frames keep their image.
import * as THREE from 'three';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';
import { parseViewerFrame } from '/viewer_format.js';

const $ = (id) => document.getElementById(id);

// ---- memory bounds ------------------------------------------------------------------------------
// A 10,000-frame or live run must not hold every frame's points and image until the tab dies.
// ?points=N: the points kept in all (JS arrays and GPU buffers, about 23 bytes each in both:
// position, colour, confidence, frame); over it, loaded frames are thinned (enforceBudget).
// ?images=N: the frames that keep their image (an RGBA copy and a texture, 77 kB each at 160x120);
// the others' frustums are lines only.
const params = new URLSearchParams(location.search);
function positiveParam(name, fallback) {
  const v = Number(params.get(name));
  return Number.isInteger(v) && v >= 1 ? v : fallback;
}
const POINT_BUDGET = positiveParam('points', 4000000);
const IMAGE_FRAMES = positiveParam('images', 100);
const ui = {
  view: $('view'), status: $('status'), frame: $('frame'), frameNum: $('frame-num'), play: $('play'),
  follow: $('follow'), conf: $('conf'), confNum: $('conf-num'), size: $('size'), sizeNum: $('size-num'),
  every: $('every'), keyframes: $('keyframes'), cameras: $('cameras'), trajectory: $('trajectory'),
  fit: $('fit'), screenshot: $('screenshot'), framesCount: $('frames-count'), pointsCount: $('points-count'),
  pointsShown: $('points-shown'), pointsKept: $('points-kept'), previewImage: $('preview-image'), previewDepth: $('preview-depth'),
  depthNone: $('depth-none'),
};

// ---- scene ------------------------------------------------------------------------------------
const renderer = new THREE.WebGLRenderer({ antialias: true });
renderer.setPixelRatio(window.devicePixelRatio);
renderer.setClearColor(0x15171a);
ui.view.appendChild(renderer.domElement);
// Focusable, so the orbit controls' arrow keys (pan) work without a mouse.
renderer.domElement.tabIndex = 0;
renderer.domElement.setAttribute('aria-label', '3D view: drag to orbit, wheel to zoom, arrow keys to pan');
const scene = new THREE.Scene();
const camera = new THREE.PerspectiveCamera(60, 1, 0.001, 1000);
camera.up.set(0, -1, 0);  // OpenCV world: -y is up until the cameras say otherwise
camera.position.set(0, -1, -3);
let controls = null;
// Set once the user moves the camera (mouse, wheel, touch, keys): the automatic fits while frames
// load then leave the camera where the user put it. "fit view" clears it.
let userMoved = false;
function makeControls(target) {
  if (controls) controls.dispose();
  controls = new OrbitControls(camera, renderer.domElement);  // takes camera.up as its up axis
  controls.target.copy(target);
  controls.addEventListener('change', () => requestRender());
  controls.addEventListener('start', () => { userMoved = true; });  // pointer and wheel, not keys
  controls.listenToKeyEvents(renderer.domElement);
  controls.update();
}
renderer.domElement.addEventListener('keydown', (e) => { if (/^Arrow/.test(e.code)) userMoved = true; });
makeControls(new THREE.Vector3(0, 0, 0));

// Points and frustums are drawn in few draw calls (one per chunk of frames, one for every frustum):
// a THREE.Points and a frustum object per frame would be 20,000 draw calls per render and about
// 110 MB of JavaScript at 10,000 frames. Which frames show is therefore decided on the GPU, by the
// rules of frameVisibility() as uniforms; every vertex carries its frame as frameKey = 2 * frame index +
// keyframe (exact in a float up to 2^23 frames).
const frameUniforms = { uSelected: { value: 0 }, uEvery: { value: 1 }, uKeyframesOnly: { value: false } };
const frameShownGlsl = `
  uniform int uSelected;
  uniform int uEvery;
  uniform bool uKeyframesOnly;
  int frameOf(float frameKey) { return int(frameKey) >> 1; }
  bool frameShown(float frameKey) {
    int k = int(frameKey), i = k >> 1;
    return i <= uSelected && i % uEvery == 0 && (!uKeyframesOnly || (k & 1) == 1);
  }`;
const pointMaterial = new THREE.ShaderMaterial({
  uniforms: { ...frameUniforms, uSize: { value: 3 * window.devicePixelRatio }, uThreshold: { value: 0 } },
  vertexShader: `
    attribute vec3 rgb;
    attribute float conf;
    attribute float frameKey;
    uniform float uSize;
    uniform float uThreshold;
    varying vec3 vColor;
    ${frameShownGlsl}
    void main() {
      vColor = rgb;
      gl_Position = projectionMatrix * modelViewMatrix * vec4(position, 1.0);
      // The same rule as points.ply: shown when conf > threshold. Others go outside the clip volume.
      if (!(conf > uThreshold) || !frameShown(frameKey)) gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
      gl_PointSize = uSize;
    }`,
  fragmentShader: `
    varying vec3 vColor;
    void main() { gl_FragColor = vec4(vColor, 1.0); }`,
});
// A ShaderMaterial's colour reaches the screen as written (as the points' sRGB bytes do): sRGB values.
const srgb = (hex) => new THREE.Vector3(((hex >> 16) & 255) / 255, ((hex >> 8) & 255) / 255, (hex & 255) / 255);
// Each frustum vertex is its camera's centre (position) plus uScale times a direction in the world
// (dir: the camera's rotation applied to the image corner at depth 1; zero at the apex), so a new
// frustum scale is one uniform. The selected frame's frustum shows even where the rules hide its frame.
const frustumMaterial = new THREE.ShaderMaterial({
  uniforms: { ...frameUniforms, uScale: { value: 0.1 }, uColor: { value: srgb(0x4fc3f7) }, uSelectedColor: { value: srgb(0xffb300) } },
  vertexShader: `
    attribute vec3 dir;
    attribute float frameKey;
    uniform float uScale;
    uniform vec3 uColor;
    uniform vec3 uSelectedColor;
    varying vec3 vColor;
    ${frameShownGlsl}
    void main() {
      bool selected = frameOf(frameKey) == uSelected;
      vColor = selected ? uSelectedColor : uColor;
      gl_Position = projectionMatrix * modelViewMatrix * vec4(position + uScale * dir, 1.0);
      if (!selected && !frameShown(frameKey)) gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
    }`,
  fragmentShader: `
    varying vec3 vColor;
    void main() { gl_FragColor = vec4(vColor, 1.0); }`,
});
const trajectoryMaterial = new THREE.LineBasicMaterial({ color: 0xff5252 });

// frames[i]: the file's header (f, without its arrays), where its points are (chunk, offset, kept),
// how many times they were halved (level), the points shown at a threshold (shown, shownAt: counted
// once per threshold) and its image while it holds one; loaded strictly in order.
const frames = [];
// totalPoints: what the files hold (= points.ply); keptPoints: what the page holds after thinning.
let runThreshold = null, maxConf = 0, totalPoints = 0, keptPoints = 0, frustumScale = null;
let renderPending = false;
// While frames load in batches (loadNewFrames), the loading's own draws come at most every
// LOADING_DRAW_MS: a draw redraws every point, which WebGL without a GPU (a VM, a remote desktop,
// headless Chromium) takes 0.1-0.3 s for once there are many; drawn after every batch it set the
// loading pace (600 frames in headless Chromium: 27 s, 18 s throttled). Any other draw (the user
// moving the view, a control) comes at the next animation frame, taking a throttled one's place.
const LOADING_DRAW_MS = 400;
let drawnAt = -Infinity, throttledDraw = null;  // the pending throttled draw's timer
function requestRender(throttled = false) {
  if (!throttled && throttledDraw !== null) {
    clearTimeout(throttledDraw);
    throttledDraw = null;
    renderPending = false;
  }
  if (renderPending) return;
  renderPending = true;
  const draw = () => requestAnimationFrame(() => {
    throttledDraw = null;
    renderPending = false;
    drawnAt = performance.now();
    renderer.render(scene, camera);
    document.body.dataset.camera = camera.position.toArray().map((v) => v.toPrecision(6)).join(',');
    document.body.dataset.drawCalls = String(renderer.info.render.calls);
  });
  const wait = throttled ? drawnAt + LOADING_DRAW_MS - performance.now() : 0;
  if (wait > 0) throttledDraw = setTimeout(draw, wait); else draw();
}
function resize() {
  const w = ui.view.clientWidth, h = ui.view.clientHeight;
  renderer.setSize(w, h, false);
  camera.aspect = w / Math.max(1, h);
  camera.updateProjectionMatrix();
  requestRender();
}
window.addEventListener('resize', resize);
resize();

// c2w (row-major 3x4) as a three.js Matrix4.
function c2wMatrix(c) {
  return new THREE.Matrix4().set(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], 0, 0, 0, 1);
}
function cameraCenter(fr) { const c = fr.f.c2w; return new THREE.Vector3(c[3], c[7], c[11]); }

// A frame's image as RGBA (what both the texture and the 2D preview take), a copy out of the file.
function rgbaImage(f) {
  const n = f.previewWidth * f.previewHeight, rgba = new Uint8Array(4 * n);
  for (let i = 0; i < n; ++i) {
    rgba[4 * i] = f.previewRgb[3 * i]; rgba[4 * i + 1] = f.previewRgb[3 * i + 1];
    rgba[4 * i + 2] = f.previewRgb[3 * i + 2]; rgba[4 * i + 3] = 255;
  }
  return { width: f.previewWidth, height: f.previewHeight, rgba };
}

function rgbaTexture(image) {
  const t = new THREE.DataTexture(image.rgba, image.width, image.height, THREE.RGBAFormat);
  t.colorSpace = THREE.SRGBColorSpace;  // row 0 = top of the image = uv v 0 (flipY false)
  t.needsUpdate = true;
  return t;
}

// ---- point chunks -------------------------------------------------------------------------------
// Consecutive frames share a chunk, one THREE.Points over arrays that grow by doubling: up to
// CHUNK_FRAMES frames or CHUNK_POINTS points (a frame with more has a chunk of its own). Thinning
// rebuilds a chunk at its new size (the memory goes back), so it costs at most CHUNK_POINTS points
// of copying and upload. The points a chunk holds are [0, n) of its arrays, its frames' in order.
const CHUNK_FRAMES = 64, CHUNK_POINTS = 1 << 19;
const chunks = [];

function chunkAttributes(capacity) {
  return {
    position: new THREE.BufferAttribute(new Float32Array(3 * capacity), 3),
    rgb: new THREE.BufferAttribute(new Uint8Array(3 * capacity), 3, true),
    conf: new THREE.BufferAttribute(new Float32Array(capacity), 1),
    frameKey: new THREE.BufferAttribute(new Float32Array(capacity), 1),
  };
}

// The bounding sphere of points [start, end) (non-finite ones left out); empty (radius -1) for none.
function pointsSphere(xyz, start, end) {
  const box = new THREE.Box3(), v = new THREE.Vector3(), sphere = new THREE.Sphere();
  for (let i = start; i < end; ++i) {
    v.fromArray(xyz, 3 * i);
    if (Number.isFinite(v.x) && Number.isFinite(v.y) && Number.isFinite(v.z)) box.expandByPoint(v);
  }
  if (box.isEmpty()) return sphere.makeEmpty();
  box.getCenter(sphere.center);
  let r2 = 0;
  for (let i = start; i < end; ++i) {
    const d = sphere.center.distanceToSquared(v.fromArray(xyz, 3 * i));
    if (d > r2) r2 = d;  // false for NaN
  }
  sphere.radius = Math.sqrt(r2);
  return sphere;
}

// New arrays holding the chunk's frames' kept points, compacted, with room for `capacity` points
// (default: none more); the old GPU buffers are freed now, not at GC. The bounding sphere covers
// exactly the points held (the culling of a chunk stays correct; hidden frames only make it larger).
function rebuildChunk(chunk, capacity = 0) {
  const held = frames.slice(chunk.first, chunk.first + chunk.frames).reduce((sum, fr) => sum + fr.kept, 0);
  const old = chunk.points.geometry, a = chunkAttributes(Math.max(capacity, held));
  let n = 0;
  for (let i = chunk.first; i < chunk.first + chunk.frames; ++i) {
    const fr = frames[i], from = fr.offset, k = fr.kept;
    if (old.attributes.position) {
      a.position.array.set(old.attributes.position.array.subarray(3 * from, 3 * (from + k)), 3 * n);
      a.rgb.array.set(old.attributes.rgb.array.subarray(3 * from, 3 * (from + k)), 3 * n);
      a.conf.array.set(old.attributes.conf.array.subarray(from, from + k), n);
      a.frameKey.array.set(old.attributes.frameKey.array.subarray(from, from + k), n);
    }
    fr.offset = n;
    n += k;
  }
  const geom = new THREE.BufferGeometry();
  for (const [name, attr] of Object.entries(a)) geom.setAttribute(name, attr);
  geom.setDrawRange(0, n);
  geom.boundingSphere = pointsSphere(a.position.array, 0, n);
  chunk.n = n;
  chunk.points.geometry = geom;
  old.dispose();
}

// Appends frame i's points (the file's arrays) to the last chunk, or to a new one when it is full.
function addPoints(i, f) {
  let chunk = chunks[chunks.length - 1];
  if (!chunk || chunk.frames >= CHUNK_FRAMES || (chunk.n > 0 && chunk.n + f.count > CHUNK_POINTS)) {
    if (chunk) rebuildChunk(chunk);  // full: its room to grow goes back
    chunk = { first: i, frames: 0, n: 0, points: new THREE.Points(new THREE.BufferGeometry(), pointMaterial) };
    rebuildChunk(chunk);  // empty arrays and sphere: a first frame without points has nothing to grow them
    chunks.push(chunk);
    scene.add(chunk.points);
  }
  const fr = frames[i], count = f.count;
  fr.chunk = chunk;
  const capacity = chunk.points.geometry.attributes.position?.count ?? 0;
  if (chunk.n + count > capacity) {
    rebuildChunk(chunk, Math.max(chunk.n + count, Math.min(2 * (chunk.n + count), CHUNK_POINTS)));
  }
  const geom = chunk.points.geometry, at = chunk.n, attrs = geom.attributes;
  attrs.position.array.set(f.xyz, 3 * at);
  attrs.rgb.array.set(f.rgb, 3 * at);
  attrs.conf.array.set(f.conf, at);
  attrs.frameKey.array.fill(2 * i + (f.keyframe ? 1 : 0), at, at + count);
  // Upload the new points only (an empty range would be "to the end" for WebGL's bufferSubData).
  for (const attr of count ? Object.values(attrs) : []) {
    attr.addUpdateRange(attr.itemSize * at, attr.itemSize * count);
    attr.needsUpdate = true;
  }
  fr.offset = at;
  fr.kept = count;
  chunk.n += count;
  chunk.frames += 1;
  geom.setDrawRange(0, chunk.n);
  geom.boundingSphere.union(pointsSphere(f.xyz, 0, count));
}

// ---- frustums and trajectory --------------------------------------------------------------------
// Both are one geometry for all frames, in arrays that grow by doubling (new buffers when full);
// posed frames only. A frustum is 8 segments: apex to each image corner, and the image rectangle.
const FRUSTUM_VERTICES = 16;
const frustumLines = new THREE.LineSegments(new THREE.BufferGeometry(), frustumMaterial);
frustumLines.frustumCulled = false;  // its vertices move in the shader; one draw call either way
const trajectoryLine = new THREE.Line(new THREE.BufferGeometry(), trajectoryMaterial);
trajectoryLine.frustumCulled = false;
scene.add(frustumLines, trajectoryLine);
let frustumCount = 0;
const posedFrames = [];  // frames[] indices of the posed frames, in order: the trajectory's vertices

// Room for `needed` vertices with the given attributes (name -> item size), keeping `used` of them.
function ensureCapacity(object, attributes, used, needed) {
  const old = object.geometry;
  const capacity = old.attributes.position?.count ?? 0;
  if (needed <= capacity) return;
  const geom = new THREE.BufferGeometry(), size = Math.max(needed, 2 * capacity, 64);
  for (const [name, itemSize] of Object.entries(attributes)) {
    const array = new Float32Array(itemSize * size);
    if (old.attributes[name]) array.set(old.attributes[name].array.subarray(0, itemSize * used));
    geom.setAttribute(name, new THREE.BufferAttribute(array, itemSize));
  }
  object.geometry = geom;
  old.dispose();
}

// Writes `values` (name -> array) at vertex `at` and uploads that range only.
function writeVertices(geom, at, values) {
  for (const [name, array] of Object.entries(values)) {
    const attr = geom.attributes[name];
    attr.array.set(array, attr.itemSize * at);
    attr.addUpdateRange(attr.itemSize * at, array.length);
    attr.needsUpdate = true;
  }
}

// The image's corners in camera coordinates at depth 1. Pixel centres sit at integer coordinates
// (docs/accuracy.md "Camera convention"): the image edges at -0.5, W - 0.5.
function imageCorners(f) {
  const l = -0.5, r = f.width - 0.5, t = -0.5, b = f.height - 0.5;
  return [[l, t], [r, t], [r, b], [l, b]].map(([u, v]) => new THREE.Vector3((u - f.cx) / f.fx, (v - f.cy) / f.fy, 1));
}

function addCamera(i, fr) {
  const c = fr.f.c2w, key = 2 * i + (fr.f.keyframe ? 1 : 0);
  // Rotated into the world: R * corner.
  const dirs = imageCorners(fr.f).map((p) => [c[0] * p.x + c[1] * p.y + c[2] * p.z, c[4] * p.x + c[5] * p.y + c[6] * p.z,
    c[8] * p.x + c[9] * p.y + c[10] * p.z]);
  const apex = [0, 0, 0], dir = [];
  for (let k = 0; k < 4; ++k) dir.push(...apex, ...dirs[k], ...dirs[k], ...dirs[(k + 1) % 4]);
  ensureCapacity(frustumLines, { position: 3, dir: 3, frameKey: 1 }, FRUSTUM_VERTICES * frustumCount, FRUSTUM_VERTICES * (frustumCount + 1));
  const center = [c[3], c[7], c[11]];
  writeVertices(frustumLines.geometry, FRUSTUM_VERTICES * frustumCount, {
    position: Array.from({ length: FRUSTUM_VERTICES }, () => center).flat(), dir, frameKey: new Array(FRUSTUM_VERTICES).fill(key),
  });
  frustumCount += 1;
  ensureCapacity(trajectoryLine, { position: 3 }, posedFrames.length, posedFrames.length + 1);
  writeVertices(trajectoryLine.geometry, posedFrames.length, { position: center });
  posedFrames.push(i);
}

// The image mesh (quad in camera coordinates at depth 1) on the frustum: c2w times the frustum scale.
function placeImage(fr) {
  const s = frustumScale || 0.1;
  fr.imageMesh.matrix.copy(c2wMatrix(fr.f.c2w)).scale(new THREE.Vector3(s, s, s));
  fr.imageMesh.matrixWorldNeedsUpdate = true;
}

// Puts the image on the frame's frustum, its far rectangle (null: takes it off, freeing its texture);
// updateScene shows or hides it with the frustum. A frame without a camera keeps its image for the 2D
// preview only.
function setFrustumImage(i, image) {
  const fr = frames[i];
  const old = fr.imageMesh;
  if (old) {
    scene.remove(old);
    old.geometry.dispose(); old.material.map.dispose(); old.material.dispose();
    fr.imageMesh = null;
  }
  if (!image || !fr.posed) return;
  const c = imageCorners(fr.f);
  const quad = new THREE.BufferGeometry().setFromPoints([c[0], c[1], c[3], c[2]]);
  quad.setAttribute('uv', new THREE.Float32BufferAttribute([0, 0, 1, 0, 0, 1, 1, 1], 2));
  quad.setIndex([0, 2, 1, 1, 2, 3]);
  const mesh = new THREE.Mesh(quad, new THREE.MeshBasicMaterial({ map: rgbaTexture(image), side: THREE.DoubleSide }));
  mesh.matrixAutoUpdate = false;
  // As updateScene would show it: a fetch that ends after the slider moved on must not show a hidden frame's image.
  mesh.visible = ui.cameras.checked && (frameVisibility()(i) || i === selected());
  scene.add(mesh);
  fr.imageMesh = mesh;
  placeImage(fr);
}

function addFrame(f) {
  // The parser's arrays are views into the fetched file: one kept would keep all of it (points and
  // image) alive. The points go into a chunk, the image is copied, the header and pose kept.
  const image = rgbaImage(f);
  const { xyz, conf, rgb, previewRgb, ...header } = f;
  header.c2w = f.c2w.slice();
  // A frame without a finite camera (poses.json "valid": false: a non-finite pose or intrinsics) has
  // no camera to draw or to fit.
  const posed = Array.prototype.every.call(f.c2w, Number.isFinite) && [f.fx, f.fy, f.cx, f.cy].every(Number.isFinite);
  const fr = { f: header, chunk: null, offset: 0, kept: 0, posed, level: 0, shown: 0, shownAt: null, image: null, imageMesh: null };
  const i = frames.push(fr) - 1;
  addPoints(i, f);
  if (posed) addCamera(i, fr);
  totalPoints += f.count;
  keptPoints += f.count;
  if (runThreshold === null) runThreshold = f.confThreshold;
  for (let k = 0; k < f.count; ++k) if (Number.isFinite(conf[k]) && conf[k] > maxConf) maxConf = conf[k];
  keepImage(i, image);
  enforceBudget();
}

// ---- point budget -------------------------------------------------------------------------------
// The frame that is never thinned: the one looked at (the newest while following; frames of a batch
// are added before the slider moves to them).
function protectedFrame() { return ui.follow.checked ? frames.length - 1 : selected(); }

// Over the budget, the frame halved the fewest times (the oldest of those) keeps every other point,
// until the page is within it: every frame then keeps every 2^k-th or 2^(k+1)-th point of its file,
// a uniform sample of the whole run (as thinning points.ply would be), where dropping or thinning the
// oldest frames only would leave the start of the run bare. A frame keeps at least one point, so a
// budget below the frame count is exceeded by one point per frame.
function enforceBudget() {
  const thinned = new Set();
  while (keptPoints > POINT_BUDGET) {
    const keep = protectedFrame();
    let victim = null;
    for (let i = 0; i < frames.length; ++i) {
      const fr = frames[i];
      if (i !== keep && fr.kept > 1 && (!victim || fr.level < victim.level)) victim = fr;
    }
    if (!victim) break;
    halvePoints(victim);
    victim.level += 1;
    thinned.add(victim.chunk);
  }
  // Each chunk rebuilt once (not per halving), at its new size.
  for (const chunk of thinned) rebuildChunk(chunk);
}

// Keeps every other point (the first, third, ...), moved to the front of the frame's range in its
// chunk; rebuildChunk then closes the gap.
function halvePoints(fr) {
  const n = fr.kept, m = Math.ceil(n / 2), o = fr.offset, a = fr.chunk.points.geometry.attributes;
  const xyz = a.position.array, rgb = a.rgb.array, conf = a.conf.array;
  for (let k = 1; k < m; ++k) {
    const to = o + k, from = o + 2 * k;
    xyz[3 * to] = xyz[3 * from]; xyz[3 * to + 1] = xyz[3 * from + 1]; xyz[3 * to + 2] = xyz[3 * from + 2];
    rgb[3 * to] = rgb[3 * from]; rgb[3 * to + 1] = rgb[3 * from + 1]; rgb[3 * to + 2] = rgb[3 * from + 2];
    conf[to] = conf[from];
  }
  keptPoints -= n - m;
  fr.kept = m;
  fr.shownAt = null;
}

// ---- frame images -------------------------------------------------------------------------------
// The frames that hold their image, least recently loaded or selected first (a Map keeps insertion
// order): at most IMAGE_FRAMES, the selected one always. Their frustums show the image; a frame
// without one, once selected, has its file fetched again for it (fetchImage).
const imageFrames = new Map();  // frames[] index -> frame
function keepImage(i, image) {
  const fr = frames[i];
  if (image && !fr.image) { fr.image = image; setFrustumImage(i, image); }
  imageFrames.delete(i);
  imageFrames.set(i, fr);
  const keep = protectedFrame();
  for (const [k, old] of imageFrames) {
    if (imageFrames.size <= IMAGE_FRAMES) break;
    if (k === keep || k === selected()) continue;
    old.image = null;
    setFrustumImage(k, null);
    imageFrames.delete(k);
  }
  document.body.dataset.images = String(imageFrames.size);
}

// One fetch at a time; when it ends it looks at the selection again, so moving the slider across many
// frames costs one request per frame still selected when the previous one came back. A failed fetch
// (the server gone, the file replaced) leaves the preview blank until the frame is selected again.
let imageFetch = null;  // the frames[] index being fetched
let runGeneration = 0;  // counts clearFrames(): a fetch for frames since dropped is ignored
async function fetchImage(i) {
  imageFetch = i;
  const generation = runGeneration;
  try {
    const r = await get(frameUrl(i), 'bytes');
    if (generation === runGeneration && r.body && !frames[i].image) {
      const f = parseFrameOrNull(r.body);
      if (f && f.index === frames[i].f.index) keepImage(i, rgbaImage(f));
    }
  } catch (e) {
    if (!e.unreachable && generation === runGeneration) console.error(e);  // a bug of this page
  } finally {
    imageFetch = null;
  }
  if (generation !== runGeneration || !frames.length) return;
  const sel = selected();
  if (sel !== i && !frames[sel].image) fetchImage(sel);
  else if (sel === i && frames[i].image) showImage();  // not after a failure: that would retry at once
  requestRender();
}

// A file read once already that no longer parses was replaced or damaged since: not a page bug.
function parseFrameOrNull(buffer) {
  try { return parseViewerFrame(buffer); } catch { return null; }
}

// Drops every loaded frame (another run's files are served now): the page starts over as when opened.
function clearFrames() {
  for (const chunk of chunks) {
    scene.remove(chunk.points);
    chunk.points.geometry.dispose();
  }
  chunks.length = 0;
  for (const i of imageFrames.keys()) setFrustumImage(i, null);
  for (const lines of [frustumLines, trajectoryLine]) {
    lines.geometry.dispose();
    lines.geometry = new THREE.BufferGeometry();
  }
  frustumCount = 0;
  posedFrames.length = 0;
  frames.length = 0;
  imageFrames.clear();
  runGeneration += 1;
  runThreshold = null; maxConf = 0; totalPoints = 0; keptPoints = 0; frustumScale = null; userMoved = false;
  ui.frame.max = '0'; ui.frame.value = '0'; ui.follow.checked = true;
  for (const id of ['st-index', 'st-keyframe', 'st-timestamp', 'st-points', 'st-depth']) $(id).textContent = '–';
  ui.frameNum.textContent = '0';
  drawPreview(ui.previewImage, null);
  ui.previewDepth.hidden = ui.depthNone.hidden = true;
  // The new run's frame of the same index has another depth preview at the same path.
  delete ui.previewDepth.dataset.src;
  ui.previewDepth.removeAttribute('src');
  delete document.body.dataset.selected;
  delete document.body.dataset.preview;
  document.body.dataset.images = '0';
  updateScene();
}

// ---- view state ---------------------------------------------------------------------------------
function selected() { return Math.min(Number(ui.frame.value), frames.length - 1); }
function everyNth() { return Math.max(1, Math.floor(Number(ui.every.value) || 1)); }
// Which frames are shown, as a function of the frame index: the rules the shaders apply (frameShown)
// with the uniforms updateScene sets from the same controls.
function frameVisibility() {
  const sel = selected(), every = everyNth(), keyframesOnly = ui.keyframes.checked;
  return (i) => i <= sel && i % every === 0 && (!keyframesOnly || frames[i].f.keyframe);
}

// Frame fr's points above the threshold, counted once per threshold (and again after thinning).
function shownPoints(fr, thr) {
  if (fr.shownAt !== thr) {
    const conf = fr.chunk.points.geometry.attributes.conf.array;
    let shown = 0;
    for (let k = fr.offset; k < fr.offset + fr.kept; ++k) if (conf[k] > thr) ++shown;
    fr.shown = shown;
    fr.shownAt = thr;
  }
  return fr.shown;
}

// throttled: a draw of the batch loading (requestRender).
function updateScene(throttled = false) {
  enforceBudget();  // the frame selected until now may have held the page over the budget
  const sel = selected(), thr = pointMaterial.uniforms.uThreshold.value, visible = frameVisibility();
  frameUniforms.uSelected.value = sel;
  frameUniforms.uEvery.value = everyNth();
  frameUniforms.uKeyframesOnly.value = ui.keyframes.checked;
  frustumMaterial.uniforms.uScale.value = frustumScale || 0.1;
  frustumLines.visible = ui.cameras.checked && frustumCount > 0;
  // The frames holding an image (IMAGE_FRAMES at most) have a mesh each, on their frustum.
  for (const [i, fr] of imageFrames) {
    if (!fr.imageMesh) continue;
    fr.imageMesh.visible = ui.cameras.checked && (visible(i) || i === sel);
    placeImage(fr);
  }
  // The trajectory: the posed frames up to the selected one, a prefix of its vertices.
  let before = 0;
  for (let lo = 0, hi = posedFrames.length; lo < hi;) {
    const mid = (lo + hi) >> 1;
    if (posedFrames[mid] <= sel) before = lo = mid + 1; else hi = mid;
  }
  trajectoryLine.geometry.setDrawRange(0, before);
  trajectoryLine.visible = ui.trajectory.checked && before > 1;
  let shown = 0;
  for (let i = 0; i < frames.length; ++i) if (visible(i)) shown += shownPoints(frames[i], thr);
  ui.pointsShown.textContent = shown.toLocaleString('en-US');
  document.body.dataset.pointsShown = String(shown);
  updateSelection();
  requestRender(throttled);
}

// An image ({ width, height, rgba }) on the canvas; null (or an empty image): one black pixel.
function drawPreview(canvas, image) {
  const w = image ? image.width : 0, h = image ? image.height : 0;
  canvas.width = Math.max(1, w); canvas.height = Math.max(1, h);
  const ctx = canvas.getContext('2d');
  if (w && h) ctx.putImageData(new ImageData(new Uint8ClampedArray(image.rgba.buffer, image.rgba.byteOffset, image.rgba.length), w, h), 0, 0);
  else { ctx.fillStyle = '#000'; ctx.fillRect(0, 0, 1, 1); }
}

// The selected frame's image in the 2D preview; a frame that no longer holds it gets it fetched
// (fetchImage calls this again when it arrives) and the preview stays blank meanwhile.
function showImage() {
  const i = selected(), fr = frames[i];
  if (fr.image) {
    keepImage(i, null);  // most recently used: the last to be dropped
    drawPreview(ui.previewImage, fr.image);
    document.body.dataset.preview = String(fr.f.index);
    return;
  }
  if (document.body.dataset.preview !== undefined) {
    drawPreview(ui.previewImage, null);
    delete document.body.dataset.preview;
  }
  if (imageFetch === null) fetchImage(i);
}

function updateSelection() {
  if (!frames.length) return;
  const fr = frames[selected()], f = fr.f;
  ui.frameNum.textContent = String(f.index);
  $('st-index').textContent = String(f.index);
  $('st-keyframe').textContent = f.keyframe ? 'yes' : 'no';
  $('st-timestamp').textContent = f.timestampSeconds === null ? f.timestamp.toFixed(3)  // version 1: unit unknown
    : f.timestampSeconds ? `${f.timestamp.toFixed(3)} s` : 'none (the input has no clock)';
  const kept = fr.kept;
  $('st-points').textContent = f.count.toLocaleString('en-US') + (kept < f.count ? ` (${kept.toLocaleString('en-US')} kept)` : '');
  $('st-depth').textContent = f.depthHi > 0 ? `${f.depthLo.toPrecision(3)} – ${f.depthHi.toPrecision(3)}` : 'none valid';
  document.body.dataset.selected = String(f.index);
  showImage();
  // The depth-preview export's PNG (near = red, far = blue, invalid = black), when the run writes it
  // (/api/status says so: no request, and no 404, for a run without it); else a note says why not.
  ui.previewDepth.hidden = !runStatus.depth_preview;
  ui.depthNone.hidden = !!runStatus.depth_preview;
  if (runStatus.depth_preview) {
    // The run's identity in the query: the browser's cache must not give another run's picture.
    const depthUrl = `/run/depth_preview/${String(f.index).padStart(6, '0')}.png?run=${encodeURIComponent(loadedRun ?? '')}`;
    if (ui.previewDepth.dataset.src !== depthUrl) { ui.previewDepth.dataset.src = depthUrl; ui.previewDepth.src = depthUrl; }
  } else if (ui.previewDepth.dataset.src) {
    delete ui.previewDepth.dataset.src;
    ui.previewDepth.removeAttribute('src');
  }
}

// Scene centre and size from the points shown (per-axis median, 5-95 % spread), up from the cameras'
// -y axes, and the first posed frame's viewing direction.
function sceneBounds() {
  const xs = [], ys = [], zs = [], thr = pointMaterial.uniforms.uThreshold.value;
  const isVisible = frameVisibility(), visible = frames.filter((_, i) => isVisible(i));
  const total = visible.reduce((s, fr) => s + fr.kept, 0), step = Math.max(1, Math.floor(total / 20000));
  let k = 0;
  for (const fr of visible) {
    const a = fr.chunk.points.geometry.attributes, p = a.position.array, c = a.conf.array;
    for (let i = fr.offset; i < fr.offset + fr.kept; ++i, ++k) {
      if (k % step || !(c[i] > thr) || !Number.isFinite(p[3 * i])) continue;
      xs.push(p[3 * i]); ys.push(p[3 * i + 1]); zs.push(p[3 * i + 2]);
    }
  }
  const posed = frames.filter((fr) => fr.posed), centers = posed.map(cameraCenter);
  for (const c of centers) { xs.push(c.x); ys.push(c.y); zs.push(c.z); }
  if (!xs.length) { xs.push(0); ys.push(0); zs.push(0); }
  const q = (a, t) => a[Math.min(a.length - 1, Math.floor(t * a.length))];
  [xs, ys, zs].forEach((a) => a.sort((u, v) => u - v));
  const center = new THREE.Vector3(q(xs, 0.5), q(ys, 0.5), q(zs, 0.5));
  const spread = new THREE.Vector3(q(xs, 0.95) - q(xs, 0.05), q(ys, 0.95) - q(ys, 0.05), q(zs, 0.95) - q(zs, 0.05));
  // The sphere holds the bulk of the points (5-95 %) and the camera centres (fitting the points alone
  // left cameras far from them off screen), up to 10x the points' radius: one diverged pose must not
  // shrink the scene to a dot.
  const pointsRadius = Math.max(1e-3, 0.5 * spread.length());
  let radius = pointsRadius;
  for (const c of centers) radius = Math.max(radius, Math.min(c.distanceTo(center), 10 * pointsRadius));
  const up = new THREE.Vector3();
  for (const fr of posed) up.add(new THREE.Vector3(-fr.f.c2w[1], -fr.f.c2w[5], -fr.f.c2w[9]));  // -y column of R
  if (up.lengthSq() < 1e-12) up.set(0, -1, 0);
  up.normalize();
  const c0 = posed.length ? posed[0].f.c2w : [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0];
  const forward = new THREE.Vector3(c0[2], c0[6], c0[10]).normalize();  // z column of R
  return { center, radius, up, forward, centers };
}

// The orbit camera behind and above the first frame's camera, looking at the scene centre. Frustums
// are sized from the scene at the first fit and again when every frame is in (`rescale`): the first
// frames alone can be far smaller or larger than the whole run.
function fitView(rescale = false) {
  if (!frames.length) return;
  const { center, radius, up, forward, centers } = sceneBounds();
  const dist = radius / Math.tan(THREE.MathUtils.degToRad(camera.fov / 2)) * 1.1;
  camera.up.copy(up);
  camera.position.copy(center).addScaledVector(forward, -dist).addScaledVector(up, 0.35 * dist);
  camera.near = dist * 1e-3; camera.far = dist * 1e3;
  camera.updateProjectionMatrix();
  makeControls(center);
  userMoved = false;
  if (frustumScale === null || rescale) { frustumScale = 0.08 * radius; updateScene(); }
  // For tests: how many camera centres the fitted view shows.
  camera.updateMatrixWorld();
  const inView = centers.filter((c) => {
    const p = c.project(camera);
    return Math.abs(p.x) <= 1 && Math.abs(p.y) <= 1 && p.z >= -1 && p.z <= 1;
  }).length;
  document.body.dataset.camerasInView = String(inView);
  document.body.dataset.cameras = String(centers.length);
  requestRender();
}

// ---- controls -----------------------------------------------------------------------------------
function setThreshold(v) {
  pointMaterial.uniforms.uThreshold.value = v;
  ui.confNum.textContent = v.toFixed(2);
}
ui.conf.addEventListener('input', () => { setThreshold(Number(ui.conf.value)); updateScene(); });
ui.size.addEventListener('input', () => {
  ui.sizeNum.textContent = ui.size.value;
  pointMaterial.uniforms.uSize.value = Number(ui.size.value) * window.devicePixelRatio;
  requestRender();
});
for (const el of [ui.every, ui.keyframes, ui.cameras, ui.trajectory]) el.addEventListener('input', updateScene);
// While typing, an invalid value (empty, 0, -3, 2.5) acts as its nearest valid one; once committed
// the field shows that value.
ui.every.addEventListener('change', () => { ui.every.value = String(everyNth()); });
ui.frame.addEventListener('input', () => {
  ui.follow.checked = Number(ui.frame.value) >= frames.length - 1;
  updateScene();
});
ui.follow.addEventListener('input', () => { if (ui.follow.checked) { ui.frame.value = String(frames.length - 1); updateScene(); } });
ui.fit.addEventListener('click', () => fitView());
ui.screenshot.addEventListener('click', () => {
  renderer.render(scene, camera);  // the drawing buffer is read in the same task, before it is cleared
  const a = document.createElement('a');
  a.href = renderer.domElement.toDataURL('image/png');
  a.download = `lingbot-map-frame-${String(frames.length ? frames[selected()].f.index : 0).padStart(6, '0')}.png`;
  a.click();
});
let playTimer = null;
function setPlayButton(playing) {
  ui.play.textContent = playing ? '❚❚' : '▶';
  ui.play.setAttribute('aria-label', playing ? 'pause' : 'play');
}
ui.play.addEventListener('click', () => {
  if (playTimer) { clearInterval(playTimer); playTimer = null; setPlayButton(false); return; }
  if (selected() >= frames.length - 1) ui.frame.value = '0';
  setPlayButton(true);
  playTimer = setInterval(() => {
    const next = selected() + 1;
    if (next >= frames.length) { ui.play.click(); return; }
    ui.frame.value = String(next);
    ui.follow.checked = next >= frames.length - 1;
    updateScene();
  }, 100);
});

// ---- loading ------------------------------------------------------------------------------------
let runStatus = { status: 'running', frames: 0, error: '' };
let loadedRun = null;  // /api/status "run" of the frames loaded
function showStatus(text, failed) {
  ui.status.textContent = text;
  ui.status.classList.toggle('failed', !!failed);
}
function reportCounts() {
  ui.framesCount.textContent = String(frames.length);
  ui.pointsCount.textContent = totalPoints.toLocaleString('en-US');
  document.body.dataset.frames = String(frames.length);
  document.body.dataset.points = String(totalPoints);
  document.body.dataset.pointsKept = String(keptPoints);
  document.body.dataset.pointBudget = String(POINT_BUDGET);
  ui.pointsKept.textContent = keptPoints.toLocaleString('en-US');
  document.body.dataset.status = runStatus.status;
  const s = runStatus.status;
  const what = s === 'running' ? (runStatus.live ? 'run in progress' : 'run in progress (no summary.json yet)')
    : s === 'failed' ? `run failed: ${runStatus.error}` : s === 'ended' ? `run ended: ${runStatus.error}`
    : s === 'disconnected' ? 'server not answering (the run or viewer stopped?); retrying' : `run ${s}`;
  const loading = frameError ? ` · ${frameError}` : frames.length < runStatus.frames ? ` · loading ${frames.length}/${runStatus.frames}` : '';
  const count = (n, unit) => `${n.toLocaleString('en-US')} ${unit}${n === 1 ? '' : 's'}`;
  // The points the files hold, and those the page keeps when the budget thinned them.
  const thinned = keptPoints < totalPoints
    ? ` (${keptPoints.toLocaleString('en-US')} kept: budget ${POINT_BUDGET.toLocaleString('en-US')})` : '';
  showStatus(`${what} · ${count(frames.length, 'frame')} · ${count(totalPoints, 'point')}${thinned}${loading}`,
    s === 'failed' || !!frameError);
}

const CONCURRENCY = 6;
function frameUrl(i) { return `/run/viewer/${String(i).padStart(6, '0')}.bin`; }
let loading = false;
// A frame file that cannot be read (damaged, truncated): frames load in order, so loading stops
// before it, and the status line says which and why (reloading the page tries again).
let frameError = '';
let httpFailures = 0, httpFailedFrame = -1;  // HTTP errors in a row for the frame loading stopped at
async function loadNewFrames() {
  if (loading || frameError) return;
  loading = true;
  try {
    while (frames.length < runStatus.frames && !frameError) {
      const start = frames.length, end = Math.min(runStatus.frames, start + CONCURRENCY);
      const names = [];
      for (let i = start; i < end; ++i) names.push(frameUrl(i));
      // A failed fetch (the server gone) throws to poll(), which retries; an HTTP error ends this
      // round (the next poll asks again; the third in a row for a frame, or one after the run ended,
      // is that frame's error); a file that does not parse is this frame's error, for good.
      const replies = await Promise.all(names.map((u) => get(u, 'bytes')));
      const buffers = replies.map((r) => r.body);
      const first = frames.length === 0;
      let httpError = false;
      for (let k = 0; k < buffers.length && !frameError; ++k) {
        const name = `frame ${start + k} (${names[k]})`;
        if (!buffers[k]) {
          httpError = true;
          httpFailures = httpFailedFrame === start + k ? httpFailures + 1 : 1;
          httpFailedFrame = start + k;
          if (httpFailures >= 3 || runStatus.status !== 'running') frameError = `${name}: HTTP ${replies[k].status}`;
          break;
        }
        let f = null;
        try {
          f = parseViewerFrame(buffers[k]);
        } catch (e) {
          frameError = `${name} cannot be read: ${e.message}`;
        }
        if (f) addFrame(f);  // outside the try: a bug of this page is not the file's error
      }
      if (!frames.length) break;
      if (first) {
        setThreshold(runThreshold);
        ui.conf.min = String(runThreshold);
      }
      ui.conf.max = String(Math.max(runThreshold + 1e-3, maxConf));
      ui.conf.step = String((Number(ui.conf.max) - runThreshold) / 200);
      ui.frame.max = String(frames.length - 1);
      if (ui.follow.checked) ui.frame.value = String(frames.length - 1);
      // The view follows the first frames (until the user moves it); poll() fits again at the end.
      if (first || (!userMoved && frames.length <= 2 * CONCURRENCY)) fitView();
      updateScene(true);
      reportCounts();
      if (httpError) break;
    }
  } finally {
    loading = false;
    if (throttledDraw !== null) requestRender();  // the last batch drawn now, not up to 0.4 s later
  }
}

// fetch() and its body ('json' or 'bytes'; null for an HTTP error), with a failure to reach the
// server or a connection dropped mid-body marked as such (a page bug is not a disconnection).
async function get(url, as) {
  try {
    const r = await fetch(url, { cache: 'no-store' });
    const body = !r.ok ? null : as === 'json' ? await r.json() : await r.arrayBuffer();
    return { ok: r.ok, status: r.status, body };
  } catch (e) {
    throw Object.assign(new Error(`${url}: ${e.message}`), { unreachable: true });
  }
}
let retryMs = 500;
let fittedAll = false;  // the fit once every frame of the run is in
// Polls /api/status every 0.5 s while the run goes on, every 2 s after it ended (another run into the
// folder, or on the port, replaces what is shown). When the server does not answer (a restarted
// viewer, a run --serve that stopped), the page says so and keeps trying with a growing pause (up to
// 5 s), carrying on where it was once the server is back. A different run (/api/status "run", or
// fewer frames than loaded) makes the page start over: frames only ever append, so they must not mix
// two runs.
async function poll() {
  try {
    const r = await get('/api/status', 'json');
    if (!r.ok) throw Object.assign(new Error(`/api/status: HTTP ${r.status}`), { unreachable: true });
    runStatus = r.body;
    retryMs = 500;
    if (runStatus.run !== loadedRun || runStatus.frames < frames.length) {
      if (frames.length || frameError) {
        clearFrames();
        frameError = ''; httpFailures = 0; httpFailedFrame = -1; fittedAll = false;
        delete document.body.dataset.frameError;
        delete document.body.dataset.ready;
      }
      loadedRun = runStatus.run;
    }
    reportCounts();
    await loadNewFrames();
    reportCounts();
  } catch (e) {
    if (!e.unreachable) console.error(e);  // a bug of this page: shown to the console (and the tests)
    else runStatus = { ...runStatus, status: 'disconnected' };  // also after the run ended: say so, retry
    reportCounts();
  }
  if (frameError) document.body.dataset.frameError = frameError;
  // A finished run's files no longer change; a running one (or a viewer of a running folder) is polled.
  const done = runStatus.status !== 'running' && runStatus.status !== 'disconnected' &&
    (frames.length >= runStatus.frames || !!frameError);
  // Everything loaded: fit to the whole run, unless the user has moved the camera (the frustums are
  // sized to it either way).
  if (done && !fittedAll && frames.length) {
    fittedAll = true;
    if (!userMoved) fitView(true);
    else { frustumScale = 0.08 * sceneBounds().radius; updateScene(); }
  }
  if (done || runStatus.status === 'disconnected') document.body.dataset.ready = '1';
  if (!done && runStatus.status === 'disconnected') {
    setTimeout(poll, retryMs);  // 0.5 s, 1 s, 2 s, 4 s, then every 5 s
    retryMs = Math.min(5000, retryMs * 2);
  } else {
    setTimeout(poll, done ? 2000 : 500);
  }
}
poll();
