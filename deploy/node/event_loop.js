#!/usr/bin/env node
// ONNX Lab, notebook 09: does session.run() of onnxruntime-node block Node's event loop?
//
//   node event_loop.js --model MODEL.onnx --mode main|worker [--runs 4] [--batch 64]
//
// A heartbeat timer asks to tick every millisecond while the program runs the model `runs` times:
// on the main thread (mode "main"), or in a worker thread that owns the session (mode "worker").
// Prints one JSON object: each run's [start, end] and every heartbeat, in ms (performance.now()).
// In onnxruntime-node 1.30 run() returns a Promise, but the native run happens on the calling thread.
"use strict";

const { Worker, isMainThread, parentPort, workerData } = require("node:worker_threads");
const ort = require("onnxruntime-node");

const PIXELS = 64;

function usage(message) {
  process.stderr.write(`error: ${message}\nusage: node event_loop.js --model MODEL.onnx --mode main|worker [--runs N] [--batch N]\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const args = { runs: 4, batch: 64 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    if (!["--model", "--mode", "--runs", "--batch"].includes(key)) usage(`unknown argument ${JSON.stringify(key)}`);
    if (i + 1 >= argv.length) usage(`${key} needs a value`);
    args[key.slice(2)] = argv[i + 1];
  }
  if (!args.model) usage("--model is required");
  if (args.mode !== "main" && args.mode !== "worker") usage(`--mode must be main or worker, got ${JSON.stringify(args.mode)}`);
  for (const key of ["runs", "batch"]) {
    args[key] = Number(args[key]);
    if (!Number.isInteger(args[key]) || args[key] < 1 || args[key] > 1024) usage(`--${key} must be a whole number from 1 to 1024`);
  }
  return args;
}

// the part that matters: a session and a run that the caller awaits
async function openSession(model) {
  return ort.InferenceSession.create(model, { executionProviders: ["cpu"], intraOpNumThreads: 1 });
}

async function runOnce(session, batch) {
  const input = new ort.Tensor("float32", new Float32Array(batch * PIXELS).fill(0.5), [batch, 1, 8, 8]);
  await session.run({ [session.inputNames[0]]: input });
}

// mode "worker": the session lives in a worker thread; the main thread only posts messages
function workerMain() {
  openSession(workerData.model).then((session) => {
    parentPort.on("message", async (batch) => {
      await runOnce(session, batch);
      parentPort.postMessage("done");
    });
    parentPort.postMessage("ready");
  });
}

function inWorker(model) {
  const worker = new Worker(__filename, { workerData: { model } });
  const next = () => new Promise((resolve) => worker.once("message", resolve));
  return {
    ready: next(),
    run: (batch) => {
      const done = next();
      worker.postMessage(batch);
      return done;
    },
    close: () => worker.terminate(),
  };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  let run;
  let close = () => {};
  if (args.mode === "main") {
    const session = await openSession(args.model);
    run = (batch) => runOnce(session, batch);
  } else {
    const worker = inWorker(args.model);
    await worker.ready;
    ({ run, close } = worker);
  }
  await run(1); // warm-up: first-run allocations are not what we measure
  const heartbeats = [];
  const timer = setInterval(() => heartbeats.push(performance.now()), 1);
  await new Promise((resolve) => setTimeout(resolve, 20)); // the heartbeat is ticking before the first run
  const runs = [];
  for (let n = 0; n < args.runs; n += 1) {
    const start = performance.now();
    await run(args.batch);
    runs.push([start, performance.now()]);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  clearInterval(timer);
  await close();
  process.stdout.write(JSON.stringify({ mode: args.mode, version: ort.env.versions.node || null, batch: args.batch, runs, heartbeats }) + "\n");
}

if (isMainThread) {
  main().catch((error) => {
    process.stderr.write(`error: ${error.message}\n`);
    process.exit(1);
  });
} else {
  workerMain();
}
