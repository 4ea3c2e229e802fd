// Every table's schema, Postgres and ClickHouse, as ordered migrations. Append; never edit an
// applied entry. `fleet migrate` (and every start) applies what is missing, under an advisory lock.
//
// ClickHouse DDL must run on Debian's ClickHouse 18.16 and on current releases: no DateTime64, no
// LowCardinality, no TTL, no Map/JSON. Times are kept as UInt64 milliseconds next to a DateTime for
// partitioning. Every table is a ReplacingMergeTree whose sorting key ends in the id of the report
// (or record) that produced the row: a batch applied twice collapses to one row; query with FINAL
// (or through the *_v views) to see each row once before background merges have run.

export interface Migration {
  id: string;
  sql: string[];
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
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
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
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
         slug text NOT NULL,
         first_seen_at timestamptz NOT NULL,
         last_seen_at timestamptz NOT NULL,
         UNIQUE (customer_id, slug)
       )`,
      // One row per software on a machine. Times are receive times (the gateway's clock).
      `CREATE TABLE instances (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
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
      // (older accounts log in with it). Passwords: scrypt (lib/accounts.ts).
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
    id: '0005-metrics-artifacts',
    sql: [
      // A completed artifact upload (issue 6). The bytes stay in the JetStream object store as the
      // upload's chunks (lib/artifacts.ts); this row is written by a worker from the queue message
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
];

const ENGINE = (orderBy: string, partition = 'toYYYYMM(received_at)') =>
  `ENGINE = ReplacingMergeTree() PARTITION BY ${partition} ORDER BY (${orderBy})`;

export const clickhouseMigrations: Migration[] = [
  {
    id: '0001-core',
    sql: [
      `CREATE TABLE IF NOT EXISTS heartbeats (
         received_at DateTime,
         received_ms UInt64,
         ts_ms UInt64,
         customer_id String,
         customer String,
         machine_id String,
         machine String,
         software String,
         instance_id String,
         report_id String,
         version String,
         uptime_seconds Nullable(Int64),
         pid Nullable(Int64),
         ip_addresses Array(String),
         group_name String,
         location String,
         group_priority Nullable(Int64),
         sort_priority Nullable(Int64)
       ) ${ENGINE('customer_id, instance_id, received_ms, report_id')}`,
      `CREATE TABLE IF NOT EXISTS diagnostics (
         received_at DateTime,
         received_ms UInt64,
         ts_ms UInt64,
         customer_id String,
         customer String,
         machine_id String,
         machine String,
         software String,
         instance_id String,
         report_id String,
         item UInt16,
         code Int64,
         severity UInt8,
         message String,
         suppressed UInt8,
         rule_id String
       ) ${ENGINE('customer_id, instance_id, received_ms, report_id, item')}`,
      `CREATE TABLE IF NOT EXISTS status_history (
         received_at DateTime,
         received_ms UInt64,
         customer_id String,
         customer String,
         machine_id String,
         machine String,
         software String,
         instance_id String,
         report_id String,
         status String,
         message String,
         snapshot String
       ) ${ENGINE('customer_id, instance_id, received_ms, report_id')}`,
      // Rejected ingest requests. Never the token or the body. customer_id '' = no known customer.
      `CREATE TABLE IF NOT EXISTS ingest_rejections (
         received_at DateTime,
         received_ms UInt64,
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
       ) ${ENGINE('customer_id, received_ms, id')}`,
      `CREATE VIEW IF NOT EXISTS heartbeats_v AS SELECT * FROM heartbeats FINAL`,
      `CREATE VIEW IF NOT EXISTS diagnostics_v AS SELECT * FROM diagnostics FINAL`,
      `CREATE VIEW IF NOT EXISTS status_history_v AS SELECT * FROM status_history FINAL`,
      `CREATE VIEW IF NOT EXISTS ingest_rejections_v AS SELECT * FROM ingest_rejections FINAL`,
    ],
  },
  {
    id: '0004-metrics',
    sql: [
      // Host metrics (issue 6): one row per record and value name. Idempotent by client_metric_id,
      // forever: the sorting key is (customer, machine, name, client_metric_id), so every copy of
      // a record collapses into one row; `ver` makes the FIRST copy the one kept (a copy sent
      // again without ts would carry a later receive time). Reads group by client_metric_id
      // (argMax by ver), which is exact even before merges and across partitions.
      `CREATE TABLE IF NOT EXISTS host_metrics (
         ts DateTime,
         ts_ms UInt64,
         received_ms UInt64,
         customer_id String,
         customer String,
         machine_id String,
         machine String,
         client_metric_id String,
         name String,
         value Float64,
         label_keys Array(String),
         label_values Array(String),
         report_id String,
         ver UInt64
       ) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(ts) ORDER BY (customer_id, machine_id, name, client_metric_id)`,
      `CREATE VIEW IF NOT EXISTS host_metrics_v AS SELECT * FROM host_metrics FINAL`,
    ],
  },
];
