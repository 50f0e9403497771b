# syntax=docker/dockerfile:1
# Switchyard: build with `docker build -t switchyard .`, run with
#   docker run -p 50051:50051 -e SWITCHYARD_REDIS_URL=redis://redis:6379 switchyard
# Without SWITCHYARD_REDIS_URL / SWITCHYARD_REDIS_CLUSTER_NODES the container runs its own
# embedded redis-server with data in /data (mount a volume there to keep it).

# --- build: compile TypeScript (src/gen is committed, so buf is not needed here) ---
# Node 24: the Active LTS line of late 2025, maintained until April 2028 (Node 20's ended April 2026).
# Debian bookworm below every stage, as the redis-server the runtime installs.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The build needs no dependency's install script (only @bufbuild/buf and protobufjs have one).
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
# The dashboard is bundled by Vite (a devDependency of this stage) into dist/dashboard.
COPY dashboard ./dashboard
RUN npm run build

# --- deps: production dependencies only ---
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts \
 && npm cache clean --force

# --- runtime ---
FROM node:24-bookworm-slim
# redis-server only for the embedded mode (no Redis configured); unused when one is.
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# Switchyard writes only to SWITCHYARD_DATA_DIR (the embedded Redis) and TMPDIR (the dashboard
# gateway's socket): with a read-only root filesystem, give it a writable /tmp (a tmpfs, an emptyDir).
ENV NODE_ENV=production \
    TMPDIR=/tmp \
    SWITCHYARD_GRPC_ADDRESS=0.0.0.0:50051 \
    SWITCHYARD_HTTP_ADDRESS=0.0.0.0:9090 \
    SWITCHYARD_DATA_DIR=/data
# package.json carries "type": "module", which dist/*.js need.
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY scripts/health-probe.mjs ./scripts/health-probe.mjs
# `switchyard` on PATH: `docker exec <container> switchyard queue stats` talks to the server inside.
RUN printf '#!/bin/sh\nexec node /app/dist/cli/main.js "$@"\n' > /usr/local/bin/switchyard \
 && chmod 755 /usr/local/bin/switchyard \
 && mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
# 50051 gRPC; 9090 the side HTTP port: /metrics, /healthz, /readyz, the dashboard (/dashboard/) and its API (/api/).
EXPOSE 50051 9090
# grpc.health.v1 Check where SWITCHYARD_GRPC_ADDRESS listens (0.0.0.0 as loopback; a unix: socket too);
# SERVING only while Redis is reachable. With TLS on the gRPC port it asks /readyz on SWITCHYARD_HTTP_ADDRESS.
HEALTHCHECK --interval=15s --timeout=5s --start-period=15s --retries=3 \
  CMD ["node", "scripts/health-probe.mjs"]
CMD ["node", "dist/main.js"]
