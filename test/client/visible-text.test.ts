import { describe, expect, it } from 'vitest';
import { type Frame, initialState, reduce } from '../../src/client/reducer.js';
import { renderItem } from '../../src/client/render-text.js';
import { visibleJson, visibleText } from '../../src/client/visible-text.js';

// biome-ignore lint/suspicious/noControlCharactersInRegex: the test looks for raw control characters
const RAW = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

describe('visibleText: control characters shown, never acted on (issue 13, obs. 3)', () => {
  it('escapes ESC, CR, other C0, DEL, C1 and bidi controls; keeps LF, TAB and ordinary text', () => {
    expect(visibleText('a\u001b[2Jb')).toBe('a\\x1b[2Jb');
    expect(visibleText('over\rwritten')).toBe('over\\rwritten');
    expect(visibleText('\u0000\u0007\u0008\u000b\u000c\u001f')).toBe('\\x00\\x07\\x08\\x0b\\x0c\\x1f');
    expect(visibleText('del\u007f c1\u0085\u009b')).toBe('del\\x7f c1\\u0085\\u009b');
    expect(visibleText('\u202aA\u202bB\u202cC\u202dD\u202eE')).toBe(
      '\\u202aA\\u202bB\\u202cC\\u202dD\\u202eE',
    );
    expect(visibleText('\u2066\u2067\u2068\u2069\u200e\u200f')).toBe(
      '\\u2066\\u2067\\u2068\\u2069\\u200e\\u200f',
    );
    expect(visibleText('line\n\tindented — ünïcode 🙂')).toBe('line\n\tindented — ünïcode 🙂');
  });

  it('is exact per fragment: escaping deltas one by one equals escaping their whole', () => {
    const whole = 'x\u001b[31my\rz\u202e!';
    const pieces = ['x\u001b', '[31my', '\r', 'z\u202e', '!'];
    expect(pieces.map(visibleText).join('')).toBe(visibleText(whole));
  });

  it('visibleJson keeps the JSON value and writes DEL, C1 and bidi controls as \\u escapes', () => {
    const value = { text: 'a\u202eb\u0085c\u001bd' };
    const json = visibleJson(JSON.stringify(value));
    expect(RAW.test(json)).toBe(false);
    expect(JSON.parse(json)).toEqual(value);
  });

  it('render-text escapes what comes from events: text and thinking deltas, tool names, errors, summaries', () => {
    const evil = 'x\u001b[2Jy\rz\u202e';
    const event = (id: string, type: string, payload: Record<string, unknown>): Frame => ({
      type: 'event',
      event: { id, type, session_id: 'sess_1', turn_id: 'turn_1', payload, seq: null },
    });
    const frames: Frame[] = [
      event('evt_01', 'message.start', { message_id: 'msg_1', role: 'assistant', model: 'scripted:demo' }),
      event('evt_02', 'thinking.delta', { message_id: 'msg_1', content_block_index: 0, text: evil }),
      event('evt_03', 'text.delta', { message_id: 'msg_1', content_block_index: 1, text: evil }),
      event('evt_04', 'tool.called', { tool_use_id: 'tu_1', tool_name: `sh${evil}`, input_hash: 'h' }),
      event('evt_05', 'tool.confirmation_requested', {
        tool_use_id: 'tu_1',
        tool_name: `sh${evil}`,
        confirmation_request_id: 'conf_1',
        input_summary: 'run a shell command',
        command_summary: `echo ${evil}`,
      }),
      event('evt_06', 'tool.failed', {
        tool_use_id: 'tu_1',
        error_class: 'execution_error',
        error_message: evil,
        latency_ms: 1,
      }),
    ];
    let state = initialState;
    let out = '';
    for (const frame of frames) {
      state = reduce(state, frame);
      out += renderItem({ kind: 'frame', frame }, state, 'sess_1', { color: false });
    }
    expect(RAW.test(out)).toBe(false);
    expect(out).toContain('x\\x1b[2Jy\\rz\\u202e');
    expect(out).toContain(
      'waiting for approval: confirm shx\\x1b[2Jy\\rz\\u202e: echo x\\x1b[2Jy\\rz\\u202e',
    );
  });

  it('the reducer knows a call waits for approval, and that it runs once allowed', () => {
    const event = (id: string, type: string, payload: Record<string, unknown>): Frame => ({
      type: 'event',
      event: { id, type, session_id: 'sess_1', turn_id: 'turn_1', payload, seq: 1 },
    });
    let state = reduce(
      initialState,
      event('evt_1', 'tool.called', { tool_use_id: 'tu_1', tool_name: 'shell' }),
    );
    state = reduce(
      state,
      event('evt_2', 'tool.confirmation_requested', {
        tool_use_id: 'tu_1',
        tool_name: 'shell',
        confirmation_request_id: 'conf_1',
        input_summary: 'run a shell command',
        command_summary: 'echo hi',
      }),
    );
    expect(state.tools.tu_1!.status).toBe('waiting_for_approval');
    state = reduce(
      state,
      event('evt_3', 'tool.confirmation_resolved', {
        tool_use_id: 'tu_1',
        confirmation_request_id: 'conf_1',
        decision: 'allow',
      }),
    );
    expect(state.tools.tu_1!.status).toBe('running');
  });
});
