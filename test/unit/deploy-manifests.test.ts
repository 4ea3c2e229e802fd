// The Kubernetes manifests (deploy/k8s) and the chart values (deploy/helm-values) against the code
// they deploy, with no cluster: every document validates against the Kubernetes schemas
// (kubernetes-models, docs/dependencies.md); every variable set is a setting (SETTING_NAMES) and
// every value passes parseSettings; probes point at the ports and paths the processes serve; the
// commands name files the build produces, with the flags `npm start` uses; the Ingress routes every
// public route to the process that serves it and none of the operations endpoints.
import t from 'tap';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { ConfigError, parseSettings, SETTING_NAMES } from '../../lib/infra/config.js';
import { ROOT, nodeFlags } from '../../deploy/service-process.js';
import { routesOf, type Service } from '../../lib/contract/routes.js';
import { Readiness, serveHealth } from '../../workers/health.js';
import { createMetrics, METRICS } from '../../lib/infra/metrics.js';
import { createLogger } from '../../lib/infra/log.js';

type Obj = Record<string, any>;  

const K8S = join(ROOT, 'deploy', 'k8s');
const VALUES = join(ROOT, 'deploy', 'helm-values');
const SETTINGS = new Set<string>(SETTING_NAMES);

function loadYaml(file: string): Obj[] {
  const docs = parseAllDocuments(readFileSync(file, 'utf8'), { merge: true });
  const out: Obj[] = [];
  for (const d of docs) {
    if (d.errors.length) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
    const js = d.toJS();
    if (js !== null && js !== undefined) out.push(js as Obj);
  }
  return out;
}

const files = readdirSync(K8S).filter((f) => /\.ya?ml$/.test(f)).sort();
const docsByFile = new Map(files.map((f) => [f, loadYaml(join(K8S, f))]));
const kustomization = docsByFile.get('kustomization.yaml')![0]!;
const applied = (kustomization.resources as string[]).flatMap((f) => docsByFile.get(f) ?? []);
const secretTemplate = docsByFile.get('secret.example.yaml')![0]!;
const ofKind = (kind: string) => applied.filter((d) => d.kind === kind);
const named = (kind: string, name: string) => ofKind(kind).find((d) => d.metadata.name === name);
const configMap = named('ConfigMap', 'fleet-config')!;

/** The process a container runs, from its command: gateway, worker, api or migrate. */
function processOf(command: string[]): 'gateway' | 'worker' | 'api' | 'migrate' {
  const script = command.find((a) => a.endsWith('.js'));
  if (script === 'dist/gateway/main.js') return 'gateway';
  if (script === 'dist/workers/main.js') return 'worker';
  if (script === 'dist/api/main.js') return 'api';
  if (script === 'bin/fleet.js' && command.at(-1) === 'migrate') return 'migrate';
  throw new Error(`unknown command ${JSON.stringify(command)}`);
}

/** The environment a container gets: envFrom (ConfigMap, the Secret template), then env. */
function envOf(container: Obj): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of container.envFrom ?? []) {
    if (from.configMapRef) Object.assign(env, named('ConfigMap', from.configMapRef.name)!.data);
    if (from.secretRef) {
      if (from.secretRef.name !== secretTemplate.metadata.name) throw new Error(`unknown Secret ${from.secretRef.name}`);
      Object.assign(env, secretTemplate.stringData);
    }
  }
  for (const e of container.env ?? []) env[e.name] = e.value;
  return env;
}

const workloads = [...ofKind('Deployment'), ...ofKind('Job')].map((w) => {
  const pod = w.spec.template.spec as Obj;
  return { w, pod, containers: pod.containers as Obj[] };
});
const deployments = workloads.filter((x) => x.w.kind === 'Deployment');

t.test('every YAML document parses and validates against the Kubernetes schemas', async (t) => {
  t.ok(files.length >= 8, `${files.length} files`);
  t.equal(kustomization.kind, 'Kustomization');
  for (const f of kustomization.resources as string[]) t.ok(docsByFile.has(f), `kustomization resource ${f} exists`);
  const unlisted = files.filter((f) => f !== 'kustomization.yaml' && !(kustomization.resources as string[]).includes(f));
  t.same(unlisted, ['secret.example.yaml'], 'every manifest is applied, except the Secret template');
  let n = 0;
  for (const [file, docs] of docsByFile) {
    for (const doc of docs) {
      if (doc.kind === 'Kustomization') continue;
      const [group, version] = String(doc.apiVersion).includes('/') ? String(doc.apiVersion).split('/') : ['', doc.apiVersion];
      const mod = (await import(`kubernetes-models/${group ? `${group}/` : ''}${version}`)) as Record<string, new (o: Obj) => { validate(): void }>;
      const Model = mod[doc.kind];
      t.ok(Model, `${file}: ${doc.apiVersion} ${doc.kind} is a Kubernetes kind`);
      if (!Model) continue;
      t.doesNotThrow(() => new Model(doc).validate(), `${file}: ${doc.kind}/${doc.metadata?.name} is valid`);
      n++;
    }
  }
  t.ok(n >= 14, `${n} documents validated`);

  // The schemas check shapes, not references: a broken selector or name still validates.
  for (const { w, pod } of deployments) {
    const labels = w.spec.template.metadata.labels;
    for (const [k, v] of Object.entries(w.spec.selector.matchLabels)) t.equal(labels[k], v, `${w.metadata.name}: the selector matches its pods`);
    for (const c of pod.topologySpreadConstraints ?? []) t.same(c.labelSelector.matchLabels, w.spec.selector.matchLabels, `${w.metadata.name}: spread over its own pods`);
  }
  const bad = (msg: string) => t.fail(msg);
  t.equal(secretTemplate.kind, 'Secret');
  t.notOk(applied.some((d) => d.kind === 'Secret'), 'no Secret is applied from the repository');
  for (const s of ofKind('Service')) {
    const d = deployments.find(({ w }) => Object.entries(s.spec.selector).every(([k, v]) => w.spec.template.metadata.labels[k] === v));
    if (!d) bad(`Service ${s.metadata.name} selects no Deployment`);
    else for (const p of s.spec.ports) t.ok(d.containers[0]!.ports.some((cp: Obj) => cp.name === p.targetPort), `Service ${s.metadata.name}: targetPort ${p.targetPort} is a named container port`);
  }
  for (const p of ofKind('PodDisruptionBudget')) {
    t.ok(deployments.some(({ w }) => JSON.stringify(w.spec.selector) === JSON.stringify(p.spec.selector)), `PDB ${p.metadata.name} covers a Deployment`);
  }
  for (const h of ofKind('HorizontalPodAutoscaler')) {
    t.ok(named(h.spec.scaleTargetRef.kind, h.spec.scaleTargetRef.name), `HPA ${h.metadata.name} scales an existing ${h.spec.scaleTargetRef.kind}`);
    t.ok(h.spec.minReplicas >= 2 && h.spec.maxReplicas > h.spec.minReplicas, `HPA ${h.metadata.name}: at least 2 replicas`);
  }
  t.same(new Set(ofKind('PodDisruptionBudget').map((p) => p.metadata.name)), new Set(['gateway', 'worker', 'api']), 'a PDB for each Deployment');
});

t.test('every variable set is a setting, and every value passes parseSettings', async (t) => {
  for (const k of Object.keys(configMap.data)) t.ok(SETTINGS.has(k), `ConfigMap: ${k} is in SETTING_NAMES`);
  for (const k of Object.keys(secretTemplate.stringData)) t.ok(SETTINGS.has(k), `Secret template: ${k} is in SETTING_NAMES`);
  t.same(Object.keys(secretTemplate.stringData).sort(), ['CLICKHOUSE_PASSWORD', 'DATABASE_URL', 'JWT_SECRET', 'REDIS_URL'], 'the secrets are in the Secret, not the ConfigMap');
  for (const k of Object.keys(secretTemplate.stringData)) t.notOk(k in configMap.data, `${k} is not in the ConfigMap`);
  t.doesNotThrow(() => parseSettings(configMap.data), 'the ConfigMap passes parseSettings');

  for (const { w, containers } of workloads) {
    for (const c of containers) {
      for (const e of c.env ?? []) t.ok(SETTINGS.has(e.name), `${w.metadata.name}: env ${e.name} is in SETTING_NAMES`);
      const env = envOf(c);
      // The template's JWT_SECRET placeholder is refused on purpose: an unedited template stops the
      // processes instead of signing sessions with a published key. With a real key, all passes.
      try {
        parseSettings(env);
        t.fail(`${w.metadata.name}: the unedited Secret template must be refused`);
      } catch (e) {
        t.ok(e instanceof ConfigError);
        t.same((e as ConfigError).problems.map((p) => p.slice(0, p.indexOf('='))), ['JWT_SECRET'], `${w.metadata.name}: only the placeholder JWT_SECRET is refused`);
      }
      t.doesNotThrow(() => parseSettings({ ...env, JWT_SECRET: 'x'.repeat(64) }), `${w.metadata.name}: its environment passes parseSettings`);
      t.notOk('UWS_ALLOW_FALLBACK' in env, `${w.metadata.name}: the gateway may not run on the slow uWS fallback`);
    }
  }
});

t.test('containers: the image, commands the build produces, non-root and read-only, requests and limits', async (t) => {
  const imageName = kustomization.images[0].name;
  const dockerUser = /^USER\s+(\d+)(?::(\d+))?\s*$/m.exec(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
  t.ok(dockerUser, 'the Dockerfile names a numeric user');
  const seen = new Set<string>();
  for (const { w, pod, containers } of workloads) {
    t.equal(pod.automountServiceAccountToken, false, `${w.metadata.name}: no API token in the pod`);
    t.equal(pod.securityContext.runAsNonRoot, true, `${w.metadata.name}: runAsNonRoot`);
    t.equal(String(pod.securityContext.runAsUser), dockerUser![1], `${w.metadata.name}: runs as the image's user`);
    t.equal(pod.securityContext.seccompProfile.type, 'RuntimeDefault');
    for (const c of containers) {
      const name = `${w.metadata.name}/${c.name}`;
      t.equal(c.image, imageName, `${name}: the image kustomization.yaml sets`);
      const proc = processOf(c.command);
      seen.add(proc);
      const script = c.command.find((a: string) => a.endsWith('.js'));
      t.equal(c.command[0], 'node');
      t.ok(existsSync(join(ROOT, script)), `${name}: ${script} exists after the build`);
      if (proc !== 'migrate') {
        const rel = script.replace(/^dist\//, '');
        t.same(c.command.slice(1, -1), nodeFlags(rel), `${name}: the Node flags npm start uses`);
      }
      t.equal(c.securityContext.allowPrivilegeEscalation, false, `${name}: no privilege escalation`);
      t.equal(c.securityContext.readOnlyRootFilesystem, true, `${name}: read-only root filesystem`);
      t.same(c.securityContext.capabilities.drop, ['ALL'], `${name}: no capabilities`);
      t.ok(c.volumeMounts.some((m: Obj) => m.mountPath === '/tmp'), `${name}: a writable /tmp`);
      for (const kind of ['requests', 'limits']) for (const r of ['cpu', 'memory']) t.ok(c.resources?.[kind]?.[r], `${name}: ${kind}.${r}`);
      t.ok(bytes(c.resources.requests.memory) <= bytes(c.resources.limits.memory), `${name}: memory request within the limit`);
      t.ok(cpu(c.resources.requests.cpu) <= cpu(c.resources.limits.cpu), `${name}: cpu request within the limit`);
    }
  }
  t.same([...seen].sort(), ['api', 'gateway', 'migrate', 'worker'], 'gateway, worker, api and the migration run');
  const job = ofKind('Job')[0]!;
  t.equal(job.spec.template.spec.restartPolicy, 'Never');
  t.equal(processOf(job.spec.template.spec.containers[0].command), 'migrate');
});

t.test('probes point at the ports and paths the processes serve', async (t) => {
  const PORT_SETTING = { gateway: 'GATEWAY_PORT', api: 'API_PORT', worker: 'WORKER_HTTP_PORT' } as const;
  const HOST_SETTING = { gateway: 'GATEWAY_HOST', api: 'API_HOST', worker: 'WORKER_HTTP_HOST' } as const;
  for (const { w, containers } of deployments) {
    for (const c of containers) {
      const proc = processOf(c.command) as Exclude<ReturnType<typeof processOf>, 'migrate'>;
      const env = parseSettings({ ...envOf(c), JWT_SECRET: 'x'.repeat(64) });
      const port = env[PORT_SETTING[proc]];
      t.ok(port > 0, `${w.metadata.name}: ${PORT_SETTING[proc]}=${port} (set, not 0)`);
      t.equal(env[HOST_SETTING[proc]], '0.0.0.0', `${w.metadata.name}: ${HOST_SETTING[proc]} listens on the pod's address`);
      const portOf = (p: number | string) => (typeof p === 'number' ? p : c.ports.find((cp: Obj) => cp.name === p)?.containerPort);
      t.equal(c.ports.length, 1);
      t.equal(c.ports[0].containerPort, port, `${w.metadata.name}: containerPort is ${PORT_SETTING[proc]}`);
      for (const [probe, path] of [['livenessProbe', '/healthz'], ['readinessProbe', '/readyz'], ['startupProbe', '/healthz']] as const) {
        if (!c[probe] && probe === 'startupProbe') continue;
        t.equal(c[probe]?.httpGet?.path, path, `${w.metadata.name}: ${probe} on ${path}`);
        t.equal(portOf(c[probe].httpGet.port), port, `${w.metadata.name}: ${probe} on port ${port}`);
      }
      const ann = w.spec.template.metadata.annotations ?? {};
      t.equal(Number(ann['prometheus.io/port']), port, `${w.metadata.name}: metrics scraped from its port`);
      if (proc !== 'worker') {
        const served = routesOf(proc as Service).filter((r) => r.method === 'GET').map((r) => r.path);
        for (const p of ['/healthz', '/readyz', '/metrics']) t.ok(served.includes(p), `${proc} serves GET ${p} (lib/contract/routes.ts)`);
      }
    }
  }

  // The worker's endpoints are its own small server (workers/health.ts): ask it.
  const readiness = new Readiness();
  const server = serveHealth('127.0.0.1', 0, readiness, createMetrics('worker'), createLogger('worker', 'silent'));
  await new Promise((r) => server.once('listening', r));
  t.teardown(() => void server.close());
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  t.equal((await fetch(`${base}/healthz`)).status, 200, 'worker /healthz answers 200');
  t.equal((await fetch(`${base}/readyz`)).status, 200, 'worker /readyz answers 200 when ready');
  readiness.set('postgres', 'unreachable');
  t.equal((await fetch(`${base}/readyz`)).status, 503, 'worker /readyz answers 503 when not');
  t.equal((await fetch(`${base}/healthz`)).status, 200, 'while /healthz stays 200 (no restart for an outage)');
  t.match(await (await fetch(`${base}/metrics`)).text(), /fleet_process_cpu/, 'worker /metrics');
});

/** Kubernetes Ingress path matching: Exact, then the longest Prefix (element-wise). */
function ingressBackend(ingresses: Obj[], host: string, path: string): string | null {
  let best: { len: number; exact: boolean; svc: string } | null = null;
  for (const ing of ingresses) {
    for (const rule of ing.spec.rules) {
      if (rule.host !== host) continue;
      for (const p of rule.http.paths) {
        const pp = String(p.path);
        const exact = p.pathType === 'Exact';
        const trimmed = pp.replace(/\/+$/, '');
        const hit = exact ? path === pp : pp === '/' || path === trimmed || path.startsWith(`${trimmed}/`);
        if (!hit) continue;
        const cand = { len: pp.length, exact, svc: p.backend.service.name };
        if (!best || (cand.exact && !best.exact) || (cand.exact === best.exact && cand.len > best.len)) best = cand;
      }
    }
  }
  return best?.svc ?? null;
}

const samplePath = (p: string) => p.replace(/\{[^}]+\}/g, 'x1');
const OPS = ['/healthz', '/readyz', '/metrics'];

t.test('the Ingress routes every public route to its process, TLS, and hides the operations endpoints', async (t) => {
  const ingresses = ofKind('Ingress');
  t.ok(ingresses.length >= 1);
  const hosts = new Set(ingresses.flatMap((i) => i.spec.rules.map((r: Obj) => r.host)));
  t.equal(hosts.size, 1, 'one origin: the dashboard, its API and the session cookie');
  const host = [...hosts][0] as string;
  for (const i of ingresses) {
    t.ok(i.spec.tls?.some((x: Obj) => x.hosts.includes(host) && x.secretName), `${i.metadata.name}: TLS for ${host}`);
    for (const r of i.spec.rules)
      for (const p of r.http.paths) {
        const svc = named('Service', p.backend.service.name);
        t.ok(svc, `${i.metadata.name}: Service ${p.backend.service.name} exists`);
        t.ok(svc?.spec.ports.some((sp: Obj) => sp.name === p.backend.service.port.name), `${i.metadata.name}: port ${p.backend.service.port.name} exists`);
      }
  }
  for (const service of ['gateway', 'api'] as const) {
    for (const r of routesOf(service)) {
      if (OPS.includes(r.path)) continue;
      t.equal(ingressBackend(ingresses, host, samplePath(r.path)), service, `${r.method} ${r.path} reaches the ${service}`);
    }
  }
  for (const p of OPS) t.equal(ingressBackend(ingresses, host, p), null, `${p} is not reachable from outside`);
  const stream = ingresses.find((i) => i.spec.rules.some((r: Obj) => r.http.paths.some((p: Obj) => p.path === '/api/fleet/stream')));
  t.equal(stream?.metadata.annotations['nginx.ingress.kubernetes.io/proxy-buffering'], 'off', 'the live stream is not buffered');
  t.equal(configMap.data.PUBLIC_API_URL, `https://${host}`, 'the OpenAPI servers name the public origin');
  t.equal(configMap.data.PUBLIC_GATEWAY_URL, `https://${host}`);
  t.equal(configMap.data.COOKIE_SECURE, 'true', 'Secure cookies behind TLS');
  t.equal(configMap.data.TRUST_PROXY, '1', 'one proxy hop: the ingress controller');
});

t.test('autoscaling: the gateway on CPU, the workers on the backlog prometheus-adapter serves', async (t) => {
  const gw = named('HorizontalPodAutoscaler', 'gateway')!;
  t.equal(gw.spec.metrics[0].type, 'Resource');
  t.equal(gw.spec.metrics[0].resource.name, 'cpu');
  const wk = named('HorizontalPodAutoscaler', 'worker')!;
  t.equal(wk.spec.metrics[0].type, 'External');
  const metric = wk.spec.metrics[0].external.metric.name;
  const [adapter] = loadYaml(join(VALUES, 'prometheus-adapter.yaml'));
  const rule = adapter!.rules.external.find((r: Obj) => r.name.as === metric);
  t.ok(rule, `prometheus-adapter serves ${metric}`);
  const series = /^([a-z_]+)\{/.exec(rule.seriesQuery)![1]!;
  const def = (METRICS as Record<string, { type: string; services: readonly string[] }>)[series];
  t.ok(def?.services.includes('worker') && def.type === 'gauge', `the workers export the gauge ${series} (lib/infra/metrics.ts)`);
  t.match(readFileSync(join(ROOT, 'dist', 'workers', 'ingest-consumer.js'), 'utf8'), `'${series}'`, `and set it (workers/ingest-consumer.ts)`);
  t.match(rule.metricsQuery, /^sum\(max\(<<\.Series>>\{<<\.LabelMatchers>>\}\) by \(namespace, lane, partition\)\) by \(namespace\)$/, 'every worker reports the same consumers: the largest per lane and partition, all added');
});

t.test('NATS chart values: JetStream on 3 servers, fsync before acknowledging, 8 MB payloads', async (t) => {
  const [v] = loadYaml(join(VALUES, 'nats.yaml'));
  t.equal(v!.config.cluster.enabled, true);
  t.equal(v!.config.cluster.replicas, 3);
  t.equal(v!.config.jetstream.enabled, true);
  t.equal(v!.config.jetstream.fileStore.enabled, true);
  t.equal(v!.config.jetstream.merge.sync_interval, 'always');
  t.match(v!.config.merge.max_payload, /<<\s*8MB\s*>>/);
  t.equal(Number(configMap.data.STREAM_REPLICAS), v!.config.cluster.replicas, 'streams replicated on every server');
  t.ok(natsAtLeast(String(v!.container.image.tag), [2, 10, 23]), `nats-server ${v!.container.image.tag}: 2.10.23 or later`);
  t.equal(configMap.data.NATS_URL, 'nats://nats:4222', 'the release name the values describe');
  const docs = loadYaml(join(VALUES, 'clickhouse-installation.yaml'));
  const chi = docs.find((d) => d.kind === 'ClickHouseInstallation')!;
  t.equal(configMap.data.CLICKHOUSE_URL, `http://clickhouse-${chi.metadata.name}:8123`, "the operator's Service for the installation");
  const cluster = chi.spec.configuration.clusters[0];
  t.equal(cluster.layout.replicasCount, 2, 'two replicas');
  t.equal(configMap.data.CLICKHOUSE_CLUSTER, cluster.name, 'the services create Replicated* tables on that cluster');
  const user = String(configMap.data.CLICKHOUSE_USER);
  const profile = chi.spec.configuration.users[`${user}/profile`];
  t.equal(chi.spec.configuration.profiles[`${profile}/insert_distributed_sync`], 1, "the services' user inserts synchronously into the Distributed tables");
  t.ok(chi.spec.configuration.zookeeper.nodes.length > 0, 'coordinated by Keeper');
  t.equal(chi.spec.configuration.settings?.max_partition_size_to_drop, 0, 'the retention job may drop a month of any size (docs/operations.md "Data retention")');
});

function bytes(q: string): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|K|M|G)?$/.exec(q)!;
  const mult: Record<string, number> = { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, K: 1e3, M: 1e6, G: 1e9 };
  return Number(m[1]) * (m[2] ? mult[m[2]]! : 1);
}

function cpu(q: string | number): number {
  const s = String(q);
  return s.endsWith('m') ? Number(s.slice(0, -1)) / 1000 : Number(s);
}

/** A nats image tag (`2.12-alpine`, `2.10.24`) names at least `min`; a tag without a patch level floats to the newest. */
function natsAtLeast(tag: string, min: [number, number, number]): boolean {
  const v = (/^(\d+)\.(\d+)(?:\.(\d+))?/.exec(tag) ?? []).slice(1).map((x) => (x === undefined ? Infinity : Number(x)));
  if (v.length < 3 || v.some((x) => Number.isNaN(x))) return false;
  for (let i = 0; i < 3; i++) if (v[i] !== min[i]) return v[i]! > min[i];
  return true;
}
