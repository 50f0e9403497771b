// Builds the dashboard into dist/dashboard (npm run build); the service serves it under /dashboard/.
import { defineConfig } from "vite";

export default defineConfig({
  root: new URL(".", import.meta.url).pathname,
  base: "/dashboard/",
  logLevel: "warn",
  build: {
    outDir: new URL("../dist/dashboard", import.meta.url).pathname,
    emptyOutDir: true,
    // No inline scripts: the content security policy allows only this origin's files.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    target: "es2022",
  },
});
