// Browser tests of the lingbot-map viewer: headless Debian chromium driven by playwright-core.
//   node web/test/viewer_test.mjs static --cli BUILD/lingbot-map --work DIR [--screenshot OUT.png]
//     `run --demo`, then `view`: the page's frame and point counts equal poses.json's frames and
//     points.ply's vertex count; the 3D view is not blank and changes when the frame slider moves;
//     damaged frame files are named with the reason; the controls are named and usable by keyboard;
//     another run into the folder replaces the frames shown and the view fits all of its frames.
//   node web/test/viewer_test.mjs live --cli BUILD/lingbot-map --work DIR
//     `run --demo --demo-frames 40 --serve 0 --demo-pace S`: the page's frame count grows while the
//     run goes on and ends at 40 with the status "completed" (S = 0.25 s; when the run ended before
//     the page first polled, which a loaded machine can cause, it runs again at 4x and 16x the pace);
//     a camera the user moved stays where it is. Then a run killed (SIGKILL) and another one on the
//     same port and folder: the page shows the second run's frames only.
//   node web/test/viewer_test.mjs budget --cli BUILD/lingbot-map --work DIR
//     `run --demo --demo-frames 30 --image-size 56`, then `view` with a point budget of a fifth of the run's points
//     and 4 frame images (?points=N&images=4): the page keeps at most N points, says so, still counts
//     points.ply's, thins every frame alike (none emptied), holds at most 4 images, and an early
//     frame selected shows its own image (fetched again). Then those files cycled into a 600-frame run:
//     the page draws it in a bounded number of draw calls (points in chunks of frames, one for all
//     frustums) and holds far less JavaScript per frame than a three.js object per frame did.
// Exit code 0 = pass; every failed check prints one "FAIL: ..." line.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [mode, ...rest] = process.argv.slice(2);
const opt = {};
for (let i = 0; i < rest.length; i += 2) opt[rest[i].replace(/^--/, '')] = rest[i + 1];
if (!['static', 'live', 'budget'].includes(mode) || !opt.cli || !opt.work) {
  console.error('usage: viewer_test.mjs static|live|budget --cli PATH --work DIR [--screenshot OUT.png]');
  process.exit(2);
}
const CHROMIUM_FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
  '--disable-sync', '--no-first-run', '--disable-quic'];
let failures = 0;
function check(cond, what) {
  console.log(`${cond ? 'ok  ' : 'FAIL'}: ${what}`);
  if (!cond) failures += 1;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts the CLI and resolves with the viewer URL it prints ("viewer: http://...").
function startServer(args) {
  const child = spawn(opt.cli, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const url = new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/viewer: (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    child.stderr.on('data', (d) => process.stderr.write(d));
    child.on('exit', (code) => reject(new Error(`${args[0]} exited with ${code} before serving:\n${out}`)));
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, url, exited, output: () => out };
}

function plyVertexCount(file) {
  const head = fs.readFileSync(file).subarray(0, 4096).toString('latin1');
  const m = head.match(/element vertex (\d+)/);
  return m ? Number(m[1]) : -1;
}

// Pixel statistics of a PNG, decoded by the browser itself (no PNG library in node).
async function pngStats(page, png, other) {
  return page.evaluate(async ([a, b]) => {
    const load = async (b64) => {
      const img = new Image();
      img.src = `data:image/png;base64,${b64}`;
      await img.decode();
      const c = document.createElement('canvas');
      c.width = img.width; c.height = img.height;
      const ctx = c.getContext('2d');
      ctx.drawImage(img, 0, 0);
      return ctx.getImageData(0, 0, c.width, c.height).data;
    };
    const da = await load(a);
    let sum = 0, sum2 = 0;
    const n = da.length / 4;
    for (let i = 0; i < n; ++i) {
      const y = 0.299 * da[4 * i] + 0.587 * da[4 * i + 1] + 0.114 * da[4 * i + 2];
      sum += y; sum2 += y * y;
    }
    const result = { variance: sum2 / n - (sum / n) ** 2, differing: null };
    if (b) {
      const db = await load(b);
      let diff = 0;
      for (let i = 0; i < n; ++i) {
        if (Math.abs(da[4 * i] - db[4 * i]) + Math.abs(da[4 * i + 1] - db[4 * i + 1]) + Math.abs(da[4 * i + 2] - db[4 * i + 2]) > 24) diff += 1;
      }
      result.differing = diff / n;
    }
    return result;
  }, [png.toString('base64'), other ? other.toString('base64') : null]);
}

// Launched before the server so that a slow browser start does not miss a live run.
async function launchBrowser() {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: CHROMIUM_FLAGS });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  return { browser, page };
}

// Errors of the page as a user sees them in the browser's console: its exceptions, console errors
// (which include Chromium's "Failed to load resource" for a load that failed or got an HTTP error),
// and requests that failed. Network events are numbered in the order they happen (`order`): each
// error carries its own or its request's number; `http` lists the HTTP errors by request (order, status,
// URL), `statuses` the number and run of each /api/status reply (the restart test tells the requests
// made for the first run by them).
async function openPage({ browser, page }, url) {
  const errors = [], statuses = [], http = [];
  const order = new Map();  // request -> its number
  let counter = 0;
  const add = (text, request) => errors.push({ text, order: (request && order.get(request)) ?? ++counter, toString: () => text });
  page.on('pageerror', (e) => add(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') add(m.text()); });
  // net::ERR_ABORTED is the page itself cancelling a load it no longer needs (a live run moves the
  // selected frame on while the previous frame's depth preview is still loading): not a failure.
  page.on('requestfailed', (r) => {
    const why = r.failure() ? r.failure().errorText : '';
    if (why !== 'net::ERR_ABORTED') add(`request failed: ${r.url()} (${why})`, r);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) http.push({ order: order.get(r.request()) ?? ++counter, status: r.status(), url: r.url() });
    else if (new URL(r.url()).pathname === '/api/status') {
      const at = ++counter;
      r.json().then((b) => statuses.push({ order: at, run: b.run }), () => {});
    }
  });
  // No network at view time: any request that is not to the viewer server fails the test.
  const origin = new URL(url).origin;
  page.on('request', (r) => {
    order.set(r, ++counter);
    if (!r.url().startsWith(origin) && !r.url().startsWith('data:')) add(`external request: ${r.url()}`);
  });
  await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 90000 });
  // mark(): where the page's error lists are now, and the next event's number (`order`)
  return { browser, page, errors, statuses, http, mark: () => ({ errors: errors.length, http: http.length, order: counter }) };
}

// The page's errors less those of loads it made for a run that another one then replaced (a run
// written into the folder `view` shows, a `run --serve` restarted on its port): such a request fails
// at the connection (refused, reset: Chromium names a dropped peer in several ways) or gets a 404 (the
// new run has no such file, or not yet), and the page drops the reply; the console shows one "Failed
// to load resource" line for each. A request was made for the run the page's latest /api/status reply
// named; it was replaced when a later reply names another. Only errors from `mark` on (the counts of
// `errors` and `http` when the replacing began) are excused.
function unexplainedErrors({ errors, http, statuses }, mark) {
  const runAt = (order) => statuses.filter((x) => x.order < order).at(-1)?.run;
  const replaced = (order) => statuses.some((x) => x.order > order && x.run !== runAt(order));
  const later = errors.slice(mark.errors);
  const failed = later.filter((e) => /^request failed: .* \(net::ERR_[A-Z_]+\)$/.test(e.text) && replaced(e.order));
  let consoleFailed = failed.length;  // the console lines those explain
  let console404 = http.slice(mark.http).filter((h) => h.status === 404 && replaced(h.order)).length;
  return [...errors.slice(0, mark.errors), ...later.filter((e) => {
    if (failed.includes(e)) return false;
    if (/^Failed to load resource: net::ERR_[A-Z_]+$/.test(e.text) && consoleFailed > 0) return (consoleFailed -= 1, false);
    if (e.text.startsWith('Failed to load resource: the server responded with a status of 404') && console404 > 0) {
      return (console404 -= 1, false);
    }
    return true;
  })];
}

const body = (page, key) => page.evaluate((k) => document.body.dataset[k], key);

async function staticTest() {
  const out = path.join(opt.work, 'demo');
  fs.rmSync(out, { recursive: true, force: true });
  execFileSync(opt.cli, ['run', '--demo', '--out', out], { stdio: ['ignore', 'ignore', 'inherit'] });
  const posesFrames = JSON.parse(fs.readFileSync(path.join(out, 'poses.json'), 'utf8')).frames.length;
  const plyPoints = plyVertexCount(path.join(out, 'points.ply'));
  const launched = await launchBrowser();
  const server = startServer(['view', out, '--port', '0']);
  const url = await server.url;
  const opened = await openPage(launched, url);
  const { browser, page } = opened;
  try {
    await page.waitForSelector('body[data-ready="1"]', { timeout: 90000 });
    const frames = Number(await body(page, 'frames')), points = Number(await body(page, 'points'));
    check(frames === posesFrames && frames > 0, `page frames ${frames} == poses.json frames ${posesFrames}`);
    check(points === plyPoints && points > 0, `page points ${points} == points.ply vertices ${plyPoints}`);
    check(Number(await body(page, 'pointsShown')) === plyPoints, 'all points shown at the run\'s confidence threshold');
    check((await body(page, 'status')) === 'completed', 'page reports the run completed');
    // Controls: named for assistive technology, the frame number is not part of the play button, the
    // "every" field shows the value it acts as, the 3D view takes the orbit controls' arrow keys.
    check(await page.getByRole('slider', { name: 'frame', exact: true }).count() === 1, 'the frame slider is named "frame"');
    check(await page.getByRole('button', { name: 'play', exact: true }).count() === 1, 'the play button is named "play"');
    check((await page.getAttribute('#status', 'aria-live')) === 'polite', 'the status line is announced (aria-live polite)');
    await page.click('#frame-num');
    await sleep(300);
    check((await page.getAttribute('#play', 'aria-label')) === 'play', 'clicking the frame number does not start playback');
    const everyShown = [];
    for (const typed of ['-3', '0', '', '2.5', '1']) {
      await page.fill('#every', typed);
      await page.locator('#every').blur();
      everyShown.push(await page.inputValue('#every'));
    }
    check(everyShown.join(' ') === '1 1 1 2 1', `the "every" field shows the value it acts as: ${everyShown.join(' ')} for -3 0 '' 2.5 1`);
    check(await page.isVisible('#preview-depth') && await page.isHidden('#depth-none'), 'a run with depth previews shows them');
    const cameraBefore = await body(page, 'camera');
    await page.focus('#view canvas');
    await page.keyboard.press('ArrowLeft');
    await page.waitForFunction((c) => document.body.dataset.camera !== c, cameraBefore, { timeout: 5000 }).catch(() => {});
    check((await body(page, 'camera')) !== cameraBefore, 'an arrow key on the focused 3D view moves the camera');
    // A damaged frame file's error says what is wrong, not a typed array's RangeError.
    const parsed = await page.evaluate(async () => {
      const { parseViewerFrame } = await import('/viewer_format.js');
      const good = await (await fetch('/run/viewer/000003.bin')).arrayBuffer();
      const count = good.slice(0);
      new DataView(count).setUint32(104, 0x7fffffff, true);  // the point count
      const result = {};
      for (const [k, b] of Object.entries({ truncated: good.slice(0, 5000), empty: new ArrayBuffer(0), count })) {
        try { parseViewerFrame(b); result[k] = 'parsed'; } catch (e) { result[k] = e.message; }
      }
      return result;
    });
    check(/^5000 bytes, expected \d+ for \d+ points and a \d+x\d+ preview \(truncated\?\)$/.test(parsed.truncated), `truncated frame: "${parsed.truncated}"`);
    check(parsed.empty === '0 bytes: shorter than its 128-byte header (truncated?)', `empty frame: "${parsed.empty}"`);
    check(/^\d+ bytes, expected \d+ for 2147483647 points/.test(parsed.count), `frame with a damaged count: "${parsed.count}"`);
    await page.click('#fit');
    await sleep(300);
    const cameras = Number(await body(page, 'cameras')), inView = Number(await body(page, 'camerasInView'));
    check(cameras === posesFrames && inView === cameras, `"fit view" shows every camera (${inView} of ${cameras} in view)`);
    const canvas = page.locator('#view canvas');
    const shotAll = await canvas.screenshot();
    const statsAll = await pngStats(page, shotAll);
    check(statsAll.variance > 50, `3D view not blank: luminance variance ${statsAll.variance.toFixed(1)} > 50`);
    if (opt.screenshot) fs.writeFileSync(opt.screenshot, await page.screenshot());
    await page.fill('#frame', '0');
    await page.waitForSelector('body[data-selected="0"]');
    await sleep(300);
    const noClock = await page.textContent('#st-timestamp');
    check(noClock === 'none (the input has no clock)', `a demo frame's timestamp is not shown as seconds: "${noClock}"`);
    const shotFirst = await canvas.screenshot();
    const diff = await pngStats(page, shotFirst, shotAll);
    check(diff.differing > 0.005, `view changes when the frame slider moves: ${(100 * diff.differing).toFixed(2)}% pixels differ > 0.5%`);
    // The confidence control filters on the GPU and in the count.
    await page.fill('#frame', String(frames - 1));
    await page.evaluate(() => { const c = document.getElementById('conf'); c.value = c.max; c.dispatchEvent(new Event('input')); });
    const shownMax = Number(await body(page, 'pointsShown'));
    check(shownMax < plyPoints, `confidence threshold at its maximum shows fewer points (${shownMax} < ${plyPoints})`);
    // A frame without a finite pose (a run writes its viewer file with a NaN c2w) must not blank the
    // view: its camera is left out of the fit, the trajectory and the frustums.
    const last = path.join(out, 'viewer', fs.readdirSync(path.join(out, 'viewer')).filter((n) => n.endsWith('.bin')).sort().pop());
    const bytes = fs.readFileSync(last);
    new Float32Array(bytes.buffer, bytes.byteOffset + 40, 12).fill(NaN);  // c2w (viewer_format.js)
    const header = new DataView(bytes.buffer, bytes.byteOffset, 128);  // and a clock: flags bit 1, 2.5 s
    header.setUint32(12, header.getUint32(12, true) | 2, true);
    header.setFloat64(24, 2.5, true);
    fs.writeFileSync(last, bytes);
    const first = path.join(out, 'viewer', '000000.bin');  // a version-1 file: its timestamp's unit is unknown
    const firstBytes = fs.readFileSync(first);
    new DataView(firstBytes.buffer, firstBytes.byteOffset, 128).setUint32(4, 1, true);
    fs.writeFileSync(first, firstBytes);
    await page.reload({ waitUntil: 'domcontentloaded' });
    await page.waitForSelector('body[data-ready="1"]', { timeout: 90000 });
    await page.click('#fit');
    await sleep(300);
    const statsNan = await pngStats(page, await canvas.screenshot());
    check(statsNan.variance > 50, `3D view not blank with a NaN-pose frame: luminance variance ${statsNan.variance.toFixed(1)} > 50`);
    await page.fill('#frame', String(frames - 1));
    await page.waitForSelector(`body[data-selected="${frames - 1}"]`);
    const seconds = await page.textContent('#st-timestamp');
    check(seconds === '2.500 s', `a frame with a clock shows its timestamp in seconds: "${seconds}"`);
    await page.fill('#frame', '0');
    await page.waitForSelector('body[data-selected="0"]');
    const unknown = await page.textContent('#st-timestamp');
    check(unknown === '0.000', `a version-1 frame's timestamp has no unit: "${unknown}"`);
    // A run without depth previews: the page asks for none (a 404 would be a console error) and says
    // so instead of a broken image. A damaged frame file: the frames before it are shown, loading
    // stops there and the status says why.
    fs.rmSync(path.join(out, 'depth_preview'), { recursive: true, force: true });
    const damaged = path.join(out, 'viewer', '000001.bin');
    fs.truncateSync(damaged, 100);
    await page.reload({ waitUntil: 'domcontentloaded' });
    await page.waitForSelector('body[data-ready="1"]', { timeout: 90000 });
    check(Number(await body(page, 'frames')) === 1, `loading stops before the damaged frame 1 (${await body(page, 'frames')} frames)`);
    const frameError = (await body(page, 'frameError')) || '';
    check(frameError === 'frame 1 (/run/viewer/000001.bin) cannot be read: 100 bytes: shorter than its 128-byte header (truncated?)',
      `the page names the damaged frame and why: "${frameError}"`);
    const statusText = await page.textContent('#status');
    check(statusText.includes(frameError), `the status line shows it: "${statusText}"`);
    check(statusText.includes(' · 1 frame · '), `one frame is "1 frame": "${statusText}"`);
    check(await page.isHidden('#preview-depth') && await page.isVisible('#depth-none'), 'no depth previews: a note, not a broken image');
    // Another run into the folder while `view` goes on (more frames, other points): the page drops
    // what it showed, the damaged file's error too, loads the new run and fits the view to all of it.
    const rewritten = opened.mark();  // from here, loads made for a run the next one replaced may fail
    execFileSync(opt.cli, ['run', '--demo', '--demo-frames', '20', '--image-size', '56', '--out', out], { stdio: ['ignore', 'ignore', 'inherit'] });
    const points2 = plyVertexCount(path.join(out, 'points.ply'));
    await page.waitForFunction(() => document.body.dataset.frames === '20' && document.body.dataset.ready === '1', null, { timeout: 90000 })
      .catch(() => {});
    check(Number(await body(page, 'frames')) === 20 && Number(await body(page, 'points')) === points2,
      `the page shows the new run: ${await body(page, 'frames')} frames (20), ${await body(page, 'points')} points (${points2})`);
    check(!(await body(page, 'frameError')), 'the earlier run\'s frame error is gone');
    const cameras2 = Number(await body(page, 'cameras')), inView2 = Number(await body(page, 'camerasInView'));
    check(cameras2 === 20 && inView2 === 20, `the view opens on all 20 cameras without "fit view" (${inView2} of ${cameras2} in view)`);
    // Frames without a point (none above the threshold; a non-finite camera gives none either), the
    // first of a chunk among them: each still shows its camera.
    execFileSync(opt.cli, ['run', '--demo', '--demo-frames', '3', '--image-size', '56', '--conf-threshold', '1e30', '--out', out],
      { stdio: ['ignore', 'ignore', 'inherit'] });
    await page.waitForFunction(() => document.body.dataset.frames === '3' && document.body.dataset.ready === '1', null, { timeout: 90000 })
      .catch(() => {});
    const cameras3 = Number(await body(page, 'cameras'));
    check(Number(await body(page, 'frames')) === 3 && Number(await body(page, 'points')) === 0 && cameras3 === 3,
      `a run whose frames have no points: ${await body(page, 'frames')} frames (3), ${await body(page, 'points')} points (0), ${cameras3} cameras (3)`);
    const errors = unexplainedErrors(opened, rewritten);
    check(errors.length === 0, `no page errors${errors.length ? ': ' + errors.join(' | ') : ''}`);
  } finally {
    await browser.close();
    server.child.kill('SIGINT');
    const { code } = await server.exited;
    check(code === 0, `view exits 0 on SIGINT (got ${code})`);
  }
}

// A viewer frame file's preview image (docs/viewer.md "Viewer frame format"): { width, height, rgb }.
function framePreview(file) {
  const b = fs.readFileSync(file), dv = new DataView(b.buffer, b.byteOffset, b.length);
  const n = dv.getUint32(104, true), width = dv.getUint32(112, true), height = dv.getUint32(116, true);
  const off = dv.getUint32(8, true) + 16 * n + Math.ceil(3 * n / 4) * 4;
  return { width, height, rgb: b.subarray(off, off + 3 * width * height) };
}

// The point budget and the bound on frame images (URL parameters): a run of 30 frames with a budget
// of a fifth of its points.
async function budgetTest() {
  const out = path.join(opt.work, 'budget');
  fs.rmSync(out, { recursive: true, force: true });
  const total = 30;
  execFileSync(opt.cli, ['run', '--demo', '--demo-frames', String(total), '--image-size', '56', '--out', out], { stdio: ['ignore', 'ignore', 'inherit'] });
  const plyPoints = plyVertexCount(path.join(out, 'points.ply'));
  const budget = Math.floor(plyPoints / 5), images = 4;
  const launched = await launchBrowser();
  const server = startServer(['view', out, '--port', '0']);
  const url = await server.url;
  const { browser, page, errors } = await openPage(launched, `${url}?points=${budget}&images=${images}`);
  try {
    await page.waitForSelector('body[data-ready="1"]', { timeout: 90000 });
    const points = Number(await body(page, 'points')), kept = Number(await body(page, 'pointsKept'));
    check(Number(await body(page, 'frames')) === total, `page frames ${await body(page, 'frames')} == ${total}`);
    check(points === plyPoints, `page points ${points} == points.ply vertices ${plyPoints} (what the files hold)`);
    check(Number(await body(page, 'pointBudget')) === budget, `the page takes the budget from ?points= (${await body(page, 'pointBudget')})`);
    check(kept <= budget && kept > budget / 2, `points kept ${kept} within the budget ${budget} and not thinned past half of it`);
    check(Number(await body(page, 'pointsShown')) <= kept, `points shown ${await body(page, 'pointsShown')} <= kept ${kept}`);
    const status = await page.textContent('#status');
    const note = `${points.toLocaleString('en-US')} points (${kept.toLocaleString('en-US')} kept: budget ${budget.toLocaleString('en-US')})`;
    check(status.includes(note), `the status line says so: "${status}"`);
    check(Number(await body(page, 'images')) <= images, `frames holding their image: ${await body(page, 'images')} <= ${images}`);
    // Frame 0's image was dropped long ago: selecting it fetches the file again, and the 2D preview
    // shows exactly that file's image.
    await page.fill('#frame', '0');
    await page.waitForSelector('body[data-preview="0"]', { timeout: 10000 }).catch(() => {});
    const want = framePreview(path.join(out, 'viewer', '000000.bin'));
    const shown = await page.evaluate(() => {
      const c = document.getElementById('preview-image');
      return { width: c.width, height: c.height, rgba: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data) };
    });
    let same = shown.width === want.width && shown.height === want.height && want.width > 0;
    for (let i = 0; same && i < want.width * want.height; ++i) {
      for (let c = 0; c < 3; ++c) same &&= shown.rgba[4 * i + c] === want.rgb[3 * i + c];
    }
    check((await body(page, 'preview')) === '0' && same,
      `frame 0 selected: the preview shows its image (${shown.width}x${shown.height}, file ${want.width}x${want.height}, ${same ? 'same' : 'different'} pixels)`);
    // Every frame keeps points, and all but the last loaded (selected while loading) alike: every
    // 2^k-th or 2^(k+1)-th of its file's, not the oldest frames emptied and the newest whole.
    const perFrame = [];
    for (let i = 0; i < total; ++i) {
      await page.fill('#frame', String(i));
      await page.waitForSelector(`body[data-selected="${i}"]`);
      const m = (await page.textContent('#st-points')).replaceAll(',', '').match(/^(\d+)(?: \((\d+) kept\))?$/);
      perFrame.push(m ? { count: Number(m[1]), kept: Number(m[2] ?? m[1]) } : { count: -1, kept: -1 });
    }
    const emptied = perFrame.filter((p) => p.count !== 0 && !(p.kept > 0)).length;
    check(emptied === 0, `every frame with points keeps some (${emptied} emptied; ${perFrame.map((p) => `${p.kept}/${p.count}`).join(' ')})`);
    const ratios = perFrame.slice(0, -1).filter((p) => p.count >= 16).map((p) => p.count / p.kept);
    check(ratios.length > total / 2 && Math.max(...ratios) <= 4.5 * Math.min(...ratios),
      `frames thinned alike: count/kept from ${Math.min(...ratios).toFixed(1)} to ${Math.max(...ratios).toFixed(1)} (within 4.5x)`);
    check(Number(await body(page, 'pointsKept')) <= budget, `after moving through the frames: ${await body(page, 'pointsKept')} kept <= ${budget}`);
    check(Number(await body(page, 'images')) <= images, `after moving through the frames: ${await body(page, 'images')} images <= ${images}`);
    await page.click('#fit');
    await sleep(300);
    const stats = await pngStats(page, await page.locator('#view canvas').screenshot());
    check(stats.variance > 50, `3D view not blank with thinned frames: luminance variance ${stats.variance.toFixed(1)} > 50`);
    check(errors.length === 0, `no page errors${errors.length ? ': ' + errors.join(' | ') : ''}`);
    await manyFramesTest(launched, page, out, images);
  } finally {
    await browser.close();
    server.child.kill('SIGINT');
    await server.exited;
  }
}

// The JavaScript heap after garbage collection, in bytes (the page's objects; typed arrays' data
// is outside it).
async function jsHeap(page) {
  const cdp = await page.context().newCDPSession(page);
  for (let i = 0; i < 3; ++i) await cdp.send('HeapProfiler.collectGarbage');
  await cdp.send('Performance.enable');
  const { metrics } = await cdp.send('Performance.getMetrics');
  await cdp.detach();
  return metrics.find((m) => m.name === 'JSHeapUsedSize').value;
}

// A long run without running one (the demo takes about a second per frame here): the run's frame
// files cycled into 600 (index rewritten), in a new page once `page` (the run's own 30 frames) is
// measured and closed. Draw calls: one per chunk of at most 64 frames, one for all frustums, the
// trajectory and the frame images shown (a Points and a frustum per frame made 1,200).
async function manyFramesTest(launched, page, src, images) {
  const out = path.join(opt.work, 'many'), total = 600, chunkFrames = 64;
  fs.rmSync(out, { recursive: true, force: true });
  fs.mkdirSync(path.join(out, 'viewer'), { recursive: true });
  const files = fs.readdirSync(path.join(src, 'viewer')).filter((n) => n.endsWith('.bin')).sort();
  for (let i = 0; i < total; ++i) {
    const bytes = fs.readFileSync(path.join(src, 'viewer', files[i % files.length]));
    new DataView(bytes.buffer, bytes.byteOffset, 128).setBigInt64(16, BigInt(i), true);  // the frame index
    fs.writeFileSync(path.join(out, 'viewer', `${String(i).padStart(6, '0')}.bin`), bytes);
  }
  fs.copyFileSync(path.join(src, 'summary.json'), path.join(out, 'summary.json'));
  const heapBefore = await jsHeap(page), framesBefore = Number(await body(page, 'frames'));
  await page.close();
  const server = startServer(['view', out, '--port', '0']);
  const fresh = await launched.browser.newPage({ viewport: { width: 1280, height: 800 } });
  const { errors } = await openPage({ browser: launched.browser, page: fresh }, `${await server.url}?images=${images}`);
  page = fresh;
  try {
    await page.waitForSelector('body[data-ready="1"]', { timeout: 120000 });
    check(Number(await body(page, 'frames')) === total, `${total}-frame run: page frames ${await body(page, 'frames')}`);
    await page.click('#fit');
    await sleep(300);
    const calls = Number(await body(page, 'drawCalls')), bound = Math.ceil(total / chunkFrames) + 2 + images;
    check(calls > 0 && calls <= bound, `${total} frames drawn in ${calls} draw calls <= ${bound} (chunks + frustums + trajectory + images)`);
    const perFrame = (await jsHeap(page) - heapBefore) / (total - framesBefore);
    console.log(`  JS heap per frame: ${(perFrame / 1024).toFixed(2)} kB`);
    check(perFrame < 4096, `JS heap per frame ${(perFrame / 1024).toFixed(2)} kB < 4 kB (about 10 kB with an object per frame)`);
    // The frame rules run on the GPU: every 2nd frame (the run's even frames: its files repeat every
    // 30) shows half the points and another picture.
    const shotAll = await page.locator('#view canvas').screenshot(), shownAll = Number(await body(page, 'pointsShown'));
    await page.fill('#every', '2');
    await sleep(300);
    const diff = await pngStats(page, await page.locator('#view canvas').screenshot(), shotAll);
    const shown2 = Number(await body(page, 'pointsShown'));
    check(shown2 < 0.6 * shownAll && diff.differing > 0.005,
      `every 2nd frame: ${shown2} of ${shownAll} points shown, ${(100 * diff.differing).toFixed(2)}% pixels differ > 0.5%`);
    check(errors.length === 0, `no page errors${errors.length ? ': ' + errors.join(' | ') : ''}`);
  } finally {
    await page.close();
    server.child.kill('SIGINT');
    await server.exited;
  }
}

// One live run at `pace` seconds per frame. Returns false, checking no more, when the page saw fewer
// than two frame counts while the run went on (a loaded machine opened or drew the page slower than
// the run took): that attempt says nothing about live updates, and liveTest runs again at a slower pace.
async function liveAttempt(launched, pace) {
  const out = path.join(opt.work, 'live');
  fs.rmSync(out, { recursive: true, force: true });
  const total = 40;
  const server = startServer(['run', '--demo', '--demo-frames', String(total), '--serve', '0', '--demo-pace',
    String(pace), '--progress', 'lines', '--out', out]);
  const url = await server.url;
  const served = Date.now();
  const fresh = await launched.browser.newPage({ viewport: { width: 1280, height: 800 } });
  const { page, errors } = await openPage({ browser: launched.browser, page: fresh }, url);
  let conclusive = true;
  try {
    const seen = [];        // distinct frame counts, in order
    const whileRunning = new Set();  // frame counts seen while the page said the run was going on
    let firstStatus = '';
    let dragged = null;  // the camera the user's drag left: { before, after }
    const deadline = Date.now() + 180000;
    for (;;) {
      const frames = Number((await body(page, 'frames')) || 0), status = await body(page, 'status');
      if (!firstStatus && status) {
        firstStatus = status;
        console.log(`  the page's first status came ${((Date.now() - served) / 1000).toFixed(1)} s after the run served it`);
      }
      if (!dragged && status === 'running' && frames > 0 && frames < total / 2) {  // the user orbits while frames come
        const before = await body(page, 'camera');
        const box = await page.locator('#view canvas').boundingBox();
        await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
        await page.mouse.down();
        await page.mouse.move(box.x + box.width / 2 + 120, box.y + box.height / 2 + 40, { steps: 5 });
        await page.mouse.up();
        await sleep(300);
        dragged = { before, after: await body(page, 'camera') };
      }
      if (status === 'running' && frames > 0 && frames < total) whileRunning.add(frames);
      if (!seen.length || seen[seen.length - 1] !== frames) { seen.push(frames); console.log(`  page: ${frames} frames, ${status}`); }
      if ((status === 'completed' && frames >= total) || Date.now() > deadline || status === 'failed') break;
      await sleep(100);
    }
    console.log(`frame counts seen: ${seen.join(' ')}; while running: ${[...whileRunning].join(' ')}`);
    check(seen.every((v, i) => i === 0 || v > seen[i - 1]), 'the frame count only grew');
    if (firstStatus === 'completed' || whileRunning.size < 2) {
      // A loaded machine (the ASan suite on 2 cores) can open the page, or draw it, slower than the run
      // goes: the page then sees too little of the run to show that it follows it. Again, slower.
      console.log(`  the run (${total} frames, --demo-pace ${pace}) ` +
        (firstStatus === 'completed' ? 'had completed before the page first polled'
          : `showed ${whileRunning.size} frame count while it went on (2 needed)`));
      conclusive = false;
      return false;
    }
    check(seen[seen.length - 1] === total, `frame count ends at ${total}`);
    check((await body(page, 'status')) === 'completed', 'page reports the run completed');
    const summary = JSON.parse(fs.readFileSync(path.join(out, 'summary.json'), 'utf8'));
    check(Number(await body(page, 'points')) === summary.points, `page points == summary.json points ${summary.points}`);
    if (dragged) {
      await sleep(300);  // a fit at the end would be drawn by now
      check(dragged.after !== dragged.before, 'dragging the 3D view moves the camera');
      check((await body(page, 'camera')) === dragged.after, 'the camera the user moved stays there while frames load and at the end');
    }
    check(errors.length === 0, `no page errors${errors.length ? ': ' + errors.join(' | ') : ''}`);
    return true;
  } finally {
    await page.close();
    server.child.kill('SIGINT');
    const { code } = await server.exited;
    if (conclusive) check(code === 0, `run --serve exits 0 on SIGINT after completing (got ${code})`);
  }
}

// A run killed (SIGKILL: no summary) and another one, with other frames, on the same port and folder:
// the page, reconnected, shows the second run's frames only (not the first run's, with the second's
// appended).
async function restartTest(launched) {
  const out = path.join(opt.work, 'restart');
  fs.rmSync(out, { recursive: true, force: true });
  const first = startServer(['run', '--demo', '--demo-frames', '40', '--demo-pace', '0.25', '--serve', '0', '--out', out]);
  const url = await first.url;
  const fresh = await launched.browser.newPage({ viewport: { width: 1280, height: 800 } });
  const opened = await openPage({ browser: launched.browser, page: fresh }, url);
  const { page, statuses } = opened;
  let second = null;
  try {
    await page.waitForFunction(() => Number(document.body.dataset.frames) >= 3, null, { timeout: 120000 });
    const killedAt = opened.mark();
    first.child.kill('SIGKILL');
    await first.exited;
    second = startServer(['run', '--demo', '--demo-frames', '20', '--image-size', '56', '--serve', new URL(url).port, '--out', out]);
    await second.url;
    await page.waitForFunction(() => document.body.dataset.status === 'completed' && document.body.dataset.frames === '20', null,
      { timeout: 120000 }).catch(() => {});
    const summary = JSON.parse(fs.readFileSync(path.join(out, 'summary.json'), 'utf8'));
    check((await body(page, 'frames')) === '20' && Number(await body(page, 'points')) === summary.points,
      `after the restart the page shows the second run: ${await body(page, 'frames')} frames (20), ${await body(page, 'points')} points (${summary.points})`);
    // Loads made for the first run fail or get a 404 from the second server; nothing else may go wrong.
    const firstRun = statuses.filter((x) => x.order < killedAt.order).at(-1)?.run;
    check(statuses.some((x) => x.order > killedAt.order && x.run !== firstRun),
      'the page polled the second run\'s server (its /api/status named another run)');
    const other = unexplainedErrors(opened, killedAt);
    check(other.length === 0, `no page errors${other.length ? ': ' + other.join(' | ') : ''}`);
  } finally {
    await page.close();
    first.child.kill('SIGKILL');
    if (second) {
      second.child.kill('SIGINT');
      await second.exited;
    }
  }
}

async function liveTest() {
  const launched = await launchBrowser();
  try {
    let pace = Number(opt.pace || '0.25');
    for (let attempt = 1; ; ++attempt, pace *= 4) {
      if (await liveAttempt(launched, pace)) break;
      if (attempt === 3) {
        check(false, `the page saw the run going on (2 frame counts or more) in one of ${attempt} attempts (last --demo-pace ${pace})`);
        break;
      }
    }
    await restartTest(launched);
  } finally {
    await launched.browser.close();
  }
}

try {
  await (mode === 'static' ? staticTest() : mode === 'budget' ? budgetTest() : liveTest());
} catch (e) {
  console.log(`FAIL: ${e.stack || e}`);
  failures += 1;
}
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
