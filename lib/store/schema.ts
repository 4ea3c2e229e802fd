// Every table's schema, Postgres and ClickHouse, as ordered migrations. Append; never edit an
// applied entry. `fleet migrate` (and every start) applies what is missing, under an advisory lock.
//
// ClickHouse DDL must run on Debian's ClickHouse 18.16 and on current releases: no DateTime64, no
// LowCardinality, no TTL, no Map/JSON, no `ADD COLUMN IF NOT EXISTS` (lib/store/migrate.ts tolerates an
// ADD COLUMN that already happened), and a view's `SELECT *` is fixed when the view is made (re-create
// the view after adding columns). Times are kept as UInt64 milliseconds next to a DateTime for
// partitioning. Every table is a ReplacingMergeTree whose sorting key ends in the id of the report
// (or record) that produced the row: a batch applied twice collapses to one row; query with FINAL
// (or through the *_v views) to see each row once before background merges have run.
//
// ClickHouse statements are kept as data (`clickhouseSchema`) and rendered for one server (the SQL
// below has always produced) or, with CLICKHOUSE_CLUSTER, for replicated servers: every table a
// ReplicatedReplacingMergeTree `<name>_local` on each replica (ZooKeeper), the app's table name a
// Distributed table over it, every statement ON CLUSTER (`renderClickHouse`).

export interface Migration {
  id: string;
  sql: string[];
}

/** A table to partition anew (lib/store/repartition.ts). */
export interface RepartitionSpec {
  /** The app's table name. */
  table: string;
  /** The partition key it has (`toYYYYMM(received_at)`): a month of it is `<from> = YYYYMM`. */
  from: string;
  /** The partition key it gets (`toYYYYMMDD(received_at)`). */
  to: string;
  /** Its sorting key and version column, unchanged. */
  orderBy: string;
  ver?: string;
}

/** A ClickHouse migration: its statements, then the tables it partitions anew (lib/store/repartition.ts). */
export interface ChMigrationSql extends Migration {
  repartition: RepartitionSpec[];
}

/** The start of every row a customer owns: its own id, and the customer (gone with it). */
const CUSTOMER_ROW = ['id uuid PRIMARY KEY DEFAULT gen_random_uuid()', 'customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE'].join(',\n         ');

/** The channel Postgres notifies when who a credential is may have changed (migration 0027, api/principal-cache.ts). */
export const AUTH_CHANGED_CHANNEL = 'fleet_auth_changed';

/** Whether migration 0027's triggers can notify (its function exists): before it, nobody would. */
export async function authNoticesInstalled(db: { query(sql: string): Promise<{ rowCount: number | null }> }): Promise<boolean> {
  return (await db.query(`SELECT 1 FROM pg_proc WHERE proname = 'notify_auth_changed'`)).rowCount === 1;
}

export const postgresMigrations: Migration[] = [
  {
    id: '0001-core',
    sql: [
      `CREATE OR REPLACE FUNCTION touch_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN NEW.updated_at := clock_timestamp(); RETURN NEW; END $$`,
      `CREATE TABLE customers (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         slug text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,63}$'),
         name text NOT NULL DEFAULT '',
         created_at timestamptz NOT NULL DEFAULT now(),
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
       )`,
      `CREATE TRIGGER customers_touch BEFORE UPDATE ON customers FOR EACH ROW EXECUTE FUNCTION touch_updated_at()`,
      // Tokens are stored only as SHA-256 hex; the token itself is shown once, at creation.
      `CREATE TABLE api_tokens (
         ${CUSTOMER_ROW},
         name text NOT NULL DEFAULT '',
         token_hash text NOT NULL UNIQUE,
         prefix text NOT NULL,
         scopes text[] NOT NULL DEFAULT '{ingest,read}',
         created_at timestamptz NOT NULL DEFAULT now(),
         revoked_at timestamptz,
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
       )`,
      `CREATE INDEX api_tokens_customer ON api_tokens (customer_id)`,
      `CREATE INDEX api_tokens_updated ON api_tokens (updated_at)`,
      `CREATE TRIGGER api_tokens_touch BEFORE UPDATE ON api_tokens FOR EACH ROW EXECUTE FUNCTION touch_updated_at()`,
      `CREATE TABLE machines (
         ${CUSTOMER_ROW},
         slug text NOT NULL,
         first_seen_at timestamptz NOT NULL,
         last_seen_at timestamptz NOT NULL,
         UNIQUE (customer_id, slug)
       )`,
      // One row per software on a machine. Times are receive times (the gateway's clock).
      `CREATE TABLE instances (
         ${CUSTOMER_ROW},
         machine_id uuid NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
         software text NOT NULL,
         first_seen_at timestamptz NOT NULL,
         last_seen_at timestamptz NOT NULL,
         last_heartbeat_at timestamptz,
         agent_ts timestamptz,
         version text,
         uptime_seconds bigint,
         pid bigint,
         ip_addresses text[],
         group_name text,
         location text,
         group_priority bigint,
         sort_priority bigint,
         status text,
         status_message text,
         status_at timestamptz,
         snapshot jsonb,
         last_warning_at timestamptz,
         UNIQUE (machine_id, software)
       )`,
      `CREATE INDEX instances_customer ON instances (customer_id)`,
    ],
  },
  {
    id: '0002-accounts',
    sql: [
      // Dashboard users. E-mail is required and unique case-insensitively; a user name is optional
      // (older accounts log in with it). Passwords: scrypt (lib/store/accounts.ts).
      `CREATE TABLE users (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         email text NOT NULL CHECK (email ~ '^[^@\\s]+@[^@\\s]+$'),
         username text CHECK (username IS NULL OR username ~ '^[A-Za-z0-9._-]{1,64}$'),
         password_hash text NOT NULL,
         is_system_admin boolean NOT NULL DEFAULT false,
         created_at timestamptz NOT NULL DEFAULT now(),
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
       )`,
      `CREATE UNIQUE INDEX users_email_ci ON users (lower(email))`,
      `CREATE UNIQUE INDEX users_username_ci ON users (lower(username)) WHERE username IS NOT NULL`,
      `CREATE TRIGGER users_touch BEFORE UPDATE ON users FOR EACH ROW EXECUTE FUNCTION touch_updated_at()`,
      `CREATE TABLE memberships (
         user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         role text NOT NULL CHECK (role IN ('owner', 'admin', 'viewer')),
         created_at timestamptz NOT NULL DEFAULT now(),
         PRIMARY KEY (user_id, customer_id)
       )`,
      `CREATE INDEX memberships_customer ON memberships (customer_id)`,
    ],
  },
  {
    id: '0003-traffic-light',
    sql: [
      // The stored traffic light (issue 4): the colour the workers last recorded, since when, why,
      // a per-instance sequence number of its changes, and the time the stored colour was judged at
      // (light_judged_at: judgement never goes back before it, see workers/traffic-light.ts). What the API shows is still derived at
      // read time (lib/domain/traffic-light.ts); this is what the events are recorded against. A change is
      // recorded by a conditional UPDATE (light IS DISTINCT FROM the new colour), so of several
      // workers racing on one change exactly one records it.
      `ALTER TABLE instances
         ADD COLUMN light text NOT NULL DEFAULT 'grey' CHECK (light IN ('green', 'yellow', 'red', 'grey')),
         ADD COLUMN light_since timestamptz,
         ADD COLUMN light_reason text,
         ADD COLUMN light_seq bigint NOT NULL DEFAULT 0,
         ADD COLUMN light_judged_at timestamptz`,
      // Existing rows: the colour from their status (silence is left to the sweep, which records it).
      `UPDATE instances SET
         light = CASE WHEN last_heartbeat_at IS NULL OR status = 'stopped' THEN 'grey' WHEN status = 'error' THEN 'red'
                      WHEN status = 'degraded' THEN 'yellow' ELSE 'green' END,
         light_since = last_seen_at`,
      // The sweep's two questions: who is silent but not red, whose warning ran out while yellow.
      `CREATE INDEX instances_light_silent ON instances (last_heartbeat_at) WHERE light IN ('green', 'yellow')`,
      `CREATE INDEX instances_light_yellow ON instances (last_warning_at) WHERE light = 'yellow'`,
      // Transactional outbox: a change of colour is written here in the same transaction as the
      // UPDATE that decided it, and removed once it is in ClickHouse, on NATS and queued for the
      // webhooks. A worker that dies in between leaves it here for the sweep to deliver.
      `CREATE TABLE light_outbox (
         instance_id uuid NOT NULL,
         seq bigint NOT NULL,
         customer_id uuid NOT NULL,
         customer text NOT NULL,
         machine_id uuid NOT NULL,
         machine text NOT NULL,
         software text NOT NULL,
         from_light text NOT NULL,
         to_light text NOT NULL,
         reason text NOT NULL,
         cause text NOT NULL,
         at timestamptz NOT NULL,
         recorded_at timestamptz NOT NULL,
         PRIMARY KEY (instance_id, seq)
       )`,
      `CREATE INDEX light_outbox_recorded ON light_outbox (recorded_at)`,
      // Webhooks: a signed POST on every change to or from red. The secret signs the payload, so it
      // is kept (shown once, at creation). Delivery state per webhook and per event.
      `CREATE TABLE webhooks (
         ${CUSTOMER_ROW},
         url text NOT NULL,
         secret text NOT NULL,
         description text NOT NULL DEFAULT '',
         created_at timestamptz NOT NULL DEFAULT now(),
         created_by uuid,
         last_success_at timestamptz,
         last_failure_at timestamptz,
         last_error text,
         consecutive_failures integer NOT NULL DEFAULT 0
       )`,
      `CREATE INDEX webhooks_customer ON webhooks (customer_id)`,
      `CREATE TABLE webhook_deliveries (
         webhook_id uuid NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
         event_id text NOT NULL,
         customer_id uuid NOT NULL,
         instance_id uuid NOT NULL,
         from_light text NOT NULL,
         to_light text NOT NULL,
         event_at timestamptz NOT NULL,
         state text NOT NULL CHECK (state IN ('retrying', 'delivered', 'failed')),
         attempts integer NOT NULL,
         last_status integer,
         last_error text,
         first_attempt_at timestamptz NOT NULL DEFAULT now(),
         last_attempt_at timestamptz NOT NULL DEFAULT now(),
         next_attempt_at timestamptz,
         delivered_at timestamptz,
         PRIMARY KEY (webhook_id, event_id)
       )`,
      `CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (webhook_id, last_attempt_at DESC)`,
    ],
  },
  {
    id: '0004-diagnostics-suite',
    sql: [
      // Diagnostics whitelist (docs/docs/decisions.md): per customer, optional machine / software / message
      // patterns (`*` and `?` only, lib/domain/whitelist.ts) and a code range (a single code is from = to).
      // Deleting a rule sets deleted_at (and so updated_at), so the workers' polled copies see the
      // deletion in their next delta; soft-deleted rows are never listed.
      `CREATE TABLE whitelist_rules (
         ${CUSTOMER_ROW},
         machine_pattern text,
         software_pattern text,
         code_from integer NOT NULL,
         code_to integer NOT NULL,
         message_pattern text,
         note text NOT NULL DEFAULT '',
         enabled boolean NOT NULL DEFAULT true,
         created_by uuid,
         created_at timestamptz NOT NULL DEFAULT now(),
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
         deleted_at timestamptz,
         CHECK (code_from <= code_to)
       )`,
      `CREATE INDEX whitelist_rules_customer ON whitelist_rules (customer_id, created_at) WHERE deleted_at IS NULL`,
      `CREATE INDEX whitelist_rules_updated ON whitelist_rules (updated_at)`,
      `CREATE TRIGGER whitelist_rules_touch BEFORE UPDATE ON whitelist_rules FOR EACH ROW EXECUTE FUNCTION touch_updated_at()`,
      // Diagnostic help texts per customer, software, code and language, from the help ingest.
      // The newest upload (receive time, then report id) wins; `machine` is where it came from.
      `CREATE TABLE help_texts (
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         software text NOT NULL,
         code integer NOT NULL,
         lang text NOT NULL CHECK (lang IN ('de', 'en')),
         title text NOT NULL DEFAULT '',
         text text NOT NULL,
         machine text NOT NULL DEFAULT '',
         received_at timestamptz NOT NULL,
         report_id uuid NOT NULL,
         created_at timestamptz NOT NULL DEFAULT now(),
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
         PRIMARY KEY (customer_id, software, code, lang)
       )`,
      `CREATE INDEX help_texts_updated ON help_texts (updated_at)`,
      `CREATE TRIGGER help_texts_touch BEFORE UPDATE ON help_texts FOR EACH ROW EXECUTE FUNCTION touch_updated_at()`,
    ],
  },
  {
    id: '0005-metrics-artifacts',
    sql: [
      // A completed artifact upload (issue 6). The bytes stay in the JetStream object store as the
      // upload's chunks (lib/store/artifacts.ts); this row is written by a worker from the queue message
      // the gateway publishes at artifact-complete (the gateway never writes to Postgres).
      `CREATE TABLE artifacts (
         id uuid PRIMARY KEY,
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         machine_id uuid NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
         instance_id uuid NOT NULL REFERENCES instances(id) ON DELETE CASCADE,
         software text NOT NULL,
         upload_id uuid NOT NULL UNIQUE,
         filename text NOT NULL,
         size bigint NOT NULL CHECK (size >= 0),
         sha256 text CHECK (sha256 IS NULL OR sha256 ~ '^[0-9a-f]{64}$'),
         content_type text NOT NULL,
         chunk_size integer NOT NULL CHECK (chunk_size > 0),
         chunks integer NOT NULL CHECK (chunks >= 0),
         uploaded_at timestamptz NOT NULL,
         created_at timestamptz NOT NULL DEFAULT now()
       )`,
      `CREATE INDEX artifacts_machine ON artifacts (customer_id, machine_id, software, uploaded_at DESC)`,
    ],
  },
  {
    id: '0006-commands',
    sql: [
      // Agent commands (docs/api.md "Agent commands"). A command is queued by a dashboard user for
      // one instance, offered to the agent in the answer to each heartbeat or status report until
      // acked, and ends succeeded, failed, expired (queued too long), timed_out (delivered, no ack
      // in time) or cancelled. Deadlines are fixed when the state is entered (expires_at at queue
      // time, ack_deadline at the first delivery), so the sweep only compares times.
      `CREATE TABLE commands (
         ${CUSTOMER_ROW},
         instance_id uuid NOT NULL REFERENCES instances(id) ON DELETE CASCADE,
         module text NOT NULL,
         command text NOT NULL,
         args jsonb NOT NULL DEFAULT '{}',
         state text NOT NULL DEFAULT 'queued'
           CHECK (state IN ('queued', 'delivered', 'succeeded', 'failed', 'expired', 'timed_out', 'cancelled')),
         created_by uuid REFERENCES users(id) ON DELETE SET NULL,
         created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
         expires_at timestamptz NOT NULL,
         delivered_at timestamptz,
         last_delivered_at timestamptz,
         ack_deadline timestamptz,
         finished_at timestamptz,
         result_message text,
         result_output jsonb,
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
       )`,
      `CREATE TRIGGER commands_touch BEFORE UPDATE ON commands FOR EACH ROW EXECUTE FUNCTION touch_updated_at()`,
      `CREATE INDEX commands_instance ON commands (instance_id, created_at DESC)`,
      `CREATE INDEX commands_customer ON commands (customer_id)`,
      // What the gateways keep in memory, and what the expiry sweep looks at: only open commands.
      `CREATE INDEX commands_open ON commands (created_at) WHERE state IN ('queued', 'delivered')`,
      `CREATE INDEX commands_queued_expiry ON commands (expires_at) WHERE state = 'queued'`,
      `CREATE INDEX commands_ack_deadline ON commands (ack_deadline) WHERE state = 'delivered'`,
      // Every change of state with its time; a command enters each state at most once, so the key
      // makes every write here idempotent (a redelivered batch changes nothing).
      `CREATE TABLE command_events (
         command_id uuid NOT NULL REFERENCES commands(id) ON DELETE CASCADE,
         state text NOT NULL,
         at timestamptz NOT NULL,
         actor text NOT NULL DEFAULT '',
         detail text,
         PRIMARY KEY (command_id, state)
       )`,
    ],
  },
  {
    id: '0007-accounts-licences',
    sql: [
      // Licences: one per customer, created with the customer (trigger), free start of 5 devices.
      // over_limit_since: when the device count (machines seen in the last 30 days) first went over
      // the limit in the current excess; cleared when the customer is back within the limit (a
      // bigger licence, or machines unseen for 30 days). grace ends over_limit_since + grace_days;
      // after it, gateways refuse machines new to the customer (gateway/licence-gate.ts).
      `CREATE FUNCTION new_licence_key() RETURNS text LANGUAGE sql VOLATILE AS $$
         SELECT 'FLT-' || upper(substr(h, 1, 5) || '-' || substr(h, 6, 5) || '-' || substr(h, 11, 5) || '-' || substr(h, 16, 5))
           FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS h) x $$`,
      `CREATE TABLE licences (
         customer_id uuid PRIMARY KEY REFERENCES customers(id) ON DELETE CASCADE,
         licence_key text NOT NULL UNIQUE DEFAULT new_licence_key(),
         tier text NOT NULL DEFAULT 'free' CHECK (tier IN ('free', 'paid')),
         device_limit integer NOT NULL DEFAULT 5 CHECK (device_limit >= 0),
         grace_days integer NOT NULL DEFAULT 14 CHECK (grace_days >= 0),
         over_limit_since timestamptz,
         created_at timestamptz NOT NULL DEFAULT now(),
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
       )`,
      `CREATE INDEX licences_updated ON licences (updated_at)`,
      `CREATE TRIGGER licences_touch BEFORE UPDATE ON licences FOR EACH ROW EXECUTE FUNCTION touch_updated_at()`,
      `CREATE FUNCTION customers_licence() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN INSERT INTO licences (customer_id) VALUES (NEW.id) ON CONFLICT DO NOTHING; RETURN NEW; END $$`,
      `CREATE TRIGGER customers_licence AFTER INSERT ON customers FOR EACH ROW EXECUTE FUNCTION customers_licence()`,
      `INSERT INTO licences (customer_id) SELECT id FROM customers ON CONFLICT DO NOTHING`,
      // When a machine row was made (gateways poll new machines of customers past their grace
      // period), and when it arrived while its customer was over the device limit (flagged).
      `ALTER TABLE machines ADD COLUMN created_at timestamptz NOT NULL DEFAULT clock_timestamp()`,
      `ALTER TABLE machines ADD COLUMN over_limit_at timestamptz`,
      `CREATE INDEX machines_customer_seen ON machines (customer_id, last_seen_at)`,
      `CREATE INDEX machines_customer_created ON machines (customer_id, created_at)`,
      // Server-side conversion events (signup, first_device, licence_activated) that the dashboard
      // reports to its analytics once and acknowledges. dedup_key makes each event happen once.
      `CREATE TABLE conversions (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         kind text NOT NULL,
         user_id uuid REFERENCES users(id) ON DELETE CASCADE,
         customer_id uuid REFERENCES customers(id) ON DELETE CASCADE,
         dedup_key text NOT NULL UNIQUE,
         value jsonb NOT NULL DEFAULT '{}',
         created_at timestamptz NOT NULL DEFAULT now(),
         acked_at timestamptz,
         acked_by uuid REFERENCES users(id) ON DELETE SET NULL,
         CHECK (user_id IS NOT NULL OR customer_id IS NOT NULL)
       )`,
      `CREATE INDEX conversions_user_pending ON conversions (user_id) WHERE acked_at IS NULL`,
      `CREATE INDEX conversions_customer_pending ON conversions (customer_id) WHERE acked_at IS NULL`,
      `CREATE FUNCTION users_signup() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN INSERT INTO conversions (kind, user_id, dedup_key) VALUES ('signup', NEW.id, 'signup:' || NEW.id) ON CONFLICT DO NOTHING; RETURN NEW; END $$`,
      `CREATE TRIGGER users_signup AFTER INSERT ON users FOR EACH ROW EXECUTE FUNCTION users_signup()`,
      // Onboarding: the first report of each kind per customer (receive time), recorded by workers.
      `CREATE TABLE onboarding_milestones (
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         step text NOT NULL,
         done_at timestamptz NOT NULL,
         PRIMARY KEY (customer_id, step)
       )`,
      `INSERT INTO onboarding_milestones (customer_id, step, done_at)
         SELECT customer_id, 'heartbeat', min(first_seen_at) FROM instances WHERE last_heartbeat_at IS NOT NULL GROUP BY customer_id
         UNION ALL
         SELECT customer_id, 'status', min(first_seen_at) FROM instances WHERE status_at IS NOT NULL GROUP BY customer_id
       ON CONFLICT DO NOTHING`,
    ],
  },
  {
    id: '0008-clock-skew',
    sql: [
      // The newest heartbeat carried a `ts` outside the plausible window around its receive time
      // (TS_PLAUSIBLE_PAST_S / TS_PLAUSIBLE_FUTURE_S): its clock is wrong. agent_ts keeps the newest
      // plausible one. The traffic light never uses either (receive time only).
      `ALTER TABLE instances ADD COLUMN clock_skew boolean NOT NULL DEFAULT false`,
    ],
  },
  {
    id: '0009-read-path',
    sql: [
      // The read path at fleet scale (docs/architecture.md "The read path"): every list the api
      // answers walks an index in the order it returns, so a page costs its own rows, not the
      // customer's 100,000. The machine's slug is copied onto its instances (a machine's slug never
      // changes: it is the machine's name in the ingest path), so the default order (machine,
      // software) and the machine search need no join. Workers write it; the trigger fills it for
      // any other writer (and older workers during an upgrade).
      `ALTER TABLE instances ADD COLUMN machine text`,
      `UPDATE instances i SET machine = m.slug FROM machines m WHERE m.id = i.machine_id`,
      `CREATE FUNCTION instances_machine() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN SELECT slug INTO NEW.machine FROM machines WHERE id = NEW.machine_id; RETURN NEW; END $$`,
      `CREATE TRIGGER instances_machine BEFORE INSERT ON instances FOR EACH ROW WHEN (NEW.machine IS NULL) EXECUTE FUNCTION instances_machine()`,
      `ALTER TABLE instances ALTER COLUMN machine SET NOT NULL`,
      // Orders of GET /api/instances: by name (the default), by software then name, by last seen;
      // the machine search (case-insensitive substring) through trigrams.
      `CREATE INDEX instances_customer_machine ON instances (customer_id, machine, software, id)`,
      `CREATE INDEX instances_customer_software ON instances (customer_id, software, machine, id)`,
      `CREATE INDEX instances_customer_last_seen ON instances (customer_id, last_seen_at)`,
      // A colour other than green: the rows that may have it (lib/domain/traffic-light.ts lightCandidateSql).
      `CREATE INDEX instances_customer_status ON instances (customer_id, status)`,
      `CREATE INDEX instances_customer_heartbeat ON instances (customer_id, last_heartbeat_at)`,
      `CREATE INDEX instances_customer_warning ON instances (customer_id, last_warning_at) WHERE last_warning_at IS NOT NULL`,
      `CREATE EXTENSION IF NOT EXISTS pg_trgm`,
      `CREATE INDEX instances_machine_trgm ON instances USING gin (machine gin_trgm_ops)`,
      // instances_customer_machine begins with customer_id: the single-column index is redundant.
      `DROP INDEX instances_customer`,
    ],
  },
  {
    id: '0010-quotas',
    sql: [
      // Quotas per customer (lib/store/quotas.ts): what a system administrator set for one customer; a
      // NULL column (or no row) is the default from the environment. Gateways poll it by updated_at.
      `CREATE TABLE customer_quotas (
         customer_id uuid PRIMARY KEY REFERENCES customers(id) ON DELETE CASCADE,
         artifact_bytes bigint CHECK (artifact_bytes >= 0),
         artifact_max_bytes bigint CHECK (artifact_max_bytes >= 1),
         stream_connections integer CHECK (stream_connections >= 0),
         webhooks integer CHECK (webhooks >= 0),
         whitelist_rules integer CHECK (whitelist_rules >= 0),
         ingest_requests_per_s integer CHECK (ingest_requests_per_s >= 1),
         ingest_bytes_per_s bigint CHECK (ingest_bytes_per_s >= 1),
         created_at timestamptz NOT NULL DEFAULT now(),
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
       )`,
      `CREATE INDEX customer_quotas_updated ON customer_quotas (updated_at)`,
      `CREATE TRIGGER customer_quotas_touch BEFORE UPDATE ON customer_quotas FOR EACH ROW EXECUTE FUNCTION touch_updated_at()`,
      // The bytes of each customer's stored artifacts, kept by a trigger in the transaction that
      // writes or deletes the artifact row (whoever writes it). seq counts the changes: a gateway's
      // copy at seq s counts every artifact whose row was there at s (lib/store/artifact-usage.ts).
      `CREATE TABLE artifact_usage (
         customer_id uuid PRIMARY KEY REFERENCES customers(id) ON DELETE CASCADE,
         bytes bigint NOT NULL DEFAULT 0,
         artifacts integer NOT NULL DEFAULT 0,
         seq bigint NOT NULL DEFAULT 0,
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
       )`,
      `CREATE INDEX artifact_usage_updated ON artifact_usage (updated_at)`,
      `CREATE FUNCTION artifacts_usage() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF TG_OP = 'INSERT' THEN
           INSERT INTO artifact_usage AS u (customer_id, bytes, artifacts, seq) VALUES (NEW.customer_id, NEW.size, 1, 1)
           ON CONFLICT (customer_id) DO UPDATE
             SET bytes = u.bytes + EXCLUDED.bytes, artifacts = u.artifacts + 1, seq = u.seq + 1, updated_at = clock_timestamp();
           RETURN NEW;
         END IF;
         UPDATE artifact_usage SET bytes = bytes - OLD.size, artifacts = artifacts - 1, seq = seq + 1, updated_at = clock_timestamp()
          WHERE customer_id = OLD.customer_id;
         RETURN OLD;
       END $$`,
      `CREATE TRIGGER artifacts_usage AFTER INSERT OR DELETE ON artifacts FOR EACH ROW EXECUTE FUNCTION artifacts_usage()`,
      `INSERT INTO artifact_usage (customer_id, bytes, artifacts, seq)
         SELECT customer_id, sum(size), count(*), count(*) FROM artifacts GROUP BY customer_id`,
    ],
  },
  {
    id: '0011-api-token-limits',
    sql: [
      // API tokens that can be limited (docs/api.md "Accounts, customers, members and API tokens"):
      // an optional expiry, who created the token (a dashboard user; NULL: the CLI, or before this
      // release), when it was last used (written by the gateways and the api at most once a minute,
      // lib/store/token-usage.ts), and an optional binding to one machine or a machine-name pattern (`*`,
      // `?`, as the whitelist's patterns; lib/domain/whitelist.ts). A bound token has the ingest scope only.
      `ALTER TABLE api_tokens
         ADD COLUMN expires_at timestamptz,
         ADD COLUMN created_by uuid REFERENCES users(id) ON DELETE SET NULL,
         ADD COLUMN last_used_at timestamptz,
         ADD COLUMN machine text CHECK (machine ~ '^[a-z0-9*?-]{1,128}$'),
         ADD CONSTRAINT api_tokens_machine_ingest_only CHECK (machine IS NULL OR scopes = '{ingest}')`,
      // Recording a use must not look like a change of the token: the gateways re-read the rows
      // whose updated_at moved (gateway/token-cache.ts), and one token per machine would otherwise
      // make every gateway re-read thousands of rows a minute. Any other change still touches it.
      `DROP TRIGGER api_tokens_touch ON api_tokens`,
      `CREATE TRIGGER api_tokens_touch BEFORE UPDATE ON api_tokens FOR EACH ROW
         WHEN (OLD.last_used_at IS NOT DISTINCT FROM NEW.last_used_at) EXECUTE FUNCTION touch_updated_at()`,
    ],
  },
  {
    id: '0012-account-lifecycle',
    sql: [
      // Dashboard sessions (api/session.ts): one row per login, named by the JWT's `sid`. A session
      // is valid while revoked_at is NULL and expires_at is ahead; every request's principal query
      // joins it (api/auth.ts), so a revocation holds on every api replica at the next request
      // (since 0027: once the replica has heard the change notice, api/principal-cache.ts).
      `CREATE TABLE sessions (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
         created_at timestamptz NOT NULL DEFAULT now(),
         expires_at timestamptz NOT NULL,
         revoked_at timestamptz,
         revoked_why text,
         user_agent text,
         address text
       )`,
      `CREATE INDEX sessions_user_open ON sessions (user_id) WHERE revoked_at IS NULL`,
      `CREATE INDEX sessions_expires ON sessions (expires_at)`,
      // Invitations (api/handlers/invitations.ts): an owner invites an address with a role; the
      // invitee gets a single-use link by e-mail. Only the SHA-256 of the link's token is stored.
      // No user id: whether the address has an account is decided when the invitation is accepted.
      `CREATE TABLE invitations (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         email text NOT NULL CHECK (email ~ '^[^@\\s]+@[^@\\s]+$'),
         role text NOT NULL CHECK (role IN ('owner', 'admin', 'viewer')),
         lang text NOT NULL DEFAULT 'en' CHECK (lang IN ('de', 'en')),
         token_hash text NOT NULL UNIQUE,
         invited_by uuid REFERENCES users(id) ON DELETE SET NULL,
         created_at timestamptz NOT NULL DEFAULT now(),
         expires_at timestamptz NOT NULL,
         sent_at timestamptz,
         send_count integer NOT NULL DEFAULT 0,
         mail_status text NOT NULL DEFAULT 'pending',
         accepted_at timestamptz,
         accepted_by uuid REFERENCES users(id) ON DELETE SET NULL,
         revoked_at timestamptz
       )`,
      // At most one open invitation per customer and address: inviting again replaces it.
      `CREATE UNIQUE INDEX invitations_open ON invitations (customer_id, lower(email)) WHERE accepted_at IS NULL AND revoked_at IS NULL`,
      // Password reset links: single use, short-lived, only the SHA-256 of the token stored.
      `CREATE TABLE password_resets (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
         token_hash text NOT NULL UNIQUE,
         created_at timestamptz NOT NULL DEFAULT now(),
         expires_at timestamptz NOT NULL,
         used_at timestamptz
       )`,
      `CREATE INDEX password_resets_user ON password_resets (user_id)`,
      `ALTER TABLE users ADD COLUMN password_changed_at timestamptz`,
    ],
  },
  {
    id: '0013-retention',
    sql: [
      // Data retention (lib/store/retention.ts): the job finds what is past its age through these,
      // not by reading the whole table every hour. Commands: the ended ones, by their last change.
      `CREATE INDEX webhook_deliveries_last_attempt ON webhook_deliveries (last_attempt_at)`,
      `CREATE INDEX commands_ended ON commands (updated_at) WHERE state NOT IN ('queued', 'delivered')`,
    ],
  },
  {
    id: '0014-clickhouse-repartitions',
    sql: [
      // Progress of a ClickHouse table partitioned anew (lib/store/repartition.ts): the months
      // copied into the new table, with the highest block number each had then. Empty when no
      // repartition is under way.
      `CREATE TABLE clickhouse_repartitions (
         tbl text NOT NULL,
         month int NOT NULL,
         max_block bigint NOT NULL,
         copied_at timestamptz NOT NULL DEFAULT now(),
         PRIMARY KEY (tbl, month)
       )`,
    ],
  },
  {
    id: '0015-decommission',
    sql: [
      // Decommissioning (lib/store/decommission.ts, docs/operations.md "Decommissioning"): a retired
      // machine or instance keeps its row (its id keeps answering for its history, its commands and
      // artifacts stay) but leaves the fleet, the counts and the licence. A report afterwards makes a
      // new row, so the slugs are unique among the rows not retired only.
      `ALTER TABLE machines ADD COLUMN retired_at timestamptz, ADD COLUMN retired_by uuid REFERENCES users(id) ON DELETE SET NULL`,
      `ALTER TABLE instances ADD COLUMN retired_at timestamptz, ADD COLUMN retired_by uuid REFERENCES users(id) ON DELETE SET NULL`,
      `ALTER TABLE machines DROP CONSTRAINT machines_customer_id_slug_key`,
      `CREATE UNIQUE INDEX machines_live_slug ON machines (customer_id, slug) WHERE retired_at IS NULL`,
      `ALTER TABLE instances DROP CONSTRAINT instances_machine_id_software_key`,
      `CREATE UNIQUE INDEX instances_live_software ON instances (machine_id, software) WHERE retired_at IS NULL`,
      // The workers' guard against a report received before the retirement and applied after it.
      `CREATE INDEX machines_retired ON machines (customer_id, slug, retired_at) WHERE retired_at IS NOT NULL`,
      `CREATE INDEX instances_retired ON instances (customer_id, machine, software, retired_at) WHERE retired_at IS NOT NULL`,
      // The sweep's two questions are asked of the fleet only.
      `DROP INDEX instances_light_silent`,
      `CREATE INDEX instances_light_silent ON instances (last_heartbeat_at) WHERE light IN ('green', 'yellow') AND retired_at IS NULL`,
      `DROP INDEX instances_light_yellow`,
      `CREATE INDEX instances_light_yellow ON instances (last_warning_at) WHERE light = 'yellow' AND retired_at IS NULL`,
    ],
  },
  {
    id: '0016-mail-notifications',
    sql: [
      // E-mail notifications of traffic-light changes (lib/store/mail-notifications.ts,
      // workers/mail-digest.ts): a user's subscription in one customer. kinds: what is mailed (empty:
      // off; unsubscribing empties it). More kinds later: replace the CHECK in a new migration.
      // unsubscribe_token: random, in every mail's link; it works without login. waiting_since: when
      // the oldest change not mailed yet was queued (NULL: none waits). last_sent_at: the last digest
      // (at most one per MAIL_DIGEST_INTERVAL_S); retry_at / failures: after a failed send.
      `CREATE TABLE mail_subscriptions (
         user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         kinds text[] NOT NULL DEFAULT '{}',
         lang text NOT NULL DEFAULT 'en' CHECK (lang IN ('de', 'en')),
         unsubscribe_token text NOT NULL UNIQUE,
         created_at timestamptz NOT NULL DEFAULT now(),
         updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
         waiting_since timestamptz,
         last_sent_at timestamptz,
         retry_at timestamptz,
         failures integer NOT NULL DEFAULT 0,
         PRIMARY KEY (user_id, customer_id),
         CONSTRAINT mail_subscriptions_kinds CHECK (kinds <@ ARRAY['red', 'yellow', 'green']::text[])
       )`,
      `CREATE INDEX mail_subscriptions_customer ON mail_subscriptions (customer_id) WHERE kinds <> '{}'`,
      `CREATE INDEX mail_subscriptions_waiting ON mail_subscriptions (waiting_since) WHERE waiting_since IS NOT NULL`,
      `CREATE TRIGGER mail_subscriptions_touch BEFORE UPDATE ON mail_subscriptions FOR EACH ROW
         WHEN (OLD.kinds IS DISTINCT FROM NEW.kinds OR OLD.lang IS DISTINCT FROM NEW.lang) EXECUTE FUNCTION touch_updated_at()`,
      // One row per subscription and change of colour, written with the change's delivery from the
      // light outbox (a copy of the same change is dropped by the key). sent_at NULL: waiting for
      // the next digest; set: mailed, kept a day so that a change delivered again is not mailed again.
      `CREATE TABLE mail_pending (
         user_id uuid NOT NULL,
         customer_id uuid NOT NULL,
         event_id text NOT NULL,
         kind text NOT NULL,
         instance_id uuid NOT NULL,
         machine text NOT NULL,
         software text NOT NULL,
         from_light text NOT NULL,
         to_light text NOT NULL,
         event_at timestamptz NOT NULL,
         created_at timestamptz NOT NULL DEFAULT now(),
         sent_at timestamptz,
         PRIMARY KEY (user_id, customer_id, event_id),
         FOREIGN KEY (user_id, customer_id) REFERENCES mail_subscriptions ON DELETE CASCADE
       )`,
      `CREATE INDEX mail_pending_waiting ON mail_pending (user_id, customer_id, created_at) WHERE sent_at IS NULL`,
      `CREATE INDEX mail_pending_sent ON mail_pending (sent_at) WHERE sent_at IS NOT NULL`,
    ],
  },
  {
    id: '0017-artifact-deletion',
    sql: [
      // Deleting an artifact (DELETE /api/artifacts/{id}, retention, offboarding; lib/store/artifacts.ts)
      // first sets deleting_at: from then on the artifact is neither listed nor downloaded, and a
      // deletion that stopped half-way (NATS away between its chunks) is finished by the next
      // attempt or by the retention job. The row goes last, with its bytes in artifact_usage (trigger).
      `ALTER TABLE artifacts ADD COLUMN deleting_at timestamptz`,
      `CREATE INDEX artifacts_deleting ON artifacts (deleting_at) WHERE deleting_at IS NOT NULL`,
      // RETENTION_ARTIFACTS_DAYS: the oldest uploads first, across customers.
      `CREATE INDEX artifacts_uploaded ON artifacts (uploaded_at)`,
    ],
  },
  {
    id: '0018-customer-offboarding',
    sql: [
      // Offboarding (lib/store/offboarding.ts, docs/operations.md "Offboarding a customer"): a
      // customer being deleted has deleting_at set. From then on it is gone for every reader (no
      // login, no token, workers drop its reports); its data is removed store by store, and this
      // row, the handle of a deletion that stopped half-way, goes last.
      `ALTER TABLE customers ADD COLUMN deleting_at timestamptz`,
      `CREATE INDEX customers_deleting ON customers (deleting_at) WHERE deleting_at IS NOT NULL`,
      // The ids of customers deleted (nothing else of them: a random id): a report of one still
      // queued somewhere is dropped by the workers, not stored and not dead-lettered, while a
      // report naming an id that never was a customer is still dead-lettered as before.
      `CREATE TABLE deleted_customers (
         id uuid PRIMARY KEY,
         deleted_at timestamptz NOT NULL DEFAULT now()
       )`,
    ],
  },
  {
    id: '0019-timeout-rules',
    sql: [
      // Per-instance timeouts and the late colour (lib/store/timeout-rules.ts, docs/decisions.md
      // "Timeouts per instance and late"). A rule of a customer sets the timeout (seconds of
      // silence before red) and/or the late share (per cent of the timeout after which a silent
      // instance turns late) for the whole customer, a software pattern (a glob; software_like is
      // its LIKE form) or one instance. For each of the two values the most specific rule that
      // sets it wins: instance, then the longest matching pattern (equal length: the first in
      // byte order), then the customer's; none: light_defaults.
      `ALTER TABLE customer_quotas ADD COLUMN timeout_rules integer CHECK (timeout_rules >= 0)`,
      `CREATE TABLE timeout_rules (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         scope text NOT NULL CHECK (scope IN ('customer', 'software', 'instance')),
         software_pattern text,
         software_like text,
         instance_id uuid REFERENCES instances(id) ON DELETE CASCADE,
         timeout_s integer CHECK (timeout_s BETWEEN 1 AND 2592000),
         late_percent integer CHECK (late_percent BETWEEN 0 AND 99),
         description text NOT NULL DEFAULT '',
         created_at timestamptz NOT NULL DEFAULT now(),
         updated_at timestamptz NOT NULL DEFAULT now(),
         created_by uuid REFERENCES users(id) ON DELETE SET NULL,
         CHECK ((scope = 'customer' AND software_pattern IS NULL AND instance_id IS NULL)
             OR (scope = 'software' AND software_pattern IS NOT NULL AND software_like IS NOT NULL AND instance_id IS NULL)
             OR (scope = 'instance' AND software_pattern IS NULL AND instance_id IS NOT NULL)),
         CHECK (timeout_s IS NOT NULL OR late_percent IS NOT NULL)
       )`,
      `CREATE UNIQUE INDEX timeout_rules_customer ON timeout_rules (customer_id) WHERE scope = 'customer'`,
      `CREATE UNIQUE INDEX timeout_rules_software ON timeout_rules (customer_id, software_pattern) WHERE scope = 'software'`,
      `CREATE UNIQUE INDEX timeout_rules_instance ON timeout_rules (customer_id, instance_id) WHERE scope = 'instance'`,
      `CREATE INDEX timeout_rules_instance_id ON timeout_rules (instance_id) WHERE instance_id IS NOT NULL`,
      // HEARTBEAT_TIMEOUT_S and HEARTBEAT_LATE_PERCENT as the workers last applied them (a worker
      // that starts with other values writes them and recomputes the deadlines: pending until done).
      `CREATE TABLE light_defaults (
         id smallint PRIMARY KEY CHECK (id = 1),
         timeout_s integer NOT NULL,
         late_percent integer NOT NULL,
         pending boolean NOT NULL DEFAULT false,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
      `INSERT INTO light_defaults (id, timeout_s, late_percent) VALUES (1, 300, 0)`,
      // A rule change whose recompute of the customer's instances has not finished yet: the api
      // finishes it at once; the light sweep finishes one the api left (it died half-way).
      `CREATE TABLE timeout_recomputes (
         customer_id uuid PRIMARY KEY REFERENCES customers(id) ON DELETE CASCADE,
         requested_at timestamptz NOT NULL
       )`,
      // The rule for one instance: each value from the most specific rule that sets it.
      `CREATE FUNCTION timeout_rule_for(cust uuid, sw text, inst uuid, OUT timeout_s integer, OUT late_percent integer)
       LANGUAGE sql STABLE AS $$
         SELECT COALESCE((SELECT r.timeout_s FROM timeout_rules r WHERE r.customer_id = cust AND r.scope = 'instance' AND r.instance_id = inst),
                         (SELECT r.timeout_s FROM timeout_rules r WHERE r.customer_id = cust AND r.scope = 'software' AND r.timeout_s IS NOT NULL
                             AND sw LIKE r.software_like ORDER BY length(r.software_pattern) DESC, r.software_pattern COLLATE "C" LIMIT 1),
                         (SELECT r.timeout_s FROM timeout_rules r WHERE r.customer_id = cust AND r.scope = 'customer')),
                COALESCE((SELECT r.late_percent FROM timeout_rules r WHERE r.customer_id = cust AND r.scope = 'instance' AND r.instance_id = inst),
                         (SELECT r.late_percent FROM timeout_rules r WHERE r.customer_id = cust AND r.scope = 'software' AND r.late_percent IS NOT NULL
                             AND sw LIKE r.software_like ORDER BY length(r.software_pattern) DESC, r.software_pattern COLLATE "C" LIMIT 1),
                         (SELECT r.late_percent FROM timeout_rules r WHERE r.customer_id = cust AND r.scope = 'customer'))
       $$`,
      // When a silent instance turns red and late (NULL: never late), from its last heartbeat and
      // its rule's values (NULL: light_defaults). Every writer of last_heartbeat_at sets both.
      `CREATE FUNCTION light_deadline(hb timestamptz, rule_timeout_s integer) RETURNS timestamptz LANGUAGE sql STABLE AS $$
         SELECT hb + make_interval(secs => COALESCE(rule_timeout_s, (SELECT d.timeout_s FROM light_defaults d WHERE d.id = 1)))
       $$`,
      `CREATE FUNCTION light_late_at(hb timestamptz, rule_timeout_s integer, rule_late_percent integer) RETURNS timestamptz LANGUAGE sql STABLE AS $$
         SELECT CASE WHEN p > 0 THEN hb + make_interval(secs => t * p / 100.0) END
           FROM (SELECT COALESCE(rule_timeout_s, d.timeout_s) AS t, COALESCE(rule_late_percent, d.late_percent) AS p FROM light_defaults d WHERE d.id = 1) x
       $$`,
      `ALTER TABLE instances ADD COLUMN timeout_s integer, ADD COLUMN late_percent integer,
         ADD COLUMN deadline timestamptz, ADD COLUMN late_at timestamptz`,
      `UPDATE instances SET deadline = light_deadline(last_heartbeat_at, NULL), late_at = light_late_at(last_heartbeat_at, NULL, NULL)
        WHERE last_heartbeat_at IS NOT NULL`,
      // A new instance takes its rule (an AFTER INSERT trigger: it fires for rows the ingest upsert
      // inserts, not for the conflicts it updates). The customer's row is key-share locked first,
      // as its foreign key is: a rule change (which locks it FOR UPDATE before it recomputes the
      // customer's instances) either waits for this insert to commit and then sees it, or commits
      // first and is seen here (each statement of a volatile function takes a fresh snapshot).
      `CREATE FUNCTION instances_timeout_rule() RETURNS trigger LANGUAGE plpgsql AS $$
       DECLARE r record;
       BEGIN
         PERFORM 1 FROM customers WHERE id = NEW.customer_id FOR KEY SHARE;
         SELECT * INTO r FROM timeout_rule_for(NEW.customer_id, NEW.software, NEW.id);
         IF r.timeout_s IS NOT NULL OR r.late_percent IS NOT NULL THEN
           UPDATE instances SET timeout_s = r.timeout_s, late_percent = r.late_percent,
                  deadline = light_deadline(last_heartbeat_at, r.timeout_s), late_at = light_late_at(last_heartbeat_at, r.timeout_s, r.late_percent)
            WHERE id = NEW.id;
         END IF;
         RETURN NULL;
       END $$`,
      `CREATE TRIGGER instances_timeout_rule AFTER INSERT ON instances FOR EACH ROW EXECUTE FUNCTION instances_timeout_rule()`,
      `ALTER TABLE instances DROP CONSTRAINT instances_light_check`,
      `ALTER TABLE instances ADD CONSTRAINT instances_light_check CHECK (light IN ('green', 'yellow', 'late', 'red', 'grey'))`,
      // The sweep's candidates (lib/store/instances.ts instancesDueForSweep): past the deadline
      // while not red, past late_at while green or yellow. The api's red and late filters.
      `DROP INDEX instances_light_silent`,
      `CREATE INDEX instances_light_deadline ON instances (deadline) WHERE light IN ('green', 'yellow', 'late') AND retired_at IS NULL`,
      `CREATE INDEX instances_light_late ON instances (late_at) WHERE light IN ('green', 'yellow') AND retired_at IS NULL AND late_at IS NOT NULL`,
      `CREATE INDEX instances_light_alert ON instances (deadline) WHERE light IN ('red', 'late') AND retired_at IS NULL`,
      `CREATE INDEX instances_customer_deadline ON instances (customer_id, deadline)`,
      `CREATE INDEX instances_customer_late ON instances (customer_id, late_at) WHERE late_at IS NOT NULL`,
      // The red filter asks the deadline now, not the last heartbeat: one index less to write per heartbeat.
      `DROP INDEX instances_customer_heartbeat`,
      // E-mail notifications learn the kind late.
      `ALTER TABLE mail_subscriptions DROP CONSTRAINT mail_subscriptions_kinds`,
      `ALTER TABLE mail_subscriptions ADD CONSTRAINT mail_subscriptions_kinds CHECK (kinds <@ ARRAY['red', 'late', 'yellow', 'green']::text[])`,
    ],
  },
  {
    id: '0020-maintenance-windows',
    sql: [
      // Maintenance windows (lib/store/maintenance.ts, docs/api.md "Maintenance windows"): per
      // customer, for the whole customer, one machine, a software pattern (kept as the glob and as
      // the LIKE it becomes) or one instance. One-off: starts_at / ends_at. Recurring: a local
      // start time (minutes after midnight) in time_zone on days (ISO weekdays, 1 = Monday),
      // lasting duration_minutes, starting within [valid_from, valid_until).
      `CREATE TABLE maintenance_windows (
         ${CUSTOMER_ROW},
         scope text NOT NULL CHECK (scope IN ('customer', 'machine', 'software', 'instance')),
         machine_id uuid REFERENCES machines(id) ON DELETE CASCADE,
         instance_id uuid REFERENCES instances(id) ON DELETE CASCADE,
         software_pattern text,
         software_like text,
         kind text NOT NULL CHECK (kind IN ('once', 'recurring')),
         starts_at timestamptz,
         ends_at timestamptz,
         time_zone text,
         start_minute integer CHECK (start_minute BETWEEN 0 AND 1439),
         duration_minutes integer CHECK (duration_minutes >= 1),
         days smallint[],
         valid_from timestamptz,
         valid_until timestamptz,
         description text NOT NULL DEFAULT '',
         created_by uuid REFERENCES users(id) ON DELETE SET NULL,
         created_at timestamptz NOT NULL DEFAULT now(),
         CONSTRAINT maintenance_windows_scope CHECK (
           (machine_id IS NOT NULL) = (scope = 'machine') AND (instance_id IS NOT NULL) = (scope = 'instance')
           AND (software_pattern IS NOT NULL) = (scope = 'software') AND (software_like IS NOT NULL) = (scope = 'software')),
         CONSTRAINT maintenance_windows_times CHECK (CASE kind
           WHEN 'once' THEN starts_at IS NOT NULL AND ends_at > starts_at
           ELSE time_zone IS NOT NULL AND start_minute IS NOT NULL AND duration_minutes IS NOT NULL AND cardinality(days) > 0 END)
       )`,
      `CREATE INDEX maintenance_windows_customer ON maintenance_windows (customer_id, created_at)`,
      // Every occurrence of a window that overlaps [now - 8 days, now + 8 days], with the window's
      // scope copied (all NULL: the whole customer), so that the traffic light's SQL asks one table
      // (inMaintenanceSql and its siblings). Written with the window by the api, extended and
      // pruned hourly by a worker job (queue maintenance-occurrences, workers/main.ts).
      `CREATE TABLE maintenance_occurrences (
         window_id uuid NOT NULL REFERENCES maintenance_windows(id) ON DELETE CASCADE,
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         machine_id uuid,
         instance_id uuid,
         software_like text,
         starts_at timestamptz NOT NULL,
         ends_at timestamptz NOT NULL CHECK (ends_at > starts_at),
         PRIMARY KEY (window_id, starts_at)
       )`,
      `CREATE INDEX maintenance_occurrences_customer ON maintenance_occurrences (customer_id, ends_at)`,
      `CREATE INDEX maintenance_occurrences_ends ON maintenance_occurrences (ends_at)`,
      // The quota maintenance_windows (lib/store/quotas.ts): NULL is the default (MAINTENANCE_WINDOWS_PER_CUSTOMER).
      `ALTER TABLE customer_quotas ADD COLUMN maintenance_windows integer CHECK (maintenance_windows >= 0)`,
    ],
  },
  {
    id: '0021-maintenance-light',
    sql: [
      // The traffic light reads the windows (docs/decisions.md "Maintenance windows and the light").
      // maintenance_until: the end of the instance's latest maintenance, in progress (after now:
      // the colour is maintenance) or past (its deadline and late time start again there). Set
      // when a change is recorded (lib/store/light-events.ts), from the occurrences.
      `ALTER TABLE instances ADD COLUMN maintenance_until timestamptz`,
      `ALTER TABLE instances DROP CONSTRAINT instances_light_check`,
      `ALTER TABLE instances ADD CONSTRAINT instances_light_check CHECK (light IN ('green', 'yellow', 'late', 'red', 'grey', 'maintenance'))`,
      // The sweep's candidates leaving maintenance; the api's filter by the colour.
      `CREATE INDEX instances_light_maintenance ON instances (maintenance_until) WHERE light = 'maintenance' AND retired_at IS NULL`,
      `CREATE INDEX instances_customer_maintenance ON instances (customer_id, maintenance_until) WHERE maintenance_until IS NOT NULL`,
      // An occurrence whose instances the sweep has judged since it began (entered_at): not asked again.
      `ALTER TABLE maintenance_occurrences ADD COLUMN entered_at timestamptz`,
      `CREATE INDEX maintenance_occurrences_entering ON maintenance_occurrences (starts_at) WHERE entered_at IS NULL`,
      `ALTER TABLE mail_subscriptions DROP CONSTRAINT mail_subscriptions_kinds`,
      `ALTER TABLE mail_subscriptions ADD CONSTRAINT mail_subscriptions_kinds CHECK (kinds <@ ARRAY['red', 'late', 'yellow', 'green', 'maintenance']::text[])`,
    ],
  },
  {
    id: '0022-scale',
    sql: [
      // Postgres' JIT compiles a statement whose estimated cost is high; the traffic light's
      // recording statement over a batch of 5,000 instances spent 1.7 s of its 2.1 s compiling
      // (264 functions), every time: off for this database's sessions (docs/operations.md
      // "Postgres settings"). Changing a database's settings needs its owner or a superuser; a
      // role with neither keeps the server's setting, and the notice says so.
      `DO $$ BEGIN
         EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
       EXCEPTION WHEN insufficient_privilege THEN
         RAISE NOTICE 'jit stays as the server sets it: set jit = off for this database (docs/operations.md)';
       END $$`,
      // Every foreign key is served by an index that begins with its column: deleting a machine
      // (decommissioning, a customer's offboarding) looks its rows up in each referencing table,
      // and without one that is a scan of the whole table per machine (a customer of 100,000
      // machines took longer than five minutes). instances_live_software leaves retired rows out,
      // so it cannot serve the lookup.
      `CREATE INDEX instances_machine_id ON instances (machine_id)`,
      `CREATE INDEX artifacts_instance ON artifacts (instance_id)`,
      `CREATE INDEX artifacts_machine_id ON artifacts (machine_id)`,
      `CREATE INDEX maintenance_windows_machine ON maintenance_windows (machine_id) WHERE machine_id IS NOT NULL`,
      `CREATE INDEX maintenance_windows_instance ON maintenance_windows (instance_id) WHERE instance_id IS NOT NULL`,
      // Deleting a user (leaving, a customer's offboarding) sets its references to NULL: the same
      // lookup, once per user. Most of these columns are NULL, so the indexes hold only the rest.
      ...(
        [
          ['api_tokens', 'created_by'],
          ['machines', 'retired_by'],
          ['instances', 'retired_by'],
          ['commands', 'created_by'],
          ['conversions', 'acked_by'],
          ['invitations', 'accepted_by'],
          ['invitations', 'invited_by'],
          ['timeout_rules', 'created_by'],
          ['maintenance_windows', 'created_by'],
        ] as const
      ).map(([t, c]) => `CREATE INDEX ${t}_${c} ON ${t} (${c}) WHERE ${c} IS NOT NULL`),
    ],
  },
  {
    id: '0023-instance-lights',
    sql: [
      // The stored traffic light in a narrow table of its own (docs/architecture.md "Traffic
      // light"): a change of colour rewrote the whole `instances` row and, because five partial
      // indexes named the colour, wrote an entry into each of its 19 indexes (64-75 µs per change;
      // bench/README.md "What one change of colour costs"). Here a change writes a short row with
      // two indexes, most often on the same page (fillfactor 70).
      //   recheck_at  when the stored colour may next change with no report: its deadline, late
      //               time, the end of its warning or of its maintenance (lib/store/light-events.ts
      //               computes it with every judgement); NULL: only a report, a timeout rule or a
      //               maintenance window changes it. The sweep's one candidate index.
      // The keys are added after the copy: checked row by row during it (a foreign-key lookup
      // and a B-tree insert per instance), they made most of the copy's time.
      `CREATE TABLE instance_lights (
         instance_id uuid NOT NULL,
         light text NOT NULL DEFAULT 'grey' CONSTRAINT instance_lights_light_check
           CHECK (light IN ('green', 'yellow', 'late', 'red', 'grey', 'maintenance')),
         light_since timestamptz,
         light_reason text,
         light_seq bigint NOT NULL DEFAULT 0,
         light_judged_at timestamptz,
         recheck_at timestamptz
       ) WITH (fillfactor = 70)`,
      // Each stored colour's recheck time, as the recording statement computes it
      // (lib/domain/traffic-light.ts recheckSql, written out here as it is today), except that a
      // warning counts from its own time (the warning window is the workers' setting; early only
      // costs a judgement); and what the old sweep looked for besides: red or late whose times lie
      // ahead (a timeout rule moved them), now. Not "now" for every instance: the first sweep
      // would judge the whole fleet and repair every heartbeat key. Computed in the copy itself:
      // an UPDATE afterwards wrote every row twice, and `instances` takes no ingest write until
      // this migration commits (1,000,000 instances: 29 s with the UPDATE; bench/upgrade-lights.ts,
      // docs/operations.md "Upgrading").
      `INSERT INTO instance_lights (instance_id, light, light_since, light_reason, light_seq, light_judged_at, recheck_at)
       SELECT i.id, i.light, i.light_since, i.light_reason, i.light_seq, i.light_judged_at, CASE
         WHEN i.retired_at IS NOT NULL THEN NULL
         WHEN i.light IN ('red', 'late') AND i.status IS DISTINCT FROM 'error' AND i.deadline >= now()
              AND (i.light = 'red' OR i.late_at IS NULL OR i.late_at >= now()) THEN now()
         WHEN i.light = 'green' THEN LEAST(GREATEST(i.deadline, light_deadline(i.maintenance_until, i.timeout_s)),
                                           GREATEST(i.late_at, light_late_at(i.maintenance_until, i.timeout_s, i.late_percent)))
         WHEN i.light = 'yellow' THEN LEAST(GREATEST(i.deadline, light_deadline(i.maintenance_until, i.timeout_s)),
                                            GREATEST(i.late_at, light_late_at(i.maintenance_until, i.timeout_s, i.late_percent)),
                                            CASE WHEN i.status IS DISTINCT FROM 'degraded' THEN i.last_warning_at END)
         WHEN i.light = 'late' THEN GREATEST(i.deadline, light_deadline(i.maintenance_until, i.timeout_s))
         WHEN i.light = 'maintenance' THEN i.maintenance_until
       END
       FROM instances i`,
      `ALTER TABLE instance_lights ADD CONSTRAINT instance_lights_pkey PRIMARY KEY (instance_id)`,
      `ALTER TABLE instance_lights ADD CONSTRAINT instance_lights_instance_id_fkey FOREIGN KEY (instance_id) REFERENCES instances(id) ON DELETE CASCADE`,
      `CREATE INDEX instance_lights_recheck ON instance_lights (recheck_at) WHERE recheck_at IS NOT NULL`,
      // Every instance has its row from its first insert on (the ingest upsert's, a restore's).
      `CREATE FUNCTION instances_light_row() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         INSERT INTO instance_lights (instance_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
         RETURN NULL;
       END $$`,
      `CREATE TRIGGER instances_light_row AFTER INSERT ON instances FOR EACH ROW EXECUTE FUNCTION instances_light_row()`,
      `DROP INDEX instances_light_deadline`,
      `DROP INDEX instances_light_late`,
      `DROP INDEX instances_light_alert`,
      `DROP INDEX instances_light_yellow`,
      `DROP INDEX instances_light_maintenance`,
      `ALTER TABLE instances DROP COLUMN light, DROP COLUMN light_since, DROP COLUMN light_reason, DROP COLUMN light_seq, DROP COLUMN light_judged_at`,
    ],
  },
  {
    id: '0024-lights-by-customer',
    sql: [
      // The api shows the stored colour (docs/decisions.md "Traffic light"): a list filtered to a
      // colour, and the counts per colour, read one customer's entries of this index, never
      // another customer's (a customer with a million red instances costs nobody else's red list
      // anything). An instance never changes customer, so the copy is written once, here for the
      // existing rows and by the insert trigger for new ones.
      `ALTER TABLE instance_lights ADD COLUMN customer_id uuid`,
      `UPDATE instance_lights l SET customer_id = i.customer_id FROM instances i WHERE i.id = l.instance_id`,
      `ALTER TABLE instance_lights ALTER COLUMN customer_id SET NOT NULL`,
      `CREATE INDEX instance_lights_customer_light ON instance_lights (customer_id, light)`,
      `CREATE OR REPLACE FUNCTION instances_light_row() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         INSERT INTO instance_lights (instance_id, customer_id) VALUES (NEW.id, NEW.customer_id) ON CONFLICT DO NOTHING;
         RETURN NULL;
       END $$`,
    ],
  },
  {
    id: '0025-drop-unread-instance-indexes',
    sql: [
      // Every written heartbeat moves last_seen_at, which is indexed, so each write of an instance
      // row is a non-HOT update: a new entry in every index of the table. These three were read
      // only by the colour the api derived in SQL (0009, 0014); since the api shows the stored
      // colour (0024) nothing reads them, and each cost every row write an index entry.
      // (customer_id, status) stays: `sort=status` walks it. Cheap to drop (no rewrite); a
      // brief exclusive lock on instances, like any DROP INDEX.
      `DROP INDEX IF EXISTS instances_customer_deadline`,
      `DROP INDEX IF EXISTS instances_customer_late`,
      `DROP INDEX IF EXISTS instances_customer_warning`,
    ],
  },
  {
    id: '0026-light-outbox-per-recording',
    sql: [
      // The outbox holds one row per recording statement and customer, not one per change: the
      // changes' fields as arrays, in one order. A change's row written and deleted within seconds
      // was 9 of the 39 µs of Postgres per change while 100,000 instances turned red, and the
      // delete of a delivery's rows, planned by a hash join over a table swollen with dead rows,
      // took 4.7-5.0 s instead of 0.3-0.5 in two of seven runs (bench/README.md "One outbox row
      // per recording"). `recording`: the worker's id for the statement; with the customer, the
      // row's key (a customer's rows go with it: offboarding). The arrays are kept out of line,
      // uncompressed (STORAGE EXTERNAL): a row lives seconds, compressing it is CPU for nothing.
      // The rows waiting are converted, one row per change.
      `CREATE TABLE light_outbox_batches (
         recording uuid NOT NULL,
         customer_id uuid NOT NULL,
         customer text NOT NULL,
         cause text NOT NULL,
         recorded_at timestamptz NOT NULL,
         instance_ids uuid[] NOT NULL,
         seqs bigint[] NOT NULL,
         machine_ids uuid[] NOT NULL,
         machines text[] NOT NULL,
         softwares text[] NOT NULL,
         from_lights text[] NOT NULL,
         to_lights text[] NOT NULL,
         reasons text[] NOT NULL,
         ats timestamptz[] NOT NULL,
         PRIMARY KEY (recording, customer_id)
       )`,
      `ALTER TABLE light_outbox_batches
         ALTER COLUMN instance_ids SET STORAGE EXTERNAL, ALTER COLUMN seqs SET STORAGE EXTERNAL,
         ALTER COLUMN machine_ids SET STORAGE EXTERNAL, ALTER COLUMN machines SET STORAGE EXTERNAL,
         ALTER COLUMN softwares SET STORAGE EXTERNAL, ALTER COLUMN from_lights SET STORAGE EXTERNAL,
         ALTER COLUMN to_lights SET STORAGE EXTERNAL, ALTER COLUMN reasons SET STORAGE EXTERNAL,
         ALTER COLUMN ats SET STORAGE EXTERNAL`,
      `INSERT INTO light_outbox_batches
       SELECT gen_random_uuid(), customer_id, customer, cause, recorded_at, ARRAY[instance_id], ARRAY[seq], ARRAY[machine_id], ARRAY[machine],
              ARRAY[software], ARRAY[from_light], ARRAY[to_light], ARRAY[reason], ARRAY[at]
         FROM light_outbox`,
      `DROP TABLE light_outbox`,
      `ALTER TABLE light_outbox_batches RENAME TO light_outbox`,
      `CREATE INDEX light_outbox_recorded ON light_outbox (recorded_at)`,
      // The changes waiting, one row each (for operators and tests; the workers read the table).
      `CREATE VIEW light_outbox_changes AS
       SELECT o.recording, o.customer_id, o.customer, o.cause, o.recorded_at, e.instance_id, e.seq, e.machine_id, e.machine, e.software,
              e.from_light, e.to_light, e.reason, e.at
         FROM light_outbox o
        CROSS JOIN LATERAL unnest(o.instance_ids, o.seqs, o.machine_ids, o.machines, o.softwares, o.from_lights, o.to_lights, o.reasons, o.ats)
              AS e(instance_id, seq, machine_id, machine, software, from_light, to_light, reason, at)`,
    ],
  },
  {
    id: '0027-auth-change-notices',
    sql: [
      // Every api replica keeps the rows that say who a credential is (an API token's, a
      // session's with its user, role and customer) in memory, and drops them all on a notice on
      // this channel (api/principal-cache.ts). Statement triggers: one notice per statement, and
      // Postgres sends one per transaction for equal notices. Only what the api judges a request
      // by: a token's use (last_used_at), a session's creation and a user's password hash are not
      // changes of who is calling (a new token or session is not in any copy). Deletes cascaded
      // from users and customers fire the triggers of the rows they take with them.
      `CREATE FUNCTION notify_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN PERFORM pg_notify('${AUTH_CHANGED_CHANNEL}', TG_TABLE_NAME); RETURN NULL; END $$`,
      `CREATE TRIGGER api_tokens_auth_changed AFTER UPDATE OF token_hash, customer_id, scopes, revoked_at, expires_at, machine OR DELETE ON api_tokens
         FOR EACH STATEMENT EXECUTE FUNCTION notify_auth_changed()`,
      `CREATE TRIGGER customers_auth_changed AFTER UPDATE OF id, slug, deleting_at OR DELETE ON customers
         FOR EACH STATEMENT EXECUTE FUNCTION notify_auth_changed()`,
      `CREATE TRIGGER users_auth_changed AFTER UPDATE OF id, email, is_system_admin OR DELETE ON users
         FOR EACH STATEMENT EXECUTE FUNCTION notify_auth_changed()`,
      `CREATE TRIGGER memberships_auth_changed AFTER INSERT OR UPDATE OR DELETE ON memberships
         FOR EACH STATEMENT EXECUTE FUNCTION notify_auth_changed()`,
      `CREATE TRIGGER sessions_auth_changed AFTER UPDATE OF id, user_id, revoked_at, expires_at OR DELETE ON sessions
         FOR EACH STATEMENT EXECUTE FUNCTION notify_auth_changed()`,
    ],
  },
];

/** When the gateway received the report: a DateTime for partitions, and the exact ms. */
const RECEIVED = ['received_at DateTime', 'received_ms UInt64'].join(',\n         ');
/** Who a ClickHouse row is about: the customer (id and slug), the machine, and the instance. */
const MACHINE_COLUMNS = ['customer_id String', 'customer String', 'machine_id String', 'machine String'].join(',\n         ');
const INSTANCE_COLUMNS = [MACHINE_COLUMNS, 'software String', 'instance_id String'].join(',\n         ');

/**
 * A ClickHouse statement as data, so that one schema renders two ways (`renderClickHouse`): for
 * one server (the tables the app reads and writes are ReplacingMergeTree tables) and for a cluster
 * named by CLICKHOUSE_CLUSTER (a ReplicatedReplacingMergeTree `<name>_local` on every replica, and
 * under the app's name a Distributed table over it; every statement ON CLUSTER).
 */
export type ChStatement =
  /** `columns`: the text between the parentheses, exactly as written. */
  | { table: string; columns: string; partition: string; orderBy: string; ver?: string }
  /** `<table>_v`: the table read FINAL, each row once (for analysts). */
  | { view: string }
  | { dropView: string }
  | { addColumn: string; to: string }
  /** The table copied into one partitioned by `to` and put in its place (lib/store/repartition.ts). */
  | { repartition: string; from: string; to: string };

export interface ChMigration {
  id: string;
  statements: ChStatement[];
}

const table = (name: string, columns: string, orderBy: string, partition = 'toYYYYMM(received_at)', ver?: string): ChStatement => ({
  table: name,
  columns,
  partition,
  orderBy,
  ...(ver ? { ver } : {}),
});

export const clickhouseSchema: ChMigration[] = [
  {
    id: '0001-core',
    statements: [
      table(
        'heartbeats',
        `
         ${RECEIVED},
         ts_ms UInt64,
         ${INSTANCE_COLUMNS},
         report_id String,
         version String,
         uptime_seconds Nullable(Int64),
         pid Nullable(Int64),
         ip_addresses Array(String),
         group_name String,
         location String,
         group_priority Nullable(Int64),
         sort_priority Nullable(Int64)
       `,
        'customer_id, instance_id, received_ms, report_id',
      ),
      table(
        'diagnostics',
        `
         ${RECEIVED},
         ts_ms UInt64,
         ${INSTANCE_COLUMNS},
         report_id String,
         item UInt16,
         code Int64,
         severity UInt8,
         message String,
         suppressed UInt8,
         rule_id String
       `,
        'customer_id, instance_id, received_ms, report_id, item',
      ),
      table(
        'status_history',
        `
         ${RECEIVED},
         ${INSTANCE_COLUMNS},
         report_id String,
         status String, message String, snapshot String
       `,
        'customer_id, instance_id, received_ms, report_id',
      ),
      // Rejected ingest requests. Never the token or the body. customer_id '' = no known customer.
      table(
        'ingest_rejections',
        `
         ${RECEIVED},
         id String,
         customer_id String,
         customer String,
         token_id String,
         method String,
         path String,
         status UInt16,
         detail String,
         body_size UInt64,
         remote String,
         dropped UInt64
       `,
        'customer_id, received_ms, id',
      ),
      { view: 'heartbeats' },
      { view: 'diagnostics' },
      { view: 'status_history' },
      { view: 'ingest_rejections' },
    ],
  },
  {
    id: '0002-light-events',
    statements: [
      // Every change of an instance's traffic light. (instance_id, seq) identifies a change: a
      // retried delivery from the outbox inserts the same row again and it collapses (read FINAL).
      // at_ms: when the colour changed (a silence: last heartbeat + timeout); recorded_ms: when a
      // worker recorded it; cause: report, expiry (Redis key expired) or sweep.
      table(
        'light_events',
        `
         at DateTime,
         at_ms UInt64,
         recorded_ms UInt64,
         ${INSTANCE_COLUMNS},
         seq UInt64,
         from_light String,
         to_light String,
         reason String,
         cause String
       `,
        'customer_id, instance_id, seq',
        'toYYYYMM(at)',
      ),
      { view: 'light_events' },
    ],
  },
  {
    id: '0004-metrics',
    statements: [
      // Host metrics (issue 6): one row per record and value name. Idempotent by client_metric_id,
      // forever: the sorting key is (customer, machine, name, client_metric_id), so every copy of
      // a record collapses into one row; `ver` makes the FIRST copy the one kept (a copy sent
      // again without ts would carry a later receive time). Reads group by client_metric_id
      // (argMax by ver), which is exact even before merges and across partitions.
      table(
        'host_metrics',
        `
         ts DateTime,
         ts_ms UInt64,
         received_ms UInt64,
         ${MACHINE_COLUMNS},
         client_metric_id String,
         name String,
         value Float64,
         label_keys Array(String),
         label_values Array(String),
         report_id String,
         ver UInt64
       `,
        'customer_id, machine_id, name, client_metric_id',
        'toYYYYMM(ts)',
        'ver',
      ),
      { view: 'host_metrics' },
    ],
  },
  {
    id: '0005-clock-skew',
    statements: [
      // ts_ms holds the agent's `ts` only where it is plausible (else the receive time); clock_skew
      // = 1 flags a row whose agent sent a `ts` outside the window; agent_ts is that `ts` as sent
      // ('' when none). Analysts: WHERE clock_skew = 1 lists agents with a broken clock.
      { addColumn: 'clock_skew UInt8 DEFAULT 0', to: 'heartbeats' },
      { addColumn: "agent_ts String DEFAULT ''", to: 'heartbeats' },
      // A view's `SELECT *` keeps the columns the table had when the view was made (18.16).
      { dropView: 'heartbeats' },
      { view: 'heartbeats' },
    ],
  },
  {
    id: '0006-day-partitions',
    statements: [
      // Retention drops whole partitions (lib/store/retention.ts): a month keeps up to a month
      // more than a retention of days asks (90 days kept 90 to 121). Day partitions for the two
      // tables whose default retention is counted in days; the others keep their months (365 days
      // and more: a month is a twelfth at most, and fewer, larger partitions merge better).
      { repartition: 'heartbeats', from: 'toYYYYMM(received_at)', to: 'toYYYYMMDD(received_at)' },
      { repartition: 'ingest_rejections', from: 'toYYYYMM(received_at)', to: 'toYYYYMMDD(received_at)' },
    ],
  },
];

/** Where the schema goes: one server (no cluster), or every replica of `cluster` at once. */
export interface ChTarget {
  /** The `remote_servers` cluster (CLICKHOUSE_CLUSTER); empty or absent: one server. */
  cluster?: string;
  /** The database (cluster statements name it: ON CLUSTER runs them on hosts without a session). */
  database: string;
}

/** The table the app reads and writes; on a cluster the Distributed table over `<name>_local`. */
export const localTable = (name: string) => `${name}_local`;

/**
 * The SQL of one statement, for one server (exactly what ran before clusters) or a cluster.
 * `columns`: on a cluster, each table's columns so far (the Distributed table is made anew with
 * them after an ADD COLUMN); kept up to date by the caller's order of statements.
 */
export function renderClickHouse(st: ChStatement, target: ChTarget, columns: Map<string, string> = new Map()): string[] {
  if ('repartition' in st) return [];
  const c = target.cluster;
  if (!c) {
    if ('table' in st) {
      const engine = `ReplacingMergeTree(${st.ver ?? ''})`;
      return [`CREATE TABLE IF NOT EXISTS ${st.table} (${st.columns}) ENGINE = ${engine} PARTITION BY ${st.partition} ORDER BY (${st.orderBy})`];
    }
    if ('view' in st) return [`CREATE VIEW IF NOT EXISTS ${st.view}_v AS SELECT * FROM ${st.view} FINAL`];
    if ('dropView' in st) return [`DROP TABLE IF EXISTS ${st.dropView}_v`];
    return [`ALTER TABLE ${st.to} ADD COLUMN ${st.addColumn}`];
  }
  // 18.16's syntax for replicated engines: ZooKeeper path and replica name first, then the
  // engine's own arguments; {shard} and {replica} are each server's <macros>. The path names the
  // database, so two databases on one cluster never share a replication log.
  const db = target.database;
  const on = `ON CLUSTER ${c}`;
  // Writes reach one replica of the shard (internal_replication: the replicated table copies them
  // to the others); reads go to a healthy replica of each shard.
  const distributed = (name: string) =>
    `CREATE TABLE IF NOT EXISTS ${db}.${name} ${on} (${columns.get(name)}) ENGINE = Distributed(${c}, ${db}, ${localTable(name)})`;
  if ('table' in st) {
    columns.set(st.table, st.columns);
    const zkPath = `/clickhouse/tables/{shard}/${db}/${st.table}`;
    const engine = `ReplicatedReplacingMergeTree('${zkPath}', '{replica}'${st.ver ? `, ${st.ver}` : ''})`;
    return [
      `CREATE TABLE IF NOT EXISTS ${db}.${localTable(st.table)} ${on} (${st.columns}) ENGINE = ${engine} PARTITION BY ${st.partition} ORDER BY (${st.orderBy})`,
      distributed(st.table),
    ];
  }
  if ('view' in st) return [`CREATE VIEW IF NOT EXISTS ${db}.${st.view}_v ${on} AS SELECT * FROM ${db}.${st.view} FINAL`];
  if ('dropView' in st) return [`DROP TABLE IF EXISTS ${db}.${st.dropView}_v ${on}`];
  // ALTER ... ON CLUSTER of a replicated table runs on one replica of each shard and reaches the
  // others through ZooKeeper. A Distributed table cannot be altered ON CLUSTER when its shards
  // replicate internally (code 371), so it is made again with the new column (it holds no data).
  columns.set(st.to, `${columns.get(st.to) ?? ''},\n         ${st.addColumn}`);
  return [`ALTER TABLE ${db}.${localTable(st.to)} ${on} ADD COLUMN ${st.addColumn}`, `DROP TABLE IF EXISTS ${db}.${st.to} ${on}`, distributed(st.to)];
}

/** The ClickHouse migrations as SQL for `target` (one server unless it names a cluster), with the tables each partitions anew. */
export function clickhouseMigrationsFor(target: ChTarget): ChMigrationSql[] {
  const columns = new Map<string, string>();
  const tables = new Map<string, { orderBy: string; ver?: string }>();
  return clickhouseSchema.map((m) => {
    const repartition: RepartitionSpec[] = [];
    for (const st of m.statements) {
      if ('table' in st) tables.set(st.table, { orderBy: st.orderBy, ...(st.ver ? { ver: st.ver } : {}) });
      if ('repartition' in st) {
        const t = tables.get(st.repartition);
        if (!t) throw new Error(`repartition of ${st.repartition}: no such table before it`);
        repartition.push({ table: st.repartition, from: st.from, to: st.to, ...t });
      }
    }
    return { id: m.id, sql: m.statements.flatMap((st) => renderClickHouse(st, target, columns)), repartition };
  });
}

/** The migrations for one server: the SQL that ran before clusters, unchanged. */
export const clickhouseMigrations: ChMigrationSql[] = clickhouseMigrationsFor({ database: '' });
