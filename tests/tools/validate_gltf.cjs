// Validates a .glb / .gltf with the Khronos glTF validator (npm gltf-validator, installed into
// web/node_modules by `cd web && npm ci`) and prints the report's issue counts and messages as JSON.
// Usage: node validate_gltf.cjs FILE.  Exit code: 0 = validated (read the counts), 2 = could not run.
'use strict';
const fs = require('fs');
const path = require('path');
const validator = require(path.join(__dirname, '..', '..', 'web', 'node_modules', 'gltf-validator'));

const file = process.argv[2];
validator
  .validateBytes(new Uint8Array(fs.readFileSync(file)), { maxIssues: 100 })
  .then((report) => {
    const out = {
      numErrors: report.issues.numErrors,
      numWarnings: report.issues.numWarnings,
      numInfos: report.issues.numInfos,
      messages: report.issues.messages.map((m) => `${m.severity} ${m.code} ${m.pointer || ''}: ${m.message}`),
      info: report.info,
    };
    process.stdout.write(JSON.stringify(out) + '\n');
  })
  .catch((e) => {
    process.stderr.write('validator failed: ' + e + '\n');
    process.exit(2);
  });
