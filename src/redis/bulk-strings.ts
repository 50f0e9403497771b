/**
 * Many values for one Redis command, written by their producer straight into
 * one buffer in the command's wire form, RESP bulk strings
 * ("$<size>\r\n<bytes>\r\n"), and the command that sends them as they are.
 *
 * ioredis frames each argument of a command on its own: for every value three
 * pieces, two strings built and measured, then everything copied into one
 * buffer. For an LPUSH of a thousand envelopes that cost about as much as the
 * rest of the server's enqueue work together (issue #4, bench row 6).
 */
import { Command } from "ioredis";
import { ProtoWriter } from "../wire/proto-writer.js";
import { digitCount } from "../wire/digits.js";

const CR = 13;
const LF = 10;
const DOLLAR = 36;
const STAR = 42;

/**
 * Values framed as RESP bulk strings, one after another in `buffer` from
 * `start` on. The bytes before `start` are room for the head of the command
 * that sends them, which the first FramedCommand made of them alone takes
 * rather than copying the values behind a head of its own.
 */
export class BulkStrings {
  private roomTaken = false;

  constructor(
    readonly buffer: Buffer,
    readonly count: number,
    readonly start = 0,
  ) {}

  /** The framed values. */
  get bytes(): Buffer {
    return this.buffer.subarray(this.start);
  }

  /** Bytes of the framed values. */
  get size(): number {
    return this.buffer.length - this.start;
  }

  /**
   * A command's head of `size` bytes written by `write` into the room in
   * front of the values, and the command whole (head and values), if the room
   * is free and large enough; undefined otherwise.
   */
  behind(size: number, write: (w: ProtoWriter) => void): Buffer | undefined {
    if (this.roomTaken || size > this.start) return undefined;
    this.roomTaken = true;
    const w = new ProtoWriter(this.buffer);
    w.pos = this.start - size;
    write(w);
    return this.buffer.subarray(this.start - size);
  }

  /** The values one by one, as views of the buffer (for the rare caller that sends them otherwise). */
  values(): Buffer[] {
    const out: Buffer[] = [];
    let pos = this.start;
    for (let i = 0; i < this.count; i++) {
      let size = 0;
      for (pos++; this.buffer[pos] !== CR; pos++) size = size * 10 + this.buffer[pos] - 48;
      pos += 2;
      out.push(this.buffer.subarray(pos, pos + size));
      pos += size + 2;
    }
    return out;
  }

  /** `values` framed (for values that already exist one by one). */
  static of(values: readonly Uint8Array[]): BulkStrings {
    let size = 0;
    for (const v of values) size += BulkStrings.framedSize(v.byteLength);
    const w = new ProtoWriter(Buffer.allocUnsafe(size));
    for (const v of values) {
      BulkStrings.begin(w, v.byteLength);
      w.raw(v);
      BulkStrings.end(w);
    }
    return new BulkStrings(w.buf, values.length);
  }

  /** Bytes a value of `size` bytes takes framed. */
  static framedSize(size: number): number {
    return 1 + digitCount(size, 10) + 2 + size + 2;
  }

  /** Writes the frame's head for a value of `size` bytes; the value follows, then end(). */
  static begin(w: ProtoWriter, size: number): void {
    w.buf[w.pos++] = DOLLAR;
    writeNumber(w, size);
  }

  /** Closes the frame of the value just written. */
  static end(w: ProtoWriter): void {
    w.buf[w.pos++] = CR;
    w.buf[w.pos++] = LF;
  }
}

/**
 * A command's leading arguments (its name first, for a head) framed once, for
 * a command sent again and again with them: a script's sha and keys, a
 * queue's settings.
 */
export class FramedArgs {
  readonly bytes: Buffer;

  constructor(readonly args: readonly string[]) {
    let text = "";
    for (const s of args) text += `$${Buffer.byteLength(s)}\r\n${s}\r\n`;
    this.bytes = Buffer.from(text);
  }
}

const NO_ARGS = new FramedArgs([]);

/**
 * A command whose last arguments are framed values, written to the socket as
 * one buffer. ioredis knows it by its name and leading arguments: it routes it
 * by its key on a cluster (and again after a MOVED or ASK), and writes the
 * buffer that toWritable() returns. Two things of Command's own are relied on:
 * that hook, and its `args`, set here rather than through its constructor
 * (test/queue covers standalone and cluster).
 */
export class FramedCommand extends Command {
  private constructor(
    name: string,
    args: string[],
    private readonly frame: Buffer,
  ) {
    // Command flattens the arguments it is given (Array.prototype.flat), which on an item paced
    // every 10 ms, its code gone from the caches, took ~16 µs of the ~40 µs the constructor did.
    // These are flat strings already, and no argument transformer of ioredis' applies to the
    // commands sent framed (EVALSHA, EVAL, LPUSH): they are set as they are.
    super(name);
    this.args = args;
  }

  /** `name` with `args`, then `values`. */
  static of(name: string, args: readonly (string | number)[], values: readonly BulkStrings[]): FramedCommand {
    const strings = args.map(String);
    const head = name === "lpush" && strings.length === 1 ? lpushHead(strings[0]) : new FramedArgs([name, ...strings]);
    return FramedCommand.kept(head, [], NO_ARGS, values);
  }

  /**
   * `head` (the command's name and leading arguments), then `numbers`
   * (framed here), then `tail`'s arguments, then `values`: a command of which
   * only a few numbers change from call to call, its other arguments framed
   * once and kept. ioredis sees `head`'s arguments as the command's (a
   * cluster routes it by the keys among them); the rest are only written.
   */
  static kept(head: FramedArgs, numbers: readonly number[], tail: FramedArgs, values: readonly BulkStrings[]): FramedCommand {
    let count = head.args.length + numbers.length + tail.args.length;
    let size = tail.bytes.length;
    const digits: number[] = [];
    for (const n of numbers) {
      // Only non-negative safe integers are framed here; anything else as its text.
      if (!(Number.isSafeInteger(n) && n >= 0)) return FramedCommand.of(head.args[0], [...head.args.slice(1), ...numbers, ...tail.args], values);
      const d = decimalDigits(n);
      digits.push(d);
      size += 1 + digitCount(d, 10) + 2 + d + 2;
    }
    for (const v of values) count += v.count;
    size += 1 + digitCount(count, 10) + 2 + head.bytes.length;
    const write = (w: ProtoWriter) => {
      writeCount(w, count);
      w.raw(head.bytes);
      for (let i = 0; i < numbers.length; i++) {
        w.buf[w.pos++] = DOLLAR;
        writeNumber(w, digits[i]);
        writeNumber(w, numbers[i], digits[i]);
      }
      w.raw(tail.bytes);
    };
    let frame = values.length === 1 ? values[0].behind(size, write) : undefined;
    if (!frame) {
      for (const v of values) size += v.size;
      const w = new ProtoWriter(Buffer.allocUnsafe(size));
      write(w);
      for (const v of values) w.raw(v.bytes);
      frame = w.buf;
    }
    return new FramedCommand(head.args[0], head.args.slice(1), frame);
  }

  /** Room the head of an LPUSH onto `key` takes, whatever the number of values. */
  static lpushRoom(key: string): number {
    // "*<count>\r\n$5\r\nLPUSH\r\n$<key size>\r\n<key>\r\n", counts and sizes below 2^31.
    return 1 + 10 + 2 + 4 + 5 + 2 + 1 + 10 + 2 + Buffer.byteLength(key) + 2;
  }

  override toWritable(): Buffer {
    return this.frame;
  }
}

/**
 * The head of an LPUSH onto `key`, kept: every push onto a queue has the same,
 * so it is framed once rather than for every push (a template string and its
 * encoding, each time). The keys are queue names; past MAX_KEPT_HEADS the
 * cache starts over.
 */
const lpushHeads = new Map<string, FramedArgs>();
const MAX_KEPT_HEADS = 4096;

function lpushHead(key: string): FramedArgs {
  let head = lpushHeads.get(key);
  if (!head) {
    if (lpushHeads.size >= MAX_KEPT_HEADS) lpushHeads.clear();
    head = new FramedArgs(["lpush", key]);
    lpushHeads.set(key, head);
  }
  return head;
}

/** Decimal digits of a non-negative safe integer. */
function decimalDigits(n: number): number {
  if (n < 0x80000000) return digitCount(n, 10);
  let digits = 1;
  for (; n >= 10; digits++) n = Math.floor(n / 10);
  return digits;
}

/** "*<count>\r\n": a command's count of arguments. */
function writeCount(w: ProtoWriter, count: number): void {
  w.buf[w.pos++] = STAR;
  writeNumber(w, count);
}

/** `n` (a non-negative safe integer, of `digits` decimal digits) in decimal, then CRLF. */
function writeNumber(w: ProtoWriter, n: number, digits = decimalDigits(n)): void {
  const { buf } = w;
  let pos = (w.pos += digits);
  for (; n >= 0x80000000; n = Math.floor(n / 10)) buf[--pos] = 48 + (n % 10);
  do {
    buf[--pos] = 48 + (n % 10);
    n = (n / 10) | 0;
  } while (n > 0);
  buf[w.pos++] = CR;
  buf[w.pos++] = LF;
}
