#!/usr/bin/env node
// ONNX Lab, notebook 09: classify 8x8 digits with the course CNN in Node.js (onnxruntime-node, CPU).
//
//   node classify.js --model ../../artifacts/digits_cnn.onnx --input images.json
//
// images.json: {"images": [[64 pixels in 0..1, row by row], ...], "labels": [optional ints]}
// Prints one JSON object: runtime, version, input/output names, predictions, probabilities, logits.
// Bad input exits with status 2 and a message on stderr that says what was expected.
"use strict";

const fs = require("node:fs");
const ort = require("onnxruntime-node");

const PIXELS = 64;

function usage(message) {
  process.stderr.write(`error: ${message}\nusage: node classify.js --model MODEL.onnx --input IMAGES.json\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    if (key !== "--model" && key !== "--input") usage(`unknown argument ${JSON.stringify(key)}`);
    if (i + 1 >= argv.length) usage(`${key} needs a value`);
    args[key.slice(2)] = argv[i + 1];
  }
  if (!args.model) usage("--model is required");
  if (!args.input) usage("--input is required");
  return args;
}

function readImages(file) {
  let doc;
  try {
    doc = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (error) {
    usage(`cannot read ${file} as JSON: ${error.message}`);
  }
  const images = doc && doc.images;
  if (!Array.isArray(images) || images.length === 0) {
    usage(`${file} must hold {"images": [[${PIXELS} numbers], ...]} with at least one image`);
  }
  const data = new Float32Array(images.length * PIXELS);
  images.forEach((image, n) => {
    if (!Array.isArray(image) || image.length !== PIXELS) {
      usage(`image ${n} must be a list of ${PIXELS} numbers (8x8 pixels, row by row), got ${Array.isArray(image) ? image.length + " values" : typeof image}`);
    }
    image.forEach((value, k) => {
      if (typeof value !== "number" || !Number.isFinite(value)) usage(`image ${n}, pixel ${k} is not a finite number`);
      data[n * PIXELS + k] = value;
    });
  });
  return { data, count: images.length, labels: doc.labels };
}

function softmax(row) {
  const max = Math.max(...row);
  const exps = row.map((v) => Math.exp(v - max));
  const sum = exps.reduce((a, b) => a + b, 0);
  return exps.map((v) => v / sum);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(args.model)) usage(`model file ${args.model} does not exist`);
  const { data, count, labels } = readImages(args.input);

  const session = await ort.InferenceSession.create(args.model, {
    executionProviders: ["cpu"],
    intraOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  const inputName = session.inputNames[0];
  const outputName = session.outputNames[0];
  const input = new ort.Tensor("float32", data, [count, 1, 8, 8]);
  const output = (await session.run({ [inputName]: input }))[outputName];
  const classes = output.dims[1];

  const logits = [];
  for (let n = 0; n < count; n += 1) logits.push(Array.from(output.data.slice(n * classes, (n + 1) * classes)));
  const probabilities = logits.map(softmax);
  const predictions = probabilities.map((p) => p.indexOf(Math.max(...p)));

  const result = {
    runtime: "onnxruntime-node",
    version: ort.env.versions.node,
    executionProviders: ["cpu"],
    input: { name: inputName, dims: input.dims },
    output: { name: outputName, dims: output.dims },
    count,
    predictions,
    probabilities,
    logits,
  };
  if (Array.isArray(labels)) result.labels = labels;
  process.stdout.write(JSON.stringify(result) + "\n");
  await session.release();
}

main().catch((error) => {
  process.stderr.write(`error: ${error.message}\n`);
  process.exit(1);
});
