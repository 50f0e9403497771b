/**
 * The part of a shared Lua library (lib.lua) that a script uses: its
 * top-level definitions the script names, and those they name in turn, in
 * the library's order.
 *
 * Redis runs a script's whole text on every call, so each `local function`
 * of the library makes a closure per call, and each table a table, used or
 * not. With all of lib.lua in front of it, push-lease.lua made some 40 of
 * them per call to use 7; cold (a call every 10 ms), Redis took about a
 * tenth longer per call for them (issue 13, latency rows).
 *
 * The library is read as top-level statements, each beginning with `local`
 * at the start of a line and running until the next line at the start that
 * is not `end`, `}` or `)` (a comment, a blank line's neighbour, the next
 * `local`). A statement is kept when any name it defines is named by kept
 * code: a reference is any identifier outside the comments that begin a
 * line, so a word in a string keeps a definition of that name too (keeping
 * more than needed is harmless, less would leave a nil global). Nothing but
 * `local` statements and comments may stand at the library's top level, and
 * no comment may begin a line inside a statement.
 */

interface Statement {
  text: string;
  defines: string[];
  names: Set<string>;
}

/**
 * The identifiers of Lua `code`, outside the comments that begin a line. A comment after code on
 * its line is read as code: a "--" may stand in a string there, and what follows it may name a
 * definition (reading too much keeps more than needed, which is harmless).
 */
function namesIn(code: string): Set<string> {
  const bare = code.replace(/^[ \t]*--\[(=*)\[[\s\S]*?\]\1\]/gm, "").replace(/^[ \t]*--.*$/gm, "");
  return new Set(bare.match(/[A-Za-z_][A-Za-z0-9_]*/g) ?? []);
}

/** `lib`'s top-level statements; throws on anything at its top level but `local` statements and comments. */
export function statementsOf(lib: string): Statement[] {
  const statements: { lines: string[] }[] = [];
  let current: { lines: string[] } | undefined;
  let inComment = false;
  for (const line of lib.split("\n")) {
    if (inComment) {
      inComment = !line.includes("]]");
      continue;
    }
    if (line.startsWith("--")) {
      current = undefined;
      inComment = line.startsWith("--[[") && !line.includes("]]");
    } else if (line.startsWith("local ")) {
      current = { lines: [line] };
      statements.push(current);
    } else if (line === "") {
      current?.lines.push(line);
    } else if (/^(end|}|\))/.test(line) || /^\s/.test(line)) {
      // A statement's next line; after a comment at the start of a line, a statement must begin again.
      if (!current) throw new Error(`lua library: a line outside any statement (after a comment at its start?): "${line}"`);
      current.lines.push(line);
    } else {
      throw new Error(`lua library: only local statements may stand at the top level, not "${line}"`);
    }
  }
  return statements.map(({ lines }) => {
    const text = lines.join("\n").trimEnd();
    const fn = /^local\s+function\s+([A-Za-z_]\w*)/.exec(text);
    const vars = /^local\s+([A-Za-z_][\w\s,]*?)\s*=/.exec(text);
    if (!fn && !vars) throw new Error(`lua library: cannot tell what "${lines[0]}" defines`);
    const defines = fn ? [fn[1]!] : vars![1]!.split(",").map((name) => name.trim());
    return { text, defines, names: namesIn(text) };
  });
}

/** The statements of `lib` that `users` (the code in front of which it goes) need, in `lib`'s order. */
export function libFor(lib: string, users: string): string {
  const statements = statementsOf(lib);
  const kept = new Set<Statement>();
  const named = [...namesIn(users)];
  for (let name = named.pop(); name !== undefined; name = named.pop()) {
    for (const s of statements) {
      if (!kept.has(s) && s.defines.includes(name)) {
        kept.add(s);
        named.push(...s.names);
      }
    }
  }
  return statements.filter((s) => kept.has(s)).map((s) => s.text).join("\n");
}
