import Redis from "ioredis";
import { slotOf, hashTag, internalKey } from "../../dist/redis/keys.js";
import { validateQueueSpec } from "../../dist/queue/declaration.js";
const r = new Redis({ path: "/tmp/review/r2.sock" });
let seed = 12345;
const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x80000000; };
const atoms = ["{", "}", "{}", "}{", "a", "b", "é", "日", "😀", "\ud800", "\udc00", "\udfff\ud800", ".", ":", "x", "\u0000", "\uffff", "\u{10ffff}", "{{", "}}", "\\"];
function key(maxLen) {
  let s = ""; const n = Math.floor(rnd() * maxLen);
  for (let i = 0; i < n; i++) s += atoms[Math.floor(rnd() * atoms.length)];
  return s;
}
let bad = 0, n = 0;
const fixed = ["x{}{y}", "{}", "{", "}", "{{}}", "{}}", "}{a}", "{a}{b}", "a{b}}c", "{\ud800}", "\ud800{x}", "a".repeat(100000), "{" + "b".repeat(70000) + "}x", "{日本}.x", "日{}本"];
const keys = [...fixed];
for (let i = 0; i < 40000; i++) keys.push(key(i < 35000 ? 12 : 200));
for (const k of keys) {
  n++;
  const [a, b] = await Promise.all([r.call("CLUSTER", "KEYSLOT", k), r.call("CLUSTER", "KEYSLOT", Buffer.from(k))]);
  const mine = slotOf(k);
  if (a !== mine || b !== mine) { bad++; if (bad < 10) console.log("MISMATCH", JSON.stringify(k), a, b, mine); }
}
console.log("slot keys checked", n, "mismatches", bad);

import { keysOf, validateQueueSpec as v2 } from "../../dist/queue/declaration.js";
import { allKeys } from "../../dist/redis/keys.js";
let acc = 0, ref = 0, wrong = 0, refOther = 0, refSlotOk = 0, refTagOk = 0, refWrong = 0;
const ks1 = async (k) => r.call("CLUSTER", "KEYSLOT", k);
const names = [...fixed.filter((k) => k.length < 500), ...Array.from({ length: 4000 }, () => key(8))];
for (const name of names) {
  for (const variant of [{}, { processingList: key(6) || "p" }, { deadLetterList: key(6) || "d" }, { recoverySet: key(6) || "r", minIdleMs: 1000 }, {processingList: `{${name}}.p`, deadLetterList: `{${name}}.d`}]) {
    for (const mode of ["reliable", "stream", "simple"]) {
      if (mode === "stream" && (variant.processingList || variant.recoverySet)) continue;
      if (mode === "simple" && Object.keys(variant).length) continue;
      let cfg, err;
      try { cfg = validateQueueSpec({ name, mode, ...variant }, 0); } catch (e) { err = e; }
      if (cfg) {
        acc++;
        const k = keysOf(cfg);
        const own = [k.queue, k.leases, k.fence, k.delayed, k.returned, k.idempotency, k.idempotencyTime];
        const ks = mode === "simple" ? own : allKeys(k);
        const slots = await Promise.all(ks.map(ks1));
        if (new Set(slots).size > 1) { wrong++; if (wrong < 15) console.log("ACCEPTED cross-slot", mode, JSON.stringify(name), JSON.stringify(variant), ks.map((k, i) => `${JSON.stringify(k)}:${slots[i]}`).join(" ")); }
      } else {
        ref++;
        const reason = err.reason ?? err.details?.reason;
        if (reason === "SLOT_MISMATCH") {
          const md = err.metadata ?? err.options?.metadata;
          const [a, b] = await Promise.all([ks1(name), ks1(md.key)]);
          if (a === b) { refWrong++; console.log("REFUSED but same slot", JSON.stringify(name), md.key); } else refSlotOk++;
        } else if (/no hash tag/.test(err.message)) {
          const [a, b, c] = await Promise.all([ks1(name), ks1(`${name}.fence`), ks1(`{${name}}.fence`)]);
          if (a === b || a === c) { refWrong++; console.log("REFUSED tagless but fine", JSON.stringify(name)); } else refTagOk++;
        } else { refOther++; if (refOther < 6) console.log("other refusal", JSON.stringify(name), err.message.slice(0, 120)); }
      }
    }
  }
}
console.log({ acc, ref, wrong, refSlotOk, refTagOk, refWrong, refOther });
await r.quit();
