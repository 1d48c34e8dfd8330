import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { EventBus } from '../bus/event-bus.js';
import type { GatewayConfig } from '../config/gateway-schema.js';
import { SYSTEM_SESSION_ID } from '../events/envelope.js';
import { newId } from '../events/ids.js';
import type { AuthThrottleOptions } from '../http/auth-throttle.js';
import { writeEventStreamHead } from '../http/http-util.js';
import { type RawRoute, rawRoute } from '../http/routes.js';
import { usdDecimal } from '../runtime/pricing.js';
import type { Runtime } from '../runtime/runtime.js';
import type { GatewaySpendRow } from '../store/gateway-spend.js';
import type { SharedSpendReader } from '../store/postgres/pg-gateway-spend.js';
import { AuthFailures } from './auth-failures.js';
import { GatewayError } from './gateway-error.js';
import { GatewayTurns } from './gateway-turn.js';
import { anthropicMessages } from './inbound/anthropic-messages.js';
import type { InboundFormat, InboundShape } from './inbound/inbound-request.js';
import { openaiChat } from './inbound/openai-chat.js';
import { openaiResponses } from './inbound/openai-responses.js';
import { anthropicErrorBody, openaiErrorBody } from './inbound/provider-errors.js';
import { KeyRing } from './key-ring.js';
import type { StoredKey } from './keystore.js';
import { chooseModel, listedModels } from './model-choice.js';
import { QuotaBook } from './quotas.js';

export interface GatewayOptions {
  readonly config: GatewayConfig;
  /** The keystore file (keystore.ts `keystorePath`). */
  readonly keystorePath: string;
  /** The slow-down of wrong keys (defaults as for the server's token). */
  readonly authThrottle?: Partial<AuthThrottleOptions>;
  /**
   * The spend every node of a shared store (PostgreSQL) holds, read again every
   * SHARED_SPEND_REFRESH_MS: caps then bound all the nodes' calls together. None: this node's store.
   */
  readonly sharedSpend?: SharedSpendReader;
}

/** What the gateway needs of the server: the bus its events go to, and the spend stored this month. */
export interface GatewayStore {
  readonly bus: EventBus;
  /** Gateway calls stored since `sinceUs` (store/gateway-spend.ts): the quotas start from them. */
  readonly spendSince: (sinceUs: number) => readonly GatewaySpendRow[];
}

/** The gateway's routes, and what stops its timer and connections. */
export interface GatewayMount {
  readonly routes: RawRoute[];
  close(): Promise<void>;
}

/** How often a node reads the shared store's spend (each read: one aggregate over this month's calls). */
const SHARED_SPEND_REFRESH_MS = 1_000;

/** A quota refusal is recorded at most this often per cap and window: a client retrying is not a flood. */
const QUOTA_EVENT_INTERVAL_MS = 60_000;

/**
 * The gateway's routes (docs/gateway.md): `POST /v1/chat/completions` and `POST /v1/responses` as
 * OpenAI's, `POST /v1/messages` as Anthropic's, `GET /v1/models` as both. A gateway key (keystore) is
 * the credential, sent as the SDKs send an API key; the server's own token is neither needed nor
 * accepted here (auth-gate.ts lets `/v1/` through to this check). Answers and errors are in the
 * inbound provider's shape, so its SDK behaves as against the provider.
 */
export function gatewayRoutes(
  runtime: Runtime,
  store: GatewayStore,
  options: GatewayOptions,
  logger: Logger,
): GatewayMount {
  const gateway = new Gateway(runtime, store, options, logger);
  const post = (path: string, format: InboundFormat, summary: string) =>
    rawRoute(
      {
        method: 'POST',
        path,
        summary,
        body: z.unknown(),
        open: true,
        success: {
          status: 200,
          description: 'the provider-shaped answer, or its SSE stream',
          contentType: 'application/json',
        },
        errors: [],
      },
      async ({ request, body }, response) => gateway.serve(format, request, body, response),
    );
  const routes = [
    post(
      '/v1/chat/completions',
      openaiChat,
      'OpenAI-compatible chat completions, with a gateway key (docs/gateway.md)',
    ),
    post(
      '/v1/responses',
      openaiResponses,
      'OpenAI-compatible Responses API, with a gateway key (docs/gateway.md)',
    ),
    post(
      '/v1/messages',
      anthropicMessages,
      'Anthropic-compatible Messages API, with a gateway key (docs/gateway.md)',
    ),
    rawRoute(
      {
        method: 'GET',
        path: '/v1/models',
        summary: 'The models a gateway key may name, as OpenAI and Anthropic list them',
        open: true,
        success: { status: 200, description: 'a list of models', contentType: 'application/json' },
        errors: [],
      },
      async ({ request }, response) => gateway.models(request, response),
    ),
  ];
  return { routes, close: () => gateway.close() };
}

class Gateway {
  private readonly keys: KeyRing;
  private readonly quotas: QuotaBook;
  private readonly turns: GatewayTurns;
  private readonly failures: AuthFailures;
  private readonly quotaRecorded = new Map<string, number>();
  private refresher: NodeJS.Timeout | null = null;
  private refreshing = false;
  private refreshFailedAt = 0;

  constructor(
    private readonly runtime: Runtime,
    private readonly store: GatewayStore,
    private readonly options: GatewayOptions,
    private readonly logger: Logger,
  ) {
    this.keys = new KeyRing(options.keystorePath, logger);
    this.quotas = new QuotaBook(options.config, options.sharedSpend !== undefined);
    this.quotas.seed(store.spendSince(QuotaBook.monthStartUs()));
    const shared = options.sharedSpend;
    if (shared !== undefined) {
      void this.refreshSpend(shared);
      this.refresher = setInterval(() => void this.refreshSpend(shared), SHARED_SPEND_REFRESH_MS);
      this.refresher.unref();
    }
    this.turns = new GatewayTurns(runtime, store.bus, logger);
    this.failures = new AuthFailures(store.bus, logger, options.authThrottle);
  }

  async serve(
    format: InboundFormat,
    request: IncomingMessage,
    body: unknown,
    response: ServerResponse,
  ): Promise<void> {
    const id = newId('gw').slice(3).toLowerCase();
    const sessionId = newId('sess');
    const headers = { ...requestIdHeader(format.shape, id), 'metis-session-id': sessionId };
    try {
      const key = this.authenticate(request, format.shape);
      const inbound = format.parse(body);
      this.enforceQuota(key, format.shape);
      const { route, adapter } = chooseModel(this.runtime, this.options.config, inbound, key);
      const closed = new AbortController();
      response.on('close', () => {
        if (!response.writableFinished) closed.abort();
      });
      const encoder = inbound.stream ? format.stream(route.chosen_model, id, inbound.includeUsage) : null;
      let opened = false;
      const open = () => {
        if (opened || encoder === null) return;
        opened = true;
        writeEventStreamHead(response, headers);
        response.write(encoder.open());
      };
      const result = await this.turns.run({
        request: inbound,
        route,
        adapter,
        workspacePath: key.workspace_path,
        sessionId,
        tags: {
          gateway_key_id: key.id,
          inbound_shape: format.shape,
          user_id: key.user_id,
          team_id: key.team_id,
        },
        signal: closed.signal,
        onChunk:
          encoder === null
            ? undefined
            : (chunk) => {
                open();
                const text = encoder.chunk(chunk);
                if (text !== '') response.write(text);
              },
      });
      if (result.kind === 'completed') this.spent(key, result.costUsd, result.eventId);
      if (response.destroyed) return;
      if (encoder === null) {
        if (result.kind === 'failed') return sendError(response, format.shape, result.error);
        return sendJson(response, 200, format.answer(result.outcome, id), headers);
      }
      if (result.kind === 'failed' && !opened) return sendError(response, format.shape, result.error);
      open();
      response.end(result.kind === 'completed' ? encoder.close(result.outcome) : encoder.fail(result.error));
    } catch (error) {
      const refusal = error instanceof GatewayError ? error : this.internal(error);
      if (!response.headersSent) sendError(response, format.shape, refusal);
      else response.destroy();
    }
  }

  async close(): Promise<void> {
    if (this.refresher !== null) clearInterval(this.refresher);
    this.refresher = null;
    await this.options.sharedSpend?.close();
  }

  /** The shared store's spend; a failed read keeps what was counted (logged once a minute at most). */
  private async refreshSpend(reader: SharedSpendReader): Promise<void> {
    if (this.refreshing) return;
    this.refreshing = true;
    try {
      const read = await reader.read(QuotaBook.monthStartUs(), this.quotas.pendingIds());
      this.quotas.refresh(read.rows, read.present);
    } catch (error) {
      const now = Date.now();
      if (now - this.refreshFailedAt > 60_000) {
        this.refreshFailedAt = now;
        this.logger.warn(
          { err: error },
          "could not read the shared store's gateway spend; counting this node's calls meanwhile",
        );
      }
    } finally {
      this.refreshing = false;
    }
  }

  async models(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const shape: InboundShape = request.headers['anthropic-version'] === undefined ? 'openai' : 'anthropic';
    try {
      const key = this.authenticate(request, shape);
      const names = listedModels(this.runtime, this.options.config, key);
      const created = Math.floor(Date.now() / 1000);
      // One list both SDKs read: OpenAI's fields and Anthropic's side by side.
      sendJson(response, 200, {
        object: 'list',
        data: names.map((name) => ({
          id: name,
          object: 'model',
          created,
          owned_by: name.slice(0, name.indexOf(':')) || 'metis',
          type: 'model',
          display_name: name,
          created_at: new Date(created * 1000).toISOString(),
        })),
        has_more: false,
        first_id: names[0] ?? null,
        last_id: names.at(-1) ?? null,
      });
    } catch (error) {
      sendError(response, shape, error instanceof GatewayError ? error : this.internal(error));
    }
  }

  private authenticate(request: IncomingMessage, shape: InboundShape): StoredKey {
    const check = this.keys.check(presentedKey(request));
    if (check.ok) return check.key;
    throw this.failures.refuse(request, check, shape);
  }

  private enforceQuota(key: StoredKey, shape: InboundShape): void {
    const refusal = this.quotas.refusal(key);
    if (refusal === null) return;
    const id = `${refusal.scope} ${refusal.window} ${key.id}`;
    const now = Date.now();
    const last = this.quotaRecorded.get(id);
    if (last === undefined || now - last >= QUOTA_EVENT_INTERVAL_MS) {
      this.quotaRecorded.set(id, now);
      this.store.bus.emit({
        type: 'gateway.quota_exceeded',
        session_id: SYSTEM_SESSION_ID,
        payload: {
          gateway_key_id: key.id,
          window: refusal.window,
          cap_usd: usdDecimal(refusal.capUsd),
          spent_usd: usdDecimal(refusal.spentUsd),
          inbound_shape: shape,
        },
      });
    }
    const whose = refusal.scope.startsWith('key:')
      ? 'this key'
      : `its ${refusal.scope.slice(0, refusal.scope.indexOf(':'))}`;
    throw new GatewayError(
      'quota',
      `the ${refusal.window} spend cap of ${whose} is reached ($${usdDecimal(refusal.spentUsd)} of $${usdDecimal(refusal.capUsd)})`,
      { retryAfterSeconds: refusal.retryAfterSeconds, noRetry: true },
    );
  }

  private spent(key: StoredKey, costUsd: number, eventId: string | null): void {
    for (const payload of this.quotas.record(key, costUsd, eventId))
      this.store.bus.emit({ type: 'quota.alert', session_id: SYSTEM_SESSION_ID, payload });
  }

  private internal(error: unknown): GatewayError {
    this.logger.error({ err: error }, 'gateway request failed');
    return new GatewayError('internal', 'internal error');
  }
}

/** The key as the SDKs send an API key: OpenAI's `Authorization: Bearer`, Anthropic's `x-api-key`. */
function presentedKey(request: IncomingMessage): string | null {
  const apiKey = request.headers['x-api-key'];
  if (typeof apiKey === 'string' && apiKey !== '') return apiKey;
  const authorization = request.headers.authorization ?? '';
  const bearer = /^Bearer\s+(.+)$/i.exec(authorization);
  return bearer ? bearer[1]!.trim() : null;
}

function requestIdHeader(shape: InboundShape, id: string): Record<string, string> {
  return shape === 'anthropic' ? { 'request-id': `req_${id}` } : { 'x-request-id': `req_${id}` };
}

function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
) {
  response.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'cache-control': 'no-store',
    ...headers,
  });
  response.end(JSON.stringify(body));
}

function sendError(response: ServerResponse, shape: InboundShape, error: GatewayError): void {
  sendJson(
    response,
    error.status,
    shape === 'anthropic' ? anthropicErrorBody(error) : openaiErrorBody(error),
    {
      ...(error.retryAfterSeconds === null ? {} : { 'retry-after': String(error.retryAfterSeconds) }),
      ...(error.noRetry ? { 'x-should-retry': 'false' } : {}),
    },
  );
}
