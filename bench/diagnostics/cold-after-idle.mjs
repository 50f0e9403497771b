// Diagnostic: what a process's idle time costs its next run on this host. A fixed piece of work (a
// pointer chase over a working set of SIZE KB: each step a load that depends on the one before, as a
// walk of objects is) is timed right after the thread slept GAP ms (Atomics.wait: a blocking sleep, as an
// event loop's in epoll_wait), 200 times per gap, for gaps from 0 to 20 ms; medians and p90s. On a host
// that keeps a sleeping process's cache the times stay flat; where they rise with the gap, a stop of a
// paced item's way (a process woken after sleeping through most of the gap between items) likely pays
// that rise.
//   node bench/diagnostics/cold-after-idle.mjs [SIZE_KB ...]   (default: 256 2048)
const sizes = process.argv.slice(2).map(Number).filter((n) => n > 0);
const gaps = [0, 0.1, 0.5, 1, 2, 5, 10, 20];
const rounds = 200;
const nap = new Int32Array(new SharedArrayBuffer(4));
let sink = 0; // the walks' ends, summed and checked once, so no walk is optimized away

for (const kb of sizes.length ? sizes : [256, 2048]) {
  // One random cycle through every 64-byte line of the set (Sattolo's shuffle), so no prefetcher guesses the next.
  const lines = (kb * 1024) / 64;
  const next = new Int32Array(lines * 16);
  const order = Array.from({ length: lines }, (_, i) => i);
  for (let i = lines - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * i);
    [order[i], order[j]] = [order[j], order[i]];
  }
  for (let i = 0; i < lines; i++) next[order[i] * 16] = order[(i + 1) % lines] * 16;
  const walk = () => {
    let at = 0;
    for (let i = 0; i < lines; i++) at = next[at];
    return at;
  };
  for (let i = 0; i < 50; i++) walk(); // compiled and warm before the first gap
  const out = [];
  for (const gap of gaps) {
    const times = [];
    for (let r = 0; r < rounds; r++) {
      if (gap > 0) Atomics.wait(nap, 0, 0, gap);
      const t0 = process.hrtime.bigint();
      sink += walk();
      times.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    times.sort((a, b) => a - b);
    out.push(`${String(gap).padStart(4)} ms: p50 ${times[rounds >> 1].toFixed(1).padStart(7)} µs, p90 ${times[Math.floor(rounds * 0.9)].toFixed(1).padStart(7)}`);
  }
  console.log(`a walk of ${kb} KB (${lines} lines) after sleeping:\n  ${out.join("\n  ")}`);
}
if (sink < 0) throw new Error("a walk left its cycle");
