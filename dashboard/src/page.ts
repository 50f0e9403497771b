/** What every page of the dashboard is, and what it is given. */
import { errorText, type Access } from "./api.js";

/** A page: its element, made once, and a refresh that updates its live parts. */
export interface Page {
  el: HTMLElement;
  refresh(): Promise<void>;
}

export interface Ctx {
  access: Access;
  /** Shows a short message at the top: the result of an action, or an error. */
  notify(message: string, kind?: "ok" | "error"): void;
  go(hash: string): void;
  /** Refreshes the page now (after an action). */
  refresh(): Promise<void>;
}

/** Runs a user's action: its result or error as a notice, then a refresh. */
export async function act(ctx: Ctx, action: () => Promise<string>): Promise<void> {
  try {
    ctx.notify(await action());
  } catch (err) {
    ctx.notify(errorText(err), "error");
  }
  await ctx.refresh();
}
