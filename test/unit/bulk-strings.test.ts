/**
 * FramedCommand (src/redis/bulk-strings.ts) sends what ioredis itself would
 * write for the same command with the values as Buffer arguments, whether
 * its head goes into the room in front of the values or in front of a copy.
 */
import { describe, expect, it } from "vitest";
import { Command } from "ioredis";
import { BulkStrings, FramedArgs, FramedCommand } from "../../src/redis/bulk-strings.js";
import { ProtoWriter } from "../../src/wire/proto-writer.js";
import { queueKeys } from "../../src/redis/keys.js";
import { pushLeaseCommand, pushRoom } from "../../src/redis/scripts.js";
import { bytes, random } from "../helpers/random.js";

/** What ioredis writes for `name` with `args`. */
function ioredis(name: string, args: (string | Buffer)[]): Buffer {
  const written = new Command(name, args).toWritable({} as never);
  return Buffer.isBuffer(written) ? written : Buffer.from(written);
}

/** A command's arguments as written (RESP: an array of bulk strings). */
function respArgs(frame: Buffer): Buffer[] {
  const line = (at: number) => frame.toString("latin1", at, frame.indexOf("\r\n", at));
  const count = Number(line(1));
  let at = frame.indexOf("\r\n") + 2;
  const out: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const size = Number(line(at + 1));
    at = frame.indexOf("\r\n", at) + 2;
    out.push(frame.subarray(at, at + size));
    at += size + 2;
  }
  expect(at).toBe(frame.length);
  return out;
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
      expect(FramedCommand.of("lpush", [key], chunks.map((c) => BulkStrings.of(c))).toWritable().equals(ioredis("lpush", [key, ...values]))).toBe(true);
      const evalArgs = ["return 1", "1", key, String(n * 1000)];
      expect(FramedCommand.of("eval", [evalArgs[0], 1, key, n * 1000], chunks.map((c) => BulkStrings.of(c))).toWritable().equals(ioredis("eval", [...evalArgs, ...values]))).toBe(true);
    }
  });

  it("puts its head in the room in front of the values when it fits, once, and copies otherwise", () => {
    const values = [Buffer.from("one"), Buffer.from(""), Buffer.alloc(300, 7)];
    const key = "{room}";
    const expected = ioredis("lpush", [key, ...values]);
    const roomy = withRoom(values, FramedCommand.lpushRoom(key));
    const first = FramedCommand.of("lpush", [key], [roomy]).toWritable();
    expect(first.equals(expected)).toBe(true);
    expect(first.buffer).toBe(roomy.buffer.buffer); // no copy
    // The room is taken: a second command of the same values copies them, and the first is untouched.
    const second = FramedCommand.of("lpush", ["{other}"], [roomy]).toWritable();
    expect(second.equals(ioredis("lpush", ["{other}", ...values]))).toBe(true);
    expect(first.equals(expected)).toBe(true);
    // Too little room: a copy.
    const cramped = withRoom(values, 5);
    expect(FramedCommand.of("lpush", [key], [cramped]).toWritable().equals(expected)).toBe(true);
  });

  it("frames each queue's LPUSH head right past the heads it keeps (4,096), and again for a key it kept before", () => {
    const values = [Buffer.from("v")];
    for (const n of [...Array.from({ length: 5000 }, (_, i) => i), 0, 4999, 17]) {
      const key = `{q-${n}}`;
      const room = withRoom(values, FramedCommand.lpushRoom(key));
      expect(FramedCommand.of("lpush", [key], [room]).toWritable().equals(ioredis("lpush", [key, ...values]))).toBe(true);
    }
  });

  it("writes ioredis' bytes for a kept head and tail with numbers between, in the room when it fits, and any number as ioredis would", () => {
    const next = random(45);
    const head = new FramedArgs(["evalsha", "a".repeat(40), "2", "{q}.ü", "{q}.p"]);
    const tail = new FramedArgs(["1", "300000", "owner-ß"]);
    const edges = [0, 9, 10, 99, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 7, 1_764_000_000_123, 999_999_999_999_999, Number.MAX_SAFE_INTEGER];
    for (let n = 0; n < 300; n++) {
      const values = Array.from({ length: 1 + Math.floor(next() * 4) }, () => Buffer.from(bytes(next, 200)));
      const pick = () => (next() < 0.5 ? edges[Math.floor(next() * edges.length)] : Math.floor(next() * 2 ** (1 + Math.floor(next() * 52))));
      const numbers = [pick(), pick(), pick()];
      const expected = ioredis("evalsha", [...head.args.slice(1), ...numbers.map(String), ...tail.args, ...values]);
      const room = withRoom(values, 400);
      const roomy = FramedCommand.kept(head, numbers, tail, [room]);
      expect(roomy.toWritable().equals(expected)).toBe(true);
      expect(roomy.toWritable().buffer).toBe(room.buffer.buffer); // written in the room, no copy
      expect(roomy.name).toBe("evalsha");
      expect(roomy.args).toEqual(head.args.slice(1)); // what a cluster routes it by
      const split = [BulkStrings.of(values.slice(0, 1)), BulkStrings.of(values.slice(1))];
      expect(FramedCommand.kept(head, numbers, tail, split).toWritable().equals(expected)).toBe(true);
      expect(FramedCommand.kept(head, numbers, tail, [withRoom(values, 30)]).toWritable().equals(expected)).toBe(true);
    }
    // Not a non-negative safe integer: framed as its text, as ioredis frames String(n).
    for (const odd of [-1, 1.5, 2 ** 53, Number.NaN]) {
      const values = [Buffer.from("v")];
      const expected = ioredis("evalsha", [...head.args.slice(1), String(odd), "2", "3", ...tail.args, ...values]);
      expect(FramedCommand.kept(head, [odd, 2, 3], tail, [withRoom(values, 400)]).toWritable().equals(expected)).toBe(true);
    }
  });

  it("sends push-lease.lua's EVALSHA as ioredis would, its head in the room pushRoom leaves, whatever its numbers", () => {
    const values = [Buffer.from("item"), Buffer.alloc(150, 3)];
    for (const [recovery, recoveryTtlMs] of [["", 0], ["{q}.recovery", 86_400_000]] as const) {
      const keys = queueKeys("{q}.ü", "{q}.processing", "{q}.dead", recovery);
      for (const numbers of [[0, 0, 0], [60_000, 1_764_000_000_123, 512], Array(3).fill(Number.MAX_SAFE_INTEGER)]) {
        const lease = { now: numbers[1], max: numbers[2], recoveryTtlMs, owner: "0f3c9a2e-instance" };
        const room = withRoom(values, pushRoom(keys, recoveryTtlMs, lease.owner));
        const command = pushLeaseCommand(keys, numbers[0], [room], lease);
        const [sha, numKeys, ...keyArgs] = command.args as string[];
        expect(numKeys).toBe("5");
        expect(keyArgs).toEqual([keys.queue, keys.processing, keys.leases, keys.fence, keys.recovery || keys.leases]);
        const argv = [...numbers.map(String), recovery ? "1" : "0", String(recoveryTtlMs), lease.owner];
        expect(command.toWritable().equals(ioredis("evalsha", [sha, numKeys, ...keyArgs, ...argv, ...values]))).toBe(true);
        expect(command.toWritable().buffer).toBe(room.buffer.buffer);
        const evalText = pushLeaseCommand(keys, numbers[0], [BulkStrings.of(values)], lease, "eval");
        expect(evalText.toWritable().equals(ioredis("eval", [evalText.args[0] as string, numKeys, ...keyArgs, ...argv, ...values]))).toBe(true);
      }
    }
  });

  it("frames push-lease.lua again for a queue whose owner or recovery ttl changed, and fits its head in pushRoom's room at the largest count and numbers", () => {
    const keys = queueKeys("{kept}", "{kept}.processing", "{kept}.dead", "{kept}.recovery");
    const values = [Buffer.from("v")];
    const argvOf = (command: FramedCommand) => respArgs(command.toWritable()).slice(8, 14).map((b) => b.toString());
    for (const [owner, recoveryTtlMs] of [["one", 1000], ["twö-😀", 1000], ["twö-😀", 2000], ["one", 1000]] as const) {
      const command = pushLeaseCommand(keys, 5, [BulkStrings.of(values)], { now: 7, max: 1, recoveryTtlMs, owner });
      expect(argvOf(command)).toEqual(["5", "7", "1", "1", String(recoveryTtlMs), owner]);
    }
    // A count of ten digits and numbers of sixteen: the room is still enough (no copy).
    const owner = "ö".repeat(40);
    const plain = BulkStrings.of(values).bytes;
    const room = pushRoom(keys, 3000, owner);
    const w = new ProtoWriter(Buffer.alloc(room + plain.length));
    w.pos = room;
    w.raw(plain);
    const huge = new BulkStrings(w.buf, 2_000_000_000, room); // its count as a push of that many values would have it
    const big = Number.MAX_SAFE_INTEGER;
    expect(pushLeaseCommand(keys, big, [huge], { now: big, max: big, recoveryTtlMs: 3000, owner }).toWritable().buffer).toBe(w.buf.buffer);
  });

  it("writes a head that fills the room exactly into it, and copies when the room is one byte short", () => {
    const values = [Buffer.from("abc")];
    const key = "{exact}";
    const expected = ioredis("lpush", [key, ...values]);
    const head = expected.length - BulkStrings.of(values).bytes.length;
    const exact = withRoom(values, head);
    const inPlace = FramedCommand.of("lpush", [key], [exact]).toWritable();
    expect(inPlace.equals(expected)).toBe(true);
    expect(inPlace.buffer).toBe(exact.buffer.buffer);
    expect(inPlace.byteOffset).toBe(exact.buffer.byteOffset);
    const short = withRoom(values, head - 1);
    const copied = FramedCommand.of("lpush", [key], [short]).toWritable();
    expect(copied.equals(expected)).toBe(true);
    expect(copied.buffer).not.toBe(short.buffer.buffer);
  });
});
