// Timeout rules (docs/api.md "Timeout rules"; the model: lib/store/timeout-rules.ts): how long an
// instance may stay silent before red, and the share of that after which it turns late, for the
// whole customer, a software pattern or one instance.
import { Type, type Static } from '@sinclair/typebox';

const Scope = Type.Union([Type.Literal('customer'), Type.Literal('software'), Type.Literal('instance')], {
  description: 'customer: every instance of the customer; software: instances whose software matches software_pattern; instance: one instance',
});
/** The largest timeout a rule may set: 30 days (the smallest is TIMEOUT_RULE_MIN_S). */
export const TIMEOUT_RULE_MAX_S = 2_592_000;
const TimeoutS = Type.Integer({ minimum: 1, maximum: TIMEOUT_RULE_MAX_S, description: 'seconds of silence before red (at least TIMEOUT_RULE_MIN_S, 30 by default; at most 30 days)' });
const LatePercent = Type.Integer({ minimum: 0, maximum: 99, description: 'per cent of the timeout after which a silent instance turns late (0: never late)' });
const Pattern = Type.String({
  minLength: 1,
  maxLength: 128,
  description: 'a glob over the software name: * matches any run of characters, everything else itself (case-sensitive)',
});
const Description = Type.String({ maxLength: 500 });

export const TimeoutRule = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    scope: Scope,
    software_pattern: Type.Union([Type.String(), Type.Null()]),
    instance_id: Type.Union([Type.String({ format: 'uuid' }), Type.Null()]),
    machine: Type.Union([Type.String(), Type.Null()], { description: "scope instance: its machine's name" }),
    software: Type.Union([Type.String(), Type.Null()], { description: "scope instance: the instance's software" }),
    timeout_s: Type.Union([TimeoutS, Type.Null()], { description: 'null: this rule leaves the timeout to a less specific rule or the default' }),
    late_percent: Type.Union([LatePercent, Type.Null()], { description: 'null: this rule leaves the late share to a less specific rule or the default' }),
    description: Type.String(),
    created_at: Type.String({ format: 'date-time' }),
    updated_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'TimeoutRule' },
);
export type TimeoutRule = Static<typeof TimeoutRule>;

export const TimeoutRuleChanged = Type.Object(
  {
    rule: TimeoutRule,
    instances_changed: Type.Integer({ description: 'instances whose timeout or late share this change altered (their deadlines follow at once)' }),
  },
  { $id: 'TimeoutRuleChanged' },
);

export const TimeoutRuleList = Type.Object(
  {
    items: Type.Array(TimeoutRule),
    defaults: Type.Object(
      {
        timeout_s: Type.Integer({ description: 'HEARTBEAT_TIMEOUT_S: the timeout where no rule sets one' }),
        late_percent: Type.Integer({ description: 'HEARTBEAT_LATE_PERCENT: the late share where no rule sets one (0: none)' }),
      },
      { description: 'what an instance without a rule gets, as the workers apply it' },
    ),
    min_timeout_s: Type.Integer({ description: 'TIMEOUT_RULE_MIN_S: the shortest timeout a rule may set' }),
  },
  { $id: 'TimeoutRuleList' },
);

export const TimeoutRuleInput = Type.Object(
  {
    scope: Scope,
    software_pattern: Type.Optional(Pattern),
    instance_id: Type.Optional(Type.String({ format: 'uuid' })),
    timeout_s: Type.Optional(TimeoutS),
    late_percent: Type.Optional(LatePercent),
    description: Type.Optional(Description),
  },
  {
    $id: 'TimeoutRuleInput',
    additionalProperties: false,
    description: 'software_pattern with scope software, instance_id with scope instance, neither with scope customer; at least one of timeout_s and late_percent',
  },
);
export type TimeoutRuleInput = Static<typeof TimeoutRuleInput>;

/**
 * A nullable integer as one schema (`type: ['integer', 'null']`), not a union: the api's validator
 * coerces types, and would turn null into 0 in a union's integer branch (or 0 into null in its null
 * branch), clearing a value into "never late".
 */
const NullableInt = (s: typeof TimeoutS) => Type.Unsafe<number | null>({ ...s, type: ['integer', 'null'] });

export const TimeoutRuleUpdate = Type.Object(
  {
    timeout_s: Type.Optional(NullableInt(TimeoutS)),
    late_percent: Type.Optional(NullableInt(LatePercent)),
    description: Type.Optional(Description),
  },
  { $id: 'TimeoutRuleUpdate', additionalProperties: false, description: 'absent: unchanged; null: cleared (a rule keeps at least one of the two)' },
);
export type TimeoutRuleUpdate = Static<typeof TimeoutRuleUpdate>;
