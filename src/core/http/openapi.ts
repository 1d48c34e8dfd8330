import { z } from 'zod';
import { ERROR_TABLE } from '../errors.js';

/**
 * What a route declares about itself: the router matches and validates with it, and `GET
 * /openapi.json` is generated from it, so the description cannot drift from what the server does.
 */
/** Where a request naming a session runs in a cluster (RouteDoc.placement). */
export type SessionPlacement = 'here' | 'owner' | 'owner-only';

export interface RouteDoc {
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** OpenAPI path template: `/sessions/{session_id}/turns`. */
  readonly path: string;
  readonly summary: string;
  readonly body?: z.ZodType;
  readonly query?: z.ZodType;
  readonly success: {
    readonly status: number;
    readonly description: string;
    readonly contentType?: string;
    /**
     * The answer's shape, for the document only: answers are never validated or serialized through it,
     * so declaring one cannot change what a client receives.
     */
    readonly schema?: z.ZodType;
    /** A stream's answer: the component (in `#/components/schemas`) each of its events' data is. */
    readonly frames?: string;
  };
  /** The error codes of this route (METIS_ERR_*); the ones every route shares are added. */
  readonly errors: readonly string[];
  /** Open to everyone (no token): `/healthz`, `/openapi.json` and the dashboard's sign-in. */
  readonly open?: boolean;
  /**
   * Where a request naming a session runs in a cluster (http-app.ts): `here`, on any node once it has
   * brought the session up to date; `owner`, forwarded to the node running the session; `owner-only`,
   * on that node or refused naming it (a streamed answer cannot travel back as one). Default: `here`
   * for a GET, `owner` for a change.
   */
  readonly placement?: SessionPlacement;
}

/** What a route that writes answers while storage is out (docs/decisions.md "Storage that never blocks"). */
export const STORAGE_ERRORS = [
  'METIS_ERR_STORAGE_BUSY',
  'METIS_ERR_STORAGE_FULL',
  'METIS_ERR_STORAGE_IO',
  'METIS_ERR_STORE_UNAVAILABLE',
] as const;

/** Codes the HTTP layer answers with, beside those of ERROR_TABLE. */
const HTTP_ERRORS: Record<string, number> = {
  METIS_ERR_UNAUTHORIZED: 401,
  METIS_ERR_FORBIDDEN_HOST: 403,
  METIS_ERR_FORBIDDEN_ORIGIN: 403,
  METIS_ERR_NOT_FOUND: 404,
  METIS_ERR_METHOD_NOT_ALLOWED: 405,
  METIS_ERR_BODY_TOO_LARGE: 413,
  METIS_ERR_UNSUPPORTED_MEDIA_TYPE: 415,
  METIS_ERR_INVALID_JSON: 400,
  METIS_ERR_INTERNAL: 500,
};

/** What any route may answer: the checks in front of every request (docs/http-api.md "Security rules"). */
const EVERY_ROUTE = ['METIS_ERR_FORBIDDEN_HOST', 'METIS_ERR_FORBIDDEN_ORIGIN', 'METIS_ERR_INTERNAL'];
const GUARDED = ['METIS_ERR_UNAUTHORIZED', 'METIS_ERR_TOO_MANY_ATTEMPTS'];
const WITH_BODY = [
  'METIS_ERR_INVALID_JSON',
  'METIS_ERR_UNSUPPORTED_MEDIA_TYPE',
  'METIS_ERR_BODY_TOO_LARGE',
  'METIS_ERR_INVALID_ARGUMENT',
];

export function statusOfCode(code: string): number {
  const known = (ERROR_TABLE as Record<string, { status: number }>)[code]?.status ?? HTTP_ERRORS[code];
  if (known === undefined) throw new Error(`no HTTP status known for ${code}`);
  return known;
}

const ErrorBody = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: { code: { type: 'string' }, message: { type: 'string' } },
    },
  },
};

/**
 * `io: 'input'` for answers too: it leaves a plain `z.object` without `additionalProperties: false`, so
 * an answer that gains a field (an additive change) still matches what older clients were generated from.
 */
function jsonSchemaOf(schema: z.ZodType): Record<string, unknown> {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  return rest;
}

/** What `GET /openapi.json` answers (its own 200 is described with this too). */
export const OpenApiDocumentSchema = z.object({
  openapi: z.string(),
  info: z.object({ title: z.string(), version: z.string(), description: z.string() }),
  servers: z.array(z.object({ url: z.string() })),
  security: z.array(z.record(z.string(), z.array(z.string()))),
  paths: z.record(z.string(), z.record(z.string(), z.unknown())),
  components: z.object({
    schemas: z.record(z.string(), z.unknown()),
    securitySchemes: z.record(z.string(), z.unknown()),
  }),
});

/** The OpenAPI 3.1 document of these routes. */
export function openApiDocument(
  routes: readonly RouteDoc[],
  version: string,
  /** Components beside `Error`: what the streams carry (api/stream-schemas.ts). */
  schemas: Readonly<Record<string, unknown>> = {},
): z.output<typeof OpenApiDocumentSchema> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const codes = new Set([
      ...EVERY_ROUTE,
      ...(route.open ? [] : GUARDED),
      ...(route.body ? WITH_BODY : []),
      ...(route.query ? ['METIS_ERR_INVALID_ARGUMENT'] : []),
      // An id longer than any the router takes names nothing (http-app.ts MAX_PARAM_LENGTH).
      ...(route.path.includes('{') ? ['METIS_ERR_NOT_FOUND'] : []),
      ...route.errors,
    ]);
    const byStatus = new Map<number, string[]>();
    for (const code of codes)
      byStatus.set(statusOfCode(code), [...(byStatus.get(statusOfCode(code)) ?? []), code]);
    const responses: Record<string, unknown> = {
      [route.success.status]: {
        description: route.success.description,
        ...(route.success.status === 204
          ? {}
          : {
              content: {
                [route.success.contentType ?? 'application/json']: {
                  schema: route.success.frames
                    ? streamSchema(route.success.contentType ?? 'text/event-stream', route.success.frames)
                    : route.success.schema
                      ? jsonSchemaOf(route.success.schema)
                      : {},
                },
              },
            }),
      },
    };
    for (const [status, list] of [...byStatus].sort(([a], [b]) => a - b))
      responses[status] = {
        description: list.sort().join(', '),
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      };
    const parameters = [
      ...[...route.path.matchAll(/\{([^}]+)\}/g)].map((m) => ({
        name: m[1],
        in: 'path',
        required: true,
        schema: { type: 'string' },
      })),
      ...(route.query ? queryParameters(route.query) : []),
    ];
    paths[route.path] ??= {};
    paths[route.path]![route.method.toLowerCase()] = {
      summary: route.summary,
      operationId: operationId(route),
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(route.body
        ? {
            requestBody: {
              required: true,
              content: { 'application/json': { schema: jsonSchemaOf(route.body) } },
            },
          }
        : {}),
      responses,
      ...(route.open ? { security: [] } : {}),
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'metis',
      version,
      description:
        'The HTTP API of metis serve (docs/http-api.md). The WebSocket stream is GET /sessions/{session_id}/stream?attach=<token> (an upgrade), described in docs/http-api.md.',
    },
    servers: [{ url: 'http://127.0.0.1:8421' }],
    security: [{ bearer: [] }, { query: [] }],
    paths,
    components: {
      schemas: { Error: ErrorBody, ...schemas },
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description: "The server's token, or the dashboard's access key (mdk_…). No cookie authenticates.",
        },
        query: { type: 'apiKey', in: 'query', name: 'token', description: 'GET requests only' },
      },
    },
  };
}

/**
 * A streamed answer is one string in JSON Schema's terms; `contentSchema` says what each event's data
 * is (OpenAPI 3.1 has no item schema for a stream; 3.2's `itemSchema` says the same).
 */
function streamSchema(contentType: string, component: string): Record<string, unknown> {
  return {
    type: 'string',
    contentMediaType: contentType,
    description: `A stream of events; the data of each is a ${component}.`,
    contentSchema: { $ref: `#/components/schemas/${component}` },
  };
}

function queryParameters(schema: z.ZodType): Record<string, unknown>[] {
  const json = jsonSchemaOf(schema) as { properties?: Record<string, unknown>; required?: string[] };
  return Object.entries(json.properties ?? {}).map(([name, property]) => ({
    name,
    in: 'query',
    required: json.required?.includes(name) ?? false,
    schema: property,
  }));
}

function operationId(route: RouteDoc): string {
  const words = route.path
    .split('/')
    .filter(Boolean)
    .map((part) =>
      part
        .replace(/[{}]/g, '')
        .replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? '').toUpperCase()),
    );
  return [route.method.toLowerCase(), ...words.map((w) => w.charAt(0).toUpperCase() + w.slice(1))].join('');
}

/** The regular expression of a path template, with a capture group per parameter. */
export function pathPattern(template: string): RegExp {
  const literal = (part: string) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&');
  return new RegExp(
    `^${template
      .split(/\{[^}]+\}/)
      .map(literal)
      .join('([^/]+)')}$`,
  );
}
