// Read-API models of the traffic light: fleet summary, colour-change events, the live stream,
// webhooks and their deliveries.
import { Type, type Static } from '@sinclair/typebox';
import { Light } from './api.js';

const Time = Type.String({ format: 'date-time' });
const NTime = Type.Union([Time, Type.Null()]);

export const FleetSummary = Type.Object(
  {
    total: Type.Integer(),
    lights: Type.Object({ green: Type.Integer(), yellow: Type.Integer(), late: Type.Integer(), red: Type.Integer(), grey: Type.Integer(), maintenance: Type.Integer() }),
  },
  { $id: 'FleetSummary', description: 'instances per colour, the colours GET /api/instances shows' },
);

export const LightCause = Type.Union([Type.Literal('report'), Type.Literal('expiry'), Type.Literal('sweep')], {
  description: 'what recorded the change: a report, a Redis expiry event, the sweep',
});

export const LightEvent = Type.Object(
  {
    id: Type.String({ description: '`<instance_id>.<seq>`: identifies the change' }),
    instance_id: Type.String({ format: 'uuid' }),
    machine_id: Type.String({ format: 'uuid' }),
    machine: Type.String(),
    software: Type.String(),
    seq: Type.Integer({ description: 'number of the change for this instance, from 1' }),
    from: Light,
    to: Light,
    reason: Type.String(),
    cause: LightCause,
    at: Type.String({ format: 'date-time', description: 'when the colour changed (a silence: last heartbeat + timeout)' }),
    recorded_at: Type.String({ format: 'date-time', description: 'when a worker recorded the change' }),
  },
  { $id: 'LightEvent' },
);
export type LightEventBody = Static<typeof LightEvent>;

export const LightEventList = Type.Object({ items: Type.Array(LightEvent) }, { $id: 'LightEventList' });

export const LightEventsQuery = Type.Object({
  from: Type.Optional(Type.String({ format: 'date-time' })),
  to: Type.Optional(Type.String({ format: 'date-time' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000, default: 500 })),
});

export const Webhook = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    url: Type.String(),
    description: Type.String(),
    created_at: Time,
    last_success_at: NTime,
    last_failure_at: NTime,
    last_error: Type.Union([Type.String(), Type.Null()]),
    consecutive_failures: Type.Integer(),
  },
  { $id: 'Webhook' },
);

export const WebhookCreated = Type.Composite(
  [Webhook, Type.Object({ secret: Type.String({ description: 'signs every delivery (webhook-signature, Standard Webhooks; and X-Fleet-Signature for one release); shown only here' }) })],
  { $id: 'WebhookCreated' },
);

export const WebhookList = Type.Object({ items: Type.Array(Webhook) }, { $id: 'WebhookList' });

export const WebhookBody = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2048, description: 'http:// or https:// URL that receives the POSTs' }),
    secret: Type.Optional(Type.String({ minLength: 16, maxLength: 256, description: 'HMAC key; generated when absent' })),
    description: Type.Optional(Type.String({ maxLength: 256 })),
  },
  { $id: 'WebhookBody' },
);

export const DeliveryState = Type.Union([Type.Literal('retrying'), Type.Literal('delivered'), Type.Literal('failed')]);

export const WebhookDelivery = Type.Object(
  {
    event_id: Type.String(),
    instance_id: Type.String({ format: 'uuid' }),
    from: Light,
    to: Light,
    event_at: Time,
    state: DeliveryState,
    attempts: Type.Integer(),
    last_status: Type.Union([Type.Integer(), Type.Null()], { description: 'HTTP status of the last attempt; null when there was no answer' }),
    last_error: Type.Union([Type.String(), Type.Null()]),
    first_attempt_at: Time,
    last_attempt_at: Time,
    next_attempt_at: NTime,
    delivered_at: NTime,
  },
  { $id: 'WebhookDelivery' },
);

export const WebhookDeliveryList = Type.Object({ items: Type.Array(WebhookDelivery) }, { $id: 'WebhookDeliveryList' });

export const DeliveriesQuery = Type.Object({
  state: Type.Optional(DeliveryState),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
});
