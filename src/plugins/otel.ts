import {
  type Attributes,
  type HrTime,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { ATTR_ERROR_TYPE, ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import { z } from 'zod';
import { isoToMicros } from '../core/events/clock.js';
import type { MetisEvent } from '../core/events/envelope.js';
import { definePlugin, type TraceQuery } from './define-plugin.js';
import { ContentReader } from './otel-content.js';
import { ReportingExporter } from './otel-export.js';
import { readNowOrLater, thenOrNow } from './read-now-or-later.js';

export { ReportingExporter } from './otel-export.js';

export const OtelOptions = z.strictObject({
  /** The OTLP/HTTP traces endpoint of a collector, Jaeger, Phoenix, Langfuse… */
  endpoint: z.url({ protocol: /^https?$/ }).default('http://localhost:4318/v1/traces'),
  /** Request headers, e.g. an authorization header of a hosted backend. */
  headers: z.record(z.string(), z.string()).default({}),
  /** `service.name` of the resource. */
  service_name: z.string().min(1).default('metis'),
  /** Timeout of one export request. */
  timeout_ms: z.number().int().positive().default(10_000),
  /** Ended spans are exported in batches at most this far apart. */
  scheduled_delay_ms: z.number().int().positive().default(1000),
  max_export_batch_size: z.number().int().positive().default(512),
  /** Only these sessions; null for all. */
  session_ids: z.array(z.string().min(1)).nullable().default(null),
  /**
   * Opt-in: put the conversation's content on the spans (`gen_ai.input.messages`,
   * `gen_ai.output.messages`, `gen_ai.tool.call.arguments` / `.result`). Off by default: prompts, answers
   * and tool data then leave the machine for the backend.
   */
  capture_content: z.boolean().default(false),
  /** With capture_content: characters of one attribute (longer JSON is cut). */
  content_max_chars: z.number().int().positive().default(16_384),
  /** With capture_content: the newest messages of the history a model call's input shows. */
  content_max_messages: z.number().int().positive().default(50),
});

/** The session of a span, as tracing backends group traces: `session.id`, and Langfuse's own name. */
function sessionAttributes(sessionId: string): Attributes {
  return { 'session.id': sessionId, 'langfuse.session.id': sessionId };
}

/**
 * GenAI semantic-convention attributes. They are still "incubating" in
 * `@opentelemetry/semantic-conventions`, whose docs advise copying such names rather than importing the
 * incubating entry point, which may change in a minor release.
 */
const GEN_AI = {
  operation: 'gen_ai.operation.name',
  provider: 'gen_ai.provider.name',
  requestModel: 'gen_ai.request.model',
  responseModel: 'gen_ai.response.model',
  finishReasons: 'gen_ai.response.finish_reasons',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  cacheReadTokens: 'gen_ai.usage.cache_read.input_tokens',
  cacheCreationTokens: 'gen_ai.usage.cache_creation.input_tokens',
  toolName: 'gen_ai.tool.name',
  toolCallId: 'gen_ai.tool.call.id',
  agentName: 'gen_ai.agent.name',
  conversationId: 'gen_ai.conversation.id',
} as const;

/** The event types the spans are built from. */
export const OTEL_EVENT_TYPES = [
  'turn.started',
  'turn.completed',
  'turn.cancelled',
  'llm.call_started',
  'llm.call_completed',
  'llm.call_failed',
  'tool.called',
  'tool.completed',
  'tool.failed',
  'delegate.started',
] as const;

/** Catalog payloads are validated, so numbers are numbers; the fallback only satisfies the types. */
function num(value: unknown): number {
  return typeof value === 'number' ? value : 0;
}

function hrTime(iso: string): HrTime {
  const us = isoToMicros(iso);
  return [Math.floor(us / 1_000_000), (us % 1_000_000) * 1000];
}

/** `anthropic:claude-sonnet-4` → `claude-sonnet-4`: GenAI attributes carry the provider separately. */
function modelName(model: string, provider: string): string {
  return model.startsWith(`${provider}:`) ? model.slice(provider.length + 1) : model;
}

interface OpenSpan {
  readonly span: Span;
  readonly turnId: string;
}

/**
 * Turns metis events into spans (bus spec §4.3): a turn span per `turn.started`, with one `chat` span
 * per LLM call and one `execute_tool` span per tool call as its children. The parent turn is found by
 * walking `parent_event_id` — in memory for the events seen, in the trace store otherwise. Spans carry
 * the events' own timestamps, so they line up with the trace however late they are exported. A store
 * read the host cannot answer synchronously (PostgreSQL alone) is awaited instead: `handle` then returns
 * a promise, and the plugin's mailbox hands it no other event until it settles, so events still apply
 * in order.
 */
export class SpanBuilder {
  /** Open spans by the id of the event that started them. */
  private readonly open = new Map<string, OpenSpan>();
  /** Event id → the `turn.started` id of its turn, for every event seen of a turn still open. */
  private readonly turnOf = new Map<string, string>();
  private readonly members = new Map<string, string[]>();
  /** tool_use_id → the `tool.called` id of a tool span still open, to find a delegation's span. */
  private readonly toolCalls = new Map<string, string>();
  /**
   * Worker session → the planner's `execute_tool delegate` span. A worker's `turn.started` has no
   * causal parent in the planner's session; `delegate.started` names the worker, so its turn span is
   * made a child of the delegation and the whole delegated turn lands in the planner's trace.
   */
  private readonly workerParents = new Map<string, Span>();
  readonly counters = { spans_started: 0, spans_ended: 0, orphans: 0 };

  constructor(
    private readonly tracer: Tracer,
    private readonly store: TraceQuery,
    /** The conversation's content, when the user opted in (capture_content); null leaves it out. */
    private readonly content: ContentReader | null = null,
  ) {}

  get openSpans(): number {
    return this.open.size;
  }

  handle(event: MetisEvent): void | Promise<void> {
    const p = event.payload;
    const at = hrTime(event.timestamp);
    switch (event.type) {
      case 'turn.started': {
        const delegation = this.workerParents.get(event.session_id);
        this.workerParents.delete(event.session_id);
        const span = this.tracer.startSpan(
          'invoke_agent metis',
          {
            kind: SpanKind.INTERNAL,
            startTime: at,
            attributes: {
              [GEN_AI.operation]: 'invoke_agent',
              [GEN_AI.agentName]: 'metis',
              [GEN_AI.conversationId]: event.session_id,
              ...sessionAttributes(event.session_id),
              'metis.session_id': event.session_id,
              'metis.turn_id': event.turn_id ?? '',
            },
          },
          delegation === undefined ? ROOT_CONTEXT : trace.setSpan(ROOT_CONTEXT, delegation),
        );
        this.start(event.id, event.id, span);
        return;
      }
      case 'delegate.started': {
        const toolCall = this.toolCalls.get(String(p.tool_use_id));
        const span = toolCall === undefined ? undefined : this.open.get(toolCall)?.span;
        if (span !== undefined) this.workerParents.set(String(p.worker_session_id), span);
        return;
      }
      case 'llm.call_started': {
        const provider = String(p.provider);
        return this.startChild(event, `chat ${modelName(String(p.model), provider)}`, SpanKind.CLIENT, at, {
          [GEN_AI.operation]: 'chat',
          [GEN_AI.provider]: provider,
          [GEN_AI.requestModel]: modelName(String(p.model), provider),
          [GEN_AI.conversationId]: event.session_id,
          ...sessionAttributes(event.session_id),
          'metis.request_id': String(p.request_id),
          'metis.is_worker': Boolean(p.is_worker),
        });
      }
      case 'tool.called':
        this.toolCalls.set(String(p.tool_use_id), event.id);
        return this.startChild(event, `execute_tool ${p.tool_name}`, SpanKind.INTERNAL, at, {
          [GEN_AI.operation]: 'execute_tool',
          [GEN_AI.toolName]: String(p.tool_name),
          [GEN_AI.toolCallId]: String(p.tool_use_id),
          ...sessionAttributes(event.session_id),
          'metis.tool.side_effects': String(p.side_effects),
        });
      case 'llm.call_completed': {
        const attributes: Attributes = {
          [GEN_AI.responseModel]: modelName(String(p.model), String(p.provider)),
          [GEN_AI.finishReasons]: [String(p.stop_reason)],
          [GEN_AI.inputTokens]: num(p.input_tokens),
          [GEN_AI.outputTokens]: num(p.output_tokens),
          [GEN_AI.cacheReadTokens]: num(p.cached_input_tokens),
          [GEN_AI.cacheCreationTokens]: num(p.cache_creation_input_tokens),
          'metis.cost_usd': num(p.cost_usd),
        };
        return thenOrNow(this.callContent(event, String(p.stop_reason)), (content) =>
          this.end(event, at, { ...attributes, ...content }),
        );
      }
      case 'tool.completed':
        this.toolCalls.delete(String(p.tool_use_id));
        return thenOrNow(this.toolContent(event), (content) =>
          this.end(
            event,
            at,
            { 'metis.tool.success': Boolean(p.success), ...content },
            p.success ? null : 'tool_error',
          ),
        );
      case 'tool.failed':
        this.toolCalls.delete(String(p.tool_use_id));
        return thenOrNow(this.toolContent(event), (content) =>
          this.end(event, at, { ...content }, String(p.error_class), String(p.error_message)),
        );
      case 'llm.call_failed':
        return thenOrNow(this.callContent(event, null), (content) =>
          this.end(event, at, content, String(p.error_class), String(p.error_message_redacted)),
        );
      case 'turn.completed': {
        const attributes: Attributes = {
          [GEN_AI.inputTokens]: num(p.total_input_tokens),
          [GEN_AI.outputTokens]: num(p.total_output_tokens),
          'metis.cost_usd': num(p.total_cost_usd),
          'metis.llm_call_count': num(p.llm_call_count),
          'metis.tool_call_count': num(p.tool_call_count),
          'metis.stop_reason': String(p.stop_reason),
        };
        return thenOrNow(this.turnContent(event), (content) =>
          this.endTurn(event, at, { ...attributes, ...content }),
        );
      }
      case 'turn.cancelled':
        return thenOrNow(this.turnContent(event), (content) =>
          this.endTurn(event, at, { 'metis.cancel_reason': String(p.reason), ...content }, 'cancelled'),
        );
    }
  }

  /** A model call's content: what it was sent and what it answered (capture_content only). */
  private callContent(end: MetisEvent, stopReason: string | null): Attributes | Promise<Attributes> {
    if (this.content === null || end.parent_event_id === null) return {};
    return this.content.modelCall(end.session_id, end.parent_event_id, end.id, stopReason);
  }

  private turnContent(end: MetisEvent): Attributes | Promise<Attributes> {
    if (this.content === null || end.parent_event_id === null) return {};
    return this.content.turn(end.session_id, end.parent_event_id, end.id);
  }

  private toolContent(end: MetisEvent): Attributes | Promise<Attributes> {
    if (this.content === null) return {};
    return this.content.toolCall(end.session_id, String(end.payload.tool_use_id));
  }

  /** Ends every open span (at shutdown), marked incomplete. */
  endAll(): void {
    for (const { span } of this.open.values()) {
      span.setAttribute('metis.incomplete', true);
      span.end();
      this.counters.spans_ended += 1;
    }
    this.open.clear();
    this.turnOf.clear();
    this.members.clear();
    this.toolCalls.clear();
    this.workerParents.clear();
  }

  private start(eventId: string, turnId: string, span: Span): void {
    this.open.set(eventId, { span, turnId });
    this.remember(eventId, turnId);
    this.counters.spans_started += 1;
  }

  private remember(eventId: string, turnId: string): void {
    this.turnOf.set(eventId, turnId);
    let list = this.members.get(turnId);
    if (list === undefined) {
      list = [];
      this.members.set(turnId, list);
    }
    list.push(eventId);
  }

  private startChild(
    event: MetisEvent,
    name: string,
    kind: SpanKind,
    at: HrTime,
    attributes: Attributes,
  ): void | Promise<void> {
    return thenOrNow(this.findTurn(event), (turnId) => {
      const turn = turnId === null ? undefined : this.open.get(turnId);
      if (turnId === null || turn === undefined) {
        this.counters.orphans += 1;
        return;
      }
      const span = this.tracer.startSpan(
        name,
        { kind, startTime: at, attributes },
        trace.setSpan(ROOT_CONTEXT, turn.span),
      );
      this.start(event.id, turnId, span);
    });
  }

  /** The `turn.started` id of an event's turn, walking the causal chain; null when none is open. */
  private findTurn(event: MetisEvent): string | null | Promise<string | null> {
    const parent = event.parent_event_id;
    if (parent === null) return null;
    const known = this.turnOf.get(parent);
    if (known !== undefined) return known;
    // The parent is of a type outside the filter (or from before startup): ask the trace store.
    const chain = readNowOrLater(
      () => this.store.causalChain(parent),
      () => this.store.async.causalChain(parent),
    );
    return thenOrNow(chain, (ancestors) => {
      for (const ancestor of ancestors) {
        const turnId = this.turnOf.get(ancestor.id);
        if (turnId !== undefined) return turnId;
      }
      return null;
    });
  }

  private end(
    event: MetisEvent,
    at: HrTime,
    attributes: Attributes,
    errorType: string | null = null,
    message?: string,
  ): void {
    const parent = event.parent_event_id;
    const open = parent === null ? undefined : this.open.get(parent);
    if (parent === null || open === undefined) {
      this.counters.orphans += 1;
      return;
    }
    this.remember(event.id, open.turnId);
    open.span.setAttributes(attributes);
    if (errorType !== null) {
      open.span.setAttribute(ATTR_ERROR_TYPE, errorType);
      open.span.setStatus({ code: SpanStatusCode.ERROR, message: message ?? errorType });
    }
    open.span.end(at);
    this.open.delete(parent);
    this.counters.spans_ended += 1;
  }

  private endTurn(event: MetisEvent, at: HrTime, attributes: Attributes, errorType: string | null = null) {
    const turnId = event.parent_event_id;
    if (turnId === null || !this.open.has(turnId)) {
      this.counters.orphans += 1;
      return;
    }
    // Children still open (a cancel cut them short) end with the turn.
    for (const id of this.members.get(turnId) ?? []) {
      const child = id === turnId ? undefined : this.open.get(id);
      if (child === undefined) continue;
      child.span.setAttribute('metis.incomplete', true);
      child.span.end(at);
      this.open.delete(id);
      this.counters.spans_ended += 1;
    }
    this.end(event, at, attributes, errorType);
    for (const id of this.members.get(turnId) ?? []) this.turnOf.delete(id);
    this.members.delete(turnId);
  }
}

/** `otel`: turns, LLM calls and tool calls as OpenTelemetry spans over OTLP/HTTP (JSON). */
export default definePlugin({
  name: 'otel',
  optionsSchema: OtelOptions,
  create(options, ctx) {
    let provider: BasicTracerProvider | null = null;
    let builder: SpanBuilder | null = null;
    let exporter: ReportingExporter | null = null;
    return {
      filter: { session_ids: options.session_ids, event_types: [...OTEL_EVENT_TYPES] },
      fastPath: false,
      handle: (event) => builder?.handle(event),
      start() {
        exporter = new ReportingExporter(
          new OTLPTraceExporter({
            url: options.endpoint,
            headers: options.headers,
            timeoutMillis: options.timeout_ms,
          }),
          options.endpoint,
          ctx.logger,
        );
        // A provider of our own, never registered globally: metis does not touch an embedder's OTel setup.
        provider = new BasicTracerProvider({
          resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: options.service_name }),
          spanProcessors: [
            new BatchSpanProcessor(exporter, {
              scheduledDelayMillis: options.scheduled_delay_ms,
              maxExportBatchSize: options.max_export_batch_size,
            }),
          ],
        });
        const content = options.capture_content
          ? new ContentReader(ctx.store, {
              maxChars: options.content_max_chars,
              maxMessages: options.content_max_messages,
            })
          : null;
        builder = new SpanBuilder(provider.getTracer('metis'), ctx.store, content);
        ctx.logger.info(
          { endpoint: options.endpoint, capture_content: options.capture_content },
          'otel exporting spans',
        );
      },
      async stop() {
        builder?.endAll();
        await provider?.forceFlush();
        await provider?.shutdown();
      },
      stats: () => ({
        ...(builder?.counters ?? {}),
        open_spans: builder?.openSpans ?? 0,
        ...(exporter?.counters ?? {}),
      }),
    };
  },
});
