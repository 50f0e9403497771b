/** Number formats, verdicts and Markdown tables for the benchmark's output. */

export const fmtRate = (x: number) => (Number.isFinite(x) ? `${Math.round(x).toLocaleString("en-US")}/s` : "—");
export const fmtMs = (x: number) => (Number.isFinite(x) ? `${x < 10 ? x.toFixed(2) : x.toFixed(1)} ms` : "—");
export const fmtRatio = (x: number) => (Number.isFinite(x) ? `${x.toFixed(2)}×` : "—");
export const fmtNum = (x: number, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : "—");

/** "met", or how far off. `higher`: the value must be ≥ goal; else ≤ goal. */
export function verdict(value: number, goal: number, higher: boolean, unit = ""): string {
  if (!Number.isFinite(value)) return "not run";
  const ok = higher ? value >= goal : value <= goal;
  if (ok) return "met";
  const off = higher ? (1 - value / goal) * 100 : (value / goal - 1) * 100;
  return `missed by ${off.toFixed(0)}% (${higher ? "needs" : "limit"} ${goal}${unit})`;
}

/** A Markdown table of `rows` under `head`. */
export function markdownTable(head: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  return [line(head), line(head.map(() => "---")), ...rows.map(line)].join("\n");
}
