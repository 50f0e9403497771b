/**
 * Headless Chromium for the dashboard's end-to-end tests: Debian's `chromium`
 * (or SWITCHYARD_TEST_CHROMIUM) driven by playwright-core, which never
 * downloads a browser of its own. `.ci/run` installs it.
 */
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";

export const CHROMIUM = process.env.SWITCHYARD_TEST_CHROMIUM ?? "/usr/bin/chromium";

/** Where the tests save screenshots (a CI artifact). */
export const SCREENSHOT_DIR = join(process.cwd(), "test-artifacts", "dashboard");

/** Viewports the screenshots are taken at. */
export const VIEWPORTS = {
  desktop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
} as const;

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium (apt-get install chromium) or set SWITCHYARD_TEST_CHROMIUM`);
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // This machine's network is closed: Chromium must not try to reach Google's services.
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    ],
  });
}

/** Saves a full-page screenshot as test-artifacts/dashboard/<name>.png. */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const path = join(SCREENSHOT_DIR, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}
