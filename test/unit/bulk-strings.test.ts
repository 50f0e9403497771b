/**
 * FramedCommand (src/redis/bulk-strings.ts) sends what ioredis itself would
 * write for the same command with the values as Buffer arguments, whether
 * its head goes into the room in front of the values or in front of a copy.
 */
import { describe, expect, it } from "vitest";
import { Command } from "ioredis";
import { BulkStrings, FramedCommand } from "../../src/redis/bulk-strings.js";
import { ProtoWriter } from "../../src/wire/proto-writer.js";
import { bytes, random } from "../helpers/random.js";

/** What ioredis writes for `name` with `args`. */
function ioredis(name: string, args: (string | Buffer)[]): Buffer {
  const written = new Command(name, args).toWritable({} as never);
  return Buffer.isBuffer(written) ? written : Buffer.from(written);
}

/** `values` framed behind `room` free bytes, as encodeItems frames envelopes. */
function withRoom(values: Uint8Array[], room: number): BulkStrings {
  const plain = BulkStrings.of(values).bytes;
  const w = new ProtoWriter(Buffer.alloc(room + plain.length, 0xee));
  w.pos = room;
  w.raw(plain);
  return new BulkStrings(w.buf, values.length, room);
}

describe("FramedCommand", () => {
  it("writes ioredis' bytes for LPUSH and EVAL, from one set of values or several", () => {
    const next = random(44);
    for (let n = 0; n < 300; n++) {
      const chunks = Array.from({ length: 1 + Math.floor(next() * 3) }, () => Array.from({ length: Math.floor(next() * 20) }, () => bytes(next, next() < 0.1 ? 5000 : 200)));
      const values = chunks.flat().map((v) => Buffer.from(v));
      const key = `{q-${n}}.ü`;
      expect(new FramedCommand("lpush", [key], chunks.map((c) => BulkStrings.of(c))).toWritable().equals(ioredis("lpush", [key, ...values]))).toBe(true);
      const evalArgs = ["return 1", "1", key, String(n * 1000)];
      expect(new FramedCommand("eval", [evalArgs[0], 1, key, n * 1000], chunks.map((c) => BulkStrings.of(c))).toWritable().equals(ioredis("eval", [...evalArgs, ...values]))).toBe(true);
    }
  });

  it("puts its head in the room in front of the values when it fits, once, and copies otherwise", () => {
    const values = [Buffer.from("one"), Buffer.from(""), Buffer.alloc(300, 7)];
    const key = "{room}";
    const expected = ioredis("lpush", [key, ...values]);
    const roomy = withRoom(values, FramedCommand.lpushRoom(key));
    const first = new FramedCommand("lpush", [key], [roomy]).toWritable();
    expect(first.equals(expected)).toBe(true);
    expect(first.buffer).toBe(roomy.buffer.buffer); // no copy
    // The room is taken: a second command of the same values copies them, and the first is untouched.
    const second = new FramedCommand("lpush", ["{other}"], [roomy]).toWritable();
    expect(second.equals(ioredis("lpush", ["{other}", ...values]))).toBe(true);
    expect(first.equals(expected)).toBe(true);
    // Too little room: a copy.
    const cramped = withRoom(values, 5);
    expect(new FramedCommand("lpush", [key], [cramped]).toWritable().equals(expected)).toBe(true);
  });

  it("frames each queue's LPUSH head right past the heads it keeps (4,096), and again for a key it kept before", () => {
    const values = [Buffer.from("v")];
    for (const n of [...Array.from({ length: 5000 }, (_, i) => i), 0, 4999, 17]) {
      const key = `{q-${n}}`;
      const room = withRoom(values, FramedCommand.lpushRoom(key));
      expect(new FramedCommand("lpush", [key], [room]).toWritable().equals(ioredis("lpush", [key, ...values]))).toBe(true);
    }
  });
});
