// JetStream API error codes by name (nats-server's errors.json), as nats.js 3 names them in
// `JetStreamApiCodes`; nats.js 2 gives only the number (`api_error.err_code`).
export const JetStreamApiCodes = {
  ConsumerNotFound: 10014,
  StreamNotFound: 10059,
  /** A publish that expected another last sequence (optimistic concurrency of KV and object store). */
  StreamWrongLastSequence: 10071,
  /** The stream refused to store: its limits (maximum bytes, messages) are reached. */
  StreamStoreFailed: 10077,
  /** The server has no room for the stream's storage. */
  StorageResourcesExceeded: 10047,
  InsufficientResources: 10023,
  /** A message get found nothing at (or after) the sequence asked for. */
  NoMessageFound: 10037,
  /** A message delete named a sequence the stream does not hold (deleted already). */
  SequenceNotFound: 10043,
} as const;

/** The JetStream API error code of an error from nats.js, if it carries one. */
export function jsApiCode(e: unknown): number | undefined {
  return (e as { api_error?: { err_code?: number } })?.api_error?.err_code;
}

/** The stream or consumer does not exist (also nats.js's own 404 for a missing consumer). */
export function isNotFound(e: unknown): boolean {
  const code = jsApiCode(e);
  return code === JetStreamApiCodes.StreamNotFound || code === JetStreamApiCodes.ConsumerNotFound || (e as { code?: string })?.code === '404';
}
