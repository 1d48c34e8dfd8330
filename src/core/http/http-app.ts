import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import Fastify, { type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { isMetisError } from '../errors.js';
import { errorHeaders, HttpError, MAX_BODY_BYTES, sendError, validationError } from './http-util.js';
import { pathPattern, type SessionPlacement } from './openapi.js';
import { frameworkPath, paramNames, type Route, type RouteCall } from './routes.js';
import { checkChangeRequest } from './security.js';
import type { SessionRouter } from './session-router.js';

export interface HttpAppOptions {
  readonly routes: readonly Route[];
  /**
   * The checks in front of every request (Host, Origin, CORS, the token gate), before the framework sees
   * it: true to go on, false when it has answered.
   */
  readonly frontDoor: (request: IncomingMessage, response: ServerResponse) => boolean;
  readonly logger: Logger;
  /**
   * A failure of storage met by a route (a full disk, the store of record away) as the storage error to
   * answer, naming the store; any other error unchanged.
   */
  readonly storageErrorOf: (error: unknown) => unknown;
  /** Where a request naming a session runs (a cluster); every session runs here without one. */
  readonly sessionRouter?: SessionRouter;
}

export interface HttpApp {
  /** The node:http server, not yet listening; WebSocket upgrades are the caller's. */
  readonly server: Server;
  /** Every method and path template the framework serves, for `GET /openapi.json`'s coverage test. */
  readonly served: readonly { readonly method: string; readonly path: string }[];
  /**
   * Runs a request through the routes in process, past the front door: for a request whose caller
   * proved itself otherwise (a cluster node's signed forward).
   */
  readonly inject: (request: InProcessRequest) => Promise<InProcessAnswer>;
}

/** A request run in process: path and query, headers, and the JSON text of its body (or null). */
export interface InProcessRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | null;
}

export interface InProcessAnswer {
  readonly status: number;
  readonly contentType: string | null;
  readonly body: string;
}

/** Longest path parameter the router takes: client-chosen ids (an AG-UI thread, an AI SDK chat). */
const MAX_PARAM_LENGTH = 512;

/**
 * How much of a body over the cap the server still reads, and throws away, after answering 413: a
 * client that streams its body reads the answer only if the connection stays open until it is done
 * sending. Closing earlier resets the connection, and the reset can overtake the answer (issue 34).
 */
const MAX_DISCARDED_BYTES = 16 * MAX_BODY_BYTES;

/**
 * The HTTP layer on Fastify: the routes as declared (routes.ts), bodies and queries validated with their
 * zod schemas, and every failure answered as `{error: {code, message}}` with its status (docs/http-api.md).
 * A path served under other methods answers 405 with `Allow` (RFC 9110 §15.5.6).
 */
export async function createHttpApp(options: HttpAppOptions): Promise<HttpApp> {
  const { logger, frontDoor } = options;
  const unserved = unservedAnswers(options.routes);
  let server: Server | null = null;
  const app = Fastify({
    serverFactory: (handler) => {
      server = createServer({ maxHeaderSize: 16 * 1024, requestTimeout: 30_000 }, (request, response) => {
        if (!frontDoor(request, response)) return;
        if (!URL.canParse(request.url ?? '/', 'http://localhost'))
          return sendError(
            response,
            400,
            'METIS_ERR_INVALID_ARGUMENT',
            'the request target is not a valid URL',
          );
        // A method no route has (QUERY, PROPFIND, ...) is answered here: the framework would first
        // apply its own rules for that method's body (a QUERY must have a content type) and fail with
        // a 500 (issue 34).
        if (!unserved.servesMethod(request.method ?? '')) {
          const { status, code, message, headers } = unserved.answer(
            request.method ?? '',
            request.url ?? '/',
          );
          return sendError(response, status, code, message, headers);
        }
        handler(request, response);
      });
      return server;
    },
    loggerInstance: logger,
    // Fastify's default makes a pino child (a request id binding) per request; metis logs no request
    // lines, so each request shares the server's logger.
    childLoggerFactory: (parent) => parent,
    // A line per request would drown the log; failures are logged where they are answered.
    logController: new LogController({ disableRequestLogging: true }),
    exposeHeadRoutes: false,
    bodyLimit: MAX_BODY_BYTES,
    routerOptions: {
      maxParamLength: MAX_PARAM_LENGTH,
      // One value per name, the last one winning, as URLSearchParams reads a query.
      querystringParser: (text) => Object.fromEntries(new URLSearchParams(text)),
    },
    frameworkErrors: (error, request, reply) => {
      // No id is that long: the path names nothing, as an unknown id of ordinary length (issue 34).
      if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') {
        const { status, code, message, headers } = unserved.answer(request.method, request.url, true);
        return replyError(reply, status, code, message, headers);
      }
      const message =
        error.code === 'FST_ERR_BAD_URL' ? 'path: malformed percent-encoding' : 'the request is malformed';
      replyError(reply, 400, 'METIS_ERR_INVALID_ARGUMENT', message);
    },
  });

  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, text, done) => {
    if ((text as string).trim() === '') return done(null, {});
    try {
      done(null, JSON.parse(text as string));
    } catch {
      done(new HttpError(400, 'METIS_ERR_INVALID_JSON', 'request body is not valid JSON'), undefined);
    }
  });
  // Any other body is read and ignored, and then refused: by requireJsonBody on a route with a body,
  // by requireChangeRequest on one without (unless an Authorization header came with it).
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, _body, done) => done(null, undefined));
  app.setValidatorCompiler(({ schema, httpPart }) => (data: unknown) => {
    // `?token=` is the auth gate's (a GET's credential), never a route's own parameter.
    const result = (schema as z.ZodType).safeParse(httpPart === 'querystring' ? withoutToken(data) : data);
    return result.success
      ? { value: result.data }
      : { error: validationError(result.error, httpPart === 'body' ? 'body' : 'query') };
  });

  const router = options.sessionRouter;
  if (router !== undefined)
    app.addHook('preHandler', async (request, reply) => {
      const sessionId = (request.params as { session_id?: unknown } | undefined)?.session_id;
      if (typeof sessionId !== 'string') return;
      const placement = placementOf(request);
      if (placement === 'here') {
        await router.read(sessionId);
        return;
      }
      try {
        await router.gate(sessionId);
      } catch (refusal) {
        if (placement === 'owner-only') throw refusal;
        // The path and query only: a request line in absolute form names another host.
        const target = new URL(request.url, 'http://localhost');
        const answer = await router.forward(refusal, {
          method: request.method,
          url: `${target.pathname}${target.search}`,
          body: request.body ?? null,
          headers: request.headers,
        });
        if (answer === null) throw refusal;
        reply.code(answer.status).header('metis-node', answer.node);
        if (answer.contentType !== null) reply.header('content-type', answer.contentType);
        return reply.send(answer.body);
      }
    });
  app.setErrorHandler((error, request, reply) => {
    const [status, code, message] = describeFailure(error, options.storageErrorOf);
    if (status === 500) logger.error({ err: error, path: request.url.split('?')[0] }, 'request failed');
    if ((error as { code?: string }).code === 'FST_ERR_CTP_BODY_TOO_LARGE') discardRestOfBody(request, reply);
    replyError(reply, status, code, message);
  });

  app.setNotFoundHandler((request, reply) => {
    const { status, code, message, headers } = unserved.answer(request.method, request.url);
    replyError(reply, status, code, message, headers);
  });

  const served: { method: string; path: string }[] = [];
  for (const route of options.routes) {
    const names = paramNames(route.path);
    const methods = route.kind === 'raw' && route.head ? [route.method, 'HEAD'] : [route.method];
    for (const method of methods) served.push({ method, path: route.path });
    const callOf = (request: FastifyRequest): RouteCall => {
      const params = request.params as Record<string, string>;
      return {
        request: request.raw,
        params: names.map((name) => params[name]!),
        body: request.body,
        query: request.query,
        get url() {
          return new URL(request.url, 'http://localhost');
        },
      };
    };
    app.route({
      method: methods,
      url: (route.kind === 'raw' ? route.frameworkUrl : undefined) ?? frameworkPath(route.path),
      // A route that takes a body, called with none and no content type: the body it takes is JSON.
      // A change without a body still needs what only a preflighted request carries (security.ts).
      config: { placement: route.placement ?? (route.method === 'GET' ? 'here' : 'owner') },
      ...(route.body
        ? { preValidation: requireJsonBody }
        : route.method === 'GET'
          ? {}
          : { preValidation: requireChangeRequest }),
      schema: {
        ...(route.body ? { body: route.body } : {}),
        ...(route.kind === 'json' && route.query ? { querystring: route.query } : {}),
      },
      handler:
        route.kind === 'json'
          ? async (request, reply) => {
              const [status, body] = await route.handle(callOf(request));
              replyJson(reply, status, body);
            }
          : async (request, reply) => {
              reply.hijack();
              try {
                await route.handle(callOf(request), reply.raw);
              } catch (error) {
                const [status, code, message] = describeFailure(error, options.storageErrorOf);
                if (status === 500)
                  logger.error({ err: error, path: route.path }, 'request failed after its answer began');
                if (!reply.raw.headersSent) sendError(reply.raw, status, code, message);
                else reply.raw.destroy();
              }
            },
    });
  }

  await app.ready();
  if (server === null) throw new Error('the HTTP framework created no server');
  const inject = async (request: InProcessRequest): Promise<InProcessAnswer> => {
    const response = await app.inject({
      method: request.method as 'GET',
      url: request.url,
      headers: request.headers,
      ...(request.body === null ? {} : { payload: request.body }),
    });
    const contentType = response.headers['content-type'];
    return {
      status: response.statusCode,
      contentType: typeof contentType === 'string' ? contentType : null,
      body: response.body,
    };
  };
  return { server, served, inject };
}

interface UnservedAnswer {
  readonly status: number;
  readonly code: string;
  readonly message: string;
  readonly headers: Record<string, string>;
}

/**
 * What the server answers for a request no route takes: 405 with `Allow` (RFC 9110 §15.5.6) when routes
 * serve the path under other methods, else 404. `tooLong`: the path has the shape of a route but an id
 * longer than any (MAX_PARAM_LENGTH), so it names nothing even under a method its routes serve.
 */
function unservedAnswers(routes: readonly Route[]) {
  // A route the framework serves under a wildcard (`/assets/*`) takes every path below its prefix.
  const patterns = routes.map((route) => ({
    methods: route.kind === 'raw' && route.head ? [route.method, 'HEAD'] : [route.method],
    pattern:
      route.kind === 'raw' && route.frameworkUrl?.endsWith('*')
        ? new RegExp(`^${route.frameworkUrl.slice(0, -1).replace(/[.*+?^$()|[\]\\]/g, '\\$&')}`)
        : pathPattern(route.path),
  }));
  const methods = new Set(patterns.flatMap((route) => route.methods));
  return {
    servesMethod: (method: string) => methods.has(method),
    answer(method: string, url: string, tooLong = false): UnservedAnswer {
      const path = url.split('?')[0]!;
      const allowed = new Set(
        patterns.filter(({ pattern }) => pattern.test(path)).flatMap((route) => route.methods),
      );
      if (allowed.size === 0 || allowed.has(method))
        return {
          status: 404,
          code: 'METIS_ERR_NOT_FOUND',
          message: tooLong
            ? `no such resource: an id in ${shortened(path)} is longer than ${MAX_PARAM_LENGTH} characters`
            : `no route ${path}`,
          headers: {},
        };
      return {
        status: 405,
        code: 'METIS_ERR_METHOD_NOT_ALLOWED',
        message: `${method} is not allowed on ${shortened(path)}`,
        headers: { allow: [...allowed].sort().join(', ') },
      };
    },
  };
}

/** A path as an error message quotes it: whole up to 200 characters. */
function shortened(path: string): string {
  return path.length <= 200 ? path : `${path.slice(0, 200)}… (${path.length} characters)`;
}

/**
 * After a 413, reads the rest of the body and throws it away (up to MAX_DISCARDED_BYTES), and keeps the
 * connection: the framework would close it at once, and the reset that answers the bytes the client is
 * still sending can reach it before the 413 does. A client that sends more than the bound is cut off.
 */
function discardRestOfBody(request: FastifyRequest, reply: FastifyReply): void {
  const raw = request.raw;
  const declared = Number(request.headers['content-length']);
  if (raw.complete || declared > MAX_DISCARDED_BYTES) return;
  reply.removeHeader('connection');
  let discarded = 0;
  raw.on('data', (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > MAX_DISCARDED_BYTES) raw.socket.destroy();
  });
  raw.resume();
}

function placementOf(request: FastifyRequest): SessionPlacement {
  return (request.routeOptions.config as { placement?: SessionPlacement }).placement ?? 'here';
}

async function requireChangeRequest(request: FastifyRequest): Promise<void> {
  const verdict = checkChangeRequest(request.raw);
  if (!verdict.ok) throw new HttpError(verdict.status, verdict.code, verdict.message);
}

async function requireJsonBody(request: FastifyRequest): Promise<void> {
  if (!/^application\/json\s*(;|$)/i.test(request.headers['content-type'] ?? ''))
    throw unsupportedMediaType();
}

function unsupportedMediaType(): HttpError {
  return new HttpError(415, 'METIS_ERR_UNSUPPORTED_MEDIA_TYPE', 'request body must be application/json');
}

/** A failure as the status, code and message the client gets. */
function describeFailure(
  error: unknown,
  storageErrorOf: HttpAppOptions['storageErrorOf'],
): [number, string, string] {
  if (error instanceof HttpError) return [error.status, error.code, error.message];
  if (isMetisError(error)) return [error.status, error.code, error.message];
  switch ((error as { code?: string }).code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return [415, 'METIS_ERR_UNSUPPORTED_MEDIA_TYPE', unsupportedMediaType().message];
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return [413, 'METIS_ERR_BODY_TOO_LARGE', 'request body exceeds 1 MiB'];
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return [400, 'METIS_ERR_INVALID_ARGUMENT', 'content-length does not match the body'];
  }
  // Any other refusal of the framework's (a request it finds malformed) is the client's, not a bug.
  const framework = error as { code?: unknown; statusCode?: unknown };
  if (
    typeof framework.code === 'string' &&
    framework.code.startsWith('FST_ERR_') &&
    typeof framework.statusCode === 'number' &&
    framework.statusCode >= 400 &&
    framework.statusCode < 500
  )
    return [400, 'METIS_ERR_INVALID_ARGUMENT', 'the request is malformed'];
  // A read that met a full disk, an I/O error or a store away is a storage failure, not a metis bug.
  const mapped = storageErrorOf(error);
  if (isMetisError(mapped)) return [mapped.status, mapped.code, mapped.message];
  return [500, 'METIS_ERR_INTERNAL', 'internal error'];
}

const JSON_HEADERS = {
  'content-type': 'application/json; charset=utf-8',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
};

function replyJson(reply: FastifyReply, status: number, body: unknown, headers: Record<string, string> = {}) {
  reply
    .code(status)
    .headers({ ...headers, ...JSON_HEADERS })
    .send(JSON.stringify(body));
}

function replyError(
  reply: FastifyReply,
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  replyJson(reply, status, { error: { code, message } }, errorHeaders(code, headers));
}

/** A query without its `token` parameter, which authenticated the request (auth-gate.ts). */
function withoutToken(query: unknown): unknown {
  if (query === null || typeof query !== 'object' || !('token' in query)) return query;
  const { token: _token, ...rest } = query as Record<string, unknown>;
  return rest;
}
