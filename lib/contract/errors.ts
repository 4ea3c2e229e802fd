// Errors that carry an HTTP status and the `detail` the client sees. Every error body the service
// writes is `{"detail": "<string>"}`; a schema violation may add `errors: [{path, message}]`.

export interface FieldError {
  path: string;
  message: string;
}

export class HttpError extends Error {
  readonly status: number;
  readonly errors?: FieldError[];
  readonly retryAfterS?: number;
  /** 405: the methods the path has (the `Allow` header). */
  readonly allow?: string[];
  /** Close the connection after the answer (framing that cannot be trusted). */
  readonly close?: boolean;
  constructor(status: number, detail: string, opts: { errors?: FieldError[]; retryAfterS?: number; allow?: string[]; close?: boolean } = {}) {
    super(detail);
    this.name = 'HttpError';
    this.status = status;
    this.errors = opts.errors;
    this.retryAfterS = opts.retryAfterS;
    this.allow = opts.allow;
    this.close = opts.close;
  }
  get detail(): string {
    return this.message;
  }
  body(): string {
    return JSON.stringify(this.errors ? { detail: this.message, errors: this.errors } : { detail: this.message });
  }
  isClientError(): boolean {
    return this.status >= 400 && this.status < 500;
  }
  isUnavailable(): boolean {
    return this.status === 503;
  }
}

export const badRequest = (detail: string) => new HttpError(400, detail);
export const forbidden = (detail: string) => new HttpError(403, detail);
export const notFound = (detail = 'not found') => new HttpError(404, detail);
export const unprocessable = (detail: string, errors?: FieldError[]) => new HttpError(422, detail, { errors });

/** The queue (JetStream) did not durably accept a report: the client must retry. */
export class QueueUnavailableError extends HttpError {
  constructor(detail: string, retryAfterS = 1) {
    super(503, detail, { retryAfterS });
    this.name = 'QueueUnavailableError';
  }
}

const STATUS_TEXT: Record<number, string> = {
  200: 'OK',
  201: 'Created',
  202: 'Accepted',
  204: 'No Content',
  206: 'Partial Content',
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  411: 'Length Required',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  416: 'Range Not Satisfiable',
  422: 'Unprocessable Entity',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
  507: 'Insufficient Storage',
};

export function statusLine(status: number): string {
  return `${status} ${STATUS_TEXT[status] ?? 'Unknown'}`;
}
