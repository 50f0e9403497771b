// tsc compiles only TypeScript: copy the Lua scripts next to the compiled loader.
import { cpSync } from "node:fs";

cpSync("src/redis/scripts", "dist/redis/scripts", { recursive: true, filter: (p) => !p.endsWith(".ts") });
