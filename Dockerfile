# syntax=docker/dockerfile:1
#
# One image for every fleet-ingest process; the command picks the process (docs/deploy.md):
#   node --enable-source-maps dist/gateway/main.js                              gateway (GATEWAY_PORT, 8080)
#   node --enable-source-maps --max-semi-space-size=64 dist/workers/main.js     worker (WORKER_HTTP_PORT, 8082)
#   node --enable-source-maps --max-semi-space-size=64 dist/api/main.js         read API and dashboard (API_PORT, 8081)
#   node bin/fleet.js migrate                                                   schema (a one-shot job)
#
# Node 20 on Debian 12 (bookworm, glibc 2.36), in both stages: the uWebSockets.js build the gateway
# uses (@trufflesuite/uws-js-unofficial@20.30.0-unofficial.0) has native binaries for Node 20 (ABI
# 115) on glibc 2.36 and for no later Node; on anything else it falls back to a slow pure-JS server,
# which the gateway refuses to run on (gateway/uws.ts). Node 20 reaches its end of life on
# 2026-04-30: docs/deploy.md ("Runtime end of life") says how to supply a current uWebSockets.js
# build with a supported Node. test/unit/deploy-dockerfile.test.ts keeps these lines true.

FROM node:20-bookworm-slim AS build
WORKDIR /app
# The lockfile decides every version. Install scripts stay off, as under the project's own npm
# (which runs none unless allowed): the native add-ons ship prebuilt binaries.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
# Only what `npm run build` compiles: the server (tsc -> dist/) and the dashboard (Vite -> dist/dashboard).
COPY tsconfig.json ./
COPY lib ./lib
COPY cli ./cli
COPY gateway ./gateway
COPY workers ./workers
COPY api ./api
COPY dashboard ./dashboard
COPY bin ./bin
RUN npm run build && rm -f dist/.tsbuildinfo
RUN npm prune --omit=dev --ignore-scripts --no-audit --no-fund

FROM node:20-bookworm-slim AS runtime
WORKDIR /app
# Files owned by root and read-only to the process: it cannot change its own code.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/bin ./bin
# In a container the services listen on every interface (their defaults are loopback only), and a
# worker serves /healthz, /readyz and /metrics (off by default).
ENV GATEWAY_HOST=0.0.0.0 \
    API_HOST=0.0.0.0 \
    WORKER_HTTP_HOST=0.0.0.0 \
    WORKER_HTTP_PORT=8082
EXPOSE 8080 8081 8082
# The `node` user of the official image, by number: Kubernetes' runAsNonRoot can only verify a
# numeric user.
USER 1000:1000
# Healthy when the process in this container answers /healthz on its port. A container has its own
# network namespace, so only its own process listens: the check tries the gateway's, the api's and
# the worker's port (each from the environment, else its default) and passes on the first 200.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "const e=process.env,ports=[...new Set([e.GATEWAY_PORT||'8080',e.API_PORT||'8081',e.WORKER_HTTP_PORT||'0'])].filter((p)=>p!=='0');const ok=(p)=>fetch('http://127.0.0.1:'+p+'/healthz',{signal:AbortSignal.timeout(3000)}).then((r)=>r.ok,()=>false);Promise.all(ports.map(ok)).then((r)=>process.exit(r.includes(true)?0:1))"]
CMD ["node", "--enable-source-maps", "dist/gateway/main.js"]
