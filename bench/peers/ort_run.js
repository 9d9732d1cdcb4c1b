// ONNX Runtime (npm onnxruntime-node, CPU) on one model: reads <input>.npy
// files, runs warm-up inferences, then times inferences for S seconds on T
// intra-op threads, writes <output>.npy files (names percent-encoded) and
// prints one JSON line:
//   {"median_ms": ..., "runs": ..., "peak_rss_mib": ..., "base_rss_mib": ...}
// base_rss_mib is the process before the session exists (Node itself).
//
//   node ort_run.js MODEL INPUT_DIR OUTPUT_DIR THREADS SECONDS [OPTIMIZATION]
// OPTIMIZATION is ORT's graph optimization level (default all).
// SECONDS "startup": load, create the session, run one inference and exit
// (no outputs written); the JSON line has startup_ms, from before ORT is
// required to after the inference.
'use strict';
const scriptStart = process.hrtime.bigint();
const fs = require('fs');
const path = require('path');

const kTypes = {'<f4': ['float32', Float32Array], '|u1': ['uint8', Uint8Array],
                '|i1': ['int8', Int8Array], '<i4': ['int32', Int32Array],
                '<i8': ['int64', BigInt64Array]};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString('latin1', 10, 10 + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',')
                    .map(s => s.trim()).filter(s => s.length).map(Number);
  if (/'fortran_order':\s*True/.test(header)) throw new Error(file + ': Fortran order');
  const [type, Ctor] = kTypes[descr] || [];
  if (!type) throw new Error(file + ': dtype ' + descr);
  const start = 10 + headerLen;
  const bytes = buf.subarray(start);
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return {type, shape, data: new Ctor(copy.buffer, 0, bytes.length / Ctor.BYTES_PER_ELEMENT)};
}

function writeNpy(file, tensor) {
  const descr = {float32: '<f4', uint8: '|u1', int8: '|i1', int32: '<i4', int64: '<i8'}[tensor.type];
  if (!descr) throw new Error('output type ' + tensor.type);
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const data = Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'), data]));
}

async function main() {
  const [model, inputDir, outputDir, threads, seconds, level] = process.argv.slice(2);
  const base = process.memoryUsage().rss / 1048576;
  const ort = require('onnxruntime-node');
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1,
    executionMode: 'sequential', graphOptimizationLevel: level || 'all', logSeverityLevel: 3});
  const feeds = {};
  for (const name of session.inputNames) {
    const t = readNpy(path.join(inputDir, encodeURIComponent(name) + '.npy'));
    feeds[name] = new ort.Tensor(t.type, t.data, t.shape);
  }
  let out = await session.run(feeds);
  if (seconds === 'startup') {
    console.log(JSON.stringify({startup_ms: Number(process.hrtime.bigint() - scriptStart) / 1e6,
                                peak_rss_mib: process.resourceUsage().maxRSS / 1024,
                                base_rss_mib: base}));
    return;
  }
  for (let i = 0; i < 5; ++i) out = await session.run(feeds);
  const times = [];
  const t0 = process.hrtime.bigint();
  while (times.length < 3 || Number(process.hrtime.bigint() - t0) / 1e9 < Number(seconds)) {
    const a = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - a) / 1e6);
  }
  times.sort((a, b) => a - b);
  fs.mkdirSync(outputDir, {recursive: true});
  // File names: the output's name percent-encoded ('/' as %2F), as qfuse compare --reference reads them.
  for (const name of session.outputNames) {
    writeNpy(path.join(outputDir, encodeURIComponent(name) + '.npy'), out[name]);
  }
  console.log(JSON.stringify({median_ms: times[Math.floor(times.length / 2)], runs: times.length,
                              peak_rss_mib: process.resourceUsage().maxRSS / 1024,
                              base_rss_mib: base}));
}

main().catch(e => { console.error(e.message || e); process.exit(1); });
