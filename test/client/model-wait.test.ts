import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { liveTextWriter } from '../../src/client/live-text.js';
import { type Frame, initialState, reduce } from '../../src/client/reducer.js';

/**
 * Issue 17 point 5: the wait for a model's first token (where the provider's retries happen) is shown,
 * counting up in place on a terminal and erased when the answer starts.
 */

const SESSION = 'sess_wait';
let seq = 0;
function event(type: string, payload: Record<string, unknown>): Frame {
  seq += 1;
  return {
    type: 'event',
    event: {
      id: `evt_${String(seq).padStart(26, '0')}`,
      timestamp: new Date().toISOString(),
      session_id: SESSION,
      turn_id: 'turn_1',
      parent_event_id: null,
      type,
      actor: 'agent',
      payload,
      sensitivity: 'private',
      seq: null,
    },
  } as Frame;
}

function writer(isTTY: boolean) {
  let raw = '';
  const write = liveTextWriter(SESSION, {
    out: { isTTY, columns: 80, write: (text: string) => (raw += text) },
    env: { NO_COLOR: '1' },
  });
  let state = initialState;
  return {
    feed(frame: Frame) {
      state = reduce(state, frame);
      write({ kind: 'frame', frame }, state);
    },
    raw: () => raw,
  };
}

/** Lines on a terminal after `raw`: "cursor up" + "erase line" replace the line above. */
function screen(raw: string): string[] {
  const lines = [''];
  // biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences
  for (const token of raw.split(/(\u001b\[\d*[A-Za-z]|\n)/)) {
    if (token === '\n') lines.push('');
    else if (token === '\u001b[1A') lines.pop();
    else if (token === '\u001b[2K') lines[lines.length - 1] = '';
    else if (!token.startsWith('\u001b[')) lines[lines.length - 1] += token;
  }
  return lines.filter((line) => line !== '');
}

describe('waiting for a model', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('on a terminal: counts up in place, and the answer takes its place', () => {
    const w = writer(true);
    w.feed(event('llm.call_started', { model: 'anthropic:claude-test', provider: 'anthropic' }));
    vi.advanceTimersByTime(1_500);
    expect(w.raw()).toBe(''); // a quick first token shows no wait
    vi.advanceTimersByTime(1_000);
    expect(screen(w.raw())).toEqual(['  waiting for anthropic:claude-test… 2 s (retries happen here)']);
    vi.advanceTimersByTime(3_000);
    expect(screen(w.raw())).toEqual(['  waiting for anthropic:claude-test… 5 s (retries happen here)']);
    w.feed(
      event('message.start', { message_id: 'msg_1', role: 'assistant', model: 'anthropic:claude-test' }),
    );
    w.feed(event('text.delta', { message_id: 'msg_1', content_block_index: 0, text: 'Hello' }));
    expect(screen(w.raw())).toEqual(['assistant: Hello']);
    vi.advanceTimersByTime(5_000);
    expect(screen(w.raw())).toEqual(['assistant: Hello']); // nothing counts up any more
  });

  it('in a pipe: the wait is written once and stays', () => {
    const w = writer(false);
    w.feed(event('llm.call_started', { model: 'openai:gpt-test', provider: 'openai' }));
    vi.advanceTimersByTime(10_000);
    w.feed(event('message.start', { message_id: 'msg_1', role: 'assistant', model: 'openai:gpt-test' }));
    w.feed(event('text.delta', { message_id: 'msg_1', content_block_index: 0, text: 'Hi' }));
    expect(w.raw()).toBe('  waiting for openai:gpt-test… 2 s (retries happen here)\nassistant: Hi');
  });
});
