/**
 * Building the page: elements are made with `h`, and every value from the
 * server goes in as a text node, never as HTML, so a payload that holds
 * `<script>` shows as those characters.
 */
import { timestampMs, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";

export type Child = Node | string | number | bigint | null | undefined | false | Child[];

type Props = {
  class?: string;
  on?: { [K in keyof HTMLElementEventMap]?: (e: HTMLElementEventMap[K]) => void };
} & Record<string, unknown>;

function append(parent: Node, child: Child): void {
  if (child === null || child === undefined || child === false) return;
  if (Array.isArray(child)) return child.forEach((c) => append(parent, c));
  parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
}

/** An element with attributes (`disabled: true` sets a boolean one), listeners and children. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "on") {
      for (const [event, fn] of Object.entries(value as Record<string, EventListener>)) el.addEventListener(event, fn);
    } else if (name === "class") {
      el.className = String(value);
    } else if (name === "value" && "value" in el) {
      (el as HTMLInputElement).value = String(value);
    } else if (name === "checked" && el instanceof HTMLInputElement) {
      el.checked = Boolean(value);
    } else if (value === true) {
      el.setAttribute(name, "");
    } else if (value !== false && value !== undefined && value !== null) {
      el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

/** Replaces an element's children. */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

const utf8 = new TextDecoder("utf-8", { fatal: false });

/**
 * A payload as text: UTF-8 with control characters shown as \xNN, cut to
 * `max` characters with an ellipsis and the full size.
 */
export function payloadText(bytes: Uint8Array, max = 200): string {
  const text = utf8.decode(bytes).replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
  return text.length > max ? `${text.slice(0, max)}… (${bytes.length} bytes)` : text;
}

/** A time as the browser's locale shows it, or "—". */
export function time(ts: Timestamp | undefined, timeZone?: string): string {
  if (!ts) return "—";
  return new Date(timestampMs(ts)).toLocaleString(undefined, {
    timeZone, year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
  });
}

/** A length of time in ms as "850 ms", "12.5 s", "3 m 20 s", "2 h 5 m". */
export function span(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} m ${Math.floor((ms % 60_000) / 1000)} s`;
  return `${Math.floor(ms / 3_600_000)} h ${Math.floor((ms % 3_600_000) / 60_000)} m`;
}

export function durationMs(d: Duration | undefined): number | undefined {
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : undefined;
}

/** A button that runs `action`, disabled with a reason when the caller may not. */
export function button(label: string, action: () => void, opts: { allowed?: boolean; why?: string; kind?: string; testid?: string } = {}): HTMLButtonElement {
  const allowed = opts.allowed ?? true;
  return h("button", {
    type: "button",
    class: opts.kind ?? "",
    disabled: !allowed,
    title: allowed ? undefined : opts.why,
    "data-testid": opts.testid,
    on: { click: () => allowed && action() },
  }, label);
}

/** A table that scrolls sideways on a narrow screen. */
export function table(head: string[], rows: HTMLTableRowElement[], empty: string, testid?: string): HTMLElement {
  return h("div", { class: "table-wrap" },
    h("table", { "data-testid": testid },
      h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: head.length, class: "empty" }, empty))),
    ),
  );
}
