/**
 * The buf.gen templates for other languages (clients/stubs/): those with local
 * plugins run here (Python and Java, with Debian's protoc and gRPC plugins), and
 * the Python stubs they make talk to a real server. The C# and Rust templates
 * use plugins from buf.build, which this machine cannot reach: they are only
 * read. (Go: test/go/client.test.ts; the Python package: test/python/.)
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { loopbackEnv, PYTHON } from "../helpers/python.js";
import { useSwitchyard } from "../helpers/switchyard.js";
import { readYaml } from "../helpers/yaml.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const buf = join(root, "node_modules", ".bin", "buf");
const work = mkdtempSync(join(tmpdir(), "sy-stubs-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const t = useSwitchyard();

/** Runs a template from the repository root into a folder of its own; resolves to that folder. */
async function generate(lang: string): Promise<string> {
  const out = join(work, lang);
  await run(buf, ["generate", "--template", `clients/stubs/buf.gen.${lang}.yaml`, "-o", out], { cwd: root });
  return out;
}

describe("clients/stubs/buf.gen.*.yaml", () => {
  it("python: messages, type stubs and gRPC stubs that reach a server", async () => {
    const out = join(await generate("python"), "gen/python");
    expect(readdirSync(join(out, "switchyard/v1")).sort()).toEqual(
      ["audit", "auth", "cron", "errors", "queue"].flatMap((f) => [`${f}_pb2.py`, `${f}_pb2.pyi`, `${f}_pb2_grpc.py`]).sort(),
    );
    await t.sy.client.createQueue({ name: "{stubs}", mode: QueueMode.SIMPLE });
    const script = `import sys, grpc
from switchyard.v1 import queue_pb2 as pb, queue_pb2_grpc as pb_grpc
stub = pb_grpc.QueueServiceStub(grpc.insecure_channel(sys.argv[1]))
print(stub.GetQueue(pb.GetQueueRequest(name="{stubs}"), timeout=10).queue.mode == pb.QUEUE_MODE_SIMPLE)`;
    const env = loopbackEnv({ PYTHONPATH: out, PYTHONDONTWRITEBYTECODE: "1" });
    const { stdout } = await run(PYTHON, ["-c", script, t.sy.address], { env, timeout: 30_000 });
    expect(stdout.trim()).toBe("True");
  }, 60_000);

  it("java: a class per message and a gRPC class per service, in the managed java package", async () => {
    const out = join(await generate("java"), "gen/java/dev/switchyard/v1");
    const files = readdirSync(out);
    expect(files).toEqual(
      expect.arrayContaining(["QueueServiceGrpc.java", "CronServiceGrpc.java", "LeaseRequest.java", "Delivery.java", "EnqueueItem.java"]),
    );
  }, 60_000);

  it("csharp and rust: name their generators (remote ones need buf.build, so they are not run here)", () => {
    const plugins = (lang: string) =>
      ((readYaml(join(root, `clients/stubs/buf.gen.${lang}.yaml`))[0] as { plugins: Record<string, string>[] }).plugins).map(
        (p) => p.protoc_builtin ?? p.remote ?? p.local,
      );
    expect(plugins("csharp")).toEqual(["csharp", "buf.build/grpc/csharp"]);
    expect(plugins("rust")).toEqual(["buf.build/community/neoeinstein-prost:v0.3.1", "buf.build/community/neoeinstein-tonic:v0.4.0"]);
  });
});
