import { writeFileSync } from "node:fs";
import { decodeItem } from "../../dist/queue/envelope.js";
let seed = Number(process.argv[2] ?? 1);
const rnd = () => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return seed / 4294967296; };
const ri = (n) => Math.floor(rnd() * n);
const pick = (a) => a[ri(a.length)];
function varint(n, pad = 0) { // n: bigint or number, pad: extra non-minimal bytes
  n = BigInt(n); const out = [];
  do { let b = Number(n & 0x7fn); n >>= 7n; out.push(n > 0n || pad > 0 ? b | 0x80 : b); } while (n > 0n);
  for (let i = 0; i < pad; i++) out.push(i === pad - 1 ? 0 : 0x80);
  return Buffer.from(out);
}
const tag = (f, w) => varint(BigInt(f) * 8n + BigInt(w), rnd() < 0.1 ? 1 + ri(3) : 0);
const len = (f, b) => Buffer.concat([tag(f, 2), varint(b.length, rnd() < 0.05 ? 1 : 0), b]);
function randBytes(n) { const b = Buffer.alloc(n); for (let i = 0; i < n; i++) b[i] = rnd() < 0.3 ? pick([0, 0x80, 0xff, 0x0a, 0x12, 0x1a, 0x20, 0x2a, 0x08, 0x53]) : ri(256); return b; }
function text() { return pick([Buffer.from(""), Buffer.from("abc"), Buffer.from("é日😀"), Buffer.from([0xff, 0xfe]), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from("__proto__"), Buffer.from("constructor"), Buffer.from("payload"), randBytes(ri(6))]); }
function anyField(depth) {
  const f = pick([1, 2, 3, 4, 5, 6, 15, 16, 536870911, 536870912, 2 ** 32, 0, ri(40)]);
  const w = rnd() < 0.8 ? pick([0, 2]) : ri(8);
  return fieldOf(f, w, depth);
}
function fieldOf(f, w, depth) {
  if (w === 0) return Buffer.concat([tag(f, 0), varint(pick([0, 1, 127, 128, 2 ** 32 - 1, 2 ** 32, 2 ** 32 + 5, 2n ** 53n + 1n, 2n ** 63n, 2n ** 64n - 1n, 2n ** 70n - 1n, ri(1e6)]), rnd() < 0.1 ? 1 : 0)]);
  if (w === 1) return Buffer.concat([tag(f, 1), randBytes(8)]);
  if (w === 5) return Buffer.concat([tag(f, 5), randBytes(4)]);
  if (w === 2) return len(f, inner(f, depth));
  return Buffer.concat([tag(f, w), randBytes(ri(4))]);
}
function inner(f, depth) {
  if (depth > 2 || rnd() < 0.3) return text();
  if (f === 3) return entry(depth + 1);
  if (f === 5) return history(depth + 1);
  return Buffer.concat(Array.from({ length: ri(3) }, () => anyField(depth + 1)));
}
function entry(depth) {
  const parts = [];
  const n = ri(4);
  for (let i = 0; i < n; i++) parts.push(rnd() < 0.8 ? len(pick([1, 2]), text()) : anyField(depth + 1));
  return Buffer.concat(parts);
}
function history(depth) {
  const parts = [];
  const n = ri(4);
  for (let i = 0; i < n; i++) {
    const c = ri(10);
    if (c < 3) parts.push(fieldOf(1, 0, depth));
    else if (c < 5) parts.push(len(2, text()));
    else if (c < 7) parts.push(fieldOf(3, 0, depth));
    else parts.push(anyField(depth + 1));
  }
  return Buffer.concat(parts);
}
function envelope() {
  const parts = [Buffer.from("SYE1")];
  const n = ri(7);
  for (let i = 0; i < n; i++) {
    const c = ri(20);
    if (c < 4) parts.push(len(1, pick([Buffer.from(""), Buffer.from("id1"), text()])));
    else if (c < 7) parts.push(len(2, text()));
    else if (c < 10) parts.push(len(3, entry(0)));
    else if (c < 12) parts.push(fieldOf(4, 0, 0));
    else if (c < 15) parts.push(len(5, history(0)));
    else parts.push(anyField(0));
  }
  let b = Buffer.concat(parts);
  const m = rnd();
  if (m < 0.1 && b.length > 4) b = b.subarray(0, 4 + ri(b.length - 4)); // truncate
  else if (m < 0.18 && b.length > 4) { b = Buffer.from(b); b[4 + ri(b.length - 4)] = ri(256); } // flip
  else if (m < 0.22) b = Buffer.concat([b, randBytes(1 + ri(3))]);
  return b;
}

const N = Number(process.argv[3] ?? 300); const lines = [];
let tries = 0;
while (lines.length < N && tries++ < 100000) {
  const v = rnd() < 0.1 ? randBytes(ri(12)) : envelope();
  const it = decodeItem(v);
  if (it.enqueueTimeMs < 0) continue;
  const env = it.payload !== v;
  // prefer envelopes, and odd ones
  if (!env && rnd() < 0.7) continue;
  lines.push(JSON.stringify({ v: v.toString("hex"), env, id: it.id, p: Buffer.from(it.payload).toString("hex"), h: Object.entries(it.headers).sort(), t: it.enqueueTimeMs, d: it.deliveries, e: it.lastError }));
}
writeFileSync("/tmp/review/values.jsonl", lines.join("\n") + "\n");
console.log("wrote", lines.length);
