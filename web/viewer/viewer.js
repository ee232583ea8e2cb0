// The lingbot-map browser viewer: reads a run's viewer/NNNNNN.bin files through the server that
// `lingbot-map view` / `run --serve` starts, follows /api/status while the run goes on, and draws
// the per-frame point chunks, camera frustums with the frame image, and the trajectory.
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
// (the frame whose image the 2D preview shows; absent while it is being fetched).
//
// Memory is bounded for long and live runs (README "Viewer"): at most ?points=N points (default 4M)
// are kept, older frames thinned to make room, and at most ?images=N frames keep their image.
import * as THREE from 'three';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';
import { parseViewerFrame } from '/viewer_format.js';

const $ = (id) => document.getElementById(id);

// ---- memory bounds ------------------------------------------------------------------------------
// A 10,000-frame or live run must not hold every frame's points and image until the tab dies.
// ?points=N: the points kept in all (JS arrays and GPU buffers, about 19 bytes each in both); over
// it, loaded frames are thinned (enforceBudget). ?images=N: the frames that keep their image (an
// RGBA copy and a texture, 77 kB each at 160x120); the others' frustums are lines only.
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
  controls.addEventListener('change', requestRender);
  controls.addEventListener('start', () => { userMoved = true; });  // pointer and wheel, not keys
  controls.listenToKeyEvents(renderer.domElement);
  controls.update();
}
renderer.domElement.addEventListener('keydown', (e) => { if (/^Arrow/.test(e.code)) userMoved = true; });
makeControls(new THREE.Vector3(0, 0, 0));

const pointMaterial = new THREE.ShaderMaterial({
  uniforms: { uSize: { value: 3 * window.devicePixelRatio }, uThreshold: { value: 0 } },
  vertexShader: `
    attribute vec3 rgb;
    attribute float conf;
    uniform float uSize;
    uniform float uThreshold;
    varying vec3 vColor;
    void main() {
      vColor = rgb;
      gl_Position = projectionMatrix * modelViewMatrix * vec4(position, 1.0);
      // The same rule as points.ply: shown when conf > threshold. Others go outside the clip volume.
      if (!(conf > uThreshold)) gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
      gl_PointSize = uSize;
    }`,
  fragmentShader: `
    varying vec3 vColor;
    void main() { gl_FragColor = vec4(vColor, 1.0); }`,
});
const frustumMaterial = new THREE.LineBasicMaterial({ color: 0x4fc3f7 });
const selectedMaterial = new THREE.LineBasicMaterial({ color: 0xffb300 });
const trajectoryMaterial = new THREE.LineBasicMaterial({ color: 0xff5252 });
let trajectoryLine = null;

// frames[i]: parsed file (its own arrays: ownArrays), its three.js objects, how many times its
// points were halved (level) and its image while it holds one; loaded strictly in order.
const frames = [];
// totalPoints: what the files hold (= points.ply); keptPoints: what the page holds after thinning.
let runThreshold = null, maxConf = 0, totalPoints = 0, keptPoints = 0, frustumScale = null;
let renderPending = false;
function requestRender() {
  if (renderPending) return;
  renderPending = true;
  requestAnimationFrame(() => {
    renderPending = false;
    renderer.render(scene, camera);
    document.body.dataset.camera = camera.position.toArray().map((v) => v.toPrecision(6)).join(',');
  });
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

// The parser's arrays are views into the fetched file: one kept would keep all of it (points and
// image) alive. The frame keeps copies of its points and pose; its image is returned for keepImage.
function ownArrays(f) {
  const image = rgbaImage(f);
  f.xyz = f.xyz.slice(); f.conf = f.conf.slice(); f.rgb = f.rgb.slice(); f.c2w = f.c2w.slice();
  delete f.previewRgb;
  return image;
}

function pointGeometry(f) {
  const geom = new THREE.BufferGeometry();
  geom.setAttribute('position', new THREE.BufferAttribute(f.xyz, 3));
  geom.setAttribute('rgb', new THREE.BufferAttribute(f.rgb, 3, true));
  geom.setAttribute('conf', new THREE.BufferAttribute(f.conf, 1));
  geom.computeBoundingSphere();
  return geom;
}

// A frustum in camera coordinates (apex at the origin, image plane at z = 1) scaled by the scene size,
// placed by the frame's camera -> world matrix; the frame image, while the frame holds it
// (setFrustumImage), textures its far rectangle.
function makeFrustum(f) {
  const group = new THREE.Group();
  // Pixel centres sit at integer coordinates (README, camera convention): the image edges at -0.5, W - 0.5.
  const l = -0.5, r = f.width - 0.5, t = -0.5, b = f.height - 0.5;
  const corners = [[l, t], [r, t], [r, b], [l, b]].map(
    ([u, v]) => new THREE.Vector3((u - f.cx) / f.fx, (v - f.cy) / f.fy, 1));
  const o = new THREE.Vector3(0, 0, 0), seg = [];
  for (let i = 0; i < 4; ++i) seg.push(o, corners[i], corners[i], corners[(i + 1) % 4]);
  const lines = new THREE.LineSegments(new THREE.BufferGeometry().setFromPoints(seg), frustumMaterial);
  group.add(lines);
  group.matrixAutoUpdate = false;
  group.userData.lines = lines;
  group.userData.corners = corners;
  group.userData.image = null;
  return group;
}

// Puts the image on the frustum's far rectangle (null: takes it off, freeing its texture).
function setFrustumImage(frustum, image) {
  const old = frustum.userData.image;
  if (old) {
    frustum.remove(old);
    old.geometry.dispose(); old.material.map.dispose(); old.material.dispose();
    frustum.userData.image = null;
  }
  if (!image) return;
  const c = frustum.userData.corners;
  const quad = new THREE.BufferGeometry().setFromPoints([c[0], c[1], c[3], c[2]]);
  quad.setAttribute('uv', new THREE.Float32BufferAttribute([0, 0, 1, 0, 0, 1, 1, 1], 2));
  quad.setIndex([0, 2, 1, 1, 2, 3]);
  const mesh = new THREE.Mesh(quad, new THREE.MeshBasicMaterial({ map: rgbaTexture(image), side: THREE.DoubleSide }));
  frustum.add(mesh);
  frustum.userData.image = mesh;
}

function addFrame(f) {
  const image = ownArrays(f);
  const points = new THREE.Points(pointGeometry(f), pointMaterial);
  points.frustumCulled = f.count > 0;
  scene.add(points);
  const frustum = makeFrustum(f);
  scene.add(frustum);
  const m = c2wMatrix(f.c2w);
  const center = new THREE.Vector3().setFromMatrixPosition(m);
  // A frame without a finite camera (poses.json "valid": false: a non-finite pose or intrinsics) has
  // no camera to draw or to fit.
  const posed = Array.prototype.every.call(f.c2w, Number.isFinite) && [f.fx, f.fy, f.cx, f.cy].every(Number.isFinite);
  frames.push({ f, points, frustum, m, center, posed, level: 0, image: null });
  totalPoints += f.count;
  keptPoints += f.count;
  if (runThreshold === null) runThreshold = f.confThreshold;
  for (let i = 0; i < f.count; ++i) if (Number.isFinite(f.conf[i]) && f.conf[i] > maxConf) maxConf = f.conf[i];
  keepImage(frames.length - 1, image);
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
      if (i !== keep && fr.f.conf.length > 1 && (!victim || fr.level < victim.level)) victim = fr;
    }
    if (!victim) break;
    halvePoints(victim.f);
    victim.level += 1;
    thinned.add(victim);
  }
  // New GPU buffers once per frame (not per halving); the old ones are freed now, not at GC.
  for (const fr of thinned) {
    const old = fr.points.geometry;
    fr.points.geometry = pointGeometry(fr.f);
    old.dispose();
  }
}

// Keeps every other point (the first, third, ...), in compact copies: the old arrays are released.
function halvePoints(f) {
  const n = f.conf.length, m = Math.ceil(n / 2);
  const xyz = new Float32Array(3 * m), conf = new Float32Array(m), rgb = new Uint8Array(3 * m);
  for (let k = 0; k < m; ++k) {
    const i = 2 * k;
    xyz[3 * k] = f.xyz[3 * i]; xyz[3 * k + 1] = f.xyz[3 * i + 1]; xyz[3 * k + 2] = f.xyz[3 * i + 2];
    rgb[3 * k] = f.rgb[3 * i]; rgb[3 * k + 1] = f.rgb[3 * i + 1]; rgb[3 * k + 2] = f.rgb[3 * i + 2];
    conf[k] = f.conf[i];
  }
  keptPoints -= n - m;
  f.xyz = xyz; f.conf = conf; f.rgb = rgb;
}

// ---- frame images -------------------------------------------------------------------------------
// The frames that hold their image, least recently loaded or selected first (a Map keeps insertion
// order): at most IMAGE_FRAMES, the selected one always. Their frustums show the image; a frame
// without one, once selected, has its file fetched again for it (fetchImage).
const imageFrames = new Map();  // frames[] index -> frame
function keepImage(i, image) {
  const fr = frames[i];
  if (image && !fr.image) { fr.image = image; setFrustumImage(fr.frustum, image); }
  imageFrames.delete(i);
  imageFrames.set(i, fr);
  const keep = protectedFrame();
  for (const [k, old] of imageFrames) {
    if (imageFrames.size <= IMAGE_FRAMES) break;
    if (k === keep || k === selected()) continue;
    old.image = null;
    setFrustumImage(old.frustum, null);
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
  for (const fr of frames) {
    scene.remove(fr.points, fr.frustum);
    fr.points.geometry.dispose();
    fr.frustum.traverse((o) => {
      if (o.geometry) o.geometry.dispose();
      if (o.material && o.material !== frustumMaterial && o.material !== selectedMaterial) { o.material.map?.dispose(); o.material.dispose(); }
    });
  }
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
function frameVisible(i) {
  return i <= selected() && i % everyNth() === 0 && (!ui.keyframes.checked || frames[i].f.keyframe);
}

function updateScene() {
  enforceBudget();  // the frame selected until now may have held the page over the budget
  const sel = selected(), thr = pointMaterial.uniforms.uThreshold.value;
  let shown = 0;
  const centers = [];
  for (let i = 0; i < frames.length; ++i) {
    const fr = frames[i], vis = frameVisible(i);
    fr.points.visible = vis;
    fr.frustum.visible = fr.posed && ui.cameras.checked && (vis || i === sel);
    fr.frustum.userData.lines.material = i === sel ? selectedMaterial : frustumMaterial;
    const s = frustumScale || 0.1;
    fr.frustum.matrix.copy(fr.m).multiply(new THREE.Matrix4().makeScale(s, s, s));
    fr.frustum.matrixWorldNeedsUpdate = true;
    if (i <= sel && fr.posed) centers.push(fr.center);
    if (vis) { const c = fr.f.conf; for (let k = 0; k < c.length; ++k) if (c[k] > thr) ++shown; }
  }
  if (trajectoryLine) { scene.remove(trajectoryLine); trajectoryLine.geometry.dispose(); trajectoryLine = null; }
  if (ui.trajectory.checked && centers.length > 1) {
    trajectoryLine = new THREE.Line(new THREE.BufferGeometry().setFromPoints(centers), trajectoryMaterial);
    scene.add(trajectoryLine);
  }
  ui.pointsShown.textContent = shown.toLocaleString('en-US');
  document.body.dataset.pointsShown = String(shown);
  updateSelection();
  requestRender();
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
  const kept = f.conf.length;
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
  const visible = frames.filter((_, i) => frameVisible(i));
  const total = visible.reduce((s, fr) => s + fr.f.conf.length, 0), step = Math.max(1, Math.floor(total / 20000));
  let k = 0;
  for (const fr of visible) {
    const p = fr.f.xyz, c = fr.f.conf;
    for (let i = 0; i < c.length; ++i, ++k) {
      if (k % step || !(c[i] > thr) || !Number.isFinite(p[3 * i])) continue;
      xs.push(p[3 * i]); ys.push(p[3 * i + 1]); zs.push(p[3 * i + 2]);
    }
  }
  const posed = frames.filter((fr) => fr.posed);
  for (const fr of posed) { xs.push(fr.center.x); ys.push(fr.center.y); zs.push(fr.center.z); }
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
  for (const fr of posed) radius = Math.max(radius, Math.min(fr.center.distanceTo(center), 10 * pointsRadius));
  const up = new THREE.Vector3();
  for (const fr of posed) up.add(new THREE.Vector3(-fr.f.c2w[1], -fr.f.c2w[5], -fr.f.c2w[9]));  // -y column of R
  if (up.lengthSq() < 1e-12) up.set(0, -1, 0);
  up.normalize();
  const c0 = posed.length ? posed[0].f.c2w : [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0];
  const forward = new THREE.Vector3(c0[2], c0[6], c0[10]).normalize();  // z column of R
  return { center, radius, up, forward, posed };
}

// The orbit camera behind and above the first frame's camera, looking at the scene centre. Frustums
// are sized from the scene at the first fit and again when every frame is in (`rescale`): the first
// frames alone can be far smaller or larger than the whole run.
function fitView(rescale = false) {
  if (!frames.length) return;
  const { center, radius, up, forward, posed } = sceneBounds();
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
  const inView = posed.filter((fr) => {
    const p = fr.center.clone().project(camera);
    return Math.abs(p.x) <= 1 && Math.abs(p.y) <= 1 && p.z >= -1 && p.z <= 1;
  }).length;
  document.body.dataset.camerasInView = String(inView);
  document.body.dataset.cameras = String(posed.length);
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
      updateScene();
      reportCounts();
      if (httpError) break;
    }
  } finally {
    loading = false;
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
