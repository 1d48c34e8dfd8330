import type { PayloadOf } from '../../../events/catalog/index.js';
import type { MetisEvent } from '../../../events/envelope.js';
import { type AgUiState, stateDelta } from './ag-ui-state.js';
import { blockMessageId, toolResultMessageId } from './ag-ui-thread.js';
import { RunUsage } from './ag-ui-usage.js';

/** One AG-UI event (`@ag-ui/core` 1.0), as sent on the wire. */
export type AgUiEvent = { readonly type: string } & Record<string, unknown>;

/** The metis events the mapper reads (its switch below): a run's stream subscribes to these alone. */
export const AG_UI_EVENT_TYPES = [
  'route.decided',
  'route.overridden',
  'llm.call_started',
  'llm.call_completed',
  'llm.call_failed',
  'text.delta',
  'thinking.delta',
  'message.complete',
  'tool.use_start',
  'tool.use_input_delta',
  'tool.use_end',
  'tool.called',
  'tool.completed',
  'tool.failed',
  'tool.confirmation_requested',
  'tool.confirmation_resolved',
  'delegate.started',
  'delegate.completed',
  'delegate.failed',
  'turn.completed',
  'turn.cancelled',
] as const;

/** A tool call of the model message whose calls run now, in the order the model made them. */
export interface BatchCall {
  readonly id: string;
  /** A frontend tool's call: the client runs it. */
  readonly client: boolean;
  done: boolean;
}

/** What the mapper needs of the run and of the thread. */
export interface AgUiRunContext {
  readonly threadId: string;
  readonly runId: string;
  /** The tool's result as the model got it, once stored. */
  toolResult(toolUseId: string): string;
  /** The thread as stored, under the ids the client holds (ag-ui-thread.ts). */
  thread(): unknown[];
  /** The session's renderable state now (ag-ui-state.ts). */
  state(): AgUiState;
  /** Names of the turn's frontend tools. */
  readonly clientTools: ReadonlySet<string>;
  /** Frontend tool calls whose results this run brought: the client holds their tool messages. */
  readonly answered: ReadonlySet<string>;
  /** A run that continues a turn: the calls of the model message that was running them (ag-ui-resume.ts). */
  readonly batch?: readonly BatchCall[];
  /** Approvals end the run as interrupts (a client that declares protocol 1.0); else the run waits. */
  readonly interrupts: boolean;
}

interface OpenBlock {
  readonly id: string;
  readonly kind: 'text' | 'reasoning';
}

/** The blocks of the model message streaming now: their AG-UI ids, and the one its tool calls go to. */
interface StreamingMessage {
  readonly messageId: string;
  readonly positions: Map<number, number>;
  carrier: string | null;
}

/**
 * Maps the events of one metis turn to an AG-UI run (docs/ag-ui.md). Each block of a model's message is
 * its own AG-UI message (blockMessageId), ended before the next one starts, so messages never
 * interleave; tool calls keep the provider's id and belong to the text before them in their message.
 * Model calls, the routing decision and delegations are steps; the session's state goes out as a
 * snapshot and as patches. The run ends with the turn, or earlier where the turn waits for the client:
 * an approval (an interrupt, answered by the next run's `resume`) or a frontend tool's call (answered by
 * the next run's tool message).
 */
export class AgUiMapper {
  /** Set once the run's last event is out; the turn may go on (TurnMapper.runOver). */
  runOver = false;
  private open: OpenBlock | null = null;
  private streaming: StreamingMessage | null = null;
  private readonly steps = new Set<string>();
  private batch: BatchCall[];
  /** Tool calls whose results go out once stored: before the next model call or at the run's end. */
  private readonly finished = new Set<string>();
  private readonly usage = new RunUsage();
  private failure: { message: string; code: string } | null = null;
  private shownState: AgUiState | null = null;
  /**
   * The session's cost as the run started: the state adds what the run's events report, since the
   * runtime's own sum (a bus subscriber) may not have counted the call this event reports yet.
   */
  private startCost = 0;
  private workerCost = 0;
  /** The model the run's turn was routed to, which the stored state may not hold yet. */
  private routedModel: string | null = null;

  constructor(
    private readonly write: (event: AgUiEvent) => void,
    private readonly run: AgUiRunContext,
  ) {
    this.batch = run.batch?.map((call) => ({ ...call })) ?? [];
    // A continued run shows the results of the calls metis ran for the message it picks up.
    for (const call of this.batch) if (!call.client) this.finished.add(call.id);
  }

  start(): void {
    this.write({ type: 'RUN_STARTED', threadId: this.run.threadId, runId: this.run.runId });
    this.shownState = this.run.state();
    this.startCost = this.shownState.cost_usd;
    this.write({ type: 'STATE_SNAPSHOT', snapshot: this.shownState });
  }

  onEvent(event: MetisEvent): void {
    const p = event.payload as Record<string, any>;
    switch (event.type) {
      case 'route.decided':
        this.stepStarted('route');
        this.custom('metis.route_decided', {
          chosen_model: p.chosen_model,
          policy: p.chain?.[p.winner_index]?.policy,
        });
        this.stepFinished('route');
        this.routedModel = p.chosen_model;
        this.showState();
        return;
      case 'route.overridden':
        this.routedModel = p.new_chosen_model;
        this.showState();
        return;
      case 'llm.call_started':
        this.flushResults();
        this.batch = [];
        this.stepStarted(`model:${p.model}`);
        return;
      case 'llm.call_completed':
      case 'llm.call_failed':
        this.closeBlock();
        this.streaming = null;
        if (event.type === 'llm.call_completed') this.usage.add(p as PayloadOf<'llm.call_completed'>);
        else if (p.error_class !== 'cancelled')
          this.failure = { message: String(p.error_message_redacted), code: String(p.error_class) };
        this.stepFinished(`model:${p.model}`);
        this.showState();
        return;
      case 'text.delta':
      case 'thinking.delta':
        this.block(event.type === 'text.delta' ? 'text' : 'reasoning', p, p.text);
        return;
      case 'message.complete':
        this.closeBlock();
        return;
      case 'tool.use_start':
        this.toolCallStart(p);
        return;
      case 'tool.use_input_delta':
        if (p.partial_json)
          this.write({ type: 'TOOL_CALL_ARGS', toolCallId: p.tool_use_id, delta: p.partial_json });
        return;
      case 'tool.use_end':
        this.write({ type: 'TOOL_CALL_END', toolCallId: p.tool_use_id });
        return;
      case 'tool.called':
        this.batch.push({ id: p.tool_use_id, client: this.run.clientTools.has(p.tool_name), done: false });
        this.pauseForClientTool();
        return;
      case 'tool.completed':
      case 'tool.failed':
        for (const call of this.batch) if (call.id === p.tool_use_id) call.done = true;
        if (!this.run.answered.has(p.tool_use_id)) this.finished.add(p.tool_use_id);
        this.pauseForClientTool();
        return;
      case 'tool.confirmation_requested':
        this.custom('metis.confirmation_requested', {
          session_id: event.session_id,
          confirmation_request_id: p.confirmation_request_id,
          tool_use_id: p.tool_use_id,
          tool_name: p.tool_name,
          side_effects: p.side_effects,
          input_summary: p.input_summary,
          expires_at: p.expires_at,
          answer: `POST /sessions/${event.session_id}/confirmations/${p.confirmation_request_id}`,
        });
        if (this.run.interrupts) this.interrupt(p);
        else this.showState();
        return;
      case 'tool.confirmation_resolved':
        this.custom('metis.confirmation_resolved', {
          confirmation_request_id: p.confirmation_request_id,
          tool_use_id: p.tool_use_id,
          decision: p.decision,
        });
        this.showState();
        return;
      case 'delegate.started':
        this.stepStarted(`delegate:${p.worker_session_id}`);
        return;
      case 'delegate.completed':
      case 'delegate.failed':
        if (p.worker_session_id) this.stepFinished(`delegate:${p.worker_session_id}`);
        this.workerCost += Number.parseFloat(String(p.worker_total_cost_usd ?? 0)) || 0;
        this.showState();
        return;
      case 'turn.completed':
        this.finishTurn({
          stop_reason: p.stop_reason,
          total_cost_usd: p.total_cost_usd,
          llm_call_count: p.llm_call_count,
        });
        return;
      case 'turn.cancelled':
        this.finishTurn({ cancelled: p.reason });
        return;
    }
  }

  /** The stream ends before its turn (the server closed it: a reader too slow for the queue bound). */
  fail(code: string, message: string): void {
    // Nothing is closed first: what the dropped queue held never reached the client, so the blocks
    // this mapper has open may not be open there.
    this.write({ type: 'RUN_ERROR', message, code });
  }

  /** The stream ends with its run: RUN_FINISHED or RUN_ERROR went out already. */
  end(): void {}

  private finishTurn(summary: Record<string, unknown>): void {
    this.closeRun();
    this.flushResults();
    this.custom('metis.cost', summary);
    this.showState();
    const usage = this.usage.entries();
    const result = { ...this.usage.summary(), ...summary };
    if ('cancelled' in summary) {
      // Not RUN_FINISHED `outcome: cancelled`: the SDKs before @ag-ui/core 1.0 (TypeScript 0.0.x,
      // Python 0.1.x) refuse that outcome, and a run without one reads as completed. A run that did not
      // complete is RUN_ERROR everywhere (docs/ag-ui.md "Cancel").
      this.write({ type: 'MESSAGES_SNAPSHOT', messages: this.run.thread() });
      this.write({
        type: 'RUN_ERROR',
        code: 'cancelled',
        message: `the turn was cancelled (${summary.cancelled})`,
        usage,
      });
    } else if (this.failure !== null) this.write({ type: 'RUN_ERROR', ...this.failure, usage });
    else this.finishRun({ result, usage });
  }

  /** An approval: the run ends with an interrupt the next run's `resume` answers; the turn waits. */
  private interrupt(p: Record<string, any>): void {
    this.closeRun();
    this.showState();
    this.finishRun({
      result: { ...this.usage.summary(), waiting_for: 'approval' },
      usage: this.usage.entries(),
      outcome: {
        type: 'interrupt',
        interrupts: [
          {
            id: p.confirmation_request_id,
            reason: 'tool_call',
            message: `Allow ${p.tool_name}? ${p.input_summary}`,
            toolCallId: p.tool_use_id,
            responseSchema: APPROVAL_SCHEMA,
            expiresAt: p.expires_at,
            metadata: { metis: { tool_name: p.tool_name, side_effects: p.side_effects } },
          },
        ],
      },
    });
  }

  /**
   * Ends the run when the next call to run is a frontend tool's whose result this run did not bring:
   * the client runs it once the run is over (the calls it must answer are the ones the run started and
   * left without a result; no `outcome`, which the SDKs before 1.0 do not know).
   */
  private pauseForClientTool(): void {
    const next = this.batch.find((call) => !call.done);
    if (next === undefined || !next.client || this.run.answered.has(next.id)) return;
    this.closeRun();
    this.showState();
    this.finishRun({
      result: { ...this.usage.summary(), waiting_for: 'frontend_tools' },
      usage: this.usage.entries(),
    });
  }

  private finishRun(fields: Record<string, unknown>): void {
    this.write({ type: 'MESSAGES_SNAPSHOT', messages: this.run.thread() });
    this.write({ type: 'RUN_FINISHED', threadId: this.run.threadId, runId: this.run.runId, ...fields });
    this.runOver = true;
  }

  /** What must be closed before the run's last event: the open block and the open steps. */
  private closeRun(): void {
    this.closeBlock();
    for (const step of [...this.steps]) this.stepFinished(step);
  }

  private showState(): void {
    if (this.shownState === null) return;
    const cost = this.startCost + this.usage.summary().cost_usd + this.workerCost;
    // Rounded as the pricing rounds a call, so sums of the same calls compare equal.
    const stored = this.run.state();
    const now = {
      ...stored,
      model: this.routedModel ?? stored.model,
      cost_usd: Math.round(cost * 1e8) / 1e8,
    };
    const delta = stateDelta(this.shownState, now);
    this.shownState = now;
    if (delta.length > 0) this.write({ type: 'STATE_DELTA', delta });
  }

  /** The AG-UI id of a block of the streaming model message (its position among the message's blocks). */
  private blockId(p: Record<string, any>): string {
    let streaming = this.streaming;
    if (streaming === null || streaming.messageId !== p.message_id) {
      streaming = { messageId: p.message_id, positions: new Map(), carrier: null };
      this.streaming = streaming;
    }
    const { positions } = streaming;
    if (!positions.has(p.content_block_index)) positions.set(p.content_block_index, positions.size);
    return blockMessageId(p.message_id, positions.get(p.content_block_index)!);
  }

  private block(kind: OpenBlock['kind'], p: Record<string, any>, delta: string): void {
    const id = this.blockId(p);
    if (this.open?.id !== id) {
      this.closeBlock();
      this.open = { id, kind };
      if (kind === 'text') {
        this.write({ type: 'TEXT_MESSAGE_START', messageId: id, role: 'assistant' });
        this.streaming!.carrier = id;
      } else {
        this.write({ type: 'REASONING_START', messageId: id });
        this.write({ type: 'REASONING_MESSAGE_START', messageId: id, role: 'reasoning' });
      }
    }
    if (!delta) return;
    this.write({
      type: kind === 'text' ? 'TEXT_MESSAGE_CONTENT' : 'REASONING_MESSAGE_CONTENT',
      messageId: id,
      delta,
    });
  }

  /** A tool call belongs to the text before it in its message, or to a message named after it. */
  private toolCallStart(p: Record<string, any>): void {
    this.closeBlock();
    const id = this.blockId(p);
    const streaming = this.streaming!;
    streaming.carrier ??= id;
    this.write({
      type: 'TOOL_CALL_START',
      toolCallId: p.tool_use_id,
      toolCallName: p.tool_name,
      parentMessageId: streaming.carrier,
    });
  }

  private closeBlock(): void {
    const open = this.open;
    if (open === null) return;
    this.open = null;
    if (open.kind === 'text') this.write({ type: 'TEXT_MESSAGE_END', messageId: open.id });
    else {
      this.write({ type: 'REASONING_MESSAGE_END', messageId: open.id });
      this.write({ type: 'REASONING_END', messageId: open.id });
    }
  }

  private stepStarted(stepName: string): void {
    this.steps.add(stepName);
    this.write({ type: 'STEP_STARTED', stepName });
  }

  /** A step this run did not start (a continued run's delegation) has no end in it either. */
  private stepFinished(stepName: string): void {
    if (this.steps.delete(stepName)) this.write({ type: 'STEP_FINISHED', stepName });
  }

  /** Tool results go out once stored: before the next model call, or at the end of the turn. */
  private flushResults(): void {
    for (const toolCallId of this.finished)
      this.write({
        type: 'TOOL_CALL_RESULT',
        messageId: toolResultMessageId(toolCallId),
        toolCallId,
        content: this.run.toolResult(toolCallId),
        role: 'tool',
      });
    this.finished.clear();
  }

  private custom(name: string, value: unknown): void {
    this.write({ type: 'CUSTOM', name, value });
  }
}

/** What a `resume` payload answers an approval with (docs/ag-ui.md "Approvals"). */
const APPROVAL_SCHEMA = {
  type: 'object',
  properties: {
    approved: { type: 'boolean' },
    scope: {
      type: 'string',
      enum: ['once', 'session'],
      description: 'session: allow this tool for the session',
    },
  },
  required: ['approved'],
} as const;
