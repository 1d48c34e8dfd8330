import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { RuntimeConfig } from '../config/runtime-schema.js';
import { newId } from '../events/ids.js';
import { silentLogger } from '../logger.js';
import type { SessionRows } from '../store/store-port.js';
import type { ConfirmationBroker } from './confirmations.js';
import type { ContentBlock } from './model-adapter.js';
import {
  type CallCheck,
  type CallConfirmation,
  type SideEffects,
  type Tool,
  type ToolContext,
  ToolError,
  type ToolErrorClass,
} from './tools/tool.js';
import { visibleSummary } from './tools/visible-summary.js';
import { haltIfFrozen } from './turn-drain.js';
import type { TurnEvents } from './turn-events.js';
import type { StoredToolUse } from './turn-resume-plan.js';

type ToolUseBlock = Extract<ContentBlock, { type: 'tool_use' }>;
type ToolResultBlock = Extract<ContentBlock, { type: 'tool_result' }>;

export interface DispatchRequest {
  readonly events: TurnEvents;
  readonly toolUses: readonly ToolUseBlock[];
  readonly callCompletedId: string | null;
  readonly messageId: string;
  readonly workspacePath: string;
  readonly signal: AbortSignal;
  /**
   * Tool names the user allowed for the rest of the session (`scope: session`). The set is the
   * session's own, so it also keys the tools denied for the session (see `ToolDispatcher`).
   */
  readonly sessionAllowed: Set<string>;
  /** Test and conformance hook: runs after `tool.called`, before a tool's execution starts. */
  readonly beforeExecute?: () => Promise<void>;
  /** Tools this session may not use (a worker never delegates). */
  readonly excludedTools?: ReadonlySet<string>;
  /** The client's own tools for this turn (client-tools.ts); metis's tools keep their names. */
  readonly clientTools?: readonly Tool[];
}

export interface DispatchResult {
  readonly results: ToolResultBlock[];
  /** The last event the dispatcher emitted: parent of the next `llm.call_started`. */
  readonly lastEventId: string | null;
  readonly toolCallCount: number;
  readonly cancelled: boolean;
}

interface Scheduled {
  readonly use: ToolUseBlock;
  readonly tool: Tool;
  readonly input: unknown;
  readonly calledId: string | null;
  /** `tool.called.input_hash`: a confirmation's decision may quote it back (docs/http-api.md). */
  readonly inputHash: string;
}

/**
 * Runs the tool_use blocks of one assistant message (bus §6.4): validates input (`tool.input_invalid`),
 * schedules every valid call (`tool.called`), asks for confirmation where policy says so, executes in
 * order, and reports each as `tool.completed` or `tool.failed`. Once the turn is cancelled, the running
 * tool is stopped and every call not yet finished fails with `cancelled` (streaming §6.2.2, §6.2.3).
 */
export class ToolDispatcher {
  private readonly tools: Map<string, Tool>;
  private readonly logger: Logger;
  /**
   * Tool names the user denied for the rest of a session (`decision: deny, scope: session`, bus §6.4),
   * keyed by that session's `sessionAllowed` set: the memory lives exactly as long as the allowed one
   * (a resumed session starts with neither) and needs no cleanup when a session ends.
   */
  private readonly sessionDenied = new WeakMap<Set<string>, Set<string>>();

  constructor(
    tools: readonly Tool[],
    private readonly config: RuntimeConfig,
    private readonly sessions: SessionRows,
    private readonly confirmations: ConfirmationBroker,
    logger?: Logger,
  ) {
    this.tools = new Map(tools.map((t) => [t.name, t]));
    this.logger = logger ?? silentLogger();
  }

  /** The tools offered to the model, minus the excluded ones, then the client's that name no tool of metis. */
  available(excluded?: ReadonlySet<string>, clientTools: readonly Tool[] = []): Tool[] {
    const own = [...this.tools.values()].filter((t) => !excluded?.has(t.name));
    return [...own, ...clientTools.filter((t) => !this.tools.has(t.name))];
  }

  async dispatch(request: DispatchRequest): Promise<DispatchResult> {
    const { events } = request;
    const results: ToolResultBlock[] = [];
    const scheduled: Scheduled[] = [];
    let lastEventId: string | null = request.callCompletedId;

    for (const use of request.toolUses) {
      const tool = request.excludedTools?.has(use.name)
        ? undefined
        : (this.tools.get(use.name) ?? request.clientTools?.find((t) => t.name === use.name));
      const parsed = tool?.inputSchema.safeParse(use.input);
      if (tool === undefined || parsed === undefined || !parsed.success) {
        const errors =
          tool === undefined
            ? [`unknown tool "${use.name}"`]
            : (parsed?.error?.issues ?? []).map((i) => `${i.path.join('.') || '(input)'}: ${i.message}`);
        lastEventId = events.emit('tool.input_invalid', request.callCompletedId, {
          tool_name: use.name,
          validation_errors: errors,
        }).id;
        results.push(errorResult(use.id, `invalid input for ${use.name}: ${errors.join('; ')}`));
        continue;
      }
      const inputJson = JSON.stringify(use.input);
      const inputHash = createHash('sha256').update(inputJson).digest('hex');
      const called = events.emit('tool.called', request.callCompletedId, {
        tool_use_id: use.id,
        tool_name: use.name,
        input_hash: inputHash,
        input_size_bytes: Buffer.byteLength(inputJson),
        side_effects: tool.sideEffects,
      });
      this.sessions.saveToolCall({
        id: use.id,
        session_id: events.sessionId,
        turn_id: events.turnId,
        message_id: request.messageId,
        tool_name: use.name,
        input: use.input,
        status: 'pending',
      });
      scheduled.push({ use, tool, input: parsed.data, calledId: called.id, inputHash });
      lastEventId = called.id;
    }

    for (const call of scheduled) {
      const outcome = await this.runOne(call, request);
      results.push(outcome.result);
      lastEventId = outcome.eventId;
    }
    return { results, lastEventId, toolCallCount: scheduled.length, cancelled: request.signal.aborted };
  }

  /**
   * The tool uses of a call a restart cut (docs/runtime.md "Durable turns"), in order: a stored result
   * is handed back and the tool not run; a call that never started runs now (asking again for the
   * confirmation its policy needs); one that was running runs again only when its tool is `repeatSafe`,
   * otherwise it fails as interrupted; a use with no `tool.called` stored is dispatched as new.
   */
  async resume(
    request: DispatchRequest,
    stored: ReadonlyMap<string, StoredToolUse>,
  ): Promise<DispatchResult> {
    const results: ToolResultBlock[] = [];
    let lastEventId: string | null = request.callCompletedId;
    let toolCallCount = 0;
    for (const use of request.toolUses) {
      const entry = stored.get(use.id);
      let outcome: { result: ToolResultBlock; eventId: string | null };
      if (entry === undefined) {
        const fresh = await this.dispatch({ ...request, toolUses: [use] });
        toolCallCount += fresh.toolCallCount;
        outcome = { result: fresh.results[0]!, eventId: fresh.lastEventId };
      } else if (entry.kind === 'ended') {
        outcome = { result: entry.result, eventId: entry.eventId };
      } else {
        outcome = await this.resumeOne(use, entry, request);
      }
      results.push(outcome.result);
      lastEventId = outcome.eventId ?? lastEventId;
    }
    return { results, lastEventId, toolCallCount, cancelled: request.signal.aborted };
  }

  private async resumeOne(
    use: ToolUseBlock,
    entry: Exclude<StoredToolUse, { kind: 'ended' }>,
    request: DispatchRequest,
  ): Promise<{ result: ToolResultBlock; eventId: string | null }> {
    const { events } = request;
    const row = {
      id: use.id,
      session_id: events.sessionId,
      turn_id: events.turnId,
      message_id: request.messageId,
    };
    const tool = this.tools.get(use.name) ?? request.clientTools?.find((t) => t.name === use.name);
    const parsed = tool?.inputSchema.safeParse(use.input);
    const end = (ok: boolean, content: string, errorClass: ToolErrorClass = 'execution_error') => {
      const event = ok
        ? events.emit('tool.completed', entry.calledId, {
            tool_use_id: use.id,
            success: true,
            output_size_bytes: Buffer.byteLength(content),
            latency_ms: 0,
            files_modified: null,
            command_executed: null,
          })
        : events.emit('tool.failed', entry.calledId, {
            tool_use_id: use.id,
            error_class: errorClass,
            error_message: content,
            latency_ms: 0,
          });
      if (!ok && entry.kind !== 'finished_unannounced')
        this.sessions.updateToolCall(row, { status: 'failed', error_class: errorClass, output: content });
      return {
        result: { type: 'tool_result' as const, tool_use_id: use.id, content, is_error: !ok },
        eventId: event.id,
      };
    };
    if (entry.kind === 'finished_unannounced') {
      const output =
        typeof entry.row.output === 'string' ? entry.row.output : JSON.stringify(entry.row.output);
      return end(
        entry.row.status === 'completed',
        output,
        (entry.row.error_class ?? 'execution_error') as ToolErrorClass,
      );
    }
    const runnable = entry.kind === 'not_started' || tool?.repeatSafe === true;
    if (tool === undefined || parsed === undefined || !parsed.success || !runnable) {
      return end(
        false,
        `interrupted: the server stopped while ${use.name} ran, and it is not safe to run twice; it was not run again`,
      );
    }
    const inputHash = createHash('sha256').update(JSON.stringify(use.input)).digest('hex');
    return this.runOne({ use, tool, input: parsed.data, calledId: entry.calledId, inputHash }, request);
  }

  private async runOne(
    call: Scheduled,
    request: DispatchRequest,
  ): Promise<{ result: ToolResultBlock; eventId: string | null }> {
    const { events, signal } = request;
    let started = performance.now();
    const row = {
      id: call.use.id,
      session_id: events.sessionId,
      turn_id: events.turnId,
      message_id: request.messageId,
    };
    const fail = (errorClass: ToolErrorClass, message: string) => {
      const event = events.emit('tool.failed', call.calledId, {
        tool_use_id: call.use.id,
        error_class: errorClass,
        error_message: message,
        latency_ms: Math.round(performance.now() - started),
      });
      this.sessions.updateToolCall(row, {
        status: errorClass === 'cancelled' ? 'cancelled' : 'failed',
        error_class: errorClass,
        output: message,
      });
      return { result: errorResult(call.use.id, message), eventId: event.id };
    };

    if (signal.aborted) return fail('cancelled', 'the turn was cancelled before this tool ran');
    const context: ToolContext = {
      sessionId: events.sessionId,
      turnId: events.turnId ?? '',
      toolUseId: call.use.id,
      workspacePath: request.workspacePath,
      signal,
      toolCalledEventId: call.calledId,
      callCompletedEventId: request.callCompletedId,
    };
    // The tool's own per-call check (read_file: where the path really leads) comes before the
    // side-effect policy; what it prepared is what `execute` gets, so the confirmed target is the one used.
    let check: CallCheck | null = null;
    try {
      check = (await call.tool.checkCall?.(call.input, context)) ?? null;
    } catch (error) {
      if (error instanceof ToolError) return fail(error.errorClass, error.message);
      return fail('execution_error', (error as Error).message ?? String(error));
    }
    const confirmation = await this.confirm(call, request, check?.confirmation ?? null);
    // Restarted once a confirmation is decided: the user's wait is not the tool's latency.
    started = performance.now();
    if (confirmation !== null) return fail(confirmation.errorClass, confirmation.message);
    if (request.beforeExecute) await request.beforeExecute();
    if (signal.aborted) return fail('cancelled', 'the turn was cancelled before this tool ran');
    // Handed over to the next start: it runs there (it was never started), not here.
    await haltIfFrozen(events);
    this.sessions.updateToolCall(row, { status: 'running' });
    try {
      const output = await call.tool.execute(call.input, context, check?.prepared);
      if (signal.aborted) return fail('cancelled', 'the turn was cancelled while this tool ran');
      const success = output.success ?? true;
      const event = events.emit('tool.completed', call.calledId, {
        tool_use_id: call.use.id,
        success,
        output_size_bytes: Buffer.byteLength(output.content),
        latency_ms: Math.round(performance.now() - started),
        files_modified: output.filesModified ? [...output.filesModified] : null,
        command_executed: output.commandExecuted ?? null,
      });
      this.sessions.updateToolCall(row, { status: 'completed', output: output.content });
      return {
        result: {
          type: 'tool_result',
          tool_use_id: call.use.id,
          content: output.content,
          is_error: !success,
        },
        eventId: event.id,
      };
    } catch (error) {
      if (signal.aborted) return fail('cancelled', 'the turn was cancelled while this tool ran');
      if (error instanceof ToolError) return fail(error.errorClass, error.message);
      this.logger.warn(
        { tool: call.tool.name, err: (error as Error).message },
        'tool raised an unexpected error',
      );
      return fail('execution_error', (error as Error).message ?? String(error));
    }
  }

  /**
   * Returns null when the call may run, or why it may not. `asked` is the call's own confirmation
   * (Tool.checkCall): it always asks, and a session allow covers it only when it is session-allowable.
   */
  private async confirm(
    call: Scheduled,
    request: DispatchRequest,
    asked: CallConfirmation | null,
  ): Promise<{ errorClass: ToolErrorClass; message: string } | null> {
    const effects = asked?.side_effects ?? call.tool.sideEffects;
    const policy = asked !== null ? 'ask' : sideEffectPolicy(this.config, effects);
    if (policy === null) return null;
    const sessionScoped = asked?.session_allowable ?? true;
    if (policy === 'allow' || (sessionScoped && request.sessionAllowed.has(call.tool.name))) return null;
    if (this.sessionDenied.get(request.sessionAllowed)?.has(call.tool.name)) {
      return { errorClass: 'user_denied', message: `the user denied ${call.tool.name} for this session` };
    }
    if (policy === 'deny')
      return { errorClass: 'user_denied', message: `${effects} tools are denied by policy` };

    const requestId = newId('conf');
    const summary = visibleSummaries(
      asked !== null
        ? { input_summary: asked.input_summary }
        : (call.tool.summarize?.(call.input as never) ?? { input_summary: call.tool.name }),
    );
    const expiresAt = new Date(Date.now() + this.config.confirmation_timeout_ms).toISOString();
    const requested = request.events.emit('tool.confirmation_requested', call.calledId, {
      tool_use_id: call.use.id,
      tool_name: call.tool.name,
      // Only a tool with side effects is ever asked about (sideEffectPolicy has no policy for `none`).
      side_effects: effects as Exclude<SideEffects, 'none'>,
      confirmation_request_id: requestId,
      input_summary: summary.input_summary,
      projected_modifications: summary.projected_modifications ?? null,
      command_summary: summary.command_summary ?? null,
      expires_at: expiresAt,
    });
    const answer = await this.confirmations.wait(
      {
        session_id: request.events.sessionId,
        turn_id: request.events.turnId,
        confirmation_request_id: requestId,
        tool_use_id: call.use.id,
        tool_name: call.tool.name,
        side_effects: effects,
        input: call.use.input,
        input_hash: call.inputHash,
        input_summary: summary.input_summary,
        command_summary: summary.command_summary ?? null,
        projected_modifications: summary.projected_modifications ?? null,
        expires_at: expiresAt,
      },
      this.config.confirmation_timeout_ms,
      request.signal,
    );
    // A cancelled turn closes the request without tool.confirmation_resolved: its decision values are
    // allow, deny and timeout (bus §6.4); tool.failed(cancelled) and turn.cancelled end it instead.
    if (answer.decision === 'cancelled') {
      return { errorClass: 'cancelled', message: 'the turn was cancelled while waiting for confirmation' };
    }
    request.events.emit('tool.confirmation_resolved', requested.id, {
      tool_use_id: call.use.id,
      confirmation_request_id: requestId,
      decision: answer.decision,
      scope: answer.decision === 'timeout' ? null : answer.scope,
      responding_client_attach_token: answer.respondingClient,
    });
    if (answer.decision === 'allow') {
      if (answer.scope === 'session' && sessionScoped) request.sessionAllowed.add(call.tool.name);
      return null;
    }
    if (answer.decision === 'deny' && answer.scope === 'session') {
      const denied = this.sessionDenied.get(request.sessionAllowed) ?? new Set<string>();
      denied.add(call.tool.name);
      this.sessionDenied.set(request.sessionAllowed, denied);
    }
    return answer.decision === 'deny'
      ? {
          errorClass: 'user_denied',
          message: `the user denied this tool call${answer.reason ? `: ${answer.reason}` : ''}`,
        }
      : { errorClass: 'confirmation_timeout', message: 'nobody answered the confirmation in time' };
  }
}

/** The side-effect policy of `runtime.tool_confirmation`; null for effects it does not cover. */
function sideEffectPolicy(config: RuntimeConfig, effects: SideEffects): 'ask' | 'allow' | 'deny' | null {
  if (effects !== 'write' && effects !== 'execute' && effects !== 'network') return null;
  return config.tool_confirmation[effects];
}

function errorResult(toolUseId: string, message: string): ToolResultBlock {
  return { type: 'tool_result', tool_use_id: toolUseId, content: message, is_error: true };
}

/** The summaries a confirmation shows, with their control characters visible (visible-summary.ts). */
function visibleSummaries<S extends { input_summary: string; command_summary?: string }>(summary: S): S {
  return {
    ...summary,
    input_summary: visibleSummary(summary.input_summary),
    ...(summary.command_summary === undefined
      ? {}
      : { command_summary: visibleSummary(summary.command_summary) }),
  };
}
