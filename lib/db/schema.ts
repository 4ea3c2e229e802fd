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
    id: '0006-commands',
    sql: [
      // Agent commands (docs/api.md "Agent commands"). A command is queued by a dashboard user for
      // one instance, offered to the agent in the answer to each heartbeat or status report until
      // acked, and ends succeeded, failed, expired (queued too long), timed_out (delivered, no ack
      // in time) or cancelled. Deadlines are fixed when the state is entered (expires_at at queue
      // time, ack_deadline at the first delivery), so the sweep only compares times.
      `CREATE TABLE commands (
         id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         customer_id uuid NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
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
];
