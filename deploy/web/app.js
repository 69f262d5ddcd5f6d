// ONNX Lab, notebook 09: the digits CNN in the browser with onnxruntime-web on WebAssembly.
// Every file comes from the local server (python -m onnx_web_demo): the runtime from node_modules/onnxruntime-web/dist
// under ./ort/, the model under ./model/. No CDN, so the page works offline.
import * as ort from "./ort/ort.wasm.min.mjs";

const MODEL_URL = "./model/digits_cnn.onnx";
const PIXELS = 64;

// Where the runtime loads its .wasm and helper .mjs from, and one thread (threads need
// cross-origin isolation headers; one thread is plenty for an 8x8 CNN and gives stable numbers).
ort.env.wasm.wasmPaths = new URL("./ort/", import.meta.url).href;
ort.env.wasm.numThreads = 1;

const $ = (selector) => document.querySelector(selector);
let session = null;
let testImages = { images: [], labels: [] };

function softmax(row) {
  const max = Math.max(...row);
  const exps = row.map((v) => Math.exp(v - max));
  const sum = exps.reduce((a, b) => a + b, 0);
  return exps.map((v) => v / sum);
}

// images: array of N arrays of 64 pixels in [0, 1] -> {logits, probabilities, predictions}
async function classify(images) {
  if (session === null) throw new Error("the model is not loaded yet: await window.onnxLab.ready first");
  if (!Array.isArray(images) || images.length === 0) throw new Error("classify() expects a non-empty array of images");
  const data = new Float32Array(images.length * PIXELS);
  images.forEach((image, n) => {
    if (image.length !== PIXELS) throw new Error(`image ${n} must have ${PIXELS} pixels (8x8), got ${image.length}`);
    data.set(image, n * PIXELS);
  });
  const input = new ort.Tensor("float32", data, [images.length, 1, 8, 8]);
  const outputs = await session.run({ [session.inputNames[0]]: input });
  const output = outputs[session.outputNames[0]];
  const classes = output.dims[1];
  const logits = [];
  for (let n = 0; n < images.length; n += 1) logits.push(Array.from(output.data.slice(n * classes, (n + 1) * classes)));
  const probabilities = logits.map(softmax);
  const predictions = probabilities.map((p) => p.indexOf(Math.max(...p)));
  return { logits, probabilities, predictions };
}

// ---------------------------------------------------------------- drawing on the page

function drawPreview(pixels) {
  const canvas = $("#preview");
  const ctx = canvas.getContext("2d");
  const cell = canvas.width / 8;
  pixels.forEach((value, k) => {
    const shade = Math.round(255 * (1 - Math.min(1, Math.max(0, value))));
    ctx.fillStyle = `rgb(${shade},${shade},${shade})`;
    ctx.fillRect((k % 8) * cell, Math.floor(k / 8) * cell, cell, cell);
  });
}

function showResult(result, index, label) {
  const probabilities = result.probabilities[0];
  const predicted = result.predictions[0];
  const box = $("#prediction");
  box.textContent = label === undefined ? `${predicted}` : `${predicted} (label ${label})`;
  box.dataset.class = String(predicted);
  box.dataset.index = index === null ? "drawing" : String(index);
  const bars = $("#bars");
  bars.replaceChildren();
  probabilities.forEach((p, digit) => {
    const row = document.createElement("div");
    row.className = digit === predicted ? "bar top" : "bar";
    row.innerHTML = `<span>${digit}</span><span class="track"><span class="fill" style="display:block;width:${(100 * p).toFixed(1)}%"></span></span><span>${(100 * p).toFixed(1)}%</span>`;
    bars.appendChild(row);
  });
}

async function classifyTestImage(index) {
  const pixels = testImages.images[index];
  drawPreview(pixels);
  showResult(await classify([pixels]), index, testImages.labels[index]);
}

// The 240x240 pad is averaged over 30x30 blocks into 8x8 ink values in [0, 1] (1 = black ink),
// the same scale as the training images.
function padPixels() {
  const pad = $("#pad");
  const { data } = pad.getContext("2d").getImageData(0, 0, pad.width, pad.height);
  const block = pad.width / 8;
  const pixels = new Array(PIXELS).fill(0);
  for (let y = 0; y < pad.height; y += 1) {
    for (let x = 0; x < pad.width; x += 1) {
      const ink = 1 - data[4 * (y * pad.width + x)] / 255;
      pixels[Math.floor(y / block) * 8 + Math.floor(x / block)] += ink / (block * block);
    }
  }
  return pixels;
}

function setUpPad() {
  const pad = $("#pad");
  const ctx = pad.getContext("2d");
  const clear = () => { ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, pad.width, pad.height); };
  clear();
  ctx.lineWidth = 26;
  ctx.lineCap = "round";
  ctx.strokeStyle = "#000";
  let drawing = false;
  const point = (event) => {
    const rect = pad.getBoundingClientRect();
    return [(event.clientX - rect.left) * (pad.width / rect.width), (event.clientY - rect.top) * (pad.height / rect.height)];
  };
  pad.addEventListener("pointerdown", (event) => { drawing = true; ctx.beginPath(); ctx.moveTo(...point(event)); });
  pad.addEventListener("pointermove", (event) => { if (drawing) { ctx.lineTo(...point(event)); ctx.stroke(); } });
  const finish = async () => {
    if (!drawing) return;
    drawing = false;
    if (session !== null) await classifyDrawing();
  };
  pad.addEventListener("pointerup", finish);
  pad.addEventListener("pointerleave", finish);
  $("#clear").addEventListener("click", clear);
  $("#classify-drawing").addEventListener("click", classifyDrawing);
}

async function classifyDrawing() {
  const pixels = padPixels();
  drawPreview(pixels);
  showResult(await classify([pixels]), null, undefined);
}

// ---------------------------------------------------------------- start-up

async function init() {
  setUpPad();
  session = await ort.InferenceSession.create(MODEL_URL, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  testImages = await (await fetch("./test-images.json")).json();
  const picker = $("#picker");
  testImages.images.forEach((_, index) => {
    const option = document.createElement("option");
    option.value = String(index);
    option.textContent = `test image ${index} (label ${testImages.labels[index]})`;
    picker.appendChild(option);
  });
  picker.addEventListener("change", () => classifyTestImage(Number(picker.value)));
  picker.disabled = false;
  $("#classify-drawing").disabled = false;
  $("#status").textContent = `Ready: model loaded with onnxruntime-web ${ort.env.versions.web} (WebAssembly, ${ort.env.wasm.numThreads} thread).`;
  $("#runtime").textContent = `inputs: ${session.inputNames.join(", ")} · outputs: ${session.outputNames.join(", ")} · execution provider: wasm`;
  await classifyTestImage(0);
}

const ready = init().catch((error) => {
  const status = $("#status");
  status.textContent = `Could not start: ${error.message}`;
  status.classList.add("error");
  throw error;
});

window.onnxLab = {
  ready,
  classify,
  padPixels, // the 8x8 pixels of the current drawing (the tests check them against Python)
  info: () => ({ version: ort.env.versions.web, backend: "wasm", threads: ort.env.wasm.numThreads }),
};
