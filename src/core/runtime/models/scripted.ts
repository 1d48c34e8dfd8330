import { setTimeout as sleep } from 'node:timers/promises';
import { newId } from '../../events/ids.js';
import {
  type AdapterChunk,
  AdapterError,
  type AdapterResult,
  type ConversationMessage,
  ERROR_CLASSES,
  type ErrorClass,
  estimateTokens,
  type ModelAdapter,
  type ModelRequest,
} from '../model-adapter.js';
import { parseToolInput } from './conversation.js';

export interface ScriptedOptions {
  /** Delay between streamed tokens; 0 streams as fast as the loop goes (tests). */
  readonly tokenDelayMs?: number;
  /** Delay between tokens of a `slow:` message, long enough to cancel mid-stream. */
  readonly slowTokenDelayMs?: number;
  /** Tokens a `slow:` message streams. */
  readonly slowTokens?: number;
}

type Plan =
  | { kind: 'text'; text: string; thinking?: string }
  | {
      kind: 'tool';
      name: string;
      input: Record<string, unknown>;
      preface: string;
      thinking?: string;
      /** More calls in the same message (`run-each:`), after this one. */
      more?: readonly { name: string; input: Record<string, unknown> }[];
    }
  | { kind: 'slow'; text: string }
  | { kind: 'fail'; errorClass: ErrorClass; message: string };

/**
 * The built-in deterministic model: no network, no key. What it does is driven by the last user
 * message (documented in the README):
 *
 *   plain text        → streams a text answer token by token
 *   `think: X`        → a thinking block (with a signature on its last delta), then the answer;
 *                       `think: time` (or any trigger below) thinks first, then does that
 *   `time`            → calls `current_time`
 *   `run: <cmd>`      → calls `shell` with the command
 *   `read: <path>`    → calls `read_file`
 *   `delegate: <task>`→ calls `delegate` (tier `fast`)
 *   `client: <tool> [json]` → calls the client's tool of that name (an AG-UI frontend tool) with the
 *                       JSON object as input (`{}` without one); says so when no such tool is offered
 *   `remember: <text>` → calls `memory` to add an entry to MEMORY.md (`remember user: <text>`: USER.md)
 *   `consolidate: a | b` → calls `memory` to make MEMORY.md's entries `a`, `b`
 *   `recall`          → answers with the system prompt it was given (the workspace memory, skills)
 *   `skill: <name>`   → calls `skill_load` with that name; `skills? <query>` → calls `skill_search`
 *   `slow: X`         → streams slowly, so a cancel lands mid-message
 *   `run-each: a ;; b` → calls `shell` once per command, all in one message
 *   `slow-after: <trigger>` → does what `<trigger>` does, then streams its answer to the tool result
 *                       slowly: a restart can land after the tool ended, mid-answer (durable turns)
 *   `fail: <class>`   → fails with that `error_class` (rate_limit, auth, server_error, ...)
 *
 * After a tool result it answers with a short summary of the result and ends the turn.
 */
export class ScriptedModel implements ModelAdapter {
  readonly provider = 'scripted';
  private readonly tokenDelayMs: number;
  private readonly slowTokenDelayMs: number;
  private readonly slowTokens: number;

  constructor(options: ScriptedOptions = {}) {
    this.tokenDelayMs = options.tokenDelayMs ?? 0;
    this.slowTokenDelayMs = options.slowTokenDelayMs ?? 25;
    this.slowTokens = options.slowTokens ?? 400;
  }

  async *stream(
    request: ModelRequest,
    signal: AbortSignal,
  ): AsyncGenerator<AdapterChunk, AdapterResult, void> {
    const plan = planFor(request.messages, new Set(request.tools.map((tool) => tool.name)), request.system);
    const inputTokens = estimateTokens(request.messages);
    const requestId = newId('req');
    let outputTokens = 0;
    let index = 0;
    const pause = async (ms: number) => {
      if (signal.aborted) throw new AdapterError('cancelled', 'the request was cancelled');
      if (ms > 0) {
        await sleep(ms, undefined, { signal }).catch(() => undefined);
      } else {
        // Yield to the event loop so a cancel can land between tokens even at full speed.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      if (signal.aborted) throw new AdapterError('cancelled', 'the request was cancelled');
    };

    if (plan.kind === 'fail') {
      await pause(this.tokenDelayMs);
      throw new AdapterError(plan.errorClass, plan.message);
    }
    if ((plan.kind === 'text' || plan.kind === 'tool') && plan.thinking !== undefined) {
      const pieces = tokenize(plan.thinking);
      for (let i = 0; i < pieces.length; i += 1) {
        await pause(this.tokenDelayMs);
        const last = i === pieces.length - 1;
        yield {
          kind: 'thinking',
          index,
          text: pieces[i]!,
          signature: last ? signatureOf(plan.thinking) : null,
        };
        outputTokens += 1;
      }
      index += 1;
    }
    const text =
      plan.kind === 'tool' ? plan.preface : plan.kind === 'slow' ? this.slowText(plan.text) : plan.text;
    const delay = plan.kind === 'slow' ? this.slowTokenDelayMs : this.tokenDelayMs;
    for (const piece of tokenize(text)) {
      await pause(delay);
      yield { kind: 'text', index, text: piece };
      outputTokens += 1;
    }
    index += 1;
    const calls = plan.kind === 'tool' ? [{ name: plan.name, input: plan.input }, ...(plan.more ?? [])] : [];
    for (const call of calls) {
      const toolUseId = newId('tu');
      yield { kind: 'tool_use_start', index, tool_use_id: toolUseId, tool_name: call.name };
      const json = JSON.stringify(call.input);
      for (let at = 0; at < json.length; at += 8) {
        await pause(this.tokenDelayMs);
        yield { kind: 'tool_input', index, tool_use_id: toolUseId, partial_json: json.slice(at, at + 8) };
        outputTokens += 1;
      }
      yield { kind: 'tool_use_end', index, tool_use_id: toolUseId, final_input: call.input };
      index += 1;
    }
    return {
      stop_reason: plan.kind === 'tool' ? 'tool_use' : 'end_turn',
      usage: {
        input_tokens: inputTokens,
        output_tokens: outputTokens,
        cached_input_tokens: 0,
        cache_creation_input_tokens: 0,
      },
      provider_request_id: requestId,
    };
  }

  private slowText(topic: string): string {
    const words: string[] = [];
    for (let i = 0; i < this.slowTokens; i += 1) words.push(i === 0 ? `Slowly about ${topic}:` : `word${i}`);
    return words.join(' ');
  }
}

function lastUserText(messages: readonly ConversationMessage[]): {
  text: string;
  afterTool: ConversationMessage | null;
} {
  const last = messages[messages.length - 1];
  if (last && last.role === 'tool') return { text: '', afterTool: last };
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const message = messages[i]!;
    if (message.role !== 'user') continue;
    const text = message.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    return { text: text.trim(), afterTool: null };
  }
  return { text: '', afterTool: null };
}

function planFor(
  messages: readonly ConversationMessage[],
  offered: ReadonlySet<string>,
  system?: string,
): Plan {
  const { text, afterTool } = lastUserText(messages);
  if (afterTool) {
    const results = afterTool.content.filter((b) => b.type === 'tool_result');
    const summary = results
      .map((b) =>
        b.type === 'tool_result' ? `${b.is_error ? 'failed: ' : ''}${b.content.slice(0, 200)}` : '',
      )
      .join('; ');
    // The user's message the tool answered: `slow-after:` asks for a slow answer to the result.
    const asked = messages.findLast((m) => m.role === 'user' && m.content.some((b) => b.type === 'text'));
    const askedText = asked?.content.map((b) => (b.type === 'text' ? b.text : '')).join('') ?? '';
    if (askedText.trim().startsWith('slow-after:')) return { kind: 'slow', text: `the result (${summary})` };
    return { kind: 'text', text: `The tool returned ${summary}` };
  }
  const [, trigger, rest = ''] =
    /^(think|run|read|delegate|client|remember user|remember|consolidate|skill|slow-after|run-each|slow|fail):\s*(.*)$/s.exec(
      text,
    ) ?? [];
  if (text === 'time')
    return { kind: 'tool', name: 'current_time', input: {}, preface: 'Let me check the time.' };
  const search = /^skills\?\s*(.*)$/s.exec(text);
  if (search)
    return {
      kind: 'tool',
      name: 'skill_search',
      input: { query: search[1]! },
      preface: 'Looking for a skill.',
    };
  if (text === 'recall')
    return { kind: 'text', text: system ? `My memory: ${system}` : 'I remember nothing.' };
  switch (trigger) {
    case 'think': {
      // `think: time` thinks, then does what `time` does.
      const inner = planFor([{ role: 'user', content: [{ type: 'text', text: rest }] }], offered);
      const thinking = `The user asks: ${rest}. ${inner.kind === 'tool' ? `I will use ${inner.name}.` : 'I will answer plainly.'}`;
      if (inner.kind === 'tool') return { ...inner, thinking };
      return { kind: 'text', thinking, text: `You asked: ${rest}` };
    }
    case 'run':
      return { kind: 'tool', name: 'shell', input: { command: rest }, preface: 'Running it.' };
    case 'run-each': {
      const [head = '', ...tail] = rest.split(';;').map((command) => command.trim());
      const more = tail.map((command) => ({ name: 'shell', input: { command } }));
      return { kind: 'tool', name: 'shell', input: { command: head }, preface: 'Running them.', more };
    }
    case 'read':
      return { kind: 'tool', name: 'read_file', input: { path: rest }, preface: 'Reading it.' };
    case 'delegate':
      return { kind: 'tool', name: 'delegate', input: { task: rest, tier: 'fast' }, preface: 'Delegating.' };
    case 'client': {
      const [, name = '', json = ''] = /^(\S*)\s*(.*)$/s.exec(rest) ?? [];
      // As a real model would: a tool it was not offered is not called.
      if (!offered.has(name)) return { kind: 'text', text: `No tool named ${name} is offered.` };
      return { kind: 'tool', name, input: parseToolInput(json), preface: `Asking your ${name}.` };
    }
    case 'remember':
    case 'remember user': {
      const file = trigger === 'remember' ? 'memory' : 'user';
      return { kind: 'tool', name: 'memory', input: { action: 'add', file, text: rest }, preface: 'Noted.' };
    }
    case 'consolidate': {
      const entries = rest.split('|').map((entry) => entry.trim());
      return {
        kind: 'tool',
        name: 'memory',
        input: { action: 'consolidate', entries },
        preface: 'Tidying up.',
      };
    }
    case 'skill':
      return {
        kind: 'tool',
        name: 'skill_load',
        input: { name: rest.trim() },
        preface: 'Loading the skill.',
      };
    case 'slow':
      return { kind: 'slow', text: rest };
    case 'slow-after':
      return planFor([{ role: 'user', content: [{ type: 'text', text: rest }] }], offered, system);
    case 'fail': {
      const errorClass = (ERROR_CLASSES as readonly string[]).includes(rest)
        ? (rest as ErrorClass)
        : 'server_error';
      return { kind: 'fail', errorClass, message: `scripted failure: ${errorClass}` };
    }
    default:
      return { kind: 'text', text: text.length > 0 ? `You said: ${text}` : 'Hello.' };
  }
}

/** Splits text into word-sized tokens that concatenate back to the text. */
function tokenize(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? [];
}

function signatureOf(text: string): string {
  let hash = 0;
  for (let i = 0; i < text.length; i += 1) hash = (hash * 31 + text.charCodeAt(i)) >>> 0;
  return `sig_${hash.toString(16)}`;
}
