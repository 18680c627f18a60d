// Headless Chromium (Debian's /usr/bin/chromium, never a downloaded build)
// driven over the DevTools protocol by playwright-core.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

/** Launches Chromium with a fresh profile; close() removes it. */
export async function launchBrowser() {
  const profile = mkdtempSync(path.join(tmpdir(), "sluice-js-chromium-"));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1200, height: 900 },
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  const errors = []; // uncaught exceptions of page scripts
  const consoleErrors = []; // what the page logged as errors (Chromium logs refused connections there too)
  page.on("pageerror", (e) => errors.push(e));
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(m.text());
  });
  return {
    ctx,
    page,
    errors,
    consoleErrors,
    async close() {
      await ctx.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
