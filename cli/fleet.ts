// `fleet`: the operator's command line (commander for parsing: subcommands, help and errors for free).
// Reads the same environment as the services (lib/infra/config.ts): DATABASE_URL, CLICKHOUSE_URL, ...
import { Command } from 'commander';
import { configOrExit, type Config } from '../lib/infra/config.js';
import { migrate } from '../lib/store/migrate.js';
import { createPool } from '../lib/infra/postgres.js';
import { createCustomer, createToken, findCustomer, listTokens, parseExpiry, revokeToken, type Scope } from '../lib/store/customers.js';
import { createUser, setMembership, MembershipError, findUserByLogin, newPassword, ROLES, type Role } from '../lib/store/accounts.js';
import { withTx } from '../lib/infra/postgres.js';
import { getLicence, deviceCount, licenceView, setLicence, TIERS, type LicenceChange, type Tier } from '../lib/store/licences.js';
import { QUOTAS, QuotaError, countQuotaUse, describeQuota, loadArtifactStored, loadOverrides, loadQuotas, parseBytes, quotaDefaults, quotaView, setOverrides, type QuotaName, type QuotaOverrides } from '../lib/store/quotas.js';
import { ArtifactUsage } from '../lib/store/artifact-usage.js';
import { createRedis } from '../lib/infra/redis.js';
import { upload, UploadError } from './upload.js';
import { ingestBatch, IngestBatchError } from './ingest-batch.js';
import { CliError, filterOf, formatList, formatReplay, formatShow, intOption, withDeadLetters, type FilterOptions } from './dead-letters.js';
import { LIMITS } from '../lib/store/dead-letters.js';
import { passwordProblem } from '../lib/domain/passwords.js';
import { revokeUserSessions } from '../lib/store/sessions.js';
import { clearInstanceState, instanceIdBySlugs, machineIdBySlug, retireInstance, retireMachine, type Retirement } from '../lib/store/decommission.js';
import { backup, restore, BackupError, ingestRoleStream } from '../lib/store/backup.js';
import { customerBySlug, markCustomerDeleting } from '../lib/store/offboarding.js';
import { createWindow, deleteWindow, listWindows, windowView, type WindowScopeInput } from '../lib/store/maintenance.js';
import { WEEKDAYS, canonicalTimeZone, windowTimesProblem, type Weekday, type WindowTimes } from '../lib/domain/maintenance.js';
import { createTimeoutRule, deleteTimeoutRule, listTimeoutRules, updateTimeoutRule, type TimeoutRuleRow, type TimeoutRulePatch } from '../lib/store/timeout-rules.js';
import { lightDefaults } from '../lib/store/instances.js';
import { TIMEOUT_RULE_MAX_S } from '../lib/contract/schemas/timeout-rules.js';
import { connectNats, existingIngestStreams, placeStreamLeaders } from '../lib/infra/nats.js';
import { partitionOfStream } from '../lib/contract/messages.js';

// Read when a command runs, not before: `fleet --help` works whatever the environment holds.
let loaded: Config | undefined;
const config = (): Config => (loaded ??= configOrExit('fleet'));
const program = new Command('fleet').description('Fleet ingest service administration').showHelpAfterError();

function fail(msg: string): never {
  process.stderr.write(`fleet: ${msg}\n`);
  process.exit(1);
}

async function withPool<T>(fn: (pool: ReturnType<typeof createPool>) => Promise<T>): Promise<T> {
  const pool = createPool(config().databaseUrl, 2, 'fleet-cli');
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

program
  .command('migrate')
  .description('apply the Postgres and ClickHouse schema (lib/store/schema.ts)')
  .action(async () => {
    const applied = await migrate(config(), (m) => process.stdout.write(`${m}\n`));
    if (applied.length === 0) process.stdout.write('schema up to date\n');
  });

const customer = program.command('customer').description('customers');
customer
  .command('create <slug>')
  .option('--name <name>', 'display name')
  .description('create a customer')
  .action(async (slug: string, o: { name?: string }) => {
    const c = await withPool((p) => createCustomer(p, slug, o.name)).catch((e) => fail((e as Error).message));
    process.stdout.write(`${c.id}\t${c.slug}\n`);
  });

customer
  .command('delete <slug>')
  .option('--yes', 'really delete: without it nothing is changed')
  .option('--no-wait', 'only mark it; do not wait for the workers to remove its data')
  .option('--timeout <s>', 'how long to wait for the workers (seconds)', '900')
  .description(
    'delete a customer and all its data in every store (docs/operations.md "Offboarding a customer"): marked at once, removed by the workers\' offboarding job OFFBOARD_GRACE_S later; waits until it is gone',
  )
  .action(async (slug: string, o: { yes?: boolean; wait: boolean; timeout: string }) => {
    const timeoutS = Number(o.timeout);
    if (!/^\d+$/.test(o.timeout) || timeoutS < 1 || timeoutS > 86_400) fail('--timeout must be a whole number of seconds from 1 to 86400');
    const state = await withPool(async (pool) => {
      const c = await customerBySlug(pool, slug);
      if (!c) fail(`no customer ${slug}`);
      if (!o.yes) {
        fail(`this deletes customer ${slug} (${c.id}) and all its data for good: its tokens stop working, its members lose it, its reports, history, artifacts and dead letters are removed; run again with --yes`);
      }
      const marked = await markCustomerDeleting(pool, c.id);
      if (!marked) return 'deleted';
      process.stderr.write(`customer ${slug} marked for deletion at ${marked.deleting_at.toISOString()}: its tokens are revoked (every gateway refuses them within CACHE_REFRESH_MS), its members removed\n`);
      if (!o.wait) return 'deleting';
      process.stderr.write(`the workers' offboarding job removes its data from ${config().offboarding.graceS} s after the mark (OFFBOARD_GRACE_S); waiting\n`);
      const until = Date.now() + timeoutS * 1000;
      while (Date.now() < until) {
        if (!(await customerBySlug(pool, slug))) return 'deleted';
        await new Promise((r) => setTimeout(r, 1000));
      }
      return 'deleting';
    }).catch((e) => fail((e as Error).message));
    process.stdout.write(`${slug}\t${state}\n`);
    if (state === 'deleting' && o.wait) fail(`${slug} is still being deleted after ${timeoutS} s: the workers' log ("offboarding: …") says what it waits for; the job keeps trying, and running this again waits again`);
  });

const token = program.command('token').description('API tokens');
token
  .command('create <customer>')
  .option('--name <name>', 'a name to recognise the token by', '')
  .option('--scopes <scopes>', 'comma-separated: ingest, read (an agent needs ingest only)', 'ingest')
  .option('--machine <slug-or-pattern>', 'bind the token to one machine, or a pattern with * and ? (e.g. rack1-*); ingest scope only')
  .option('--expires <when>', 'refuse the token from then on: an ISO 8601 time, or a duration from now (30m, 12h, 90d, 2w, 1y); default never')
  .description('create a token; it is printed once and stored only as a hash')
  .action(async (slug: string, o: { name: string; scopes: string; machine?: string; expires?: string }) => {
    const t = await withPool(async (p) => {
      const c = await findCustomer(p, slug);
      if (!c) fail(`no customer ${slug}`);
      const expiresAt = o.expires === undefined ? null : parseExpiry(o.expires);
      return createToken(p, c.id, o.name, o.scopes.split(',').map((s) => s.trim()) as Scope[], { machine: o.machine ?? null, expiresAt });
    }).catch((e) => fail((e as Error).message));
    process.stderr.write(`token ${t.id} created; it is shown only now:\n`);
    process.stdout.write(`${t.token}\n`);
  });
token
  .command('list [customer]')
  .description('list tokens (never their values)')
  .action(async (slug?: string) => {
    const rows = await withPool((p) => listTokens(p, slug));
    const now = Date.now();
    for (const r of rows) {
      const state = r.revoked_at ? `revoked ${r.revoked_at.toISOString()}` : r.expires_at && r.expires_at.getTime() <= now ? `expired ${r.expires_at.toISOString()}` : 'active';
      process.stdout.write(
        [
          r.id,
          r.customer,
          r.prefix + '…',
          r.scopes.join(','),
          r.name || '-',
          r.created_at.toISOString(),
          state,
          r.machine ? `machine ${r.machine}` : 'any machine',
          r.expires_at ? `expires ${r.expires_at.toISOString()}` : 'no expiry',
          r.last_used_at ? `used ${r.last_used_at.toISOString()}` : 'never used',
        ].join('\t') + '\n',
      );
    }
  });
token
  .command('revoke <id>')
  .description('revoke a token: every gateway refuses it within CACHE_REFRESH_MS')
  .action(async (id: string) => {
    if (!/^[0-9a-f-]{36}$/.test(id)) fail('token id must be a UUID (see fleet token list)');
    const ok = await withPool((p) => revokeToken(p, id));
    if (!ok) fail(`no active token ${id}`);
    process.stdout.write(`revoked ${id}\n`);
  });

const user = program.command('user').description('dashboard users');
user
  .command('create')
  .requiredOption('--email <email>', 'e-mail address (the login; unique, case-insensitive)')
  .option('--username <name>', 'optional user name, also accepted at login')
  .option('--password <password>', 'held to the password rules (docs/operations.md); generated and printed once when omitted')
  .option('--system-admin', 'may act in every customer')
  .description('create a dashboard user (the first system administrator; everyone else joins by invitation)')
  .action(async (o: { email: string; username?: string; password?: string; systemAdmin?: boolean }) => {
    const problem = o.password === undefined ? null : passwordProblem(o.password, { minLength: config().api.passwordMinLength, email: o.email });
    if (problem) fail(problem);
    const password = o.password ?? newPassword();
    const u = await withPool((p) => createUser(p, { email: o.email, username: o.username, password, isSystemAdmin: !!o.systemAdmin })).catch((e) =>
      fail((e as Error).message),
    );
    process.stdout.write(`${u.id}\t${u.email}\n`);
    if (!o.password) process.stderr.write(`password (shown only now): ${password}\n`);
  });
user
  .command('add-to-customer <login> <customer>')
  .option('--role <role>', `one of ${ROLES.join(', ')}`, 'viewer')
  .description('give a user a role in a customer (or change it)')
  .action(async (login: string, slug: string, o: { role: string }) => {
    if (!ROLES.includes(o.role as Role)) fail(`unknown role ${o.role}: use ${ROLES.join(', ')}`);
    await withPool(async (p) => {
      const u = await findUserByLogin(p, login);
      if (!u) fail(`no user ${login}`);
      const c = await findCustomer(p, slug);
      if (!c) fail(`no customer ${slug}`);
      try {
        await setMembership(p, u.id, c.id, o.role as Role);
      } catch (e) {
        if (e instanceof MembershipError) fail(e.message);
        throw e;
      }
    });
    process.stdout.write(`${login} is ${o.role} of ${slug}\n`);
  });

user
  .command('sign-out <login>')
  .description('end every session of a user at once (every api replica; their live streams within SESSION_STREAM_RECHECK_MS)')
  .action(async (login: string) => {
    const n = await withPool(async (p) => {
      const u = await findUserByLogin(p, login);
      if (!u) fail(`no user ${login}`);
      return revokeUserSessions(p, u.id, 'signed_out_by_admin');
    });
    process.stdout.write(`${login}: ${n} session(s) ended\n`);
  });

const licence = program.command('licence').alias('license').description('licences: device limit, tier, grace period');
licence
  .command('show <customer>')
  .description("a customer's licence, device count, limit status and grace period (JSON)")
  .action(async (slug: string) => {
    const out = await withPool(async (p) => {
      const c = await findCustomer(p, slug);
      if (!c) fail(`no customer ${slug}`);
      const l = (await getLicence(p, c.id))!;
      return { license_key: l.licence_key, ...licenceView(l, await deviceCount(p, c.id)) };
    });
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  });
licence
  .command('set <customer>')
  .option('--limit <n>', 'device limit (machines seen in the last 30 days)')
  .option('--tier <tier>', `one of ${TIERS.join(', ')}`)
  .option('--grace-days <n>', 'days new machines are still accepted after the limit is first exceeded')
  .description('change a licence; every gateway applies it within CACHE_REFRESH_MS')
  .action(async (slug: string, o: { limit?: string; tier?: string; graceDays?: string }) => {
    const change: LicenceChange = {};
    const int = (v: string, what: string) => {
      if (!/^[0-9]+$/.test(v)) fail(`${what} must be a whole number >= 0`);
      return Number(v);
    };
    if (o.limit !== undefined) change.device_limit = int(o.limit, '--limit');
    if (o.graceDays !== undefined) change.grace_days = int(o.graceDays, '--grace-days');
    if (o.tier !== undefined) {
      if (!TIERS.includes(o.tier as Tier)) fail(`unknown tier ${o.tier}: use ${TIERS.join(', ')}`);
      change.tier = o.tier as Tier;
    }
    if (Object.keys(change).length === 0) fail('nothing to change: give --limit, --tier and/or --grace-days');
    const out = await withPool(async (p) => {
      const c = await findCustomer(p, slug);
      if (!c) fail(`no customer ${slug}`);
      const l = await withTx(p, (tx) => setLicence(tx, c.id, change));
      return { license_key: l.licence_key, ...licenceView(l, await deviceCount(p, c.id)) };
    }).catch((e) => fail((e as Error).message));
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  });

const quota = program.command('quota').description('quotas per customer: artifact bytes, artifact size, live streams, webhooks, whitelist rules, ingest rates');
/** `--artifact-bytes` for artifact_bytes: one option per quota. */
const optionOf = (name: string) => `--${name.replace(/_/g, '-')}`;
const camel = (name: string) => name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());

/** A customer's quotas (value, default, source, unit) and what is used of them, as JSON. */
async function quotaReport(slug: string) {
  const cfg = config();
  return withPool(async (p) => {
    const c = await findCustomer(p, slug);
    if (!c) fail(`no customer ${slug}`);
    const [overrides, stored, counts] = await Promise.all([
      loadOverrides(p, c.id),
      loadArtifactStored(p, c.id),
      countQuotaUse(p, c.id),
    ]);
    // Uploads in progress are reserved in Redis (lib/store/artifact-usage.ts).
    const redis = createRedis(cfg.redisUrl, { lazyConnect: true });
    redis.on('error', () => {});
    const reserved = await new ArtifactUsage(redis, cfg.redisPrefix).reserved(c.id, stored.seq).catch(() => null);
    redis.disconnect();
    return {
      customer: c.slug,
      quotas: quotaView(quotaDefaults(cfg), overrides),
      used: {
        artifact_bytes: reserved ? stored.bytes + reserved.bytes : null,
        artifact_bytes_stored: stored.bytes,
        artifact_bytes_reserved: reserved?.bytes ?? null,
        artifacts: stored.artifacts,
        uploads_in_progress: reserved?.uploads ?? null,
        webhooks: counts.webhooks,
        whitelist_rules: counts.rules,
        timeout_rules: counts.timeoutRules,
        maintenance_windows: counts.maintenance_windows,
      },
    };
  });
}

quota
  .command('show <customer>')
  .description("a customer's quotas (each value, its default, whether it is overridden) and what is used (JSON)")
  .action(async (slug: string) => {
    process.stdout.write(JSON.stringify(await quotaReport(slug), null, 2) + '\n');
  });
const setQuota = quota
  .command('set <customer>')
  .description('override quotas of a customer (`default` puts one back to the environment\'s value); every gateway applies it within CACHE_REFRESH_MS, the api at once');
for (const q of QUOTAS) {
  const what = q.unit === 'bytes' || q.unit === 'bytes_per_s' ? 'bytes (10GiB, 500MB, 1048576)' : 'a whole number';
  setQuota.option(`${optionOf(q.name)} <value>`, `${q.description}: ${what}, or default (${q.env})`);
}
setQuota.action(async (slug: string, o: Record<string, string | undefined>) => {
  const change: QuotaOverrides = {};
  for (const q of QUOTAS) {
    const v = o[camel(q.name)];
    if (v === undefined) continue;
    if (v === 'default') {
      change[q.name as QuotaName] = null;
      continue;
    }
    const n = q.unit === 'bytes' || q.unit === 'bytes_per_s' ? parseBytes(v) : /^[0-9]+$/.test(v) ? Number(v) : null;
    if (n === null) fail(`${optionOf(q.name)} ${JSON.stringify(v)}: must be ${q.unit === 'bytes' || q.unit === 'bytes_per_s' ? 'a size such as 10GiB, 500MB or 1048576' : 'a whole number'}, or default`);
    change[q.name as QuotaName] = n;
  }
  if (Object.keys(change).length === 0) fail(`nothing to change: give one or more of ${QUOTAS.map((q) => optionOf(q.name)).join(', ')}`);
  await withPool(async (p) => {
    const c = await findCustomer(p, slug);
    if (!c) fail(`no customer ${slug}`);
    await setOverrides(p, c.id, change);
  }).catch((e) => fail(e instanceof QuotaError ? e.message : (e as Error).message));
  process.stdout.write(JSON.stringify(await quotaReport(slug), null, 2) + '\n');
});

program
  .command('upload <file>')
  .description('upload a file as an artifact (chunked; an interrupted upload resumes where it stopped)')
  .requiredOption('--customer <slug>', 'customer slug')
  .requiredOption('--machine <slug>', 'machine slug')
  .requiredOption('--software <slug>', 'software slug')
  .option('--token <token>', 'API token with the ingest scope (default: $FLEET_TOKEN)')
  .option('--url <url>', 'gateway URL (default: $FLEET_URL, else http://GATEWAY_HOST:GATEWAY_PORT)')
  .option('--content-type <type>', 'stored with the artifact and sent on download', undefined)
  .option('--parallel <n>', 'chunks in flight at once', '4')
  .option('--max-chunks <n>', 'send at most n chunks in this run, then stop (run again to resume)')
  .option('--no-progress', 'no progress bar')
  .action(async (file: string, o: { customer: string; machine: string; software: string; token?: string; url?: string; contentType?: string; parallel: string; maxChunks?: string; progress: boolean }) => {
    const token = o.token ?? process.env.FLEET_TOKEN;
    if (!token) fail('no token: pass --token or set FLEET_TOKEN');
    const url = o.url ?? process.env.FLEET_URL ?? `http://${config().gateway.host}:${config().gateway.port}`;
    const parallel = Number(o.parallel);
    if (!Number.isInteger(parallel) || parallel < 1 || parallel > 64) fail('--parallel must be an integer from 1 to 64');
    const maxChunks = o.maxChunks === undefined ? undefined : Number(o.maxChunks);
    if (maxChunks !== undefined && (!Number.isInteger(maxChunks) || maxChunks < 0)) fail('--max-chunks must be an integer from 0');
    try {
      const r = await upload({
        url,
        token: token!,
        customer: o.customer,
        machine: o.machine,
        software: o.software,
        file,
        contentType: o.contentType,
        parallel,
        maxChunks,
        progress: o.progress && process.stderr.isTTY === true,
        log: (line) => process.stderr.write(`${line}\n`),
      });
      if (r.done) {
        process.stderr.write(`uploaded ${file}: upload ${r.uploadId}, ${r.sent} chunks sent${r.resumed ? ' (resumed)' : ''}\n`);
        process.stdout.write(`${r.artifactId}\n`);
        process.exit(0);
      }
      process.stderr.write(`stopped with ${r.missing} chunks still to send (upload ${r.uploadId}); run the same command again to resume\n`);
      process.exit(3);
    } catch (e) {
      fail(e instanceof UploadError ? e.message : `upload failed: ${(e as Error).message}`);
    }
  });

program
  .command('ingest-batch')
  .description('send reports from a file through the batch endpoint; prints one JSON line per entry with its result')
  .requiredOption('--customer <slug>', 'customer slug')
  .requiredOption('--file <file>', 'JSON ({"entries": [...]} or an array of entries) or NDJSON (one entry per line)')
  .option('--token <token>', 'API token with the ingest scope (default: $FLEET_TOKEN)')
  .option('--url <url>', 'gateway URL (default: $FLEET_URL, else http://GATEWAY_HOST:GATEWAY_PORT)')
  .option('--batch-size <n>', 'entries per request (default: MAX_ITEMS)')
  .option('--max-bytes <n>', 'bytes per request (default: BATCH_BODY_LIMIT_BYTES)')
  .option('--retries <n>', 'times entries answered 429 or 503 are sent again', '5')
  .action(async (o: { customer: string; file: string; token?: string; url?: string; batchSize?: string; maxBytes?: string; retries: string }) => {
    const token = o.token ?? process.env.FLEET_TOKEN;
    if (!token) fail('no token: pass --token or set FLEET_TOKEN');
    const int = (v: string | undefined, dflt: () => number, what: string, min: number) => {
      if (v === undefined) return dflt();
      if (!/^[0-9]+$/.test(v) || Number(v) < min) fail(`${what} must be a whole number of at least ${min}`);
      return Number(v);
    };
    const batchSize = int(o.batchSize, () => config().gateway.maxItems, '--batch-size', 1);
    const maxBytes = int(o.maxBytes, () => config().gateway.batchBodyLimit, '--max-bytes', 64);
    const retries = int(o.retries, () => 5, '--retries', 0);
    const url = o.url ?? process.env.FLEET_URL ?? `http://${config().gateway.host}:${config().gateway.port}`;
    try {
      const r = await ingestBatch({ url, token: token!, customer: o.customer, file: o.file, batchSize, maxBytes, retries, log: (line) => process.stderr.write(`${line}\n`) });
      for (const x of r.outcomes) process.stdout.write(`${JSON.stringify(x)}\n`);
      process.stderr.write(`${r.outcomes.length} entries: ${r.accepted} accepted, ${r.refused} refused\n`);
      // 4: some entries were refused (their lines say why); 0: every entry accepted.
      process.exit(r.refused > 0 ? 4 : 0);
    } catch (e) {
      fail(e instanceof IngestBatchError ? e.message : `ingest-batch failed: ${(e as Error).message}`);
    }
  });

// Decommissioning (docs/operations.md, "Decommissioning"): the api's retire, by slugs. Sends no
// command hint (no NATS here): gateways drop cancelled commands at their next full re-read.
async function retire(slug: string, what: string, find: (p: ReturnType<typeof createPool>, customerId: string) => Promise<string | null>, run: typeof retireMachine) {
  const cfg = config();
  const r: Retirement = await withPool(async (p) => {
    const c = await findCustomer(p, slug);
    if (!c) fail(`no customer ${slug}`);
    const id = await find(p, c.id);
    if (!id) fail(`no ${what} of ${slug}`);
    return run(p, c.id, id, null);
  }).catch((e) => fail((e as Error).message));
  const redis = createRedis(cfg.redisUrl, { lazyConnect: true });
  redis.on('error', () => {});
  try {
    await clearInstanceState(redis, cfg.redisPrefix, r.instances.map((i) => i.id));
  } catch (e) {
    fail(`retired in Postgres, but its Redis state was not cleared (${(e as Error).message}); run the command again`);
  } finally {
    redis.disconnect();
  }
  const { hints: _hints, ...out } = r;
  process.stdout.write(JSON.stringify({ ...out, retired_at: r.retired_at.toISOString() }, null, 2) + '\n');
}

const machineCmd = program.command('machine').description('machines: retire (decommission)');
machineCmd
  .command('retire <customer> <machine>')
  .description('retire a machine and all its instances: they leave the fleet, the counts and the licence; their history stays (repeatable)')
  .action((slug: string, machine: string) => retire(slug, `machine ${machine}`, (p, id) => machineIdBySlug(p, id, machine), retireMachine));

const instanceCmd = program.command('instance').description('instances: retire (decommission)');
instanceCmd
  .command('retire <customer> <machine> <software>')
  .description('retire one instance (software on a machine): it leaves the fleet and the counts; its machine stays (repeatable)')
  .action((slug: string, machine: string, software: string) =>
    retire(slug, `instance ${machine}/${software}`, (p, id) => instanceIdBySlugs(p, id, machine, software), retireInstance),
  );

// Maintenance windows (docs/operations.md "Maintenance windows"): what the api's routes do, by
// slugs, with the same checks and the same JSON.
/** `90` (minutes), `90m`, `2h`, `1h30m`, `1d` -> minutes; null when it is none of these. */
function parseMinutes(text: string): number | null {
  if (/^[0-9]+$/.test(text)) return Number(text);
  const m = /^(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?$/.exec(text);
  if (!m || text === '') return null;
  return Number(m[1] ?? 0) * 1440 + Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0);
}
const isoOption = (name: string, v: string | undefined): Date | null => {
  if (v === undefined) return null;
  const d = new Date(v);
  if (!/^\d{4}-\d{2}-\d{2}T/.test(v) || Number.isNaN(d.getTime())) fail(`${name} ${JSON.stringify(v)}: an ISO 8601 time with its zone, such as 2026-12-24T22:00:00Z or 2026-12-24T23:00:00+01:00`);
  return d;
};
interface MaintenanceAddOptions {
  machine?: string;
  instance?: string;
  software?: string;
  start?: string;
  end?: string;
  days?: string;
  at?: string;
  duration?: string;
  tz?: string;
  from?: string;
  until?: string;
  description: string;
}
function maintenanceTimes(o: MaintenanceAddOptions): WindowTimes {
  const once = o.start !== undefined || o.end !== undefined;
  const rec = o.days !== undefined || o.at !== undefined || o.duration !== undefined || o.tz !== undefined || o.from !== undefined || o.until !== undefined;
  if (once === rec) fail('a window is one-off (--start and --end) or recurring (--days, --at, --duration, --tz; --from, --until optional)');
  let t: WindowTimes;
  if (once) {
    if (!o.start || !o.end) fail('a one-off window needs --start and --end');
    t = { kind: 'once', startsAt: isoOption('--start', o.start)!, endsAt: isoOption('--end', o.end)! };
  } else {
    if (!o.days || !o.at || !o.duration || !o.tz) fail('a recurring window needs --days, --at, --duration and --tz');
    const zone = canonicalTimeZone(o.tz!) ?? fail(`--tz ${JSON.stringify(o.tz)}: unknown time zone (an IANA name such as Europe/Berlin)`);
    const days = o.days === 'daily' ? [...WEEKDAYS] : o.days!.split(',').map((d) => d.trim().toLowerCase().slice(0, 3));
    for (const d of days) if (!(WEEKDAYS as readonly string[]).includes(d)) fail(`--days ${JSON.stringify(o.days)}: daily, or weekdays such as mon,wed,fri`);
    if (!/^([01][0-9]|2[0-3]):[0-5][0-9]$/.test(o.at!)) fail(`--at ${JSON.stringify(o.at)}: a local time HH:MM`);
    const minutes = parseMinutes(o.duration!) ?? fail(`--duration ${JSON.stringify(o.duration)}: minutes, or 90m, 2h, 1h30m, 1d`);
    t = {
      kind: 'recurring',
      timeZone: zone,
      startTime: o.at!,
      durationMinutes: minutes,
      days: [...new Set(days as Weekday[])].sort((a, b) => WEEKDAYS.indexOf(a) - WEEKDAYS.indexOf(b)),
      validFrom: isoOption('--from', o.from),
      validUntil: isoOption('--until', o.until),
    };
  }
  const problem = windowTimesProblem(t);
  if (problem) fail(problem);
  if (t.kind === 'once' && t.endsAt <= new Date()) fail('--end is in the past: the window would never apply');
  if (t.kind === 'recurring' && t.validUntil && t.validUntil <= new Date()) fail('--until is in the past: the window would never apply');
  return t;
}
const maintenance = program.command('maintenance').description('maintenance windows: list, add (one-off or recurring), delete (docs/operations.md "Maintenance windows")');
maintenance
  .command('list <customer>')
  .description("a customer's maintenance windows, each with its occurrence in progress or its next one (JSON, as GET /api/maintenance-windows)")
  .action(async (slug: string) => {
    const out = await withPool(async (p) => {
      const c = (await findCustomer(p, slug)) ?? fail(`no customer ${slug}`);
      const { now, items } = await listWindows(p, c.id);
      return { items: items.map((w) => windowView(w, now)), now: now.toISOString() };
    }).catch((e) => fail((e as Error).message));
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  });
maintenance
  .command('add <customer>')
  .description('define a maintenance window for the whole customer, or one machine, instance or software pattern; prints it (JSON)')
  .option('--machine <machine>', 'only this machine (its slug)')
  .option('--instance <machine/software>', 'only this instance')
  .option('--software <pattern>', 'only instances whose software matches: * matches any run of characters (db-*)')
  .option('--start <time>', 'one-off: start, ISO 8601 with zone (2026-12-24T22:00:00Z)')
  .option('--end <time>', 'one-off: end, at most 31 days after the start')
  .option('--days <days>', 'recurring: daily, or local weekdays such as mon,wed,fri')
  .option('--at <HH:MM>', 'recurring: local start time')
  .option('--duration <time>', 'recurring: how long, elapsed (90m, 2h, 1h30m; daily at most 22h)')
  .option('--tz <zone>', 'recurring: IANA time zone (Europe/Berlin)')
  .option('--from <time>', 'recurring: no occurrence starts before this (ISO 8601)')
  .option('--until <time>', 'recurring: no occurrence starts at or after this (ISO 8601)')
  .option('--description <text>', 'what it is for', '')
  .action(async (slug: string, o: MaintenanceAddOptions) => {
    const scopes = [o.machine, o.instance, o.software].filter((x) => x !== undefined).length;
    if (scopes > 1) fail('one of --machine, --instance, --software (none: the whole customer)');
    if (o.software !== undefined && !/^[a-z0-9*-]{1,128}$/.test(o.software)) fail(`--software ${JSON.stringify(o.software)}: lower-case letters, digits, - and *`);
    if (o.description.length > 256) fail('--description: at most 256 characters');
    const times = maintenanceTimes(o);
    const out = await withPool(async (p) => {
      const c = (await findCustomer(p, slug)) ?? fail(`no customer ${slug}`);
      let scope: WindowScopeInput = { scope: 'customer' };
      if (o.machine !== undefined) scope = { scope: 'machine', machineId: (await machineIdBySlug(p, c.id, o.machine)) ?? fail(`no machine ${o.machine} of ${slug}`) };
      if (o.instance !== undefined) {
        const [m, sw] = o.instance.split('/');
        if (!m || !sw) fail('--instance: machine/software');
        scope = { scope: 'instance', instanceId: (await instanceIdBySlugs(p, c.id, m!, sw!)) ?? fail(`no instance ${o.instance} of ${slug}`) };
      }
      if (o.software !== undefined) scope = { scope: 'software', softwarePattern: o.software };
      const made = await createWindow(p, config(), c.id, { scope, times, description: o.description, createdBy: null });
      if ('missing' in made) fail(`no such ${made.missing}`);
      if ('full' in made) fail(`${slug} has ${made.full.count} maintenance windows, its quota (maintenance_windows = ${made.full.max}); delete one first, or raise it with fleet quota set ${slug} --maintenance-windows N`);
      return windowView(made.created, new Date());
    }).catch((e) => fail((e as Error).message));
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  });
maintenance
  .command('delete <customer> <id>')
  .description('remove a maintenance window and its occurrences (one in progress ends now)')
  .action(async (slug: string, id: string) => {
    if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id)) fail('the window id must be a UUID (see fleet maintenance list)');
    await withPool(async (p) => {
      const c = (await findCustomer(p, slug)) ?? fail(`no customer ${slug}`);
      if (!(await deleteWindow(p, c.id, id))) fail(`no maintenance window ${id} of ${slug}`);
    }).catch((e) => fail((e as Error).message));
    process.stderr.write(`maintenance window ${id} deleted\n`);
  });

// Dead letters (docs/operations.md, "Dead letters"): reports the workers could not store.
const deadLetters = program.command('dead-letters').description('reports the workers could not store: list, show, replay (docs/operations.md, "Dead letters")');
const withFilters = (c: Command) =>
  c
    .option('--customer <slug>', 'only this customer (_none: no customer known)')
    .option('--since <time>', 'dead-lettered since: ISO 8601 time, or a duration back from now (90s, 30m, 2h, 7d, 1w)')
    .option('--reason <text>', 'the reason, its kind or class contains this text (case-insensitive)')
    .option('--json', 'JSON, as the api answers');
/** Runs a dead-letter command: its errors as one line and exit code 1. */
const dlAction = (fn: () => Promise<void>) =>
  fn().catch((e) => fail(e instanceof CliError ? e.message : `dead-letters: ${(e as Error).message}`));
withFilters(deadLetters.command('list'))
  .description('dead letters, oldest first (tab-separated: seq, time, customer, kind, machine/software, class, report id, reason)')
  .option('--after <seq>', 'only those after this sequence number (the next page)')
  .option('--limit <n>', `at most this many (1-${LIMITS.listMax})`, String(LIMITS.listDefault))
  .action((o: FilterOptions & { after?: string; limit: string; json?: boolean }) =>
    dlAction(async () => {
      const f = filterOf(o);
      const afterSeq = intOption(o.after, '--after', 0, Number.MAX_SAFE_INTEGER);
      const limit = intOption(o.limit, '--limit', 1, LIMITS.listMax);
      const l = await withDeadLetters(config(), (d) => d.list({ ...f, afterSeq, limit }));
      if (o.json) return void process.stdout.write(`${JSON.stringify(l, null, 2)}\n`);
      const text = formatList(l);
      process.stdout.write(text.out);
      process.stderr.write(text.err);
    }),
  );
deadLetters
  .command('show <seq>')
  .description('one dead letter: its headers and its reports, bodies pretty-printed (each at most 64 KiB)')
  .option('--json', 'JSON, as the api answers')
  .action((seq: string, o: { json?: boolean }) =>
    dlAction(async () => {
      const n = intOption(seq, 'seq', 1, Number.MAX_SAFE_INTEGER)!;
      const d = await withDeadLetters(config(), (dl) => dl.show(n));
      if (!d) throw new CliError(`no dead letter ${n} (replayed already, expired, or never there)`);
      process.stdout.write(o.json ? `${JSON.stringify(d, null, 2)}\n` : formatShow(d));
    }),
  );
withFilters(deadLetters.command('replay [seq...]'))
  .description('republish dead letters to the ingest stream (stored once however often), then remove them; undecodable ones are skipped')
  .option('--all', 'every dead letter (needed when neither sequence numbers nor a filter is given)')
  .option('--after <seq>', 'with a filter or --all: only those after this sequence number')
  .option('--dry-run', 'say what would be done, change nothing')
  .option('--limit <n>', `at most this many (1-${LIMITS.replayMax})`, String(LIMITS.replayDefault))
  .action((seqs: string[], o: FilterOptions & { all?: boolean; after?: string; dryRun?: boolean; limit: string; json?: boolean }) =>
    dlAction(async () => {
      const f = filterOf(o);
      const picked = seqs.map((x) => intOption(x, 'seq', 1, Number.MAX_SAFE_INTEGER)!);
      const afterSeq = intOption(o.after, '--after', 0, Number.MAX_SAFE_INTEGER);
      const limit = intOption(o.limit, '--limit', 1, LIMITS.replayMax);
      if (picked.length === 0 && f.customer === undefined && f.since === undefined && f.reason === undefined && !o.all) {
        throw new CliError('say which dead letters: sequence numbers, --customer, --since, --reason, or --all');
      }
      const r = await withDeadLetters(config(), (d) => d.replay({ ...f, seqs: picked, all: o.all, afterSeq }, { dryRun: o.dryRun, limit }));
      if (o.json) process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
      else {
        const text = formatReplay(r);
        process.stdout.write(text.out);
        process.stderr.write(text.err);
      }
      // 4: some could not be republished (their lines say why); they stay in the dead-letter stream.
      if (r.summary.failed > 0) process.exit(4);
    }),
  );

// Backup and restore (docs/operations.md "Backup and restore"): Postgres, ClickHouse, the JetStream
// streams (ingest lanes, dead letters, artifact uploads and chunks), the newest heartbeats in Redis.
const say = (step: string, detail?: string) => void process.stderr.write(`${step}${detail ? `: ${detail}` : ''}\n`);
program
  .command('backup <dir>')
  .description('back up the running stack into <dir> (created; must hold no backup): a manifest with the cut-off, versions, counts and SHA-256 of every file')
  .action(async (dir: string) => {
    const m = await backup(config(), dir, { progress: say }).catch((e) => fail(e instanceof BackupError ? e.message : `backup: ${(e as Error).message}`));
    process.stdout.write(`backup ${m.backup_id} in ${dir}: cut-off ${m.cutoff.at}, ${Math.round(m.duration_ms / 100) / 10} s\n`);
  });
program
  .command('restore <dir>')
  .description('restore the backup in <dir> into the stack configured (gateways and workers stopped); a half-done restore is finished by running it again')
  .option('--force', 'replace what the target holds (by default only an empty target is restored into)')
  .action(async (dir: string, o: { force?: boolean }) => {
    const r = await restore(config(), dir, { force: o.force, progress: say }).catch((e) => fail(e instanceof BackupError ? e.message : `restore: ${(e as Error).message}`));
    const skipped = r.skipped.length ? `; done by an earlier run: ${r.skipped.join(', ')}` : '';
    process.stdout.write(`restored backup ${r.backupId}: ${r.done.length} steps${skipped}. Start the workers: they apply the ${Object.entries(r.messages).reduce((n, [role, k]) => n + (ingestRoleStream('', '', role) ? k : 0), 0)} queued messages\n`);
  });

// Ingest streams (docs/architecture.md "Partitions"): each partition's streams, their leaders and
// what they hold; `--place` puts each partition's leaders on a server of its own.
program
  .command('streams')
  .description('the ingest streams of every partition that exists: leader, replicas, messages; --place moves the leaders so that each partition is led by a server of its own')
  .option('--place', "ask misplaced leaders to step down until each partition's two streams share a leader and the partitions' leaders are on different servers")
  .action(async (o: { place?: boolean }) => {
    const cfg = config();
    const nc = await connectNats(cfg.natsUrl, 'fleet-cli');
    try {
      const jsm = await nc.jetstreamManager({ timeout: 10_000 });
      const names = await existingIngestStreams(jsm, cfg.streamName);
      if (names.length === 0) fail(`no ingest stream of ${cfg.streamName} on ${cfg.natsUrl}`);
      if (o.place) {
        // Group each partition's main stream with its heartbeat lane.
        const groups = new Map<string, string[]>();
        for (const n of names) {
          const main = partitionOfStream(cfg.streamName, cfg.subjectPrefix, n)!.streams.reports;
          groups.set(main, [...(groups.get(main) ?? []), n].sort());
        }
        await placeStreamLeaders(nc, jsm, [...groups.values()]);
      }
      process.stdout.write('stream\tleader\treplicas\tmessages\tbytes\n');
      for (const n of names) {
        const i = await jsm.streams.info(n);
        const replicas = [i.cluster?.leader, ...(i.cluster?.replicas ?? []).map((r) => `${r.name}${r.current ? '' : ' (behind)'}`)].filter(Boolean).join(',');
        process.stdout.write(`${n}\t${i.cluster?.leader ?? '-'}\t${replicas || '-'}\t${i.state.messages}\t${i.state.bytes}\n`);
      }
    } finally {
      await nc.close();
    }
  });

// Timeout rules (docs/operations.md "Per-instance timeouts", docs/api.md "Timeout rules"): the same
// rules, checks and quota as /api/timeout-rules, by customer slug; a change recomputes the deadlines
// of the instances it touches before the command answers.
const timeoutRule = program.command('timeout-rule').description('timeout rules: how long an instance may be silent before red, and its late share (docs/operations.md "Per-instance timeouts")');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const UNIT_S: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };
/** `--timeout`: whole seconds, or with a unit (90s, 5m, 2h, 1d); `none` (set only) clears it. */
function timeoutOption(v: string, clearable: boolean): number | null {
  if (clearable && v === 'none') return null;
  const m = /^(\d+)([smhd]?)$/.exec(v);
  const n = m ? Number(m[1]) * UNIT_S[m[2] || 's']! : NaN;
  const min = config().timeoutRuleMinS;
  if (!Number.isSafeInteger(n) || n < min || n > TIMEOUT_RULE_MAX_S) {
    fail(`--timeout ${JSON.stringify(v)}: seconds from ${min} (TIMEOUT_RULE_MIN_S) to ${TIMEOUT_RULE_MAX_S} (30 days), e.g. 90, 5m, 2h${clearable ? ', or none' : ''}`);
  }
  return n;
}
/** `--late`: per cent of the timeout, 0 (never late) to 99; `none` (set only) clears it. */
function lateOption(v: string, clearable: boolean): number | null {
  if (clearable && v === 'none') return null;
  if (!/^\d{1,2}$/.test(v)) fail(`--late ${JSON.stringify(v)}: a whole per cent from 0 (never late) to 99${clearable ? ', or none' : ''}`);
  return Number(v);
}
/** The rule as the api answers it (times as ISO 8601). */
const ruleJson = (r: TimeoutRuleRow) => ({ ...r, created_at: r.created_at.toISOString(), updated_at: r.updated_at.toISOString() });
async function customerIdOf(p: ReturnType<typeof createPool>, slug: string): Promise<string> {
  const c = await findCustomer(p, slug);
  if (!c) fail(`no customer ${slug}`);
  return c.id;
}

timeoutRule
  .command('list <customer>')
  .description("a customer's timeout rules (tab-separated: id, scope, target, timeout s, late %, description; - where a rule leaves the value to the next), then the defaults")
  .option('--json', 'JSON, as GET /api/timeout-rules answers')
  .action(async (slug: string, o: { json?: boolean }) => {
    const out = await withPool(async (p) => {
      const id = await customerIdOf(p, slug);
      const [items, defaults] = await Promise.all([listTimeoutRules(p, id), lightDefaults(p)]);
      return { items, defaults };
    });
    if (o.json) {
      process.stdout.write(JSON.stringify({ items: out.items.map(ruleJson), defaults: out.defaults, min_timeout_s: config().timeoutRuleMinS }, null, 2) + '\n');
      return;
    }
    for (const r of out.items) {
      const target = r.scope === 'customer' ? '*' : r.scope === 'software' ? r.software_pattern : `${r.machine ?? '?'}/${r.software ?? '?'} (${r.instance_id})`;
      process.stdout.write([r.id, r.scope, target, r.timeout_s ?? '-', r.late_percent ?? '-', r.description || '-'].join('\t') + '\n');
    }
    process.stderr.write(`${out.items.length} rule(s); without one: timeout ${out.defaults.timeout_s} s, late ${out.defaults.late_percent} % (HEARTBEAT_TIMEOUT_S, HEARTBEAT_LATE_PERCENT as the workers applied them)\n`);
  });

timeoutRule
  .command('add <customer>')
  .description('add a rule for the whole customer, a software pattern or one instance; its instances take it at once (prints the rule and how many instances changed, JSON)')
  .option('--customer-wide', 'for every instance of the customer')
  .option('--software <glob>', 'for instances whose software matches: * any run of characters, everything else itself (case-sensitive)')
  .option('--instance <id>', 'for one instance: its id, or machine/software')
  .option('--timeout <s>', 'seconds of silence before red (90, 5m, 2h, 1d)')
  .option('--late <percent>', 'per cent of the timeout after which a silent instance turns late (0: never)')
  .option('--description <text>', 'what the rule is for', '')
  .action(async (slug: string, o: { customerWide?: boolean; software?: string; instance?: string; timeout?: string; late?: string; description: string }) => {
    const targets = [o.customerWide, o.software, o.instance].filter((x) => x !== undefined).length;
    if (targets !== 1) fail('give exactly one of --customer-wide, --software <glob>, --instance <id>');
    if (o.software !== undefined && (o.software.length < 1 || o.software.length > 128)) fail('--software: a pattern of 1 to 128 characters');
    if (o.timeout === undefined && o.late === undefined) fail('a rule sets --timeout, --late or both');
    if (o.description.length > 500) fail('--description: at most 500 characters');
    const timeoutS = o.timeout === undefined ? null : timeoutOption(o.timeout, false);
    const latePercent = o.late === undefined ? null : lateOption(o.late, false);
    const out = await withPool(async (p) => {
      const id = await customerIdOf(p, slug);
      let instanceId: string | null = null;
      if (o.instance !== undefined) {
        const slash = o.instance.indexOf('/');
        instanceId = UUID.test(o.instance) ? o.instance.toLowerCase() : slash > 0 ? await instanceIdBySlugs(p, id, o.instance.slice(0, slash), o.instance.slice(slash + 1)) : null;
        if (!instanceId) fail(`no instance ${o.instance} of ${slug}: give its id or machine/software`);
      }
      const max = (await loadQuotas(p, config(), id)).timeout_rules;
      const scope = o.customerWide ? 'customer' : o.software !== undefined ? 'software' : 'instance';
      const made = await createTimeoutRule(p, id, { scope, softwarePattern: o.software ?? null, instanceId, timeoutS, latePercent, description: o.description, createdBy: null }, max);
      if ('noInstance' in made) fail(`no instance ${o.instance} of ${slug}`);
      if ('exists' in made) fail(`a rule for this target exists already (${made.exists}): change it with fleet timeout-rule set ${slug} ${made.exists}`);
      if ('full' in made) fail(`${slug} has ${made.full.count} timeout rules, its quota (${describeQuota('timeout_rules', made.full.max)}); delete one first, or raise it with fleet quota set ${slug} --timeout-rules <n>`);
      return made;
    }).catch((e) => fail((e as Error).message));
    process.stdout.write(JSON.stringify({ rule: ruleJson(out.created), instances_changed: out.recomputed }, null, 2) + '\n');
  });

timeoutRule
  .command('set <customer> <id>')
  .description("change a rule's timeout, late share or description (none clears a value; a rule keeps at least one); its instances follow at once")
  .option('--timeout <s>', 'seconds of silence before red (90, 5m, 2h, 1d), or none')
  .option('--late <percent>', 'per cent of the timeout after which a silent instance turns late (0: never), or none')
  .option('--description <text>', 'what the rule is for')
  .action(async (slug: string, ruleId: string, o: { timeout?: string; late?: string; description?: string }) => {
    if (!UUID.test(ruleId)) fail('the rule id is a UUID (see fleet timeout-rule list)');
    const patch: TimeoutRulePatch = {};
    if (o.timeout !== undefined) patch.timeoutS = timeoutOption(o.timeout, true);
    if (o.late !== undefined) patch.latePercent = lateOption(o.late, true);
    if (o.description !== undefined) {
      if (o.description.length > 500) fail('--description: at most 500 characters');
      patch.description = o.description;
    }
    if (Object.keys(patch).length === 0) fail('nothing to change: give --timeout, --late and/or --description');
    const out = await withPool(async (p) => {
      const r = await updateTimeoutRule(p, await customerIdOf(p, slug), ruleId, patch);
      if (!r) fail(`no timeout rule ${ruleId} of ${slug}`);
      if ('empty' in r) fail('a rule keeps --timeout, --late or both: delete it instead');
      return r;
    }).catch((e) => fail((e as Error).message));
    process.stdout.write(JSON.stringify({ rule: ruleJson(out.updated), instances_changed: out.recomputed }, null, 2) + '\n');
  });

timeoutRule
  .command('delete <customer> <id>')
  .description('remove a rule; its instances fall back to the next rule or the defaults at once')
  .action(async (slug: string, ruleId: string) => {
    if (!UUID.test(ruleId)) fail('the rule id is a UUID (see fleet timeout-rule list)');
    const out = await withPool(async (p) => {
      const r = await deleteTimeoutRule(p, await customerIdOf(p, slug), ruleId);
      if (!r) fail(`no timeout rule ${ruleId} of ${slug}`);
      return r;
    }).catch((e) => fail((e as Error).message));
    process.stdout.write(`deleted ${ruleId}\t${out.recomputed} instance(s) changed\n`);
  });

await program.parseAsync(process.argv).catch((e) => fail((e as Error).message));
