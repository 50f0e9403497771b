import { readFileSync, readdirSync } from "node:fs";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";
const n = 20000;
const csw = (pid) => { const s = readFileSync(`/proc/${pid}/task/${pid}/status`, "utf8"); return [Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(s)[1]), Number(/^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(s)[1])]; };
const cpu = (pid) => { const f = readFileSync(`/proc/${pid}/task/${pid}/stat`, "utf8").split(") ")[1].split(" "); return (Number(f[11]) + Number(f[12])) * 10; };
const redis = await startBenchRedis();
const d = await Deployed.start(redis, { workers: 1 });
try {
  const echo = await d.echoPids();
  const rp = redis.server.process.pid;
  const runs = [["ours", d.serverPid, () => d.enqueue("switchyard", n, 1, 1)], ["echo-push", echo.server, () => d.echo("push", n, 100)]];
  for (let i = 0; i < 3; i++) for (const [name, pid, go] of runs) {
    const b = csw(pid), rb = csw(rp), cb = cpu(pid);
    const rate = await go();
    const a = csw(pid), ra = csw(rp), ca = cpu(pid);
    console.log(name.padEnd(10), rate.toFixed(0).padStart(6), "/s  main thread per call: vol", ((a[0] - b[0]) / n).toFixed(2), "invol", ((a[1] - b[1]) / n).toFixed(3), "cpu µs", ((ca - cb) * 1000 / n).toFixed(0), " redis: vol", ((ra[0] - rb[0]) / n).toFixed(2), "invol", ((ra[1] - rb[1]) / n).toFixed(3));
  }
} finally { await d.stop(); await redis.stop(); }
