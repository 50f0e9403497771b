/** A small SVG line chart of recent rates, drawn without a library. */
const NS = "http://www.w3.org/2000/svg";

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** Lines for each series (values per second, oldest first), scaled to the largest value. */
export function sparkline(series: { values: number[]; class: string; label: string }[], width = 160, height = 36): SVGSVGElement {
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "spark", role: "img" });
  const max = Math.max(1, ...series.flatMap((s) => s.values));
  const title = svg("title", {});
  title.textContent = series.map((s) => `${s.label}: ${(s.values.at(-1) ?? 0).toFixed(1)}/s`).join(", ");
  root.appendChild(title);
  for (const s of series) {
    if (s.values.length < 2) continue;
    const step = width / (s.values.length - 1);
    const points = s.values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`);
    root.appendChild(svg("polyline", { points: points.join(" "), class: s.class, fill: "none" }));
  }
  return root;
}

/** Rates from samples of monotonically growing counters: keeps the last `keep` per key. */
export class RateHistory {
  private readonly last = new Map<string, { at: number; counts: number[] }>();
  private readonly rates = new Map<string, number[][]>();

  constructor(private readonly keep = 60) {}

  /** Records counters for `key` at time `at` (ms) and returns each counter's rates per second so far. */
  add(key: string, at: number, counts: number[]): number[][] {
    const prev = this.last.get(key);
    this.last.set(key, { at, counts });
    const series = this.rates.get(key) ?? counts.map(() => []);
    if (prev && at > prev.at) {
      counts.forEach((c, i) => {
        series[i].push(Math.max(0, ((c - prev.counts[i]) * 1000) / (at - prev.at)));
        if (series[i].length > this.keep) series[i].shift();
      });
    }
    this.rates.set(key, series);
    return series;
  }
}
