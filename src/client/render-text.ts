import type { ClientItem } from './client.js';
import { plural } from './plural.js';
import type { ConversationState, SnapshotConfirmation, WireEvent } from './reducer.js';
import { visible as v } from './visible-text.js';

/** The part of a `route.decided` chain entry the text view shows. */
interface ChainEntry {
  readonly policy: string;
  readonly verdict: string;
  readonly candidate_model: string | null;
  readonly validation_failure: string | null;
  readonly reason?: string;
  readonly confidence?: number | null;
}

export interface RenderOptions {
  readonly color: boolean;
  /** The server's URL when it is not the default: commands printed for the user must reach it. */
  readonly serverUrl?: string;
  /**
   * The detailed view (`tail --preset full`): sessions, each model call with its tokens and latency,
   * invalid tool input. The chat view leaves those out even when its subscription carries them.
   */
  readonly detailed?: boolean;
  /**
   * How the user picks another model where the text is shown, for the advice after a failed turn:
   * `--model` on the command line (the default), `/model` inside `metis chat`.
   */
  readonly modelChoice?: string;
}

const codes = {
  dim: [2, 22],
  bold: [1, 22],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  cyan: [36, 39],
} as const;

function paint(options: RenderOptions, style: keyof typeof codes, text: string): string {
  if (!options.color) return text;
  const [open, close] = codes[style];
  return `\u001b[${open}m${text}\u001b[${close}m`;
}

/**
 * Turns one client item into terminal text, given the state after it was reduced. Assistant text and
 * thinking stream in place (no newline until the message completes); tool calls, routes,
 * confirmations, cancellations, errors and the turn's cost get a line each.
 */
export function renderItem(
  item: ClientItem,
  state: ConversationState,
  sessionId: string,
  options: RenderOptions,
): string {
  if (item.kind === 'status') {
    if (item.status === 'reconnecting')
      return `${paint(options, 'yellow', `reconnecting… ${v(item.detail)}`)}\n`;
    if (item.status === 'connected') return `${paint(options, 'dim', `connected to ${v(item.detail)}`)}\n`;
    return '';
  }
  if (item.kind === 'resync') return `${paint(options, 'yellow', `resync: ${v(item.reason)}`)}\n`;
  if (item.kind === 'gap') {
    return `${paint(options, 'red', `gap in ${v(item.session_id)}: seq ${item.after_seq} → ${item.next_seq}`)}\n`;
  }
  const frame = item.frame;
  if (frame.type === 'snapshot') {
    const turns = frame.session?.turn_count ?? 0;
    const summary = `${paint(options, 'dim', `session ${v(frame.session?.id)}: ${plural(frame.messages.length, 'message')}, ${plural(turns, 'turn')}, $${v(frame.session?.cost_so_far_usd ?? 0)}`)}\n`;
    // Waiting confirmations (an additive snapshot field): the request id and how to answer it.
    // A worker's pending confirmation is answered through the attached session, like the session's own.
    const pending = ((frame.pending_confirmations ?? []) as SnapshotConfirmation[]).map((c) =>
      confirmationLines(
        options,
        c.session_id !== undefined && c.session_id !== (frame.session?.id ?? sessionId)
          ? paint(options, 'dim', `[${v(c.session_id.slice(-6))}] `)
          : '',
        sessionId,
        c,
      ),
    );
    return summary + pending.join('');
  }
  if (frame.type === 'subscribe_error')
    return `${paint(options, 'red', `subscribe failed: ${v(frame.code)}: ${v(frame.message)}`)}\n`;
  if (frame.type !== 'event') return '';
  const event = frame.event as WireEvent;
  const worker =
    event.session_id !== sessionId ? paint(options, 'dim', `[${v(event.session_id.slice(-6))}] `) : '';
  const p = event.payload;
  switch (event.type) {
    case 'turn.started':
      return `${worker}${paint(options, 'bold', '› turn')} ${paint(options, 'dim', v(event.turn_id ?? ''))}\n`;
    case 'route.decided': {
      const turn = event.turn_id ? state.turns[event.turn_id] : undefined;
      // A model the user asked for that could not serve is the surprise worth a line of its own.
      const rejected = ((p.chain ?? []) as ChainEntry[])
        .filter((c) => c.verdict === 'rejected')
        .map((c) => `${v(c.candidate_model)} rejected (${v(rejectionOf(c))})`);
      const route = `${worker}${paint(options, 'dim', `  route → ${v(p.chosen_model)} (${v(turn?.route_reason ?? '')})`)}\n`;
      const advice = deferredPatternLine(p.chain as ChainEntry[] | undefined, event.session_id, options);
      const lines = `${route}${advice ? `${worker}  ${paint(options, 'cyan', advice)}\n` : ''}`;
      return rejected.length === 0
        ? lines
        : `${worker}  ${paint(options, 'yellow', rejected.join('; '))}\n${lines}`;
    }
    case 'route.overridden':
      return `${worker}  ${paint(options, 'cyan', `↪ ${v(p.original_chosen_model)} → ${v(p.new_chosen_model)} (pattern recommendation applied)`)}\n`;
    case 'pattern.override_dismissed':
      if (!options.detailed) return '';
      return `${worker}${paint(options, 'dim', `  kept ${v(p.chosen_model)}; ${v(p.dismissed_pattern_model)} dismissed`)}\n`;
    case 'pattern.matched':
      if (!options.detailed) return '';
      return `${worker}${paint(options, 'dim', `  pattern chose ${v(p.chosen_model)} (${plural(Number(p.sample_size), 'similar turn')}, confidence ${p.confidence})`)}\n`;
    case 'pattern.recorded':
      if (!options.detailed) return '';
      return `${worker}${paint(options, 'dim', `  learned: ${v(p.primary_model)} scored ${p.success_score ?? '-'} on ${v(p.fingerprint_id)} (${p.sample_size_after} samples)`)}\n`;
    case 'pattern.evicted':
      if (!options.detailed) return '';
      return `${worker}${paint(options, 'dim', `  pattern store ${v(p.trigger)}: ${p.entries_evicted} outcomes removed, ${p.outcomes_after} kept`)}\n`;
    case 'eval.completed':
      if (!options.detailed) return '';
      return `${worker}${paint(options, 'dim', `  eval of ${v(p.subject_kind)} ${v(p.subject_id)}: ${p.score} (confidence ${p.confidence}, ${v(p.judge_kind)})`)}\n`;
    case 'eval.failed':
      if (!options.detailed) return '';
      return `${worker}  ${paint(options, 'red', `✗ eval of ${v(p.subject_kind)} ${v(p.subject_id)} failed (${v(p.failure_mode)}): ${v(p.error_message)}`)}\n`;
    case 'message.start':
      // The "assistant:" label waits for the first text: a message of tool calls only, or one that
      // failed before its first token, prints no empty line.
      return '';
    case 'text.delta': {
      const start = blockStart(state, p);
      return `${openingOf(start, worker, options)}${v(p.text)}`;
    }
    case 'thinking.delta': {
      // Without colour, dimming is invisible: the label keeps thinking apart from the answer.
      const start = blockStart(state, p);
      const label = start.first ? paint(options, 'dim', '(thinking) ') : '';
      return `${openingOf(start, worker, options)}${label}${paint(options, 'dim', v(p.text))}`;
    }
    case 'message.complete': {
      if (!printedAny(state, p.message_id)) return '';
      // A failed call's message: cut short, the llm.call_failed line below says why.
      if (p.stop_reason === 'error' || (p.error_class !== undefined && p.error_class !== 'cancelled'))
        return ` ${paint(options, 'red', '(cut short)')}\n`;
      return p.stop_reason === 'cancelled' ? ` ${paint(options, 'yellow', '(cancelled)')}\n` : '\n';
    }
    case 'tool.called': {
      const input = inputSummary(state.tools[p.tool_use_id]?.input ?? null);
      return `${worker}  ${paint(options, 'yellow', '⋯')} ${v(p.tool_name)} running${input ? `: ${v(input)}` : ''}\n`;
    }
    // The detail of the detailed view only.
    case 'session.created':
    case 'session.resumed':
    case 'session.ended': {
      if (!options.detailed) return '';
      const what = event.type.slice('session.'.length);
      const model = p.initial_active_model ?? '';
      return `${worker}${paint(options, 'dim', `session ${what}${model ? ` (${v(model)})` : ''}${p.disposition ? ` (${v(p.disposition)})` : ''}`)}\n`;
    }
    case 'llm.call_started':
      if (!options.detailed) return '';
      return `${worker}${paint(options, 'dim', `  model call → ${v(p.model)} (~${p.estimated_input_tokens} tokens in)`)}\n`;
    case 'llm.call_completed':
      if (!options.detailed) return '';
      return `${worker}${paint(options, 'dim', `  model call done: ${p.input_tokens} in, ${p.output_tokens} out, ${p.latency_ms} ms, $${Number(p.cost_usd).toFixed(6)} (${v(p.stop_reason)})`)}\n`;
    case 'provider.degraded':
      if (!options.detailed) return '';
      return `${worker}  ${paint(options, 'yellow', `! ${v(p.provider)} degraded: ${p.recent_failure_count} failures in ${p.window_seconds} s`)}\n`;
    case 'routing.provider_unavailable': {
      if (!options.detailed) return '';
      const what =
        p.scope === 'provider_wide' ? `provider ${v(p.provider)}` : v((p.models_affected ?? []).join(', '));
      return `${worker}  ${paint(options, 'red', `✗ ${what} out of routing (${v(p.trigger_reason)})`)}\n`;
    }
    case 'routing.provider_recovered': {
      if (!options.detailed) return '';
      const what =
        p.scope === 'provider_wide' ? `provider ${v(p.provider)}` : v((p.models_recovered ?? []).join(', '));
      return `${worker}  ${paint(options, 'green', `✓ ${what} back in routing after ${Math.round(Number(p.downtime_seconds))} s`)}\n`;
    }
    case 'feedback.explicit': {
      if (!options.detailed) return '';
      const rated = p.scope === 'turn' ? `turn ${v(p.subject_turn_id)}` : 'the session';
      return `${worker}${paint(options, 'dim', `  ${p.rating === 'thumbs_up' ? '👍' : '👎'} ${rated}${p.comment ? `: ${v(p.comment)}` : ''}`)}\n`;
    }
    case 'feedback.implicit':
      if (!options.detailed) return '';
      return `${worker}${paint(options, 'dim', `  signal: ${v(p.type)} of turn ${v(p.subject_turn_id)} (confidence ${p.confidence})`)}\n`;
    case 'tool.input_invalid':
      if (!options.detailed) return '';
      return `${worker}  ${paint(options, 'red', `✗ invalid input for ${v(p.tool_name)}`)}: ${v((p.validation_errors ?? []).join('; '))}\n`;
    case 'tool.completed':
      // success: false is a tool that ran to the end and reported failure (a command's non-zero exit).
      return p.success === false
        ? `${worker}  ${paint(options, 'red', '✗')} ${toolName(state, p.tool_use_id)} ran, reported an error (${p.latency_ms} ms)\n`
        : `${worker}  ${paint(options, 'green', '✓')} ${toolName(state, p.tool_use_id)} ok (${p.latency_ms} ms)\n`;
    case 'tool.failed': {
      const mark =
        p.error_class === 'cancelled'
          ? paint(options, 'yellow', '✗ cancelled')
          : paint(options, 'red', `✗ failed (${v(p.error_class)})`);
      return `${worker}  ${mark} ${toolName(state, p.tool_use_id)} (${p.latency_ms} ms)${p.error_class === 'cancelled' ? '' : `: ${v(p.error_message)}`}\n`;
    }
    case 'tool.confirmation_requested':
      // The answer goes through the attached session, a worker's request too (it descends from it).
      return confirmationLines(options, worker, sessionId, {
        tool_name: p.tool_name,
        summary: p.command_summary ?? p.input_summary,
        confirmation_request_id: p.confirmation_request_id,
      });
    case 'tool.confirmation_resolved':
      return `${worker}  ${paint(options, 'dim', `confirmation ${v(p.decision)}`)}\n`;
    case 'delegate.started':
      return `${worker}  ${paint(options, 'dim', `delegated to ${v(p.worker_session_id)} (${v(p.tier)} → ${v(p.resolved_model)})`)}\n`;
    case 'llm.call_failed':
      return p.error_class === 'cancelled'
        ? ''
        : `${worker}  ${paint(options, 'red', `model call failed (${v(p.error_class)}): ${v(p.error_message_redacted)}`)}\n`;
    case 'turn.cancelled':
      return `${worker}${paint(options, 'yellow', `■ turn cancelled (${v(p.reason)})`)}\n`;
    case 'turn.completed': {
      if (p.llm_call_count === 0) {
        // What routing said of each candidate, when the server sent it (signals_extra.routing).
        const routing = (p.signals_extra as { routing?: unknown } | null | undefined)?.routing;
        const why = Array.isArray(routing)
          ? routing.map((line) => `  ${paint(options, 'dim', v(line))}\n`).join('')
          : `  ${paint(options, 'dim', 'the server log has the routing chain')}\n`;
        return `${worker}${paint(options, 'red', '■ turn failed: no model could serve it')}\n${why}`;
      }
      const turn = event.turn_id ? state.turns[event.turn_id] : undefined;
      const failure = turn?.last_call_failed ? turn.errors.at(-1) : undefined;
      if (failure !== undefined) {
        const retries = failure.retry_count > 0 ? `, after ${plural(failure.retry_count, 'retry')}` : '';
        const advice = FAILURE_ADVICE[failure.error_class]?.replace(
          '{model}',
          options.modelChoice ?? '--model',
        );
        return `${worker}${paint(options, 'red', `■ turn failed (${v(failure.error_class)}${retries})`)}\n${advice ? `  ${paint(options, 'dim', advice)}\n` : ''}`;
      }
      return `${worker}${paint(options, 'dim', `■ turn done: ${plural(p.llm_call_count, 'model call')}, ${plural(p.tool_call_count, 'tool')}, $${Number(p.total_cost_usd).toFixed(6)}`)}\n`;
    }
    default:
      return '';
  }
}

/**
 * A tool's name. A call that started before the client attached is known only from a confirmation the
 * snapshot listed as pending, if at all.
 */
function toolName(state: ConversationState, toolUseId: string): string {
  return v(
    state.tools[toolUseId]?.tool_name ??
      Object.values(state.confirmations).find((c) => c.tool_use_id === toolUseId)?.tool_name ??
      'tool',
  );
}

/**
 * A waiting confirmation: that the call waits for approval, what the tool wants to do (control
 * characters visible, a multi-line command indented so no line of it passes for metis's own), and the
 * command that answers it, through `sessionId`: the session the user is attached to.
 */
function confirmationLines(
  options: RenderOptions,
  worker: string,
  sessionId: string,
  c: Omit<SnapshotConfirmation, 'tool_use_id'>,
): string {
  const url = options.serverUrl === undefined ? '' : ` --url ${options.serverUrl}`;
  const summary = v(c.summary).replaceAll('\n', '\n      ');
  return `${worker}  ${paint(options, 'yellow', '?')} waiting for approval: confirm ${v(c.tool_name)}: ${summary}\n    metis confirm ${v(sessionId)} ${v(c.confirmation_request_id)} allow|deny${url}\n`;
}

/**
 * Whether a delta (already reduced into `state`) opened its block, and whether it opened it after an
 * earlier block of the same message, which then needs a line break before it.
 */
function blockStart(state: ConversationState, p: WireEvent['payload']): { first: boolean; after: boolean } {
  const message = state.messages.find((m) => m.id === p.message_id);
  const block = message?.blocks[p.content_block_index];
  if (!message || !block) return { first: false, after: false };
  const written = block.type === 'text' ? block.text : block.type === 'thinking' ? block.thinking : null;
  const first = written !== null && written.length === String(p.text ?? '').length;
  // After an earlier block that printed something: a tool call before the text prints nothing here.
  const after =
    first &&
    message.blocks
      .slice(0, p.content_block_index)
      .some((b) => (b?.type === 'text' && b.text !== '') || (b?.type === 'thinking' && b.thinking !== ''));
  return { first, after };
}

/**
 * Why a candidate was rejected: the server's words when its reason carries them ("not_configured: no
 * API key: $OPENAI_API_KEY is not set"), else the validation failure or the policy.
 */
function rejectionOf(c: ChainEntry): string {
  const said = /cannot serve \((.+)\)$/.exec(String(c.reason ?? ''))?.[1];
  return said ?? c.validation_failure ?? c.policy;
}

/** What a tool call acts on, in a line: its command or path, else its input as short JSON. */
function inputSummary(input: Record<string, unknown> | null): string {
  if (input === null) return '';
  for (const key of ['command', 'path', 'task']) {
    if (typeof input[key] === 'string') return shorten(String(input[key]));
  }
  const json = JSON.stringify(input);
  return json === '{}' ? '' : shorten(json);
}

function shorten(text: string): string {
  const line = text.replaceAll('\n', ' ⏎ ');
  return line.length > 120 ? `${line.slice(0, 119)}…` : line;
}

/**
 * What to do about a turn whose last model call failed, by `error_class` (bus §6.3). The failure line
 * above it names the key's variable or the URL where the server knows them. `{model}` is how to pick
 * another model there (RenderOptions.modelChoice).
 */
const FAILURE_ADVICE: Readonly<Record<string, string>> = {
  auth: 'the provider refused the API key: set the variable named above, then send again',
  network: 'the provider did not answer: check that the URL above is reachable (a local server running?)',
  rate_limit: 'the provider is rate limiting: wait and send again, or pick another model with {model}',
  server_error: 'the provider failed: send again later, or pick another model with {model}',
  context_overflow: 'the conversation is too long for this model: start a new session (metis send --new)',
  invalid_request: 'the provider refused the request: the message above says what it objected to',
};

/** What opens a delta's block: "assistant: " before the message's first text, a line break between blocks. */
function openingOf(
  start: { first: boolean; after: boolean },
  worker: string,
  options: RenderOptions,
): string {
  if (!start.first) return '';
  return start.after ? '\n' : `${worker}${paint(options, 'cyan', 'assistant')}: `;
}

/** Whether any text or thinking of the message was printed (its final content has some). */
function printedAny(state: ConversationState, messageId: unknown): boolean {
  const message = state.messages.find((m) => m.id === messageId);
  return (message?.blocks ?? []).some(
    (b) => (b?.type === 'text' && b.text !== '') || (b?.type === 'thinking' && b.thinking !== ''),
  );
}

/** A pattern recommendation deferred behind an earlier policy: what the user may apply. */
function deferredPatternLine(
  chain: readonly ChainEntry[] | undefined,
  sessionId: string,
  options: RenderOptions,
): string | null {
  const pattern = (chain ?? []).find((c) => c.policy === 'pattern' && c.verdict === 'deferred');
  if (!pattern?.candidate_model) return null;
  const confidence = typeof pattern.confidence === 'number' ? `, confidence ${pattern.confidence}` : '';
  const why = (pattern.reason ?? '').split('; ')[0];
  const url = options.serverUrl === undefined ? '' : ` --url ${options.serverUrl}`;
  return v(
    `pattern suggests ${pattern.candidate_model} (${why}${confidence}): metis route override ${sessionId}${url}`,
  );
}
