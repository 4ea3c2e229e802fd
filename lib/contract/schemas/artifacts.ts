// Chunked, resumable artifact uploads (docs/decisions.md "Ingest": artifact-init, -chunk, -status,
// -complete) and the read models of stored artifacts.
import { Type, type Static } from '@sinclair/typebox';
import { Slug, Uuid, Text } from './common.js';

export const ArtifactInit = Type.Object(
  {
    filename: Text({ minLength: 1, maxLength: 255, description: 'shown in listings and in the download (Content-Disposition)' }),
    size: Type.Integer({ minimum: 0, description: 'bytes; at most ARTIFACT_MAX_BYTES (2 GiB)' }),
    sha256: Type.Optional(Type.String({ pattern: '^[0-9a-fA-F]{64}$', description: 'hex SHA-256 of the whole file; checked at complete' })),
    content_type: Type.Optional(
      Type.String({ maxLength: 255, pattern: "^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+$", description: 'default application/octet-stream' }),
    ),
  },
  { $id: 'ArtifactInit' },
);
/** The answer to artifact-init: where the client's chunks go. */
export const ArtifactInitAnswer = Type.Object(
  {
    upload_id: Uuid,
    chunk_size: Type.Integer({ description: 'every chunk but the last has exactly this many bytes' }),
    chunks: Type.Integer({ description: 'number of chunks: ceil(size / chunk_size)' }),
    expires_at: Type.String({ format: 'date-time', description: 'an upload not completed by then is deleted' }),
  },
  { $id: 'ArtifactInitAnswer' },
);

export const UploadParams = Type.Object({ customer: Slug, machine: Slug, software: Slug, upload_id: Uuid });
export const ChunkParams = Type.Object({
  customer: Slug,
  machine: Slug,
  software: Slug,
  upload_id: Uuid,
  n: Type.String({ pattern: '^[0-9]{1,9}$', description: 'chunk number, from 0' }),
});

export const ChunkAnswer = Type.Object({ ok: Type.Literal(true), received: Type.Array(Type.Integer()) }, { $id: 'ChunkAnswer' });

export const UploadStatus = Type.Object(
  {
    upload_id: Uuid,
    state: Type.Union([Type.Literal('open'), Type.Literal('complete')]),
    filename: Type.String(),
    size: Type.Integer(),
    chunk_size: Type.Integer(),
    chunks: Type.Integer(),
    received: Type.Array(Type.Integer()),
    missing: Type.Array(Type.Integer()),
    expires_at: Type.String({ format: 'date-time' }),
    artifact_id: Type.Union([Uuid, Type.Null()]),
  },
  { $id: 'UploadStatus' },
);

export const CompleteAnswer = Type.Object({ artifact_id: Uuid }, { $id: 'CompleteAnswer' });

// Read API.
export const Artifact = Type.Object(
  {
    id: Uuid,
    machine_id: Uuid,
    machine: Type.String(),
    instance_id: Uuid,
    software: Type.String(),
    filename: Type.String(),
    size: Type.Integer(),
    sha256: Type.Union([Type.String(), Type.Null()], { description: 'as given at init (checked at complete); null when none was given' }),
    content_type: Type.String(),
    uploaded_at: Type.String({ format: 'date-time' }),
    download: Type.String({ description: 'path of the download endpoint' }),
  },
  { $id: 'Artifact' },
);

export const ArtifactList = Type.Object({ items: Type.Array(Artifact), total: Type.Integer() }, { $id: 'ArtifactList' });

export const ArtifactListQuery = Type.Object({
  software: Type.Optional({ ...Slug, description: 'only this software (since 5.8.0)' }),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
  offset: Type.Optional(Type.Integer({ minimum: 0, default: 0 })),
});

export type ArtifactInit = Static<typeof ArtifactInit>;
